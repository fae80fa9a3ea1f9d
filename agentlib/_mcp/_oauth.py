"""Signing a session in to an MCP server with OAuth, through the SDK's OAuth client.

A server declared with ``RemoteMCP(oauth=MCPOAuth())`` gets one connection per session.
When that connection meets a 401 with the server's resource metadata, the SDK's
``OAuthClientProvider`` discovers the authorization server, registers a client and builds
an authorization URL (PKCE, the RFC 8707 resource); it then waits, inside the request, for
the code the authorization server sends back. Meanwhile the model gets one tool of the
server, ``"<server>.sign_in"``; calling it opens an ``OpenSignIn`` carrying the URL, and
the ``SignInAnswer``'s credential is the address the browser was redirected to, whose code
and state reach the waiting flow here.

Tokens live in a :class:`MemoryTokens` of the connection, in this process only: a new
runtime asks the user again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs
import trio

from .._data._callbacks import Credentials
from .._toolkit._inputs import Dependency
from .._toolkit._tools import Tool, ToolOutput

__all__ = [
    "MCPOAuth",
    "MemoryTokens",
    "OAuthSignIn",
    "SignInTool",
    "redirect_parameters",
    "sign_in_tool",
]


def _scope(value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"scope is None or the scopes to ask for, space-separated; not {value!r}")
    return value


def _uri(value: object) -> str:
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or not parts.scheme or not (parts.netloc or parts.path):
        raise ValueError(f"redirect_uri is an absolute URI, not {value!r}")
    assert isinstance(value, str)
    return value


@attrs.frozen(kw_only=True)
class MCPOAuth:
    """How a session signs in to an MCP server that asks for OAuth.

    Attributes:
        redirect_uri: Where the authorization server sends the browser back, with the
            code; the client registers it. Nothing of agentlib listens there: whoever
            serves it answers the sign-in with the address it was sent to.
        client_name: The name the client registers under, which the authorization
            server may show the user.
        scope: The scopes to ask for, space-separated; None: those the server advertises.
    """

    redirect_uri: str = attrs.field(
        default="http://localhost/agentlib/oauth/callback", converter=_uri
    )
    client_name: str = "agentlib"
    scope: str | None = attrs.field(default=None, converter=_scope)


@attrs.define(eq=False, repr=False)
class MemoryTokens:
    """The SDK's ``TokenStorage`` for one connection: in memory, never shown."""

    tokens: Any = None
    client_info: Any = None

    def __repr__(self) -> str:
        return "MemoryTokens(<in memory>)"

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client_info

    async def set_client_info(self, client_info: Any) -> None:
        self.client_info = client_info


def redirect_parameters(redirect: str) -> dict[str, str]:
    """The OAuth parameters of the address the browser was redirected to (the whole URL, or
    its query string): ``code``, ``state``, ``iss``, or ``error``."""
    query = redirect.strip()
    if "?" in query:
        query = query.split("?", 1)[1]
    query = query.split("#", 1)[0]
    found = parse_qs(query, keep_blank_values=True)
    names = ("code", "state", "iss", "error", "error_description")
    return {name: found[name][0] for name in names if found.get(name)}


@attrs.frozen(kw_only=True, eq=False)
class SignInTool(Tool):
    """The one tool an MCP server offers while the session has not signed in to it: its
    call opens an ``OpenSignIn`` carrying ``authorization_url``."""

    authorization_url: str = attrs.field(repr=False)


@attrs.define(eq=False, repr=False)
class OAuthSignIn:
    """The OAuth side of one connection: its token storage, the SDK's provider, and the
    flow that waits for a code, if one does."""

    name: str
    settings: MCPOAuth
    # Called with the authorization URL when a flow starts; whether the flow waits for its
    # code (a flow that does not fails at once).
    on_url: Callable[[str], bool]
    tokens: MemoryTokens = attrs.field(factory=MemoryTokens)
    authorization_url: str | None = None
    _provider: Any = None
    _answers: trio.MemorySendChannel[Any] | None = None
    _waits: bool = False

    def __repr__(self) -> str:
        return f"OAuthSignIn({self.name!r})"

    def provider(self, server_url: str) -> Any:
        """The SDK's ``OAuthClientProvider`` (an ``httpx2.Auth``): one per connection, so
        that it keeps what it learnt of the authorization server and its tokens' expiry."""
        if self._provider is None:
            from mcp.client.auth import OAuthClientProvider
            from mcp.shared.auth import OAuthClientMetadata
            from pydantic import AnyUrl

            metadata = OAuthClientMetadata(
                redirect_uris=[AnyUrl(self.settings.redirect_uri)],
                client_name=self.settings.client_name,
                scope=self.settings.scope,
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
            )
            self._provider = OAuthClientProvider(
                server_url=server_url,
                client_metadata=metadata,
                storage=self.tokens,
                redirect_handler=self._redirect,
                callback_handler=self._callback,
            )
        return self._provider

    @property
    def waiting(self) -> bool:
        """Whether a flow waits for the code of :attr:`authorization_url`."""
        return self._answers is not None

    def answer(self, redirect: str) -> str | None:
        """Hand the address the browser was redirected to to the waiting flow; why it
        cannot be, if it cannot (in words that hold no part of it)."""
        send = self._answers
        if send is None or self.authorization_url is None:
            return "no sign-in is under way"
        given = redirect_parameters(redirect)
        if "error" in given:
            return f"the authorization server answered {given['error']!r}"
        if "code" not in given:
            return "the answer holds no authorization code"
        expected = redirect_parameters(self.authorization_url).get("state")
        if given.get("state") != expected:
            return "the answer is for another sign-in link than the last one given"
        from mcp.client.auth import AuthorizationCodeResult

        result = AuthorizationCodeResult(
            code=given["code"], state=given.get("state"), iss=given.get("iss")
        )
        self._answers = None
        send.send_nowait(result)
        return None

    def cancel(self) -> None:
        """The flow's wait ends with no code: the connection stops trying."""
        self._answers = None
        self.authorization_url = None

    async def _redirect(self, authorization_url: str) -> None:
        self.authorization_url = authorization_url
        self._waits = self.on_url(authorization_url)

    async def _callback(self) -> Any:
        if not self._waits:
            from mcp.client.auth import OAuthFlowError

            raise OAuthFlowError(f"the session must sign in to {self.name} again")
        send, receive = trio.open_memory_channel[Any](1)
        self._answers = send
        try:
            return await receive.receive()
        finally:
            self._answers = None


def sign_in_tool(
    name: str, authorization_url: str, sign_in: Callable[[str], Awaitable[ToolOutput]]
) -> SignInTool:
    """The stand-in tool ``"<name>.sign_in"``: ``sign_in(redirect)`` finishes the flow."""

    async def call(credentials: Credentials, **_: Any) -> ToolOutput:
        return await sign_in(credentials.value)

    return SignInTool(
        name=f"{name}.sign_in",
        description=(
            f"The user must sign in to the MCP server {name} before its tools can be used. "
            "Call this tool to ask them to; it says once they have, and which of the "
            "server's tools you then have."
        ),
        parameters={"type": "object", "properties": {}},
        function=call,
        kind="mcp",
        source=name,
        requires_sign_in=True,
        dependencies=(
            Dependency(name="credentials", annotation=Credentials, has_default=False, default=None),
        ),
        signature=(),
        is_async=True,
        authorization_url=authorization_url,
    )
