"""References to sessions and turns: every call goes through them."""

from __future__ import annotations

import contextlib
import math
import typing
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, Union, overload

import attrs
import cattrs
import trio

from ._callbacks import (
    AllowApproval,
    Callback,
    DenyApproval,
    KeepCallbackOpen,
    OpenApproval,
    OpenClientToolCall,
    OpenSignIn,
    SignInAnswer,
)
from ._content import ContentBlock, TextContentBlock, UnknownContentBlock
from ._context import check_trio
from ._convert import CONVERTER, validation_error
from ._definition import check_max_steps
from ._engine import _machine as machine
from ._engine._handlers import Handler, Waiter, invoke
from ._engine._live import LiveSession, check_callback_id
from ._engine._log import cursor_of
from ._engine._machine import TurnMachine
from ._engine._requests import (
    ask,
    decode_told,
    encode_content,
    holds,
    raise_failure,
    request_key,
)
from ._engine._restore import not_found, read_states, read_tree
from ._engine._runtime import Runtime
from ._errors import (
    InvalidCursorError,
    ObservationLost,
    SessionBusyError,
    ValidationError,
    add_note,
)
from ._events import CallbackOpened, Event, TurnEnded
from ._json import InvalidValue, check_key
from ._models._base import check_for_model
from ._output import parse_output
from ._records import (
    AlreadySettled,
    Answered,
    Blocked,
    Busy,
    Completed,
    ErrorInfo,
    Failed,
    NotFound,
    Running,
    TurnConflict,
    TurnState,
)
from ._store._base import Progress

if TYPE_CHECKING:
    from ._definition import AgentDefinition

#: The most events a read of another runtime's session brings at once.
_FOLLOWED_PAGE = 1000

__all__ = ["Content", "Session", "Turn"]

#: A message: a string, or content blocks (or dicts with the same fields).
Content = Union[str, Sequence[Union[ContentBlock, Mapping[str, Any]]]]
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


def _for_reader(record: TurnState[Any], output_type: Any) -> TurnState[Any]:
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


