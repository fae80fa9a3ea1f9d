"""References to sessions and turns: every call goes through them, to their backend."""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, Union, overload

import trio

from .._data._callbacks import (
    AllowApproval,
    Callback,
    DenyApproval,
    KeepCallbackOpen,
    OpenApproval,
    OpenClientToolCall,
    OpenSignIn,
    SignInAnswer,
)
from .._data._errors import add_note
from .._data._events import Event
from .._data._json import check_key
from .._data._records import (
    AlreadySettled,
    Answered,
    Busy,
    NotFound,
    Running,
    TurnConflict,
    TurnState,
)
from .._define._definition import check_max_steps
from .._engine._log import cursor_of
from .._trio._context import check_trio
from ._backends._base import Content, Occupied, Started, for_reader
from ._follow import follow_events
from ._handlers import Handler, send_answer
from ._waits import wait_for_turn

if TYPE_CHECKING:
    from ._backends._base import Backend

__all__ = ["Content", "Session", "Turn"]

#: A function (sync or async) called with each event.
EventHandler = Callable[[Event], Union[Awaitable[None], None]]
ApprovalHandler = Callable[
    [OpenApproval],
    Union[
        AllowApproval | DenyApproval | KeepCallbackOpen,
        Awaitable[AllowApproval | DenyApproval | KeepCallbackOpen],
    ],
]
SignInHandler = Callable[
    [OpenSignIn], Union[SignInAnswer | KeepCallbackOpen, Awaitable[SignInAnswer | KeepCallbackOpen]]
]
ClientToolHandler = Callable[[OpenClientToolCall], Any]


OutputT = TypeVar("OutputT")


