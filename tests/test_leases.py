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
import json
import os
import selectors
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from _lease_worker import TOO_BIG, approver
from _support import fill_the_disk

import agentlib
from agentlib import (
    AllowApproval,
    Blocked,
    Completed,
    LeaseLost,
    LeaseRefused,
    MemoryStore,
    SessionBusyError,
    SQLiteStore,
    Store,
    StoreError,
)
from agentlib._store._base import SessionRow
from agentlib._store._holder import Holder, gone, host_identity, this_process

LINUX = sys.platform.startswith("linux")

WORKER = Path(__file__).with_name("_lease_worker.py")

#: The longest a child, or a wait here, may take: only a hang reaches it.
CHILD_TIMEOUT = 60.0
WAIT = 60.0


class Child:
    """A worker process (``_lease_worker.py``), whose JSON lines are read with a deadline."""

    def __init__(self, tmp_path: Path, scenario: str, *args: str, **env: str) -> None:
        self.path = tmp_path / "s.db"
        self.runs = tmp_path / "runs.txt"
        self.runs.touch()
        self._errors = tmp_path / f"{scenario}.err"
        with self._errors.open("wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, str(WORKER), scenario, str(self.path), str(self.runs), *args],
                stdout=subprocess.PIPE,
                stderr=stderr,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env},
            )
        self.pid = self.process.pid
        self._buffer = b""

    def line(self) -> Any:
        """The next line the child prints, as JSON."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + CHILD_TIMEOUT
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                ready = selector.select(max(0.0, deadline - time.monotonic()))
                assert ready, f"the child hung: {self.stderr()}"
                chunk = os.read(fd, 65536)
                assert chunk, f"the child ended: {self.stderr()}"
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def stderr(self) -> str:
        return self._errors.read_text()

    def kill(self) -> None:
        """SIGKILL it (no cleanup: its leases stay in the file), and reap it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(CHILD_TIMEOUT)
        assert self.process.stdout is not None
        self.process.stdout.close()


@contextlib.contextmanager
def child(tmp_path: Path, scenario: str, *args: str, **env: str) -> Iterator[Child]:
    """A worker, killed after the block if still alive."""
    worker = Child(tmp_path, scenario, *args, **env)
    try:
        yield worker
    finally:
        worker.kill()


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


_MAIN_THREAD_ENDS = """
import ctypes, threading, time

def keep_running():
    # Wait until the main thread has ended (its state then reads "Z"), then say so.
    while open("/proc/self/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.001)
    print("main thread ended", flush=True)
    time.sleep(600)

threading.Thread(target=keep_running).start()
ctypes.CDLL(None).pthread_exit(None)  # the main thread ends; the process runs on
"""


@pytest.mark.skipif(not LINUX, reason="a zombie is told from /proc on Linux only")
def test_a_process_whose_main_thread_ended_while_another_runs_is_not_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", _MAIN_THREAD_ENDS], stdout=subprocess.PIPE)
    try:
        holder = holder_of(child)
        assert child.stdout is not None
        assert child.stdout.readline() == b"main thread ended\n"
        assert not gone(holder)
    finally:
        child.kill()
        child.wait(CHILD_TIMEOUT)
        assert child.stdout is not None
        child.stdout.close()


@pytest.mark.skipif(not LINUX, reason="start times are read on Linux only")
def test_a_pid_reused_by_another_process_is_gone() -> None:
    with sleeping_child() as child:
        holder = holder_of(child)
        assert holder.started is not None
        assert gone(attrs.evolve(holder, started=holder.started - 1))


def test_a_pid_naming_a_group_of_processes_is_never_gone() -> None:
    for pid in (0, -1):
        assert not gone(Holder(host=host_identity(), pid=pid))


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


# --- a crashed process, and a live one --------------------------------------------------------


def store_url(path: Path) -> str:
    return f"sqlite:///{path}"


