"""The runtime: open_runtime, the current runtime, and what leaving its block does (SPEC 3)."""

from __future__ import annotations

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
