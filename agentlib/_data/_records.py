"""Turn records: what a turn is doing, or how it ended; and the answers of session calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Generic, Literal, NoReturn, TypeVar, Union, cast

import attrs

from ._callbacks import (
    AllowApproval,
    Callback,
    DenyApproval,
    OpenApproval,
    OpenClientToolCall,
    OpenSignIn,
    UnknownCallback,
)
from ._content import _to_tuple
from ._entries import ToolCallEntry
from ._errors import TurnNotCompletedError
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
class _NotCompleted(_Record):
    """A record of a turn that has no output: running, blocked, or ended otherwise."""

    def output_or_raise(self) -> NoReturn:
        """Raise :class:`TurnNotCompletedError`: only a ``Completed`` turn has an output.

        Raises:
            TurnNotCompletedError: Always; its message names this record's kind and why.
        """
        record = cast("TurnState[Any]", self)  # every subclass is a member of the union
        raise TurnNotCompletedError(
            f"turn {self.turn_id} did not complete: {self._why()}", record=record
        )

    def _why(self) -> str:
        raise NotImplementedError


@attrs.frozen(kw_only=True)
class Running(_NotCompleted):
    """The turn is running: the model or a tool is working."""

    type: ClassVar[str] = "running"

    def _why(self) -> str:
        return "it is Running (the wait ended before the turn did); wait with turn.result()"


@attrs.frozen(kw_only=True)
class Blocked(_NotCompleted):
    """The turn waits on callbacks only the client can settle.

    Attributes:
        callbacks: The open callbacks, the turn's own and its subagents'.
    """

    type: ClassVar[str] = "blocked"
    __match_args__ = ("callbacks",)
    callbacks: tuple[Callback, ...] = attrs.field(default=(), converter=_to_tuple)

    def _why(self) -> str:
        waiting = ", ".join(_describe(callback) for callback in self.callbacks)
        return (
            f"it is Blocked on {len(self.callbacks)} open callback(s): {waiting}; answer them "
            "with turn.answer(), then wait with turn.result(after=record)"
        )


def _describe(callback: Callback) -> str:
    if isinstance(callback, (OpenApproval, OpenClientToolCall)):
        what = f"{type(callback).__name__} for {callback.tool_name}"
    elif isinstance(callback, OpenSignIn):
        what = f"OpenSignIn for {', '.join(callback.sources)}"
    elif isinstance(callback, UnknownCallback):
        what = f"a callback of type {callback.callback_type!r}"
    else:  # pragma: no cover - the union has no other member
        what = type(callback).__name__
    return f"{what} (id {callback.id})"


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

    def output_or_raise(self) -> OutputT:
        """The answer: :attr:`output`. Every other record raises here instead.

        ``session.run(...).output_or_raise()`` is the short form of matching the record
        when anything but ``Completed`` is an error to you.
        """
        return self.output


@attrs.frozen(kw_only=True)
class Interrupted(_NotCompleted):
    """The turn was stopped.

    Attributes:
        cause: ``"interrupted"`` by ``turn.interrupt()``, or ``"cancelled"`` with its session.
    """

    type: ClassVar[str] = "interrupted"
    __match_args__ = ("cause",)
    cause: Literal["interrupted", "cancelled"] = "interrupted"

    def _why(self) -> str:
        return f"it was Interrupted (cause: {self.cause})"


@attrs.frozen(kw_only=True)
class Failed(_NotCompleted):
    """The turn failed.

    Attributes:
        error: What went wrong.
    """

    type: ClassVar[str] = "failed"
    __match_args__ = ("error",)
    error: ErrorInfo

    def _why(self) -> str:
        return f"it Failed with {self.error.type}: {self.error.message}"


@attrs.frozen(kw_only=True)
class UnknownOutcome(_NotCompleted):
    """The runtime lost the turn (e.g. its process died mid-turn): how it ended is unknown.

    Attributes:
        reason: What happened.
    """

    type: ClassVar[str] = "unknown_outcome"
    __match_args__ = ("reason",)
    reason: str

    def _why(self) -> str:
        return f"its outcome is unknown (UnknownOutcome: {self.reason})"


@attrs.frozen(kw_only=True)
class UnknownRecord(_NotCompleted):
    """A record of a kind added after this version of agentlib.

    Attributes:
        record_type: Its type as received.
        raw: Its other fields as received (all but type, ids and cursor); re-emitted unchanged.
    """

    __match_args__ = ("record_type",)
    record_type: str = attrs.field(validator=known_tag_refused(lambda: TurnState, "record"))
    raw: Mapping[str, Any] = raw_field("turn_id", "session_id", "cursor")

    def _why(self) -> str:
        return (
            f"its record is of a kind this version of agentlib does not know "
            f"({self.record_type!r}); upgrade agentlib to read it"
        )


TurnState = Union[
    Running, Blocked, Completed[OutputT], Interrupted, Failed, UnknownOutcome, UnknownRecord
]
"""A turn's record: ``Running``, ``Blocked``, or how it ended. Match it by class, or call
``output_or_raise()`` when anything but ``Completed`` is an error to you. Every record has
``turn_id``, ``session_id`` and ``cursor`` (the id of the session's last event when read)."""


@attrs.frozen(kw_only=True)
class Busy(Generic[TurnT]):
    """The session has an active turn, so no turn was started.

    Attributes:
        turn: A reference to the active turn.
    """

    type: ClassVar[str] = "busy"
    turn: TurnT

    def output_or_raise(self) -> NoReturn:
        """Raise :class:`TurnNotCompletedError`: no turn was started, so there is no output.

        Raises:
            TurnNotCompletedError: Always; its message names the active turn.
        """
        turn_id = getattr(self.turn, "id", self.turn)
        raise TurnNotCompletedError(
            f"no turn was started: the session is Busy with turn {turn_id}; wait for it "
            "with busy.turn.result(), or send with send_message() to join it",
            record=self,
        )


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
