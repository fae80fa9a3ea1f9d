"""Crash safety (SPEC 11, issue 6 item 5): a worker process is killed with SIGKILL in the
middle of turns, many times at random points, on one SQLite file or one PostgreSQL schema;
whatever it was told survives.

The worker (``_crash_worker.py``) prints a line for every operation acknowledged to it: a
started session, a started turn, an event a reader saw, a turn's record. After each kill the
store's tables are read as the worker left them; at the end a runtime in this process
reopens every session. Leases need no waiting: each process (this one included) takes the
leases of the killed one at once, as they are held by a process of this host that no longer
exists.

``CRASH_SEED=<n>`` replays the kill points of a run (each run prints its seed).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import selectors
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import _crash_worker
import attrs
import pytest
import trio
from _crash_worker import AGENTS, message_for
from conftest import POSTGRES

import agentlib
from agentlib import Completed, Turn, TurnEnded, TurnNotFoundError, UnknownOutcome
from agentlib.store import PostgresStore

WORKER = Path(__file__).with_name("_crash_worker.py")
ROUNDS = 15
#: The longest a worker may take to print what the test waits for (real seconds): only a
#: worker that hangs reaches it, even on a busy machine.
WORKER_TIMEOUT = 60.0
#: The longest any wait of the reopened runtime may take (real seconds): only a hang reaches it.
WAIT = 30.0


@pytest.fixture(autouse=True)
def runs_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tools that note their runs (``_crash_worker.RUNS``) note them, in this process,
    beside the test's SQLite file, where its workers note theirs."""
    monkeypatch.setattr(_crash_worker, "RUNS", f"{tmp_path / 'sessions.db'}.runs")


#: A connection to a store's tables: sqlite3's, or one that takes its ``?`` parameters.
Db = Any


@attrs.frozen
class Where:
    """Where the sessions of a crash test live: the SQLite file ``path``, or the PostgreSQL
    schema ``schema``. The tools note their runs beside ``path`` in either case."""

    path: Path
    schema: str | None = None

    @property
    def url(self) -> str:
        if self.schema is not None:
            return f"{POSTGRES}?schema={self.schema}"
        return f"sqlite:///{self.path}"

    def store(self) -> agentlib.Store:
        if self.schema is not None:
            return PostgresStore(POSTGRES, schema=self.schema)
        return agentlib.SQLiteStore(str(self.path))

    def exists(self) -> bool:
        """Whether a worker made the tables (it may have been killed before)."""
        if self.schema is None:
            return self.path.exists()
        with self.connect() as db:
            return db.execute("SELECT to_regclass(?)", (f"{self.schema}.keys",)).fetchone()[0]

    @contextlib.contextmanager
    def connect(self) -> Iterator[Db]:
        if self.schema is None:
            with contextlib.closing(sqlite3.connect(self.path)) as db:
                assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
                yield db
            return
        import psycopg

        with psycopg.connect(POSTGRES, autocommit=True) as connection:
            connection.execute(f"SET search_path TO {self.schema}")
            yield _Postgres(connection)


@attrs.frozen
class _Postgres:
    connection: Any

    def execute(self, query: str, parameters: tuple[Any, ...] = ()) -> Any:
        return self.connection.execute(query.replace("?", "%s"), parameters)


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Where:
    """The store of the test: a SQLite file, or a schema of the tests' PostgreSQL database."""
    if request.param == "postgres":
        return Where(tmp_path / "sessions.db", request.getfixturevalue("postgres_schema"))
    return Where(tmp_path / "sessions.db")


def cursor(session_id: str, seq: int) -> str:
    return f"{session_id}:{seq:012d}"


def without_cursor(record: dict[str, Any]) -> dict[str, Any]:
    """A record's JSON form, less its cursor (the session's last event when it was read)."""
    return {name: value for name, value in record.items() if name != "cursor"}


