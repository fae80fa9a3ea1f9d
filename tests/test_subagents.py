"""Subagents: delegation as a tool, subagent sessions, callbacks that reach the root.

``Agent(subagents=[...])`` offers each subagent to the model as a tool taking one argument,
``message``; a call runs one turn of a new subagent session and its answer (or its
``output_type`` value) is the call's result (SPEC 5, issue 5). These tests drive it through
the public API only: what each model sees, how a subagent's record maps to the tool result,
concurrency and nesting, callbacks opened below and answered through the root, the root's
handlers, ``session.subagents()``, the read-only subagent references, cancel and interrupt,
and the cap on running subagents.

Every tool and model step here is async (or returns at once), so
``trio.testing.wait_all_tasks_blocked()`` reaches a settled state; tests that could hang take
the ``autojump_clock`` and a ``trio.fail_after`` so a deadlock fails fast instead.
"""

from __future__ import annotations

import re
from contextlib import aclosing
from typing import Annotated, Any

import attrs
import pytest
import trio
import trio.testing
from _support import (
    HOLD,
    Gate,
    Recorder,
    Repo,
    call,
    deleter,
    echo,
    pick,
    reply,
    tool_results,
    turn_events,
    user_texts,
)

import agentlib
from agentlib import (
    Agent,
    AllowApproval,
    AlreadySettled,
    Answered,
    Blocked,
    CallbackClosed,
    CallbackOpened,
    ClientToolAnswerError,
    Completed,
    Credentials,
    DenyApproval,
    DenyToolCall,
    Depends,
    EntryCompleted,
    Failed,
    Interrupted,
    MessageEntry,
    ModelReply,
    ModelRequest,
    ModifiedArguments,
    NotFound,
    OpenApproval,
    OpenClientToolCall,
    OpenSignIn,
    RequestApproval,
    Running,
    ScriptedModel,
    SessionTerminatedError,
    SignInAnswer,
    ToolCallEntry,
    ToolResultEntry,
    ToolSource,
    TurnEnded,
    TurnStarted,
    UnsupportedSessionProcedureError,
)

# Each test runs on a local runtime and on agents served over HTTP (conftest's transport).
pytestmark = pytest.mark.usefixtures("transport")

#: A safety net for waits that a broken engine would never end (with the autojump clock, a
#: deadlock reaches it at once).
WAIT = 60

# --- helpers ------------------------------------------------------------------------------


def delegate(name: str, message: str) -> ModelReply:
    return reply(call(name, message=message))


def result_summary(result: ToolResultEntry) -> tuple[str | None, str, bool]:
    return (result.name, result.text, result.is_error)


def nested_approval_agents(runs: list[str], **root_options: Any) -> tuple[Agent, Agent, Agent]:
    """root -> mid -> leaf, where leaf calls ``delete`` (approval) and each one echoes."""
    leaf = Agent(
        "leaf",
        model=ScriptedModel([reply(call("delete", path="/tmp/x")), echo("leaf")]),
        tools=[deleter(runs)],
    )
    mid = Agent(
        "mid",
        model=ScriptedModel([delegate("leaf", "delete /tmp/x"), echo("mid")]),
        subagents=[leaf],
    )
    root = Agent(
        "root",
        model=ScriptedModel([delegate("mid", "get /tmp/x deleted"), echo("root")]),
        subagents=[mid],
        **root_options,
    )
    return root, mid, leaf


def nested_held_agents(gate: Gate, **root_options: Any) -> tuple[Agent, Agent, Agent]:
    """root -> mid -> leaf, where leaf holds at ``gate`` and each one echoes."""
    leaf = Agent("leaf", model=ScriptedModel([HOLD, echo("leaf")]), tools=[gate.tool])
    mid = Agent(
        "mid", model=ScriptedModel([delegate("leaf", "hold on"), echo("mid")]), subagents=[leaf]
    )
    root = Agent(
        "root",
        model=ScriptedModel([delegate("mid", "go down"), echo("root")]),
        subagents=[mid],
        **root_options,
    )
    return root, mid, leaf


async def first_turn(session: agentlib.Session) -> agentlib.Turn:
    """The session's first turn (a subagent session has exactly one), from its log."""
    async with aclosing(session.iter_events()) as events:
        async for event in events:
            assert isinstance(event, TurnStarted), event
            return session.turn(event.turn_id)
    raise AssertionError(f"session {session.id} has no event")


async def first_message(session: agentlib.Session) -> str:
    """The text of the message that started the session's first turn."""
    async with aclosing(session.iter_events()) as events:
        async for event in events:
            assert isinstance(event, TurnStarted), event
            return event.message.text
    raise AssertionError(f"session {session.id} has no event")


async def only_subagent(session: agentlib.Session) -> agentlib.Session:
    (child,) = await session.subagents()
    return child


def of_type(events: list[agentlib.Event], cls: type[Any]) -> list[Any]:
    return [event for event in events if isinstance(event, cls)]


async def state(turn: agentlib.Turn) -> agentlib.TurnState[Any]:
    """The turn's record once every task waits."""
    await trio.testing.wait_all_tasks_blocked()
    return await turn.get()


# --- 1. what the models see ---------------------------------------------------------------


@agentlib.tool
async def lookup(term: str) -> str:
    """Look a term up."""
    return f"about {term}"


async def test_the_parent_model_sees_each_subagent_as_a_tool_that_takes_a_message() -> None:
    researcher = Agent(
        "researcher", instructions="Finds facts.\nBe thorough.", model=ScriptedModel(["x"])
    )
    writer = Agent(
        "writer",
        instructions="You write.\nIn English.",
        description="Writes prose on request.",
        model=ScriptedModel(["x"]),
    )
    bare = Agent("bare", model=ScriptedModel(["x"]))
    recorder = Recorder("done")
    parent = Agent(
        "parent",
        model=ScriptedModel([recorder]),
        tools=[lookup],
        subagents=[researcher, writer, bare],
    )
    async with agentlib.open_runtime():
        session = await parent.start_session()
        record = await session.run("hi")
        assert await session.subagents() == []  # offering a subagent starts nothing
    assert isinstance(record, Completed)
    (request,) = recorder.requests
    tools = {schema.name: schema for schema in request.tools}
    assert sorted(tools) == ["bare", "lookup", "researcher", "writer"]
    assert len(request.tools) == 4
    assert tools["researcher"].description == "Finds facts."  # the first line of instructions
    assert tools["writer"].description == "Writes prose on request."
    assert isinstance(tools["bare"].description, str)
    assert tools["bare"].description.strip()
    for name in ("researcher", "writer", "bare"):
        parameters = tools[name].parameters
        assert parameters["type"] == "object"
        assert set(parameters["properties"]) == {"message"}
        assert parameters["properties"]["message"]["type"] == "string"
        assert parameters["required"] == ["message"]
        assert parameters["additionalProperties"] is False
    assert tools["lookup"].parameters["required"] == ["term"]  # the tools are unchanged


