"""A session another runtime holds on a shared store: changes sent to that runtime as
requests, reads followed in the store as it commits them.

A request returns None once this runtime holds the session itself (its holder let it go,
or died or stalled): the caller then does it here (``_local.LocalBackend``).
"""

from __future__ import annotations

from typing import Any

import trio

from ..._data._errors import InvalidCursorError, ObservationLost
from ..._data._events import Event, TurnEnded
from ..._data._records import TurnState
from ..._engine import _machine as machine
from ..._engine._mailbox import Kind, ask
from ..._engine._restore import not_found, read_states, read_tree
from ..._engine._runtime import Runtime
from ..._store._base import Progress
from ._base import Told, event_for_reader, position_of, seq_of_event

__all__ = ["SharedBackend"]

#: The most events a read of another runtime's session brings at once.
_FOLLOWED_PAGE = 1000


class SharedBackend:
    """The sessions another runtime holds on this runtime's shared store, as this runtime
    reaches them."""

    __slots__ = ("agent", "runtime")

    def __init__(self, runtime: Runtime, agent: Any) -> None:
        self.runtime = runtime
        self.agent = agent

    async def ask(self, session_id: str, request: Kind) -> dict[str, Any] | None:
        """Send ``request`` to the runtime that holds the session: its reply, which the
        request's ``read`` reads; None once this runtime holds the session itself."""
        return await ask(self.runtime, session_id, self.agent, request)

    async def answer(
        self, session_id: str, callback_id: str, answer: object, key: str | None
    ) -> Told:
        # Claimed in the store: the holder hears of it, and its turn goes on there.
        return await self.runtime._claim_answer(session_id, self.agent, callback_id, answer, key)

    async def record(self, session_id: str, turn_id: str) -> TurnState[Any]:
        """The turn's record as the shared store has it now: what the holder's readers see
        (the same machine reads the same rows and events)."""
        states, last = await read_states(self.runtime, session_id, self.agent)
        turn = states[session_id].turn(turn_id)
        return machine.record_of(states, turn, last[session_id])

    async def subagents(self, session_id: str) -> list[tuple[str, Any]]:
        tree, agents = await read_tree(self.runtime, session_id, self.agent)
        return [
            (node.row.session_id, agents[node.row.session_id])
            for node in tree
            if node.row.parent_id == session_id
        ]

    def events(self, session_id: str, after: str | None, turn_id: str | None) -> StoreReader:
        return StoreReader(self, session_id, after, turn_id)


class StoreReader:
    """A reader of the events of a session another runtime holds, from the shared store as
    the holder commits them (:class:`~._base.EventReader`)."""

    def __init__(
        self, backend: SharedBackend, session_id: str, after: str | None, turn_id: str | None
    ) -> None:
        self._backend = backend
        self._session_id = session_id
        self._turn_id = turn_id
        self.cursor = after
        self.ended = False
        self._position: int | None = None  # known once the first page has checked ``after``
        self._end_seq: int | None = None  # the seq of the last event that will come
        self._progress = Progress(first_seq=1, last_seq=0, terminated=False, subagent=False)

    async def _progress_after(self, seq: int) -> Progress:
        found = await self._backend.runtime.store.wait_for_events(self._session_id, seq)
        if found is None:
            raise not_found(self._session_id)
        self._progress = found
        return found

    async def _start(self) -> int:
        """The position ``after`` names, checked; and where the events end, if known."""
        session_id = self._session_id
        position = position_of(self.cursor, session_id)
        progress = await self._progress_after(-1)
        if self._turn_id is not None or progress.subagent:  # a subagent's log ends with its turn
            states, _ = await read_states(self._backend.runtime, session_id, self._backend.agent)
            session = states[session_id]
            if self._turn_id is not None:
                turn = session.turn(self._turn_id)
                position, self._end_seq = max(position, turn.first_seq - 1), turn.end_seq
            else:
                self._end_seq = next((t.end_seq for t in session.turns.values()), None)
        if position > progress.last_seq:
            raise InvalidCursorError(
                f"session {session_id} never had this cursor (it has {progress.last_seq} "
                "events); pass a cursor it gave you"
            )
        return position

    def _ended(self, position: int) -> bool:
        if self._end_seq is not None and position >= self._end_seq:
            return True
        return self._progress.terminated and position >= self._progress.last_seq

    async def page(self, limit: int, wait: float) -> list[Event]:
        session_id, turn_id = self._session_id, self._turn_id
        position = self._position
        if position is None:
            position = self._position = await self._start()
        with trio.move_on_after(wait):
            while self._progress.last_seq <= position and not self._ended(position):
                await self._progress_after(position)
        store = self._backend.runtime.store
        output_type = self._backend.agent.output_type
        subagent = self._progress.subagent
        events: list[Event] = []
        while len(events) < limit and not self._ended(position):
            page = await store.read_events(session_id, position, min(limit, _FOLLOWED_PAGE))
            if not page:
                break
            if page[0].id != machine.format_cursor(session_id, position + 1):
                first = seq_of_event(page[0])
                resume = machine.format_cursor(session_id, first - 1)
                raise ObservationLost(
                    f"event {position + 1} of session {session_id} was pruned (only events "
                    f"from {first} on are kept); resume after cursor {resume}",
                    cursor=resume,
                )
            for event in page:
                position = seq_of_event(event)
                if turn_id is None or event.turn_id == turn_id:
                    events.append(event_for_reader(event, output_type))
                    if isinstance(event, TurnEnded) and (turn_id or subagent):
                        self._end_seq = position
                if len(events) >= limit or self._ended(position):
                    break
        self._position = position
        if position:
            self.cursor = machine.format_cursor(session_id, position)
        self.ended = self._ended(position)
        return events

    def close(self) -> None:
        pass
