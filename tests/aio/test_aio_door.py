"""agentlib.aio's Agent, Session and Turn, awaited from asyncio, with the trio API's
behaviour (the seeds' "Session" and "Turn")."""

from __future__ import annotations

import asyncio
import functools
import pathlib
from typing import Any

import attrs
import pytest
import trio
from _support import in_thread

import agentlib
import agentlib.aio as agents
import agentlib_sync

from ._support import WAIT, Gate, add, call_tool, run, scripted_agent


@attrs.frozen
class Sum:
    total: int


def texts(request: agents.ModelRequest) -> list[str]:
    return [entry.text for entry in request.entries if isinstance(entry, agents.MessageEntry)]


@pytest.fixture(autouse=True)
def default_settings() -> Any:
    """Each test leaves the engine as it found it: in memory, or on ``AGENTLIB_STORE``."""
    yield
    agents.configure()


# -- starting, joining, busy --------------------------------------------------------------


def test_each_test_runs_on_the_loop_its_parameter_names(event_loop_kind: str) -> None:
    async def kind() -> str:
        return type(asyncio.get_running_loop()).__module__.partition(".")[0]

    assert run(kind) == event_loop_kind


def test_run_calls_a_plain_function_tool_then_completes_with_the_answer() -> None:
    async def main() -> agents.TurnState[Any] | agents.Busy[agents.Turn]:
        agent = scripted_agent(call_tool("add", a=1, b=2), "The answer is 3.", tools=[add])
        session = await agent.start_session()
        assert type(session) is agents.Session
        return await session.run("add 1 and 2")

    record = run(main)
    assert isinstance(record, agents.Completed)
    assert record.output == "The answer is 3."
    (call,) = record.tool_calls
    assert (call.name, call.arguments) == ("add", {"a": 1, "b": 2})


def test_send_message_starts_a_turn() -> None:
    async def main() -> None:
        session = await scripted_agent("hello").start_session()
        turn = await session.send_message("hi")
        assert type(turn) is agents.Turn
        assert turn.started is True
        assert turn.session_id == session.id
        assert isinstance(await turn.result(), agents.Completed)

    run(main)


def test_send_message_joins_the_running_turn() -> None:
    async def main() -> None:
        gate = Gate("first answer")
        seen: list[list[str]] = []

        def second_step(request: agents.ModelRequest) -> str:
            seen.append(texts(request))
            return "second answer"

        session = await scripted_agent(gate, second_step).start_session()
        first = await session.send_message("first")
        await gate.reached()

        joined = await session.send_message("second")

        assert joined.started is False
        assert joined == first
        await gate.open()
        record = await first.result()
        assert isinstance(record, agents.Completed)
        assert record.output == "second answer"
        assert seen == [["first", "first answer", "second"]]

    run(main)


def test_start_turn_returns_busy_with_a_door_turn_while_a_turn_runs() -> None:
    async def main() -> None:
        gate = Gate()
        session = await scripted_agent(gate, "next").start_session()
        running = await session.start_turn("one")
        assert isinstance(running, agents.Turn)

        busy = await session.start_turn("two")

        assert isinstance(busy, agents.Busy)
        assert type(busy.turn) is agents.Turn
        assert busy.turn == running
        assert isinstance(await busy.turn.get(), agents.Running)
        assert isinstance(await session.run("three"), agents.Busy)
        await gate.open()
        assert isinstance(await busy.turn.result(), agents.Completed)
        after = await session.start_turn("two")
        assert isinstance(after, agents.Turn)
        assert after != running
        assert isinstance(await after.result(), agents.Completed)

    run(main)


def test_the_same_keys_return_the_same_session_and_turn() -> None:
    async def main() -> None:
        agent = scripted_agent("one", "two")
        first = await agent.start_session(idempotency_key="k")
        assert await agent.start_session(idempotency_key="k") == first
        turn = await first.start_turn("hi", idempotency_key="t")
        again = await first.start_turn("hi", idempotency_key="t")
        assert again == turn

    run(main)


def echo(request: agents.ModelRequest) -> str:
    return texts(request)[-1]


