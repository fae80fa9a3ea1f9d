"""agentlib_sync's Agent, Session and Turn: blocking calls with the async API's behaviour."""

from __future__ import annotations

import collections.abc
import contextlib
import threading
from typing import Any

import attrs
import pytest

import agentlib
import agentlib_sync as agents

from ._support import Gate, add, call_tool, scripted_agent


@attrs.frozen
class Sum:
    total: int


def texts(request: agents.ModelRequest) -> list[str]:
    return [entry.text for entry in request.entries if isinstance(entry, agents.MessageEntry)]


def finished_session(answer: str = "done") -> tuple[agents.Session, agents.TurnState[Any]]:
    session = scripted_agent(answer, "again").start_session()
    return session, session.run("hi")


# -- a script ------------------------------------------------------------------------------


def test_run_calls_a_plain_function_tool_then_completes_with_the_answer() -> None:
    agent = agents.Agent(
        name="calculator",
        instructions="You add numbers.",
        model=agents.ScriptedModel([call_tool("add", a=2, b=3), "2 + 3 = 5"]),
        tools=[add],
    )
    session = agent.start_session()

    record = session.run("What is 2 + 3?")

    assert isinstance(record, agents.Completed)
    assert record.output == "2 + 3 = 5"
    assert record.text == "2 + 3 = 5"
    assert record.session_id == session.id
    assert [(call.name, call.arguments) for call in record.tool_calls] == [
        ("add", {"a": 2, "b": 3})
    ]
    results = [
        event.entry
        for event in session.turn(record.turn_id).iter_events()
        if isinstance(event, agents.EntryCompleted)
        and isinstance(event.entry, agents.ToolResultEntry)
    ]
    assert [(result.structured_content, result.is_error) for result in results] == [(5, False)]


def test_a_tool_made_with_the_decorator_runs_too() -> None:
    agent = scripted_agent(call_tool("add", a=1, b=1), "two", tools=[agents.tool(add)])
    record = agent.start_session().run("1 + 1?")
    assert isinstance(record, agents.Completed)
    assert [call.name for call in record.tool_calls] == ["add"]


def test_start_session_returns_a_sync_session() -> None:
    session = scripted_agent("hi").start_session()
    assert type(session) is agents.Session
    assert isinstance(session.id, str)
    assert session.id


# -- sends --------------------------------------------------------------------------------


def test_send_message_starts_a_turn() -> None:
    session = scripted_agent("hello").start_session()
    turn = session.send_message("hi")
    assert type(turn) is agents.Turn
    assert turn.started is True
    assert turn.session_id == session.id
    assert isinstance(turn.result(), agents.Completed)


def test_send_message_joins_the_running_turn() -> None:
    gate = Gate("first answer")
    seen: list[list[str]] = []

    def second_step(request: agents.ModelRequest) -> str:
        seen.append(texts(request))
        return "second answer"

    session = scripted_agent(gate, second_step).start_session()
    first = session.send_message("first")
    gate.wait_reached()

    joined = session.send_message("second")

    assert joined.started is False
    assert joined == first
    assert joined.id == first.id
    gate.open()
    record = first.result()
    assert isinstance(record, agents.Completed)
    assert record.output == "second answer"
    assert seen == [["first", "first answer", "second"]]


def test_start_turn_returns_busy_with_a_sync_turn_while_a_turn_runs() -> None:
    gate = Gate()
    session = scripted_agent(gate, "next").start_session()
    running = session.start_turn("one")
    assert isinstance(running, agents.Turn)
    assert running.started is True

    busy = session.start_turn("two")

    assert isinstance(busy, agents.Busy)
    assert type(busy.turn) is agents.Turn
    assert busy.turn == running
    assert isinstance(busy.turn.get(), agents.Running)
    gate.open()
    assert isinstance(busy.turn.result(), agents.Completed)
    after = session.start_turn("two")
    assert isinstance(after, agents.Turn)
    assert after != running
    assert isinstance(after.result(), agents.Completed)


def test_run_returns_busy_with_a_sync_turn_while_a_turn_runs() -> None:
    gate = Gate()
    session = scripted_agent(gate).start_session()
    running = session.start_turn("one")

    busy = session.run("two")

    assert isinstance(busy, agents.Busy)
    assert type(busy.turn) is agents.Turn
    assert busy.turn == running
    gate.open()
    assert isinstance(running.result(), agents.Completed)


# -- a turn's record ----------------------------------------------------------------------


def test_get_reads_running_then_the_end_record() -> None:
    gate = Gate("the end")
    session = scripted_agent(gate).start_session()
    turn = session.start_turn("hi")
    gate.wait_reached()

    assert isinstance(turn.get(), agents.Running)
    gate.open()
    record = turn.result()
    assert isinstance(record, agents.Completed)
    assert record.output == "the end"
    now = turn.get()
    assert isinstance(now, agents.Completed)
    assert now.output == "the end"
    assert now.turn_id == turn.id


