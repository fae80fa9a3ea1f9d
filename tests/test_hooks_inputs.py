"""pre_tool_call hooks and session inputs (SPEC 8, 9).

Hooks: what each decision does to the call (None, ModifiedArguments, DenyToolCall,
RequestApproval), that they run in order before every call (local, client and source tools),
how a failing hook fails its call, and what ``@pre_tool_call`` and ``Agent(hooks=...)`` refuse.

Session inputs: how ``Annotated[T, Depends()]`` hands them to tools and hooks while the model
never sees them, that the session keeps them, that they are validated where they are used
without the value ever showing, and what ``start_session(inputs=...)``, ``SessionInput`` and
``Depends`` refuse.
"""

from __future__ import annotations

import abc
import json
import pathlib
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import attr
import attrs
import pytest
import trio
import trio.testing
from _support import Repo, call_tool

import agentlib
from agentlib import (
    Agent,
    AllowApproval,
    Blocked,
    CallbackOpened,
    Completed,
    Credentials,
    DenyApproval,
    DenyToolCall,
    Depends,
    EntryCompleted,
    Event,
    Failed,
    ModelReply,
    ModelRequest,
    ModifiedArguments,
    OpenApproval,
    OpenClientToolCall,
    OpenSignIn,
    RequestApproval,
    ScriptedModel,
    SdkError,
    SessionInput,
    SignInAnswer,
    Tool,
    ToolCallEntry,
    ToolCallRequest,
    ToolResultEntry,
    ToolSource,
    TurnState,
    ValidationError,
    client_tool,
    pre_tool_call,
    tool,
)

# Each test runs on a local runtime and on agents served over HTTP (conftest's transport).
pytestmark = pytest.mark.usefixtures("transport")

# --- inputs used across the tests -----------------------------------------------------------


def _lowercase(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value != value.lower():
        raise ValueError("must be lowercase")


def _quoting(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value != value.lower():
        raise ValueError(f"bad {value}")


class StrictRepo(SessionInput):
    """The same input as Repo, read with a stricter rule."""

    input_id = "repo"
    name: str = attrs.field(validator=_lowercase)


class QuotingRepo(SessionInput):
    """The same input as Repo, whose validator (wrongly) quotes the value."""

    input_id = "repo"
    name: str = attrs.field(validator=_quoting)


def _naming_the_field(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value != value.lower():
        raise ValueError("name must be lowercase")


def _quoting_repr(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value != value.lower():
        raise ValueError(f"bad {value!r}")


class FieldNamingRepo(SessionInput):
    """The same input as Repo, whose validator's message names the field."""

    input_id = "repo"
    name: str = attrs.field(validator=_naming_the_field)


class ReprQuotingRepo(SessionInput):
    """The same input as Repo, whose validator (wrongly) quotes the value's repr."""

    input_id = "repo"
    name: str = attrs.field(validator=_quoting_repr)


SECRET = "SECRET-Value-123"


# --- helpers ----------------------------------------------------------------------------------


class Script:
    """A scripted model that records every request it gets."""

    def __init__(self, *steps: Any) -> None:
        self.requests: list[ModelRequest] = []
        self.model = ScriptedModel([self._recorded(step) for step in steps])

    def _recorded(self, step: Any) -> Callable[[ModelRequest], Any]:
        def play(request: ModelRequest) -> Any:
            self.requests.append(request)
            return step(request) if callable(step) else step

        return play


def make_agent(
    script: Script,
    tools: list[Any],
    hooks: Sequence[agentlib.Hook] = (),
    tool_errors: Any = "report",
) -> Agent:
    return Agent("a", model=script.model, tools=tools, hooks=hooks, tool_errors=tool_errors)


@attrs.frozen
class Outcome:
    """A turn's record and every event of its session."""

    record: TurnState[Any]
    events: list[Event]

    @property
    def entries(self) -> list[Any]:
        return [event.entry for event in self.events if isinstance(event, EntryCompleted)]

    @property
    def calls(self) -> list[ToolCallEntry]:
        return [entry for entry in self.entries if isinstance(entry, ToolCallEntry)]

    @property
    def results(self) -> list[ToolResultEntry]:
        return [entry for entry in self.entries if isinstance(entry, ToolResultEntry)]

    @property
    def opened(self) -> list[Any]:
        return [event.callback for event in self.events if isinstance(event, CallbackOpened)]


async def ended(session: agentlib.Session, record: TurnState[Any]) -> Outcome:
    """End the session and read all its events."""
    await session.cancel()
    return Outcome(record, [event async for event in session.iter_events()])


async def run_turn(agent: Agent, *, inputs: Any = (), **handlers: Any) -> Outcome:
    """Run one turn in a fresh runtime and a new session."""
    async with agentlib.open_runtime():
        session = await agent.start_session(inputs=inputs, **handlers)
        record = await session.run("go")
        return await ended(session, record)


def adder() -> tuple[Tool, list[dict[str, int]]]:
    """A tool ``add`` and the arguments of each of its runs."""
    runs: list[dict[str, int]] = []

    @tool
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        runs.append({"a": a, "b": b})
        return a + b

    return add, runs


def repo_reader() -> tuple[Tool, list[Any]]:
    """A tool ``read`` taking the Repo input, and the input of each of its runs."""
    runs: list[Any] = []

    @tool
    async def read(path: str, repo: Annotated[Repo, Depends()]) -> str:
        """Read a file of the repository."""
        runs.append(repo)
        return "contents"

    return read, runs


def reader_of(cls: type[SessionInput]) -> tuple[Tool, list[Any]]:
    """A tool ``read`` whose ``repo`` parameter reads the input ``cls``, and the input of
    each of its runs (for classes the module's globals cannot name)."""
    runs: list[Any] = []

    async def read(path: str, repo: Any) -> str:
        """Read a file of the repository."""
        runs.append(repo)
        return "contents"

    read.__annotations__ = {"path": "str", "repo": Annotated[cls, Depends()], "return": "str"}
    return tool(read), runs


def everything_in(outcome: Outcome, script: Script) -> str:
    """Every event (repr and JSON) and every model request, as one text."""
    parts = [repr(outcome.record)]
    for event in outcome.events:
        parts.append(repr(event))
        parts.append(json.dumps(agentlib.unstructure(event)))
    parts.extend(model_view(request) for request in script.requests)
    return "\n".join(parts)


def model_view(request: ModelRequest) -> str:
    """What a model request shows the model: instructions, entries and tools."""
    return "\n".join(
        [
            repr(request),
            request.instructions,
            json.dumps(agentlib.unstructure(list(request.entries))),
            json.dumps(agentlib.unstructure(list(request.tools))),
        ]
    )


def approvals(outcome: Outcome) -> list[OpenApproval]:
    return [callback for callback in outcome.opened if isinstance(callback, OpenApproval)]


# === hooks ====================================================================================

# --- decisions ------------------------------------------------------------------------------


async def test_a_hook_returning_none_leaves_the_call_unchanged() -> None:
    add, runs = adder()

    @pre_tool_call
    def look(call: ToolCallEntry) -> None:
        return None

    outcome = await run_turn(make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [look]))

    assert runs == [{"a": 1, "b": 2}]
    assert [entry.arguments for entry in outcome.calls] == [{"a": 1, "b": 2}]
    assert [result.text for result in outcome.results] == ["3"]
    assert isinstance(outcome.record, Completed)


async def test_a_hook_receives_the_tool_call_entry_about_to_run() -> None:
    add, _ = adder()
    seen: list[Any] = []

    @pre_tool_call
    def look(call: ToolCallEntry) -> None:
        seen.append(call)

    outcome = await run_turn(make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [look]))

    assert len(seen) == 1
    assert isinstance(seen[0], ToolCallEntry)
    assert (seen[0].name, seen[0].arguments) == ("add", {"a": 1, "b": 2})
    assert seen[0].id == outcome.calls[0].id


async def test_modified_arguments_reach_the_tool() -> None:
    add, runs = adder()

    @pre_tool_call
    def rewrite(call: ToolCallEntry) -> ModifiedArguments:
        return ModifiedArguments({"a": 10, "b": 20})

    await run_turn(make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [rewrite]))

    assert runs == [{"a": 10, "b": 20}]


async def test_modified_arguments_show_in_the_history_events_and_completed_tool_calls() -> None:
    add, _ = adder()

    @pre_tool_call
    def rewrite(call: ToolCallEntry) -> ModifiedArguments:
        return ModifiedArguments({"a": 10, "b": 20})

    outcome = await run_turn(
        make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [rewrite])
    )

    assert isinstance(outcome.record, Completed)
    assert [entry.arguments for entry in outcome.record.tool_calls] == [{"a": 10, "b": 20}]
    assert [entry.arguments for entry in outcome.calls] == [{"a": 10, "b": 20}]
    added = [
        event.entry
        for event in outcome.events
        if isinstance(event, agentlib.EntryAdded) and isinstance(event.entry, ToolCallEntry)
    ]
    assert [entry.arguments for entry in added] == [{"a": 10, "b": 20}]
    assert [result.text for result in outcome.results] == ["30"]


