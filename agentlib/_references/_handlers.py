"""Handlers: the functions of a session reference that answer callbacks while a call waits,
and the answers this process sends.

A handler run belongs to the callback it answers, not to the wait that started it: every
wait of this process on that callback's session shares it (a handler runs once per
callback, whichever backend reaches the session), it goes on when the wait that started it
leaves (a person typing at a prompt is not cut off), and it ends when its callback closes,
whoever answered it, or when its session can no longer be followed here. What a handler
returns is sent as the caller's answer would be; what it raises leaves its callback open
and the wait raises it, except for a client tool's handler when the agent reports tool
errors: the model is told, as of a failing tool.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from .._data._callbacks import Callback, KeepCallbackOpen, OpenClientToolCall
from .._data._errors import (
    AuthenticationError,
    ClientToolAnswerError,
    LeaseLost,
    ObservationLost,
    SdkError,
    ServerUnreachableError,
    add_note,
)
from .._data._events import CallbackClosed, TurnEnded
from .._data._records import AlreadySettled, Answered
from .._trio._threads import invoke
from ._backends._base import Told
from ._follow import follow_events

if TYPE_CHECKING:
    from ._backends._base import Backend

__all__ = ["Handler", "HandlerRun", "own_copy", "send_answer", "start_run"]

K = TypeVar("K")
V = TypeVar("V")

#: A handler: a function (sync or async) of a callback.
Handler = Callable[[Any], Any]

_NAMES = {"approval": "on_approval", "sign_in": "on_sign_in", "client_tool_call": "on_client_tool"}


@attrs.define(eq=False)
class HandlerRun:
    """One run of a handler on one callback.

    Attributes:
        callback: The callback it answers.
        scope: Cancelled when the callback closes before the handler returns.
        done: Set when the run is over.
        kept_open: The handler returned ``KeepCallbackOpen()``.
        error: What the handler raised, or the error of an answer that did not fit.
        error_raised: Whether a wait has raised ``error`` already (the others raise a copy).
    """

    callback: Callback
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    done: trio.Event = attrs.field(factory=trio.Event)
    kept_open: bool = False
    error: BaseException | None = None
    error_raised: bool = False

    @property
    def for_client_tool(self) -> bool:
        return isinstance(self.callback, OpenClientToolCall)


#: The handler runs under way in this trio run, by the place of their session's backend
#: (a runtime, a server's address) and callback id.
_RUNS: trio.lowlevel.RunVar[dict[tuple[object, str], HandlerRun]] = trio.lowlevel.RunVar(
    "agentlib_handler_runs"
)


def _in_this_run(var: trio.lowlevel.RunVar[dict[K, V]]) -> dict[K, V]:
    """The trio run's own dict of ``var``, made empty the first time."""
    try:
        return var.get()
    except LookupError:
        made: dict[K, V] = {}
        var.set(made)
        return made


def _runs() -> dict[tuple[object, str], HandlerRun]:
    return _in_this_run(_RUNS)


def start_run(
    backend: Backend,
    session_id: str,
    turn_id: str,
    callback: Callback,
    handler: Handler,
    opened: str,
) -> HandlerRun:
    """The run of ``handler`` on ``callback``, which turn ``turn_id`` of session
    ``session_id`` showed open at cursor ``opened``: the one under way, or a new one."""
    runs = _runs()
    key = (backend.place, callback.id)
    run = runs.get(key)
    if run is None:
        run = runs[key] = HandlerRun(callback)
        trio.lowlevel.spawn_system_task(
            _run,
            backend,
            session_id,
            turn_id,
            handler,
            run,
            opened,
            name=f"agentlib handler of callback {callback.id}",
            context=contextvars.copy_context(),
        )
    return run


