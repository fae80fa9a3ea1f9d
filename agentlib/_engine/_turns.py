"""Running a turn: the model, then tools, then the model, until it answers.

This is the I/O of a turn: it calls the model, runs hooks and tools, waits on callbacks and
subagents. What each step changes, and what follows, the machine's transitions decide
(``_machine``); this module does what they ask and hands their facts to the runtime.
"""

from __future__ import annotations

import contextlib
import functools
import json
import random
import string
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._data._callbacks import (
    Credentials,
    DenyApproval,
    OpenApproval,
    OpenClientToolCall,
    OpenSignIn,
)
from .._data._content import ContentBlock, TextContentBlock, UnknownContentBlock, text_of
from .._data._convert import unstructure
from .._data._entries import ToolCallEntry, ToolResultEntry
from .._data._errors import SessionBusyError, ValidationError
from .._data._history import new_id
from .._data._json import JSON_SCALARS, TOO_DEEP, json_problem, nesting_problem
from .._data._records import Completed, Failed, Interrupted, TurnState, UnknownOutcome
from .._data._usage import Usage
from .._mcp._connection import URL_ELICITATION, MCPCallError
from .._mcp._oauth import SignInTool
from .._models._base import ModelRequest, ToolCallRequest, ToolSchema
from .._toolkit._hooks import DenyToolCall, ModifiedArguments, RequestApproval
from .._toolkit._inputs import read_input
from .._toolkit._output import output_schema
from .._toolkit._tools import Tool, ToolOutput, arguments_problem
from .._trio._threads import invoke
from . import _machine as machine
from ._live import Engine, LiveSession, LiveTurn
from ._machine import Call, CallbackPhase, CallState, StopCause, TurnMachine, error_result

if TYPE_CHECKING:
    from .._define._definition import AgentDefinition
    from .._mcp._connection import Listing

__all__ = ["run_turn"]

_CALL_ID_ALPHABET = string.ascii_letters + string.digits
_CONTENT_CLASSES = typing.get_args(ContentBlock)

#: What the model is told of a call its turn stopped before it finished.
_UNFINISHED = "the turn was stopped before this call finished"


def new_call_id() -> str:
    """A tool call id of 9 letters and digits: the shape every provider accepts."""
    return "".join(random.choices(_CALL_ID_ALPHABET, k=9))


