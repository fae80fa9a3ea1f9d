"""Reading sessions back from a store (``_engine/_restore.py``): what a caller was told
before a crash or a close is what the next runtime reads, and a read never sees a state the
store does not hold. A tree of subagent sessions is read back once, whichever of its sessions
is loaded first and however many loads run at once, with its own root's subagents.

A "crash" is a copy of the SQLite files taken while nothing is being written (what a process
killed at that moment leaves), opened with a wall clock past the dead owner's lease, or, for
a MemoryStore, a new store given the first writes of another; a "close" is the end of an
``open_runtime`` block. ``tests/test_crash.py`` does the same with real SIGKILLs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import attrs
import pytest
import trio
import trio.testing
from _support import (
    HOLD,
    WAIT,
    Gate,
    Recorder,
    StoreFor,
    call,
    crash_copy,
    deleter,
    events_through,
    only_callback,
    pick,
    reply,
    settled,
)

import agentlib
from agentlib import (
    Agent,
    AllowApproval,
    Answered,
    Blocked,
    Completed,
    Event,
    MemoryStore,
    ModelReply,
    ModelRequest,
    OpenApproval,
    ScriptedModel,
    SQLiteStore,
    Store,
    Tool,
    ToolResultEntry,
    TurnEnded,
    UnknownOutcome,
)
from agentlib._store._base import CallbackRow, Op, SessionRow, StoredSession


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


def mixed_tree(gate: Gate, runs: list[str]) -> Agent:
    """``boss`` calls, in one step, ``hold`` (which runs until ``gate`` opens) and its
    subagent ``helper``, which asks for an approval to delete /precious."""
    helper = Agent(
        "helper",
        description="helps",
        model=ScriptedModel([reply(call("delete", path="/precious")), "helper done"]),
        tools=[deleter(runs)],
    )
    return Agent(
        "boss",
        model=ScriptedModel([reply(call("hold"), call("helper", message="go")), "boss done"]),
        tools=[gate.tool],
        subagents=[helper],
    )


async def blocked_mixed_turn(
    gate: Gate, runs: list[str]
) -> tuple[agentlib.Session, agentlib.Turn, OpenApproval]:
    """Start the mixed tree's turn; return once ``hold`` runs and the approval is open."""
    session = await mixed_tree(gate, runs).start_session()
    turn = await session.start_turn("go")
    with trio.fail_after(WAIT):
        await gate.reached.wait()
        record = await turn.result()  # returns once the approval opened: ``hold`` never ends
    return session, turn, only_callback(record, OpenApproval)


async def finish_mixed_tree(
    boss: Agent, session: agentlib.Session, turn: agentlib.Turn, approval: OpenApproval
) -> agentlib.TurnState[Any]:
    """The mixed tree read back: its root still Blocked on the subagent's approval, which
    is answered; the root's record once it has ended."""
    root_turn = boss.session(session.id).turn(turn.id)
    root = await root_turn.get()
    assert only_callback(root, OpenApproval) == approval
    sub = await boss.session(approval.session_id).turn(approval.turn_id).get()
    assert only_callback(sub, OpenApproval) == approval
    answered = await root_turn.answer(approval.id, AllowApproval())
    assert isinstance(answered, Answered), answered
    return await settled(root_turn, after=root)


async def test_a_mixed_tree_blocked_on_an_approval_stays_blocked_after_a_clean_close(
    store: StoreFor,
) -> None:
    """The root runs ``hold`` while its subagent waits on an approval, and reads Blocked; the
    runtime closes. It stays Blocked: the approval stays open and answerable, ``hold`` (cut short)
    is not run again, and ``delete`` runs only once the approval is given."""
    runs: list[str] = []
    gate = Gate()
    async with agentlib.open_runtime(store()):
        session, turn, approval = await blocked_mixed_turn(gate, runs)

    assert runs == []
    async with agentlib.open_runtime(store()):
        again = Gate()
        boss = mixed_tree(again, runs)
        record = await finish_mixed_tree(boss, session, turn, approval)
    assert isinstance(record, Completed), record
    assert runs == ["/precious"]
    assert not again.reached.is_set()


