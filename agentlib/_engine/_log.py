"""A session's event log in memory: append, read from a cursor, wait for what comes next."""

from __future__ import annotations

from typing import Any

import trio

from .._errors import InvalidCursorError, ObservationLost
from .._events import Event
from .._records import TurnState

__all__ = ["EventLog", "format_cursor"]


def format_cursor(session_id: str, seq: int) -> str:
    """The cursor of a session's ``seq``-th event (1-based); strings sort like positions."""
    return f"{session_id}:{seq:012d}"


class EventLog:
    """The events of one session, in order, numbered from 1 (their seq).

    Readers see the events the store has made durable (``visible``): an event a reader got
    is never lost. Old events may be pruned: ``first_seq`` is the oldest one still held.
    """

    def __init__(self, session_id: str, *, first_seq: int = 1) -> None:
        self.session_id = session_id
        self._events: list[Event] = []
        self.first_seq = first_seq  # the seq of _events[0]
        self.visible = first_seq - 1  # the seq of the last durable event
        self.closed = False
        self._changed = trio.Event()
        self._waiting = 0  # readers waiting on _changed
        self._woken = 0  # how many times wake() was called

    @property
    def last_seq(self) -> int:
        return self.first_seq - 1 + len(self._events)

    def next_id(self) -> str:
        """The id the next appended event must have."""
        return format_cursor(self.session_id, self.last_seq + 1)

    def last_cursor(self) -> str | None:
        """The cursor of the last event a reader may see."""
        return format_cursor(self.session_id, self.visible) if self.visible else None

    def append(self, event: Event) -> None:
        self._events.append(event)

    def made_visible(self, seq: int) -> None:
        """The store made the events up to ``seq`` durable: readers may see them."""
        if seq > self.visible:
            self.visible = seq
            self._wake()

    def event(self, seq: int) -> Event:
        """The event ``seq``.

        Raises:
            ObservationLost: It was pruned; the error names the cursor to resume after.
        """
        index = seq - self.first_seq
        if index < 0:
            raise ObservationLost(
                f"event {seq} of session {self.session_id} was pruned (only events from "
                f"{self.first_seq} on are kept); resume after cursor {self.resume_cursor}",
                cursor=self.resume_cursor,
            )
        return self._events[index]

    @property
    def resume_cursor(self) -> str:
        """Where a reader that lost events resumes: right before the oldest event kept."""
        return format_cursor(self.session_id, self.first_seq - 1)

    def prune(self, before_seq: int) -> None:
        """Forget the events before ``before_seq``."""
        drop = max(0, min(before_seq - self.first_seq, len(self._events)))
        del self._events[:drop]
        self.first_seq += drop

    def close(self) -> None:
        """No event will follow: readers stop once they have read everything."""
        self.closed = True
        self._wake()

    def wake(self) -> None:
        """Wake every reader waiting here, to see that something else changed (its store
        failed, say): their waits return."""
        self._woken += 1
        self._changed.set()
        self._changed = trio.Event()

    def _wake(self) -> None:
        if self._waiting:  # a new Event only when a reader waits on this one
            self._changed.set()
            self._changed = trio.Event()

    def finished(self, seq: int) -> bool:
        """Whether a reader at ``seq`` has read everything: the log is closed, and no event
        after ``seq`` is left to become visible."""
        return self.closed and seq >= self.last_seq

    async def wait_beyond(self, seq: int) -> None:
        """Return once a reader may see an event after ``seq``, or has read everything."""
        woken = self._woken
        while self.visible <= seq and not self.finished(seq) and self._woken == woken:
            self._waiting += 1
            try:
                await self._changed.wait()
            finally:
                self._waiting -= 1

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
        if seq > self.visible:
            raise InvalidCursorError(
                f"session {self.session_id} never had this cursor (it has {self.visible} "
                "events); pass a cursor it gave you"
            )
        return seq