async def test_the_models_next_request_shows_the_modified_arguments() -> None:
    add, _ = adder()
    script = Script(call_tool("add", a=1, b=2), "done")

    @pre_tool_call
    def rewrite(call: ToolCallEntry) -> ModifiedArguments:
        return ModifiedArguments({"a": 10, "b": 20})

    await run_turn(make_agent(script, [add], [rewrite]))

    shown = [entry for entry in script.requests[1].entries if isinstance(entry, ToolCallEntry)]
    assert [entry.arguments for entry in shown] == [{"a": 10, "b": 20}]
    assert '"a": 1,' not in model_view(script.requests[1])


async def test_hooks_run_in_order_and_each_sees_the_previous_rewrite() -> None:
    add, runs = adder()
    order: list[str] = []
    seen_by_second: list[ToolCallEntry] = []

    @pre_tool_call
    def first(call: ToolCallEntry) -> ModifiedArguments:
        order.append("first")
        return ModifiedArguments({**call.arguments, "a": 10})

    @pre_tool_call
    def second(call: ToolCallEntry) -> ModifiedArguments:
        order.append("second")
        seen_by_second.append(call)
        return ModifiedArguments({**call.arguments, "b": 20})

    outcome = await run_turn(
        make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [first, second])
    )

    assert order == ["first", "second"]
    assert isinstance(seen_by_second[0], ToolCallEntry)
    assert seen_by_second[0].arguments == {"a": 10, "b": 2}
    assert runs == [{"a": 10, "b": 20}]
    assert outcome.calls[0].arguments == {"a": 10, "b": 20}


async def test_deny_tool_call_does_not_run_the_tool() -> None:
    add, runs = adder()

    @pre_tool_call
    def refuse(call: ToolCallEntry) -> DenyToolCall:
        return DenyToolCall("not on Sundays")

    outcome = await run_turn(
        make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [refuse])
    )

    assert runs == []
    assert isinstance(outcome.record, Completed)


async def test_deny_tool_call_gives_the_model_an_error_result_with_the_reason() -> None:
    add, _ = adder()
    script = Script(call_tool("add", a=1, b=2), "done")

    @pre_tool_call
    def refuse(call: ToolCallEntry) -> DenyToolCall:
        return DenyToolCall("not on Sundays")

    await run_turn(make_agent(script, [add], [refuse]))

    (result,) = [e for e in script.requests[1].entries if isinstance(e, ToolResultEntry)]
    assert result.is_error
    assert "not on Sundays" in result.text
    assert result.text == "this call was refused: not on Sundays"


async def test_hooks_after_a_denial_do_not_run() -> None:
    add, _ = adder()
    later: list[ToolCallEntry] = []

    @pre_tool_call
    def refuse(call: ToolCallEntry) -> DenyToolCall:
        return DenyToolCall("no")

    @pre_tool_call
    def after(call: ToolCallEntry) -> None:
        later.append(call)

    await run_turn(make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [refuse, after]))

    assert later == []


# --- RequestApproval ------------------------------------------------------------------------


