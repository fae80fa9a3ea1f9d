"""Reading sessions back from a store (``_engine/_restore.py``): what a caller was told
before a crash or a close is what the next runtime reads, and a read never sees a state the
store does not hold.

A "crash" is a copy of the SQLite files taken while nothing is being written (what a process
killed at that moment leaves), opened with a wall clock past the dead owner's lease; a
"close" is the end of an ``open_runtime`` block. ``tests/test_crash.py`` does the same with
real SIGKILLs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest
import trio
import trio.testing
from _support import WAIT, Gate, Recorder, call, crash_copy

import agentlib
from agentlib import (
    Agent,
    AllowApproval,
    Blocked,
    Completed,
    Event,
    MemoryStore,
    ModelReply,
    OpenApproval,
    ScriptedModel,
    SQLiteStore,
    Store,
    ToolResultEntry,
    UnknownOutcome,
)
from agentlib._store._base import Op, StoredSession


class Sibling:
    """An approval tool ``delete`` and a tool ``index`` that holds at ``gate``, called in
    one model reply: the turn is Blocked on the approval while ``index`` still runs."""

    def __init__(self) -> None:
        self.gate = Gate()
        self.deleted: list[str] = []
        self.indexed: list[str] = []
        self.recorder = Recorder("finished")

        @agentlib.tool(requires_approval=True)
        async def delete(path: str) -> str:
            """Delete a file."""
            self.deleted.append(path)
            return f"deleted {path}"

        @agentlib.tool
        async def index(path: str) -> str:
            """Index a folder (slowly)."""
            self.indexed.append(path)
            await self.gate.tool.function()
            return f"indexed {path}"

        self.agent = Agent(
            "sibling",
            model=ScriptedModel(
                [
                    ModelReply(tool_calls=[call("delete", path="/a"), call("index", path="/b")]),
                    self.recorder,
                ]
            ),
            tools=[delete, index],
        )

    async def blocked(self, session: agentlib.Session) -> Blocked:
        """Run a turn until it is Blocked on the approval and ``index`` runs."""
        with trio.fail_after(WAIT):
            record = await session.run("clean up")
            await self.gate.reached.wait()
        assert isinstance(record, Blocked), record
        return record

    def result_of(self, name: str) -> ToolResultEntry:
        """The result of the call to ``name`` that the model saw in its second step."""
        [request] = self.recorder.requests
        [result] = [
            entry
            for entry in request.entries
            if isinstance(entry, ToolResultEntry) and entry.name == name
        ]
        return result


async def answer_and_finish(session: agentlib.Session, blocked: Blocked) -> agentlib.TurnState[Any]:
    turn = session.turn(blocked.turn_id)
    with trio.fail_after(WAIT):
        await turn.answer(blocked.callbacks[0].id, AllowApproval())
        return await turn.result(after=blocked)


async def test_a_turn_blocked_while_a_sibling_runs_stays_blocked_after_a_crash(
    tmp_path: Path,
) -> None:
    live = tmp_path / "live"
    live.mkdir()
    sibling = Sibling()
    async with agentlib.open_runtime(f"sqlite:///{live / 's.db'}"):
        session = await sibling.agent.start_session()
        blocked = await sibling.blocked(session)
        crashed = crash_copy(live, tmp_path / "crashed")
        sibling.gate.opened.set()

    async with agentlib.open_runtime(crashed):
        session = sibling.agent.session(session.id)
        with trio.fail_after(WAIT):
            assert await session.turn(blocked.turn_id).get() == blocked
        record = await answer_and_finish(session, blocked)

    assert isinstance(record, Completed), record
    assert sibling.deleted == ["/a"]
    assert sibling.indexed == ["/b"]  # it ran once, before the crash: never again
    lost = sibling.result_of("index")
    assert lost.is_error
    assert "outcome is unknown" in lost.content[0].text
    assert "stopped while it ran" in lost.content[0].text
    assert not sibling.result_of("delete").is_error


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_turn_blocked_while_a_sibling_runs_stays_blocked_after_a_close(
    kind: str, tmp_path: Path
) -> None:
    store: str | Store = MemoryStore() if kind == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    sibling = Sibling()
    async with agentlib.open_runtime(store):
        session = await sibling.agent.start_session()
        blocked = await sibling.blocked(session)

    async with agentlib.open_runtime(store):
        session = sibling.agent.session(session.id)
        with trio.fail_after(WAIT):
            assert await session.turn(blocked.turn_id).get() == blocked
        record = await answer_and_finish(session, blocked)

    assert isinstance(record, Completed), record
    assert sibling.deleted == ["/a"]
    assert sibling.indexed == ["/b"]
    assert "outcome is unknown" in sibling.result_of("index").content[0].text


async def test_a_turn_whose_tool_ran_alone_still_reads_unknown_outcome_after_a_crash(
    tmp_path: Path,
) -> None:
    # Nothing told a caller it was Blocked: a tool ran, nobody knows whether it finished.
    live = tmp_path / "live"
    live.mkdir()
    gate = Gate()
    agent = Agent(
        "held",
        model=ScriptedModel([ModelReply(tool_calls=[call("hold")]), "done"]),
        tools=[gate.tool],
    )
    async with agentlib.open_runtime(f"sqlite:///{live / 's.db'}"):
        session = await agent.start_session()
        turn = await session.start_turn("go")
        with trio.fail_after(WAIT):
            await gate.reached.wait()
        crashed = crash_copy(live, tmp_path / "crashed")
        gate.opened.set()

    async with agentlib.open_runtime(crashed):
        with trio.fail_after(WAIT):
            record = await agent.session(session.id).turn(turn.id).get()
    assert isinstance(record, UnknownOutcome), record


class SlowFlush(Store):
    """A SQLite store whose flushes wait until the test opens ``gate``: the restore of a
    session is under way as long as the gate is shut."""

    def __init__(self, inner: SQLiteStore) -> None:
        self._inner = inner
        self.flushing = trio.Event()
        self.gate = trio.Event()

    async def open(self, start_soon: Callable[..., Any]) -> None:
        self._inner.committed = self.committed  # type: ignore[method-assign]
        await self._inner.open(start_soon)

    async def aclose(self) -> None:
        self.gate.set()
        await self._inner.aclose()

    def write(self, op: Op) -> None:
        self._inner.write(op)

    async def flush(self) -> None:
        self.flushing.set()
        await self.gate.wait()
        await self._inner.flush()

    async def load(self, session_id: str) -> StoredSession | None:
        return await self._inner.load(session_id)

    async def session_for_key(self, key: str) -> str | None:
        return await self._inner.session_for_key(key)

    async def read_events(self, session_id: str, after: int, limit: int) -> list[Event]:
        return await self._inner.read_events(session_id, after, limit)

    async def acquire(self, session_ids: Sequence[str], owner: str, seconds: float) -> None:
        await self._inner.acquire(session_ids, owner, seconds)

    async def release(self, session_ids: Sequence[str], owner: str) -> None:
        await self._inner.release(session_ids, owner)


async def test_a_read_during_a_restore_waits_for_it_and_never_reads_running(
    tmp_path: Path,
) -> None:
    # The turn was running a tool when its process died: the restore ends it UnknownOutcome.
    # Until the store holds that end, no read may say Running (the store never held it).
    live = tmp_path / "live"
    live.mkdir()
    gate = Gate()
    agent = Agent(
        "held",
        model=ScriptedModel([ModelReply(tool_calls=[call("hold")]), "done"]),
        tools=[gate.tool],
    )
    async with agentlib.open_runtime(f"sqlite:///{live / 's.db'}"):
        session = await agent.start_session()
        turn = await session.start_turn("go")
        with trio.fail_after(WAIT):
            await gate.reached.wait()
        store = SlowFlush(crash_copy(live, tmp_path / "crashed"))
        gate.opened.set()

    reads: list[agentlib.TurnState[Any]] = []
    async with agentlib.open_runtime(store):
        again = agent.session(session.id).turn(turn.id)

        async def read() -> None:
            reads.append(await again.get())

        try:
            with trio.fail_after(WAIT):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read)  # restores the session
                    await store.flushing.wait()
                    nursery.start_soon(read)  # the session is being restored
                    await trio.testing.wait_all_tasks_blocked()
                    assert reads == []
                    store.gate.set()
        finally:
            store.gate.set()  # the runtime's close flushes too
    assert [type(record) for record in reads] == [UnknownOutcome, UnknownOutcome]
    assert reads[0] == reads[1]


async def test_a_blocked_turn_reads_blocked_at_once_after_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    runs: list[str] = []

    @agentlib.tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        runs.append(path)
        return "deleted"

    agent = Agent(
        "cleaner",
        model=ScriptedModel([ModelReply(tool_calls=[call("delete", path="/x")]), "done"]),
        tools=[delete],
    )
    async with agentlib.open_runtime(url):
        session = await agent.start_session()
        blocked = await session.run("clean up")
    assert isinstance(blocked, Blocked)
    async with agentlib.open_runtime(url):
        turn = agent.session(session.id).turn(blocked.turn_id)
        with trio.fail_after(WAIT):
            async with trio.open_nursery() as nursery:
                reads: list[agentlib.TurnState[Any]] = []

                async def read() -> None:
                    reads.append(await turn.get())

                for _ in range(5):
                    nursery.start_soon(read)
    assert reads == [blocked] * 5
    assert isinstance(blocked.callbacks[0], OpenApproval)
    assert runs == []


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_turns_step_count_and_limit_survive_a_restart(kind: str, tmp_path: Path) -> None:
    store: str | Store = MemoryStore() if kind == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    steps: list[int] = []

    @agentlib.tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        return "deleted"

    def again(request: agentlib.ModelRequest) -> ModelReply:
        steps.append(request.step)
        return ModelReply(tool_calls=[call("delete", path=f"/{request.step}")])

    agent = Agent("cleaner", model=agentlib.FunctionModel(again), tools=[delete])
    async with agentlib.open_runtime(store):
        session = await agent.start_session()
        first = await session.run("clean up", max_steps=2)
    assert isinstance(first, Blocked)

    async with agentlib.open_runtime(store):
        turn = agent.session(session.id).turn(first.turn_id)
        with trio.fail_after(WAIT):
            await turn.answer(first.callbacks[0].id, AllowApproval())
            second = await turn.result(after=first)
            assert isinstance(second, Blocked), second
            await turn.answer(second.callbacks[0].id, AllowApproval())
            last = await turn.result(after=second)
    assert steps == [1, 2]  # counted on from the step stored, under the turn's own limit
    assert isinstance(last, agentlib.Failed), last
    assert last.error.type == "MaxStepsExceeded"
    assert "2 model steps" in last.error.message


def signing_tree(gate: Gate, searched: list[str]) -> Agent:
    """``boss`` calls, in one step, its subagent ``helper`` (whose tool needs a sign-in to
    ``notion``) and ``hold``, which runs until ``gate`` opens."""

    def search(query: str, credentials: Annotated[agentlib.Credentials, agentlib.Depends()]) -> str:
        """Search the notes."""
        searched.append(query)
        return f"found {query}"

    notion = agentlib.ToolSource(name="notion", tools=[search], requires_sign_in=True)
    helper = Agent(
        "helper",
        description="Looks things up.",
        model=ScriptedModel([ModelReply(tool_calls=[call("notion.search", query="q")]), "helped"]),
        tools=[notion],
    )
    return Agent(
        "boss",
        model=ScriptedModel(
            [ModelReply(tool_calls=[call("helper", message="look"), call("hold")]), "done"]
        ),
        tools=[gate.tool],
        subagents=[helper],
    )


@pytest.mark.parametrize("how", ["crash", "close"])
async def test_a_turn_blocked_on_a_subagents_sign_in_beside_a_running_call_stays_blocked(
    how: str, tmp_path: Path
) -> None:
    live = tmp_path / "live"
    live.mkdir()
    gate = Gate()
    searched: list[str] = []
    async with agentlib.open_runtime(f"sqlite:///{live / 's.db'}"):
        session = await signing_tree(gate, searched).start_session()
        turn = await session.start_turn("go")
        with trio.fail_after(WAIT):
            await gate.reached.wait()
            blocked = await turn.result()
        assert isinstance(blocked, Blocked), blocked
        assert isinstance(blocked.callbacks[0], agentlib.OpenSignIn)
        if how == "crash":
            store: str | Store = crash_copy(live, tmp_path / "crashed")
            gate.opened.set()
        else:
            store = f"sqlite:///{live / 's.db'}"

    again = Gate()
    async with agentlib.open_runtime(store):
        turn = signing_tree(again, searched).session(session.id).turn(turn.id)
        with trio.fail_after(WAIT):
            assert await turn.get() == blocked
            sign_in = agentlib.SignInAnswer(credentials={"notion": "secret"})
            await turn.answer(blocked.callbacks[0].id, sign_in)
            record = await turn.result(after=blocked)
    assert isinstance(record, Completed), record
    assert searched == ["q"]
    assert not again.reached.is_set()  # hold is not run again
