"""Event streams of remote references on a bad link: through a proxy on 127.0.0.1 that cuts
every connection part way through its answer, each event comes once, in order, and the
stream gives up only once no page has come for ``retry_for`` seconds."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing
from _proxy import CuttingProxy
from _support import events_through

import agentlib
from agentlib import ModelReply, ToolCallRequest

#: Every connection is cut after this many bytes of its answer, at least and at most.
LEAST, MOST = 100, 4000


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b  # async: a sync tool's worker thread would let the mock clock jump


def adder(calls: int) -> agentlib.Agent:
    """An agent whose turns call ``add`` ``calls`` times at once, then answer."""
    tool_calls = [ToolCallRequest(name="add", arguments={"a": n, "b": 1}) for n in range(calls)]

    def step(request: agentlib.ModelRequest) -> ModelReply | str:
        last = request.entries[-1]
        if isinstance(last, agentlib.ToolResultEntry):
            return "added"
        return ModelReply(tool_calls=tool_calls)

    return agentlib.Agent("adder", "You add.", agentlib.FunctionModel(step), [add])


@pytest.fixture
async def server() -> AsyncIterator[agentlib.Server]:
    # In memory: a store's worker thread would let the mock clock jump while it works.
    async with agentlib.serve([adder(12)], port=0) as served:
        yield served


@contextlib.asynccontextmanager
async def cutting(server: agentlib.Server) -> AsyncIterator[tuple[str, CuttingProxy]]:
    """A proxy to ``server`` that cuts every answer after LEAST to MOST bytes: its URL."""
    proxy = CuttingProxy(
        int(server.url.rsplit(":", 1)[1]), cuts=10**9, rng=random.Random(25), most=MOST, least=LEAST
    )
    async with trio.open_nursery() as nursery:
        yield await proxy.serve(nursery), proxy
        nursery.cancel_scope.cancel()


async def test_a_session_stream_on_a_cutting_link_delivers_each_event_once_in_order(
    autojump_clock: trio.testing.MockClock, server: agentlib.Server
) -> None:
    session = await agentlib.Agent.load_from(server.url, "adder").start_session()
    last = None
    for _ in range(3):
        record = await session.run("add them")
        assert isinstance(record, agentlib.Completed), record
        last = record.cursor
    assert last is not None
    stored = await events_through(session, last)
    assert len(stored) > 110
    read: list[agentlib.Event] = []
    async with cutting(server) as (url, proxy):
        through = agentlib.Agent.load_from(url, "adder").session(session.id)
        with trio.fail_after(3600):  # only catches a hang
            async with contextlib.aclosing(through.iter_events()) as events:
                async for event in events:
                    read.append(event)
                    if event.id == last:
                        break
    assert read == stored
    assert proxy.cut > 10  # answers were cut, and asked for again


async def test_a_wait_with_on_event_on_a_cutting_link_sees_each_event_of_the_turn_once(
    autojump_clock: trio.testing.MockClock, server: agentlib.Server
) -> None:
    session = await agentlib.Agent.load_from(server.url, "adder").start_session()
    record = await session.run("add them")
    assert isinstance(record, agentlib.Completed), record
    stored = [event async for event in session.turn(record.turn_id).iter_events()]
    assert len(stored) > 40
    seen: list[agentlib.Event] = []
    async with cutting(server) as (url, proxy):
        through = agentlib.Agent.load_from(url, "adder").session(session.id)
        with trio.fail_after(3600):  # only catches a hang
            again = await through.turn(record.turn_id).result(on_event=seen.append)
    assert again == record
    assert seen == stored
    assert proxy.cut > 0


async def test_a_stream_gives_up_once_no_page_came_for_retry_for(
    autojump_clock: trio.testing.MockClock, server: agentlib.Server
) -> None:
    session = await agentlib.Agent.load_from(server.url, "adder").start_session()
    record = await session.run("add them")
    assert isinstance(record, agentlib.Completed), record
    read: list[agentlib.Event] = []

    async def read_all(session: agentlib.Session) -> None:
        async with contextlib.aclosing(session.iter_events()) as events:
            async for event in events:
                read.append(event)

    # No answer ever comes whole through this link: each is cut within its headers.
    port = int(server.url.rsplit(":", 1)[1])
    proxy = CuttingProxy(port, cuts=10**9, rng=random.Random(1), most=10)
    async with trio.open_nursery() as nursery:
        url = await proxy.serve(nursery)
        through = agentlib.Agent.load_from(url, "adder", retry_for=30).session(session.id)
        started = trio.current_time()
        with pytest.raises(agentlib.ServerUnreachableError) as raised:
            await read_all(through)
        nursery.cancel_scope.cancel()
    assert read == []
    assert 30 <= trio.current_time() - started < 40
    assert url in str(raised.value)
