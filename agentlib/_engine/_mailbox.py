"""Changes to a session that another runtime holds, on a shared store: sent as requests.

Only the runtime that holds a session (its lease) changes it. Another runtime on the same
store that is asked to change it (a new turn, a message, a steer, an interrupt, a cancel)
sends the holder a request through the store (:meth:`Store.send_request`) and waits for its
reply. The holder takes each request for the sessions it holds (:func:`serve`), does what
the request asks as a local call would (each kind of request, a class of this module, has
its ``perform``), and replies: what the call
returned, or the error it raised. The sender gives that back to its caller as its own.

If the holder dies or stalls before it replies, its lease runs out: the sender then takes
the session over, withdraws the request, and does the change itself. A change the holder
made but had not replied to is found by its idempotency key: a request to start a turn, add
a message or steer always carries one (the caller's, or the request's own).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Union

import attrs
import trio

from .._data._content import ContentBlock
from .._data._convert import structure, unstructure
from .._data._errors import (
    InvalidCursorError,
    SdkError,
    SessionBusyError,
    SessionIdempotencyConflictError,
    SessionNotFoundError,
    SessionTerminatedError,
    TurnNotFoundError,
    UnsupportedSessionProcedureError,
    ValidationError,
)
from .._data._records import AlreadySettled, Answered, NotFound
from .._store._base import Request, StoreError
from . import _machine as machine
from ._live import Engine

if TYPE_CHECKING:
    from .._define._definition import AgentDefinition
    from ._live import LiveSession


class Runtime(Engine, Protocol):
    """What requests ask of the runtime that sends or serves them."""

    async def _session(self, session_id: str, agent: AgentDefinition) -> LiveSession: ...

    def _check_open(self) -> None: ...

    def _check_writable(self, live: LiveSession, procedure: str) -> None: ...

    def _start_turn(
        self,
        live: LiveSession,
        content: tuple[Any, ...],
        key: str | None,
        output_type: Any,
        max_steps: int | None,
    ) -> machine.Started | machine.Occupied: ...

    async def _send_message(
        self, live: LiveSession, content: tuple[Any, ...], key: str | None, output_type: Any
    ) -> tuple[str, bool]: ...

    def _steer(
        self, live: LiveSession, turn_id: str, content: tuple[Any, ...], key: str | None = None
    ) -> bool: ...

    async def _interrupt(self, live: LiveSession, turn_id: str) -> bool: ...

    async def _cancel(self, live: LiveSession) -> None: ...

    async def _report(
        self, live: LiveSession, callback_id: str, failure: str
    ) -> Answered | AlreadySettled | NotFound | None: ...


__all__ = [
    "STALE_SECONDS",
    "Cancel",
    "Interrupt",
    "Report",
    "SendMessage",
    "StartTurn",
    "Steer",
    "ask",
    "holds",
    "request_key",
    "serve",
]

#: The errors a holder's reply can carry back, by name: the sender raises the same.
_ERRORS: dict[str, type[SdkError]] = {
    error.__name__: error
    for error in (
        InvalidCursorError,
        SessionBusyError,
        SessionIdempotencyConflictError,
        SessionNotFoundError,
        SessionTerminatedError,
        TurnNotFoundError,
        UnsupportedSessionProcedureError,
        ValidationError,
        SdkError,
    )
}

#: How long a request may wait for the runtime that holds its session, in seconds: one
#: older is refused, as its sender may long have gone (it was killed, say).
STALE_SECONDS = 600.0

#: A reply that says: this runtime does not hold the session (any more); take it, or ask
#: again.
_RELEASED = {"released": True}


def request_key(key: str | None) -> str:
    """The idempotency key a request to start a turn or add a message carries: the
    caller's, else one of its own (so that a change made by a holder that died before it
    replied is found, not made twice)."""
    return key if key is not None else f"request {uuid.uuid4()}"


def _told(told: Answered | AlreadySettled | NotFound | None) -> Any:
    """What an answer (or a report) was told, as JSON; :func:`_read_told` reads it back."""
    if told is None:
        return None
    if isinstance(told, NotFound):
        return {"kind": "not_found"}
    kind = "answered" if isinstance(told, Answered) else "already_settled"
    return {"kind": kind, "session_id": told.session_id}


def _read_told(data: Any) -> Answered | AlreadySettled | NotFound | None:
    if data is None:
        return None
    if data["kind"] == "not_found":
        return NotFound()
    if data["kind"] == "answered":
        return Answered(session_id=data["session_id"])
    return AlreadySettled(session_id=data["session_id"])


@attrs.frozen(kw_only=True)
class StartTurn:
    """Start a turn (``start_turn``, or ``run``: what a refusal names)."""

    procedure: ClassVar[str] = "start_turn"
    asked_as: str
    content: tuple[ContentBlock, ...]
    key: str
    max_steps: int | None = None

    async def perform(self, runtime: Runtime, live: LiveSession) -> dict[str, Any]:
        runtime._check_writable(live, self.asked_as)
        started = runtime._start_turn(
            live, self.content, self.key, live.agent.output_type, self.max_steps
        )
        await runtime._flush(live)
        if isinstance(started, machine.Started):
            return {"turn_id": started.turn_id, "new": started.new}
        return {"busy": started.turn_id}

    @staticmethod
    def read(reply: Mapping[str, Any]) -> machine.Started | machine.Occupied:
        if "busy" in reply:
            return machine.Occupied(reply["busy"])
        return machine.Started(reply["turn_id"], reply["new"])


@attrs.frozen(kw_only=True)
class SendMessage:
    """Start a turn, or add the message to the active one."""

    procedure: ClassVar[str] = "send_message"
    content: tuple[ContentBlock, ...]
    key: str

    async def perform(self, runtime: Runtime, live: LiveSession) -> dict[str, Any]:
        runtime._check_writable(live, self.procedure)
        turn_id, started = await runtime._send_message(
            live, self.content, self.key, live.agent.output_type
        )
        return {"turn_id": turn_id, "started": started}

    @staticmethod
    def read(reply: Mapping[str, Any]) -> tuple[str, bool]:
        return reply["turn_id"], reply["started"]


@attrs.frozen(kw_only=True)
class Steer:
    """Add a message to the active turn."""

    procedure: ClassVar[str] = "steer"
    turn_id: str
    content: tuple[ContentBlock, ...]
    key: str

    async def perform(self, runtime: Runtime, live: LiveSession) -> dict[str, Any]:
        runtime._check_writable(live, self.procedure)
        live.state.turn(self.turn_id)  # raises TurnNotFoundError
        steered = runtime._steer(live, self.turn_id, self.content, self.key)
        await runtime._flush(live)
        return {"steered": steered}

    @staticmethod
    def read(reply: Mapping[str, Any]) -> bool:
        return bool(reply["steered"])


@attrs.frozen(kw_only=True)
class Interrupt:
    """Stop the active turn."""

    procedure: ClassVar[str] = "interrupt"
    turn_id: str

    async def perform(self, runtime: Runtime, live: LiveSession) -> dict[str, Any]:
        return {"interrupted": await runtime._interrupt(live, self.turn_id)}

    @staticmethod
    def read(reply: Mapping[str, Any]) -> bool:
        return bool(reply["interrupted"])


@attrs.frozen(kw_only=True)
class Cancel:
    """End the session and its subagents."""

    procedure: ClassVar[str] = "cancel"

    async def perform(self, runtime: Runtime, live: LiveSession) -> dict[str, Any]:
        runtime._check_writable(live, self.procedure)
        await runtime._cancel(live)
        await runtime._flush(live)
        return {}

    @staticmethod
    def read(reply: Mapping[str, Any]) -> None:
        return None


@attrs.frozen(kw_only=True)
class Report:
    """Tell the model that a client tool call's handler failed elsewhere."""

    procedure: ClassVar[str] = "report"
    callback_id: str
    failure: str

    async def perform(self, runtime: Runtime, live: LiveSession) -> dict[str, Any]:
        told = await runtime._report(live, self.callback_id, self.failure)
        await runtime._flush(live)
        return {"told": _told(told)}

    @staticmethod
    def read(reply: Mapping[str, Any]) -> Answered | AlreadySettled | NotFound | None:
        return _read_told(reply["told"])


