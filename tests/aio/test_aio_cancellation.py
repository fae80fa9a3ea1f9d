"""Cancellation as asyncio users expect it: a cancelled wait stops (the turn goes on), a
timeout is a cancellation, and a loop that closes with waits outstanding leaves nothing of
them behind, neither in the engine nor on threads."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import weakref
from contextlib import aclosing
from typing import Any

import anyio
import pytest
import trio

import agentlib.aio as agents

from ._support import WAIT, Gate, call_tool, calls_in_engine, run, scripted_agent


async def running_turn(gate: Gate, *then: Any) -> tuple[agents.Session, agents.Turn]:
    session = await scripted_agent(gate, *then).start_session()
    turn = await session.start_turn("a long job")
    assert isinstance(turn, agents.Turn)
    await gate.reached()
    return session, turn


def test_cancelling_a_task_that_awaits_result_stops_the_wait_and_the_turn_goes_on() -> None:
    async def main() -> None:
        gate = Gate("done at last")
        _, turn = await running_turn(gate)
        waiting = asyncio.ensure_future(turn.result())
        await asyncio.sleep(0)  # the wait has started
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert isinstance(await turn.get(), agents.Running)
        await gate.open()
        record = await turn.result()
        assert isinstance(record, agents.Completed)
        assert record.output == "done at last"

    run(main)
    assert calls_in_engine() == 0


def test_wait_for_times_out_a_wait_and_the_turn_goes_on() -> None:
    async def main() -> None:
        gate = Gate()
        _, turn = await running_turn(gate)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(turn.result(), 0.01)  # the turn is parked: it expires
        assert isinstance(await turn.get(), agents.Running)
        await gate.open()
        assert isinstance(await turn.result(), agents.Completed)

    run(main)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is Python 3.11's")
def test_asyncio_timeout_times_out_a_wait_and_the_turn_goes_on() -> None:
    async def main() -> None:
        gate = Gate()
        session, turn = await running_turn(gate)

        async def wait_briefly() -> None:
            async with asyncio.timeout(0.01):  # type: ignore[attr-defined,unused-ignore]
                assert isinstance(await session.run("again"), agents.Busy)  # at once...
                await turn.result()  # ... then the parked turn's wait expires

        with pytest.raises(TimeoutError):
            await wait_briefly()
        assert isinstance(await turn.get(), agents.Running)
        await gate.open()
        assert isinstance(await turn.result(), agents.Completed)

    run(main)


def test_cancelling_a_task_that_iterates_events_stops_it_and_closes_the_iterator() -> None:
    async def main() -> None:
        gate = Gate()
        _, turn = await running_turn(gate)
        seen: list[agents.Event] = []
        first = asyncio.Event()

        async def follow() -> None:
            async with aclosing(turn.iter_events()) as events:
                async for event in events:
                    seen.append(event)
                    first.set()

        following = asyncio.ensure_future(follow())
        await first.wait()
        following.cancel()
        with pytest.raises(asyncio.CancelledError):
            await following
        assert isinstance(seen[0], agents.TurnStarted)
        assert isinstance(await turn.get(), agents.Running)
        await gate.open()
        assert isinstance(await turn.result(), agents.Completed)

    run(main)
    assert calls_in_engine() == 0


def test_a_loop_closed_with_waits_outstanding_leaves_no_call_or_thread_behind() -> None:
    threads_before = set(threading.enumerate())
    gate_of: list[Gate] = []
    turn_of: list[agents.Turn] = []

    async def main() -> None:
        gate = Gate("finished later")
        _, turn = await running_turn(gate)
        gate_of.append(gate)
        turn_of.append(turn)
        # Left waiting when main returns: asyncio.run cancels them as it closes the loop.
        left = [asyncio.ensure_future(turn.result()) for _ in range(3)]
        left.append(asyncio.ensure_future(consume(turn.iter_events())))
        await asyncio.sleep(0)
        assert not any(task.done() for task in left)

    async def consume(events: Any) -> None:
        async for _ in events:
            pass

    asyncio.run(main())
    assert calls_in_engine() == 0
    assert set(threading.enumerate()) - threads_before <= {engine_thread()}

    async def finish() -> agents.TurnState[Any]:  # the turn went on: a new loop ends it
        gate = gate_of[0]
        gate._loop = asyncio.get_running_loop()
        assert gate._token is not None
        gate._token.run_sync_soon(gate._release.set)
        return await turn_of[0].result()

    record = run(finish)
    assert isinstance(record, agents.Completed)
    assert record.output == "finished later"


def test_a_closed_loop_is_freed_whatever_it_awaited_of_the_door() -> None:
    """The door keeps nothing of a loop once it has closed: neither the first, which waited
    for the engine to start (when no test before started it), nor one closed with waits
    outstanding."""
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def forever(request: agents.ModelRequest) -> str:
        await trio.sleep_forever()  # in the engine: it holds nothing of the loop
        raise AssertionError("unreachable")

    parked: list[agents.Session] = []

    async def main() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        session = await scripted_agent("hello").start_session()
        assert isinstance(await session.run("hi"), agents.Completed)
        parked.append(
            await agents.Agent("parked", model=agents.FunctionModel(forever)).start_session()
        )
        turn = await parked[-1].start_turn("wait")
        assert isinstance(turn, agents.Turn)
        # Left waiting when main returns: asyncio.run cancels them as it closes the loop.
        left = [asyncio.ensure_future(turn.result()) for _ in range(2)]
        await asyncio.sleep(0)
        assert not any(task.done() for task in left)

    for _ in range(3):
        asyncio.run(main())
    gc.collect()
    assert [loop() for loop in loops] == [None, None, None]

    async def cancel_parked() -> None:
        for session in parked:
            await session.cancel()

    run(cancel_parked)


def test_a_loop_closed_while_a_handler_runs_leaves_no_call_behind() -> None:
    @agents.tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    ran: list[agents.OpenApproval] = []

    async def main() -> None:
        started = asyncio.Event()

        async def never(callback: agents.OpenApproval) -> agents.AllowApproval:
            ran.append(callback)
            started.set()
            await asyncio.Event().wait()  # until its loop closes
            raise AssertionError("unreachable")

        agent = scripted_agent(call_tool("delete", path="a.txt"), "deleted", tools=[delete])
        session = await agent.start_session(on_approval=never)
        waiting = asyncio.ensure_future(session.run("delete a.txt"))
        await started.wait()
        assert not waiting.done()

    asyncio.run(main())
    assert len(ran) == 1
    assert calls_in_engine() == 0


# -- anyio's cancel scopes ------------------------------------------------------------------
# Starlette and FastAPI cancel a request's work with anyio's cancel scopes, which cancel a task
# again at each pass of the loop until it leaves the scope: a cancelled call must still wait
# for the engine to end its work, and a cancelled iterator for the engine to close it.


def test_an_anyio_cancel_scope_stops_a_wait_and_the_engine_ended_its_call_on_leaving() -> None:
    async def main() -> None:
        gate = Gate("done at last")
        _, turn = await running_turn(gate)
        with anyio.CancelScope() as scope:
            asyncio.get_running_loop().call_soon(scope.cancel)  # once the wait has started
            await turn.result()
        assert scope.cancelled_caught
        assert calls_in_engine() == 0
        assert isinstance(await turn.get(), agents.Running)
        await gate.open()
        record = await turn.result()
        assert isinstance(record, agents.Completed)
        assert record.output == "done at last"

    run(main)


def test_an_anyio_cancel_scope_stops_an_iteration_and_the_engine_closed_it_on_leaving() -> None:
    async def main() -> None:
        gate = Gate()
        _, turn = await running_turn(gate)
        seen: list[agents.Event] = []
        with anyio.CancelScope() as scope:
            async with aclosing(turn.iter_events()) as events:
                async for event in events:
                    seen.append(event)
                    if isinstance(event, agents.TurnStarted):
                        # The next event will not come while the turn is parked.
                        asyncio.get_running_loop().call_soon(scope.cancel)
        assert scope.cancelled_caught
        assert calls_in_engine() == 0
        assert isinstance(seen[0], agents.TurnStarted)
        await gate.open()
        assert isinstance(await turn.result(), agents.Completed)

    run(main)


def test_a_loop_anyio_closes_right_after_a_cancel_scope_leaves_no_call_behind() -> None:
    async def main() -> None:
        gate = Gate()
        _, turn = await running_turn(gate)
        with anyio.move_on_after(0):
            await turn.result()
        with anyio.move_on_after(0):
            async for _ in turn.iter_events():
                pass

    anyio.run(main, backend="asyncio")
    assert calls_in_engine() == 0


def engine_thread() -> threading.Thread:
    (thread,) = [t for t in threading.enumerate() if t.name == "agentlib-engine"]
    return thread


# -- Jupyter-style loops -----------------------------------------------------------------


def test_the_door_works_from_a_loop_running_in_another_thread() -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    where: list[threading.Thread] = []

    async def cell() -> Any:
        def on_event(event: agents.Event) -> None:
            where.append(threading.current_thread())

        session = await scripted_agent("hello from the cell").start_session()
        return await session.run("hi", on_event=on_event)

    try:
        record = asyncio.run_coroutine_threadsafe(cell(), loop).result(WAIT)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT)
        loop.close()
    assert isinstance(record, agents.Completed)
    assert record.output == "hello from the cell"
    assert set(where) == {thread}


def test_top_level_awaits_in_one_running_loop_share_one_engine() -> None:
    # A notebook's cells run one after another in one loop (IPython's autoawait): each
    # awaits the door; a session of one cell is driven by the next.
    loop = asyncio.new_event_loop()
    try:
        agent = scripted_agent("first", "second")
        session = loop.run_until_complete(agent.start_session())
        first = loop.run_until_complete(session.run("one"))
        second = loop.run_until_complete(session.run("two"))
    finally:
        loop.close()
    assert isinstance(first, agents.Completed)
    assert isinstance(second, agents.Completed)
    assert second.output == "second"
