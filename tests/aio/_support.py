"""Helpers shared by the asyncio door's tests: a loop of its own per test, parked model
steps, and scripted agents."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

import agentlib.aio as agents

T = TypeVar("T")

#: The safety net of every wait (real seconds): a broken door fails the test instead of
#: hanging it; a busy machine never takes this long.
WAIT = 30.0


def run(main: Callable[[], Awaitable[T]]) -> T:
    """``await main()`` in an asyncio loop of its own, as a plain test runs it."""

    async def bounded() -> T:
        return await asyncio.wait_for(main(), WAIT)

    return asyncio.run(bounded())


class Gate:
    """A model step that parks (in the engine) until the test opens the gate.

    Make it inside the test's loop: ``await reached()`` returns once the step runs (so the
    turn is known to be running); ``open()`` lets the step return ``answer``.
    """

    def __init__(self, answer: str = "opened") -> None:
        self.answer = answer
        self._loop = asyncio.get_running_loop()
        self._reached = asyncio.Event()
        self._release = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None

    async def __call__(self, request: agents.ModelRequest) -> str:
        self._token = trio.lowlevel.current_trio_token()
        self._loop.call_soon_threadsafe(self._reached.set)
        await self._release.wait()
        return self.answer

    async def reached(self) -> None:
        await self._reached.wait()

    async def open(self) -> None:
        """Let the parked step return."""
        await self.reached()
        self.release()

    def release(self) -> None:
        """Let the step, known to be parked, return: from any thread, in a loop or not."""
        assert self._token is not None
        self._token.run_sync_soon(self._release.set)


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first one.
        b: The second one.
    """
    return a + b


def scripted_agent(*steps: Any, name: str = "scripted", **options: Any) -> agents.Agent:
    return agents.Agent(name=name, model=agents.ScriptedModel(steps), **options)


def call_tool(name: str, **arguments: Any) -> agents.ModelReply:
    return agents.ModelReply(tool_calls=[agents.ToolCallRequest(name=name, arguments=arguments)])


def calls_in_engine() -> int:
    """How many calls of the portal run in the engine now, this one left out (each call
    runs in a task of the portal's nursery that is not waiting for one)."""
    from agentlib_sync._portal import portal

    async def count() -> int:
        nursery, idle = portal._nursery, portal._idle
        assert nursery is not None
        me = trio.lowlevel.current_task()
        return sum(1 for task in nursery.child_tasks if task not in idle and task is not me)

    return portal.call(count)


def result_in_engine(turn: agents.Turn) -> agents.TurnState[Any]:
    """The turn's end record, waited for in the engine: no asyncio loop calls the door."""
    from agentlib_sync._portal import portal

    record: agents.TurnState[Any] = portal.call(turn._turn.result)
    return record
