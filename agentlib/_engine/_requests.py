"""Changes to a session that another runtime holds, on a shared store: sent as requests.

Only the runtime that holds a session (its lease) changes it. Another runtime on the same
store that is asked to change it (a new turn, a message, a steer, an interrupt, a cancel)
sends the holder a request through the store (:meth:`Store.send_request`) and waits for its
reply. The holder takes each request for the sessions it holds (:func:`serve`), does what
the request asks as a local call would (:func:`perform`), and replies: what the call
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
from typing import TYPE_CHECKING, Any, Protocol

import trio

from .._content import ContentBlock
from .._convert import structure, unstructure
from .._errors import (
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
from .._records import AlreadySettled, Answered, NotFound
from .._store._base import Request, StoreError
from . import _machine as machine

if TYPE_CHECKING:
    from .._definition import AgentDefinition
    from .._store._base import Store
    from ._live import LiveSession


class Runtime(Protocol):
    """What requests ask of the runtime that sends or serves them."""

    store: Store
    owner: str
    lease_seconds: float
    _sessions: dict[str, LiveSession]

    async def _session(self, session_id: str, agent: AgentDefinition) -> LiveSession: ...

    def _check_open(self) -> None: ...

    def _check_writable(self, live: LiveSession, procedure: str) -> None: ...

    async def _flush(self, *written: LiveSession) -> None: ...

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
    "ask",
    "decode_content",
    "decode_told",
    "encode_content",
    "encode_told",
    "holds",
    "raise_failure",
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


def encode_content(blocks: tuple[ContentBlock, ...]) -> Any:
    return unstructure(list(blocks))


def decode_content(data: Any) -> tuple[ContentBlock, ...]:
    blocks: tuple[ContentBlock, ...] = structure(data, tuple[ContentBlock, ...])
    return blocks


def encode_told(told: Answered | AlreadySettled | NotFound | None) -> Any:
    """What an answer (or a report) was told, as JSON; ``decode_told`` reads it back."""
    if told is None:
        return None
    if isinstance(told, NotFound):
        return {"kind": "not_found"}
    kind = "answered" if isinstance(told, Answered) else "already_settled"
    return {"kind": kind, "session_id": told.session_id}


def decode_told(data: Any) -> Answered | AlreadySettled | NotFound | None:
    if data is None:
        return None
    if data["kind"] == "not_found":
        return NotFound()
    if data["kind"] == "answered":
        return Answered(session_id=data["session_id"])
    return AlreadySettled(session_id=data["session_id"])


def raise_failure(reply: Mapping[str, Any]) -> None:
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
    runtime: Runtime, session_id: str, agent: AgentDefinition, body: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Send a request to the runtime that holds ``session_id`` and wait for its reply.

    While it waits, every third of a lease, it tries to take the session: a holder that
    died or stalled leaves it once its lease has expired. Then it withdraws the request.

    Returns:
        The reply; or None once this runtime holds the session itself (its holder let it
        go, or died or stalled before replying): the caller then makes the change here.

    Raises:
        StoreError: The store failed.
    """
    store = runtime.store
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
        if reply is None or not reply.get("released"):
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
    body = request.body
    procedure = body["procedure"]
    try:
        runtime._check_open()
        try:
            live = await runtime._session(request.session_id, live.agent)  # noted as used
        except SessionBusyError:  # let go meanwhile
            return _RELEASED
        if procedure == "interrupt":
            return {"interrupted": await runtime._interrupt(live, body["turn_id"])}
        if procedure == "report":
            told = await runtime._report(live, body["callback_id"], body["failure"])
            await runtime._flush(live)
            return {"told": encode_told(told)}
        runtime._check_writable(live, procedure)
        if procedure == "cancel":
            await runtime._cancel(live)
            await runtime._flush(live)
            return {}
        content = decode_content(body["content"])
        if procedure == "steer":
            live.state.turn(body["turn_id"])  # raises TurnNotFoundError
            steered = runtime._steer(live, body["turn_id"], content, body["key"])
            await runtime._flush(live)
            return {"steered": steered}
        if procedure == "send_message":
            turn_id, started = await runtime._send_message(
                live, content, body["key"], live.agent.output_type
            )
            return {"turn_id": turn_id, "started": started}
        started_turn = runtime._start_turn(
            live, content, body["key"], live.agent.output_type, body.get("max_steps")
        )
        await runtime._flush(live)
        if isinstance(started_turn, machine.Started):
            return {"turn_id": started_turn.turn_id, "new": started_turn.new}
        return {"busy": started_turn.turn_id}
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
