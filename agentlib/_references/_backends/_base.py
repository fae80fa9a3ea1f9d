"""The interface a reference's verbs go through, and what every backend reads them with."""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, Union

import attrs
import cattrs

from ..._data._content import ContentBlock, TextContentBlock, UnknownContentBlock
from ..._data._convert import CONVERTER, validation_error
from ..._data._errors import ValidationError
from ..._data._events import Event, TurnEnded
from ..._data._json import InvalidValue
from ..._data._records import (
    AlreadySettled,
    Answered,
    Completed,
    ErrorInfo,
    Failed,
    NotFound,
    TurnState,
)
from ..._engine._log import cursor_of
from ..._engine._machine import seq_of_cursor
from ..._models._base import check_for_model
from ..._toolkit._output import parse_output

__all__ = [
    "Backend",
    "Content",
    "EventHandler",
    "EventReader",
    "Occupied",
    "Started",
    "Told",
    "event_for_reader",
    "for_reader",
    "message_content",
    "position_of",
    "seq_of_event",
]

#: A message: a string, or content blocks (or dicts with the same fields).
Content = Union[str, Sequence[Union[ContentBlock, Mapping[str, Any]]]]
#: A function (sync or async) called with each event.
EventHandler = Callable[[Event], Any]
#: What an answer (or a handler's failure) is told.
Told = Union[Answered, AlreadySettled, NotFound]


@attrs.frozen(kw_only=True)
class Started:
    """A turn a start began, or found by its idempotency key.

    Attributes:
        turn_id: The turn's id.
        new: False for a turn an idempotency key had started already.
        record: Its record, if the backend waited on it while starting it (else None).
        left: The seconds left of the caller's timeout for the wait that follows.
    """

    turn_id: str
    new: bool
    record: TurnState[Any] | None = None
    left: float | None = None


@attrs.frozen(kw_only=True)
class Occupied:
    """A start refused: the session's active turn.

    Attributes:
        turn_id: The active turn's id.
    """

    turn_id: str


class EventReader(Protocol):
    """A reader of a session's (or a turn's) stored events, from a position on: pages of
    them, each waiting for the next event.

    Attributes:
        cursor: The cursor of the position read up to (``after`` until a page moves it).
        ended: Whether no more events will come (known once a page is read).
    """

    cursor: str | None
    ended: bool

    async def page(self, limit: int, wait: float) -> list[Event]:
        """Up to ``limit`` events after the position, waiting up to ``wait`` seconds for
        one (a reader may wait less, and return none).

        Raises:
            InvalidCursorError: The session never had the cursor the reader starts after.
            TurnNotFoundError: The session has no such turn.
            ObservationLost: The events after the position were pruned.
        """

    def close(self) -> None:
        """Read no more: what it held for reading (a session kept in memory) is let go."""


class Backend(Protocol):
    """Where a session lives, as its references reach it: every verb of ``Session`` and
    ``Turn`` once, by session (and turn) id. Two references are equal when their backends
    have the same ``place`` and they name the same session."""

    @property
    def agent(self) -> Any:
        """The agent, as the reference knows it: its ``name`` and ``output_type``."""

    @property
    def place(self) -> object:
        """What two references to one session share: a runtime, a server's address."""

    def describe(self, session_id: str) -> str:
        """A reference's repr."""

    def describe_turn(self, session_id: str, turn_id: str, started: bool | None) -> str:
        """A turn reference's repr."""

    async def start(
        self,
        session_id: str,
        procedure: str,
        content: Content,
        key: str | None,
        output_type: Any,
        max_steps: int | None,
        *,
        timeout: float | None = None,
        wait: bool = False,
    ) -> Started | Occupied:
        """Start a turn; with ``wait``, the backend may wait up to ``timeout`` for it."""

    async def send_message(
        self, session_id: str, content: Content, key: str | None
    ) -> tuple[str, bool]:
        """Start a turn or steer the active one: its id, and whether it started."""

    async def steer(self, session_id: str, turn_id: str, content: Content) -> bool:
        """Add a message to the active turn: whether it was."""

    async def interrupt(self, session_id: str, turn_id: str) -> bool:
        """Stop the active turn, once it has ended: whether it was the active turn."""

    async def cancel(self, session_id: str) -> None:
        """End the session and its subagents."""

    async def answer(
        self, session_id: str, turn_id: str, callback_id: str, answer: object, key: str | None
    ) -> Told:
        """Settle an open callback of the session."""

    async def report(
        self, session_id: str, turn_id: str, callback_id: str, failure: str
    ) -> Told | None:
        """Tell the model that a client tool call's handler failed (None: it raises)."""

    async def record(self, session_id: str, turn_id: str) -> TurnState[Any]:
        """The turn's record now."""

    async def settled(
        self, session_id: str, turn_id: str, after: str | None, deadline: float
    ) -> TurnState[Any] | None:
        """The turn's record once it ends or blocks on a callback opened after cursor
        ``after``, or at ``deadline``, waited for where the session is (on a server); None
        where a wait follows the turn's events instead."""

    def events(self, session_id: str, after: str | None, turn_id: str | None) -> EventReader:
        """A reader of the session's events (of one turn, with ``turn_id``) after cursor
        ``after``, until it is closed: the one source of events of every backend, which
        waits and readers follow. Sends no request."""

    async def subagents(self, session_id: str) -> list[tuple[str, Backend]]:
        """The direct subagent sessions, newest first, each with its backend."""


