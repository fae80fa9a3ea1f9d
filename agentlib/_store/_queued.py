"""What the SQLite and PostgreSQL stores share: writes queued in the runtime's thread and
committed in groups by a writer task, and rows read back into a :class:`StoredSession`."""

from __future__ import annotations

import abc
import bisect
import contextlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar

import attrs
import cattrs
import trio

from .._data._callbacks import AllowApproval, Callback, DenyApproval
from .._data._convert import structure
from .._data._entries import Entry
from .._data._events import Event
from .._data._records import TurnState
from ._base import (
    CallbackRow,
    EntryRow,
    EventRow,
    KeyRow,
    LeaseLost,
    LeaseRefused,
    Op,
    SessionRow,
    Store,
    StoredSession,
    StoreError,
    TurnRow,
)
from ._holder import Holder, gone
from ._rows import EventRows
from ._sql import Reads, Statements

__all__ = [
    "UNREADABLE",
    "Place",
    "QueuedStore",
    "check_leasable",
    "check_none_left",
    "check_turns_named",
    "read_callback",
    "read_session",
    "unreadable",
]

#: What reading rows a store did not write as they are raises: the decoders' errors (a row
#: that is not JSON, or not JSON of the shape written).
UNREADABLE: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    RecursionError,
    cattrs.BaseValidationError,
)


def check_leasable(session_id: str, lease: Sequence[Any], owner: str, now: float) -> None:
    """Raises:
    LeaseRefused: The session's lease, as its row's lease columns hold it (owner, until,
        host, pid, started), is another owner's, runs on, and its holder may still be
        alive: a process of this host that died (a crash, SIGKILL) renews nothing, and its
        lease is taken at once, rather than once it expires.
    """
    current, until, host, pid, started = lease
    if current in (None, owner) or until <= now:
        return
    if pid is None or not gone(Holder(host=host, pid=pid, started=started)):
        raise LeaseRefused(session_id, current, until)


def unreadable(error: BaseException) -> str:
    """Why a row does not read, as the decoders' ``error`` says it, quoting no row."""
    if isinstance(error, json.JSONDecodeError):
        return f"a row is not JSON: {error.msg}, at character {error.pos}"
    return f"a row is not what agentlib writes ({type(error).__name__})"


@attrs.define
class Place:
    """Where a read is: what it reads (``"session X"``), and in which table."""

    what: str
    table: str = "sessions"


#: What each kind of write holds, as a refusal names it.
_KINDS: dict[type[Any], str] = {
    SessionRow: "session row (inputs, key)",
    TurnRow: "turns",
    EventRow: "events",
    EntryRow: "history entries",
    KeyRow: "idempotency keys",
    CallbackRow: "callbacks",
}


T = TypeVar("T")

#: What a store remembers of each lease it took: the owner (and, for some, an epoch).
Lease = TypeVar("Lease")