@attrs.define
class Acks:
    """What the workers were told, over every round."""

    sessions: dict[str, str | None] = attrs.field(factory=dict)  # id -> its key
    session_keys: dict[str, str] = attrs.field(factory=dict)  # key -> session id
    turns: dict[tuple[str, str], str] = attrs.field(factory=dict)  # (session, turn) -> key
    turn_keys: dict[tuple[str, str], str] = attrs.field(factory=dict)  # (session, key) -> turn
    events: dict[tuple[str, int], str] = attrs.field(factory=dict)  # (session, seq) -> type
    records: dict[tuple[str, str], dict[str, Any]] = attrs.field(factory=dict)
    #: Turns acknowledged as Blocked (their last such record), which must stay so.
    blocked: dict[tuple[str, str], dict[str, Any]] = attrs.field(factory=dict)
    tried_answers: set[str] = attrs.field(factory=set)  # callback ids
    answers: set[str] = attrs.field(factory=set)  # callback ids answered: Answered
    tried_turns: dict[tuple[str, str], None] = attrs.field(factory=dict)  # in order
    tried_sessions: set[str] = attrs.field(factory=set)
    #: Keys tried but unacknowledged, whose turn was in the file after the crash.
    stored_turn_keys: dict[tuple[str, str], str] = attrs.field(factory=dict)
    retried_stored_keys: int = 0  # how many a retry acknowledged, after a crash
    count: int = 0

    def take(self, line: str) -> None:
        """Note one line of a worker."""
        words = line.split(" ", 4)
        match words:
            case ["ready"]:
                return
            case ["try", "session", key]:
                self.tried_sessions.add(key)
            case ["ack", "session", session_id, key]:
                key = None if key == "-" else key
                assert self.sessions.setdefault(session_id, key) == key
                if key is not None:
                    known = self.session_keys.setdefault(key, session_id)
                    assert known == session_id, (
                        f"session key {key} was acknowledged with session {known}, then, "
                        f"retried, with a second session {session_id}"
                    )
            case ["try", "turn", session_id, key]:
                self.tried_turns[session_id, key] = None
            case ["ack", "turn", session_id, turn_id, key]:
                self.turns[session_id, turn_id] = key
                known = self.turn_keys.setdefault((session_id, key), turn_id)
                assert known == turn_id, (
                    f"turn key {key} of session {session_id} was acknowledged with turn "
                    f"{known}, then, retried, with a second turn {turn_id}"
                )
                stored = self.stored_turn_keys.pop((session_id, key), None)
                if stored is not None:
                    assert stored == turn_id, (
                        f"turn key {key} of session {session_id} started turn {stored} before "
                        f"a crash; retried after it, it started a second turn {turn_id}"
                    )
                    self.retried_stored_keys += 1
            case ["ack", "event", session_id, event_id, kind]:
                assert event_id.rpartition(":")[0] == session_id
                self.events[session_id, int(event_id.rpartition(":")[2])] = kind
            case ["try", "answer", _, callback_id]:
                self.tried_answers.add(callback_id)
            case ["ack", "answer", _, callback_id]:
                self.answers.add(callback_id)
            case ["ack", "record", session_id, turn_id, data]:
                record = without_cursor(json.loads(data))
                if record["type"] == "blocked":
                    self.blocked[session_id, turn_id] = record
                else:
                    self.records[session_id, turn_id] = record
            case _:
                raise AssertionError(f"the worker printed an unexpected line: {line!r}")
        if words[0] == "ack":
            self.count += 1

    def untouched(self, session_id: str, turn_id: str) -> bool:
        """Whether a turn acknowledged as Blocked was left so: it did not end (as far as a
        worker was told) and no answer to its callbacks was tried."""
        record = self.blocked[session_id, turn_id]
        return (session_id, turn_id) not in self.records and not any(
            callback["id"] in self.tried_answers for callback in record["callbacks"]
        )

    def pending_turns(self) -> list[tuple[str, str]]:
        """Turn keys tried but never acknowledged, of acknowledged sessions."""
        return [
            (session_id, key)
            for session_id, key in self.tried_turns
            if (session_id, key) not in self.turn_keys and session_id in self.sessions
        ]

    def pending_sessions(self) -> list[str]:
        return sorted(self.tried_sessions - set(self.session_keys))