async def test_the_subagent_model_gets_only_the_message_and_its_own_tools() -> None:
    leaf_recorder = Recorder("Paris")
    leaf = Agent(
        "leaf",
        instructions="You are the leaf.",
        model=ScriptedModel([leaf_recorder]),
        tools=[lookup],
    )
    parent_recorder = Recorder("parent done")
    parent = Agent(
        "parent",
        instructions="You are the parent.",
        model=ScriptedModel(
            ["earlier answer", delegate("leaf", "Find the capital of France"), parent_recorder]
        ),
        subagents=[leaf],
    )
    async with agentlib.open_runtime():
        session = await parent.start_session()
        first = await session.run("my secret first message")
        assert isinstance(first, Completed)
        record = await session.run("now ask the leaf")
        child = await only_subagent(session)
    assert isinstance(record, Completed)
    assert record.text == "parent done"
    (leaf_request,) = leaf_recorder.requests
    assert [type(entry) for entry in leaf_request.entries] == [MessageEntry]
    assert user_texts(leaf_request) == ["Find the capital of France"]
    assert leaf_request.instructions == "You are the leaf."
    assert [schema.name for schema in leaf_request.tools] == ["lookup"]
    assert leaf_request.session_id == child.id != session.id
    assert all(
        "secret" not in entry.text and "earlier answer" not in entry.text
        for entry in leaf_request.entries
    )
    (parent_request,) = parent_recorder.requests
    (result,) = tool_results(parent_request)
    assert result_summary(result) == ("leaf", "Paris", False)
    (call_entry,) = [e for e in parent_request.entries if isinstance(e, ToolCallEntry)]
    assert (call_entry.name, call_entry.arguments) == (
        "leaf",
        {"message": "Find the capital of France"},
    )
    assert result.tool_call_id == call_entry.tool_call_id
    assert [tool_call.name for tool_call in record.tool_calls] == ["leaf"]


# --- 2. how the subagent's record becomes the tool result ----------------------------------


@attrs.frozen
class Verdict:
    label: str
    score: int


async def test_a_subagent_output_type_value_is_the_structured_result() -> None:
    judge = Agent(
        "judge", model=ScriptedModel(['{"label": "good", "score": 3}']), output_type=Verdict
    )
    recorder = Recorder("judged")
    parent = Agent(
        "parent", model=ScriptedModel([delegate("judge", "judge it"), recorder]), subagents=[judge]
    )
    async with agentlib.open_runtime():
        session = await parent.start_session()
        record = await session.run("go")
        child = await only_subagent(session)
        child_record = await (await first_turn(child)).get()
    assert isinstance(record, Completed)
    assert record.output == "judged"  # the parent has no output_type
    (result,) = tool_results(recorder.requests[0])
    assert result.is_error is False
    assert result.structured_content == {"label": "good", "score": 3}
    assert isinstance(child_record, Completed)
    assert child_record.output == Verdict(label="good", score=3)


async def test_a_failed_subagent_turn_is_an_error_result_and_the_parent_goes_on() -> None:
    @agentlib.tool
    async def explode() -> str:
        """Fail."""
        raise RuntimeError("disk on fire")

    failer = Agent(
        "failer",
        model=ScriptedModel([reply(call("explode")), "never"]),
        tools=[explode],
        tool_errors="raise",
    )
    recorder = Recorder("the parent goes on")
    parent = Agent(
        "parent", model=ScriptedModel([delegate("failer", "try it"), recorder]), subagents=[failer]
    )
    async with agentlib.open_runtime():
        session = await parent.start_session()
        record = await session.run("go")
        child_record = await (await first_turn(await only_subagent(session))).get()
    assert isinstance(record, Completed)
    assert record.text == "the parent goes on"
    (result,) = tool_results(recorder.requests[0])
    assert result_summary(result) == ("failer", "failer failed: RuntimeError: disk on fire", True)
    assert isinstance(child_record, Failed)
    assert (child_record.error.type, child_record.error.message) == (
        "RuntimeError",
        "disk on fire",
    )


async def test_a_subagent_answer_that_does_not_parse_is_an_error_result() -> None:
    judge = Agent("judge", model=ScriptedModel(["not json at all"]), output_type=Verdict)
    recorder = Recorder("noted")
    parent = Agent(
        "parent", model=ScriptedModel([delegate("judge", "judge it"), recorder]), subagents=[judge]
    )
    async with agentlib.open_runtime():
        session = await parent.start_session()
        record = await session.run("go")
    assert isinstance(record, Completed)
    (result,) = tool_results(recorder.requests[0])
    assert result.is_error is True
    assert result.text.startswith("judge failed: ValidationError: ")
    assert result.structured_content is None


@pytest.mark.parametrize(
    "arguments",
    [{}, {"message": 3}, {"message": None}, {"message": "task", "extra": 1}, {"task": "x"}],
    ids=["empty", "int", "none", "extra-key", "wrong-key"],
)
async def test_bad_delegation_arguments_are_an_error_result_and_start_nothing(
    arguments: dict[str, Any],
) -> None:
    helper_recorder = Recorder("never")
    helper = Agent("helper", model=ScriptedModel([helper_recorder]))
    recorder = Recorder("told")
    parent = Agent(
        "parent",
        model=ScriptedModel([reply(call("helper", **arguments)), recorder]),
        subagents=[helper],
    )
    async with agentlib.open_runtime():
        session = await parent.start_session()
        record = await session.run("go")
        children = await session.subagents()
    assert isinstance(record, Completed)
    assert record.text == "told"
    (result,) = tool_results(recorder.requests[0])
    assert result.name == "helper"
    assert result.is_error is True
    assert "message" in result.text
    assert children == []
    assert helper_recorder.requests == []


# --- 3. several delegations at once ---------------------------------------------------------


async def test_delegations_of_one_reply_run_concurrently_and_results_keep_call_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    alpha_started, beta_started, beta_finished = trio.Event(), trio.Event(), trio.Event()

    @agentlib.tool
    async def work_alpha() -> str:
        """Alpha's work."""
        alpha_started.set()
        await beta_started.wait()  # only returns if beta runs meanwhile
        return "alpha worked"

    @agentlib.tool
    async def work_beta() -> str:
        """Beta's work."""
        beta_started.set()
        await alpha_started.wait()
        return "beta worked"

    async def alpha_final(request: ModelRequest) -> str:
        await beta_finished.wait()  # alpha ends last
        return f"alpha: {request.entries[-1].text}"

    def beta_final(request: ModelRequest) -> str:
        beta_finished.set()
        return f"beta: {request.entries[-1].text}"

    alpha = Agent(
        "alpha", model=ScriptedModel([reply(call("work_alpha")), alpha_final]), tools=[work_alpha]
    )
    beta = Agent(
        "beta", model=ScriptedModel([reply(call("work_beta")), beta_final]), tools=[work_beta]
    )
    recorder = Recorder("both done")
    parent = Agent(
        "parent",
        model=ScriptedModel(
            [reply(call("alpha", message="do a"), call("beta", message="do b")), recorder]
        ),
        subagents=[alpha, beta],
    )
    async with agentlib.open_runtime():
        session = await parent.start_session()
        with trio.fail_after(WAIT):
            record = await session.run("go")
        children = await session.subagents()
    assert isinstance(record, Completed)
    assert record.text == "both done"
    assert [result_summary(r) for r in tool_results(recorder.requests[0])] == [
        ("alpha", "alpha: alpha worked", False),
        ("beta", "beta: beta worked", False),
    ]
    assert len(children) == 2


