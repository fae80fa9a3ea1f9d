"""A runtime's agents served over HTTP: JSON under ``/v1``, events as Server-Sent Events.

Starlette routes the requests and hypercorn serves them, both on trio. Every route uses the
public API of one runtime (its ``Session`` and ``Turn`` references, and
``Runtime.start_session``, which takes session inputs as the JSON a client sends), so a
deployed session behaves as a local one: the same records, events and errors, as JSON.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import traceback
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    MutableMapping,
)
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as serve_app
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .._data import _sse_format as _sse
from .._data._callbacks import (
    ApprovalAnswer,
    Credentials,
    KeepCallbackOpen,
    OpenApproval,
    OpenSignIn,
    SignInAnswer,
)
from .._data._convert import structure, unknown_fields, unstructure
from .._data._errors import SdkError, SessionBusyError, ValidationError
from .._data._events import Event
from .._data._json import SURROGATE_REASON, NotJson, check_key, read_json, unstorable_text
from .._data._records import Answered, Blocked, Busy
from .._define._agent import Agent, history_for
from .._engine._machine import SessionMachine, root_of
from .._engine._restore import not_found, read_states
from .._engine._runtime import Runtime
from .._references._open import enter, open_runtime
from .._references._session import Session, Turn
from .._store._base import Store
from ._access import MOST_SECONDS, RIGHTS, Access, Principal, Tokens
from ._bodies import (
    AnswerBody,
    InterruptBody,
    MessageBody,
    MintBody,
    StartSessionBody,
    StartTurnBody,
    SteerBody,
)
from ._openapi import (
    CALLBACK_ANSWER,
    EVENTS_PAGE,
    RECORD,
    SESSION_REF,
    TURN_CONFLICT,
    Operation,
    Parameter,
    describe_api,
    object_schema,
    string_schema,
)
from ._output_schema import requested_output
from ._statuses import error_body, status_of

__all__ = ["OPERATIONS", "Server", "serve"]

B = TypeVar("B", bound=attrs.AttrsInstance)

#: What the server says of the requests it fails (a 503's cause, a failure of its own) and
#: of clients that hang up; never a header, a token or a value of a request.
logger = logging.getLogger("agentlib.serve")
#: One line per request, at INFO, once its response ends (an event stream's when it
#: closes): method, path (no query), status, milliseconds. Never a header.
access_logger = logging.getLogger("agentlib.access")

#: The largest request body taken, in bytes.
MAX_BODY = 1 << 20
#: The most of a request's body left unread that is read (and dropped) before its answer,
#: so that its client, still sending it, reads the answer: past that, the connection closes.
MAX_DRAINED = 4 * MAX_BODY
#: The levels of a body around its values (a session's inputs: the body, the inputs, an
#: input's fields), which are checked on their own, as a local session checks them.
BODY_WRAPPING = 3
#: The longest ``wait`` of a turn read, in seconds.
MAX_WAIT = 60.0
#: How often an idle event stream sends a comment, in seconds, so proxies keep it open.
PING_SECONDS = 15.0
#: The most frames an event stream holds for a client that reads slower than they come.
STREAM_BUFFER = 64
#: The most answers, steers and interrupts remembered for their retries (the oldest are
#: forgotten first).
MAX_TOLD = 10_000
#: The most events of a page of JSON replay.
MAX_PAGE = 1000


class _Refused(Exception):
    """A request the wire refuses before the runtime sees it (its message and status: a
    400 Bad Request unless said)."""

    def __init__(self, message: str, status: int = 400, kind: str = "BadRequest") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


class Server:
    """A running server (from :func:`agentlib.serve`).

    Attributes:
        url: Where it listens, e.g. ``"http://127.0.0.1:8000"``.
    """

    def __init__(self, runtime: Runtime, tokens: Iterable[str] | Mapping[str, str]) -> None:
        self.url = ""
        self._runtime = runtime
        self._agents: dict[str, Agent] = {}
        self._tokens = Tokens(tokens)
        self._closing = trio.Event()
        # What requests with idempotency keys were told, by route, session, turn (or
        # callback) and key (``_remember``).
        self._told: dict[tuple[str, str, str, str | None], Any] = {}

    def deploy(self, agent: Agent) -> None:
        """Serve ``agent`` under its name, in place of the agent of that name if there is one
        (a new deployment: its sessions keep their inputs and history, and go on with it).

        Raises:
            TypeError: ``agent`` is not an :class:`agentlib.Agent`.
        """
        if not isinstance(agent, Agent):
            raise TypeError(
                f"deploy takes an agentlib.Agent (of agentlib_sync, pass its .agent), not "
                f"{type(agent).__name__}"
            )
        self._agents[agent.name] = agent
        self._runtime._deploy(agent)

    @property
    def agents(self) -> dict[str, Agent]:
        """The agents served, by name."""
        return dict(self._agents)

    # -- the routes ---------------------------------------------------------------------

    def app(self) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
        """The ASGI application: every route of :data:`OPERATIONS`, behind the token check
        (but those that take no token)."""

        def route(operation: Operation) -> Route:
            async def endpoint(request: Request) -> Response:
                return await operation.endpoint(self, request)  # type: ignore[no-any-return]

            async def handle(request: Request) -> Response:
                return await self._handle(request, endpoint, operation.right)

            answer = handle if operation.token else endpoint
            return Route(operation.path, answer, methods=[operation.method])

        return Starlette(
            routes=[route(operation) for operation in OPERATIONS],
            exception_handlers={HTTPException: _no_such_route},
        )

    async def _handle(
        self, request: Request, endpoint: Callable[..., Awaitable[Any]], right: str | None
    ) -> Response:
        try:
            access = request.state.access = self._authorize(request)
            if access.session_id is not None and right not in access.rights:
                raise _Refused(
                    "this token is scoped to one session, and gives "
                    f"{' and '.join(sorted(access.rights)) or 'no'} rights there: "
                    "use a principal's token for this",
                    403,
                    "Forbidden",
                )
            enter(self._runtime)  # the public API's verbs reach this runtime
            return await endpoint(request)  # type: ignore[no-any-return]
        except _Refused as refused:
            return _json({"error": {"type": refused.kind, "message": str(refused)}}, refused.status)
        except SdkError as error:
            status = status_of(error)
            if status == 503:
                _log_unavailable(request, error)
            return _json(error_body(error), status)
        except ValueError as error:  # an argument the public API refused (max_steps, say)
            return _json({"error": {"type": "BadRequest", "message": str(error)}}, 400)
        except ClientDisconnect:
            # Gone before its body came: nobody reads the answer.
            logger.debug("%s %s: the client hung up before its body came", *_where(request))
            return Response(status_code=400)
        except Exception as error:  # a failure of the server's own: said, and logged
            _log_failure(request, error)
            return _json(
                {
                    "error": {
                        "type": "InternalServerError",
                        "message": "the server failed on this request (its log says where); "
                        "retry it, and report it if it fails again",
                    }
                },
                500,
            )

    def _authorize(self, request: Request) -> Access:
        if not self._tokens:
            return Access()
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        access = self._tokens.access(given) if scheme.lower() == "bearer" else None
        if access is not None:
            return access
        raise _Refused(
            "this server takes requests with a token: send the header "
            "'Authorization: Bearer <token>' with one of the server's tokens",
            401,
            "Unauthorized",
        )

    def _agent(self, request: Request) -> Agent:
        name = request.path_params["agent"]
        agent = self._agents.get(name)
        if agent is None:
            raise _Refused(
                f"this server serves no agent named {name!r}: see /v1/agents", 404, "AgentNotFound"
            )
        return agent

    async def _session(self, request: Request) -> Session:
        """The session the path names, read (so that a missing one is a 404 at once), if
        the request's token may reach it: another principal's is missing, as is every
        session but its own for a session-scoped token."""
        session_id = request.path_params["session_id"]
        agent = self._agent(request)
        session = agent.session(session_id)
        states: Mapping[str, SessionMachine]
        try:
            await self._runtime._session(session_id, agent)
            states = self._runtime._states
        except SessionBusyError:
            if not self._runtime.store.shared:
                raise
            # Another runtime on the shared store holds it: read as the store has it.
            states, _ = await read_states(self._runtime, session_id, agent)
        state = states[session_id]
        # Under its own agent's path, or its root session's (a subagent's session), as a
        # session read back from the store is found: never under another agent's.
        if agent.name not in (state.agent, root_of(states, session_id).agent):
            raise not_found(session_id)
        inputs = state.inputs
        access: Access = request.state.access
        if access.session_id is not None:
            allowed = access.session_id == session_id
        else:
            owner = inputs.get(Principal.input_id, {}).get("name")
            allowed = owner == access.principal
        if not allowed:
            raise not_found(session_id)
        return session

    async def _turn(self, request: Request) -> Turn:
        return (await self._session(request)).turn(request.path_params["turn_id"])

    async def _list_agents(self, request: Request) -> Response:
        return _json({"agents": sorted(self._agents)})

    async def _describe(self, request: Request) -> Response:
        return _json(API)

    async def _start_session(self, request: Request) -> Response:
        agent = self._agent(request)
        body = await _body(request, StartSessionBody)
        key = _key(request, body.idempotency_key)
        entries = history_for(agent.model, body.history)
        inputs = _inputs(body.inputs)
        principal = request.state.access.principal
        if principal is not None:
            inputs[Principal.input_id] = {"name": principal}
        if key is not None:
            # A key names a start of this principal's, of this agent: another principal's
            # (or agent's) start with the same key makes a session of its own.
            key = json.dumps(["http", principal, agent.name, key])
        live = await self._runtime._start_session(agent, entries, inputs, key)
        return _json({"id": live.id, "agent": agent.name}, 201)

    async def _mint(self, request: Request) -> Response:
        session = await self._session(request)
        if not self._tokens:
            raise _Refused("this server takes no tokens: every request reaches every session")
        body = await _body(request, MintBody)
        rights = frozenset(body.rights)
        if not rights or not rights <= RIGHTS:
            raise _Refused(
                f"'rights' must be a non-empty list of {', '.join(map(repr, sorted(RIGHTS)))}"
            )
        if not 0 < body.seconds <= MOST_SECONDS:
            raise _Refused(f"'seconds' must be from 1 to {MOST_SECONDS:,}")
        token, expires = self._tokens.mint(session.id, rights, body.seconds)
        return _json({"token": token, "expires": expires, "rights": sorted(rights)}, 201)

    async def _read_session(self, request: Request) -> Response:
        session = await self._session(request)
        return _json({"id": session.id, "agent": request.path_params["agent"]})

    async def _subagents(self, request: Request) -> Response:
        """The session's direct subagent sessions, newest first: each is reached under its
        root's agent, as a reference to it reads (and interrupts) it."""
        children = await (await self._session(request)).subagents()
        listed = [{"id": child.id, "agent": child._agent.name} for child in children]
        return _json({"sessions": listed})

    async def _cancel(self, request: Request) -> Response:
        session = await self._session(request)
        await session.cancel()
        return _json({"id": session.id, "cancelled": True})

    async def _start_turn(self, request: Request) -> Response:
        session = await self._session(request)
        body = await _body(request, StartTurnBody)
        output_type = requested_output(session._agent.output_type, body.output_schema)
        started, new = await session._start(
            "start_turn",
            body.content,
            _key(request, body.idempotency_key),
            output_type,
            body.max_steps,
        )
        if isinstance(started, Busy):
            return _json(
                {
                    "error": {
                        "type": "Busy",
                        "message": f"session {session.id} is busy with turn {started.turn.id}: "
                        "wait for it to end, or steer or interrupt it",
                        "turn_id": started.turn.id,
                    }
                },
                409,
            )
        # With ?wait=S, the record once the turn ends or blocks (at most S seconds): a run in
        # one request.
        wait = _number(request, "wait", 0.0, MAX_WAIT)
        record = await (started.result(timeout=wait) if wait > 0 else started.get())
        return _json({"turn_id": started.id, "record": unstructure(record)}, 201 if new else 200)

    async def _send_message(self, request: Request) -> Response:
        """``Session.send_message``: a new turn, or the message added to the running one."""
        session = await self._session(request)
        body = await _body(request, MessageBody)
        key = _key(request, body.idempotency_key)
        turn = await session.send_message(body.content, idempotency_key=key)
        return _json({"turn_id": turn.id, "started": turn.started}, 201 if turn.started else 200)

    async def _read_turn(self, request: Request) -> Response:
        turn = await self._turn(request)
        wait = _number(request, "wait", 0.0, MAX_WAIT)
        after = request.query_params.get("after") or None
        if wait > 0:
            record = await turn.result(after=after, timeout=wait)
        else:
            record = await turn.get()
        return _json(unstructure(record))

    async def _steer(self, request: Request) -> Response:
        turn = await self._turn(request)
        body = await _body(request, SteerBody)
        said = ("steer", turn.session_id, turn.id, _key(request, body.idempotency_key))
        if said in self._told:
            return _json(self._told[said])  # a retry: what the first request was told
        steered = await turn.steer(body.content)
        if isinstance(steered, Turn):
            return _json(self._remember(said, {"turn_id": steered.id, "steered": True}))
        return _json(unstructure(steered), 409)

    async def _interrupt(self, request: Request) -> Response:
        turn = await self._turn(request)
        body = await _body(request, InterruptBody)
        said = ("interrupt", turn.session_id, turn.id, _key(request, body.idempotency_key))
        if said in self._told:
            return _json(self._told[said])
        stopped = await turn.interrupt()
        if isinstance(stopped, Turn):
            return _json(self._remember(said, {"turn_id": stopped.id, "interrupted": True}))
        return _json(unstructure(stopped), 409)

    async def _answer(self, request: Request) -> Response:
        turn = await self._turn(request)
        body = await _body(request, AnswerBody)
        callback_id = request.path_params["callback_id"]
        key = _key(request, body.idempotency_key)
        if body.kind == "failure":  # a client tool's handler failed in the client
            said = ("failure", turn.session_id, callback_id, key)
            if said in self._told:
                return _json(self._told[said])
            if not isinstance(body.answer, str):
                raise _Refused("a failure's 'answer' is its message, a string")
            told = await turn._report(callback_id, body.answer)
            if told is None:
                return _json({"type": "not_reported"})  # the agent raises tool errors
            if isinstance(told, Answered):
                return _json(self._remember(said, unstructure(told)))
            return _json(unstructure(told))
        answer = await _answer_for(turn, callback_id, body.answer, body.kind)
        try:
            # A retry with the key of the answer taken is told Answered: the key is kept
            # with the answer, in the store.
            settled = await turn._answer(callback_id, answer, key)
        except ValueError as error:
            if isinstance(error, SdkError):
                raise
            raise _Refused(str(error)) from None
        return _json(unstructure(settled))

    def _remember(self, said: tuple[str, str, str, str | None], told: Any) -> Any:
        """Keep what a request with an idempotency key was told (the last
        :data:`MAX_TOLD`), for its retries: a retried steer, interrupt or handler failure
        is told what the first was, never that it is too late. (An answer's key is kept
        with it, in the store.)"""
        if said[-1] is not None:
            self._told[said] = told
            while len(self._told) > MAX_TOLD:
                del self._told[next(iter(self._told))]
        return told

    async def _session_events(self, request: Request) -> Response:
        session = await self._session(request)
        return await self._events(request, session, None, session.iter_events)

    async def _turn_events(self, request: Request) -> Response:
        turn = await self._turn(request)
        return await self._events(request, turn._session, turn.id, turn.iter_events)

    async def _events(
        self,
        request: Request,
        session: Session,
        turn_id: str | None,
        events: Callable[..., AsyncIterator[Event]],
    ) -> Response:
        after = request.headers.get("last-event-id") or request.query_params.get("after") or None
        if "text/event-stream" not in request.headers.get("accept", ""):
            limit = int(_number(request, "limit", 100, MAX_PAGE))
            wait = _number(request, "wait", 0.0, MAX_WAIT)
            page, cursor, ended = await session._event_page(after, limit, wait, turn_id)
            return _json(
                {"events": [unstructure(event) for event in page], "cursor": cursor, "ended": ended}
            )
        await session._event_page(after, 0, 0.0, turn_id)  # a bad cursor is a status, here
        return _EventStream(events(after=after), self._closing)


