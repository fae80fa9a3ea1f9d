"""The SQLite store: one file, WAL mode, one writer task committing writes in groups.

Writes queue up in the runtime's thread; the writer task commits everything queued in one
transaction, in a worker thread, then acknowledges the group. Reads run in worker threads on
their own connection, so the trio loop never waits on the disk.

Each lease records the host and the process holding it (``_holder``): a lease whose process,
on this host, has ended is taken at once. A store that can no longer commit lets its leases
go. Each session's row records the seq of its last event and the index of its last history
entry in the commit that writes them: a read that finds fewer rows raises :class:`StoreError`,
as does any row that cannot be read, naming the file, the session and the table.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import trio

from .._data._convert import structure
from .._data._errors import StoreSchemaError
from .._data._events import Event
from .._trio._threads import run_in_thread
from ._base import (
    EventRow,
    LeaseLost,
    Op,
    SessionRow,
    StoreError,
)
from ._holder import Holder, this_process
from ._queued import (
    UNREADABLE,
    Place,
    QueuedStore,
    check_leasable,
    unreadable,
)
from ._rows import EventRows
from ._sql import LEASE, Dialect, Statements, write_group

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

T = TypeVar("T")

#: The version of the tables this agentlib writes; a file written by a newer one is refused,
#: one written by an older one is brought up to date when it is opened.
SCHEMA_VERSION = 3

_SCHEMA = """
CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    parent_id TEXT,
    parent_turn_id TEXT,
    idempotency_key TEXT UNIQUE,
    inputs TEXT NOT NULL,
    terminated INTEGER NOT NULL DEFAULT 0,
    first_seq INTEGER NOT NULL DEFAULT 1,
    last_seq INTEGER NOT NULL DEFAULT 0,
    last_idx INTEGER NOT NULL DEFAULT -1,
    lease_owner TEXT,
    lease_until REAL,
    lease_host TEXT,
    lease_pid INTEGER,
    lease_started INTEGER
);
CREATE INDEX sessions_by_parent ON sessions (parent_id);
CREATE TABLE events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    turn_id TEXT,
    id TEXT,
    data TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE entries (
    session_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (session_id, idx)
) WITHOUT ROWID;
CREATE TABLE turns (
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    output_type TEXT,
    record TEXT,
    step TEXT,
    PRIMARY KEY (session_id, turn_id)
) WITHOUT ROWID;
CREATE TABLE steers (
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX steers_by_session ON steers (session_id);
CREATE TABLE callbacks (
    session_id TEXT NOT NULL,
    callback_id TEXT NOT NULL,
    callback TEXT NOT NULL,
    state TEXT NOT NULL,
    answer TEXT,
    error TEXT,
    PRIMARY KEY (session_id, callback_id)
);
CREATE TABLE keys (
    session_id TEXT NOT NULL,
    key TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    PRIMARY KEY (session_id, key)
) WITHOUT ROWID;
"""


_SQL = Statements(Dialect(placeholder="?", greatest="max", least="min", kept_in="file"))
_LEASE = f"UPDATE sessions SET {', '.join(f'{c} = ?' for c in LEASE)} WHERE session_id = ?"


#: What reading rows this store did not write as they are raises: SQLite's errors (a damaged
#: page), and the decoders' (a row that is not JSON, or not JSON of the shape written).
_UNREADABLE: tuple[type[BaseException], ...] = (sqlite3.Error, *UNREADABLE)


def _damage(error: sqlite3.Error) -> bool:
    """Whether SQLite says the file is damaged (or is no database), rather than that it
    cannot do something now (a lock, a failing disk, a closed connection)."""
    return isinstance(error, sqlite3.DatabaseError) and not isinstance(
        error, (sqlite3.OperationalError, sqlite3.ProgrammingError)
    )


class SQLiteStore(QueuedStore[str]):
    """Sessions in a SQLite file (created on first open).

    Args:
        path: The database file.
        clock: The wall clock leases are measured on (seconds).
    """

    _commit_errors = (sqlite3.Error, LeaseLost)
    _statements = _SQL
    _after_failure = "check the disk, then open a new runtime on the file"

    def __init__(self, path: str, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.where = path
        self._clock = clock
        self._start_queue()
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()

    # -- opening and closing ---------------------------------------------------------------

    async def open(self, start_soon: Callable[..., Any]) -> None:
        await self._in_thread(self._open_files)
        self._reopen_queue(start_soon)

    def _connect(self, *, wait: float = 30.0) -> sqlite3.Connection:
        """A connection that waits up to ``wait`` seconds for another's lock."""
        connection = sqlite3.connect(
            self.path, timeout=wait, isolation_level=None, check_same_thread=False
        )
        connection.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
        return connection

    def _open_files(self) -> None:
        directory = os.path.dirname(self.path) or "."
        if not os.path.isdir(directory):  # else SQLite says only "unable to open database file"
            missing = "is not a directory" if os.path.exists(directory) else "does not exist"
            raise StoreError(
                f"the store {self.path} cannot be created: the directory {directory} {missing}; "
                "create it first, or give a file in a directory that exists"
            )
        writer = self._connect()
        writer.execute("PRAGMA journal_mode = WAL")
        writer.execute("PRAGMA synchronous = FULL")  # each commit is on disk: acknowledged
        writer.execute("PRAGMA cache_size = -65536")
        writer.execute("PRAGMA wal_autocheckpoint = 10000")
        writer.execute("BEGIN IMMEDIATE")
        try:
            version = writer.execute("PRAGMA user_version").fetchone()[0]
            tables = writer.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if version == 0 and tables == 0:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        writer.execute(statement)
                writer.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif version in (1, 2):
                if version == 1:
                    _events_from_version_1(writer)
                _sessions_from_version_2(writer)
                writer.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif version > SCHEMA_VERSION:
                raise StoreSchemaError(
                    f"{self.path} holds sessions in schema version {version}, written by a "
                    f"newer agentlib; this one reads up to version {SCHEMA_VERSION}: upgrade "
                    "agentlib to open it"
                )
            elif version != SCHEMA_VERSION:
                raise StoreSchemaError(
                    f"{self.path} is not an agentlib store (schema version {version}, "
                    f"{tables} tables); give open_runtime another file"
                )
            writer.execute("COMMIT")
        except BaseException:
            writer.execute("ROLLBACK")
            writer.close()
            raise
        self._writer = writer
        self._reader = self._connect()

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self._close_queue()
            await run_in_thread(self._close_files)

    def _close_files(self) -> None:
        with self._read_lock:  # no read is under way on the reader, nor starts
            for connection in (self._writer, self._reader):
                if connection is not None:
                    connection.close()
            self._writer = self._reader = None

    # -- writing ---------------------------------------------------------------------------

    def _lease_of_new_session(self, op: SessionRow) -> str:
        assert op.lease is not None
        return op.lease[0]  # a new session, leased as it is made

    async def _commit_group(self, group: Sequence[Op], payloads: Sequence[Any]) -> None:
        await run_in_thread(self._commit, group, payloads)

    async def _let_go(self, held: Mapping[str, str]) -> None:
        await run_in_thread(self._free, list(held.items()), 1.0)

    def _commit(self, group: Sequence[Op], payloads: Sequence[Any]) -> None:
        writer = self._writer
        assert writer is not None
        writer.execute("BEGIN IMMEDIATE")
        try:
            self._fence(writer, group)
            write_group(writer, _SQL, group, payloads, self._lease_columns)
            writer.execute("COMMIT")
        except BaseException:
            if writer.in_transaction:  # SQLite may have rolled back already (a full disk)
                writer.execute("ROLLBACK")
            raise

    def _fence(self, db: sqlite3.Connection, group: Sequence[Op]) -> None:
        """Raises:
        LeaseLost: Another runtime took over a session of the group (this one stalled past
        its lease): nothing of the group is written.
        """
        held = self._held
        if not held:
            return
        touched = list({op.session_id for op in group if op.session_id in held})
        for session_id, holder in _owners(db, touched):
            if holder != held.get(session_id):
                raise LeaseLost(session_id, holder, store=str(self.path))

    def _lease_columns(self, op: SessionRow) -> tuple[Any, ...]:
        if op.lease is None:
            return (None,) * len(_SQL.lease_columns)
        return _lease(op.lease[0], self._clock() + op.lease[1], this_process())

    # -- reading ---------------------------------------------------------------------------

    async def _in_thread(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` in a worker thread; SQLite's errors as :class:`StoreError`."""
        try:
            return await run_in_thread(function, *args)
        except sqlite3.Error as error:
            raise StoreError(f"the store {self.path} failed: {error}") from error

    @contextmanager
    def _reading(self, what: str) -> Iterator[tuple[sqlite3.Connection, Place]]:
        """The reader, in one read transaction, for a read of ``what`` (``"session X"``);
        the read says which table it is at in the place it gets. What the rows it reads
        raise becomes a :class:`StoreError` saying where."""
        place = Place(what)
        with self._read_lock:
            reader = self._reader
            if reader is None:
                raise StoreError(f"the store {self.path} is closed; open a new runtime on it")
            try:
                reader.execute("BEGIN")
                yield reader, place
                reader.execute("COMMIT")
            except BaseException as error:
                if reader.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        reader.execute("ROLLBACK")
                if isinstance(error, _UNREADABLE) and not isinstance(error, StoreError):
                    raise self._unreadable(place, error) from error
                raise

    def _unreadable(self, place: Place, error: BaseException) -> StoreError:
        """The error saying that ``place`` could not be read, because of ``error``. It
        never quotes the rows: they may hold a session's inputs."""
        if isinstance(error, sqlite3.Error) and not _damage(error):
            return StoreError(
                f"the store {self.path} failed on {place.what}, in table {place.table} "
                f"({error}); check the disk, then try again"
            )
        # SQLite's own words quote no row.
        return self._damaged(
            place, str(error) if isinstance(error, sqlite3.Error) else unreadable(error)
        )

    def _damaged(self, place: Place, reason: str) -> StoreError:
        return StoreError(
            f"the store {self.path} is damaged: {place.what} cannot be read from table "
            f"{place.table} ({reason}). Restore the file from a backup; `sqlite3 {self.path} "
            "'PRAGMA integrity_check'` tells what SQLite finds wrong with it"
        )

    # -- leases ----------------------------------------------------------------------------

    async def acquire(self, session_ids: Sequence[str], owner: str, seconds: float) -> None:
        self.check()  # a store that can no longer commit takes no lease
        session_ids = [s for s in session_ids if self.can_hold(s)]  # never stored

        def lease() -> None:
            now = self._clock()
            with self._leasing(session_ids) as db:
                for session_id in session_ids:
                    row = db.execute(
                        "SELECT lease_owner, lease_until, lease_host, lease_pid, lease_started"
                        " FROM sessions WHERE session_id = ?",
                        (session_id,),
                    ).fetchone()
                    if row is not None:
                        check_leasable(session_id, row, owner, now)
                lease = _lease(owner, now + seconds, this_process())
                db.executemany(_LEASE, [(*lease, session_id) for session_id in session_ids])
            for session_id in session_ids:
                self._held[session_id] = owner

        await self.flush()  # a new session's row must be there to hold its lease
        await self._in_thread(lease)

    async def renew(self, session_ids: Sequence[str], owner: str, seconds: float) -> list[str]:
        self.check()  # a store that writes nothing more let its leases go, and keeps none
        session_ids = [s for s in session_ids if self.can_hold(s)]  # never stored: skipped

        def lease() -> list[str]:
            now = self._clock()
            with self._leasing(session_ids) as db:
                lost = [
                    session_id
                    for session_id, holder in _owners(db, session_ids)
                    if holder != owner  # taken over, and maybe let go since
                ]
                taken = set(lost)
                lease = _lease(owner, now + seconds, this_process())
                db.executemany(
                    _LEASE,
                    [(*lease, session_id) for session_id in session_ids if session_id not in taken],
                )
            return lost  # still in _held, under this owner: the fence refuses their writes

        return await self._in_thread(lease)

    @contextmanager
    def _leasing(
        self, session_ids: Sequence[str], *, wait: float = 30.0
    ) -> Iterator[sqlite3.Connection]:
        """A connection of its own, in one immediate transaction, committed if the block
        ends well: where the leases of ``session_ids`` are taken, renewed and released.
        SQLite's errors become a :class:`StoreError` saying where."""
        try:
            db = self._connect(wait=wait)
            try:
                db.execute("BEGIN IMMEDIATE")
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # SQLite may have rolled back already (a full disk)
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise
            finally:
                db.close()
        except sqlite3.Error as error:
            raise self._unreadable(Place(_naming(session_ids)), error) from error

    def _free(self, leases: Sequence[tuple[str, str]], wait: float = 30.0) -> None:
        """End the leases (session id, owner), in one transaction on a connection of its
        own; a session another owner holds now is left be."""
        if not leases:
            return
        with self._leasing([session_id for session_id, _ in leases], wait=wait) as db:
            db.executemany(_SQL.free, leases)


def _events_from_version_1(db: sqlite3.Connection) -> None:
    """Version 1 kept each event whole, as JSON, in one column: lay them out as version 2
    does (see ``_rows``). Runs in the opening transaction: all of it, or none."""
    db.execute("ALTER TABLE events RENAME TO events_1")
    events_table = _SCHEMA[_SCHEMA.index("CREATE TABLE events") :]
    db.execute(events_table[: events_table.index(";")])
    rows = EventRows()
    old = db.execute("SELECT session_id, seq, data FROM events_1 ORDER BY session_id, seq")
    db.executemany(
        _SQL.insert[EventRow],
        (
            rows.row(session_id, seq, structure(json.loads(data), Event))
            for session_id, seq, data in old
        ),
    )
    db.execute("DROP TABLE events_1")


def _sessions_from_version_2(db: sqlite3.Connection) -> None:
    """Version 3 records each session's last event and history entry, and who holds its
    lease: add the columns, and record what the file holds. Runs in the opening
    transaction."""
    for column in (
        "last_seq INTEGER NOT NULL DEFAULT 0",
        "last_idx INTEGER NOT NULL DEFAULT -1",
        "lease_host TEXT",
        "lease_pid INTEGER",
        "lease_started INTEGER",
    ):
        db.execute(f"ALTER TABLE sessions ADD COLUMN {column}")
    db.execute(
        "UPDATE sessions SET"
        " last_seq = coalesce((SELECT max(seq) FROM events"
        " WHERE events.session_id = sessions.session_id), first_seq - 1),"
        " last_idx = coalesce((SELECT max(idx) FROM entries"
        " WHERE entries.session_id = sessions.session_id), -1)"
    )


def _lease(owner: str, until: float, holder: Holder) -> tuple[Any, ...]:
    """The lease columns, from lease_owner to lease_started."""
    return (owner, until, holder.host, holder.pid, holder.started)


def _naming(session_ids: Sequence[str]) -> str:
    """``"session X"``, or ``"sessions X, Y and 3 more"``."""
    if len(session_ids) == 1:
        return f"session {session_ids[0]}"
    more = f" and {len(session_ids) - 2} more" if len(session_ids) > 2 else ""
    return f"sessions {', '.join(session_ids[:2])}{more}"


def _owners(db: sqlite3.Connection, session_ids: Sequence[str]) -> list[tuple[str, str | None]]:
    """(session id, lease owner) of each of the sessions the store has."""
    found: list[tuple[str, str | None]] = []
    for start in range(0, len(session_ids), 500):  # SQLite allows 999 parameters at least
        chunk = session_ids[start : start + 500]
        found += db.execute(
            "SELECT session_id, lease_owner FROM sessions"
            f" WHERE session_id IN ({', '.join('?' * len(chunk))})",
            chunk,
        ).fetchall()
    return found
