"""The SQL of the SQLite and PostgreSQL stores, written once.

:data:`ROWS` says how each kind of op row is written: its table, its columns, how its values
are encoded, and what a later row of the same key changes. :class:`Statements` makes a
store's SQL text from it in the store's :class:`Dialect` (its placeholders, where its tables
live, the names of its functions), and :func:`write_group` writes a group of op rows with
it. The tables themselves, their types and their versions, are each store's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from .._data._convert import unstructure
from ._base import (
    CallbackRow,
    EntryRow,
    EventRow,
    KeyRow,
    Op,
    PruneRow,
    SessionRow,
    SteerRow,
    StepRow,
    TurnRow,
)

__all__ = [
    "LEASE",
    "ROWS",
    "Cursor",
    "Dialect",
    "Reads",
    "RowKind",
    "Statements",
    "dump",
    "write_group",
]


def dump(value: Any) -> str:
    """A value as a store keeps it: its converter JSON, compact."""
    return json.dumps(unstructure(value), separators=(",", ":"), ensure_ascii=False)


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


@attrs.frozen(kw_only=True)
class RowKind:
    """How one kind of op row is written: an INSERT into ``table`` of ``columns``.

    Attributes:
        table: The table its rows go to.
        columns: The columns it writes (a session's row writes its lease's after them).
        values: The values of ``columns``, from an op row; None for events and entries,
            whose rows are serialized as they are written (see ``QueuedStore.write``).
        key: The columns of its key, when a later row of the same key changes the first.
        updates: The columns such a later row sets.
        if_claimed: What its INSERT says besides where other runtimes claim callbacks
            (``Dialect.claims``): a claim writes in another runtime's transaction, which
            the holder's later writes leave be.
    """

    table: str
    columns: tuple[str, ...] = attrs.field(converter=_names)
    values: Callable[[Any], tuple[Any, ...]] | None
    key: tuple[str, ...] = attrs.field(default="", converter=_names)
    updates: tuple[str, ...] = attrs.field(default="", converter=_names)
    if_claimed: str = ""


def _absent(value: Any) -> str | None:
    return None if value is None else dump(value)


#: How each kind of op row that is inserted is written (a step and a prune change rows:
#: see :class:`Statements`).
ROWS: Mapping[type[Any], RowKind] = {
    SessionRow: RowKind(
        table="sessions",
        columns="session_id agent parent_id parent_turn_id idempotency_key inputs terminated",
        values=lambda op: (
            *(op.session_id, op.agent, op.parent_id, op.parent_turn_id, op.idempotency_key),
            json.dumps(op.inputs),
            op.terminated,  # a bool: SQLite keeps it as 0 or 1
        ),
        key="session_id",
        updates="terminated",
    ),
    EventRow: RowKind(table="events", columns="session_id seq type turn_id id data", values=None),
    EntryRow: RowKind(table="entries", columns="session_id idx data", values=None),
    TurnRow: RowKind(
        table="turns",
        columns="session_id turn_id first_seq output_type record",
        values=lambda op: (
            *(op.session_id, op.turn_id, op.first_seq, op.output_type),
            _absent(op.record),
        ),
        key="session_id turn_id",
        updates="record",
    ),
    SteerRow: RowKind(
        table="steers",
        columns="session_id turn_id data",
        values=lambda op: (op.session_id, op.turn_id, dump(op.message)),
    ),
    CallbackRow: RowKind(
        table="callbacks",
        columns="session_id callback_id callback state answer error",
        values=lambda op: (
            *(op.session_id, op.callback.id, dump(op.callback), op.state),
            None if op.state == "open" else json.dumps(unstructure(op.answer)),
            op.error,
        ),
        key="session_id callback_id",
        updates="state answer error",
        # Settled is settled: a claim through another runtime may have won.
        if_claimed=" WHERE {table}.state = 'open'",
    ),
    KeyRow: RowKind(
        table="keys",
        columns="session_id key turn_id fingerprint",
        values=lambda op: (op.session_id, op.key, op.turn_id, op.fingerprint),
        # An answer's key may be there already: its claim wrote it.
        if_claimed=" ON CONFLICT DO NOTHING",
    ),
}

#: The columns of a session's row that hold its lease, from its owner to its holder's start
#: (a store that counts epochs has ``lease_epoch`` after ``lease_until``).
LEASE = ("lease_owner", "lease_until", "lease_host", "lease_pid", "lease_started")


@attrs.frozen(kw_only=True)
class Dialect:
    """What a store's SQL text differs in.

    Attributes:
        placeholder: Its driver's placeholder (``"?"``, ``"%s"``).
        tables: What its tables' names start with (``""``, ``"agentlib."``).
        greatest: Its function giving the greater of two values.
        least: Its function giving the lesser of two values.
        written: The column its steers and callbacks are in the order written by.
        sessions_written: The column its sessions are in the order written by.
        lease_epoch: Whether a session's row counts its lease's epochs (``lease_epoch``).
        claims: Whether other runtimes claim callbacks (see :attr:`RowKind.if_claimed`).
        kept_in: What its processes share, as its messages name it (``"file"``).
    """

    placeholder: str
    tables: str = ""
    greatest: str
    least: str
    written: str = "rowid"
    sessions_written: str = "rowid"
    lease_epoch: bool = False
    claims: bool = False
    kept_in: str


class Cursor(Protocol):
    """What writes SQL: a sqlite3 connection, a psycopg cursor."""

    def execute(self, statement: str, values: Sequence[Any], /) -> Any: ...

    def executemany(self, statement: str, values: Iterable[Sequence[Any]], /) -> Any: ...


@attrs.frozen
class Reads:
    """The SQL of a store's reads of one session, each with one parameter, the session's id
    (``event_page`` has three), in its driver's placeholder style; ``has`` names its table
    ``{table}``. Rows come in the order each names."""

    session: str  # agent, parent_id, parent_turn_id, idempotency_key, inputs, terminated,
    # first_seq, last_seq, last_idx
    bounds: str  # first_seq, last_seq
    event_page: str  # seq, type, turn_id, id, data: from a seq to one before another, by seq
    has: str  # 1, for a session that has a row in {table}
    first_event: str  # min(seq)
    last_event: str  # max(seq)
    entries: str  # idx, data: by idx
    turns: str  # turn_id, first_seq, output_type, record, step: by first_seq
    steers: str  # turn_id, data: as written
    callbacks: str  # callback, state, answer, error: as opened
    keys: str  # key, turn_id, fingerprint
    children: str  # session_id: as written
    #: What the store's processes share, as its messages name it ("file", "database").
    kept_in: str = "store"


class Statements:
    """A store's SQL text, in its dialect.

    Attributes:
        dialect: The store's dialect.
        insert: The INSERT of each kind of op row of :data:`ROWS`.
        set_step: Sets a turn's step (step, session id, turn id).
        prune: Deletes a session's events before a seq (session id, seq), then moves its
            first seq there (seq, session id).
        record_last: Records a session's last event and entry written (seq, idx, session
            id), in the transaction that writes them: a read that finds fewer rows knows
            that the store lost some.
        free: Ends a session's lease, if its owner still holds it (session id, owner).
        session_for_key: The session an idempotency key started (key).
        reads: The reads of one session.
        lease_columns: The columns of a session's row that hold its lease.
    """

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        t, p = dialect.tables, dialect.placeholder
        self.lease_columns: tuple[str, ...] = LEASE
        if dialect.lease_epoch:
            self.lease_columns = (*LEASE[:2], "lease_epoch", *LEASE[2:])
        self.insert: dict[type[Any], str] = {op: self._insert(op) for op in ROWS}
        self.set_step = f"UPDATE {t}turns SET step = {p} WHERE session_id = {p} AND turn_id = {p}"
        self.prune = (
            f"DELETE FROM {t}events WHERE session_id = {p} AND seq < {p}",
            f"UPDATE {t}sessions SET first_seq = {dialect.greatest}(first_seq,"
            f" {dialect.least}({p}, last_seq + 1)) WHERE session_id = {p}",
        )
        self.record_last = (
            f"UPDATE {t}sessions SET last_seq = {dialect.greatest}(last_seq, {p}),"
            f" last_idx = {dialect.greatest}(last_idx, {p}) WHERE session_id = {p}"
        )
        self.free = (
            f"UPDATE {t}sessions SET {', '.join(f'{c} = NULL' for c in LEASE)}"
            f" WHERE session_id = {p} AND lease_owner = {p}"
        )
        self.session_for_key = f"SELECT session_id FROM {t}sessions WHERE idempotency_key = {p}"
        where = f"WHERE session_id = {p}"
        events = f"SELECT seq, type, turn_id, id, data FROM {t}events {where}"
        self.reads = Reads(
            session="SELECT agent, parent_id, parent_turn_id, idempotency_key, inputs,"
            f" terminated, first_seq, last_seq, last_idx FROM {t}sessions {where}",
            bounds=f"SELECT first_seq, last_seq FROM {t}sessions {where}",
            event_page=f"{events} AND seq >= {p} AND seq < {p} ORDER BY seq",
            has=f"SELECT 1 FROM {t}{{table}} {where} LIMIT 1",
            first_event=f"SELECT min(seq) FROM {t}events {where}",
            last_event=f"SELECT max(seq) FROM {t}events {where}",
            entries=f"SELECT idx, data FROM {t}entries {where} ORDER BY idx",
            turns=f"SELECT turn_id, first_seq, output_type, record, step FROM {t}turns {where}"
            " ORDER BY first_seq",
            steers=f"SELECT turn_id, data FROM {t}steers {where} ORDER BY {dialect.written}",
            callbacks=f"SELECT callback, state, answer, error FROM {t}callbacks {where}"
            f" ORDER BY {dialect.written}",
            keys=f"SELECT key, turn_id, fingerprint FROM {t}keys {where}",
            children=f"SELECT session_id FROM {t}sessions WHERE parent_id = {p}"
            f" ORDER BY {dialect.sessions_written}",
            kept_in=dialect.kept_in,
        )

    def _insert(self, op: type[Any]) -> str:
        kind, dialect = ROWS[op], self.dialect
        table = dialect.tables + kind.table
        columns = kind.columns + (self.lease_columns if op is SessionRow else ())
        statement = (
            f"INSERT INTO {table} ({', '.join(columns)})"
            f" VALUES ({', '.join([dialect.placeholder] * len(columns))})"
        )
        if kind.key:
            statement += f" ON CONFLICT ({', '.join(kind.key)}) DO UPDATE SET " + ", ".join(
                f"{column} = excluded.{column}" for column in kind.updates
            )
        if dialect.claims:
            statement += kind.if_claimed.replace("{table}", table)
        return statement


def write_group(
    db: Cursor,
    sql: Statements,
    group: Sequence[Op],
    payloads: Sequence[Any],
    lease: Callable[[SessionRow], tuple[Any, ...]],
) -> None:
    """Write the group's op rows with ``db``, in the transaction the caller holds;
    ``payloads`` are the rows of its events and entries, in order, and ``lease`` gives the
    lease columns of a session's row."""
    events: list[Any] = []  # runs of events go in one executemany
    last: dict[str, list[int]] = {}  # session id -> [last seq, last idx] written
    payload = iter(payloads)
    insert = sql.insert
    for op in group:
        if isinstance(op, EventRow):
            events.append(next(payload))
            last.setdefault(op.session_id, [0, -1])[0] = op.seq
            continue
        if events:
            db.executemany(insert[EventRow], events)
            events.clear()
        if isinstance(op, EntryRow):
            db.execute(insert[EntryRow], (op.session_id, op.index, next(payload)))
            written = last.setdefault(op.session_id, [0, -1])
            written[1] = max(written[1], op.index)
        elif isinstance(op, StepRow):
            db.execute(sql.set_step, (_absent(op.step), op.session_id, op.turn_id))
        elif isinstance(op, PruneRow):
            _record_last(db, sql, last)  # the prune reads the last seq
            delete, move_first = sql.prune
            db.execute(delete, (op.session_id, op.before_seq))
            db.execute(move_first, (op.before_seq, op.session_id))
        elif isinstance(op, SessionRow):
            values = ROWS[SessionRow].values
            assert values is not None
            db.execute(insert[SessionRow], (*values(op), *lease(op)))
        else:
            values = ROWS[type(op)].values
            assert values is not None
            db.execute(insert[type(op)], values(op))
    if events:
        db.executemany(insert[EventRow], events)
    _record_last(db, sql, last)


def _record_last(db: Cursor, sql: Statements, last: dict[str, list[int]]) -> None:
    """Record the last seq and idx written of each session (and forget them)."""
    if last:
        db.executemany(sql.record_last, [(seq, idx, s) for s, (seq, idx) in last.items()])
        last.clear()