async def test_a_session_whose_process_was_killed_is_taken_at_once(tmp_path: Path) -> None:
    """A script blocked on an approval is killed; run again (a runtime with the default
    ``lease_seconds``), it gets the session while the dead process's lease still runs,
    and the approval resumes the turn."""
    with child(tmp_path, "blocked") as worker:
        ids = await trio.to_thread.run_sync(worker.line)
        owner, until, holder = lease_of(worker.path, ids["session"])
        assert holder is not None
        assert holder.pid == worker.pid
    assert owner is not None
    assert until is not None

    async with agentlib.open_runtime(store_url(worker.path)) as runtime:
        turn = approver(str(worker.runs)).session(ids["session"]).turn(ids["turn"])
        assert isinstance(await turn.get(), Blocked)
        taken_at = time.time()
        assert taken_at < until, "the lease was taken once it expired, not at once"
        assert lease_of(worker.path, ids["session"])[::2] == (runtime.owner, this_process())
        await turn.answer(ids["callback"], AllowApproval())
        with trio.fail_after(WAIT):
            record = await turn.result()
    assert isinstance(record, Completed), record
    assert record.text == "done: deleted /tmp/x"
    assert worker.runs.read_text() == "/tmp/x\n"


async def test_a_session_a_live_process_holds_is_never_taken(tmp_path: Path) -> None:
    with child(tmp_path, "blocked") as worker:
        ids = await trio.to_thread.run_sync(worker.line)
        held = lease_of(worker.path, ids["session"])
        async with agentlib.open_runtime(store_url(worker.path)):
            turn = approver(str(worker.runs)).session(ids["session"]).turn(ids["turn"])
            with pytest.raises(SessionBusyError):
                await turn.get()
            with pytest.raises(SessionBusyError):
                await turn.answer(ids["callback"], AllowApproval())
        assert lease_of(worker.path, ids["session"])[::2] == held[::2]
    assert worker.runs.read_text() == ""


async def test_a_second_runtime_of_this_live_process_never_takes_the_first_ones_session(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    runs = tmp_path / "runs.txt"
    async with agentlib.open_runtime(store_url(path)):
        session = await approver(str(runs)).start_session()
        blocked = await session.run("clean up")
        async with agentlib.open_runtime(store_url(path)):
            with pytest.raises(SessionBusyError):
                await approver(str(runs)).session(session.id).turn(blocked.turn_id).get()


async def test_a_refused_lease_names_the_host_and_the_process_that_hold_the_session(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    runs = tmp_path / "runs.txt"
    async with agentlib.open_runtime(store_url(path)) as first:
        session = await approver(str(runs)).start_session()
        blocked = await session.run("clean up")
        assert first.owner.startswith(f"{socket.gethostname()}:{os.getpid()}:")
        async with agentlib.open_runtime(store_url(path)):
            with pytest.raises(LeaseRefused) as refused:
                await approver(str(runs)).session(session.id).turn(blocked.turn_id).get()
    error = refused.value
    assert (error.host, error.pid, error.owner) == (socket.gethostname(), os.getpid(), first.owner)
    until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(error.until))
    assert str(error).startswith(
        f"session {session.id} is held by another runtime (host {socket.gethostname()}, "
        f"pid {os.getpid()}) until {until}, unless it renews its lease"
    )


def test_a_refused_lease_of_an_owner_named_by_an_older_runtime_names_it() -> None:
    """Older runtimes named themselves by a bare id: the message shows it."""
    error = LeaseRefused("s-1", "0123abcd", 0.0)
    assert (error.host, error.pid) == (None, None)
    assert str(error).startswith(
        "session s-1 is held by another runtime (runtime 0123abcd) until 1970-01-01 00:00:00 UTC"
    )


async def test_a_runtime_whose_session_was_taken_over_lets_it_go_and_serves_the_others(
    tmp_path: Path,
) -> None:
    """Runtime 2 takes over one of runtime 1's sessions (runtime 1 stopped renewing, as far
    as runtime 2's clock says). A change through runtime 1 to that session is refused and
    raises LeaseLost; runtime 1 then lets the session go, and goes on with every other:
    it starts sessions and runs their turns, and answers its other blocked turn."""
    path = tmp_path / "s.db"
    runs = tmp_path / "runs.txt"
    runs.touch()
    agent = approver(str(runs))
    later = SQLiteStore(str(path), clock=lambda: time.time() + 3600)
    async with agentlib.open_runtime(store_url(path), lease_seconds=30) as stalled:
        taken = await agent.start_session()
        blocked = await taken.run("clean up")
        kept = await agent.start_session()
        kept_blocked = await kept.run("clean up")
        assert isinstance(blocked, Blocked)
        assert isinstance(kept_blocked, Blocked)
        async with agentlib.open_runtime(later, lease_seconds=30):
            elsewhere = approver(str(runs)).session(taken.id).turn(blocked.turn_id)
            assert await elsewhere.get() == blocked  # taken over
            waited: list[BaseException] = []

            async def wait_here() -> None:
                try:
                    await taken.turn(blocked.turn_id).result(after=blocked)
                except LeaseLost as error:
                    waited.append(error)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_here)
                await trio.testing.wait_all_tasks_blocked()
                with pytest.raises(LeaseLost, match="is now run by another runtime") as lost:
                    await taken.turn(blocked.turn_id).answer(
                        blocked.callbacks[0].id, AllowApproval()
                    )
            assert "this runtime let it go" in str(lost.value)
            assert len(waited) == 1  # the wait on it here was told
            assert "is now run by another runtime" in str(waited[0])
            assert runs.read_text() == ""
            assert taken.id not in stalled._sessions
            with trio.fail_after(WAIT):  # its state is forgotten once its turn has left
                while taken.id in stalled._states:
                    await trio.sleep(0.01)
            assert stalled.health().writable

            again = await agent.start_session()
            assert isinstance(await again.run("clean up"), Blocked)
            turn = kept.turn(kept_blocked.turn_id)
            await turn.answer(kept_blocked.callbacks[0].id, AllowApproval())
            with trio.fail_after(WAIT):
                record = await turn.result()
            assert isinstance(record, Completed), record
            with pytest.raises(SessionBusyError):  # held by runtime 2 now
                await taken.turn(blocked.turn_id).get()

            await elsewhere.answer(blocked.callbacks[0].id, AllowApproval())
            with trio.fail_after(WAIT):
                final = await elsewhere.result()
            assert isinstance(final, Completed), final
    assert runs.read_text() == "/tmp/x\n/tmp/x\n"


