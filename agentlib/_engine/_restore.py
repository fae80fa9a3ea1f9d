"""Reading a session back from the store: its whole tree of subagent sessions, its turns, and
the turns that were blocked on callbacks, which go on where they stopped."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import trio

from .._callbacks import AllowApproval, OpenApproval, OpenClientToolCall
from .._entries import MessageEntry, ToolCallEntry
from .._errors import SessionNotFoundError, StoreError
from .._records import Interrupted, UnknownOutcome
from .._store._base import Store, StoredSession
from ._core import PendingCallback, SessionCore, TurnCore, hidden_from_model
from ._loop import _Call, _error_result, run_turn
from ._runtime import not_found

if TYPE_CHECKING:
    from .._agent import Agent
    from ._runtime import Runtime

__all__ = ["restore"]


async def restore(runtime: Runtime, session_id: str, agent: Agent) -> None:
    """Load the tree of sessions holding ``session_id`` into ``runtime``, lease it, and
    resume its blocked turns; a turn that was running when its runtime stopped ends as
    ``UnknownOutcome``.

    ``agent`` is the session's; the agents of the rest of the tree are found from the
    root's, among its subagents.

    Nothing of the tree reaches the runtime until it is read whole and leased; a restore
    that fails after that takes it out again and lets go of its lease.

    Raises:
        SessionNotFoundError: The store has no such session, or the tree's agents are not
            ``agent``'s tree.
        LeaseRefused: Another runtime holds the tree.
        StoreError: The store failed, or holds a tree it cannot have written (damaged).
    """
    store = runtime.store
    stored = await store.load(session_id)
    if stored is None:
        raise not_found(session_id)
    while stored.row.parent_id is not None:  # a subagent's: load from its root down
        parent = await store.load(stored.row.parent_id)
        assert parent is not None, "a subagent session's parent is stored before it"
        stored = parent
    tree = [stored]
    for node in tree:  # breadth first: parents before children
        for child_id in node.children:
            child = await store.load(child_id)
            assert child is not None
            tree.append(child)
    # Read it whole before the lease (what fails here changes nothing).
    agents = _agents(runtime, tree, session_id, agent)
    cores = {
        node.row.session_id: _core(runtime, node, agents[node.row.session_id]) for node in tree
    }
    steps = {node.row.session_id: _steps(store, node, cores[node.row.session_id]) for node in tree}
    for node in tree:
        core = cores[node.row.session_id]
        if node.row.parent_id is not None:
            core.parent = cores[node.row.parent_id]
            parent_turn = core.parent.turns.get(node.row.parent_turn_id or "")
            if parent_turn is None:
                missing = f"turn {node.row.parent_turn_id}, which delegated, is missing"
                raise store.damaged(node.row.parent_id, "turns", missing)
            core.parent_turn = parent_turn
            core.parent.children.append(core)
    ids = [node.row.session_id for node in tree]
    await store.acquire(ids, runtime.owner, runtime.lease_seconds)
    try:
        resumed = _resume(runtime, tree, cores, steps)
    except BaseException:
        for node in tree:
            runtime.sessions.pop(node.row.session_id, None)
            runtime._session_keys.pop(node.row.idempotency_key or "", None)
        with trio.CancelScope(shield=True), contextlib.suppress(StoreError):
            await store.release(ids, runtime.owner)
        raise
    for turn, calls in resumed:
        runtime.spawn(run_turn, turn, calls, name=f"agentlib turn {turn.id}")
    try:
        await store.flush()
    finally:
        for core in cores.values():
            core.ready = True


def _resume(
    runtime: Runtime,
    tree: list[StoredSession],
    cores: dict[str, SessionCore],
    steps: dict[str, dict[str, list[_Call]]],
) -> list[tuple[TurnCore, list[_Call]]]:
    """Put the tree into the runtime, and decide how each unended turn goes on: the turns
    to resume, each with its tool step's calls (the others are ended here)."""
    for node in tree:
        runtime.sessions[node.row.session_id] = cores[node.row.session_id]
        if node.row.idempotency_key is not None:
            runtime._session_keys[node.row.idempotency_key] = node.row.session_id
    for core in cores.values():  # a subagent's open callbacks are listed above it too
        for pending in core.callbacks.values():
            if not pending.closed.is_set():
                for ancestor, delegating in core.ancestors():
                    ancestor.below[pending.id] = pending
                    delegating.open_callbacks[pending.id] = pending.callback
                    delegating.opened_at[pending.id] = 0
    # Unended turns, deepest first: a parent's resumption waits on its subagent's turn.
    resumed: list[tuple[TurnCore, list[_Call]]] = []
    unknown: set[str] = set()  # turns ended as UnknownOutcome here
    for node in reversed(tree):
        core = cores[node.row.session_id]
        for turn in core.turns.values():
            if turn.record is not None:
                continue
            in_history = {entry.id for entry in core.entries}
            turn.steered.extend(
                message
                for message in node.steers.get(turn.id, ())
                if message.id not in in_history and isinstance(message, MessageEntry)
            )
            step = steps[core.id].get(turn.id)
            calls = None if step is None else _calls(turn, step, unknown)

            if core.terminated:
                core.end_turn(
                    turn, Interrupted(turn_id=turn.id, session_id=core.id, cause="cancelled")
                )
            elif calls is None:
                unknown.add(turn.id)
                core.end_turn(
                    turn,
                    UnknownOutcome(
                        turn_id=turn.id,
                        session_id=core.id,
                        reason="the runtime running this turn stopped before the turn ended",
                    ),
                )
            else:
                core.active = turn
                if core.parent is not None:
                    core.root.running_subagents += 1
                resumed.append((turn, calls))
    # A subagent's turn goes on only if the turn that delegated to it does (top down).
    going_on = {turn.id for turn, _ in resumed}
    for node in tree:
        core = cores[node.row.session_id]
        parent_turn = core.parent_turn
        for turn, _ in resumed:
            if turn.session is core and parent_turn is not None and parent_turn.id not in going_on:
                going_on.discard(turn.id)
                core.active = None
                core.root.running_subagents -= 1
                core.end_turn(
                    turn, Interrupted(turn_id=turn.id, session_id=core.id, cause="cancelled")
                )
    return [(turn, calls) for turn, calls in resumed if turn.id in going_on]


