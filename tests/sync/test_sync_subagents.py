"""Subagents through agentlib_sync: delegation with blocking calls, a plain on_approval on the
root that answers a subagent's approval from a worker thread, ``session.subagents()`` as
blocking sessions, read-only subagent references, and ``turn.answer`` through the root.

Every wait is bounded: ``run``/``result`` take ``timeout=WAIT`` (a stuck turn comes back
``Running`` and fails the assertion), other blocking calls go through ``in_thread``.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest

import agentlib_sync as agents

from ._support import WAIT, BlockingApproval, Gate, call_tool, in_thread, scripted_agent

ENGINE_THREAD = "agentlib-engine"


def echo(prefix: str) -> Any:
    """A final step that answers ``"<prefix>: <text of the last entry>"``."""

    def step(request: agents.ModelRequest) -> str:
        return f"{prefix}: {request.entries[-1].text}"

    return step


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


def approval_pair(deletions: Deletions) -> tuple[agents.Agent, agents.Agent]:
    """(root, helper): the root delegates to helper, whose ``delete`` needs approval."""
    helper = scripted_agent(
        call_tool("delete", path="a.txt"),
        echo("helper"),
        name="helper",
        description="Deletes files.",
        tools=[deletions.tool],
    )
    root = scripted_agent(
        call_tool("helper", message="delete a.txt"), echo("root"), name="root", subagents=[helper]
    )
    return root, helper


def held_pair(gate: Gate) -> tuple[agents.Agent, agents.Agent]:
    """(root, helper): helper's model step parks at ``gate``; the root echoes its result."""
    helper = scripted_agent(gate, name="helper")
    root = scripted_agent(
        call_tool("helper", message="wait for it"), echo("root"), name="root", subagents=[helper]
    )
    return root, helper


def first_turn(session: agents.Session) -> agents.Turn:
    """The session's first turn (a subagent session has exactly one), from its log."""
    with contextlib.closing(session.iter_events()) as events:
        event = next(events)
    assert isinstance(event, agents.TurnStarted), event
    return session.turn(event.turn_id)


def engine_thread() -> threading.Thread:
    (thread,) = [t for t in threading.enumerate() if t.name == ENGINE_THREAD]
    return thread


def test_the_subagent_is_a_tool_and_its_answer_is_the_result() -> None:
    seen: list[agents.ModelRequest] = []

    def helper_step(request: agents.ModelRequest) -> str:
        seen.append(request)
        return "helped"

    helper = scripted_agent(helper_step, name="helper", description="Helps.")
    root = scripted_agent(
        call_tool("helper", message="help me"), echo("root"), name="root", subagents=[helper]
    )
    assert [(t.name, t.description) for t in root.agent.tool_schemas] == [("helper", "Helps.")]

    record = root.start_session().run("go", timeout=WAIT)

    assert isinstance(record, agents.Completed)
    assert record.text == "root: helped"
    (request,) = seen
    assert [entry.text for entry in request.entries] == ["help me"]


def test_a_plain_blocking_on_approval_on_the_root_answers_a_subagent_approval() -> None:
    deletions = Deletions()
    root, helper = approval_pair(deletions)
    approve = BlockingApproval()
    # The engine reads on while the handler blocks: the subagent's turn is Blocked.
    approve.start(lambda seen: helper.session(seen.session_id).turn(seen.turn_id).get())
    session = root.start_session(on_approval=approve)
    record = session.run("go", timeout=WAIT)

    assert approve.join()
    assert isinstance(record, agents.Completed)
    assert record.text == "root: helper: deleted a.txt"
    assert deletions.deleted == ["a.txt"]
    (child,) = session.subagents()
    (callback,) = approve.seen
    assert (callback.tool_name, callback.session_id) == ("delete", child.id)
    (thread,) = approve.handler_threads
    assert thread is not threading.main_thread()
    assert thread is not engine_thread()
    (blocked,) = approve.states_while_blocked
    assert isinstance(blocked, agents.Blocked)
    assert blocked.callbacks == (callback,)