def test_a_blocking_script_killed_while_its_turn_waits_resumes_it_when_run_again(
    tmp_path: Path,
) -> None:
    """agentlib_sync with AGENTLIB_STORE: the script is killed while its turn waits for an
    approval; run again, it answers at once (the dead run's lease still runs) and the turn
    completes."""
    store = store_url(tmp_path / "s.db")
    with child(tmp_path, "sync_blocked", AGENTLIB_STORE=store) as first:
        ids = first.line()
    _, until, holder = lease_of(first.path, ids["session"])
    assert holder is not None
    assert holder.pid == first.pid
    assert until is not None

    with child(tmp_path, "sync_answer", json.dumps(ids), AGENTLIB_STORE=store) as again:
        done = again.line()
    assert done["found"] == "Blocked"
    assert done["free_at"] < until, "the lease was taken once it expired, not at once"
    assert done["record"]["type"] == "completed"
    assert done["record"]["text"] == "done: deleted /tmp/x"
    assert first.runs.read_text() == "/tmp/x\n"


# --- a store that fails lets its sessions go ----------------------------------------------


async def start_a_turn_the_disk_has_no_room_for(agent: agentlib.Agent) -> None:
    session = await agent.start_session()
    await session.start_turn(TOO_BIG)


async def test_a_store_that_cannot_commit_lets_its_sessions_go_at_once(tmp_path: Path) -> None:
    """The disk fills under a live runtime: its store writes nothing more, and lets its
    sessions go, so that another runtime (here in the same, live, process) takes them at
    once and goes on with their blocked turns."""
    path, runs = tmp_path / "s.db", str(tmp_path / "runs.txt")
    async with agentlib.open_runtime(store_url(path)):
        other = await approver(runs).start_session()
    store = SQLiteStore(str(path))
    async with agentlib.open_runtime(store):
        session = await approver(runs).start_session()
        blocked = await session.run("clean up")
        assert isinstance(blocked, Blocked)
        fill_the_disk(store)
        with pytest.raises(StoreError, match="full"):
            await start_a_turn_the_disk_has_no_room_for(approver(runs))
        assert lease_of(path, session.id) == (None, None, None)

        async with agentlib.open_runtime(store_url(path)):
            turn = approver(runs).session(session.id).turn(blocked.turn_id)
            assert await turn.get() == blocked
            await turn.answer(blocked.callbacks[0].id, AllowApproval())
            with trio.fail_after(WAIT):
                record = await turn.result()
        assert isinstance(record, Completed), record
        # The failed runtime renews nothing: the session stays the one that took it.
        with pytest.raises(StoreError, match="full"):
            await store.renew([session.id], "anyone", 30)
        # Nor does it take a lease on another session it would read back.
        with pytest.raises(StoreError, match="full"):
            await store.acquire([other.id], "anyone", 30)
        assert lease_of(path, other.id) == (None, None, None)


