"""Signing in to MCP servers (SPEC section 16): a server that asks for OAuth offers the
model ``"<server>.sign_in"``, whose call opens an ``OpenSignIn`` carrying the authorization
URL; the answer is the address the authorization server redirected the browser to. The
servers are tests/_oauth_server.py, written with the SDK, as a real process on 127.0.0.1:
an authorization server that approves at once, and the MCP server that trusts it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import trio
from _oauth_support import OAuthServers, oauth_servers, stdio_command
from _support import Recorder, call_tool, only_callback, settled

import agentlib
from agentlib import (
    Agent,
    Completed,
    MCPOAuth,
    ModelRequest,
    OpenSignIn,
    RemoteMCP,
    ScriptedModel,
    SignInAnswer,
    StdioMCP,
    ToolResultEntry,
)

DEADLINE = 60  # only a hang reaches it

# The SDK's streamable HTTP client leaves httpx2's response iterators to the garbage
# collector when a connection closes (it does with the SDK alone, under trio).
pytestmark = pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning")


@pytest.fixture
def servers() -> Iterator[OAuthServers]:
    yield from oauth_servers()


def docs(servers: OAuthServers) -> dict[str, RemoteMCP]:
    return {"docs": RemoteMCP(url=servers.url, oauth=MCPOAuth())}


def results(request: ModelRequest) -> list[ToolResultEntry]:
    return [entry for entry in request.entries if isinstance(entry, ToolResultEntry)]


def offered(request: ModelRequest) -> list[str]:
    return [tool.name for tool in request.tools]


async def signed_in_turn(
    session: agentlib.Session, servers: OAuthServers, user: str = "alice"
) -> agentlib.TurnState[Any]:
    """Run a turn whose model signs in first: open the URL as ``user``, answer with the
    redirect, and return how the turn ends."""
    blocked = await session.run("go")
    sign_in = only_callback(blocked, OpenSignIn)
    redirect = await servers.sign_in(sign_in.authorization_urls["docs"], user)
    turn = session.turn(blocked.turn_id)
    await turn.answer(sign_in.id, SignInAnswer(credentials={"docs": redirect}))
    return await settled(turn)


async def test_a_server_asking_for_oauth_offers_only_its_sign_in_tool(
    servers: OAuthServers,
) -> None:
    recorder = Recorder()
    agent = Agent("a", model=ScriptedModel([recorder]), mcps=docs(servers))
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            record = await session.run("go")
    assert isinstance(record, Completed)
    (request,) = recorder.requests
    assert offered(request) == ["docs.sign_in"]
    (tool,) = request.tools
    assert "must sign in to the MCP server docs" in tool.description


async def test_calling_the_sign_in_tool_opens_a_sign_in_carrying_the_authorization_url(
    servers: OAuthServers,
) -> None:
    agent = Agent("a", model=ScriptedModel([call_tool("docs.sign_in")]), mcps=docs(servers))
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            record = await session.run("go")
    sign_in = only_callback(record, OpenSignIn)
    assert sign_in.sources == ("docs",)
    url = sign_in.authorization_urls["docs"]
    assert url.startswith(f"{servers.issuer}/authorize?")
    query = parse_qs(urlsplit(url).query)
    assert query["code_challenge_method"] == ["S256"]
    assert query["resource"] == [servers.url]
    assert query["redirect_uri"] == ["http://localhost/agentlib/oauth/callback"]
    assert "code_verifier" not in query


async def test_answering_with_the_redirect_signs_in_and_the_next_step_has_the_tools(
    servers: OAuthServers,
) -> None:
    after_sign_in, after_call = Recorder(), Recorder()
    steps = [
        call_tool("docs.sign_in"),
        lambda request: (after_sign_in(request), call_tool("docs.whoami", user="alice"))[1],
        after_call,
    ]
    agent = Agent("a", model=ScriptedModel(steps), mcps=docs(servers))
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            record = await signed_in_turn(session, servers)
    assert isinstance(record, Completed), record
    (signed,) = results(after_sign_in.requests[0])
    assert not signed.is_error
    assert signed.text == (
        "The user signed in to the MCP server docs. Its tools are now yours: docs.whoami, "
        "docs.favourite_colour, docs.connect_account."
    )
    assert "docs.whoami" in offered(after_sign_in.requests[0])
    assert "docs.sign_in" not in offered(after_sign_in.requests[0])
    assert results(after_call.requests[0])[-1].text == "you are alice"
    assert servers.counters()["token"] == 1


# --- elicitation --------------------------------------------------------------------------


async def elicited(server: agentlib.MCPServer, tool: str) -> ToolResultEntry:
    """The result the model gets of one call of the server's ``tool``."""
    recorder = Recorder()
    agent = Agent("a", model=ScriptedModel([call_tool(f"t.{tool}"), recorder]), mcps={"t": server})
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            record = await session.run("go")
    assert isinstance(record, Completed), record
    return results(recorder.requests[0])[-1]


async def test_a_form_elicitation_goes_to_the_servers_handler() -> None:
    asked: list[tuple[str, Any]] = []

    async def handler(message: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        asked.append((message, schema))
        return {"colour": "blue"}

    server = StdioMCP(command=stdio_command(), elicitation_handler=handler)
    result = await elicited(server, "favourite_colour")
    assert result.text == "the favourite colour is blue"
    ((message, schema),) = asked
    assert message == "What is your favourite colour?"
    assert schema["properties"]["colour"]["type"] == "string"


async def test_a_sync_handler_returning_none_declines_the_form() -> None:
    def handler(message: str, schema: Mapping[str, Any]) -> None:
        return None

    server = StdioMCP(command=stdio_command(), elicitation_handler=handler)
    result = await elicited(server, "favourite_colour")
    assert result.text == "no colour: the client answered decline"


async def test_a_form_elicitation_without_a_handler_is_declined() -> None:
    result = await elicited(StdioMCP(command=stdio_command()), "favourite_colour")
    assert result.text == "no colour: the client answered decline"


async def test_a_handler_that_raises_fails_the_elicitation_without_its_message() -> None:
    def handler(message: str, schema: Mapping[str, Any]) -> None:
        raise RuntimeError("the handler's own words")

    server = StdioMCP(command=stdio_command(), elicitation_handler=handler)
    result = await elicited(server, "favourite_colour")
    assert result.is_error
    assert "the handler's own words" not in result.text
