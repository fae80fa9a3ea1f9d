"""Callbacks through agentlib_sync: handlers that are plain functions run in a worker thread
(so they may block, and may call agentlib_sync), async handlers run as they are, and
``turn.answer`` is a blocking call that any thread may make."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest

import agentlib_sync as agents

from ._support import WAIT, BlockingApproval, call_tool, in_thread, scripted_agent

ENGINE_THREAD = "agentlib-engine"


class Deletions:
    """A tool, ``delete``, that requires approval and records the paths it deleted."""

    def __init__(self) -> None:
        self.deleted: list[str] = []
        self._lock = threading.Lock()

        @agents.tool(requires_approval=True)
        def delete(path: str) -> str:
            """Delete a file."""
            with self._lock:
                self.deleted.append(path)
            return f"deleted {path}"

        self.tool = delete


def approval_agent(deletions: Deletions, **options: Any) -> agents.Agent:
    return scripted_agent(
        call_tool("delete", path="a.txt"), "deleted it", tools=[deletions.tool], **options
    )


@agents.client_tool
def pick(prompt: str) -> int:
    """Ask the user to pick a number."""
    ...


def picking_agent(*then: Any, **options: Any) -> agents.Agent:
    return scripted_agent(
        call_tool("client.pick", prompt="a number?"),
        *(then or ("picked",)),
        tools=[pick],
        **options,
    )


def blocked_callback(record: Any) -> agents.OpenApproval:
    """The one approval a ``Blocked`` record lists."""
    assert isinstance(record, agents.Blocked), record
    (callback,) = record.callbacks
    assert isinstance(callback, agents.OpenApproval)
    return callback


def engine_thread() -> threading.Thread:
    (thread,) = [t for t in threading.enumerate() if t.name == ENGINE_THREAD]
    return thread


# -- plain handlers run in a worker thread ----------------------------------------------------


def test_a_plain_on_approval_may_block_on_another_thread_and_run_completes() -> None:
    deletions = Deletions()
    agent = approval_agent(deletions)
    approve = BlockingApproval()
    # The engine answers while the handler blocks: it does not block the engine's thread.
    approve.start(lambda seen: agent.session(seen.session_id).turn(seen.turn_id).get())
    record = agent.start_session(on_approval=approve).run("delete a.txt")

    assert approve.join()
    assert isinstance(record, agents.Completed)
    assert record.output == "deleted it"
    assert deletions.deleted == ["a.txt"]
    (thread,) = approve.handler_threads
    assert thread is not threading.main_thread()
    assert thread is not engine_thread()
    assert thread.name != ENGINE_THREAD
    assert [blocked_callback(state) for state in approve.states_while_blocked] == approve.seen


def test_a_plain_handler_may_call_agentlib_sync() -> None:
    deletions = Deletions()
    agent = approval_agent(deletions)
    states: list[Any] = []
    seen: list[agents.OpenApproval] = []

    def approve(callback: agents.OpenApproval) -> agents.AllowApproval:
        seen.append(callback)
        states.append(agent.session(callback.session_id).turn(callback.turn_id).get())
        return agents.AllowApproval()

    record = agent.start_session(on_approval=approve).run("delete a.txt")

    assert isinstance(record, agents.Completed)
    assert [blocked_callback(state) for state in states] == seen
    assert deletions.deleted == ["a.txt"]


def test_an_exception_from_a_plain_on_approval_reaches_the_caller_of_run() -> None:
    class Boom(Exception):
        pass

    deletions = Deletions()
    seen: list[agents.OpenApproval] = []

    def fail(callback: agents.OpenApproval) -> agents.AllowApproval:
        seen.append(callback)
        raise Boom("no approver")

    session = approval_agent(deletions).start_session(on_approval=fail)
    with pytest.raises(Boom, match="no approver") as raised:
        session.run("delete a.txt")

    assert type(raised.value) is Boom
    (callback,) = seen
    assert blocked_callback(session.turn(callback.turn_id).get()) == callback
    assert deletions.deleted == []


def test_keep_callback_open_from_a_plain_handler_makes_run_return_blocked() -> None:
    deletions = Deletions()
    seen: list[agents.OpenApproval] = []

    def keep(callback: agents.OpenApproval) -> agents.KeepCallbackOpen:
        seen.append(callback)
        return agents.KeepCallbackOpen()

    record = approval_agent(deletions).start_session(on_approval=keep).run("delete a.txt")

    assert [blocked_callback(record)] == seen
    assert deletions.deleted == []


def test_a_wait_after_one_that_timed_out_shares_the_handler_run_it_left() -> None:
    # The first wait times out while the plain handler blocks; the run goes on, and the second
    # wait, started while it still blocks, waits on that run instead of starting another.
    deletions = Deletions()
    entered = threading.Event()
    release = threading.Event()
    seen: list[agents.OpenApproval] = []

    def approve_when_released(callback: agents.OpenApproval) -> agents.AllowApproval:
        seen.append(callback)
        entered.set()
        assert release.wait(WAIT), "the test never released the handler"
        return agents.AllowApproval()

    def release_when_it_sees_the_approval(event: agents.Event) -> None:
        # Runs on the engine's thread: the second wait takes up the approval right after,
        # before the handler's answer can be taken.
        if isinstance(event, agents.CallbackOpened):
            release.set()

    session = approval_agent(deletions).start_session(on_approval=approve_when_released)
    turn = session.start_turn("delete a.txt")
    assert isinstance(turn, agents.Turn)
    # Following the events runs no handler: the approval is open, unhandled, before the first
    # wait, which times out Blocked however long the turn took to get there.
    with contextlib.closing(turn.iter_events()) as events:
        assert any(isinstance(event, agents.CallbackOpened) for event in events)

    first = turn.result(timeout=0.5)
    assert entered.wait(WAIT), "the first wait left without starting the handler"
    second = in_thread(lambda: turn.result(on_event=release_when_it_sees_the_approval))

    assert isinstance(first, agents.Blocked)
    assert isinstance(second, agents.Completed)
    assert [blocked_callback(first)] == seen
    assert deletions.deleted == ["a.txt"]


# -- async handlers ---------------------------------------------------------------------------


def test_an_async_handler_runs_as_it_is_on_the_engine_thread() -> None:
    deletions = Deletions()
    handler_threads: list[threading.Thread] = []

    async def approve(callback: agents.OpenApproval) -> agents.AllowApproval:
        handler_threads.append(threading.current_thread())
        return agents.AllowApproval()

    record = approval_agent(deletions).start_session(on_approval=approve).run("delete a.txt")

    assert isinstance(record, agents.Completed)
    assert deletions.deleted == ["a.txt"]
    assert [thread.name for thread in handler_threads] == [ENGINE_THREAD]


def test_an_async_callable_object_handler_works_too() -> None:
    # The async API takes any handler whose call returns an awaitable; so must its twin.
    class Approve:
        def __init__(self) -> None:
            self.seen: list[agents.OpenApproval] = []

        async def __call__(self, callback: agents.OpenApproval) -> agents.AllowApproval:
            self.seen.append(callback)
            return agents.AllowApproval()

    deletions = Deletions()
    approve = Approve()

    record = approval_agent(deletions).start_session(on_approval=approve).run("delete a.txt")

    assert isinstance(record, agents.Completed)
    assert len(approve.seen) == 1
    assert deletions.deleted == ["a.txt"]


# -- turn.answer --------------------------------------------------------------------------------


def test_turn_answer_settles_the_approval_then_result_after_completes() -> None:
    deletions = Deletions()
    session = approval_agent(deletions).start_session()
    blocked = session.run("delete a.txt")
    callback = blocked_callback(blocked)
    turn = session.turn(blocked.turn_id)

    answered = turn.answer(callback.id, agents.AllowApproval())
    record = turn.result(after=blocked)

    assert answered == agents.Answered(answer=agents.AllowApproval(), session_id=session.id)
    assert isinstance(record, agents.Completed)
    assert record.output == "deleted it"
    assert deletions.deleted == ["a.txt"]
    assert isinstance(turn.answer(callback.id, agents.AllowApproval()), agents.AlreadySettled)


def test_turn_answer_with_an_id_that_is_not_a_uuid_raises_value_error() -> None:
    deletions = Deletions()
    session = approval_agent(deletions).start_session()
    blocked = session.run("delete a.txt")
    callback = blocked_callback(blocked)

    with pytest.raises(ValueError, match="UUID"):
        session.turn(blocked.turn_id).answer("not-a-uuid", agents.AllowApproval())

    assert blocked_callback(session.turn(blocked.turn_id).get()) == callback


def test_turn_answer_with_a_bool_raises_sdk_error_and_keeps_the_approval_open() -> None:
    deletions = Deletions()
    session = approval_agent(deletions).start_session()
    blocked = session.run("delete a.txt")
    callback = blocked_callback(blocked)

    with pytest.raises(agents.SdkError, match="AllowApproval"):
        session.turn(blocked.turn_id).answer(callback.id, True)

    assert blocked_callback(session.turn(blocked.turn_id).get()) == callback
    assert deletions.deleted == []


def test_concurrent_answers_from_ten_threads_settle_the_approval_once() -> None:
    deletions = Deletions()
    session = approval_agent(deletions).start_session()
    blocked = session.run("delete a.txt")
    callback = blocked_callback(blocked)
    answers: list[agents.AllowApproval | agents.DenyApproval] = [
        agents.AllowApproval() if index % 2 else agents.DenyApproval(reason=f"no {index}")
        for index in range(10)
    ]
    barrier = threading.Barrier(len(answers), timeout=WAIT)
    outcomes: list[Any] = [None] * len(answers)

    def answer(index: int) -> None:
        turn = session.turn(blocked.turn_id)
        barrier.wait()
        outcomes[index] = turn.answer(callback.id, answers[index])

    threads = [threading.Thread(target=answer, args=(i,), daemon=True) for i in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)

    assert not any(thread.is_alive() for thread in threads)
    answered = [outcome for outcome in outcomes if isinstance(outcome, agents.Answered)]
    settled = [outcome for outcome in outcomes if isinstance(outcome, agents.AlreadySettled)]
    assert len(answered) + len(settled) == len(answers)
    assert answered, "no answer was taken"
    taken = answered[0].answer
    assert taken in answers
    assert all(outcome.answer == taken for outcome in answered)
    assert all(outcome.session_id == session.id for outcome in answered + settled)
    record = session.turn(blocked.turn_id).result(after=blocked)
    assert isinstance(record, agents.Completed)
    closed = [
        event
        for event in session.turn(blocked.turn_id).iter_events()
        if isinstance(event, agents.CallbackClosed)
    ]
    assert [(event.callback_id, event.answer) for event in closed] == [(callback.id, taken)]
    expected = ["a.txt"] if isinstance(taken, agents.AllowApproval) else []
    assert deletions.deleted == expected


def test_turn_answer_may_be_called_from_a_helper_thread_while_run_waits() -> None:
    deletions = Deletions()
    session = approval_agent(deletions).start_session()
    turn = session.start_turn("delete a.txt")
    assert isinstance(turn, agents.Turn)
    blocked = in_thread(turn.result)
    callback = blocked_callback(blocked)

    answered = in_thread(lambda: turn.answer(callback.id, agents.DenyApproval(reason="no")))

    assert answered == agents.Answered(
        answer=agents.DenyApproval(reason="no"), session_id=session.id
    )
    assert isinstance(turn.result(after=blocked), agents.Completed)
    assert deletions.deleted == []


# -- on_client_tool ---------------------------------------------------------------------------


def test_a_plain_on_client_tool_returns_the_result_the_model_sees() -> None:
    seen: list[list[Any]] = []

    def answer(request: agents.ModelRequest) -> str:
        seen.append(
            [
                entry.structured_content
                for entry in request.entries
                if isinstance(entry, agents.ToolResultEntry)
            ]
        )
        return "you picked 7"

    calls: list[agents.OpenClientToolCall] = []

    def run_pick(callback: agents.OpenClientToolCall) -> int:
        calls.append(callback)
        return 7

    record = picking_agent(answer).start_session(on_client_tool=run_pick).run("pick one")

    assert isinstance(record, agents.Completed)
    assert record.output == "you picked 7"
    assert [(call.tool_name, call.arguments) for call in calls] == [
        ("client.pick", {"prompt": "a number?"})
    ]
    assert seen == [[7]]


def test_a_plain_on_client_tool_raising_with_tool_errors_raise_reaches_the_caller() -> None:
    calls: list[agents.OpenClientToolCall] = []

    def run_pick(callback: agents.OpenClientToolCall) -> int:
        calls.append(callback)
        raise LookupError("no user at the keyboard")

    session = picking_agent(tool_errors="raise").start_session(on_client_tool=run_pick)
    with pytest.raises(LookupError, match="no user at the keyboard") as raised:
        session.run("pick one")

    assert type(raised.value) is LookupError
    (call,) = calls
    state = session.turn(call.turn_id).get()
    assert isinstance(state, agents.Blocked)
    assert state.callbacks == (call,)
