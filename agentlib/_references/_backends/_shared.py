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
        return await self.runtime._answer_elsewhere(
            session_id, self.agent, callback_id, answer, key
        )

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

    async def event_page(
        self, session_id: str, after: str | None, limit: int, wait: float, turn_id: str | None
    ) -> tuple[list[Event], str | None, bool]:
        """A page of stored events, read from the store as the holder commits them.

        Raises:
            ObservationLost: The events after ``after`` were pruned.
        """
        store = self.runtime.store
        position = position_of(after, session_id)
        found = await store.wait_for_events(session_id, -1)
        if found is None:
            raise not_found(session_id)
        progress: Progress = found
        end_seq = None
        if turn_id is not None or progress.subagent:  # a subagent's log ends with its turn
            states, _ = await read_states(self.runtime, session_id, self.agent)
            session = states[session_id]
            turn = session.turn(turn_id) if turn_id is not None else None
            if turn is not None:
                position, end_seq = max(position, turn.first_seq - 1), turn.end_seq
            else:
                end_seq = next((t.end_seq for t in session.turns.values()), None)
        if position > progress.last_seq:
            raise InvalidCursorError(
                f"session {session_id} never had this cursor (it has {progress.last_seq} "
                "events); pass a cursor it gave you"
            )
        output_type = self.agent.output_type

        def ended() -> bool:
            if end_seq is not None and position >= end_seq:
                return True
            return progress.terminated and position >= progress.last_seq

        with trio.move_on_after(wait):
            while progress.last_seq <= position and not ended():
                found = await store.wait_for_events(session_id, position)
                if found is None:
                    raise not_found(session_id)
                progress = found
        events: list[Event] = []
        while len(events) < limit and not ended():
            page = await store.read_events(session_id, position, min(limit, _FOLLOWED_PAGE))
            if not page:
                break
            if page[0].id != machine.format_cursor(session_id, position + 1):
                resume = machine.format_cursor(session_id, seq_of_event(page[0]) - 1)
                raise ObservationLost(
                    f"event {position + 1} of session {session_id} was pruned (only events "
                    f"from {seq_of_event(page[0])} on are kept); resume after cursor {resume}",
                    cursor=resume,
                )
            for event in page:
                position = seq_of_event(event)
                if turn_id is None or event.turn_id == turn_id:
                    events.append(event_for_reader(event, output_type))
                    if isinstance(event, TurnEnded) and (turn_id or progress.subagent):
                        end_seq = position
                if len(events) >= limit or ended():
                    break
        cursor = machine.format_cursor(session_id, position) if position else after
        return events, cursor, ended()
