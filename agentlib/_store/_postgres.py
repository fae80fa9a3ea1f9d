"""The PostgreSQL store: sessions in one database, shared by several runtime processes.

psycopg's async API runs on asyncio only; this store uses its blocking API, through trio
worker threads: at most ``pool_size`` at once (a :class:`trio.CapacityLimiter`), each with a
connection of a :class:`psycopg_pool.ConnectionPool` of that size.

Writes queue up in the runtime's thread; the writer task commits everything queued in one
transaction, then acknowledges the group, as the SQLite store does. The tables live in a
schema of their own (``agentlib`` by default), created and brought up to date by versioned
migrations when the store opens, under an advisory lock, so that several processes opening
one database at once migrate it once.

**Leases and fencing.** Each session's row holds its lease: the owner, until when (on the
store's clock), the process holding it, and an epoch bumped whenever the session is leased
to an owner other than the one holding it. The store remembers the epoch of each lease it
took; every commit first locks the row of each session it writes to that this store
leased (a takeover waits for the commit), and goes on only where the lease is still that
owner's at that epoch: a runtime that stalled past its lease while another took the session
over has its late write refused (:class:`LeaseLost`): the transaction is rolled back, and the
group committed again without the writes to that session. A lease whose holder is a process
of this host that has ended is taken at once; any other, once it expires.

**Following other runtimes.** Several runtimes share the database: a reader of a session that
another runtime holds follows its events as they are committed there. Each commit notifies
(``NOTIFY``, in its transaction) the sessions it appended events to; one thread per store
object listens, on a connection of its own, from the first wait on; and a wait reads the
session's progress every :data:`POLL_SECONDS` too, since a notification may be lost.

**Requests.** A runtime asked to change a session another holds keeps a request in the
``requests`` table (and notifies it); the holder finds the requests for the sessions it
leases, and writes its reply there (notified too), which the sender reads and deletes.
Times are the database's (``now()``), so that hosts whose clocks differ agree on them.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from .._callbacks import Callback
from .._convert import structure, unstructure
from .._errors import StoreSchemaError
from .._events import Event
from .._threads import run_in_thread
from ._base import (
    CallbackRow,
    EntryRow,
    EventRow,
    KeyRow,
    LeaseLost,
    LeaseRefused,
    Op,
    Progress,
    PruneRow,
    Request,
    SessionRow,
    SteerRow,
    StepRow,
    StoredSession,
    StoreError,
    TurnRow,
)
from ._holder import Holder, gone, this_process
from ._queued import (
    UNREADABLE,
    Place,
    QueuedStore,
    Reads,
    dump,
    read_answer,
    read_event_page,
    read_session,
)

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["MIGRATIONS", "POLL_SECONDS", "PostgresStore"]

#: How often a wait for another runtime's events reads the session's progress, in case a
#: notification was lost (PostgreSQL delivers them at most once).
POLL_SECONDS = 1.0
#: How long a commit is tried again after failures that left nothing written (a connection
#: the database ended, none to be had, a deadlock), before the store fails.
RETRY_SECONDS = 10.0

T = TypeVar("T")

#: The schema's versions, in order: each one's statements (``{schema}`` is the schema's
#: name). A database at a later version than the last is refused; one at an earlier version
#: gets the migrations after it, in one transaction.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE {schema}.sessions (
            session_id TEXT PRIMARY KEY,
            made BIGSERIAL NOT NULL,
            agent TEXT NOT NULL,
            parent_id TEXT,
            parent_turn_id TEXT,
            idempotency_key TEXT UNIQUE,
            inputs TEXT NOT NULL,
            terminated BOOLEAN NOT NULL DEFAULT FALSE,
            first_seq BIGINT NOT NULL DEFAULT 1,
            last_seq BIGINT NOT NULL DEFAULT 0,
            last_idx BIGINT NOT NULL DEFAULT -1,
            lease_owner TEXT,
            lease_until DOUBLE PRECISION,
            lease_epoch BIGINT NOT NULL DEFAULT 0,
            lease_host TEXT,
            lease_pid BIGINT,
            lease_started BIGINT
        )""",
        "CREATE INDEX sessions_by_parent ON {schema}.sessions (parent_id, made)",
        """CREATE TABLE {schema}.events (
            session_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            type TEXT NOT NULL,
            turn_id TEXT,
            id TEXT,
            data TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        )""",
        """CREATE TABLE {schema}.entries (
            session_id TEXT NOT NULL,
            idx BIGINT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (session_id, idx)
        )""",
        """CREATE TABLE {schema}.turns (
            session_id TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            first_seq BIGINT NOT NULL,
            output_type TEXT,
            record TEXT,
            step TEXT,
            PRIMARY KEY (session_id, turn_id)
        )""",
        """CREATE TABLE {schema}.steers (
            n BIGSERIAL PRIMARY KEY,
            session_id TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            data TEXT NOT NULL
        )""",
        "CREATE INDEX steers_by_session ON {schema}.steers (session_id, n)",
        """CREATE TABLE {schema}.callbacks (
            n BIGSERIAL NOT NULL,
            session_id TEXT NOT NULL,
            callback_id TEXT NOT NULL,
            callback TEXT NOT NULL,
            state TEXT NOT NULL,
            answer TEXT,
            error TEXT,
            PRIMARY KEY (session_id, callback_id)
        )""",
        """CREATE TABLE {schema}.keys (
            session_id TEXT NOT NULL,
            key TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            PRIMARY KEY (session_id, key)
        )""",
    ),
    (  # 2: requests to the runtime that holds a session (times on the database's clock)
        """CREATE TABLE {schema}.requests (
            request_id BIGSERIAL PRIMARY KEY,
            session_id TEXT NOT NULL,
            body TEXT NOT NULL,
            reply TEXT,
            made TIMESTAMPTZ NOT NULL DEFAULT now(),
            replied TIMESTAMPTZ
        )""",
        "CREATE INDEX requests_waiting ON {schema}.requests (session_id) WHERE reply IS NULL",
    ),
)

