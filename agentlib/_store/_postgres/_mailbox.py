"""Requests between runtimes: a runtime asked to change a session another holds keeps a
request in the ``requests`` table (and notifies it); the holder finds the requests for the
sessions it leases, and writes its reply there (notified too), which the sender reads and
deletes. Times are the database's (``now()``), so that hosts whose clocks differ agree on
them."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

import trio

from .._base import Request
from ._database import Database
from ._notifications import POLL_SECONDS, Listener

__all__ = ["Mailbox"]

#: How long a reply no one read is kept (its sender went away), on the database's clock.
_UNREAD_REPLIES = "1 hour"


class Mailbox:
    """The requests to the runtimes that hold sessions, and their replies, in the store's
    database."""

    def __init__(self, database: Database, listener: Listener) -> None:
        self._database = database
        self._listener = listener

    async def send_request(self, session_id: str, body: Mapping[str, Any]) -> int:
        """See :meth:`Store.send_request`."""
        database = self._database

        def send() -> int:
            with database.connection() as db, db.transaction():
                row = db.execute(
                    database.sql(
                        "INSERT INTO {schema}.requests (session_id, body)"
                        " VALUES (%s, %s) RETURNING request_id"
                    ),
                    (session_id, json.dumps(body)),
                ).fetchone()
                assert row is not None
                db.execute(
                    "SELECT pg_notify(%s, %s)", (database.channel, f"{session_id} request {row[0]}")
                )
                return int(row[0])

        self._listener.listen()  # before the reply can come
        return await database.in_thread(send)

    async def wait_for_requests(self, owner: str, skip: Collection[int]) -> list[Request]:
        """See :meth:`Store.wait_for_requests`."""
        database = self._database
        heard = self._listener.requests()
        skipped = list(skip)
        sql = database.sql

        def waiting() -> list[Request]:
            with database.connection() as db, db.transaction():
                db.execute(
                    sql("DELETE FROM {schema}.requests WHERE replied < now() - %s::interval"),
                    (_UNREAD_REPLIES,),
                )
                rows = db.execute(
                    sql(
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

        found = await database.in_thread(waiting, rerun=True)
        if not found:
            with trio.move_on_after(POLL_SECONDS):
                await heard.wait()
        return found

    async def reply_request(self, request_id: int, reply: Mapping[str, Any]) -> None:
        """See :meth:`Store.reply_request`."""
        database = self._database

        def answer() -> None:
            with database.connection() as db, db.transaction():
                row = db.execute(
                    database.sql(
                        "UPDATE {schema}.requests SET reply = %s, replied = now()"
                        " WHERE request_id = %s AND reply IS NULL RETURNING session_id"
                    ),
                    (json.dumps(reply), request_id),
                ).fetchone()
                if row is not None:
                    db.execute(
                        "SELECT pg_notify(%s, %s)",
                        (database.channel, f"{row[0]} reply {request_id}"),
                    )

        await database.in_thread(answer, rerun=True)  # a reply given once: run twice, a no-op

    async def wait_for_reply(self, request_id: int) -> dict[str, Any] | None:
        """See :meth:`Store.wait_for_reply`."""
        database = self._database
        replied = self._listener.reply(request_id)  # before the read

        def read() -> dict[str, Any] | None:
            with database.connection() as db, db.transaction():
                row = db.execute(
                    database.sql(
                        "DELETE FROM {schema}.requests WHERE request_id = %s"
                        " AND reply IS NOT NULL RETURNING reply"
                    ),
                    (request_id,),
                ).fetchone()
            return None if row is None else dict(json.loads(row[0]))

        try:
            reply = await database.in_thread(read)
            if reply is None:
                with trio.move_on_after(POLL_SECONDS):
                    await replied.wait()
                reply = await database.in_thread(read)
        finally:
            self._listener.forget(request_id, replied)
        return reply

    async def withdraw_request(self, request_id: int) -> bool:
        """See :meth:`Store.withdraw_request`."""
        database = self._database

        def withdraw() -> bool:
            with database.connection() as db, db.transaction():
                gone = db.execute(
                    database.sql(
                        "DELETE FROM {schema}.requests WHERE request_id = %s AND reply IS NULL"
                    ),
                    (request_id,),
                )
                return gone.rowcount == 1

        return await database.in_thread(withdraw)
