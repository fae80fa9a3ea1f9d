"""Claims: a runtime settles a callback that another runtime holds open, in the database,
once; the holder hears of it (see ``_notifications``) and reads what was settled."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import trio

from ..._data._convert import unstructure
from .._base import CallbackRow, KeyRow
from .._queued import Place, read_callback
from ._database import Database
from ._notifications import POLL_SECONDS, Listener

if TYPE_CHECKING:
    import psycopg

__all__ = ["Claims"]


class Claims:
    """The claims of the store's callbacks, in its database."""

    def __init__(self, database: Database, listener: Listener) -> None:
        self._database = database
        self._listener = listener

    async def claim_callback(self, row: CallbackRow, key: KeyRow | None) -> CallbackRow | None:
        """See :meth:`Store.claim_callback`."""
        database = self._database
        sql = database.sql

        def claim() -> CallbackRow | None:
            with database.connection() as db, db.transaction():
                taken = db.execute(
                    sql(
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
                    return _callback_row(database, db, row.session_id, row.callback.id)
                if key is not None:
                    db.execute(
                        database.statements.insert[KeyRow],
                        (key.session_id, key.key, key.turn_id, key.fingerprint),
                    )
                db.execute(
                    "SELECT pg_notify(%s, %s)",
                    (database.channel, f"{row.session_id} claim {row.callback.id}"),
                )
            return None

        return await database.in_thread(claim)

    async def wait_for_claims(self, open_callbacks: Sequence[tuple[str, str]]) -> list[CallbackRow]:
        """See :meth:`Store.wait_for_claims`."""
        claimed = self._listener.claims()
        settled = await self._database.in_thread(
            _settled_of, self._database, list(open_callbacks), rerun=True
        )
        if not settled:
            with trio.move_on_after(POLL_SECONDS):
                await claimed.wait()
        return settled


def _settled_of(database: Database, open_callbacks: list[tuple[str, str]]) -> list[CallbackRow]:
    if not open_callbacks:
        return []
    with database.reading("the callbacks this runtime waits on") as (db, _):
        ids = db.execute(
            database.sql(
                "SELECT session_id, callback_id FROM {schema}.callbacks"
                " WHERE callback_id = ANY(%s) AND state <> 'open'"
            ),
            ([callback_id for _, callback_id in open_callbacks],),
        ).fetchall()
        wanted = set(open_callbacks)
        return [
            _callback_row(database, db, session_id, callback_id)
            for session_id, callback_id in ids
            if (session_id, callback_id) in wanted
        ]


def _callback_row(
    database: Database, db: psycopg.Connection[Any], session_id: str, callback_id: str
) -> CallbackRow:
    found = db.execute(
        database.sql(
            "SELECT callback, state, answer, error FROM {schema}.callbacks"
            " WHERE session_id = %s AND callback_id = %s"
        ),
        (session_id, callback_id),
    ).fetchone()
    if found is None:
        missing = f"callback {callback_id} is missing"
        raise database.damaged(Place(f"session {session_id}", "callbacks"), missing)
    return read_callback(session_id, *found)
