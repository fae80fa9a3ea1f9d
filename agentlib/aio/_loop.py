"""The caller's asyncio loop and agentlib's engine thread: calls into the engine, and
handlers back on the loop.

A call hands its work to the engine's trio loop (the one ``agentlib_sync`` runs, through its
portal) and awaits an asyncio future that the engine's thread settles with
``loop.call_soon_threadsafe`` when the work ends: no executor, no thread of its own. Calls
handed at once (the loop's tasks start turns together, the engine ends them together) cross
with one wake-up of the other side. A cancelled wait stops the work in the engine (the call,
never the turn it started) and waits for it to end there, so that a loop that closes leaves
nothing of its calls behind.

A handler given to the asyncio API runs on the loop that gave it: the engine schedules it
there and waits for its answer in a trio wait that a cancelled turn or call stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import attrs
import outcome
import trio

import agentlib
from agentlib._trio._threads import CallQueue
from agentlib_sync._portal import portal

__all__ = [
    "call",
    "configure",
    "iterate",
    "on_loop",
    "reference",
    "running_loop",
    "start_session",
    "started",
    "user_code",
]

T = TypeVar("T")
H = TypeVar("H", bound=Callable[..., Any])

#: How long a cancelled call waits for the engine to stop its work, or a cancelled close of
#: an iterator for it to close (real seconds).
_CANCEL_TIMEOUT = 5.0
#: How long a reference made before the engine runs waits for it to start (real seconds).
_START_TIMEOUT = 30.0


class _Hop:
    """One call's way back: the future its caller awaits, and whether the engine is done."""

    __slots__ = ("ended", "future", "stopped")

    def __init__(self, future: asyncio.Future[outcome.Outcome[Any]]) -> None:
        self.future = future
        self.ended = False
        # Set once a cancelled caller waits for the engine to stop its work.
        self.stopped: asyncio.Future[None] | None = None

    def settle(self, result: outcome.Outcome[Any]) -> None:
        """The engine's work ended (loop's thread)."""
        self.ended = True
        if not self.future.done():
            self.future.set_result(result)
        elif self.stopped is not None and not self.stopped.done():
            self.stopped.set_result(None)


def running_loop() -> asyncio.AbstractEventLoop:
    """The asyncio loop running here.

    Raises:
        RuntimeError: None runs here (trio code, say: a tool or a handler in the engine).
    """
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            "agentlib.aio is awaited from asyncio code, and no asyncio loop runs here; in "
            "trio code (a tool or a handler that runs in agentlib's engine, say), await "
            "agentlib's own methods: `agentlib.Session`, `agentlib.Turn`"
        ) from None


