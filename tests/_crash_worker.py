"""The worker process of the crash tests (``tests/test_crash.py``), which kill it with SIGKILL.

Not a test module. Run as ``python _crash_worker.py CONFIG`` (CONFIG: a JSON object, see
:func:`main`), it drives sessions on a SQLite file until it is killed, and prints one line,
flushed, for each operation acknowledged to it:

    try session KEY                      start_session(idempotency_key=KEY) is called
    ack session SESSION KEY|-            start_session returned SESSION
    try turn SESSION KEY                 start_turn(idempotency_key=KEY) is called
    ack turn SESSION TURN KEY            start_turn returned TURN
    ack event SESSION EVENT_ID TYPE      a reader (iter_events, on_event) saw the event
    ack record SESSION TURN JSON         result() or get() returned this record of the turn
    try answer SESSION CALLBACK          turn.answer(CALLBACK, ...) is called
    ack answer SESSION CALLBACK          it returned Answered
    ready                                a scenario got where the test kills it

The tests import the agents and :func:`message_for` from here to check the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio
import trio.testing

import agentlib
from agentlib import (
    Agent,
    Busy,
    Event,
    ModelReply,
    ModelRequest,
    Running,
    ScriptedModel,
    ToolCallRequest,
    ToolResultEntry,
)
from agentlib._store._base import Op, SessionRow, StoredSession, TurnRow
from agentlib.store import open_store

#: Set in the worker process only: there, ``hold`` says "ready" and never returns.
_IN_WORKER = False


async def lookup(key: str) -> str:
    """Look a key up (an async tool that takes a moment: long enough for a turn to be
    killed while it runs beside an approval)."""
    await trio.sleep(0.01)
    return f"the value of {key}"


def add(a: int, b: int) -> int:
    """Add two numbers (a sync tool)."""
    return a + b


async def hold() -> str:
    """Run until the process dies (in the worker; elsewhere it returns at once)."""
    if _IN_WORKER:
        say("ready")
        await trio.sleep_forever()
    return "held"


#: The file where the tools that must never run twice note each run (set by the worker).
RUNS = ""


def _note_run(name: str) -> None:
    """Append ``name`` to the file of tool runs (``RUNS``), on disk before the tool goes on."""
    with open(RUNS, "a") as runs:
        runs.write(name + "\n")
        runs.flush()
        os.fsync(runs.fileno())


@agentlib.tool(requires_approval=True)
def confirm(turn: str) -> str:
    """Confirm the work of a turn (once approved)."""
    _note_run(f"confirm {turn}")
    return "confirmed"


def _look_first(calls: tuple[str, ...]) -> Callable[[ModelRequest], Awaitable[ModelReply]]:
    async def step(request: ModelRequest) -> ModelReply:
        await trio.sleep(0.002)  # the model thinks: a turn can be killed in a model step
        requests = {
            "lookup": ToolCallRequest(name="lookup", arguments={"key": "answer"}),
            "add": ToolCallRequest(name="add", arguments={"a": 1, "b": 2}),
            "confirm": ToolCallRequest(name="confirm", arguments={"turn": request.turn_id}),
        }
        return ModelReply(text="Let me look that up.", tool_calls=[requests[c] for c in calls])

    return step


def _turn(*calls: str) -> tuple[Any, ...]:
    """One turn, when nothing interrupts it: a model step with text and ``calls`` at once, a
    step with one more call, then the answer."""
    return (
        _look_first(calls),
        ModelReply(tool_calls=[ToolCallRequest(name="add", arguments={"a": 3, "b": 4})]),
        "The answer is 10.",
    )


#: The agent of the random crashes. Each turn's first step asks for an approval to
#: ``confirm`` while ``lookup`` still runs, so that the turn is Blocked beside a running
#: call; its script is long enough for every turn they run.
AGENT = Agent(
    "crash_worker",
    instructions="Answer with the tools.",
    model=ScriptedModel(_turn("lookup", "add", "confirm") * 5000),
    tools=[lookup, add, confirm],
)

#: The same turns without an approval: they run to their end unattended.
PLAIN = Agent(
    "plain",
    instructions="Answer with the tools.",
    model=ScriptedModel(_turn("lookup", "add") * 50),
    tools=[lookup, add],
)

#: A subagent whose turn runs ``hold``, and the agent that delegates to it.
HELPER = Agent(
    "helper",
    instructions="Help.",
    model=ScriptedModel([ModelReply(tool_calls=[ToolCallRequest(name="hold")]), "helped"] * 10),
    tools=[hold],
)
DELEGATOR = Agent(
    "delegator",
    instructions="Delegate.",
    model=ScriptedModel(
        [ModelReply(tool_calls=[ToolCallRequest(name="helper", arguments={"message": "go"})])]
        + ["Delegated."] * 10
    ),
    subagents=[HELPER],
)

#: Set once ``index`` runs, in the worker.
_INDEXING: list[trio.Event] = []


@agentlib.tool(requires_approval=True)
def erase(path: str) -> str:
    """Erase a file (once approved)."""
    _note_run("erase")
    return f"erased {path}"


async def index(path: str) -> str:
    """Index a folder (slowly: in the worker, until the process dies)."""
    _note_run("index")
    if _IN_WORKER:
        _INDEXING[0].set()
        await trio.sleep_forever()
    return f"indexed {path}"


def _report(request: ModelRequest) -> str:
    """The answer: each result the model saw, one a line."""
    return "\n".join(
        f"{entry.name}: {'error: ' if entry.is_error else ''}{entry.text}"
        for entry in request.entries
        if isinstance(entry, ToolResultEntry)
    )


#: One model reply calls ``erase`` (which needs an approval) and ``index`` at once; then the
#: agent reports the results it saw.
SIBLINGS = Agent(
    "siblings",
    instructions="Erase and index.",
    model=ScriptedModel(
        [
            ModelReply(
                tool_calls=[
                    ToolCallRequest(name="erase", arguments={"path": "/old"}),
                    ToolCallRequest(name="index", arguments={"path": "/docs"}),
                ]
            ),
            _report,
        ]
    ),
    tools=[erase, index],
)

#: The root agents, by name.
AGENTS = {agent.name: agent for agent in (AGENT, PLAIN, DELEGATOR, SIBLINGS)}


def message_for(key: str) -> str:
    """The message of the turn started with idempotency key ``key`` (a retry sends the same)."""
    return f"Please compute {key}."


def say(*words: str) -> None:
    print(*words, flush=True)


def ack_record(turn: agentlib.Turn, record: agentlib.TurnState[Any]) -> None:
    data = json.dumps(agentlib.unstructure(record), separators=(",", ":"), sort_keys=True)
    say("ack", "record", turn.session_id, turn.id, data)


def ack_event(event: Event) -> None:
    say("ack", "event", event.session_id, event.id, agentlib.unstructure(event)["type"])


class HangingStore(agentlib.Store):
    """A SQLite store whose disk hangs at the first write ``hang_at`` picks: that write and
    every later one are never committed, as if their commit took forever."""

    def __init__(self, inner: agentlib.Store, hang_at: Callable[[Op], bool]) -> None:
        self._inner = inner
        self._hang_at = hang_at
        self._held: list[Op] = []
        self.hung = trio.Event()

    async def open(self, start_soon: Callable[..., Any]) -> None:
        self._inner.committed = lambda ops: self.committed(ops)
        await self._inner.open(start_soon)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def write(self, op: Op) -> None:
        if self._held or self._hang_at(op):
            self._held.append(op)
            self.hung.set()
        else:
            self._inner.write(op)

    async def flush(self) -> None:
        if self._held:  # a write made before this flush never commits
            await trio.sleep_forever()
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


# -- random crashes ----------------------------------------------------------------------------


async def follow(session: agentlib.Session) -> None:
    """Read the session's events live, as a client showing them would."""
    async for event in session.iter_events():
        ack_event(event)


