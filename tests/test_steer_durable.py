"""A steered message is acknowledged only once stored: a runtime that resumes the turn, after a
restart or after a crash right after the steer returned, gives it to the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _support import (
    Recorder,
    call,
    crash_copy,
    deleter,
    only_callback,
    reply,
    settled,
    user_texts,
)

import agentlib
from agentlib import (
    Agent,
    AllowApproval,
    Blocked,
    Completed,
    MemoryStore,
    ModelReply,
    ModelRequest,
    OpenApproval,
    ScriptedModel,
    ToolCallRequest,
    tool,
)


@tool(requires_approval=True)
def publish(text: str) -> str:
    """Publish a text."""
    return "published"


def agent(seen: list[list[str]]) -> Agent:
    def answer(request: ModelRequest) -> str:
        seen.append([entry.text for entry in request.entries if hasattr(entry, "role")])
        return "done"

    return Agent(
        "publisher",
        model=ScriptedModel(
            [
                ModelReply(tool_calls=[ToolCallRequest(name="publish", arguments={"text": "x"})]),
                answer,
            ]
        ),
        tools=[publish],
    )


async def test_a_message_steered_into_a_blocked_turn_reaches_the_model_after_a_restart() -> None:
    store = MemoryStore()
    seen: list[list[str]] = []
    async with agentlib.open_runtime(store):
        session = await agent(seen).start_session()
        record: Any = await session.run("publish it")
        assert isinstance(record, Blocked)
        joined = await session.send_message("and tell me when it is out", idempotency_key="s1")
        assert joined.started is False
    async with agentlib.open_runtime(store):
        session = agent(seen).session(session.id)
        turn = session.turn(record.turn_id)
        await turn.answer(record.callbacks[0].id, AllowApproval())
        final = await turn.result(after=record)
        again = await session.send_message("and tell me when it is out", idempotency_key="s1")
    assert isinstance(final, Completed)
    assert seen[-1][-1] == "and tell me when it is out"
    assert again.id == turn.id  # the key still names the turn it joined


@pytest.mark.parametrize("how", ["turn.steer", "send_message"])
async def test_a_steered_message_is_in_the_store_once_acknowledged(
    tmp_path: Path, how: str
) -> None:
    """The process dies right after the steer returned: the copy holds the message, and the
    runtime that resumes the turn gives it to the model."""
    runs: list[str] = []
    recorder = Recorder("done")

    def make() -> Agent:
        return Agent(
            "a",
            model=ScriptedModel([reply(call("delete", path="/x")), recorder]),
            tools=[deleter(runs)],
        )

    live = tmp_path / "live"
    live.mkdir()
    async with agentlib.open_runtime(f"sqlite:///{live / 's.db'}"):
        session = await make().start_session()
        blocked = await session.run("go")
        approval = only_callback(blocked, OpenApproval)
        if how == "turn.steer":
            steered = await session.turn(blocked.turn_id).steer("PLEASE ALSO DO X")
        else:
            steered = await session.send_message("PLEASE ALSO DO X")
        assert isinstance(steered, agentlib.Turn)
        assert steered.id == blocked.turn_id
        crashed = crash_copy(live, tmp_path / "crashed")  # no checkpoint since it returned

    async with agentlib.open_runtime(crashed):
        turn = make().session(session.id).turn(blocked.turn_id)
        await turn.answer(approval.id, AllowApproval())
        record = await settled(turn)
        assert isinstance(record, Completed), record
    (request,) = recorder.requests
    assert user_texts(request) == ["go", "PLEASE ALSO DO X"]
    assert runs == ["/x"]
