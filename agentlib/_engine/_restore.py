"""Reading a session back from the store: its whole tree of subagent sessions.

Each session's state is its stored facts applied again, through the machine's one
:func:`~agentlib._engine._machine.apply` (the rows of its tables, then the events of its
unended turn); then the machine's :func:`~agentlib._engine._machine.restart` decides how
the unended turns go on, now that the runtime that ran them is gone.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import trio

from .._data._errors import SessionNotFoundError, StoreError
from .._data._ops import CallbackRow, EntryRow, EventRow, KeyRow, Op, SteerRow, StepRow, TurnRow
from .._store._base import Store, StoredSession
from . import _machine as machine
from ._live import Engine

if TYPE_CHECKING:
    from .._define._definition import AgentDefinition

__all__ = ["not_found", "read_states", "read_tree", "restore"]


def not_found(session_id: str) -> SessionNotFoundError:
    return SessionNotFoundError(
        f"no session {session_id!r} in this runtime's store; start one with "
        "agent.start_session(), or open the runtime on the store that holds it"
    )


async def restore(engine: Engine, session_id: str, agent: AgentDefinition) -> None:
    """Load the tree of sessions holding ``session_id`` into the runtime, lease it, and
    resume its blocked turns; a turn that was running when its runtime stopped ends as
    ``UnknownOutcome``.

    ``agent`` is the session's; the agents of the rest of the tree are found from the
    root's, among its subagents. Nothing of the tree reaches the runtime until it is read
    whole and leased; a restore that fails after that takes it out again and lets go of its
    lease.

    Raises:
        SessionNotFoundError: The store has no such session, or the tree's agents are not
            ``agent``'s tree.
        LeaseRefused: Another runtime holds the tree.
        StoreError: The store failed, or holds a tree it cannot have written (damaged).
    """
    store = engine.store
    await engine._flush_writes()  # what this runtime wrote of a tree it let go of is read back
    tree, agents = await read_tree(engine, session_id, agent)
    states = await _states(store, tree, agents)
    ids = [node.row.session_id for node in tree]
    await store.acquire(ids, engine.owner, engine.lease_seconds)
    try:
        engine._states.update(states)
        for node in tree:
            live = engine._adopt(
                states[node.row.session_id],
                agents[node.row.session_id],
                first_seq=node.first_seq,
                stored_seq=node.last_seq,
                ready=False,
            )
            if live.state.parent_id is not None and live.state.active is None:
                live.log.close()  # a subagent's session ended with its one turn
        # Callbacks another runtime settled in a shared store while none held the tree.
        engine._commit(machine.show_settled(engine._states, tree[0].row.session_id))
        plan, facts = machine.restart(engine._states, tree[0].row.session_id)
        engine._commit(facts)
    except BaseException:
        for node in tree:
            engine._states.pop(node.row.session_id, None)
            engine._sessions.pop(node.row.session_id, None)
        with trio.CancelScope(shield=True), contextlib.suppress(StoreError):
            await store.release(ids, engine.owner)
        raise
    for resumed_session, turn_id in plan.resume:
        engine._spawn_turn(engine._live(resumed_session), turn_id, resume=True)
    held = [engine._live(node.row.session_id) for node in tree]
    try:
        await engine._flush(*held)
    finally:
        for live in held:
            live.ready = True


async def read_states(
    engine: Engine, session_id: str, agent: AgentDefinition
) -> tuple[machine.Sessions, dict[str, int]]:
    """The state of the tree holding ``session_id`` as the store has it now, and each
    session's last seq, without holding it: what a runtime reads of a session that another
    runtime runs on a shared store. It reads; it changes nothing.

    Raises:
        SessionNotFoundError: The store has no such session, or the tree's agents are not
            ``agent``'s tree.
        StoreError: The store failed, or is damaged.
    """
    tree, agents = await read_tree(engine, session_id, agent)
    states = await _states(engine.store, tree, agents)
    # A callback settled in the store whose holder has not gone on yet reads as closed, as
    # the holder will show it (only in these states, which no one writes).
    machine.show_settled(states, tree[0].row.session_id)
    return states, {node.row.session_id: node.last_seq for node in tree}


async def _states(
    store: Store, tree: list[StoredSession], agents: dict[str, AgentDefinition]
) -> machine.Sessions:
    """The tree's state from its stored rows, then the events of each unended turn."""
    states: machine.Sessions = {}
    for node in tree:
        _fold(store, states, node, agents[node.row.session_id])
    for node in tree:
        session = states[node.row.session_id]
        if session.active is not None:
            first = session.turns[session.active].first_seq
            async for event in _events(store, session.id, first, node.last_seq):
                machine.apply(states, event)
    return states


