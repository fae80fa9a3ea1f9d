"""How the PostgreSQL store hears of other runtimes' commits (LISTEN/NOTIFY).

Each commit notifies (``NOTIFY``, in its transaction) the sessions it appended events to,
each claim the callback it settled, each request and reply its own; one thread per store
object listens, on a connection of its own, from the first wait on; and a wait reads what it
waits for every :data:`POLL_SECONDS` too, since a notification may be lost.
"""

from __future__ import annotations

import threading

import attrs
import trio

from ..._trio._threads import run_in_thread
from .._base import Progress
from ._database import Database

__all__ = ["POLL_SECONDS", "Listener"]

#: How often a wait for another runtime's events reads the session's progress, in case a
#: notification was lost (PostgreSQL delivers them at most once).
POLL_SECONDS = 1.0


@attrs.define
class _Wait:
    """The readers waiting for a session's next commit: set when one is heard of, with the
    last seq it told (-1 when none was told: anything may have changed)."""

    heard: trio.Event = attrs.field(factory=trio.Event)
    seq: int = -1


class Listener:
    """The thread listening on the database's channel, and what waits on it: the readers of
    sessions, the claims, the requests, the senders waiting for replies."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._waiting: dict[str, _Wait] = {}  # the readers waiting, by session
        self._claims = trio.Event()  # set when a claim is heard of
        self._requests = trio.Event()  # set when a request is heard of
        self._replies: dict[int, trio.Event] = {}  # the senders waiting, by request
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def listen(self) -> None:
        """Start listening for other runtimes' commits, once."""
        if self._thread is None:
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._listening,
                args=(trio.lowlevel.current_trio_token(), self._stop),
                name=f"agentlib listener of {self._database.where}",
                daemon=True,
            )
            self._thread.start()

    async def aclose(self) -> None:
        """Stop listening, and wait for the thread to end."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            await run_in_thread(thread.join)

    def claims(self) -> trio.Event:
        """What is set at the next claim (listening first)."""
        self.listen()
        if self._claims.is_set():
            self._claims = trio.Event()
        return self._claims

    def requests(self) -> trio.Event:
        """What is set at the next request (listening first)."""
        self.listen()
        if self._requests.is_set():
            self._requests = trio.Event()
        return self._requests

    def reply(self, request_id: int) -> trio.Event:
        """What is set when the request is replied to (listening first); :meth:`forget`
        it once read."""
        self.listen()
        return self._replies.setdefault(request_id, trio.Event())

    def forget(self, request_id: int, replied: trio.Event) -> None:
        if self._replies.get(request_id) is replied:
            del self._replies[request_id]

    async def wait_for_events(self, session_id: str, after: int) -> Progress | None:
        """See :meth:`Store.wait_for_events`."""
        database = self._database
        self.listen()
        changed = self._waiting.setdefault(session_id, _Wait())  # before the read
        progress = await database.in_thread(_progress_of, database, session_id, rerun=True)
        if progress is None or progress.last_seq > after or progress.terminated:
            return progress
        with trio.move_on_after(POLL_SECONDS):
            await changed.heard.wait()
        if changed.seq > after:  # a commit told its last seq: no need to read it
            return attrs.evolve(progress, last_seq=changed.seq)
        return await database.in_thread(_progress_of, database, session_id, rerun=True)

    def _listening(self, token: trio.lowlevel.TrioToken, stop: threading.Event) -> None:
        """The listening thread: one connection, LISTENing, until the store closes; it
        connects again after a failure (and wakes every reader: it may have missed
        something meanwhile)."""
        import psycopg

        while not stop.is_set():
            try:
                with psycopg.connect(
                    self._database.conninfo, autocommit=True, connect_timeout=10
                ) as db:
                    db.execute(f'LISTEN "{self._database.channel}"')
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


def _progress_of(database: Database, session_id: str) -> Progress | None:
    with database.reading(f"session {session_id}") as (db, _):
        row = db.execute(
            database.sql(
                "SELECT first_seq, last_seq, terminated, parent_id IS NOT NULL"
                " FROM {schema}.sessions WHERE session_id = %s"
            ),
            (session_id,),
        ).fetchone()
    return None if row is None else Progress(*row)