def test_calls_at_once_from_two_loops_and_two_threads_each_get_their_own_answer() -> None:
    """Calls handed to the engine together cross in batches (many tasks of a loop, blocking
    calls from threads, into one engine; many answers back into each loop): every caller
    still gets its own answer, in its own loop."""
    agent = agents.Agent("echo", model=agents.FunctionModel(echo))
    sync_agent = agentlib_sync.Agent("echo", model=agentlib_sync.FunctionModel(echo))

    async def from_a_loop(name: str) -> list[str]:
        loop = asyncio.get_running_loop()

        async def one(index: int) -> str:
            session = await agent.start_session()
            record = await session.run(f"{name} {index}")
            assert asyncio.get_running_loop() is loop
            assert isinstance(record, agents.Completed)
            return str(record.output)

        return list(await asyncio.gather(*(one(index) for index in range(50))))

    def from_a_thread(name: str) -> list[str]:
        records = [sync_agent.start_session().run(f"{name} {index}") for index in range(20)]
        return [str(record.output) for record in records if isinstance(record, agents.Completed)]

    loops = {name: in_thread(run, functools.partial(from_a_loop, name)) for name in "ab"}
    threads = {name: in_thread(from_a_thread, name) for name in "cd"}
    for name, answers in loops.items():
        assert answers.result(WAIT) == [f"{name} {index}" for index in range(50)]
    for name, answers in threads.items():
        assert answers.result(WAIT) == [f"{name} {index}" for index in range(20)]


# -- a turn's record, steer, interrupt, cancel ----------------------------------------------


def test_get_reads_running_then_the_end_record_and_a_zero_timeout_returns_at_once() -> None:
    async def main() -> None:
        gate = Gate("the end")
        session = await scripted_agent(gate).start_session()
        turn = await session.start_turn("hi")
        assert isinstance(turn, agents.Turn)
        await gate.reached()

        assert isinstance(await turn.get(), agents.Running)
        assert isinstance(await turn.result(timeout=0), agents.Running)
        await gate.open()
        record = await turn.result()
        assert isinstance(record, agents.Completed)
        assert record.output == "the end"
        assert await turn.get() == record

    run(main)


def test_steer_adds_a_message_the_model_sees_at_its_next_step() -> None:
    async def main() -> None:
        gate = Gate("first answer")
        seen: list[list[str]] = []

        def second_step(request: agents.ModelRequest) -> str:
            seen.append(texts(request))
            return "steered answer"

        session = await scripted_agent(gate, second_step).start_session()
        turn = await session.start_turn("go")
        assert isinstance(turn, agents.Turn)
        await gate.reached()

        steered = await turn.steer("also this")

        assert steered == turn
        assert type(steered) is agents.Turn
        await gate.open()
        record = await turn.result()
        assert isinstance(record, agents.Completed)
        assert seen == [["go", "first answer", "also this"]]
        assert await turn.steer("too late") == agents.TurnConflict(turn_id=turn.id)

    run(main)


def test_interrupt_stops_the_running_turn_and_the_session_goes_on() -> None:
    async def main() -> None:
        gate = Gate()
        session = await scripted_agent(gate, "still here").start_session()
        turn = await session.start_turn("hi")
        assert isinstance(turn, agents.Turn)
        await gate.reached()

        assert await turn.interrupt() == turn

        record = await turn.get()
        assert isinstance(record, agents.Interrupted)
        assert record.cause == "interrupted"
        assert await turn.interrupt() == agents.TurnConflict(turn_id=turn.id)
        again = await session.run("hi again")
        assert isinstance(again, agents.Completed)
        assert again.output == "still here"

    run(main)


def test_cancel_ends_the_session_and_later_sends_raise_session_terminated() -> None:
    async def main() -> None:
        gate = Gate()
        session = await scripted_agent(gate).start_session()
        turn = await session.start_turn("hi")
        assert isinstance(turn, agents.Turn)
        await gate.reached()

        assert await session.cancel() is None

        record = await turn.get()
        assert isinstance(record, agents.Interrupted)
        assert record.cause == "cancelled"
        with pytest.raises(agentlib.SessionTerminatedError):
            await session.send_message("more")
        await session.cancel()  # idempotent
        events = [event async for event in session.iter_events()]  # the log has ended
        assert isinstance(events[-1], agents.TurnEnded)

    run(main)


# -- events -------------------------------------------------------------------------------


def test_iter_events_replays_then_follows_a_running_turn_to_its_end() -> None:
    async def main() -> None:
        gate = Gate("live")
        session = await scripted_agent("first", gate).start_session()
        first = await session.run("one")
        assert isinstance(first, agents.Completed)
        replayed = [type(event) async for event in session.turn(first.turn_id).iter_events()]
        assert replayed[0] is agents.TurnStarted
        assert replayed[-1] is agents.TurnEnded

        turn = await session.start_turn("two")
        assert isinstance(turn, agents.Turn)
        seen: list[agents.Event] = []
        async for event in session.iter_events(after=first):
            seen.append(event)
            if isinstance(event, agents.TurnStarted):
                await gate.open()
            if isinstance(event, agents.TurnEnded):
                break
        assert isinstance(seen[0], agents.TurnStarted)
        assert seen[0].turn_id == turn.id
        assert isinstance(seen[-1], agents.TurnEnded)
        assert isinstance(seen[-1].record, agents.Completed)
        assert seen[-1].record.output == "live"

    run(main)