class Lines:
    """The lines a process writes to its stdout, read with a deadline."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        self._fd = process.stdout.fileno()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._fd, selectors.EVENT_READ)
        self._lines: collections.deque[str] = collections.deque()
        self._partial = b""
        self._eof = False

    def read(self, deadline: float) -> Iterator[str]:
        """Complete lines as they come, until EOF or ``deadline`` (monotonic)."""
        while True:
            while self._lines:
                yield self._lines.popleft()
            left = deadline - time.monotonic()
            if self._eof or left <= 0 or not self._selector.select(left):
                return
            chunk = os.read(self._fd, 65536)
            if not chunk:
                self._eof = True  # a line cut short by the kill was never printed
                continue
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            self._lines.extend(line.decode() for line in lines)

    def close(self) -> None:
        self._selector.close()


def crash_worker(
    config: dict[str, Any],
    acks: Acks,
    errors: Path,
    *,
    until: Callable[[str], bool] | None,
    delay: float = 0.0,
) -> None:
    """Start a worker; once it printed a line ``until`` picks (at once if None), and
    ``delay`` seconds more, kill it. Note every line it printed."""
    with errors.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(config)],
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    lines = Lines(process)
    reached = until is None
    try:
        if until is not None:
            for line in lines.read(time.monotonic() + WORKER_TIMEOUT):
                acks.take(line)
                if until(line):
                    reached = True
                    break
        if delay:
            time.sleep(delay)  # the crash point: nothing waits for a state here
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        for line in lines.read(time.monotonic() + WORKER_TIMEOUT):  # what it printed before
            acks.take(line)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        lines.close()
        assert process.stdout is not None
        process.stdout.close()
    assert process.returncode == -signal.SIGKILL, (
        f"the worker ended by itself (exit {process.returncode}) before the kill:\n"
        + errors.read_text()
    )
    assert reached, (
        f"the worker did not print what the test waited for within {WORKER_TIMEOUT}s: it "
        "hung\n" + errors.read_text()
    )


# -- the file as the killed worker left it -----------------------------------------------------


def check_file(
    where: Path | Where, acks: Acks, *, all_ended: bool = False
) -> dict[tuple[str, str], str]:
    """Check the store's tables as they are; return its unended turns, each with what it
    must read once reopened: ``"unknown"`` (UnknownOutcome) or ``"resumable"``."""
    if isinstance(where, Path):
        where = Where(where)
    steps: dict[tuple[str, str], str | None] = {}
    with where.connect() as db:
        callbacks = {
            callback_id: (state, json.loads(callback), answer)
            for callback_id, state, callback, answer in db.execute(
                "SELECT callback_id, state, callback, answer FROM callbacks"
            )
        }
        still_open = {id_ for id_, (state, _, _) in callbacks.items() if state == "open"}
        waiting = {
            (callback["session_id"], callback["turn_id"])
            for state, callback, _ in callbacks.values()
            if state == "open"
        }
        sessions = dict(db.execute("SELECT session_id, idempotency_key FROM sessions"))
        keys = {
            (session_id, key): turn_id
            for session_id, key, turn_id in db.execute("SELECT session_id, key, turn_id FROM keys")
        }
        for session_id, key in acks.sessions.items():
            assert session_id in sessions, f"acknowledged session {session_id} is lost"
            assert sessions[session_id] == key
        for (session_id, key), turn_id in acks.turn_keys.items():
            assert keys.get((session_id, key)) == turn_id, (
                f"acknowledged key {key} of session {session_id} names turn "
                f"{keys.get((session_id, key))}, not {turn_id}"
            )
        for tried in acks.pending_turns():
            if tried in keys:
                acks.stored_turn_keys[tried] = keys[tried]
        for session_id in sessions:
            events = [
                (row[0], _stored_event(session_id, *row))
                for row in db.execute(
                    "SELECT seq, type, turn_id, id, data FROM events WHERE session_id = ?"
                    " ORDER BY seq",
                    (session_id,),
                )
            ]
            turns = db.execute(
                "SELECT turn_id, first_seq, record, step FROM turns WHERE session_id = ?"
                " ORDER BY first_seq",
                (session_id,),
            ).fetchall()
            steps.update(_check_log(session_id, events, turns, acks, all_ended=all_ended))
            indexes = [
                idx
                for (idx,) in db.execute(
                    "SELECT idx FROM entries WHERE session_id = ? ORDER BY idx", (session_id,)
                )
            ]
            assert indexes == list(range(len(indexes))), f"session {session_id}'s history is torn"
    expected = {turn: _expected_after_crash(turn, steps, waiting) for turn in steps}
    for callback_id in acks.answers:
        assert callbacks[callback_id][0] == "answered", f"acknowledged answer {callback_id} lost"
    _check_runs(where.path, callbacks)
    for turn, record in acks.blocked.items():
        if all_ended or not acks.untouched(*turn):
            # It ended since, as acknowledged, or an answer may have been taken (the last
            # runtime, here, answered them all).
            continue
        assert expected.get(turn) == "resumable", (
            f"turn {turn[1]} of session {turn[0]} was acknowledged as Blocked, yet the file "
            f"left it {expected.get(turn, 'ended')}"
        )
        for callback in record["callbacks"]:
            assert callback["id"] in still_open, f"{turn}: callback {callback['id']} closed"
    return expected


def _check_runs(path: Path, callbacks: dict[str, tuple[str, Any, Any]]) -> None:
    """Every run of ``confirm`` the file of runs notes was approved, and ran once."""
    runs = Path(f"{path}.runs")
    noted = collections.Counter(runs.read_text().splitlines() if runs.exists() else ())
    allowed = {
        callback["turn_id"]
        for state, callback, answer in callbacks.values()
        if callback["tool_name"] == "confirm"
        and state == "answered"
        and json.loads(answer)["type"] == "allow"
    }
    for run, times in noted.items():
        kind, _, turn_id = run.partition(" ")
        if kind != "confirm":
            continue
        assert times == 1, f"the approved call of turn {turn_id} ran {times} times"
        assert turn_id in allowed, f"confirm ran in turn {turn_id}, which no approval allowed"


_CARRIED = {"turn_started": "message", "entry_added": "entry", "entry_completed": "entry"}


def _stored_event(
    session_id: str, seq: int, kind: str, turn_id: str | None, event_id: str | None, data: str
) -> dict[str, Any]:
    """An event's JSON, from the columns of its row (its id is its cursor when NULL)."""
    assert event_id is None, f"event {seq} of {session_id} has an id other than its cursor"
    fields = json.loads(data)
    if kind in _CARRIED:  # the entry alone; a NULL turn_id is the entry's
        if turn_id is None:
            turn_id = fields["turn_id"]
        fields = {_CARRIED[kind]: fields}
    return {
        "type": kind,
        "id": cursor(session_id, seq),
        "session_id": session_id,
        "turn_id": turn_id,
        **fields,
    }


