"""A session's event log: append, read from a cursor, wait for what comes next."""

from __future__ import annotations

import bisect
import functools
import operator
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

from .._data._entries import MessageEntry
from .._data._errors import InvalidCursorError, ObservationLost, StoreError
from .._data._events import (
    CallbackClosed,
    CallbackOpened,
    EntryAdded,
    EntryCompleted,
    EntryDelta,
    Event,
    TurnEnded,
    TurnStarted,
)
from .._data._records import TurnState
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


_new = object.__new__
_put = object.__setattr__

#: The event classes a log packs, by their code in its ``_kinds`` (0: kept whole).
_KINDS: tuple[Any, ...] = (
    None,
    TurnStarted,
    EntryAdded,
    EntryDelta,
    EntryCompleted,
    CallbackOpened,
    CallbackClosed,
    TurnEnded,
)
_CODES = {cls: code for code, cls in enumerate(_KINDS) if cls is not None}

#: The code of an ``EntryAdded`` whose entry is that of the message's ``EntryCompleted``
#: without its content (its text streamed in between): packed as the completed entry.
_OPENED = len(_KINDS)


@functools.cache
def _fields(cls: type) -> tuple[str, ...]:
    """The fields of an event class beyond those of every event."""
    return tuple(
        field.name
        for field in attrs.fields(cls)
        if field.name not in ("id", "session_id", "turn_id")
    )


#: For each class a log packs: its code, and what it keeps of an event: the value of its
#: one field, or a tuple of the values of its fields.
_PACKING: dict[type, tuple[int, Callable[[Any], Any]]] = {
    cls: (code, operator.attrgetter(*_fields(cls))) for cls, code in _CODES.items()
}
_ADDED = _CODES[EntryAdded]


def _completed_messages(events: Sequence[Any], start: int) -> dict[str, MessageEntry]:
    """The messages of the ``EntryCompleted`` events from ``start`` on, by id."""
    return {
        event.entry.id: event.entry
        for event in events[start:]
        if type(event) is EntryCompleted and type(event.entry) is MessageEntry
    }


def _opens(entry: Any, finals: dict[str, MessageEntry]) -> bool:
    """Whether ``entry`` is its completed message without content: a streamed message."""
    final = finals.get(getattr(entry, "id", None))  # type: ignore[arg-type]
    return (
        final is not None
        and type(entry) is MessageEntry
        and not entry.content
        and _beside_content(entry) == _beside_content(final)
    )


#: The fields of a message beside its content.
_beside_content = operator.attrgetter(
    *(f.name for f in attrs.fields(MessageEntry) if f.name != "content")
)


#: A log of at most this many events is packed without room to grow.
_COMPACT_MAX = 256


