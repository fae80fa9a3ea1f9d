"""The runtime: open_runtime, the current runtime, and what leaving its block does (SPEC 3):
to its running turns; to the references of its sessions and turns once it has closed, which
read what it left and refuse new work; to loads racing its close; and when the block is
cancelled from outside. Runtimes nested on one MemoryStore object each run their own sessions.

Tests whose store outlives a runtime take the ``store`` fixture, or ``any_store`` for
``":memory:"`` as well. Every wait is bounded (``trio.fail_after``), but never a whole
``open_runtime`` block: closing a runtime runs shielded, so a timeout around it would not end
a hang (``test_a_runtime_cancelled_from_outside_closes`` runs its block in a thread it can give
up on). A wait that could hang without ever reaching a checkpoint runs in a child process,
killed after a while.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest
import trio
from _support import (
    WAIT,
    StoreFor,
    approval_agent,
    events_through,
    lease_owners,
    only_callback,
)

import agentlib
from agentlib import (
    Agent,
    AllowApproval,
    Blocked,
    Completed,
    Interrupted,
    MemoryStore,
    ModelReply,
    OpenApproval,
    ScriptedModel,
    SQLiteStore,
    StoreError,
    ToolCallRequest,
    TurnEnded,
)


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


async def test_two_live_runtimes_on_one_memory_store_both_work() -> None:
    """Runtimes nested on one MemoryStore object each run their own sessions and see their own
    events, while both are open and after the inner one closed."""
    store = MemoryStore()
    agent = Agent("a", model=ScriptedModel(["one", "two", "three"]))

    async def run(session: agentlib.Session, text: str) -> None:
        record = await session.run(text, timeout=WAIT)
        assert isinstance(record, Completed), record
        assert record.cursor is not None
        events = await events_through(session, record.cursor)
        assert {event.id.rpartition(":")[0] for event in events} == {session.id}
        assert isinstance(events[-1], TurnEnded)
        assert events[-1].record == record

    async with agentlib.open_runtime(store):
        first = await agent.start_session()
        async with agentlib.open_runtime(store):
            second = await agent.start_session()
            await run(second, "in the inner runtime")
            await run(first, "in the outer runtime")
        await run(first, "after the inner runtime closed")


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


# -- once the runtime has closed -----------------------------------------------------------


async def test_waits_on_a_closing_runtimes_references_end(any_store: StoreFor) -> None:
    """Tasks outside the runtime wait on a blocked turn's next record and follow the session's
    events when the runtime closes: the result returns a record (still Blocked with a durable store,
    Interrupted with ":memory:") and the events end."""
    runs: list[str] = []
    outcome: dict[str, object] = {}
    async with trio.open_nursery() as outer, agentlib.open_runtime(any_store()):
        session = await approval_agent(runs).start_session()
        blocked = await session.run("clean up", timeout=WAIT)
        assert isinstance(blocked, Blocked)

        async def wait_result() -> None:
            turn = session.turn(blocked.turn_id)
            outcome["result"] = "still waiting"
            with trio.move_on_after(WAIT):
                outcome["result"] = await turn.result(after=blocked)

        async def follow() -> None:
            outcome["iter_events"] = "still following"
            with trio.move_on_after(WAIT):
                async with aclosing(session.iter_events()) as events:
                    async for _ in events:
                        pass
                outcome["iter_events"] = "ended"

        outer.start_soon(wait_result)
        outer.start_soon(follow)
        await trio.testing.wait_all_tasks_blocked()
    assert outcome["iter_events"] == "ended"
    result = outcome["result"]
    if any_store() == ":memory:":
        assert isinstance(result, Interrupted), result
    else:
        assert result == blocked
    assert runs == []


async def test_reads_of_a_closed_runtimes_references_return_at_once(any_store: StoreFor) -> None:
    """After the block, ``turn.get()``, ``turn.result()`` and the session's events return what the
    runtime left, rather than wait on a runtime that is gone."""
    runs: list[str] = []
    async with agentlib.open_runtime(any_store()):
        session = await approval_agent(runs).start_session()
        blocked = await session.run("clean up")
        assert isinstance(blocked, Blocked)
    turn = session.turn(blocked.turn_id)
    with trio.fail_after(WAIT):
        now = await turn.get()
        assert await turn.result() == now
        async with aclosing(session.iter_events()) as events:
            seen = [event async for event in events]
    if any_store() == ":memory:":
        assert isinstance(now, Interrupted), now
        assert isinstance(seen[-1], TurnEnded)
    else:
        assert now == blocked
        assert seen[-1].id == blocked.cursor
    assert runs == []


_FOLLOWER_CHILD = """
import sys
import trio
import trio.testing
import agentlib
from agentlib import Agent, MemoryStore, ModelReply, ScriptedModel, ToolCallRequest