async def test_the_same_subagent_called_twice_in_one_reply_gets_two_sessions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    arrived: list[str] = []
    both = trio.Event()

    @agentlib.tool
    async def meet(who: str) -> str:
        """Wait for the other one."""
        arrived.append(who)
        if len(arrived) == 2:
            both.set()
        await both.wait()
        return f"met as {who}"

    def first_step(request: ModelRequest) -> ModelReply:
        return reply(call("meet", who=request.entries[-1].text))

    helper = Agent("helper", model=ScriptedModel([first_step, echo("helper")]), tools=[meet])
    recorder = Recorder("done")
    parent = Agent(
        "parent",
        model=ScriptedModel(
            [reply(call("helper", message="one"), call("helper", message="two")), recorder]
        ),
        subagents=[helper],
    )
    async with agentlib.open_runtime():
        session = await parent.start_session()
        with trio.fail_after(WAIT):
            record = await session.run("go")
        children = await session.subagents()
        messages = sorted([await first_message(child) for child in children])
    assert isinstance(record, Completed)
    assert [r.text for r in tool_results(recorder.requests[0])] == [
        "helper: met as one",
        "helper: met as two",
    ]
    assert len({child.id for child in children}) == 2
    assert messages == ["one", "two"]


async def test_two_subagents_waiting_on_approvals_are_both_listed_by_the_root() -> None:
    runs: list[str] = []
    first = Agent(
        "first",
        model=ScriptedModel([reply(call("delete", path="/a")), echo("first")]),
        tools=[deleter(runs)],
    )
    second = Agent(
        "second",
        model=ScriptedModel([reply(call("delete", path="/b")), echo("second")]),
        tools=[deleter(runs)],
    )
    recorder = Recorder("all deleted")
    parent = Agent(
        "parent",
        model=ScriptedModel(
            [reply(call("first", message="a"), call("second", message="b")), recorder]
        ),
        subagents=[first, second],
    )
    async with agentlib.open_runtime():
        session = await parent.start_session()
        turn = await session.send_message("go")
        blocked = await state(turn)
        assert isinstance(blocked, Blocked)
        children = {await first_message(child): child.id for child in await session.subagents()}
        by_path = {callback.arguments["path"]: callback for callback in blocked.callbacks}
        assert sorted(by_path) == ["/a", "/b"]
        assert by_path["/a"].session_id == children["a"]
        assert by_path["/b"].session_id == children["b"]
        assert await session.turn(blocked.turn_id).answer(by_path["/b"].id, AllowApproval()) == (
            Answered(answer=AllowApproval(), session_id=children["b"])
        )
        still = await state(turn)
        assert isinstance(still, Blocked)
        assert [callback.id for callback in still.callbacks] == [by_path["/a"].id]
        await turn.answer(by_path["/a"].id, DenyApproval(reason="no"))
        final = await turn.result(after=still)
    assert isinstance(final, Completed)
    assert runs == ["/b"]
    assert [result_summary(r) for r in tool_results(recorder.requests[0])] == [
        ("first", "first: the client denied this call: no", False),
        ("second", "second: deleted /b", False),
    ]


# --- 4. three levels, with an approval at the bottom -----------------------------------------


async def test_a_leaf_approval_blocks_every_turn_above_and_is_answered_through_the_root() -> None:
    runs: list[str] = []
    root, _, _ = nested_approval_agents(runs)
    async with agentlib.open_runtime():
        session = await root.start_session()
        record = await session.run("go")
        assert isinstance(record, Blocked)
        mid = await only_subagent(session)
        leaf = await only_subagent(mid)
        assert await leaf.subagents() == []
        mid_turn, leaf_turn = await first_turn(mid), await first_turn(leaf)

        (callback,) = record.callbacks
        assert isinstance(callback, OpenApproval)
        assert (callback.tool_name, callback.arguments) == ("delete", {"path": "/tmp/x"})
        assert (callback.session_id, callback.turn_id) == (leaf.id, leaf_turn.id)
        assert record.session_id == session.id
        mid_state, leaf_state = await mid_turn.get(), await leaf_turn.get()
        assert isinstance(mid_state, Blocked)
        assert mid_state.callbacks == (callback,)
        assert isinstance(leaf_state, Blocked)
        assert leaf_state.callbacks == (callback,)
        assert runs == []

        turn = session.turn(record.turn_id)
        answered = await turn.answer(callback.id, AllowApproval())
        final = await turn.result(after=record)

        assert answered == Answered(answer=AllowApproval(), session_id=leaf.id)
        assert isinstance(final, Completed)
        assert final.text == "root: mid: leaf: deleted /tmp/x"
        assert runs == ["/tmp/x"]
        assert isinstance(await mid_turn.get(), Completed)
        assert isinstance(await leaf_turn.get(), Completed)

        # Closed: the root no longer finds it; the subagent's own session knows it settled.
        assert await turn.answer(callback.id, AllowApproval()) == NotFound()
        assert await leaf_turn.answer(callback.id, AllowApproval()) == AlreadySettled(
            session_id=leaf.id
        )
        assert (
            await root.session(session.id).turn(turn.id).answer(callback.id, DenyApproval())
            == NotFound()
        )

        logs = {
            "root": (turn, await turn_events(turn)),
            "mid": (mid_turn, await turn_events(mid_turn)),
            "leaf": (leaf_turn, await turn_events(leaf_turn)),
        }
    for where, (owner, events) in logs.items():
        (opened,) = of_type(events, CallbackOpened)
        (closed,) = of_type(events, CallbackClosed)
        assert opened.callback == callback, where
        assert (opened.session_id, opened.turn_id) == (owner.session_id, owner.id), where
        assert (closed.callback_id, closed.answer, closed.answered) == (
            callback.id,
            AllowApproval(),
            True,
        ), where
        assert (closed.session_id, closed.turn_id) == (owner.session_id, owner.id), where
        assert events.index(opened) < events.index(closed) < len(events) - 1, where
    # The leaf resumed before the root: its result reached the root's log after the close.
    root_events = logs["root"][1]
    (root_closed,) = of_type(root_events, CallbackClosed)
    (mid_result,) = [
        e
        for e in of_type(root_events, EntryCompleted)
        if isinstance(e.entry, ToolResultEntry) and e.entry.name == "mid"
    ]
    assert root_events.index(root_closed) < root_events.index(mid_result)


