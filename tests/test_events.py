"""Events: what a turn logs, replaying and following a session's log, cursors, on_event
(SPEC 3 and 6)."""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import pytest
import trio
from _support import HOLD, Gate, turn_events

import agentlib
from agentlib import (
    Agent,
    Completed,
    EntryAdded,
    EntryCompleted,
    EntryDelta,
    Event,
    HistoryImportMessage,
    MessageEntry,
    ModelReply,
    ModelRequest,
    ScriptedModel,
    TextContentBlock,
    ToolCallEntry,
    ToolCallRequest,
    ToolResultEntry,
    Turn,
    TurnEnded,
    TurnStarted,
)

# Each test runs on a local runtime and on agents served over HTTP (conftest's transport).
pytestmark = pytest.mark.usefixtures("transport")


@attrs.frozen
class Verdict:
    ok: bool


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


LOOKUP = ModelReply(tool_calls=[ToolCallRequest(name="lookup", arguments={"key": "k"})])


def kinds(events: list[Event]) -> list[str]:
    return [type(event).__name__ for event in events]


async def all_events(session: agentlib.Session, after: Any = None) -> list[Event]:
    """The events of a cancelled session (its log is closed, so iteration ends)."""
    return [event async for event in session.iter_events(after=after)]


async def first_event(events: Any) -> Event:
    """The first event of an iterator; fails at once (autojump clock) rather than hang."""
    with trio.fail_after(1):
        return await events.__anext__()  # type: ignore[no-any-return]


async def one_turn(agent: Agent, message: str = "hello") -> tuple[agentlib.Session, Turn]:
    """Start a session of ``agent`` and run one turn to its end (in the current runtime)."""
    session = await agent.start_session()
    turn = await session.send_message(message)
    await turn.result()
    return session, turn


# --- what a turn logs ---------------------------------------------------------------------


async def test_a_plain_answer_logs_start_user_message_streamed_answer_then_end() -> None:
    async with agentlib.open_runtime():
        _, turn = await one_turn(Agent("a", model=ScriptedModel(["hi"])))
        events = await turn_events(turn)
    assert kinds(events) == [
        "TurnStarted",
        "EntryAdded",
        "EntryCompleted",
        "EntryAdded",
        "EntryDelta",
        "EntryCompleted",
        "TurnEnded",
    ]


async def test_turn_started_carries_the_message_that_started_the_turn() -> None:
    async with agentlib.open_runtime():
        _, turn = await one_turn(Agent("a", model=ScriptedModel(["hi"])), "hello there")
        started = (await turn_events(turn))[0]
    assert isinstance(started, TurnStarted)
    assert (started.message.role, started.message.text) == ("user", "hello there")
    assert started.message.turn_id == turn.id


async def test_the_user_message_is_added_then_completed() -> None:
    async with agentlib.open_runtime():
        _, turn = await one_turn(Agent("a", model=ScriptedModel(["hi"])), "hello there")
        events = await turn_events(turn)
    added, completed = events[1], events[2]
    assert isinstance(added, EntryAdded)
    assert isinstance(completed, EntryCompleted)
    assert added.entry == completed.entry
    assert isinstance(added.entry, MessageEntry)
    assert (added.entry.role, added.entry.text) == ("user", "hello there")


async def test_the_assistants_text_streams_as_deltas_of_the_added_entry() -> None:
    async with agentlib.open_runtime():
        _, turn = await one_turn(Agent("a", model=ScriptedModel(["hi there"])))
        events = await turn_events(turn)
    added, delta, completed = events[3:6]
    assert isinstance(added, EntryAdded)
    assert isinstance(added.entry, MessageEntry)
    assert added.entry.role == "assistant"
    assert isinstance(delta, EntryDelta)
    assert (delta.entry_id, delta.delta) == (added.entry.id, "hi there")
    assert isinstance(completed, EntryCompleted)
    assert completed.entry.id == added.entry.id
    assert completed.entry.text == "hi there"  # type: ignore[union-attr]


