"""A session's event log in memory: append, read from a cursor, wait for what comes next."""

from __future__ import annotations

from typing import Any

import trio

from .._errors import InvalidCursorError
from .._events import Event
from .._records import TurnState

__all__ = ["EventLog", "format_cursor"]


def format_cursor(session_id: str, seq: int) -> str:
    """The cursor of a session's ``seq``-th event (1-based); strings sort like positions."""
    return f"{session_id}:{seq:012d}"


class EventLog:
    """The events of one session, in order; event number ``n`` (1-based) is ``events[n-1]``."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.events: list[Event] = []
        self.closed = False
        self._changed = trio.Event()

    @property
    def last_seq(self) -> int:
        return len(self.events)

    def next_id(self) -> str:
        """The id the next appended event must have."""
        return format_cursor(self.session_id, len(self.events) + 1)

    def last_cursor(self) -> str | None:
        return format_cursor(self.session_id, len(self.events)) if self.events else None

    def append(self, event: Event) -> None:
        self.events.append(event)
        self._wake()

    def close(self) -> None:
        """No event will follow: readers stop once they have read everything."""
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_beyond(self, seq: int) -> None:
        """Return once there is an event after ``seq``, or the log is closed."""
        while len(self.events) <= seq and not self.closed:
            await self._changed.wait()

    def seq_of(self, after: TurnState[Any] | str | None) -> int:
        """The position ``after`` names: 0 for None, else the seq of its cursor.

        Raises:
            InvalidCursorError: ``after`` is of another session, malformed, or a position
                this session never had.
        """
        if after is None:
            return 0
        if isinstance(after, str):
            cursor = after
        else:
            record_session = getattr(after, "session_id", None)
            if record_session is None:
                raise InvalidCursorError(
                    f"after must be a turn record or a cursor string, not {type(after).__name__}"
                )
            if record_session != self.session_id:
                raise InvalidCursorError(
                    f"this record belongs to session {record_session}, not {self.session_id}; "
                    "pass a record or cursor of this session"
                )
            cursor = getattr(after, "cursor", None) or ""
            if not cursor:
                return 0
        session_id, _, number = cursor.rpartition(":")
        if not session_id or not number.isdigit():
            raise InvalidCursorError(
                "after is not a cursor: pass an event's id or a record's cursor, unchanged"
            )
        if session_id != self.session_id:
            raise InvalidCursorError(
                f"this cursor belongs to session {session_id}, not {self.session_id}; "
                "pass a cursor of this session"
            )
        seq = int(number)
        if seq > len(self.events):
            raise InvalidCursorError(
                f"session {self.session_id} never had this cursor (it has {len(self.events)} "
                "events); pass a cursor it gave you"
            )
        return seq
