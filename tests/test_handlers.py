"""Callback handlers of a session reference: ``on_approval``, ``on_sign_in`` and
``on_client_tool`` answer a turn's callbacks while a ``run``/``result`` of that reference waits
(SPEC 3 "Turn.result", 4).

What a handler returns is sent as the answer; ``KeepCallbackOpen()`` leaves the callback for
someone else; a handler that raises or returns something that does not fit leaves the callback
open and makes the waiting call raise, while the turn keeps running. Two waits of one reference
share a handler's run; a reference without handlers never waits on callbacks.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import pytest
import trio
import trio.testing
from _support import (
    Gate,
    Recorder,
    approval_agent,
    call_tool,
    deleter,
    held_agent,
    held_turn,
    pick,
    tool_results,
)

import agentlib
from agentlib import (
    Agent,
    AllowApproval,
    Answered,
    Blocked,
    CallbackClosed,
    CallbackOpened,
    ClientToolAnswerError,
    Completed,
    Credentials,
    DenyApproval,
    Depends,
    KeepCallbackOpen,
    ModelReply,
    ModelRequest,
    OpenApproval,
    OpenClientToolCall,
    OpenSignIn,
    RequestApproval,
    Running,
    ScriptedModel,
    SdkError,
    SignInAnswer,
    ToolCallEntry,
    ToolCallRequest,
    ToolSource,
)

# Each test runs on a local runtime and on agents served over HTTP (conftest's transport).
pytestmark = pytest.mark.usefixtures("transport")

#: The safety net of every test: a wait that never returns fails the test instead of hanging it.
WAIT = 30.0

SECRET = "s3cr3t-token"


class Boom(Exception):
    """What the failing handlers raise."""


# -- helpers --------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def open_runtime() -> AsyncIterator[None]:
    """A runtime, inside a deadline: a broken wait fails the test rather than hanging it."""
    with trio.fail_after(WAIT):
        async with agentlib.open_runtime():
            yield


class Handler:
    """A sync handler that records each callback it gets and returns ``answer``."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.seen: list[Any] = []

    def __call__(self, callback: Any) -> Any:
        self.seen.append(callback)
        return self.answer


class AsyncHandler(Handler):
    """The same, as an async handler that checkpoints before it answers."""

    async def __call__(self, callback: Any) -> Any:  # type: ignore[override]
        await trio.lowlevel.checkpoint()
        return super().__call__(callback)


class Raising:
    """A handler that records each callback it gets and raises ``Boom``."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def __call__(self, callback: Any) -> Any:
        self.seen.append(callback)
        raise Boom(f"handler failed on {callback.tool_name}")


class Deletions:
    """An approval tool, ``delete`` (see ``deleter``), and the paths it deleted."""

    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.tool = deleter(self.deleted)


def open_callbacks(record: agentlib.TurnState[Any]) -> tuple[Any, ...]:
    assert isinstance(record, Blocked), record
    return record.callbacks


async def closed_events(session: agentlib.Session, turn_id: str) -> list[CallbackClosed]:
    """The ``CallbackClosed`` events of a turn that has ended."""
    return [
        event
        async for event in session.turn(turn_id).iter_events()
        if isinstance(event, CallbackClosed)
    ]


async def finish_by_hand(
    session: agentlib.Session, turn_id: str, answer: Any = None
) -> agentlib.TurnState[Any]:
    """Answer the turn's one open callback without handlers, then wait for its end."""
    blocked = await session.turn(turn_id).get()
    (callback,) = open_callbacks(blocked)
    answered = await session.turn(turn_id).answer(
        callback.id, answer if answer is not None else AllowApproval()
    )
    assert isinstance(answered, Answered)
    return await session.turn(turn_id).result(after=blocked)


# -- on_approval answers ----------------------------------------------------------------------


@pytest.mark.parametrize("handler_type", [Handler, AsyncHandler], ids=["sync", "async"])
async def test_on_approval_allows_the_call_and_run_completes(
    handler_type: Callable[[Any], Handler],
) -> None:
    deletions = Deletions()
    approve = handler_type(AllowApproval())
    async with open_runtime():
        session = await approval_agent(
            deletions.deleted, call_tool("delete", path="a.txt"), "deleted it"
        ).start_session(on_approval=approve)
        record = await session.run("delete a.txt")
    assert isinstance(record, Completed)
    assert record.output == "deleted it"
    assert deletions.deleted == ["a.txt"]
    assert len(approve.seen) == 1


