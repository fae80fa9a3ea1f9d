"""Sessions of a deployed agent, over httpx: references that behave as local ones.

A deployed agent's sessions are :class:`~agentlib.Session` and :class:`~agentlib.Turn`
references over an :class:`HTTPBackend`, whose every verb is a request to an agentlib
server: the same records, events and errors come back. Requests that change something
carry an idempotency key, so that a retry after a dropped connection never starts a second
turn or gives a second answer; event streams reconnect from their last cursor.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import httpx
import trio

from .._data import _errors
from .._data._callbacks import (
    AllowApproval,
    Credentials,
    DenyApproval,
    KeepCallbackOpen,
    OpenClientToolCall,
    SignInAnswer,
)
from .._data._convert import structure, unstructure
from .._data._errors import (
    AuthenticationError,
    SdkError,
    ServerUnreachableError,
    SessionNotFoundError,
    ValidationError,
)
from .._data._events import Event
from .._data._history import new_id
from .._data._records import AlreadySettled, Answered, Blocked, NotFound, Running, TurnState
from .._engine._live import check_callback_id
from .._engine._machine import check_not_a_class, fit_answer
from .._references._backends._base import (
    Backend,
    Content,
    Occupied,
    Started,
    Told,
    event_for_reader,
    message_content,
)
from .._references._session import (
    ApprovalHandler,
    ClientToolHandler,
    Session,
    SignInHandler,
)
from .._toolkit._inputs import stored_inputs
from .._toolkit._output import output_schema
from .._toolkit._tools import answer_error, answer_problem
from .._trio._context import check_trio, set_remote
from .._trio._retry import Backoff, RetryPolicy

__all__ = ["HTTPBackend", "RemoteAgent"]

#: The longest a turn read waits on the server per request, in seconds.
_WAIT = 30.0
#: The most events a page of events brings.
_PAGE = 1000
#: How long a call is retried while no server answers it, in seconds (``retry_for``).
RETRY_FOR = 60.0
#: How long a server has to accept a connection, and to begin an answer once it no longer
#: holds it, in seconds (``connect_timeout``).
CONNECT_TIMEOUT = 10.0
#: The pauses between tries, in seconds: the first at most, the longest at most (each is
#: drawn from none to its length: full jitter).
_FIRST_PAUSE = 0.1
_MOST_PAUSE = 5.0
#: The tries after which pauses stop growing while answers are cut short (0.4 s at most).
_CUT_ATTEMPTS = 2


class RemoteAgent:
    """An agent served by an agentlib server (from :meth:`agentlib.Agent.load_from`): start
    sessions of it, or refer to one by id, as with a local agent.

    Attributes:
        name: The agent's name on the server.
        url: The server's address (the first, of several servers of one store): with the
            session's id, what names a session.
        urls: Every server's address, in the order they are tried.
        output_type: The type completed turns' outputs are structured into, by default (None:
            the JSON the server sends).
    """

    def __init__(
        self,
        url: str | Sequence[str],
        name: str,
        token: str | None = None,
        output_type: Any = None,
        subagent_output_types: Mapping[str, Any] | None = None,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        retry_for: float = RETRY_FOR,
    ) -> None:
        urls = [url] if isinstance(url, str) else list(url)
        if not urls or not all(isinstance(each, str) and each for each in urls):
            raise ValueError("url must be a server's address, or a list of them")
        for each in urls:
            if not each.startswith(("http://", "https://")):
                raise ValueError(
                    f"url {each!r} is not an HTTP address: give one such as 'http://127.0.0.1:8000'"
                )
        for label, seconds in (("connect_timeout", connect_timeout), ("retry_for", retry_for)):
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                raise ValueError(f"{label} must be a positive number of seconds, not {seconds!r}")
            if not 0 < seconds < math.inf:
                raise ValueError(f"{label} must be a positive number of seconds, not {seconds!r}")
        self.urls = tuple(each.rstrip("/") for each in urls)
        self.url = self.urls[0]
        self.name = name
        self.output_type = output_type
        self._wire = _Wire(
            self.urls, token, connect_timeout=float(connect_timeout), retry_for=float(retry_for)
        )
        self._subagent_output_types = dict(subagent_output_types or {})

    def _for_subagent(self, agent_name: str) -> RemoteAgent:
        """This agent as its subagent ``agent_name``'s sessions are reached: under its
        path, structuring outputs as that subagent does."""
        child = copy.copy(self)
        child.output_type = self._subagent_output_types.get(agent_name)
        return child

    def __repr__(self) -> str:
        return f"RemoteAgent(url={self.url!r}, name={self.name!r})"

    async def start_session(
        self,
        *,
        history: Iterable[Any] | None = None,
        inputs: Sequence[Any] = (),
        idempotency_key: str | None = None,
        on_approval: ApprovalHandler | None = None,
        on_sign_in: SignInHandler | None = None,
        on_client_tool: ClientToolHandler | None = None,
    ) -> Session:
        """Start a session on the server; see :meth:`agentlib.Agent.start_session`.

        Its inputs go to the server, and never come back: no record, event or error
        holds their values.
        """
        check_trio()
        body: dict[str, Any] = {"idempotency_key": idempotency_key or new_id()}
        if inputs:
            body["inputs"] = stored_inputs(inputs)  # checked here, as a local start checks
        if history is not None:
            body["history"] = [
                item if isinstance(item, Mapping) else unstructure(item) for item in history
            ]
        made = await self._wire.call("POST", f"/agents/{self.name}/sessions", body)
        return self.session(
            made["id"],
            on_approval=on_approval,
            on_sign_in=on_sign_in,
            on_client_tool=on_client_tool,
        )

    def session(
        self,
        session_id: str,
        *,
        on_approval: ApprovalHandler | None = None,
        on_sign_in: SignInHandler | None = None,
        on_client_tool: ClientToolHandler | None = None,
    ) -> Session:
        """A reference to a session of this agent on the server; sends no request."""
        return Session(
            HTTPBackend(self),
            session_id,
            on_approval=on_approval,
            on_sign_in=on_sign_in,
            on_client_tool=on_client_tool,
        )


class _Wire:
    """Requests to a server: JSON in and out, errors raised as their classes, retries after
    connection failures; with several servers (of one store), the next one once a server
    cannot be connected to, or does not begin its answer in time."""

    def __init__(
        self,
        urls: Sequence[str],
        token: str | None,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        retry_for: float = RETRY_FOR,
    ) -> None:
        self.urls = tuple(urls)
        self._bases = [url + "/v1" for url in urls]
        self._at = 0  # the server requests go to
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._connect_timeout = connect_timeout
        self._retry_for = retry_for
        self._limit = _PAGE  # the events a page asks for: fewer after a cut answer
        self._client: httpx.AsyncClient | None = None
        self._run: trio.lowlevel.TrioToken | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        """This trio run's client: its connections are kept open between requests, and
        closed when the run ends (a program's ``trio.run``, or agentlib_sync's engine)."""
        run = trio.lowlevel.current_trio_token()
        if self._client is None or self._run is not run:
            # No cap on connections: each session's waits hold one; up to 100 are kept.
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=100)
            self._client = httpx.AsyncClient(
                headers=self._headers, timeout=self._timeout(0.0), limits=limits
            )
            self._run = run
            trio.lowlevel.spawn_system_task(_close_at_the_end, self._client)
        return self._client

    def _timeout(self, held: float) -> httpx.Timeout:
        """The deadlines of a request the server may hold for ``held`` seconds: connecting,
        and each read (the first byte comes once the server stops holding it)."""
        each = self._connect_timeout
        return httpx.Timeout(each, read=held + each)

    async def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        params: Mapping[str, Any] | None = None,
        allowed: tuple[int, ...] = (),
        paged: bool = False,
    ) -> Any:
        """The JSON a request answers, retrying for ``retry_for`` seconds while no answer
        comes whole (every request is safe to repeat: reads, and changes that carry an
        idempotency key). With ``paged``, a page of events: it asks for fewer events after
        an answer was cut off, and more again after one came whole.

        Raises:
            ServerUnreachableError: No server answered for ``retry_for`` seconds.
            AuthenticationError: The server refused the token (or wanted one).
            SdkError: The error the server answered with, as its class.
        """
        retries = RetryPolicy(
            backoff=Backoff(first=_FIRST_PAUSE, most=_MOST_PAUSE, full_jitter=True),
            give_up_after=self._retry_for,
            steady_after=_CUT_ATTEMPTS,
        ).start()
        held = float(params.get("wait", 0.0)) if params else 0.0
        while True:
            url = self._bases[self._at] + path
            sent = params
            if paged and params is not None:
                sent = {**params, "limit": min(params["limit"], self._limit)}
            failure: Exception
            try:
                response = await self.client.request(
                    method, url, params=sent, timeout=self._timeout(held), **_json_body(body)
                )
            except httpx.TransportError as error:
                if isinstance(error, httpx.UnsupportedProtocol):
                    raise  # not a failure of the link: checked when the reference is made
                failure = error
                # Not accepting connections, or not answering them: down, stopped, or out
                # of reach. (A cut answer is the link's failure: the same server is tried.)
                away = isinstance(error, (httpx.ConnectError, httpx.TimeoutException))
            else:
                if not _from_a_gateway(response):
                    break
                # A proxy in front of the server answered for it: the server is away.
                failure = httpx.HTTPStatusError(
                    f"{response.status_code} {response.reason_phrase} from a proxy, without "
                    "an agentlib error body",
                    request=response.request,
                    response=response,
                )
                away = True
            if paged and not isinstance(failure, (httpx.ConnectError, httpx.HTTPStatusError)):
                self._limit = max(1, self._limit // 4)  # an answer was cut, or came too slow
            # An answer cut short came from a server at work: its pauses stay short.
            cut = isinstance(failure, (httpx.RemoteProtocolError, httpx.ReadError))
            pause = retries.next_pause(steady=cut)
            if pause is None:
                raise self._unreachable(method, path, retries.elapsed, failure) from failure
            if away and len(self._bases) > 1:
                # Another server of the store takes the session over (at once, from a dead
                # process of its host; else once the lease expires).
                self._at = (self._at + 1) % len(self._bases)
            await trio.sleep(pause)
        if paged:
            self._limit = min(_PAGE, self._limit * 2)
        if response.status_code >= 400 and response.status_code not in allowed:
            raise self._error(response, path)
        try:
            return response.json()
        except ValueError as error:
            raise SdkError(
                f"{self.urls[self._at]} answered {method} {path} with {response.status_code} "
                f"and a body that is not JSON ({response.text[:100]!r}): is it an agentlib "
                "server, at the address given to Agent.load_from?"
            ) from error

    def _unreachable(
        self, method: str, path: str, seconds: float, error: Exception
    ) -> ServerUnreachableError:
        servers = " or ".join(self.urls)
        why = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        return ServerUnreachableError(
            f"no server at {servers} answered {method} {path} in {seconds:.0f} s of tries "
            f"(the last failed with {why}): check that the server runs and can be reached; "
            "the call is safe to repeat (Agent.load_from's retry_for sets how long it "
            "retries)",
            urls=self.urls,
            seconds=seconds,
        )

    def _error(self, response: httpx.Response, path: str) -> Exception:
        """The exception the server's error ``response`` to a request of ``path`` carries."""
        error = error_from(response)
        server = self.urls[self._at]
        if (_error_body(response) or {}).get("type") == "RouteNotFound":
            return self._no_route(response, server)
        if isinstance(error, AuthenticationError) and response.status_code == 401:
            if self._headers:
                told = (
                    f"the server at {server} refused this reference's token: it is not one "
                    "of the server's tokens, or it has expired; pass Agent.load_from a token "
                    "the server takes (sent as 'Authorization: Bearer <token>')"
                )
            else:
                told = (
                    f"the server at {server} takes requests with a token: pass "
                    "Agent.load_from token=... with one of the server's tokens (sent as "
                    "'Authorization: Bearer <token>')"
                )
            return AuthenticationError(told, status=401)
        found = _SESSION_PATH.match(path)
        if isinstance(error, SessionNotFoundError) and found is not None:
            session_id = found.group(1)
            if self._headers:
                told = (
                    f"the server at {server} has no session {session_id!r} that this token "
                    "reaches: it may exist under another token (a token reaches its own "
                    "principal's sessions only), or in another store; start one with "
                    "agent.start_session()"
                )
            else:
                told = (
                    f"no session {session_id!r} in the store of the server at {server}: it "
                    "may be in another store, or, on a server that takes tokens, under a "
                    "token; start one with agent.start_session()"
                )
            replaced = SessionNotFoundError(told)
            replaced.__cause__ = error
            return replaced
        return error

    def _no_route(self, response: httpx.Response, server: str) -> SdkError:
        """The error of a route the server does not have: the address given to
        ``Agent.load_from`` is not the server's root, or the server is older."""
        request = f"{response.request.method} {response.request.url.path}"
        url = httpx.URL(server)
        path = url.path.rstrip("/")
        if path.endswith("/v1"):
            why = (
                f"give Agent.load_from the address without its '/v1' "
                f"({server.removesuffix('/v1')!r}): the client adds it to every route"
            )
        elif path:
            root = str(url.copy_with(path="/")).rstrip("/")
            why = (
                "give Agent.load_from the address the server answers at, as `agentlib "
                f"serve` prints it but for its '/v1' ({root!r}, say)"
            )
        else:
            why = "it may run an older agentlib than this client: upgrade the server"
        return SdkError(f"the server at {server} has no route {request}: {why}")

    async def page(self, path: str, after: str | None, limit: int, wait: float) -> Any:
        """A page of the events of ``path`` after cursor ``after``, waiting up to ``wait``
        seconds on the server for the next event: a whole response, so a connection cut
        between two pages, or in one, loses nothing (the page is asked for again, with
        fewer events)."""
        params: dict[str, Any] = {"wait": wait, "limit": limit}
        if after is not None:
            params["after"] = after
        return await self.call("GET", path, params=params, paged=True)