#: How long a reply no one read is kept (its sender went away), on the database's clock.
_UNREAD_REPLIES = "1 hour"

#: The key of the advisory lock under which a store migrates its schema.
_MIGRATING = 0x6167656E746C6962  # "agentlib"

_INSERT_EVENT = (
    "INSERT INTO {schema}.events (session_id, seq, type, turn_id, id, data)"
    " VALUES (%s, %s, %s, %s, %s, %s)"
)
_RECORD_LAST = (
    "UPDATE {schema}.sessions SET last_seq = greatest(last_seq, %s),"
    " last_idx = greatest(last_idx, %s) WHERE session_id = %s"
)
_SELECT_EVENTS = "SELECT seq, type, turn_id, id, data FROM {schema}.events WHERE session_id = %s"
#: The reads of one session (see :class:`~agentlib._store._queued.Reads`).
_READS = {
    "session": "SELECT agent, parent_id, parent_turn_id, idempotency_key, inputs, terminated,"
    " first_seq, last_seq, last_idx FROM {schema}.sessions WHERE session_id = %s",
    "bounds": "SELECT first_seq, last_seq FROM {schema}.sessions WHERE session_id = %s",
    "event_page": _SELECT_EVENTS + " AND seq >= %s AND seq < %s ORDER BY seq",
    "has": "SELECT 1 FROM {schema}.{table} WHERE session_id = %s LIMIT 1",
    "first_event": "SELECT min(seq) FROM {schema}.events WHERE session_id = %s",
    "last_event": "SELECT max(seq) FROM {schema}.events WHERE session_id = %s",
    "entries": "SELECT idx, data FROM {schema}.entries WHERE session_id = %s ORDER BY idx",
    "turns": "SELECT turn_id, first_seq, output_type, record, step FROM {schema}.turns"
    " WHERE session_id = %s ORDER BY first_seq",
    "steers": "SELECT turn_id, data FROM {schema}.steers WHERE session_id = %s ORDER BY n",
    "callbacks": "SELECT callback, state, answer, error FROM {schema}.callbacks"
    " WHERE session_id = %s ORDER BY n",
    "keys": "SELECT key, turn_id, fingerprint FROM {schema}.keys WHERE session_id = %s",
    "children": "SELECT session_id FROM {schema}.sessions WHERE parent_id = %s ORDER BY made",
}


@attrs.define
class _Wait:
    """The readers waiting for a session's next commit: set when one is heard of, with the
    last seq it told (-1 when none was told: anything may have changed)."""

    heard: trio.Event = attrs.field(factory=trio.Event)
    seq: int = -1


#: How long a transaction of the store may sit idle before the database ends it, in ms.
IDLE_IN_TRANSACTION_MS = 5_000


def _configure(connection: Any) -> None:
    """Set up a new connection of the pool. A runtime stopped (SIGSTOP, a frozen VM) or
    stalled inside a transaction would keep its rows locked, and no other runtime could take
    its sessions over until it went on: the database ends such a transaction once it has
    sat idle for :data:`IDLE_IN_TRANSACTION_MS`, so its locks go with it. When the runtime
    goes on, its commit fails with nothing written, and is tried again on a new connection
    (where the fence refuses the writes to sessions taken over meanwhile)."""
    connection.execute(
        "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
        (str(IDLE_IN_TRANSACTION_MS),),
    )
    connection.commit()


