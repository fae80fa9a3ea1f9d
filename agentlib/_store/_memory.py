"""The in-memory store: sessions live as long as the store object."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from .._data._entries import Entry
from .._data._errors import LeaseLost
from .._data._events import Event
from ._base import (
    CallbackRow,
    EntryRow,
    EventRow,
    KeyRow,
    LeaseRefused,
    Op,
    PruneRow,
    SessionRow,
    SteerRow,
    StepRow,
    Store,
    StoredSession,
    TurnRow,
)

__all__ = ["MemoryStore"]


@attrs.define(eq=False)
class _Session:
    row: SessionRow
    first_seq: int = 1
    events: list[Event] = attrs.field(factory=list)
    entries: list[Entry] = attrs.field(factory=list)
    turns: dict[str, TurnRow] = attrs.field(factory=dict)
    steps: dict[str, Any] = attrs.field(factory=dict)
    steers: dict[str, list[Entry]] = attrs.field(factory=dict)
    callbacks: dict[str, CallbackRow] = attrs.field(factory=dict)
    keys: dict[str, KeyRow] = attrs.field(factory=dict)
    children: list[str] = attrs.field(factory=list)
    lease: tuple[str, float] | None = None


class MemoryStore(Store):
    """Sessions in memory, for as long as the store object lives: every write is durable at
    once. Reopen a runtime on the same object to resume its sessions.

    Its sessions live in the object, which runtimes share to share them: it cannot tell
    their writes apart. Another object made ``shared_with`` it holds the same sessions, as
    a second process on one database would see them; each object fences its own leases (a
    write to a session another object's owner took over is refused with ``LeaseLost``).

    Args:
        durable: Whether it keeps sessions for the next runtime (``":memory:"`` is a
            MemoryStore that does not: sessions end with their runtime).
        clock: The wall clock leases are measured on (seconds).
        shared_with: A MemoryStore whose sessions this one holds too.
    """

    def __init__(
        self,
        *,
        durable: bool = True,
        clock: Callable[[], float] = time.time,
        shared_with: MemoryStore | None = None,
    ) -> None:
        self.durable = durable
        self._sessions: dict[str, _Session] = {}
        self._keys: dict[str, str] = {}
        if shared_with is not None:
            self._sessions = shared_with._sessions
            self._keys = shared_with._keys
        self._clock = clock
        self._held: dict[str, str] = {}  # session id -> the owner this object leased it to

    async def open(self, start_soon: Callable[..., Any]) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def write(self, op: Op) -> None:
        if not self.durable:  # ":memory:": sessions die with the runtime, which holds them
            if isinstance(op, EventRow) and "_listeners" in self.__dict__:
                self.committed((op,))
            return
        if self.failure is not None or self._fenced(op):
            return
        if isinstance(op, SessionRow):
            known = self._sessions.get(op.session_id)
            if known is None:
                self._sessions[op.session_id] = _Session(attrs.evolve(op, lease=None))
                if op.lease is not None:
                    owner, seconds = op.lease
                    self._sessions[op.session_id].lease = (owner, self._clock() + seconds)
                    self._held[op.session_id] = owner
                if op.parent_id is not None:
                    self._sessions[op.parent_id].children.append(op.session_id)
                if op.idempotency_key is not None:
                    self._keys[op.idempotency_key] = op.session_id
            else:  # the session is terminated: the rest of its row stays as it was
                known.row = attrs.evolve(known.row, terminated=op.terminated)
        else:
            session = self._sessions[op.session_id]
            if isinstance(op, EventRow):
                session.events.append(op.event)
            elif isinstance(op, EntryRow):
                session.entries.append(op.entry)
            elif isinstance(op, TurnRow):
                started = session.turns.get(op.turn_id)
                session.turns[op.turn_id] = (
                    op if started is None else attrs.evolve(started, record=op.record)
                )
            elif isinstance(op, StepRow):
                session.steps[op.turn_id] = op.step
            elif isinstance(op, SteerRow):
                session.steers.setdefault(op.turn_id, []).append(op.message)
            elif isinstance(op, CallbackRow):
                session.callbacks[op.callback.id] = op
            elif isinstance(op, KeyRow):
                session.keys[op.key] = op
            elif isinstance(op, PruneRow):
                drop = max(0, min(op.before_seq - session.first_seq, len(session.events)))
                del session.events[:drop]
                session.first_seq += drop
        self.committed((op,))

    def _fenced(self, op: Op) -> bool:
        """Whether ``op`` writes to a session this object leased, which another owner took
        over since: then the write is refused (and recorded, see :meth:`taken_over`); the
        object's other sessions go on."""
        owner = self._held.get(op.session_id)
        if owner is None:
            return False
        lease = self._sessions[op.session_id].lease
        holder = None if lease is None else lease[0]
        if holder == owner:
            return False
        self.refuse(LeaseLost(op.session_id, holder))
        return True

    async def flush(self) -> None:
        self.check()

    async def load(self, session_id: str) -> StoredSession | None:
        session = self._sessions.get(session_id)
        if session is None:
            return None
        return StoredSession(
            row=session.row,
            first_seq=session.first_seq,
            last_seq=session.first_seq - 1 + len(session.events),
            entries=tuple(session.entries),
            turns=tuple(session.turns.values()),
            steps={turn: step for turn, step in session.steps.items() if step is not None},
            steers={turn: tuple(messages) for turn, messages in session.steers.items()},
            callbacks=tuple(session.callbacks.values()),
            keys=tuple(session.keys.values()),
            children=tuple(session.children),
        )

    async def session_for_key(self, key: str) -> str | None:
        return self._keys.get(key)

    async def read_events(self, session_id: str, after: int, limit: int) -> list[Event]:
        session = self._sessions.get(session_id)
        if session is None:
            return []
        start = max(0, after + 1 - session.first_seq)
        return session.events[start : start + limit]

    async def acquire(self, session_ids: Sequence[str], owner: str, seconds: float) -> None:
        self.check()  # a store that can no longer commit takes no lease
        now = self._clock()
        for session_id in session_ids:
            lease = self._sessions[session_id].lease
            if lease is not None and lease[0] != owner and lease[1] > now:
                raise LeaseRefused(session_id, *lease)
        for session_id in session_ids:
            self._sessions[session_id].lease = (owner, now + seconds)
            self._held[session_id] = owner

    async def renew(self, session_ids: Sequence[str], owner: str, seconds: float) -> list[str]:
        self.check()  # a store that failed renews nothing
        now = self._clock()
        lost = []
        for session_id in session_ids:
            session = self._sessions.get(session_id)
            if session is None:
                continue
            if session.lease is None or session.lease[0] != owner:
                lost.append(session_id)  # taken over (and maybe let go): not owner's now
            else:
                session.lease = (owner, now + seconds)
        return lost

    async def release(self, session_ids: Sequence[str], owner: str) -> None:
        for session_id in session_ids:
            self._held.pop(session_id, None)
            session = self._sessions.get(session_id)
            if session is not None and session.lease is not None and session.lease[0] == owner:
                session.lease = None