async def read_tree(
    engine: Engine, session_id: str, agent: AgentDefinition
) -> tuple[list[StoredSession], dict[str, AgentDefinition]]:
    """The tree of sessions holding ``session_id`` as the store has it, root first, parents
    before children, and each session's agent. It reads; it changes nothing.

    Raises:
        SessionNotFoundError: The store has no such session, or the tree's agents are not
            ``agent``'s tree.
        StoreError: The store failed, or is damaged.
    """
    store = engine.store
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
    return tree, _agents(engine, tree, session_id, agent)


def _fold(
    store: Store, states: machine.Sessions, node: StoredSession, agent: AgentDefinition
) -> None:
    """Apply the session's stored rows to ``states``: its state as it was stored.

    Raises:
        StoreError: A row is not what a runtime writes: the store is damaged.
    """
    row = node.row
    session_id = row.session_id
    for fact in _facts(node):
        try:
            machine.apply(states, fact)
        except (KeyError, IndexError, TypeError, ValueError, AssertionError) as error:
            raise store.damaged(
                session_id, _table(fact), "a row is not what was written"
            ) from error
    session = states[session_id]
    if row.parent_id is not None:
        parent = states.get(row.parent_id)
        if parent is None or row.parent_turn_id not in parent.turns:
            missing = f"turn {row.parent_turn_id}, which delegated, is missing"
            raise store.damaged(row.parent_id, "turns", missing)
    session.last_seq = node.last_seq  # the log's own length: its events stay in the store
    for turn in session.turns.values():
        turn.output_type = agent.output_type
        if not turn.max_steps:  # stored before turns had step limits
            turn.max_steps = agent.max_steps


def _facts(node: StoredSession) -> Iterator[Op]:
    """The session's stored rows as the facts that made them, in an order they apply in:
    a turn before what names it, a steered message before its entry."""
    session_id = node.row.session_id
    yield node.row
    yield from node.turns
    for turn_id, messages in node.steers.items():
        for message in messages:
            yield SteerRow(session_id, turn_id, message)
    for index, entry in enumerate(node.entries):
        yield EntryRow(session_id, index, entry)
    yield from node.keys
    yield from node.callbacks
    for turn_id, step in node.steps.items():
        yield StepRow(session_id, turn_id, step)


def _table(fact: Op) -> str:
    tables: dict[type, str] = {
        TurnRow: "turns",
        StepRow: "turns",
        SteerRow: "steers",
        EntryRow: "entries",
        KeyRow: "keys",
        CallbackRow: "callbacks",
        EventRow: "events",
    }
    return tables.get(type(fact), "sessions")


async def _events(store: Store, session_id: str, first: int, last: int) -> AsyncIterator[EventRow]:
    """The session's stored events from ``first`` to ``last``, as the facts that made them."""
    after = first - 1
    while after < last:
        page = await store.read_events(session_id, after, min(1_000, last - after))
        if not page:
            return
        for event in page:
            after += 1
            yield EventRow(session_id, after, event)


def _agents(
    engine: Engine, tree: list[StoredSession], session_id: str, agent: AgentDefinition
) -> dict[str, AgentDefinition]:
    """Each session's agent: the root's, then each subagent's among its parent's."""
    root = tree[0].row
    root_agent = agent if agent.name == root.agent else engine._agents.get(root.agent)
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
