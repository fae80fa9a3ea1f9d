"""Calling a user's function, sync or async; running a blocking function in a worker thread,
for sync tools, handlers and the store; handing calls to a loop from other threads; sharing
the interpreter's lock with them."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import outcome
import trio

# trio's own dependency: code in the thread must not think it runs in trio's thread.
from sniffio import current_async_library_cvar

__all__ = ["CallQueue", "LockSharing", "invoke", "run_in_thread"]

T = TypeVar("T")


async def invoke(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a user's function, sync or async, and return its result."""
    result = function(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


async def run_in_thread(
    function: Callable[..., T],
    *args: Any,
    abandon_on_cancel: bool = False,
    limiter: trio.CapacityLimiter | None = None,
) -> T:
    """``function(*args)`` in a worker thread of trio's cache, in a copy of the caller's
    context, under ``limiter`` (by default, trio's default thread limiter).

    What ``trio.to_thread.run_sync`` does, without what the engine never uses and every
    call paid for: naming the thread for each call (two system calls, and back), serving
    ``trio.from_thread`` calls that pass no ``trio_token``, and a checkpoint before the
    thread starts when the limiter has a thread free. It takes half the time.

    Cancelled while the function runs, it waits for it to finish, or, with
    ``abandon_on_cancel``, returns at once and leaves the thread to finish on its own.
    """
    await trio.lowlevel.checkpoint_if_cancelled()
    if limiter is None:
        limiter = trio.to_thread.current_default_thread_limiter()
    placeholder = object()  # the limiter's borrower: the thread, which may outlive the call
    try:
        # At once when a thread is free: the wait for the thread is this call's checkpoint.
        limiter.acquire_on_behalf_of_nowait(placeholder)
    except trio.WouldBlock:
        await limiter.acquire_on_behalf_of(placeholder)
    task: trio.lowlevel.Task | None = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()
    context = contextvars.copy_context()
    context.run(current_async_library_cvar.set, None)

    def back_in_trio(result: outcome.Outcome[T]) -> None:
        limiter.release_on_behalf_of(placeholder)
        if task is not None:  # None: the caller was cancelled and left
            trio.lowlevel.reschedule(task, result)

    def deliver(result: outcome.Outcome[T]) -> None:  # in the worker thread
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(back_in_trio, result)

    def abort(raise_cancel: Any) -> trio.lowlevel.Abort:
        nonlocal task
        if not abandon_on_cancel:
            return trio.lowlevel.Abort.FAILED  # the result comes; then the cancel
        task = None
        return trio.lowlevel.Abort.SUCCEEDED

    try:
        trio.lowlevel.start_thread_soon(functools.partial(context.run, function, *args), deliver)
    except BaseException:
        limiter.release_on_behalf_of(placeholder)
        raise
    result: T = await trio.lowlevel.wait_task_rescheduled(abort)
    return result


class CallQueue:
    """Calls handed to a loop (trio's or asyncio's) from other threads, run there in the
    order they were handed, with one wake-up of the loop for all the calls handed before it
    runs them.

    ``schedule`` is the loop's own way in (``TrioToken.run_sync_soon``,
    ``loop.call_soon_threadsafe``): each of its calls is a system call that wakes the loop
    and, on the way, lets go of the interpreter's lock, which the thread it woke then takes
    and keeps while it works. Many calls handed at once (an asyncio loop's tasks starting
    turns together, the engine ending them together) pay for one.
    """

    __slots__ = ("_calls", "_lock", "_schedule", "_woken")

    def __init__(self, schedule: Callable[[Callable[[], None]], object]) -> None:
        self._schedule = schedule
        self._calls: list[tuple[Callable[..., object], tuple[Any, ...]]] = []
        # Reentrant: a signal handler (Ctrl-C's) may hand a call while this thread holds it.
        self._lock = threading.RLock()
        self._woken = False  # a run of the calls is scheduled, and has not taken them yet

    def call_soon(self, function: Callable[..., object], *args: Any) -> None:
        """Have the loop call ``function(*args)`` after the calls handed before (from any
        thread). It must not raise: as with ``schedule``, a call's exception is the loop's.

        Raises:
            Exception: What ``schedule`` raises when the loop is gone
                (``trio.RunFinishedError``, ``RuntimeError``): the call will not be made.
        """
        call = (function, args)
        with self._lock:
            self._calls.append(call)
            if self._woken:
                return
            try:
                self._schedule(self._run)
            except BaseException:
                self._calls.remove(call)
                raise
            self._woken = True

    def _run(self) -> None:  # the loop's thread
        with self._lock:
            calls, self._calls = self._calls, []
            self._woken = False
        for function, args in calls:
            function(*args)


class LockSharing(trio.abc.Instrument):
    """An instrument for a trio loop that shares its process with other threads' Python (an
    asyncio loop's, a blocking caller's): while the loop has tasks to run, it lets go of the
    interpreter's lock at least every ``every`` seconds in a way that lets a thread waiting
    for the lock take it.

    CPython makes the holder hand the lock on only once a thread has waited for it a whole
    switch interval (5 ms) without the holder letting go of it. A busy trio loop lets go of
    it at each of its system calls, which restarts that wait, and takes it back before the
    waiting thread can: a thread that wakes while the loop works (an asyncio loop's timer,
    a reply) waits until the loop next waits for I/O, 5 ms or more. A ``time.sleep(0)``
    lets a waiting thread have the lock (a thread busy in pure Python that takes one every
    millisecond keeps another thread's wait for the lock at about 0.1 ms, from 5 ms); with
    no thread waiting, it costs a system call. The check after each task step costs about
    a microsecond.
    """

    def __init__(self, every: float = 0.001) -> None:
        self._every = every
        self._since = time.perf_counter()  # when a waiting thread last could take the lock

    def after_io_wait(self, timeout: float) -> None:
        if timeout > 0:  # the loop slept, and a waiting thread took the lock meanwhile
            self._since = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if time.perf_counter() - self._since >= self._every:
            time.sleep(0)
            self._since = time.perf_counter()
