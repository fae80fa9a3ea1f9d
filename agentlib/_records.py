"""Turn records: what a turn is doing, or how it ended; and the answers of session calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Generic, Literal, TypeVar, Union

import attrs

from ._callbacks import AllowApproval, Callback, DenyApproval
from ._content import _to_tuple
from ._entries import ToolCallEntry
from ._json import check_nesting, known_tag_refused, raw_field
from ._usage import Usage

__all__ = [
    "AlreadySettled",
    "Answered",
    "Blocked",
    "Busy",
    "Completed",
    "ErrorInfo",
    "Failed",
    "Interrupted",
    "NotFound",
    "Running",
    "TurnConflict",
    "TurnState",
    "UnknownOutcome",
    "UnknownRecord",
]

OutputT = TypeVar("OutputT")
TurnT = TypeVar("TurnT")


@attrs.frozen(kw_only=True)
class ErrorInfo:
    """What went wrong.

    Attributes:
        type: The error's kind, e.g. the exception's class name ``"ModelError"``.
        message: What was wrong and what to do.
    """

    type: str
    message: str


@attrs.frozen(kw_only=True)
class _Record:
    turn_id: str
    session_id: str
    cursor: str | None = None


@attrs.frozen(kw_only=True)
class Running(_Record):
    """The turn is running: the model or a tool is working."""

    type: ClassVar[str] = "running"


@attrs.frozen(kw_only=True)
class Blocked(_Record):
    """The turn waits on callbacks only the client can settle.

    Attributes:
        callbacks: The open callbacks, the turn's own and its subagents'.
    """

    type: ClassVar[str] = "blocked"
    __match_args__ = ("callbacks",)
    callbacks: tuple[Callback, ...] = attrs.field(default=(), converter=_to_tuple)


@attrs.frozen(kw_only=True)
class Completed(_Record, Generic[OutputT]):
    """The agent answered.

    Attributes:
        output: The answer: the text, or the text structured into the output type.
        text: The answer's raw text.
        tool_calls: The tool calls this turn made, in order.
        usage: The tokens the turn's model replies took together; None if the model
            reported none (an offline model).
    """

    type: ClassVar[str] = "completed"
    __match_args__ = ("output", "text", "tool_calls")
    output: OutputT = attrs.field(validator=check_nesting)
    text: str = ""
    tool_calls: tuple[ToolCallEntry, ...] = attrs.field(default=(), converter=_to_tuple)
    usage: Usage | None = None


@attrs.frozen(kw_only=True)
class Interrupted(_Record):
    """The turn was stopped.

    Attributes:
        cause: ``"interrupted"`` by ``turn.interrupt()``, or ``"cancelled"`` with its session.
    """

    type: ClassVar[str] = "interrupted"
    __match_args__ = ("cause",)
    cause: Literal["interrupted", "cancelled"] = "interrupted"


@attrs.frozen(kw_only=True)
class Failed(_Record):
    """The turn failed.

    Attributes:
        error: What went wrong.
    """

    type: ClassVar[str] = "failed"
    __match_args__ = ("error",)
    error: ErrorInfo


@attrs.frozen(kw_only=True)
class UnknownOutcome(_Record):
    """The runtime lost the turn (e.g. its process died mid-turn): how it ended is unknown.

    Attributes:
        reason: What happened.
    """

    type: ClassVar[str] = "unknown_outcome"
    __match_args__ = ("reason",)
    reason: str


@attrs.frozen(kw_only=True)
class UnknownRecord(_Record):
    """A record of a kind added after this version of agentlib.

    Attributes:
        record_type: Its type as received.
        raw: Its other fields as received (all but type, ids and cursor); re-emitted unchanged.
    """

    __match_args__ = ("record_type",)
    record_type: str = attrs.field(validator=known_tag_refused(lambda: TurnState, "record"))
    raw: Mapping[str, Any] = raw_field("turn_id", "session_id", "cursor")


TurnState = Union[
    Running, Blocked, Completed[OutputT], Interrupted, Failed, UnknownOutcome, UnknownRecord
]


@attrs.frozen(kw_only=True)
class Busy(Generic[TurnT]):
    """The session has an active turn, so no turn was started.

    Attributes:
        turn: A reference to the active turn.
    """

    type: ClassVar[str] = "busy"
    turn: TurnT


@attrs.frozen(kw_only=True)
class TurnConflict:
    """This turn is no longer the session's active turn, so nothing was done.

    Attributes:
        turn_id: The turn the call named.
    """

    type: ClassVar[str] = "turn_conflict"
    turn_id: str


@attrs.frozen(kw_only=True)
class Answered:
    """The callback was open and an answer was taken.

    Attributes:
        answer: For an approval, the answer that was taken (compare it with yours: the first
            of two concurrent answers wins); None for a client tool call or a sign-in.
        session_id: The session the callback belongs to (a subagent's, for its callbacks).
    """

    type: ClassVar[str] = "answered"
    answer: AllowApproval | DenyApproval | None = None
    session_id: str


@attrs.frozen(kw_only=True)
class AlreadySettled:
    """The callback was open once but is no longer: another answer came first, or it closed.

    Attributes:
        session_id: The session the callback belongs to.
    """

    type: ClassVar[str] = "already_settled"
    session_id: str


@attrs.frozen(kw_only=True)
class NotFound:
    """The session never opened a callback with that id."""

    type: ClassVar[str] = "not_found"
