"""A session's and a turn's live state, and the rules of starting, steering and stopping.

Everything here runs in the runtime's trio thread and changes state only between awaits, so
no lock is needed: a method that does not await is atomic.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from .._callbacks import Callback
from .._convert import unstructure
from .._entries import Entry, MessageEntry, ToolCallEntry
from .._errors import (
    SessionIdempotencyConflictError,
    SessionTerminatedError,
    TurnNotFoundError,
)
from .._events import EntryAdded, EntryCompleted, Event, TurnEnded, TurnStarted
from .._history import new_id
from .._records import Blocked, Interrupted, Running, TurnState
from ._log import EventLog

if TYPE_CHECKING:
    from .._agent import Agent
    from ._runtime import Runtime

__all__ = ["SessionCore", "TurnCore"]


@attrs.define(eq=False)
class TurnCore:
    """One turn's live state."""

    id: str
    session: SessionCore
    first_seq: int
    output_type: Any
    record: TurnState[Any] | None = None
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    done: trio.Event = attrs.field(factory=trio.Event)
    stop_cause: Literal["interrupted", "cancelled"] | None = None
    steered: list[MessageEntry] = attrs.field(factory=list)
    open_callbacks: dict[str, Callback] = attrs.field(factory=dict)
    tool_calls: list[ToolCallEntry] = attrs.field(factory=list)

    @property
    def ended(self) -> bool:
        return self.record is not None

    def state(self) -> TurnState[Any]:
        """The turn's record now: its end record, or Blocked, or Running."""
        cursor = self.session.log.last_cursor()
        if self.record is not None:
            return attrs.evolve(self.record, cursor=cursor)
        callbacks = self.session.open_callbacks_of(self)
        if callbacks:
            return Blocked(
                turn_id=self.id, session_id=self.session.id, cursor=cursor, callbacks=callbacks
            )
        return Running(turn_id=self.id, session_id=self.session.id, cursor=cursor)

    def stop(self, cause: Literal["interrupted", "cancelled"]) -> None:
        if self.stop_cause is None:
            self.stop_cause = cause
        self.scope.cancel()


def _fingerprint(content: Sequence[Any]) -> str:
    data = json.dumps(unstructure(tuple(content)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()


@attrs.define(eq=False)
class SessionCore:
    """One session's live state: its log, turns, history and idempotency keys."""

    id: str
    agent: Agent
    runtime: Runtime
    log: EventLog
    entries: list[Entry] = attrs.field(factory=list)
    turns: dict[str, TurnCore] = attrs.field(factory=dict)
    active: TurnCore | None = None
    terminated: bool = False
    idempotency: dict[str, tuple[str, str]] = attrs.field(factory=dict)
    idempotency_key: str | None = None

    # -- reading ---------------------------------------------------------------------------

    def turn(self, turn_id: str) -> TurnCore:
        try:
            return self.turns[turn_id]
        except KeyError:
            raise TurnNotFoundError(
                f"session {self.id} has no turn {turn_id!r}; use an id from a send or a record"
            ) from None

    def open_callbacks_of(self, turn: TurnCore) -> tuple[Callback, ...]:
        return tuple(turn.open_callbacks.values())

    # -- writing ---------------------------------------------------------------------------

    def emit(self, event_type: type[Event], turn_id: str | None, **fields: Any) -> Event:
        """Append an event of ``event_type`` with the log's next id."""
        event = event_type(id=self.log.next_id(), session_id=self.id, turn_id=turn_id, **fields)
        self.log.append(event)
        return event

    def add_entry(self, entry: Entry) -> None:
        """A complete entry joins the history: EntryAdded then EntryCompleted."""
        self.entries.append(entry)
        self.emit(EntryAdded, entry.turn_id, entry=entry)
        self.emit(EntryCompleted, entry.turn_id, entry=entry)

    def check_open(self) -> None:
        if self.terminated:
            raise SessionTerminatedError(
                f"session {self.id} was cancelled and takes no more messages; its history "
                "stays readable: start a new session to go on"
            )

    def check_key(self, key: str | None, fingerprint: str) -> TurnCore | None:
        """The turn an idempotency key started, or None for a new key.

        Raises:
            SessionIdempotencyConflictError: The key started a turn with another message.
        """
        if key is None or key not in self.idempotency:
            return None
        turn_id, known = self.idempotency[key]
        if known != fingerprint:
            raise SessionIdempotencyConflictError(
                f"idempotency key {key!r} already started turn {turn_id} with a different "
                "message; use a new key for a new message"
            )
        return self.turns[turn_id]

    def start_turn(
        self, content: tuple[Any, ...], key: str | None, output_type: Any
    ) -> tuple[TurnCore, bool] | TurnCore:
        """Start a turn with ``content``.

        Returns:
            ``(turn, True)`` for a new turn, ``(turn, False)`` for the turn the key already
            started, or the active turn alone when the session is busy.
        """
        fingerprint = _fingerprint(content) if key is not None else ""
        known = self.check_key(key, fingerprint)
        if known is not None:
            return known, False
        self.check_open()
        if self.active is not None:
            return self.active
        turn_id = new_id()
        message = MessageEntry(id=new_id(), turn_id=turn_id, role="user", content=content)
        turn = TurnCore(
            id=turn_id, session=self, first_seq=self.log.last_seq + 1, output_type=output_type
        )
        self.turns[turn_id] = turn
        self.active = turn
        if key is not None:
            self.idempotency[key] = (turn_id, fingerprint)
        self.emit(TurnStarted, turn_id, message=message)
        self.add_entry(message)
        self.runtime.spawn_turn(turn)
        return turn, True

    def steer(self, turn: TurnCore, content: tuple[Any, ...], key: str | None = None) -> bool:
        """Queue a message for the active turn's next model step; False if it is not active."""
        if self.active is not turn or turn.stop_cause is not None:
            return False
        message = MessageEntry(id=new_id(), turn_id=turn.id, role="user", content=content)
        turn.steered.append(message)
        if key is not None:
            self.idempotency[key] = (turn.id, _fingerprint(content))
        return True

    def end_turn(self, turn: TurnCore, record: TurnState[Any]) -> None:
        """Record how ``turn`` ended: TurnEnded is its last event."""
        if turn.record is not None:
            return
        for message in turn.steered:  # steered too late for a model step: still history
            self.add_entry(message)
        turn.steered.clear()
        turn.record = record = attrs.evolve(record, cursor=self.log.next_id())
        self.emit(TurnEnded, turn.id, record=record)
        if self.active is turn:
            self.active = None
        turn.done.set()

    async def cancel(self) -> None:
        """End the session: stop its turn, take no more commands, close the log."""
        self.terminated = True
        turn = self.active
        if turn is not None:
            turn.stop("cancelled")
            await turn.done.wait()
        if not self.log.closed:
            self.log.close()


def interrupted(turn: TurnCore) -> Interrupted:
    return Interrupted(
        turn_id=turn.id, session_id=turn.session.id, cause=turn.stop_cause or "interrupted"
    )
