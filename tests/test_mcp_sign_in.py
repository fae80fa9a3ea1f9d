"""Signing in to MCP servers (SPEC section 16): a server that asks for OAuth offers the
model ``"<server>.sign_in"``, whose call opens an ``OpenSignIn`` carrying the authorization
URL; the answer is the address the authorization server redirected the browser to. The
servers are tests/_oauth_server.py, written with the SDK, as a real process on 127.0.0.1:
an authorization server that approves at once, and the MCP server that trusts it."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import trio
from _oauth_support import OAuthServers, oauth_servers, stdio_command
from _support import Recorder, call_tool, only_callback, settled, user_texts

import agentlib
from agentlib import (
    Agent,
    Completed,
    FunctionModel,
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


def whoami_model(requests: list[ModelRequest] | None = None) -> FunctionModel:
    """A model that asks who the user is: the user's message names them. Without the
    server's tools, it signs in first (again, if that failed); it answers with the result.
    Its ``requests`` are kept in the list given."""

    def step(request: ModelRequest) -> Any:
        if requests is not None:
            requests.append(request)
        last = request.entries[-1]
        if isinstance(last, ToolResultEntry):
            if last.name == "docs.sign_in" and last.is_error:
                return call_tool("docs.sign_in")
            if last.name == "docs.whoami":
                return f"done: {last.text}"
        if "docs.whoami" in offered(request):
            return call_tool("docs.whoami", user=user_texts(request)[-1])
        return call_tool("docs.sign_in")

    return FunctionModel(step)


async def signed_in_turn(
    session: agentlib.Session, servers: OAuthServers, user: str = "alice"
) -> agentlib.TurnState[Any]:
    """Run a turn whose model signs in first: open the URL as ``user``, answer with the
    redirect, and return how the turn ends."""
    blocked = await session.run(user)
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


async def test_a_cancelled_session_closes_its_own_connection(servers: OAuthServers) -> None:
    """A session's connection to a server it signed in to is its own: cancelling the session
    ends it (the client ends its MCP session on the server), while the runtime goes on."""
    steps = [call_tool("docs.sign_in"), call_tool("docs.whoami", user="alice"), "done"]
    agent = Agent("a", model=ScriptedModel(steps), mcps=docs(servers))
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            assert isinstance(await signed_in_turn(session, servers), Completed)
            assert servers.counters()["ended"] == 0
            await session.cancel()  # returns once the connection is closed
            assert servers.counters()["ended"] == 1


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


# --- sessions, each with its own sign-in ----------------------------------------------------


@pytest.mark.slow
async def test_ten_sessions_call_with_their_own_users_tokens(servers: OAuthServers) -> None:
    agent = Agent("a", model=whoami_model(), mcps=docs(servers))
    users = [f"user{number}" for number in range(10)]
    ended: dict[str, agentlib.TurnState[Any]] = {}
    again: dict[str, agentlib.TurnState[Any]] = {}

    async def one(user: str) -> None:
        session = await agent.start_session()
        ended[user] = await signed_in_turn(session, servers, user)
        again[user] = await session.run(user)  # signed in: no sign-in this time

    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime(), trio.open_nursery() as nursery:
            for user in users:
                nursery.start_soon(one, user)
    for user in users:
        # The server fails a call whose token is not the user's.
        for record in (ended[user], again[user]):
            assert isinstance(record, Completed), record
            assert record.text == f"done: you are {user}"
    # Each session's own connection, ended as the runtime closed.
    assert servers.counters() == {"register": 10, "authorize": 10, "token": 10, "ended": 10}
    assert len(set(servers.tokens())) == 20  # an access and a refresh token each


# --- credentials stay in memory -----------------------------------------------------------


async def test_no_token_or_code_reaches_the_store_events_reprs_or_logs(
    servers: OAuthServers, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    agent = Agent("a", model=whoami_model(), mcps=docs(servers))
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime(f"sqlite:///{tmp_path / 's.db'}") as runtime:
            session = await agent.start_session()
            blocked = await session.run("alice")
            sign_in = only_callback(blocked, OpenSignIn)
            redirect = await servers.sign_in(sign_in.authorization_urls["docs"], "alice")
            turn = session.turn(blocked.turn_id)
            answer = SignInAnswer(credentials={"docs": redirect})
            await turn.answer(sign_in.id, answer)
            record = await settled(turn)
            events = [event async for event in turn.iter_events()]
            shown = repr((runtime, session, turn, answer, agent, agent.mcps))
    assert isinstance(record, Completed), record
    assert record.text == "done: you are alice"
    code = parse_qs(urlsplit(redirect).query)["code"][0]
    secrets = [code, *servers.tokens()]
    assert len(secrets) == 3
    # What the test's own browser logged (plain httpx) is not the runtime's.
    logged = [
        caplog.handler.format(line)
        for line in caplog.records
        if line.name.split(".")[0] not in ("httpx", "httpcore")
    ]
    assert {line.name.split(".")[0] for line in caplog.records} >= {"mcp", "httpx2"}
    seen = [repr(events), repr(record), shown, *logged]
    files = [path.read_bytes() for path in tmp_path.iterdir() if path.name.startswith("s.db")]
    assert files
    for secret in secrets:
        assert not any(secret in text for text in seen)
        assert not any(secret.encode() in data for data in files)


async def test_after_a_restart_the_next_call_asks_to_sign_in_again(
    servers: OAuthServers, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime(store):
            session = await Agent("a", model=whoami_model(), mcps=docs(servers)).start_session()
            record = await signed_in_turn(session, servers)
            assert isinstance(record, Completed), record
        async with agentlib.open_runtime(store):
            agent = Agent("a", model=whoami_model(), mcps=docs(servers))
            again = agent.session(session.id)
            blocked = await again.run("alice")
            sign_in = only_callback(blocked, OpenSignIn)
            assert sign_in.sources == ("docs",)
    assert servers.counters()["authorize"] == 1  # the second URL was never opened


async def test_a_sign_in_blocked_across_a_restart_fails_then_asks_again(
    servers: OAuthServers, tmp_path: Path
) -> None:
    """The runtime that made the authorization URL is gone, and its flow with it: the
    answer to that URL fails, and the model's next call asks with a new URL."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime(store):
            session = await Agent("a", model=whoami_model(), mcps=docs(servers)).start_session()
            blocked = await session.run("alice")
            first = only_callback(blocked, OpenSignIn)
        redirect = await servers.sign_in(first.authorization_urls["docs"])
        async with agentlib.open_runtime(store):
            requests: list[ModelRequest] = []
            agent = Agent("a", model=whoami_model(requests), mcps=docs(servers))
            turn = agent.session(session.id).turn(blocked.turn_id)
            assert only_callback(await turn.get(), OpenSignIn) == first
            await turn.answer(first.id, SignInAnswer(credentials={"docs": redirect}))
            asked = await settled(turn, after=blocked)
            second = only_callback(asked, OpenSignIn)
            assert second.id != first.id
            url = second.authorization_urls["docs"]
            assert url != first.authorization_urls["docs"]
            redirect = await servers.sign_in(url)
            await turn.answer(second.id, SignInAnswer(credentials={"docs": redirect}))
            record = await settled(turn, after=asked)
    assert isinstance(record, Completed), record
    assert record.text == "done: you are alice"
    failed = [e for e in results(requests[-1]) if e.is_error]
    assert [entry.text for entry in failed] == [
        "The sign-in to the MCP server docs failed: the answer is for another sign-in link "
        "than the last one given. Call docs.sign_in again to ask the user once more."
    ]