async def test_a_mixed_tree_blocked_on_an_approval_stays_blocked_after_a_crash(
    tmp_path: Path,
) -> None:
    """The same tree, crashed while ``hold`` runs: the root stays Blocked on the subagent's
    approval, ``hold``'s outcome is unknown (it is not run again), and ``delete`` runs only once the
    approval is given."""
    runs: list[str] = []
    gate = Gate()
    live = tmp_path / "live"
    live.mkdir()
    async with agentlib.open_runtime(f"sqlite:///{live / 's.db'}") as runtime:
        session, turn, approval = await blocked_mixed_turn(gate, runs)
        await runtime.store.flush()
        crashed = crash_copy(live, tmp_path / "crashed")

    assert runs == []
    async with agentlib.open_runtime(crashed):
        again = Gate()
        boss = mixed_tree(again, runs)
        record = await finish_mixed_tree(boss, session, turn, approval)
        assert record.cursor is not None
        results = [
            event.entry
            for event in await events_through(boss.session(session.id), record.cursor)
            if isinstance(event, agentlib.EntryCompleted)
            and isinstance(event.entry, ToolResultEntry)
        ]
    assert isinstance(record, Completed), record
    assert runs == ["/precious"]
    assert not again.reached.is_set()
    [held] = [result for result in results if result.name == "hold"]
    assert held.is_error
    assert "outcome is unknown" in held.text


def helper_tree(helper_tools: list[Tool], first: ModelReply) -> Agent:
    helper = Agent(
        "helper",
        description="helps",
        model=ScriptedModel([first, lambda request: f"helper: {request.entries[-1].text}"]),
        tools=helper_tools,
    )
    return Agent(
        "boss",
        model=ScriptedModel(
            [
                reply(call("helper", message="go")),
                lambda request: f"boss: {request.entries[-1].text}",
                "boss again",
            ]
        ),
        subagents=[helper],
    )


