"""The engine's thread: one trio loop on a daemon thread, and blocking calls into it.

Every blocking call of ``agentlib_sync`` hands its work to a task of that loop (one that
waits for calls, or a new one) and waits on a lock the task releases when it is done. Because
the loop has its own thread, blocking calls work from any thread that is not the loop's: a
plain script, a worker thread, inside a running asyncio loop (a notebook cell) or inside
another trio program.

The engine's runtime is opened on the settings :func:`agentlib_sync.configure` gave, else on
the ``AGENTLIB_STORE`` environment variable's store, when the first call needs it.
"""

from __future__ import annotations

import _thread
import atexit
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import os
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import attrs
import outcome
import trio

import agentlib
from agentlib._data._errors import add_note
from agentlib._references._open import enter, open_runtime, start_session_soon
from agentlib._store import Store, open_store
from agentlib._trio._threads import CallQueue, LockSharing, run_in_thread

__all__ = ["Portal", "off_thread", "portal"]

T = TypeVar("T")

_START_TIMEOUT = 30.0
_CLOSE_TIMEOUT = 5.0
#: The most tasks that wait for a call once they ran one (more calls at once spawn more).
_IDLE_TASKS = 8


class _Call:
    """A blocking call's work, run by a task of the engine's loop."""

    __slots__ = ("cancelled", "run", "scope")

    def __init__(self, run: Callable[[], Awaitable[None]]) -> None:
        self.run = run
        self.scope: trio.CancelScope | None = None  # the scope it runs in, while it runs
        self.cancelled = False

    def cancel(self) -> None:
        """Stop it (Ctrl-C in its caller), in the loop's thread: at once if it runs, when it
        starts if it has not yet."""
        self.cancelled = True
        if self.scope is not None:
            self.scope.cancel()


@attrs.frozen
class _Settings:
    """What the engine's runtime is opened with: ``open_runtime``'s arguments."""

    store: str | Store | None = None
    event_retention: int | None = None
    lease_seconds: float | None = None


