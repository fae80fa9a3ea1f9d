"""A deployed session's handlers, run in the client while it waits on a turn, as a local
runtime runs them: one run per callback in each trio run, however many references and
waits share it; a run ends when its callback closes, wherever it was answered; the first
wait to see a run's failure raises it, the others a copy; a client tool's handler time
is not counted against a wait's timeout."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Protocol

import attrs
import trio

from .._data._callbacks import Callback, KeepCallbackOpen, OpenClientToolCall
from .._data._errors import (
    AuthenticationError,
    ObservationLost,
    SdkError,
    ServerUnreachableError,
    add_note,
)
from .._data._events import CallbackClosed, CallbackOpened, Event, TurnEnded
from .._data._records import AlreadySettled, Answered, NotFound
from .._engine._handlers import Handler, RunsWatched, invoke, unsent
from .._engine._live import HandlerRun


class RemoteTurn(Protocol):
    """What the handlers and waits here ask of a deployed turn's reference."""

    @property
    def _url(self) -> str:
        """Its server's address."""

    async def answer(self, callback_id: str, answer: object) -> Any: ...

    async def _tell_failure(self, callback: OpenClientToolCall, error: Exception) -> bool: ...

    def _events_after(self, after: str | None) -> AsyncGenerator[Event, None]: ...


__all__ = ["RemoteWaiter", "cancel_run", "concurrent_answers"]

#: The handler runs under way in this trio run, by server and callback id.
_RUNS: trio.lowlevel.RunVar[dict[tuple[str, str], HandlerRun]] = trio.lowlevel.RunVar(
    "agentlib_remote_handler_runs"
)


def _runs() -> dict[tuple[str, str], HandlerRun]:
    try:
        return _RUNS.get()
    except LookupError:
        runs: dict[tuple[str, str], HandlerRun] = {}
        _RUNS.set(runs)
        return runs


@attrs.define(eq=False)
class _Answers:
    """The answers to one callback under way in this trio run, and the one taken."""

    under_way: int = 0
    sending: int = 0
    taken: Answered | None = None
    changed: trio.Event = attrs.field(factory=trio.Event)

    def tell(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


_ANSWERS: trio.lowlevel.RunVar[dict[tuple[str, str], _Answers]] = trio.lowlevel.RunVar(
    "agentlib_remote_answers"
)


@contextlib.asynccontextmanager
async def concurrent_answers(url: str, callback_id: str) -> AsyncIterator[_Told]:
    """One answer to callback ``callback_id`` sent from this process, among the others
    sent at the same time: as in a local runtime, each of them is told ``Answered`` with
    the answer taken, though the server took one first and tells the others
    ``AlreadySettled``. The block sets ``told.value``; on leaving, it is what to return."""
    try:
        groups = _ANSWERS.get()
    except LookupError:
        groups = {}
        _ANSWERS.set(groups)
    key = (url, callback_id)
    group = groups.setdefault(key, _Answers())
    group.under_way += 1
    group.sending += 1
    told = _Told()
    try:
        try:
            yield told
        finally:
            group.sending -= 1
            group.tell()
        if isinstance(told.value, Answered):
            group.taken = told.value
            group.tell()
        elif isinstance(told.value, AlreadySettled):
            while group.taken is None and group.sending:
                await group.changed.wait()  # another answer of this moment may be taken
            if group.taken is not None:
                told.value = group.taken
    finally:
        group.under_way -= 1
        if not group.under_way and groups.get(key) is group:
            del groups[key]


@attrs.define(eq=False)
class _Told:
    value: Answered | AlreadySettled | NotFound | None = None


def cancel_run(url: str, callback_id: str) -> None:
    """End the run of the handler of callback ``callback_id``, if one is under way: the
    callback was answered through this process."""
    run = _runs().get((url, callback_id))
    if run is not None:
        run.scope.cancel()


def _start_run(turn: RemoteTurn, callback: Callback, handler: Handler, opened: str) -> HandlerRun:
    """The run of ``handler`` on ``callback`` (opened at cursor ``opened``): the one under
    way, or a new one. It outlives the wait that started it, as a local one does."""
    runs = _runs()
    key = (turn._url, callback.id)
    run = runs.get(key)
    if run is None:
        run = runs[key] = HandlerRun(callback)
        trio.lowlevel.spawn_system_task(
            _run,
            turn,
            handler,
            run,
            opened,
            name=f"agentlib handler of callback {callback.id}",
            context=contextvars.copy_context(),
        )
    return run


async def _run(turn: RemoteTurn, handler: Handler, run: HandlerRun, opened: str) -> None:
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_end_when_closed, turn, run, opened)
            with run.scope:
                await _answer(turn, handler, run)
            nursery.cancel_scope.cancel()
    finally:
        runs = _runs()
        key = (turn._url, run.callback.id)
        if runs.get(key) is run:
            del runs[key]
        run.done.set()


async def _answer(turn: RemoteTurn, handler: Handler, run: HandlerRun) -> None:
    """Run ``handler`` on the run's callback and send its answer; record how it went."""
    callback = run.callback
    try:
        answer = await invoke(handler, callback)
    except Exception as error:
        if isinstance(callback, OpenClientToolCall):
            # As for a failing tool: if the agent reports tool errors, its model is told.
            with contextlib.suppress(Exception):
                if await turn._tell_failure(callback, error):
                    return
        run.error = error
        return
    if isinstance(answer, KeepCallbackOpen):
        run.kept_open = True
        return
    try:
        await turn.answer(callback.id, answer)
    except (ServerUnreachableError, AuthenticationError) as error:
        # No server took the answer: it does not misfit the callback, it was never heard.
        add_note(error, f"the handler's answer to callback {callback.id} was not sent")
        run.error = error
    except SdkError as error:
        run.error = unsent(callback, error)
    except Exception as error:  # raised by the wait, not by this run's system task
        run.error = error


async def _end_when_closed(turn: RemoteTurn, run: HandlerRun, opened: str) -> None:
    """Cancel the run once its callback closes (answered by hand, elsewhere, or its turn
    ended). A server out of reach for long leaves the handler at work."""
    after = opened
    with contextlib.suppress(Exception):
        while True:
            try:
                async with contextlib.aclosing(turn._events_after(after)) as events:
                    async for event in events:
                        after = event.id
                        if isinstance(event, TurnEnded) or (
                            isinstance(event, CallbackClosed)
                            and event.callback_id == run.callback.id
                        ):
                            run.scope.cancel()
                            return
                return
            except ObservationLost as lost:
                after = lost.cursor or after


@attrs.define(eq=False, kw_only=True)
class RemoteWaiter(RunsWatched):
    """One wait (``turn.result``) on a deployed turn: what a local wait is, with what the
    turn's events say of its callbacks.

    Attributes:
        turn: The turn waited on.
        open: The callbacks the events followed so far show open.
    """

    turn: RemoteTurn
    open: set[str] = attrs.field(factory=set)

    def is_open(self, callback: Callback) -> bool:
        return callback.id in self.open

    def saw(self, event: Event, handle: bool) -> None:
        """Take in an event of the turn; with ``handle``, have a callback it opens answered
        by the reference's handler, or left to the caller."""
        if isinstance(event, CallbackOpened):
            self.open.add(event.callback.id)
            if handle:
                self._handle(event.callback, event.id)
        elif isinstance(event, CallbackClosed):
            self.open.discard(event.callback_id)

    def _handle(self, callback: Callback, opened: str) -> None:
        handler = self.handler_for(callback)
        if handler is None:
            self.blocked = True
            return
        self.watched[callback.id] = _start_run(self.turn, callback, handler, opened)