def _check_log(
    session_id: str,
    events: list[tuple[int, dict[str, Any]]],
    turns: list[tuple[str, int, str | None, str | None]],
    acks: Acks,
    *,
    all_ended: bool,
) -> dict[tuple[str, str], str | None]:
    """The session's log is whole: events 1..n, then one block of events per turn, from its
    TurnStarted to its TurnEnded, only the last one unended; everything acknowledged is
    there. Returns the unended turn's stored tool step."""
    label = f"session {session_id}"
    assert [seq for seq, _ in events] == list(range(1, len(events) + 1)), f"{label}: a gap"
    unended = {}
    position = 1
    for index, (turn_id, first_seq, record, step) in enumerate(turns):
        where = f"{label}, turn {turn_id}"
        assert first_seq == position, f"{where} starts at {first_seq}, not right after the last"
        end = first_seq
        while end <= len(events) and events[end - 1][1]["turn_id"] == turn_id:
            end += 1
        block = [event for _, event in events[first_seq - 1 : end - 1]]
        assert block, f"{where} has no event"
        assert block[0]["type"] == "turn_started", f"{where} starts with {block[0]['type']}"
        assert [event["type"] for event in block].count("turn_started") == 1, where
        ended = [event for event in block if event["type"] == "turn_ended"]
        if record is None:
            assert not all_ended, f"{where} never ended"
            assert not ended, f"{where} has a TurnEnded but no record"
            assert index == len(turns) - 1, f"{where} never ended, yet a turn followed it"
            unended[session_id, turn_id] = step
        else:
            assert len(ended) == 1, f"{where} has {len(ended)} TurnEnded"
            assert block[-1]["type"] == "turn_ended", f"{where}: its TurnEnded is not last"
            assert block[-1]["record"] == json.loads(record), where
            assert block[-1]["record"]["cursor"] == block[-1]["id"], where
        position = end
    assert position == len(events) + 1, f"{label}: events after its turns' blocks"
    stored = {turn_id: record for turn_id, _, record, _ in turns}
    for acked_session, turn_id in acks.turns:
        if acked_session == session_id:
            assert turn_id in stored, f"acknowledged turn {turn_id} of {label} is lost"
    for (acked_session, seq), kind in acks.events.items():
        if acked_session == session_id:
            assert seq <= len(events), f"acknowledged event {seq} of {label} is lost"
            assert events[seq - 1][1]["type"] == kind, f"{label}: event {seq} changed"
    for (acked_session, turn_id), acked in acks.records.items():
        if acked_session == session_id:
            record = stored.get(turn_id)
            assert record is not None, (
                f"turn {turn_id} of {label} was acknowledged as {acked['type']}, yet the file "
                "has no end for it"
            )
            assert without_cursor(json.loads(record)) == acked, f"record of {turn_id} changed"
    return unended