async def _run(
    backend: Backend,
    session_id: str,
    turn_id: str,
    handler: Handler,
    run: HandlerRun,
    opened: str,
) -> None:
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_end_when_closed, backend, session_id, turn_id, run, opened)
            with run.scope:
                await _answer(backend, session_id, turn_id, handler, run)
            nursery.cancel_scope.cancel()
    finally:
        runs = _runs()
        key = (backend.place, run.callback.id)
        if runs.get(key) is run:
            del runs[key]
        run.done.set()


async def _answer(
    backend: Backend, session_id: str, turn_id: str, handler: Handler, run: HandlerRun
) -> None:
    """Run ``handler`` on the run's callback and send its answer; record how it went."""
    callback = run.callback
    try:
        answer = await invoke(handler, callback)
    except Exception as error:
        if isinstance(callback, OpenClientToolCall):
            # As for a failing tool: if the agent reports tool errors, its model is told.
            failure = f"{type(error).__name__}: {error}"
            with contextlib.suppress(Exception):
                if await backend.report(session_id, turn_id, callback.id, failure) is not None:
                    return
        run.error = error
        return
    if isinstance(answer, KeepCallbackOpen):
        run.kept_open = True
        return
    try:
        await send_answer(backend, session_id, turn_id, callback.id, answer, None)
    except (ServerUnreachableError, AuthenticationError) as error:
        # No server took the answer: it does not misfit the callback, it was never heard.
        add_note(error, f"the handler's answer to callback {callback.id} was not sent")
        run.error = error
    except SdkError as error:
        run.error = unsent(callback, error)
    except Exception as error:  # raised by the wait, not by this run's system task
        run.error = error


async def _end_when_closed(
    backend: Backend, session_id: str, turn_id: str, run: HandlerRun, opened: str
) -> None:
    """Cancel the run once its callback closes (answered by hand, elsewhere, or its turn
    ended), or once its session can no longer be followed here (it ended, its runtime
    closed, another runtime took it over). A server out of reach leaves the handler at
    work: its answer is sent once the server is back."""
    after = opened
    while True:
        try:
            async with contextlib.aclosing(
                follow_events(backend, session_id, after, turn_id)
            ) as events:
                async for event in events:
                    after = event.id
                    if isinstance(event, TurnEnded) or (
                        isinstance(event, CallbackClosed) and event.callback_id == run.callback.id
                    ):
                        break
            break
        except ObservationLost as lost:
            after = lost.cursor or after
        except LeaseLost:
            break
        except Exception:
            return
    run.scope.cancel()


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


async def send_answer(
    backend: Backend,
    session_id: str,
    turn_id: str,
    callback_id: str,
    answer: object,
    key: str | None,
) -> Told:
    """Settle callback ``callback_id`` of the session (or of a subagent's below it) with
    ``answer``, as ``turn.answer`` does: the first answer wins, and each answer this
    process sends at the same moment is told ``Answered`` with the answer taken, though the
    session's holder (another runtime, a server) took one first and told the others
    ``AlreadySettled``. A handler still at work on the callback stops: its answer is moot
    now."""
    groups = _in_this_run(_ANSWERS)
    key_of = (backend.place, callback_id)
    group = groups.setdefault(key_of, _Answers())
    group.under_way += 1
    group.sending += 1
    try:
        try:
            told = await backend.answer(session_id, turn_id, callback_id, answer, key)
            run = _runs().get(key_of)
            if run is not None:
                run.scope.cancel()
        finally:
            group.sending -= 1
            group.tell()
        if isinstance(told, Answered):
            group.taken = told
            group.tell()
        elif isinstance(told, AlreadySettled):
            while group.taken is None and group.sending:
                await group.changed.wait()  # another answer of this moment may be taken
            if group.taken is not None:
                told = group.taken
        return told
    finally:
        group.under_way -= 1
        if not group.under_way and groups.get(key_of) is group:
            del groups[key_of]


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


_ANSWERS: trio.lowlevel.RunVar[dict[tuple[object, str], _Answers]] = trio.lowlevel.RunVar(
    "agentlib_answers"
)
