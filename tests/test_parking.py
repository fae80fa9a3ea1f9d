"""A turn that only waits holds no task: blocked on callbacks (or on its subagents' turns,
which wait on theirs), it is parked, and answering, interrupting or closing the runtime goes
on with it exactly as with a turn whose task had waited.

The tasks a runtime runs are counted from trio's task tree: a parked turn adds none.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest
import trio
import trio.testing
from _support import Gate, approval_agent, call, deleter, reply, tool_results

import agentlib
from agentlib import (
    Agent,
    AllowApproval,
    Blocked,
    CallbackClosed,
    Completed,
    Credentials,
    DenyApproval,
    Depends,
    Failed,
    Interrupted,
    ModelRequest,
    OpenApproval,
    OpenSignIn,
    ScriptedModel,
    SignInAnswer,
    ToolSource,
)


def tasks() -> int:
    """How many tasks this trio run has now."""
    count = 0
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        count += 1
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)
    return count


async def settled() -> int:
    await trio.testing.wait_all_tasks_blocked()
    return tasks()


async def test_turns_blocked_on_approvals_hold_no_task_and_go_on_once_answered() -> None:
    deleted: list[str] = []
    agent = approval_agent(deleted)
    async with agentlib.open_runtime():
        before = await settled()
        sessions = [await agent.start_session() for _ in range(20)]
        records = [await session.run("delete it") for session in sessions]
        assert all(isinstance(record, Blocked) for record in records)
        assert await settled() == before
        for session, record in zip(sessions, records, strict=True):
            assert isinstance(record, Blocked)
            (callback,) = record.callbacks
            await session.turn(record.turn_id).answer(callback.id, AllowApproval())
        ended = [
            await session.turn(r.turn_id).result()
            for session, r in zip(sessions, records, strict=True)
        ]
    assert all(isinstance(record, Completed) for record in ended)
    assert [record.text for record in ended if isinstance(record, Completed)] == [
        "done: deleted /tmp/x"
    ] * 20
    assert deleted == ["/tmp/x"] * 20


async def test_a_denied_call_of_a_parked_turn_goes_back_to_the_model() -> None:
    agent = approval_agent([])
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("delete it")
        assert isinstance(record, Blocked)
        await session.turn(record.turn_id).answer(record.callbacks[0].id, DenyApproval(reason="no"))
        ended = await session.turn(record.turn_id).result()
    assert isinstance(ended, Completed)
    assert ended.text == "done: the client denied this call: no"


async def test_a_parked_turn_interrupted_ends_interrupted_with_its_callback_closed_unanswered() -> (
    None
):
    deleted: list[str] = []
    async with agentlib.open_runtime():
        before = await settled()
        session = await approval_agent(deleted).start_session()
        record = await session.run("delete it")
        assert isinstance(record, Blocked)
        turn = session.turn(record.turn_id)
        await turn.interrupt()
        ended = await turn.get()
        closed = [e async for e in turn.iter_events() if isinstance(e, CallbackClosed)]
        assert await settled() == before
    assert isinstance(ended, Interrupted)
    assert ended.cause == "interrupted"
    assert [event.answered for event in closed] == [False]
    assert deleted == []


async def test_a_parked_turn_is_cancelled_with_its_session() -> None:
    async with agentlib.open_runtime():
        session = await approval_agent([]).start_session()
        record = await session.run("delete it")
        assert isinstance(record, Blocked)
        await session.cancel()
        ended = await session.turn(record.turn_id).get()
    assert isinstance(ended, Interrupted)
    assert ended.cause == "cancelled"


async def test_a_turn_waiting_on_an_approval_keeps_its_task_while_another_call_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = Gate()
    deleted: list[str] = []
    recorded: list[ModelRequest] = []

    def answer(request: ModelRequest) -> str:
        recorded.append(request)
        return "both done"

    agent = Agent(
        "both",
        model=ScriptedModel([reply(call("delete", path="a"), call("hold")), answer]),
        tools=[deleter(deleted), gate.tool],
    )
    async with agentlib.open_runtime():
        before = await settled()
        session = await agent.start_session()
        record = await session.run("go")
        assert isinstance(record, Blocked)  # at once: the held call still runs
        await gate.reached.wait()
        assert await settled() > before  # the turn's task runs the held call
        gate.opened.set()
        assert await settled() == before  # done: only the approval is left
        turn = session.turn(record.turn_id)
        await turn.answer(record.callbacks[0].id, AllowApproval())
        ended = await turn.result()
    assert isinstance(ended, Completed)
    assert [result.text for result in tool_results(recorded[0])] == ["deleted a", "opened"]


async def test_a_parent_turn_parks_while_its_subagents_turn_is_blocked() -> None:
    deleted: list[str] = []
    child = approval_agent(deleted)
    parent = Agent(
        "parent",
        model=ScriptedModel([reply(call("approver", message="delete it")), "delegated"]),
        subagents=[child],
    )
    async with agentlib.open_runtime():
        before = await settled()
        session = await parent.start_session()
        record = await session.run("go")
        assert isinstance(record, Blocked)
        assert await settled() == before
        (callback,) = record.callbacks
        assert isinstance(callback, OpenApproval)
        assert callback.session_id != session.id
        await session.turn(record.turn_id).answer(callback.id, AllowApproval())
        ended = await session.turn(record.turn_id).result()
    assert isinstance(ended, Completed)
    assert ended.text == "delegated"
    assert deleted == ["/tmp/x"]


async def test_a_parked_sign_in_gives_the_tool_its_credentials_once_answered() -> None:
    seen: list[Credentials] = []

    async def search(query: str, creds: Annotated[Credentials, Depends()]) -> str:
        """Search the workspace."""
        seen.append(creds)
        return f"found {query}"

    notion = ToolSource(name="notion", tools=[search], requires_sign_in=True)
    agent = Agent(
        "signer", model=ScriptedModel([reply(call("notion.search", query="q")), "ok"]),
        tools=[notion],
    )  # fmt: skip
    async with agentlib.open_runtime():
        before = await settled()
        session = await agent.start_session()
        record = await session.run("search")
        assert isinstance(record, Blocked)
        assert await settled() == before
        (callback,) = record.callbacks
        assert isinstance(callback, OpenSignIn)
        answer = SignInAnswer(credentials={"notion": "token"})
        await session.turn(record.turn_id).answer(callback.id, answer)
        ended = await session.turn(record.turn_id).result()
    assert isinstance(ended, Completed)
    assert [(creds.source, creds.value) for creds in seen] == [("notion", "token")]


async def test_a_failing_call_fails_the_turn_and_closes_the_other_calls_approval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def fail() -> str:
        """Fail after a while."""
        await trio.sleep(1)
        raise ValueError("broken")

    agent = Agent(
        "raiser",
        model=ScriptedModel([reply(call("delete", path="a"), call("fail")), "never"]),
        tools=[deleter([]), agentlib.tool(fail)],
        tool_errors="raise",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.start_turn("go")
        ended = await turn.result(after=await turn.result())
        closed = [e async for e in turn.iter_events() if isinstance(e, CallbackClosed)]
    assert isinstance(ended, Failed)
    assert ended.error.type == "ValueError"
    assert [event.answered for event in closed] == [False]


@pytest.mark.parametrize("answers", [1, 2])
async def test_two_approvals_of_one_step_each_answered_resume_the_parked_turn(
    answers: int,
) -> None:
    deleted: list[str] = []
    agent = Agent(
        "approver",
        model=ScriptedModel([reply(call("delete", path="a"), call("delete", path="b")), "ok"]),
        tools=[deleter(deleted)],
    )
    async with agentlib.open_runtime():
        before = await settled()
        session = await agent.start_session()
        turn = await session.start_turn("go")
        assert await settled() == before  # parked on both approvals
        record = await turn.get()
        assert isinstance(record, Blocked)
        first, second = sorted(record.callbacks, key=lambda c: c.arguments["path"])
        await turn.answer(first.id, AllowApproval())
        if answers == 1:
            assert await settled() == before  # parked again, on the second
            assert deleted == ["a"]
            again = await turn.get()
            assert isinstance(again, Blocked)
            assert [callback.id for callback in again.callbacks] == [second.id]
        await turn.answer(second.id, AllowApproval())
        ended = await turn.result()
    assert isinstance(ended, Completed)
    assert sorted(deleted) == ["a", "b"]


async def test_a_runtime_closing_leaves_a_parked_turn_blocked_for_the_next(
    tmp_path: Any,
) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    deleted: list[str] = []
    agent = approval_agent(deleted)
    async with agentlib.open_runtime(url):
        session = await agent.start_session()
        record = await session.run("delete it")
        assert isinstance(record, Blocked)
    async with agentlib.open_runtime(url):
        again = agent.session(session.id)
        turn = again.turn(record.turn_id)
        assert isinstance(await turn.get(), Blocked)
        await turn.answer(record.callbacks[0].id, AllowApproval())
        ended = await turn.result()
    assert isinstance(ended, Completed)
    assert deleted == ["/tmp/x"]