def _expected_after_crash(
    turn: tuple[str, str],
    steps: dict[tuple[str, str], str | None],
    waiting: set[tuple[str, str]],
) -> str:
    """What an unended turn must read once reopened: it goes on from its tool step if a
    callback of it, or of a subagent turn below it, is open (then it was Blocked, and stays
    so), or if nothing of the step ran when its process died; else UnknownOutcome (a model
    step, a tool, a subagent's turn that did). ``waiting`` holds the turns with an open
    callback."""
    step = steps[turn]
    if step is None:
        return "unknown"  # a model step, or the turn's start
    if _waits(turn, steps, waiting):
        return "resumable"
    for call in json.loads(step)["calls"]:
        child = (call["child"][0], call["child"][1]) if call["child"] else None
        if call["state"] == "running" or (call["state"] == "done" and call["result"] is None):
            return "unknown"
        if call["state"] == "delegated" and child in steps:
            assert child is not None
            if _expected_after_crash(child, steps, waiting) == "unknown":
                return "unknown"
    return "resumable"


def _waits(
    turn: tuple[str, str],
    steps: dict[tuple[str, str], str | None],
    waiting: set[tuple[str, str]],
) -> bool:
    """Whether the turn, or a subagent turn below it, has an open callback."""
    if turn in waiting:
        return True
    step = steps.get(turn)
    for call in json.loads(step)["calls"] if step else ():
        child = (call["child"][0], call["child"][1]) if call["child"] else None
        if call["state"] == "delegated" and child in steps and _waits(child, steps, waiting):
            return True
    return False


# -- the sessions reopened in a new runtime ----------------------------------------------------


def _count(db: Db, query: str, *parameters: str) -> int:
    return int(db.execute(query, parameters).fetchone()[0])