async def test_on_approval_receives_the_open_approval() -> None:
    deletions = Deletions()
    approve = Handler(AllowApproval())
    async with open_runtime():
        session = await approval_agent(
            deletions.deleted, call_tool("delete", path="a.txt"), "done"
        ).start_session(on_approval=approve)
        record = await session.run("delete a.txt")
        closed = await closed_events(session, record.turn_id)
    (callback,) = approve.seen
    assert isinstance(callback, OpenApproval)
    assert callback.tool_name == "delete"
    assert callback.arguments == {"path": "a.txt"}
    assert callback.source == "tool"
    assert callback.reason is None
    assert (callback.session_id, callback.turn_id) == (session.id, record.turn_id)
    assert [(event.callback_id, event.answer, event.answered) for event in closed] == [
        (callback.id, AllowApproval(), True)
    ]


async def test_deny_from_on_approval_skips_the_tool_and_the_turn_completes() -> None:
    deletions = Deletions()
    model = Recorder("kept the file")
    async with open_runtime():
        agent = approval_agent(deletions.deleted, call_tool("delete", path="a.txt"), model)
        session = await agent.start_session(on_approval=Handler(DenyApproval(reason="not today")))
        record = await session.run("delete a.txt")
    assert isinstance(record, Completed)
    assert record.output == "kept the file"
    assert deletions.deleted == []
    (result,) = tool_results(model.requests[0])
    assert result.is_error
    assert result.text == "the client denied this call: not today"


async def test_handlers_of_a_reference_from_agent_session_answer_too() -> None:
    deletions = Deletions()
    approve = Handler(AllowApproval())
    async with open_runtime():
        agent = approval_agent(deletions.deleted, call_tool("delete", path="a.txt"), "deleted it")
        started = await agent.start_session()
        session = agent.session(started.id, on_approval=approve)
        record = await session.run("delete a.txt")
    assert isinstance(record, Completed)
    assert deletions.deleted == ["a.txt"]
    assert [callback.tool_name for callback in approve.seen] == ["delete"]


async def test_handlers_of_another_reference_answer_a_turn_it_did_not_start() -> None:
    deletions = Deletions()
    approve = Handler(AllowApproval())
    async with open_runtime():
        agent = approval_agent(deletions.deleted, call_tool("delete", path="a.txt"), "deleted it")
        plain = await agent.start_session()
        turn = await plain.start_turn("delete a.txt")
        assert isinstance(turn, agentlib.Turn)
        record = await agent.session(plain.id, on_approval=approve).turn(turn.id).result()
    assert isinstance(record, Completed)
    assert deletions.deleted == ["a.txt"]
    assert len(approve.seen) == 1


# -- KeepCallbackOpen -------------------------------------------------------------------------


async def test_keep_callback_open_makes_run_return_blocked_with_that_callback() -> None:
    deletions = Deletions()
    keep = Handler(KeepCallbackOpen())
    async with open_runtime():
        agent = approval_agent(deletions.deleted, call_tool("delete", path="a.txt"), "deleted it")
        session = await agent.start_session(on_approval=keep)
        blocked = await session.run("delete a.txt")
        (seen,) = keep.seen
        assert open_callbacks(blocked) == (seen,)
        assert open_callbacks(await session.turn(blocked.turn_id).get()) == (seen,)
        assert deletions.deleted == []

        plain = agent.session(session.id).turn(blocked.turn_id)
        again = await plain.result()
        assert open_callbacks(again) == (seen,)

        answered = await plain.answer(seen.id, AllowApproval())
        record = await plain.result(after=blocked)
    assert answered == Answered(answer=AllowApproval(), session_id=session.id)
    assert isinstance(record, Completed)
    assert record.output == "deleted it"
    assert deletions.deleted == ["a.txt"]
    assert len(keep.seen) == 1


# -- handlers that fail -----------------------------------------------------------------------


async def test_an_exception_from_on_approval_propagates_from_run_unwrapped() -> None:
    deletions = Deletions()
    failing = Raising()
    async with open_runtime():
        session = await approval_agent(
            deletions.deleted, call_tool("delete", path="a.txt"), "deleted it"
        ).start_session(on_approval=failing)
        with pytest.raises(Boom) as raised:
            await session.run("delete a.txt")
        assert type(raised.value) is Boom
        assert str(raised.value) == "handler failed on delete"
        (callback,) = failing.seen
        assert open_callbacks(await session.turn(callback.turn_id).get()) == (callback,)
        record = await finish_by_hand(session, callback.turn_id)
    assert isinstance(record, Completed)
    assert record.output == "deleted it"
    assert deletions.deleted == ["a.txt"]


async def test_an_exception_from_on_approval_propagates_from_result_and_the_turn_runs_on() -> None:
    deletions = Deletions()
    failing = Raising()
    async with open_runtime():
        session = await approval_agent(
            deletions.deleted, call_tool("delete", path="a.txt"), "deleted it"
        ).start_session(on_approval=failing)
        turn = await session.start_turn("delete a.txt")
        assert isinstance(turn, agentlib.Turn)
        with pytest.raises(Boom) as raised:
            await turn.result()
        assert type(raised.value) is Boom
        state = await turn.get()
        record = await finish_by_hand(session, turn.id)
    assert open_callbacks(state) == tuple(failing.seen)
    assert isinstance(record, Completed)
    assert deletions.deleted == ["a.txt"]


