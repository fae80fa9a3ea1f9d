"""The PostgreSQL store's object: what a runtime holds of the database, its reads of whole
sessions, and its leases; its commits, claims, requests and notifications are the modules
beside this one's."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from .._base import (
    CallbackRow,
    KeyRow,
    Op,
    Progress,
    Request,
    SessionRow,
    StoreError,
)
from .._holder import this_process
from .._queued import Place, QueuedStore, check_leasable
from ._claims import Claims
from ._database import Database
from ._mailbox import Mailbox
from ._notifications import Listener
from ._writer import commit_group

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresStore"]

T = TypeVar("T")


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
        self._database = Database(conninfo, schema, pool_size)
        self.where = self._database.where
        self._statements = self._database.statements
        self._start_queue()  # the leases it took: session id -> (owner, epoch)
        self._listener = Listener(self._database)
        self._claims = Claims(self._database, self._listener)
        self._mailbox = Mailbox(self._database, self._listener)

    def __repr__(self) -> str:
        return f"PostgresStore({self.where!r}, schema={self.schema!r})"

    # -- opening and closing ---------------------------------------------------------------

    async def open(self, start_soon: Callable[..., Any]) -> None:
        await self._database.open()
        self._reopen_queue(start_soon)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self._close_queue()
            await self._listener.aclose()
            await self._database.close()

    # -- writing ---------------------------------------------------------------------------

    def _lease_of_new_session(self, op: SessionRow) -> tuple[str, int]:
        assert op.lease is not None
        return (op.lease[0], 1)  # a new session's first lease: epoch 1

    async def _commit_group(self, group: Sequence[Op], payloads: Sequence[Any]) -> None:
        await commit_group(self._database, group, payloads, lambda: self._held, self._lease_columns)

    def _lease_columns(self, op: SessionRow) -> tuple[Any, ...]:
        """A new session's lease (at epoch 1), or none, in the lease columns of its row."""
        if op.lease is None:
            return (None, None, 0, None, None, None)
        owner, seconds = op.lease
        holder = this_process()
        return (owner, self._clock() + seconds, 1, holder.host, holder.pid, holder.started)

    async def _let_go(self, held: Mapping[str, tuple[str, int]]) -> None:
        self._held.clear()
        await self._in_thread(
            self._free, [(session, owner) for session, (owner, _) in held.items()]
        )

    # -- reading ---------------------------------------------------------------------------

    def _reading(self, what: str) -> AbstractContextManager[tuple[psycopg.Connection[Any], Place]]:
        return self._database.reading(what)

    async def _in_thread(self, function: Callable[..., T], *args: Any) -> T:
        # Reads, leases taken or renewed by their owner and leases let go: run twice, the
        # same as once.
        return await self._database.in_thread(function, *args, rerun=True)

    def _damaged(self, place: Place, reason: str) -> StoreError:
        return self._database.damaged(place, reason)

    # -- following other runtimes, claims and requests ---------------------------------------

    async def wait_for_events(self, session_id: str, after: int) -> Progress | None:
        if not self.can_hold(session_id):
            return None
        return await self._listener.wait_for_events(session_id, after)

    async def claim_callback(self, row: CallbackRow, key: KeyRow | None) -> CallbackRow | None:
        return await self._claims.claim_callback(row, key)

    async def wait_for_claims(self, open_callbacks: Sequence[tuple[str, str]]) -> list[CallbackRow]:
        return await self._claims.wait_for_claims(open_callbacks)

    async def send_request(self, session_id: str, body: Mapping[str, Any]) -> int:
        return await self._mailbox.send_request(session_id, body)

    async def wait_for_requests(self, owner: str, skip: Collection[int]) -> list[Request]:
        return await self._mailbox.wait_for_requests(owner, skip)

    async def reply_request(self, request_id: int, reply: Mapping[str, Any]) -> None:
        await self._mailbox.reply_request(request_id, reply)

    async def wait_for_reply(self, request_id: int) -> dict[str, Any] | None:
        return await self._mailbox.wait_for_reply(request_id)

    async def withdraw_request(self, request_id: int) -> bool:
        return await self._mailbox.withdraw_request(request_id)

    # -- leases ----------------------------------------------------------------------------

    async def acquire(self, session_ids: Sequence[str], owner: str, seconds: float) -> None:
        self.check()  # a store that can no longer commit takes no lease
        session_ids = [s for s in session_ids if self.can_hold(s)]  # never stored

        def lease() -> dict[str, int]:
            now = self._clock()
            holder = this_process()
            with self._database.connection() as db, db.transaction():
                rows = db.execute(
                    self._database.sql(
                        "SELECT session_id, lease_owner, lease_until, lease_host, lease_pid,"
                        " lease_started FROM {schema}.sessions WHERE session_id = ANY(%s)"
                        " ORDER BY session_id FOR UPDATE"
                    ),
                    (list(session_ids),),
                ).fetchall()
                for session_id, *lease in rows:
                    check_leasable(session_id, lease, owner, now)
                taken = db.execute(
                    self._database.sql(
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
            with self._database.connection() as db, db.transaction():
                renewed = {
                    session_id
                    for (session_id,) in db.execute(
                        self._database.sql(
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
                        self._database.sql(
                            "SELECT session_id FROM {schema}.sessions WHERE session_id = ANY(%s)"
                        ),
                        (list(session_ids),),
                    )
                }
            # Taken over (and maybe let go since), or never leased; still in _held: the
            # fence refuses their writes.
            return [s for s in session_ids if s in known and s not in renewed]

        return await self._in_thread(lease)

    def _free(self, leases: Sequence[tuple[str, str]]) -> None:
        """End the leases (session id, owner); a session another owner holds now is left
        be."""
        if not leases:
            return
        with self._database.connection() as db, db.transaction(), db.cursor() as cursor:
            cursor.executemany(self._database.statements.free, leases)
