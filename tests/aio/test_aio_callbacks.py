"""Handlers given to agentlib.aio run on the caller's loop: coroutine functions as tasks of
that loop, plain functions called there; their answers and exceptions follow the seeds'
rules, as in the trio API (SPEC section 4)."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Any

import pytest

import agentlib.aio as agents

from ._support import call_tool, run, scripted_agent


class Deletions:
    """A tool, ``delete``, that requires approval and records the paths it deleted."""

    def __init__(self) -> None:
        self.deleted: list[str] = []

        @agents.tool(requires_approval=True)
        def delete(path: str) -> str:
            """Delete a file."""
            self.deleted.append(path)
            return f"deleted {path}"

        self.tool = delete


def approval_agent(deletions: Deletions, **options: Any) -> agents.Agent:
    return scripted_agent(
        call_tool("delete", path="a.txt"), "deleted it", tools=[deletions.tool], **options
    )


@agents.client_tool
def pick(prompt: str) -> int:
    """Ask the user to pick a number."""
    ...


def picking_agent(**options: Any) -> agents.Agent:
    def answer(request: agents.ModelRequest) -> str:
        (result,) = [e for e in request.entries if isinstance(e, agents.ToolResultEntry)]
        return f"picked {result.structured_content}"

    return scripted_agent(
        call_tool("client.pick", prompt="a number?"), answer, tools=[pick], **options
    )


class Where:
    """Where a handler ran: its thread and its running loop, if any."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.loops: list[asyncio.AbstractEventLoop | None] = []

    def note(self) -> None:
        self.threads.append(threading.current_thread())
        try:
            self.loops.append(asyncio.get_running_loop())
        except RuntimeError:
            self.loops.append(None)


def test_a_coroutine_on_approval_runs_on_the_callers_loop_and_run_completes() -> None:
    deletions, where = Deletions(), Where()

    async def approve(callback: agents.OpenApproval) -> agents.AllowApproval:
        where.note()
        await asyncio.sleep(0)  # an asyncio await: this is the caller's loop
        assert callback.tool_name == "delete"
        return agents.AllowApproval()

    async def main() -> tuple[Any, asyncio.AbstractEventLoop]:
        session = await approval_agent(deletions).start_session(on_approval=approve)
        return await session.run("delete a.txt"), asyncio.get_running_loop()

    record, loop = run(main)
    assert isinstance(record, agents.Completed)
    assert deletions.deleted == ["a.txt"]
    assert where.threads == [threading.main_thread()]
    assert where.loops == [loop]


def test_a_plain_on_approval_is_called_on_the_callers_loop() -> None:
    deletions, where = Deletions(), Where()

    def approve(callback: agents.OpenApproval) -> agents.AllowApproval:
        where.note()
        return agents.AllowApproval()

    async def main() -> tuple[Any, asyncio.AbstractEventLoop]:
        session = await approval_agent(deletions).start_session(on_approval=approve)
        return await session.run("delete a.txt"), asyncio.get_running_loop()

    record, loop = run(main)
    assert isinstance(record, agents.Completed)
    assert where.loops == [loop]


def test_a_handler_may_await_the_door_while_the_engine_waits_for_it() -> None:
    deletions = Deletions()
    states: list[Any] = []

    async def main() -> Any:
        agent = approval_agent(deletions)

        async def approve(callback: agents.OpenApproval) -> agents.AllowApproval:
            states.append(await agent.session(callback.session_id).turn(callback.turn_id).get())
            return agents.AllowApproval()

        session = await agent.start_session(on_approval=approve)
        return await session.run("delete a.txt")

    assert isinstance(run(main), agents.Completed)
    (state,) = states
    assert isinstance(state, agents.Blocked)


def test_a_handlers_exception_reaches_the_caller_and_the_turn_goes_on() -> None:
    deletions = Deletions()

    async def approve(callback: agents.OpenApproval) -> agents.AllowApproval:
        raise LookupError("no policy for delete")

    async def main() -> None:
        session = await approval_agent(deletions).start_session(on_approval=approve)
        with pytest.raises(LookupError, match="no policy for delete"):
            await session.run("delete a.txt")
        # The callback stays open: a reference without handlers sees it, and answers it.
        plain = approval_agent(deletions).session(session.id)
        (turn_id,) = {callback.turn_id for callback in await blocked_callbacks(plain)}
        record = await plain.turn(turn_id).result()
        assert isinstance(record, agents.Blocked)
        answered = await plain.turn(turn_id).answer(record.callbacks[0].id, agents.AllowApproval())
        assert isinstance(answered, agents.Answered)
        assert isinstance(await plain.turn(turn_id).result(after=record), agents.Completed)

    run(main)
    assert deletions.deleted == ["a.txt"]


