"""A damaged store says so (issue 12, item 6).

A session is stored whole in a real SQLite file: inputs, history, a turn that ended after an
approval, a turn blocked on another (its tool step, its idempotency key, a message steered
into it), and their events. The file is then damaged by hand, as a disk, a crash of
something else, or a person could: a row's JSON overwritten, rows deleted, pages of the file
zeroed. Read back through the public API (``agent.session(id)``, ``turn.get()``,
``session.iter_events()``), every damage raises ``StoreError`` naming the file, the session
and the table, saying what to do, with the original error as its cause, and never quoting a
row (it may hold a session input). A damaged session never reads as empty, nor short.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from _support import Repo

import agentlib
from agentlib import (
    Agent,
    AllowApproval,
    Blocked,
    Completed,
    Event,
    MemoryStore,
    ModelReply,
    ScriptedModel,
    StoreError,
    ToolCallRequest,
    ValidationError,
)
from agentlib._store._base import SessionRow

#: A session input's value: no message may quote it.
SECRET = "s3cr3t-repo-name-5b1e0c"

#: The longest any wait here may take: only a hang reaches it.
WAIT = 60


def make_agent() -> Agent:
    @agentlib.tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    def call(path: str) -> ModelReply:
        return ModelReply(tool_calls=[ToolCallRequest(name="delete", arguments={"path": path})])

    return Agent(
        "cleaner",
        model=ScriptedModel([call("/a"), "cleaned /a", call("/b"), "cleaned /b"]),
        tools=[delete],
    )


@attrs.frozen
class Stored:
    """A session in a file no runtime has open."""

    path: Path
    session_id: str
    ended: Completed  # its first turn, which ended after an approval
    blocked: Blocked  # its second turn, blocked on another approval
    events: int  # how many events it has

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"

    def execute(self, sql: str, *parameters: Any) -> None:
        with contextlib.closing(sqlite3.connect(self.path)) as db, db:
            db.execute(sql, parameters)


@pytest.fixture
async def stored(tmp_path: Path) -> Stored:
    path = tmp_path / "s.db"
    async with agentlib.open_runtime(f"sqlite:///{path}"):
        session = await make_agent().start_session(
            inputs=[Repo(name=SECRET)], idempotency_key="job"
        )
        first = await session.run("clean /a")
        assert isinstance(first, Blocked)
        turn = session.turn(first.turn_id)
        await turn.answer(first.callbacks[0].id, AllowApproval())
        with trio.fail_after(WAIT):
            ended = await turn.result()
        assert isinstance(ended, Completed)
        second = await session.start_turn("clean /b", idempotency_key="second")
        assert isinstance(second, agentlib.Turn)
        with trio.fail_after(WAIT):
            blocked = await second.result()
        assert isinstance(blocked, Blocked)
        assert isinstance(await second.steer("and /c"), agentlib.Turn)
    with contextlib.closing(sqlite3.connect(path)) as db:
        (events,) = db.execute("SELECT count(*) FROM events").fetchone()
    return Stored(path, session.id, ended, blocked, events)


async def read_back(stored: Stored) -> None:
    """Read the whole session back, as a new process would: its turns, then its events."""
    session = make_agent().session(stored.session_id)
    for record in (stored.blocked, stored.ended):
        again = await session.turn(record.turn_id).get()
        assert attrs.evolve(again, cursor=None) == attrs.evolve(record, cursor=None)
    ids = []
    with trio.fail_after(WAIT):
        async with contextlib.aclosing(session.iter_events()) as events:
            async for event in events:  # a blocked turn's session goes on: read what it has
                ids.append(event.id)
                if len(ids) == stored.events:
                    break
    assert ids == [f"{stored.session_id}:{seq:012d}" for seq in range(1, stored.events + 1)]


async def refused(stored: Stored, table: str) -> StoreError:
    """The StoreError reading the session back raises; it says where and what to do."""
    async with agentlib.open_runtime(stored.url):
        with pytest.raises(StoreError) as raised:
            await read_back(stored)
    error = raised.value
    message = str(error)
    assert str(stored.path) in message
    assert f"session {stored.session_id}" in message
    assert f"table {table}" in message
    assert "damaged" in message
    assert "backup" in message
    assert "integrity_check" in message
    assert SECRET not in message
    assert error.__cause__ is not None or "missing" in message
    return error


async def test_an_undamaged_session_reads_back_whole(stored: Stored) -> None:
    async with agentlib.open_runtime(stored.url):
        await read_back(stored)


# --- rows that are not what was written ---------------------------------------------------------

#: (table, the SQL that damages the session's row or rows there). The values hold the
#: secret: the error must not quote them.
NOT_JSON = f'{{"name": "{SECRET}'
ROWS = {
    "inputs": ("sessions", "UPDATE sessions SET inputs = ? WHERE session_id = ?"),
    "an entry": ("entries", "UPDATE entries SET data = ? WHERE session_id = ? AND idx = 1"),
    "an ended turn's record": (
        "turns",
        "UPDATE turns SET record = ? WHERE session_id = ? AND record IS NOT NULL",
    ),
    "a blocked turn's step": (
        "turns",
        "UPDATE turns SET step = ? WHERE session_id = ? AND step IS NOT NULL",
    ),
    "a steered message": ("steers", "UPDATE steers SET data = ? WHERE session_id = ?"),
    "a callback": (
        "callbacks",
        "UPDATE callbacks SET callback = ? WHERE session_id = ? AND state = 'open'",
    ),
    "an answer": (
        "callbacks",
        "UPDATE callbacks SET answer = ? WHERE session_id = ? AND state = 'answered'",
    ),
    "an event": ("events", "UPDATE events SET data = ? WHERE session_id = ? AND seq = 3"),
    "an event carrying an entry": (
        "events",
        "UPDATE events SET data = ? WHERE session_id = ? AND type = 'entry_completed'",
    ),
}


@pytest.mark.parametrize("row", sorted(ROWS))
async def test_a_row_that_is_not_json_raises_a_store_error(stored: Stored, row: str) -> None:
    table, damage = ROWS[row]
    stored.execute(damage, NOT_JSON, stored.session_id)
    error = await refused(stored, table)
    assert isinstance(error.__cause__, json.JSONDecodeError)
    assert "not JSON" in str(error)


#: JSON of another shape than the row's: (table, the SQL, the JSON, what the decoder raises).
SHAPES: dict[str, tuple[str, str, str, type[BaseException]]] = {
    "an entry without its fields": (
        "entries",
        "UPDATE entries SET data = ? WHERE session_id = ? AND idx = 0",
        json.dumps({"type": "message", "note": SECRET}),
        ValidationError,
    ),
    "a record of no known shape": (
        "turns",
        "UPDATE turns SET record = ? WHERE session_id = ? AND record IS NOT NULL",
        json.dumps([SECRET]),
        ValidationError,
    ),
    "a tool step without its calls": (
        "turns",
        "UPDATE turns SET step = ? WHERE session_id = ? AND step IS NOT NULL",
        json.dumps({"note": SECRET}),
        ValidationError,
    ),
    "a tool step whose call is of no known shape": (
        "turns",
        "UPDATE turns SET step = ? WHERE session_id = ? AND step IS NOT NULL",
        json.dumps({"calls": [{"entry": {"type": "tool_call", "note": SECRET}}]}),
        ValidationError,
    ),
    "an event's fields as a list": (
        "events",
        "UPDATE events SET data = ? WHERE session_id = ? AND type = 'callback_opened'",
        json.dumps([SECRET]),
        TypeError,
    ),
}


@pytest.mark.parametrize("row", sorted(SHAPES))
async def test_a_row_of_another_shape_raises_a_store_error(stored: Stored, row: str) -> None:
    table, damage, value, cause = SHAPES[row]
    stored.execute(damage, value, stored.session_id)
    error = await refused(stored, table)
    assert isinstance(error.__cause__, cause)


async def test_a_session_that_failed_to_read_back_is_read_again_and_not_leased(
    stored: Stored,
) -> None:
    # A restore that fails halfway leaves nothing behind: the next read fails the same way
    # (it never finds a half-read session that takes answers and never moves), and the
    # session's lease is let go at once.
    stored.execute(
        "UPDATE turns SET step = ? WHERE session_id = ? AND step IS NOT NULL",
        json.dumps({"calls": "none"}),
        stored.session_id,
    )
    async with agentlib.open_runtime(stored.url):
        turn = make_agent().session(stored.session_id).turn(stored.blocked.turn_id)
        for _ in range(2):
            with pytest.raises(StoreError, match="damaged"):
                await turn.get()
            with pytest.raises(StoreError, match="damaged"):
                await turn.answer(stored.blocked.callbacks[0].id, AllowApproval())
            with contextlib.closing(sqlite3.connect(stored.path)) as db:
                owners = db.execute("SELECT lease_owner FROM sessions").fetchall()
            assert owners == [(None,)]


# --- damaged pages ------------------------------------------------------------------------------


def rewrite_page(path: Path, table: str, page: Callable[[int], bytes]) -> None:
    """Overwrite the root page of ``table``'s b-tree in the file with ``page(page_size)``,
    as a disk could; every connection is closed, and the log checkpointed into the file."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (root,) = db.execute(
            "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone()
        (size,) = db.execute("PRAGMA page_size").fetchone()
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    with path.open("r+b") as file:
        file.seek((root - 1) * size)
        file.write(page(size))