def test_iter_events_raises_invalid_cursor_on_first_iteration() -> None:
    async def main() -> None:
        session = await scripted_agent("hi").start_session()
        events = session.iter_events(after="not a cursor")
        with pytest.raises(agentlib.InvalidCursorError):
            await events.__anext__()

    run(main)


def test_on_event_sees_every_event_with_turn_ended_last() -> None:
    async def main() -> None:
        seen: list[agents.Event] = []
        session = await scripted_agent("hello").start_session()
        record = await session.run("hi", on_event=seen.append)
        assert isinstance(record, agents.Completed)
        assert isinstance(seen[-1], agents.TurnEnded)
        assert seen[-1].record == record

    run(main)


# -- references, output types, errors -------------------------------------------------------


def test_references_from_ids_drive_the_started_session_and_equal_the_first() -> None:
    async def main() -> None:
        agent = scripted_agent("one", "two")
        session = await agent.start_session()
        record = await session.run("hi")
        again = agent.session(session.id)
        assert again == session
        assert hash(again) == hash(session)
        assert again.turn(record.turn_id) == session.turn(record.turn_id)
        assert isinstance(await again.run("hi again"), agents.Completed)

    run(main)


def test_the_output_type_structures_completed_output() -> None:
    async def main() -> None:
        session = await scripted_agent('{"total": 3}', output_type=Sum).start_session()
        record = await session.run("sum")
        assert isinstance(record, agents.Completed)
        assert record.output == Sum(total=3)

    run(main)


def test_the_door_raises_agentlibs_own_errors() -> None:
    async def main() -> None:
        agent = scripted_agent("hi")
        session = await agent.start_session()
        with pytest.raises(agentlib.TurnNotFoundError):
            await session.turn("0" * 32).get()
        with pytest.raises(agentlib.SessionNotFoundError):
            await agent.session("0" * 32).run("hi")
        with pytest.raises(agentlib.ValidationError):
            await agent.start_session(history=[{"type": "nonsense"}])
        with pytest.raises(agentlib.ValidationError):
            await session.send_message([{"type": "nope"}])

    run(main)


def test_the_trio_api_keeps_its_clear_error_under_asyncio() -> None:
    async def main() -> None:
        await agentlib.Agent("a", model=agentlib.ScriptedModel(["hi"])).start_session()

    with pytest.raises(RuntimeError, match=r"`agentlib\.aio`"):
        run(main)


# -- durable restart ------------------------------------------------------------------------


@agents.tool(requires_approval=True)
def refund(order: str) -> str:
    """Refund an order.

    Args:
        order: The order's id.
    """
    return f"refunded {order}"


def test_a_turn_blocked_on_a_durable_store_goes_on_in_the_next_engine(
    tmp_path: pathlib.Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    agents.configure(store=store)
    agent = scripted_agent(call_tool("refund", order="A-17"), "Refunded.", tools=[refund])

    async def block() -> tuple[str, agents.TurnState[Any] | agents.Busy[agents.Turn]]:
        session = await agent.start_session()
        return session.id, await session.run("Refund A-17.")

    session_id, record = run(block)
    assert isinstance(record, agents.Blocked)
    agents.configure(store=store)  # a new engine on the same file, as a restarted service

    async def resume() -> agents.TurnState[Any]:
        turn = agent.session(session_id).turn(record.turn_id)
        answered = await turn.answer(record.callbacks[0].id, agents.AllowApproval())
        assert isinstance(answered, agents.Answered)
        return await turn.result()

    final = run(resume)
    assert isinstance(final, agents.Completed)
    assert final.output == "Refunded."

    async def read() -> agentlib.TurnState[Any]:
        async with agentlib.open_runtime(store):
            reader = agentlib.Agent("scripted", model=agentlib.ScriptedModel([]))
            return await reader.session(session_id).turn(record.turn_id).get()

    agents.configure()  # the engine lets go of the file before trio reads it
    assert isinstance(trio.run(read), agents.Completed)


def test_the_door_awaited_in_trio_code_raises_a_runtime_error_naming_agentlibs_api() -> None:
    async def in_the_engine(session: agents.Session) -> None:
        await session.run("again")

    async def main() -> agents.Session:
        return await scripted_agent("hello").start_session()

    session = run(main)
    with pytest.raises(RuntimeError, match="no asyncio loop runs here"):
        trio.run(in_the_engine, session)