def _agents(
    runtime: Runtime, tree: list[StoredSession], session_id: str, agent: Agent
) -> dict[str, Agent]:
    """Each session's agent: the root's, then each subagent's among its parent's."""
    root = tree[0].row
    root_agent = agent if agent.name == root.agent else runtime.agents.get(root.agent)
    if root_agent is None or root_agent.name != root.agent:
        raise SessionNotFoundError(
            f"session {session_id} belongs to a tree of sessions whose root {root.session_id} "
            f"was run by agent {root.agent!r}, which this runtime does not know: open the root "
            "session with that agent first, agent.session(root_id)"
        )
    agents = {root.session_id: root_agent}
    for node in tree[1:]:
        parent = agents[node.row.parent_id or ""]
        sub = parent.subagents_by_name.get(node.row.agent)
        if sub is None:
            raise SessionNotFoundError(
                f"session {node.row.session_id} was run by subagent {node.row.agent!r} of "
                f"agent {parent.name!r}, which has no such subagent now; open it with the "
                "agents that ran it"
            )
        agents[node.row.session_id] = sub
    if agent.name not in (agents[session_id].name, root.agent):
        raise SessionNotFoundError(
            f"session {session_id} was run by agent {agents[session_id].name!r}, not "
            f"{agent.name!r}: open it with its own agent, or its root session's"
        )
    return agents


