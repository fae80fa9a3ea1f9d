"""The engine's state machine (the package ``_engine/_machine``), driven without trio and
without a store: each transition's facts and the state it leaves, and what a restart decides
at every point of a turn.

A "crash" here is the facts a runtime wrote up to some point, applied again to an empty
state (what reading the store back does), then :func:`restart`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from agentlib import (
    AllowApproval,
    Blocked,
    CallbackClosed,
    CallbackOpened,
    Completed,
    ContextMessage,
    DenyApproval,
    EntryAdded,
    EntryCompleted,
    EntryDelta,
    Failed,
    Interrupted,
    MessageEntry,
    OpenApproval,
    OpenSignIn,
    Running,
    SessionBusyError,
    SessionIdempotencyConflictError,
    SessionTerminatedError,
    SignInAnswer,
    TextContentBlock,
    ToolCallEntry,
    ToolResultEntry,
    TurnEnded,
    TurnStarted,
    UnknownEntry,
    UnknownOutcome,
    Usage,
)
from agentlib._data._ops import CallbackRow, EntryRow, EventRow, KeyRow, Op, SessionRow, StepRow
from agentlib._engine import _machine as machine
from agentlib._engine._machine import Call, CallState, Facts, Sessions

ROOT = "root-session"


def text(value: str) -> tuple[TextContentBlock, ...]:
    return (TextContentBlock(text=value),)


@attrs.define
class Run:
    """A session driven through the machine, keeping every fact written, in order."""

    sessions: Sessions = attrs.field(factory=dict)
    written: list[Op] = attrs.field(factory=list)

    def keep(self, facts: Facts) -> Facts:
        self.written.extend(facts)
        return facts

    def session(self, session_id: str = ROOT, **options: Any) -> None:
        self.keep(machine.new_session(self.sessions, session_id, "agent", {}, **options))

    def turn(self, message: str = "go", session_id: str = ROOT, key: str | None = None) -> str:
        started, facts = machine.start_turn(
            self.sessions, session_id, text(message), key, max_steps=5
        )
        self.keep(facts)
        assert isinstance(started, machine.Started)
        return started.turn_id

    def model_step(self, turn_id: str, session_id: str = ROOT) -> None:
        limit, facts = machine.begin_model_step(self.sessions, session_id, turn_id)
        self.keep(facts)
        assert limit is None

    def tool_step(self, turn_id: str, *names: str, session_id: str = ROOT) -> None:
        calls = [
            Call(
                entry=ToolCallEntry(
                    id=f"call-{name}", turn_id=turn_id, name=name, tool_call_id=f"id{name}"
                )
            )
            for name in names
        ]
        self.keep(machine.begin_tool_step(self.sessions, session_id, turn_id, calls))

    def update(self, turn_id: str, index: int, session_id: str = ROOT, **changes: Any) -> None:
        self.keep(machine.update_call(self.sessions, session_id, turn_id, index, **changes))

    def approval(self, turn_id: str, index: int, session_id: str = ROOT) -> str:
        callback_id, facts = machine.open_callback(
            self.sessions,
            session_id,
            turn_id,
            OpenApproval,
            tool_name="erase",
            arguments={},
            source="tool",
        )
        self.keep(facts)
        self.update(turn_id, index, session_id, state=CallState.WAITING, callback=callback_id)
        return callback_id

    def delegate(self, turn_id: str) -> str:
        """The turn's first call runs in a new subagent session, ``child``: its turn's id."""
        child_turn, facts = machine.start_subagent(
            self.sessions,
            ROOT,
            turn_id,
            child_id="child",
            agent="helper",
            message="look",
            limit=8,
            max_steps=5,
            output_type=None,
            lease=None,
        )
        self.keep(facts)
        self.update(turn_id, 0, state=CallState.DELEGATED, child=("child", child_turn))
        return child_turn

    def answer(self, session_id: str, callback_id: str, answer: Any) -> None:
        self.keep(machine.close_callback(self.sessions, session_id, callback_id, answer=answer))

    def crash(self) -> Sessions:
        """The state a runtime reading the store back gets: every fact applied again."""
        again: Sessions = {}
        for fact in self.written:
            machine.apply(again, fact)
        return again


def restarted(run: Run) -> tuple[Sessions, machine.Restart, Facts]:
    sessions = run.crash()
    plan, facts = machine.restart(sessions, ROOT)
    return sessions, plan, facts


def record(sessions: Sessions, turn_id: str, session_id: str = ROOT) -> Any:
    session = sessions[session_id]
    return machine.record_of(sessions, session.turns[turn_id], session.last_seq)


# --- transitions -------------------------------------------------------------------------------


def test_a_started_turn_writes_its_row_its_start_and_its_message() -> None:
    run = Run()
    run.session()
    run.turn("hello", key="k1")
    kinds = [type(fact).__name__ for fact in run.written]
    assert kinds == [
        "SessionRow", "TurnRow", "KeyRow", "EventRow", "EventRow", "EntryRow", "EventRow"
    ]  # fmt: skip
    events = [fact.event for fact in run.written if isinstance(fact, EventRow)]
    assert [type(event) for event in events] == [TurnStarted, EntryAdded, EntryCompleted]
    assert [event.id for event in events] == [f"{ROOT}:{seq:012d}" for seq in (1, 2, 3)]


def test_a_second_turn_is_refused_while_one_is_active() -> None:
    run = Run()
    run.session()
    first = run.turn()
    started, facts = machine.start_turn(run.sessions, ROOT, text("again"), None, max_steps=5)
    assert started == machine.Occupied(first)
    assert list(facts) == []


def test_a_key_returns_the_turn_it_started_and_refuses_another_message() -> None:
    run = Run()
    run.session()
    first = run.turn("go", key="k")
    again, facts = machine.start_turn(run.sessions, ROOT, text("go"), "k", max_steps=5)
    assert again == machine.Started(first, new=False)
    assert list(facts) == []
    with pytest.raises(SessionIdempotencyConflictError):
        machine.start_turn(run.sessions, ROOT, text("other"), "k", max_steps=5)


def test_the_step_limit_ends_the_turn_before_another_model_step() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    run.sessions[ROOT].turns[turn_id].max_steps = 1
    run.model_step(turn_id)
    ended, _ = machine.begin_model_step(run.sessions, ROOT, turn_id)
    assert ended is not None
    assert ended.error.type == "MaxStepsExceeded"


def test_a_steered_message_joins_the_history_at_the_next_model_step() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    steered, facts = machine.steer(run.sessions, ROOT, turn_id, text("also this"))
    run.keep(facts)
    assert steered
    assert [m.text for m in run.sessions[ROOT].turns[turn_id].steered] == ["also this"]
    run.model_step(turn_id)
    assert run.sessions[ROOT].turns[turn_id].steered == []
    assert run.sessions[ROOT].entries[-1].text == "also this"


def test_a_steer_with_a_key_it_has_seen_is_not_queued_again() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    first, facts = machine.steer(run.sessions, ROOT, turn_id, text("also this"), "k")
    run.keep(facts)
    again, more = machine.steer(run.sessions, ROOT, turn_id, text("also this"), "k")
    assert (first, again, list(more)) == (True, True, [])
    assert [m.text for m in run.sessions[ROOT].turns[turn_id].steered] == ["also this"]


def test_an_open_callback_shows_in_every_log_above_and_the_record_reads_blocked() -> None:
    run = Run()
    run.session()
    root_turn = run.turn()
    run.model_step(root_turn)
    run.tool_step(root_turn, "helper")
    child_turn = run.delegate(root_turn)
    run.model_step(child_turn, "child")
    run.tool_step(child_turn, "erase", session_id="child")
    callback_id = run.approval(child_turn, 0, "child")
    opened = [
        fact.session_id
        for fact in run.written
        if isinstance(fact, EventRow) and isinstance(fact.event, CallbackOpened)
    ]
    assert opened == ["child", ROOT]
    blocked = record(run.sessions, root_turn)
    assert isinstance(blocked, Blocked)
    assert [callback.id for callback in blocked.callbacks] == [callback_id]
    # Before its opening is durable, no reader is told.
    root = run.sessions[ROOT]
    unseen = machine.record_of(run.sessions, root.turns[root_turn], root.last_seq - 1)
    assert isinstance(unseen, Running)
    # Answered, it closes in both logs, and the root is no longer Blocked.
    run.answer("child", callback_id, AllowApproval())
    closed = [
        fact.session_id
        for fact in run.written
        if isinstance(fact, EventRow) and isinstance(fact.event, CallbackClosed)
    ]
    assert closed == ["child", ROOT]
    assert isinstance(record(run.sessions, root_turn), Running)


def test_an_approval_for_the_session_closes_the_tools_other_open_approvals() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    run.model_step(turn_id)
    run.tool_step(turn_id, "erase", "erase2")
    first = run.approval(turn_id, 0)
    second = run.approval(turn_id, 1)
    run.answer(ROOT, first, AllowApproval(scope="session"))
    callbacks = run.sessions[ROOT].callbacks
    assert not callbacks[first].open
    assert not callbacks[second].open
    assert run.sessions[ROOT].approved_tools == {"erase"}


def test_ending_a_turn_closes_its_callbacks_unanswered_and_ends_its_log() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    run.model_step(turn_id)
    run.tool_step(turn_id, "erase")
    callback_id = run.approval(turn_id, 0)
    turn = run.sessions[ROOT].turns[turn_id]
    _, facts = machine.end_turn(run.sessions, ROOT, turn_id, machine.interrupted(turn))
    run.keep(facts)
    assert not run.sessions[ROOT].callbacks[callback_id].open
    events = [fact.event for fact in facts if isinstance(fact, EventRow)]
    assert isinstance(events[-1], TurnEnded)
    assert events[-1].record.cursor == events[-1].id
    assert run.sessions[ROOT].active is None


def test_the_stored_facts_applied_again_give_the_same_state() -> None:
    run = Run()
    run.session()
    turn_id = run.turn("go", key="k")
    run.model_step(turn_id)
    run.tool_step(turn_id, "erase", "index")
    callback_id = run.approval(turn_id, 0)
    run.update(turn_id, 1, state=CallState.RUNNING)
    again = run.crash()
    live, read = run.sessions[ROOT], again[ROOT]
    assert read.entries == live.entries
    assert read.keys == live.keys
    assert read.active == live.active == turn_id
    assert read.turns[turn_id].step == live.turns[turn_id].step
    assert read.turns[turn_id].tool_calls == live.turns[turn_id].tool_calls
    assert read.shown == live.shown
    assert read.callbacks[callback_id].callback == live.callbacks[callback_id].callback
    assert read.last_seq == live.last_seq


# --- one test per transition, driven with plain Python -----------------------------------------


def events_of(facts: Facts) -> list[Any]:
    return [fact.event for fact in facts if isinstance(fact, EventRow)]


def calls_of(run: Run, turn_id: str) -> tuple[Call, ...]:
    step = run.sessions[ROOT].turns[turn_id].step
    assert step is not None
    return step.calls


def test_cursors_name_a_seq_and_sort_like_positions() -> None:
    cursors = [machine.format_cursor(ROOT, seq) for seq in (2, 10, 100)]
    assert sorted(cursors) == cursors
    assert [machine.seq_of_cursor(cursor) for cursor in cursors] == [2, 10, 100]
    assert machine.seq_of_cursor(None) is None


def test_new_session_writes_its_row_and_joins_its_parents_children() -> None:
    run = Run()
    facts = machine.new_session(run.sessions, ROOT, "agent", {"x": 1}, key="k", lease=("me", 9.0))
    assert list(facts) == [SessionRow(ROOT, "agent", None, None, "k", {"x": 1}, False, ("me", 9.0))]
    session = run.sessions[ROOT]
    assert (session.agent, session.key, session.inputs) == ("agent", "k", {"x": 1})
    assert (session.active, session.last_seq, list(session.entries)) == (None, 0, [])
    run.keep(facts)
    turn_id = run.turn()
    machine.new_session(run.sessions, "child", "helper", {}, parent=(ROOT, turn_id))
    assert run.sessions["child"].parent_turn_id == turn_id
    assert list(run.sessions[ROOT].children) == ["child"]


def test_import_history_adds_each_entry_and_hides_snapshots_from_the_model() -> None:
    run = Run()
    run.session()
    said = MessageEntry(id="m-1", role="user", content=text("earlier"))
    snapshot = UnknownEntry(id="c-1", entry_type="checkpoint", raw={"note": "x"})
    facts = machine.import_history(run.sessions, ROOT, [said, snapshot])
    kinds = [type(fact).__name__ for fact in facts]
    assert kinds == ["EventRow", "EntryRow", "EventRow"] * 2
    assert [type(event) for event in events_of(facts)] == [EntryAdded, EntryCompleted] * 2
    session = run.sessions[ROOT]
    assert list(session.entries) == [said, snapshot]
    assert (session.hidden, session.last_seq) == (1, 4)
    assert list(machine.model_history(session)) == [said]


def test_cancel_marks_the_session_terminated_once_and_it_takes_no_more_messages() -> None:
    run = Run()
    run.session()
    facts = machine.cancel(run.sessions, ROOT)
    assert list(facts) == [SessionRow(ROOT, "agent", terminated=True)]
    assert run.sessions[ROOT].terminated
    assert list(machine.cancel(run.sessions, ROOT)) == []
    with pytest.raises(SessionTerminatedError):
        machine.start_turn(run.sessions, ROOT, text("go"), None, max_steps=5)


def test_stop_keeps_the_first_cause_brings_no_fact_and_refuses_steers() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    before = list(run.written)
    machine.stop(run.sessions, ROOT, turn_id, machine.StopCause.CANCELLED)
    machine.stop(run.sessions, ROOT, turn_id, machine.StopCause.INTERRUPTED)
    turn = run.sessions[ROOT].turns[turn_id]
    assert turn.stop_cause is machine.StopCause.CANCELLED
    assert run.written == before
    steered, facts = machine.steer(run.sessions, ROOT, turn_id, text("late"))
    assert (steered, list(facts)) == (False, [])
    assert machine.interrupted(turn).cause == "cancelled"


def test_end_turn_adds_late_steers_records_the_end_once_and_frees_the_session() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    run.model_step(turn_id)
    run.keep(machine.steer(run.sessions, ROOT, turn_id, text("too late"))[1])
    completed = machine.completed(run.sessions, ROOT, turn_id, "done")
    record, facts = machine.end_turn(run.sessions, ROOT, turn_id, completed)
    session = run.sessions[ROOT]
    assert session.entries[-1].text == "too late"
    assert isinstance(record, Completed)
    assert record.output == "done"
    assert record.cursor == machine.format_cursor(ROOT, session.last_seq)
    ended = events_of(facts)[-1]
    assert isinstance(ended, TurnEnded)
    assert ended.record == record
    turn = session.turns[turn_id]
    assert (turn.record, turn.end_seq, session.active) == (record, session.last_seq, None)
    again, more = machine.end_turn(run.sessions, ROOT, turn_id, machine.interrupted(turn))
    assert (again, list(more)) == (record, [])


def test_start_subagent_starts_a_session_below_and_its_turn_up_to_the_limit() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    run.model_step(turn_id)
    run.tool_step(turn_id, "helper")
    child_turn = run.delegate(turn_id)
    child = run.sessions["child"]
    assert (child.parent_id, child.parent_turn_id, child.agent) == (ROOT, turn_id, "helper")
    assert child.active == child_turn
    assert child.entries[-1].text == "look"
    assert machine.running_subagents(run.sessions, ROOT) == 1
    with pytest.raises(SessionBusyError):
        machine.start_subagent(
            run.sessions,
            ROOT,
            turn_id,
            child_id="other",
            agent="helper",
            message="look",
            limit=1,
            max_steps=5,
            output_type=None,
            lease=None,
        )
    assert "other" not in run.sessions


def test_begin_model_step_counts_the_step() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    limit, facts = machine.begin_model_step(run.sessions, ROOT, turn_id)
    assert (limit, list(facts)) == (None, [])
    assert run.sessions[ROOT].turns[turn_id].model_steps == 1


def test_text_streamed_opens_the_entry_once_and_adds_nothing_to_the_history() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    entries = list(run.sessions[ROOT].entries)
    first = machine.text_streamed(run.sessions, ROOT, turn_id, "m-1", "Hel", first=True)
    second = machine.text_streamed(run.sessions, ROOT, turn_id, "m-1", "lo", first=False)
    assert [type(event) for event in events_of(first)] == [EntryAdded, EntryDelta]
    assert [type(event) for event in events_of(second)] == [EntryDelta]
    assert [event.delta for event in events_of(second)] == ["lo"]
    assert all(isinstance(fact, EventRow) for fact in [*first, *second])
    assert list(run.sessions[ROOT].entries) == entries


def test_model_replied_adds_the_text_with_the_usage_or_leaves_it_to_the_calls() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    usage = Usage(input_tokens=3, output_tokens=2, total_tokens=5)
    on_text, facts = machine.model_replied(
        run.sessions, ROOT, turn_id, "m-1", "Hi", streamed=True, usage=usage, has_calls=False
    )
    assert on_text
    assert [type(event) for event in events_of(facts)] == [EntryCompleted]  # added streaming
    reply = run.sessions[ROOT].entries[-1]
    assert isinstance(reply, MessageEntry)
    assert (reply.id, reply.role, reply.text, reply.usage) == ("m-1", "assistant", "Hi", usage)
    on_text, facts = machine.model_replied(
        run.sessions, ROOT, turn_id, "m-2", None, streamed=False, usage=usage, has_calls=True
    )
    assert (on_text, list(facts)) == (False, [])
    assert run.sessions[ROOT].entries[-1] is reply


def test_completed_sums_the_turns_usage_or_fails_on_an_answer_of_the_wrong_type() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    for entry_id in ("m-1", "m-2"):
        usage = Usage(input_tokens=1, output_tokens=1, total_tokens=2)
        _, facts = machine.model_replied(
            run.sessions,
            ROOT,
            turn_id,
            entry_id,
            "42",
            streamed=False,
            usage=usage,
            has_calls=False,
        )
        run.keep(facts)
    record = machine.completed(run.sessions, ROOT, turn_id, "42")
    assert isinstance(record, Completed)
    assert record.usage == Usage(input_tokens=2, output_tokens=2, total_tokens=4, requests=2)
    run.sessions[ROOT].turns[turn_id].output_type = int
    assert machine.completed(run.sessions, ROOT, turn_id, "42").output == 42
    failed = machine.completed(run.sessions, ROOT, turn_id, "not a number")
    assert isinstance(failed, Failed)
    assert failed.error.type == "ValidationError"


def test_note_capability_adds_a_context_message_unless_the_last_one_says_it() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    facts = machine.note_capability(run.sessions, ROOT, turn_id, "files", "files: offline")
    note = run.sessions[ROOT].entries[-1]
    assert isinstance(note, ContextMessage)
    assert (note.kind, note.source, note.text) == ("capability_source", "files", "files: offline")
    assert [type(event) for event in events_of(facts)] == [EntryAdded, EntryCompleted]
    again = machine.note_capability(run.sessions, ROOT, turn_id, "files", "files: offline")
    assert list(again) == []
    assert machine.capability_note(run.sessions[ROOT], "files") == "files: offline"


def test_begin_tool_step_adds_the_calls_to_the_history_and_saves_the_step() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    run.model_step(turn_id)
    run.tool_step(turn_id, "a", "b")
    turn = run.sessions[ROOT].turns[turn_id]
    assert [call.name for call in turn.tool_calls] == ["a", "b"]
    assert [entry.id for entry in run.sessions[ROOT].entries[-2:]] == ["call-a", "call-b"]
    step_rows = [fact for fact in run.written if isinstance(fact, StepRow)]
    assert [row.step for row in step_rows] == [turn.step]
    assert turn.step is not None
    assert (turn.step.steps, turn.step.max_steps) == (1, 5)
    assert [call.state for call in turn.step.calls] == [CallState.NEW, CallState.NEW]


def test_update_call_saves_the_step_with_the_one_call_changed() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    run.model_step(turn_id)
    run.tool_step(turn_id, "a", "b")
    facts = machine.update_call(run.sessions, ROOT, turn_id, 1, state=CallState.RUNNING)
    [row] = facts
    assert isinstance(row, StepRow)
    assert row.step == run.sessions[ROOT].turns[turn_id].step
    assert [call.state for call in calls_of(run, turn_id)] == [CallState.NEW, CallState.RUNNING]


def test_end_tool_step_adds_a_result_for_every_call_in_call_order() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    run.model_step(turn_id)
    run.tool_step(turn_id, "a", "b", "c")
    calls = calls_of(run, turn_id)
    done = machine.error_result(calls[0].entry, "a's own result")
    run.update(turn_id, 0, state=CallState.DONE, result=done)
    run.keep(machine.update_call(run.sessions, ROOT, turn_id, 1, refusal="no such tool"))
    facts = machine.end_tool_step(run.sessions, ROOT, turn_id, "the turn stopped")
    results = [fact.entry for fact in facts if isinstance(fact, EntryRow)]
    assert [result.tool_call_id for result in results] == ["ida", "idb", "idc"]
    assert [result.text for result in results] == [
        "a's own result",
        "no such tool",
        "the turn stopped",
    ]
    assert all(isinstance(result, ToolResultEntry) and result.is_error for result in results)
    assert isinstance(facts[-1], StepRow)
    assert facts[-1].step is None
    assert run.sessions[ROOT].turns[turn_id].step is None


def test_open_sign_in_opens_one_callback_per_turn_and_finds_it_again() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    run.model_step(turn_id)
    callback_id, facts = machine.open_sign_in(
        run.sessions, ROOT, turn_id, ("github",), {"github": "https://sign.in"}
    )
    run.keep(facts)
    [opened] = events_of(facts)
    assert isinstance(opened, CallbackOpened)
    callback = run.sessions[ROOT].callbacks[callback_id].callback
    assert isinstance(callback, OpenSignIn)
    assert (callback.sources, callback.authorization_urls) == (
        ("github",),
        {"github": "https://sign.in"},
    )
    again, more = machine.open_sign_in(run.sessions, ROOT, turn_id, ("other",))
    assert (again, list(more)) == (callback_id, [])


def test_close_callback_unanswered_keeps_the_phase_closed_and_the_answers_key() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    run.model_step(turn_id)
    run.tool_step(turn_id, "erase", "erase2")
    first = run.approval(turn_id, 0)
    second = run.approval(turn_id, 1)
    key = machine.answer_key(first, "k")
    facts = machine.close_callback(
        run.sessions, ROOT, first, answer=DenyApproval(reason="no"), key=key
    )
    assert isinstance(facts[0], KeyRow)
    assert run.sessions[ROOT].keys[key] == (turn_id, "answer")
    [closed] = events_of(facts)
    assert isinstance(closed, CallbackClosed)
    assert (closed.answered, closed.answer) == (True, DenyApproval(reason="no"))
    facts = machine.close_callback(run.sessions, ROOT, second, answered=False)
    [row] = [fact for fact in facts if isinstance(fact, CallbackRow)]
    assert row.state == "closed"
    state = run.sessions[ROOT].callbacks[second]
    assert state.phase is machine.CallbackPhase.CLOSED
    assert not state.open
    assert list(machine.close_callback(run.sessions, ROOT, second)) == []  # closed already


def test_a_sign_in_answer_reaches_the_turn_but_never_the_store() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    callback_id, facts = machine.open_sign_in(run.sessions, ROOT, turn_id, ("github",))
    run.keep(facts)
    answer = SignInAnswer(credentials={"github": "token"})
    facts = machine.close_callback(run.sessions, ROOT, callback_id, answer=answer)
    [row] = [fact for fact in facts if isinstance(fact, CallbackRow)]
    assert (row.state, row.answer) == ("answered", None)
    assert run.sessions[ROOT].callbacks[callback_id].answer == answer


def test_show_settled_closes_in_every_log_a_callback_the_store_settled() -> None:
    run = Run()
    run.session()
    root_turn = run.turn()
    run.model_step(root_turn)
    run.tool_step(root_turn, "helper")
    child_turn = run.delegate(root_turn)
    run.model_step(child_turn, "child")
    run.tool_step(child_turn, "erase", session_id="child")
    callback_id = run.approval(child_turn, 0, "child")
    callback = run.sessions["child"].callbacks[callback_id].callback
    # Another runtime answered it in a shared store: its row is all this state gets.
    machine.apply(run.sessions, CallbackRow("child", callback, "answered", AllowApproval()))
    assert callback_id in run.sessions[ROOT].shown
    facts = machine.show_settled(run.sessions, ROOT)
    closed = [(fact.session_id, fact.event) for fact in facts if isinstance(fact, EventRow)]
    assert [session_id for session_id, _ in closed] == ["child", ROOT]
    assert all(
        isinstance(event, CallbackClosed) and event.answer == AllowApproval() for _, event in closed
    )
    assert (run.sessions["child"].shown, run.sessions[ROOT].shown) == ({}, {})
    assert list(machine.show_settled(run.sessions, ROOT)) == []


def test_restart_ends_a_turn_in_a_model_step_as_unknown_outcome() -> None:
    run = Run()
    run.session()
    turn_id = run.turn()
    run.model_step(turn_id)
    sessions, plan, facts = restarted(run)
    assert plan.resume == ()
    assert isinstance(sessions[ROOT].turns[turn_id].record, UnknownOutcome)
    assert isinstance(events_of(facts)[-1], TurnEnded)
    assert sessions[ROOT].active is None


# --- restarting, at every point of a turn ------------------------------------------------------


def started(run: Run) -> str:
    run.session()
    return run.turn()


def in_model_step(run: Run) -> str:
    turn_id = started(run)
    run.model_step(turn_id)
    return turn_id


def calls_not_started(run: Run) -> str:
    turn_id = in_model_step(run)
    run.tool_step(turn_id, "erase", "index")
    return turn_id


def a_call_running(run: Run) -> str:
    turn_id = calls_not_started(run)
    run.update(turn_id, 1, state=CallState.RUNNING)
    return turn_id


def an_approval_open(run: Run) -> str:
    turn_id = calls_not_started(run)
    run.approval(turn_id, 0)
    return turn_id


def an_approval_open_beside_a_running_call(run: Run) -> str:
    turn_id = an_approval_open(run)
    run.update(turn_id, 1, state=CallState.RUNNING)
    return turn_id


def an_approval_answered_before_its_call_ran(run: Run) -> str:
    turn_id = calls_not_started(run)
    callback_id = run.approval(turn_id, 0)
    run.answer(ROOT, callback_id, AllowApproval())
    return turn_id


def an_approval_denied(run: Run) -> str:
    turn_id = calls_not_started(run)
    callback_id = run.approval(turn_id, 0)
    run.answer(ROOT, callback_id, DenyApproval(reason="no"))
    return turn_id


def one_call_done(run: Run) -> str:
    turn_id = calls_not_started(run)
    result = machine.error_result(run.sessions[ROOT].turns[turn_id].step.calls[0].entry, "x")  # type: ignore[union-attr]
    run.update(turn_id, 0, state=CallState.DONE, result=result)
    return turn_id


def step_over(run: Run) -> str:
    turn_id = one_call_done(run)
    run.keep(machine.end_tool_step(run.sessions, ROOT, turn_id, "stopped"))
    return turn_id


def cancelled(run: Run) -> str:
    turn_id = an_approval_open(run)
    run.keep(machine.cancel(run.sessions, ROOT))
    return turn_id


#: (how far the turn got, what the restart makes of it, and whether the calls that were
#: running get an error result saying their outcome is unknown)
RESTART_POINTS: list[tuple[Callable[[Run], str], str, bool]] = [
    (started, "unknown", False),
    (in_model_step, "unknown", False),
    (calls_not_started, "resumed", False),
    (a_call_running, "unknown", False),
    (an_approval_open, "resumed", False),
    (an_approval_open_beside_a_running_call, "resumed", True),
    (an_approval_answered_before_its_call_ran, "resumed", False),
    (an_approval_denied, "resumed", False),
    (one_call_done, "resumed", False),
    (step_over, "unknown", False),
    (cancelled, "interrupted", False),
]


@pytest.mark.parametrize(
    ("point", "outcome", "lost"), RESTART_POINTS, ids=[p.__name__ for p, _, _ in RESTART_POINTS]
)
def test_a_restart_at_every_point_of_a_turn(
    point: Callable[[Run], str], outcome: str, lost: bool
) -> None:
    run = Run()
    turn_id = point(run)
    live_state = run.sessions[ROOT].turns[turn_id]
    # A clean close suspends exactly the turns a crash resumes: the two paths agree.
    assert machine.resumable(run.sessions, live_state) == (outcome == "resumed")
    sessions, plan, _ = restarted(run)
    turn = sessions[ROOT].turns[turn_id]
    if outcome == "resumed":
        assert plan.resume == ((ROOT, turn_id),)
        assert turn.record is None
        assert turn.step is not None
        states = [call.state for call in turn.step.calls]
        assert CallState.RUNNING not in states
        results = [call.result for call in turn.step.calls if call.result is not None]
        assert any(machine.LOST in r.text for r in results) == lost
    elif outcome == "unknown":
        assert plan.resume == ()
        assert isinstance(turn.record, UnknownOutcome)
    else:
        assert plan.resume == ()
        assert isinstance(turn.record, Interrupted)
        assert turn.record.cause == "cancelled"
    # Whatever it decided, the turn's open callbacks are listed by its record, and only
    # those of a turn that goes on.
    open_left = machine.open_below(sessions, turn)
    assert bool(open_left) == (
        outcome == "resumed" and point.__name__.startswith("an_approval_open")
    )


def test_a_restart_keeps_a_blocked_turn_blocked_on_the_same_callback() -> None:
    run = Run()
    turn_id = an_approval_open_beside_a_running_call(run)
    before = record(run.sessions, turn_id)
    sessions, _, _ = restarted(run)
    after = record(sessions, turn_id)
    assert isinstance(before, Blocked)
    assert after == before


def delegated_to_a_subagent(run: Run, child_point: Callable[[Run, str], None]) -> tuple[str, str]:
    run.session()
    root_turn = run.turn()
    run.model_step(root_turn)
    run.tool_step(root_turn, "helper", "index")
    child_turn = run.delegate(root_turn)
    child_point(run, child_turn)
    return root_turn, child_turn


def child_running_a_tool(run: Run, child_turn: str) -> None:
    run.model_step(child_turn, "child")
    run.tool_step(child_turn, "hold", session_id="child")
    run.update(child_turn, 0, "child", state=CallState.RUNNING)


def child_blocked(run: Run, child_turn: str) -> None:
    run.model_step(child_turn, "child")
    run.tool_step(child_turn, "erase", session_id="child")
    run.approval(child_turn, 0, "child")


@pytest.mark.parametrize(
    ("child_point", "sibling_running", "root", "child"),
    [
        (child_running_a_tool, False, "unknown", "unknown"),
        (child_blocked, False, "resumed", "resumed"),
        (child_blocked, True, "resumed", "resumed"),
        (child_running_a_tool, True, "unknown", "unknown"),
    ],
    ids=["child-running", "child-blocked", "child-blocked-sibling-running", "both-running"],
)
def test_a_restart_of_a_tree_decides_each_turn_from_the_deepest(
    child_point: Callable[[Run, str], None], sibling_running: bool, root: str, child: str
) -> None:
    run = Run()
    root_turn, child_turn = delegated_to_a_subagent(run, child_point)
    if sibling_running:
        run.update(root_turn, 1, state=CallState.RUNNING)
    sessions, plan, _ = restarted(run)
    resumed = set(plan.resume)
    for session_id, turn_id, expected in ((ROOT, root_turn, root), ("child", child_turn, child)):
        turn = sessions[session_id].turns[turn_id]
        if expected == "resumed":
            assert (session_id, turn_id) in resumed
            assert turn.record is None
        else:
            assert (session_id, turn_id) not in resumed
            assert isinstance(turn.record, UnknownOutcome)