class Session:
    """A session of a runtime, named by its id. Building one sends no request.

    Get one from ``await agent.start_session()``, or from a saved id with
    ``agent.session(session_id)``. Two references are equal when they name the same session
    in the same runtime. Its async methods, and its turns', run under trio: awaited outside
    a trio task (under asyncio, say) they raise ``RuntimeError``; use ``agentlib_sync`` there.
    """

    __slots__ = (
        "_agent",
        "_on_approval",
        "_on_client_tool",
        "_on_sign_in",
        "_runtime",
        "id",
    )

    def __init__(
        self,
        runtime: Runtime,
        session_id: str,
        *,
        agent: AgentDefinition,
        on_approval: ApprovalHandler | None = None,
        on_sign_in: SignInHandler | None = None,
        on_client_tool: ClientToolHandler | None = None,
    ) -> None:
        self._runtime = runtime
        self.id = session_id
        self._agent = agent
        self._on_approval = on_approval
        self._on_sign_in = on_sign_in
        self._on_client_tool = on_client_tool

    def _handler_for(self, callback: Callback) -> Handler | None:
        if isinstance(callback, OpenApproval):
            return self._on_approval
        if isinstance(callback, OpenSignIn):
            return self._on_sign_in
        if isinstance(callback, OpenClientToolCall):
            return self._on_client_tool
        return None

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, agent={self._agent.name!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Session):
            return NotImplemented
        # A remote reference has no runtime here: it is never equal to a local one.
        return self._runtime is getattr(other, "_runtime", None) and self.id == other.id

    def __hash__(self) -> int:
        return hash((id(self._runtime), self.id))

    async def _load(self) -> LiveSession:
        """The session's live state, read from the runtime's store the first time.

        Every async method of sessions and turns starts here.

        Raises:
            RuntimeError: This is not trio code (asyncio, say).
        """
        check_trio()
        return await self._runtime._session(self.id, self._agent)

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
        key = idempotency_key
        live = await self._held("send_message")
        if live is None:
            key = request_key(key)  # a message the holder took before it died is found
            blocks = message_content(content, self._agent.model)
            reply = await self._ask("send_message", content=encode_content(blocks), key=key)
            if reply is not None:
                return Turn(self, reply["turn_id"], started=reply["started"])
            live = await self._writable("send_message")  # this runtime holds it now
        blocks = message_content(content, self._agent.model)
        turn_id, started = await self._runtime._send_message(
            live, blocks, key, self._agent.output_type
        )
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
        check_key(key)
        if max_steps is not None:
            check_max_steps(max_steps)
        live = await self._held(procedure)
        if live is None:
            if output_type is not self._agent.output_type:
                raise SessionBusyError(
                    f"session {self.id} is run by another runtime, which runs its turns with "
                    "its agent's output type: a turn with another output type starts only "
                    "in the runtime that holds the session (or once it has let it go)"
                )
            key = request_key(key)  # a turn the holder started before it died is found
            blocks = message_content(content, self._agent.model)
            reply = await self._ask(
                procedure, content=encode_content(blocks), key=key, max_steps=max_steps
            )
            if reply is not None:
                if "busy" in reply:
                    return Busy(turn=Turn(self, reply["busy"], started=None)), False
                return Turn(self, reply["turn_id"], started=True), reply["new"]
            live = await self._writable(procedure)  # this runtime holds it now
        blocks = message_content(content, self._agent.model)
        started = self._runtime._start_turn(live, blocks, key, output_type, max_steps)
        if isinstance(started, machine.Started):
            await self._runtime._flush(live)  # a started turn is acknowledged once durable
            return Turn(self, started.turn_id, started=True), started.new
        return Busy(turn=Turn(self, started.turn_id, started=None)), False

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
        turn, _ = await self._start("run", content, idempotency_key, wanted, max_steps)
        if isinstance(turn, Busy):
            return turn
        return await turn.result(output_type=wanted, timeout=timeout, on_event=on_event)

    async def iter_events(
        self, *, after: TurnState[Any] | str | None = None
    ) -> AsyncIterator[Event]:
        """The session's events after ``after`` (a record or a cursor), or from its start.

        Replays what is stored, then follows live until the session ends. Every
        ``TurnEnded`` carries its record.

        Raises:
            InvalidCursorError: ``after`` belongs to another session or is not a cursor.
        """
        live = await self._held()
        if live is None:
            # Another runtime on the shared store holds it: its events, as it commits them.
            async with contextlib.aclosing(self._events_elsewhere(after)) as events:
                async for event in events:
                    yield event
            return
        log = live.log
        position = log.seq_of(after)
        output_type = self._agent.output_type
        with live.reading():
            while True:
                while position < log.visible:
                    for event in await log.read_page(position + 1):
                        position += 1
                        yield _event_for_reader(event, output_type)
                if log.finished(position):
                    return
                await log.wait_beyond(position)
                self._runtime.store.check_session(live.id)

    async def _events_elsewhere(
        self, after: TurnState[Any] | str | None
    ) -> AsyncGenerator[Event, None]:
        """The session's events, read from the shared store as the runtime that holds it
        commits them: replayed from ``after``, then followed until the session ends."""
        store = self._runtime.store
        output_type = self._agent.output_type
        position = _position(after, self.id)
        progress = await store.wait_for_events(self.id, -1)
        if progress is None:
            raise not_found(self.id)
        if position > progress.last_seq:
            raise InvalidCursorError(
                f"session {self.id} never had this cursor (it has {progress.last_seq} "
                "events); pass a cursor it gave you"
            )
        while True:
            page = await store.read_events(self.id, position, _FOLLOWED_PAGE)
            if page and page[0].id != machine.format_cursor(self.id, position + 1):
                first = _seq(page[0])
                resume = machine.format_cursor(self.id, first - 1)
                raise ObservationLost(
                    f"event {position + 1} of session {self.id} was pruned (only events "
                    f"from {first} on are kept); resume after cursor {resume}",
                    cursor=resume,
                )
            for event in page:
                position += 1
                yield _event_for_reader(event, output_type)
                if progress.subagent and isinstance(event, TurnEnded):
                    return  # a subagent's session runs one turn
            if page:
                continue
            if progress.terminated and position >= progress.last_seq:
                return
            found = await store.wait_for_events(self.id, position)
            if found is None:
                raise not_found(self.id)
            progress = found

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
        live = await self._held()
        if live is None:
            return await self._event_page_elsewhere(after, limit, wait, turn_id)
        log = live.log
        position = log.seq_of(after)
        turn = None if turn_id is None else live.state.turn(turn_id)
        if turn is not None:
            position = max(position, turn.first_seq - 1)
        output_type = self._agent.output_type

        def ended() -> bool:
            if turn is not None and turn.end_seq is not None and position >= turn.end_seq:
                return True
            return log.finished(position)

        if position >= log.visible and not ended():
            with trio.move_on_after(wait):
                await log.wait_beyond(position)
        events: list[Event] = []
        with live.reading():
            while position < log.visible and len(events) < limit and not ended():
                for event in await log.read_page(position + 1):
                    position += 1
                    if turn is None or event.turn_id == turn.id:
                        events.append(_event_for_reader(event, output_type))
                    if len(events) >= limit or position >= log.visible or ended():
                        break
        cursor = machine.format_cursor(self.id, position) if position else after
        return events, cursor, ended()

    async def _event_page_elsewhere(
        self, after: str | None, limit: int, wait: float, turn_id: str | None
    ) -> tuple[list[Event], str | None, bool]:
        """:meth:`_event_page`, for a session another runtime holds on a shared store: read
        from the store as that runtime commits the events."""
        store = self._runtime.store
        position = _position(after, self.id)
        end_seq = None
        first = await store.wait_for_events(self.id, -1)
        if first is None:
            raise not_found(self.id)
        progress: Progress = first
        if turn_id is not None or progress.subagent:  # a subagent's log ends with its turn
            states, _ = await read_states(self._runtime, self.id, self._agent)
            session = states[self.id]
            turn = session.turn(turn_id) if turn_id is not None else None
            if turn is not None:
                position, end_seq = max(position, turn.first_seq - 1), turn.end_seq
            else:
                end_seq = next((t.end_seq for t in session.turns.values()), None)
        if position > progress.last_seq:
            raise InvalidCursorError(
                f"session {self.id} never had this cursor (it has {progress.last_seq} "
                "events); pass a cursor it gave you"
            )
        output_type = self._agent.output_type

        def ended() -> bool:
            if end_seq is not None and position >= end_seq:
                return True
            return progress.terminated and position >= progress.last_seq

        events: list[Event] = []
        with trio.move_on_after(wait):
            while progress.last_seq <= position and not ended():
                found = await store.wait_for_events(self.id, position)
                if found is None:
                    raise not_found(self.id)
                progress = found
        while len(events) < limit and not ended():
            page = await store.read_events(self.id, position, min(limit, _FOLLOWED_PAGE))
            if not page:
                break
            for event in page:
                position = _seq(event)
                if turn_id is None or event.turn_id == turn_id:
                    events.append(_event_for_reader(event, output_type))
                    if isinstance(event, TurnEnded) and (turn_id or progress.subagent):
                        end_seq = position
                if len(events) >= limit or ended():
                    break
        cursor_now = machine.format_cursor(self.id, position) if position else after
        return events, cursor_now, ended()

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
        live = await self._held("cancel")
        if live is None:
            if await self._ask("cancel") is not None:
                return
            live = await self._writable("cancel")  # this runtime holds it now
        await self._runtime._cancel(live)
        await self._runtime._flush(live)

    async def subagents(self) -> list[Session]:
        """References to this session's direct subagent sessions, newest first.

        They read (records, events, entries) and interrupt their turns, and answer callbacks
        with this reference's handlers; the rest is refused: send to this session instead.
        """
        live = await self._held()
        if live is None:
            # Another runtime holds it: its children as the shared store has them.
            tree, agents = await read_tree(self._runtime, self.id, self._agent)
            children = [node.row.session_id for node in tree if node.row.parent_id == self.id]
        else:
            children = list(live.state.children)
            agents = {child_id: self._runtime._live(child_id).agent for child_id in children}
        return [
            Session(
                self._runtime,
                child_id,
                agent=agents[child_id],
                on_approval=self._on_approval,
                on_sign_in=self._on_sign_in,
                on_client_tool=self._on_client_tool,
            )
            for child_id in reversed(children)
        ]

    async def _writable(self, procedure: str) -> LiveSession:
        """The session, if ``procedure`` may change it: a subagent's session only reads.

        Raises:
            UnsupportedSessionProcedureError: It is a subagent's.
        """
        live = await self._load()
        self._runtime._check_open()
        self._runtime._check_writable(live, procedure)
        return live

    async def _held(self, procedure: str | None = None) -> LiveSession | None:
        """The session if this runtime holds it (or can take it), as :meth:`_load` reads
        it, checked as :meth:`_writable` checks it for ``procedure``; None if another
        runtime holds it on a shared store (the caller then reads the store, or asks that
        runtime).

        Raises:
            SessionBusyError: Another runtime holds it, and the store is not shared.
        """
        try:
            return await (self._load() if procedure is None else self._writable(procedure))
        except SessionBusyError:
            if not self._runtime.store.shared:
                raise
            return None

    async def _ask(self, procedure: str, **body: Any) -> dict[str, Any] | None:
        """Ask the runtime that holds this session, on a shared store, to do ``procedure``:
        its reply; or None if this runtime holds the session now (the caller does it here).

        Raises:
            SdkError: What the procedure raised there.
        """
        self._runtime._check_open()
        reply = await ask(self._runtime, self.id, self._agent, {"procedure": procedure, **body})
        if reply is not None:
            raise_failure(reply)
        return reply


