"""One connection to an MCP server, owned by one task of the runtime's nursery.

The owner task opens the transport and the SDK's ``ClientSession``, lists the tools, and
runs every call in a nursery of its own; turns only send it requests through a memory
channel and wait for their replies. A turn that stops cancels its call's scope, which the
owner entered: the SDK then tells the server (``notifications/cancelled``), and no cancel
scope is ever left by a task other than the one that entered it.

The owner lists the tools once per session of the server, and again on
``notifications/tools/list_changed``. A server that drops its session (HTTP 404) is
connected to again, and the call that met the 404 (which the server never ran) is sent
once more. A server that cannot be started or reached is unavailable until a later turn
asks for it again.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import inspect
import math
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs
import trio

from .._toolkit._tools import Tool, ToolOutput
from ._oauth import OAuthSignIn, sign_in_tool
from ._results import tool_of, tool_output
from ._servers import MCPServer, RemoteMCP, StdioMCP, redacted_url

__all__ = ["URL_ELICITATION", "Listing", "MCPCallError", "MCPConnection"]

#: How long closing a connection waits for the SDK to end the server's session, in seconds.
CLOSE_WAIT = 5.0

#: How long the owner waits for a refreshed tool list before a step goes on with the last.
REFRESH_WAIT = 10.0


#: What a call asks the user with when the server sends it a URL elicitation: set by the turn
#: around the call, called (in the turn's task) with the message and the URL; whether the
#: user accepted to open it.
URL_ELICITATION: contextvars.ContextVar[Callable[[str, str], Awaitable[bool]] | None] = (
    contextvars.ContextVar("URL_ELICITATION", default=None)
)


class MCPCallError(Exception):
    """A call the server could not run, or whose outcome the connection lost."""


class _State(enum.Enum):
    IDLE = "idle"  # no owner task yet, or the last one ended unavailable
    CONNECTING = "connecting"
    SIGNING_IN = "signing in"  # connecting, its OAuth flow waiting for the user's code
    READY = "ready"
    CLOSED = "closed"


@attrs.frozen(kw_only=True)
class Listing:
    """What a step's model gets of one server: its tools, its instructions, or why it is
    unavailable."""

    tools: tuple[Tool, ...] = ()
    instructions: str | None = None
    unavailable: str | None = None


@attrs.define(eq=False)
class _Ask:
    """A URL elicitation the server sent during a call, for the call's turn to ask."""

    message: str
    url: str
    answered: trio.Event = attrs.field(factory=trio.Event)
    accepted: bool = False


@attrs.define(eq=False)
class _Call:
    """One ``tools/call`` request, from a turn to the owner, with its reply."""

    tool: str
    arguments: dict[str, Any]
    ask_url: Callable[[str, str], Awaitable[bool]] | None = None
    asks: list[_Ask] = attrs.field(factory=list)
    woken: trio.Event = attrs.field(factory=trio.Event)  # a reply, or an ask
    done: trio.Event = attrs.field(factory=trio.Event)
    cancelled: bool = False
    attempt: trio.CancelScope | None = None  # the scope the owner sends it in
    result: Any = None
    error: BaseException | None = None
    retried: bool = False

    def cancel(self) -> None:
        """The turn stopped: the owner cancels the call (or never sends it)."""
        self.cancelled = True
        if self.attempt is not None:
            self.attempt.cancel()
        for ask in self.asks:
            ask.answered.set()

    def reply(self, result: Any = None, error: BaseException | None = None) -> None:
        if not self.done.is_set():
            self.result, self.error = result, error
            self.done.set()
            self.woken.set()

    async def ask(self, message: str, url: str) -> bool:
        """Have the call's turn ask the user to open ``url``; whether they accepted."""
        if self.ask_url is None or self.cancelled:
            return False
        ask = _Ask(message, url)
        self.asks.append(ask)
        self.woken.set()
        await ask.answered.wait()
        return ask.accepted

    async def wait(self) -> None:
        """Wait for the reply, asking the user what the server asks meanwhile."""
        while not self.done.is_set():
            await self.woken.wait()
            self.woken = trio.Event()
            while self.asks and self.ask_url is not None:
                ask = self.asks.pop(0)
                try:
                    ask.accepted = await self.ask_url(ask.message, ask.url)
                finally:
                    ask.answered.set()