async def blocked_callbacks(session: agents.Session) -> tuple[agents.Callback, ...]:
    async for event in session.iter_events():
        if isinstance(event, agents.CallbackOpened):
            return (event.callback,)
    raise AssertionError("no callback opened")


def test_keep_callback_open_makes_run_return_blocked() -> None:
    async def keep(callback: agents.OpenApproval) -> agents.KeepCallbackOpen:
        return agents.KeepCallbackOpen()

    async def main() -> Any:
        session = await approval_agent(Deletions()).start_session(on_approval=keep)
        return await session.run("delete a.txt")

    record = run(main)
    assert isinstance(record, agents.Blocked)
    (callback,) = record.callbacks
    assert isinstance(callback, agents.OpenApproval)


def test_a_coroutine_on_client_tool_returns_the_result_the_model_sees() -> None:
    where = Where()

    async def on_pick(call: agents.OpenClientToolCall) -> int:
        where.note()
        await asyncio.sleep(0)
        assert call.arguments == {"prompt": "a number?"}
        return 7

    async def main() -> Any:
        session = await picking_agent().start_session(on_client_tool=on_pick)
        return await session.run("pick one")

    record = run(main)
    assert isinstance(record, agents.Completed)
    assert record.output == "picked 7"
    assert where.threads == [threading.main_thread()]


def test_a_raising_on_client_tool_with_tool_errors_raise_reaches_the_caller() -> None:
    async def on_pick(call: agents.OpenClientToolCall) -> int:
        raise ValueError("the user closed the dialog")

    async def main() -> None:
        agent = picking_agent(tool_errors="raise")
        session = await agent.start_session(on_client_tool=on_pick)
        with pytest.raises(ValueError, match="closed the dialog"):
            await session.run("pick one")

    run(main)


def test_a_coroutine_on_event_runs_on_the_callers_loop() -> None:
    where = Where()
    seen: list[agents.Event] = []

    async def on_event(event: agents.Event) -> None:
        where.note()
        seen.append(event)

    async def main() -> tuple[Any, asyncio.AbstractEventLoop]:
        session = await scripted_agent("hello").start_session()
        return await session.run("hi", on_event=on_event), asyncio.get_running_loop()

    record, loop = run(main)
    assert isinstance(seen[-1], agents.TurnEnded)
    assert seen[-1].record == record
    assert set(where.loops) == {loop}


def test_turn_answer_settles_the_approval_then_result_after_completes() -> None:
    async def main() -> None:
        session = await approval_agent(Deletions()).start_session()
        record = await session.run("delete a.txt")
        assert isinstance(record, agents.Blocked)
        turn = session.turn(record.turn_id)
        answer = agents.AllowApproval()
        assert await turn.answer(record.callbacks[0].id, answer) == agents.Answered(
            answer=answer, session_id=session.id
        )
        assert isinstance(await turn.result(after=record), agents.Completed)
        assert isinstance(await turn.answer(record.callbacks[0].id, answer), agents.AlreadySettled)
        with pytest.raises(ValueError, match="UUID"):
            await turn.answer("not-a-uuid", answer)

    run(main)


def test_handlers_are_given_inside_a_running_loop() -> None:
    agent = approval_agent(Deletions())
    with pytest.raises(RuntimeError, match="running asyncio loop"):
        agent.session("0" * 32, on_approval=lambda callback: agents.AllowApproval())


def test_a_coroutine_on_sign_in_answers_on_the_callers_loop_and_the_tool_gets_credentials() -> None:
    seen: list[agents.Credentials] = []
    where = Where()

    async def search(query: str, creds: Annotated[agents.Credentials, agents.Depends()]) -> str:
        """Search the workspace."""
        seen.append(creds)
        return f"found {query}"

    notion = agents.ToolSource(name="notion", tools=[search], requires_sign_in=True)

    async def sign_in(callback: agents.OpenSignIn) -> agents.SignInAnswer:
        where.note()
        await asyncio.sleep(0)
        assert callback.sources == ("notion",)
        return agents.SignInAnswer(credentials={"notion": "token-of-bob"})

    async def main() -> tuple[Any, asyncio.AbstractEventLoop]:
        agent = scripted_agent(call_tool("notion.search", query="q"), "ok", tools=[notion])
        session = await agent.start_session(on_sign_in=sign_in)
        return await session.run("search"), asyncio.get_running_loop()

    record, loop = run(main)
    assert isinstance(record, agents.Completed)
    assert where.loops == [loop]
    (creds,) = seen
    assert (creds.source, creds.value) == ("notion", "token-of-bob")
