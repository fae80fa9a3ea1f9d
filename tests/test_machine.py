"""The engine's state machine (``_engine/_machine.py``), driven without trio and without a
store: each transition's facts, and what a restart decides at every point of a turn.

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
    DenyApproval,
    EntryAdded,
    EntryCompleted,
    Interrupted,
    OpenApproval,
    Running,
    SessionIdempotencyConflictError,
    TextContentBlock,
    ToolCallEntry,
    TurnEnded,
    TurnStarted,
    UnknownOutcome,
)
from agentlib._engine import _machine as machine
from agentlib._engine._machine import Call, CallState, Facts, Sessions
from agentlib._ops import EventRow, Op

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
