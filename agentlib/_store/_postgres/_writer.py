"""The PostgreSQL store's commits: a group of writes in one transaction, fenced by the
leases the store took (at their epochs), notified to the other runtimes, and tried again
after failures that left nothing written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import trio

from .._base import EventRow, LeaseLost, Op, SessionRow, StoreError
from .._sql import write_group
from ._database import RETRIES, RETRY_SECONDS, Database, transient

if TYPE_CHECKING:
    import psycopg

__all__ = ["commit_group"]

Held = Mapping[str, tuple[str, int]]  # session id -> (owner, epoch) of the lease taken
LeaseColumns = Callable[[SessionRow], tuple[Any, ...]]


async def commit_group(
    database: Database,
    group: Sequence[Op],
    payloads: Sequence[Any],
    held: Callable[[], Held],
    lease: LeaseColumns,
) -> None:
    """Commit the group in one transaction, fenced by the leases ``held`` gives when each
    try starts; ``lease`` gives a new session's lease columns.

    Raises:
        LeaseLost: A session of the group was taken over: nothing was written.
        StoreError: The database failed (for as long as :data:`RETRIES` tries): nothing
            was written.
        psycopg.DataError: The database refuses a row (text with NUL).
    """
    import psycopg

    retries = RETRIES.start()
    deadline = retries.started + RETRY_SECONDS
    while True:
        committing: list[int] = []  # the transaction's id, once its COMMIT is sent
        try:
            await database.in_thread(
                _commit, database, group, payloads, dict(held()), lease, committing
            )
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
            if not transient(cause):
                raise
            unanswered = committing and not isinstance(cause, psycopg.errors.TransactionRollback)
            if unanswered and await _committed(database, committing[0], deadline):
                return
            pause = retries.next_pause()
            if pause is None:
                raise
        await trio.sleep(pause)


async def _committed(database: Database, transaction: int, deadline: float) -> bool:
    """Whether the transaction committed, as the database says once it knows (until
    ``deadline``).

    Raises:
        StoreError: The database does not say, by the deadline.
    """

    def status() -> str | None:
        with database.connection() as db:
            row = db.execute("SELECT txid_status(%s)", (transaction,)).fetchone()
        return None if row is None else row[0]

    while True:
        try:
            said = await database.in_thread(status)
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
                f"the store {database.where} cannot tell whether a commit went through (its "
                "connection ended at its COMMIT): check the database, then open a new "
                "runtime on it"
            )
        await trio.sleep(0.1)


def _commit(
    database: Database,
    group: Sequence[Op],
    payloads: Sequence[Any],
    held: Held,
    lease: LeaseColumns,
    committing: list[int],
) -> None:
    with database.connection() as db, db.transaction(), db.cursor() as cursor:
        _fence(database, cursor, group, held)
        write_group(cursor, database.statements, group, payloads, lease)
        # Readers in other runtimes hear of the events once this commits.
        newest = {op.session_id: op.seq for op in group if isinstance(op, EventRow)}
        told = [(database.channel, f"{session_id} {seq}") for session_id, seq in newest.items()]
        told += [
            (database.channel, f"{op.session_id} 0")
            for op in group
            if isinstance(op, SessionRow) and op.terminated
        ]
        if told:
            cursor.executemany("SELECT pg_notify(%s, %s)", told)
        # The block's end sends COMMIT: should its answer be lost, the database tells
        # whether this transaction committed.
        (transaction,) = cursor.execute("SELECT txid_current()").fetchone() or (0,)
        committing.append(transaction)


def _fence(
    database: Database, cursor: psycopg.Cursor[Any], group: Sequence[Op], held: Held
) -> None:
    """Lock the rows of the sessions of the group this store leased, for the rest of the
    transaction (a takeover waits for it), and check that each lease is still the one this
    store took, at its epoch: a session's epoch is bumped whenever it is leased to an owner
    other than the one holding it.

    Raises:
        LeaseLost: Another runtime took over a session of the group (this one stalled past
            its lease): the transaction is rolled back, and nothing of the group is written.
    """
    touched = sorted({op.session_id for op in group if op.session_id in held})
    if not touched:
        return
    rows = cursor.execute(
        database.sql(
            "SELECT session_id, lease_owner, lease_epoch FROM {schema}.sessions"
            " WHERE session_id = ANY(%s) ORDER BY session_id FOR UPDATE"
        ),
        (touched,),
    ).fetchall()
    for session_id, owner, epoch in rows:
        if (owner, epoch) != held[session_id]:
            raise LeaseLost(session_id, owner, store=database.where)