@agentlib.tool(requires_approval=True)
async def delete(path: str) -> str:
    \"\"\"Delete a file.\"\"\"
    return "deleted"

agent = Agent(
    "a",
    model=ScriptedModel(
        [ModelReply(tool_calls=[ToolCallRequest(name="delete", arguments={"path": "/x"})]), "done"]
    ),
    tools=[delete],
)
kind, when, path = sys.argv[1:]
store = MemoryStore() if kind == "memory" else "sqlite:///" + path

async def drain(turn):
    async for _ in turn.iter_events():
        pass
    print("ended", flush=True)

async def main():
    async with trio.open_nursery() as outer:
        async with agentlib.open_runtime(store):
            session = await agent.start_session()
            record = await session.run("go")
            turn = session.turn(record.turn_id)
            if when == "at close":
                outer.start_soon(drain, turn)
                await trio.testing.wait_all_tasks_blocked()
    if when == "after close":
        await drain(turn)

trio.run(main)
"""


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_blocked_turns_events_end_when_its_runtime_closes(
    kind: str, tmp_path: Path
) -> None:
    """``turn.iter_events()`` of a turn its runtime left blocked (durable store) ends, whether it
    was followed while the runtime closed or read after.

    Each case runs in a child process, killed if it has not ended within ``WAIT``: an iteration that
    never ends here may never reach a checkpoint either, which no timeout in this process could
    stop."""
    outcome: dict[str, str] = {}

    async def child(when: str) -> None:
        outcome[when] = f"still iterating after {WAIT} s"
        with trio.move_on_after(WAIT):
            done = await trio.run_process(
                [sys.executable, "-c", _FOLLOWER_CHILD, kind, when, str(tmp_path / f"{when}.db")],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )
            outcome[when] = done.stdout.decode().strip() or done.stderr.decode()[-800:]

    async with trio.open_nursery() as nursery:
        nursery.start_soon(child, "at close")
        nursery.start_soon(child, "after close")
    assert outcome == {"at close": "ended", "after close": "ended"}


async def test_an_answer_to_a_closed_runtime_raises_a_clear_error_and_changes_nothing(
    store: StoreFor,
) -> None:
    """``turn.answer`` on a reference of a runtime that has closed raises an error that says so (it
    does not hang, nor take an answer no runtime holds the session for); the reference still
    reads the turn as it was left, Blocked on that callback, not Running."""
    runs: list[str] = []
    async with agentlib.open_runtime(store()):
        session = await approval_agent(runs).start_session()
        blocked = await session.run("clean up")
        approval = only_callback(blocked, OpenApproval)
    turn = session.turn(blocked.turn_id)
    with pytest.raises((RuntimeError, agentlib.SdkError), match="clos"), trio.fail_after(WAIT):
        await turn.answer(approval.id, AllowApproval())
    with trio.fail_after(WAIT):
        assert await turn.get() == blocked
        assert await turn.result() == blocked
    assert runs == []


async def test_a_new_turn_on_a_closed_runtime_raises_a_clear_error(any_store: StoreFor) -> None:
    """``session.run`` on an idle session of a runtime that has closed raises an error naming the
    runtime (not trio's "Nursery is closed"), and leaves no phantom turn behind: a following
    ``session.cancel()`` does not hang."""
    agent = Agent("a", model=ScriptedModel(["hi", "again"]))
    async with agentlib.open_runtime(any_store()):
        session = await agent.start_session()
        assert isinstance(await session.run("hello"), Completed)
    with pytest.raises((RuntimeError, agentlib.SdkError), match="runtime"), trio.fail_after(WAIT):
        await session.run("again")
    refused: list[Exception] = []
    with trio.fail_after(WAIT):
        try:
            await session.cancel()
        except (RuntimeError, agentlib.SdkError) as error:
            refused.append(error)
    assert all("clos" in str(error) for error in refused), refused


class HeldLoads(SQLiteStore):
    """A SQLite store whose ``load`` waits until ``go`` is set: a load under way."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.loading = trio.Event()
        self.go = trio.Event()

    async def load(self, session_id: str) -> Any:
        self.loading.set()
        await self.go.wait()
        return await super().load(session_id)


@pytest.mark.parametrize("when", ["0", "1", "2", "5", "loading"])
async def test_a_load_racing_the_runtimes_close_fails_cleanly_or_succeeds(
    tmp_path: Path, when: str
) -> None:
    """``agent.session(id)`` while its runtime closes (started a few checkpoints before the block
    exits, or held inside the store's load while the close begins) raises a clear error or succeeds;
    the process does not crash (no read on a closed connection), and no lease is left held: the next
    runtime reads the turn, still blocked."""
    path = tmp_path / "s.db"
    runs: list[str] = []
    async with agentlib.open_runtime(f"sqlite:///{path}"):
        session = await approval_agent(runs).start_session()
        blocked = await session.run("clean up")
        assert isinstance(blocked, Blocked)

    outcome: list[object] = []
    store = HeldLoads(str(path))
    if when != "loading":
        store.go.set()

    async def load(delay: int) -> None:
        for _ in range(delay):
            await trio.lowlevel.checkpoint()
        try:
            turn = approval_agent(runs).session(session.id).turn(blocked.turn_id)
            with trio.fail_after(WAIT):
                outcome.append(await turn.get())
        except (RuntimeError, StoreError) as error:
            outcome.append(error)

    # No timeout around the runtime: closing runs shielded (a timeout would not end it).
    async with trio.open_nursery() as outer, agentlib.open_runtime(store):
        outer.start_soon(load, 0 if when == "loading" else int(when))
        if when == "loading":
            with trio.fail_after(WAIT):
                await store.loading.wait()
            # Let the close begin (and wait on the load) before the load goes on.
            outer.start_soon(_set_when_all_blocked, store.go)
        await trio.lowlevel.checkpoint()

    (result,) = outcome
    if isinstance(result, BaseException):
        assert "clos" in str(result), result
    else:
        assert result == blocked
    assert lease_owners(path) == [None]
    async with agentlib.open_runtime(f"sqlite:///{path}"):
        again = approval_agent(runs).session(session.id).turn(blocked.turn_id)
        assert await again.get() == blocked
    assert runs == []


async def _set_when_all_blocked(event: trio.Event) -> None:
    await trio.testing.wait_all_tasks_blocked()
    event.set()


async def test_a_runtime_cancelled_from_outside_closes(any_store: StoreFor) -> None:
    """A timeout around the ``open_runtime`` block (the block is cancelled from outside) closes the
    runtime and leaves, as with ":memory:".

    The block runs in a trio.run of its own, in a thread this test gives up on if it hangs (closing
    runs shielded: nothing here could cancel it)."""
    closed: list[bool] = []
    agent = Agent("a", model=ScriptedModel(["x"]))

    async def main() -> None:
        with trio.CancelScope() as outer:
            async with agentlib.open_runtime(any_store()):
                session = await agent.start_session()
                assert isinstance(await session.run("hi"), Completed)
                outer.deadline = trio.current_time()  # the timeout passes while the block waits
                await trio.sleep_forever()
        closed.append(outer.cancelled_caught)

    with trio.move_on_after(WAIT):
        await trio.to_thread.run_sync(trio.run, main, abandon_on_cancel=True)
    assert closed == [True], "leaving the cancelled open_runtime block hangs"


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


async def test_interrupt_stops_a_turn_that_has_not_reached_its_first_step() -> None:
    # The turn is Running when interrupt is called: a turn's task starts at the next
    # checkpoint, and the scripted step has none; in one process, that is observable.
    agent = agentlib.Agent("a", model=agentlib.ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("hello")
        assert isinstance(await turn.get(), agentlib.Running)
        answer = await turn.interrupt()
        record = await turn.get()
    assert answer == turn
    assert isinstance(record, Interrupted)
    assert record.cause == "interrupted"


async def test_cancel_interrupts_a_turn_that_has_not_reached_its_first_step() -> None:
    # The turn is Running when cancel is called: a turn's task starts at the next
    # checkpoint, and the scripted step has none; in one process, that is observable.
    agent = agentlib.Agent("a", model=agentlib.ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("hello")
        assert isinstance(await turn.get(), agentlib.Running)
        await session.cancel()
        record = await turn.get()
    assert isinstance(record, Interrupted)
    assert record.cause == "cancelled"
