"""With a durable store, a runtime keeps a bounded number of idle trees of sessions (no turn,
no handler run, no reader): it lets go of the ones used least recently, and of their leases,
and reads them back from the store when they are used again, as they were.

``IDLE_KEPT`` (1,000) is made 3 here, so that a few sessions show it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from _support import approval_agent, call, echo, reply

import agentlib
import agentlib._engine._runtime
from agentlib import (
    Agent,
    AllowApproval,
    Blocked,
    Completed,
    EntryCompleted,
    MemoryStore,
    ScriptedModel,
    TurnEnded,
)

KEPT = 3


@pytest.fixture(autouse=True)
def few_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agentlib._engine._runtime, "IDLE_KEPT", KEPT)


async def texts(session: agentlib.Session, *turn_ids: str) -> list[str | None]:
    """The texts of the entries the turns completed, in order."""
    return [
        event.entry.text
        for turn_id in turn_ids
        async for event in session.turn(turn_id).iter_events()
        if isinstance(event, EntryCompleted)
    ]


def repeater() -> Agent:
    return Agent("repeater", model=ScriptedModel([echo("said")] * 10))


async def test_idle_sessions_beyond_the_kept_are_let_go_and_read_back_when_used(
    tmp_path: Path,
) -> None:
    agent = repeater()
    async with agentlib.open_runtime(f"sqlite:///{tmp_path}/s.db") as runtime:
        sessions = [await agent.start_session() for _ in range(10)]
        first = [await session.run(f"hello {i}") for i, session in enumerate(sessions)]
        assert len(runtime._sessions) <= KEPT + 1
        assert sessions[0].id not in runtime._sessions
        # Read back as it was, and it goes on.
        assert await sessions[0].turn(first[0].turn_id).get() == first[0]
        events = [event async for event in sessions[0].turn(first[0].turn_id).iter_events()]
        again = await sessions[0].run("hello again")
        history = await texts(sessions[0], first[0].turn_id, again.turn_id)
    assert [type(event).__name__ for event in events][-1] == "TurnEnded"
    assert isinstance(again, Completed)
    assert again.text == "said: hello again"
    assert history == [
        "hello 0",
        "said: hello 0",
        "hello again",
        "said: hello again",
    ]


async def test_a_session_let_go_of_is_no_longer_leased() -> None:
    shared = MemoryStore()
    agent = repeater()
    async with agentlib.open_runtime(shared) as runtime:
        sessions = [await agent.start_session() for _ in range(KEPT + 2)]
        for session in sessions:
            await session.run("hi")
        await trio.testing.wait_all_tasks_blocked()
        assert sessions[0].id not in runtime._sessions
        async with agentlib.open_runtime(MemoryStore(shared_with=shared)):
            # Another runtime takes it at once: its lease ended when it was let go of.
            record = await agent.session(sessions[0].id).run("over here")
        assert isinstance(record, Completed)
        # And this one reads it back, the other's turn included.
        history = await texts(sessions[0], record.turn_id)
    assert history == ["over here", "said: over here"]


async def test_a_blocked_turn_keeps_its_session(tmp_path: Path) -> None:
    deleted: list[str] = []
    blocked_agent = approval_agent(deleted)
    agent = repeater()
    async with agentlib.open_runtime(f"sqlite:///{tmp_path}/s.db") as runtime:
        waiting = await blocked_agent.start_session()
        record = await waiting.run("delete it")
        assert isinstance(record, Blocked)
        for _ in range(KEPT + 3):
            await (await agent.start_session()).run("hi")
        assert waiting.id in runtime._sessions
        turn = waiting.turn(record.turn_id)
        await turn.answer(record.callbacks[0].id, AllowApproval())
        ended = await turn.result()
    assert isinstance(ended, Completed)
    assert deleted == ["/tmp/x"]


async def test_a_reader_following_a_session_keeps_it(tmp_path: Path) -> None:
    agent = repeater()
    seen: list[Any] = []
    async with agentlib.open_runtime(f"sqlite:///{tmp_path}/s.db") as runtime:
        followed = await agent.start_session()
        await followed.run("first")
        following = trio.Event()

        async def follow() -> None:
            async for event in followed.iter_events():
                seen.append(event)
                if isinstance(event, TurnEnded) and len(seen) > 5:
                    following.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            await trio.testing.wait_all_tasks_blocked()
            for _ in range(KEPT + 3):
                await (await agent.start_session()).run("hi")
            assert followed.id in runtime._sessions
            await followed.run("second")
            with trio.fail_after(30):
                await following.wait()
            nursery.cancel_scope.cancel()
    texts = [event.entry.text for event in seen if isinstance(event, EntryCompleted)]
    assert texts == ["first", "said: first", "second", "said: second"]


async def test_an_idempotency_key_finds_a_session_let_go_of(tmp_path: Path) -> None:
    agent = repeater()
    async with agentlib.open_runtime(f"sqlite:///{tmp_path}/s.db") as runtime:
        keyed = await agent.start_session(idempotency_key="k-1")
        await keyed.run("hi")
        for _ in range(KEPT + 3):
            await (await agent.start_session()).run("hi")
        assert keyed.id not in runtime._sessions
        again = await agent.start_session(idempotency_key="k-1")
    assert again.id == keyed.id


async def test_a_tree_of_sessions_is_let_go_of_whole_and_read_back_from_a_subagents(
    tmp_path: Path,
) -> None:
    child = Agent("helper", model=ScriptedModel([echo("helped")]))
    parent = Agent(
        "parent",
        model=ScriptedModel([reply(call("helper", message="help")), "thanks"]),
        subagents=[child],
    )
    agent = repeater()
    async with agentlib.open_runtime(f"sqlite:///{tmp_path}/s.db") as runtime:
        session = await parent.start_session()
        record = await session.run("go")
        (sub,) = await session.subagents()
        for _ in range(KEPT + 3):
            await (await agent.start_session()).run("hi")
        assert session.id not in runtime._sessions
        assert sub.id not in runtime._sessions
        (sub_turn,) = [
            event.turn_id async for event in sub.iter_events() if isinstance(event, TurnEnded)
        ]
        history = await texts(sub, sub_turn or "")
        assert session.id in runtime._sessions  # read back with it
    assert isinstance(record, Completed)
    assert history == ["help", "helped: help"]


async def test_in_memory_sessions_are_all_kept() -> None:
    agent = repeater()
    async with agentlib.open_runtime() as runtime:
        sessions = [await agent.start_session() for _ in range(KEPT + 3)]
        for session in sessions:
            await session.run("hi")
        assert all(session.id in runtime._sessions for session in sessions)
