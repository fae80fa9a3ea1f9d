"""Who holds a lease: a process on a host, recorded with the lease so that a runtime on the
same host can tell that the holder died (a crash, SIGKILL) and take its sessions at once,
rather than wait for the lease to expire.

A process is judged only on its own host, and only when that host can be told apart from
any other sharing its name: on Linux, by its boot (the kernel's boot id) and its pid
namespace, so that two containers with one hostname and one kernel never judge each other's
pids. A process is its pid plus, where the platform gives it, its start time, so that a pid
reused by a later process is not taken for the holder. Whenever in doubt, the holder is
alive: its lease is then left to expire.
"""

from __future__ import annotations

import errno
import os
import socket
import sys

import attrs

__all__ = ["Holder", "gone", "this_process"]


@attrs.frozen(kw_only=True)
class Holder:
    """A process holding leases. A store records, with each lease it takes, the process
    taking it (:func:`this_process`); another runtime may then take at once a lease whose
    holder is :func:`gone`, rather than wait for it to expire.

    Attributes:
        host: Its host's identity; None where this platform cannot give one that tells
            hosts apart (then its leases are never judged, only left to expire).
        pid: Its process id.
        started: When it started (Linux: clock ticks after boot), where known.
    """

    host: str | None
    pid: int
    started: int | None = None


def this_process() -> Holder:
    """The process calling it (read once per process: a fork reads its own)."""
    pid = os.getpid()
    known = _THIS.get(pid)
    if known is None:
        known = _THIS[pid] = Holder(host=host_identity(), pid=pid, started=_started(pid))
    return known


_THIS: dict[int, Holder] = {}


def gone(holder: Holder) -> bool:
    """Whether ``holder`` has surely ended: it ran on this very host, and no process has its
    pid now, or the one that has is another (it started at another time), or it has ended
    and only waits for its parent to reap it. When in doubt (another host, a platform that
    cannot tell), it has not."""
    if holder.host is None or holder.host != host_identity() or holder.pid <= 0:
        return False  # kill(0) and kill(-1) reach groups of processes, not one
    stat = _stat(holder.pid)
    if stat is None:  # not on Linux, or /proc does not show it (another user's, hidden)
        return holder.pid != os.getpid() and _no_such_process(holder.pid)
    state, started = stat
    if state in ("Z", "X"):
        # Ended, and only waits to be reaped; unless it is a main thread that ended while
        # other threads of the process still run (its state reads "Z" all the same).
        return _threads(holder.pid) <= 1
    return holder.started is not None and started != holder.started


def host_identity() -> str | None:
    """This host, told apart from any other sharing its name; None where it cannot be."""
    name = socket.gethostname()
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/sys/kernel/random/boot_id") as file:
                boot = file.read().strip()
            namespace = os.readlink("/proc/self/ns/pid")
            mounted_here = os.readlink("/proc/self") == str(os.getpid())
        except OSError:
            return None  # /proc hidden: the pids seen here may not be the holder's
        if not mounted_here:
            return None  # a /proc of another pid namespace shows other processes
        return f"{name} boot {boot} {namespace}"
    if os.name == "posix":  # a WAL database is shared on one host only: its name tells it
        return name
    return None  # elsewhere (Windows) no process is judged: os.kill(pid, 0) would end it


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of a process, from Linux's ``/proc/<pid>/stat``; None if that
    does not show it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            text = file.read().decode("ascii", "replace")
        # The command name, in parentheses, may hold spaces and parentheses: the fields
        # follow the last ")". The state is field 3, the start time field 22.
        fields = text[text.rindex(")") + 2 :].split()
        return fields[0], int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _threads(pid: int) -> int:
    """How many threads the process ``pid`` has (Linux), as ``/proc/<pid>/task`` lists them;
    a great many if that cannot be read (then it counts as alive)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 1 << 30


def _started(pid: int) -> int | None:
    stat = _stat(pid)
    return None if stat is None else stat[1]


def _no_such_process(pid: int) -> bool:
    """Whether no process has ``pid``, as ``kill(pid, 0)`` tells (POSIX only)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError as error:  # EPERM: it exists, under another user
        return error.errno == errno.ESRCH
    return False
