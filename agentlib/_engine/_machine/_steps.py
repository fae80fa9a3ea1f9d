"""The transitions of a turn's steps: a model step (the steered messages, the model's text,
its reply, the record of its answer) and a tool step (the calls of a reply, how far each got,
their results)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._data._content import TextContentBlock
from ..._data._entries import ContextMessage, MessageEntry, ToolCallEntry, ToolResultEntry
from ..._data._errors import MaxStepsExceeded, ValidationError
from ..._data._events import EntryAdded, EntryDelta
from ..._data._history import new_id
from ..._data._ops import StepRow
from ..._data._records import Completed, TurnState
from ..._data._usage import Usage
from ..._toolkit._output import parse_output
from ._state import Call, Facts, SessionMachine, Sessions, ToolStep, TurnMachine
from ._transitions import failed

# -- model steps ----------------------------------------------------------------------------


def begin_model_step(
    sessions: Sessions, session_id: str, turn_id: str
) -> tuple[TurnState[Any] | None, Facts]:
    """The steered messages join the history, and the turn takes a model step: None, or the
    turn's end if it reached its step limit."""
    facts = Facts(sessions)
    session = sessions[session_id]
    turn = session.turns[turn_id]
    for message in list(turn.steered):
        facts.entry(session, message)
    if turn.model_steps >= turn.max_steps:
        return failed(turn, _too_many_steps(turn)), facts
    turn.model_steps += 1
    return None, facts


def _too_many_steps(turn: TurnMachine) -> MaxStepsExceeded:
    steps = f"{turn.max_steps} model step" + ("s" if turn.max_steps != 1 else "")
    return MaxStepsExceeded(
        f"turn {turn.id} reached its limit of {steps} without an answer; if it needs more, "
        "raise max_steps: Agent(max_steps=...) or run(..., max_steps=...)"
    )


def text_streamed(
    sessions: Sessions, session_id: str, turn_id: str, entry_id: str, delta: str, first: bool
) -> Facts:
    """A piece of the model's text arrived: the first opens its entry."""
    facts = Facts(sessions)
    session = sessions[session_id]
    if first:
        opening = MessageEntry(id=entry_id, turn_id=turn_id, role="assistant")
        facts.emit(session, EntryAdded, turn_id, entry=opening)
    facts.emit(session, EntryDelta, turn_id, entry_id=entry_id, delta=delta)
    return facts


def model_replied(
    sessions: Sessions,
    session_id: str,
    turn_id: str,
    entry_id: str,
    text: str | None,
    *,
    streamed: bool,
    usage: Usage | None,
    has_calls: bool,
) -> tuple[bool, Facts]:
    """The model's reply arrived: its text joins the history (carrying the reply's usage,
    unless the reply has calls and no text: the first call carries it). Returns whether
    the usage went on the text."""
    facts = Facts(sessions)
    session = sessions[session_id]
    if text or streamed or (usage is not None and not has_calls):
        message = MessageEntry(
            id=entry_id,
            turn_id=turn_id,
            role="assistant",
            content=(TextContentBlock(text=text or ""),),
            usage=usage,
        )
        facts.entry(session, message, added=streamed)
        return True, facts
    return False, facts


def completed(sessions: Sessions, session_id: str, turn_id: str, text: str) -> TurnState[Any]:
    """The record of a turn the model answered with ``text``: Completed, or Failed if the
    text does not fit the turn's output type."""
    session = sessions[session_id]
    turn = session.turns[turn_id]
    try:
        output = parse_output(text, turn.output_type)
    except ValidationError as error:
        return failed(turn, error)
    return Completed(
        turn_id=turn.id,
        session_id=session.id,
        output=output,
        text=text,
        tool_calls=tuple(turn.tool_calls),  # the same tuple
        usage=_usage(session, turn),
    )


def _usage(session: SessionMachine, turn: TurnMachine) -> Usage | None:
    """The sum of the usages on the turn's entries (the last ones of the history)."""
    total: Usage | None = None
    for entry in reversed(session.entries):
        if entry.turn_id != turn.id:
            break
        usage = getattr(entry, "usage", None)
        if usage is not None:
            total = usage if total is None else usage + total
    return total


def capability_note(session: SessionMachine, source: str) -> str | None:
    """What the last context message about tool source ``source`` said, if any."""
    for entry in reversed(session.entries):
        if (
            isinstance(entry, ContextMessage)
            and entry.kind == "capability_source"
            and entry.source == source
        ):
            return entry.text
    return None


def note_capability(
    sessions: Sessions, session_id: str, turn_id: str, source: str, text: str
) -> Facts:
    """A context message about tool source ``source`` joins the history (before a model
    step), unless the last one about it says ``text`` already."""
    facts = Facts(sessions)
    session = sessions[session_id]
    if capability_note(session, source) != text:
        message = ContextMessage(
            id=new_id(),
            turn_id=turn_id,
            kind="capability_source",
            source=source,
            content=(TextContentBlock(text=text),),
        )
        facts.entry(session, message)
    return facts


# -- tool steps -----------------------------------------------------------------------------


def begin_tool_step(
    sessions: Sessions, session_id: str, turn_id: str, calls: Sequence[Call]
) -> Facts:
    """The calls of a model reply join the history; the turn is in a tool step."""
    facts = Facts(sessions)
    session = sessions[session_id]
    turn = session.turns[turn_id]
    for call in calls:
        facts.entry(session, call.entry)
    facts.add(_step_row(turn, ToolStep(calls=tuple(calls), steps=0, max_steps=0)))
    return facts


def _step_row(turn: TurnMachine, step: ToolStep | None) -> StepRow:
    if step is not None and (step.steps, step.max_steps) != (turn.model_steps, turn.max_steps):
        step = ToolStep(calls=step.calls, steps=turn.model_steps, max_steps=turn.max_steps)
    return StepRow(turn.session_id, turn.id, step)


def update_call(
    sessions: Sessions, session_id: str, turn_id: str, index: int, **changes: Any
) -> Facts:
    """Call ``index`` of the turn's tool step got further (``changes``): the step is saved,
    for a later runtime to resume it from there."""
    facts = Facts(sessions)
    turn = sessions[session_id].turns[turn_id]
    assert turn.step is not None
    facts.add(_step_row(turn, turn.step.with_call(index, **changes)))
    return facts


def end_tool_step(sessions: Sessions, session_id: str, turn_id: str, unfinished: str) -> Facts:
    """The step is over: each call's result joins the history, in call order (a call left
    without one gets an error result saying ``unfinished``: every call in the history
    keeps a result, so the next model request is valid)."""
    facts = Facts(sessions)
    session = sessions[session_id]
    turn = session.turns[turn_id]
    assert turn.step is not None
    for call in turn.step.calls:
        facts.entry(session, call.result or error_result(call.entry, call.refusal or unfinished))
    facts.add(_step_row(turn, None))
    return facts


def error_result(call: ToolCallEntry, message: str) -> ToolResultEntry:
    return ToolResultEntry(
        id=new_id(),
        turn_id=call.turn_id,
        name=call.name,
        content=(TextContentBlock(text=message),),
        is_error=True,
        tool_call_id=call.tool_call_id,
    )