async def settle(
    turn: agentlib.Turn, record: agentlib.TurnState[Any], rng: random.Random
) -> agentlib.TurnState[Any]:
    """Answer the approvals of a Blocked turn (most are allowed) until it ends."""
    while isinstance(record, agentlib.Blocked):
        for callback in record.callbacks:
            say("try", "answer", turn.session_id, callback.id)
            answer: agentlib.ApprovalAnswer = (
                agentlib.AllowApproval() if rng.random() < 0.8 else agentlib.DenyApproval()
            )
            if isinstance(await turn.answer(callback.id, answer), agentlib.Answered):
                say("ack", "answer", turn.session_id, callback.id)
        record = await turn.result(after=record)
    return record


async def drive(session: agentlib.Session, rng: random.Random, tag: str, retry: list[str]) -> None:
    """Run turns of ``session`` one after another, first retrying the keys in ``retry``."""
    count = 0
    while True:
        if retry:
            key = retry.pop(0)
        else:
            key, count = f"{tag}-t{count}", count + 1
        say("try", "turn", session.id, key)
        started = await session.start_turn(message_for(key), idempotency_key=key)
        while isinstance(started, Busy):  # a turn resumed from the store still runs
            await settle(started.turn, await started.turn.result(), rng)
            started = await session.start_turn(message_for(key), idempotency_key=key)
        say("ack", "turn", session.id, started.id, key)
        how = rng.randrange(3)
        if how == 0:
            record = await started.result()
        elif how == 1:
            record = await started.result(on_event=ack_event)
        else:
            async with contextlib.aclosing(started.iter_events()) as events:
                async for event in events:
                    ack_event(event)
                    if isinstance(event, agentlib.CallbackOpened):
                        break  # the turn waits for its approval
            record = await started.result()
        if isinstance(record, agentlib.Blocked):
            ack_record(started, record)
            # The client thinks, or comes back later (a kill may come first).
            await trio.sleep(rng.uniform(0, 0.02) if rng.random() < 0.8 else 0.5)
            record = await settle(started, record, rng)
        ack_record(started, record)


