"""The turn loop: model, then tools, then model, until the model answers."""

from __future__ import annotations

import functools
import json
import random
import string
import typing
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

import attrs
import trio

from .._callbacks import Credentials, DenyApproval, OpenApproval, OpenClientToolCall, OpenSignIn
from .._content import ContentBlock, TextContentBlock, UnknownContentBlock
from .._convert import structure, unstructure
from .._entries import Entry, MessageEntry, ToolCallEntry, ToolResultEntry
from .._errors import MaxStepsExceeded, SessionBusyError, ValidationError
from .._events import EntryAdded, EntryDelta
from .._history import new_id
from .._hooks import DenyToolCall, ModifiedArguments, RequestApproval
from .._inputs import read_input
from .._json import TOO_DEEP, json_problem, nesting_problem
from .._models._base import ModelRequest, ToolCallRequest
from .._output import output_schema, parse_output
from .._records import Completed, ErrorInfo, Failed, Interrupted, TurnState, UnknownOutcome
from .._store._base import StepRow
from .._tools import Tool, arguments_problem
from .._usage import Usage
from ._core import PendingCallback, SessionCore, TurnCore, hidden_from_model, interrupted
from ._handlers import invoke

if TYPE_CHECKING:
    from .._agent import Agent

__all__ = ["run_turn"]

_CALL_ID_ALPHABET = string.ascii_letters + string.digits
_CONTENT_CLASSES = typing.get_args(ContentBlock)


def new_call_id() -> str:
    """A tool call id of 9 letters and digits: the shape every provider accepts."""
    return "".join(random.choices(_CALL_ID_ALPHABET, k=9))