#: A request another runtime sends the holder of a session.
Kind = Union[StartTurn, SendMessage, Steer, Interrupt, Cancel, Report]
#: The kinds of request, by the tag their body carries.
_KINDS: dict[str, type[Kind]] = {
    kind.procedure: kind for kind in (StartTurn, SendMessage, Steer, Interrupt, Cancel, Report)
}


def _body(kind: Kind) -> dict[str, Any]:
    body: dict[str, Any] = unstructure(kind)
    body.pop("type", None)
    body["procedure"] = kind.procedure
    return body


def _kind_of(body: Mapping[str, Any]) -> Kind:
    cls = _KINDS[body["procedure"]]
    fields = {name: value for name, value in body.items() if name != "procedure"}
    kind: Kind = structure(fields, cls)
    return kind


def _raise_failure(reply: Mapping[str, Any]) -> None:
    """Raise the error a reply carries, if any: as the holder raised it."""
    failure = reply.get("error")
    if failure is None:
        return
    message = str(failure["message"])
    if failure["type"] == "ValueError":
        raise ValueError(message)
    if failure["type"] == "ValidationError":
        raise ValidationError(message, tuple(failure.get("errors", ())))
    raise _ERRORS.get(failure["type"], SdkError)(message)


async def ask(
    runtime: Runtime, session_id: str, agent: AgentDefinition, kind: Kind
) -> dict[str, Any] | None:
    """Send a request to the runtime that holds ``session_id`` and wait for its reply,
    which ``kind.read`` reads.

    While it waits, every third of a lease, it tries to take the session: a holder that
    died or stalled leaves it once its lease has expired. Then it withdraws the request.

    Returns:
        The reply; or None once this runtime holds the session itself (its holder let it
        go, or died or stalled before replying): the caller then makes the change here.

    Raises:
        StoreError: The store failed.
        SdkError: What the request raised there.
        RuntimeError: This runtime is closed.
    """
    runtime._check_open()
    store = runtime.store
    body = _body(kind)
    while True:
        sent = await store.send_request(session_id, body)
        request_id: int | None = sent
        try:
            reply = await _reply_to(runtime, session_id, agent, sent)
            request_id = None  # replied to, withdrawn or forgotten
        finally:
            if request_id is not None:  # left before the reply: it is not wanted any more
                # If it cannot be withdrawn, the holder replies to no one: the reply is
                # forgotten later.
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(5),
                    contextlib.suppress(StoreError),
                ):
                    await store.withdraw_request(request_id)
        if reply is None:
            return None
        if not reply.get("released"):
            _raise_failure(reply)
            return reply
        # The runtime that held it is letting it go (it is closing, say).
        if await holds(runtime, session_id, agent):
            return None
        await trio.sleep(runtime.lease_seconds / 3)  # then ask whoever holds it now