@pre_tool_call
def ask_why(call: ToolCallEntry) -> RequestApproval:
    return RequestApproval("why")


async def test_request_approval_opens_an_approval_with_source_hook_and_the_reason() -> None:
    add, runs = adder()
    agent = make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [ask_why])
    async with agentlib.open_runtime():
        session = await agent.start_session()
        blocked = await session.run("go")
        await session.cancel()

    assert isinstance(blocked, Blocked)
    (approval,) = blocked.callbacks
    assert isinstance(approval, OpenApproval)
    assert (approval.source, approval.reason) == ("hook", "why")
    assert (approval.tool_name, approval.arguments) == ("add", {"a": 1, "b": 2})
    assert runs == []


async def test_request_approval_without_a_reason_opens_an_approval_without_one() -> None:
    add, _ = adder()

    @pre_tool_call
    def ask(call: ToolCallEntry) -> RequestApproval:
        return RequestApproval()

    agent = make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [ask])
    outcome = await run_turn(agent, on_approval=lambda approval: AllowApproval())

    assert [(a.source, a.reason) for a in approvals(outcome)] == [("hook", None)]


async def test_allowing_a_hooks_approval_runs_the_call() -> None:
    add, runs = adder()
    agent = make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [ask_why])
    async with agentlib.open_runtime():
        session = await agent.start_session()
        blocked = await session.run("go")
        turn = session.turn(blocked.turn_id)
        answered = await turn.answer(blocked.callbacks[0].id, AllowApproval())
        record = await turn.result(after=blocked)

    assert isinstance(answered, agentlib.Answered)
    assert isinstance(record, Completed)
    assert runs == [{"a": 1, "b": 2}]


async def test_denying_a_hooks_approval_does_not_run_the_call() -> None:
    add, runs = adder()
    agent = make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [ask_why])
    async with agentlib.open_runtime():
        session = await agent.start_session()
        blocked = await session.run("go")
        turn = session.turn(blocked.turn_id)
        await turn.answer(blocked.callbacks[0].id, DenyApproval(reason="too risky"))
        record = await turn.result(after=blocked)
        outcome = await ended(session, record)

    assert isinstance(record, Completed)
    assert runs == []
    (result,) = outcome.results
    assert result.is_error
    assert "the client denied this call: too risky" in result.text


async def test_allowing_a_hooks_approval_for_the_session_raises_and_leaves_it_open() -> None:
    add, runs = adder()
    agent = make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [ask_why])
    async with agentlib.open_runtime():
        session = await agent.start_session()
        blocked = await session.run("go")
        turn = session.turn(blocked.turn_id)
        approval = blocked.callbacks[0]
        with pytest.raises(SdkError, match="hook"):
            await turn.answer(approval.id, AllowApproval(scope="session"))
        still = await turn.get()
        answered = await turn.answer(approval.id, AllowApproval())
        record = await turn.result(after=blocked)

    assert isinstance(still, Blocked)
    assert still.callbacks == (approval,)
    assert isinstance(answered, agentlib.Answered)
    assert isinstance(record, Completed)
    assert runs == [{"a": 1, "b": 2}]


async def test_a_handler_allowing_a_hooks_approval_for_the_session_raises() -> None:
    add, runs = adder()
    agent = make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [ask_why])
    async with agentlib.open_runtime():
        session = await agent.start_session(
            on_approval=lambda approval: AllowApproval(scope="session")
        )
        turn = await session.start_turn("go")
        with pytest.raises(SdkError, match="once"):
            await turn.result()
        still = await turn.get()
        await session.cancel()

    assert isinstance(still, Blocked)
    assert [callback.source for callback in still.callbacks] == ["hook"]
    assert runs == []


async def test_a_tool_requiring_approval_and_a_hook_asking_open_one_approval_of_the_hook() -> None:
    # The hook's approval can only be allowed once, so a session-wide approval of the tool
    # never lets through a call a hook flagged.
    runs: list[int] = []

    @tool(requires_approval=True)
    async def delete(n: int) -> str:
        """Delete something."""
        runs.append(n)
        return "deleted"

    agent = make_agent(Script(call_tool("delete", n=1), "done"), [delete], [ask_why])
    outcome = await run_turn(agent, on_approval=lambda approval: AllowApproval())

    assert [approval.source for approval in approvals(outcome)] == ["hook"]
    assert isinstance(outcome.record, Completed)
    assert runs == [1]


def guarded_deleter() -> tuple[Agent, list[str]]:
    """An agent deleting /tmp/a and /etc/passwd in parallel with a tool requiring approval,
    whose hook asks for approval of paths outside /tmp/; and the paths it deleted."""
    runs: list[str] = []

    @tool(requires_approval=True)
    async def delete(path: str) -> str:
        """Delete a file."""
        runs.append(path)
        return "deleted"

    @pre_tool_call
    def outside_tmp(call: ToolCallEntry) -> RequestApproval | None:
        if call.arguments["path"].startswith("/tmp/"):
            return None
        return RequestApproval("outside /tmp")

    both = ModelReply(
        tool_calls=[
            ToolCallRequest(name="delete", arguments={"path": "/tmp/a"}),
            ToolCallRequest(name="delete", arguments={"path": "/etc/passwd"}),
        ]
    )
    return make_agent(Script(both, "done"), [delete], [outside_tmp]), runs


async def both_approvals_open(session: agentlib.Session) -> Blocked:
    """Run a turn until both of its parallel calls wait for approval (the first approval
    may open, and run() return, before the other call's hook has asked)."""
    turn = await session.start_turn("go")
    await trio.testing.wait_all_tasks_blocked()
    blocked = await turn.get()
    assert isinstance(blocked, Blocked)
    assert len(blocked.callbacks) == 2
    return blocked


