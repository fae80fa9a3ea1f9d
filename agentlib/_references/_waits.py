"""A wait on a turn (``turn.result``), whichever backend reaches its session: the turn's
events followed until it ends, or blocks on a callback opened after ``after`` that no
handler of the reference answers, or until the deadline.

Each event goes to ``on_event``, the whole turn's, whatever ``after`` is. Each callback
opened after ``after`` goes to the reference's handler for it (:mod:`._handlers`), or is
left to the caller: once the handler runs the wait follows are over, the wait returns the
turn's record if it is ``Blocked``. A handler that failed fails the wait; the turn goes on.
The time a client tool's handler takes alone is not counted against the wait's deadline.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from .._data._callbacks import Callback
from .._data._errors import ObservationLost
from .._data._events import CallbackClosed, CallbackOpened, Event, TurnEnded
from .._data._records import Blocked, TurnState
from .._engine._log import cursor_of
from .._trio._threads import invoke
from ._backends._base import EventHandler, EventReader, event_for_reader
from ._follow import PAGE
from ._handlers import Handler, HandlerRun, own_copy, start_run

if TYPE_CHECKING:
    from ._backends._base import Backend

__all__ = ["wait_for_turn"]

T = TypeVar("T")


async def wait_for_turn(
    backend: Backend,
    session_id: str,
    turn_id: str,
    handler_for: Callable[[Callback], Handler | None] | None,
    *,
    after: TurnState[Any] | str | None,
    deadline: float,
    on_event: EventHandler | None,
    wanted: Any,
) -> TurnState[Any]:
    """The turn's record once it ends or blocks, or at ``deadline``.

    Raises:
        TurnNotFoundError: The session has no such turn.
        InvalidCursorError: ``after`` belongs to another session or is not a cursor.
        Exception: What a handler raised, or an ``SdkError`` for an answer that did not
            fit; its callback stays open.
    """
    cursor = cursor_of(after, session_id)
    if on_event is None and handler_for is None:
        settled = await backend.settled(session_id, turn_id, cursor, deadline)
        if settled is not None:
            return settled
    waiter = Waiter(
        backend=backend,
        session_id=session_id,
        turn_id=turn_id,
        handler_for=handler_for or (lambda callback: None),
        deadline=deadline,
    )
    with waiter.scope or contextlib.nullcontext():
        await _follow(waiter, cursor, on_event, wanted)
    return await backend.record(session_id, turn_id)  # it ended or blocked, or the deadline


async def _follow(
    waiter: Waiter, after: str | None, on_event: EventHandler | None, wanted: Any
) -> None:
    """Follow the turn's events until it ends, or blocks on a callback opened after
    ``after`` (or no more events will come)."""
    backend, session_id, turn_id = waiter.backend, waiter.session_id, waiter.turn_id
    read_from = None if on_event is not None else after  # on_event sees the whole turn
    while True:
        try:
            with contextlib.closing(backend.events(session_id, read_from, turn_id)) as reader:
                await _read(waiter, reader, after, on_event, wanted)
                return
        except ObservationLost as lost:
            if on_event is not None:
                raise
            read_from = lost.cursor  # pruned: only what is still open matters


async def _read(
    waiter: Waiter,
    reader: EventReader,
    after: str | None,
    on_event: EventHandler | None,
    wanted: Any,
) -> None:
    while not reader.ended:
        events = await waiter.until(functools.partial(reader.page, PAGE, math.inf))
        if events is not None:
            closed = {e.callback_id for e in events if isinstance(e, CallbackClosed)}
            for event in events:
                if on_event is not None:
                    await invoke(on_event, event_for_reader(event, wanted))
                new = after is None or event.id > after  # a session's cursors sort by seq
                if new and isinstance(event, TurnEnded):
                    return
                # A callback a later event of the page closes is no longer the caller's.
                opens = isinstance(event, CallbackOpened) and event.callback.id not in closed
                waiter.saw(event, handle=new and opens)
        waiter.settle()
        if waiter.blocked and not waiter.watched:
            # Once the handlers at work have finished, the turn is blocked, or going on.
            record = await waiter.backend.record(waiter.session_id, waiter.turn_id)
            if isinstance(record, Blocked):
                return
            waiter.blocked = False


@attrs.define(eq=False, kw_only=True)
class Waiter:
    """One wait on a turn: the handler runs it started or joined, what the turn's events
    say of its callbacks, and its deadline.

    Attributes:
        backend: Where the turn's session is.
        session_id: The session waited on; callbacks of its subagents count too.
        turn_id: The turn waited on.
        handler_for: The waiting reference's handler for a callback, if it has one.
        deadline: When the wait ends; pushed back by the time client tool handlers take.
        scope: The wait's cancel scope, which holds the deadline (None without one).
        watched: The handler runs the wait follows, by callback id.
        open: The callbacks the events followed so far show open.
        blocked: A callback was left to the caller: the wait returns ``Blocked`` once the
            handler runs it follows are over.
    """

    backend: Backend
    session_id: str
    turn_id: str
    handler_for: Callable[[Callback], Handler | None]
    deadline: float
    scope: trio.CancelScope | None = attrs.field(init=False)
    watched: dict[str, HandlerRun] = attrs.field(factory=dict)
    open: set[str] = attrs.field(factory=set)
    blocked: bool = False
    _paused_at: float | None = None

    def __attrs_post_init__(self) -> None:
        self.scope = trio.CancelScope(deadline=self.deadline) if self.deadline < math.inf else None

    def saw(self, event: Event, *, handle: bool) -> None:
        """Take in an event of the turn; with ``handle``, have the callback it opens
        answered by the reference's handler, or left to the caller."""
        if isinstance(event, CallbackOpened):
            callback = event.callback
            self.open.add(callback.id)
            if not handle:
                return
            handler = self.handler_for(callback)
            if handler is None:
                self.blocked = True
                return
            self.watched[callback.id] = start_run(
                self.backend, self.session_id, self.turn_id, callback, handler, event.id
            )
        elif isinstance(event, CallbackClosed):
            self.open.discard(event.callback_id)

    def settle(self) -> None:
        """Take the outcomes of the handler runs that are over.

        Raises:
            Exception: What a handler raised, or an ``SdkError`` for an answer that did not
                fit; its callback stays open.
        """
        for callback_id, run in list(self.watched.items()):
            if not run.done.is_set():
                if callback_id not in self.open:
                    del self.watched[callback_id]  # answered elsewhere: the run is ending
                continue
            del self.watched[callback_id]
            if run.error is not None:
                raise own_copy(run)
            if run.kept_open and callback_id in self.open:
                self.blocked = True
        self._count_client_time()

    def _count_client_time(self) -> None:
        # Only a client tool's handler is not counted: while it runs alone, the clock stops.
        if self.scope is None or (not self.watched and self._paused_at is None):
            return  # no deadline; or no handler runs, and the clock runs
        running = [run for run in self.watched.values() if not run.done.is_set()]
        paused = bool(running) and all(run.for_client_tool for run in running)
        now = trio.current_time()
        if paused and self._paused_at is None:
            self._paused_at = now
            self.scope.deadline = math.inf
        elif not paused and self._paused_at is not None:
            self.deadline += now - self._paused_at
            self._paused_at = None
            self.scope.deadline = self.deadline

    async def until(self, wait: Callable[[], Awaitable[T]]) -> T | None:
        """What ``wait()`` returns, or None once a watched run is over first."""
        if not self.watched:
            return await wait()
        got: T | None = None
        failure: Exception | None = None
        async with trio.open_nursery() as nursery:

            async def first(wait: Callable[[], Awaitable[Any]], keep: bool) -> None:
                nonlocal got, failure
                try:
                    value = await wait()
                except Exception as error:  # raised as it is, not in the nursery's group
                    failure = error
                else:
                    if keep:
                        got = value
                nursery.cancel_scope.cancel()

            nursery.start_soon(first, wait, True)
            for run in self.watched.values():
                nursery.start_soon(first, run.done.wait, False)
        if failure is not None:
            raise failure
        return got