async def test_two_concurrent_loads_of_a_crashed_tree_end_it_once(tmp_path: Path) -> None:
    """A crash while the subagent's tool runs, then, in a new runtime, loads of the tree by its
    root's id and by the subagent's id at once: the tree is read once (no IntegrityError), the
    root's outcome is unknown, and the runtime goes on."""
    gate = Gate()
    live = tmp_path / "live"
    live.mkdir()
    async with agentlib.open_runtime(f"sqlite:///{live / 's.db'}") as runtime:
        session = await helper_tree([gate.tool], HOLD).start_session()
        turn = await session.start_turn("start")
        with trio.fail_after(WAIT):
            await gate.reached.wait()
        (child,) = await session.subagents()
        await runtime.store.flush()
        crashed = crash_copy(live, tmp_path / "crashed")
        gate.opened.set()
        assert isinstance(await settled(turn), Completed)

    async with agentlib.open_runtime(crashed):
        boss = helper_tree([Gate().tool], HOLD)
        got: dict[str, Any] = {}

        async def root() -> None:
            got["root"] = await boss.session(session.id).turn(turn.id).get()

        async def sub() -> None:
            got["sub"] = await boss.session(child.id).subagents()

        with trio.fail_after(WAIT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(root)
                nursery.start_soon(sub)
        assert isinstance(got["root"], UnknownOutcome), got
        assert got["sub"] == []
        record = await boss.session(session.id).run("again", timeout=WAIT)
        assert isinstance(record, Completed), record
        assert record.text == "boss: again"  # the model goes on at its next step
        assert record.cursor is not None
        events = await events_through(boss.session(session.id), record.cursor)
        ended = [event.turn_id for event in events if isinstance(event, TurnEnded)]
        assert ended == [turn.id, record.turn_id]


async def test_two_concurrent_loads_of_a_blocked_tree_resume_it_once(store: StoreFor) -> None:
    """A tree blocked on an approval in its subagent, loaded at once by its root's id and by the
    subagent's: one answer completes it, the tool runs once, each turn ends once."""
    runs: list[str] = []

    def make() -> Agent:
        return helper_tree([deleter(runs)], reply(call("delete", path="/tmp/x")))

    async with agentlib.open_runtime(store()):
        session = await make().start_session()
        blocked = await session.run("start")
        approval = only_callback(blocked, OpenApproval)

    async with agentlib.open_runtime(store()):
        boss = make()
        got: dict[str, Any] = {}

        async def load(name: str, session_id: str, turn_id: str) -> None:
            got[name] = await boss.session(session_id).turn(turn_id).get()

        with trio.fail_after(WAIT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(load, "root", session.id, blocked.turn_id)
                nursery.start_soon(load, "sub", approval.session_id, approval.turn_id)
            await trio.testing.wait_all_tasks_blocked()
        assert only_callback(got["root"], OpenApproval) == approval
        assert only_callback(got["sub"], OpenApproval) == approval
        root_turn = boss.session(session.id).turn(blocked.turn_id)
        await root_turn.answer(approval.id, AllowApproval())
        record = await settled(root_turn)
        assert isinstance(record, Completed), record
        assert record.text == "boss: helper: deleted /tmp/x"
        assert record.cursor is not None
        events = await events_through(boss.session(session.id), record.cursor)
        assert [event for event in events if isinstance(event, TurnEnded)] == [events[-1]]
        with trio.fail_after(WAIT):
            await trio.testing.wait_all_tasks_blocked()
    assert runs == ["/tmp/x"]


async def test_a_tree_resumes_with_its_own_roots_subagents(store: StoreFor) -> None:
    """Two root agents whose subagents share a name; the tree of the first, restored after the
    second became known, runs the first's subagent."""
    ran: list[str] = []

    def make(tag: str) -> Agent:
        @agentlib.tool(requires_approval=True)
        async def act() -> str:
            """Act."""
            ran.append(tag)
            return f"{tag} acted"

        helper = Agent(
            "helper",
            description="helps",
            tools=[act],
            model=ScriptedModel(
                [reply(call("act")), lambda request: f"{tag}-helper: {request.entries[-1].text}"]
            ),
        )
        return Agent(
            f"root-{tag}",
            subagents=[helper],
            model=ScriptedModel(
                [
                    reply(call("helper", message="go")),
                    lambda request: f"root-{tag}: {request.entries[-1].text}",
                ]
            ),
        )

    async with agentlib.open_runtime(store()):
        session = await make("A").start_session()
        blocked = await session.run("go")
        approval = only_callback(blocked, OpenApproval)

    async with agentlib.open_runtime(store()):
        a, b = make("A"), make("B")
        await a.start_session()  # A and its helper are known here
        await b.start_session()  # then B's helper, also named "helper"
        turn = a.session(session.id).turn(blocked.turn_id)
        assert await turn.get() == blocked
        await turn.answer(approval.id, AllowApproval())
        record = await settled(turn)
        assert isinstance(record, Completed), record
        assert record.text == "root-A: A-helper: A acted"
    assert ran == ["A"]


class Recording(MemoryStore):
    """A MemoryStore that keeps every write, to build what a crash at any moment leaves."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Op] = []

    def write(self, op: Op) -> None:
        super().write(op)
        self.ops.append(op)


async def test_a_client_tools_error_survives_a_restart_as_an_error_result() -> None:
    """The client tool's handler fails (``tool_errors="report"``); the process dies right after its
    callback was stored as closed, before the step recorded the call done. The runtime that resumes
    gives the model the error (is_error, the message), not null."""
    seen: list[Any] = []

    def final(request: ModelRequest) -> str:
        seen.append(request.entries[-1])
        return "done"

    def make() -> Agent:
        return Agent(
            "a",
            tools=[pick],
            tool_errors="report",
            model=ScriptedModel([reply(call("client.pick", prompt="n?")), final]),
        )

    def broken(callback: object) -> int:
        raise ValueError("the picker is broken")

    live = Recording()
    async with agentlib.open_runtime(live):
        session = await make().start_session(on_client_tool=broken)
        record = await session.run("go", timeout=WAIT)
        assert isinstance(record, Completed), record
    (before,) = seen
    assert isinstance(before, ToolResultEntry)
    assert before.is_error
    assert "the picker is broken" in before.text

    (closed,) = [
        n for n, op in enumerate(live.ops) if isinstance(op, CallbackRow) and op.state != "open"
    ]
    crashed = MemoryStore()
    for op in live.ops[: closed + 1]:
        if isinstance(op, SessionRow):
            op = attrs.evolve(op, lease=None)  # the dead runtime's lease is long over
        crashed.write(op)
    async with agentlib.open_runtime(crashed):
        turn = make().session(session.id).turn(record.turn_id)
        again = await settled(turn)
        assert isinstance(again, Completed), again
    after = seen[-1]
    assert len(seen) == 2
    assert isinstance(after, ToolResultEntry)
    assert after.is_error
    assert after.text == before.text


async def test_a_subagents_session_read_back_after_a_restart_ends_its_events(
    tmp_path: Path,
) -> None:
    child = Agent("helper", model=ScriptedModel(["helped"]))
    parent = Agent(
        "parent",
        model=ScriptedModel([reply(call("helper", message="help")), "thanks"]),
        subagents=[child],
    )
    url = f"sqlite:///{tmp_path}/s.db"
    async with agentlib.open_runtime(url):
        session = await parent.start_session()
        await session.run("go")
        (sub,) = await session.subagents()
    async with agentlib.open_runtime(url):
        (again,) = await parent.session(session.id).subagents()
        assert again.id == sub.id
        with trio.fail_after(WAIT):
            events = [type(event).__name__ async for event in again.iter_events()]
    assert events[0] == "TurnStarted"
    assert events[-1] == "TurnEnded"