async def _tree(session: agentlib.Session) -> dict[str, agentlib.Session]:
    """References to the session and its subagent sessions, at any depth, by id."""
    tree = {session.id: session}
    for sub in await session.subagents():
        tree.update(await _tree(sub))
    return tree


async def reopen_and_check(
    where: Path | Where, acks: Acks, crashed: dict[tuple[str, str], str]
) -> int:
    """Reopen every session in a new runtime and check it; return how many of the turns cut
    by a crash read UnknownOutcome."""
    if isinstance(where, Path):
        where = Where(where)
    unknown = 0
    store = where.store()
    with where.connect() as db:
        roots = db.execute(
            "SELECT session_id, agent FROM sessions WHERE parent_id IS NULL"
        ).fetchall()
        async with agentlib.open_runtime(store):
            for session_id, agent in roots:
                session = AGENTS[agent].session(session_id)
                unknown += await _check_session(db, session, acks, crashed)
            sessions = _count(db, "SELECT count(*) FROM sessions")
            for key, session_id in acks.session_keys.items():
                agent = db.execute(
                    "SELECT agent FROM sessions WHERE session_id = ?", (session_id,)
                ).fetchone()[0]
                again = await AGENTS[agent].start_session(idempotency_key=key)
                assert again.id == session_id, f"session key {key} started a second session"
            assert _count(db, "SELECT count(*) FROM sessions") == sessions
    return unknown


async def allow_all(
    turn: agentlib.Turn, record: agentlib.TurnState[Any]
) -> agentlib.TurnState[Any]:
    """Allow the approvals a turn waits on, until it ends."""
    while isinstance(record, agentlib.Blocked):
        for callback in record.callbacks:
            await turn.answer(callback.id, agentlib.AllowApproval())
        record = await turn.result(after=record)
    return record


async def _check_session(
    db: Db,
    session: agentlib.Session,
    acks: Acks,
    crashed: dict[tuple[str, str], str],
) -> int:
    with contextlib.suppress(TurnNotFoundError):  # reading a turn reopens the session
        await session.turn("no such turn").get()
    tree = await _tree(session)
    unknown = 0
    for (session_id, turn_id), expected in crashed.items():
        if session_id not in tree:
            continue
        turn = tree[session_id].turn(turn_id)
        with trio.fail_after(WAIT):  # a turn that goes on from its tool step ends here
            record = await turn.result()
            acked = acks.blocked.get((session_id, turn_id))
            if acked is not None and acks.untouched(session_id, turn_id):
                assert without_cursor(agentlib.unstructure(record)) == acked, (
                    f"turn {turn_id} of session {session_id} was acknowledged as Blocked, and "
                    f"reads {record!r}"
                )
            record = await allow_all(turn, record)
        if expected == "unknown":
            assert isinstance(record, UnknownOutcome), (
                f"turn {turn_id} of session {session_id} was running when its process was "
                f"killed, and reads {record!r}"
            )
        unknown += isinstance(record, UnknownOutcome)
    for acked_session, turn_id in acks.turns:
        if acked_session == session.id:
            await session.turn(turn_id).get()  # TurnNotFoundError if it were lost
    for (acked_session, turn_id), acked in acks.records.items():
        if acked_session == session.id:
            record = await session.turn(turn_id).get()
            assert without_cursor(agentlib.unstructure(record)) == acked

    # Every stored event reads back, in order, with the same id.
    query = "SELECT count(*) FROM events WHERE session_id = ?"
    stored = _count(db, query, session.id)
    ids = []
    ended: dict[str, dict[str, Any]] = {}
    if stored:
        with trio.fail_after(WAIT):
            async with contextlib.aclosing(session.iter_events()) as events:
                async for event in events:
                    ids.append(event.id)
                    if isinstance(event, TurnEnded) and event.turn_id is not None:
                        ended[event.turn_id] = agentlib.unstructure(event.record)
                    if len(ids) == stored:
                        break
    assert ids == [cursor(session.id, seq) for seq in range(1, stored + 1)]
    for acked_session, seq in acks.events:
        if acked_session == session.id:
            assert cursor(session.id, seq) in ids, f"acknowledged event {seq} is not read back"
    for (acked_session, turn_id), acked in acks.records.items():
        if acked_session == session.id:
            assert without_cursor(ended[turn_id]) == acked

    # A start_turn retried with an acknowledged key is that turn: none starts.
    turns_query = "SELECT count(*) FROM turns WHERE session_id = ?"
    turns = _count(db, turns_query, session.id)
    for (acked_session, key), turn_id in acks.turn_keys.items():
        if acked_session == session.id:
            again = await session.start_turn(message_for(key), idempotency_key=key)
            assert isinstance(again, Turn)
            assert again.id == turn_id, f"key {key} started a second turn, {again.id}"
    assert _count(db, turns_query, session.id) == turns
    assert _count(db, query, session.id) == stored

    # The session takes new turns.
    with trio.fail_after(WAIT):
        record = await session.run("One more question.")
        assert not isinstance(record, agentlib.Busy)
        record = await allow_all(session.turn(record.turn_id), record)
    assert isinstance(record, Completed), record
    return unknown


