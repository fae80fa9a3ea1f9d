"""Handlers: the functions of a session reference that answer callbacks while a call waits.

A handler run belongs to the session that opened its callback, not to the wait that started
it: every wait on that session shares it (a handler runs once per callback), it goes on when
the wait that started it leaves (a person typing at a prompt is not cut off), and it ends
when its callback closes, whoever answered it.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from .._data._callbacks import Callback, KeepCallbackOpen
from .._data._errors import ClientToolAnswerError, SdkError
from ._live import HandlerRun
from ._log import EventLog
from ._machine import find_callback, own, without

if TYPE_CHECKING:
    from ._live import Engine, LiveSession

__all__ = ["Handler", "HandlerRun", "RunsWatched", "Waiter", "invoke", "own_copy", "unsent"]

T = TypeVar("T")

#: A handler: a function (sync or async) of a callback.
Handler = Callable[[Any], Any]

_NAMES = {"approval": "on_approval", "sign_in": "on_sign_in", "client_tool_call": "on_client_tool"}


def unsent(callback: Callback, error: SdkError) -> SdkError:
    """The error of a handler whose answer to ``callback`` was refused with ``error``: the
    callback stays open."""
    name = _NAMES.get(getattr(callback, "type", ""), "the handler")
    if isinstance(error, ClientToolAnswerError):
        return ClientToolAnswerError(
            f"{name} answered call {callback.id}, but the answer could not be sent; "
            f"the call stays open: {error}"
        )
    return SdkError(
        f"{name} returned an answer that does not fit callback {callback.id}, "
        f"which stays open: {error}"
    )


async def invoke(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a user's function, sync or async, and return its result."""
    result = function(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


def start_run(
    engine: Engine, owner: LiveSession, callback: Callback, handler: Handler
) -> HandlerRun:
    """The run answering ``callback`` (opened in ``owner``): the running one, or a new one."""
    run = owner.handler_runs.get(callback.id)
    if run is None:
        runs = owner.handler_runs = own(owner.handler_runs)
        run = runs[callback.id] = HandlerRun(callback)
        name = f"agentlib handler {callback.id}"
        engine._spawn(_run, engine, owner, handler, run, name=name)
    return run


async def _run(engine: Engine, owner: LiveSession, handler: Handler, run: HandlerRun) -> None:
    """Run ``handler`` on ``run.callback`` and send its answer; record how it went."""
    callback = run.callback
    try:
        with run.scope:
            try:
                answer = await invoke(handler, callback)
            except Exception as error:
                if run.for_client_tool and owner.agent.tool_errors == "report":
                    # As for a failing tool: the model is told, and the turn goes on.
                    message = f"{type(error).__name__}: {error}"
                    engine._close_callback(owner, callback.id, error=message)
                else:
                    run.error = error
                return
            if isinstance(answer, KeepCallbackOpen):
                run.kept_open = True
                return
            try:
                await engine._answer(owner, callback.id, answer)
            except SdkError as error:
                run.error = unsent(callback, error)
    finally:
        if owner.handler_runs.get(callback.id) is run:
            owner.handler_runs = without(owner.handler_runs, callback.id)
        run.done.set()


@attrs.define(eq=False, kw_only=True)
class RunsWatched:
    """What a wait (``turn.result``) follows of the handler runs it started or joined, and
    its deadline: a local wait's, or a deployed session's in its client.

    Attributes:
        handler_for: The waiting reference's handler for a callback, if it has one.
        deadline: When the wait ends; pushed back by the time client tool handlers take.
        scope: The wait's cancel scope, which holds the deadline (None without one).
        watched: The handler runs the wait follows, by callback id.
        blocked: A callback was left to the caller: the wait returns ``Blocked`` once the
            handler runs it follows are over.
    """

    handler_for: Callable[[Callback], Handler | None]
    deadline: float
    scope: trio.CancelScope | None = attrs.field(init=False)
    watched: dict[str, HandlerRun] = attrs.field(factory=dict)
    blocked: bool = False
    _paused_at: float | None = None

    def __attrs_post_init__(self) -> None:
        self.scope = trio.CancelScope(deadline=self.deadline) if self.deadline < math.inf else None

    def deadline_scope(self) -> contextlib.AbstractContextManager[Any]:
        """What the wait runs in: its cancel scope, or nothing without a deadline."""
        return self.scope if self.scope is not None else contextlib.nullcontext()

    def is_open(self, callback: Callback) -> bool:
        """Whether the callback is still open, as far as the wait knows."""
        raise NotImplementedError

    def settle(self) -> None:
        """Take the outcomes of the handler runs that are over.

        Raises:
            Exception: What a handler raised, or an ``SdkError`` for an answer that did not
                fit; its callback stays open.
        """
        for callback_id, run in list(self.watched.items()):
            if not run.done.is_set():
                if not self.is_open(run.callback):
                    del self.watched[callback_id]  # answered elsewhere: the run is ending
                continue
            del self.watched[callback_id]
            if run.error is not None:
                raise own_copy(run)
            if run.kept_open and self.is_open(run.callback):
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


@attrs.define(eq=False, kw_only=True)
class Waiter(RunsWatched):
    """A local wait: the handler runs it watches, and its deadline.

    Attributes:
        engine: The runtime.
        live: The session waited on; callbacks of its subagents count too.
    """

    engine: Engine
    live: LiveSession

    def is_open(self, callback: Callback) -> bool:
        found = find_callback(self.engine._states, self.live.id, callback.id)
        return found is not None and found.open

    def handle(self, callback: Callback) -> None:
        """Have ``callback`` answered by the reference's handler, or left to the caller."""
        if not self.is_open(callback):
            return
        handler = self.handler_for(callback)
        if handler is None:
            self.blocked = True
            return
        owner = self.engine._live(callback.session_id)
        self.watched[callback.id] = start_run(self.engine, owner, callback, handler)

    async def wait(self, log: EventLog, seq: int) -> None:
        """Return once the log has an event after ``seq``, or a watched run is over."""
        await self.until(lambda: log.wait_beyond(seq))


def own_copy(run: HandlerRun) -> BaseException:
    """The run's error for one wait: the first wait raises it, the others a copy of it, so
    that no two waits add their frames to one traceback."""
    error = run.error
    assert error is not None
    if not run.error_raised:
        run.error_raised = True
        return error
    try:
        clone = copy.copy(error)
    except Exception:
        return error
    clone.__cause__ = error
    return clone.with_traceback(None)