def test_result_with_a_zero_timeout_returns_running_at_once() -> None:
    gate = Gate()
    session = scripted_agent(gate).start_session()
    turn = session.start_turn("hi")
    gate.wait_reached()

    record = turn.result(timeout=0)

    assert isinstance(record, agents.Running)
    assert record.turn_id == turn.id
    gate.open()
    assert isinstance(turn.result(), agents.Completed)


def test_steer_adds_a_message_the_model_sees_at_its_next_step() -> None:
    gate = Gate("first answer")
    seen: list[list[str]] = []

    def second_step(request: agents.ModelRequest) -> str:
        seen.append(texts(request))
        return "steered answer"

    session = scripted_agent(gate, second_step).start_session()
    turn = session.start_turn("go")
    gate.wait_reached()

    steered = turn.steer("also this")

    assert steered == turn
    assert type(steered) is agents.Turn
    gate.open()
    record = turn.result()
    assert isinstance(record, agents.Completed)
    assert record.output == "steered answer"
    assert seen == [["go", "first answer", "also this"]]


def test_steer_returns_turn_conflict_once_the_turn_has_ended() -> None:
    session, record = finished_session()
    assert session.turn(record.turn_id).steer("too late") == agents.TurnConflict(
        turn_id=record.turn_id
    )


def test_interrupt_stops_the_running_turn_and_the_session_goes_on() -> None:
    gate = Gate()
    session = scripted_agent(gate, "still here").start_session()
    turn = session.start_turn("hi")
    gate.wait_reached()

    stopped = turn.interrupt()

    assert stopped == turn
    assert type(stopped) is agents.Turn
    record = turn.get()
    assert isinstance(record, agents.Interrupted)
    assert record.cause == "interrupted"
    assert turn.interrupt() == agents.TurnConflict(turn_id=turn.id)
    again = session.run("hi again")
    assert isinstance(again, agents.Completed)
    assert again.output == "still here"


def test_cancel_ends_the_session_and_later_sends_raise_session_terminated() -> None:
    gate = Gate()
    session = scripted_agent(gate).start_session()
    turn = session.start_turn("hi")
    gate.wait_reached()

    assert session.cancel() is None

    record = turn.get()
    assert isinstance(record, agents.Interrupted)
    assert record.cause == "cancelled"
    with pytest.raises(agentlib.SessionTerminatedError):
        session.send_message("more")
    with pytest.raises(agentlib.SessionTerminatedError):
        session.start_turn("more")
    with pytest.raises(agentlib.SessionTerminatedError):
        session.run("more")
    session.cancel()  # idempotent
    events = list(session.iter_events())  # the history stays readable; the log has ended
    assert isinstance(events[-1], agents.TurnEnded)
    assert events[-1].record.cause == "cancelled"


def test_turn_attributes_mirror_the_async_turn() -> None:
    session, record = finished_session()
    turn = session.turn(record.turn_id)
    assert (turn.id, turn.session_id, turn.started) == (record.turn_id, session.id, None)


# -- events -------------------------------------------------------------------------------


def test_iter_events_is_a_plain_iterator_that_replays_then_follows_live() -> None:
    gate = Gate("second")
    session = scripted_agent("first", gate).start_session()
    first = session.run("one")
    second = session.start_turn("two")

    events = session.iter_events()

    assert isinstance(events, collections.abc.Iterator)
    assert not isinstance(events, collections.abc.AsyncIterator)
    seen = []
    for event in events:
        seen.append(event)
        if isinstance(event, agents.TurnStarted) and event.turn_id == second.id:
            gate.open()  # the rest arrives live
        if isinstance(event, agents.TurnEnded) and event.turn_id == second.id:
            break
    ended = [event.record for event in seen if isinstance(event, agents.TurnEnded)]
    assert [record.turn_id for record in ended] == [first.turn_id, second.id]
    assert ended[1].output == "second"
    assert [event.id for event in seen] == sorted(event.id for event in seen)
    assert isinstance(seen[0], agents.TurnStarted)


def test_iter_events_after_a_record_starts_after_it() -> None:
    session = scripted_agent("first", "second").start_session()
    first = session.run("one")
    second = session.run("two")
    seen = []
    for event in session.iter_events(after=first):
        seen.append(event)
        if isinstance(event, agents.TurnEnded):
            break
    assert {event.turn_id for event in seen} == {second.turn_id}