async def test_a_session_wide_approval_of_the_tool_leaves_a_parallel_hook_approval_open() -> None:
    agent, runs = guarded_deleter()
    async with agentlib.open_runtime():
        session = await agent.start_session()
        blocked = await both_approvals_open(session)
        by_path = {callback.arguments["path"]: callback for callback in blocked.callbacks}
        turn = session.turn(blocked.turn_id)
        await turn.answer(by_path["/tmp/a"].id, AllowApproval(scope="session"))
        await trio.testing.wait_all_tasks_blocked()
        still = await turn.get()
        await session.cancel()

    assert {path: callback.source for path, callback in by_path.items()} == {
        "/tmp/a": "tool",
        "/etc/passwd": "hook",
    }
    assert isinstance(still, Blocked)
    assert still.callbacks == (by_path["/etc/passwd"],)
    assert runs == ["/tmp/a"]


async def test_a_hooks_approval_of_a_tool_requiring_approval_refuses_a_session_wide_allow() -> None:
    agent, runs = guarded_deleter()
    async with agentlib.open_runtime():
        session = await agent.start_session()
        blocked = await both_approvals_open(session)
        (hooks,) = [callback for callback in blocked.callbacks if callback.source == "hook"]
        turn = session.turn(blocked.turn_id)
        with pytest.raises(SdkError):
            await turn.answer(hooks.id, AllowApproval(scope="session"))
        await trio.testing.wait_all_tasks_blocked()
        still = await turn.get()
        await session.cancel()

    assert hooks.arguments == {"path": "/etc/passwd"}
    assert isinstance(still, Blocked)
    assert still.callbacks == blocked.callbacks
    assert runs == []


async def test_two_hooks_asking_for_approval_open_one_approval() -> None:
    add, runs = adder()

    @pre_tool_call
    def ask_again(call: ToolCallEntry) -> RequestApproval:
        return RequestApproval("again")

    agent = make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [ask_why, ask_again])
    outcome = await run_turn(agent, on_approval=lambda approval: AllowApproval())

    (approval,) = approvals(outcome)
    assert approval.source == "hook"
    assert "why" in (approval.reason or "")
    assert "again" in (approval.reason or "")
    assert runs == [{"a": 1, "b": 2}]


async def test_a_hooks_approval_shows_the_arguments_an_earlier_hook_rewrote() -> None:
    add, _ = adder()

    @pre_tool_call
    def rewrite(call: ToolCallEntry) -> ModifiedArguments:
        return ModifiedArguments({"a": 10, "b": 20})

    agent = make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [rewrite, ask_why])
    outcome = await run_turn(agent, on_approval=lambda approval: AllowApproval())

    assert [approval.arguments for approval in approvals(outcome)] == [{"a": 10, "b": 20}]


# --- which calls, and async hooks -----------------------------------------------------------


async def test_an_async_hook_can_rewrite_the_call() -> None:
    add, runs = adder()

    @pre_tool_call
    async def rewrite(call: ToolCallEntry) -> ModifiedArguments:
        await trio.lowlevel.checkpoint()
        return ModifiedArguments({"a": 5, "b": 5})

    outcome = await run_turn(
        make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [rewrite])
    )

    assert runs == [{"a": 5, "b": 5}]
    assert [result.text for result in outcome.results] == ["10"]


async def test_an_async_hook_can_deny_the_call() -> None:
    add, runs = adder()

    @pre_tool_call
    async def refuse(call: ToolCallEntry) -> DenyToolCall:
        await trio.lowlevel.checkpoint()
        return DenyToolCall("async no")

    outcome = await run_turn(
        make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [refuse])
    )

    assert runs == []
    assert outcome.results[0].text == "this call was refused: async no"


async def test_a_hook_runs_for_every_call_of_every_step() -> None:
    add, runs = adder()
    seen: list[Any] = []
    both = ModelReply(
        tool_calls=[
            ToolCallRequest(name="add", arguments={"a": 1, "b": 1}),
            ToolCallRequest(name="add", arguments={"a": 2, "b": 2}),
        ]
    )

    @pre_tool_call
    def look(call: ToolCallEntry) -> None:
        seen.append(call.arguments["a"])

    await run_turn(make_agent(Script(both, call_tool("add", a=3, b=3), "done"), [add], [look]))

    assert sorted(seen) == [1, 2, 3]
    assert len(runs) == 3


async def test_a_hook_runs_for_a_client_tool_call() -> None:
    seen: list[str] = []

    @client_tool
    def pick(prompt: str) -> int: ...

    @pre_tool_call
    def look(call: ToolCallEntry) -> ModifiedArguments:
        seen.append(call.name)
        return ModifiedArguments({"prompt": "rewritten"})

    opened: list[OpenClientToolCall] = []

    def answer(callback: OpenClientToolCall) -> int:
        opened.append(callback)
        return 7

    agent = make_agent(Script(call_tool("client.pick", prompt="p"), "done"), [pick], [look])
    outcome = await run_turn(agent, on_client_tool=answer)

    assert seen == ["client.pick"]
    assert [callback.arguments for callback in opened] == [{"prompt": "rewritten"}]
    assert [result.text for result in outcome.results] == ["7"]


async def test_a_hook_denying_a_client_tool_call_opens_no_callback() -> None:
    @client_tool
    def pick(prompt: str) -> int: ...

    @pre_tool_call
    def refuse(call: ToolCallEntry) -> DenyToolCall:
        return DenyToolCall("not now")

    outcome = await run_turn(
        make_agent(Script(call_tool("client.pick", prompt="p"), "done"), [pick], [refuse])
    )

    assert outcome.opened == []
    assert outcome.results[0].text == "this call was refused: not now"


async def test_the_entry_a_hook_receives_for_a_client_tool_is_the_one_the_history_shows() -> None:
    seen: list[ToolCallEntry] = []

    @client_tool
    def pick(prompt: str) -> int: ...

    @pre_tool_call
    def look(call: ToolCallEntry) -> None:
        seen.append(call)

    agent = make_agent(Script(call_tool("client.pick", prompt="p"), "done"), [pick], [look])
    outcome = await run_turn(agent, on_client_tool=lambda callback: 7)

    assert outcome.calls[0].tool_kind == "client"
    assert seen == outcome.calls


