"""The database as the PostgreSQL store reaches it: a pool of connections, each used by one
worker thread at a time, psycopg's errors said as :class:`StoreError`, and work that may run
twice run again after a failure that may pass (a connection the database ended under it).

psycopg's async API runs on asyncio only; the store uses its blocking API, through trio
worker threads: at most ``pool_size`` at once (a :class:`trio.CapacityLimiter`), each with a
connection of a :class:`psycopg_pool.ConnectionPool` of that size.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from ..._trio._retry import Backoff, RetryPolicy
from ..._trio._threads import run_in_thread
from .._base import StoreError
from .._queued import UNREADABLE, Place, unreadable
from .._sql import Statements
from ._schema import dialect, migrate

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["IDLE_IN_TRANSACTION_MS", "RETRIES", "RETRY_SECONDS", "Database", "shown", "transient"]

T = TypeVar("T")

#: How long a transaction of the store may sit idle before the database ends it, in ms.
IDLE_IN_TRANSACTION_MS = 5_000

#: How long work is tried again after failures that may pass (a connection the database
#: ended, none to be had, a deadlock or a serialization failure), before the store fails.
RETRY_SECONDS = 10.0
#: The pauses between those tries.
RETRIES = RetryPolicy(backoff=Backoff(first=0.05, most=1.0), give_up_after=RETRY_SECONDS)


def transient(error: BaseException | None) -> bool:
    """Whether ``error`` (psycopg's) may pass on another try, on another connection: the
    connection ended or none could be had (psycopg's ``OperationalError``, the pool's
    ``PoolTimeout``), or the database rolled the transaction back (a deadlock, a
    serialization failure)."""
    import psycopg
    import psycopg_pool

    return isinstance(
        error,
        (psycopg.errors.TransactionRollback, psycopg.OperationalError, psycopg_pool.PoolTimeout),
    )


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


class Database:
    """The store's database: its tables in ``schema``, reached through a pool of
    ``pool_size`` connections once opened.

    Attributes:
        conninfo: The database, as psycopg takes it.
        schema: The schema its tables live in.
        where: The database as messages name it (without a password).
        channel: The channel its commits notify (``NOTIFY``) other runtimes on.
        statements: The SQL of the store's op rows and reads, in the schema.
    """

    def __init__(self, conninfo: str, schema: str, pool_size: int) -> None:
        self.conninfo = conninfo
        self.schema = schema
        self.pool_size = pool_size
        self.where = shown(conninfo)
        self.channel = f"agentlib_{schema}"[:63]
        self.statements = Statements(dialect(schema))
        self._pool: psycopg_pool.ConnectionPool | None = None
        self._limiter = trio.CapacityLimiter(pool_size)

    def sql(self, statement: str) -> str:
        """``statement`` with ``{schema}`` replaced by the schema's name."""
        return statement.replace("{schema}", self.schema)

    async def open(self) -> None:
        """Open the pool, and create or migrate the schema's tables.

        Raises:
            StoreError: psycopg is not installed, or the database cannot be reached.
            StoreSchemaError: A newer agentlib wrote the schema.
        """
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
            await self.in_thread(self._reach)  # a database out of reach says why, at once
            await self.in_thread(pool.open, True, 10.0)
            self._pool = pool
            await self.in_thread(self._migrate)
        except BaseException:
            self._pool = None
            await run_in_thread(pool.close)
            raise

    def _reach(self) -> None:
        import psycopg

        psycopg.connect(self.conninfo, connect_timeout=10).close()

    def _migrate(self) -> None:
        with self.connection() as db:
            migrate(db, self.schema, self.where)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await run_in_thread(pool.close)

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of the pool, for one worker thread's work."""
        pool = self._pool
        if pool is None:
            raise StoreError(f"the store {self.where} is closed; open a new runtime on it")
        with pool.connection(timeout=30.0) as connection:
            yield connection

    async def in_thread(self, function: Callable[..., T], *args: Any, rerun: bool = False) -> T:
        """``function(*args)`` in a worker thread, under the pool's limiter; psycopg's
        errors as :class:`StoreError`.

        With ``rerun``, for work that has the same effect run twice as once (a read, a lease
        taken or renewed by the owner that holds it, leases let go), a :func:`transient`
        failure runs it again on another connection, as :data:`RETRIES` says: the pool
        checks a connection before it lends it, but the database may end it between that
        check and the work's first statement, or during the work.
        """
        import psycopg
        import psycopg_pool

        retries = RETRIES.start() if rerun else None
        while True:
            try:
                return await run_in_thread(function, *args, limiter=self._limiter)
            except (psycopg.Error, psycopg_pool.PoolTimeout) as error:
                pause = None
                if retries is not None and transient(error):
                    pause = retries.next_pause()
                if pause is None:
                    raise StoreError(
                        f"the store {self.where} failed: {type(error).__name__}: {_said(error)}"
                    ) from error
            await trio.sleep(pause)

    @contextlib.contextmanager
    def reading(self, what: str) -> Iterator[tuple[psycopg.Connection[Any], Place]]:
        """A connection in one read-only, repeatable-read transaction, for a read of
        ``what`` (``"session X"``); what the rows it reads raise becomes a
        :class:`StoreError` saying where."""
        place = Place(what)
        with self.connection() as db:
            try:
                with db.transaction():
                    db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    yield db, place
            except UNREADABLE as error:
                if isinstance(error, StoreError):
                    raise
                raise self.damaged(place, unreadable(error)) from error

    def damaged(self, place: Place, reason: str) -> StoreError:
        """The error saying that the store is damaged: ``place`` cannot be read."""
        return StoreError(
            f"the store {self.where} is damaged: {place.what} cannot be read from table "
            f"{self.schema}.{place.table} ({reason}). Restore the database from a backup"
        )


def _said(error: BaseException) -> str:
    """What a driver's error says, on one line; never a row's values (psycopg's messages
    name what failed, and the server's detail lines, which may quote a row, are left out)."""
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
