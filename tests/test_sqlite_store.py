"""What only the SQLite store promises, beyond the store contract's suite (which
``test_store_contract.py`` runs against it): its file's layout and schema versions, WAL mode,
and what its errors name.

A full disk, through the runtime: a call whose writes cannot be committed, and the result of
a turn whose next writes cannot be, raise a StoreError naming the store; leaving the
``open_runtime`` block then raises at most that StoreError, never an exception group.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from _support import HOLD, WAIT, Gate, fill_the_disk, past_refused_writes, replies_unkeepable_text

import agentlib

# Before the suite's own module, whose helpers this uses: it has pytest rewrite its asserts.
import agentlib.testing.store_contract
from agentlib import (
    Agent,
    Completed,
    LeaseLost,
    LeaseRefused,
    ScriptedModel,
    SdkError,
    SQLiteStore,
    Store,
    StoreError,
    StoreSchemaError,
)
from agentlib._data._convert import unstructure
from agentlib._store._base import (
    EntryRow,
    EventRow,
    Op,
    PruneRow,
    SessionRow,
    TurnRow,
)
from agentlib._store._sqlite import SCHEMA_VERSION
from agentlib.testing._store_contract import (
    ManualClock,
    events_of,
    events_of_a_turn,
    load,
    new_id,
    opened,
    user_message,
    write_all,
)

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "s.db"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


async def test_sqlite_store_takes_a_path_too(db_path: Path) -> None:
    async with opened(SQLiteStore(db_path)) as store:  # type: ignore[arg-type]
        store.write(SessionRow("s", "agent"))
        await store.flush()
        assert (await load(store, "s")).row == SessionRow("s", "agent")
    assert db_path.exists()


async def test_sqlite_lease_lost_names_the_file_and_the_session(
    db_path: Path, clock: ManualClock
) -> None:
    session = new_id()
    mine = SQLiteStore(str(db_path), clock=clock)
    theirs = SQLiteStore(str(db_path), clock=clock)
    async with opened(mine), opened(theirs):
        mine.write(SessionRow(session, "agent", lease=("A", 30)))
        await mine.flush()
        clock.now += 31
        await theirs.acquire([session], "B", 30)
        mine.write(SessionRow(session, "agent", terminated=True))
        await mine.flush()
        (refused,) = mine.taken_over()
        assert isinstance(refused, LeaseLost)
        assert "now run by another runtime" in str(refused)
        assert str(db_path) in str(refused)
        assert session in str(refused)
        assert refused.store == str(db_path)


async def test_sqlite_records_a_sessions_last_event_and_entry_as_it_writes_them(
    db_path: Path,
) -> None:
    """Each session's row holds the seq of its last event and the index of its last history
    entry, written in the commit that writes them: a read can tell rows that went missing."""
    one, two, turn = new_id(), new_id(), new_id()
    events = events_of_a_turn(one, turn)
    async with opened(SQLiteStore(str(db_path))) as store:
        store.write(SessionRow(one, "agent"))
        store.write(SessionRow(two, "agent"))
        await store.flush()
        assert recorded(db_path, one) == (1, 0, -1)
        for seq, event in enumerate(events[:3], start=1):
            store.write(EventRow(one, seq, event))
        store.write(EntryRow(one, 0, user_message(turn, "hello")))
        store.write(EntryRow(two, 0, user_message(turn, "hi")))
        await store.flush()
        assert recorded(db_path, one) == (1, 3, 0)
        assert recorded(db_path, two) == (1, 0, 0)
        store.write(EntryRow(one, 1, user_message(turn, "again")))
        for seq, event in enumerate(events[3:], start=4):
            store.write(EventRow(one, seq, event))
        store.write(PruneRow(one, 6))
        await store.flush()
        assert recorded(db_path, one) == (6, 7, 1)


async def refused_open(store: Store) -> None:
    """Open ``store``, which must refuse: raises its error (not a group holding it)."""
    error: StoreSchemaError | None = None
    async with trio.open_nursery() as nursery:
        try:
            await store.open(nursery.start_soon)
        except StoreSchemaError as refused:
            error = refused
        else:  # pragma: no cover
            await store.aclose()
    if error is None:  # pragma: no cover
        raise AssertionError("the store opened")
    raise error


def _user_version(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute("PRAGMA user_version").fetchone()[0])


async def test_sqlite_file_is_versioned_and_in_wal_mode(db_path: Path) -> None:
    async with opened(SQLiteStore(str(db_path))):
        db = sqlite3.connect(db_path)
        try:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            db.close()
    assert _user_version(db_path) == SCHEMA_VERSION == 3


async def test_sqlite_newer_schema_is_refused(db_path: Path) -> None:
    async with opened(SQLiteStore(str(db_path))) as store:
        store.write(SessionRow("s", "agent"))
    db = sqlite3.connect(db_path)
    db.execute("PRAGMA user_version = 4")
    db.commit()
    db.close()
    with pytest.raises(StoreSchemaError, match="newer agentlib") as error:
        await refused_open(SQLiteStore(str(db_path)))
    assert isinstance(error.value, SdkError)
    assert str(db_path) in str(error.value)
    assert "version 4" in str(error.value)
    assert _user_version(db_path) == 4  # the file is left as it was


#: The sessions table of versions 1 and 2.
_SESSIONS_2 = """
CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    parent_id TEXT,
    parent_turn_id TEXT,
    idempotency_key TEXT UNIQUE,
    inputs TEXT NOT NULL,
    terminated INTEGER NOT NULL DEFAULT 0,
    first_seq INTEGER NOT NULL DEFAULT 1,
    lease_owner TEXT,
    lease_until REAL
)"""


def back_to_version_2(path: Path) -> None:
    """Make the file as version 2 left it: its sessions table had no last seq, no last
    idx, and no lease holder."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("ALTER TABLE sessions RENAME TO sessions_3")
        db.execute(_SESSIONS_2)
        db.execute(
            "INSERT INTO sessions SELECT session_id, agent, parent_id, parent_turn_id,"
            " idempotency_key, inputs, terminated, first_seq, lease_owner, lease_until"
            " FROM sessions_3"
        )
        db.execute("DROP TABLE sessions_3")
        db.execute("CREATE INDEX sessions_by_parent ON sessions (parent_id)")
        db.execute("PRAGMA user_version = 2")
        db.commit()