async def test_each_piece_a_model_streams_is_one_delta_and_the_entry_completes_joined() -> None:
    class Streaming:
        async def complete(self, request: ModelRequest, *, on_text: Any = None) -> ModelReply:
            for piece in ("Hel", "lo ", "world"):
                await on_text(piece)
            return ModelReply()

    async with agentlib.open_runtime():
        _, turn = await one_turn(Agent("a", model=Streaming()))
        events = await turn_events(turn)
        record = await turn.get()
    deltas = [event for event in events if isinstance(event, EntryDelta)]
    assert [delta.delta for delta in deltas] == ["Hel", "lo ", "world"]
    assert len({delta.entry_id for delta in deltas}) == 1
    completed = [event for event in events if isinstance(event, EntryCompleted)][-1]
    assert (completed.entry.id, completed.entry.text) == (deltas[0].entry_id, "Hello world")  # type: ignore[union-attr]
    assert isinstance(record, Completed)
    assert record.text == "Hello world"


async def test_a_tool_call_and_its_result_are_each_added_then_completed() -> None:
    agent = Agent("a", model=ScriptedModel([LOOKUP, "done"]), tools=[lookup])
    async with agentlib.open_runtime():
        _, turn = await one_turn(agent)
        events = await turn_events(turn)
    entry_events = [
        (type(event).__name__, type(event.entry).__name__)
        for event in events
        if isinstance(event, (EntryAdded, EntryCompleted))
    ]
    assert entry_events[2:6] == [
        ("EntryAdded", "ToolCallEntry"),
        ("EntryCompleted", "ToolCallEntry"),
        ("EntryAdded", "ToolResultEntry"),
        ("EntryCompleted", "ToolResultEntry"),
    ]
    call = events[4].entry  # type: ignore[union-attr]
    result = events[6].entry  # type: ignore[union-attr]
    assert isinstance(call, ToolCallEntry)
    assert isinstance(result, ToolResultEntry)
    assert result.tool_call_id == call.tool_call_id
    assert result.text == "value of k"


async def test_turn_ended_is_the_last_event_and_carries_the_turns_record() -> None:
    async with agentlib.open_runtime():
        _, turn = await one_turn(Agent("a", model=ScriptedModel(["hi"])))
        events = await turn_events(turn)
        record = await turn.get()
    ended = events[-1]
    assert isinstance(ended, TurnEnded)
    assert ended.record == attrs.evolve(record, cursor=ended.record.cursor)
    assert [event for event in events if isinstance(event, TurnEnded)] == [ended]


async def test_the_record_turn_ended_carries_resumes_right_after_that_turn_ended() -> None:
    async with agentlib.open_runtime():
        session, first = await one_turn(Agent("a", model=ScriptedModel(["hi", "again"])))
        ended = (await turn_events(first))[-1]
        assert isinstance(ended, TurnEnded)
        second = await session.send_message("more")
        await second.result()
        await session.cancel()
        tail = await all_events(session, after=ended.record)
        expected = await turn_events(second)
    assert tail == expected


async def test_turn_ended_carries_the_output_structured_for_the_agents_output_type() -> None:
    agent = Agent("a", model=ScriptedModel(['{"ok": true}']), output_type=Verdict)
    async with agentlib.open_runtime():
        _, turn = await one_turn(agent)
        events = await turn_events(turn)
    ended = events[-1]
    assert isinstance(ended, TurnEnded)
    assert isinstance(ended.record, Completed)
    assert ended.record.output == Verdict(ok=True)


async def test_every_event_of_a_turn_names_its_session_and_turn() -> None:
    agent = Agent("a", model=ScriptedModel([LOOKUP, "done"]), tools=[lookup])
    async with agentlib.open_runtime():
        session, turn = await one_turn(agent)
        events = await turn_events(turn)
    assert {(event.session_id, event.turn_id) for event in events} == {(session.id, turn.id)}


