"""Callbacks: approvals, client tools and sign-ins; answering them; Blocked and result(after=).

A turn blocks on a callback only the client can settle (SPEC 4). These tests drive callbacks
through the public API only: ``turn.answer`` and its refusals, first-answer-wins under
concurrency, the ``CallbackOpened``/``CallbackClosed`` events, ``Blocked.callbacks``,
``turn.result(after=, timeout=)``, and what happens to an open callback when its turn stops.

Every tool here is async, so ``trio.testing.wait_all_tasks_blocked()`` reaches a settled state
(no worker thread runs behind its back); time only moves on the ``autojump_clock``.
"""

from __future__ import annotations

import json
import uuid
from contextlib import aclosing
from typing import Annotated, Any

import attrs
import pytest
import trio
import trio.testing
from _support import (
    Gate,
    Recorder,
    approval_agent,
    call,
    deleter,
    held_agent,
    held_turn,
    pick,
    reply,
    tool_results,
    turn_events,
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
    Depends,
    Failed,
    Interrupted,
    KeepCallbackOpen,
    NotFound,
    OpenApproval,
    OpenClientToolCall,
    OpenSignIn,
    Running,
    ScriptedModel,
    SdkError,
    SignInAnswer,
    ToolCallEntry,
    ToolCallRequest,
    ToolResultEntry,
    ToolSource,
    TurnEnded,
)

# Each test runs on a local runtime and on agents served over HTTP (conftest's transport).
pytestmark = pytest.mark.usefixtures("transport")

SECRET = "s3cr3t-notion-token-0xC0FFEE"
OTHER_SECRET = "s3cr3t-github-token-0xBEEF"
STOPPED = "the turn was stopped before this call finished"

# --- helpers ------------------------------------------------------------------------------


def is_uuid(value: object) -> bool:
    try:
        return str(uuid.UUID(str(value))) == value
    except ValueError:
        return False


@attrs.frozen
class Choice:
    label: str
    score: int


@agentlib.client_tool
def choose(question: str) -> Choice:
    """Ask the user to choose an option."""
    ...


@agentlib.client_tool
def look_up(query: str) -> Any:
    """Look something up on the client; any value is an answer."""
    ...


def client_agent(*steps: Any, **options: Any) -> Agent:
    return Agent("client", model=ScriptedModel(steps), tools=[pick, choose], **options)


def look_up_agent(*steps: Any) -> Agent:
    return Agent("client", model=ScriptedModel(steps), tools=[look_up])


def notion(seen: list[Credentials]) -> ToolSource:
    """A sign-in source, ``notion``, whose ``search`` records the credentials it receives."""

    async def search(query: str, creds: Annotated[Credentials, Depends()]) -> str:
        """Search the workspace."""
        seen.append(creds)
        return f"found {query}"

    return ToolSource(name="notion", tools=[search], requires_sign_in=True)


def github(seen: list[Credentials]) -> ToolSource:
    async def issues(repo: str, creds: Annotated[Credentials, Depends()]) -> str:
        """List a repository's issues."""
        seen.append(creds)
        return f"issues of {repo}"

    return ToolSource(name="github", tools=[issues], requires_sign_in=True)


def sign_in_agent(seen: list[Credentials], *steps: Any) -> Agent:
    return Agent("signer", model=ScriptedModel(steps), tools=[notion(seen), github(seen)])


async def state(turn: agentlib.Turn) -> agentlib.TurnState[Any]:
    """The turn's record once every task waits (every tool here is async)."""
    await trio.testing.wait_all_tasks_blocked()
    return await turn.get()


async def blocked_run(session: agentlib.Session, message: str = "go") -> Blocked:
    record = await session.run(message)
    assert isinstance(record, Blocked), record
    return record


def turn_of(session: agentlib.Session, record: agentlib.TurnState[Any]) -> agentlib.Turn:
    return session.turn(record.turn_id)


async def refused_client_answer(request: ToolCallRequest, answer: object) -> None:
    """Answering the client tool call ``request`` opens with ``answer`` raises
    ClientToolAnswerError, and the turn stays blocked on that same call."""
    agent = client_agent(reply(request), "ok")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        with pytest.raises(ClientToolAnswerError):
            await turn.answer(record.callbacks[0].id, answer)
        after = await state(turn)
    assert isinstance(after, Blocked)
    assert after.callbacks == record.callbacks


async def session_events(session: agentlib.Session, last_turn_id: str) -> list[agentlib.Event]:
    """The session's events up to the ``TurnEnded`` of ``last_turn_id``."""
    events = []
    async with aclosing(session.iter_events()) as reader:
        async for event in reader:
            events.append(event)
            if isinstance(event, TurnEnded) and event.turn_id == last_turn_id:
                break
    return events