@pytest.mark.parametrize("wrong", [True, None, "yes"], ids=["bool", "none", "str"])
async def test_on_approval_returning_a_wrong_type_raises_sdk_error_and_keeps_it_open(
    wrong: Any,
) -> None:
    deletions = Deletions()
    handler = Handler(wrong)
    async with open_runtime():
        session = await approval_agent(
            deletions.deleted, call_tool("delete", path="a.txt"), "deleted it"
        ).start_session(on_approval=handler)
        with pytest.raises(SdkError, match="on_approval") as raised:
            await session.run("delete a.txt")
        (callback,) = handler.seen
        assert callback.id in str(raised.value)
        assert open_callbacks(await session.turn(callback.turn_id).get()) == (callback,)
        record = await finish_by_hand(session, callback.turn_id)
    assert type(raised.value) is SdkError
    assert isinstance(record, Completed)
    assert deletions.deleted == ["a.txt"]


@agentlib.pre_tool_call
def ask_first(call: ToolCallEntry) -> RequestApproval:
    return RequestApproval(reason="touches production")


async def test_allowing_a_hooks_approval_for_the_session_from_on_approval_raises_sdk_error() -> (
    None
):
    ran: list[str] = []

    async def deploy(target: str) -> str:
        """Deploy."""
        ran.append(target)
        return "deployed"

    handler = Handler(AllowApproval(scope="session"))
    agent = Agent(
        "deployer",
        model=ScriptedModel([call_tool("deploy", target="prod"), "deployed it"]),
        tools=[deploy],
        hooks=[ask_first],
    )
    async with open_runtime():
        session = await agent.start_session(on_approval=handler)
        with pytest.raises(SdkError, match='scope="once"'):
            await session.run("deploy")
        (callback,) = handler.seen
        assert (callback.source, callback.reason) == ("hook", "touches production")
        assert open_callbacks(await session.turn(callback.turn_id).get()) == (callback,)
        assert ran == []
        record = await finish_by_hand(session, callback.turn_id)
    assert isinstance(record, Completed)
    assert ran == ["prod"]


# -- on_sign_in -------------------------------------------------------------------------------


def notion_agent(received: list[Credentials], *then: Any) -> Agent:
    async def search(query: str, creds: Annotated[Credentials, Depends()]) -> str:
        """Search the workspace."""
        received.append(creds)
        return f"found {query}"

    source = ToolSource(name="notion", tools=[search], requires_sign_in=True)
    return Agent(
        "reader",
        model=ScriptedModel([call_tool("notion.search", query="specs"), *(then or ("found it",))]),
        tools=[source],
    )


async def test_on_sign_in_gives_the_credentials_to_the_tool() -> None:
    received: list[Credentials] = []
    sign_in = Handler(SignInAnswer(credentials={"notion": SECRET}))
    async with open_runtime():
        session = await notion_agent(received).start_session(on_sign_in=sign_in)
        record = await session.run("find the specs")
        events = [event async for event in session.turn(record.turn_id).iter_events()]
    assert isinstance(record, Completed)
    assert record.output == "found it"
    (callback,) = sign_in.seen
    assert isinstance(callback, OpenSignIn)
    assert callback.sources == ("notion",)
    assert received == [Credentials(source="notion", value=SECRET)]
    assert SECRET not in repr(events)
    assert SECRET not in repr(record)


@pytest.mark.parametrize(
    "credentials",
    [{"github": SECRET}, {"notion": SECRET, "github": SECRET}, {}],
    ids=["another-source", "an-extra-source", "no-source"],
)
async def test_on_sign_in_naming_wrong_sources_raises_sdk_error_and_keeps_it_open(
    credentials: dict[str, str],
) -> None:
    received: list[Credentials] = []
    sign_in = Handler(SignInAnswer(credentials=credentials))
    async with open_runtime():
        session = await notion_agent(received).start_session(on_sign_in=sign_in)
        with pytest.raises(SdkError, match="on_sign_in") as raised:
            await session.run("find the specs")
        (callback,) = sign_in.seen
        state = await session.turn(callback.turn_id).get()
        right = SignInAnswer(credentials={"notion": SECRET})
        record = await finish_by_hand(session, callback.turn_id, right)
    assert type(raised.value) is SdkError
    assert SECRET not in str(raised.value)
    assert open_callbacks(state) == (callback,)
    assert isinstance(record, Completed)
    assert received == [Credentials(source="notion", value=SECRET)]


# -- on_client_tool ---------------------------------------------------------------------------