def _change_at(turns: Sequence[Any], seq: int) -> int:
    """The index of the last turn change at or before ``seq`` (in ``seq, turn_id, ...``)."""
    return bisect.bisect_right(range(len(turns) // 2), seq, key=lambda at: turns[2 * at]) - 1


class EventLog:
    """The events of one session, in order, numbered from 1 (their seq).

    Readers see the events the store has made durable (``visible``): an event a reader got
    is never lost. Old events may be pruned: ``first_seq`` is the oldest one still kept.

    With a durable store (``read``), the log holds the recent events only (from
    ``held_from``): the others, in the store, are read back a page at a time for the readers
    that ask. A session read back from the store holds none of its old events.

    An idle session's log keeps its events packed (:meth:`pack`): of each, only what its
    class, its seq and its turn do not say; a reader gets each as it was.
    """

    __slots__ = (
        "_changed",
        "_events",
        "_kinds",
        "_read",
        "_turns",
        "_woken",
        "closed",
        "first_seq",
        "held_from",
        "lost",
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
        # The events held, from held_from: the first len(_kinds) packed (each its fields'
        # values: one, or a tuple of them), the others whole.
        self._events: list[Any] = []
        self.first_seq = first_seq  # the oldest event kept (in memory or in the store)
        # The seq of _events[0]: the older ones (up to stored_seq, if given) are in the store.
        self.held_from = first_seq if stored_seq is None else max(first_seq, stored_seq + 1)
        self._read = read
        self.visible = self.held_from - 1  # the seq of the last durable event
        self.closed = False
        # What its waits raise once another runtime took the session over (a new error each).
        self.lost: Callable[[], BaseException] | None = None
        self._changed: trio.Event | None = None  # made when a reader waits
        self._woken = 0  # how many times wake() was called
        self._kinds: bytes | bytearray | None = None  # the class code of each packed event
        # Where the turn of the packed events changes: seq, turn_id, seq, turn_id...
        self._turns: Sequence[Any] = ()

    @property
    def last_seq(self) -> int:
        return self.held_from - 1 + len(self._events)

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
                    self._drop(drop)

    def held(self, seq: int) -> Event | None:
        """The event ``seq`` if the log holds it; None if only the store does.

        Raises:
            ObservationLost: It was pruned; the error names the cursor to resume after.
        """
        if seq < self.first_seq:
            raise self._lost(seq)
        if seq < self.held_from:
            return None
        return self._event(seq)

    def _event(self, seq: int) -> Event:
        """Event ``seq``, which the log holds: as it was, if it is packed."""
        index = seq - self.held_from
        item = self._events[index]
        kinds = self._kinds
        if kinds is None or index >= len(kinds) or not kinds[index]:
            return item  # type: ignore[no-any-return]
        code = kinds[index]
        if code == _OPENED:
            code, item = _CODES[EntryAdded], attrs.evolve(item, content=())
        cls = _KINDS[code]
        names = _fields(cls)
        values = (item,) if len(names) == 1 else item
        # Set field by field, as the class's __init__ did when the event was made.
        event = _new(cls)
        _put(event, "id", format_cursor(self.session_id, seq))
        _put(event, "session_id", self.session_id)
        _put(event, "turn_id", self._turns[2 * _change_at(self._turns, seq) + 1])
        for name, value in zip(names, values, strict=True):
            _put(event, name, value)
        return event  # type: ignore[no-any-return]

    def pack(self) -> None:
        """Keep the events held so far packed: the session is idle. A packed event takes
        9 bytes beyond its values; reading makes a copy, equal to the event."""
        events = self._events
        # A small log is kept without room to grow, a large one grows where it is: copying
        # it at every turn's end would make each turn of a long session slower.
        small = len(events) <= _COMPACT_MAX
        kinds = self._kinds if isinstance(self._kinds, bytearray) else bytearray(self._kinds or b"")
        turns = self._turns if isinstance(self._turns, list) else list(self._turns)
        session_id = self.session_id
        start = len(kinds)
        finals = _completed_messages(events, start)
        packing = _PACKING.get
        for index in range(start, len(events)):
            event = events[index]
            seq = self.held_from + index
            packed = packing(type(event))
            if (
                packed is not None
                and event.id == f"{session_id}:{seq:012d}"  # format_cursor's, inlined
                and event.session_id == session_id
            ):
                code, kept = packed
                if code == _ADDED and _opens(event.entry, finals):
                    code, events[index] = _OPENED, finals[event.entry.id]
                else:
                    events[index] = kept(event)
                if not turns or turns[-1] != event.turn_id:
                    turns += (seq, event.turn_id)
            else:
                code = 0
            kinds.append(code)
        if small:  # no room to grow: it may stay idle for long
            self._events = events[:]
            self._kinds = bytes(kinds)
            self._turns = tuple(turns)
        else:
            self._kinds = kinds
            self._turns = turns

    def _drop(self, count: int) -> None:
        """Let go of the ``count`` oldest events held."""
        del self._events[:count]
        self.held_from += count
        if self._kinds is not None:
            self._kinds = self._kinds[count:]
            # The turn of the oldest event held is the last change at or before it.
            before = _change_at(self._turns, self.held_from)
            self._turns = self._turns[2 * max(0, before) :]

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
            if self._kinds is None or start >= len(self._kinds):
                return self._events[start : self.visible - self.held_from + 1]  # none packed
            return [event, *[self._event(later) for later in range(seq + 1, self.visible + 1)]]
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
        resume = format_cursor(self.session_id, self.first_seq - 1)  # before the oldest kept
        return ObservationLost(
            f"event {seq} of session {self.session_id} was pruned (only events from "
            f"{self.first_seq} on are kept); resume after cursor {resume}",
            cursor=resume,
        )

    def prune(self, before_seq: int) -> None:
        """Forget the events before ``before_seq``."""
        first = min(before_seq, self.last_seq + 1)
        if first <= self.first_seq:
            return
        drop = max(0, min(first - self.held_from, len(self._events)))
        self._drop(drop)
        self.first_seq = first

    def close(self) -> None:
        """No event will follow: readers stop once they have read everything."""
        self.closed = True
        self._wake()

    def wake(self) -> None:
        """Wake every reader waiting here, to see that something else changed (its store
        failed, say): their waits return."""
        self._woken += 1
        self._wake()

    def take_over(self, lost: Callable[[], BaseException]) -> None:
        """Another runtime took the session over, and this one let it go: every wait here
        raises what ``lost()`` gives from now on."""
        self.lost = lost
        self.wake()

    def _wake(self) -> None:
        if self._changed is not None:  # a reader waits on it
            self._changed.set()
            self._changed = None

    def finished(self, seq: int) -> bool:
        """Whether a reader at ``seq`` has read everything: the log is closed, and no event
        after ``seq`` is left to become visible."""
        return self.closed and seq >= self.last_seq

    async def wait_beyond(self, seq: int) -> None:
        """Return once a reader may see an event after ``seq``, or has read everything.

        Raises:
            LeaseLost: Another runtime took the session over: read it again.
        """
        woken = self._woken
        while self.visible <= seq and not self.finished(seq) and self._woken == woken:
            if self.lost is not None:
                raise self.lost()
            if self._changed is None:
                self._changed = trio.Event()
            await self._changed.wait()
        if self.lost is not None and self.visible <= seq:
            raise self.lost()

    def seq_of(self, after: TurnState[Any] | str | None) -> int:
        """The position ``after`` names: 0 for None, else the seq of its cursor.

        Raises:
            InvalidCursorError: ``after`` is of another session, malformed, or a position
                this session never had.
        """
        cursor = cursor_of(after, self.session_id)
        if cursor is None:
            return 0
        seq = int(cursor.rpartition(":")[2])
        if seq > self.visible:
            raise InvalidCursorError(
                f"session {self.session_id} never had this cursor (it has {self.visible} "
                "events); pass a cursor it gave you"
            )
        return seq


def cursor_of(after: TurnState[Any] | str | None, session_id: str) -> str | None:
    """The cursor ``after`` (a record or a cursor) names, if it may be one of
    ``session_id``'s: None for None, or a record without one.

    Raises:
        InvalidCursorError: ``after`` is of another session, or malformed.
    """
    if after is None:
        return None
    if not isinstance(after, str):
        record_session = getattr(after, "session_id", None)
        if record_session is None:
            raise InvalidCursorError(
                f"after must be a turn record or a cursor string, not {type(after).__name__}"
            )
        if record_session != session_id:
            raise InvalidCursorError(
                f"this record belongs to session {record_session}, not {session_id}; "
                "pass a record or cursor of this session"
            )
        after = getattr(after, "cursor", None)
        if not after:
            return None
    owner, _, number = after.rpartition(":")
    if not owner or not (number.isascii() and number.isdigit()):
        raise InvalidCursorError(
            "after is not a cursor: pass an event's id or a record's cursor, unchanged"
        )
    if owner != session_id:
        raise InvalidCursorError(
            f"this cursor belongs to session {owner}, not {session_id}; "
            "pass a cursor of this session"
        )
    return after
