"""The same behaviour on both transports: each test runs against a local runtime and against
an agent served on 127.0.0.1 (``agentlib.serve``) and reached with ``Agent.load_from``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Annotated, Any, Protocol

import attrs
import pytest
from _support import (
    Gate,
    approval_agent,
    deleter,
    echo,
    events_through,
    held_agent,
    held_turn,
    pick,
    turn_events,
)

import agentlib
from agentlib import Agent, ModelReply, ScriptedModel, ToolCallRequest


class Starts(Protocol):
    """Starts a session of ``agent`` on the transport under test."""

    def __call__(self, agent: Agent, **options: Any) -> Awaitable[agentlib.Session]: ...


@pytest.fixture(params=["local", "remote"])
async def start(request: pytest.FixtureRequest) -> AsyncIterator[Starts]:
    if request.param == "local":
        async with agentlib.open_runtime():

            async def start_local(agent: Agent, **options: Any) -> agentlib.Session:
                return await agent.start_session(**options)

            yield start_local
        return
    async with agentlib.serve(port=0) as server:

        async def start_remote(agent: Agent, **options: Any) -> agentlib.Session:
            server.deploy(agent)
            remote = agentlib.Agent.load_from(server.url, agent.name)
            return await remote.start_session(**options)

        yield start_remote


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def calculator() -> Agent:
    call = ToolCallRequest(name="add", arguments={"a": 1, "b": 2})
    return Agent("calc", "", ScriptedModel([ModelReply(tool_calls=[call]), "3"] * 20), [add])


async def test_a_turn_calls_its_tool_and_completes(start: Starts) -> None:
    session = await start(calculator())
    record = await session.run("1+2?")
    assert isinstance(record, agentlib.Completed)
    assert record.output == "3"
    assert [call.name for call in record.tool_calls] == ["add"]
    assert await session.turn(record.turn_id).get() == record


async def test_the_events_of_a_turn_replay_from_any_cursor(start: Starts) -> None:
    session = await start(calculator())
    record = await session.run("1+2?")
    assert record.cursor is not None
    events = await events_through(session, record.cursor)
    assert isinstance(events[0], agentlib.TurnStarted)
    last = events[-1]
    assert isinstance(last, agentlib.TurnEnded)
    assert last.record == record
    for index, event in enumerate(events):
        assert await turn_events(session.turn(record.turn_id), event.id) == events[index + 1 :]


async def test_an_idempotency_key_returns_the_turn_it_started(start: Starts) -> None:
    session = await start(calculator())
    first = await session.start_turn("1+2?", idempotency_key="k")
    again = await session.start_turn("1+2?", idempotency_key="k")
    assert isinstance(first, agentlib.Turn)
    assert isinstance(again, agentlib.Turn)
    assert again.id == first.id
    with pytest.raises(agentlib.SessionIdempotencyConflictError):
        await session.start_turn("2+2?", idempotency_key="k")


async def test_a_handler_answers_an_approval_while_run_waits(start: Starts) -> None:
    runs: list[str] = []
    session = await start(approval_agent(runs), on_approval=lambda _: agentlib.AllowApproval())
    record = await session.run("clean up")
    assert isinstance(record, agentlib.Completed)
    assert record.output == "done: deleted /tmp/x"
    assert runs == ["/tmp/x"]


async def test_a_blocked_turn_takes_the_first_answer_only(start: Starts) -> None:
    runs: list[str] = []
    session = await start(approval_agent(runs))
    record = await session.run("clean up")
    assert isinstance(record, agentlib.Blocked)
    turn = session.turn(record.turn_id)
    callback = record.callbacks[0].id
    answered = await turn.answer(callback, agentlib.AllowApproval())
    assert isinstance(answered, agentlib.Answered)
    assert isinstance(await turn.answer(callback, agentlib.DenyApproval()), agentlib.AlreadySettled)
    done = await turn.result()
    assert isinstance(done, agentlib.Completed)
    assert runs == ["/tmp/x"]


async def test_a_busy_session_names_its_turn_and_steering_reaches_it(start: Starts) -> None:
    gate = Gate()
    seen: list[list[str]] = []

    def answer(request: agentlib.ModelRequest) -> str:
        seen.append([e.text for e in request.entries if isinstance(e, agentlib.MessageEntry)])
        return "ok"

    session = await start(held_agent(gate, answer))
    turn = await held_turn(session, gate)
    busy = await session.start_turn("another")
    assert isinstance(busy, agentlib.Busy)
    assert busy.turn.id == turn.id
    assert await turn.steer("and this") == turn
    gate.opened.set()
    record = await turn.result()
    assert isinstance(record, agentlib.Completed)
    assert "and this" in seen[-1]


async def test_an_interrupted_turn_ends_interrupted(start: Starts) -> None:
    gate = Gate()
    session = await start(held_agent(gate, "never"))
    turn = await held_turn(session, gate)
    assert await turn.interrupt() == turn
    record = await turn.get()
    assert isinstance(record, agentlib.Interrupted)
    assert record.cause == "interrupted"
    assert await turn.interrupt() == agentlib.TurnConflict(turn_id=turn.id)


async def test_a_cancelled_session_refuses_turns(start: Starts) -> None:
    session = await start(calculator())
    await session.cancel()
    with pytest.raises(agentlib.SessionTerminatedError):
        await session.run("1+2?")


async def test_reading_what_does_not_exist_raises_the_same_errors(start: Starts) -> None:
    session = await start(calculator())
    with pytest.raises(agentlib.TurnNotFoundError):
        await session.turn("0123456789abcdef0123456789abcdef").get()
    record = await session.run("1+2?")
    with pytest.raises(agentlib.InvalidCursorError):
        await turn_events(session.turn(record.turn_id), "not a cursor")


@attrs.frozen
class Sum:
    total: int


async def test_a_structured_output_reads_as_its_type(start: Starts) -> None:
    agent = Agent("summer", "", ScriptedModel(['{"total": 3}']), output_type=Sum)
    session = await start(agent)
    record = await session.run("1+2?", output_type=Sum)
    assert isinstance(record, agentlib.Completed)
    assert record.output == Sum(total=3)


async def test_on_event_sees_each_event_of_the_turn_once_in_order(start: Starts) -> None:
    session = await start(calculator())
    seen: list[agentlib.Event] = []
    record = await session.run("1+2?", on_event=seen.append)
    assert isinstance(seen[-1], agentlib.TurnEnded)
    assert seen[-1].record == record
    assert seen == await turn_events(session.turn(record.turn_id))


async def test_a_history_given_at_the_start_is_what_the_model_sees_first(start: Starts) -> None:
    heard: list[str] = []

    def listen(request: agentlib.ModelRequest) -> str:
        heard.extend(e.text for e in request.entries if isinstance(e, agentlib.MessageEntry))
        return "ok"

    agent = Agent("listener", model=agentlib.FunctionModel(listen))
    history = [
        {"type": "message", "role": "user", "content": [{"type": "text", "text": "earlier"}]}
    ]
    session = await start(agent, history=history)
    await session.run("now")
    assert heard[:2] == ["earlier", "now"]


def picker(seen: list[str]) -> Agent:
    def answer(request: agentlib.ModelRequest) -> str:
        last = request.entries[-1]
        seen.append(last.text if isinstance(last, agentlib.ToolResultEntry) else "")
        return "ok"

    call = ModelReply(tool_calls=[ToolCallRequest(name="client.pick", arguments={"prompt": "n"})])
    return Agent("picker", model=ScriptedModel([call, answer]), tools=[pick])


async def test_a_client_tool_runs_in_the_handler_of_the_reference(start: Starts) -> None:
    seen: list[str] = []
    asked: list[dict[str, Any]] = []

    def run_pick(call: agentlib.OpenClientToolCall) -> int:
        asked.append(dict(call.arguments))
        return 7

    session = await start(picker(seen), on_client_tool=run_pick)
    record = await session.run("pick one")
    assert isinstance(record, agentlib.Completed)
    assert asked == [{"prompt": "n"}]
    assert seen == ["7"]


async def test_a_client_tools_answer_of_the_wrong_type_is_refused_and_the_call_stays_open(
    start: Starts,
) -> None:
    session = await start(picker([]))
    record = await session.run("pick one")
    assert isinstance(record, agentlib.Blocked)
    turn = session.turn(record.turn_id)
    with pytest.raises(agentlib.ClientToolAnswerError):
        await turn.answer(record.callbacks[0].id, "seven")
    assert isinstance(await turn.answer(record.callbacks[0].id, 7), agentlib.Answered)
    assert isinstance(await turn.result(), agentlib.Completed)


async def test_a_sign_in_gives_its_credentials_to_the_sources_tools(start: Starts) -> None:
    seen: list[agentlib.Credentials] = []

    async def search(query: str, creds: Annotated[agentlib.Credentials, agentlib.Depends()]) -> str:
        """Search the workspace."""
        seen.append(creds)
        return "found"

    source = agentlib.ToolSource(name="notion", tools=[search], requires_sign_in=True)
    call = ToolCallRequest(name="notion.search", arguments={"query": "q"})
    agent = Agent(
        "signer", model=ScriptedModel([ModelReply(tool_calls=[call]), "ok"]), tools=[source]
    )

    def sign_in(callback: agentlib.OpenSignIn) -> agentlib.SignInAnswer:
        return agentlib.SignInAnswer(credentials={"notion": "s3cret"})

    session = await start(agent, on_sign_in=sign_in)
    record = await session.run("search")
    assert isinstance(record, agentlib.Completed), record
    assert seen == [agentlib.Credentials(source="notion", value="s3cret")]


def nested(runs: list[str]) -> Agent:
    """root -> helper, whose ``delete`` needs approval; each echoes what it got."""
    helper = Agent(
        "helper",
        model=ScriptedModel(
            [
                ModelReply(tool_calls=[ToolCallRequest(name="delete", arguments={"path": "/x"})]),
                echo("helper"),
            ]
        ),
        tools=[deleter(runs)],
    )
    ask = ToolCallRequest(name="helper", arguments={"message": "delete /x"})
    return Agent(
        "root",
        model=ScriptedModel([ModelReply(tool_calls=[ask]), echo("root")]),
        subagents=[helper],
    )


async def test_a_subagents_approval_is_answered_through_its_own_session(start: Starts) -> None:
    runs: list[str] = []
    session = await start(nested(runs))
    record = await session.run("go")
    assert isinstance(record, agentlib.Blocked)
    (helper,) = await session.subagents()
    assert await helper.subagents() == []
    (callback,) = record.callbacks
    assert callback.session_id == helper.id
    helper_turn = helper.turn(callback.turn_id)
    assert isinstance(await helper_turn.get(), agentlib.Blocked)
    with pytest.raises(agentlib.UnsupportedSessionProcedureError):
        await helper.start_turn("not here")
    answered = await helper_turn.answer(callback.id, agentlib.AllowApproval())
    assert answered == agentlib.Answered(answer=agentlib.AllowApproval(), session_id=helper.id)
    final = await session.turn(record.turn_id).result(after=record)
    assert isinstance(final, agentlib.Completed)
    assert final.text == "root: helper: deleted /x"
    assert runs == ["/x"]
