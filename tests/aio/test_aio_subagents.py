"""Subagents through agentlib.aio: delegation, a coroutine on_approval on the root that
answers a subagent's approval on the caller's loop, ``session.subagents()`` as the door's
sessions, read-only subagent references, ``turn.answer`` through the root, cancelling the
root, and a subagent's coroutine tool on the loop that started the root's turn."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

import pytest

import agentlib
import agentlib.aio as agents

from ._support import Gate, call_tool, run, scripted_agent


def echo(prefix: str) -> Any:
    """A final step that answers ``"<prefix>: <text of the last entry>"``."""

    def step(request: agents.ModelRequest) -> str:
        return f"{prefix}: {request.entries[-1].text}"

    return step


@agents.tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def approval_pair() -> tuple[agents.Agent, agents.Agent]:
    """(root, helper): the root delegates to helper, whose ``delete`` needs approval."""
    helper = scripted_agent(
        call_tool("delete", path="a.txt"),
        echo("helper"),
        name="helper",
        description="Deletes files.",
        tools=[delete],
    )
    root = scripted_agent(
        call_tool("helper", message="delete a.txt"), echo("root"), name="root", subagents=[helper]
    )
    return root, helper


async def first_turn(session: agents.Session) -> agents.Turn:
    """The session's first turn (a subagent session has exactly one), from its log."""
    async with aclosing(session.iter_events()) as events:
        event = await events.__anext__()
    assert isinstance(event, agents.TurnStarted), event
    return session.turn(event.turn_id)


def test_a_coroutine_on_approval_on_the_root_answers_a_subagent_approval() -> None:
    seen: list[agents.OpenApproval] = []

    async def main() -> tuple[Any, list[agents.Session], asyncio.AbstractEventLoop]:
        loop = asyncio.get_running_loop()

        async def approve(callback: agents.OpenApproval) -> agents.AllowApproval:
            assert asyncio.get_running_loop() is loop
            seen.append(callback)
            return agents.AllowApproval()

        root, _ = approval_pair()
        session = await root.start_session(on_approval=approve)
        record = await session.run("go")
        return record, await session.subagents(), loop

    record, children, _ = run(main)
    assert isinstance(record, agents.Completed)
    assert record.text == "root: helper: deleted a.txt"
    (child,) = children
    assert type(child) is agents.Session
    (callback,) = seen
    assert (callback.tool_name, callback.session_id) == ("delete", child.id)


def test_turn_answer_through_the_root_settles_a_subagent_callback() -> None:
    async def main() -> None:
        root, helper = approval_pair()
        session = await root.start_session()
        record = await session.run("go")
        assert isinstance(record, agents.Blocked)
        (callback,) = record.callbacks
        (child,) = await session.subagents()
        assert callback.session_id == child.id
        turn = session.turn(record.turn_id)
        assert isinstance(await turn.answer(callback.id, agents.AllowApproval()), agents.Answered)
        final = await turn.result(after=record)
        assert isinstance(final, agents.Completed)
        assert final.text == "root: helper: deleted a.txt"
        # The subagent's own reference: read-only, and its callback is settled.
        sub = helper.session(child.id)
        with pytest.raises(agentlib.UnsupportedSessionProcedureError):
            await sub.send_message("more")
        sub_turn = await first_turn(sub)
        assert isinstance(
            await sub_turn.answer(callback.id, agents.AllowApproval()), agents.AlreadySettled
        )

    run(main)


def test_cancelling_the_root_cancels_a_running_subagent() -> None:
    async def main() -> None:
        gate = Gate()
        helper = scripted_agent(gate, name="helper")
        root = scripted_agent(
            call_tool("helper", message="wait"), echo("root"), name="root", subagents=[helper]
        )
        session = await root.start_session()
        turn = await session.start_turn("go")
        assert isinstance(turn, agents.Turn)
        await gate.reached()
        (child,) = await session.subagents()
        child_turn = await first_turn(child)
        await session.cancel()
        record = await turn.get()
        assert isinstance(record, agents.Interrupted)
        assert record.cause == "cancelled"
        child_record = await child_turn.get()
        assert isinstance(child_record, agents.Interrupted)
        assert child_record.cause == "cancelled"

    run(main)


def test_a_subagents_coroutine_tool_runs_on_the_loop_that_started_the_roots_turn() -> None:
    ran_on: list[asyncio.AbstractEventLoop] = []

    async def lookup(city: str) -> str:
        """Look the weather up."""
        ran_on.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return f"sunny in {city}"

    def says_tool_result(request: agents.ModelRequest) -> str:
        (result,) = [e for e in request.entries if isinstance(e, agents.ToolResultEntry)]
        return result.text

    helper = scripted_agent(
        call_tool("lookup", city="Oslo"),
        says_tool_result,
        name="helper",
        description="Knows the weather.",
        tools=[lookup],
    )
    root = scripted_agent(
        call_tool("helper", message="weather in Oslo?"),
        echo("root"),
        name="root",
        subagents=[helper],
    )

    async def main() -> tuple[asyncio.AbstractEventLoop, agents.TurnState[Any]]:
        session = await root.start_session()
        return asyncio.get_running_loop(), await session.run("weather?")

    loop, record = run(main)
    assert isinstance(record, agents.Completed), record
    assert record.output == "root: sunny in Oslo"
    assert ran_on == [loop]
