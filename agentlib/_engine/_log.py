"""A session's event log: append, read from a cursor, wait for what comes next."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

from .._errors import InvalidCursorError, ObservationLost, StoreError
from .._events import Event
from .._records import TurnState
from ._machine import format_cursor

__all__ = ["EventLog", "format_cursor"]


#: How a log reads events it no longer holds: (after seq, how many) -> the events after.
ReadEvents = Callable[[int, int], Awaitable[Sequence[Event]]]

#: With a store to read them back from, a log holds at most _HELD_MAX events in memory; past
#: it, it lets go of the oldest durable ones down to _HELD_KEEP.
_HELD_MAX = 4_000
_HELD_KEEP = 2_000

#: How many events a reader reads from the store at a time.
_PAGE = 1_000


#: An event as an idle log keeps it: (its class, its turn_id, its other fields' values).
Packed = tuple[Any, ...]

_new = object.__new__
_put = object.__setattr__


@functools.cache
def _fields(cls: type) -> tuple[str, ...]:
    """The fields of an event class beyond those of every event."""
    return tuple(
        field.name
        for field in attrs.fields(cls)
        if field.name not in ("id", "session_id", "turn_id")
    )


class EventLog:
    """The events of one session, in order, numbered from 1 (their seq).

    Readers see the events the store has made durable (``visible``): an event a reader got
    is never lost. Old events may be pruned: ``first_seq`` is the oldest one still kept.

    With a durable store (``read``), the log holds the recent events only (from
    ``held_from``): the others, in the store, are read back a page at a time for the readers
    that ask. A session read back from the store holds none of its old events.

    An idle session's log keeps its events packed (:meth:`pack`), without their ids, which
    their seq gives; a reader gets each as it was.
    """

    __slots__ = (
        "_changed",
        "_events",
        "_packed",
        "_read",
        "_woken",
        "closed",
        "first_seq",
        "held_from",
        "session_id",
        "visible",
    )

    def __init__(
        self,
        session_id: str,
        *,
        first_seq: int = 1,
        stored_seq: int | None = None,
        read: ReadEvents | None = None,
    ) -> None:
        self.session_id = session_id
        self._events: list[Event | Packed] = []
        self.first_seq = first_seq  # the oldest event kept (in memory or in the store)
        self.held_from = first_seq  # the seq of _events[0]: the older ones are in the store
        if stored_seq is not None:  # events up to stored_seq are in the store
            self.held_from = max(first_seq, stored_seq + 1)
        self._read = read
        self.visible = self.held_from - 1  # the seq of the last durable event
        self.closed = False
        self._changed: trio.Event | None = None  # made when a reader waits
        self._woken = 0  # how many times wake() was called
        self._packed = 0  # how many of _events (the first ones) are packed

    @property
    def last_seq(self) -> int:
        return self.held_from - 1 + len(self._events)

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
            if self._read is not None and len(self._events) > _HELD_MAX:
                # The oldest are durable: readers that want them read them back.
                drop = min(len(self._events) - _HELD_KEEP, self.visible - self.held_from + 1)
                if drop > 0:
                    del self._events[:drop]
                    self.held_from += drop
                    self._packed = max(0, self._packed - drop)

    def held(self, seq: int) -> Event | None:
        """The event ``seq`` if the log holds it; None if only the store does.

        Raises:
            ObservationLost: It was pruned; the error names the cursor to resume after.
        """
        if seq < self.first_seq:
            raise self._lost(seq)
        if seq < self.held_from:
            return None
        return self._unpack(seq, self._events[seq - self.held_from])

    def _unpack(self, seq: int, item: Event | Packed) -> Event:
        if not isinstance(item, tuple):
            return item
        cls, turn_id, *values = item
        # Set field by field, as the class's __init__ did when the event was made.
        event = _new(cls)
        _put(event, "id", format_cursor(self.session_id, seq))
        _put(event, "session_id", self.session_id)
        _put(event, "turn_id", turn_id)
        for name, value in zip(_fields(cls), values, strict=True):
            _put(event, name, value)
        return event  # type: ignore[no-any-return]

    def pack(self) -> None:
        """Keep the events held so far packed: the session is idle, and a packed event
        takes a third of the memory. Reading unpacks a copy, equal to the event."""
        events = self._events
        session_id = self.session_id
        for index in range(self._packed, len(events)):
            event = events[index]
            assert not isinstance(event, tuple)
            seq = self.held_from + index
            if event.session_id == session_id and event.id == format_cursor(session_id, seq):
                cls: type = type(event)
                events[index] = (cls, event.turn_id, *[getattr(event, n) for n in _fields(cls)])
        self._packed = len(events)

    async def read_page(self, seq: int) -> Sequence[Event]:
        """Visible events from ``seq`` on (at least one, if ``seq`` is visible): those the
        log holds, or a page read from the store.

        Raises:
            ObservationLost: ``seq`` was pruned, also while it was being read.
            StoreError: The store lacks events that were never pruned: it is damaged.
        """
        event = self.held(seq)
        if event is not None:
            start = seq - self.held_from
            held = self._events[start : self.visible - self.held_from + 1]
            if start >= self._packed:
                return held  # type: ignore[return-value]  # none is packed
            return [self._unpack(seq + offset, item) for offset, item in enumerate(held)]
        assert self._read is not None, "a log without a store holds every event"
        page = await self._read(seq - 1, min(_PAGE, self.held_from - seq))
        if seq < self.first_seq:
            raise self._lost(self.first_seq)  # pruned meanwhile
        bounds = (
            format_cursor(self.session_id, seq),
            format_cursor(self.session_id, seq + len(page) - 1),
        )
        if not page or (page[0].id, page[-1].id) != bounds:
            # This log prunes before its store does: the store lost events it should have.
            raise StoreError(
                f"the store lacks some events of session {self.session_id} from event {seq} "
                "on, which were never pruned: it is damaged; restore it from a backup"
            )
        return page

    def _lost(self, seq: int) -> ObservationLost:
        return ObservationLost(
            f"event {seq} of session {self.session_id} was pruned (only events from "
            f"{self.first_seq} on are kept); resume after cursor {self.resume_cursor}",
            cursor=self.resume_cursor,
        )

    @property
    def resume_cursor(self) -> str:
        """Where a reader that lost events resumes: right before the oldest event kept."""
        return format_cursor(self.session_id, self.first_seq - 1)

    def prune(self, before_seq: int) -> None:
        """Forget the events before ``before_seq``."""
        first = min(before_seq, self.last_seq + 1)
        if first <= self.first_seq:
            return
        drop = max(0, min(first - self.held_from, len(self._events)))
        del self._events[:drop]
        self.held_from += drop
        self._packed = max(0, self._packed - drop)
        self.first_seq = first

    def close(self) -> None:
        """No event will follow: readers stop once they have read everything."""
        self.closed = True
        self._wake()

    def wake(self) -> None:
        """Wake every reader waiting here, to see that something else changed (its store
        failed, say): their waits return."""
        self._woken += 1
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def _wake(self) -> None:
        if self._changed is not None:  # a reader waits on it
            self._changed.set()
            self._changed = None

    def finished(self, seq: int) -> bool:
        """Whether a reader at ``seq`` has read everything: the log is closed, and no event
        after ``seq`` is left to become visible."""
        return self.closed and seq >= self.last_seq

    async def wait_beyond(self, seq: int) -> None:
        """Return once a reader may see an event after ``seq``, or has read everything."""
        woken = self._woken
        while self.visible <= seq and not self.finished(seq) and self._woken == woken:
            if self._changed is None:
                self._changed = trio.Event()
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
        if seq > self.visible:
            raise InvalidCursorError(
                f"session {self.session_id} never had this cursor (it has {self.visible} "
                "events); pass a cursor it gave you"
            )
        return seq