class HistoryView(Sequence[Entry]):
    """The first ``length`` entries of a list that only grows: a snapshot without a copy."""

    __slots__ = ("_entries", "_length")

    def __init__(self, entries: list[Entry]) -> None:
        self._entries = entries
        self._length = len(entries)

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Entry: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Entry]: ...
    def __getitem__(self, index: int | slice) -> Entry | Sequence[Entry]:
        if isinstance(index, slice):
            return self._entries[: self._length][index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("history index out of range")
        return self._entries[index]

    def __iter__(self) -> Iterator[Entry]:
        entries = self._entries
        for index in range(self._length):
            yield entries[index]


class _RaiseFromTool(Exception):
    """A tool failed and the agent's tool_errors is "raise": the turn fails with it."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


async def run_turn(turn: TurnCore, resume: list[_Call] | None = None) -> None:
    """Run ``turn`` to its end and record how it ended; never raises but trio.Cancelled.

    With ``resume``, the turn goes on with the tool step it was blocked in when a runtime
    before this one stopped. A suspended turn (its runtime closes, and a later one will
    resume it) ends without a record.
    """
    session = turn.session
    record: TurnState[Any] | None = None
    try:
        with turn.scope:
            if resume is not None:
                await _finish_tools(turn, resume)
            record = await _loop(turn)
        if record is None or turn.scope.cancelled_caught:
            record = interrupted(turn)
    except trio.Cancelled:
        # The runtime itself is closing: the turn ends as cancelled, then the task unwinds.
        if not turn.suspended:
            turn.stop_cause = turn.stop_cause or "cancelled"
            session.end_turn(turn, interrupted(turn))
        turn.done.set()
        raise
    except _RaiseFromTool as failure:
        record = _failed(turn, failure.error)
    except Exception as error:
        record = _failed(turn, error)
    if turn.suspended:
        turn.done.set()
        return
    session.end_turn(turn, record)


def _failed(turn: TurnCore, error: BaseException) -> Failed:
    return Failed(
        turn_id=turn.id,
        session_id=turn.session.id,
        error=ErrorInfo(type=type(error).__name__, message=str(error)),
    )


async def _loop(turn: TurnCore) -> TurnState[Any]:
    session = turn.session
    agent = session.agent
    schema = output_schema(turn.output_type)
    while True:
        # A stop may come before a step that never checkpoints (an offline model, say).
        await trio.lowlevel.checkpoint_if_cancelled()
        for message in turn.steered:
            session.add_entry(message)
        turn.steered.clear()
        streamed: list[str] = []
        entry_id = new_id()

        async def on_text(
            delta: str, entry_id: str = entry_id, streamed: list[str] = streamed
        ) -> None:
            if not streamed:
                opening = MessageEntry(id=entry_id, turn_id=turn.id, role="assistant")
                session.emit(EntryAdded, turn.id, entry=opening)
            streamed.append(delta)
            session.emit(EntryDelta, turn.id, entry_id=entry_id, delta=delta)

        if turn.model_steps >= turn.max_steps:
            return _failed(turn, _too_many_steps(turn))
        turn.model_steps += 1
        turn.working += 1  # a model step cannot be resumed: the turn is not blocked
        request = ModelRequest(
            instructions=agent.instructions,
            entries=_model_history(session),
            tools=agent.tool_schemas,
            output_schema=schema,
            session_id=session.id,
            turn_id=turn.id,
            step=turn.model_steps,
        )
        try:
            reply = await agent.model.complete(request, on_text=on_text)
        finally:
            turn.working -= 1
        text = reply.text
        if text is None and streamed:
            text = "".join(streamed)
        usage = reply.usage
        if text or streamed or (usage is not None and not reply.tool_calls):
            message = MessageEntry(
                id=entry_id,
                turn_id=turn.id,
                role="assistant",
                content=(TextContentBlock(text=text or ""),),
                usage=usage,
            )
            usage = None  # the reply's text carries it
            if streamed:
                session.complete_entry(message)
            else:
                session.add_entry(message)
        if not reply.tool_calls:
            if turn.steered:
                continue  # a message arrived while the model answered: it gets a step
            return _completed(turn, text or "")
        await _run_tools(turn, reply.tool_calls, usage)


def _model_history(session: SessionCore) -> Sequence[Entry]:
    """The history as the model sees it: without the snapshots imported with it."""
    if not session.hidden:
        return HistoryView(session.entries)
    return tuple(entry for entry in session.entries if not hidden_from_model(entry))


def _too_many_steps(turn: TurnCore) -> MaxStepsExceeded:
    steps = f"{turn.max_steps} model step" + ("s" if turn.max_steps != 1 else "")
    return MaxStepsExceeded(
        f"turn {turn.id} reached its limit of {steps} without an answer; if it needs more, "
        "raise max_steps: Agent(max_steps=...) or run(..., max_steps=...)"
    )


def _completed(turn: TurnCore, text: str) -> TurnState[Any]:
    try:
        output = parse_output(text, turn.output_type)
    except ValidationError as error:
        return _failed(turn, error)
    return Completed(
        turn_id=turn.id,
        session_id=turn.session.id,
        output=output,
        text=text,
        tool_calls=tuple(turn.tool_calls),
        usage=_usage(turn),
    )


def _usage(turn: TurnCore) -> Usage | None:
    """The sum of the usages on the turn's entries (the last ones of the history); None
    if none has one."""
    total: Usage | None = None
    for entry in reversed(turn.session.entries):
        if entry.turn_id != turn.id:
            break
        usage = getattr(entry, "usage", None)
        if usage is not None:
            total = usage if total is None else usage + total
    return total


@attrs.define(eq=False)
class _Call:
    """One tool call on its way: what the hooks decided, how far it got, its result.

    ``state`` is ``"new"``, ``"approved"`` (it may run), ``"waiting"`` (on ``callback``),
    ``"running"`` (the tool runs: a call that cannot be resumed), ``"delegated"`` (a
    subagent's turn ``child`` runs it) or ``"done"``.
    """

    entry: ToolCallEntry
    tool: Tool | None
    refusal: str | None = None
    hook_approval: bool = False
    approval_reason: str | None = None
    state: str = "new"
    callback: str | None = None
    child: tuple[str, str] | None = None
    result: ToolResultEntry | None = None
    failure: BaseException | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "entry": unstructure(self.entry),
            "refusal": self.refusal,
            "hook_approval": self.hook_approval,
            "approval_reason": self.approval_reason,
            "state": self.state,
            "callback": self.callback,
            "child": list(self.child) if self.child else None,
            "result": None if self.result is None else unstructure(self.result),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], tools: Mapping[str, Tool]) -> _Call:
        entry: ToolCallEntry = structure(data["entry"], ToolCallEntry)
        result = data["result"]
        return cls(
            entry=entry,
            tool=tools.get(entry.name),
            refusal=data["refusal"],
            hook_approval=data["hook_approval"],
            approval_reason=data["approval_reason"],
            state=data["state"],
            callback=data["callback"],
            child=(data["child"][0], data["child"][1]) if data["child"] else None,
            result=None if result is None else structure(result, ToolResultEntry),
        )


def _save(turn: TurnCore) -> None:
    """Write how far the turn's tool step got, for a later runtime to resume it."""
    session = turn.session
    if session.runtime.store.durable and turn.step is not None:
        calls = typing.cast("list[_Call]", turn.step)
        step = {
            "calls": [call.to_json() for call in calls],
            "steps": turn.model_steps,
            "max_steps": turn.max_steps,
        }
        session.write(StepRow(session.id, turn.id, step))


async def _run_tools(
    turn: TurnCore, requests: Sequence[ToolCallRequest], usage: Usage | None = None
) -> None:
    """Run the calls of a model reply; ``usage`` (the reply's, if it had no text) goes on
    the first call's entry."""
    session = turn.session
    agent = session.agent
    calls = []
    for index, request in enumerate(requests):
        # Arguments that are not JSON go back to the model, which may call again. The entry
        # keeps text the model sent, but no other value that is not JSON.
        problem = arguments_problem(request.arguments)
        unread = problem is not None and not isinstance(request.arguments, str)
        entry = ToolCallEntry(
            id=new_id(),
            turn_id=turn.id,
            name=request.name,
            arguments=None if unread else request.arguments,
            tool_call_id=request.id or new_call_id(),
            tool_kind=_kind(agent.tools_by_name.get(request.name)),
            usage=usage if index == 0 else None,
        )
        calls.append(
            _Call(entry=entry, tool=agent.tools_by_name.get(request.name), refusal=problem)
        )
    hooked = [call for call in calls if call.refusal is None]  # a refused call never runs
    if agent.hooks and hooked:
        await _each(hooked, functools.partial(_run_hooks, turn))
    for call in calls:
        session.add_entry(call.entry)
        turn.tool_calls.append(call.entry)
    await _finish_tools(turn, calls)


async def _finish_tools(turn: TurnCore, calls: list[_Call]) -> None:
    """Sign in, run the calls, and add their results to the history, in call order."""
    session = turn.session
    turn.step = calls
    _save(turn)
    # With tool_errors="raise", the first failure stops the other calls: the turn fails.
    failed = trio.CancelScope()

    async def run_call(call: _Call) -> None:
        await _run_call(turn, call)
        if call.failure is not None:
            failed.cancel()

    try:
        with failed:
            if not any(call.failure for call in calls):
                # Credentials are never stored: a resumed step asks again for those it lacks.
                await _sign_in(turn, calls)
                await _each(calls, run_call)
    finally:
        if not turn.suspended:
            # Every call in the history keeps a result, so the next model request is valid.
            for call in calls:
                stopped = call.refusal or "the turn was stopped before this call finished"
                session.add_entry(call.result or _error_result(call.entry, stopped))
            turn.step = None
            session.write(StepRow(session.id, turn.id, None))
    for call in calls:
        if call.failure is not None:
            raise _RaiseFromTool(call.failure)


def _kind(tool: Tool | None) -> str:
    return "local" if tool is None else tool.kind


async def _each(calls: list[_Call], step: Callable[[_Call], Awaitable[None]]) -> None:
    """Run ``step`` for every call: at once when there are several."""
    if len(calls) == 1:
        await step(calls[0])
        return
    async with trio.open_nursery() as nursery:
        for call in calls:
            nursery.start_soon(step, call)


def _fail(turn: TurnCore, call: _Call, error: BaseException, what: str) -> None:
    """A call failed with ``error``: the turn fails ("raise"), or the model is told."""
    call.refusal = f"{what}{type(error).__name__}: {error}"
    if turn.session.agent.tool_errors == "raise":
        call.failure = error


async def _run_hooks(turn: TurnCore, call: _Call) -> None:
    """Run the agent's hooks, in order, on one call; the first refusal stops them."""
    reasons = []
    for hook in turn.session.agent.hooks:
        try:
            values = {d.name: read_input(turn.session.inputs, d) for d in hook.dependencies}
            decision = await invoke(hook.function, call.entry, **values)
            if isinstance(decision, ModifiedArguments):
                if not isinstance(decision.arguments, Mapping):
                    raise TypeError("ModifiedArguments takes a JSON object of arguments")
                call.entry = attrs.evolve(call.entry, arguments=decision.arguments)
            elif isinstance(decision, DenyToolCall):
                call.refusal = f"this call was refused: {decision.reason}"
                return
            elif isinstance(decision, RequestApproval):
                call.hook_approval = True
                if decision.reason:
                    reasons.append(decision.reason)
            elif decision is not None:
                raise TypeError(
                    f"a hook returns None, ModifiedArguments, DenyToolCall or "
                    f"RequestApproval, not a {type(decision).__name__}"
                )
        except Exception as error:
            _fail(turn, call, error, f"hook {hook.name} failed: ")
            return
    call.approval_reason = "; ".join(reasons) or None


async def _sign_in(turn: TurnCore, calls: list[_Call]) -> None:
    """Sign in, with one callback, to every source the calls need credentials for."""
    session = turn.session
    sources: list[str] = []
    for call in calls:
        tool = call.tool
        if (
            call.refusal is None
            and call.failure is None
            and call.state not in ("done", "running")
            and tool is not None
            and tool.requires_sign_in
            and tool.source not in session.credentials
            and tool.source not in sources
        ):
            assert tool.source is not None
            sources.append(tool.source)
    if not sources:
        return
    for pending in session.callbacks.values():  # a sign-in a runtime before this one opened
        if (
            pending.turn is turn
            and isinstance(pending.callback, OpenSignIn)
            and not pending.closed.is_set()
        ):
            await _wait(pending)
            break
    else:
        await _wait(session.open_callback(turn, OpenSignIn, sources=tuple(sources)))
    missing = [source for source in sources if source not in session.credentials]
    if missing:  # answered before a restart, whose credentials are not stored: ask again
        await _wait(session.open_callback(turn, OpenSignIn, sources=tuple(missing)))


async def _wait(pending: PendingCallback) -> PendingCallback:
    """Wait until ``pending`` is answered; a stopped turn closes it unanswered (a suspended
    one leaves it open, for the next runtime)."""
    try:
        await pending.closed.wait()
    finally:
        if not pending.turn.suspended:
            pending.turn.session.close_callback(pending, answered=False)
    return pending


async def _wait_for(turn: TurnCore, call: _Call, pending: PendingCallback) -> PendingCallback:
    """``_wait`` for a call, whose state says so while it waits."""
    call.state, call.callback = "waiting", pending.id
    _save(turn)
    return await _wait(pending)


async def _run_call(turn: TurnCore, call: _Call) -> None:
    try:
        call.result = await _call_tool(turn, call)
    except _RaiseFromTool as failure:
        call.failure = failure.error
        call.result = _error_result(call.entry, f"{type(failure.error).__name__}: {failure}")
    call.state = "done"
    _save(turn)


async def _call_tool(turn: TurnCore, call: _Call) -> ToolResultEntry:
    session = turn.session
    agent = session.agent
    entry, tool = call.entry, call.tool
    if call.state == "done" and call.result is not None:
        return call.result
    if call.refusal is not None:
        return _error_result(entry, call.refusal)
    subagent = agent.subagents_by_name.get(entry.name)
    if subagent is None and tool is None:
        known = ", ".join(sorted([*agent.tools_by_name, *agent.subagents_by_name])) or "none"
        return _error_result(entry, f"unknown tool {entry.name!r}; the tools are: {known}")
    arguments: dict[str, Any] = {}
    if tool is not None:
        try:
            arguments = tool.structure_arguments(entry.arguments)
        except ValidationError as error:
            return _error_result(entry, str(error))
    denied = await _approve(turn, call)
    if denied is not None:
        return denied
    if subagent is not None:
        return await _delegate(turn, call, subagent)
    assert tool is not None
    if tool.kind == "client":
        pending = _restored(session, call, OpenClientToolCall) or session.open_callback(
            turn, OpenClientToolCall, tool, tool_name=tool.name, arguments=entry.arguments
        )
        pending = await _wait_for(turn, call, pending)
        if pending.error is not None:
            return _error_result(entry, pending.error)
        if not pending.answered:
            return _error_result(entry, "the client tool call closed unanswered")
        return _result_entry(entry, pending.answer)
    try:
        for dependency in tool.dependencies:
            if dependency.annotation is Credentials:
                assert tool.source is not None
                value: Any = Credentials(source=tool.source, value=session.credentials[tool.source])
            else:
                value = read_input(session.inputs, dependency)
            arguments[dependency.name] = value
        # Durable before it runs: after a crash, a call that may have run is never run again.
        call.state = "running"
        _save(turn)
        await session.runtime.store.flush()
        turn.working += 1
        try:
            value = await tool.call(arguments)
        finally:
            turn.working -= 1
    except Exception as error:
        if agent.tool_errors == "raise":
            raise _RaiseFromTool(error) from error
        return _error_result(entry, f"{type(error).__name__}: {error}")
    return _result_entry(entry, value)


def _restored(
    session: SessionCore, call: _Call, kind: type[OpenApproval | OpenClientToolCall]
) -> PendingCallback | None:
    """The callback of ``kind`` a call waited on when a runtime before this one stopped, if
    any: open, or answered since (before the resumed turn came back to it)."""
    if call.state != "waiting" or call.callback is None:
        return None
    pending = session.callbacks.get(call.callback)
    if pending is None or not isinstance(pending.callback, kind):
        return None
    return pending


async def _approve(turn: TurnCore, call: _Call) -> ToolResultEntry | None:
    """Wait for the call's approval if it needs one; the refusal's result if it is denied.

    One approval per call: a hook's, which is allowed once only, or else the tool's own.
    """
    session = turn.session
    if call.state in ("approved", "delegated") or (
        call.state == "waiting" and _restored(session, call, OpenApproval) is None
    ):
        return None  # approved before (the call waits on something else now)
    tool = call.tool
    tool_approval = (
        tool is not None and tool.requires_approval and tool.name not in session.approved_tools
    )
    pending = _restored(session, call, OpenApproval)
    if pending is None and (tool_approval or call.hook_approval):
        pending = session.open_callback(
            turn,
            OpenApproval,
            tool_name=call.entry.name,
            arguments=call.entry.arguments,
            source="hook" if call.hook_approval else "tool",
            reason=call.approval_reason,
        )
    if pending is not None:
        pending = await _wait_for(turn, call, pending)
        if not pending.answered:  # closed without an answer: never an approval
            return _error_result(call.entry, "the call's approval closed unanswered")
        if isinstance(pending.answer, DenyApproval):
            reason = pending.answer.reason
            return _error_result(
                call.entry, "the client denied this call" + (f": {reason}" if reason else "")
            )
    call.state = "approved"
    return None


async def _delegate(turn: TurnCore, call: _Call, subagent: Agent) -> ToolResultEntry:
    """Run a turn of a new subagent session on the task; its answer is the call's result."""
    entry = call.entry
    session = turn.session
    if call.child is not None:  # delegated before a restart: that turn goes on
        child_session = session.runtime.sessions[call.child[0]]
        child = child_session.turns[call.child[1]]
    else:
        arguments = entry.arguments
        message = arguments.get("message") if isinstance(arguments, Mapping) else None
        if not isinstance(message, str) or not message.strip() or len(arguments) != 1:
            return _error_result(
                entry, f'{subagent.name} takes one argument, "message": the task, as a string'
            )
        try:
            child = session.start_subagent(turn, subagent, message)
        except SessionBusyError as busy:
            return _error_result(entry, f"SessionBusyError: {busy}")
        call.state, call.child = "delegated", (child.session.id, child.id)
        _save(turn)
    try:
        await child.done.wait()
    except BaseException:
        # The parent turn stops: its subagent's turn stops the same way, and first.
        if turn.suspended and child.resumable():
            child.suspend()
        else:
            child.stop(turn.stop_cause or "cancelled")
        with trio.CancelScope(shield=True):
            await child.done.wait()
        raise
    record = child.record
    match record:
        case Completed(output=output, text=text):
            return _result_entry(entry, text if subagent.output_type is None else output)
        case Failed(error=info):
            return _error_result(entry, f"{subagent.name} failed: {info.type}: {info.message}")
        case Interrupted(cause=cause):
            return _error_result(entry, f"the turn of {subagent.name} was {cause}")
        case UnknownOutcome():
            return _error_result(
                entry,
                f"the outcome of {subagent.name}'s turn is unknown: the runtime stopped while "
                "it ran, and it was not run again",
            )
    return _error_result(entry, f"the turn of {subagent.name} ended as {type(record).__name__}")


def _error_result(call: ToolCallEntry, message: str) -> ToolResultEntry:
    return ToolResultEntry(
        id=new_id(),
        turn_id=call.turn_id,
        name=call.name,
        content=(TextContentBlock(text=message),),
        is_error=True,
        tool_call_id=call.tool_call_id,
    )


def _result_entry(call: ToolCallEntry, value: Any) -> ToolResultEntry:
    structured: Any = None
    if isinstance(value, str):
        content: tuple[Any, ...] = (TextContentBlock(text=value),)
    elif isinstance(value, _CONTENT_CLASSES) and not isinstance(value, UnknownContentBlock):
        content = (value,)
    elif (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(item, _CONTENT_CLASSES) for item in value)
    ):
        content = tuple(value)
    else:
        # What goes back to the model is JSON within the nesting limit, or an error saying why
        # not; checked before the converter walks the value, recursively.
        problem = nesting_problem(value)
        if problem is None:
            try:
                structured = unstructure(value)
            except (TypeError, ValueError):
                structured = value  # what is not JSON in it is named below
            problem = json_problem(structured)
        if problem is not None:
            what = f"is {TOO_DEEP}" if problem.too_deep else f"is not JSON: {problem.reason}"
            return _error_result(
                call,
                f"the tool returned a {type(value).__name__} that {what}; return JSON values, "
                f"attrs classes, dataclasses or content blocks @ ${problem.at}",
            )
        content = (TextContentBlock(text=json.dumps(structured)),)
    return attrs.evolve(
        _error_result(call, ""), content=content, structured_content=structured, is_error=False
    )