@pytest.mark.parametrize("through", ["agent.session", "subagents()", "mid"])
async def test_a_leaf_approval_answered_through_a_lower_reference_resumes_leaf_then_root(
    through: str,
) -> None:
    runs: list[str] = []
    root, _, leaf_agent = nested_approval_agents(runs)
    async with agentlib.open_runtime():
        session = await root.start_session()
        record = await session.run("go")
        assert isinstance(record, Blocked)
        (callback,) = record.callbacks
        mid = await only_subagent(session)
        if through == "agent.session":
            answering = leaf_agent.session(callback.session_id).turn(callback.turn_id)
        elif through == "subagents()":
            answering = await first_turn(await only_subagent(mid))
        else:
            answering = await first_turn(mid)
        answered = await answering.answer(callback.id, AllowApproval())
        leaf_turn = await first_turn(await only_subagent(mid))
        leaf_record = await leaf_turn.result()
        final = await session.turn(record.turn_id).result(after=record)
        again = await answering.answer(callback.id, AllowApproval())
        from_root = await session.turn(record.turn_id).answer(callback.id, AllowApproval())
    assert answered == Answered(answer=AllowApproval(), session_id=callback.session_id)
    assert isinstance(leaf_record, Completed)
    assert leaf_record.text == "leaf: deleted /tmp/x"
    assert isinstance(final, Completed)
    assert final.text == "root: mid: leaf: deleted /tmp/x"
    assert runs == ["/tmp/x"]
    assert from_root == NotFound()
    if through == "mid":
        assert again == NotFound()
    else:
        assert again == AlreadySettled(session_id=callback.session_id)


async def test_concurrent_answers_through_root_and_leaf_agree_on_the_one_taken() -> None:
    runs: list[str] = []
    root, _, leaf_agent = nested_approval_agents(runs)
    results: dict[str, Any] = {}
    async with agentlib.open_runtime():
        session = await root.start_session()
        record = await session.run("go")
        assert isinstance(record, Blocked)
        (callback,) = record.callbacks
        root_turn = session.turn(record.turn_id)
        leaf_turn = leaf_agent.session(callback.session_id).turn(callback.turn_id)

        async def answer(name: str, turn: agentlib.Turn, value: Any) -> None:
            results[name] = await turn.answer(callback.id, value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer, "root", root_turn, AllowApproval())
            nursery.start_soon(answer, "leaf", leaf_turn, DenyApproval(reason="no"))
        final = await root_turn.result(after=record)
    assert isinstance(results["root"], Answered)
    assert isinstance(results["leaf"], Answered)
    assert results["root"] == results["leaf"]
    assert results["root"].session_id == callback.session_id
    assert results["root"].answer in (AllowApproval(), DenyApproval(reason="no"))
    assert isinstance(final, Completed)
    assert runs == (["/tmp/x"] if results["root"].answer == AllowApproval() else [])


def client_leaf_root() -> Agent:
    leaf = Agent(
        "leaf",
        model=ScriptedModel([reply(call("client.pick", prompt="a number?")), echo("leaf")]),
        tools=[pick],
    )
    return Agent(
        "root", model=ScriptedModel([delegate("leaf", "pick one"), echo("root")]), subagents=[leaf]
    )


async def test_a_leaf_client_tool_call_is_answered_through_the_root_and_checked() -> None:
    root = client_leaf_root()
    async with agentlib.open_runtime():
        session = await root.start_session()
        record = await session.run("go")
        assert isinstance(record, Blocked)
        (callback,) = record.callbacks
        leaf = await only_subagent(session)
        assert isinstance(callback, OpenClientToolCall)
        assert (callback.tool_name, callback.session_id) == ("client.pick", leaf.id)
        turn = session.turn(record.turn_id)
        with pytest.raises(ClientToolAnswerError):
            await turn.answer(callback.id, "not a number")
        still = await turn.get()
        assert isinstance(still, Blocked)
        assert still.callbacks == (callback,)
        answered = await turn.answer(callback.id, 7)
        final = await turn.result(after=record)
    assert answered == Answered(answer=None, session_id=leaf.id)
    assert isinstance(final, Completed)
    assert final.text == "root: leaf: 7"


async def test_the_root_on_client_tool_answers_a_leaf_client_tool_call() -> None:
    seen: list[OpenClientToolCall] = []

    def on_client_tool(callback: OpenClientToolCall) -> int:
        seen.append(callback)
        return 42

    async with agentlib.open_runtime():
        session = await client_leaf_root().start_session(on_client_tool=on_client_tool)
        record = await session.run("go")
        leaf = await only_subagent(session)
    assert isinstance(record, Completed)
    assert record.text == "root: leaf: 42"
    assert [(callback.tool_name, callback.session_id) for callback in seen] == [
        ("client.pick", leaf.id)
    ]


async def test_a_leaf_sign_in_is_answered_through_the_root_and_the_secret_stays_hidden() -> None:
    secret = "s3cr3t-subagent-token-0xFEED"
    seen: list[Credentials] = []

    async def search(query: str, creds: Annotated[Credentials, Depends()]) -> str:
        """Search the workspace."""
        seen.append(creds)
        return f"found {query}"

    leaf = Agent(
        "leaf",
        model=ScriptedModel([reply(call("notion.search", query="plans")), echo("leaf")]),
        tools=[ToolSource(name="notion", tools=[search], requires_sign_in=True)],
    )
    root = Agent(
        "root", model=ScriptedModel([delegate("leaf", "search"), echo("root")]), subagents=[leaf]
    )
    async with agentlib.open_runtime():
        session = await root.start_session()
        record = await session.run("go")
        assert isinstance(record, Blocked)
        (callback,) = record.callbacks
        assert isinstance(callback, OpenSignIn)
        assert callback.sources == ("notion",)
        turn = session.turn(record.turn_id)
        answered = await turn.answer(callback.id, SignInAnswer(credentials={"notion": secret}))
        final = await turn.result(after=record)
        leaf_ref = await only_subagent(session)
        events = await turn_events(turn) + await turn_events(await first_turn(leaf_ref))
    assert answered == Answered(answer=None, session_id=leaf_ref.id)
    assert isinstance(final, Completed)
    assert final.text == "root: leaf: found plans"
    assert [(creds.source, creds.value) for creds in seen] == [("notion", secret)]
    assert secret not in repr(events)
    assert secret not in repr(final)