class Session:
    """A session of a runtime, named by its id. Building one sends no request.

    Get one from ``await agent.start_session()``, or from a saved id with
    ``agent.session(session_id)``. Two references are equal when they name the same session
    in the same runtime. Its async methods, and its turns', run under trio: awaited outside
    a trio task (under asyncio, say) they raise ``RuntimeError``; use ``agentlib_sync`` there.
    """

    __slots__ = (
        "_backend",
        "_on_approval",
        "_on_client_tool",
        "_on_sign_in",
        "id",
    )

    def __init__(
        self,
        backend: Backend,
        session_id: str,
        *,
        on_approval: ApprovalHandler | None = None,
        on_sign_in: SignInHandler | None = None,
        on_client_tool: ClientToolHandler | None = None,
    ) -> None:
        self._backend = backend
        self.id = session_id
        self._on_approval = on_approval
        self._on_sign_in = on_sign_in
        self._on_client_tool = on_client_tool

    @property
    def _agent(self) -> Any:
        """The agent, as the backend knows it: its ``name`` and ``output_type``."""
        return self._backend.agent

    def _handler_for(self, callback: Callback) -> Handler | None:
        if isinstance(callback, OpenApproval):
            return self._on_approval
        if isinstance(callback, OpenSignIn):
            return self._on_sign_in
        if isinstance(callback, OpenClientToolCall):
            return self._on_client_tool
        return None

    @property
    def _has_handlers(self) -> bool:
        return any((self._on_approval, self._on_sign_in, self._on_client_tool))

    def __repr__(self) -> str:
        return self._backend.describe(self.id)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Session):
            return NotImplemented
        return self._backend.place == other._backend.place and self.id == other.id

    def __hash__(self) -> int:
        return hash((self._backend.place, self.id))

    def turn(self, turn_id: str) -> Turn:
        """A reference to a turn of this session; sends no request.

        Args:
            turn_id: The turn's id.
        """
        return Turn(self, turn_id, started=None)

    async def send_message(self, content: Content, *, idempotency_key: str | None = None) -> Turn:
        """Send a message: start a turn, or add the message to the running turn.

        ``turn.started`` tells which: True for a new turn, False for the running one.

        Args:
            content: The message: a str or content blocks.
            idempotency_key: Makes a retry safe: the same key returns the same turn.

        Raises:
            ValidationError: ``content`` is malformed.
            SessionIdempotencyConflictError: The key was used for another message.
            SessionTerminatedError: The session was cancelled.
            SessionBusyError: The session still could not take the message after several
                tries; nothing changed.
            UnsupportedSessionProcedureError: The session is a subagent's: its references
                only read, and interrupt its turns.
        """
        check_key(idempotency_key)
        turn_id, started = await self._backend.send_message(self.id, content, idempotency_key)
        return Turn(self, turn_id, started=started)

    async def start_turn(
        self,
        content: Content,
        *,
        idempotency_key: str | None = None,
        max_steps: int | None = None,
    ) -> Turn | Busy[Turn]:
        """Start a new turn, or return ``Busy`` with the active turn. Never joins a turn.

        Args:
            content: The message that starts the turn.
            idempotency_key: The same key returns the turn it started; a key refused with
                ``Busy`` starts a turn once the active one has ended.
            max_steps: The most model steps of this turn; by default the agent's.

        Raises:
            ValidationError: ``content`` is malformed.
            ValueError: ``max_steps`` is not an int of at least 1.
            SessionIdempotencyConflictError: The key was used for another message.
            SessionTerminatedError: The session was cancelled.
            UnsupportedSessionProcedureError: The session is a subagent's: its references
                only read, and interrupt its turns.
        """
        turn, _ = await self._start(
            "start_turn", content, idempotency_key, self._agent.output_type, max_steps
        )
        return turn

    async def _start(
        self,
        procedure: str,
        content: Content,
        key: str | None,
        output_type: Any,
        max_steps: int | None,
    ) -> tuple[Turn | Busy[Turn], bool]:
        """Start a turn; and whether it is new (not one an idempotency key started)."""
        started = await self._begin(procedure, content, key, output_type, max_steps)
        if isinstance(started, Occupied):
            return Busy(turn=Turn(self, started.turn_id, started=None)), False
        return Turn(self, started.turn_id, started=True), started.new

    async def _begin(
        self,
        procedure: str,
        content: Content,
        key: str | None,
        output_type: Any,
        max_steps: int | None,
        *,
        timeout: float | None = None,
        wait: bool = False,
    ) -> Started | Occupied:
        check_key(key)
        if max_steps is not None:
            check_max_steps(max_steps)
        return await self._backend.start(
            self.id, procedure, content, key, output_type, max_steps, timeout=timeout, wait=wait
        )

    @overload
    async def run(
        self,
        content: Content,
        *,
        output_type: type[OutputT],
        idempotency_key: str | None = None,
        timeout: float | None = None,
        on_event: EventHandler | None = None,
        max_steps: int | None = None,
    ) -> TurnState[OutputT] | Busy[Turn]: ...

    @overload
    async def run(
        self,
        content: Content,
        *,
        output_type: None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        on_event: EventHandler | None = None,
        max_steps: int | None = None,
    ) -> TurnState[Any] | Busy[Turn]: ...

    async def run(
        self,
        content: Content,
        *,
        output_type: type[Any] | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        on_event: EventHandler | None = None,
        max_steps: int | None = None,
    ) -> TurnState[Any] | Busy[Turn]:
        """Start a turn and wait until it ends or blocks on a callback; return its record.

        ``start_turn`` then ``turn.result(timeout=, on_event=)``: leaving the wait does not
        stop the turn.

        Args:
            content: The message that starts the turn.
            output_type: Structure the answer into this type (by default the agent's).
            idempotency_key: The same key returns the turn it started.
            timeout: The longest wait in seconds, not counting the start; None waits as long
                as the turn runs.
            on_event: Called with each event of the turn, in order; ``TurnEnded`` last.
            max_steps: The most model steps of this turn; by default the agent's.

        Returns:
            The turn's record, or ``Busy`` with the active turn (nothing was started).
            ``output_or_raise()`` on either gives a ``Completed`` turn's output, and raises
            :class:`TurnNotCompletedError` for anything else.

        Raises:
            ValidationError: ``content`` is malformed.
            ValueError: ``max_steps`` is not an int of at least 1.
            SessionIdempotencyConflictError: The key was used for another message.
            SessionTerminatedError: The session was cancelled.
            UnsupportedSessionProcedureError: The session is a subagent's: its references
                only read, and interrupt its turns.
            Exception: What a handler raised while the turn ran (see :meth:`Turn.result`).
        """
        wanted = output_type if output_type is not None else self._agent.output_type
        # Without events to hand over or handlers to run, a backend may wait as it starts.
        alone = on_event is None and not self._has_handlers
        started = await self._begin(
            "run", content, idempotency_key, wanted, max_steps, timeout=timeout, wait=alone
        )
        if isinstance(started, Occupied):
            return Busy(turn=Turn(self, started.turn_id, started=None))
        turn = Turn(self, started.turn_id, started=True)
        if started.record is not None and not isinstance(started.record, Running):
            return for_reader(started.record, wanted)
        return await turn.result(output_type=wanted, timeout=started.left, on_event=on_event)

    async def iter_events(
        self, *, after: TurnState[Any] | str | None = None
    ) -> AsyncIterator[Event]:
        """The session's events after ``after`` (a record or a cursor), or from its start.

        Replays what is stored, then follows live until the session ends. Every
        ``TurnEnded`` carries its record.

        Raises:
            InvalidCursorError: ``after`` belongs to another session or is not a cursor.
        """
        async with contextlib.aclosing(follow_events(self._backend, self.id, after)) as events:
            async for event in events:
                yield event

    async def _event_page(
        self, after: str | None, limit: int, wait: float, turn_id: str | None = None
    ) -> tuple[list[Event], str | None, bool]:
        """Up to ``limit`` stored events after ``after`` (of one turn, with ``turn_id``),
        waiting up to ``wait`` seconds for one; the cursor read up to; and whether no more
        will come. The deployed sessions' paged replay.

        Raises:
            InvalidCursorError: ``after`` belongs to another session or is not a cursor.
            TurnNotFoundError: The session has no such turn.
        """
        cursor = cursor_of(after, self.id)
        with contextlib.closing(self._backend.events(self.id, cursor, turn_id)) as reader:
            events = await reader.page(limit, wait)
            return events, reader.cursor, reader.ended

    async def cancel(self) -> None:
        """End the session and its subagents: interrupt the running turns; later sends
        raise ``SessionTerminatedError``. Its history stays readable. Idempotent.

        Returns once the session has ended and its sandbox (if its agent has one) is
        released: its commands killed, its ``on_destroy`` hooks run, its workspace deleted.

        Raises:
            UnsupportedSessionProcedureError: The session is a subagent's: its references
                only read, and interrupt its turns.
            SandboxError: An ``on_destroy`` hook failed; the session is cancelled and its
                workspace deleted all the same.
        """
        await self._backend.cancel(self.id)

    async def subagents(self) -> list[Session]:
        """References to this session's direct subagent sessions, newest first.

        They read (records, events, entries) and interrupt their turns, and answer callbacks
        with this reference's handlers; the rest is refused: send to this session instead.
        """
        return [
            Session(
                backend,
                child_id,
                on_approval=self._on_approval,
                on_sign_in=self._on_sign_in,
                on_client_tool=self._on_client_tool,
            )
            for child_id, backend in await self._backend.subagents(self.id)
        ]


