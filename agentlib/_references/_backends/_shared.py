"""A session another runtime holds on a shared store: changes sent to that runtime as
requests, reads followed in the store as it commits them.

Each verb returns None once this runtime holds the session itself (its holder let it go,
or died or stalled): the caller then does it here (``_local.LocalBackend``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Any

import trio

from ..._data._callbacks import KeepCallbackOpen
from ..._data._errors import InvalidCursorError, ObservationLost
from ..._data._events import Event, TurnEnded
from ..._data._records import Blocked, Running, TurnState
from ..._engine import _machine as machine
from ..._engine._handlers import Handler, invoke
from ..._engine._mailbox import Kind, ask, holds
from ..._engine._restore import not_found, read_states, read_tree
from ..._engine._runtime import Runtime
from ..._store._base import Progress
from ._base import EventHandler, Told, event_for_reader, position_of, seq_of_event

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

    async def wait(
        self,
        session_id: str,
        turn_id: str,
        handler_for: Callable[[Any], Handler | None] | None,
        answer: Callable[[str, object], Any],
        *,
        after: TurnState[Any] | str | None,
        deadline: float,
        on_event: EventHandler | None,
        wanted: Any,
    ) -> TurnState[Any] | int | None:
        """The turn's record, read again as the store has it each time the session has new
        events. A callback with a handler is answered by it (``answer``, through the
        store's claim); ``on_event`` is called with each of the turn's events up to the
        record's.

        Every third of a lease, it tries to take the session: a holder that died or stalled
        leaves it to this runtime once its lease has expired, and its turns go on here.
        Then it returns the seq up to which ``on_event`` saw the events (None without one),
        for the wait to go on here."""
        runtime = self.runtime
        position = position_of(after, session_id)
        handled: set[str] = set()
        delivered: int | None = None  # the seq up to which on_event saw the session's events
        next_try = trio.current_time() + runtime.lease_seconds / 3
        with trio.move_on_at(deadline):
            while True:
                states, last = await read_states(runtime, session_id, self.agent)
                turn = states[session_id].turn(turn_id)
                record = machine.record_of(states, turn, last[session_id])
                if on_event is not None:
                    if delivered is None:
                        delivered = turn.first_seq - 1  # it sees the whole turn
                    delivered = await self._deliver(
                        session_id, turn_id, on_event, delivered, last[session_id], wanted
                    )
                if not isinstance(record, (Running, Blocked)):
                    return record
                if isinstance(record, Blocked):
                    opened = [
                        callback
                        for seq, callback in states[session_id].shown.values()
                        if seq > position and callback.id not in handled
                    ]
                    kept = False
                    for callback in opened:
                        handler = None if handler_for is None else handler_for(callback)
                        if handler is None:
                            return record
                        handled.add(callback.id)
                        answered = await invoke(handler, callback)
                        if isinstance(answered, KeepCallbackOpen):
                            kept = True
                        else:
                            await answer(callback.id, answered)
                    if kept:
                        return record
                    if opened:
                        continue
                with trio.move_on_at(next_try):
                    await runtime.store.wait_for_events(session_id, last[session_id])
                if trio.current_time() >= next_try:
                    next_try = trio.current_time() + runtime.lease_seconds / 3
                    if await holds(runtime, session_id, self.agent):
                        return delivered
        return await self.record(session_id, turn_id)  # at the timeout

    async def _deliver(
        self,
        session_id: str,
        turn_id: str,
        on_event: EventHandler,
        delivered: int,
        last_seq: int,
        wanted: Any,
    ) -> int:
        """Call ``on_event`` with the turn's stored events after seq ``delivered`` up to
        ``last_seq``; the seq delivered up to."""
        store = self.runtime.store
        while delivered < last_seq:
            page = await store.read_events(
                session_id, delivered, min(_FOLLOWED_PAGE, last_seq - delivered)
            )
            if not page:
                return last_seq  # pruned meanwhile
            for event in page:
                delivered = seq_of_event(event)
                if event.turn_id == turn_id:
                    await invoke(on_event, event_for_reader(event, wanted))
        return delivered

    async def events(
        self, session_id: str, after: TurnState[Any] | str | None, turn_id: str | None = None
    ) -> AsyncGenerator[Event, None]:
        """The session's (or one turn's) events, read from the shared store as the holder
        commits them: replayed from ``after``, then followed until the session (or the
        turn) ends."""
        if turn_id is None:
            async with contextlib.aclosing(self._session_events(session_id, after)) as events:
                async for event in events:
                    yield event
            return
        states, _ = await read_states(self.runtime, session_id, self.agent)
        turn = states[session_id].turn(turn_id)
        position = position_of(after, session_id)
        if turn.end_seq is not None and position >= turn.end_seq:
            return  # the position was at or past its end
        start = machine.format_cursor(session_id, max(position, turn.first_seq - 1))
        async with contextlib.aclosing(self._session_events(session_id, start)) as events:
            async for event in events:
                if event.turn_id != turn_id:
                    continue
                yield event
                if isinstance(event, TurnEnded):
                    return

    async def _session_events(
        self, session_id: str, after: TurnState[Any] | str | None
    ) -> AsyncGenerator[Event, None]:
        store = self.runtime.store
        output_type = self.agent.output_type
        position = position_of(after, session_id)
        progress = await store.wait_for_events(session_id, -1)
        if progress is None:
            raise not_found(session_id)
        if position > progress.last_seq:
            raise InvalidCursorError(
                f"session {session_id} never had this cursor (it has {progress.last_seq} "
                "events); pass a cursor it gave you"
            )
        while True:
            page = await store.read_events(session_id, position, _FOLLOWED_PAGE)
            if page and page[0].id != machine.format_cursor(session_id, position + 1):
                first = seq_of_event(page[0])
                resume = machine.format_cursor(session_id, first - 1)
                raise ObservationLost(
                    f"event {position + 1} of session {session_id} was pruned (only events "
                    f"from {first} on are kept); resume after cursor {resume}",
                    cursor=resume,
                )
            for event in page:
                position += 1
                yield event_for_reader(event, output_type)
                if progress.subagent and isinstance(event, TurnEnded):
                    return  # a subagent's session runs one turn
            if page:
                continue
            if progress.terminated and position >= progress.last_seq:
                return
            found = await store.wait_for_events(session_id, position)
            if found is None:
                raise not_found(session_id)
            progress = found

    async def event_page(
        self, session_id: str, after: str | None, limit: int, wait: float, turn_id: str | None
    ) -> tuple[list[Event], str | None, bool]:
        """A page of stored events, read from the store as the holder commits them."""
        store = self.runtime.store
        position = position_of(after, session_id)
        end_seq = None
        first = await store.wait_for_events(session_id, -1)
        if first is None:
            raise not_found(session_id)
        progress: Progress = first
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

        events: list[Event] = []
        with trio.move_on_after(wait):
            while progress.last_seq <= position and not ended():
                found = await store.wait_for_events(session_id, position)
                if found is None:
                    raise not_found(session_id)
                progress = found
        while len(events) < limit and not ended():
            page = await store.read_events(session_id, position, min(limit, _FOLLOWED_PAGE))
            if not page:
                break
            for event in page:
                position = seq_of_event(event)
                if turn_id is None or event.turn_id == turn_id:
                    events.append(event_for_reader(event, output_type))
                    if isinstance(event, TurnEnded) and (turn_id or progress.subagent):
                        end_seq = position
                if len(events) >= limit or ended():
                    break
        cursor_now = machine.format_cursor(session_id, position) if position else after
        return events, cursor_now, ended()