async def test_a_hook_runs_for_a_tool_of_a_tool_source() -> None:
    seen: list[str] = []
    runs: list[str] = []

    async def find(query: str) -> str:
        """Find notes."""
        runs.append(query)
        return "found"

    @pre_tool_call
    def look(call: ToolCallEntry) -> ModifiedArguments:
        seen.append(call.name)
        return ModifiedArguments({"query": "rewritten"})

    notes = ToolSource(name="notes", tools=[find])
    await run_turn(make_agent(Script(call_tool("notes.find", query="q"), "done"), [notes], [look]))

    assert seen == ["notes.find"]
    assert runs == ["rewritten"]


async def test_a_hook_runs_for_a_sign_in_source_tool_before_the_sign_in() -> None:
    seen: list[str] = []

    async def find(query: str, creds: Annotated[Credentials, Depends()]) -> str:
        """Find notes."""
        return "found"

    @pre_tool_call
    def refuse(call: ToolCallEntry) -> DenyToolCall:
        seen.append(call.name)
        return DenyToolCall("no notion today")

    notion = ToolSource(name="notion", tools=[find], requires_sign_in=True)
    outcome = await run_turn(
        make_agent(Script(call_tool("notion.find", query="q"), "done"), [notion], [refuse])
    )

    assert seen == ["notion.find"]
    assert not any(isinstance(callback, OpenSignIn) for callback in outcome.opened)
    assert outcome.results[0].text == "this call was refused: no notion today"


async def test_a_hook_lets_a_sign_in_source_tool_run_with_its_credentials() -> None:
    seen: list[str] = []
    got: list[Credentials] = []

    async def find(query: str, creds: Annotated[Credentials, Depends()]) -> str:
        """Find notes."""
        got.append(creds)
        return "found"

    @pre_tool_call
    def look(call: ToolCallEntry) -> None:
        seen.append(call.name)

    notion = ToolSource(name="notion", tools=[find], requires_sign_in=True)
    agent = make_agent(Script(call_tool("notion.find", query="q"), "done"), [notion], [look])
    outcome = await run_turn(
        agent, on_sign_in=lambda sign_in: SignInAnswer(credentials={"notion": "tok"})
    )

    assert seen == ["notion.find"]
    assert got == [Credentials(source="notion", value="tok")]
    assert isinstance(outcome.record, Completed)


# --- failing hooks --------------------------------------------------------------------------


@pre_tool_call
def explode(call: ToolCallEntry) -> None:
    raise RuntimeError("boom")


async def test_a_raising_hook_reports_an_error_result_naming_the_hook_and_the_error() -> None:
    add, runs = adder()
    script = Script(call_tool("add", a=1, b=2), "done")

    outcome = await run_turn(make_agent(script, [add], [explode]))

    assert runs == []
    assert isinstance(outcome.record, Completed)
    (result,) = [e for e in script.requests[1].entries if isinstance(e, ToolResultEntry)]
    assert result.is_error
    assert "explode" in result.text
    assert "RuntimeError: boom" in result.text


async def test_a_raising_hook_with_tool_errors_raise_fails_the_turn() -> None:
    add, runs = adder()

    outcome = await run_turn(
        make_agent(
            Script(call_tool("add", a=1, b=2), "done"), [add], [explode], tool_errors="raise"
        )
    )

    assert runs == []
    assert isinstance(outcome.record, Failed)
    assert outcome.record.error.type == "RuntimeError"
    assert "boom" in outcome.record.error.message


async def test_a_raising_hook_with_tool_errors_raise_still_leaves_a_result_for_the_call() -> None:
    add, _ = adder()

    outcome = await run_turn(
        make_agent(
            Script(call_tool("add", a=1, b=2), "done"), [add], [explode], tool_errors="raise"
        )
    )

    assert [result.tool_call_id for result in outcome.results] == [
        entry.tool_call_id for entry in outcome.calls
    ]
    assert outcome.results[0].is_error


async def test_a_hook_returning_a_wrong_type_fails_the_call() -> None:
    add, runs = adder()

    @pre_tool_call
    def answer(call: ToolCallEntry) -> Any:
        return 42

    outcome = await run_turn(
        make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [answer])
    )

    assert runs == []
    (result,) = outcome.results
    assert result.is_error
    assert "answer" in result.text
    assert "int" in result.text


async def test_a_hook_returning_a_wrong_type_with_tool_errors_raise_fails_the_turn() -> None:
    add, _ = adder()

    @pre_tool_call
    def answer(call: ToolCallEntry) -> Any:
        return True

    outcome = await run_turn(
        make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [answer], tool_errors="raise")
    )

    assert isinstance(outcome.record, Failed)
    assert "bool" in outcome.record.error.message


async def test_modified_arguments_that_are_not_an_object_fail_the_call() -> None:
    add, runs = adder()

    @pre_tool_call
    def listify(call: ToolCallEntry) -> ModifiedArguments:
        return ModifiedArguments([1, 2])

    outcome = await run_turn(
        make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [listify])
    )

    assert runs == []
    (result,) = outcome.results
    assert result.is_error
    assert "listify" in result.text
    assert "object" in result.text
    assert outcome.calls[0].arguments == {"a": 1, "b": 2}


async def test_a_failing_hook_stops_the_later_hooks() -> None:
    add, _ = adder()
    later: list[ToolCallEntry] = []

    @pre_tool_call
    def after(call: ToolCallEntry) -> None:
        later.append(call)

    await run_turn(make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [explode, after]))

    assert later == []


# --- construction errors --------------------------------------------------------------------


def test_a_plain_function_in_hooks_raises_type_error_naming_pre_tool_call() -> None:
    def plain(call: ToolCallEntry) -> None:
        return None

    with pytest.raises(TypeError, match="pre_tool_call"):
        Agent("a", model=ScriptedModel([]), hooks=[plain])  # type: ignore[list-item]


def test_a_hook_whose_second_parameter_is_not_depends_raises_type_error() -> None:
    def hook(call: ToolCallEntry, limit: int) -> None:
        return None

    with pytest.raises(TypeError, match="limit"):
        pre_tool_call(hook)


def test_a_hook_without_parameters_raises_type_error() -> None:
    def hook() -> None:
        return None

    with pytest.raises(TypeError, match="ToolCallEntry"):
        pre_tool_call(hook)


