"""The transitions of sessions and turns: a new session, a turn started, steered, stopped
and ended, a subagent's session started below a turn.

A transition takes the sessions and an input, decides the facts it brings, applies them
(:class:`~._state.Facts`) and returns them, with what the runtime is to do next. A turn's
model and tool steps are in :mod:`._steps`, its callbacks in :mod:`._callbacks`, a restart
in :mod:`._restart`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import attrs

from ..._data._content import TextContentBlock
from ..._data._convert import unstructure
from ..._data._entries import Entry, MessageEntry
from ..._data._errors import (
    SessionBusyError,
    SessionIdempotencyConflictError,
    SessionTerminatedError,
)
from ..._data._events import TurnEnded, TurnStarted
from ..._data._history import new_id
from ..._data._ops import KeyRow, SessionRow, SteerRow, StepRow, TurnRow
from ..._data._records import ErrorInfo, Failed, Interrupted, TurnState
from ._callbacks import add_close
from ._cursors import format_cursor
from ._queries import open_below, root_of, running_subagents
from ._state import Facts, SessionMachine, Sessions, StopCause, TurnMachine, evolve

# -- sessions and turns ---------------------------------------------------------------------


def new_session(
    sessions: Sessions,
    session_id: str,
    agent: str,
    inputs: Any,
    *,
    key: str | None = None,
    parent: tuple[str, str] | None = None,
    lease: tuple[str, float] | None = None,
) -> Facts:
    """A new session (leased from the start, with ``lease``)."""
    facts = Facts(sessions)
    parent_id, parent_turn_id = parent if parent is not None else (None, None)
    facts.add(SessionRow(session_id, agent, parent_id, parent_turn_id, key, inputs, False, lease))
    return facts


def import_history(sessions: Sessions, session_id: str, entries: Sequence[Entry]) -> Facts:
    """A conversation held elsewhere joins a new session's history."""
    facts = Facts(sessions)
    session = sessions[session_id]
    for entry in entries:
        facts.entry(session, entry)
    return facts


