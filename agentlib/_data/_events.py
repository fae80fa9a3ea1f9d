"""Events: the append-only log of everything a session does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Union

import attrs

from ._callbacks import AllowApproval, Callback, DenyApproval
from ._entries import Entry, MessageEntry
from ._json import known_tag_refused, raw_field
from ._records import TurnState

__all__ = [
    "CallbackClosed",
    "CallbackOpened",
    "EntryAdded",
    "EntryCompleted",
    "EntryDelta",
    "Event",
    "TurnEnded",
    "TurnStarted",
    "UnknownEvent",
]


@attrs.frozen(kw_only=True)
class _Event:
    id: str
    session_id: str
    turn_id: str | None = None


@attrs.frozen(kw_only=True)
class TurnStarted(_Event):
    """A turn started.

    Attributes:
        message: The message that started it.
    """

    type: ClassVar[str] = "turn_started"
    __match_args__ = ("message",)
    message: MessageEntry


@attrs.frozen(kw_only=True)
class EntryAdded(_Event):
    """An entry started (a model message may then stream as :class:`EntryDelta` events).

    Attributes:
        entry: The entry as it started.
    """

    type: ClassVar[str] = "entry_added"
    __match_args__ = ("entry",)
    entry: Entry


@attrs.frozen(kw_only=True)
class EntryDelta(_Event):
    """A piece of streamed text of an entry that has started and not yet completed.

    Attributes:
        entry_id: The entry the text belongs to.
        delta: The new text.
    """

    type: ClassVar[str] = "entry_delta"
    __match_args__ = ("entry_id", "delta")
    entry_id: str
    delta: str


@attrs.frozen(kw_only=True)
class EntryCompleted(_Event):
    """An entry is complete.

    Attributes:
        entry: The complete entry.
    """

    type: ClassVar[str] = "entry_completed"
    __match_args__ = ("entry",)
    entry: Entry


@attrs.frozen(kw_only=True)
class CallbackOpened(_Event):
    """The turn started waiting on a callback.

    Attributes:
        callback: The open callback.
    """

    type: ClassVar[str] = "callback_opened"
    __match_args__ = ("callback",)
    callback: Callback


@attrs.frozen(kw_only=True)
class CallbackClosed(_Event):
    """A callback was settled, or closed because its turn ended.

    Attributes:
        callback_id: The callback's id.
        answer: The approval answer taken; None for other callbacks, or one closed unanswered.
        answered: False when the callback closed without an answer (its turn ended).
    """

    type: ClassVar[str] = "callback_closed"
    __match_args__ = ("callback_id",)
    callback_id: str
    answer: AllowApproval | DenyApproval | None = None
    answered: bool = True


@attrs.frozen(kw_only=True)
class TurnEnded(_Event):
    """The turn ended; always the last event of a turn.

    Attributes:
        record: How it ended.
    """

    type: ClassVar[str] = "turn_ended"
    __match_args__ = ("record",)
    record: TurnState[Any]


@attrs.frozen(kw_only=True)
class UnknownEvent(_Event):
    """An event of a type added after this version of agentlib.

    Attributes:
        event_type: Its type as received.
        raw: Its other fields as received (all but type, ids and cursor); re-emitted unchanged.
    """

    __match_args__ = ("event_type",)
    event_type: str = attrs.field(validator=known_tag_refused(lambda: Event, "event"))
    raw: Mapping[str, Any] = raw_field("id", "session_id", "turn_id")


Event = Union[
    TurnStarted,
    EntryAdded,
    EntryDelta,
    EntryCompleted,
    CallbackOpened,
    CallbackClosed,
    TurnEnded,
    UnknownEvent,
]
"""An event of a session's log: match it by class; ``TurnEnded`` ends each turn."""