async def session_events_so_far(session: agentlib.Session) -> list[agentlib.Event]:
    """The session's events stored so far (reads until the reader has to wait)."""
    events: list[agentlib.Event] = []

    async def read() -> None:
        async for event in session.iter_events():
            events.append(event)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    return events


def of_type(events: list[agentlib.Event], cls: type[Any]) -> list[Any]:
    return [event for event in events if isinstance(event, cls)]


def results_in(events: list[agentlib.Event]) -> list[ToolResultEntry]:
    return [
        event.entry
        for event in of_type(events, agentlib.EntryCompleted)
        if isinstance(event.entry, ToolResultEntry)
    ]


# --- 1. approvals -------------------------------------------------------------------------


async def test_an_approval_tool_blocks_the_turn_on_one_open_approval() -> None:
    runs: list[str] = []
    agent = approval_agent(runs, reply(call("delete", path="/tmp/x")), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
    (callback,) = record.callbacks
    assert isinstance(callback, OpenApproval)
    assert (callback.tool_name, callback.arguments) == ("delete", {"path": "/tmp/x"})
    assert (callback.source, callback.reason) == ("tool", None)
    assert is_uuid(callback.id)
    assert (callback.session_id, callback.turn_id) == (session.id, record.turn_id)
    assert record.session_id == session.id
    assert runs == []


async def test_allow_approval_runs_the_tool_once_and_the_turn_completes() -> None:
    runs: list[str] = []
    recorder = Recorder("done")
    agent = approval_agent(runs, reply(call("delete", path="/tmp/x")), recorder)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        answered = await turn.answer(record.callbacks[0].id, AllowApproval())
        final = await turn.result(after=record)
    assert answered == Answered(answer=AllowApproval(), session_id=session.id)
    assert isinstance(final, Completed)
    assert final.text == "done"
    assert runs == ["/tmp/x"]
    (result,) = tool_results(recorder.requests[0])
    assert (result.name, result.text, result.is_error) == ("delete", "deleted /tmp/x", False)


async def test_deny_approval_skips_the_tool_and_tells_the_model_why() -> None:
    runs: list[str] = []
    recorder = Recorder("understood")
    agent = approval_agent(runs, reply(call("delete", path="/tmp/x")), recorder)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        answered = await turn.answer(record.callbacks[0].id, DenyApproval(reason="too risky"))
        final = await turn.result(after=record)
    assert answered == Answered(answer=DenyApproval(reason="too risky"), session_id=session.id)
    assert isinstance(final, Completed)
    assert final.text == "understood"
    assert runs == []
    (result,) = tool_results(recorder.requests[0])
    assert result.is_error
    assert result.name == "delete"
    assert result.text == "the client denied this call: too risky"


async def test_deny_approval_without_a_reason_gives_a_plain_refusal() -> None:
    recorder = Recorder("ok")
    agent = approval_agent([], reply(call("delete", path="/tmp/x")), recorder)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        await turn_of(session, record).answer(record.callbacks[0].id, DenyApproval())
        await turn_of(session, record).result(after=record)
    (result,) = tool_results(recorder.requests[0])
    assert (result.is_error, result.text) == (True, "the client denied this call")


async def test_allow_for_the_session_opens_no_more_approvals_of_that_tool() -> None:
    runs: list[str] = []
    agent = approval_agent(
        runs,
        reply(call("delete", path="a")),
        reply(call("delete", path="b")),  # same turn, after the answer
        "first done",
        reply(call("delete", path="c")),  # a later turn
        "second done",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session, "one")
        turn = turn_of(session, record)
        await turn.answer(record.callbacks[0].id, AllowApproval(scope="session"))
        first = await turn.result(after=record)
        second = await session.run("two")
        assert isinstance(second, Completed)
        events = await session_events(session, second.turn_id)
    assert isinstance(first, Completed)
    assert (first.text, second.text) == ("first done", "second done")
    assert runs == ["a", "b", "c"]
    assert len(of_type(events, CallbackOpened)) == 1


async def test_allow_for_the_session_does_not_reach_a_new_session() -> None:
    runs: list[str] = []
    agent = approval_agent(runs, reply(call("delete", path="a")), "done")
    async with agentlib.open_runtime():
        first = await agent.start_session()
        record = await blocked_run(first)
        await turn_of(first, record).answer(record.callbacks[0].id, AllowApproval(scope="session"))
        assert isinstance(await turn_of(first, record).result(after=record), Completed)
        second = await agent.start_session()
        again = await blocked_run(second)
    (callback,) = again.callbacks
    assert isinstance(callback, OpenApproval)
    assert (callback.session_id, callback.tool_name) == (second.id, "delete")
    assert runs == ["a"]


async def test_two_parallel_calls_of_an_approval_tool_open_two_approvals() -> None:
    runs: list[str] = []
    agent = approval_agent(runs, reply(call("delete", path="a"), call("delete", path="b")), "ok")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await state(turn_of(session, await blocked_run(session)))
    assert isinstance(record, Blocked)
    assert all(isinstance(callback, OpenApproval) for callback in record.callbacks)
    assert sorted(callback.arguments["path"] for callback in record.callbacks) == ["a", "b"]
    assert all(is_uuid(callback.id) for callback in record.callbacks)
    assert len({callback.id for callback in record.callbacks}) == 2
    assert runs == []


async def test_allowing_one_parallel_approval_for_the_session_closes_the_other() -> None:
    runs: list[str] = []
    agent = approval_agent(runs, reply(call("delete", path="a"), call("delete", path="b")), "ok")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await state(turn_of(session, await blocked_run(session)))
        assert isinstance(record, Blocked)
        first, other = record.callbacks
        turn = turn_of(session, record)
        answered = await turn.answer(first.id, AllowApproval(scope="session"))
        late = await turn.answer(other.id, DenyApproval(reason="too late"))
        final = await turn.result(after=record)
        events = await turn_events(turn)
    assert answered == Answered(answer=AllowApproval(scope="session"), session_id=session.id)
    assert late == AlreadySettled(session_id=session.id)
    assert isinstance(final, Completed)
    assert sorted(runs) == ["a", "b"]
    closed = of_type(events, CallbackClosed)
    assert {event.callback_id for event in closed} == {first.id, other.id}
    assert all(event.answer == AllowApproval(scope="session") for event in closed)
    assert all(event.answered for event in closed)


# --- 2. answers that are refused, and the outcomes of answer() ----------------------------


@pytest.mark.parametrize(
    "wrong",
    [True, False, None, {"type": "allow"}, "yes", KeepCallbackOpen(), SignInAnswer(credentials={})],
    ids=repr,
)
async def test_an_approval_refuses_anything_but_allow_or_deny(wrong: object) -> None:
    runs: list[str] = []
    agent = approval_agent(runs, reply(call("delete", path="a")), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        with pytest.raises(SdkError):
            await turn.answer(record.callbacks[0].id, wrong)
        after = await state(turn)
        assert runs == []
        # Still open: a right answer is taken.
        assert await turn.answer(record.callbacks[0].id, AllowApproval()) == Answered(
            answer=AllowApproval(), session_id=session.id
        )
    assert isinstance(after, Blocked)
    assert after.callbacks == record.callbacks


async def test_keep_callback_open_is_refused_for_a_client_tool_call() -> None:
    recorder = Recorder("ok")
    agent = client_agent(reply(call("client.pick", prompt="n")), recorder)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        with pytest.raises(SdkError):
            await turn.answer(record.callbacks[0].id, KeepCallbackOpen())
        after = await state(turn)
        assert await turn.answer(record.callbacks[0].id, 3) == Answered(session_id=session.id)
    assert isinstance(after, Blocked)
    assert after.callbacks == record.callbacks


async def test_keep_callback_open_is_refused_for_a_sign_in() -> None:
    seen: list[Credentials] = []
    agent = sign_in_agent(seen, reply(call("notion.search", query="q")), "ok")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        with pytest.raises(SdkError):
            await turn.answer(record.callbacks[0].id, KeepCallbackOpen())
        after = await state(turn)
    assert isinstance(after, Blocked)
    assert after.callbacks == record.callbacks
    assert seen == []


@pytest.mark.parametrize(
    "answer_class", [AllowApproval, DenyApproval, KeepCallbackOpen], ids=lambda c: c.__name__
)
async def test_an_answer_class_instead_of_an_instance_is_refused_saying_so(
    answer_class: type[Any],
) -> None:
    runs: list[str] = []
    agent = approval_agent(runs, reply(call("delete", path="a")), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        with pytest.raises(SdkError) as raised:
            await turn.answer(record.callbacks[0].id, answer_class)
        after = await state(turn)
    message = str(raised.value)
    assert f"{answer_class.__name__} is a class" in message
    assert "answer with an instance" in message
    assert isinstance(after, Blocked)
    assert after.callbacks == record.callbacks
    assert runs == []


@pytest.mark.parametrize("callback_id", ["", "abc", 42, None, "not-a-uuid-at-all"], ids=repr)
async def test_a_callback_id_that_is_not_a_uuid_raises_value_error(callback_id: Any) -> None:
    runs: list[str] = []
    agent = approval_agent(runs, reply(call("delete", path="a")), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        with pytest.raises(ValueError, match="UUID"):
            await turn.answer(callback_id, AllowApproval())
        after = await state(turn)
    assert isinstance(after, Blocked)
    assert after.callbacks == record.callbacks
    assert runs == []


async def test_an_unknown_callback_id_is_not_found() -> None:
    agent = approval_agent([], reply(call("delete", path="a")), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        outcome = await turn.answer(str(uuid.uuid4()), AllowApproval())
        after = await state(turn)
    assert outcome == NotFound()
    assert isinstance(after, Blocked)


async def test_another_spelling_of_an_open_callbacks_uuid_is_never_not_found() -> None:
    """An id that passes as a UUID names the callback it spells: the session opened it."""
    agent = approval_agent([], reply(call("delete", path="a")), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        spelled = record.callbacks[0].id.upper()
        try:
            outcome: object = await turn.answer(spelled, AllowApproval())
        except ValueError:
            outcome = "refused"  # refusing a non-canonical spelling would be right too
    assert outcome != NotFound()


async def test_a_second_answer_is_already_settled() -> None:
    runs: list[str] = []
    agent = approval_agent(runs, reply(call("delete", path="a")), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        callback_id = record.callbacks[0].id
        first = await turn.answer(callback_id, AllowApproval())
        second = await turn.answer(callback_id, DenyApproval(reason="changed my mind"))
        final = await turn.result(after=record)
        after_the_end = await turn.answer(callback_id, AllowApproval())
    assert first == Answered(answer=AllowApproval(), session_id=session.id)
    assert second == AlreadySettled(session_id=session.id)
    assert after_the_end == AlreadySettled(session_id=session.id)
    assert isinstance(final, Completed)
    assert runs == ["a"]


async def test_an_answer_through_another_turns_reference_settles_the_callback() -> None:
    runs: list[str] = []
    agent = approval_agent(runs, "hello", reply(call("delete", path="a")), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        earlier = await session.run("hi")
        assert isinstance(earlier, Completed)
        record = await blocked_run(session)
        assert record.turn_id != earlier.turn_id
        answered = await session.turn(earlier.turn_id).answer(
            record.callbacks[0].id, AllowApproval()
        )
        final = await turn_of(session, record).result(after=record)
    assert answered == Answered(answer=AllowApproval(), session_id=session.id)
    assert isinstance(final, Completed)
    assert runs == ["a"]


# --- 3. first answer wins -----------------------------------------------------------------


@pytest.mark.parametrize("allow_first", [True, False], ids=["allow-first", "deny-first"])
async def test_of_fifty_concurrent_answers_exactly_one_is_taken(allow_first: bool) -> None:
    runs: list[str] = []
    agent = approval_agent(runs, reply(call("delete", path="a")), "done")
    offers: list[AllowApproval | DenyApproval] = [
        AllowApproval() if (index % 2 == 0) == allow_first else DenyApproval(reason="no")
        for index in range(50)
    ]
    outcomes: list[Any] = [None] * len(offers)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        callback_id = record.callbacks[0].id

        async def offer(index: int) -> None:
            outcomes[index] = await turn.answer(callback_id, offers[index])

        async with trio.open_nursery() as nursery:
            for index in range(len(offers)):
                nursery.start_soon(offer, index)
        final = await turn.result(after=record)
        events = await turn_events(turn)
    (closed,) = of_type(events, CallbackClosed)
    taken = closed.answer
    assert closed.answered
    assert taken in (AllowApproval(), DenyApproval(reason="no"))
    answered = [outcome for outcome in outcomes if isinstance(outcome, Answered)]
    settled = [outcome for outcome in outcomes if isinstance(outcome, AlreadySettled)]
    assert len(answered) >= 1
    assert len(answered) + len(settled) == len(offers)
    assert all(outcome == Answered(answer=taken, session_id=session.id) for outcome in answered)
    assert all(outcome.session_id == session.id for outcome in settled)
    assert runs == (["a"] if isinstance(taken, AllowApproval) else [])
    assert isinstance(final, Completed)


async def test_answers_that_start_after_one_settled_are_all_already_settled() -> None:
    runs: list[str] = []
    agent = approval_agent(runs, reply(call("delete", path="a")), "done")
    outcomes: list[Any] = []
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        callback_id = record.callbacks[0].id
        first = await turn.answer(callback_id, DenyApproval(reason="no"))

        async def offer(answer: AllowApproval | DenyApproval) -> None:
            outcomes.append(await turn.answer(callback_id, answer))

        async with trio.open_nursery() as nursery:
            for index in range(50):
                nursery.start_soon(offer, AllowApproval() if index % 2 else DenyApproval())
        await turn.result(after=record)
    assert first == Answered(answer=DenyApproval(reason="no"), session_id=session.id)
    assert outcomes == [AlreadySettled(session_id=session.id)] * 50
    assert runs == []


# --- 4. client tools ----------------------------------------------------------------------


async def test_a_client_tool_call_opens_an_open_client_tool_call() -> None:
    agent = client_agent(reply(call("client.pick", prompt="a number")), "ok")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
    (callback,) = record.callbacks
    assert isinstance(callback, OpenClientToolCall)
    assert (callback.tool_name, callback.arguments) == ("client.pick", {"prompt": "a number"})
    assert is_uuid(callback.id)
    assert (callback.session_id, callback.turn_id) == (session.id, record.turn_id)


@pytest.mark.parametrize("wrong", ["7", 7.5, None, [7], {"value": 7}], ids=repr)
async def test_a_wrong_shape_answer_to_a_client_tool_leaves_the_call_open(wrong: object) -> None:
    recorder = Recorder("ok")
    agent = client_agent(reply(call("client.pick", prompt="n")), recorder)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        with pytest.raises(ClientToolAnswerError) as raised:
            await turn.answer(record.callbacks[0].id, wrong)
        after = await state(turn)
        answered = await turn.answer(record.callbacks[0].id, 7)
        final = await turn.result(after=record)
    assert isinstance(raised.value, SdkError)
    assert isinstance(after, Blocked)
    assert after.callbacks == record.callbacks
    assert answered == Answered(answer=None, session_id=session.id)
    assert isinstance(final, Completed)
    (result,) = tool_results(recorder.requests[0])
    assert (result.name, result.structured_content, result.is_error) == ("client.pick", 7, False)


@pytest.mark.parametrize("wrong", [True, False], ids=repr)
async def test_a_bool_is_not_an_answer_for_a_client_tool_returning_int(wrong: bool) -> None:
    """The converter refuses a bool for an int; an answer goes through the same check."""
    await refused_client_answer(call("client.pick", prompt="n"), wrong)


async def test_a_client_tool_answer_error_never_repeats_the_value() -> None:
    agent = client_agent(reply(call("client.pick", prompt="n")), "ok")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        with pytest.raises(ClientToolAnswerError) as raised:
            await turn_of(session, record).answer(record.callbacks[0].id, "private-value-913")
    assert "private-value-913" not in str(raised.value)
    assert "client.pick" in str(raised.value)


ANOTHER_CALLBACKS_ANSWERS = [
    SignInAnswer(credentials={"notion": SECRET}),
    Credentials(source="notion", value=SECRET),
    AllowApproval(),
    DenyApproval(),
]


@pytest.mark.parametrize("wrong", ANOTHER_CALLBACKS_ANSWERS, ids=lambda a: type(a).__name__)
async def test_another_callbacks_answer_is_refused_for_a_client_tool_that_takes_any_value(
    wrong: object,
) -> None:
    recorder = Recorder("ok")
    agent = look_up_agent(reply(call("client.look_up", query="q")), recorder)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        with pytest.raises(ClientToolAnswerError):
            await turn.answer(record.callbacks[0].id, wrong)
        after = await state(turn)
        answered = await turn.answer(record.callbacks[0].id, {"found": 1})
        final = await turn.result(after=record)
    assert isinstance(after, Blocked)
    assert after.callbacks == record.callbacks
    assert answered == Answered(answer=None, session_id=session.id)
    assert isinstance(final, Completed)
    (result,) = tool_results(recorder.requests[0])
    assert result.structured_content == {"found": 1}


@pytest.mark.parametrize("wrong", ANOTHER_CALLBACKS_ANSWERS[:2], ids=lambda a: type(a).__name__)
async def test_a_credential_offered_as_a_client_tools_answer_shows_nowhere(wrong: object) -> None:
    agent = look_up_agent(reply(call("client.look_up", query="q")), "ok")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        with pytest.raises(ClientToolAnswerError) as raised:
            await turn.answer(record.callbacks[0].id, wrong)
        await turn.answer(record.callbacks[0].id, {"found": 1})
        final = await turn.result(after=record)
        events = await session_events(session, final.turn_id)
    assert isinstance(final, Completed)
    shown = [str(raised.value)]
    for item in [*events, record, final]:
        shown.append(repr(item))
        shown.append(json.dumps(agentlib.unstructure(item)))
    for text in shown:
        assert SECRET not in text


@pytest.mark.parametrize(
    "answer", [Choice(label="b", score=2), {"label": "b", "score": 2}], ids=["instance", "dict"]
)
async def test_an_attrs_return_type_takes_an_instance_or_its_dict(answer: object) -> None:
    recorder = Recorder("ok")
    agent = client_agent(reply(call("client.choose", question="which?")), recorder)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        (callback,) = record.callbacks
        answered = await turn_of(session, record).answer(callback.id, answer)
        final = await turn_of(session, record).result(after=record)
    assert isinstance(callback, OpenClientToolCall)
    assert callback.tool_name == "client.choose"
    assert answered == Answered(answer=None, session_id=session.id)
    assert isinstance(final, Completed)
    (result,) = tool_results(recorder.requests[0])
    assert result.structured_content == {"label": "b", "score": 2}
    assert not result.is_error


@pytest.mark.parametrize("wrong", [{"label": "b"}, {"label": "b", "score": "2"}, "b", 2], ids=repr)
async def test_an_answer_that_does_not_fit_an_attrs_return_type_is_refused(wrong: object) -> None:
    await refused_client_answer(call("client.choose", question="which?"), wrong)


async def test_an_attrs_instance_with_fields_of_the_wrong_type_is_refused() -> None:
    """attrs does not check field types: the instance must be checked like its dict."""
    wrong = Choice(label=3, score="x")  # type: ignore[arg-type]
    await refused_client_answer(call("client.choose", question="which?"), wrong)


async def test_invalid_model_arguments_for_a_client_tool_open_no_callback() -> None:
    recorder = Recorder("ok")
    agent = client_agent(reply(call("client.pick", prompt=3)), recorder)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        final = await session.run("go")
        events = await turn_events(turn_of(session, final))
    assert isinstance(final, Completed)
    assert of_type(events, CallbackOpened) == []
    (result,) = tool_results(recorder.requests[0])
    assert result.is_error
    assert result.name == "client.pick"
    assert "invalid arguments for client.pick" in result.text


# --- 5. sign-in ---------------------------------------------------------------------------


async def test_the_first_call_into_a_sign_in_source_opens_a_sign_in() -> None:
    seen: list[Credentials] = []
    agent = sign_in_agent(seen, reply(call("notion.search", query="q")), "ok")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        events = await session_events_so_far(session)
    (callback,) = record.callbacks
    assert isinstance(callback, OpenSignIn)
    assert callback.sources == ("notion",)
    assert is_uuid(callback.id)
    assert (callback.session_id, callback.turn_id) == (session.id, record.turn_id)
    calls = [e.entry for e in of_type(events, agentlib.EntryCompleted)]
    assert [entry.name for entry in calls if isinstance(entry, ToolCallEntry)] == ["notion.search"]
    assert seen == []


async def test_two_sources_needed_by_one_reply_open_one_sign_in_naming_both() -> None:
    seen: list[Credentials] = []
    agent = sign_in_agent(
        seen,
        reply(
            call("notion.search", query="q"),
            call("github.issues", repo="r"),
            call("notion.search", query="again"),
        ),
        "ok",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await state(turn_of(session, await blocked_run(session)))
        assert isinstance(record, Blocked)
        (callback,) = record.callbacks
        answered = await turn_of(session, record).answer(
            callback.id, SignInAnswer(credentials={"notion": SECRET, "github": OTHER_SECRET})
        )
        final = await turn_of(session, record).result(after=record)
    assert isinstance(callback, OpenSignIn)
    assert sorted(callback.sources) == ["github", "notion"]
    assert len(callback.sources) == 2
    assert answered == Answered(answer=None, session_id=session.id)
    assert isinstance(final, Completed)
    assert sorted(seen, key=lambda c: c.source) == [
        Credentials(source="github", value=OTHER_SECRET),
        Credentials(source="notion", value=SECRET),
        Credentials(source="notion", value=SECRET),
    ]


@pytest.mark.parametrize(
    ("requested", "credentials"),
    [
        (["notion", "github"], {"notion": SECRET}),
        (["notion"], {"notion": SECRET, "github": OTHER_SECRET}),
        (["notion"], {"github": OTHER_SECRET}),
        (["notion"], {}),
    ],
    ids=["missing", "extra", "other", "empty"],
)
async def test_a_sign_in_answer_must_name_exactly_the_requested_sources(
    requested: list[str], credentials: dict[str, str]
) -> None:
    seen: list[Credentials] = []
    tools = {"notion": call("notion.search", query="q"), "github": call("github.issues", repo="r")}
    agent = sign_in_agent(seen, reply(*(tools[name] for name in requested)), "ok")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        with pytest.raises(SdkError) as raised:
            await turn.answer(record.callbacks[0].id, SignInAnswer(credentials=credentials))
        after = await state(turn)
    assert isinstance(after, Blocked)
    assert after.callbacks == record.callbacks
    assert seen == []
    assert SECRET not in str(raised.value)
    assert OTHER_SECRET not in str(raised.value)


async def test_a_sign_in_refuses_an_answer_of_another_kind() -> None:
    agent = sign_in_agent([], reply(call("notion.search", query="q")), "ok")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        for wrong in (AllowApproval(), {"notion": SECRET}, None):
            with pytest.raises(SdkError) as raised:
                await turn.answer(record.callbacks[0].id, wrong)
            assert SECRET not in str(raised.value)
        assert isinstance(await state(turn), Blocked)


async def test_signed_in_tools_receive_credentials_and_a_later_turn_does_not_ask_again() -> None:
    seen: list[Credentials] = []
    agent = sign_in_agent(
        seen,
        reply(call("notion.search", query="q")),
        "first",
        reply(call("notion.search", query="r")),
        "second",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        answered = await turn_of(session, record).answer(
            record.callbacks[0].id, SignInAnswer(credentials={"notion": SECRET})
        )
        first = await turn_of(session, record).result(after=record)
        second = await session.run("again")
        assert isinstance(second, Completed)
        events = await session_events(session, second.turn_id)
    assert answered == Answered(answer=None, session_id=session.id)
    assert isinstance(first, Completed)
    assert seen == [Credentials(source="notion", value=SECRET)] * 2
    assert len(of_type(events, CallbackOpened)) == 1
    assert [result.text for result in results_in(events)] == ["found q", "found r"]


async def test_credentials_never_appear_in_events_records_or_errors() -> None:
    seen: list[Credentials] = []
    agent = sign_in_agent(
        seen,
        reply(call("notion.search", query="q"), call("github.issues", repo="r")),
        "first",
        reply(call("notion.search", query="again")),
        "second",
    )
    shown: list[str] = []
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        callback_id = record.callbacks[0].id
        wrong_answers = [
            SignInAnswer(credentials={"notion": SECRET}),
            SignInAnswer(credentials={"notion": SECRET, "github": OTHER_SECRET, "x": SECRET}),
        ]
        for wrong in wrong_answers:
            with pytest.raises(SdkError) as raised:
                await turn.answer(callback_id, wrong)
            shown.append(str(raised.value))
            shown.append(repr(wrong))
        right = SignInAnswer(credentials={"notion": SECRET, "github": OTHER_SECRET})
        answered = await turn.answer(callback_id, right)
        again = await turn.answer(callback_id, right)
        first = await turn.result(after=record)
        second = await session.run("more")
        records = [record, answered, again, first, second, await turn.get()]
        events = await session_events(session, second.turn_id)
    assert isinstance(second, Completed)
    assert len(seen) == 3
    shown.append(repr(right))
    shown.extend(repr(creds) for creds in seen)
    for item in [*events, *records]:
        shown.append(repr(item))
        shown.append(json.dumps(agentlib.unstructure(item)))
    for text in shown:
        assert SECRET not in text
        assert OTHER_SECRET not in text
    tool_calls = [e.entry for e in of_type(events, agentlib.EntryCompleted)]
    assert {e.name for e in tool_calls if isinstance(e, ToolCallEntry)} == {
        "notion.search",
        "github.issues",
    }


# --- 6. events and Blocked ----------------------------------------------------------------


async def test_an_answered_approval_logs_callback_opened_then_callback_closed() -> None:
    agent = approval_agent([], reply(call("delete", path="a")), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        callback = record.callbacks[0]
        await turn.answer(callback.id, AllowApproval())
        await turn.result(after=record)
        events = await turn_events(turn)
    kinds = [type(event) for event in events]
    opened_at, closed_at = kinds.index(CallbackOpened), kinds.index(CallbackClosed)
    assert opened_at < closed_at
    assert kinds.count(CallbackOpened) == kinds.count(CallbackClosed) == 1
    opened, closed = events[opened_at], events[closed_at]
    assert isinstance(opened, CallbackOpened)
    assert isinstance(closed, CallbackClosed)
    assert opened.callback == callback
    assert (closed.callback_id, closed.answer, closed.answered) == (
        callback.id,
        AllowApproval(),
        True,
    )
    assert opened.turn_id == closed.turn_id == turn.id
    # The tool ran once the approval closed: its result comes after.
    (result_at,) = [
        index
        for index, event in enumerate(events)
        if isinstance(event, agentlib.EntryCompleted) and isinstance(event.entry, ToolResultEntry)
    ]
    assert result_at > closed_at


async def test_an_answered_client_tool_call_closes_with_no_answer_in_the_event() -> None:
    agent = client_agent(reply(call("client.pick", prompt="n")), "ok")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        await turn.answer(record.callbacks[0].id, 5)
        await turn.result(after=record)
        events = await turn_events(turn)
    (closed,) = of_type(events, CallbackClosed)
    assert (closed.callback_id, closed.answer, closed.answered) == (
        record.callbacks[0].id,
        None,
        True,
    )


async def test_blocked_lists_exactly_the_callbacks_open_now() -> None:
    runs: list[str] = []
    agent = approval_agent(runs, reply(call("delete", path="a"), call("delete", path="b")), "ok")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = turn_of(session, await blocked_run(session))
        both = await state(turn)
        assert isinstance(both, Blocked)
        first, second = both.callbacks
        await turn.answer(first.id, AllowApproval())
        one = await state(turn)
        waited = await turn.result()
        await turn.answer(second.id, AllowApproval())
        final = await turn.result(after=one)
    assert len(both.callbacks) == 2
    assert isinstance(one, Blocked)
    assert one.callbacks == (second,)
    assert isinstance(waited, Blocked)
    assert waited.callbacks == (second,)
    assert runs == [first.arguments["path"], second.arguments["path"]]
    assert isinstance(final, Completed)


# --- 7. result(after=, timeout=) ----------------------------------------------------------


async def test_result_without_after_returns_blocked_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = approval_agent([], reply(call("delete", path="a")), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        start = trio.current_time()
        again = await turn.result()
        once_more = await turn.result()
        waited = trio.current_time() - start
    assert again == once_more == record
    assert waited == 0


async def test_result_after_a_blocked_record_waits_past_it_until_the_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = approval_agent([], reply(call("delete", path="a")), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        start = trio.current_time()
        again = await turn_of(session, record).result(after=record, timeout=5)
        waited = trio.current_time() - start
    assert again == record
    assert waited == pytest.approx(5)


async def test_result_after_a_blocked_record_returns_on_a_new_callback() -> None:
    runs: list[str] = []
    agent = approval_agent(
        runs, reply(call("delete", path="a")), reply(call("delete", path="b")), "done"
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        await turn.answer(record.callbacks[0].id, AllowApproval())
        later = await turn.result(after=record)
    assert isinstance(later, Blocked)
    (callback,) = later.callbacks
    assert isinstance(callback, OpenApproval)
    assert callback.arguments == {"path": "b"}
    assert callback.id != record.callbacks[0].id
    assert runs == ["a"]


async def test_result_with_a_timeout_on_a_running_turn_returns_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        turn = await held_turn(session, gate)
        start = trio.current_time()
        record = await turn.result(timeout=5)
        waited = trio.current_time() - start
        gate.opened.set()
        final = await turn.result()
    assert isinstance(record, Running)
    assert record.turn_id == turn.id
    assert waited == pytest.approx(5)
    assert isinstance(final, Completed)


# --- 8. stopping a blocked turn -----------------------------------------------------------


async def _stop(how: str, session: agentlib.Session, turn: agentlib.Turn) -> None:
    if how == "interrupt":
        assert await turn.interrupt() == turn
    else:
        await session.cancel()


def _blocking_setup(kind: str) -> tuple[Agent, object]:
    """An agent whose first reply blocks on a callback of ``kind``, and a right answer."""
    if kind == "approval":
        return approval_agent([], reply(call("delete", path="a")), "done"), AllowApproval()
    if kind == "client_tool":
        return client_agent(reply(call("client.pick", prompt="n")), "done"), 1
    answer = SignInAnswer(credentials={"notion": SECRET})
    return sign_in_agent([], reply(call("notion.search", query="q")), "done"), answer


@pytest.mark.parametrize("kind", ["approval", "client_tool", "sign_in"])
@pytest.mark.parametrize("how", ["interrupt", "cancel"])
async def test_stopping_a_blocked_turn_closes_its_callback_unanswered(how: str, kind: str) -> None:
    agent, right_answer = _blocking_setup(kind)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        callback = record.callbacks[0]
        await _stop(how, session, turn)
        final = await turn.result()
        late = await turn.answer(callback.id, right_answer)
        events = await turn_events(turn)
    assert isinstance(final, Interrupted)
    assert final.cause == ("interrupted" if how == "interrupt" else "cancelled")
    (closed,) = of_type(events, CallbackClosed)
    assert (closed.callback_id, closed.answer, closed.answered) == (callback.id, None, False)
    (result,) = results_in(events)
    assert (result.is_error, result.text) == (True, STOPPED)
    assert late == AlreadySettled(session_id=session.id)


# --- 9. tool_errors="raise" ---------------------------------------------------------------


async def test_a_failing_tool_fails_the_turn_without_waiting_for_an_open_approval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runs: list[str] = []

    @agentlib.tool
    async def boom() -> str:
        """Fail after a while."""
        await trio.sleep(1)
        raise RuntimeError("boom")

    agent = Agent(
        "strict",
        model=ScriptedModel([reply(call("delete", path="a"), call("boom")), "done"]),
        tools=[deleter(runs), boom],
        tool_errors="raise",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await blocked_run(session)
        turn = turn_of(session, record)
        final = await turn.result(after=record, timeout=60)
        failed_at = trio.current_time()
        late = await turn.answer(record.callbacks[0].id, AllowApproval())
        events = await turn_events(turn)
    assert isinstance(final, Failed)
    assert (final.error.type, final.error.message) == ("RuntimeError", "boom")
    assert failed_at == pytest.approx(1)  # when boom failed, not at the timeout
    (closed,) = of_type(events, CallbackClosed)
    assert (closed.callback_id, closed.answered, closed.answer) == (
        record.callbacks[0].id,
        False,
        None,
    )
    assert late == AlreadySettled(session_id=session.id)
    assert runs == []