async def _health(runtime: Runtime, request: Request) -> Response:
    """200 while the runtime can write; 503, with the reason, while it cannot (its store
    failed, it is closed, it cannot renew its leases)."""
    health = runtime.health()
    if health.writable:
        return _json({"status": "ok"})
    return _json({"status": "unavailable", "reason": health.reason}, status=503)


async def _no_such_route(request: Request, error: Exception) -> Response:
    """The answer to a request that no route takes (Starlette's 404 and 405, plain text
    else): an error body, as every other answer of the server has."""
    assert isinstance(error, HTTPException)
    method, path = _where(request)
    allowed = (error.headers or {}).get("Allow")
    if allowed:  # Starlette's, in a set's order
        allowed = ", ".join(sorted(allowed.split(", ")))
    if error.status_code == 404:
        kind, message = "RouteNotFound", f"this server has no route {method} {path}"
    elif error.status_code == 405 and allowed:
        kind, message = "MethodNotAllowed", f"{path} takes {allowed}, not {method}"
    else:
        kind, message = "BadRequest", f"{method} {path}: {error.detail}"
    message += ": see /v1/openapi.json for the server's routes"
    body = {"error": {"type": kind, "message": message}}
    return _json(body, error.status_code, headers={"Allow": allowed} if allowed else None)


