"""Turn records: output_or_raise, the short way to a completed turn's output."""

from __future__ import annotations

from typing import Any

import pytest
from _support import Gate, held_agent, held_turn

import agentlib
from agentlib import (
    Blocked,
    Busy,
    Completed,
    ErrorInfo,
    Failed,
    Interrupted,
    OpenApproval,
    OpenClientToolCall,
    OpenSignIn,
    Running,
    SdkError,
    TurnNotCompletedError,
    TurnState,
    UnknownCallback,
    UnknownOutcome,
    UnknownRecord,
)

# Each test runs on a local runtime and on agents served over HTTP (conftest's transport).
pytestmark = pytest.mark.usefixtures("transport")

IDS = {"turn_id": "t-1", "session_id": "s-1"}
CALLBACK_IDS = {"session_id": "s-1", "turn_id": "t-1"}


def raised_by(record: TurnState[Any] | Busy[Any]) -> TurnNotCompletedError:
    with pytest.raises(TurnNotCompletedError) as caught:
        record.output_or_raise()
    assert caught.value.record is record
    return caught.value


def test_output_or_raise_of_completed_returns_its_output() -> None:
    record: Completed[list[int]] = Completed(output=[1, 2], text="[1, 2]", **IDS)
    assert record.output_or_raise() == [1, 2]


def test_turn_not_completed_error_is_an_sdk_error() -> None:
    assert issubclass(TurnNotCompletedError, SdkError)


def test_output_or_raise_of_failed_names_the_error_type_and_message() -> None:
    error = raised_by(
        Failed(error=ErrorInfo(type="ModelError", message="401: check the key"), **IDS)
    )
    assert str(error) == "turn t-1 did not complete: it Failed with ModelError: 401: check the key"


@pytest.mark.parametrize("cause", ["interrupted", "cancelled"])
def test_output_or_raise_of_interrupted_names_the_cause(cause: Any) -> None:
    error = raised_by(Interrupted(cause=cause, **IDS))
    assert str(error) == f"turn t-1 did not complete: it was Interrupted (cause: {cause})"


def test_output_or_raise_of_unknown_outcome_names_the_reason() -> None:
    error = raised_by(UnknownOutcome(reason="the runtime stopped mid-turn", **IDS))
    assert "UnknownOutcome: the runtime stopped mid-turn" in str(error)


def test_output_or_raise_of_running_says_the_wait_ended_first() -> None:
    error = raised_by(Running(**IDS))
    assert str(error).startswith("turn t-1 did not complete: it is Running")


def test_output_or_raise_of_blocked_names_each_open_callback() -> None:
    record = Blocked(
        callbacks=[
            OpenApproval(id="c-1", tool_name="delete_branch", arguments={}, **CALLBACK_IDS),
            OpenClientToolCall(id="c-2", tool_name="client.pick", arguments={}, **CALLBACK_IDS),
            OpenSignIn(id="c-3", sources=["notion", "drive"], **CALLBACK_IDS),
            UnknownCallback(id="c-4", callback_type="captcha", raw={}, **CALLBACK_IDS),
        ],
        **IDS,
    )
    message = str(raised_by(record))
    assert "it is Blocked on 4 open callback(s)" in message
    assert "OpenApproval for delete_branch (id c-1)" in message
    assert "OpenClientToolCall for client.pick (id c-2)" in message
    assert "OpenSignIn for notion, drive (id c-3)" in message
    assert "a callback of type 'captcha' (id c-4)" in message


def test_output_or_raise_of_an_unknown_record_names_its_type() -> None:
    error = raised_by(UnknownRecord(record_type="paused", raw={}, **IDS))
    assert "'paused'" in str(error)


async def test_output_or_raise_of_busy_names_the_active_turn() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        active = await held_turn(session, gate)
        busy = await session.run("again?")
        gate.opened.set()
    assert isinstance(busy, Busy)
    error = raised_by(busy)
    assert f"no turn was started: the session is Busy with turn {active.id}" in str(error)


async def test_output_or_raise_of_a_run_returns_the_answer() -> None:
    agent = agentlib.Agent("a", model=agentlib.ScriptedModel(["The answer is 3."]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        assert (await session.run("1 + 2?")).output_or_raise() == "The answer is 3."


async def test_output_or_raise_of_a_failed_run_raises_with_the_turn_error() -> None:
    agent = agentlib.Agent("a", model=agentlib.ScriptedModel([]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("1 + 2?")
    with pytest.raises(TurnNotCompletedError, match="it Failed with ModelError: the scripted"):
        record.output_or_raise()