def shown(conninfo: str) -> str:
    """The database ``conninfo`` names, as messages show it: without its password."""
    parts = urllib.parse.urlsplit(conninfo)
    if not parts.scheme:  # "host=... dbname=...": show the keys that say where
        return " ".join(
            pair for pair in conninfo.split() if not pair.lower().startswith("password")
        )
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class PostgresStore(QueuedStore[tuple[str, int]]):
    """Sessions in a PostgreSQL database, which several runtimes (in several processes, on
    several hosts) share.

    Args:
        conninfo: The database, as psycopg takes it (``"postgresql://host/db"``).
        schema: The schema its tables live in (created if missing).
        pool_size: The most connections (and worker threads) its reads and writes use at
            once.
        clock: The wall clock leases are measured on (seconds).
    """

    shared = True
    _keeps_nul = False  # a text column refuses it
    #: Runtimes on several hosts share it: a dead one's sessions move on within seconds.
    lease_seconds = 10.0

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = "agentlib",
        pool_size: int = 4,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not schema.isidentifier():
            raise ValueError(f"schema must be a plain name (letters, digits, _), not {schema!r}")
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, not {pool_size}")
        self.conninfo = conninfo
        self.schema = schema
        self.pool_size = pool_size
        self._clock = clock
        self.where = shown(conninfo)
        self._pool: psycopg_pool.ConnectionPool | None = None
        self._limiter = trio.CapacityLimiter(pool_size)
        self._start_queue()  # the leases it took: session id -> (owner, epoch)
        self._channel = f"agentlib_{schema}"[:63]
        self._reads = Reads(
            **{name: statement.replace("{schema}", schema) for name, statement in _READS.items()},
            kept_in="database",
        )
        # The readers waiting for other runtimes' events, by session; the listening thread.
        self._waiting: dict[str, _Wait] = {}
        self._claims = trio.Event()  # set when a claim is heard of
        self._requests = trio.Event()  # set when a request is heard of
        self._replies: dict[int, trio.Event] = {}  # the senders waiting, by request
        self._listener: threading.Thread | None = None
        self._stop_listening = threading.Event()

    def __repr__(self) -> str:
        return f"PostgresStore({self.where!r}, schema={self.schema!r})"

    def _sql(self, statement: str) -> str:
        return statement.replace("{schema}", self.schema)

    # -- opening and closing ---------------------------------------------------------------

    async def open(self, start_soon: Callable[..., Any]) -> None:
        try:
            import psycopg_pool
        except ImportError:
            raise StoreError(
                "the PostgreSQL store needs psycopg and psycopg-pool: "
                "pip install 'agentlib[postgres]'"
            ) from None
        pool = psycopg_pool.ConnectionPool(
            self.conninfo,
            min_size=1,
            max_size=self.pool_size,
            open=False,
            name="agentlib",
            # A connection the database ended while it was idle (a restart, a failover, an
            # administrator) is replaced before it is used, rather than failing its user.
            check=psycopg_pool.ConnectionPool.check_connection,
            configure=_configure,
        )
        try:
            await self._in_thread(self._reach)  # a database out of reach says why, at once
            await self._in_thread(pool.open, True, 10.0)
            self._pool = pool
            await self._in_thread(self._migrate)
        except BaseException:
            self._pool = None
            await run_in_thread(pool.close)
            raise
        self._reopen_queue(start_soon)

    def _reach(self) -> None:
        import psycopg

        psycopg.connect(self.conninfo, connect_timeout=10).close()

    def _migrate(self) -> None:
        with self._connection() as db, db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATING,))
            db.execute(self._sql("CREATE SCHEMA IF NOT EXISTS {schema}"))
            db.execute(
                self._sql(
                    "CREATE TABLE IF NOT EXISTS {schema}.schema_version (version INTEGER NOT NULL)"
                )
            )
            row = db.execute(self._sql("SELECT max(version) FROM {schema}.schema_version"))
            version = (row.fetchone() or (None,))[0] or 0
            if version > len(MIGRATIONS):
                raise StoreSchemaError(
                    f"the schema {self.schema} of {self.where} is at version {version}, "
                    f"written by a newer agentlib; this one reads up to version "
                    f"{len(MIGRATIONS)}: upgrade agentlib to open it"
                )
            for number, statements in enumerate(MIGRATIONS[version:], version + 1):
                for statement in statements:
                    db.execute(self._sql(statement))
                db.execute(
                    self._sql("INSERT INTO {schema}.schema_version (version) VALUES (%s)"),
                    (number,),
                )

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self._close_queue()
            listener, self._listener = self._listener, None
            if listener is not None:
                self._stop_listening.set()
                await run_in_thread(listener.join)
            pool, self._pool = self._pool, None
            if pool is not None:
                await run_in_thread(pool.close)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of the pool, for one worker thread's work."""
        pool = self._pool
        if pool is None:
            raise StoreError(f"the store {self.where} is closed; open a new runtime on it")
        with pool.connection(timeout=30.0) as connection:
            yield connection

    async def _in_thread(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` in a worker thread, under the pool's limiter; psycopg's
        errors as :class:`StoreError`."""
        import psycopg
        import psycopg_pool

        try:
            return await run_in_thread(function, *args, limiter=self._limiter)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as error:
            raise StoreError(
                f"the store {self.where} failed: {type(error).__name__}: {_said(error)}"
            ) from error

    # -- writing ---------------------------------------------------------------------------

    def check(self) -> None:
        if isinstance(self.failure, LeaseLost):
            super().check()
        if self.failure is not None:
            raise StoreError(
                f"the store {self.where} could not commit ({self.failure}); what was not "
                "acknowledged is lost: check the database, then open a new runtime on it"
            ) from self.failure

    def _lease_of_new_session(self, op: SessionRow) -> tuple[str, int]:
        assert op.lease is not None
        return (op.lease[0], 1)  # a new session's first lease: epoch 1

    async def _commit_group(self, group: Sequence[Op], payloads: Sequence[Any]) -> None:
        import psycopg
        import psycopg_pool

        deadline = trio.current_time() + RETRY_SECONDS
        pause = 0.05
        while True:
            committing: list[int] = []  # the transaction's id, once its COMMIT is sent
            try:
                await self._in_thread(self._commit, group, payloads, dict(self._held), committing)
                return
            except StoreError as error:
                cause = error.__cause__
                if isinstance(cause, psycopg.DataError):
                    # Rows the database refuses (text with NUL): the database itself is fine.
                    raise cause from None
                # Tried again only where nothing was written: the transaction was rolled
                # back (a deadlock, a serialization failure), or it failed before its COMMIT
                # was sent (a connection ended under it), or it never had a connection. A
                # COMMIT whose answer was lost may have committed: the database says
                # whether it did, as a retry could write the group twice.
                if not isinstance(
                    cause,
                    (
                        psycopg.errors.TransactionRollback,
                        psycopg.OperationalError,
                        psycopg_pool.PoolTimeout,
                    ),
                ):
                    raise
                unanswered = committing and not isinstance(
                    cause, psycopg.errors.TransactionRollback
                )
                if unanswered and await self._committed(committing[0], deadline):
                    return
                if trio.current_time() + pause > deadline:
                    raise
            await trio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def _committed(self, transaction: int, deadline: float) -> bool:
        """Whether the transaction committed, as the database says once it knows (until
        ``deadline``).

        Raises:
            StoreError: The database does not say, by the deadline.
        """

        def status() -> str | None:
            with self._connection() as db:
                row = db.execute("SELECT txid_status(%s)", (transaction,)).fetchone()
            return None if row is None else row[0]

        while True:
            try:
                said = await self._in_thread(status)
            except StoreError:
                if trio.current_time() > deadline:
                    raise
                said = "in progress"
            if said == "committed":
                return True
            if said != "in progress":  # aborted: nothing of it was written
                return False
            if trio.current_time() > deadline:
                raise StoreError(
                    f"the store {self.where} cannot tell whether a commit went through (its "
                    "connection ended at its COMMIT): check the database, then open a new "
                    "runtime on it"
                )
            await trio.sleep(0.1)

    async def _let_go(self, held: Mapping[str, tuple[str, int]]) -> None:
        self._held.clear()
        await self._in_thread(
            self._free, [(session, owner) for session, (owner, _) in held.items()]
        )

    def _commit(
        self,
        group: Sequence[Op],
        payloads: Sequence[Any],
        held: dict[str, tuple[str, int]],
        committing: list[int],
    ) -> None:
        with self._connection() as db, db.transaction(), db.cursor() as cursor:
            self._fence(cursor, group, held)
            events: list[Any] = []  # runs of events go in one executemany
            last: dict[str, list[int]] = {}  # session id -> [last seq, last idx] written
            newest: dict[str, int] = {}  # session id -> its last event of the group
            payload = iter(payloads)
            for op in group:
                if isinstance(op, EventRow):
                    events.append(next(payload))
                    last.setdefault(op.session_id, [0, -1])[0] = op.seq
                    newest[op.session_id] = op.seq
                    continue
                if events:
                    cursor.executemany(self._sql(_INSERT_EVENT), events)
                    events.clear()
                if isinstance(op, EntryRow):
                    cursor.execute(
                        self._sql(
                            "INSERT INTO {schema}.entries (session_id, idx, data)"
                            " VALUES (%s, %s, %s)"
                        ),
                        (op.session_id, op.index, next(payload)),
                    )
                    written = last.setdefault(op.session_id, [0, -1])
                    written[1] = max(written[1], op.index)
                    continue
                if isinstance(op, PruneRow) and last:  # it reads the last seq
                    self._record_last(cursor, last)
                self._apply(cursor, op)
            if events:
                cursor.executemany(self._sql(_INSERT_EVENT), events)
            # Readers in other runtimes hear of the events once this commits.
            told = [(self._channel, f"{session_id} {seq}") for session_id, seq in newest.items()]
            told += [
                (self._channel, f"{op.session_id} 0")
                for op in group
                if isinstance(op, SessionRow) and op.terminated
            ]
            self._record_last(cursor, last)
            if told:
                cursor.executemany("SELECT pg_notify(%s, %s)", told)
            # The block's end sends COMMIT: should its answer be lost, the database tells
            # whether this transaction committed.
            (transaction,) = cursor.execute("SELECT txid_current()").fetchone() or (0,)
            committing.append(transaction)

    def _fence(
        self, cursor: psycopg.Cursor[Any], group: Sequence[Op], held: dict[str, tuple[str, int]]
    ) -> None:
        """Lock the rows of the sessions of the group this store leased, for the rest of
        the transaction (a takeover waits for it), and check that each lease is still the
        one this store took, at its epoch.

        Raises:
            LeaseLost: Another runtime took over a session of the group (this one stalled
                past its lease): the transaction is rolled back, and nothing of the group
                is written.
        """
        touched = sorted({op.session_id for op in group if op.session_id in held})
        if not touched:
            return
        rows = cursor.execute(
            self._sql(
                "SELECT session_id, lease_owner, lease_epoch FROM {schema}.sessions"
                " WHERE session_id = ANY(%s) ORDER BY session_id FOR UPDATE"
            ),
            (touched,),
        ).fetchall()
        for session_id, owner, epoch in rows:
            if (owner, epoch) != held[session_id]:
                raise LeaseLost(session_id, owner, store=self.where)

    def _record_last(self, cursor: psycopg.Cursor[Any], last: dict[str, list[int]]) -> None:
        """Record the last seq and idx written of each session (and forget them): a read
        that finds fewer rows knows that the database lost some."""
        if last:
            cursor.executemany(
                self._sql(_RECORD_LAST), [(seq, idx, s) for s, (seq, idx) in last.items()]
            )
            last.clear()

    def _apply(self, cursor: psycopg.Cursor[Any], op: Op) -> None:
        sql = self._sql
        if isinstance(op, TurnRow):
            cursor.execute(
                sql(
                    "INSERT INTO {schema}.turns (session_id, turn_id, first_seq, output_type,"
                    " record) VALUES (%s, %s, %s, %s, %s) ON CONFLICT (session_id, turn_id)"
                    " DO UPDATE SET record = excluded.record"
                ),
                (
                    op.session_id,
                    op.turn_id,
                    op.first_seq,
                    op.output_type,
                    None if op.record is None else dump(op.record),
                ),
            )
        elif isinstance(op, StepRow):
            cursor.execute(
                sql("UPDATE {schema}.turns SET step = %s WHERE session_id = %s AND turn_id = %s"),
                (None if op.step is None else dump(op.step), op.session_id, op.turn_id),
            )
        elif isinstance(op, SteerRow):
            cursor.execute(
                sql("INSERT INTO {schema}.steers (session_id, turn_id, data) VALUES (%s, %s, %s)"),
                (op.session_id, op.turn_id, dump(op.message)),
            )
        elif isinstance(op, CallbackRow):
            cursor.execute(
                sql(
                    "INSERT INTO {schema}.callbacks (session_id, callback_id, callback, state,"
                    " answer, error) VALUES (%s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT (session_id, callback_id) DO UPDATE SET state = excluded.state,"
                    " answer = excluded.answer, error = excluded.error"
                    # Settled is settled: a claim through another runtime may have won.
                    " WHERE {schema}.callbacks.state = 'open'"
                ),
                (
                    op.session_id,
                    op.callback.id,
                    dump(op.callback),
                    op.state,
                    None if op.state == "open" else json.dumps(unstructure(op.answer)),
                    op.error,
                ),
            )
        elif isinstance(op, KeyRow):
            cursor.execute(
                sql(
                    "INSERT INTO {schema}.keys (session_id, key, turn_id, fingerprint)"
                    " VALUES (%s, %s, %s, %s)"
                    # An answer's key may be there already: its claim wrote it.
                    " ON CONFLICT DO NOTHING"
                ),
                (op.session_id, op.key, op.turn_id, op.fingerprint),
            )
        elif isinstance(op, SessionRow):
            lease: tuple[Any, ...] = (None, None, 0, None, None, None)
            if op.lease is not None:
                owner, seconds = op.lease
                holder = this_process()
                lease = (owner, self._clock() + seconds, 1, holder.host, holder.pid, holder.started)
            cursor.execute(
                sql(
                    "INSERT INTO {schema}.sessions (session_id, agent, parent_id,"
                    " parent_turn_id, idempotency_key, inputs, terminated, lease_owner,"
                    " lease_until, lease_epoch, lease_host, lease_pid, lease_started)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT (session_id) DO UPDATE SET terminated = excluded.terminated"
                ),
                (
                    op.session_id,
                    op.agent,
                    op.parent_id,
                    op.parent_turn_id,
                    op.idempotency_key,
                    json.dumps(op.inputs),
                    op.terminated,
                    *lease,
                ),
            )
        elif isinstance(op, PruneRow):
            cursor.execute(
                sql("DELETE FROM {schema}.events WHERE session_id = %s AND seq < %s"),
                (op.session_id, op.before_seq),
            )
            cursor.execute(
                sql(
                    "UPDATE {schema}.sessions"
                    " SET first_seq = greatest(first_seq, least(%s, last_seq + 1))"
                    " WHERE session_id = %s"
                ),
                (op.before_seq, op.session_id),
            )

    # -- reading ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _reading(self, what: str) -> Iterator[tuple[psycopg.Connection[Any], Place]]:
        """A connection in one read-only, repeatable-read transaction, for a read of
        ``what`` (``"session X"``); what the rows it reads raise becomes a
        :class:`StoreError` saying where."""
        place = Place(what)
        with self._connection() as db:
            try:
                with db.transaction():
                    db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    yield db, place
            except UNREADABLE as error:
                if isinstance(error, StoreError):
                    raise
                raise self._damaged(place, _unreadable(error)) from error

    def damaged(self, session_id: str, table: str, reason: str) -> StoreError:
        return self._damaged(Place(f"session {session_id}", table), reason)

    def _damaged(self, place: Place, reason: str) -> StoreError:
        return StoreError(
            f"the store {self.where} is damaged: {place.what} cannot be read from table "
            f"{self.schema}.{place.table} ({reason}). Restore the database from a backup"
        )

    async def load(self, session_id: str) -> StoredSession | None:
        if not self.can_hold(session_id):
            return None
        return await self._in_thread(self._load, session_id)

    def _load(self, session_id: str) -> StoredSession | None:
        with self._reading(f"session {session_id}") as (db, at):
            return read_session(db.execute, self._reads, session_id, at, self._damaged)

    async def session_for_key(self, key: str) -> str | None:
        if not self.can_hold(key):
            return None

        def read() -> str | None:
            with self._reading("the session an idempotency key started") as (db, _):
                row = db.execute(
                    self._sql(
                        "SELECT session_id FROM {schema}.sessions WHERE idempotency_key = %s"
                    ),
                    (key,),
                ).fetchone()
            return None if row is None else str(row[0])

        return await self._in_thread(read)

    async def read_events(self, session_id: str, after: int, limit: int) -> list[Event]:
        if not self.can_hold(session_id):
            return []

        def read() -> list[Event]:
            with self._reading(f"session {session_id}") as (db, at):
                return read_event_page(
                    db.execute, self._reads, session_id, after, limit, at, self._damaged
                )

        return await self._in_thread(read)

    # -- following other runtimes ------------------------------------------------------------

    async def wait_for_events(self, session_id: str, after: int) -> Progress | None:
        if not self.can_hold(session_id):
            return None
        self._listen()
        changed = self._waiting.setdefault(session_id, _Wait())  # before the read
        progress = await self._in_thread(self._progress_of, session_id)
        if progress is None or progress.last_seq > after or progress.terminated:
            return progress
        with trio.move_on_after(POLL_SECONDS):
            await changed.heard.wait()
        if changed.seq > after:  # a commit told its last seq: no need to read it
            return attrs.evolve(progress, last_seq=changed.seq)
        return await self._in_thread(self._progress_of, session_id)

    async def claim_callback(self, row: CallbackRow, key: KeyRow | None) -> CallbackRow | None:
        def claim() -> CallbackRow | None:
            with self._connection() as db, db.transaction():
                taken = db.execute(
                    self._sql(
                        "UPDATE {schema}.callbacks SET state = %s, answer = %s, error = %s"
                        " WHERE session_id = %s AND callback_id = %s AND state = 'open'"
                    ),
                    (
                        row.state,
                        json.dumps(unstructure(row.answer)),
                        row.error,
                        row.session_id,
                        row.callback.id,
                    ),
                )
                if taken.rowcount != 1:
                    return self._callback_row(db, row.session_id, row.callback.id)
                if key is not None:
                    db.execute(
                        self._sql(
                            "INSERT INTO {schema}.keys (session_id, key, turn_id, fingerprint)"
                            " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING"
                        ),
                        (key.session_id, key.key, key.turn_id, key.fingerprint),
                    )
                db.execute(
                    "SELECT pg_notify(%s, %s)",
                    (self._channel, f"{row.session_id} claim {row.callback.id}"),
                )
            return None

        return await self._in_thread(claim)

    def _callback_row(
        self, db: psycopg.Connection[Any], session_id: str, callback_id: str
    ) -> CallbackRow:
        found = db.execute(
            self._sql(
                "SELECT callback, state, answer, error FROM {schema}.callbacks"
                " WHERE session_id = %s AND callback_id = %s"
            ),
            (session_id, callback_id),
        ).fetchone()
        if found is None:
            raise self.damaged(session_id, "callbacks", f"callback {callback_id} is missing")
        callback, state, answer, error = found
        return CallbackRow(
            session_id,
            structure(json.loads(callback), Callback),
            state,
            read_answer(json.loads(answer)) if answer is not None else None,
            error,
        )

    async def wait_for_claims(self, open_callbacks: Sequence[tuple[str, str]]) -> list[CallbackRow]:
        self._listen()
        claimed = self._claims = trio.Event() if self._claims.is_set() else self._claims
        settled = await self._in_thread(self._settled_of, list(open_callbacks))
        if not settled:
            with trio.move_on_after(POLL_SECONDS):
                await claimed.wait()
        return settled

    def _settled_of(self, open_callbacks: list[tuple[str, str]]) -> list[CallbackRow]:
        if not open_callbacks:
            return []
        with self._reading("the callbacks this runtime waits on") as (db, _):
            ids = db.execute(
                self._sql(
                    "SELECT session_id, callback_id FROM {schema}.callbacks"
                    " WHERE callback_id = ANY(%s) AND state <> 'open'"
                ),
                ([callback_id for _, callback_id in open_callbacks],),
            ).fetchall()
            wanted = set(open_callbacks)
            return [
                self._callback_row(db, session_id, callback_id)
                for session_id, callback_id in ids
                if (session_id, callback_id) in wanted
            ]

    async def send_request(self, session_id: str, body: Mapping[str, Any]) -> int:
        def send() -> int:
            with self._connection() as db, db.transaction():
                row = db.execute(
                    self._sql(
                        "INSERT INTO {schema}.requests (session_id, body)"
                        " VALUES (%s, %s) RETURNING request_id"
                    ),
                    (session_id, json.dumps(body)),
                ).fetchone()
                assert row is not None
                db.execute(
                    "SELECT pg_notify(%s, %s)", (self._channel, f"{session_id} request {row[0]}")
                )
                return int(row[0])

        self._listen()  # before the reply can come
        return await self._in_thread(send)

    async def wait_for_requests(self, owner: str, skip: Collection[int]) -> list[Request]:
        self._listen()
        heard = self._requests = trio.Event() if self._requests.is_set() else self._requests
        skipped = list(skip)

        def waiting() -> list[Request]:
            with self._connection() as db, db.transaction():
                db.execute(
                    self._sql("DELETE FROM {schema}.requests WHERE replied < now() - %s::interval"),
                    (_UNREAD_REPLIES,),
                )
                rows = db.execute(
                    self._sql(
                        "SELECT r.request_id, r.session_id, r.body,"
                        " extract(epoch FROM now() - r.made)::float8 FROM {schema}.requests r"
                        " JOIN {schema}.sessions s ON s.session_id = r.session_id"
                        " WHERE r.reply IS NULL AND s.lease_owner = %s"
                        " AND NOT r.request_id = ANY(%s) ORDER BY r.request_id"
                    ),
                    (owner, skipped),
                ).fetchall()
            return [
                Request(int(n), session_id, json.loads(body), age=max(0.0, float(age)))
                for n, session_id, body, age in rows
            ]

        found = await self._in_thread(waiting)
        if not found:
            with trio.move_on_after(POLL_SECONDS):
                await heard.wait()
        return found

    async def reply_request(self, request_id: int, reply: Mapping[str, Any]) -> None:
        def answer() -> None:
            with self._connection() as db, db.transaction():
                row = db.execute(
                    self._sql(
                        "UPDATE {schema}.requests SET reply = %s, replied = now()"
                        " WHERE request_id = %s AND reply IS NULL RETURNING session_id"
                    ),
                    (json.dumps(reply), request_id),
                ).fetchone()
                if row is not None:
                    db.execute(
                        "SELECT pg_notify(%s, %s)",
                        (self._channel, f"{row[0]} reply {request_id}"),
                    )

        await self._in_thread(answer)

    async def wait_for_reply(self, request_id: int) -> dict[str, Any] | None:
        self._listen()
        replied = self._replies.setdefault(request_id, trio.Event())  # before the read

        def read() -> dict[str, Any] | None:
            with self._connection() as db, db.transaction():
                row = db.execute(
                    self._sql(
                        "DELETE FROM {schema}.requests WHERE request_id = %s"
                        " AND reply IS NOT NULL RETURNING reply"
                    ),
                    (request_id,),
                ).fetchone()
            return None if row is None else dict(json.loads(row[0]))

        try:
            reply = await self._in_thread(read)
            if reply is None:
                with trio.move_on_after(POLL_SECONDS):
                    await replied.wait()
                reply = await self._in_thread(read)
        finally:
            if self._replies.get(request_id) is replied:
                del self._replies[request_id]
        return reply

    async def withdraw_request(self, request_id: int) -> bool:
        def withdraw() -> bool:
            with self._connection() as db, db.transaction():
                gone = db.execute(
                    self._sql(
                        "DELETE FROM {schema}.requests WHERE request_id = %s AND reply IS NULL"
                    ),
                    (request_id,),
                )
                return gone.rowcount == 1

        return await self._in_thread(withdraw)

    def _progress_of(self, session_id: str) -> Progress | None:
        with self._reading(f"session {session_id}") as (db, _):
            row = db.execute(
                self._sql(
                    "SELECT first_seq, last_seq, terminated, parent_id IS NOT NULL"
                    " FROM {schema}.sessions WHERE session_id = %s"
                ),
                (session_id,),
            ).fetchone()
        return None if row is None else Progress(*row)

    def _listen(self) -> None:
        """Start listening for other runtimes' commits, once."""
        if self._listener is None:
            self._stop_listening = threading.Event()
            self._listener = threading.Thread(
                target=self._listening,
                args=(trio.lowlevel.current_trio_token(), self._stop_listening),
                name=f"agentlib listener of {self.where}",
                daemon=True,
            )
            self._listener.start()

    def _listening(self, token: trio.lowlevel.TrioToken, stop: threading.Event) -> None:
        """The listening thread: one connection, LISTENing, until the store closes; it
        connects again after a failure (and wakes every reader: it may have missed
        something meanwhile)."""
        import psycopg

        while not stop.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=10) as db:
                    db.execute(f'LISTEN "{self._channel}"')
                    token.run_sync_soon(self._heard, None)
                    while not stop.is_set():
                        for note in db.notifies(timeout=0.1):
                            token.run_sync_soon(self._heard, note.payload)
            except psycopg.Error:
                stop.wait(POLL_SECONDS)
            except trio.RunFinishedError:
                return

    def _heard(self, payload: str | None) -> None:
        """A commit of another runtime (or this one) notified ``payload``: ``"<session id>
        <seq>"`` (its events), ``"<session id> claim <callback id>"``, ``"<session id>
        request <id>"`` or ``"<session id> reply <request id>"``; None: anything may have
        changed (the listener connected again)."""
        if payload is None:
            waiting, self._waiting = self._waiting, {}
            waiting_replies = list(self._replies.values())
            for wait in waiting.values():
                wait.heard.set()
            self._claims.set()
            self._requests.set()
            for reply_heard in waiting_replies:
                reply_heard.set()
            return
        if " claim " in payload:
            self._claims.set()
            return
        if " request " in payload:
            self._requests.set()
            return
        if " reply " in payload:
            replied = self._replies.get(int(payload.rpartition(" ")[2]))
            if replied is not None:
                replied.set()
            return
        session_id = payload.partition(" ")[0]
        readers = self._waiting.pop(session_id, None)
        if readers is not None:
            readers.seq = int(payload.rpartition(" ")[2])
            readers.heard.set()

    # -- leases ----------------------------------------------------------------------------

    async def acquire(self, session_ids: Sequence[str], owner: str, seconds: float) -> None:
        self.check()  # a store that can no longer commit takes no lease
        session_ids = [s for s in session_ids if self.can_hold(s)]  # never stored

        def lease() -> dict[str, int]:
            now = self._clock()
            holder = this_process()
            with self._connection() as db, db.transaction():
                rows = db.execute(
                    self._sql(
                        "SELECT session_id, lease_owner, lease_until, lease_host, lease_pid,"
                        " lease_started FROM {schema}.sessions WHERE session_id = ANY(%s)"
                        " ORDER BY session_id FOR UPDATE"
                    ),
                    (list(session_ids),),
                ).fetchall()
                for session_id, current, until, host, pid, started in rows:
                    if current in (None, owner) or until <= now:
                        continue
                    # A process of this host that died renews nothing: its lease is taken
                    # at once, rather than once it expires.
                    if pid is None or not gone(Holder(host=host, pid=pid, started=started)):
                        raise LeaseRefused(session_id, current, until)
                taken = db.execute(
                    self._sql(
                        "UPDATE {schema}.sessions SET"
                        " lease_epoch = CASE WHEN lease_owner IS NOT DISTINCT FROM %s"
                        " THEN lease_epoch ELSE lease_epoch + 1 END,"
                        " lease_owner = %s, lease_until = %s, lease_host = %s, lease_pid = %s,"
                        " lease_started = %s WHERE session_id = ANY(%s)"
                        " RETURNING session_id, lease_epoch"
                    ),
                    (
                        owner,
                        owner,
                        now + seconds,
                        holder.host,
                        holder.pid,
                        holder.started,
                        list(session_ids),
                    ),
                ).fetchall()
            return dict(taken)

        await self.flush()  # a new session's row must be there to hold its lease
        for session_id, epoch in (await self._in_thread(lease)).items():
            self._held[session_id] = (owner, epoch)

    async def renew(self, session_ids: Sequence[str], owner: str, seconds: float) -> list[str]:
        self.check()
        session_ids = [s for s in session_ids if self.can_hold(s)]  # never stored: skipped

        def lease() -> list[str]:
            now = self._clock()
            with self._connection() as db, db.transaction():
                renewed = {
                    session_id
                    for (session_id,) in db.execute(
                        self._sql(
                            "UPDATE {schema}.sessions SET lease_until = %s"
                            " WHERE session_id = ANY(%s) AND lease_owner = %s"
                            " RETURNING session_id"
                        ),
                        (now + seconds, list(session_ids), owner),
                    )
                }
                known = {
                    session_id
                    for (session_id,) in db.execute(
                        self._sql(
                            "SELECT session_id FROM {schema}.sessions WHERE session_id = ANY(%s)"
                        ),
                        (list(session_ids),),
                    )
                }
            # Taken over (and maybe let go since), or never leased; still in _held: the
            # fence refuses their writes.
            return [s for s in session_ids if s in known and s not in renewed]

        return await self._in_thread(lease)

    async def release(self, session_ids: Sequence[str], owner: str) -> None:
        for session_id in session_ids:
            self._held.pop(session_id, None)
        leases = [(session_id, owner) for session_id in session_ids if self.can_hold(session_id)]
        await self._in_thread(self._free, leases)

    def _free(self, leases: Sequence[tuple[str, str]]) -> None:
        """End the leases (session id, owner); a session another owner holds now is left
        be."""
        if not leases:
            return
        with self._connection() as db, db.transaction(), db.cursor() as cursor:
            cursor.executemany(
                self._sql(
                    "UPDATE {schema}.sessions SET lease_owner = NULL, lease_until = NULL,"
                    " lease_host = NULL, lease_pid = NULL, lease_started = NULL"
                    " WHERE session_id = %s AND lease_owner = %s"
                ),
                leases,
            )


def _said(error: BaseException) -> str:
    """What a driver's error says, on one line; never a row's values (psycopg's messages
    name what failed, and the server's detail lines, which may quote a row, are left out)."""
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _unreadable(error: BaseException) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"a row is not JSON: {error.msg}, at character {error.pos}"
    return f"a row is not what agentlib writes ({type(error).__name__})"
