"""References to deployed agents (``Agent.load_from``): their sessions, turns, records,
errors, callbacks and events are those of local ones, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from _proxy import CuttingProxy
from _support import approval_agent, events_through

import agentlib
import agentlib_sync
from agentlib import ModelReply, ToolCallRequest
from agentlib._toolkit._schema import json_schema


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def calculator() -> agentlib.Agent:
    call = ToolCallRequest(name="add", arguments={"a": 1, "b": 2})

    def step(request: agentlib.ModelRequest) -> ModelReply | str:
        last = request.entries[-1]
        return "3" if isinstance(last, agentlib.ToolResultEntry) else ModelReply(tool_calls=[call])

    return agentlib.Agent("calc", "You add.", agentlib.FunctionModel(step), [add])


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    store = f"sqlite:///{tmp_path / 'served.db'}"
    async with agentlib.serve([calculator(), approval_agent([])], store=store, port=0) as server:
        yield server.url


async def test_a_remote_turn_reads_as_a_local_one(url: str) -> None:
    remote = agentlib.Agent.load_from(url, "calc")
    session = await remote.start_session()
    record = await session.run("1+2?")
    assert isinstance(record, agentlib.Completed)
    assert record.output == "3"
    assert record.session_id == session.id
    assert await session.turn(record.turn_id).get() == record
    async with agentlib.open_runtime():
        local = await calculator().start_session()
        here = await local.run("1+2?")
    assert isinstance(here, agentlib.Completed)
    assert here.text == record.text
    assert [(c.name, c.arguments) for c in here.tool_calls] == [
        (c.name, c.arguments) for c in record.tool_calls
    ]


async def test_references_are_equal_when_they_name_one_session_on_one_server(url: str) -> None:
    session = await agentlib.Agent.load_from(url, "calc").start_session()
    again = agentlib.Agent.load_from(url + "/", "calc").session(session.id)
    assert again == session
    assert hash(again) == hash(session)
    assert session != agentlib.Agent.load_from(url, "calc").session("another")
    assert session.turn("t") == again.turn("t")


async def test_the_clients_handler_answers_a_callback_while_it_waits(url: str) -> None:
    asked: list[str] = []

    def allow(callback: agentlib.OpenApproval) -> agentlib.AllowApproval:
        asked.append(callback.tool_name)
        return agentlib.AllowApproval()

    session = await agentlib.Agent.load_from(url, "approver").start_session(on_approval=allow)
    record = await session.run("clean up")
    assert isinstance(record, agentlib.Completed), record
    assert record.output == "done: deleted /tmp/x"
    assert asked == ["delete"]


async def test_without_a_handler_a_blocked_turn_is_answered_by_id(url: str) -> None:
    session = await agentlib.Agent.load_from(url, "approver").start_session()
    record = await session.run("clean up")
    assert isinstance(record, agentlib.Blocked)
    turn = session.turn(record.turn_id)
    callback = record.callbacks[0]
    answered = await turn.answer(callback.id, agentlib.DenyApproval(reason="not today"))
    assert isinstance(answered, agentlib.Answered)
    again = await turn.answer(callback.id, agentlib.AllowApproval())
    assert isinstance(again, agentlib.AlreadySettled)
    done = await turn.result(timeout=30)
    assert isinstance(done, agentlib.Completed)
    assert "not today" in done.output


async def test_errors_are_raised_as_their_own_class_with_their_message(url: str) -> None:
    remote = agentlib.Agent.load_from(url, "calc")
    missing = "0123456789abcdef0123456789abcdef"
    with pytest.raises(agentlib.SessionNotFoundError) as remotely:
        await remote.session(missing).turn("t").get()
    async with agentlib.open_runtime():
        with pytest.raises(agentlib.SessionNotFoundError) as locally:
            await calculator().session(missing).turn("t").get()
    # The remote message names the server, whose store is the one searched.
    assert str(locally.value).startswith(f"no session {missing!r} in this runtime's store")
    assert str(remotely.value).startswith(f"no session {missing!r} in the store of the server")
    assert "start one with agent.start_session()" in str(remotely.value)
    session = await remote.start_session()
    with pytest.raises(agentlib.InvalidCursorError):
        async for _ in session.iter_events(after="not a cursor"):
            pass


async def test_a_busy_session_says_which_turn_runs(url: str) -> None:
    session = await agentlib.Agent.load_from(url, "approver").start_session()
    first = await session.start_turn("clean up")
    assert isinstance(first, agentlib.Turn)
    assert first.started is True
    await first.result(timeout=30)  # blocked on its approval
    second = await session.start_turn("again")
    assert isinstance(second, agentlib.Busy)
    assert second.turn.id == first.id
    assert isinstance(await first.interrupt(), agentlib.Turn)
    assert isinstance(await first.get(), agentlib.Interrupted)


async def test_remote_events_are_the_local_events_in_order(url: str) -> None:
    session = await agentlib.Agent.load_from(url, "calc").start_session()
    record = await session.run("1+2?")
    events = []
    with trio.fail_after(30):  # only catches a hang
        async with contextlib.aclosing(session.iter_events()) as stream:
            async for event in stream:
                events.append(event)
                if isinstance(event, agentlib.TurnEnded):
                    break
    assert isinstance(events[0], agentlib.TurnStarted)
    assert events[-1].record == record
    ids = [event.id for event in events]
    assert ids == sorted(set(ids))
    turn_events = [event async for event in session.turn(record.turn_id).iter_events()]
    assert turn_events == events
    seen: list[agentlib.Event] = []
    again = await session.run("1+2?", on_event=seen.append)
    assert isinstance(seen[-1], agentlib.TurnEnded)
    assert seen[-1].record == again


async def test_a_stream_resumes_by_itself_when_the_server_restarts(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'served.db'}"
    agents = [calculator(), approval_agent([])]
    async with agentlib.serve(agents, store=store, port=0) as server:
        url = server.url
        session = await agentlib.Agent.load_from(url, "approver").start_session()
        blocked = await session.run("clean up")
        assert isinstance(blocked, agentlib.Blocked)
    port = int(url.rsplit(":", 1)[1])
    events: list[agentlib.Event] = []
    ended = trio.Event()

    async def read() -> None:
        async with contextlib.aclosing(session.iter_events()) as stream:
            async for event in stream:
                events.append(event)
                if isinstance(event, agentlib.TurnEnded):
                    ended.set()
                    return

    with trio.fail_after(60):  # only catches a hang
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            # The server is down: the stream's first tries fail, and it waits to try again.
            await trio.testing.wait_all_tasks_blocked()
            async with agentlib.serve(agents, store=store, port=port):
                turn = session.turn(blocked.turn_id)
                await turn.answer(blocked.callbacks[0].id, agentlib.AllowApproval())
                await ended.wait()
    ids = [event.id for event in events]
    assert ids == sorted(set(ids))
    assert isinstance(events[0], agentlib.TurnStarted)
    last = events[-1]
    assert isinstance(last, agentlib.TurnEnded)
    assert isinstance(last.record, agentlib.Completed)


async def test_the_blocking_twin_runs_a_remote_turn(url: str) -> None:
    def script() -> agentlib.TurnState[object] | agentlib.Busy[agentlib_sync.Turn]:
        remote = agentlib_sync.Agent.load_from(url, "calc")
        return remote.start_session().run("1+2?")

    record = await trio.to_thread.run_sync(script)
    assert isinstance(record, agentlib.Completed)
    assert record.output == "3"


async def test_a_cancelled_remote_session_refuses_new_turns_as_a_local_one(url: str) -> None:
    session = await agentlib.Agent.load_from(url, "calc").start_session()
    await session.cancel()
    with pytest.raises(agentlib.SessionTerminatedError) as remotely:
        await session.run("1+2?")
    async with agentlib.open_runtime():
        local = await calculator().start_session()
        await local.cancel()
        with pytest.raises(agentlib.SessionTerminatedError) as locally:
            await local.run("1+2?")
    assert str(remotely.value) == str(locally.value).replace(local.id, session.id)


async def test_connections_cut_at_random_offsets_lose_and_repeat_nothing(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each answer cut short is asked for again at once (the pauses are the client's).
    monkeypatch.setattr(agentlib._http._client, "_FIRST_PAUSE", 0.001)
    proxy = CuttingProxy(int(url.rsplit(":", 1)[1]), cuts=100, rng=random.Random(15))
    read: list[agentlib.Event] = []
    records: list[agentlib.TurnState[Any]] = []
    final: list[str] = []
    reached = trio.Event()
    with trio.fail_after(120):  # only catches a hang
        async with trio.open_nursery() as nursery:
            through = agentlib.Agent.load_from(await proxy.serve(nursery), "calc")
            session = await through.start_session()

            async def reader() -> None:
                async with contextlib.aclosing(session.iter_events()) as events:
                    async for event in events:
                        read.append(event)
                        if final and event.id >= final[0]:
                            reached.set()
                            return

            nursery.start_soon(reader)
            while proxy.left or len(records) < 5:
                record = await session.run("1+2?")
                assert isinstance(record, agentlib.Completed), record
                records.append(record)
            final.append(records[-1].cursor or "")
            if read and read[-1].id >= final[0]:
                reached.set()
            await reached.wait()
            nursery.cancel_scope.cancel()
    assert proxy.cut == 100
    direct = agentlib.Agent.load_from(url, "calc").session(session.id)
    stored = await events_through(direct, final[0])
    assert [event.id for event in read] == [event.id for event in stored]
    assert read == stored
    ended = [event.record for event in stored if isinstance(event, agentlib.TurnEnded)]
    assert ended == records  # each run started one turn: none was started twice


async def test_a_handler_answers_across_a_server_restart(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'served.db'}"
    asked, gone, done = trio.Event(), trio.Event(), trio.Event()
    records: list[agentlib.TurnState[Any]] = []

    async def approve(callback: agentlib.OpenApproval) -> agentlib.AllowApproval:
        asked.set()
        await gone.wait()  # the server that opened the callback is gone meanwhile
        return agentlib.AllowApproval()

    with trio.fail_after(60):  # only catches a hang
        async with trio.open_nursery() as nursery:
            async with agentlib.serve([approval_agent([])], store=store, port=0) as server:
                remote = agentlib.Agent.load_from(server.url, "approver")
                session = await remote.start_session(on_approval=approve)

                async def run() -> None:
                    records.append(await session.run("clean up"))
                    done.set()

                nursery.start_soon(run)
                await asked.wait()
            port = int(server.url.rsplit(":", 1)[1])
            gone.set()  # the handler answers while no server listens: its request fails,
            await trio.testing.wait_all_tasks_blocked()  # and waits to be sent again
            async with agentlib.serve([approval_agent([])], store=store, port=port):
                await done.wait()
    (record,) = records
    assert isinstance(record, agentlib.Completed)
    assert record.output == "done: deleted /tmp/x"


async def test_a_remote_reference_is_never_equal_to_a_local_one(url: str) -> None:
    remote = await agentlib.Agent.load_from(url, "calc").start_session()
    async with agentlib.open_runtime():
        local = calculator().session(remote.id)
        assert local != remote
        assert remote != local
        assert local.turn("t") != remote.turn("t")


@attrs.frozen
class Sum:
    total: int


@attrs.frozen
class Product:
    product: int


def summer(asked: list[object], **options: Any) -> agentlib.Agent:
    """``summer``, which answers ``{"total": 3}`` and notes the output schema it was asked."""

    def step(request: agentlib.ModelRequest) -> str:
        asked.append(request.output_schema)
        return '{"total": 3}'

    return agentlib.Agent("summer", "You add.", agentlib.FunctionModel(step), **options)


async def test_a_remote_run_asks_the_served_model_for_its_output_types_schema() -> None:
    asked: list[object] = []
    async with agentlib.serve([summer(asked)], port=0) as server:
        session = await agentlib.Agent.load_from(server.url, "summer").start_session()
        record = await session.run("1+2?", output_type=Sum)
        followed = await session.run("1+2?", output_type=Sum, on_event=lambda event: None)
        free = await session.run("1+2?")
    async with agentlib.open_runtime():
        local = await summer(asked).start_session()
        here = await local.run("1+2?", output_type=Sum)
    assert isinstance(record, agentlib.Completed)
    assert record.output == Sum(total=3)
    assert isinstance(followed, agentlib.Completed)
    assert followed.output == Sum(total=3)
    assert isinstance(free, agentlib.Completed)
    assert free.output == '{"total": 3}'
    assert isinstance(here, agentlib.Completed)
    remote_asked, followed_asked, free_asked, local_asked = asked
    assert remote_asked == local_asked == json_schema(Sum)
    assert followed_asked == local_asked
    assert free_asked is None


async def test_a_served_agents_own_output_type_is_kept_and_another_is_refused() -> None:
    asked: list[object] = []
    async with agentlib.serve([summer(asked, output_type=Sum)], port=0) as server:
        remote = agentlib.Agent.load_from(server.url, "summer")
        session = await remote.start_session()
        record = await session.run("1+2?", output_type=Sum)
        assert isinstance(record, agentlib.Completed)
        assert record.output == Sum(total=3)
        with pytest.raises(agentlib.ValidationError, match="its own output type, Sum"):
            await session.run("1+2?", output_type=Product)
    assert asked == [json_schema(Sum)]


async def test_an_answer_that_is_no_json_fails_a_remote_turn_with_an_output_type() -> None:
    agent = agentlib.Agent("talker", "You talk.", agentlib.FunctionModel(lambda _: "three"))
    async with agentlib.serve([agent], port=0) as server:
        session = await agentlib.Agent.load_from(server.url, "talker").start_session()
        record = await session.run("1+2?", output_type=Sum)
    assert isinstance(record, agentlib.Failed)
    assert record.error.type == "ValidationError"
    assert "not JSON" in record.error.message