async def test_allowing_a_leaf_approval_for_the_session_through_the_root() -> None:
    runs: list[str] = []
    leaf = Agent(
        "leaf",
        model=ScriptedModel(
            [reply(call("delete", path="/a")), reply(call("delete", path="/b")), echo("leaf")]
        ),
        tools=[deleter(runs)],
    )
    root = Agent(
        "root", model=ScriptedModel([delegate("leaf", "clean"), echo("root")]), subagents=[leaf]
    )
    async with agentlib.open_runtime():
        session = await root.start_session()
        record = await session.run("go")
        assert isinstance(record, Blocked)
        turn = session.turn(record.turn_id)
        answered = await turn.answer(record.callbacks[0].id, AllowApproval(scope="session"))
        final = await turn.result(after=record)
    assert answered == Answered(
        answer=AllowApproval(scope="session"), session_id=record.callbacks[0].session_id
    )
    assert isinstance(final, Completed)  # the second delete needed no approval
    assert final.text == "root: leaf: deleted /b"
    assert runs == ["/a", "/b"]


# --- 5. the root's handlers ------------------------------------------------------------------


async def test_the_root_on_approval_answers_a_leaf_approval_during_run() -> None:
    runs: list[str] = []
    seen: list[OpenApproval] = []

    def on_approval(callback: OpenApproval) -> AllowApproval:
        seen.append(callback)
        return AllowApproval()

    root, _, _ = nested_approval_agents(runs)
    async with agentlib.open_runtime():
        session = await root.start_session(on_approval=on_approval)
        record = await session.run("go")
        leaf = await only_subagent(await only_subagent(session))
        events = await turn_events(session.turn(record.turn_id))
    assert isinstance(record, Completed)
    assert record.text == "root: mid: leaf: deleted /tmp/x"
    assert runs == ["/tmp/x"]
    (callback,) = seen
    assert (callback.tool_name, callback.session_id) == ("delete", leaf.id)
    (closed,) = of_type(events, CallbackClosed)
    assert (closed.callback_id, closed.answer, closed.answered) == (
        callback.id,
        AllowApproval(),
        True,
    )


async def test_references_from_subagents_carry_the_parent_handlers() -> None:
    runs: list[str] = []
    seen: list[OpenApproval] = []

    async def on_approval(callback: OpenApproval) -> AllowApproval:
        seen.append(callback)
        return AllowApproval()

    root, mid_agent, _ = nested_approval_agents(runs)
    async with agentlib.open_runtime():
        session = await root.start_session(on_approval=on_approval)
        turn = await session.send_message("go")  # no wait: no handler runs yet
        blocked = await state(turn)
        assert isinstance(blocked, Blocked)
        assert seen == []
        mid = await only_subagent(session)
        mid_turn = await first_turn(mid)
        # A reference without handlers only reads the callback...
        bare = await mid_agent.session(mid.id).turn(mid_turn.id).result()
        assert isinstance(bare, Blocked)
        assert seen == []
        # ... the one from subagents() answers it with the root's on_approval.
        with trio.fail_after(WAIT):
            mid_record = await mid_turn.result()
            final = await turn.result(after=blocked)
    assert isinstance(mid_record, Completed)
    assert mid_record.text == "mid: leaf: deleted /tmp/x"
    assert [callback.id for callback in seen] == [blocked.callbacks[0].id]
    assert isinstance(final, Completed)
    assert runs == ["/tmp/x"]


async def test_a_root_wait_and_a_subagent_wait_run_the_handler_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runs: list[str] = []
    calls: list[str] = []
    release = trio.Event()

    async def on_approval(callback: OpenApproval) -> AllowApproval:
        calls.append(callback.id)
        await release.wait()
        return AllowApproval()

    root, _, _ = nested_approval_agents(runs)
    records: dict[str, Any] = {}
    async with agentlib.open_runtime():
        session = await root.start_session(on_approval=on_approval)
        turn = await session.send_message("go")
        await trio.testing.wait_all_tasks_blocked()
        mid_turn = await first_turn(await only_subagent(session))

        async def wait(name: str, waited: agentlib.Turn) -> None:
            records[name] = await waited.result()

        with trio.fail_after(WAIT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait, "root", turn)
                nursery.start_soon(wait, "mid", mid_turn)
                await trio.testing.wait_all_tasks_blocked()
                assert len(calls) == 1
                release.set()
    assert len(calls) == 1
    assert isinstance(records["root"], Completed)
    assert isinstance(records["mid"], Completed)
    assert runs == ["/tmp/x"]


async def test_a_root_handler_that_raises_leaves_the_leaf_approval_open() -> None:
    runs: list[str] = []

    def on_approval(callback: OpenApproval) -> AllowApproval:
        raise RuntimeError("the approver is away")

    root, _, _ = nested_approval_agents(runs)
    async with agentlib.open_runtime():
        session = await root.start_session(on_approval=on_approval)
        with pytest.raises(RuntimeError, match="the approver is away"):
            await session.run("go")
        (child,) = await session.subagents()
        leaf = await only_subagent(child)
        bare = root.session(session.id)  # no handler: it reads the open approval
        turn_id = (await first_turn(session)).id
        blocked = await bare.turn(turn_id).result()
        assert isinstance(blocked, Blocked)
        (callback,) = blocked.callbacks
        assert callback.session_id == leaf.id
        answered = await bare.turn(turn_id).answer(callback.id, AllowApproval())
        final = await bare.turn(turn_id).result(after=blocked)
    assert answered == Answered(answer=AllowApproval(), session_id=leaf.id)
    assert isinstance(final, Completed)
    assert runs == ["/tmp/x"]


# --- 6. session.subagents() ------------------------------------------------------------------


async def test_subagents_lists_direct_subagent_sessions_newest_first() -> None:
    helper = Agent("helper", model=ScriptedModel([echo("helper")]))
    inner = Agent("inner", model=ScriptedModel(["inner done"]))
    outer = Agent(
        "outer",
        model=ScriptedModel([delegate("inner", "go in"), echo("outer")]),
        subagents=[inner],
    )
    parent = Agent(
        "parent",
        model=ScriptedModel(
            [
                delegate("helper", "first task"),
                delegate("helper", "second task"),
                delegate("outer", "third task"),
                "all done",
            ]
        ),
        subagents=[helper, outer],
    )
    async with agentlib.open_runtime():
        session = await parent.start_session()
        assert await session.subagents() == []
        record = await session.run("go")
        children = await session.subagents()
        messages = [await first_message(child) for child in children]
        grandchildren = await children[0].subagents()
        second_turn = await first_turn(children[1])
        second_record = await second_turn.get()
        second_events = await turn_events(second_turn)
        from_id = helper.session(children[1].id)
    assert isinstance(record, Completed)
    assert messages == ["third task", "second task", "first task"]
    assert len(grandchildren) == 1
    assert grandchildren[0].id not in {child.id for child in children}
    assert all(isinstance(child, agentlib.Session) for child in children)
    assert from_id == children[1]
    assert isinstance(second_record, Completed)
    assert (second_record.session_id, second_record.text) == (children[1].id, "helper: second task")
    assert isinstance(second_events[0], TurnStarted)
    entries = [e.entry for e in of_type(second_events, EntryCompleted)]
    assert [(type(e).__name__, e.text) for e in entries] == [
        ("MessageEntry", "second task"),
        ("MessageEntry", "helper: second task"),
    ]
    (ended,) = of_type(second_events, TurnEnded)
    assert ended is second_events[-1]
    assert isinstance(ended.record, Completed)
    assert ended.record.text == "helper: second task"
    assert all(event.session_id == children[1].id for event in second_events)