async def test_a_wrong_code_fails_the_sign_in_and_the_next_call_asks_again(
    servers: OAuthServers,
) -> None:
    requests: list[ModelRequest] = []
    agent = Agent("a", model=whoami_model(requests), mcps=docs(servers))
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            blocked = await session.run("alice")
            first = only_callback(blocked, OpenSignIn)
            redirect = await servers.sign_in(first.authorization_urls["docs"])
            code = parse_qs(urlsplit(redirect).query)["code"][0]
            wrong = redirect.replace(code, "not-the-code")
            turn = session.turn(blocked.turn_id)
            await turn.answer(first.id, SignInAnswer(credentials={"docs": wrong}))
            asked = await settled(turn, after=blocked)
            second = only_callback(asked, OpenSignIn)
            assert second.authorization_urls["docs"] != first.authorization_urls["docs"]
            redirect = await servers.sign_in(second.authorization_urls["docs"])
            await turn.answer(second.id, SignInAnswer(credentials={"docs": redirect}))
            record = await settled(turn, after=asked)
    assert isinstance(record, Completed), record
    assert record.text == "done: you are alice"
    (failed,) = [e for e in results(requests[-1]) if e.is_error]
    assert failed.text.startswith("The sign-in to the MCP server docs failed: ")
    assert "not-the-code" not in failed.text
    assert failed.text.endswith("Call docs.sign_in again to get a new sign-in link.")


