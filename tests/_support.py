"""Helpers shared by the engine's tests: tool calls and the model replies that make them, the
tools ``delete`` (an approval tool) and ``client.pick`` (a client tool), an agent that asks
for an approval, a session input, a gate that holds a turn, recording and echoing steps, a
turn's events, and a deadline on the wall clock for tests on trio's MockClock."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import trio

import agentlib
from agentlib import (
    Agent,
    MessageEntry,
    ModelReply,
    ModelRequest,
    ScriptedModel,
    SessionInput,
    Tool,
    ToolCallRequest,
    ToolResultEntry,
    Turn,
    tool,
)


class Gate:
    """An async tool, ``hold``, that holds the turn calling it until the test opens the gate."""

    def __init__(self) -> None:
        self.reached = trio.Event()
        self.opened = trio.Event()

        async def hold() -> str:
            """Wait for the gate to open."""
            self.reached.set()
            await self.opened.wait()
            return "opened"

        self.tool = tool(hold)


HOLD = ModelReply(tool_calls=[ToolCallRequest(name="hold")])


def call(name: str, **arguments: Any) -> ToolCallRequest:
    """A call of the tool ``name`` with ``arguments``, as a model reply makes it."""
    return ToolCallRequest(name=name, arguments=arguments)


def reply(*calls: ToolCallRequest) -> ModelReply:
    """One model reply that makes ``calls`` (at once when there are several)."""
    return ModelReply(tool_calls=list(calls))


def call_tool(name: str, **arguments: Any) -> ModelReply:
    """A model step that calls one tool."""
    return reply(call(name, **arguments))


def tool_results(request: ModelRequest) -> list[ToolResultEntry]:
    return [entry for entry in request.entries if isinstance(entry, ToolResultEntry)]


def deleter(runs: list[str]) -> Tool:
    """An approval tool, ``delete``, that appends each path it deletes to ``runs``."""

    @agentlib.tool(requires_approval=True)
    async def delete(path: str) -> str:
        """Delete a file."""
        runs.append(path)
        return f"deleted {path}"

    return delete


def echo(prefix: str) -> Callable[[ModelRequest], str]:
    """A final step that answers ``"<prefix>: <text of the last entry>"`` (a tool result)."""

    def step(request: ModelRequest) -> str:
        return f"{prefix}: {request.entries[-1].text}"

    return step


def approval_agent(runs: list[str], *steps: Any, **options: Any) -> Agent:
    """``approver``, whose model plays ``steps`` with the approval tool ``delete`` (see
    ``deleter``). Without steps, it asks to delete /tmp/x, then answers ``done: <the tool's
    result>``."""
    return Agent(
        "approver",
        model=ScriptedModel(steps or [reply(call("delete", path="/tmp/x")), echo("done")]),
        tools=[deleter(runs)],
        **options,
    )


@agentlib.client_tool
def pick(prompt: str) -> int:
    """Ask the user to pick a number."""
    ...


class Repo(SessionInput):
    """A session input: the repository a session works on."""

    input_id = "repo"
    name: str


class Recorder:
    """A model step that records its request and answers ``text``."""

    def __init__(self, text: str = "done") -> None:
        self.text = text
        self.requests: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> str:
        self.requests.append(request)
        return self.text


def user_texts(request: ModelRequest) -> list[str]:
    return [
        entry.text
        for entry in request.entries
        if isinstance(entry, MessageEntry) and entry.role == "user"
    ]


def held_agent(gate: Gate, *then: Any, **options: Any) -> Agent:
    """An agent whose first step holds the turn at ``gate``; ``then`` are the next steps."""
    return Agent("held", model=ScriptedModel([HOLD, *then]), tools=[gate.tool], **options)


async def held_turn(session: agentlib.Session, gate: Gate, message: str = "go") -> Turn:
    """Start a turn and wait until it is held at the gate."""
    turn = await session.send_message(message)
    await gate.reached.wait()
    return turn


async def turn_events(
    turn: Turn, after: agentlib.TurnState[Any] | str | None = None, *, timeout: float = math.inf
) -> list[agentlib.Event]:
    """The turn's events after ``after`` (a record or a cursor), or from its start, through
    its ``TurnEnded``: the turn must have ended, or end within ``timeout`` seconds."""
    with trio.fail_after(timeout):
        async with contextlib.aclosing(turn.iter_events(after=after)) as events:
            return [event async for event in events]


@contextlib.contextmanager
def fail_after_real(seconds: float) -> Iterator[None]:
    """``trio.fail_after`` on the wall clock, for tests on trio's autojump clock whose waits
    include SQLite's worker threads.

    The autojump clock jumps to the next deadline whenever every task waits, and a task
    waiting on a worker thread counts as waiting: on a busy machine, a commit can take long
    enough for a virtual deadline to pass while it is under way. Only a hang reaches this one.

    Raises:
        trio.TooSlowError: The block was still running after ``seconds`` real seconds.
    """
    token = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as scope:

        def expire() -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(scope.cancel)

        timer = threading.Timer(seconds, expire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
    if scope.cancelled_caught:
        raise trio.TooSlowError