def test_a_hook_taking_credentials_raises_type_error() -> None:
    def hook(call: ToolCallEntry, creds: Annotated[Credentials, Depends()]) -> None:
        return None

    with pytest.raises(TypeError, match="Credentials"):
        pre_tool_call(hook)


def test_a_hook_depending_on_a_type_that_is_not_an_input_raises_type_error() -> None:
    def hook(call: ToolCallEntry, limit: Annotated[int, Depends()]) -> None:
        return None

    with pytest.raises(TypeError, match="SessionInput"):
        pre_tool_call(hook)


# === session inputs ===========================================================================

# --- what the tool, the hook and the model get -----------------------------------------------


async def test_a_tool_receives_the_session_input() -> None:
    read, runs = repo_reader()

    await run_turn(
        make_agent(Script(call_tool("read", path="README"), "done"), [read]),
        inputs=[Repo(name="acme/widgets")],
    )

    assert runs == [Repo(name="acme/widgets")]


def test_an_input_parameter_is_left_out_of_the_tools_schema() -> None:
    read, _ = repo_reader()
    agent = make_agent(Script(), [read])

    (schema,) = agent.tool_schemas
    assert list(schema.parameters["properties"]) == ["path"]
    assert schema.parameters["required"] == ["path"]
    assert '"repo"' not in json.dumps(agentlib.unstructure(schema))


async def test_the_model_requests_tools_leave_the_input_parameter_out() -> None:
    read, _ = repo_reader()
    script = Script(call_tool("read", path="README"), "done")

    await run_turn(make_agent(script, [read]), inputs=[Repo(name="acme/widgets")])

    for request in script.requests:
        (schema,) = request.tools
        assert list(schema.parameters["properties"]) == ["path"]


async def test_nothing_the_model_sees_holds_the_inputs_value() -> None:
    read, runs = repo_reader()
    script = Script(call_tool("read", path="README"), "done")

    await run_turn(make_agent(script, [read]), inputs=[Repo(name=SECRET)])

    assert runs == [Repo(name=SECRET)]
    assert len(script.requests) == 2
    for request in script.requests:
        assert SECRET not in model_view(request)


async def test_no_event_holds_the_inputs_value() -> None:
    read, _ = repo_reader()
    script = Script(call_tool("read", path="README"), "done")

    outcome = await run_turn(make_agent(script, [read]), inputs=[Repo(name=SECRET)])

    assert SECRET not in everything_in(outcome, script)


async def test_a_hook_receives_the_session_input() -> None:
    add, _ = adder()
    seen: list[Repo] = []

    @pre_tool_call
    def look(call: ToolCallEntry, repo: Annotated[Repo, Depends()]) -> None:
        seen.append(repo)

    await run_turn(
        make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [look]),
        inputs=[Repo(name="acme/widgets")],
    )

    assert seen == [Repo(name="acme/widgets")]


async def test_a_hook_can_decide_from_the_session_input() -> None:
    add, runs = adder()

    @pre_tool_call
    def only_sandbox(call: ToolCallEntry, repo: Annotated[Repo, Depends()]) -> Any:
        return None if repo.name == "sandbox" else DenyToolCall("only in the sandbox")

    agent = make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [only_sandbox])
    outcome = await run_turn(agent, inputs=[Repo(name="production")])

    assert runs == []
    assert outcome.results[0].text == "this call was refused: only in the sandbox"


async def test_the_model_passing_the_input_as_an_argument_gets_unknown_argument() -> None:
    read, runs = repo_reader()
    script = Script(call_tool("read", path="README", repo="other/repo"), "done")

    outcome = await run_turn(make_agent(script, [read]), inputs=[Repo(name="acme/widgets")])

    assert runs == []
    (result,) = outcome.results
    assert result.is_error
    assert "unknown argument 'repo'" in result.text


def branch_class(decorate: Callable[[type[Any]], type[Any]]) -> type[Any]:
    """An input with a default and a validator, under the decorator ``decorate``."""

    @decorate
    class Branch(SessionInput):
        input_id = "branch"
        name: str
        depth: int = attrs.field(default=1, validator=attrs.validators.ge(0))

    return Branch


# The spellings of an @attrs decorator that rebuild the class (slotted), and no decorator.
DECORATORS: dict[str, Callable[[type[Any]], type[Any]]] = {
    "attrs.frozen": attrs.frozen,
    "attrs.define": attrs.define,
    "attrs.frozen(kw_only=True)": attrs.frozen(kw_only=True),
}
SPELLINGS = {"undecorated": lambda cls: cls, **DECORATORS}


def field_options(cls: type[Any]) -> list[tuple[str, Any, bool, bool]]:
    return [
        (field.name, field.default, field.validator is not None, field.kw_only)
        for field in attrs.fields(cls)
    ]


@pytest.mark.parametrize("spelling", list(DECORATORS))
def test_an_attrs_decorator_above_an_input_changes_nothing(spelling: str) -> None:
    plain = branch_class(SPELLINGS["undecorated"])
    decorated = branch_class(DECORATORS[spelling])
    branch = decorated(name="main")

    assert field_options(decorated) == field_options(plain)
    assert branch.depth == 1
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        branch.name = "dev"
    with pytest.raises(TypeError):
        decorated("main")
    with pytest.raises(ValueError, match="depth"):
        decorated(name="main", depth=-1)


@pytest.mark.parametrize("spelling", list(SPELLINGS))
async def test_an_input_reaches_a_tool_and_reads_back_after_a_restart_however_decorated(
    spelling: str, tmp_path: pathlib.Path
) -> None:
    branch = branch_class(SPELLINGS[spelling])
    read, runs = reader_of(branch)
    steps = (call_tool("read", path="README"), "done") * 2  # the session's steps, both turns
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    async with agentlib.open_runtime(store):
        agent = make_agent(Script(*steps), [read])
        session = await agent.start_session(inputs=[branch(name="main")])
        first = await session.run("go")
    async with agentlib.open_runtime(store):  # a new runtime reads the input from the file
        agent = make_agent(Script(*steps), [read])
        second = await agent.session(session.id).run("again")

    assert isinstance(first, Completed)
    assert isinstance(second, Completed)
    assert runs == [branch(name="main", depth=1)] * 2


