"""A session's event log (``agentlib._engine._log``): an idle log keeps its events packed,
and every read gives events equal to those appended, before and after packing, pruning and
letting go of the oldest."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentlib import (
    CallbackClosed,
    CallbackOpened,
    Completed,
    EntryAdded,
    EntryCompleted,
    EntryDelta,
    Event,
    MessageEntry,
    OpenApproval,
    TextContentBlock,
    TurnEnded,
    TurnStarted,
    UnknownEvent,
    Usage,
)
from agentlib._engine._log import EventLog
from agentlib._engine._machine import format_cursor

SESSION = "s1"


def events() -> list[Event]:
    """Events of every class, over two turns, one with an id of another shape."""

    def cursor(seq: int) -> str:
        return format_cursor(SESSION, seq)

    message = MessageEntry(
        id="m1", turn_id="t1", role="user", content=(TextContentBlock(text="hi"),)
    )
    answer = MessageEntry(id="m2", turn_id="t1", role="assistant")
    approval = OpenApproval(
        id="0b7f4c5e-8a1d-4c53-9f0e-6c2b8a1d4c53",
        session_id=SESSION,
        turn_id="t1",
        tool_name="delete",
        arguments={"path": "a"},
    )
    record = Completed(turn_id="t1", session_id=SESSION, cursor=cursor(9), output="ok", text="ok")
    return [
        TurnStarted(id=cursor(1), session_id=SESSION, turn_id="t1", message=message),
        EntryAdded(id=cursor(2), session_id=SESSION, turn_id="t1", entry=message),
        EntryCompleted(id=cursor(3), session_id=SESSION, turn_id="t1", entry=message),
        CallbackOpened(id=cursor(4), session_id=SESSION, turn_id="t1", callback=approval),
        CallbackClosed(
            id=cursor(5),
            session_id=SESSION,
            turn_id="t1",
            callback_id=approval.id,
            answered=True,
        ),
        EntryAdded(id=cursor(6), session_id=SESSION, turn_id="t1", entry=answer),
        EntryDelta(id=cursor(7), session_id=SESSION, turn_id="t1", entry_id="m2", delta="o"),
        UnknownEvent(
            id=cursor(8), session_id=SESSION, turn_id="t1", event_type="future", raw={"a": 1}
        ),
        TurnEnded(id=cursor(9), session_id=SESSION, turn_id="t1", record=record),
        EntryAdded(id="another-shape", session_id=SESSION, turn_id=None, entry=message),
        TurnStarted(id=cursor(11), session_id=SESSION, turn_id="t2", message=message),
    ]


def log_of(appended: Sequence[Event]) -> EventLog:
    log = EventLog(SESSION)
    for event in appended:
        log.append(event)
    log.made_visible(len(appended))
    return log


async def read_all(log: EventLog) -> list[Event]:
    seen: list[Event] = []
    seq = log.first_seq
    while seq <= log.visible:
        page = await log.read_page(seq)
        seen.extend(page)
        seq += len(page)
    return seen


async def test_a_packed_log_reads_as_it_was_appended() -> None:
    appended = events()
    log = log_of(appended)
    assert await read_all(log) == appended
    log.pack()
    assert await read_all(log) == appended
    assert [log.held(seq) for seq in range(1, 12)] == appended
    assert [type(log.held(seq)) for seq in range(1, 12)] == [type(e) for e in appended]


async def test_events_appended_after_packing_are_read_with_the_packed_ones() -> None:
    appended = events()
    log = log_of(appended[:5])
    log.pack()
    for event in appended[5:]:
        log.append(event)
    log.made_visible(len(appended))
    assert await read_all(log) == appended
    log.pack()
    assert await read_all(log) == appended


@pytest.mark.parametrize("before", [2, 6, 10, 12])
async def test_a_packed_log_pruned_reads_from_the_first_kept(before: int) -> None:
    appended = events()
    log = log_of(appended)
    log.pack()
    log.prune(before)
    assert log.first_seq == min(before, 12)
    assert await read_all(log) == appended[before - 1 :]
    assert [log.held(seq) for seq in range(log.first_seq, 12)] == appended[before - 1 :]


async def test_a_streamed_message_reads_as_it_opened_and_as_it_completed() -> None:
    """A message added empty and completed with its text is packed once, as the completed
    message; one that changed otherwise (here its usage) is kept as it was."""

    def cursor(seq: int) -> str:
        return format_cursor(SESSION, seq)

    def message(entry_id: str, text: str = "", **fields: object) -> MessageEntry:
        content = (TextContentBlock(text=text),) if text else ()
        return MessageEntry(id=entry_id, turn_id="t1", role="assistant", content=content, **fields)

    usage = Usage(input_tokens=3, output_tokens=2)
    finals = [message("m1", "Hello"), message("m2", "Bye", usage=usage)]
    appended: list[Event] = []
    for final in finals:
        ids = {"session_id": SESSION, "turn_id": "t1"}
        seq = len(appended)
        appended += [
            EntryAdded(id=cursor(seq + 1), **ids, entry=message(final.id)),
            EntryDelta(id=cursor(seq + 2), **ids, entry_id=final.id, delta="x"),
            EntryCompleted(id=cursor(seq + 3), **ids, entry=final),
        ]
    log = log_of(appended)
    log.pack()
    assert await read_all(log) == appended
    opened = [log.held(1), log.held(4)]
    assert [event.entry for event in opened if isinstance(event, EntryAdded)] == [
        message("m1"),
        message("m2"),
    ]
    assert log._events[0] is finals[0]  # packed as the completed message
    assert log._events[3] is not finals[1]  # kept whole: it differs by more than content


async def test_a_long_log_packed_at_every_turns_end_reads_as_it_was_appended() -> None:
    """Past a few hundred events a log is packed where it is, turn after turn; reads, and
    reads after letting go of the oldest, give every event as it was, with its turn."""

    def turn(number: int, first: int) -> list[Event]:
        turn_id = f"t{number}"
        ids = {"session_id": SESSION, "turn_id": turn_id}
        message = MessageEntry(
            id=f"m{number}", turn_id=turn_id, role="user", content=(TextContentBlock(text="hi"),)
        )
        record = Completed(
            turn_id=turn_id,
            session_id=SESSION,
            cursor=format_cursor(SESSION, first + 3),
            output="ok",
            text="ok",
        )
        return [
            TurnStarted(id=format_cursor(SESSION, first), **ids, message=message),
            EntryAdded(id=format_cursor(SESSION, first + 1), **ids, entry=message),
            EntryCompleted(id=format_cursor(SESSION, first + 2), **ids, entry=message),
            TurnEnded(id=format_cursor(SESSION, first + 3), **ids, record=record),
        ]

    log = EventLog(SESSION)
    appended: list[Event] = []
    for number in range(150):  # 600 events
        events_of_turn = turn(number, len(appended) + 1)
        appended += events_of_turn
        for event in events_of_turn:
            log.append(event)
        log.made_visible(len(appended))
        log.pack()
    assert await read_all(log) == appended
    assert log.held(599) == appended[598]
    log.prune(401)
    assert await read_all(log) == appended[400:]