#: The statuses of a proxy whose server is away (an agentlib server's own come with a body).
_GATEWAY = (502, 503, 504)


def _from_a_gateway(response: httpx.Response) -> bool:
    """Whether ``response`` is a proxy's, saying that the server behind it is away."""
    return response.status_code in _GATEWAY and _error_body(response) is None


#: The path of a session's routes, and its id.
_SESSION_PATH = re.compile(r"/agents/[^/]+/sessions/([^/]+)")


async def _close_at_the_end(client: httpx.AsyncClient) -> None:
    """Close ``client``'s connections when the trio run ends (a system task: cancelled then)."""
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True), contextlib.suppress(Exception):
            await client.aclose()


def _error_body(response: httpx.Response) -> Mapping[str, Any] | None:
    """The fields of an agentlib server's error body in ``response`` (its ``type`` and
    ``message`` at least); None for another body, a proxy's, say."""
    try:
        fields = response.json()["error"]
        fields["type"], fields["message"]
    except (ValueError, KeyError, TypeError):
        return None
    return fields  # type: ignore[no-any-return]


def error_from(response: httpx.Response) -> Exception:
    """The exception a server's error response carries: the class it names, with its
    message and attributes."""
    fields = _error_body(response)
    if fields is None:
        return SdkError(
            f"the server answered {response.status_code} without an agentlib error body: "
            f"{response.text[:200]}"
        )
    return error_of(response.status_code, fields)