def picking_agent(*then: Any, **options: Any) -> Agent:
    return Agent(
        "picker",
        model=ScriptedModel([call_tool("client.pick", prompt="a number?"), *(then or ("picked",))]),
        tools=[pick],
        **options,
    )


class RaisingClientTool:
    """An ``on_client_tool`` handler that records each call and raises ``LookupError``."""

    def __init__(self) -> None:
        self.seen: list[OpenClientToolCall] = []

    def __call__(self, callback: OpenClientToolCall) -> int:
        self.seen.append(callback)
        raise LookupError("no user at the keyboard")


async def test_the_value_on_client_tool_returns_is_the_result_the_model_sees() -> None:
    model = Recorder("you picked 7")
    run_pick = Handler(7)
    async with open_runtime():
        session = await picking_agent(model).start_session(on_client_tool=run_pick)
        record = await session.run("pick one")
    assert isinstance(record, Completed)
    assert record.output == "you picked 7"
    (callback,) = run_pick.seen
    assert isinstance(callback, OpenClientToolCall)
    assert (callback.tool_name, callback.arguments) == ("client.pick", {"prompt": "a number?"})
    (result,) = tool_results(model.requests[0])
    assert not result.is_error
    assert result.structured_content == 7


async def test_on_client_tool_returning_a_wrong_shape_raises_and_keeps_the_call_open() -> None:
    run_pick = Handler({"number": "seven"})
    async with open_runtime():
        session = await picking_agent().start_session(on_client_tool=run_pick)
        with pytest.raises(ClientToolAnswerError, match="on_client_tool") as raised:
            await session.run("pick one")
        (callback,) = run_pick.seen
        state = await session.turn(callback.turn_id).get()
        record = await finish_by_hand(session, callback.turn_id, 7)
    assert callback.id in str(raised.value)
    assert "seven" not in str(raised.value)
    assert open_callbacks(state) == (callback,)
    assert isinstance(record, Completed)


async def test_on_client_tool_raising_is_reported_to_the_model_and_the_wait_goes_on() -> None:
    model = Recorder("nobody picked")
    failing = RaisingClientTool()
    async with open_runtime():
        session = await picking_agent(model, tool_errors="report").start_session(
            on_client_tool=failing
        )
        record = await session.run("pick one")
    assert isinstance(record, Completed)
    assert record.output == "nobody picked"
    assert len(failing.seen) == 1
    (result,) = tool_results(model.requests[0])
    assert result.is_error
    assert result.text == "LookupError: no user at the keyboard"


async def test_on_client_tool_raising_with_tool_errors_raise_propagates_from_result() -> None:
    failing = RaisingClientTool()
    async with open_runtime():
        session = await picking_agent(tool_errors="raise").start_session(on_client_tool=failing)
        turn = await session.start_turn("pick one")
        assert isinstance(turn, agentlib.Turn)
        with pytest.raises(LookupError, match="no user at the keyboard") as raised:
            await turn.result()
        state = await turn.get()
        record = await finish_by_hand(session, turn.id, 3)
    assert type(raised.value) is LookupError
    assert open_callbacks(state) == tuple(failing.seen)
    assert isinstance(record, Completed)


# -- concurrent waits -------------------------------------------------------------------------


class HeldApproval:
    """An async ``on_approval`` that answers only once the test lets it."""

    def __init__(self, answer: Any = None) -> None:
        self.answer = answer if answer is not None else AllowApproval()
        self.seen: list[OpenApproval] = []
        self.release = trio.Event()

    async def __call__(self, callback: OpenApproval) -> Any:
        self.seen.append(callback)
        await self.release.wait()
        return self.answer


async def release_once_all_wait(handler: HeldApproval) -> None:
    await trio.testing.wait_all_tasks_blocked()
    handler.release.set()


async def test_two_concurrent_results_run_the_handler_once_and_get_the_same_record() -> None:
    deletions = Deletions()
    handler = HeldApproval()
    records: list[agentlib.TurnState[Any]] = []
    async with open_runtime():
        session = await approval_agent(
            deletions.deleted, call_tool("delete", path="a.txt"), "deleted it"
        ).start_session(on_approval=handler)
        turn = await session.start_turn("delete a.txt")
        assert isinstance(turn, agentlib.Turn)

        async def wait() -> None:
            records.append(await session.turn(turn.id).result())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            nursery.start_soon(wait)
            nursery.start_soon(release_once_all_wait, handler)
    assert len(handler.seen) == 1
    assert deletions.deleted == ["a.txt"]
    first, second = records
    assert isinstance(first, Completed)
    assert first == second


