"""MCP servers as tool sources (SPEC section 16): an agent's ``mcps=``, its tools as the model
and the history see them, and the one connection each server has per runtime. The server
is tests/_mcp_server.py, written with the SDK, run as a real process over stdio, or over
streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import base64
import importlib.util
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from _mcp_support import (
    PNG_BYTES,
    SERVER,
    HTTPServer,
    Observer,
    gone,
    http_server,
    log_lines,
    stdio_server,
)
from _support import Recorder, call_tool

import agentlib
from agentlib import (
    Agent,
    AllowApproval,
    AudioContentBlock,
    Blocked,
    Completed,
    ContextMessage,
    EmbeddedResourceContentBlock,
    Failed,
    FunctionModel,
    ImageContentBlock,
    Interrupted,
    ModelReply,
    ModelRequest,
    OpenApproval,
    RemoteMCP,
    ResourceLinkContentBlock,
    ScriptedModel,
    StdioMCP,
    TextContentBlock,
    ToolCallRequest,
    ToolResultEntry,
)

DEADLINE = 60  # only a hang reaches it

# The SDK's streamable HTTP client leaves httpx2's response iterators to the garbage
# collector when a connection closes (it does with the SDK alone, under trio).
pytestmark = pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning")


@pytest.fixture
def observer() -> Iterator[Observer]:
    watching = Observer()
    yield watching
    watching.close()


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "server.log"


@pytest.fixture
def server(log: Path, observer: Observer) -> StdioMCP:
    return stdio_server(log, observer)


@pytest.fixture
def remote(log: Path, observer: Observer) -> Iterator[HTTPServer]:
    yield from http_server(log, observer)


async def run(agent: Agent, message: str = "go") -> agentlib.TurnState[Any]:
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            record = await session.run(message)
    assert not isinstance(record, agentlib.Busy)
    return record


def results(request: ModelRequest) -> list[ToolResultEntry]:
    return [entry for entry in request.entries if isinstance(entry, ToolResultEntry)]


def context_messages(request: ModelRequest) -> list[ContextMessage]:
    return [entry for entry in request.entries if isinstance(entry, ContextMessage)]


# --- declaring servers --------------------------------------------------------------------


def test_a_server_name_must_be_an_identifier(server: StdioMCP) -> None:
    with pytest.raises(ValueError, match="letters, digits and underscores"):
        Agent("a", model=ScriptedModel([]), mcps={"my-server": server})


def test_a_server_is_a_remote_or_stdio_declaration() -> None:
    with pytest.raises(TypeError, match=r"RemoteMCP\(url=...\) or a StdioMCP"):
        Agent("a", model=ScriptedModel([]), mcps={"s": "http://example.com/mcp"})  # type: ignore[dict-item]


def test_a_remote_server_needs_an_http_url() -> None:
    with pytest.raises(ValueError, match="HTTP address"):
        RemoteMCP(url="ftp://example.com/mcp")


def test_requires_approval_takes_a_bool_destructive_or_names() -> None:
    assert RemoteMCP(url="http://h/mcp", requires_approval=["a", "b"]).requires_approval == (
        "a",
        "b",
    )
    with pytest.raises(ValueError, match='"destructive"'):
        RemoteMCP(url="http://h/mcp", requires_approval="always")  # type: ignore[arg-type]


def test_a_declarations_repr_shows_no_header_or_env_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret-value")
    remote = RemoteMCP(
        url="https://user:pw@example.com/mcp?key=k1",
        headers={"X-Api-Key": "header-secret"},
        auth_header_env_vars={"Authorization": "GITHUB_TOKEN"},
    )
    stdio = StdioMCP(command=["server"], env={"TOKEN": "env-secret"})
    shown = repr(remote) + repr(stdio)
    for secret in ("ghp-secret-value", "header-secret", "env-secret", "pw", "k1"):
        assert secret not in shown
    assert "GITHUB_TOKEN" in shown


def test_declaring_a_server_without_the_sdk_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else real(name, *a)
    )
    with pytest.raises(ImportError, match=r"pip install 'agentlib\[mcp\]'"):
        StdioMCP(command=["server"])


def test_agentlib_imports_no_mcp() -> None:
    import subprocess

    code = "import agentlib, sys; print('mcp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- tools as the model and the history see them -----------------------------------------


async def test_the_servers_tools_are_offered_as_server_dot_tool_with_their_schemas(
    server: StdioMCP,
) -> None:
    recorder = Recorder()
    await run(Agent("a", model=ScriptedModel([recorder]), mcps={"test": server}))
    tools = {schema.name: schema for schema in recorder.requests[0].tools}
    assert "test.echo" in tools
    assert "test.blocks" in tools
    echo = tools["test.echo"]
    assert echo.description.startswith("Repeat a text.")
    assert echo.parameters["properties"]["text"]["type"] == "string"
    assert echo.parameters["required"] == ["text"]


async def test_a_tools_output_schema_is_told_in_its_description(server: StdioMCP) -> None:
    recorder = Recorder()
    await run(Agent("a", model=ScriptedModel([recorder]), mcps={"test": server}))
    weather = next(s for s in recorder.requests[0].tools if s.name == "test.weather")
    assert "structured content follows this JSON schema" in weather.description
    assert '"celsius"' in weather.description


async def test_a_call_is_recorded_as_a_tool_call_of_kind_mcp(server: StdioMCP) -> None:
    agent = Agent(
        "a", model=ScriptedModel([call_tool("test.echo", text="hi"), "done"]), mcps={"test": server}
    )
    record = await run(agent)
    assert isinstance(record, Completed)
    (entry,) = record.tool_calls
    assert (entry.name, entry.arguments, entry.tool_kind) == ("test.echo", {"text": "hi"}, "mcp")


async def test_a_result_is_its_text_and_structured_content(server: StdioMCP) -> None:
    recorder = Recorder()
    steps = [call_tool("test.weather", city="Lyon"), recorder]
    await run(Agent("a", model=ScriptedModel(steps), mcps={"test": server}))
    (result,) = results(recorder.requests[0])
    assert result.structured_content == {"city": "Lyon", "celsius": 21}
    assert not result.is_error


async def test_every_mcp_content_block_maps_onto_a_content_block(server: StdioMCP) -> None:
    recorder = Recorder()
    steps = [call_tool("test.blocks"), recorder]
    await run(Agent("a", model=ScriptedModel(steps), mcps={"test": server}))
    (result,) = results(recorder.requests[0])
    text, image, audio, link, embedded, blob = result.content
    assert isinstance(text, TextContentBlock)
    assert text.text == "some text"
    assert text.annotations is not None
    assert (text.annotations.audience, text.annotations.priority) == (("user", "assistant"), 0.5)
    assert text.meta == {"trace": "t1"}
    assert isinstance(image, ImageContentBlock)
    assert image.media_type == "image/png"
    assert base64.b64decode(image.uri.split(",", 1)[1]) == PNG_BYTES
    assert isinstance(audio, AudioContentBlock)
    assert audio.media_type == "audio/wav"
    assert audio.uri.startswith("data:audio/wav;base64,")
    assert audio.meta == {"seconds": 1}
    assert link == ResourceLinkContentBlock(
        uri="file:///notes/a.txt",
        name="a.txt",
        title="Note A",
        description="The first note",
        media_type="text/plain",
        size=12,
    )
    assert isinstance(embedded, EmbeddedResourceContentBlock)
    assert (embedded.uri, embedded.text, embedded.media_type) == (
        "file:///notes/b.txt",
        "note b",
        "text/plain",
    )
    assert embedded.annotations is not None
    assert embedded.annotations.audience == ("user",)
    assert isinstance(blob, EmbeddedResourceContentBlock)
    assert blob.text is None
    assert blob.blob == base64.b64encode(PNG_BYTES).decode()
    assert result.structured_content == {"count": 6}


async def test_an_is_error_result_is_a_tool_error_reported_to_the_model(server: StdioMCP) -> None:
    recorder = Recorder()
    steps = [call_tool("test.fail"), recorder]
    record = await run(Agent("a", model=ScriptedModel(steps), mcps={"test": server}))
    assert isinstance(record, Completed)
    (result,) = results(recorder.requests[0])
    assert result.is_error
    assert result.text == "the disk is full"


async def test_an_is_error_result_fails_the_turn_with_tool_errors_raise(server: StdioMCP) -> None:
    steps = [call_tool("test.fail"), "unreached"]
    agent = Agent("a", model=ScriptedModel(steps), mcps={"test": server}, tool_errors="raise")
    record = await run(agent)
    assert isinstance(record, Failed)
    assert "the disk is full" in record.error.message


async def test_arguments_the_server_refuses_are_an_error_result(server: StdioMCP) -> None:
    recorder = Recorder()
    steps = [call_tool("test.echo", text=3, other=True), recorder]
    await run(Agent("a", model=ScriptedModel(steps), mcps={"test": server}))
    (result,) = results(recorder.requests[0])
    assert result.is_error


async def test_the_servers_instructions_reach_the_model_as_a_capability_source_message(
    server: StdioMCP,
) -> None:
    recorder = Recorder()
    await run(Agent("a", model=ScriptedModel([recorder]), mcps={"test": server}))
    (message,) = context_messages(recorder.requests[0])
    assert (message.kind, message.source) == ("capability_source", "mcp:test")
    assert message.text == "Use echo to repeat a text."


async def test_the_instructions_join_a_sessions_history_once(server: StdioMCP) -> None:
    recorder = Recorder()
    steps = [call_tool("test.echo", text="a"), "one", recorder]
    agent = Agent("a", model=ScriptedModel(steps), mcps={"test": server})
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            await session.run("first")
            await session.run("second")
    assert len(context_messages(recorder.requests[0])) == 1


async def test_allow_offers_only_the_tools_it_names(log: Path, observer: Observer) -> None:
    recorder = Recorder()
    server = stdio_server(log, observer, allow=["echo", "fail"])
    await run(Agent("a", model=ScriptedModel([recorder]), mcps={"test": server}))
    assert [s.name for s in recorder.requests[0].tools] == ["test.echo", "test.fail"]


async def test_deny_leaves_out_the_tools_it_names(log: Path, observer: Observer) -> None:
    recorder = Recorder()
    server = stdio_server(log, observer, deny=["delete_everything"])
    await run(Agent("a", model=ScriptedModel([recorder]), mcps={"test": server}))
    names = {s.name for s in recorder.requests[0].tools}
    assert "test.echo" in names
    assert "test.delete_everything" not in names


async def test_a_denied_tool_called_anyway_is_unknown(log: Path, observer: Observer) -> None:
    recorder = Recorder()
    server = stdio_server(log, observer, deny=["delete_everything"])
    steps = [call_tool("test.delete_everything"), recorder]
    await run(Agent("a", model=ScriptedModel(steps), mcps={"test": server}))
    (result,) = results(recorder.requests[0])
    assert result.is_error
    assert "unknown tool" in result.text
    assert log_lines(log, "call delete_everything") == 0


async def approvals_asked(server: StdioMCP, *tools: str) -> list[str]:
    """The tools whose calls (one each, at once) opened an approval."""
    steps = [ModelReply(tool_calls=[ToolCallRequest(name=f"test.{t}") for t in tools]), "done"]
    agent = Agent("a", model=ScriptedModel(steps), mcps={"test": server})
    asked: list[str] = []

    def approve(callback: OpenApproval) -> AllowApproval:
        asked.append(callback.tool_name)
        return AllowApproval()

    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session(on_approval=approve)
            record = await session.run("go")
    assert isinstance(record, Completed)
    return sorted(asked)


async def test_requires_approval_true_asks_for_every_call(log: Path, observer: Observer) -> None:
    server = stdio_server(log, observer, requires_approval=True)
    asked = await approvals_asked(server, "blocks", "add_note")
    assert asked == ["test.add_note", "test.blocks"]


async def test_requires_approval_names_asks_for_those_tools(log: Path, observer: Observer) -> None:
    server = stdio_server(log, observer, requires_approval=["add_note"])
    assert await approvals_asked(server, "blocks", "add_note") == ["test.add_note"]


async def test_requires_approval_destructive_asks_for_what_the_server_does_not_call_safe(
    log: Path, observer: Observer
) -> None:
    # delete_everything says it is destructive, blocks says nothing (MCP: it may be), echo is
    # read-only and add_note not destructive.
    server = stdio_server(log, observer, requires_approval="destructive")
    asked = await approvals_asked(server, "delete_everything", "blocks", "echo", "add_note")
    assert asked == ["test.blocks", "test.delete_everything"]


async def test_a_denied_approval_never_reaches_the_server(log: Path, observer: Observer) -> None:
    server = stdio_server(log, observer, requires_approval=True)
    agent = Agent(
        "a", model=ScriptedModel([call_tool("t.echo", text="x"), "done"]), mcps={"t": server}
    )
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session(
                on_approval=lambda _: agentlib.DenyApproval(reason="no")
            )
            record = await session.run("go")
    assert isinstance(record, Completed)
    assert log_lines(log, "call echo") == 0


async def test_a_blocked_approval_shows_the_mcp_tool(log: Path, observer: Observer) -> None:
    server = stdio_server(log, observer, requires_approval=True)
    agent = Agent(
        "a", model=ScriptedModel([call_tool("t.echo", text="x"), "done"]), mcps={"t": server}
    )
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            record = await session.run("go")
            assert isinstance(record, Blocked)
            (callback,) = record.callbacks
            assert isinstance(callback, OpenApproval)
            assert (callback.tool_name, callback.arguments) == ("t.echo", {"text": "x"})
            turn = session.turn(record.turn_id)
            await turn.answer(callback.id, AllowApproval())
            assert isinstance(await turn.result(after=record), Completed)
    assert log_lines(log, "call echo") == 1


async def test_a_pre_tool_call_hook_sees_and_rewrites_an_mcp_call(server: StdioMCP) -> None:
    seen: list[tuple[str, str]] = []

    @agentlib.pre_tool_call
    def rewrite(call: agentlib.ToolCallEntry) -> agentlib.ModifiedArguments:
        seen.append((call.name, call.tool_kind))
        return agentlib.ModifiedArguments({"text": "rewritten"})

    recorder = Recorder()
    steps = [call_tool("t.echo", text="x"), recorder]
    await run(Agent("a", model=ScriptedModel(steps), mcps={"t": server}, hooks=[rewrite]))
    assert seen == [("t.echo", "mcp")]
    assert results(recorder.requests[0])[0].text == "rewritten"


# --- one connection per server ------------------------------------------------------------


async def test_tools_are_listed_once_per_connection_not_per_model_step(
    server: StdioMCP, log: Path
) -> None:
    steps = [call_tool("t.echo", text=str(n)) for n in range(5)] + ["done"]
    agent = Agent("a", model=ScriptedModel(steps * 2), mcps={"t": server})
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            first = await agent.start_session()
            await first.run("go")
            second = await agent.start_session()
            await second.run("go")
    assert log_lines(log, "call echo") == 10
    assert log_lines(log, "list") == 1


async def test_one_server_process_serves_every_session_of_a_runtime(
    server: StdioMCP, observer: Observer
) -> None:
    agent = Agent(
        "a", model=ScriptedModel([call_tool("t.echo", text="x"), "done"] * 3), mcps={"t": server}
    )
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            for _ in range(3):
                session = await agent.start_session()
                await session.run("go")
    assert len(observer.pids()) == 1


async def test_a_changed_tool_list_is_listed_again_and_offered(server: StdioMCP, log: Path) -> None:
    recorder = Recorder()
    steps = [call_tool("t.add_tool"), call_tool("t.extra"), recorder]
    await run(Agent("a", model=ScriptedModel(steps), mcps={"t": server}))
    assert "t.extra" in {s.name for s in recorder.requests[0].tools}
    assert results(recorder.requests[0])[-1].text == "extra"
    assert log_lines(log, "list") == 2


async def test_closing_the_runtime_ends_the_server_process(
    server: StdioMCP, observer: Observer
) -> None:
    agent = Agent(
        "a", model=ScriptedModel([call_tool("t.echo", text="x"), "done"]), mcps={"t": server}
    )
    await run(agent)
    (pid,) = observer.pids()
    assert gone(pid)


async def test_a_server_that_cannot_start_is_unavailable_and_the_turn_goes_on(
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    broken = StdioMCP(command=[str(tmp_path / "no-such-server")])
    agent = Agent("a", model=ScriptedModel([recorder]), mcps={"broken": broken})
    record = await run(agent)
    assert isinstance(record, Completed)
    (message,) = context_messages(recorder.requests[0])
    assert message.source == "mcp:broken"
    assert "The MCP server broken is unavailable" in message.text
    assert "no-such-server" in message.text
    assert recorder.requests[0].tools == ()


async def test_a_server_that_exits_at_once_is_unavailable(tmp_path: Path) -> None:
    recorder = Recorder()
    broken = StdioMCP(command=[sys.executable, "-c", "pass"])
    record = await run(Agent("a", model=ScriptedModel([recorder]), mcps={"broken": broken}))
    assert isinstance(record, Completed)
    assert "unavailable" in context_messages(recorder.requests[0])[0].text


async def test_an_unavailable_server_leaves_the_others_tools(
    server: StdioMCP, tmp_path: Path
) -> None:
    recorder = Recorder()
    broken = StdioMCP(command=[str(tmp_path / "missing")])
    steps = [call_tool("t.echo", text="still"), recorder]
    agent = Agent("a", model=ScriptedModel(steps), mcps={"broken": broken, "t": server})
    record = await run(agent)
    assert isinstance(record, Completed)
    assert results(recorder.requests[0])[0].text == "still"


async def test_a_server_that_does_not_answer_in_time_is_unavailable(tmp_path: Path) -> None:
    recorder = Recorder()
    silent = StdioMCP(
        command=[sys.executable, "-c", "import time; time.sleep(60)"], connect_timeout=0.5
    )
    record = await run(Agent("a", model=ScriptedModel([recorder]), mcps={"silent": silent}))
    assert isinstance(record, Completed)
    assert "did not answer within 0.5 s" in context_messages(recorder.requests[0])[0].text


async def test_a_missing_auth_env_var_makes_the_server_unavailable_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AGENTLIB_TEST_NO_SUCH_TOKEN", raising=False)
    recorder = Recorder()
    remote = RemoteMCP(
        url="http://127.0.0.1:9/mcp",
        auth_header_env_vars={"Authorization": "AGENTLIB_TEST_NO_SUCH_TOKEN"},
    )
    await run(Agent("a", model=ScriptedModel([recorder]), mcps={"r": remote}))
    text = context_messages(recorder.requests[0])[0].text
    assert "AGENTLIB_TEST_NO_SUCH_TOKEN" in text
    assert "is not set" in text


async def test_an_unreachable_remote_server_is_unavailable_without_its_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTLIB_TEST_TOKEN", "tok-secret-1234")
    recorder = Recorder()
    with trio.socket.socket() as probe:  # a port nothing listens on
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    remote = RemoteMCP(
        url=f"http://127.0.0.1:{port}/mcp?key=query-secret",
        headers={"X-Key": "header-secret"},
        auth_header_env_vars={"Authorization": "AGENTLIB_TEST_TOKEN"},
    )
    record = await run(Agent("a", model=ScriptedModel([recorder]), mcps={"r": remote}))
    assert isinstance(record, Completed)
    text = context_messages(recorder.requests[0])[0].text
    assert f"could not connect to http://127.0.0.1:{port}/mcp" in text
    for secret in ("tok-secret-1234", "query-secret", "header-secret"):
        assert secret not in text


# --- streamable HTTP ----------------------------------------------------------------------


async def test_a_remote_server_is_reached_over_streamable_http(remote: HTTPServer) -> None:
    recorder = Recorder()
    steps = [call_tool("r.echo", text="over http"), recorder]
    record = await run(
        Agent("a", model=ScriptedModel(steps), mcps={"r": RemoteMCP(url=remote.url)})
    )
    assert isinstance(record, Completed)
    assert results(recorder.requests[0])[0].text == "over http"
    assert context_messages(recorder.requests[0])[0].text == "Use echo to repeat a text."


async def test_headers_and_env_var_headers_reach_the_server(
    remote: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLIB_TEST_TOKEN", "Bearer t-1")
    recorder = Recorder()
    declared = RemoteMCP(
        url=remote.url,
        headers={"X-Team": "blue"},
        auth_header_env_vars={"Authorization": "AGENTLIB_TEST_TOKEN"},
    )
    steps = [call_tool("r.headers"), recorder]
    await run(Agent("a", model=ScriptedModel(steps), mcps={"r": declared}))
    seen = results(recorder.requests[0])[0].structured_content
    assert seen["x-team"] == "blue"
    assert seen["authorization"] == "Bearer t-1"


async def test_a_dropped_session_is_initialised_again_and_the_call_sent_once_more(
    remote: HTTPServer, log: Path
) -> None:
    recorder = Recorder()

    def drop_then_call(request: ModelRequest) -> ModelReply:
        remote.drop_sessions()
        return call_tool("r.echo", text="after 404")

    steps = [call_tool("r.echo", text="before"), drop_then_call, recorder]
    record = await run(
        Agent("a", model=ScriptedModel(steps), mcps={"r": RemoteMCP(url=remote.url)})
    )
    assert isinstance(record, Completed)
    after = results(recorder.requests[0])[-1]
    assert (after.text, after.is_error) == ("after 404", False)
    assert log_lines(log, "call echo") == 2  # the call the 404 refused never ran
    assert log_lines(log, "list") == 2  # listed again on the new session


# --- interrupting a call ------------------------------------------------------------------


def wait_forever_model() -> FunctionModel:
    """Calls t.wait_forever for each message "wait", t.echo for "echo", then answers."""

    def step(request: ModelRequest) -> str | ModelReply:
        last = request.entries[-1]
        if isinstance(last, ToolResultEntry):
            return "done"
        if last.text == "echo":  # type: ignore[union-attr]
            return call_tool("t.echo", text="still here")
        return call_tool("t.wait_forever")

    return FunctionModel(step)


async def interrupt_calls(agent: Agent, observer: Observer, loops: int) -> None:
    session = await agent.start_session()
    for loop in range(1, loops + 1):
        turn = await session.start_turn("wait")
        assert isinstance(turn, agentlib.Turn)
        await trio.to_thread.run_sync(observer.wait_for, "call wait_forever", loop)
        await turn.interrupt()
        record = await turn.result()
        assert isinstance(record, Interrupted)
        # The SDK sent notifications/cancelled: the server's call was cancelled.
        await trio.to_thread.run_sync(observer.wait_for, "cancelled wait_forever", loop)
    record = await session.run("echo")
    assert isinstance(record, Completed), record


async def test_interrupting_a_call_cancels_it_on_the_server_and_the_connection_stays(
    server: StdioMCP, observer: Observer
) -> None:
    agent = Agent("a", model=wait_forever_model(), mcps={"t": server})
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            await interrupt_calls(agent, observer, 3)
    (pid,) = observer.pids()
    assert gone(pid)


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_hundred_interrupted_calls_leak_no_process_and_no_cancel_scope(
    transport: str, server: StdioMCP, observer: Observer, log: Path
) -> None:
    remote = HTTPServer(log, observer) if transport == "http" else None
    declared = server if remote is None else RemoteMCP(url=remote.url)
    agent = Agent("a", model=wait_forever_model(), mcps={"t": declared})
    try:
        with trio.fail_after(DEADLINE * 3):
            async with agentlib.open_runtime():
                await interrupt_calls(agent, observer, 100)
    finally:
        if remote is not None:
            remote.stop()
    assert log_lines(log, "list") == 1
    if remote is None:
        (pid,) = observer.pids()
        assert gone(pid)


async def test_cancelling_the_session_mid_call_cancels_the_call(
    server: StdioMCP, observer: Observer
) -> None:
    agent = Agent("a", model=wait_forever_model(), mcps={"t": server})
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            await session.start_turn("wait")
            await trio.to_thread.run_sync(observer.wait_for, "call wait_forever")
            await session.cancel()
            await trio.to_thread.run_sync(observer.wait_for, "cancelled wait_forever")


async def test_closing_the_runtime_mid_call_ends_the_server_process(
    server: StdioMCP, observer: Observer
) -> None:
    agent = Agent("a", model=wait_forever_model(), mcps={"t": server})
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            await session.start_turn("wait")
            await trio.to_thread.run_sync(observer.wait_for, "call wait_forever")
    (pid,) = observer.pids()
    assert gone(pid)


# --- served agents ------------------------------------------------------------------------


async def test_a_served_agents_mcp_tools_run_in_the_server(
    server: StdioMCP, observer: Observer, tmp_path: Path
) -> None:
    recorder = Recorder()
    steps = [call_tool("t.echo", text="served"), recorder]
    agent = Agent("served", model=ScriptedModel(steps), mcps={"t": server})
    store = f"sqlite:///{tmp_path / 'served.db'}"
    with trio.fail_after(DEADLINE):
        async with agentlib.serve([agent], store=store, port=0) as served:
            session = await Agent.load_from(served.url, "served").start_session()
            record = await session.run("go")
    assert isinstance(record, Completed)
    (call,) = record.tool_calls
    assert (call.name, call.tool_kind) == ("t.echo", "mcp")
    assert results(recorder.requests[0])[0].text == "served"
    (pid,) = observer.pids()
    assert gone(pid)


async def test_an_mcp_call_waiting_on_its_approval_runs_in_a_later_runtime(
    log: Path, observer: Observer, tmp_path: Path
) -> None:
    recorder = Recorder()
    server = stdio_server(log, observer, requires_approval=True)
    steps = [call_tool("t.echo", text="later"), recorder]
    agent = Agent("a", model=ScriptedModel(steps), mcps={"t": server})
    store = f"sqlite:///{tmp_path / 's.db'}"
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime(store=store):
            session = await agent.start_session()
            blocked = await session.run("go")
        assert isinstance(blocked, Blocked)
        async with agentlib.open_runtime(store=store):
            turn = agent.session(session.id).turn(blocked.turn_id)
            await turn.answer(blocked.callbacks[0].id, AllowApproval())
            record = await turn.result(after=blocked)
    assert isinstance(record, Completed)
    assert results(recorder.requests[0])[0].text == "later"
    assert log_lines(log, "call echo") == 1
    assert all(gone(pid) for pid in observer.pids())


async def test_a_later_turn_connects_again_to_a_server_that_was_unavailable(
    log: Path, observer: Observer, tmp_path: Path
) -> None:
    script = tmp_path / "server.py"  # absent for the first turn: python exits at once
    env = {"MCP_TEST_LOG": str(log), "MCP_TEST_OBSERVER": str(observer.port)}
    late = StdioMCP(command=[sys.executable, str(script), "stdio"], env=env)
    recorder = Recorder()
    agent = Agent("a", model=ScriptedModel(["first", recorder]), mcps={"late": late})
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            await session.run("one")
            script.write_text(Path(SERVER).read_text())
            await session.run("two")
    first, second = context_messages(recorder.requests[0])
    assert "unavailable" in first.text
    assert second.text == "Use echo to repeat a text."
    assert "late.echo" in {schema.name for schema in recorder.requests[0].tools}


async def test_a_server_process_that_dies_is_started_again_for_the_next_call(
    server: StdioMCP, observer: Observer
) -> None:
    recorder = Recorder()

    def kill_then_call(request: ModelRequest) -> ModelReply:
        (pid,) = observer.pids()
        os.kill(pid, signal.SIGKILL)
        return call_tool("t.echo", text="lost")

    steps = [
        call_tool("t.echo", text="one"),
        kill_then_call,
        call_tool("t.echo", text="two"),
        recorder,
    ]
    record = await run(Agent("a", model=ScriptedModel(steps), mcps={"t": server}))
    assert isinstance(record, Completed)
    one, lost, two = results(recorder.requests[0])
    assert one.text == "one"
    assert lost.is_error
    assert "may have run" in lost.text
    assert (two.text, two.is_error) == ("two", False)
    assert len(observer.pids()) == 2
    assert all(gone(pid) for pid in observer.pids())