# -- random crashes ----------------------------------------------------------------------------


def _round_config(number: int, rng: random.Random, acks: Acks, where: Where) -> dict[str, Any]:
    pending = acks.pending_turns()
    resume = {session_id for session_id, _ in pending}  # the keys are retried there
    known = sorted(acks.sessions)
    resume.update(rng.sample(known, min(len(known), rng.randint(0, 3))))
    return {
        "path": str(where.path),
        "store": where.url,
        "seed": rng.randrange(2**32),
        "round": number,
        "resume": sorted(resume),
        "retry_turns": pending,
        "retry_sessions": acks.pending_sessions(),
        "new_sessions": rng.randint(0 if resume else 1, 3),
    }


def _kill_point(number: int, rng: random.Random) -> tuple[Callable[[str], bool] | None, float]:
    """When to kill a worker: once it printed a line the predicate picks, then a delay."""
    if number == 0:  # a turn surely runs: it was acknowledged a moment ago
        return (lambda line: line.startswith("ack turn ")), 0.0
    if rng.random() < 0.15:  # anywhere: starting up, reopening sessions, or running turns
        return None, rng.uniform(0.0, 0.5)
    left = rng.randint(1, 600)

    def enough(line: str) -> bool:
        nonlocal left
        left -= line.startswith("ack ")
        return left <= 0

    return enough, rng.choice([0.0, rng.uniform(0.0, 0.03)])


@pytest.mark.slow
def test_acknowledged_work_survives_sigkill_at_random_points(tmp_path: Path, where: Where) -> None:
    seed = int(os.environ.get("CRASH_SEED", random.randrange(2**32)))
    print(f"CRASH_SEED={seed}")
    rng = random.Random(seed)
    acks = Acks()
    crashed: dict[tuple[str, str], str] = {}
    for number in range(ROUNDS):
        config = _round_config(number, rng, acks, where)
        until, delay = _kill_point(number, rng)
        crash_worker(config, acks, tmp_path / f"worker-{number}.err", until=until, delay=delay)
        if where.exists():
            crashed.update(check_file(where, acks))
        print(
            f"round {number}: {acks.count} acknowledgements, {len(acks.sessions)} sessions, "
            f"{len(acks.turns)} turns, {len(crashed)} cut by a crash "
            f"({list(crashed.values()).count('resumable')} between tool calls, "
            f"{sum(acks.untouched(*turn) for turn in acks.blocked)} of them left Blocked), "
            f"{acks.retried_stored_keys} keys retried after a crash"
        )
    assert acks.turns, "no worker acknowledged a turn"
    assert "unknown" in crashed.values(), "no turn was running when a worker was killed"
    unknown = trio.run(reopen_and_check, where, acks, crashed)
    assert unknown >= 1
    check_file(where, acks, all_ended=True)