class QueuedStore(Store, Generic[Lease]):
    """A store whose writes queue up in the runtime's thread; a writer task commits all
    that is queued in one transaction (:meth:`_commit_group`), then acknowledges the group.
    Events and entries are serialized as they are written, in the runtime's thread, while the
    writer's thread spends its time in the database (which lets go of the GIL).

    A commit that fails leaves the store failed: it writes nothing more, lets go of the
    sessions it leased (:meth:`_let_go`), and every wait for it raises. A commit the fence
    refuses (:class:`LeaseLost`) is made again without the writes to the session taken over.
    A commit that raises anything else (a row the database cannot keep: text with a lone
    surrogate, say) is tried again one session at a time: the sessions whose rows are written
    are acknowledged; one whose rows are not is refused, now and for every later write (its
    rows would no longer follow one another), and each flush that waited for one of its
    writes raises a :class:`StoreError` naming it.
    """

    #: What the store is named by in messages (its file, its database).
    where: str
    #: What a failed commit raises: the store fails with it.
    _commit_errors: tuple[type[BaseException], ...] = (StoreError, LeaseLost)
    #: Whether the database keeps NUL in text.
    _keeps_nul = True
    #: The store's SQL (see ``_sql``).
    _statements: Statements
    #: What a failed store's message says to do.
    _after_failure = "check the database, then open a new runtime on it"

    def can_hold(self, text: str) -> bool:
        """Whether the database can keep ``text`` (an id, a key): one it cannot was never
        written, and reads as not found rather than as a failure."""
        if not self._keeps_nul and "\x00" in text:
            return False
        if text.isascii():
            return True
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate
            return False
        return True

    def _start_queue(self) -> None:
        self._queue: list[Op] = []
        self._payloads: list[Any] = []  # the rows of the queued events and entries, in order
        self._rows = EventRows()  # the writer's
        self._held: dict[str, Lease] = {}  # session id -> the lease this store took
        self._queued = 0  # writes made so far
        self._done = 0  # writes committed (or refused) so far
        # The sessions whose rows could not be written, and why (in words that quote none).
        self._unwritable: dict[str, str] = {}
        # The numbers of the writes refused (from 0, in the order written), with their
        # session: a flush that waited for one raises.
        self._refusals: list[tuple[int, str]] = []
        self._wake = trio.Event()
        self._progress = trio.Event()
        self._closing = False
        self.failure: BaseException | None = None
        self._stopped = trio.Event()

    def _reopen_queue(self, start_soon: Callable[..., Any]) -> None:
        """Make the queue ready again (the same object may be opened again after
        :meth:`aclose`), and start its writer task."""
        self._closing = False
        self.failure = None
        self._stopped = trio.Event()
        self._wake = trio.Event()
        self._progress = trio.Event()
        start_soon(self._write_loop)

    async def _close_queue(self) -> None:
        """Commit what was written (a failed store all the same), and end the writer."""
        with contextlib.suppress(StoreError):
            await self.flush()
        self._closing = True
        self._wake.set()
        await self._stopped.wait()

    @abc.abstractmethod
    def _lease_of_new_session(self, op: SessionRow) -> Lease:
        """What the store remembers of the lease a new session's row takes."""

    @abc.abstractmethod
    async def _commit_group(self, group: Sequence[Op], payloads: Sequence[Any]) -> None:
        """Commit the group in one transaction.

        Raises:
            LeaseLost: A session of the group was taken over: nothing was written.
            StoreError: The database failed: nothing was written.
        """

    @abc.abstractmethod
    async def _let_go(self, held: Mapping[str, Lease]) -> None:
        """End the leases the store holds, for a failed store: another runtime takes the
        sessions at once. Raises :class:`StoreError` if the database cannot (they expire
        by themselves then)."""

    @abc.abstractmethod
    def _free(self, leases: Sequence[tuple[str, str]]) -> None:
        """End the leases (session id, owner), in one transaction, in a worker thread; a
        session another owner holds now is left be."""

    @abc.abstractmethod
    async def _in_thread(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` in a worker thread; the driver's errors as
        :class:`StoreError`."""

    @abc.abstractmethod
    def _reading(self, what: str) -> AbstractContextManager[tuple[Any, Place]]:
        """A connection in one read transaction, for a read of ``what`` (``"session X"``),
        and the place the read says which table it is at; what the rows it reads raise
        becomes a :class:`StoreError` saying where."""

    @abc.abstractmethod
    def _damaged(self, place: Place, reason: str) -> StoreError:
        """The error saying that the store is damaged: ``place`` cannot be read."""

    def check(self) -> None:
        if isinstance(self.failure, LeaseLost):
            super().check()
        if self.failure is not None:  # said with the store's name
            raise StoreError(
                f"the store {self.where} could not commit ({self.failure}); what was not "
                f"acknowledged is lost: {self._after_failure}"
            ) from self.failure

    def damaged(self, session_id: str, table: str, reason: str) -> StoreError:
        return self._damaged(Place(f"session {session_id}", table), reason)

    async def load(self, session_id: str) -> StoredSession | None:
        if not self.can_hold(session_id):
            return None
        return await self._in_thread(self._load, session_id)

    def _load(self, session_id: str) -> StoredSession | None:
        with self._reading(f"session {session_id}") as (db, at):
            return read_session(db.execute, self._statements.reads, session_id, at, self._damaged)

    async def session_for_key(self, key: str) -> str | None:
        if not self.can_hold(key):
            return None

        def read() -> str | None:
            with self._reading("the session an idempotency key started") as (db, _):
                row = db.execute(self._statements.session_for_key, (key,)).fetchone()
            return None if row is None else str(row[0])

        return await self._in_thread(read)

    async def read_events(self, session_id: str, after: int, limit: int) -> list[Event]:
        if not self.can_hold(session_id):
            return []
        reads = self._statements.reads

        def read() -> list[Event]:
            with self._reading(f"session {session_id}") as (db, at):
                return read_event_page(
                    db.execute, reads, session_id, after, limit, at, self._damaged
                )

        return await self._in_thread(read)

    async def release(self, session_ids: Sequence[str], owner: str) -> None:
        for session_id in session_ids:
            self._held.pop(session_id, None)
        leases = [(session_id, owner) for session_id in session_ids if self.can_hold(session_id)]
        await self._in_thread(self._free, leases)

    def write(self, op: Op) -> None:
        self._queue.append(op)
        if isinstance(op, EventRow):
            self._payloads.append(self._rows.row(op.session_id, op.seq, op.event))
        elif isinstance(op, EntryRow):
            self._payloads.append(self._rows.entry_json(op.entry))
        elif isinstance(op, SessionRow) and op.lease is not None:
            self._held[op.session_id] = self._lease_of_new_session(op)
        self._queued += 1
        self._wake.set()

    async def flush(self) -> None:
        start, target = self._done, self._queued
        while self._done < target:
            self.check()
            if self._closing:
                raise StoreError(f"the store {self.where} is closed; open a new runtime on it")
            await self._progress.wait()
        refusals = self._refusals
        if refusals and refusals[-1][0] >= start:
            first = bisect.bisect_left(refusals, (start, ""))
            if first < len(refusals) and refusals[first][0] < target:
                raise self._refusal(refusals[first][1])

    def check_session(self, session_id: str) -> None:
        self.check()
        if session_id in self._unwritable:
            raise self._refusal(session_id)

    def _refusal(self, session_id: str) -> StoreError:
        # Without its cause: a driver's error may hold the rows it could not write.
        return StoreError(
            f"the store {self.where} could not write the rows of session {session_id} "
            f"({self._unwritable[session_id]}); what it wrote of the session before is kept, "
            "and nothing more of it is written: end the session, and start another without "
            "that text"
        )

    async def _commit_fenced(self, group: list[Op], payloads: list[Any]) -> list[Op]:
        """Commit the group, but for its writes to sessions another runtime took over
        (each refusal recorded, see :meth:`Store.taken_over`), and for those of sessions
        whose rows cannot be written (see :meth:`_commit_apart`); the writes committed."""
        if self._unwritable:
            return await self._commit_apart(group, payloads)
        while group:
            try:
                await self._commit_group(group, payloads)
            except LeaseLost as lost:
                self.refuse(lost)
                group, payloads = _without(group, payloads, lost.session_id)
            except self._commit_errors:
                raise
            except Exception:
                # A row of the group cannot be written: the others are.
                return await self._commit_apart(group, payloads)
            else:
                break
        return group

    async def _write_loop(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                if not self._queue:
                    if self._closing:
                        return
                    continue
                group, self._queue = self._queue, []
                payloads, self._payloads = self._payloads, []
                # A commit under way finishes even when the runtime is cancelled.
                with trio.CancelScope(shield=True):
                    written: Sequence[Op] = group
                    try:
                        written = await self._commit_fenced(group, payloads)
                    except self._commit_errors as error:
                        # Nothing more is written here: the next runtime to open these
                        # sessions (in this process or another) takes them at once. Then
                        # every wait for the store fails, with this cause; the runtime and
                        # its other tasks go on.
                        with contextlib.suppress(StoreError):  # they expire by themselves
                            await self._let_go(dict(self._held))
                        self.failure = error
                        self._progress.set()
                        self.committed(())
                        return
                self._done += len(group)
                self.committed(written)
                self._progress.set()
                self._progress = trio.Event()
                if self._closing and not self._queue:
                    return
        except BaseException as error:
            self.failure = error
            self._progress.set()
            raise
        finally:
            self._stopped.set()

    async def _commit_apart(self, group: Sequence[Op], payloads: Sequence[Any]) -> list[Op]:
        """Commit the group one session at a time (in the order of their first writes),
        refusing the writes of the sessions whose rows cannot be written, or were refused
        before, or whose parent session's were; returns the writes committed, in order.

        Raises:
            StoreError: As :meth:`_commit_group` (but :class:`LeaseLost`, recorded).
        """
        first = self._done  # the number of the group's first write
        apart: dict[str, tuple[list[int], list[Op], list[Any]]] = {}
        payload = iter(payloads)
        for number, op in enumerate(group, first):
            numbers, ops, rows = apart.setdefault(op.session_id, ([], [], []))
            numbers.append(number)
            ops.append(op)
            if isinstance(op, (EventRow, EntryRow)):
                rows.append(next(payload))
        written: set[int] = set()
        for session_id, (numbers, ops, rows) in apart.items():
            parents = {op.parent_id for op in ops if isinstance(op, SessionRow)}
            refused = next((p for p in parents if p in self._unwritable), None)
            if refused is not None:
                self._unwritable.setdefault(session_id, f"its parent session {refused} was refused")
            if session_id not in self._unwritable:
                try:
                    await self._commit_group(ops, rows)
                    written.update(numbers)
                    continue
                except LeaseLost as lost:  # taken over: not written, and not this store's
                    self.refuse(lost)
                    continue
                except self._commit_errors:
                    raise
                except Exception as error:
                    kinds = ", ".join(sorted({_KINDS.get(type(op), "other") for op in ops}))
                    # Its message may quote what could not be written: only its class is said.
                    self._unwritable[session_id] = (
                        f"{type(error).__name__} writing its {kinds}: the database cannot keep "
                        "what they hold, such as text with a lone surrogate or NUL"
                    )
            self._refusals.extend((number, session_id) for number in numbers)
        self._refusals.sort()
        return [op for number, op in enumerate(group, first) if number in written]


def _without(group: list[Op], payloads: list[Any], session_id: str) -> tuple[list[Op], list[Any]]:
    """The group's writes, and their payloads, but for those to ``session_id``."""
    kept: list[Op] = []
    kept_payloads: list[Any] = []
    payload = iter(payloads)
    for op in group:
        carried = next(payload) if isinstance(op, (EventRow, EntryRow)) else None
        if op.session_id == session_id:
            continue
        kept.append(op)
        if isinstance(op, (EventRow, EntryRow)):
            kept_payloads.append(carried)
    return kept, kept_payloads


def read_callback(
    session_id: str, callback: str, state: Any, answer: str | None, error: str | None
) -> CallbackRow:
    """A callback's row from its columns (JSON): an approval's answer as its class."""
    data = None if answer is None else json.loads(answer)
    if isinstance(data, dict) and data.get("type") in ("allow", "deny"):
        data = structure(data, AllowApproval if data["type"] == "allow" else DenyApproval)
    return CallbackRow(session_id, structure(json.loads(callback), Callback), state, data, error)


def check_turns_named(
    turns: Iterable[TurnRow],
    entries: Iterable[Entry],
    steers: Mapping[str, Sequence[Entry]],
    callbacks: Iterable[CallbackRow],
    keys: Iterable[KeyRow],
) -> str | None:
    """Why the rows of a session read back are damaged, if a row names a turn the session
    does not have (a turn's row that is gone would make a turn with a history, events or a
    key read as never started); None if each names one of its turns."""
    turn_ids = {turn.turn_id for turn in turns}
    for what, turn_id in (
        *((f"entry {entry.id}", entry.turn_id) for entry in entries),
        *((f"steered message {m.id}", m.turn_id) for s in steers.values() for m in s),
        *((f"callback {row.callback.id}", row.callback.turn_id) for row in callbacks),
        *((f"idempotency key {i}", key.turn_id) for i, key in enumerate(keys, 1)),
    ):
        if turn_id is not None and turn_id not in turn_ids:
            return f"turn {turn_id}, of its {what}, is missing"
    return None


Execute = Callable[[str, tuple[Any, ...]], Iterable[Any]]
Damaged = Callable[[Place, str], StoreError]


def read_session(
    execute: Execute, reads: Reads, session_id: str, at: Place, damaged: Damaged
) -> StoredSession | None:
    """The session as its rows give it back, each table read with ``execute`` in one read
    transaction; None if it has no row (and no other).

    Raises:
        StoreError: Rows are missing (``damaged`` says which, at ``at``), or do not read.
    """
    row = _first(execute(reads.session, (session_id,)))
    if row is None:
        check_none_left(execute, reads, session_id, at, damaged)
        return None
    agent, parent_id, parent_turn_id, key, inputs, terminated, first_seq, last_seq, last_idx = row
    inputs = json.loads(inputs)
    if parent_id is not None and not _has(execute, reads, "sessions", parent_id):
        raise damaged(at, f"the row of its parent session {parent_id} is missing")
    at.table = "events"
    _check_events(execute, reads, session_id, first_seq, last_seq, at, damaged)
    at.table = "entries"
    read_entry = EventRows().entry
    entries: list[Entry] = []
    for index, data in execute(reads.entries, (session_id,)):
        if index != len(entries):
            break
        entries.append(read_entry(data))
    if len(entries) != last_idx + 1:
        held = f"the first {len(entries)} only" if entries else "none"
        raise damaged(
            at, f"entries are missing: its history has {last_idx + 1}, the table holds {held}"
        )
    at.table = "turns"
    turns = []
    steps = {}
    for turn_id, turn_first, output_type, record, step in execute(reads.turns, (session_id,)):
        recorded = None if record is None else structure(json.loads(record), TurnState)
        turns.append(TurnRow(session_id, turn_id, turn_first, output_type, recorded))
        if step is not None:
            steps[turn_id] = json.loads(step)
    at.table = "steers"
    steers: dict[str, list[Entry]] = {}
    for turn_id, data in execute(reads.steers, (session_id,)):
        steers.setdefault(turn_id, []).append(read_entry(data))
    at.table = "callbacks"
    callbacks = [read_callback(session_id, *row) for row in execute(reads.callbacks, (session_id,))]
    at.table = "keys"
    keys = [
        KeyRow(session_id, key, turn_id, fingerprint)
        for key, turn_id, fingerprint in execute(reads.keys, (session_id,))
    ]
    at.table = "turns"
    wrong = check_turns_named(turns, entries, steers, callbacks, keys)
    if wrong is not None:
        raise damaged(at, wrong)
    at.table = "sessions"
    children = [child for (child,) in execute(reads.children, (session_id,))]
    return StoredSession(
        row=SessionRow(session_id, agent, parent_id, parent_turn_id, key, inputs, bool(terminated)),
        first_seq=first_seq,
        last_seq=last_seq,
        entries=entries,
        turns=turns,
        steps=steps,
        steers=steers,
        callbacks=callbacks,
        keys=keys,
        children=children,
    )


def read_event_page(
    execute: Execute,
    reads: Reads,
    session_id: str,
    after: int,
    limit: int,
    at: Place,
    damaged: Damaged,
) -> list[Event]:
    """Up to ``limit`` of the session's events after seq ``after``, read with ``execute``
    in one read transaction (see :meth:`Store.read_events`).

    Raises:
        StoreError: Events are missing (``damaged`` says which, at ``at``), or do not read.
    """
    recorded = _first(execute(reads.bounds, (session_id,)))
    if recorded is None:
        check_none_left(execute, reads, session_id, at, damaged)
        return []
    first_seq, last_seq = recorded
    # Pruned events are gone; every later one up to the last is there.
    start = max(after + 1, first_seq)
    end = min(start + limit, last_seq + 1)  # the seq after the page's last
    if end <= start:
        return []
    at.table = "events"
    found = list(execute(reads.event_page, (session_id, start, end)))
    if len(found) != end - start:  # seqs are unique: none is missing, or some
        missing = next(
            (seq for seq, event in enumerate(found, start) if event[0] != seq),
            start + len(found),
        )
        raise damaged(at, f"event {missing} is missing, and events up to {last_seq} were written")
    return EventRows().events(session_id, found)


def _first(rows: Iterable[Any]) -> Any:
    return next(iter(rows), None)


def _has(execute: Execute, reads: Reads, table: str, session_id: str) -> bool:
    return _first(execute(reads.has.replace("{table}", table), (session_id,))) is not None


def check_none_left(
    execute: Execute, reads: Reads, session_id: str, at: Place, damaged: Damaged
) -> None:
    """Raises:
    StoreError: The session has no row, yet rows of it are left in other tables: its row is
        missing, not the session.
    """
    for table in ("events", "entries", "turns"):
        if _has(execute, reads, table, session_id):
            at.table = "sessions"
            raise damaged(at, f"its row is missing, and table {table} has rows of it")


def _check_events(
    execute: Execute,
    reads: Reads,
    session_id: str,
    first_seq: int,
    last_seq: int,
    at: Place,
    damaged: Damaged,
) -> None:
    """Raises:
    StoreError: The first or last of the session's events, as recorded, is missing, or the
        table holds events after the last one recorded.
    """
    # Each is one step down the table's index; a gap between them shows once read.
    (low,) = _first(execute(reads.first_event, (session_id,)))
    (high,) = _first(execute(reads.last_event, (session_id,)))
    recorded = "none" if last_seq < first_seq else f"{first_seq} to {last_seq}"
    found = "none" if low is None else f"{low} to {high}"
    if high is not None and high > last_seq:
        raise damaged(
            at,
            f"the table holds events after the last one recorded ({found}, against "
            f"{recorded}): a process of an older agentlib may still write to this "
            f"{reads.kept_in}. Stop it: every process on a {reads.kept_in} must run the same "
            "agentlib",
        )
    if recorded != found:
        raise damaged(
            at, f"events are missing: {recorded} were written, and the table holds {found}"
        )