TABLES = ["sessions", "events", "entries", "turns", "steers", "callbacks", "keys"]


@pytest.mark.parametrize("table", TABLES)
async def test_a_zeroed_page_raises_a_store_error_naming_its_table(
    stored: Stored, table: str
) -> None:
    rewrite_page(stored.path, table, bytes)
    error = await refused(stored, table)
    assert isinstance(error.__cause__, sqlite3.DatabaseError)
    assert "malformed" in str(error)


def empty_leaf(size: int) -> bytes:
    """A b-tree page of a table without rowid, well formed, holding no row."""
    header = bytes([0x0A, 0, 0, 0, 0]) + (size % 65536).to_bytes(2, "big") + bytes([0])
    return header + bytes(size - len(header))


@pytest.mark.parametrize("table", ["events", "entries"])
async def test_a_page_emptied_of_its_rows_raises_a_store_error(stored: Stored, table: str) -> None:
    """The table's page is well formed, but lost its rows: SQLite reads it as empty, with no
    error. The session's recorded last event and history entry tell that rows are missing."""
    rewrite_page(stored.path, table, empty_leaf)
    await refused(stored, table)


# --- missing rows -------------------------------------------------------------------------------

#: (table, the SQL that deletes the session's rows there).
MISSING = {
    "its row": ("sessions", "DELETE FROM sessions WHERE session_id = ?"),
    "every event": ("events", "DELETE FROM events WHERE session_id = ?"),
    "its last events": ("events", "DELETE FROM events WHERE session_id = ? AND seq > 10"),
    "an event": ("events", "DELETE FROM events WHERE session_id = ? AND seq = 5"),
    "its first event": ("events", "DELETE FROM events WHERE session_id = ? AND seq = 1"),
    "every entry": ("entries", "DELETE FROM entries WHERE session_id = ?"),
    "an entry": ("entries", "DELETE FROM entries WHERE session_id = ? AND idx = 2"),
    "its last entry": (
        "entries",
        "DELETE FROM entries WHERE session_id = ? AND idx = (SELECT max(idx) FROM entries"
        " AS other WHERE other.session_id = entries.session_id)",
    ),
    "its blocked turn": ("turns", "DELETE FROM turns WHERE session_id = ? AND record IS NULL"),
    "its ended turn": ("turns", "DELETE FROM turns WHERE session_id = ? AND record IS NOT NULL"),
}