class _RaiseFromTool(Exception):
    """A tool failed and the agent's tool_errors is "raise": the turn fails with it."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@attrs.define(eq=False)
class _Turn:
    """One turn as its task runs it: its state, its session, and the runtime."""

    engine: Engine
    live: LiveSession
    state: TurnMachine
    task: LiveTurn
    failing: bool = False  # a call failed and tool_errors is "raise": the step stops
    # The tools of the step: the agent's, and those its MCP servers list now.
    tools: Mapping[str, Tool] = attrs.field(factory=dict)

    @property
    def agent(self) -> AgentDefinition:
        return self.live.agent

    @property
    def step(self) -> machine.ToolStep:
        step = self.state.step
        assert step is not None, "a call runs in a tool step"
        return step

    @property
    def holding(self) -> bool:
        """Its task leaves the turn unended, callbacks open: suspended for a later
        runtime, or parked until what it waits on closes."""
        return self.task.suspended or self.task.parked

    def park_if_waiting(self) -> None:
        """Leave the turn parked if all its task does is wait."""
        if self.task.can_park and not self.failing:
            self.engine._park_turn(self.live, self.state.id)

    async def wait(self, closed: trio.Event) -> None:
        """Wait for ``closed`` (a callback's, or a subagent's turn's end): the task parks
        the turn if nothing else of it is at work."""
        if closed.is_set():
            await trio.lowlevel.checkpoint_if_cancelled()
            return
        task = self.task
        task.waiting.append(closed)
        try:
            self.park_if_waiting()
            await closed.wait()
        finally:
            task.waiting.remove(closed)

    def commit(self, facts: Iterable[Any]) -> None:
        self.engine._commit(facts)

    def update(self, index: int, **changes: Any) -> None:
        """Call ``index`` got further: its step is saved, for a later runtime to resume it."""
        self.commit(
            machine.update_call(self.engine._states, self.live.id, self.state.id, index, **changes)
        )


class _Working:
    """``count`` waits or calls of the turn's tool step under way, all counted before any
    runs; each says it is over by calling what ``with`` gives."""

    __slots__ = ("left", "turn")

    def __init__(self, turn: _Turn, count: int = 1) -> None:
        self.turn = turn
        self.left = count

    def __enter__(self) -> Callable[[], None]:
        self.turn.task.working += self.left
        return self.over

    def over(self) -> None:
        """One of them is over."""
        self.left -= 1
        task = self.turn.task
        task.working -= 1
        if not task.parked:
            self.turn.park_if_waiting()

    def __exit__(self, *exc_info: object) -> None:
        self.turn.task.working -= self.left


async def run_turn(engine: Engine, live: LiveSession, turn_id: str, resume: bool) -> None:
    """Run the turn to its end and record how it ended; never raises but trio.Cancelled.

    With ``resume``, the turn goes on with the tool step it was in when a runtime before this
    one stopped. A suspended turn (its runtime closes, and a later one will resume it) ends
    without a record.
    """
    task = live.turns[turn_id]
    turn = _Turn(engine, live, live.state.turns[turn_id], task, tools=live.agent.tools_by_name)
    scope = task.scope
    assert scope is not None, "the runtime gives a turn's task its scope"
    record: TurnState[Any] | None = None
    try:
        with scope:
            if resume:
                await _offer_tools(turn, note=False)  # the step's calls keep their results next
                await _finish_tools(turn, {})
            record = await _loop(turn)
        if task.parked and not task.suspended:
            engine._turn_left(live, turn_id)
            return
        if record is None or scope.cancelled_caught:
            record = machine.interrupted(turn.state)
    except trio.Cancelled:
        # The runtime itself is closing: the turn ends as cancelled, then the task unwinds.
        if not task.suspended:
            machine.stop(engine._states, live.id, turn_id, StopCause.CANCELLED)
            engine._end_turn(live, turn_id, machine.interrupted(turn.state))
        task.finish()
        raise
    except _RaiseFromTool as failure:
        record = machine.failed(turn.state, failure.error)
    except Exception as error:
        record = machine.failed(turn.state, error)
    if task.suspended:
        task.finish()
        return
    engine._end_turn(live, turn_id, record)


async def _loop(turn: _Turn) -> TurnState[Any]:
    engine, state, agent = turn.engine, turn.state, turn.agent
    states, session_id = engine._states, turn.live.id
    schema = output_schema(state.output_type)
    while True:
        # A stop may come before a step that never checkpoints (an offline model, say).
        await trio.lowlevel.checkpoint_if_cancelled()
        limit, facts = machine.begin_model_step(states, session_id, state.id)
        turn.commit(facts)
        if limit is not None:
            return limit
        streamed: list[str] = []
        entry_id = new_id()

        async def on_text(
            delta: str, entry_id: str = entry_id, streamed: list[str] = streamed
        ) -> None:
            first = not streamed
            streamed.append(delta)
            turn.commit(machine.text_streamed(states, session_id, state.id, entry_id, delta, first))

        schemas = await _offer_tools(turn)
        request = ModelRequest(
            instructions=agent.instructions,
            entries=machine.model_history(turn.live.state),
            tools=schemas,
            output_schema=schema,
            session_id=session_id,
            turn_id=state.id,
            step=state.model_steps,
        )
        reply = await agent.model.complete(request, on_text=on_text)
        text = reply.text
        if text is None and streamed:
            text = "".join(streamed)
        on_text_usage, facts = machine.model_replied(
            states,
            session_id,
            state.id,
            entry_id,
            text,
            streamed=bool(streamed),
            usage=reply.usage,
            has_calls=bool(reply.tool_calls),
        )
        turn.commit(facts)
        if not reply.tool_calls:
            if state.steered:
                continue  # a message arrived while the model answered: it gets a step
            return machine.completed(states, session_id, state.id, text or "")
        await _run_tools(turn, reply.tool_calls, None if on_text_usage else reply.usage)


async def _offer_tools(turn: _Turn, *, note: bool = True) -> tuple[ToolSchema, ...]:
    """The tools of the next step: the agent's, its session's sandbox's (the sandbox made
    at its first use, its ``on_create`` hooks run), and the MCP servers' as they list them
    now (each connected at its first use); with ``note``, what the model is told of each
    server (its instructions, or why it is unavailable) joins the history first, when it
    changed.

    Raises:
        SandboxError: The sandbox could not be made: the turn fails.
    """
    agent = turn.agent
    servers = agent.mcps
    engine = turn.engine
    root = engine._live(machine.root_of(engine._states, turn.live.id).id)
    sandbox = engine._sandbox(root)
    if sandbox is not None:
        await sandbox._open(root.state.inputs)
    if not servers and sandbox is None:
        turn.tools = agent.tools_by_name
        return agent.tool_schemas
    tools = dict(agent.tools_by_name)
    schemas = list(agent.tool_schemas)
    if sandbox is not None:
        for tool in sandbox._model_tools().values():
            tools[tool.name] = tool
            schemas.append(tool.schema)
    if not servers:
        turn.tools = tools
        return tuple(schemas)
    names = list(servers)
    listings: dict[str, Listing] = {}

    async def list_one(index: int) -> None:
        name = names[index]
        server = servers[name]
        # A server one signs in to has a connection per session: its tokens are the session's.
        signs_in = getattr(server, "oauth", None) is not None
        connection = turn.engine._mcp_connection(name, server, turn.live.id if signs_in else None)
        listings[name] = await connection.listing(turn.state.id)

    await _each(range(len(names)), list_one)
    states, session_id = turn.engine._states, turn.live.id
    for name in names:
        listing = listings[name]
        source = f"mcp:{name}"
        if listing.unavailable is not None:
            text: str | None = (
                f"The MCP server {name} is unavailable, so its tools are not offered: "
                f"{listing.unavailable}."
            )
        elif listing.instructions:
            text = listing.instructions
        else:
            before = machine.capability_note(turn.live.state, source)
            text = None if before is None else f"The MCP server {name} is available again."
        if note and text is not None:
            turn.commit(machine.note_capability(states, session_id, turn.state.id, source, text))
        for tool in listing.tools:
            tools[tool.name] = tool
            schemas.append(tool.schema)
    turn.tools = tools
    return tuple(schemas)


async def _run_tools(turn: _Turn, requests: Sequence[ToolCallRequest], usage: Usage | None) -> None:
    """Run the calls of a model reply; ``usage`` (the reply's, if it had no text) goes on
    the first call's entry."""
    agent = turn.agent
    calls: list[Call] = []
    for index, request in enumerate(requests):
        # Arguments that are not JSON go back to the model, which may call again. The entry
        # keeps text the model sent, but no other value that is not JSON.
        problem = arguments_problem(request.arguments)
        not_json = problem is not None and not isinstance(request.arguments, str)
        tool = turn.tools.get(request.name)
        entry = ToolCallEntry(
            id=new_id(),
            turn_id=turn.state.id,
            name=request.name,
            arguments=None if not_json else request.arguments,
            tool_call_id=request.id or new_call_id(),
            tool_kind="local" if tool is None else tool.kind,
            usage=usage if index == 0 else None,
        )
        calls.append(Call(entry=entry, refusal=problem))
    failures: dict[int, BaseException] = {}
    hooked = [index for index, call in enumerate(calls) if call.refusal is None]
    if agent.hooks and hooked:  # a refused call never runs: no hook sees it

        async def hook(index: int) -> None:
            calls[index], failure = await _run_hooks(turn, calls[index])
            if failure is not None:
                failures[index] = failure

        await _each(hooked, hook)
    turn.commit(machine.begin_tool_step(turn.engine._states, turn.live.id, turn.state.id, calls))
    await _finish_tools(turn, failures)


async def _finish_tools(turn: _Turn, failures: dict[int, BaseException]) -> None:
    """Sign in, run the step's calls, and add their results to the history, in call order.

    ``failures`` holds the calls that failed already (``tool_errors="raise"``): then none
    runs, and the turn fails with the first.
    """
    # With tool_errors="raise", the first failure stops the other calls: the turn fails.
    several = len(turn.step.calls) > 1 and turn.agent.tool_errors == "raise"
    failed = trio.CancelScope() if several else None

    async def run_call(index: int, over: Callable[[], None]) -> None:
        try:
            await _run_call(turn, index, failures)
            if index in failures:
                turn.failing = True
                if failed is not None:
                    failed.cancel()
        finally:
            over()

    try:
        with failed if failed is not None else contextlib.nullcontext():
            if not failures:
                # Credentials are never stored: a resumed step asks again for those it lacks.
                with _Working(turn) as over:
                    await _sign_in(turn)
                    over()
                calls = range(len(turn.step.calls))
                with _Working(turn, len(calls)) as over:
                    await _each(calls, functools.partial(run_call, over=over))
    finally:
        if not turn.holding:
            turn.commit(
                machine.end_tool_step(turn.engine._states, turn.live.id, turn.state.id, _UNFINISHED)
            )
    for index in sorted(failures):
        raise _RaiseFromTool(failures[index])


async def _each(items: Iterable[int], step: Callable[[int], Awaitable[None]]) -> None:
    """Run ``step`` for every item: at once when there are several."""
    items = list(items)
    if len(items) == 1:
        await step(items[0])
        return
    async with trio.open_nursery() as nursery:
        for item in items:
            nursery.start_soon(step, item)


async def _run_hooks(turn: _Turn, call: Call) -> tuple[Call, BaseException | None]:
    """Run the agent's hooks, in order, on one call; the first refusal stops them. Returns
    the call as they left it, and the failure that fails the turn (``tool_errors="raise"``)."""
    reasons = []
    for hook in turn.agent.hooks:
        try:
            inputs = turn.live.state.inputs
            values = {d.name: read_input(inputs, d) for d in hook.dependencies}
            decision = await invoke(hook.function, call.entry, **values)
            if isinstance(decision, ModifiedArguments):
                if not isinstance(decision.arguments, Mapping):
                    raise TypeError("ModifiedArguments takes a JSON object of arguments")
                call = attrs.evolve(
                    call, entry=attrs.evolve(call.entry, arguments=decision.arguments)
                )
            elif isinstance(decision, DenyToolCall):
                return attrs.evolve(call, refusal=f"this call was refused: {decision.reason}"), None
            elif isinstance(decision, RequestApproval):
                call = attrs.evolve(call, hook_approval=True)
                if decision.reason:
                    reasons.append(decision.reason)
            elif decision is not None:
                raise TypeError(
                    f"a hook returns None, ModifiedArguments, DenyToolCall or "
                    f"RequestApproval, not a {type(decision).__name__}"
                )
        except Exception as error:
            refused = attrs.evolve(
                call, refusal=f"hook {hook.name} failed: {type(error).__name__}: {error}"
            )
            return refused, error if turn.agent.tool_errors == "raise" else None
    return attrs.evolve(call, approval_reason="; ".join(reasons) or None), None


async def _sign_in(turn: _Turn) -> None:
    """Sign in, with one callback, to every source the calls need credentials for."""
    tools = turn.tools
    needs = {}
    urls = {}  # an MCP server's, where its OAuth flow waits for the user
    for index, call in enumerate(turn.step.calls):
        tool = tools.get(call.entry.name)
        if tool is not None and tool.requires_sign_in:
            assert tool.source is not None
            needs[index] = tool.source
            if isinstance(tool, SignInTool):
                urls[tool.source] = tool.authorization_url
    sources = machine.sources_to_sign_in(turn.state, needs, turn.live.credentials)
    if not sources:
        return
    states, session_id, turn_id = turn.engine._states, turn.live.id, turn.state.id
    # A sign-in a runtime before this one opened, or a new one.
    callback_id, facts = machine.open_sign_in(
        states, session_id, turn_id, sources, {s: urls[s] for s in sources if s in urls}
    )
    turn.commit(facts)
    await _wait(turn, callback_id)
    missing = tuple(source for source in sources if source not in turn.live.credentials)
    if missing:  # answered before a restart, whose credentials are not stored: ask again
        callback_id, facts = machine.open_callback(
            states,
            session_id,
            turn_id,
            OpenSignIn,
            sources=missing,
            authorization_urls={s: urls[s] for s in missing if s in urls},
        )
        turn.commit(facts)
        await _wait(turn, callback_id)


async def _wait(turn: _Turn, callback_id: str) -> machine.CallbackState:
    """Wait until the callback (of the turn's session) is answered; a stopped turn closes
    it unanswered (a suspended one leaves it open, for the next runtime)."""
    live = turn.live
    try:
        await turn.wait(turn.engine._closed_wait(live, callback_id))
    finally:
        if not turn.holding and live.state.callbacks[callback_id].open:
            turn.engine._close_callback(live, callback_id, answered=False)
    return live.state.callbacks[callback_id]


async def _wait_for(turn: _Turn, index: int, callback_id: str) -> machine.CallbackState:
    """``_wait`` for call ``index``, whose state says so while it waits."""
    turn.update(index, state=CallState.WAITING, callback=callback_id)
    return await _wait(turn, callback_id)


async def _run_call(turn: _Turn, index: int, failures: dict[int, BaseException]) -> None:
    if turn.step.calls[index].state is CallState.DONE:
        return  # before the turn was parked, or its runtime stopped
    try:
        result = await _call_tool(turn, index)
    except _RaiseFromTool as failure:
        failures[index] = failure.error
        entry = turn.step.calls[index].entry
        result = error_result(entry, f"{type(failure.error).__name__}: {failure}")
    turn.update(index, state=CallState.DONE, result=result)


async def _call_tool(turn: _Turn, index: int) -> ToolResultEntry:
    agent = turn.agent
    call = turn.step.calls[index]
    entry = call.entry
    if call.state is CallState.DONE and call.result is not None:
        return call.result
    if call.refusal is not None:
        return error_result(entry, call.refusal)
    tool = turn.tools.get(entry.name)
    subagent = agent.subagents_by_name.get(entry.name)
    if subagent is None and tool is None:
        known = ", ".join(sorted([*turn.tools, *agent.subagents_by_name])) or "none"
        return error_result(entry, f"unknown tool {entry.name!r}; the tools are: {known}")
    arguments: dict[str, Any] = {}
    if tool is not None:
        try:
            arguments = tool.structure_arguments(entry.arguments)
        except ValidationError as error:
            return error_result(entry, str(error))
    denied = await _approve(turn, index, tool)
    if denied is not None:
        return denied
    if subagent is not None:
        return await _delegate(turn, index, subagent)
    assert tool is not None
    if tool.kind == "client":
        callback_id = _restored(turn, index, OpenClientToolCall)
        if callback_id is None:
            callback_id, facts = machine.open_callback(
                turn.engine._states,
                turn.live.id,
                turn.state.id,
                OpenClientToolCall,
                tool_name=tool.name,
                arguments=entry.arguments,
            )
            turn.commit(facts)
        answered = await _wait_for(turn, index, callback_id)
        if answered.error is not None:
            return error_result(entry, answered.error)
        if answered.phase is not CallbackPhase.ANSWERED:
            return error_result(entry, "the client tool call closed unanswered")
        return _result_entry(entry, answered.answer)
    try:
        for dependency in tool.dependencies:
            if dependency.annotation is Credentials:
                assert tool.source is not None
                value: Any = Credentials(
                    source=tool.source, value=turn.live.credentials[tool.source]
                )
            else:
                value = read_input(turn.live.state.inputs, dependency)
            arguments[dependency.name] = value
        # Durable before it runs: after a crash, a call that may have run is never run again.
        turn.update(index, state=CallState.RUNNING)
        await turn.engine._flush(turn.live)  # raises if another runtime took the session over
        # A server's URL elicitation during the call opens a sign-in the call waits on.
        asking = URL_ELICITATION.set(
            functools.partial(_ask_url, turn, index, tool.source) if tool.kind == "mcp" else None
        )
        try:
            value = await tool.call(arguments)
        finally:
            URL_ELICITATION.reset(asking)
            source = tool.source if isinstance(tool, SignInTool) else None
            if source is not None and source in turn.live.credentials:  # used once: ask again
                turn.live.credentials = machine.without(turn.live.credentials, source)
    except Exception as error:
        if agent.tool_errors == "raise":
            raise _RaiseFromTool(error) from error
        return error_result(entry, f"{type(error).__name__}: {error}")
    if isinstance(value, ToolOutput):
        if value.is_error and agent.tool_errors == "raise":
            message = text_of(value.content) or "no message"
            raise _RaiseFromTool(MCPCallError(f"{entry.name} reported an error: {message}"))
        return _output_entry(entry, value)  # an error the tool reports keeps its blocks
    return _result_entry(entry, value)


async def _ask_url(turn: _Turn, index: int, source: str | None, message: str, url: str) -> bool:
    """Ask the user to open ``url`` for call ``index``, which runs (an MCP server's URL
    elicitation): an ``OpenSignIn`` carrying it; whether it was answered."""
    if source is None:
        return False
    states, session_id, turn_id = turn.engine._states, turn.live.id, turn.state.id
    callback_id, facts = machine.open_callback(
        states, session_id, turn_id, OpenSignIn, sources=(source,), authorization_urls={source: url}
    )
    turn.commit(facts)
    turn.update(index, callback=callback_id)  # a restart closes it with the call (machine.restart)
    try:
        with _Working(turn):  # the call runs on: its turn cannot park and leave it
            answered = await _wait(turn, callback_id)
    finally:
        if source in turn.live.credentials:  # what it was answered with means nothing more
            turn.live.credentials = machine.without(turn.live.credentials, source)
    return answered.phase is CallbackPhase.ANSWERED


def _restored(turn: _Turn, index: int, kind: type[OpenApproval | OpenClientToolCall]) -> str | None:
    """The callback of ``kind`` call ``index`` waited on when a runtime before this one
    stopped, if any: open, or answered since (before the resumed turn came back to it)."""
    call = turn.step.calls[index]
    if call.state is not CallState.WAITING or call.callback is None:
        return None
    state = turn.live.state.callbacks.get(call.callback)
    if state is None or not isinstance(state.callback, kind):
        return None
    return call.callback


async def _approve(turn: _Turn, index: int, tool: Tool | None) -> ToolResultEntry | None:
    """Wait for the call's approval if it needs one; the refusal's result if it is denied.

    One approval per call: a hook's, which is allowed once only, or else the tool's own.
    """
    call = turn.step.calls[index]
    restored = _restored(turn, index, OpenApproval)
    if call.state is CallState.DELEGATED or (call.state is CallState.WAITING and restored is None):
        return None  # approved before (the call waits on something else now)
    session = turn.live.state
    tool_approval = (
        tool is not None and tool.requires_approval and tool.name not in session.approved_tools
    )
    callback_id = restored
    if callback_id is None and (tool_approval or call.hook_approval):
        callback_id, facts = machine.open_callback(
            turn.engine._states,
            session.id,
            turn.state.id,
            OpenApproval,
            tool_name=call.entry.name,
            arguments=call.entry.arguments,
            source="hook" if call.hook_approval else "tool",
            reason=call.approval_reason,
        )
        turn.commit(facts)
    if callback_id is None:
        return None
    answered = await _wait_for(turn, index, callback_id)
    if answered.phase is not CallbackPhase.ANSWERED:  # closed unanswered: never an approval
        return error_result(call.entry, "the call's approval closed unanswered")
    if isinstance(answered.answer, DenyApproval):
        reason = answered.answer.reason
        return error_result(
            call.entry, "the client denied this call" + (f": {reason}" if reason else "")
        )
    return None


async def _delegate(turn: _Turn, index: int, subagent: AgentDefinition) -> ToolResultEntry:
    """Run a turn of a new subagent session on the task; its answer is the call's result."""
    engine = turn.engine
    call = turn.step.calls[index]
    entry = call.entry
    if call.child is not None:  # delegated before a restart: that turn goes on
        child_id, child_turn_id = call.child
        child = engine._live(child_id)
    else:
        arguments = entry.arguments
        message = arguments.get("message") if isinstance(arguments, Mapping) else None
        if not isinstance(message, str) or not message.strip() or len(arguments) != 1:
            return error_result(
                entry, f'{subagent.name} takes one argument, "message": the task, as a string'
            )
        root = engine._live(machine.root_of(engine._states, turn.live.id).id)
        child_id = new_id()
        try:
            child_turn_id, facts = machine.start_subagent(
                engine._states,
                turn.live.id,
                turn.state.id,
                child_id=child_id,
                agent=subagent.name,
                message=message,
                limit=root.agent.max_running_subagents,
                max_steps=subagent.max_steps,
                output_type=subagent.output_type,
                lease=(engine.owner, engine.lease_seconds) if engine.store.durable else None,
            )
        except SessionBusyError as busy:
            return error_result(entry, f"SessionBusyError: {busy}")
        child = engine._adopt(engine._states[child_id], subagent)
        turn.commit(facts)
        turn.update(index, state=CallState.DELEGATED, child=(child_id, child_turn_id))
        engine._spawn_turn(child, child_turn_id)
    try:
        await turn.wait(engine._turn_done(child, child_turn_id))
    except BaseException:
        if turn.task.parked and not turn.task.suspended:
            raise  # the subagent's turn goes on; this one waits for it, parked
        # The parent turn stops: its subagent's turn stops the same way, and first.
        child_state = child.state.turns[child_turn_id]
        if turn.task.suspended and machine.resumable(engine._states, child_state):
            engine._suspend_turn(child, child_turn_id)
        else:
            engine._stop_turn(child, child_turn_id, turn.state.stop_cause or StopCause.CANCELLED)
        with trio.CancelScope(shield=True):
            await engine._turn_done(child, child_turn_id).wait()
        raise
    record = child.state.turns[child_turn_id].record
    match record:
        case Completed(output=output, text=text):
            return _result_entry(entry, text if subagent.output_type is None else output)
        case Failed(error=info):
            return error_result(entry, f"{subagent.name} failed: {info.type}: {info.message}")
        case Interrupted(cause=cause):
            return error_result(entry, f"the turn of {subagent.name} was {cause}")
        case UnknownOutcome():
            return error_result(
                entry,
                f"the outcome of {subagent.name}'s turn is unknown: the runtime stopped while "
                "it ran, and it was not run again",
            )
    return error_result(entry, f"the turn of {subagent.name} ended as {type(record).__name__}")


def _output_entry(call: ToolCallEntry, output: ToolOutput) -> ToolResultEntry:
    """The result of a tool that made its own blocks (an MCP server's), as it made them."""
    try:
        return ToolResultEntry(
            id=new_id(),
            turn_id=call.turn_id,
            name=call.name,
            content=output.content,
            structured_content=output.structured_content,
            is_error=output.is_error,
            tool_call_id=call.tool_call_id,
        )
    except ValueError as error:  # structured content that is no JSON the history keeps
        return error_result(call, f"the tool's result cannot be kept: {error}")


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
    elif value is None or type(value) in JSON_SCALARS:  # not str: handled above
        structured = value  # JSON as it is: null, true, false or a number
        text = str(value) if type(value) is int else json.dumps(value)  # the same, sooner
        content = (TextContentBlock(text=text),)
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
            return error_result(
                call,
                f"the tool returned a {type(value).__name__} that {what}; return JSON values, "
                f"attrs classes, dataclasses or content blocks @ ${problem.at}",
            )
        content = (TextContentBlock(text=json.dumps(structured)),)
    return ToolResultEntry(
        id=new_id(),
        turn_id=call.turn_id,
        name=call.name,
        content=content,
        structured_content=structured,
        tool_call_id=call.tool_call_id,
    )