# -- one crash at a chosen point ---------------------------------------------------------------


def crash_scenario(tmp_path: Path, scenario: str) -> tuple[Path, Acks]:
    """Run a scenario of the worker; kill it once it says "ready"."""
    path = tmp_path / "sessions.db"
    acks = Acks()
    crash_worker(
        {"path": str(path), "scenario": scenario},
        acks,
        tmp_path / "worker.err",
        until=lambda line: line == "ready",
    )
    return path, acks


def test_a_record_read_with_get_survives_a_crash(tmp_path: Path) -> None:
    # The disk takes forever to commit the turn's end: get() must not tell the turn ended
    # before that end is stored, or, after a crash, the turn reads something else.
    path, acks = crash_scenario(tmp_path, "turn_read_while_its_end_commits")
    crashed = check_file(path, acks)
    assert list(crashed.values()) == ["unknown"]
    assert trio.run(reopen_and_check, path, acks, crashed) == 1


def test_a_session_a_retried_key_returned_survives_a_crash(tmp_path: Path) -> None:
    # start_session(idempotency_key=K) is retried while the first call still waits for its
    # session to be committed: the retry must not return that session before it is stored.
    path, acks = crash_scenario(tmp_path, "session_key_retried_while_it_commits")
    check_file(path, acks)
    trio.run(reopen_and_check, path, acks, {})


def test_a_turn_whose_subagent_ran_a_tool_reads_unknown_outcome_after_a_crash(
    tmp_path: Path,
) -> None:
    # The root turn was running when the process died (its subagent's tool was executing),
    # not blocked on callbacks: both turns read UnknownOutcome.
    path, acks = crash_scenario(tmp_path, "subagent_running_a_tool")
    crashed = check_file(path, acks)
    [root_turn] = [turn for session, turn in acks.turns]
    assert sorted(crashed.values()) == ["unknown", "unknown"]
    assert [turn for _, turn in crashed].count(root_turn) == 1
    assert trio.run(reopen_and_check, path, acks, crashed) == 2


def test_a_turn_blocked_beside_a_running_sibling_stays_blocked_after_sigkill(
    tmp_path: Path,
) -> None:
    # Issue 12: a model reply calls ``erase`` (approval) and ``index`` (runs until the
    # kill). The worker acknowledged Blocked while ``index`` ran; after the SIGKILL, a new
    # runtime (real clock: the dead process's lease is taken at once) still reads Blocked,
    # the approval is answered, and the turn completes; ``index`` ran once, ``erase`` once.
    path, acks = crash_scenario(tmp_path, "blocked_beside_a_running_sibling")
    [(session_id, turn_id)] = acks.turns
    acknowledged = acks.blocked[session_id, turn_id]
    assert check_file(path, acks) == {(session_id, turn_id): "resumable"}
    runs = Path(f"{path}.runs")
    assert runs.read_text().split() == ["index"]

    async def reopen() -> agentlib.TurnState[Any]:
        async with agentlib.open_runtime(f"sqlite:///{path}"):
            turn = AGENTS["siblings"].session(session_id).turn(turn_id)
            with trio.fail_after(WAIT):
                blocked = await turn.get()
                assert without_cursor(agentlib.unstructure(blocked)) == acknowledged
                assert isinstance(blocked, agentlib.Blocked)
                answered = await turn.answer(blocked.callbacks[0].id, agentlib.AllowApproval())
                assert isinstance(answered, agentlib.Answered)
                return await turn.result(after=blocked)

    record = trio.run(reopen)
    assert isinstance(record, Completed), record
    assert sorted(runs.read_text().split()) == ["erase", "index"]  # index never ran again
    erased, indexed = record.text.splitlines()
    assert erased == "erase: erased /old"
    assert indexed.startswith("index: error: this call's outcome is unknown")