def error_of(status: int, fields: Mapping[str, Any]) -> Exception:
    """The exception an error body's fields describe."""
    kind, message = fields["type"], fields["message"]
    cls = getattr(_errors, kind, None)
    if not (isinstance(cls, type) and issubclass(cls, SdkError)):
        if status in (400, 413):
            return ValidationError(message)
        if status in (401, 403):
            return AuthenticationError(message, status=status)
        return SdkError(message)
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    defaults: dict[str, Any] = {
        "errors": tuple(fields.get("errors", ())),
        "cursor": fields.get("cursor"),
        "status": fields.get("status"),
        "code": fields.get("code"),
        "body": None,
        "record": None,
        "session_id": None,
        "owner": None,
        "until": None,
        "store": None,
    }
    for name, value in defaults.items():
        setattr(error, name, value)
    return error


class HTTPBackend:
    """The sessions of an agent served by an agentlib server: each verb a request to it.
    Two references are equal when they name the same session on the same server.

    Attributes:
        remote: The served agent.
    """

    __slots__ = ("remote",)

    def __init__(self, remote: RemoteAgent) -> None:
        self.remote = remote

    @property
    def agent(self) -> RemoteAgent:
        return self.remote

    @property
    def place(self) -> object:
        return self.remote.url

    @property
    def _wire(self) -> _Wire:
        return self.remote._wire

    def _path(self, session_id: str, turn_id: str | None = None) -> str:
        path = f"/agents/{self.remote.name}/sessions/{session_id}"
        return path if turn_id is None else f"{path}/turns/{turn_id}"

    def describe(self, session_id: str) -> str:
        remote = self.remote
        return f"RemoteSession(id={session_id!r}, agent={remote.name!r}, url={remote.url!r})"

    def describe_turn(self, session_id: str, turn_id: str, started: bool | None) -> str:
        return f"RemoteTurn(id={turn_id!r}, session_id={session_id!r}, started={started!r})"

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
        """Start a turn; with ``wait``, started and waited on in one request (then, if it
        still runs, waited on as ``result`` waits). With another ``output_type`` than the
        served agent's, its model is asked for JSON matching that type's schema."""
        check_trio()
        body: dict[str, Any] = {
            "content": _wire_content(content),
            "idempotency_key": key or new_id(),
        }
        if max_steps is not None:
            body["max_steps"] = max_steps
        # The served agent's own output type (which this reference's mirrors) it asks for
        # itself; another one, the server asks its model for by its schema.
        if output_type is not None and output_type is not self.remote.output_type:
            schema = output_schema(output_type)
            if schema is not None:
                body["output_schema"] = schema
        held = 0.0
        if wait:
            held = _WAIT if timeout is None else min(_WAIT, timeout)
        deadline = None if timeout is None else trio.current_time() + timeout
        params = {"wait": held} if held else None
        path = f"{self._path(session_id)}/turns"
        made = await self._wire.call("POST", path, body, params=params, allowed=(409,))
        if "error" in made:
            if made["error"]["type"] != "Busy":
                raise error_of(409, made["error"])
            return Occupied(turn_id=made["error"]["turn_id"])
        if not wait:
            return Started(turn_id=made["turn_id"], new=True, left=timeout)
        record: TurnState[Any] = structure(made["record"], TurnState[Any])  # type: ignore[misc]
        left = None if deadline is None else max(0.0, deadline - trio.current_time())
        return Started(turn_id=made["turn_id"], new=True, record=record, left=left)

    async def send_message(
        self, session_id: str, content: Content, key: str | None
    ) -> tuple[str, bool]:
        check_trio()
        body = {"content": _wire_content(content), "idempotency_key": key or new_id()}
        sent = await self._wire.call("POST", f"{self._path(session_id)}/messages", body)
        return sent["turn_id"], sent["started"]

    async def steer(self, session_id: str, turn_id: str, content: Content) -> bool:
        check_trio()
        body = {
            "content": _wire_content(content),
            "idempotency_key": new_id(),  # a retry adds nothing twice
        }
        path = f"{self._path(session_id, turn_id)}/steer"
        data = await self._wire.call("POST", path, body, allowed=(409,))
        return bool(data.get("steered"))

    async def interrupt(self, session_id: str, turn_id: str) -> bool:
        check_trio()
        body = {"idempotency_key": new_id()}  # a retry is told it interrupted
        path = f"{self._path(session_id, turn_id)}/interrupt"
        data = await self._wire.call("POST", path, body, allowed=(409,))
        return bool(data.get("interrupted"))

    async def cancel(self, session_id: str) -> None:
        check_trio()
        await self._wire.call("POST", f"{self._path(session_id)}/cancel")

    async def answer(
        self, session_id: str, turn_id: str, callback_id: str, answer: object, key: str | None
    ) -> Told:
        check_trio()
        callback_id = check_callback_id(callback_id)  # refused here, as locally
        check_not_a_class(answer)
        body = {
            "answer": await self._wire_answer(session_id, turn_id, callback_id, answer),
            # What the answer is, which its JSON alone may not say (a client tool's result
            # may look like an approval's answer).
            "kind": _kind(answer),
            # A retry after a lost response is told what the first try was.
            "idempotency_key": key or new_id(),
        }
        path = f"{self._path(session_id, turn_id)}/callbacks/{callback_id}"
        return _told(await self._wire.call("POST", path, body), "an answer")

    async def report(
        self, session_id: str, turn_id: str, callback_id: str, failure: str
    ) -> Told | None:
        """Tell the server that the handler of a client tool call failed; None if the
        agent raises tool errors (its caller then raises it)."""
        check_trio()
        body = {"answer": failure, "kind": "failure", "idempotency_key": new_id()}
        path = f"{self._path(session_id, turn_id)}/callbacks/{callback_id}"
        data = await self._wire.call("POST", path, body)
        if isinstance(data, dict) and data.get("type") == "not_reported":
            return None
        return _told(data, "a handler's failure")

    async def _wire_answer(
        self, session_id: str, turn_id: str, callback_id: str, answer: object
    ) -> Any:
        """``answer`` as JSON for the wire.

        Raises:
            SdkError: It is no JSON value (nested too deep, NaN, a set): it cannot travel,
                and is refused here as a local session refuses it, for the callback it
                answers (a :class:`ClientToolAnswerError` for a client tool call).
        """
        if isinstance(answer, _ANSWERS):
            return unstructure(answer)
        problem, data = answer_problem(answer)
        if problem is None:
            return data
        record = await self.record(session_id, turn_id)
        callbacks = record.callbacks if isinstance(record, Blocked) else ()
        callback = next((open_ for open_ in callbacks if open_.id == callback_id), None)
        if callback is not None and not isinstance(callback, OpenClientToolCall):
            fit_answer(callback, answer, {})  # an approval's or a sign-in's refusal
        name = callback.tool_name if isinstance(callback, OpenClientToolCall) else None
        raise answer_error(name or f"call {callback_id}", problem)

    async def record(
        self, session_id: str, turn_id: str, params: Mapping[str, Any] | None = None
    ) -> TurnState[Any]:
        check_trio()
        data = await self._wire.call("GET", self._path(session_id, turn_id), params=params)
        record: TurnState[Any] = structure(data, TurnState[Any])  # type: ignore[misc]
        return record

    async def settled(
        self, session_id: str, turn_id: str, after: str | None, deadline: float
    ) -> TurnState[Any]:
        """The turn's record once it ends, or blocks on a callback opened after ``after``,
        or at ``deadline``: each read waits on the server."""
        while True:
            left = max(0.0, deadline - trio.current_time())
            params: dict[str, Any] = {"wait": min(_WAIT, left)}
            if after is not None:
                params["after"] = after
            record = await self.record(session_id, turn_id, params)
            if not isinstance(record, Running) or trio.current_time() >= deadline:
                return record

    def events(self, session_id: str, after: str | None, turn_id: str | None) -> PageReader:
        return PageReader(self, f"{self._path(session_id, turn_id)}/events", after)

    async def subagents(self, session_id: str) -> list[tuple[str, Backend]]:
        check_trio()
        listed = await self._wire.call("GET", f"{self._path(session_id)}/subagents")
        return [
            (child["id"], HTTPBackend(self.remote._for_subagent(child["agent"])))
            for child in listed["sessions"]
        ]