async def random_work(config: dict[str, Any], store: agentlib.Store) -> None:
    """Start and go on with sessions of AGENT, each running turn after turn."""
    global RUNS
    RUNS = config["path"] + ".runs"
    rng = random.Random(config["seed"])
    round_ = config["round"]
    retry_turns: dict[str, list[str]] = {}
    for session_id, key in config["retry_turns"]:
        retry_turns.setdefault(session_id, []).append(key)
    async with (
        agentlib.open_runtime(store),
        trio.open_nursery() as nursery,
    ):

        def start(session: agentlib.Session, tag: str) -> None:
            if rng.random() < 0.5:
                nursery.start_soon(follow, session)
            retry = retry_turns.get(session.id, [])
            nursery.start_soon(drive, session, random.Random(rng.random()), tag, retry)

        for index, session_id in enumerate(config["resume"]):
            start(AGENT.session(session_id), f"r{round_}-old{index}")
        for index, key in enumerate(config["retry_sessions"]):
            say("try", "session", key)
            session = await AGENT.start_session(idempotency_key=key)
            say("ack", "session", session.id, key)
            start(session, f"r{round_}-again{index}")
        for index in range(config["new_sessions"]):
            key = f"r{round_}-s{index}" if rng.random() < 0.5 else None
            if key is not None:
                say("try", "session", key)
            session = await AGENT.start_session(idempotency_key=key)
            say("ack", "session", session.id, key or "-")
            start(session, f"r{round_}-new{index}")
            await trio.sleep(rng.uniform(0, 0.01))
        await trio.sleep_forever()  # until killed, even with no session to drive


# -- scenarios: one crash at a chosen point ----------------------------------------------------


def _ends_a_turn(op: Op) -> bool:
    return isinstance(op, TurnRow) and op.record is not None