async def test_event_ids_strictly_increase() -> None:
    agent = Agent("a", model=ScriptedModel([LOOKUP, "done", "again"]), tools=[lookup])
    async with agentlib.open_runtime():
        session, _ = await one_turn(agent)
        await session.run("more")
        await session.cancel()
        events = await all_events(session)
    ids = [event.id for event in events]
    assert all(earlier < later for earlier, later in itertools.pairwise(ids))
    assert len(set(ids)) == len(ids)


async def test_imported_history_is_logged_before_the_first_turn_with_no_turn() -> None:
    history = [HistoryImportMessage(role="user", content=[TextContentBlock(text="old")])]
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session(history=history)
        await session.run("new")
        await session.cancel()
        events = await all_events(session)
    assert kinds(events[:3]) == ["EntryAdded", "EntryCompleted", "TurnStarted"]
    assert events[0].turn_id is None
    assert events[0].entry.text == "old"  # type: ignore[union-attr]


# --- session.iter_events ------------------------------------------------------------------


async def test_session_iter_events_replays_the_stored_events_from_the_start() -> None:
    async with agentlib.open_runtime():
        session, first = await one_turn(Agent("a", model=ScriptedModel(["hi", "again"])))
        second = await session.send_message("more")
        await second.result()
        await session.cancel()
        events = await all_events(session)
        expected = await turn_events(first) + await turn_events(second)
    assert events == expected


async def test_session_iter_events_follows_the_session_live() -> None:
    gate = Gate()
    agent = Agent("a", model=ScriptedModel([HOLD, "done"]), tools=[gate.tool])
    seen: list[Event] = []
    saw_the_call = trio.Event()
    async with agentlib.open_runtime():
        session = await agent.start_session()

        async def read() -> None:
            async for event in session.iter_events():
                seen.append(event)
                if isinstance(event, EntryCompleted) and isinstance(event.entry, ToolCallEntry):
                    saw_the_call.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            turn = await session.send_message("go")
            await saw_the_call.wait()
            assert not any(isinstance(event, TurnEnded) for event in seen)
            gate.opened.set()
            await turn.result()
            await session.cancel()
        everything = await all_events(session)
    assert seen == everything
    assert isinstance(seen[-1], TurnEnded)


async def test_session_iter_events_ends_when_the_session_is_cancelled() -> None:
    ended = trio.Event()
    async with agentlib.open_runtime():
        session = await Agent("a", model=ScriptedModel(["hi"])).start_session()

        async def read() -> None:
            async for _ in session.iter_events():
                pass
            ended.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            assert not ended.is_set()
            await session.cancel()
    assert ended.is_set()


async def test_concurrent_readers_see_the_same_events_in_the_same_order() -> None:
    agent = Agent("a", model=ScriptedModel([LOOKUP, "done", "again"]), tools=[lookup])
    seen: list[list[str]] = [[] for _ in range(4)]
    async with agentlib.open_runtime():
        session = await agent.start_session()

        async def read(index: int) -> None:
            async for event in session.iter_events():
                seen[index].append(event.id)

        async with trio.open_nursery() as nursery:
            for index in range(4):
                nursery.start_soon(read, index)
            await session.run("one")
            await session.run("two")
            await session.cancel()
        everything = [event.id for event in await all_events(session)]
    assert seen == [everything] * 4


async def test_iter_events_after_a_cursor_resumes_right_after_that_event() -> None:
    agent = Agent("a", model=ScriptedModel([LOOKUP, "done"]), tools=[lookup])
    async with agentlib.open_runtime():
        session, _ = await one_turn(agent)
        await session.cancel()
        events = await all_events(session)
        resumed = {index: await all_events(session, after=events[index].id) for index in (0, 4, 9)}
        at_the_end = await all_events(session, after=events[-1].id)
    for index, tail in resumed.items():
        assert tail == events[index + 1 :]
    assert at_the_end == []


async def test_iter_events_after_a_record_resumes_right_after_its_cursor() -> None:
    async with agentlib.open_runtime():
        session, _ = await one_turn(Agent("a", model=ScriptedModel(["hi", "again"])))
        first = await session.run("one more")
        second = await session.send_message("last")
        await second.result()
        await session.cancel()
        tail = await all_events(session, after=first)
        expected = await turn_events(second)
    assert tail == expected