def _core(runtime: Runtime, node: StoredSession, agent: Agent) -> SessionCore:
    row = node.row
    # The stored events stay in the store: readers read them back a page at a time.
    log = runtime.event_log(row.session_id, first_seq=node.first_seq, stored_seq=node.last_seq)
    core = SessionCore(
        id=row.session_id,
        agent=agent,
        runtime=runtime,
        log=log,
        entries=list(node.entries),
        hidden=sum(map(hidden_from_model, node.entries)),
        terminated=row.terminated,
        idempotency_key=row.idempotency_key,
        inputs=dict(row.inputs),
        ready=False,
    )
    if row.terminated:
        log.close()
    for key in node.keys:
        core.idempotency[key.key] = (key.turn_id, key.fingerprint)
    for turn_row in node.turns:
        turn = TurnCore(
            id=turn_row.turn_id,
            session=core,
            first_seq=turn_row.first_seq,
            output_type=agent.output_type,
            max_steps=agent.max_steps,
            record=turn_row.record,
        )
        if turn_row.record is not None:
            turn.end_seq = _seq(turn_row.record.cursor)
            turn.done.set()
        core.turns[turn.id] = turn
    for turn in core.turns.values():
        turn.tool_calls.extend(
            entry
            for entry in core.entries
            if isinstance(entry, ToolCallEntry) and entry.turn_id == turn.id
        )
    for row_callback in node.callbacks:
        callback = row_callback.callback
        turn = core.turns[callback.turn_id]
        tool = (
            agent.tools_by_name.get(callback.tool_name)
            if isinstance(callback, OpenClientToolCall)
            else None
        )
        pending = PendingCallback(callback=callback, turn=turn, tool=tool)
        core.callbacks[callback.id] = pending
        if row_callback.state == "open":
            turn.open_callbacks[callback.id] = callback
            turn.opened_at[callback.id] = 0  # stored: durable
            continue
        pending.answered = row_callback.state == "answered"
        pending.answer = row_callback.answer
        pending.error = row_callback.error
        pending.closed.set()
        answer = row_callback.answer
        if (
            isinstance(callback, OpenApproval)
            and callback.source == "tool"
            and isinstance(answer, AllowApproval)
            and answer.scope == "session"
        ):
            core.approved_tools.add(callback.tool_name)
    return core


def _steps(store: Store, node: StoredSession, core: SessionCore) -> dict[str, list[_Call]]:
    """The calls of the session's stored tool steps, by turn id.

    Raises:
        StoreError: A step is not what a runtime writes: the store is damaged.
    """
    tools = core.agent.tools_by_name
    steps = {}
    for turn_id, step in node.steps.items():
        turn = core.turns[turn_id]  # a step is stored on its turn's row
        try:
            steps[turn_id] = [_Call.from_json(data, tools) for data in step["calls"]]
            # A step stored before turns had step limits holds neither: the agent's applies.
            turn.model_steps = _count(step.get("steps", 0))
            turn.max_steps = _count(step.get("max_steps", turn.max_steps))
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise store.damaged(
                core.id, "turns", f"the tool step of turn {turn_id} is not what was written"
            ) from error
    return steps


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError("a count of steps is a natural number")
    return value


def _calls(turn: TurnCore, calls: list[_Call], unknown: set[str]) -> list[_Call] | None:
    """The calls of a stored tool step, if the turn can go on from it; None if it cannot
    (it must read ``UnknownOutcome``).

    A turn goes on when nothing of its step was running, or when a callback of it (or of a
    subagent below it) is still open: then it was Blocked, as a caller may have been told,
    and stays so, and each call that was running gets an error result and never runs
    again. ``unknown`` holds the subagent turns ended as ``UnknownOutcome`` here (their
    callbacks are closed: they no longer count).
    """
    lost = [
        call
        for call in calls
        if call.state == "running"  # the tool may have run, or not: nobody can tell
        or (call.state == "done" and call.result is None)
        or (call.state == "delegated" and call.child is not None and call.child[1] in unknown)
    ]
    if lost and not turn.open_callbacks:
        return None
    for call in lost:
        if call.state != "delegated":  # a subagent's turn says itself how it ended
            call.state = "done"
            call.result = _error_result(call.entry, _LOST)
    turn.step = calls
    return calls


#: What the model is told of a call that was running when its runtime stopped, in a step
#: that goes on.
_LOST = (
    "this call's outcome is unknown: the runtime stopped while it ran, and it was not run "
    "again (it may or may not have taken effect)"
)


def _seq(cursor: str | None) -> int | None:
    if not cursor:
        return None
    return int(cursor.rpartition(":")[2])