async def test_a_live_process_whose_disk_filled_lets_its_sessions_go(tmp_path: Path) -> None:
    with child(tmp_path, "blocked_disk_full") as worker:
        ids = await trio.to_thread.run_sync(worker.line)
        failed = await trio.to_thread.run_sync(worker.line)
        assert failed["failed"] is not None
        assert "full" in failed["failed"]
        assert lease_of(worker.path, ids["session"]) == (None, None, None)
        async with agentlib.open_runtime(store_url(worker.path)):  # the worker still lives
            turn = approver(str(worker.runs)).session(ids["session"]).turn(ids["turn"])
            assert isinstance(await turn.get(), Blocked)
            await turn.answer(ids["callback"], AllowApproval())
            with trio.fail_after(WAIT):
                record = await turn.result()
        assert isinstance(record, Completed), record
    assert worker.runs.read_text() == "/tmp/x\n"


async def test_a_store_refused_a_write_keeps_its_other_sessions_and_goes_on(
    tmp_path: Path,
) -> None:
    """A runtime stalled past its lease, and another took one of its sessions over: its
    store refuses the write to that session, and says so (``taken_over``); it keeps its
    other sessions, and goes on writing to them."""
    path = tmp_path / "s.db"
    taken, mine = "taken-over", "still-mine"
    stalled = SQLiteStore(str(path))
    later = SQLiteStore(str(path), clock=lambda: time.time() + 3600)
    async with opened(stalled), opened(later):
        stalled.write(SessionRow(taken, "agent", lease=("A", 30)))
        stalled.write(SessionRow(mine, "agent", lease=("A", 30)))
        await stalled.flush()
        await later.acquire([taken], "B", 30)  # A's lease expired an hour ago, says its clock
        stalled.write(SessionRow(taken, "agent", terminated=True))
        stalled.write(SessionRow(mine, "agent", terminated=True))
        await stalled.flush()
        (refused,) = stalled.taken_over()
        assert isinstance(refused, LeaseLost)
        assert (refused.session_id, refused.owner) == (taken, "B")
        stalled.check()
        assert lease_of(path, taken)[0] == "B"
        assert lease_of(path, mine)[0] == "A"
        stored_taken, stored_mine = await later.load(taken), await later.load(mine)
        assert stored_taken is not None
        assert stored_mine is not None
        assert not stored_taken.row.terminated  # the write refused was not made
        assert stored_mine.row.terminated


class FailingFlush(MemoryStore):
    """A shared memory store whose flush fails once ``failing`` is set."""

    failing = False

    async def flush(self) -> None:
        if self.failing:
            raise StoreError("the store failed")


async def test_a_runtime_closing_on_a_failed_store_still_releases_its_sessions() -> None:
    store = FailingFlush()
    async with agentlib.open_runtime(store):
        session = await approver(os.devnull).start_session()
        blocked = await session.run("clean up")
        store.failing = True
    store.failing = False
    async with agentlib.open_runtime(store):  # in the same live process
        turn = approver(os.devnull).session(session.id).turn(blocked.turn_id)
        assert await turn.get() == blocked