@pytest.mark.parametrize("rows", sorted(MISSING))
async def test_a_session_whose_rows_are_missing_raises_a_store_error(
    stored: Stored, rows: str
) -> None:
    """Never an empty session, nor a short one, nor SessionNotFoundError."""
    table, damage = MISSING[rows]
    stored.execute(damage, stored.session_id)
    error = await refused(stored, table)
    assert "missing" in str(error)


async def test_a_subagents_session_whose_parents_row_is_missing_raises_a_store_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    store = agentlib.SQLiteStore(str(path))
    async with trio.open_nursery() as nursery:
        await store.open(nursery.start_soon)
        store.write(SessionRow("child", "sub", parent_id="parent", parent_turn_id="t"))
        await store.flush()
        with pytest.raises(StoreError, match="parent session parent is missing") as raised:
            await store.load("child")
        assert "table sessions" in str(raised.value)
        await store.aclose()


class Forgetful(MemoryStore):
    """A store that lost the events of seq ``lost`` (or every event, if None), though it
    never pruned them."""

    lost: int | None = None
    forgetting = False

    async def read_events(self, session_id: str, after: int, limit: int) -> list[Event]:
        events = await super().read_events(session_id, after, limit)
        if not self.forgetting:
            return events
        if self.lost is None:
            return []
        return [event for event in events if not event.id.endswith(f":{self.lost:012d}")]