def test_subagents_returns_sync_sessions_newest_first_that_read_like_any_session() -> None:
    helper = scripted_agent(echo("helper"), name="helper")
    root = scripted_agent(
        call_tool("helper", message="first task"),
        call_tool("helper", message="second task"),
        "done",
        name="root",
        subagents=[helper],
    )
    session = root.start_session()
    assert session.subagents() == []
    record = session.run("go", timeout=WAIT)

    children = session.subagents()

    assert isinstance(record, agents.Completed)
    assert [type(child) for child in children] == [agents.Session, agents.Session]
    assert children[0] != children[1]
    assert children[1] == helper.session(children[1].id)
    turns = [first_turn(child) for child in children]
    records = [turn.get() for turn in turns]
    assert all(isinstance(r, agents.Completed) for r in records)
    assert [r.text for r in records] == ["helper: second task", "helper: first task"]
    events = list(turns[0].iter_events())
    assert isinstance(events[0], agents.TurnStarted)
    assert events[0].message.text == "second task"
    assert isinstance(events[-1], agents.TurnEnded)
    assert all(event.session_id == children[0].id for event in events)
    assert children[0].subagents() == []


def test_subagent_references_are_read_only_but_interrupt_works() -> None:
    gate = Gate("never used")
    root, helper = held_pair(gate)
    session = root.start_session()
    turn = session.send_message("go")
    gate.wait_reached()
    (child,) = session.subagents()
    child_turn = first_turn(child)

    for reference in (child, helper.session(child.id)):
        with pytest.raises(agents.UnsupportedSessionProcedureError):
            reference.send_message("another task")
        with pytest.raises(agents.UnsupportedSessionProcedureError):
            reference.start_turn("another task")
        with pytest.raises(agents.UnsupportedSessionProcedureError):
            reference.run("another task", timeout=WAIT)
        with pytest.raises(agents.UnsupportedSessionProcedureError):
            reference.cancel()
        with pytest.raises(agents.UnsupportedSessionProcedureError):
            reference.turn(child_turn.id).steer("steer it")
    assert isinstance(child_turn.get(), agents.Running)

    stopped = in_thread(child_turn.interrupt)
    final = turn.result(timeout=WAIT)

    assert stopped == child_turn
    child_record = child_turn.get()
    assert isinstance(child_record, agents.Interrupted)
    assert child_record.cause == "interrupted"
    assert isinstance(final, agents.Completed)
    assert final.text == "root: the turn of helper was interrupted"


def test_turn_answer_through_the_root_settles_a_subagent_callback() -> None:
    deletions = Deletions()
    root, _ = approval_pair(deletions)
    session = root.start_session()
    record = session.run("go", timeout=WAIT)
    assert isinstance(record, agents.Blocked)
    (callback,) = record.callbacks
    (child,) = session.subagents()
    assert isinstance(callback, agents.OpenApproval)
    assert callback.session_id == child.id
    turn = session.turn(record.turn_id)

    answered = turn.answer(callback.id, agents.AllowApproval())
    final = turn.result(after=record, timeout=WAIT)

    assert answered == agents.Answered(answer=agents.AllowApproval(), session_id=child.id)
    assert isinstance(final, agents.Completed)
    assert final.text == "root: helper: deleted a.txt"
    assert deletions.deleted == ["a.txt"]
    assert turn.answer(callback.id, agents.AllowApproval()) == agents.NotFound()
    child_turn = child.turn(callback.turn_id)
    assert child_turn.answer(callback.id, agents.AllowApproval()) == agents.AlreadySettled(
        session_id=child.id
    )


def test_cancelling_the_root_cancels_the_subagent() -> None:
    gate = Gate("never used")
    root, _ = held_pair(gate)
    session = root.start_session()
    turn = session.send_message("go")
    gate.wait_reached()
    (child,) = session.subagents()
    child_turn = first_turn(child)

    in_thread(session.cancel)

    for record in (turn.get(), child_turn.get()):
        assert isinstance(record, agents.Interrupted), record
        assert record.cause == "cancelled"
    with pytest.raises(agents.SessionTerminatedError):
        session.send_message("again")


@pytest.mark.parametrize("value", [0, True, "2"])
def test_the_sync_agent_checks_max_running_subagents(value: Any) -> None:
    with pytest.raises(ValueError, match="max_running_subagents"):
        scripted_agent("x", max_running_subagents=value)


def test_the_sync_agent_refuses_a_subagent_name_that_is_not_an_identifier() -> None:
    helper = scripted_agent("x", name="my-agent")
    with pytest.raises(ValueError, match="my-agent"):
        scripted_agent("x", name="root", subagents=[helper])