def _json(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return Response(text, status_code=status, headers=headers, media_type="application/json")


def _where(request: Request) -> tuple[str, str]:
    """A request's method and path, for the log: never its query, which may hold a
    cursor, nor a header, which may hold a token."""
    return request.method, _path_of(request.scope)


def _path_of(scope: Scope) -> str:
    """The path of a request as it came, still percent-encoded (so that it is one line of
    a log, always), without its query."""
    raw = scope.get("raw_path") or scope["path"].encode()
    return str(raw.partition(b"?")[0].decode("ascii", "backslashreplace"))


def _log_unavailable(request: Request, error: SdkError) -> None:
    """Say on the server why a request got a 503: the store's (or lease's) error and its
    cause, whose messages name the store and the failure, never a request's values."""
    cause = error.__cause__
    because = "" if cause is None else f"; caused by {type(cause).__name__}: {cause}"
    logger.warning("%s %s: 503, %s: %s%s", *_where(request), type(error).__name__, error, because)


def _log_failure(request: Request, error: Exception) -> None:
    """Log a failure of the server's own on a request, with where it happened: the
    frames and the class, not the message, which may quote what the request sent."""
    frames = "".join(traceback.format_tb(error.__traceback__))
    logger.error(
        "%s %s: 500, the server failed with %s at\n%s",
        *_where(request),
        type(error).__name__,
        frames.rstrip(),
    )


async def _body(request: Request, cls: type[B]) -> B:
    """The request's JSON object, checked for size, syntax and fields, as a ``cls``."""
    fields = {field.name for field in attrs.fields(cls)}
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise _Refused(f"the body is larger than {MAX_BODY:,} bytes", 413, "PayloadTooLarge")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise _Refused(f"the body is larger than {MAX_BODY:,} bytes", 413, "PayloadTooLarge")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return _read_body({}, cls)
    try:
        data = read_json(raw.decode("utf-8"), wrapping=BODY_WRAPPING)
    except UnicodeDecodeError:
        raise _Refused("the body is not UTF-8 text") from None
    except NotJson as error:
        raise _Refused(f"the body is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise _Refused("the body must be a JSON object")
    _check_text(data)
    unknown = sorted(set(data) - fields)
    if unknown:
        raise _Refused(
            f"unknown field(s) {', '.join(map(repr, unknown))}: this route takes "
            f"{', '.join(map(repr, sorted(fields)))}"
        )
    return _read_body(data, cls)


def _read_body(data: dict[str, Any], cls: type[B]) -> B:
    """``data`` as a ``cls``: a field of the wrong type is a ValidationError at its path."""
    try:
        return structure(data, cls)
    except ValidationError as error:  # named for the body, not for its class
        raise ValidationError(f"invalid body: {'; '.join(error.errors)}", error.errors) from error


def _check_text(data: dict[str, Any]) -> None:
    """Refuse a body with text that no store can keep, naming its field, as a local
    session refuses it: a lone surrogate anywhere (the JSON escape ``\\ud800`` alone), or an
    idempotency key with NUL. Nothing was written.

    Raises:
        ValidationError: Which field, and why (never the text).
    """
    key = data.get("idempotency_key")
    if isinstance(key, str):
        check_key(key)
    found = unstorable_text(data)
    if found is not None:
        field = repr(found.at.removeprefix(".")) if found.at else "the body"
        where = f"an object key in {field}" if found.reason.startswith("an object") else field
        message = (
            f"{where} {SURROGATE_REASON}; send whole characters (one beyond U+FFFF escaped "
            "as its pair, such as \\ud83d\\ude00)"
        )
        raise ValidationError(f"invalid request body: {message}", (f"{message} @ ${found.at}",))


def _inputs(given: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    """Session inputs as a client sends them: JSON objects by input id, as a session stores
    them (each use structures its value again, and checks it then)."""
    if given is None:
        return {}
    if Principal.input_id in given:
        raise _Refused(f"the input id {Principal.input_id!r} is the server's own")
    return dict(given)


def _key(request: Request, given: str | None) -> str | None:
    """The request's idempotency key: its header's, or else its body's."""
    return request.headers.get("idempotency-key") or given


def _number(request: Request, name: str, default: float, most: float) -> float:
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= most:
        raise _Refused(f"'{name}' must be a number from 0 to {most:g}")
    return value


#: What an answer's ``kind`` says it is: the class its JSON is read into (None: as it is).
_KINDS: dict[str, Any] = {
    "approval": ApprovalAnswer,
    "credentials": Credentials,
    "sign_in": SignInAnswer,
    "keep_open": KeepCallbackOpen,
    "value": None,
}


async def _answer_for(turn: Turn, callback_id: str, data: Any, kind: str | None) -> Any:
    """The answer ``data`` as the callback it settles takes it: read as ``kind`` says (an
    approval's or a sign-in's answer, a client tool's result as it is); without a kind, as
    the open callback of that id takes it, or by its shape."""
    if kind is not None:
        cls = _KINDS[kind]
        return data if cls is None else _read_answer(data, cls)
    record = await turn.get()
    callbacks = record.callbacks if isinstance(record, Blocked) else ()
    opened = next((type(open_) for open_ in callbacks if open_.id == callback_id), None)
    if opened is None and isinstance(data, dict):  # settled, or another turn's: by its shape
        if data.get("type") in ("allow", "deny"):
            opened = OpenApproval
        elif set(data) == {"credentials"}:
            opened = OpenSignIn
    if opened is OpenApproval:
        return _read_answer(data, ApprovalAnswer)
    if opened is OpenSignIn:
        return _read_answer(data, SignInAnswer)
    return data


def _read_answer(data: Any, cls: Any) -> Any:
    """``data`` read as the answer class ``cls``: its unknown fields are refused, as a
    request body's are."""
    answer = structure(data, cls)
    unknown = unknown_fields(data, answer) if isinstance(data, dict) else []
    if unknown:
        takes = ", ".join(repr(field.name) for field in attrs.fields(type(answer)))
        raise _Refused(
            f"unknown field(s) {', '.join(map(repr, unknown))} in 'answer': "
            f"{type(answer).__name__} takes {takes or 'no field but type'}"
        )
    return answer


class _EventStream(Response):
    """A session's (or turn's) events as Server-Sent Events: ``id`` the cursor, ``event``
    the type, ``data`` the JSON; a comment every :data:`PING_SECONDS` while idle. Ends when
    the events end, the client leaves, or the server closes."""

    def __init__(self, events: AsyncIterator[Event], closing: trio.Event) -> None:
        super().__init__()
        self._events = events
        self._closing = closing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lock = trio.Lock()

        async def write(text: str, *, more: bool = True) -> None:
            async with lock:
                await send({"type": "http.response.body", "body": text.encode(), "more_body": more})

        # Frames wait here while earlier ones are written: what became visible at once goes
        # out in one write (a turn's first events come together), and a slow client makes
        # the reading wait once STREAM_BUFFER frames are ahead of it.
        ahead, frames = trio.open_memory_channel[str](STREAM_BUFFER)

        async def read() -> None:
            async with ahead:
                async for event in self._events:
                    frame = _frame(event)
                    try:
                        ahead.send_nowait(frame)  # reading on, to what is not visible yet
                    except trio.WouldBlock:
                        await ahead.send(frame)

        async def stream() -> None:
            async for frame in frames:
                batch = [frame]
                with contextlib.suppress(trio.WouldBlock, trio.EndOfChannel):
                    while len(batch) < STREAM_BUFFER:
                        batch.append(frames.receive_nowait())
                await write("".join(batch))
            # The end said in so many words: a stream cut short (the server stopped) ends
            # without it, and a client opens it again from its last cursor.
            await write(_END)
            nursery.cancel_scope.cancel()

        async def ping() -> None:
            while True:
                await trio.sleep(PING_SECONDS)
                await write(_PING)

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            nursery.cancel_scope.cancel()

        async def closing() -> None:
            await self._closing.wait()
            nursery.cancel_scope.cancel()

        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        try:
            async with trio.open_nursery() as nursery:
                for task in (read, stream, ping, watch, closing):
                    nursery.start_soon(task)
        finally:
            with trio.CancelScope(shield=True):
                await self._events.aclose()  # type: ignore[attr-defined]
        await write("", more=False)


class _Drained:
    """The application, reading what is left of a request's body before it answers (at
    most :data:`MAX_DRAINED` bytes, dropped): a server that answers while its client still
    sends a body closes the connection, and the client, still writing, loses the answer
    and the connection it meant to use again."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        ended = False

        async def receive_body() -> MutableMapping[str, Any]:
            nonlocal ended
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                ended = True
            return message

        async def send_after_body(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                size = 0
                while not ended and size <= MAX_DRAINED:
                    size += len((await receive_body()).get("body", b""))
            await send(message)

        await self._app(scope, receive_body, send_after_body)


class _AccessLog:
    """The application, with a line on :data:`access_logger` for each HTTP request once
    its response has ended (or the client left): its method, path without the query,
    status (0 if none was sent) and how long it took in milliseconds."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        began = trio.current_time()
        status = 0

        async def send_status(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self._app(scope, receive, send_status)
        finally:
            if access_logger.isEnabledFor(logging.INFO):
                access_logger.info(
                    "%s %s %d %.1fms",
                    scope["method"],
                    _path_of(scope),
                    status,
                    (trio.current_time() - began) * 1000,
                )


def _frame(event: Event) -> str:
    data = unstructure(event)
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return _sse.frame(text, event=data["type"], id=data["id"])


#: The last frame of a stream that ended (one cut short ends without it).
_END = _sse.frame("{}", event="end")
_PING = _sse.comment("ping")


_SESSION = "/v1/agents/{agent}/sessions/{session_id}"
_TURN = _SESSION + "/turns/{turn_id}"
_WAIT = Parameter(
    name="wait",
    schema={"type": "number", "minimum": 0, "maximum": MAX_WAIT},
    description="the most seconds to wait for the turn to end or block",
)
_IDEMPOTENCY_KEY = Parameter(
    name="Idempotency-Key",
    where="header",
    description="repeats of a request with this key are told what the first was",
)
_EVENTS_PARAMETERS = (
    Parameter(name="after", description="the cursor to read after (an event's id)"),
    Parameter(name="Last-Event-ID", where="header", description="as after, for streams"),
    Parameter(
        name="limit",
        schema={"type": "integer", "minimum": 0, "maximum": MAX_PAGE},
        description="the most events of a page (100 by default)",
    ),
    Parameter(
        name="wait",
        schema={"type": "number", "minimum": 0, "maximum": MAX_WAIT},
        description="the most seconds to wait for a page's first event",
    ),
)

#: Every route of the server, which ``Server.app()`` serves and ``/v1/openapi.json``
#: describes.
OPERATIONS: tuple[Operation, ...] = (
    Operation(
        method="GET",
        path="/v1/health",
        endpoint=lambda server, request: _health(server._runtime, request),
        name="health",
        summary="Whether the server is up and its runtime can write.",
        answers={
            200: object_schema(status=string_schema("'ok'")),
            503: object_schema(
                status=string_schema("'unavailable'"),
                reason=string_schema("why the runtime cannot write"),
            ),
        },
        token=False,
    ),
    Operation(
        method="GET",
        path="/v1/openapi.json",
        endpoint=Server._describe,
        name="describe",
        summary="This description of the HTTP API.",
        answers={200: {"type": "object", "description": "an OpenAPI 3.1 document"}},
        token=False,
    ),
    Operation(
        method="GET",
        path="/v1/agents",
        endpoint=Server._list_agents,
        name="list_agents",
        summary="The names of the agents served.",
        answers={200: object_schema(agents={"type": "array", "items": string_schema()})},
    ),
    Operation(
        method="POST",
        path="/v1/agents/{agent}/sessions",
        endpoint=Server._start_session,
        name="start_session",
        summary="Start a session of the agent.",
        body=StartSessionBody,
        parameters=(_IDEMPOTENCY_KEY,),
        answers={201: SESSION_REF},
    ),
    Operation(
        method="GET",
        path=_SESSION,
        endpoint=Server._read_session,
        name="read_session",
        summary="The session, if it exists.",
        answers={200: SESSION_REF},
        right="read",
    ),
    Operation(
        method="POST",
        path=_SESSION + "/cancel",
        endpoint=Server._cancel,
        name="cancel",
        summary="Cancel the session: it takes no more turns.",
        answers={200: object_schema(id=string_schema(), cancelled={"type": "boolean"})},
    ),
    Operation(
        method="POST",
        path=_SESSION + "/tokens",
        endpoint=Server._mint,
        name="mint_token",
        summary="A token for this session only, with some rights there.",
        body=MintBody,
        answers={
            201: object_schema(
                token=string_schema(),
                expires={"type": "integer", "description": "when it expires, in Unix seconds"},
                rights={"type": "array", "items": string_schema()},
            )
        },
    ),
    Operation(
        method="POST",
        path=_SESSION + "/turns",
        endpoint=Server._start_turn,
        name="start_turn",
        summary="Start a turn (with wait, its record once it ends or blocks).",
        body=StartTurnBody,
        parameters=(_WAIT, _IDEMPOTENCY_KEY),
        answers={
            200: object_schema(turn_id=string_schema(), record=RECORD),
            201: object_schema(turn_id=string_schema(), record=RECORD),
        },
    ),
    Operation(
        method="POST",
        path=_SESSION + "/messages",
        endpoint=Server._send_message,
        name="send_message",
        summary="A message: a new turn, or added to the running one.",
        body=MessageBody,
        parameters=(_IDEMPOTENCY_KEY,),
        answers={
            200: object_schema(turn_id=string_schema(), started={"type": "boolean"}),
            201: object_schema(turn_id=string_schema(), started={"type": "boolean"}),
        },
    ),
    Operation(
        method="GET",
        path=_SESSION + "/events",
        endpoint=Server._session_events,
        name="session_events",
        summary="The session's events: a page of JSON, or Server-Sent Events.",
        parameters=_EVENTS_PARAMETERS,
        answers={200: EVENTS_PAGE},
        streams=True,
        right="read",
    ),
    Operation(
        method="GET",
        path=_SESSION + "/subagents",
        endpoint=Server._subagents,
        name="subagents",
        summary="The session's subagents' sessions, newest first.",
        answers={200: object_schema(sessions={"type": "array", "items": SESSION_REF})},
        right="read",
    ),
    Operation(
        method="GET",
        path=_TURN,
        endpoint=Server._read_turn,
        name="read_turn",
        summary="The turn's record (with wait, once it ends or blocks).",
        parameters=(_WAIT, Parameter(name="after", description="a record's cursor")),
        answers={200: RECORD},
        right="read",
    ),
    Operation(
        method="POST",
        path=_TURN + "/steer",
        endpoint=Server._steer,
        name="steer",
        summary="A message the running turn reads at its next step.",
        body=SteerBody,
        parameters=(_IDEMPOTENCY_KEY,),
        answers={200: object_schema(turn_id=string_schema(), steered={"type": "boolean"})},
        conflict=TURN_CONFLICT,
    ),
    Operation(
        method="POST",
        path=_TURN + "/interrupt",
        endpoint=Server._interrupt,
        name="interrupt",
        summary="Stop the turn.",
        body=InterruptBody,
        parameters=(_IDEMPOTENCY_KEY,),
        answers={200: object_schema(turn_id=string_schema(), interrupted={"type": "boolean"})},
        conflict=TURN_CONFLICT,
    ),
    Operation(
        method="POST",
        path=_TURN + "/callbacks/{callback_id}",
        endpoint=Server._answer,
        name="answer",
        summary="Answer one of the turn's callbacks.",
        body=AnswerBody,
        parameters=(_IDEMPOTENCY_KEY,),
        answers={200: CALLBACK_ANSWER},
        right="answer",
    ),
    Operation(
        method="GET",
        path=_TURN + "/events",
        endpoint=Server._turn_events,
        name="turn_events",
        summary="The turn's events, until its turn_ended.",
        parameters=_EVENTS_PARAMETERS,
        answers={200: EVENTS_PAGE},
        streams=True,
        right="read",
    ),
)

#: The description ``/v1/openapi.json`` serves.
API = describe_api(OPERATIONS)


@asynccontextmanager
async def serve(
    agents: Iterable[Agent] = (),
    *,
    store: str | Store | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    tokens: Iterable[str] | Mapping[str, str] = (),
    event_retention: int | None = None,
    lease_seconds: float | None = None,
) -> AsyncIterator[Server]:
    """:func:`agentlib.serve`, once its dependencies are imported."""
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.loglevel = "WARNING"
    config.graceful_timeout = 1.0
    async with (
        open_runtime(
            store, event_retention=event_retention, lease_seconds=lease_seconds
        ) as runtime,
        trio.open_nursery() as nursery,
    ):
        server = Server(runtime, tokens)
        for agent in agents:
            server.deploy(agent)
        stop = trio.Event()
        app = _AccessLog(_Drained(server.app()))
        binds = await nursery.start(
            lambda task_status: serve_app(
                app,  # type: ignore[arg-type]
                config,
                shutdown_trigger=stop.wait,
                task_status=task_status,
            )
        )
        server.url = binds[0]
        try:
            yield server
        finally:
            server._closing.set()
            stop.set()