def leaving_note(turn_id: str, session_id: str) -> str:
    """What a wait on a turn that was cancelled notes: the turn goes on."""
    return (
        f"leaving the wait does not stop turn {turn_id} of session {session_id}: it goes "
        "on; to stop it, call interrupt() on it, or cancel() on its session"
    )


class Turn:
    """A turn of a session, named by its id. Building one sends no request.

    Attributes:
        id: The turn's id.
        session_id: Its session's id.
        started: True for a turn a send started, False for a running turn a send joined,
            None for a reference built from an id.
    """

    __slots__ = ("_session", "id", "session_id", "started")

    def __init__(self, session: Session, turn_id: str, *, started: bool | None) -> None:
        self._session = session
        self.id = turn_id
        self.session_id = session.id
        self.started = started

    def __repr__(self) -> str:
        return self._session._backend.describe_turn(self.session_id, self.id, self.started)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Turn):
            return NotImplemented
        return self._session == other._session and self.id == other.id

    def __hash__(self) -> int:
        return hash((hash(self._session), self.id))

    async def get(self) -> TurnState[Any]:
        """The turn's record now: ``Running``, ``Blocked`` or how it ended. Never waits.

        Raises:
            TurnNotFoundError: The session has no such turn.
        """
        session = self._session
        record = await session._backend.record(self.session_id, self.id)
        return for_reader(record, session._agent.output_type)

    @overload
    async def result(
        self,
        *,
        output_type: type[OutputT],
        after: TurnState[Any] | str | None = None,
        timeout: float | None = None,
        on_event: EventHandler | None = None,
    ) -> TurnState[OutputT]: ...

    @overload
    async def result(
        self,
        *,
        output_type: None = None,
        after: TurnState[Any] | str | None = None,
        timeout: float | None = None,
        on_event: EventHandler | None = None,
    ) -> TurnState[Any]: ...

    async def result(
        self,
        *,
        output_type: type[Any] | None = None,
        after: TurnState[Any] | str | None = None,
        timeout: float | None = None,
        on_event: EventHandler | None = None,
    ) -> TurnState[Any]:
        """Wait until the turn ends, or blocks on a callback opened after ``after`` and still
        open; return its record.

        On timeout, returns the record at that moment (``Running`` or ``Blocked``); leaving
        the wait never stops the turn.

        Args:
            output_type: Structure the answer into this type (by default the agent's).
            after: A record or cursor of this session: wait past callbacks opened before it.
            timeout: The longest wait in seconds; None waits as long as the turn runs.
            on_event: Called with each event of the turn, in order; ``TurnEnded`` last.

        Raises:
            TurnNotFoundError: The session has no such turn.
            InvalidCursorError: ``after`` belongs to another session or is not a cursor.
        """
        check_trio()
        session = self._session
        wanted = output_type if output_type is not None else session._agent.output_type
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        try:
            record = await wait_for_turn(
                session._backend,
                self.session_id,
                self.id,
                session._handler_for if session._has_handlers else None,
                after=after,
                deadline=deadline,
                on_event=on_event,
                wanted=wanted,
            )
        except trio.Cancelled as cancelled:
            add_note(cancelled, leaving_note(self.id, self.session_id))
            raise
        return for_reader(record, wanted)

    async def answer(
        self, callback_id: str, answer: object
    ) -> Answered | AlreadySettled | NotFound:
        """Settle any open callback of this turn's session (of any turn), by its id.

        An approval takes :class:`AllowApproval` or :class:`DenyApproval`; a sign-in a
        :class:`SignInAnswer` naming every requested source and only those; a client tool
        call the tool's result, checked against the stub's return type. The first answer
        wins: two concurrent answers to an approval both get ``Answered`` holding the answer
        taken (compare it with yours); for a client tool or a sign-in, ``Answered.answer`` is
        None.

        Returns:
            ``Answered`` if the callback was open, ``AlreadySettled`` if it is no longer
            open, ``NotFound`` if the session never opened it.

        Raises:
            ValueError: ``callback_id`` is not a UUID; nothing was sent.
            SdkError: ``answer`` is ``KeepCallbackOpen()``, does not fit the callback
                (``ClientToolAnswerError`` for a client tool's result), or allows a hook's
                approval for the whole session; nothing was sent.
        """
        return await self._answer(callback_id, answer, None)

    async def _answer(
        self, callback_id: str, answer: object, key: str | None
    ) -> Answered | AlreadySettled | NotFound:
        """:meth:`answer`, with an idempotency ``key``: an answer that repeats the key of
        the answer taken is told ``Answered``. The deployed sessions' answers."""
        check_trio()
        backend = self._session._backend
        return await send_answer(backend, self.session_id, self.id, callback_id, answer, key)

    async def _report(
        self, callback_id: str, failure: str
    ) -> Answered | AlreadySettled | NotFound | None:
        """Tell the model that the handler of client tool call ``callback_id``, which ran
        elsewhere, failed with ``failure``, if the agent reports tool errors (None if it
        raises them). The deployed sessions' handlers."""
        backend = self._session._backend
        return await backend.report(self.session_id, self.id, callback_id, failure)

    async def iter_events(
        self, *, after: TurnState[Any] | str | None = None
    ) -> AsyncIterator[Event]:
        """This turn's events after ``after``, or from its start, until its ``TurnEnded``.

        A position at or past its end yields nothing.

        Raises:
            TurnNotFoundError: The session has no such turn (on first iteration).
            InvalidCursorError: ``after`` belongs to another session or is not a cursor.
        """
        events = follow_events(self._session._backend, self.session_id, after, self.id)
        async with contextlib.aclosing(events) as each:
            async for event in each:
                yield event

    async def steer(self, content: Content) -> Turn | TurnConflict:
        """Add a message to this running turn: the model sees it at its next step.

        Returns:
            This turn, or ``TurnConflict`` if it is no longer the active turn (nothing added).

        Raises:
            ValidationError: ``content`` is malformed.
            UnsupportedSessionProcedureError: The turn is a subagent's: steer its parent's.
        """
        if await self._session._backend.steer(self.session_id, self.id, content):
            return self
        return TurnConflict(turn_id=self.id)

    async def interrupt(self) -> Turn | TurnConflict:
        """Stop this turn (``Interrupted(cause="interrupted")``); the session stays open.

        Returns once the turn has ended: this turn, or ``TurnConflict`` if it was not the
        active turn.
        """
        if await self._session._backend.interrupt(self.session_id, self.id):
            return self
        return TurnConflict(turn_id=self.id)