async def test_run_and_result_together_run_the_handler_once() -> None:
    deletions = Deletions()
    handler = HeldApproval()
    started = trio.Event()
    turn_ids: list[str] = []

    def first_step(request: ModelRequest) -> ModelReply:
        turn_ids.append(request.turn_id)
        started.set()
        return call_tool("delete", path="a.txt")

    agent = Agent(
        "approver", model=ScriptedModel([first_step, "deleted it"]), tools=[deletions.tool]
    )
    records: list[agentlib.TurnState[Any]] = []
    async with open_runtime():
        session = await agent.start_session(on_approval=handler)

        async def run() -> None:
            records.append(await session.run("delete a.txt"))

        async def result() -> None:
            await started.wait()
            records.append(await session.turn(turn_ids[0]).result())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            nursery.start_soon(result)
            nursery.start_soon(release_once_all_wait, handler)
    assert len(handler.seen) == 1
    assert deletions.deleted == ["a.txt"]
    first, second = records
    assert isinstance(first, Completed)
    assert first == second


async def test_two_concurrent_results_both_raise_the_one_failure_of_the_handler() -> None:
    deletions = Deletions()
    handler = HeldApproval()
    failures: list[BaseException] = []

    async def fail_when_released(callback: OpenApproval) -> Any:
        handler.seen.append(callback)
        await handler.release.wait()
        raise Boom("no approver")

    async with open_runtime():
        session = await approval_agent(
            deletions.deleted, call_tool("delete", path="a.txt"), "done"
        ).start_session(on_approval=fail_when_released)
        turn = await session.start_turn("delete a.txt")
        assert isinstance(turn, agentlib.Turn)

        async def wait() -> None:
            with pytest.raises(Boom) as raised:
                await session.turn(turn.id).result()
            failures.append(raised.value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            nursery.start_soon(wait)
            nursery.start_soon(release_once_all_wait, handler)
        state = await turn.get()
    assert len(handler.seen) == 1
    assert [str(failure) for failure in failures] == ["no approver", "no approver"]
    assert open_callbacks(state) == tuple(handler.seen)


async def test_the_second_of_two_waits_raises_a_copy_of_the_handlers_failure() -> None:
    # Each wait raises its own exception object, so neither adds its frames to the other's
    # traceback; the copy names the original as its cause.
    deletions = Deletions()
    handler = HeldApproval()
    failures: list[BaseException] = []

    async def fail_when_released(callback: OpenApproval) -> Any:
        handler.seen.append(callback)
        await handler.release.wait()
        raise Boom("no approver")

    async with open_runtime():
        session = await approval_agent(
            deletions.deleted, call_tool("delete", path="a.txt"), "done"
        ).start_session(on_approval=fail_when_released)
        turn = await session.start_turn("delete a.txt")
        assert isinstance(turn, agentlib.Turn)

        async def wait() -> None:
            with pytest.raises(Boom) as raised:
                await session.turn(turn.id).result()
            failures.append(raised.value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            nursery.start_soon(wait)
            nursery.start_soon(release_once_all_wait, handler)
    assert len(handler.seen) == 1
    assert [type(failure) for failure in failures] == [Boom, Boom]
    first, second = failures
    assert first is not second
    (original,) = [failure for failure in failures if failure.__cause__ is None]
    (copy,) = [failure for failure in failures if failure is not original]
    assert copy.__cause__ is original
    assert str(copy) == str(original) == "no approver"


async def test_two_equal_references_waiting_together_run_the_client_tool_handler_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[OpenClientToolCall] = []

    async def slow_pick(callback: OpenClientToolCall) -> int:
        seen.append(callback)
        await trio.sleep(1)
        return 7

    records: list[agentlib.TurnState[Any]] = []
    async with open_runtime():
        agent = picking_agent("picked 7")
        started = await agent.start_session()
        turn = await started.start_turn("pick one")
        assert isinstance(turn, agentlib.Turn)
        first = agent.session(started.id, on_client_tool=slow_pick)
        second = agent.session(started.id, on_client_tool=slow_pick)
        assert first == second
        assert first is not second

        async def wait(reference: agentlib.Session) -> None:
            records.append(await reference.turn(turn.id).result())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait, first)
            nursery.start_soon(wait, second)
    assert len(seen) == 1
    assert [type(record) for record in records] == [Completed, Completed]
    assert records[0] == records[1]


async def test_the_handler_runs_once_for_each_of_two_callbacks_in_sequence() -> None:
    deletions = Deletions()
    approve = AsyncHandler(AllowApproval())
    async with open_runtime():
        agent = approval_agent(
            deletions.deleted,
            call_tool("delete", path="a.txt"),
            call_tool("delete", path="b.txt"),
            "deleted both",
        )
        session = await agent.start_session(on_approval=approve)
        record = await session.run("delete both")
    assert isinstance(record, Completed)
    assert [callback.arguments for callback in approve.seen] == [
        {"path": "a.txt"},
        {"path": "b.txt"},
    ]
    assert len({callback.id for callback in approve.seen}) == 2
    assert deletions.deleted == ["a.txt", "b.txt"]


async def test_on_approval_allowing_for_the_session_is_asked_once_for_that_tool() -> None:
    deletions = Deletions()
    approve = Handler(AllowApproval(scope="session"))
    async with open_runtime():
        agent = approval_agent(
            deletions.deleted,
            call_tool("delete", path="a.txt"),
            call_tool("delete", path="b.txt"),
            "deleted both",
        )
        session = await agent.start_session(on_approval=approve)
        record = await session.run("delete both")
    assert isinstance(record, Completed)
    assert [callback.arguments for callback in approve.seen] == [{"path": "a.txt"}]
    assert deletions.deleted == ["a.txt", "b.txt"]


async def test_the_handler_runs_once_for_each_of_two_parallel_calls() -> None:
    deletions = Deletions()
    approve = AsyncHandler(AllowApproval())
    both = ModelReply(
        tool_calls=[
            ToolCallRequest(name="delete", arguments={"path": "a.txt"}),
            ToolCallRequest(name="delete", arguments={"path": "b.txt"}),
        ]
    )
    agent = Agent("approver", model=ScriptedModel([both, "deleted both"]), tools=[deletions.tool])
    async with open_runtime():
        session = await agent.start_session(on_approval=approve)
        record = await session.run("delete both")
    assert isinstance(record, Completed)
    assert sorted(callback.arguments["path"] for callback in approve.seen) == ["a.txt", "b.txt"]
    assert sorted(deletions.deleted) == ["a.txt", "b.txt"]


async def test_a_callback_kept_open_waits_for_the_handler_still_answering_another(
    autojump_clock: trio.testing.MockClock,
) -> None:
    deletions = Deletions()

    async def keep_a_answer_b_later(callback: OpenApproval) -> Any:
        if callback.arguments["path"] == "a.txt":
            return KeepCallbackOpen()
        await trio.sleep(10)  # still at work when the other callback is kept open
        return AllowApproval()

    both = ModelReply(
        tool_calls=[
            ToolCallRequest(name="delete", arguments={"path": "a.txt"}),
            ToolCallRequest(name="delete", arguments={"path": "b.txt"}),
        ]
    )
    agent = Agent("approver", model=ScriptedModel([both, "done"]), tools=[deletions.tool])
    async with open_runtime():
        session = await agent.start_session(on_approval=keep_a_answer_b_later)
        record = await session.run("delete both")
        assert trio.current_time() == pytest.approx(10)
        assert isinstance(record, Blocked)
        assert [callback.arguments["path"] for callback in record.callbacks] == ["a.txt"]
        # The other answer was not lost: the turn goes on with its call, which may still be
        # on its way when the wait returns Blocked on the callback left open.
        await trio.testing.wait_all_tasks_blocked()
        assert deletions.deleted == ["b.txt"]
        await session.cancel()


# -- handlers run only while a wait is active -------------------------------------------------


async def test_a_handler_runs_only_while_a_wait_of_its_reference_is_active() -> None:
    deletions = Deletions()
    approve = Handler(AllowApproval())
    async with open_runtime():
        session = await approval_agent(
            deletions.deleted, call_tool("delete", path="a.txt"), "deleted it"
        ).start_session(on_approval=approve)
        turn = await session.start_turn("delete a.txt")
        assert isinstance(turn, agentlib.Turn)
        await trio.testing.wait_all_tasks_blocked()
        state = await turn.get()
        await trio.testing.wait_all_tasks_blocked()
        assert approve.seen == []
        assert deletions.deleted == []

        record = await turn.result()
    assert len(open_callbacks(state)) == 1
    assert isinstance(record, Completed)
    assert approve.seen == list(open_callbacks(state))
    assert deletions.deleted == ["a.txt"]


# -- timeouts ---------------------------------------------------------------------------------


async def test_a_timeout_counts_the_approval_handlers_time_and_the_handler_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The wait returns at its timeout; the handler it started is not cut off (a person may be
    # typing the answer), and its answer is sent when it comes.
    deletions = Deletions()
    seen: list[OpenApproval] = []

    async def slow(callback: OpenApproval) -> AllowApproval:
        seen.append(callback)
        await trio.sleep(10)
        return AllowApproval()

    async with open_runtime():
        session = await approval_agent(
            deletions.deleted, call_tool("delete", path="a.txt"), "deleted it"
        ).start_session(on_approval=slow)
        start = trio.current_time()
        record = await session.run("delete a.txt", timeout=5)
        waited = trio.current_time() - start
        state = await session.turn(record.turn_id).result(after=record)
    assert waited == pytest.approx(5)
    assert open_callbacks(record) == tuple(seen)
    assert isinstance(state, Completed)
    assert trio.current_time() - start == pytest.approx(10)
    assert len(seen) == 1  # the second wait shared the run the first one started
    assert deletions.deleted == ["a.txt"]


async def test_a_handler_run_ends_when_its_callback_is_answered_elsewhere(
    autojump_clock: trio.testing.MockClock,
) -> None:
    deletions = Deletions()
    cancelled: list[bool] = []

    async def forever(callback: OpenApproval) -> AllowApproval:
        try:
            await trio.sleep_forever()
        finally:
            cancelled.append(True)

    async with open_runtime():
        session = await approval_agent(
            deletions.deleted, call_tool("delete", path="a.txt"), "deleted it"
        ).start_session(on_approval=forever)
        record = await session.run("delete a.txt", timeout=5)
        turn = session.turn(record.turn_id)
        await turn.answer(open_callbacks(record)[0].id, DenyApproval(reason="by hand"))
        final = await turn.result(after=record)
        await trio.testing.wait_all_tasks_blocked()
    assert isinstance(final, Completed)
    assert cancelled == [True]
    assert deletions.deleted == []


async def test_a_timeout_does_not_count_the_client_tool_handlers_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow(callback: OpenClientToolCall) -> int:
        await trio.sleep(10)
        return 4

    async with open_runtime():
        session = await picking_agent("picked 4").start_session(on_client_tool=slow)
        start = trio.current_time()
        record = await session.run("pick one", timeout=5)
        waited = trio.current_time() - start
    assert isinstance(record, Completed)
    assert record.output == "picked 4"
    assert waited == pytest.approx(10)


async def test_a_timeout_counts_the_model_time_around_a_client_tool_handler(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def think_then_pick(request: ModelRequest) -> ModelReply:
        await trio.sleep(3)
        return call_tool("client.pick", prompt="a number?")

    async def think_long(request: ModelRequest) -> str:
        await trio.sleep(10)
        return "picked 4"

    async def slow(callback: OpenClientToolCall) -> int:
        await trio.sleep(10)
        return 4

    agent = Agent("picker", model=ScriptedModel([think_then_pick, think_long]), tools=[pick])
    async with open_runtime():
        session = await agent.start_session(on_client_tool=slow)
        start = trio.current_time()
        record = await session.run("pick one", timeout=5)
        waited = trio.current_time() - start
        final = await session.turn(record.turn_id).result()
    # 3 s of model, 10 s of client tool (not counted), then 2 s more of model.
    assert isinstance(record, Running)
    assert waited == pytest.approx(15)
    assert isinstance(final, Completed)


async def test_a_timeout_counts_an_approval_handler_running_alongside_a_client_tool_handler(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The client tool's handler time is not counted, but the approval's, at the same time, is.
    deletions = Deletions()

    async def slow_pick(callback: OpenClientToolCall) -> int:
        await trio.sleep(10)
        return 7

    async def slow_approval(callback: OpenApproval) -> AllowApproval:
        await trio.sleep(10)
        return AllowApproval()

    both = ModelReply(
        tool_calls=[
            ToolCallRequest(name="client.pick", arguments={"prompt": "a number?"}),
            ToolCallRequest(name="delete", arguments={"path": "a.txt"}),
        ]
    )
    agent = Agent("both", model=ScriptedModel([both, "done"]), tools=[pick, deletions.tool])
    async with open_runtime():
        session = await agent.start_session(on_client_tool=slow_pick, on_approval=slow_approval)
        start = trio.current_time()
        record = await session.run("pick and delete", timeout=5)
        waited = trio.current_time() - start
        await session.cancel()
    assert waited == pytest.approx(5)
    assert sorted(callback.tool_name for callback in open_callbacks(record)) == [
        "client.pick",
        "delete",
    ]
    assert deletions.deleted == []


# -- a wait without handlers ------------------------------------------------------------------


async def test_a_wait_without_handlers_returns_blocked_at_once_when_another_reference_has_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    deletions = Deletions()
    approve = Handler(AllowApproval())
    async with open_runtime():
        agent = approval_agent(deletions.deleted, call_tool("delete", path="a.txt"), "deleted it")
        with_handler = await agent.start_session(on_approval=approve)
        plain = agent.session(with_handler.id)
        turn = await plain.start_turn("delete a.txt")
        assert isinstance(turn, agentlib.Turn)
        start = trio.current_time()
        record = await turn.result()
        waited = trio.current_time() - start
    assert waited == 0
    assert len(open_callbacks(record)) == 1
    assert approve.seen == []
    assert deletions.deleted == []


async def test_a_wait_without_handlers_returns_blocked_while_another_references_handler_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    deletions = Deletions()
    handler = HeldApproval()
    records: list[agentlib.TurnState[Any]] = []
    async with open_runtime():
        agent = approval_agent(deletions.deleted, call_tool("delete", path="a.txt"), "deleted it")
        with_handler = await agent.start_session(on_approval=handler)
        turn = await with_handler.start_turn("delete a.txt")
        assert isinstance(turn, agentlib.Turn)
        async with trio.open_nursery() as nursery:

            async def handled() -> None:
                records.append(await turn.result())

            nursery.start_soon(handled)
            await trio.testing.wait_all_tasks_blocked()
            assert len(handler.seen) == 1  # the handler runs, holding its answer
            start = trio.current_time()
            plain_record = await agent.session(with_handler.id).turn(turn.id).result()
            waited = trio.current_time() - start
            handler.release.set()
    assert waited == 0
    assert open_callbacks(plain_record) == tuple(handler.seen)
    (record,) = records
    assert isinstance(record, Completed)
    assert deletions.deleted == ["a.txt"]


async def test_callback_events_show_a_handlers_answer() -> None:
    deletions = Deletions()
    async with open_runtime():
        session = await approval_agent(
            deletions.deleted, call_tool("delete", path="a.txt"), "done"
        ).start_session(on_approval=Handler(DenyApproval(reason="no")))
        record = await session.run("delete a.txt")
        events = [event async for event in session.turn(record.turn_id).iter_events()]
    opened = [event.callback for event in events if isinstance(event, CallbackOpened)]
    closed = [event for event in events if isinstance(event, CallbackClosed)]
    assert [callback.id for callback in opened] == [event.callback_id for event in closed]
    assert [(event.answer, event.answered) for event in closed] == [
        (DenyApproval(reason="no"), True)
    ]
    assert isinstance(record, Completed)


async def test_a_handler_answering_after_the_turn_was_answered_by_hand_changes_nothing() -> None:
    deletions = Deletions()
    handler = HeldApproval(DenyApproval(reason="too late"))
    records: list[agentlib.TurnState[Any]] = []
    async with open_runtime():
        session = await approval_agent(
            deletions.deleted, call_tool("delete", path="a.txt"), "deleted it"
        ).start_session(on_approval=handler)
        turn = await session.start_turn("delete a.txt")
        assert isinstance(turn, agentlib.Turn)
        async with trio.open_nursery() as nursery:

            async def handled() -> None:
                records.append(await turn.result())

            nursery.start_soon(handled)
            await trio.testing.wait_all_tasks_blocked()
            (callback,) = handler.seen
            answered = await turn.answer(callback.id, AllowApproval())
            handler.release.set()
        state = await turn.get()
    assert answered == Answered(answer=AllowApproval(), session_id=session.id)
    (record,) = records
    assert isinstance(record, Completed)
    assert record == state
    assert deletions.deleted == ["a.txt"]


async def test_a_wait_whose_handler_was_overtaken_by_hand_returns_blocked_on_the_next_callback(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The approval's handler never answers; once the approval is answered by hand, the wait
    # no longer waits on that handler and returns at the client tool call it has no handler for.
    deletions = Deletions()
    seen: list[OpenApproval] = []
    never = trio.Event()

    async def never_answers(callback: OpenApproval) -> AllowApproval:
        seen.append(callback)
        await never.wait()
        return AllowApproval()

    steps = [
        call_tool("delete", path="a.txt"),
        call_tool("client.pick", prompt="a number?"),
        "done",
    ]
    agent = Agent("both", model=ScriptedModel(steps), tools=[deletions.tool, pick])
    records: list[agentlib.TurnState[Any]] = []
    async with open_runtime():
        session = await agent.start_session(on_approval=never_answers)
        turn = await session.start_turn("delete a.txt, then pick")
        assert isinstance(turn, agentlib.Turn)

        async def wait() -> None:
            with trio.fail_after(5):
                records.append(await turn.result())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            (approval,) = seen
            answered = await turn.answer(approval.id, AllowApproval())
        await session.cancel()
    assert isinstance(answered, Answered)
    assert deletions.deleted == ["a.txt"]
    (record,) = records
    (callback,) = open_callbacks(record)
    assert isinstance(callback, OpenClientToolCall)
    assert callback.tool_name == "client.pick"


# -- leaving a wait ---------------------------------------------------------------------------


async def test_a_cancelled_wait_notes_that_the_turn_goes_on_and_how_to_stop_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = Gate()
    notes: list[str] = []
    async with open_runtime():
        session = await held_agent(gate, "done").start_session()
        turn = await held_turn(session, gate)
        with trio.move_on_after(1) as scope:
            try:
                await turn.result()
            except trio.Cancelled as cancelled:
                notes.extend(getattr(cancelled, "__notes__", []))
                raise
        state = await turn.get()
        gate.opened.set()
        record = await turn.result()
    assert scope.cancelled_caught
    assert any(
        turn.id in note and session.id in note and "interrupt()" in note for note in notes
    ), notes
    assert isinstance(state, Running)
    assert isinstance(record, Completed)
