"""What the engine reads of the state without changing it: a session's tree, its open
callbacks, a turn's record as readers may see it, whether a turn can be resumed, the history
as the model sees it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from ..._data._entries import Entry
from ..._data._records import Blocked, Running, TurnState
from ._cursors import format_cursor
from ._state import CallbackState, CallState, SessionMachine, TurnMachine, hidden_from_model


def ancestors(
    sessions: Mapping[str, SessionMachine], session_id: str
) -> Iterator[tuple[SessionMachine, TurnMachine]]:
    """Each session above ``session_id``, with its turn that (indirectly) delegated to it."""
    session = sessions[session_id]
    while session.parent_id is not None:
        parent = sessions[session.parent_id]
        yield parent, parent.turns[session.parent_turn_id or ""]
        session = parent


def root_of(sessions: Mapping[str, SessionMachine], session_id: str) -> SessionMachine:
    session = sessions[session_id]
    while session.parent_id is not None:
        session = sessions[session.parent_id]
    return session


def tree_of(sessions: Mapping[str, SessionMachine], session_id: str) -> Iterator[SessionMachine]:
    """The session and its subagents' sessions, at any depth, parents first."""
    todo = [sessions[session_id]]
    while todo:
        session = todo.pop(0)
        yield session
        todo.extend(sessions[child] for child in session.children if child in sessions)


def find_callback(
    sessions: Mapping[str, SessionMachine], session_id: str, callback_id: str
) -> CallbackState | None:
    """Callback ``callback_id`` of the session or of a subagent's below it: the session's
    own whatever its phase, a subagent's while it is open (the session's log shows it)."""
    session = sessions[session_id]
    own = session.callbacks.get(callback_id)
    if own is not None:
        return own
    if callback_id not in session.shown:
        return None
    for below in tree_of(sessions, session_id):
        found = below.callbacks.get(callback_id)
        if found is not None:
            return found
    return None


def running_subagents(sessions: Mapping[str, SessionMachine], root_id: str) -> int:
    """The subagent turns running below a root session, at any depth."""
    return sum(
        session.active is not None
        for session in tree_of(sessions, root_id)
        if session.id != root_id
    )


def open_below(sessions: Mapping[str, SessionMachine], turn: TurnMachine) -> list[CallbackState]:
    """The open callbacks of ``turn``, and of the subagent turns it delegated to, at any
    depth."""
    session = sessions[turn.session_id]
    found = [
        state
        for state in session.callbacks.values()
        if state.open and state.callback.turn_id == turn.id
    ]
    for call in turn.step.calls if turn.step is not None else ():
        if call.state is CallState.DELEGATED and call.child is not None:
            child_session = sessions.get(call.child[0])
            child = None if child_session is None else child_session.turns.get(call.child[1])
            if child is not None and child.record is None:
                found.extend(open_below(sessions, child))
    return found


def record_of(
    sessions: Mapping[str, SessionMachine], turn: TurnMachine, visible: int
) -> TurnState[Any]:
    """The turn's record as readers may see it, when the store has made its log durable up
    to ``visible``: its end, once that is durable; else Blocked on the callbacks whose
    opening is durable; else Running (a reader is never told what a crash could undo)."""
    session = sessions[turn.session_id]
    cursor = format_cursor(session.id, visible) if visible else None
    if turn.record is not None and turn.end_seq is not None and turn.end_seq <= visible:
        return attrs.evolve(turn.record, cursor=cursor)
    if session.active == turn.id:
        callbacks = tuple(callback for seq, callback in session.shown.values() if seq <= visible)
        if callbacks:
            return Blocked(
                turn_id=turn.id, session_id=session.id, cursor=cursor, callbacks=callbacks
            )
    return Running(turn_id=turn.id, session_id=session.id, cursor=cursor)


def resumable(sessions: Mapping[str, SessionMachine], turn: TurnMachine) -> bool:
    """Whether a later runtime can resume the turn from the store: in a tool step, it waits
    on an open callback (its own or a subagent's below it), or nothing of it runs and every
    subagent turn it waits on can be resumed.

    A turn with an open callback is Blocked, as a caller may have been told, and stays so:
    the calls of its step that still run are cut short, and a later runtime gives the model
    an error result for each (:func:`restart`).
    """
    if turn.record is not None or turn.step is None or sessions[turn.session_id].terminated:
        return False
    if open_below(sessions, turn):
        return True
    for call in turn.step.calls:
        if call.state is CallState.RUNNING:
            return False
        if call.state is CallState.DELEGATED and call.child is not None:
            child = sessions[call.child[0]].turns[call.child[1]]
            if child.record is None and not resumable(sessions, child):
                return False
    return True


def model_history(session: SessionMachine) -> Sequence[Entry]:
    """The history as the model sees it: without the snapshots imported with it."""
    if not session.hidden:
        return HistoryView(session.entries)
    return tuple(entry for entry in session.entries if not hidden_from_model(entry))


class HistoryView(Sequence[Entry]):
    """The first ``length`` entries of a list that only grows: a snapshot without a copy."""

    __slots__ = ("_entries", "_length")

    def __init__(self, entries: list[Entry]) -> None:
        self._entries = entries
        self._length = len(entries)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self._entries[: self._length][index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("history index out of range")
        return self._entries[index]

    def __iter__(self) -> Iterator[Entry]:
        entries = self._entries
        for index in range(self._length):
            yield entries[index]
