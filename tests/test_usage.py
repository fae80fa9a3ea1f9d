"""Token usage: on the entry of each model reply, and summed on Completed.usage."""

from __future__ import annotations

import contextlib

import pytest

import agentlib
from agentlib import (
    Agent,
    Completed,
    Entry,
    EntryCompleted,
    MessageEntry,
    ModelReply,
    ScriptedModel,
    ToolCallEntry,
    ToolCallRequest,
    Usage,
)

# Each test runs on a local runtime and on agents served over HTTP (conftest's transport).
pytestmark = pytest.mark.usefixtures("transport")


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"value of {key}"


async def history(session: agentlib.Session, record: agentlib.TurnState[object]) -> list[Entry]:
    """The entries the session completed, through ``record``'s end."""
    entries: list[Entry] = []
    async with contextlib.aclosing(session.iter_events()) as events:
        async for event in events:
            if isinstance(event, EntryCompleted):
                entries.append(event.entry)
            if event.id == record.cursor:
                break
    return entries


def call(key: str) -> ToolCallRequest:
    return ToolCallRequest(name="lookup", arguments={"key": key})


async def test_usage_is_on_each_reply_entry_and_summed_on_completed() -> None:
    first = Usage(input_tokens=10, output_tokens=5, total_tokens=15)
    second = Usage(input_tokens=30, output_tokens=2, total_tokens=32)
    third = Usage(input_tokens=40, output_tokens=7, total_tokens=47)
    agent = Agent(
        "a",
        model=ScriptedModel(
            [
                ModelReply(tool_calls=[call("x"), call("y")], usage=first),  # no text
                ModelReply(text="Looking again.", tool_calls=[call("z")], usage=second),
                ModelReply(text="Done.", usage=third),
            ]
        ),
        tools=[lookup],
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("go")
        entries = await history(session, record)
    assert isinstance(record, Completed)
    assert record.usage == Usage(input_tokens=80, output_tokens=14, total_tokens=94, requests=3)
    calls = [entry for entry in entries if isinstance(entry, ToolCallEntry)]
    # A reply without text carries its usage on its first call; one with text, on the text.
    assert [entry.usage for entry in calls] == [first, None, None]
    said = [entry for entry in entries if isinstance(entry, MessageEntry) and entry.role != "user"]
    assert [(entry.text, entry.usage) for entry in said] == [
        ("Looking again.", second),
        ("Done.", third),
    ]
    assert record.tool_calls[0].usage == first


async def test_a_turn_whose_model_reports_no_usage_has_none() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("hello")
        entries = await history(session, record)
    assert isinstance(record, Completed)
    assert record.usage is None
    assert all(getattr(entry, "usage", None) is None for entry in entries)


async def test_each_turn_sums_its_own_replies_only() -> None:
    agent = Agent(
        "a",
        model=ScriptedModel(
            [
                ModelReply(
                    text="one", usage=Usage(input_tokens=1, output_tokens=1, total_tokens=2)
                ),
                ModelReply(
                    text="two", usage=Usage(input_tokens=5, output_tokens=1, total_tokens=6)
                ),
            ]
        ),
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        one = await session.run("1")
        two = await session.run("2")
    assert isinstance(one, Completed)
    assert isinstance(two, Completed)
    assert one.usage == Usage(input_tokens=1, output_tokens=1, total_tokens=2)
    assert two.usage == Usage(input_tokens=5, output_tokens=1, total_tokens=6)


def test_usages_add_up_and_refuse_what_is_not_a_count() -> None:
    total = Usage(input_tokens=1, output_tokens=2, total_tokens=3) + Usage(
        input_tokens=4, output_tokens=5, total_tokens=9, requests=2
    )
    assert total == Usage(input_tokens=5, output_tokens=7, total_tokens=12, requests=3)
    with pytest.raises(ValueError, match="input_tokens must be a count"):
        Usage(input_tokens=-1)
    with pytest.raises(ValueError, match="output_tokens must be a count"):
        Usage(output_tokens=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        total + 3  # type: ignore[operator]


async def test_usage_survives_the_store(tmp_path: object) -> None:
    usage = Usage(input_tokens=3, output_tokens=4, total_tokens=7)
    agent = Agent("a", model=ScriptedModel([ModelReply(text="hi", usage=usage)]))
    url = f"sqlite:///{tmp_path}/s.db"
    async with agentlib.open_runtime(url):
        session = await agent.start_session()
        record = await session.run("hello")
    async with agentlib.open_runtime(url):
        again = agent.session(session.id)
        assert await again.turn(record.turn_id).get() == record  # type: ignore[union-attr]
        entries = await history(again, record)
    assert entries[-1].usage == usage  # type: ignore[union-attr]