async def turn_read_while_its_end_commits(path: str) -> None:
    """A turn's end is being committed (forever) when its record is read with get()."""
    store = HangingStore(agentlib.SQLiteStore(path), _ends_a_turn)
    async with agentlib.open_runtime(store):
        session = await PLAIN.start_session()
        say("ack", "session", session.id, "-")
        turn = await session.start_turn(message_for("k"), idempotency_key="k")
        assert not isinstance(turn, Busy)
        say("ack", "turn", session.id, turn.id, "k")
        await store.hung.wait()
        record = await turn.get()
        if not isinstance(record, Running):
            ack_record(turn, record)
        say("ready")
        await trio.sleep_forever()


async def session_key_retried_while_it_commits(path: str) -> None:
    """start_session(idempotency_key=K) is retried while the first call's session is being
    committed (forever)."""
    store = HangingStore(agentlib.SQLiteStore(path), lambda op: isinstance(op, SessionRow))
    async with agentlib.open_runtime(store):

        async def start() -> None:
            say("try", "session", "only-once")
            session = await PLAIN.start_session(idempotency_key="only-once")
            say("ack", "session", session.id, "only-once")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(start)
            await store.hung.wait()
            nursery.start_soon(start)  # the client retries: the first call is slow
            await trio.testing.wait_all_tasks_blocked()
            say("ready")
            await trio.sleep_forever()


async def subagent_running_a_tool(path: str) -> None:
    """A turn delegates to a subagent, whose turn runs a tool (``hold`` says "ready")."""
    async with agentlib.open_runtime(f"sqlite:///{path}"):
        session = await DELEGATOR.start_session()
        say("ack", "session", session.id, "-")
        turn = await session.start_turn(message_for("k"), idempotency_key="k")
        assert not isinstance(turn, Busy)
        say("ack", "turn", session.id, turn.id, "k")
        await trio.sleep_forever()


async def blocked_beside_a_running_sibling(path: str) -> None:
    """A model reply calls ``erase``, which waits on an approval, and ``index``, which runs
    until the process dies: the turn's Blocked record is acknowledged while ``index`` runs."""
    global RUNS
    RUNS = path + ".runs"
    _INDEXING.append(trio.Event())
    async with agentlib.open_runtime(f"sqlite:///{path}"):
        session = await SIBLINGS.start_session()
        say("ack", "session", session.id, "-")
        turn = await session.start_turn(message_for("k"), idempotency_key="k")
        assert not isinstance(turn, Busy)
        say("ack", "turn", session.id, turn.id, "k")
        record = await turn.result()
        assert isinstance(record, agentlib.Blocked), record
        ack_record(turn, record)
        await _INDEXING[0].wait()
        say("ready")
        await trio.sleep_forever()


SCENARIOS = {
    "turn_read_while_its_end_commits": turn_read_while_its_end_commits,
    "session_key_retried_while_it_commits": session_key_retried_while_it_commits,
    "subagent_running_a_tool": subagent_running_a_tool,
    "blocked_beside_a_running_sibling": blocked_beside_a_running_sibling,
}


def main() -> None:
    """Run until killed.

    CONFIG holds ``path`` (the SQLite file, beside which tools note their runs), ``store``
    (the URL of the store: that file, or a PostgreSQL schema) and either ``scenario`` (a name in
    :data:`SCENARIOS`) or, for random work: ``seed``, ``round``, ``resume`` (session ids to
    go on with), ``retry_turns`` ([session id, key] pairs to retry first),
    ``retry_sessions`` (session keys to retry) and ``new_sessions`` (how many to start).
    """
    global _IN_WORKER
    _IN_WORKER = True
    config = json.loads(sys.argv[1])
    if "scenario" in config:
        trio.run(SCENARIOS[config["scenario"]], config["path"])
        return
    trio.run(random_work, config, open_store(config["store"]))


if __name__ == "__main__":
    main()
