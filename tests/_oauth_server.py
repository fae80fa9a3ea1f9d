"""An MCP server that needs OAuth, and the authorization server it trusts, for the sign-in
tests, written with the SDK's server helpers.

``python _oauth_server.py http`` serves, in this one process, an authorization server and
the MCP server (its resource server) on two ports of 127.0.0.1, and prints
``<authorization server port> <MCP server port>`` first. ``python _oauth_server.py stdio``
serves the same tools without sign-in over stdin and stdout.

The authorization server approves every request at once: ``/authorize`` redirects to the
client's redirect URI with a code, for the user named by the ``login_hint`` query parameter
(default ``alice``). ``GET /debug/tokens`` lists the access and refresh tokens it issued, and
``GET /debug/counters`` how many registrations, authorizations and token requests it saw,
and how many MCP sessions their clients ended (``DELETE /mcp``);
``POST /debug/revoke`` revokes every token it issued.

The tools: ``whoami(user)`` fails unless the call's token is one issued to ``user`` for
this server, and answers with the user's name; ``favourite_colour()`` asks the client for a
colour with a form elicitation; ``connect_account()`` asks it to open a URL (an elicitation
of mode ``url``).
"""

from __future__ import annotations

import asyncio
import contextvars
import secrets
import socket
import sys
import time
import warnings
from typing import Any
from urllib.parse import parse_qs

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl, BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

_login_hint: contextvars.ContextVar[str | None] = contextvars.ContextVar("login_hint", default=None)


class Authorizations:
    """The authorization server's state, in memory: clients, codes and tokens."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.counters = {"register": 0, "authorize": 0, "token": 0, "ended": 0}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.counters["register"] += 1
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        self.counters["authorize"] += 1
        code = secrets.token_urlsafe(32)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=_login_hint.get() or "alice",
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        return code if code is not None and code.client_id == client.client_id else None

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.counters["token"] += 1
        self.codes.pop(authorization_code.code, None)  # a code is used once
        assert client.client_id is not None
        return self._issue(
            client.client_id,
            authorization_code.scopes,
            authorization_code.resource,
            authorization_code.subject,
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        token = self.refresh.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.counters["token"] += 1
        self.refresh.pop(refresh_token.token, None)
        assert client.client_id is not None
        return self._issue(
            client.client_id,
            scopes or refresh_token.scopes,
            refresh_token.resource,
            refresh_token.subject,
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is not None and found.expires_at and found.expires_at < time.time():
            return None
        return found

    async def revoke_token(self, token: Any) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    async def exchange_identity_assertion(self, client: Any, params: Any) -> OAuthToken:
        raise TokenError(error="unsupported_grant_type")

    def _issue(
        self, client_id: str, scopes: list[str], resource: str | None, subject: str | None
    ) -> OAuthToken:
        access = "at_" + secrets.token_urlsafe(24)
        refresh = "rt_" + secrets.token_urlsafe(24)
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + 3600,
            resource=resource,
            subject=subject,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource, subject=subject
        )
        return OAuthToken(
            access_token=access, expires_in=3600, scope=" ".join(scopes), refresh_token=refresh
        )


class LoginHint:
    """Reads ``login_hint`` off ``/authorize`` (the SDK's handler does not pass it on)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        hint = None
        if scope["type"] == "http" and scope["path"] == "/authorize":
            query = parse_qs(scope.get("query_string", b"").decode())
            hint = query.get("login_hint", [None])[0]
        token = _login_hint.set(hint)
        try:
            await self.app(scope, receive, send)
        finally:
            _login_hint.reset(token)


def authorization_server(issuer: str, state: Authorizations) -> Starlette:
    routes = create_auth_routes(
        provider=state,
        issuer_url=AnyHttpUrl(issuer),
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=["mcp"], default_scopes=["mcp"]
        ),
    )

    async def tokens(request: Request) -> JSONResponse:
        return JSONResponse({"tokens": [*state.access, *state.refresh]})

    async def counters(request: Request) -> JSONResponse:
        return JSONResponse(state.counters)

    async def revoke(request: Request) -> JSONResponse:
        state.access.clear()
        state.refresh.clear()
        return JSONResponse({})

    routes += [
        Route("/debug/tokens", tokens),
        Route("/debug/counters", counters),
        Route("/debug/revoke", revoke, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(LoginHint)
    return app


class Verifier:
    """Accepts the tokens the authorization server (in this process) issued."""

    def __init__(self, state: Authorizations) -> None:
        self.state = state

    async def verify_token(self, token: str) -> AccessToken | None:
        return await self.state.load_access_token(token)


class Colour(BaseModel):
    colour: str


def mcp_server(auth: tuple[str, str, Authorizations] | None) -> MCPServer[Any]:
    options: dict[str, Any] = {}
    if auth is not None:
        issuer, resource, state = auth
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            options = {
                "token_verifier": Verifier(state),
                "auth": AuthSettings(
                    issuer_url=AnyHttpUrl(issuer),
                    resource_server_url=AnyHttpUrl(resource),
                    required_scopes=["mcp"],
                    validate_token_resource=True,
                ),
            }
    server: MCPServer[Any] = MCPServer("agentlib-oauth-test", log_level="WARNING", **options)

    @server.tool()
    async def whoami(user: str) -> str:
        """Say whose token the call carries; fails unless it is ``user``'s."""
        token = get_access_token()
        subject = None if token is None else token.subject
        if auth is not None and subject != user:
            raise ValueError(f"this call carries the token of {subject}, not of {user}")
        return f"you are {user}"

    @server.tool()
    async def favourite_colour(ctx: Context) -> str:
        """Ask the user for their favourite colour."""
        answer = await ctx.elicit("What is your favourite colour?", Colour)
        if answer.action == "accept":
            return f"the favourite colour is {answer.data.colour}"
        return f"no colour: the client answered {answer.action}"

    @server.tool()
    async def connect_account(ctx: Context) -> str:
        """Ask the user to connect an account, on a page of its own."""
        answer = await ctx.elicit_url(
            "Connect your account", "http://127.0.0.1:9/connect?account=1", "connect-1"
        )
        return f"connect: {answer.action}"

    return server


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def serve_http() -> None:
    import uvicorn

    issuer_socket, resource_socket = _listening(), _listening()
    issuer = f"http://127.0.0.1:{issuer_socket.getsockname()[1]}"
    resource = f"http://127.0.0.1:{resource_socket.getsockname()[1]}/mcp"
    state = Authorizations()
    issuer_app = authorization_server(issuer, state)
    mcp_app = mcp_server((issuer, resource, state)).streamable_http_app(host="127.0.0.1")

    async def resource_app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "DELETE":
            state.counters["ended"] += 1  # a client ends its MCP session
        await mcp_app(scope, receive, send)

    print(issuer_socket.getsockname()[1], resource_socket.getsockname()[1], flush=True)

    async def both() -> None:
        servers = [
            uvicorn.Server(
                uvicorn.Config(
                    app, log_level="warning", lifespan=lifespan, timeout_graceful_shutdown=1
                )
            )
            for app, lifespan in ((issuer_app, "off"), (resource_app, "on"))
        ]
        await asyncio.gather(
            servers[0].serve(sockets=[issuer_socket]), servers[1].serve(sockets=[resource_socket])
        )

    asyncio.run(both())


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        serve_http()
    else:
        mcp_server(None).run("stdio")
