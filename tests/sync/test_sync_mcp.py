"""MCP servers under agentlib_sync: the engine's thread owns each connection, and a blocking
script's interrupts cancel calls there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _mcp_support import Observer, gone, log_lines, stdio_server

import agentlib_sync as agents

from ._support import call_tool

pytestmark = pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning")


@pytest.fixture
def observer() -> Iterator[Observer]:
    watching = Observer()
    yield watching
    watching.close()
    agents.configure()  # the engine stops: its connections close


def wait_forever_model() -> agents.FunctionModel:
    def step(request: agents.ModelRequest) -> str | agents.ModelReply:
        last = request.entries[-1]
        if isinstance(last, agents.ToolResultEntry):
            return "done"
        if isinstance(last, agents.MessageEntry) and last.text == "echo":
            return call_tool("t.echo", text="still here")
        return call_tool("t.wait_forever")

    return agents.FunctionModel(step)


def test_a_blocking_script_calls_an_mcp_tool(tmp_path: Path, observer: Observer) -> None:
    server = stdio_server(tmp_path / "log", observer)
    agent = agents.Agent(
        "a",
        model=agents.ScriptedModel([call_tool("t.echo", text="hi"), "done"]),
        mcps={"t": server},
    )
    record = agent.start_session().run("go")
    assert isinstance(record, agents.Completed)
    (call,) = record.tool_calls
    assert (call.name, call.tool_kind) == ("t.echo", "mcp")


def interrupt_calls(agent: agents.Agent, observer: Observer, loops: int) -> None:
    session = agent.start_session()
    for loop in range(1, loops + 1):
        turn = session.start_turn("wait")
        assert isinstance(turn, agents.Turn)
        observer.wait_for("call wait_forever", loop)
        turn.interrupt()
        assert isinstance(turn.result(), agents.Interrupted)
        observer.wait_for("cancelled wait_forever", loop)
    assert isinstance(session.run("echo"), agents.Completed)


def test_an_interrupted_call_is_cancelled_on_the_server(tmp_path: Path, observer: Observer) -> None:
    server = stdio_server(tmp_path / "log", observer)
    interrupt_calls(agents.Agent("a", model=wait_forever_model(), mcps={"t": server}), observer, 2)


@pytest.mark.slow
def test_a_hundred_interrupted_calls_leak_no_process(tmp_path: Path, observer: Observer) -> None:
    log = tmp_path / "log"
    agent = agents.Agent("a", model=wait_forever_model(), mcps={"t": stdio_server(log, observer)})
    interrupt_calls(agent, observer, 100)
    assert log_lines(log, "list") == 1
    agents.configure()  # the engine stops, and with it the server's process
    (pid,) = observer.pids()
    assert gone(pid)
