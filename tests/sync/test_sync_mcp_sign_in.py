"""Signing in to an MCP server from a blocking script: an ``on_sign_in`` handler opens the
authorization URL and answers with the address it was redirected to."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from _oauth_support import OAuthServers, oauth_servers

import agentlib_sync as agents

from ._support import call_tool

pytestmark = pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning")


@pytest.fixture
def servers() -> Iterator[OAuthServers]:
    yield from oauth_servers()
    agents.configure()  # the engine stops: its connections close


def sign_in(callback: agents.OpenSignIn) -> agents.SignInAnswer:
    """Open each URL as bob's browser would (the test server approves at once)."""
    redirects = {}
    for source, url in callback.authorization_urls.items():
        response = httpx.get(f"{url}&login_hint=bob")
        redirects[source] = response.headers["location"]
    return agents.SignInAnswer(credentials=redirects)


def last_result(request: agents.ModelRequest) -> str:
    last = request.entries[-1]
    assert isinstance(last, agents.ToolResultEntry)
    return last.text


def test_a_blocking_scripts_sign_in_handler_signs_in_to_an_mcp_server(
    servers: OAuthServers,
) -> None:
    steps = [call_tool("docs.sign_in"), call_tool("docs.whoami", user="bob"), last_result]
    agent = agents.Agent(
        "a",
        model=agents.ScriptedModel(steps),
        mcps={"docs": agents.RemoteMCP(url=servers.url, oauth=agents.MCPOAuth())},
    )
    record = agent.start_session(on_sign_in=sign_in).run("who am I?")
    assert isinstance(record, agents.Completed), record
    assert record.text == "you are bob"  # the server fails a call without bob's token
    assert [call.name for call in record.tool_calls] == ["docs.sign_in", "docs.whoami"]
    assert servers.counters()["token"] == 1