@pytest.mark.parametrize(
    "decorate",
    [attrs.define(slots=False), attr.s(auto_attribs=True)],
    ids=["attrs.define(slots=False)", "attr.s(auto_attribs=True)"],
)
def test_an_attrs_decorator_patching_an_input_in_place_is_refused(
    decorate: Callable[[type[Any]], type[Any]],
) -> None:
    # It would keep its own options and drop the fields' defaults and validators.
    with pytest.raises(TypeError, match="remove the decorator"):
        branch_class(decorate)


def test_a_session_input_subclass_is_a_frozen_keyword_only_attrs_class() -> None:
    repo = Repo(name="x")

    assert attrs.has(Repo)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        repo.name = "y"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Repo("x")  # type: ignore[misc]
    assert "input_id" not in agentlib.unstructure(repo)


# --- stored with the session ----------------------------------------------------------------


async def test_a_later_turn_through_a_second_reference_still_gets_the_input() -> None:
    read, runs = repo_reader()
    agent = make_agent(Script("hello", call_tool("read", path="README"), "done"), [read])
    async with agentlib.open_runtime():
        session = await agent.start_session(inputs=[Repo(name="acme/widgets")])
        first = await session.run("hi")
        again = agent.session(session.id)
        second = await again.run("read it")
        await session.cancel()

    assert isinstance(first, Completed)
    assert isinstance(second, Completed)
    assert runs == [Repo(name="acme/widgets")]


async def test_the_session_keeps_the_inputs_value_not_the_object() -> None:
    read, runs = repo_reader()
    given = Repo(name="acme/widgets")

    await run_turn(
        make_agent(Script(call_tool("read", path="README"), "done"), [read]), inputs=[given]
    )

    assert runs == [given]
    assert runs[0] is not given


# --- validation where the input is used -----------------------------------------------------


async def test_an_input_failing_the_tools_stricter_class_reports_an_error_result() -> None:
    read, runs = reader_of(StrictRepo)
    script = Script(call_tool("read", path="README"), "done")

    outcome = await run_turn(make_agent(script, [read]), inputs=[Repo(name=SECRET)])

    assert runs == []
    assert isinstance(outcome.record, Completed)
    (result,) = outcome.results
    assert result.is_error
    assert "ValidationError" in result.text
    assert "'repo'" in result.text
    assert "must be lowercase" in result.text


async def test_an_input_failing_the_tools_stricter_class_leaks_its_value_nowhere() -> None:
    read, _ = reader_of(StrictRepo)
    script = Script(call_tool("read", path="README"), "done")

    outcome = await run_turn(make_agent(script, [read]), inputs=[Repo(name=SECRET)])

    assert SECRET not in outcome.results[0].text
    assert SECRET not in everything_in(outcome, script)


async def test_an_input_failing_the_stricter_class_with_tool_errors_raise_fails_the_turn() -> None:
    read, runs = reader_of(StrictRepo)
    script = Script(call_tool("read", path="README"), "done")

    outcome = await run_turn(
        make_agent(script, [read], tool_errors="raise"), inputs=[Repo(name=SECRET)]
    )

    assert runs == []
    assert isinstance(outcome.record, Failed)
    assert outcome.record.error.type == "ValidationError"
    assert "'repo'" in outcome.record.error.message
    assert SECRET not in outcome.record.error.message
    assert SECRET not in everything_in(outcome, script)


async def test_a_validator_message_that_quotes_the_value_is_withheld() -> None:
    read, runs = reader_of(QuotingRepo)
    script = Script(call_tool("read", path="README"), "done")

    outcome = await run_turn(make_agent(script, [read]), inputs=[Repo(name=SECRET)])

    assert runs == []
    (result,) = outcome.results
    assert result.is_error
    assert "'repo'" in result.text
    assert "QuotingRepo" in result.text
    assert "bad" not in result.text
    assert SECRET not in everything_in(outcome, script)


async def test_a_quoting_validator_with_tool_errors_raise_leaks_the_value_nowhere() -> None:
    read, _ = reader_of(QuotingRepo)
    script = Script(call_tool("read", path="README"), "done")

    outcome = await run_turn(
        make_agent(script, [read], tool_errors="raise"), inputs=[Repo(name=SECRET)]
    )

    assert isinstance(outcome.record, Failed)
    assert SECRET not in outcome.record.error.message
    assert SECRET not in everything_in(outcome, script)


async def test_a_validator_message_naming_the_field_reaches_the_model() -> None:
    # "name" is the input's key, not its value: the message is not withheld for it.
    read, runs = reader_of(FieldNamingRepo)
    script = Script(call_tool("read", path="README"), "done")

    outcome = await run_turn(make_agent(script, [read]), inputs=[Repo(name=SECRET)])

    assert runs == []
    (result,) = outcome.results
    assert result.is_error
    assert "name must be lowercase" in result.text
    assert SECRET not in everything_in(outcome, script)


async def test_a_validator_message_quoting_the_values_repr_is_withheld() -> None:
    # With a newline in the value, its repr differs from its text; neither may show.
    read, runs = reader_of(ReprQuotingRepo)
    script = Script(call_tool("read", path="README"), "done")
    value = f"{SECRET}\nsecond line"

    outcome = await run_turn(make_agent(script, [read]), inputs=[Repo(name=value)])

    assert runs == []
    (result,) = outcome.results
    assert result.is_error
    assert "ReprQuotingRepo" in result.text
    assert "bad" not in result.text
    assert SECRET not in everything_in(outcome, script)


async def test_an_input_that_passes_the_stricter_class_reaches_the_tool() -> None:
    read, runs = reader_of(StrictRepo)

    await run_turn(
        make_agent(Script(call_tool("read", path="README"), "done"), [read]),
        inputs=[Repo(name="acme/widgets")],
    )

    assert runs == [StrictRepo(name="acme/widgets")]