def _position(after: TurnState[Any] | str | None, session_id: str) -> int:
    """The seq ``after`` (a record or a cursor of the session) names: 0 for None.

    Raises:
        InvalidCursorError: ``after`` is of another session, or malformed.
    """
    return machine.seq_of_cursor(cursor_of(after, session_id)) or 0


def _seq(event: Event) -> int:
    """An event's seq in its session's log, which its id (its cursor) names."""
    return machine.seq_of_cursor(event.id) or 0


def leaving_note(turn_id: str, session_id: str) -> str:
    """What a wait on a turn that was cancelled notes: the turn goes on."""
    return (
        f"leaving the wait does not stop turn {turn_id} of session {session_id}: it goes "
        "on; to stop it, call interrupt() on it, or cancel() on its session"
    )


def _event_for_reader(event: Event, output_type: Any) -> Event:
    if isinstance(event, TurnEnded) and output_type is not None:
        return attrs.evolve(event, record=_for_reader(event.record, output_type))
    return event


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
        return f"Turn(id={self.id!r}, session_id={self.session_id!r}, started={self.started!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Turn):
            return NotImplemented
        return self._session == other._session and self.id == other.id

    def __hash__(self) -> int:
        return hash((hash(self._session), self.id))

    async def _turn(self) -> tuple[LiveSession, TurnMachine]:
        live = await self._session._load()
        return live, live.state.turn(self.id)

    async def get(self) -> TurnState[Any]:
        """The turn's record now: ``Running``, ``Blocked`` or how it ended. Never waits.

        Raises:
            TurnNotFoundError: The session has no such turn.
        """
        try:
            live, turn = await self._turn()
        except SessionBusyError:
            if not self._session._runtime.store.shared:
                raise
            record = await self._record_elsewhere()  # another runtime holds it
        else:
            record = self._session._runtime._record(live, turn.id)
        return _for_reader(record, self._session._agent.output_type)

    async def _result_elsewhere(
        self,
        after: TurnState[Any] | str | None,
        on_event: EventHandler | None,
        wanted: Any,
        deadline: float,
    ) -> TurnState[Any] | int | None:
        """:meth:`result`, for a session another runtime holds on a shared store: its record
        read again as the store has it each time the session has new events. A callback this
        reference has a handler for is answered by it (through the store's claim);
        ``on_event`` is called with each of the turn's events up to the record's.

        Every third of a lease, it tries to take the session: a holder that died or stalled
        leaves it to this runtime once its lease has expired, and its turns go on here.
        Then it returns the seq up to which ``on_event`` saw the events (None without one),
        for the wait to go on here."""
        session = self._session
        runtime = session._runtime
        position = _position(after, session.id)
        handled: set[str] = set()
        delivered: int | None = None  # the seq up to which on_event saw the session's events
        next_try = trio.current_time() + runtime.lease_seconds / 3
        with trio.move_on_at(deadline):
            while True:
                states, last = await read_states(session._runtime, session.id, session._agent)
                turn = states[session.id].turn(self.id)
                record = machine.record_of(states, turn, last[session.id])
                if on_event is not None:
                    if delivered is None:
                        delivered = turn.first_seq - 1  # it sees the whole turn
                    delivered = await self._deliver(on_event, delivered, last[session.id], wanted)
                if not isinstance(record, (Running, Blocked)):
                    return record
                if isinstance(record, Blocked):
                    opened = [
                        callback
                        for seq, callback in states[session.id].shown.values()
                        if seq > position and callback.id not in handled
                    ]
                    kept = False
                    for callback in opened:
                        handler = session._handler_for(callback)
                        if handler is None:
                            return record
                        handled.add(callback.id)
                        answer = await invoke(handler, callback)
                        if isinstance(answer, KeepCallbackOpen):
                            kept = True
                        else:
                            await self._answer(callback.id, answer, None)
                    if kept:
                        return record
                    if opened:
                        continue
                with trio.move_on_at(next_try):
                    await runtime.store.wait_for_events(session.id, last[session.id])
                if trio.current_time() >= next_try:
                    next_try = trio.current_time() + runtime.lease_seconds / 3
                    if await holds(runtime, session.id, session._agent):
                        return delivered
        return await self._record_elsewhere()  # at the timeout

    async def _deliver(
        self, on_event: EventHandler, delivered: int, last_seq: int, wanted: Any
    ) -> int:
        """Call ``on_event`` with this turn's stored events after seq ``delivered`` up to
        ``last_seq``; the seq delivered up to."""
        store = self._session._runtime.store
        while delivered < last_seq:
            page = await store.read_events(
                self.session_id, delivered, min(_FOLLOWED_PAGE, last_seq - delivered)
            )
            if not page:
                return last_seq  # pruned meanwhile
            for event in page:
                delivered = _seq(event)
                if event.turn_id == self.id:
                    await invoke(on_event, _event_for_reader(event, wanted))
        return delivered

    async def _record_elsewhere(self) -> TurnState[Any]:
        """The turn's record as the shared store has it now, for a session another runtime
        holds: what that runtime's readers see (the same machine reads the same rows and
        events)."""
        session = self._session
        states, last = await read_states(session._runtime, session.id, session._agent)
        turn = states[session.id].turn(self.id)
        return machine.record_of(states, turn, last[session.id])

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
        wanted = output_type if output_type is not None else self._session._agent.output_type
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        seen = None  # the seq up to which on_event saw the events elsewhere
        try:
            live, turn = await self._turn()
        except SessionBusyError:
            if not self._session._runtime.store.shared:
                raise
            try:  # another runtime holds it: followed in the shared store
                record = await self._result_elsewhere(after, on_event, wanted, deadline)
            except trio.Cancelled as cancelled:
                add_note(cancelled, leaving_note(self.id, self._session.id))
                raise
            if not isinstance(record, int | None):
                return _for_reader(record, wanted)
            seen = record  # this runtime holds it now: the wait goes on here
            live, turn = await self._turn()
        runtime = self._session._runtime
        log = live.log
        position = max(log.seq_of(after), turn.first_seq - 1)
        if on_event is None:  # only callbacks and the end matter: pruned events do not
            position = max(position, log.first_seq - 1)
        # on_event sees the whole turn, whatever ``after`` is.
        delivered = turn.first_seq - 1 if on_event is not None else position
        if seen is not None:
            delivered = seen
        waiter = Waiter(
            engine=runtime, live=live, handler_for=self._session._handler_for, deadline=deadline
        )
        try:
            with waiter.deadline_scope(), live.reading():
                followed = await self._follow(
                    live, turn, waiter, position, delivered, wanted, on_event
                )
                if followed is not None:
                    return followed
        except trio.Cancelled as cancelled:
            add_note(cancelled, leaving_note(turn.id, turn.session_id))
            raise
        return _for_reader(runtime._record(live, turn.id), wanted)

    async def _follow(
        self,
        live: LiveSession,
        turn: TurnMachine,
        waiter: Waiter,
        position: int,
        delivered: int,
        wanted: Any,
        on_event: EventHandler | None,
    ) -> TurnState[Any] | None:
        """Follow the log until the turn ends or blocks; None once it ended unseen."""
        runtime = self._session._runtime
        log = live.log
        while True:
            while delivered < log.visible:
                for event in await log.read_page(delivered + 1):
                    delivered += 1
                    if event.turn_id != turn.id:
                        continue
                    if wanted is not None:
                        event = _event_for_reader(event, wanted)
                    if on_event is not None:
                        await invoke(on_event, event)
                    if delivered <= position:
                        continue
                    if isinstance(event, TurnEnded):
                        record, cursor = event.record, log.last_cursor()
                        if record.cursor == cursor:
                            return record  # the common case: nothing came after its end
                        return attrs.evolve(record, cursor=cursor)
                    if isinstance(event, CallbackOpened):
                        waiter.handle(event.callback)
            position = max(position, delivered)
            waiter.settle()
            if waiter.blocked and not waiter.watched:
                # Once the handlers at work have finished, the turn is blocked, or going on.
                state = runtime._record(live, turn.id)
                if isinstance(state, Blocked):
                    return _for_reader(state, wanted)
                waiter.blocked = False
            if turn.end_seq is not None and delivered >= turn.end_seq:
                return None
            if log.finished(delivered):
                return None  # the runtime closed: the turn stays as it is, for the next one
            await waiter.wait(log, delivered)
            runtime.store.check_session(live.id)

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
        try:
            live = await self._session._load()
        except SessionBusyError:
            runtime = self._session._runtime
            if not runtime.store.shared:
                raise
            # Another runtime on the shared store holds it: claimed in the store.
            return await runtime._answer_elsewhere(
                self._session.id, self._session._agent, callback_id, answer, key
            )
        runtime = self._session._runtime
        runtime._check_open()
        answered = await runtime._answer(live, callback_id, answer, key)
        await runtime._flush(live)  # a taken answer is acknowledged once durable
        return answered

    async def _report(
        self, callback_id: str, failure: str
    ) -> Answered | AlreadySettled | NotFound | None:
        """Tell the model that the handler of client tool call ``callback_id``, which ran
        elsewhere, failed with ``failure``, if the agent reports tool errors (None if it
        raises them). The deployed sessions' handlers."""
        session = self._session
        live = await session._held()
        if live is None:
            check_callback_id(callback_id)  # refused here, as the holder would refuse it
            reply = await session._ask("report", callback_id=callback_id, failure=failure)
            if reply is not None:
                return decode_told(reply["told"])
            live = await session._load()  # this runtime holds it now
        runtime = session._runtime
        runtime._check_open()
        told = await runtime._report(live, callback_id, failure)
        await runtime._flush(live)
        return told

    async def iter_events(
        self, *, after: TurnState[Any] | str | None = None
    ) -> AsyncIterator[Event]:
        """This turn's events after ``after``, or from its start, until its ``TurnEnded``.

        A position at or past its end yields nothing.

        Raises:
            TurnNotFoundError: The session has no such turn (on first iteration).
            InvalidCursorError: ``after`` belongs to another session or is not a cursor.
        """
        try:
            live, turn = await self._turn()
        except SessionBusyError:
            if not self._session._runtime.store.shared:
                raise
            # Another runtime holds it: its events, as it commits them.
            async with contextlib.aclosing(self._events_elsewhere(after)) as events:
                async for event in events:
                    yield event
            return
        log = live.log
        position = max(log.seq_of(after), turn.first_seq - 1)
        output_type = self._session._agent.output_type
        with live.reading():
            while True:
                while position < log.visible:
                    for event in await log.read_page(position + 1):
                        position += 1
                        if event.turn_id != turn.id:
                            continue
                        yield _event_for_reader(event, output_type)
                        if isinstance(event, TurnEnded):
                            return
                if turn.end_seq is not None and position >= turn.end_seq:
                    return  # the position was at or past its end
                if log.finished(position):
                    return  # the runtime closed: the turn stays as it is, for the next one
                await log.wait_beyond(position)
                self._session._runtime.store.check_session(live.id)

    async def _events_elsewhere(
        self, after: TurnState[Any] | str | None
    ) -> AsyncGenerator[Event, None]:
        """:meth:`iter_events`, for a session another runtime holds on a shared store."""
        session = self._session
        states, _ = await read_states(session._runtime, session.id, session._agent)
        turn = states[session.id].turn(self.id)
        position = _position(after, session.id)
        if turn.end_seq is not None and position >= turn.end_seq:
            return  # the position was at or past its end
        start = machine.format_cursor(session.id, max(position, turn.first_seq - 1))
        async with contextlib.aclosing(session._events_elsewhere(start)) as events:
            async for event in events:
                if event.turn_id != self.id:
                    continue
                yield event
                if isinstance(event, TurnEnded):
                    return

    async def steer(self, content: Content) -> Turn | TurnConflict:
        """Add a message to this running turn: the model sees it at its next step.

        Returns:
            This turn, or ``TurnConflict`` if it is no longer the active turn (nothing added).

        Raises:
            ValidationError: ``content`` is malformed.
            UnsupportedSessionProcedureError: The turn is a subagent's: steer its parent's.
        """
        session = self._session
        key = None
        if await session._held("steer") is None:
            key = request_key(key)  # a steer the holder took before it died is found
            blocks = message_content(content, session._agent.model)
            reply = await session._ask(
                "steer", turn_id=self.id, content=encode_content(blocks), key=key
            )
            if reply is not None:
                return self if reply["steered"] else TurnConflict(turn_id=self.id)
            await session._writable("steer")  # this runtime holds it now
        blocks = message_content(content, session._agent.model)
        live, turn = await self._turn()
        runtime = session._runtime
        if runtime._steer(live, turn.id, blocks, key):
            await runtime._flush(live)  # acknowledged once durable
            return self
        return TurnConflict(turn_id=self.id)

    async def interrupt(self) -> Turn | TurnConflict:
        """Stop this turn (``Interrupted(cause="interrupted")``); the session stays open.

        Returns once the turn has ended: this turn, or ``TurnConflict`` if it was not the
        active turn.
        """
        session = self._session
        live = await session._held()
        if live is None:
            reply = await session._ask("interrupt", turn_id=self.id)
            if reply is not None:
                return self if reply["interrupted"] else TurnConflict(turn_id=self.id)
            live = await session._load()  # this runtime holds it now
        if await session._runtime._interrupt(live, self.id):  # acknowledged once durable
            return self
        return TurnConflict(turn_id=self.id)