@attrs.define(eq=False)
class MCPConnection:
    """The runtime's connection to one MCP server declaration (see the module's doc)."""

    name: str
    server: MCPServer
    spawn: Callable[..., None]  # the runtime's: start a task in its nursery
    _state: _State = _State.IDLE
    _listing: Listing = attrs.field(factory=Listing)
    _ready: trio.Event = attrs.field(factory=trio.Event)
    _done: trio.Event = attrs.field(factory=trio.Event)
    _scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    _failed_turn: str | None = None  # the turn that found it unavailable
    _refreshing: trio.Event | None = None
    _lost: trio.Event = attrs.field(factory=trio.Event)
    _retry: list[_Call] = attrs.field(factory=list)
    _nursery: trio.Nursery | None = None
    _session: Any = None
    _oauth: OAuthSignIn | None = None
    _in_flight: set[_Call] = attrs.field(factory=set)  # the calls sent, not yet answered
    _send: trio.MemorySendChannel[_Call] = attrs.field(init=False)
    _receive: trio.MemoryReceiveChannel[_Call] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[_Call](math.inf)
        if isinstance(self.server, RemoteMCP) and self.server.oauth is not None:
            self._oauth = OAuthSignIn(self.name, self.server.oauth, on_url=self._asked_to_sign_in)

    # -- what turns ask -----------------------------------------------------------------------

    async def listing(self, turn_id: str) -> Listing:
        """The server's tools and instructions for a model step of turn ``turn_id``:
        connecting first if nothing has (a server found unavailable is tried again by a
        later turn, not by later steps of the same one)."""
        if self._state is _State.CLOSED:
            return Listing(unavailable="the runtime is closing")
        if self._state is _State.IDLE and self._failed_turn != turn_id:
            self._start()
        if self._state is _State.CONNECTING:
            # The step does not wait past the deadline; the owner goes on connecting, for
            # later turns. (Cancelling the SDK's own task groups from outside, at a deadline,
            # is what trio before 0.31 cannot do.)
            timeout = self.server.connect_timeout
            with trio.move_on_after(timeout):
                await self._ready.wait()
            if self._state is _State.CONNECTING:
                return Listing(unavailable=f"it did not answer within {timeout:g} s")
        refreshing = self._refreshing
        if self._state is _State.READY and refreshing is not None:
            with trio.move_on_after(REFRESH_WAIT):
                await refreshing.wait()
        if self._state is _State.IDLE:
            self._failed_turn = turn_id
        return self._listing

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolOutput:
        """Call the server's ``tool``; a stopped turn cancels the call in the owner.

        Raises:
            MCPCallError: The server is unavailable, answered with a protocol error, or
                the connection ended during the call.
        """
        if self._state is not _State.READY:
            raise MCPCallError(
                f"the MCP server {self.name} is unavailable: {self._listing.unavailable}"
            )
        request = _Call(tool, arguments, ask_url=URL_ELICITATION.get())
        self._send.send_nowait(request)
        try:
            await request.wait()
        except BaseException:
            request.cancel()  # in the owner's task, the SDK then tells the server
            raise
        if request.error is not None:
            raise request.error
        return tool_output(request.result)

    async def sign_in(self, redirect: str) -> ToolOutput:
        """Finish the sign-in under way with ``redirect``, the address the authorization
        server sent the browser to; what the model is told of it."""
        oauth = self._oauth
        if self._state is _State.READY:
            return _told(f"The session is signed in to the MCP server {self.name} already.")
        if oauth is None or self._state is not _State.SIGNING_IN:
            return _told(
                f"The sign-in to the MCP server {self.name} failed: it is not waiting for one "
                f"now. Call {self.name}.sign_in again to get a new sign-in link.",
                error=True,
            )
        problem = oauth.answer(redirect)
        if problem is not None:
            return _told(
                f"The sign-in to the MCP server {self.name} failed: {problem}. Call "
                f"{self.name}.sign_in again to ask the user once more.",
                error=True,
            )
        self._state = _State.CONNECTING
        self._ready = trio.Event()
        timeout = self.server.connect_timeout
        with trio.move_on_after(timeout):
            await self._ready.wait()
        if self._state is _State.CONNECTING:
            return _told(
                f"The sign-in to the MCP server {self.name} is not finished: the server did "
                f"not answer within {timeout:g} s. Its tools come with a later step once it does.",
                error=True,
            )
        if self._state is not _State.READY:
            return _told(
                f"The sign-in to the MCP server {self.name} failed: {self._listing.unavailable}. "
                f"Call {self.name}.sign_in again to get a new sign-in link.",
                error=True,
            )
        names = ", ".join(tool.name for tool in self._listing.tools) or "none"
        return _told(
            f"The user signed in to the MCP server {self.name}. Its tools are now yours: {names}."
        )

    def _asked_to_sign_in(self, authorization_url: str) -> bool:
        """The SDK's OAuth flow made ``authorization_url``: while connecting, the model
        gets the stand-in tool that asks the user to open it, and the connection waits
        for the answer. Later (the server no longer takes the session's tokens), the
        request fails, and the connection opens again, to sign in."""
        if self._state is _State.READY:
            self._session_lost()
        if self._state is not _State.CONNECTING or self._nursery is not None:
            return False
        self._state = _State.SIGNING_IN
        tool = sign_in_tool(self.name, authorization_url, self.sign_in)
        self._listing = Listing(tools=(tool,))
        self._ready.set()
        return True

    async def aclose(self) -> None:
        """Close the connection and wait until it is: a session the server holds is ended
        as the SDK ends one (an HTTP server's is deleted, a stdio server's process is let
        exit), for up to :data:`CLOSE_WAIT` seconds, then cut."""
        was = self._state
        self._state = _State.CLOSED
        if was is _State.IDLE:
            return
        if was is _State.READY:
            self._lost.set()  # the owner leaves the SDK's blocks as they end
            with trio.move_on_after(CLOSE_WAIT):
                await self._done.wait()
        self._scope.cancel()
        await self._done.wait()

    # -- the owner task -----------------------------------------------------------------------

    def _start(self) -> None:
        self._state = _State.CONNECTING
        self._ready = trio.Event()
        self._done = trio.Event()
        self._scope = trio.CancelScope()
        self.spawn(self._own, name=f"agentlib MCP {self.name}")

    async def _own(self) -> None:
        """Open, serve and close the server's sessions, one after another; never raises
        but trio.Cancelled."""
        try:
            with self._scope:
                while await self._serve_session():
                    pass
        finally:
            if self._state is not _State.CLOSED:
                self._state = _State.IDLE
            reason = self._listing.unavailable or "the connection closed"
            for request in [*self._retry, *self._drain()]:
                request.reply(
                    error=MCPCallError(f"the MCP server {self.name} is unavailable: {reason}")
                )
            self._retry.clear()
            self._ready.set()
            self._done.set()

    def _drain(self) -> list[_Call]:
        requests = []
        while True:
            try:
                requests.append(self._receive.receive_nowait())
            except trio.WouldBlock:
                return requests

    async def _serve_session(self) -> bool:
        """One session of the server, until it is lost; whether to connect again."""
        from mcp import ClientSession

        connected = False
        self._lost = trio.Event()
        try:
            # With trio before 0.31 (mcp 2.3 on trio 0.25, checked), cancelling the owner
            # while the SDK's task groups run corrupts trio's cancel scope stack unless a
            # scope of the owner's own encloses them.
            with trio.CancelScope():
                async with (
                    self._transport() as (read, write),
                    ClientSession(
                        read,
                        write,
                        message_handler=self._on_message,
                        elicitation_callback=self._elicit,
                    ) as session,
                ):
                    started = await session.initialize()
                    async with trio.open_nursery() as nursery:
                        self._nursery, self._session = nursery, session
                        await self._list(session)
                        connected = True
                        self._listing = attrs.evolve(
                            self._listing, instructions=started.instructions or None
                        )
                        self._state = _State.READY
                        self._ready.set()
                        for request in self._retry:
                            nursery.start_soon(self._run_call, session, request)
                        self._retry.clear()
                        nursery.start_soon(self._dispatch, session, nursery)
                        await self._lost.wait()
                        nursery.cancel_scope.cancel()
        except Exception as error:
            if not connected:
                self._unavailable(self._describe(error))
                return False
        finally:
            self._nursery = self._session = None
        if not connected:
            self._unavailable("the connection closed")
            return False
        if self._state is _State.CLOSED:
            return False
        if self._state is _State.READY:  # the session ended, not dropped: connect again
            self._state = _State.CONNECTING
            self._ready = trio.Event()
        return True

    def _session_lost(self) -> None:
        """The server dropped the session: steps wait for the next one."""
        if self._state is _State.READY:
            self._state = _State.CONNECTING
            self._ready = trio.Event()
        self._lost.set()

    def _unavailable(self, reason: str) -> None:
        self._state = _State.IDLE
        self._listing = Listing(unavailable=reason)

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        server = self.server
        if isinstance(server, StdioMCP):
            from mcp.client.stdio import StdioServerParameters, stdio_client

            parameters = StdioServerParameters(
                command=server.command[0],
                args=list(server.command[1:]),
                env=dict(server.env) or None,
                cwd=server.cwd,
            )
            async with stdio_client(parameters, errlog=_errlog()) as streams:
                yield streams
            return
        assert isinstance(server, RemoteMCP)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        client = httpx2.AsyncClient(
            headers=server.request_headers(),
            timeout=httpx2.Timeout(30.0, read=300.0),
            auth=None if self._oauth is None else self._oauth.provider(server.url),
        )
        async with client, streamable_http_client(server.url, http_client=client) as streams:
            yield streams

    async def _list(self, session: Any) -> None:
        """List the server's tools, every page, and keep those the model may get."""
        tools = []
        cursor = None
        while True:
            from mcp.types import PaginatedRequestParams

            page = await session.list_tools(
                params=None if cursor is None else PaginatedRequestParams(cursor=cursor)
            )
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        self._listing = attrs.evolve(
            self._listing,
            unavailable=None,
            tools=tuple(
                tool_of(self.name, self.server, tool, self.call)
                for tool in tools
                if self.server.offers(tool.name)
            ),
        )

    async def _on_message(self, message: Any) -> None:
        """What the server sends unasked: a changed tool list is listed again."""
        if getattr(message, "method", None) != "notifications/tools/list_changed":
            return
        nursery = self._nursery
        if nursery is None or self._refreshing is not None:
            return
        refreshed = self._refreshing = trio.Event()
        nursery.start_soon(self._refresh, refreshed)

    async def _refresh(self, refreshed: trio.Event) -> None:
        try:
            await self._list(self._session)
        except Exception:
            pass
        finally:
            self._refreshing = None
            refreshed.set()

    async def _elicit(self, context: Any, params: Any) -> Any:
        """A server's elicitation during a call: a form goes to the declaration's handler,
        if it has one, else is declined; a URL goes to the call's turn, which asks the user
        to open it (:data:`URL_ELICITATION`)."""
        from mcp.types import ElicitResult, ErrorData

        if getattr(params, "mode", "form") == "url":
            # Only a call of its own asks: with several under way, none knows it is its.
            calls = self._in_flight
            if len(calls) != 1:
                return ElicitResult(action="decline")
            (call,) = calls
            accepted = await call.ask(params.message, params.url)
            return ElicitResult(action="accept" if accepted else "decline")
        handler = self.server.elicitation_handler
        if handler is None or getattr(params, "mode", "form") != "form":
            return ElicitResult(action="decline")
        schema = dict(params.requested_schema)
        try:
            if inspect.iscoroutinefunction(handler):
                content = await handler(params.message, schema)
            else:
                content = await trio.to_thread.run_sync(handler, params.message, schema)
                if inspect.isawaitable(content):
                    content = await content
        except Exception as error:
            return ErrorData(
                code=-32603,
                message=f"the client's elicitation handler failed: {type(error).__name__}",
            )
        if content is None:
            return ElicitResult(action="decline")
        return ElicitResult(action="accept", content=dict(content))

    async def _dispatch(self, session: Any, nursery: trio.Nursery) -> None:
        async for request in self._receive:
            nursery.start_soon(self._run_call, session, request)

    async def _run_call(self, session: Any, request: _Call) -> None:
        from mcp.shared.exceptions import MCPError

        request.attempt = attempt = trio.CancelScope()
        if request.cancelled:
            attempt.cancel()
        self._in_flight.add(request)
        try:
            with attempt:
                try:
                    result = await session.call_tool(request.tool, request.arguments)
                except MCPError as error:
                    if _session_terminated(error) and not request.retried:
                        request.retried = True  # the server never ran it: once more
                        self._retry.append(request)
                        self._session_lost()
                        return
                    if error.code == _CONNECTION_CLOSED:  # the next call connects again
                        self._session_lost()
                        return  # answered below: it may have run
                    request.reply(
                        error=MCPCallError(
                            f"the MCP server {self.name} answered with an error: {error.message}"
                        )
                    )
                    return
                except Exception as error:
                    request.reply(error=MCPCallError(self._describe(error)))
                    return
                request.reply(result)
        finally:
            self._in_flight.discard(request)
            if request not in self._retry:
                request.reply(
                    error=MCPCallError(
                        f"the connection to the MCP server {self.name} was lost during the "
                        "call; it may have run"
                    )
                )

    def _describe(self, error: BaseException) -> str:
        """Why the server is unavailable, in words that hold none of its secrets."""
        # The SDK's task groups wrap one failure in an exception group (a backport on 3.10).
        inner = getattr(error, "exceptions", None)
        while isinstance(inner, tuple) and len(inner) == 1:
            error = inner[0]
            inner = getattr(error, "exceptions", None)
        server = self.server
        if isinstance(server, StdioMCP):
            where = f"could not run {server.command[0]!r}"
        else:
            where = f"could not connect to {redacted_url(server.url)}"
        detail = str(error)
        if isinstance(error, ValueError) and "environment variable" in detail:
            return detail  # names the variable, never a value
        for secret in server.secrets():
            detail = detail.replace(secret, "***")
        if isinstance(server, RemoteMCP):
            detail = detail.replace(server.url, redacted_url(server.url))
        detail = detail if len(detail) <= 300 else detail[:300] + "..."
        return f"{where}: {type(error).__name__}" + (f": {detail}" if detail else "")


#: The SDK's error code for a request whose connection closed (mcp.types.CONNECTION_CLOSED).
_CONNECTION_CLOSED = -32000


def _told(text: str, *, error: bool = False) -> ToolOutput:
    from .._data._content import TextContentBlock

    return ToolOutput(content=(TextContentBlock(text=text),), is_error=error)


def _session_terminated(error: Any) -> bool:
    return bool(error.code == -32600 and error.message == "Session terminated")


def _errlog() -> Any:
    """Where a stdio server's stderr goes: this process's own standard error."""
    stream = sys.__stderr__
    if stream is None:  # pythonw: no console
        return open(os.devnull, "w")
    return stream