async def started() -> None:
    """Wait (without blocking the loop) for the engine to run, starting it if need be.

    Raises:
        StoreError: The engine's runtime could not be opened.
    """
    starting = portal.starting()
    if not starting.done():
        # Not asyncio.wrap_future: the engine's start outlives this loop, and keeps the
        # callbacks it was given, which would keep the loop alive; this one holds it weakly.
        awaited: asyncio.Future[None] = running_loop().create_future()
        waiter = weakref.ref(awaited)

        def wake(_: object) -> None:  # the thread that started the engine
            future = waiter()
            if future is not None:
                with contextlib.suppress(RuntimeError):  # its loop has closed
                    future.get_loop().call_soon_threadsafe(_set_done, future)

        starting.add_done_callback(wake)
        await awaited
    starting.result()


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def call(afn: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
    """``await afn(*args, **kwargs)`` in the engine's loop, awaited from this asyncio loop.

    Cancelled, it stops the work in the engine and waits for it to end there, then raises
    ``CancelledError``: what the work started (a turn) goes on.

    Raises:
        RuntimeError: This is not asyncio code (a trio task: a tool or a handler that runs
            in the engine), or the engine stopped during the call.
    """
    return await _call(afn, args, kwargs, finish=False)


async def _call(
    afn: Callable[..., Awaitable[T]], args: tuple[Any, ...], kwargs: dict[str, Any], *, finish: bool
) -> T:
    """:func:`call`; with ``finish``, a cancelled call lets the work run to its end in the
    engine (for up to :data:`_CANCEL_TIMEOUT`, then stops it) before it raises: a clean-up's."""
    loop = running_loop()
    await started()
    hop = _Hop(loop.create_future())
    inbox = _inbox(loop)
    # The engine holds the way back (and with it the waiting task, as a loop holds a task
    # waiting for a socket) until it hands the result on: then no longer, so that what it
    # keeps of the call holds nothing of the loop.
    way_back = [hop]

    def done(result: outcome.Outcome[T]) -> None:  # the engine's thread, once
        settle = way_back.pop().settle
        # A closed loop has nobody waiting: there is nothing to deliver.
        with contextlib.suppress(RuntimeError):
            inbox.call_soon(settle, result)

    caller = _caller(loop)
    stop = portal.submit(_from, (caller, afn, args, kwargs), {}, done)
    try:
        result = await hop.future
    except asyncio.CancelledError:
        if not finish:
            stop()
        if not hop.ended:
            hop.stopped = loop.create_future()
            ended = await _outlast(hop.stopped, _CANCEL_TIMEOUT)
            if finish and not ended:
                stop()  # the clean-up took too long
        raise
    except BaseException:  # closed unfinished (GeneratorExit: its loop is gone)
        stop()
        raise
    if isinstance(result, outcome.Error) and isinstance(result.error, trio.Cancelled):
        raise RuntimeError("agentlib's engine stopped during the call") from None
    return result.unwrap()  # type: ignore[no-any-return]


async def _from(
    caller: weakref.ref[asyncio.AbstractEventLoop],
    afn: Callable[..., Awaitable[T]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> T:
    """``await afn(*args, **kwargs)`` in the engine, as a call from ``caller``'s loop: what
    it starts there (a turn's task copies the context it starts in) knows that loop."""
    token = _CALLER.set(caller)
    try:
        return await afn(*args, **kwargs)
    finally:
        _CALLER.reset(token)


async def _outlast(future: asyncio.Future[None], timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``future``, through the cancellations that come
    meanwhile, and say whether it is done.

    asyncio cancels a task once; anyio's cancel scopes (Starlette's and FastAPI's, when a
    client goes away) cancel it again at each pass of the loop until it leaves the scope. A
    cancelled call still sees the engine end its work before it raises.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not future.done():
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait((future,), timeout=remaining)
    return True


#: In the engine: the loop of the door's call that runs in this task, or that set going the
#: turn this task runs (held weakly).
_CALLER: contextvars.ContextVar[weakref.ref[asyncio.AbstractEventLoop]] = contextvars.ContextVar(
    "agentlib_aio_caller"
)
#: The loop of the door's latest call, where the engine runs asyncio code that no call of a
#: running loop set going (a turn a restarted engine resumes, say).
_latest: weakref.ref[asyncio.AbstractEventLoop] | None = None


def _caller(loop: asyncio.AbstractEventLoop) -> weakref.ref[asyncio.AbstractEventLoop]:
    global _latest
    latest = _latest
    if latest is None or latest() is not loop:
        latest = _latest = weakref.ref(loop)
    return latest


#: Each loop's way in from the engine's thread (made on the loop's thread), for as long as
#: the loop lives: it holds the loop weakly.
_inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, CallQueue] = (
    weakref.WeakKeyDictionary()
)


def _inbox(loop: asyncio.AbstractEventLoop) -> CallQueue:
    inbox = _inboxes.get(loop)
    if inbox is None:
        call_soon = weakref.WeakMethod(loop.call_soon_threadsafe)

        def schedule(run: Callable[[], None]) -> None:
            method = call_soon()
            if method is None:
                raise RuntimeError("the asyncio loop is gone")
            method(run)

        inbox = _inboxes[loop] = CallQueue(schedule)
    return inbox


async def start_session(
    agent: agentlib.Agent,
    history: Any,
    inputs: Any,
    idempotency_key: str | None,
    on_approval: Any,
    on_sign_in: Any,
    on_client_tool: Any,
) -> agentlib.Session:
    """Start a session of ``agent``: without a hop where there is nothing to wait for (an
    in-memory engine, no idempotency key), else with one.

    Raises:
        ValidationError: ``history`` or ``inputs`` is malformed; nothing was started.
    """
    running_loop()
    await started()
    handlers = (on_approval, on_sign_in, on_client_tool)
    session = portal.start_session_nowait(agent, history, inputs, idempotency_key, *handlers)
    if session is not None:
        return session
    made: agentlib.Session = await call(
        agent.start_session, history=history, inputs=inputs,
        idempotency_key=idempotency_key, on_approval=on_approval, on_sign_in=on_sign_in,
        on_client_tool=on_client_tool,
    )  # fmt: skip
    return made


def reference(agent: agentlib.Agent, session_id: str, **handlers: Any) -> agentlib.Session:
    """A reference to a session of the engine's runtime, from its id; sends no request (the
    process's first call waits for the engine to start)."""
    portal.starting().result(timeout=_START_TIMEOUT)
    return portal.reference(agent, session_id, **handlers)


def configure(
    store: str | agentlib.Store | None, event_retention: int | None, lease_seconds: float | None
) -> None:
    """Open the engine's runtime with these settings from now on (``agentlib_sync``'s too).

    Raises:
        ValueError: ``store`` names no kind of store agentlib knows.
        RuntimeError: Called at interpreter exit.
    """
    portal.configure(store, event_retention, lease_seconds)


async def iterate(make: Callable[[], AsyncIterator[T]]) -> AsyncIterator[T]:
    """An async iterator of the engine's, iterated from this asyncio loop: one hop per item;
    stopping early (cancelled, too) closes it in the engine, and waits for it to close."""
    iterator = await call(_make_async, make)
    try:
        while True:
            try:
                item = await call(iterator.__anext__)
            except StopAsyncIteration:
                return
            yield item
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            # The engine may have stopped (the interpreter exits): nothing is left to close.
            with contextlib.suppress(RuntimeError):
                await _call(aclose, (), {}, finish=True)


async def _make_async(make: Callable[[], AsyncIterator[T]]) -> AsyncIterator[T]:
    return make()


def on_loop(handler: H | None) -> H | None:
    """``handler`` made to run on the asyncio loop running here, when the engine calls it.

    A coroutine function's coroutine runs there as a task; a plain function is called there,
    and what it returns is awaited there when it is awaitable. The engine waits for the
    answer; a stopped wait (the turn ended, the waiting call was cancelled) cancels the task.
    An exception of the handler is raised in the engine, as if the engine had called it.

    Raises:
        RuntimeError: A handler is given outside a running asyncio loop.
    """
    if handler is None:
        return None
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            "agentlib.aio takes handlers (on_approval, on_sign_in, on_client_tool, on_event) "
            "inside a running asyncio loop, where they will run: call this from async code"
        ) from None

    @functools.wraps(handler)
    async def in_loop(argument: Any) -> Any:
        call = functools.partial(handler, argument)
        return await _run_on(loop, call, "the handler", _HANDLER_LOOP_CLOSED)

    return in_loop  # type: ignore[return-value]


_HANDLER_LOOP_CLOSED = (
    "the asyncio loop this handler was given in has closed, so the handler cannot run: give "
    "the session's handlers again from a running loop (agent.session(session_id, "
    "on_approval=...))"
)


def user_code(
    tools: Iterable[agentlib.Tool | agentlib.ToolSource | Callable[..., Any]],
    hooks: Sequence[agentlib.Hook],
) -> tuple[list[agentlib.Tool | agentlib.ToolSource], list[agentlib.Hook], list[str]]:
    """An asyncio agent's tools and hooks, those that are coroutine functions made to run on
    an asyncio loop when the engine calls them (:func:`_on_callers_loop`), and what those
    are ("tool lookup", "hook guard"); the others as they are (a sync tool runs in a worker
    thread, a sync hook in the engine).

    Raises:
        TypeError: A tool has no JSON schema, or a hook is not made with
            :func:`agentlib.pre_tool_call` (what :class:`agentlib.Agent` raises).
    """
    asyncio_code: list[str] = []

    def tool_on_loop(tool: agentlib.Tool, source: str | None = None) -> agentlib.Tool:
        if tool.kind != "local" or not inspect.iscoroutinefunction(tool.function):
            return tool
        what = f"tool {tool.name}" if source is None else f"tool {source}.{tool.name}"
        asyncio_code.append(what)
        return attrs.evolve(tool, function=_on_callers_loop(tool.function, what))

    def hook_on_loop(hook: agentlib.Hook) -> agentlib.Hook:
        if not isinstance(hook, agentlib.Hook) or not inspect.iscoroutinefunction(hook.function):
            return hook  # agentlib.Agent says what is wrong with it
        what = f"hook {hook.name}"
        asyncio_code.append(what)
        return attrs.evolve(hook, function=_on_callers_loop(hook.function, what))

    made: list[agentlib.Tool | agentlib.ToolSource] = []
    for item in tools:
        if isinstance(item, agentlib.ToolSource):
            own = tuple(tool_on_loop(tool, item.name) for tool in item.tools)
            made.append(attrs.evolve(item, tools=own))
        else:
            made.append(
                tool_on_loop(item if isinstance(item, agentlib.Tool) else agentlib.tool(item))
            )
    return made, [hook_on_loop(hook) for hook in hooks], asyncio_code


def _on_callers_loop(
    function: Callable[..., Awaitable[T]], what: str
) -> Callable[..., Awaitable[T]]:
    """``function`` (asyncio code) made to run on the loop of the door's call that set its
    turn going, or, when that loop has closed or no call of the door set it going (a
    restarted engine resumed the turn), on the loop of the door's latest call."""

    @functools.wraps(function)
    async def on_callers_loop(*args: Any, **kwargs: Any) -> T:
        loop = _callers_loop()
        if loop is None:
            raise RuntimeError(
                f"{what} is asyncio code (a coroutine function given to agentlib.aio), and no "
                "asyncio loop that calls agentlib.aio runs now to run it on: await the "
                "session from a running loop (session.result(), say), which runs it there"
            )
        closed = (
            f"the asyncio loop that {what} was to run on has closed; await the session from "
            "a running loop to run it there"
        )
        call = functools.partial(function, *args, **kwargs)
        result: T = await _run_on(loop, call, what, closed)
        return result

    return on_callers_loop


def _callers_loop() -> asyncio.AbstractEventLoop | None:
    """The loop asyncio code is to run on, called from the engine; None when none runs."""
    for caller in (_CALLER.get(None), _latest):
        loop = caller() if caller is not None else None
        if loop is not None and not loop.is_closed():
            return loop
    return None


async def _run_on(
    loop: asyncio.AbstractEventLoop, handler: Callable[[], Any], what: str, closed: str
) -> Any:
    """``handler()`` (``what``: "the handler", "tool lookup") run on ``loop``, awaited from
    the engine (its trio loop).

    Raises:
        RuntimeError: ``loop`` has closed (``closed`` says what to do).
    """
    token = trio.lowlevel.current_trio_token()
    answered = trio.Event()
    answers: list[outcome.Outcome[Any]] = []
    tasks: list[asyncio.Future[Any]] = []
    stopped = False

    def answer(result: outcome.Outcome[Any]) -> None:  # the loop's thread
        answers.append(result)
        with contextlib.suppress(trio.RunFinishedError):  # the engine has ended
            token.run_sync_soon(answered.set)

    def start() -> None:  # the loop's thread
        if stopped:
            return
        try:
            value = handler()
        except BaseException as exc:
            answer(_error(exc, what))
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt, SystemExit: the loop's, too
            return
        if not inspect.isawaitable(value):
            answer(outcome.Value(value))
            return
        task = asyncio.ensure_future(value)
        tasks.append(task)
        task.add_done_callback(lambda done: answer(_outcome_of(done, what)))

    def stop() -> None:  # the loop's thread
        nonlocal stopped
        stopped = True
        for task in tasks:
            task.cancel()

    try:
        loop.call_soon_threadsafe(start)
    except RuntimeError:
        raise RuntimeError(closed) from None
    try:
        await answered.wait()
    finally:
        if not answers:  # the wait was stopped
            with contextlib.suppress(RuntimeError):  # a closed loop runs nothing more
                loop.call_soon_threadsafe(stop)
    return answers[0].unwrap()


def _outcome_of(task: asyncio.Future[Any], what: str) -> outcome.Outcome[Any]:
    if task.cancelled():
        return outcome.Error(
            RuntimeError(f"the asyncio task of {what} was cancelled before it answered")
        )
    error = task.exception()
    if error is not None:
        return _error(error, what)
    return outcome.Value(task.result())


def _error(error: BaseException, what: str) -> outcome.Error:
    """What the engine raises for an exception of ``what`` (a handler, a tool): itself, but
    never one that would stop the engine (KeyboardInterrupt, SystemExit)."""
    if isinstance(error, Exception):
        return outcome.Error(error)
    return outcome.Error(RuntimeError(f"{what} was stopped by {type(error).__name__}"))