def message_content(content: Content, model: object = None) -> tuple[ContentBlock, ...]:
    """A message's content as blocks, which ``model`` can take.

    Raises:
        ValidationError: ``content`` is empty, not a str or a list of blocks, or holds a
            malformed or unknown block (one nested deeper than the limit of 100 arrays and
            objects, say), or one that ``model`` refuses (its ``check_content``): nothing
            joins the history.
    """
    if isinstance(content, str):
        if not content:
            raise ValidationError("invalid message: it is empty; send some text or blocks")
        return (TextContentBlock(text=content),)
    if isinstance(content, (bytes, Mapping)) or not isinstance(content, Sequence):
        raise ValidationError(
            f"invalid message: expected a str or a list of content blocks, "
            f"got {type(content).__name__}"
        )
    if not content:
        raise ValidationError("invalid message: it has no content block")
    try:
        blocks: tuple[ContentBlock, ...] = CONVERTER.structure(
            list(content), tuple[ContentBlock, ...]
        )
    except (cattrs.BaseValidationError, InvalidValue) as exc:
        raise validation_error(exc, "message") from exc
    problems = tuple(
        f"a message cannot hold a block of a type this version does not know @ $[{index}]"
        for index, block in enumerate(blocks)
        if isinstance(block, UnknownContentBlock)
    )
    if problems:
        raise ValidationError("invalid message: " + "; ".join(problems), problems)
    check_for_model(model, blocks)
    return blocks


def for_reader(record: TurnState[Any], output_type: Any) -> TurnState[Any]:
    """A turn record as a reference with ``output_type`` reads it."""
    if not isinstance(record, Completed) or output_type is None:
        return record
    # list[str] is a class to inspect on Python 3.10, and isinstance refuses it.
    plain = isinstance(output_type, type) and typing.get_origin(output_type) is None
    if plain and isinstance(record.output, output_type):
        return record  # the turn already structured it
    try:
        return attrs.evolve(record, output=parse_output(record.text, output_type))
    except ValidationError as error:
        return Failed(
            turn_id=record.turn_id,
            session_id=record.session_id,
            cursor=record.cursor,
            error=ErrorInfo(type="ValidationError", message=str(error)),
        )


def event_for_reader(event: Event, output_type: Any) -> Event:
    """An event as a reference with ``output_type`` reads it: a ``TurnEnded``'s record
    structured as :func:`for_reader` does."""
    if isinstance(event, TurnEnded) and output_type is not None:
        return attrs.evolve(event, record=for_reader(event.record, output_type))
    return event


def position_of(after: TurnState[Any] | str | None, session_id: str) -> int:
    """The seq ``after`` (a record or a cursor of the session) names: 0 for None.

    Raises:
        InvalidCursorError: ``after`` is of another session, or malformed.
    """
    return seq_of_cursor(cursor_of(after, session_id)) or 0


def seq_of_event(event: Event) -> int:
    """An event's seq in its session's log, which its id (its cursor) names."""
    return seq_of_cursor(event.id) or 0