class Portal:
    """A trio loop on a daemon thread running one agentlib runtime."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._started: concurrent.futures.Future[None] | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        # The engine's loop's way in for calls made many at once (agentlib.aio's), and for
        # the sessions started without waiting, which must come in before any call after.
        self._inbox: CallQueue | None = None
        self._nursery: trio.Nursery | None = None
        self._runtime: agentlib.Runtime | None = None
        self._stop: trio.Event | None = None
        self._closed = False
        self._settings = _Settings()
        self._closes_at_exit = False
        # Tasks of the engine's loop that ran a call and wait for the next (loop's thread
        # only): a call reuses one rather than spawning a task of its own.
        self._idle: list[trio.lowlevel.Task] = []

    def _ensure_started(self) -> None:
        self.starting().result(timeout=_START_TIMEOUT)  # a startup failure raises here

    def starting(self) -> concurrent.futures.Future[None]:
        """The engine's start, begun if it has not been: the future is done once the engine
        runs, with the startup's exception if it failed (a later call starts it again).

        Raises:
            RuntimeError: The interpreter is exiting.
        """
        if self._closed or sys.is_finalizing():
            # Never restart the engine at interpreter exit: a new thread would never run.
            raise RuntimeError("agentlib's engine has stopped (the interpreter is exiting)")
        started = self._started
        if started is not None and self._thread is not None and self._thread.is_alive():
            return started
        with self._lock:
            started = self._started
            if started is not None and self._thread is not None and self._thread.is_alive():
                return started
            started = concurrent.futures.Future()
            thread = threading.Thread(
                target=self._run, args=(started,), name="agentlib-engine", daemon=True
            )
            self._started, self._thread = started, thread
            thread.start()
            if not self._closes_at_exit:
                atexit.register(self.close)
                self._closes_at_exit = True
            return started

    def _run(self, started: concurrent.futures.Future[None]) -> None:
        try:
            # The engine shares the process with its callers' threads (an asyncio loop's):
            # it lets them have the interpreter's lock while it works.
            trio.run(self._main, started, instruments=[LockSharing()])
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)

    async def _main(self, started: concurrent.futures.Future[None]) -> None:
        settings = self._settings
        store = settings.store
        if store is None:
            store = os.environ.get("AGENTLIB_STORE") or None
        async with (
            open_runtime(
                store,
                event_retention=settings.event_retention,
                lease_seconds=settings.lease_seconds,
            ) as runtime,
            trio.open_nursery() as nursery,
        ):
            self._runtime = runtime
            self._nursery = nursery
            self._stop = trio.Event()
            self._token = trio.lowlevel.current_trio_token()
            self._inbox = CallQueue(self._token.run_sync_soon)
            started.set_result(None)
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def call(self, afn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Run ``await afn(*args, **kwargs)`` in the engine's loop and return its result.

        Ctrl-C while waiting cancels this call (not the turns it started) and re-raises.

        Raises:
            RuntimeError: Called from the engine's own thread, where it would deadlock.
        """
        self._check_thread()
        self._ensure_started()
        # Straight to trio, not through the inbox: a thread waits for one call at a time.
        # (Through the inbox, a Ctrl-C pressed while the caller waited was raised only once
        # the call ended, in one run out of two on a busy machine.)
        token = self._token
        assert token is not None
        # A bare lock is the cheapest cross-thread signal: the task releases it when done.
        done = _thread.allocate_lock()
        done.acquire()
        result: list[Any] = []  # [value] or [value, error]
        notes: list[str] = []

        async def run() -> None:
            try:
                try:
                    result.append(await afn(*args, **kwargs))
                except trio.Cancelled as cancelled:  # keep its notes for the caller
                    notes[:] = getattr(cancelled, "__notes__", ())
                    raise
            except BaseException as exc:
                result[:] = [None, exc]
                if isinstance(exc, trio.Cancelled):
                    raise
            finally:
                done.release()

        call = _Call(run)
        try:
            token.run_sync_soon(self._dispatch, call)
        except trio.RunFinishedError:
            raise RuntimeError(
                "agentlib's engine has stopped (the interpreter is exiting)"
            ) from None
        try:
            done.acquire()
        except KeyboardInterrupt as stop:
            # Stop this call (not the turns it started), wait briefly, re-raise with what it
            # noted on its way out (e.g. which turn goes on, how to stop it).
            token.run_sync_soon(_Call.cancel, call)
            done.acquire(timeout=_CLOSE_TIMEOUT)
            for note in notes:
                add_note(stop, note)
            raise
        if len(result) == 2:
            error = result[1]
            if isinstance(error, trio.Cancelled):
                raise RuntimeError("agentlib's engine stopped during the call") from None
            raise error
        return result[0]  # type: ignore[no-any-return]

    def submit(
        self,
        afn: Callable[..., Awaitable[T]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        done: Callable[[outcome.Outcome[T]], None],
    ) -> Callable[[], None]:
        """Run ``await afn(*args, **kwargs)`` in the engine's loop without waiting for it.

        ``done`` is called with its outcome in the engine's thread once it ends; it must not
        block. A call stopped by the function this returns (from any thread: at once if it
        runs, when it starts if it has not yet) ends with ``trio.Cancelled`` as its error,
        and so does a call that the engine's closing stopped. The engine must have started
        (:meth:`starting`).

        Raises:
            RuntimeError: The engine has stopped.
        """
        inbox = self._inbox
        if inbox is None:
            raise RuntimeError("agentlib's engine has stopped (the interpreter is exiting)")

        async def run() -> None:
            result: outcome.Outcome[T] = await outcome.acapture(afn, *args, **kwargs)
            done(result)
            if isinstance(result, outcome.Error) and isinstance(result.error, trio.Cancelled):
                raise result.error

        call = _Call(run)

        def cancel() -> None:
            with contextlib.suppress(trio.RunFinishedError):  # the engine ended: so did it
                inbox.call_soon(_Call.cancel, call)

        try:
            inbox.call_soon(self._dispatch, call)
        except trio.RunFinishedError:
            raise RuntimeError("agentlib's engine has stopped") from None
        return cancel

    def reference(
        self, agent: agentlib.Agent, session_id: str, **handlers: Any
    ) -> agentlib.Session:
        """A reference to a session of the engine's runtime, made in the calling thread
        (:meth:`agentlib.Agent.session` sends no request). The engine must have started."""

        def make() -> agentlib.Session:
            assert self._runtime is not None
            enter(self._runtime)
            return agent.session(session_id, **handlers)

        return contextvars.copy_context().run(make)

    def start_session_nowait(
        self,
        agent: agentlib.Agent,
        history: Any,
        inputs: Any,
        idempotency_key: str | None,
        on_approval: Any,
        on_sign_in: Any,
        on_client_tool: Any,
    ) -> agentlib.Session | None:
        """A session of ``agent`` started without waiting, where nothing is to be waited for
        (an in-memory engine, no idempotency key: it is made in the loop before any call made
        after this one); else None: start it with a call. The engine must have started.

        Raises:
            ValidationError: ``history`` or ``inputs`` is malformed; nothing was started.
        """
        assert self._inbox is not None
        handlers = (on_approval, on_sign_in, on_client_tool)
        return start_session_soon(
            self._runtime, agent, self._inbox.call_soon, history, inputs,
            idempotency_key, *handlers,
        )  # fmt: skip

    def _check_thread(self) -> None:
        """Raises:
        RuntimeError: Called from the engine's own thread, where it would deadlock.
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError(
                "agentlib_sync was called from agentlib's engine thread (from a handler or a "
                "tool), where it would wait for itself forever; use the async API there: "
                "`await` the agentlib method"
            )

    def start_session(
        self,
        agent: agentlib.Agent,
        history: Any,
        inputs: Any,
        idempotency_key: str | None,
        on_approval: Any,
        on_sign_in: Any,
        on_client_tool: Any,
    ) -> agentlib.Session:
        """Start a session of ``agent``: without waiting where there is nothing to wait for
        (an in-memory engine, no idempotency key: it is made in the loop before any call
        made after this one), else as :meth:`call` does.

        Raises:
            ValidationError: ``history`` or ``inputs`` is malformed; nothing was started.
        """
        self._check_thread()
        self._ensure_started()
        session = self.start_session_nowait(
            agent, history, inputs, idempotency_key, on_approval, on_sign_in, on_client_tool
        )
        if session is not None:
            return session
        made: agentlib.Session = self.call(
            agent.start_session, history=history, inputs=inputs,
            idempotency_key=idempotency_key, on_approval=on_approval, on_sign_in=on_sign_in,
            on_client_tool=on_client_tool,
        )  # fmt: skip
        return made

    def _dispatch(self, call: _Call) -> None:
        """Run ``call`` in a task that waits for one, or in a new one (loop's thread)."""
        if self._idle:
            trio.lowlevel.reschedule(self._idle.pop(), outcome.Value(call))
        else:
            assert self._nursery is not None
            self._nursery.start_soon(self._work, call)

    async def _work(self, call: _Call | None) -> None:
        """Run calls one after the other, each in the task's cancel scope (a new one after a
        call was cancelled), until enough other tasks wait for a call."""
        assert self._runtime is not None
        enter(self._runtime)
        task = trio.lowlevel.current_task()
        idle = self._idle  # this engine's: configure() gives the next engine its own

        def abort(raise_cancel: Any) -> trio.lowlevel.Abort:  # the engine is closing
            idle.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        async def next_call() -> _Call | None:
            if len(idle) >= _IDLE_TASKS:
                return None
            idle.append(task)
            next_one: _Call = await trio.lowlevel.wait_task_rescheduled(abort)
            return next_one

        while call is not None:
            with trio.CancelScope() as scope:
                while call is not None:
                    call.scope = scope
                    try:
                        if call.cancelled:  # before it started
                            scope.cancel()
                        await call.run()
                    finally:
                        call.scope = None
                    call = None  # not kept while the task waits: it holds what it was given
                    if scope.cancel_called:
                        break
                    call = await next_call()
            if scope.cancel_called:  # spent: the next call gets a new scope
                call = await next_call()

    def iterate(self, make: Callable[[], AsyncIterator[T]]) -> Iterator[T]:
        """An async iterator as a blocking one: one round trip per item; stopping early
        closes the async iterator in the engine's loop."""
        iterator = self.call(_make_async, make)
        try:
            while True:
                try:
                    item = self.call(iterator.__anext__)
                except StopAsyncIteration:
                    return
                yield item
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                # At interpreter exit the engine may be gone: nothing is left to close then.
                with contextlib.suppress(RuntimeError):
                    self.call(aclose)

    def configure(
        self,
        store: str | Store | None,
        event_retention: int | None,
        lease_seconds: float | None,
    ) -> None:
        """Open the engine's runtime with these settings from now on: see
        :func:`agentlib_sync.configure`.

        Raises:
            ValueError: ``store`` names no kind of store agentlib knows.
            RuntimeError: Called from the engine's own thread, or at interpreter exit.
        """
        self._check_thread()
        if self._closed or sys.is_finalizing():
            raise RuntimeError("agentlib's engine has stopped (the interpreter is exiting)")
        open_store(store)  # a store URL agentlib does not know is refused here, not later
        with self._lock:
            self._settings = _Settings(store, event_retention, lease_seconds)
            self._stop_engine()
            # The next call starts an engine on the new settings, even if this one has not
            # ended yet.
            self._thread = self._token = self._inbox = self._nursery = None
            self._runtime = self._stop = None
            self._started = None
            self._idle = []

    def close(self) -> None:
        """Stop the engine: running turns end as cancelled. Waits a few seconds at most."""
        self._closed = True
        self._stop_engine()

    def _stop_engine(self) -> None:
        """Stop the engine if it runs, and wait a few seconds at most for it to end."""
        thread, inbox, stop = self._thread, self._inbox, self._stop
        if thread is None or inbox is None or stop is None or not thread.is_alive():
            return
        try:
            inbox.call_soon(stop.set)
        except trio.RunFinishedError:
            return
        thread.join(timeout=_CLOSE_TIMEOUT)


H = TypeVar("H", bound=Callable[..., Any])


def off_thread(handler: H | None) -> H | None:
    """A plain handler made to run in a worker thread, so that it may block (on ``input()``,
    say); an async one runs in the engine as it is. What the thread returns is awaited in the
    engine when it is awaitable (a lambda that returns a coroutine, say)."""
    if handler is None or _is_async(handler):
        return handler

    @functools.wraps(handler)
    async def in_thread(callback: Any) -> Any:
        # A wait that times out does not wait for the thread: it is left to finish.
        answer = await run_in_thread(handler, callback, abandon_on_cancel=True)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer

    return in_thread  # type: ignore[return-value]


def _is_async(function: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)  # noqa: B004  (an object with async __call__)
    )


async def _make_async(make: Callable[[], AsyncIterator[T]]) -> AsyncIterator[T]:
    return make()


portal = Portal()