async def _reply_to(
    runtime: Runtime, session_id: str, agent: AgentDefinition, request_id: int
) -> dict[str, Any] | None:
    """The reply to the request; None once this runtime holds the session and the request
    was withdrawn before any reply (or the store forgot it)."""
    store = runtime.store
    next_try = trio.current_time() + runtime.lease_seconds / 3
    while True:
        with trio.move_on_at(next_try):
            reply = await store.wait_for_reply(request_id)
            if reply is not None:
                return reply
        if trio.current_time() < next_try:
            continue
        next_try = trio.current_time() + runtime.lease_seconds / 3
        if not await holds(runtime, session_id, agent):
            continue  # its holder is at work: wait on
        if await store.withdraw_request(request_id):
            return None
        return await store.wait_for_reply(request_id)  # it replied meanwhile (or is gone)


async def holds(runtime: Runtime, session_id: str, agent: AgentDefinition) -> bool:
    """Whether this runtime holds the session now, taking it if no other runtime does."""
    try:
        await runtime._session(session_id, agent)
    except SessionBusyError:
        return False
    return True


async def serve(runtime: Runtime) -> None:
    """While the runtime is open, on a shared store: take the requests other runtimes send
    for the sessions it holds, each in a task of its own, and reply to each. A reply the
    store failed to take is kept, and given again when the request comes back: a request
    is done once."""
    under_way: set[int] = set()
    unsent: dict[int, dict[str, Any]] = {}  # replies the store failed to take, by request

    async def answer(request: Request) -> None:
        try:
            reply = unsent.pop(request.id, None)
            if reply is None:
                try:
                    reply = await perform(runtime, request)
                except StoreError:
                    raise
                except Exception as error:  # a request this runtime cannot read: said, not run
                    reply = _failure(
                        SdkError(
                            f"the runtime that holds session {request.session_id} could not "
                            f"do the request ({type(error).__name__}); check that every "
                            "runtime on the store runs the same agentlib"
                        )
                    )
            try:
                await runtime.store.reply_request(request.id, reply)
            except StoreError:
                unsent[request.id] = reply  # replied at the next wait
        except StoreError:
            pass  # asked again at the next wait; the store's failure is said elsewhere
        finally:
            under_way.discard(request.id)

    async with trio.open_nursery() as nursery:
        while True:
            try:
                requests = await runtime.store.wait_for_requests(runtime.owner, under_way)
            except StoreError:
                await trio.sleep(runtime.lease_seconds / 3)
                continue
            for request in requests:
                under_way.add(request.id)
                nursery.start_soon(answer, request)


async def perform(runtime: Runtime, request: Request) -> dict[str, Any]:
    """Do what ``request`` asks of a session this runtime holds, as the local call does;
    the reply: what it returned, or the error it raised. A request that waited longer than
    :data:`STALE_SECONDS` is refused: its sender may long have gone."""
    live = runtime._sessions.get(request.session_id)
    if live is None or not live.ready:
        return _RELEASED
    if request.age > STALE_SECONDS:
        return _failure(
            SessionBusyError(
                f"the request to session {request.session_id} waited {request.age:.0f} s for "
                "the runtime that holds it, longer than a request may: nothing was done; "
                "send it again"
            )
        )
    try:
        runtime._check_open()
        try:
            live = await runtime._session(request.session_id, live.agent)  # noted as used
        except SessionBusyError:  # let go meanwhile
            return _RELEASED
        return await _kind_of(request.body).perform(runtime, live)
    except SdkError as error:
        if isinstance(error, StoreError):
            raise
        return _failure(error)
    except ValueError as error:  # a callback id that is not one, say
        return {"error": {"type": "ValueError", "message": str(error)}}
    except RuntimeError:  # closing meanwhile
        return _RELEASED


def _failure(error: SdkError) -> dict[str, Any]:
    """The reply that carries ``error``: its message, and the nearest class of it that the
    sender can raise."""
    name = next(cls.__name__ for cls in type(error).__mro__ if cls.__name__ in _ERRORS)
    failure: dict[str, Any] = {"type": name, "message": str(error)}
    if isinstance(error, ValidationError):
        failure["errors"] = list(error.errors)
    return {"error": failure}