#: Answers of other callbacks, which a client tool's result must not be (a credential would
def fingerprint(content: Sequence[Any]) -> str:
    """What identifies a message, for an idempotency key."""
    data = json.dumps(unstructure(tuple(content)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()


def keyed_turn(session: SessionMachine, key: str | None, content_fingerprint: str) -> str | None:
    """The turn an idempotency key started, or None for a new key.

    Raises:
        SessionIdempotencyConflictError: The key started a turn with another message.
    """
    if key is None or key not in session.keys:
        return None
    turn_id, known = session.keys[key]
    if known != content_fingerprint:
        raise SessionIdempotencyConflictError(
            f"idempotency key {key!r} already started turn {turn_id} with a different "
            "message; use a new key for a new message"
        )
    return turn_id


def check_open(session: SessionMachine) -> None:
    """Raises:
    SessionTerminatedError: The session was cancelled."""
    if session.terminated:
        raise SessionTerminatedError(
            f"session {session.id} was cancelled and takes no more messages; its history "
            "stays readable: start a new session to go on"
        )


@attrs.frozen
class Started:
    """A turn a message started (``new``), or the one its key started before."""

    turn_id: str
    new: bool


@attrs.frozen
class Occupied:
    """The session has an active turn: no turn was started."""

    turn_id: str


def start_turn(
    sessions: Sessions,
    session_id: str,
    content: tuple[Any, ...],
    key: str | None,
    *,
    max_steps: int,
    output_type: Any = None,
    output_type_name: str | None = None,
) -> tuple[Started | Occupied, Facts]:
    """Start a turn with the user's message ``content``.

    Raises:
        SessionIdempotencyConflictError: ``key`` started a turn with another message.
        SessionTerminatedError: The session was cancelled.
    """
    facts = Facts(sessions)
    session = sessions[session_id]
    content_fingerprint = fingerprint(content) if key is not None else ""
    known = keyed_turn(session, key, content_fingerprint)
    if known is not None:
        return Started(known, new=False), facts
    check_open(session)
    if session.active is not None:
        return Occupied(session.active), facts
    turn_id = new_id()
    message = MessageEntry(id=new_id(), turn_id=turn_id, role="user", content=content)
    facts.add(
        TurnRow(session.id, turn_id, session.last_seq + 1, output_type_name, max_steps=max_steps)
    )
    turn = session.turns[turn_id]
    turn.output_type = output_type
    if key is not None:
        facts.add(KeyRow(session.id, key, turn_id, content_fingerprint))
    facts.emit(session, TurnStarted, turn_id, message=message)
    facts.entry(session, message)
    return Started(turn_id, new=True), facts


def steer(
    sessions: Sessions,
    session_id: str,
    turn_id: str,
    content: tuple[Any, ...],
    key: str | None = None,
) -> tuple[bool, Facts]:
    """Queue a message for the active turn's next model step; False if it is not active
    (or is being stopped). A ``key`` the session has seen was that steer: it is not queued
    again (True if it steered this turn)."""
    facts = Facts(sessions)
    session = sessions[session_id]
    turn = session.turns[turn_id]
    if key is not None and key in session.keys:
        return session.keys[key][0] == turn_id, facts
    if session.active != turn_id or turn.stop_cause is not None:
        return False, facts
    message = MessageEntry(id=new_id(), turn_id=turn_id, role="user", content=content)
    facts.add(SteerRow(session.id, turn_id, message))
    if key is not None:
        facts.add(KeyRow(session.id, key, turn_id, fingerprint(content)))
    return True, facts


def cancel(sessions: Sessions, session_id: str) -> Facts:
    """Mark the session cancelled: it takes no more messages."""
    facts = Facts(sessions)
    session = sessions[session_id]
    if not session.terminated:
        facts.add(attrs.evolve(session.row(), terminated=True))
    return facts


def stop(sessions: Sessions, session_id: str, turn_id: str, cause: StopCause) -> None:
    """Note why the turn is being stopped (the first cause stays); its runtime stops it."""
    turn = sessions[session_id].turns[turn_id]
    if turn.stop_cause is None:
        turn.stop_cause = cause


def interrupted(turn: TurnMachine) -> Interrupted:
    cause = turn.stop_cause or StopCause.INTERRUPTED
    return Interrupted(turn_id=turn.id, session_id=turn.session_id, cause=cause.value)


def failed(turn: TurnMachine, error: BaseException) -> Failed:
    return Failed(
        turn_id=turn.id,
        session_id=turn.session_id,
        error=ErrorInfo(type=type(error).__name__, message=str(error)),
    )


# -- ending ---------------------------------------------------------------------------------


def end_turn(
    sessions: Sessions, session_id: str, turn_id: str, record: TurnState[Any]
) -> tuple[TurnState[Any], Facts]:
    """Record how the turn ended. Messages steered too late for a model step join the
    history; its open callbacks (and its subagents' below it) close unanswered; its
    ``TurnEnded`` is its last event. Returns the record, with its cursor."""
    facts = Facts(sessions)
    session = sessions[session_id]
    turn = session.turns[turn_id]
    if turn.record is not None:
        return turn.record, facts
    for message in list(turn.steered):
        facts.entry(session, message)
    for state in open_below(sessions, turn):
        owner = sessions[state.callback.session_id]
        add_close(facts, owner, state.callback.id, False, None, None)
    if turn.step is not None:
        facts.add(StepRow(turn.session_id, turn.id, None))
    end = session.last_seq + 1
    record = evolve(record, cursor=format_cursor(session.id, end))
    facts.add(TurnRow(session.id, turn.id, turn.first_seq, record=record))
    facts.emit(session, TurnEnded, turn.id, record=record)
    return record, facts


# -- subagents ------------------------------------------------------------------------------


def start_subagent(
    sessions: Sessions,
    session_id: str,
    turn_id: str,
    *,
    child_id: str,
    agent: str,
    message: str,
    limit: int,
    max_steps: int,
    output_type: Any,
    lease: tuple[str, float] | None,
) -> tuple[str, Facts]:
    """A new subagent session below this one, of ``agent``, running a turn on ``message``.
    Returns the new turn's id.

    Raises:
        SessionBusyError: The root already runs ``limit`` subagent turns; nothing changed.
    """
    session = sessions[session_id]
    root = root_of(sessions, session_id)
    if running_subagents(sessions, root.id) >= limit:
        raise SessionBusyError(
            f"session {root.id} already runs {limit} subagent turns, its agent's "
            "max_running_subagents; nothing was started: delegate again once one ends"
        )
    facts = new_session(
        sessions, child_id, agent, session.inputs, parent=(session.id, turn_id), lease=lease
    )
    started, more = start_turn(
        sessions,
        child_id,
        (TextContentBlock(text=message),),
        None,
        max_steps=max_steps,
        output_type=output_type,
    )
    facts.extend(more)
    assert isinstance(started, Started)
    return started.turn_id, facts