def test_breaking_out_of_iter_events_closes_the_async_iterator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed_on: list[threading.Thread] = []
    original = agentlib.Session.iter_events

    async def tracked(
        self: agentlib.Session, *, after: Any = None
    ) -> collections.abc.AsyncIterator[agents.Event]:
        try:
            async with contextlib.aclosing(original(self, after=after)) as events:
                async for event in events:
                    yield event
        finally:
            closed_on.append(threading.current_thread())

    monkeypatch.setattr(agentlib.Session, "iter_events", tracked)
    session, _ = finished_session()

    for event in session.iter_events():
        if isinstance(event, agents.TurnEnded):
            break

    assert len(closed_on) == 1
    assert closed_on[0] is not threading.current_thread()  # closed in the engine's loop
    assert isinstance(session.run("again"), agents.Completed)
    replayed = session.iter_events()
    assert isinstance(next(replayed), agents.TurnStarted)
    replayed.close()
    assert len(closed_on) == 2


def test_iter_events_raises_invalid_cursor_on_first_iteration() -> None:
    session, _ = finished_session()
    events = session.iter_events(after="not a cursor")
    with pytest.raises(agentlib.InvalidCursorError):
        next(events)


def test_turn_iter_events_ends_at_turn_ended() -> None:
    session = scripted_agent(call_tool("add", a=1, b=2), "3", "later", tools=[add]).start_session()
    record = session.run("1 + 2?")
    session.run("and then?")

    events = list(session.turn(record.turn_id).iter_events())

    assert isinstance(events[0], agents.TurnStarted)
    assert isinstance(events[-1], agents.TurnEnded)
    assert events[-1].record.output == "3"
    assert {event.turn_id for event in events} == {record.turn_id}


def test_turn_iter_events_follows_a_running_turn_to_its_end() -> None:
    gate = Gate("live")
    session = scripted_agent(gate).start_session()
    turn = session.start_turn("hi")
    events = turn.iter_events()

    first = next(events)
    gate.open()
    rest = list(events)

    assert isinstance(first, agents.TurnStarted)
    assert isinstance(rest[-1], agents.TurnEnded)
    assert rest[-1].record.output == "live"


def test_on_event_plain_function_sees_every_event_with_turn_ended_last() -> None:
    session = scripted_agent(call_tool("add", a=4, b=4), "8", tools=[add]).start_session()
    seen: list[agents.Event] = []

    record = session.run("4 + 4?", on_event=seen.append)

    assert isinstance(record, agents.Completed)
    assert isinstance(seen[-1], agents.TurnEnded)
    assert seen[-1].record.turn_id == record.turn_id
    assert seen == list(session.turn(record.turn_id).iter_events())


def test_turn_result_on_event_sees_the_whole_turn() -> None:
    session, record = finished_session()
    seen: list[agents.Event] = []
    again = session.turn(record.turn_id).result(on_event=seen.append)
    assert isinstance(again, agents.Completed)
    assert isinstance(seen[0], agents.TurnStarted)
    assert isinstance(seen[-1], agents.TurnEnded)


def test_handlers_may_be_plain_functions() -> None:
    def approve(callback: agents.OpenApproval) -> agents.AllowApproval:
        return agents.AllowApproval()

    def sign_in(callback: agents.OpenSignIn) -> agents.SignInAnswer:
        return agents.SignInAnswer(credentials={})

    def client_tool(callback: agents.OpenClientToolCall) -> str:
        return "result"

    agent = scripted_agent("ok", "ok again")
    session = agent.start_session(
        on_approval=approve, on_sign_in=sign_in, on_client_tool=client_tool
    )
    assert isinstance(session.run("hi"), agents.Completed)
    again = agent.session(
        session.id, on_approval=approve, on_sign_in=sign_in, on_client_tool=client_tool
    )
    assert isinstance(again.run("hi"), agents.Completed)


def test_an_exception_from_on_event_propagates_unchanged_and_the_turn_goes_on() -> None:
    class Boom(Exception):
        pass

    def explode(event: agents.Event) -> None:
        raise Boom("from the handler")

    session = scripted_agent("finished").start_session()
    with pytest.raises(Boom, match="from the handler"):
        session.run("hi", on_event=explode)
    for event in session.iter_events():
        if isinstance(event, agents.TurnEnded):
            break
    assert isinstance(event.record, agents.Completed)
    assert event.record.output == "finished"


def test_turn_iter_events_of_an_unknown_turn_raises_on_first_iteration() -> None:
    session, _ = finished_session()
    events = session.turn("no-such-turn").iter_events()
    with pytest.raises(agentlib.TurnNotFoundError):
        next(events)


def test_subagents_is_a_list_of_sync_sessions() -> None:
    session, _ = finished_session()
    subagents = session.subagents()
    assert isinstance(subagents, list)
    assert all(type(sub) is agents.Session for sub in subagents)


# -- idempotency --------------------------------------------------------------------------


def test_start_session_with_the_same_key_returns_the_same_session() -> None:
    agent = scripted_agent("hi")
    key = f"session-{id(agent)}"
    assert agent.start_session(idempotency_key=key) == agent.start_session(idempotency_key=key)


