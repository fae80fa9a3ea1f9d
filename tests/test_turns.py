"""Turns: get, result, steer, interrupt and the cursor of records (SPEC 3)."""

from __future__ import annotations

import attrs
import pytest
import trio
from _support import HOLD, Gate, Recorder, held_agent, held_turn, user_texts

import agentlib
from agentlib import (
    Agent,
    Completed,
    Interrupted,
    ModelReply,
    ModelRequest,
    Running,
    ScriptedModel,
    ToolCallRequest,
    Turn,
    TurnConflict,
)

# Each test runs on a local runtime and on agents served over HTTP (conftest's transport).
pytestmark = pytest.mark.usefixtures("transport")


@attrs.frozen
class Verdict:
    ok: bool
    reason: str


async def last_event_id(session: agentlib.Session) -> str:
    """The id of the session's last event so far (reads until the reader has to wait)."""
    ids: list[str] = []

    async def read() -> None:
        async for event in session.iter_events():
            ids.append(event.id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    return ids[-1]


# --- get ----------------------------------------------------------------------------------


async def test_get_of_a_running_turn_returns_running_at_once() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        turn = await held_turn(session, gate)
        record = await turn.get()
        gate.opened.set()
    assert record == Running(turn_id=turn.id, session_id=session.id, cursor=record.cursor)


async def test_get_of_an_ended_turn_returns_its_end_record() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("hello")
        await turn.result()
        record = await turn.get()
    assert isinstance(record, Completed)
    assert (record.turn_id, record.session_id, record.output) == (turn.id, session.id, "hi")


async def test_get_of_an_unknown_turn_raises_turn_not_found() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with pytest.raises(agentlib.TurnNotFoundError, match="no-such-turn"):
            await session.turn("no-such-turn").get()


async def test_get_never_raises_turn_not_found_for_busy_turn() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        await held_turn(session, gate)
        busy = await session.start_turn("other")
        assert isinstance(busy, agentlib.Busy)
        assert isinstance(await busy.turn.get(), Running)
        gate.opened.set()


async def test_get_structures_the_output_with_the_agents_output_type() -> None:
    agent = Agent("a", model=ScriptedModel(['{"ok": true, "reason": "r"}']), output_type=Verdict)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("judge")
        await turn.result()
        record = await turn.get()
    assert isinstance(record, Completed)
    assert record.output == Verdict(ok=True, reason="r")


# --- result -------------------------------------------------------------------------------


async def test_result_waits_for_the_end_record() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        turn = await held_turn(session, gate)
        opened_while_waiting: list[bool] = []

        async def open_once_everyone_waits() -> None:
            await trio.testing.wait_all_tasks_blocked()
            opened_while_waiting.append(True)
            gate.opened.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(open_once_everyone_waits)
            record = await turn.result()
    assert opened_while_waiting == [True]
    assert isinstance(record, Completed)
    assert record.text == "done"


async def test_result_of_an_unknown_turn_raises_turn_not_found() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with pytest.raises(agentlib.TurnNotFoundError):
            await session.turn("no-such-turn").result()


async def test_result_with_a_timeout_returns_running_at_the_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        turn = await held_turn(session, gate)
        start = trio.current_time()
        record = await turn.result(timeout=30)
        waited = trio.current_time() - start
        gate.opened.set()
    assert isinstance(record, Running)
    assert record.turn_id == turn.id
    assert waited == pytest.approx(30)


async def test_a_turn_keeps_running_after_a_result_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        turn = await held_turn(session, gate)
        await turn.result(timeout=30)
        assert isinstance(await turn.get(), Running)
        gate.opened.set()
        record = await turn.result()
    assert isinstance(record, Completed)


async def test_cancelling_a_result_wait_leaves_the_turn_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        turn = await held_turn(session, gate)
        with trio.move_on_after(30):
            await turn.result()
        state = await turn.get()
        gate.opened.set()
        record = await turn.result()
    assert isinstance(state, Running)
    assert isinstance(record, Completed)


async def test_result_of_a_turn_ending_before_the_timeout_returns_its_record(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("hello")
        record = await turn.result(timeout=30)
        assert trio.current_time() == 0
    assert isinstance(record, Completed)


async def test_result_after_the_previous_turns_record_returns_this_turns_record() -> None:
    agent = Agent("a", model=ScriptedModel(["first", "second"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        previous = await session.run("one")
        turn = await session.send_message("two")
        record = await turn.result(after=previous)  # type: ignore[arg-type]
    assert isinstance(record, Completed)
    assert (record.turn_id, record.text) == (turn.id, "second")


async def test_result_after_a_cursor_read_before_the_turn_returns_its_record() -> None:
    agent = Agent("a", model=ScriptedModel(["first", "second"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        previous = await session.run("one")
        assert previous.cursor is not None  # type: ignore[union-attr]
        turn = await session.send_message("two")
        record = await turn.result(after=previous.cursor)  # type: ignore[union-attr]
    assert isinstance(record, Completed)
    assert record.turn_id == turn.id


async def test_result_after_a_record_of_another_session_raises_invalid_cursor() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        other = await (await agent.start_session()).run("hello")
        session = await agent.start_session()
        turn = await session.send_message("hello")
        with pytest.raises(agentlib.InvalidCursorError):
            await turn.result(after=other)  # type: ignore[arg-type]


async def test_result_of_an_ended_turn_returns_its_record_at_once() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("hello")
        first = await turn.result()
        again = await turn.result()
    assert again == first


async def test_result_with_an_output_type_structures_the_answer() -> None:
    agent = Agent("a", model=ScriptedModel(['{"ok": true, "reason": "r"}']))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("judge")
        record = await turn.result(output_type=Verdict)
    assert isinstance(record, Completed)
    assert record.output == Verdict(ok=True, reason="r")


# --- steer --------------------------------------------------------------------------------


async def test_steer_adds_a_message_the_model_sees_at_its_next_step() -> None:
    gate, recorder = Gate(), Recorder()
    async with agentlib.open_runtime():
        session = await held_agent(gate, recorder).start_session()
        turn = await held_turn(session, gate, "first")
        await turn.steer("actually, do this")
        gate.opened.set()
        await turn.result()
    assert user_texts(recorder.requests[0]) == ["first", "actually, do this"]


async def test_steer_on_the_running_turn_returns_the_turn() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        turn = await held_turn(session, gate)
        steered = await turn.steer("more")
        gate.opened.set()
    assert steered == turn


async def test_steer_on_an_ended_turn_returns_turn_conflict() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("hello")
        await turn.result()
        answer = await turn.steer("too late")
    assert answer == TurnConflict(turn_id=turn.id)


async def test_steer_on_an_ended_turn_adds_nothing() -> None:
    recorder = Recorder()
    agent = Agent("a", model=ScriptedModel(["hi", recorder]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("one")
        await turn.result()
        await turn.steer("too late")
        await session.run("two")
    assert user_texts(recorder.requests[0]) == ["one", "two"]


async def test_a_message_steered_during_the_final_step_gets_another_step() -> None:
    seen: list[list[str]] = []
    steering: list[Turn] = []

    known = trio.Event()  # the test has its turn: the step may steer it

    async def answer(request: ModelRequest) -> str:
        seen.append(user_texts(request))
        if len(seen) == 1:
            await known.wait()
            await steering[0].steer("wait, one more thing")
        return f"answer {len(seen)}"

    agent = Agent("a", model=ScriptedModel([answer, answer]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("first")
        steering.append(turn)
        known.set()
        record = await turn.result()
    assert isinstance(record, Completed)
    assert record.text == "answer 2"
    assert seen == [["first"], ["first", "wait, one more thing"]]


# --- interrupt ----------------------------------------------------------------------------


async def test_interrupt_stops_the_turn_as_interrupted() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        turn = await held_turn(session, gate)
        answer = await turn.interrupt()
        record = await turn.get()
    assert answer == turn
    assert isinstance(record, Interrupted)
    assert record.cause == "interrupted"


async def test_interrupt_returns_once_the_turn_has_ended() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        turn = await held_turn(session, gate)
        await turn.interrupt()
        assert not isinstance(await turn.get(), Running)


async def test_the_session_takes_new_turns_after_an_interrupt() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "after").start_session()
        turn = await held_turn(session, gate)
        await turn.interrupt()
        record = await session.run("again")
    assert isinstance(record, Completed)
    assert record.text == "after"


async def test_interrupt_on_an_ended_turn_returns_turn_conflict() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("hello")
        record = await turn.result()
        answer = await turn.interrupt()
        assert await turn.get() == record
    assert answer == TurnConflict(turn_id=turn.id)


async def test_interrupt_on_an_earlier_turn_leaves_the_active_turn_running() -> None:
    gate = Gate()
    agent = Agent("a", model=ScriptedModel(["hi", HOLD, "done"]), tools=[gate.tool])
    async with agentlib.open_runtime():
        session = await agent.start_session()
        earlier = await session.send_message("one")
        await earlier.result()
        active = await held_turn(session, gate, "two")
        answer = await earlier.interrupt()
        state = await active.get()
        gate.opened.set()
    assert answer == TurnConflict(turn_id=earlier.id)
    assert isinstance(state, Running)


async def test_interrupt_of_a_sync_tool_does_not_wait_for_its_thread() -> None:
    import threading

    in_tool, finish, returned = threading.Event(), threading.Event(), threading.Event()

    def block() -> str:
        """Block until told."""
        in_tool.set()
        finish.wait(30)  # only an interrupt that waits for this thread sees it give up
        returned.set()
        return "late"

    agent = Agent(
        "a",
        model=ScriptedModel([ModelReply(tool_calls=[ToolCallRequest(name="block")])]),
        tools=[block],
    )
    try:
        async with agentlib.open_runtime():
            session = await agent.start_session()
            turn = await session.send_message("go")
            assert await trio.to_thread.run_sync(in_tool.wait, 30)
            await turn.interrupt()
            record = await turn.get()
            assert not returned.is_set()  # the turn ended while its tool's thread still blocks
    finally:
        finish.set()
    assert isinstance(record, Interrupted)


# --- cursors ------------------------------------------------------------------------------


async def test_a_running_record_carries_the_sessions_last_event_id() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        turn = await held_turn(session, gate)
        record = await turn.get()
        last = await last_event_id(session)
        gate.opened.set()
    assert record.cursor == last


async def test_an_end_record_read_later_carries_the_sessions_last_event_id_then() -> None:
    agent = Agent("a", model=ScriptedModel(["hi", "again"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        first = await session.send_message("one")
        await first.result()
        await session.run("two")
        record = await first.get()
        last = await last_event_id(session)
    assert record.cursor == last


async def test_the_record_result_returns_carries_the_sessions_last_event_id() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("hello")
        record = await turn.result()
        last = await last_event_id(session)
    assert record.cursor == last


async def test_the_record_run_returns_carries_the_sessions_last_event_id() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("hello")
        last = await last_event_id(session)
    assert record.cursor == last  # type: ignore[union-attr]


async def test_an_interrupted_tool_call_still_gets_a_result_in_the_history() -> None:
    release = trio.Event()

    async def wait_forever() -> str:
        """Wait."""
        await release.wait()
        return "never"

    seen: list[agentlib.ModelRequest] = []

    def answer(request: agentlib.ModelRequest) -> str:
        seen.append(request)
        return "ok"

    agent = agentlib.Agent(
        name="stuck",
        model=agentlib.ScriptedModel(
            [
                agentlib.ModelReply(
                    tool_calls=[agentlib.ToolCallRequest(name="wait_forever", arguments={})]
                ),
                answer,
            ]
        ),
        tools=[wait_forever],
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.start_turn("go")
        assert isinstance(turn, agentlib.Turn)
        await trio.testing.wait_all_tasks_blocked()
        await turn.interrupt()
        await session.run("again")
    calls = [e for e in seen[0].entries if isinstance(e, agentlib.ToolCallEntry)]
    results = [e for e in seen[0].entries if isinstance(e, agentlib.ToolResultEntry)]
    assert [c.tool_call_id for c in calls] == [r.tool_call_id for r in results]
    assert results[0].is_error


# --- the step limit (issue 12, 9a) -------------------------------------------------------


def looping_agent(calls: list[int], **options: object) -> Agent:
    """An agent whose model calls ``ping`` at every step and never answers."""

    def ping() -> str:
        """Ping."""
        calls.append(1)
        return "pong"

    requests: list[ModelRequest] = []

    def again(request: ModelRequest) -> ModelReply:
        requests.append(request)
        return ModelReply(tool_calls=[ToolCallRequest(name="ping")])

    agent = Agent("looper", model=agentlib.FunctionModel(again), tools=[ping], **options)  # type: ignore[arg-type]
    agent.requests = requests  # type: ignore[attr-defined]
    return agent


async def test_a_turn_ends_failed_once_it_reaches_its_agents_step_limit() -> None:
    calls: list[int] = []
    agent = looping_agent(calls, max_steps=3)
    async with agentlib.open_runtime():
        with trio.fail_after(30):  # only a turn that never ends reaches it
            record = await (await agent.start_session()).run("go")
    assert isinstance(record, agentlib.Failed), record
    assert record.error.type == "MaxStepsExceeded"
    assert "3 model steps" in record.error.message
    assert "max_steps" in record.error.message
    assert [request.step for request in agent.requests] == [1, 2, 3]  # type: ignore[attr-defined]
    assert len(calls) == 3  # the calls of the last step ran; no fourth request was sent


async def test_the_default_step_limit_is_25() -> None:
    calls: list[int] = []
    agent = looping_agent(calls)
    assert agent.max_steps == 25
    async with agentlib.open_runtime():
        with trio.fail_after(30):
            record = await (await agent.start_session()).run("go")
    assert isinstance(record, agentlib.Failed), record
    assert len(agent.requests) == 25  # type: ignore[attr-defined]


async def test_a_turn_takes_its_own_step_limit() -> None:
    calls: list[int] = []
    agent = looping_agent(calls, max_steps=3)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with trio.fail_after(30):
            first = await session.run("go", max_steps=1)
            turn = await session.start_turn("again", max_steps=2)
            assert isinstance(turn, Turn)
            second = await turn.result()
    assert isinstance(first, agentlib.Failed)
    assert "1 model step" in first.error.message
    assert isinstance(second, agentlib.Failed)
    assert "2 model steps" in second.error.message
    assert [request.step for request in agent.requests] == [1, 1, 2]  # type: ignore[attr-defined]


async def test_a_turn_that_answers_within_its_step_limit_completes() -> None:
    gate = Gate()
    agent = held_agent(gate, "done", max_steps=2)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await held_turn(session, gate)
        gate.opened.set()
        record = await turn.result()
    assert isinstance(record, Completed), record


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3"])
def test_a_step_limit_that_is_not_a_positive_int_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="max_steps"):
        Agent("a", model=ScriptedModel(["hi"]), max_steps=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, True, "3"])
async def test_a_turns_step_limit_that_is_not_a_positive_int_is_refused(bad: object) -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with pytest.raises(ValueError, match="max_steps"):
            await session.run("go", max_steps=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="max_steps"):
            await session.start_turn("go", max_steps=bad)  # type: ignore[arg-type]
        assert isinstance(await session.run("go"), Completed)  # nothing was started