class PageReader:
    """A reader of a deployed session's events (:class:`~agentlib._references._backends.
    _base.EventReader`): pages of JSON, each a whole response that waits on the server for
    the next event (at most ``_WAIT`` seconds), so that a connection cut between two pages,
    or in one, loses nothing: the page is asked for again, with fewer events."""

    def __init__(self, backend: HTTPBackend, path: str, after: str | None) -> None:
        self._backend = backend
        self._path = path
        self.cursor = after
        self.ended = False

    async def page(self, limit: int, wait: float) -> list[Event]:
        check_trio()
        backend = self._backend
        data = await backend._wire.page(self._path, self.cursor, limit, min(wait, _WAIT))
        output_type = backend.remote.output_type
        events = [event_for_reader(structure(each, Event), output_type) for each in data["events"]]
        self.cursor = data["cursor"] or self.cursor
        self.ended = data["ended"]
        return events

    def close(self) -> None:
        pass


def _told(data: Any, what: str) -> Told:
    """What the server told an answer (or a handler's failure)."""
    kinds: dict[object, type[Any]] = {cls.type: cls for cls in (Answered, AlreadySettled, NotFound)}
    kind = kinds.get(data.get("type")) if isinstance(data, dict) else None
    if kind is None:
        raise SdkError(f"the server answered {what} with {str(data)[:200]}")
    told: Told = structure(data, kind)
    return told


