"""A steered message is acknowledged only once stored: a runtime that resumes the turn gives
it to the model."""

from __future__ import annotations

from typing import Any

import agentlib
from agentlib import (
    Agent,
    AllowApproval,
    Blocked,
    Completed,
    MemoryStore,
    ModelReply,
    ModelRequest,
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