def recorded(path: Path, session_id: str) -> tuple[int, int, int]:
    """(first_seq, last_seq, last_idx) of the session's row in the file."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        row = db.execute(
            "SELECT first_seq, last_seq, last_idx FROM sessions WHERE session_id = ?",
            (session_id,),
        ).fetchone()
    return row[0], row[1], row[2]


async def test_sqlite_schema_2_is_brought_up_to_date(db_path: Path, clock: ManualClock) -> None:
    """Version 3 records each session's last event and history entry, and who holds its
    lease: opening a file of version 2 records them from the rows it holds, and the
    sessions, their leases and their pruned logs read back the same."""
    whole, pruned, empty = new_id(), new_id(), new_id()
    turn = new_id()
    events = events_of_a_turn(whole, turn)
    entries = [user_message(turn, "hello"), user_message(turn, "again")]
    ops: list[Op] = [
        SessionRow(whole, "agent", lease=("A", 30)),
        TurnRow(whole, turn, 1),
        *(EventRow(whole, seq, event) for seq, event in enumerate(events, start=1)),
        *(EntryRow(whole, index, entry) for index, entry in enumerate(entries)),
        SessionRow(pruned, "agent"),
        *(
            EventRow(pruned, seq, event)
            for seq, event in enumerate(events_of_a_turn(pruned, turn), start=1)
        ),
        PruneRow(pruned, 8),  # every event pruned: the next is 8
        SessionRow(empty, "agent"),
    ]
    async with opened(SQLiteStore(str(db_path), clock=clock)) as store:
        write_all(store, ops)
        await store.flush()
        before = [await load(store, session) for session in (whole, pruned, empty)]
    back_to_version_2(db_path)

    store = SQLiteStore(str(db_path), clock=clock)
    async with opened(store):
        assert [await load(store, session) for session in (whole, pruned, empty)] == before
        assert await events_of(store, before[0]) == events
        with pytest.raises(LeaseRefused):  # A's lease holds
            await store.acquire([whole], "B", 30)
    assert _user_version(db_path) == 3
    assert recorded(db_path, whole) == (1, 7, 1)
    assert recorded(db_path, pruned) == (8, 7, -1)
    assert recorded(db_path, empty) == (1, 0, -1)


async def test_sqlite_schema_1_is_brought_up_to_date(db_path: Path) -> None:
    """Version 1 kept each event whole as JSON in one column: opening such a file lays its
    events out anew, and they read back the same."""
    session = new_id()
    events = events_of_a_turn(session, new_id())
    async with opened(SQLiteStore(str(db_path))) as store:
        store.write(SessionRow(session, "agent"))
        for seq, event in enumerate(events, start=1):
            store.write(EventRow(session, seq, event))
    back_to_version_2(db_path)
    with contextlib.closing(sqlite3.connect(db_path)) as db:  # back to version 1
        db.execute("DROP TABLE events")
        db.execute(
            "CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL,"
            " data TEXT NOT NULL, PRIMARY KEY (session_id, seq)) WITHOUT ROWID"
        )
        db.executemany(
            "INSERT INTO events VALUES (?, ?, ?)",
            [
                (session, seq, json.dumps(unstructure(event)))
                for seq, event in enumerate(events, start=1)
            ],
        )
        db.execute("PRAGMA user_version = 1")
        db.commit()
    store = SQLiteStore(str(db_path))
    async with opened(store):
        assert await events_of(store, await load(store, session)) == events
    assert _user_version(db_path) == 3
    assert recorded(db_path, session) == (1, 7, -1)


async def test_sqlite_other_database_is_refused(db_path: Path) -> None:
    db = sqlite3.connect(db_path)
    db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    db.execute("INSERT INTO invoices (total) VALUES (12.5)")
    db.commit()
    db.close()
    with pytest.raises(StoreSchemaError, match="not an agentlib store"):
        await refused_open(SQLiteStore(str(db_path)))
    # Nothing was added to it.
    db = sqlite3.connect(db_path)
    try:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master")]
        assert tables == ["invoices"]
        assert db.execute("SELECT total FROM invoices").fetchall() == [(12.5,)]
    finally:
        db.close()
    assert _user_version(db_path) == 0


#: A message the full disk has no room for: starting a turn with it cannot be committed.
TOO_BIG = "x" * 50_000


@asynccontextmanager
async def runtime_whose_close_may_fail(store: Store) -> AsyncIterator[None]:
    """``open_runtime(store)``, where only the block's own error counts: a StoreError (alone
    or in groups) that closing the runtime raises is ignored here, as
    ``test_a_full_disk_leaves_the_block_without_an_exception_group`` is about it."""
    failure: BaseException | None = None
    try:
        async with agentlib.open_runtime(store):
            try:
                yield
            except BaseException as error:
                failure = error
                raise
    except StoreError:
        pass
    except BaseExceptionGroup as group:
        _, rest = group.split(StoreError)
        if rest is not None:
            raise
    if failure is not None:
        raise failure


async def test_a_full_disk_fails_a_call_with_a_store_error(tmp_path: Path) -> None:
    """A call whose writes the full disk cannot commit raises StoreError (an SdkError) naming the
    store, not a raw sqlite3 error; the runtime goes on reading."""
    path = tmp_path / "s.db"
    store = SQLiteStore(str(path))
    agent = Agent("a", model=ScriptedModel(["small", "big"]))
    async with runtime_whose_close_may_fail(store):
        session = await agent.start_session()
        done = await session.run("hi", timeout=WAIT)
        assert isinstance(done, Completed)
        fill_the_disk(store)
        with pytest.raises(StoreError) as error, trio.fail_after(WAIT):
            await session.run(TOO_BIG)
        assert isinstance(error.value, agentlib.SdkError)
        assert str(path) in str(error.value)
        assert "full" in str(error.value)
        assert isinstance(error.value.__cause__, sqlite3.Error)
        assert await session.turn(done.turn_id).get() == done


async def test_a_full_disk_while_a_turn_runs_fails_its_result(tmp_path: Path) -> None:
    """The disk fills while a started (acknowledged) turn runs a tool: what it writes next cannot be
    committed. ``turn.result()`` raises StoreError, rather than wait forever for events that will
    never be durable."""
    store = SQLiteStore(str(tmp_path / "s.db"))
    gate = Gate()
    agent = Agent("a", model=ScriptedModel([HOLD, TOO_BIG]), tools=[gate.tool])
    async with runtime_whose_close_may_fail(store):
        session = await agent.start_session()
        turn = await session.start_turn("go")
        with trio.fail_after(WAIT):
            await gate.reached.wait()
        await store.flush()
        fill_the_disk(store)
        gate.opened.set()
        with pytest.raises(StoreError, match="full"), trio.fail_after(WAIT):
            await turn.result()


@pytest.mark.parametrize("then", ["handled", "raised again"])
async def test_a_full_disk_leaves_the_block_without_an_exception_group(
    tmp_path: Path, then: str
) -> None:
    """After a full disk failed a call, leaving the ``open_runtime`` block raises at most a plain
    StoreError, never an ExceptionGroup (of raw sqlite errors, or of the runtime's own): a
    StoreError the block raises leaves as it is."""
    store = SQLiteStore(str(tmp_path / "s.db"))
    agent = Agent("a", model=ScriptedModel(["x"]))
    caught: list[StoreError] = []
    leaving: list[StoreError] = []
    try:
        async with agentlib.open_runtime(store):
            session = await agent.start_session()
            fill_the_disk(store)
            try:
                with trio.fail_after(WAIT):
                    await session.start_turn(TOO_BIG)
            except StoreError as error:
                caught.append(error)
                if then == "raised again":
                    raise
    except StoreError as error:  # an ExceptionGroup is not caught: it fails the test
        leaving.append(error)
    assert len(caught) == 1
    if then == "raised again":
        assert len(leaving) == 1
        assert leaving[0] is caught[0]


async def test_a_turn_whose_text_the_file_cannot_keep_fails_and_the_runtime_goes_on(
    tmp_path: Path,
) -> None:
    """A lone surrogate reaching the store fails that session's turn with a StoreError naming
    the session, not the text; the runtime and its other sessions go on, and the store
    closes cleanly."""
    agent = Agent("a", model=agentlib.FunctionModel(replies_unkeepable_text))
    async with agentlib.open_runtime(f"sqlite:///{tmp_path / 's.db'}"):
        odd, other = await agent.start_session(), await agent.start_session()
        with pytest.raises(StoreError) as raised, trio.fail_after(WAIT):
            await odd.run("odd")
        assert odd.id in str(raised.value)
        assert "\udc80" not in str(raised.value)
        assert "odd reply" not in str(raised.value)
        with trio.fail_after(WAIT):
            assert isinstance(await past_refused_writes(lambda: other.run("hello")), Completed)
            assert isinstance(await other.run("again"), Completed)
