"""The runtime: open_runtime, the current runtime, and what leaving its block does (SPEC 3)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

import agentlib
from agentlib import Agent, Interrupted, ModelReply, ScriptedModel, ToolCallRequest, TurnEnded


def holding_agent(release: trio.Event, entered: trio.Event) -> Agent:
    """An agent whose first step calls a tool that waits for ``release``."""

    async def hold() -> str:
        """Wait until the test releases the turn."""
        entered.set()
        await release.wait()
        return "released"

    return Agent(
        "holder",
        model=ScriptedModel([ModelReply(tool_calls=[ToolCallRequest(name="hold")]), "done"]),
        tools=[hold],
    )


async def test_open_runtime_sets_the_current_runtime() -> None:
    async with agentlib.open_runtime() as runtime:
        assert agentlib.current_runtime() is runtime


async def test_the_current_runtime_is_unset_when_the_block_ends() -> None:
    async with agentlib.open_runtime():
        pass
    with pytest.raises(RuntimeError):
        agentlib.current_runtime()


async def test_a_nested_runtime_is_current_inside_its_block_only() -> None:
    async with agentlib.open_runtime() as outer:
        async with agentlib.open_runtime() as inner:
            assert agentlib.current_runtime() is inner
        assert agentlib.current_runtime() is outer


async def test_start_session_outside_a_runtime_raises_runtime_error_naming_the_ways_out() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    with pytest.raises(RuntimeError) as info:
        await agent.start_session()
    message = str(info.value)
    assert "open_runtime()" in message
    assert "agentlib_sync" in message


async def test_agent_session_outside_a_runtime_raises_runtime_error() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    with pytest.raises(RuntimeError, match="open_runtime"):
        agent.session("0" * 32)


async def test_sessions_started_in_the_block_run_turns_in_that_runtime() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("hello")
    assert isinstance(record, agentlib.Completed)
    assert record.output == "hi"


@pytest.mark.parametrize("store", [None, ":memory:"])
async def test_open_runtime_accepts_the_in_memory_store(store: str | None) -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime(store=store):
        session = await agent.start_session()
        assert isinstance(await session.run("hello"), agentlib.Completed)


async def test_open_runtime_with_an_unknown_store_raises_value_error() -> None:
    with pytest.raises(ValueError, match="redis://localhost"):
        async with agentlib.open_runtime(store="redis://localhost"):
            pass  # pragma: no cover


async def test_leaving_the_block_interrupts_a_running_turn_as_cancelled() -> None:
    release, entered = trio.Event(), trio.Event()
    async with agentlib.open_runtime():
        session = await holding_agent(release, entered).start_session()
        turn = await session.send_message("go")
        await entered.wait()
    record = await turn.get()
    assert isinstance(record, Interrupted)
    assert record.cause == "cancelled"


async def test_leaving_the_block_interrupts_the_running_turns_of_every_session() -> None:
    turns = []
    async with agentlib.open_runtime():
        for _ in range(3):
            release, entered = trio.Event(), trio.Event()
            session = await holding_agent(release, entered).start_session()
            turns.append(await session.send_message("go"))
            await entered.wait()
    causes = [getattr(await turn.get(), "cause", None) for turn in turns]
    assert causes == ["cancelled"] * 3


async def test_leaving_the_block_returns_only_once_running_turns_have_ended(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cleaned_up = trio.Event()

    async def slow_to_stop() -> str:
        """Take a second to clean up when cancelled."""
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(1)
                cleaned_up.set()
        return "never"  # pragma: no cover

    agent = Agent(
        "a",
        model=ScriptedModel([ModelReply(tool_calls=[ToolCallRequest(name="slow_to_stop")])]),
        tools=[slow_to_stop],
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("go")
        await trio.testing.wait_all_tasks_blocked()
        started_leaving = trio.current_time()
    assert cleaned_up.is_set()
    assert trio.current_time() - started_leaving >= 1
    assert not isinstance(await turn.get(), agentlib.Running)


async def test_leaving_the_block_logs_turn_ended_as_the_interrupted_turns_last_event() -> None:
    release, entered = trio.Event(), trio.Event()
    async with agentlib.open_runtime():
        session = await holding_agent(release, entered).start_session()
        turn = await session.send_message("go")
        await entered.wait()
    events = [event async for event in turn.iter_events()]
    assert isinstance(events[-1], TurnEnded)
    assert isinstance(events[-1].record, Interrupted)
    assert events[-1].record.cause == "cancelled"


async def test_leaving_the_block_interrupts_a_turn_that_has_not_reached_its_first_step() -> None:
    # The turn is Running when the block is left; the model's step has no checkpoint.
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.start_turn("hello")
        assert isinstance(turn, agentlib.Turn)
        assert isinstance(await turn.get(), agentlib.Running)
    record = await turn.get()
    assert isinstance(record, Interrupted)
    assert record.cause == "cancelled"


# -- under asyncio -------------------------------------------------------------------------
# Plain tests: each runs its coroutine in an asyncio loop of its own.


def assert_points_to_agentlib_sync(error: BaseException) -> None:
    message = str(error)
    assert "trio.run(main)" in message
    assert "asyncio" in message
    assert "agentlib_sync" in message


def test_open_runtime_under_asyncio_raises_runtime_error_pointing_to_agentlib_sync() -> None:
    async def main() -> None:
        async with agentlib.open_runtime():
            pass

    with pytest.raises(RuntimeError) as info:
        asyncio.run(main())
    assert_points_to_agentlib_sync(info.value)


def test_start_session_under_asyncio_raises_runtime_error_pointing_to_agentlib_sync() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))

    with pytest.raises(RuntimeError) as info:
        asyncio.run(agent.start_session())
    assert_points_to_agentlib_sync(info.value)


def test_agent_session_under_asyncio_raises_runtime_error_pointing_to_agentlib_sync() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))

    async def main() -> None:
        agent.session("0" * 32)

    with pytest.raises(RuntimeError) as info:
        asyncio.run(main())
    assert_points_to_agentlib_sync(info.value)


async def _first(events: Any) -> None:
    await events.__anext__()


CALLS: dict[str, Callable[[agentlib.Session, agentlib.Turn], Awaitable[Any]]] = {
    "Session.send_message": lambda session, turn: session.send_message("again"),
    "Session.start_turn": lambda session, turn: session.start_turn("again"),
    "Session.run": lambda session, turn: session.run("again"),
    "Session.iter_events": lambda session, turn: _first(session.iter_events()),
    "Session.cancel": lambda session, turn: session.cancel(),
    "Session.subagents": lambda session, turn: session.subagents(),
    "Turn.get": lambda session, turn: turn.get(),
    "Turn.result": lambda session, turn: turn.result(),
    "Turn.iter_events": lambda session, turn: _first(turn.iter_events()),
    "Turn.steer": lambda session, turn: turn.steer("more"),
    "Turn.answer": lambda session, turn: turn.answer(
        "00000000-0000-0000-0000-000000000000", agentlib.AllowApproval()
    ),
    "Turn.interrupt": lambda session, turn: turn.interrupt(),
}


@pytest.mark.parametrize("method", list(CALLS))
def test_a_session_or_turn_method_under_asyncio_raises_runtime_error(method: str) -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))

    async def in_trio() -> tuple[agentlib.Session, agentlib.Turn]:
        async with agentlib.open_runtime():
            session = await agent.start_session()
            turn = await session.start_turn("hello")
            assert isinstance(turn, agentlib.Turn)
            await turn.result()
            return session, turn

    session, turn = trio.run(in_trio)

    async def main() -> None:
        await CALLS[method](session, turn)

    with pytest.raises(RuntimeError) as info:
        asyncio.run(main())
    assert_points_to_agentlib_sync(info.value)