async def test_iter_events_after_a_record_from_get_resumes_after_the_last_event_then() -> None:
    gate = Gate()
    agent = Agent("a", model=ScriptedModel([HOLD, "done"]), tools=[gate.tool])
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("go")
        await gate.reached.wait()
        running = await turn.get()
        gate.opened.set()
        await turn.result()
        await session.cancel()
        events = await all_events(session)
        tail = await all_events(session, after=running)
    position = [event.id for event in events].index(running.cursor)
    assert tail == events[position + 1 :]
    assert kinds(tail)[0] == "EntryAdded"


async def test_iter_events_after_a_cursor_of_another_session_raises_invalid_cursor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        _, other_turn = await one_turn(agent)
        cursor = (await turn_events(other_turn))[0].id
        session = await agent.start_session()
        with pytest.raises(agentlib.InvalidCursorError):
            await first_event(session.iter_events(after=cursor))


async def test_iter_events_after_a_record_of_another_session_raises_invalid_cursor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        _, other_turn = await one_turn(agent)
        record = await other_turn.get()
        session = await agent.start_session()
        with pytest.raises(agentlib.InvalidCursorError):
            await first_event(session.iter_events(after=record))


@pytest.mark.parametrize("cursor", ["", "not a cursor", "12", "abc:def"])
async def test_iter_events_after_a_malformed_cursor_raises_invalid_cursor(
    cursor: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with agentlib.open_runtime():
        session, _ = await one_turn(Agent("a", model=ScriptedModel(["hi"])))
        with pytest.raises(agentlib.InvalidCursorError):
            await first_event(session.iter_events(after=cursor))


async def test_iter_events_after_a_cursor_the_session_never_issued_raises_invalid_cursor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentlib.open_runtime():
        session, turn = await one_turn(Agent("a", model=ScriptedModel(["hi"])))
        last = (await turn_events(turn))[-1].id
        # The shape of this session's cursors, at a position far past its last event.
        prefix, _, number = last.rpartition(":")
        never = f"{prefix}:{int(number) + 1000:0{len(number)}d}"
        with pytest.raises(agentlib.InvalidCursorError):
            await first_event(session.iter_events(after=never))


async def test_iter_events_raises_invalid_cursor_at_the_first_iteration_not_before(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentlib.open_runtime():
        session, _ = await one_turn(Agent("a", model=ScriptedModel(["hi"])))
        events = session.iter_events(after="not a cursor")
        with pytest.raises(agentlib.InvalidCursorError):
            await first_event(events)


# --- turn.iter_events ---------------------------------------------------------------------


async def test_turn_iter_events_ends_with_the_turns_turn_ended() -> None:
    async with agentlib.open_runtime():
        session, turn = await one_turn(Agent("a", model=ScriptedModel(["hi", "again"])))
        await session.run("more")
        events = await turn_events(turn)
    assert isinstance(events[-1], TurnEnded)
    assert events[-1].turn_id == turn.id
    assert {event.turn_id for event in events} == {turn.id}


async def test_turn_iter_events_starts_right_after_the_previous_turns_end() -> None:
    async with agentlib.open_runtime():
        session, _ = await one_turn(Agent("a", model=ScriptedModel(["hi", "again"])))
        second = await session.send_message("more")
        await second.result()
        events = await turn_events(second)
    assert isinstance(events[0], TurnStarted)
    assert events[0].turn_id == second.id


async def test_turn_iter_events_follows_a_running_turn_live() -> None:
    gate = Gate()
    agent = Agent("a", model=ScriptedModel([HOLD, "done"]), tools=[gate.tool])
    seen: list[Event] = []
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("go")
        await gate.reached.wait()

        async def read() -> None:
            async for event in turn.iter_events():
                seen.append(event)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            before_the_end = list(seen)
            gate.opened.set()
    assert kinds(before_the_end)[0] == "TurnStarted"
    assert not any(isinstance(event, TurnEnded) for event in before_the_end)
    assert isinstance(seen[-1], TurnEnded)
    assert seen[: len(before_the_end)] == before_the_end


async def test_turn_iter_events_after_the_turns_own_record_yields_nothing() -> None:
    async with agentlib.open_runtime():
        _, turn = await one_turn(Agent("a", model=ScriptedModel(["hi"])))
        record = await turn.get()
        assert await turn_events(turn, after=record) == []


async def test_turn_iter_events_after_a_position_past_its_end_yields_nothing() -> None:
    async with agentlib.open_runtime():
        session, first = await one_turn(Agent("a", model=ScriptedModel(["hi", "again"])))
        later = await session.run("more")
        assert await turn_events(first, after=later) == []


async def test_turn_iter_events_after_a_cursor_inside_the_turn_resumes_after_it() -> None:
    async with agentlib.open_runtime():
        _, turn = await one_turn(Agent("a", model=ScriptedModel(["hi"])))
        events = await turn_events(turn)
        tail = await turn_events(turn, after=events[2].id)
    assert tail == events[3:]


async def test_turn_iter_events_of_an_unknown_turn_raises_turn_not_found(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentlib.open_runtime():
        session, _ = await one_turn(Agent("a", model=ScriptedModel(["hi"])))
        events = session.turn("no-such-turn").iter_events()
        with pytest.raises(agentlib.TurnNotFoundError):
            await first_event(events)


# --- on_event -----------------------------------------------------------------------------


async def test_a_sync_on_event_sees_every_event_of_the_turn_in_order() -> None:
    agent = Agent("a", model=ScriptedModel([LOOKUP, "done"]), tools=[lookup])
    seen: list[Event] = []
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("go", on_event=seen.append)
        expected = await turn_events(session.turn(record.turn_id))  # type: ignore[union-attr]
    assert seen == expected
    assert isinstance(seen[-1], TurnEnded)


async def test_an_async_on_event_sees_every_event_of_the_turn_in_order() -> None:
    agent = Agent("a", model=ScriptedModel([LOOKUP, "done"]), tools=[lookup])
    seen: list[Event] = []

    async def on_event(event: Event) -> None:
        await trio.lowlevel.checkpoint()
        seen.append(event)

    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("go")
        await turn.result(on_event=on_event)
        expected = await turn_events(turn)
    assert seen == expected
    assert isinstance(seen[-1], TurnEnded)


async def test_on_event_sees_the_whole_turn_when_the_wait_starts_late() -> None:
    seen: list[Event] = []
    async with agentlib.open_runtime():
        _, turn = await one_turn(Agent("a", model=ScriptedModel(["hi"])))
        await turn.result(on_event=seen.append)
        expected = await turn_events(turn)
    assert seen == expected


async def test_on_event_sees_the_whole_turn_whatever_after_is() -> None:
    gate = Gate()
    agent = Agent("a", model=ScriptedModel([HOLD, "done"]), tools=[gate.tool])
    seen: list[Event] = []
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("go")
        await gate.reached.wait()
        running = await turn.get()
        gate.opened.set()
        await turn.result(after=running, on_event=seen.append)
        expected = await turn_events(turn)
    assert seen == expected


async def test_on_event_sees_only_its_own_turns_events() -> None:
    seen: list[Event] = []
    async with agentlib.open_runtime():
        session, _ = await one_turn(Agent("a", model=ScriptedModel(["hi", "again"])))
        record = await session.run("more", on_event=seen.append)
    assert {event.turn_id for event in seen} == {record.turn_id}  # type: ignore[union-attr]
    assert isinstance(seen[0], TurnStarted)


@pytest.mark.parametrize("digits", ["00000000000²", "٣", "1²"])
async def test_a_cursor_with_digits_that_are_not_ascii_raises_invalid_cursor(
    digits: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with agentlib.open_runtime():
        session, turn = await one_turn(Agent("a", model=ScriptedModel(["hi"])))
        for events in (session.iter_events, turn.iter_events):
            with pytest.raises(agentlib.InvalidCursorError, match="after is not a cursor"):
                await first_event(events(after=f"{session.id}:{digits}"))
