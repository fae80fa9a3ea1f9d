"""Leases of dead processes (issue 12, item 3): a crashed script can be run again at once.

A SQLite store records, with each lease, who holds it: the host and the process. A runtime
that finds a session leased by a process of its own host that no longer exists takes it at
once, rather than wait ``lease_seconds`` for the lease to expire; a live process's lease is
never taken, nor one of another host (or of a host that cannot be told apart).

The processes here are real: children that run a runtime on a real file, on the real clock,
are killed with SIGKILL. "At once" is what the file shows: the dead process's lease was
still unexpired when it was taken. Deadlines only catch hangs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

from agentlib import SQLiteStore, Store
from agentlib._store._base import SessionRow
from agentlib._store._holder import Holder, gone, host_identity, this_process

LINUX = sys.platform.startswith("linux")

#: The longest a child may take to say what the test waits for: only a hang reaches it.
CHILD_TIMEOUT = 60.0


@contextlib.contextmanager
def sleeping_child() -> Iterator[subprocess.Popen[bytes]]:
    """A live child process, killed and reaped after the block."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    try:
        yield child
    finally:
        child.kill()
        child.wait(CHILD_TIMEOUT)


@asynccontextmanager
async def opened(store: Store) -> AsyncIterator[Store]:
    """The store, open in a nursery for the block; closed after."""
    async with trio.open_nursery() as nursery:
        await store.open(nursery.start_soon)
        try:
            yield store
        finally:
            await store.aclose()


def holder_of(child: subprocess.Popen[bytes]) -> Holder:
    """The holder a lease of ``child`` records, as ``this_process()`` there would give it."""
    started = None
    if LINUX:
        stat = Path(f"/proc/{child.pid}/stat").read_text()
        started = int(stat[stat.rindex(")") + 2 :].split()[19])
    return Holder(host=host_identity(), pid=child.pid, started=started)


# --- who holds a lease ------------------------------------------------------------------------


def test_this_process_is_not_gone() -> None:
    me = this_process()
    assert me.pid == os.getpid()
    assert me.host == host_identity()
    assert not gone(me)


@pytest.mark.skipif(not LINUX, reason="the host identity holds the boot id on Linux only")
def test_the_host_identity_holds_the_boot_and_the_pid_namespace() -> None:
    """Two containers sharing a hostname and a kernel have one boot id, but each its own pid
    namespace: their identities differ."""
    identity = host_identity()
    assert identity is not None
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert boot in identity
    assert os.readlink("/proc/self/ns/pid") in identity
    assert this_process().started is not None


def test_a_live_process_is_not_gone() -> None:
    with sleeping_child() as child:
        assert not gone(holder_of(child))


def test_a_process_that_ended_is_gone() -> None:
    with sleeping_child() as child:
        holder = holder_of(child)
    assert gone(holder)


@pytest.mark.skipif(not LINUX, reason="a zombie is told from /proc on Linux only")
def test_a_killed_process_its_parent_has_not_reaped_yet_is_gone() -> None:
    with sleeping_child() as child:
        holder = holder_of(child)
        os.kill(child.pid, signal.SIGKILL)
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped: a zombie
        assert Path(f"/proc/{child.pid}").exists()
        assert gone(holder)


@pytest.mark.skipif(not LINUX, reason="start times are read on Linux only")
def test_a_pid_reused_by_another_process_is_gone() -> None:
    with sleeping_child() as child:
        holder = holder_of(child)
        assert holder.started is not None
        assert gone(attrs.evolve(holder, started=holder.started - 1))


def test_a_process_of_another_host_is_never_gone() -> None:
    with sleeping_child() as child:
        holder = holder_of(child)
    assert gone(holder)
    assert not gone(attrs.evolve(holder, host=f"{host_identity()} elsewhere"))
    assert not gone(attrs.evolve(holder, host=None))  # a host that cannot be told apart


def test_this_process_under_another_start_time_is_gone() -> None:
    """This process has the pid a lease records, but started after it: the holder was an
    earlier process that had the pid (a container's first process, say)."""
    me = this_process()
    if me.started is None:
        pytest.skip("start times are read on Linux only")
    assert gone(attrs.evolve(me, started=me.started - 1))


# --- the file records who holds each lease ----------------------------------------------------


def lease_of(path: Path, session_id: str) -> tuple[str | None, float | None, Holder | None]:
    """(owner, until, holder) of the session's lease, as the file holds it."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        owner, until, host, pid, started = db.execute(
            "SELECT lease_owner, lease_until, lease_host, lease_pid, lease_started FROM sessions"
            " WHERE session_id = ?",
            (session_id,),
        ).fetchone()
    holder = None if pid is None else Holder(host=host, pid=pid, started=started)
    return owner, until, holder


async def test_each_lease_records_its_holder_and_a_release_forgets_it(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    made, taken = "made-leased", "acquired"
    me = this_process()
    async with opened(SQLiteStore(str(path))) as store:
        store.write(SessionRow(made, "agent", lease=("A", 30)))
        store.write(SessionRow(taken, "agent"))
        await store.flush()
        assert lease_of(path, made)[::2] == ("A", me)
        assert lease_of(path, taken) == (None, None, None)
        await store.acquire([taken], "A", 30)
        assert lease_of(path, taken)[::2] == ("A", me)
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute("UPDATE sessions SET lease_host = NULL, lease_pid = NULL")
        assert await store.renew([made, taken], "A", 30) == []
        assert lease_of(path, made)[::2] == ("A", me)
        await store.release([made, taken], "A")
        assert lease_of(path, made) == lease_of(path, taken) == (None, None, None)