# --- 7. subagent references only read, and interrupt ------------------------------------------


async def test_subagent_references_refuse_every_procedure_that_writes() -> None:
    gate = Gate()
    helper_recorder = Recorder("helper done")
    helper = Agent("helper", model=ScriptedModel([HOLD, helper_recorder]), tools=[gate.tool])
    parent = Agent(
        "parent",
        model=ScriptedModel([delegate("helper", "task"), echo("parent")]),
        subagents=[helper],
    )
    async with agentlib.open_runtime():
        session = await parent.start_session()
        turn = await session.send_message("go")
        await gate.reached.wait()
        child = await only_subagent(session)
        child_turn = await first_turn(child)
        for reference in (child, helper.session(child.id), parent.session(child.id)):
            with pytest.raises(UnsupportedSessionProcedureError):
                await reference.send_message("another task")
            with pytest.raises(UnsupportedSessionProcedureError):
                await reference.start_turn("another task")
            with pytest.raises(UnsupportedSessionProcedureError):
                await reference.run("another task")
            with pytest.raises(UnsupportedSessionProcedureError):
                await reference.cancel()
            with pytest.raises(UnsupportedSessionProcedureError):
                await reference.turn(child_turn.id).steer("steer it")
        # Nothing changed: the subagent's turn still runs, alone, on its one message.
        assert isinstance(await child_turn.get(), Running)
        assert isinstance(await turn.get(), Running)
        gate.opened.set()
        final = await turn.result()
        child_record = await child_turn.get()
        with pytest.raises(UnsupportedSessionProcedureError):
            await child.send_message("after the end")
        with pytest.raises(UnsupportedSessionProcedureError):
            await child.start_turn("after the end")
        child_events = [event async for event in child_turn.iter_events()]
        assert await session.subagents() == [child]
    assert isinstance(final, Completed)
    assert final.text == "parent: helper done"
    assert isinstance(child_record, Completed)
    (request,) = helper_recorder.requests
    assert user_texts(request) == ["task"]
    assert len(of_type(child_events, TurnStarted)) == 1


async def test_interrupting_a_subagent_turn_gives_the_parent_an_error_result() -> None:
    gate = Gate()
    helper = Agent("helper", model=ScriptedModel([HOLD, "never"]), tools=[gate.tool])
    recorder = Recorder("the parent goes on")
    parent = Agent(
        "parent", model=ScriptedModel([delegate("helper", "task"), recorder]), subagents=[helper]
    )
    async with agentlib.open_runtime():
        session = await parent.start_session()
        turn = await session.send_message("go")
        await gate.reached.wait()
        child_turn = await first_turn(await only_subagent(session))
        stopped = await child_turn.interrupt()
        child_record = await child_turn.get()
        final = await turn.result()
    assert stopped == child_turn
    assert isinstance(child_record, Interrupted)
    assert child_record.cause == "interrupted"
    assert isinstance(final, Completed)
    assert final.text == "the parent goes on"
    (result,) = tool_results(recorder.requests[0])
    assert result_summary(result) == ("helper", "the turn of helper was interrupted", True)


async def test_interrupting_a_leaf_blocked_on_an_approval_closes_it_everywhere() -> None:
    runs: list[str] = []
    root, _, _ = nested_approval_agents(runs)
    async with agentlib.open_runtime():
        session = await root.start_session()
        record = await session.run("go")
        assert isinstance(record, Blocked)
        (callback,) = record.callbacks
        mid = await only_subagent(session)
        leaf_turn = await first_turn(await only_subagent(mid))
        await leaf_turn.interrupt()
        final = await session.turn(record.turn_id).result(after=record)
        root_events = await turn_events(session.turn(record.turn_id))
        answered = await session.turn(record.turn_id).answer(callback.id, AllowApproval())
    assert isinstance(final, Completed)
    assert final.text == "root: mid: the turn of leaf was interrupted"
    assert runs == []
    (closed,) = of_type(root_events, CallbackClosed)
    assert (closed.callback_id, closed.answered) == (callback.id, False)
    assert answered == NotFound()


async def test_interrupting_a_middle_turn_interrupts_the_leaf_and_the_root_goes_on() -> None:
    gate = Gate()
    root, _, _ = nested_held_agents(gate)
    async with agentlib.open_runtime():
        session = await root.start_session()
        turn = await session.send_message("go")
        await gate.reached.wait()
        mid = await only_subagent(session)
        mid_turn = await first_turn(mid)
        leaf_turn = await first_turn(await only_subagent(mid))
        with trio.fail_after(WAIT):
            stopped = await mid_turn.interrupt()
        records = [await mid_turn.get(), await leaf_turn.get()]
        final = await turn.result()
    assert stopped == mid_turn
    for record in records:
        assert isinstance(record, Interrupted), record
        assert record.cause == "interrupted"
    assert isinstance(final, Completed)
    assert final.text == "root: the turn of mid was interrupted"


# --- 8. cancel and interrupt the root ----------------------------------------------------------


async def test_cancelling_the_root_cancels_every_subagent_below() -> None:
    gate = Gate()
    root, _, _ = nested_held_agents(gate)
    async with agentlib.open_runtime():
        session = await root.start_session()
        turn = await session.send_message("go")
        await gate.reached.wait()
        mid = await only_subagent(session)
        leaf = await only_subagent(mid)
        mid_turn, leaf_turn = await first_turn(mid), await first_turn(leaf)
        with trio.fail_after(WAIT):
            await session.cancel()
        records = [await t.get() for t in (turn, mid_turn, leaf_turn)]
        with pytest.raises(SessionTerminatedError):
            await session.send_message("again")
        with pytest.raises(SessionTerminatedError):
            await session.start_turn("again")
        with trio.fail_after(WAIT):
            await session.cancel()  # idempotent
            # The subagents' sessions ended too: their logs replay, then stop.
            leaf_events = [event async for event in leaf.iter_events()]
            mid_events = [event async for event in mid.iter_events()]
    for record in records:
        assert isinstance(record, Interrupted), record
        assert record.cause == "cancelled"
    assert not gate.opened.is_set()
    for events in (leaf_events, mid_events):
        assert isinstance(events[-1], TurnEnded)
        assert isinstance(events[-1].record, Interrupted)
        assert events[-1].record.cause == "cancelled"