@pytest.mark.parametrize("lost", [None, 1, 3])
async def test_events_a_store_lost_without_pruning_raise_a_store_error_not_observation_lost(
    lost: int | None,
) -> None:
    """The engine, too, checks what a store reads back: a store (here one of the user's)
    that lost events it never pruned fails the reader with StoreError; ObservationLost is
    for events pruned on purpose."""
    store = Forgetful()
    async with agentlib.open_runtime(store):
        session = await make_agent().start_session()
        assert isinstance(await session.run("clean /a"), Blocked)
    store.lost, store.forgetting = lost, True
    async with agentlib.open_runtime(store):
        again = make_agent().session(session.id)
        with pytest.raises(StoreError, match="never pruned"), trio.fail_after(WAIT):
            await drain(again.iter_events())


async def drain(events: AsyncIterator[Event]) -> None:
    """Read ``events`` until they end, or raise."""
    async with contextlib.aclosing(events) as iterator:
        async for _ in iterator:
            pass


async def test_leases_and_keys_read_from_a_damaged_table_raise_a_store_error_saying_where(
    stored: Stored,
) -> None:
    rewrite_page(stored.path, "sessions", bytes)
    store = agentlib.SQLiteStore(str(stored.path))
    three = [stored.session_id, "two", "three"]
    async with trio.open_nursery() as nursery:
        await store.open(nursery.start_soon)
        reads: dict[str, Callable[[], Awaitable[object]]] = {
            f"session {stored.session_id}": lambda: store.acquire([stored.session_id], "A", 30),
            f"sessions {stored.session_id}, two and 1 more": lambda: store.renew(three, "A", 30),
            "an idempotency key": lambda: store.session_for_key("job"),
        }
        for what, read in reads.items():
            with pytest.raises(StoreError) as raised:
                await read()
            message = str(raised.value)
            assert what in message
            assert "table sessions" in message
            assert "damaged" in message
            assert str(stored.path) in message
            assert isinstance(raised.value.__cause__, sqlite3.DatabaseError)
        await store.aclose()


async def test_a_turn_whose_row_alone_is_missing_raises_a_store_error(tmp_path: Path) -> None:
    """A turn with no callback nor key: its history and events still name it."""
    path = tmp_path / "s.db"
    agent = agentlib.Agent("a", model=agentlib.ScriptedModel(["hello", "again"]))
    async with agentlib.open_runtime(f"sqlite:///{path}"):
        session = await agent.start_session()
        first = await session.run("hi")
        await session.run("hi again")
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("DELETE FROM turns WHERE turn_id = ?", (first.turn_id,))
    async with agentlib.open_runtime(f"sqlite:///{path}"):
        with pytest.raises(StoreError, match=f"turn {first.turn_id}, of its entry .* missing"):
            await agent.session(session.id).turn(first.turn_id).get()


async def test_events_beyond_the_last_recorded_name_a_process_of_an_older_agentlib(
    stored: Stored,
) -> None:
    # A process still running the agentlib before schema 3 appends events without
    # recording the session's last seq: more rows than recorded, not fewer.
    stored.execute(
        "INSERT INTO events (session_id, seq, type, turn_id, id, data)"
        " SELECT session_id, seq + 100, type, turn_id, id, data FROM events"
        " WHERE session_id = ? AND seq = 1",
        stored.session_id,
    )
    async with agentlib.open_runtime(stored.url):
        with pytest.raises(StoreError) as raised:
            await read_back(stored)
    message = str(raised.value)
    assert f"session {stored.session_id}" in message
    assert "table events" in message
    assert "older agentlib" in message
    assert "every process on a file must run the same agentlib" in message