def test_start_turn_with_the_same_key_returns_the_same_turn() -> None:
    session = scripted_agent("hi").start_session()
    first = session.start_turn("hello", idempotency_key="k")
    again = session.start_turn("hello", idempotency_key="k")
    assert isinstance(first, agents.Turn)
    assert again == first
    assert isinstance(first.result(), agents.Completed)
    assert session.send_message("hello", idempotency_key="k") == first
    with pytest.raises(agentlib.SessionIdempotencyConflictError):
        session.start_turn("something else", idempotency_key="k")


# -- references ---------------------------------------------------------------------------


def test_session_references_to_one_session_are_equal_and_hash_equal() -> None:
    agent = scripted_agent("hi")
    session = agent.start_session()
    other = agent.start_session()

    reference = agent.session(session.id)

    assert type(reference) is agents.Session
    assert reference == session
    assert hash(reference) == hash(session)
    assert reference != other
    assert len({session, reference, other}) == 2


def test_a_session_reference_from_an_id_drives_the_started_session() -> None:
    agent = scripted_agent("from the reference")
    session = agent.start_session()
    record = agent.session(session.id).run("hi")
    assert isinstance(record, agents.Completed)
    assert record.session_id == session.id
    assert isinstance(session.turn(record.turn_id).get(), agents.Completed)


def test_turn_references_to_one_turn_are_equal_and_hash_equal() -> None:
    session, record = finished_session()
    turn = session.turn(record.turn_id)
    again = scripted_agent("unused").session(session.id).turn(record.turn_id)
    assert turn == again
    assert hash(turn) == hash(again)
    assert turn != session.turn("another")
    assert len({turn, again}) == 1


def test_a_sent_turn_equals_a_reference_built_from_its_id() -> None:
    session = scripted_agent("hi").start_session()
    turn = session.send_message("hello")
    assert turn == session.turn(turn.id)
    assert hash(turn) == hash(session.turn(turn.id))
    turn.result()


def test_sync_references_do_not_equal_async_ones() -> None:
    session, record = finished_session()
    assert session != object()
    assert session.turn(record.turn_id) != record


# -- output types -------------------------------------------------------------------------


def test_the_agents_output_type_structures_completed_output() -> None:
    agent = scripted_agent('{"total": 5}', output_type=Sum)
    session = agent.start_session()

    record = session.run("2 + 3?")

    assert isinstance(record, agents.Completed)
    assert record.output == Sum(total=5)
    assert record.text == '{"total": 5}'
    assert agent.session(session.id).turn(record.turn_id).get().output == Sum(total=5)


def test_run_output_type_structures_completed_output() -> None:
    session = scripted_agent('{"total": 7}').start_session()
    record = session.run("3 + 4?", output_type=Sum)
    assert isinstance(record, agents.Completed)
    assert record.output == Sum(total=7)


def test_an_answer_that_does_not_fit_the_output_type_fails_the_turn() -> None:
    record = scripted_agent("not json", output_type=Sum).start_session().run("hi")
    assert isinstance(record, agents.Failed)
    assert record.error.type == "ValidationError"


# -- errors -------------------------------------------------------------------------------


def test_the_facade_raises_agentlibs_own_error_classes() -> None:
    assert agents.ValidationError is agentlib.ValidationError
    assert agents.SessionTerminatedError is agentlib.SessionTerminatedError
    assert agents.TurnNotFoundError is agentlib.TurnNotFoundError


@pytest.mark.parametrize("content", ["", [], [{"type": "nope"}], 42])
def test_bad_content_raises_agentlib_validation_error(content: Any) -> None:
    session = scripted_agent("unused").start_session()
    with pytest.raises(agentlib.ValidationError) as raised:
        session.send_message(content)
    assert type(raised.value) is agentlib.ValidationError
    assert isinstance(raised.value, ValueError)
    with pytest.raises(agents.ValidationError):
        session.start_turn(content)


def test_an_unknown_turn_raises_turn_not_found() -> None:
    session, _ = finished_session()
    with pytest.raises(agentlib.TurnNotFoundError):
        session.turn("no-such-turn").get()


def test_an_unknown_session_raises_session_not_found() -> None:
    with pytest.raises(agentlib.SessionNotFoundError):
        scripted_agent("unused").session("no-such-session").send_message("hi")


def test_a_bad_history_raises_validation_error_and_starts_nothing() -> None:
    with pytest.raises(agentlib.ValidationError):
        scripted_agent("unused").start_session(history=[{"type": "nope"}])


def test_the_agent_constructor_raises_like_agentlibs() -> None:
    with pytest.raises(TypeError):
        agents.Agent(name="no model")
    with pytest.raises(ValueError, match="tool_errors"):
        agents.Agent(name="x", model=agents.ScriptedModel([]), tool_errors="ignore")  # type: ignore[arg-type]
