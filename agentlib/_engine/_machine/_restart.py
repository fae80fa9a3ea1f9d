"""How a tree of sessions read back from a store goes on once the runtime that ran it is
gone: :func:`restart` decides each unended turn."""

from __future__ import annotations

import attrs

from ..._data._records import Interrupted, UnknownOutcome
from ._callbacks import close_callback
from ._queries import open_below, tree_of
from ._state import Call, CallState, Facts, Sessions
from ._steps import error_result, update_call
from ._transitions import end_turn, interrupted


def _lost(call: Call, unknown: set[str]) -> bool:
    """Whether the call's outcome was lost with its runtime: its tool may have run, or its
    subagent's turn ended as UnknownOutcome."""
    if call.state is CallState.DELEGATED:
        return call.child is not None and call.child[1] in unknown
    return call.state is CallState.RUNNING or (call.state is CallState.DONE and call.result is None)


#: What the model is told of a call that was running when its runtime stopped, in a step
#: that goes on.
LOST = (
    "this call's outcome is unknown: the runtime stopped while it ran, and it was not run "
    "again (it may or may not have taken effect)"
)


@attrs.frozen
class Restart:
    """How a tree of sessions read back goes on: the turns to resume (deepest first)."""

    resume: tuple[tuple[str, str], ...]


def restart(sessions: Sessions, root_id: str) -> tuple[Restart, Facts]:
    """Decide how each unended turn of a tree read back from the store goes on, now that
    the runtime that ran it is gone.

    A turn goes on from its tool step when nothing of the step was running, or when a
    callback of it (or of a subagent below it) is still open: it was Blocked, as a caller
    may have been told, and stays so; each call that was running gets an error result and
    never runs again. Any other unended turn (a model step, a tool running) reads
    ``UnknownOutcome``; one of a cancelled session, ``Interrupted``; a subagent's whose
    delegating turn does not go on, ``Interrupted`` too.
    """
    facts = Facts(sessions)
    tree = list(tree_of(sessions, root_id))
    going_on: list[tuple[str, str]] = []
    unknown: set[str] = set()
    for session in reversed(tree):  # deepest first: a parent waits on its subagent's turn
        if session.active is None:
            continue
        turn = session.turns[session.active]
        if session.terminated:
            _, more = end_turn(
                sessions, session.id, turn.id, attrs.evolve(interrupted(turn), cause="cancelled")
            )
            facts.extend(more)
            continue
        step = turn.step
        lost = (
            []
            if step is None
            else [index for index, call in enumerate(step.calls) if _lost(call, unknown)]
        )
        for index in lost:  # what a running call asked (an MCP server's URL) ended with it
            callback_id = step.calls[index].callback if step is not None else None
            if callback_id is not None and session.callbacks[callback_id].open:
                facts.extend(close_callback(sessions, session.id, callback_id, answered=False))
        if step is None or (lost and not open_below(sessions, turn)):
            unknown.add(turn.id)
            _, more = end_turn(
                sessions,
                session.id,
                turn.id,
                UnknownOutcome(
                    turn_id=turn.id,
                    session_id=session.id,
                    reason="the runtime running this turn stopped before the turn ended",
                ),
            )
            facts.extend(more)
            continue
        for index in lost:
            call = step.calls[index]
            if call.state is not CallState.DELEGATED:  # a subagent's turn says how it ended
                result = error_result(call.entry, LOST)
                facts.extend(
                    update_call(
                        sessions, session.id, turn.id, index, state=CallState.DONE, result=result
                    )
                )
        going_on.append((session.id, turn.id))
    # A subagent's turn goes on only if the turn that delegated to it does (top down).
    kept = {turn_id for _, turn_id in going_on}
    for session in tree:
        if session.parent_id is None or session.active is None:
            continue
        turn = session.turns[session.active]
        if turn.id in kept and session.parent_turn_id not in kept:
            kept.discard(turn.id)
            _, more = end_turn(
                sessions,
                session.id,
                turn.id,
                Interrupted(turn_id=turn.id, session_id=session.id, cause="cancelled"),
            )
            facts.extend(more)
    return Restart(tuple(pair for pair in going_on if pair[1] in kept)), facts