async def test_cancelling_the_root_closes_a_leaf_callback_unanswered() -> None:
    runs: list[str] = []
    root, _, _ = nested_approval_agents(runs)
    async with agentlib.open_runtime():
        session = await root.start_session()
        record = await session.run("go")
        assert isinstance(record, Blocked)
        (callback,) = record.callbacks
        leaf_turn = await first_turn(await only_subagent(await only_subagent(session)))
        await session.cancel()
        leaf_record = await leaf_turn.get()
        root_record = await session.turn(record.turn_id).get()
        from_root = await session.turn(record.turn_id).answer(callback.id, AllowApproval())
        from_leaf = await leaf_turn.answer(callback.id, AllowApproval())
        root_events = await turn_events(session.turn(record.turn_id))
    assert isinstance(leaf_record, Interrupted)
    assert leaf_record.cause == "cancelled"
    assert isinstance(root_record, Interrupted)
    assert root_record.cause == "cancelled"
    assert from_root == NotFound()
    assert from_leaf == AlreadySettled(session_id=callback.session_id)
    assert runs == []
    (closed,) = of_type(root_events, CallbackClosed)
    assert (closed.callback_id, closed.answer, closed.answered) == (callback.id, None, False)


async def test_interrupting_the_root_turn_interrupts_its_subagents_and_the_root_goes_on() -> None:
    gate = Gate()
    leaf = Agent("leaf", model=ScriptedModel([HOLD, echo("leaf")]), tools=[gate.tool])
    mid = Agent(
        "mid", model=ScriptedModel([delegate("leaf", "hold on"), echo("mid")]), subagents=[leaf]
    )
    # Two running subagents (mid and leaf) fill the cap: the next turn can delegate again
    # only if the interrupted ones were counted out.
    root = Agent(
        "root",
        model=ScriptedModel(
            [delegate("mid", "first time"), delegate("mid", "second time"), echo("root")]
        ),
        subagents=[mid],
        max_running_subagents=2,
    )
    async with agentlib.open_runtime():
        session = await root.start_session()
        turn = await session.send_message("go")
        await gate.reached.wait()
        first_mid = await only_subagent(session)
        mid_turn = await first_turn(first_mid)
        leaf_turn = await first_turn(await only_subagent(first_mid))
        with trio.fail_after(WAIT):
            stopped = await turn.interrupt()
        records = [await t.get() for t in (turn, mid_turn, leaf_turn)]
        gate.opened.set()
        with trio.fail_after(WAIT):
            again = await session.run("again")
        children = await session.subagents()
    assert stopped == turn
    for record in records:
        assert isinstance(record, Interrupted), record
        assert record.cause == "interrupted"
    assert isinstance(again, Completed)
    assert again.text == "root: mid: leaf: opened"
    assert len(children) == 2
    assert children[1] == first_mid


# --- hooks see delegations as tool calls ---------------------------------------------------


def hooked_parent(hook: Any, recorder: Recorder, helper_recorder: Recorder) -> Agent:
    helper = Agent("helper", model=ScriptedModel([helper_recorder]))
    return Agent(
        "parent",
        model=ScriptedModel([delegate("helper", "original task"), recorder]),
        subagents=[helper],
        hooks=[hook],
    )


async def test_a_hook_that_denies_a_delegation_starts_no_subagent() -> None:
    @agentlib.pre_tool_call
    def refuse(entry: ToolCallEntry) -> DenyToolCall:
        return DenyToolCall(reason="no delegating today")

    recorder, helper_recorder = Recorder("told"), Recorder("never")
    async with agentlib.open_runtime():
        session = await hooked_parent(refuse, recorder, helper_recorder).start_session()
        record = await session.run("go")
        children = await session.subagents()
    assert isinstance(record, Completed)
    (result,) = tool_results(recorder.requests[0])
    assert result_summary(result) == ("helper", "this call was refused: no delegating today", True)
    assert children == []
    assert helper_recorder.requests == []


async def test_a_hook_that_rewrites_a_delegation_changes_the_subagent_message() -> None:
    @agentlib.pre_tool_call
    def rewrite(entry: ToolCallEntry) -> ModifiedArguments:
        return ModifiedArguments({"message": "rewritten task"})

    recorder, helper_recorder = Recorder("done"), Recorder("helped")
    async with agentlib.open_runtime():
        session = await hooked_parent(rewrite, recorder, helper_recorder).start_session()
        record = await session.run("go")
    assert isinstance(record, Completed)
    assert user_texts(helper_recorder.requests[0]) == ["rewritten task"]
    assert [c.arguments for c in record.tool_calls] == [{"message": "rewritten task"}]


@pytest.mark.parametrize("answer", [AllowApproval(), DenyApproval(reason="too costly")])
async def test_a_hook_that_requests_approval_holds_the_delegation_until_answered(
    answer: AllowApproval | DenyApproval,
) -> None:
    # SPEC 9: hooks run before every tool call, and RequestApproval opens an OpenApproval
    # (source="hook"); a delegation is a tool call like any other.
    @agentlib.pre_tool_call
    def ask(entry: ToolCallEntry) -> RequestApproval:
        return RequestApproval(reason="delegation costs money")

    recorder, helper_recorder = Recorder("done"), Recorder("helped")
    async with agentlib.open_runtime():
        session = await hooked_parent(ask, recorder, helper_recorder).start_session()
        record = await session.run("go")
        assert isinstance(record, Blocked), record
        assert await session.subagents() == []  # nothing runs before the approval
        (callback,) = record.callbacks
        assert isinstance(callback, OpenApproval)
        assert (callback.tool_name, callback.arguments) == ("helper", {"message": "original task"})
        assert (callback.source, callback.reason) == ("hook", "delegation costs money")
        assert callback.session_id == session.id
        turn = session.turn(record.turn_id)
        await turn.answer(callback.id, answer)
        final = await turn.result(after=record)
        children = await session.subagents()
    assert isinstance(final, Completed)
    (result,) = tool_results(recorder.requests[0])
    if isinstance(answer, AllowApproval):
        assert result_summary(result) == ("helper", "helped", False)
        assert len(children) == 1
    else:
        assert result_summary(result) == (
            "helper",
            "the client denied this call: too costly",
            True,
        )
        assert children == []
        assert helper_recorder.requests == []


# --- 9. the cap on running subagents, and the agent's checks --------------------------------


def holding_worker(entered: list[str], opened: trio.Event) -> Agent:
    """A subagent that holds (until ``opened``) in an async tool, then echoes."""

    @agentlib.tool
    async def hold(request_text: str) -> str:
        """Hold until the test opens."""
        entered.append(request_text)
        await opened.wait()
        return f"opened {request_text}"

    def first_step(request: ModelRequest) -> ModelReply:
        return reply(call("hold", request_text=request.entries[-1].text))

    return Agent("worker", model=ScriptedModel([first_step, echo("worker")]), tools=[hold])