async def test_a_url_elicitation_opens_a_sign_in_the_call_waits_on() -> None:
    recorder = Recorder()
    steps = [call_tool("t.connect_account"), recorder]
    server = StdioMCP(command=stdio_command())
    agent = Agent("a", model=ScriptedModel(steps), mcps={"t": server})
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            blocked = await session.run("go")
            sign_in = only_callback(blocked, OpenSignIn)
            assert sign_in.sources == ("t",)
            assert sign_in.authorization_urls == {"t": "http://127.0.0.1:9/connect?account=1"}
            turn = session.turn(blocked.turn_id)
            await turn.answer(sign_in.id, SignInAnswer(credentials={"t": "opened"}))
            record = await settled(turn, after=blocked)
    assert isinstance(record, Completed), record
    assert results(recorder.requests[0])[-1].text == "connect: accept"


async def test_interrupting_a_call_waiting_on_a_url_elicitation_closes_its_sign_in() -> None:
    server = StdioMCP(command=stdio_command())
    agent = Agent("a", model=ScriptedModel([call_tool("t.connect_account")]), mcps={"t": server})
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            blocked = await session.run("go")
            only_callback(blocked, OpenSignIn)
            turn = session.turn(blocked.turn_id)
            await turn.interrupt()
            record = await settled(turn)
            events = [event async for event in turn.iter_events()]
    assert isinstance(record, agentlib.Interrupted), record
    (closed,) = [event for event in events if isinstance(event, agentlib.CallbackClosed)]
    assert not closed.answered


async def test_a_call_waiting_on_a_url_elicitation_has_an_unknown_outcome_after_a_restart(
    tmp_path: Path,
) -> None:
    """The call runs while it waits: a restart cuts it, as it cuts any running call, and
    its sign-in closes unanswered."""
    store = f"sqlite:///{tmp_path / 's.db'}"

    def make_agent() -> Agent:
        server = StdioMCP(command=stdio_command())
        return Agent("a", model=ScriptedModel([call_tool("t.connect_account")]), mcps={"t": server})

    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime(store):
            session = await make_agent().start_session()
            blocked = await session.run("go")
            only_callback(blocked, OpenSignIn)
        async with agentlib.open_runtime(store):
            turn = make_agent().session(session.id).turn(blocked.turn_id)
            record = await settled(turn, after=blocked)
            events = [event async for event in turn.iter_events()]
    assert isinstance(record, agentlib.UnknownOutcome), record
    (closed,) = [event for event in events if isinstance(event, agentlib.CallbackClosed)]
    assert not closed.answered


async def test_tokens_the_server_no_longer_takes_fail_the_call_and_the_next_turn_signs_in(
    servers: OAuthServers,
) -> None:
    agent = Agent("a", model=whoami_model(), mcps=docs(servers))
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            record = await signed_in_turn(session, servers)
            assert isinstance(record, Completed), record
            servers.revoke()
            refused = await session.run("alice")
            assert isinstance(refused, Completed), refused
            assert refused.text.startswith("done: ")
            assert "you are alice" not in refused.text
            asked = await session.run("alice")
    sign_in = only_callback(asked, OpenSignIn)
    assert sign_in.sources == ("docs",)
    assert sign_in.authorization_urls["docs"].startswith(f"{servers.issuer}/authorize?")


async def test_a_remote_reference_signs_in_to_a_served_agents_server(
    servers: OAuthServers, tmp_path: Path
) -> None:
    agent = Agent("served", model=whoami_model(), mcps=docs(servers))
    store = f"sqlite:///{tmp_path / 's.db'}"
    with trio.fail_after(DEADLINE):
        async with agentlib.serve([agent], store=store, port=0) as served:
            session = await Agent.load_from(served.url, "served").start_session()
            record = await signed_in_turn(session, servers)
    assert isinstance(record, Completed), record
    assert record.text == "done: you are alice"