def _wire_content(content: Content) -> Any:
    """A message's content as JSON, checked first as a local session checks it (the
    server checks it against the agent's model)."""
    blocks = message_content(content)
    return content if isinstance(content, str) else [unstructure(block) for block in blocks]


def _kind(answer: object) -> str:
    if isinstance(answer, (AllowApproval, DenyApproval)):
        return "approval"
    if isinstance(answer, Credentials):  # never an answer: the server says why, as locally
        return "credentials"
    if isinstance(answer, SignInAnswer):
        return "sign_in"
    if isinstance(answer, KeepCallbackOpen):
        return "keep_open"
    return "value"


#: Answers that are not a client tool's result: JSON by the converter, always.
_ANSWERS = (AllowApproval, DenyApproval, Credentials, SignInAnswer, KeepCallbackOpen)


set_remote(RemoteAgent)


def _json_body(body: Mapping[str, Any] | None) -> dict[str, Any]:
    """A request's JSON body, as UTF-8. A lone surrogate, which UTF-8 cannot encode, is
    written as its JSON escape (it is only ever inside a string): the server refuses it by
    the field's name, as a local session refuses it."""
    if body is None:
        return {}
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    data = text.encode("utf-8", "backslashreplace")
    return {"content": data, "headers": {"content-type": "application/json"}}