async def test_a_delegation_beyond_max_running_subagents_is_refused_then_works_again() -> None:
    entered: list[str] = []
    opened = trio.Event()
    worker = holding_worker(entered, opened)
    requests: list[ModelRequest] = []

    def second_step(request: ModelRequest) -> ModelReply:
        requests.append(request)
        return delegate("worker", "four")

    recorder = Recorder("done")
    parent = Agent(
        "parent",
        model=ScriptedModel(
            [
                reply(*(call("worker", message=m) for m in ("one", "two", "three"))),
                second_step,
                recorder,
            ]
        ),
        subagents=[worker],
        max_running_subagents=2,
    )
    async with agentlib.open_runtime():
        session = await parent.start_session()
        turn = await session.send_message("go")
        await trio.testing.wait_all_tasks_blocked()
        held = await session.subagents()
        assert len(held) == 2
        assert len(entered) == 2
        assert isinstance(await turn.get(), Running)
        opened.set()
        final = await turn.result()
        children = await session.subagents()
        messages = [await first_message(child) for child in children]
    assert isinstance(final, Completed)
    results = tool_results(requests[0])
    refused = [r for r in results if r.is_error]
    assert len(results) == 3
    assert len(refused) == 1
    assert refused[0].name == "worker"
    assert "SessionBusyError" in refused[0].text
    accepted = sorted(r.text for r in results if not r.is_error)
    refused_message = ({"one", "two", "three"} - {t.split()[-1] for t in accepted}).pop()
    assert len(accepted) == 2
    assert all(text.startswith("worker: opened ") for text in accepted)
    # The refused delegation created no session; the later one did.
    assert len(children) == 3
    assert messages[0] == "four"
    assert refused_message not in messages
    (later,) = tool_results(recorder.requests[0])[3:]
    assert result_summary(later) == ("worker", "worker: opened four", False)


async def test_the_cap_counts_subagents_at_any_depth_against_the_root() -> None:
    entered: list[str] = []
    opened = trio.Event()
    worker = holding_worker(entered, opened)
    mid_requests: list[ModelRequest] = []

    def mid_final(request: ModelRequest) -> str:
        mid_requests.append(request)
        return "mid done"

    mid = Agent(
        "mid",
        model=ScriptedModel(
            [reply(call("worker", message="a"), call("worker", message="b")), mid_final]
        ),
        subagents=[worker],
        max_running_subagents=8,  # only the root's cap counts
    )
    root = Agent(
        "root",
        model=ScriptedModel([delegate("mid", "split it"), "root done"]),
        subagents=[mid],
        max_running_subagents=2,
    )
    async with agentlib.open_runtime():
        session = await root.start_session()
        turn = await session.send_message("go")
        await trio.testing.wait_all_tasks_blocked()
        mid_ref = await only_subagent(session)
        assert len(await mid_ref.subagents()) == 1  # mid itself is one of the two
        assert len(entered) == 1
        opened.set()
        final = await turn.result()
    assert isinstance(final, Completed)
    results = tool_results(mid_requests[0])
    assert sorted(r.is_error for r in results) == [False, True]
    (refused,) = [r for r in results if r.is_error]
    assert "SessionBusyError" in refused.text


async def test_the_default_cap_lets_eight_subagents_run_at_once() -> None:
    entered: list[str] = []
    opened = trio.Event()
    worker = holding_worker(entered, opened)
    recorder = Recorder("done")
    parent = Agent(
        "parent",
        model=ScriptedModel(
            [reply(*(call("worker", message=f"m{i}") for i in range(9))), recorder]
        ),
        subagents=[worker],
    )
    async with agentlib.open_runtime():
        session = await parent.start_session()
        turn = await session.send_message("go")
        await trio.testing.wait_all_tasks_blocked()
        assert len(entered) == 8
        assert len(await session.subagents()) == 8
        opened.set()
        final = await turn.result()
    assert isinstance(final, Completed)
    assert sorted(r.is_error for r in tool_results(recorder.requests[0])) == [False] * 8 + [True]


@pytest.mark.parametrize("value", [0, -1, True, False, "2", 2.0, None])
def test_max_running_subagents_must_be_a_positive_int(value: Any) -> None:
    with pytest.raises(ValueError, match="max_running_subagents"):
        Agent("parent", model=ScriptedModel(["x"]), max_running_subagents=value)


def test_a_tool_and_a_subagent_with_the_same_name_are_refused() -> None:
    helper = Agent("lookup", model=ScriptedModel(["x"]))
    with pytest.raises(ValueError, match="lookup"):
        Agent("parent", model=ScriptedModel(["x"]), tools=[lookup], subagents=[helper])


def test_two_subagents_with_the_same_name_are_refused() -> None:
    first = Agent("helper", model=ScriptedModel(["x"]))
    second = Agent("helper", instructions="Another one.", model=ScriptedModel(["y"]))
    with pytest.raises(ValueError, match="helper"):
        Agent("parent", model=ScriptedModel(["x"]), subagents=[first, second])


@pytest.mark.parametrize("name", ["my-agent", "my agent", "1st", "notion.search"])
def test_a_subagent_name_that_is_not_an_identifier_is_refused(name: str) -> None:
    helper = Agent(name, model=ScriptedModel(["x"]))
    with pytest.raises(ValueError, match=re.escape(repr(name))):
        Agent("parent", model=ScriptedModel(["x"]), subagents=[helper])


@pytest.mark.parametrize("item", [object(), "helper", lookup], ids=["object", "str", "tool"])
def test_a_subagent_that_is_not_an_agent_is_refused(item: Any) -> None:
    with pytest.raises(TypeError):
        Agent("parent", model=ScriptedModel(["x"]), subagents=[item])


# --- 10. session inputs --------------------------------------------------------------------


async def test_a_subagent_inherits_the_root_session_inputs() -> None:
    seen: list[Repo] = []

    @agentlib.tool
    async def which_repo(repo: Annotated[Repo, Depends()]) -> str:
        """Name the repository."""
        seen.append(repo)
        return repo.name

    leaf_requests: list[ModelRequest] = []

    def leaf_first(request: ModelRequest) -> ModelReply:
        leaf_requests.append(request)
        return reply(call("which_repo"))

    leaf = Agent("leaf", model=ScriptedModel([leaf_first, echo("leaf")]), tools=[which_repo])
    mid = Agent(
        "mid", model=ScriptedModel([delegate("leaf", "which?"), echo("mid")]), subagents=[leaf]
    )
    root = Agent(
        "root", model=ScriptedModel([delegate("mid", "ask"), echo("root")]), subagents=[mid]
    )
    async with agentlib.open_runtime():
        session = await root.start_session(inputs=[Repo(name="agentlib")])
        record = await session.run("go")
    assert isinstance(record, Completed)
    assert record.text == "root: mid: leaf: agentlib"
    assert seen == [Repo(name="agentlib")]
    (schema,) = leaf_requests[0].tools
    assert "repo" not in schema.parameters.get("properties", {})