async def test_an_input_failing_a_hooks_stricter_class_fails_the_call_without_the_value() -> None:
    add, runs = adder()
    script = Script(call_tool("add", a=1, b=2), "done")

    @pre_tool_call
    def strict(call: ToolCallEntry, repo: Annotated[StrictRepo, Depends()]) -> None:
        return None

    outcome = await run_turn(make_agent(script, [add], [strict]), inputs=[Repo(name=SECRET)])

    assert runs == []
    (result,) = outcome.results
    assert result.is_error
    assert "strict" in result.text
    assert "StrictRepo" in result.text
    assert SECRET not in everything_in(outcome, script)


# --- missing inputs -------------------------------------------------------------------------


async def test_a_missing_input_reports_an_error_saying_to_pass_it_at_start_session() -> None:
    read, runs = repo_reader()

    outcome = await run_turn(make_agent(Script(call_tool("read", path="README"), "done"), [read]))

    assert runs == []
    (result,) = outcome.results
    assert result.is_error
    assert "ValidationError" in result.text
    assert "start_session(inputs=" in result.text
    assert "Repo" in result.text


async def test_a_missing_input_with_tool_errors_raise_fails_the_turn() -> None:
    read, _ = repo_reader()

    outcome = await run_turn(
        make_agent(Script(call_tool("read", path="README"), "done"), [read], tool_errors="raise")
    )

    assert isinstance(outcome.record, Failed)
    assert outcome.record.error.type == "ValidationError"
    assert "start_session(inputs=" in outcome.record.error.message


async def test_a_missing_input_with_a_default_gives_the_tool_the_default() -> None:
    runs: list[Any] = []

    @tool
    async def read(path: str, repo: Annotated[Repo, Depends()] = None) -> str:  # type: ignore[assignment]
        """Read a file."""
        runs.append(repo)
        return "contents"

    outcome = await run_turn(make_agent(Script(call_tool("read", path="README"), "done"), [read]))

    assert runs == [None]
    assert not outcome.results[0].is_error


async def test_a_missing_input_in_a_hook_fails_the_call() -> None:
    add, runs = adder()

    @pre_tool_call
    def look(call: ToolCallEntry, repo: Annotated[Repo, Depends()]) -> None:
        return None

    outcome = await run_turn(make_agent(Script(call_tool("add", a=1, b=2), "done"), [add], [look]))

    assert runs == []
    (result,) = outcome.results
    assert result.is_error
    assert "start_session(inputs=" in result.text


# --- bad inputs at start_session --------------------------------------------------------------


@pytest.mark.parametrize(
    ("inputs", "fragment"),
    [
        pytest.param([{"name": "x"}], "dict is not a SessionInput", id="not-an-input"),
        pytest.param(
            [Repo(name="a"), StrictRepo(name="b")],
            "two inputs have input_id 'repo'",
            id="duplicate-input-id",
        ),
        pytest.param("text", "must be a list", id="text"),
    ],
)
async def test_bad_inputs_raise_validation_error_before_the_session_starts(
    inputs: Any, fragment: str
) -> None:
    agent = make_agent(Script("done"), [])
    async with agentlib.open_runtime() as runtime:
        with pytest.raises(ValidationError, match=fragment) as info:
            await agent.start_session(inputs=inputs)
        started = dict(runtime._sessions)

    assert isinstance(info.value, ValueError)
    assert started == {}


def test_a_session_input_without_input_id_raises_type_error_at_class_creation() -> None:
    with pytest.raises(TypeError, match="input_id"):

        class Nameless(SessionInput):
            name: str


def test_a_session_input_with_an_empty_input_id_raises_type_error() -> None:
    with pytest.raises(TypeError, match="input_id"):

        class Empty(SessionInput):
            input_id = ""
            name: str


# --- Depends, credentials and tool sources ------------------------------------------------------


def test_depends_on_a_type_that_is_neither_an_input_nor_credentials_raises_at_tool() -> None:
    def lookup(limit: Annotated[int, Depends()]) -> str:
        return ""

    with pytest.raises(TypeError, match="SessionInput"):
        tool(lookup)


def test_a_plain_tool_taking_credentials_raises_value_error_at_agent() -> None:
    @tool
    def fetch(creds: Annotated[Credentials, Depends()]) -> str:
        """Fetch."""
        return ""

    with pytest.raises(ValueError, match="ToolSource"):
        Agent("a", model=ScriptedModel([]), tools=[fetch])


def test_a_tool_taking_credentials_in_a_source_without_sign_in_raises_value_error() -> None:
    def fetch(creds: Annotated[Credentials, Depends()]) -> str:
        """Fetch."""
        return ""

    with pytest.raises(ValueError, match="requires_sign_in"):
        ToolSource(name="notion", tools=[fetch])


@pytest.mark.parametrize("name", ["client", "a-b", "", "notion.pages"])
def test_a_tool_source_with_a_bad_name_raises_value_error(name: str) -> None:
    def find(query: str) -> str:
        """Find."""
        return ""

    with pytest.raises(ValueError, match="name"):
        ToolSource(name=name, tools=[find])


def test_a_client_tool_in_a_tool_source_raises_value_error() -> None:
    @client_tool
    def pick(prompt: str) -> int: ...

    with pytest.raises(ValueError, match="client tool"):
        ToolSource(name="notion", tools=[pick])


def test_a_client_tool_with_a_depends_parameter_raises_type_error() -> None:
    def pick(prompt: str, repo: Annotated[Repo, Depends()]) -> int: ...

    with pytest.raises(TypeError, match="Depends"):
        client_tool(pick)


def test_a_session_input_may_also_be_an_abstract_base_class() -> None:
    class Settings(SessionInput, abc.ABC):
        input_id = "settings"
        region: str

        @abc.abstractmethod
        def where(self) -> str: ...

    class EuSettings(Settings):
        input_id = "eu_settings"

        def where(self) -> str:
            return f"in {self.region}"

    with pytest.raises(TypeError):
        Settings(region="eu")  # type: ignore[abstract]
    settings = EuSettings(region="eu")
    assert settings.where() == "in eu"
    assert attrs.has(EuSettings)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        settings.region = "us"  # type: ignore[misc]
