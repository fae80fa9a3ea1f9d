"""Sessions: starting, references, sends, idempotency, run, output types and cancel (SPEC 3)."""

from __future__ import annotations

import dataclasses
import uuid

import attrs
import pytest
import trio
from _support import Gate, Recorder, events_through, held_agent, held_turn, user_texts

import agentlib
from agentlib import (
    Agent,
    Busy,
    Completed,
    EntryCompleted,
    Failed,
    HistoryImportMessage,
    Interrupted,
    ModelReply,
    Running,
    ScriptedModel,
    TextContentBlock,
    ToolCallRequest,
    Turn,
)

# Each test runs on a local runtime and on agents served over HTTP (conftest's transport).
pytestmark = pytest.mark.usefixtures("transport")


@attrs.frozen
class Verdict:
    ok: bool
    reason: str


@dataclasses.dataclass(frozen=True)
class Score:
    value: int


# --- start_session ------------------------------------------------------------------------


async def test_ids_of_sessions_turns_and_entries_are_random_uuids() -> None:
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    script = [ModelReply(tool_calls=[ToolCallRequest(name="add", arguments={"a": 1})]), "3"]
    agent = Agent("calc", "Add.", ScriptedModel(script), [add])
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("add")
        events = await events_through(session, record.cursor)
    entries = [event.entry.id for event in events if isinstance(event, EntryCompleted)]
    ids = [session.id, record.turn_id, *entries]
    parsed = [uuid.UUID(hex=value) for value in ids]
    assert [(u.hex, u.version, u.variant) for u in parsed] == [
        (value, 4, uuid.RFC_4122) for value in ids
    ]
    assert len(set(ids)) == len(ids) == 6


async def test_start_session_imports_history_that_the_model_sees_first() -> None:
    recorder = Recorder()
    history = [
        HistoryImportMessage(role="user", content=[TextContentBlock(text="earlier question")]),
        {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "earlier"}]},
    ]
    agent = Agent("a", model=ScriptedModel([recorder]))
    async with agentlib.open_runtime():
        session = await agent.start_session(history=history)
        await session.run("now")
    entries = recorder.requests[0].entries
    assert [(entry.role, entry.text) for entry in entries] == [  # type: ignore[union-attr]
        ("user", "earlier question"),
        ("assistant", "earlier"),
        ("user", "now"),
    ]


async def test_imported_history_entries_belong_to_no_turn() -> None:
    recorder = Recorder()
    agent = Agent("a", model=ScriptedModel([recorder]))
    async with agentlib.open_runtime():
        session = await agent.start_session(
            history=[HistoryImportMessage(role="user", content=[TextContentBlock(text="old")])]
        )
        await session.run("new")
    imported, current = recorder.requests[0].entries
    assert imported.turn_id is None
    assert current.turn_id == recorder.requests[0].turn_id


async def test_start_session_with_malformed_history_raises_validation_error() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        with pytest.raises(agentlib.ValidationError) as info:
            await agent.start_session(history=[{"type": "message", "role": "robot"}])
    assert isinstance(info.value, ValueError)


async def test_start_session_with_malformed_history_starts_nothing() -> None:
    recorder = Recorder()
    agent = Agent("a", model=ScriptedModel([recorder]))
    async with agentlib.open_runtime():
        with pytest.raises(agentlib.ValidationError):
            await agent.start_session(
                history=[{"type": "message", "role": "user", "content": []}, {"type": "nope"}],
                idempotency_key="k",
            )
        session = await agent.start_session(idempotency_key="k")
        await session.run("hello")
    assert user_texts(recorder.requests[0]) == ["hello"]


async def test_start_session_with_the_same_idempotency_key_returns_the_same_session() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        first = await agent.start_session(idempotency_key="k")
        again = await agent.start_session(idempotency_key="k")
        other = await agent.start_session(idempotency_key="other")
    assert again == first
    assert other != first


async def test_start_session_idempotency_does_not_compare_the_history() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    old = [HistoryImportMessage(role="user", content=[TextContentBlock(text="old")])]
    async with agentlib.open_runtime():
        first = await agent.start_session(idempotency_key="k")
        again = await agent.start_session(history=old, idempotency_key="k")
    assert again == first


async def test_start_session_without_a_key_starts_a_new_session_each_time() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        first = await agent.start_session()
        second = await agent.start_session()
    assert first != second
    assert first.id != second.id


# --- references ---------------------------------------------------------------------------


async def test_agent_session_from_an_id_is_an_equal_reference() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        reference = agent.session(session.id)
    assert reference == session
    assert reference.id == session.id


async def test_equal_session_references_hash_equal_and_work_in_sets_and_dicts() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        reference = agent.session(session.id)
        other = await agent.start_session()
    assert hash(reference) == hash(session)
    assert {session, reference, other} == {session, other}
    assert len({session, reference, other}) == 2
    assert {session: "found"}[reference] == "found"


async def test_references_to_one_session_from_two_agents_are_equal() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    other_agent = Agent("b", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        assert other_agent.session(session.id) == session


async def test_references_to_one_id_in_two_runtimes_are_not_equal() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        async with agentlib.open_runtime():
            elsewhere = agent.session(session.id)
    assert elsewhere != session


async def test_a_session_reference_is_not_equal_to_other_objects() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
    assert session != session.id
    assert session != session.turn("some-turn-id")


async def test_turn_references_to_one_turn_are_equal_and_hash_equal() -> None:
    agent = Agent("a", model=ScriptedModel(["hi", "again"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("hello")
        await turn.result()
        from_id = session.turn(turn.id)
        via_other_reference = agent.session(session.id).turn(turn.id)
        later = await session.send_message("more")
        await later.result()
    assert from_id == turn
    assert via_other_reference == turn
    assert hash(from_id) == hash(turn) == hash(via_other_reference)
    assert len({turn, from_id, via_other_reference, later}) == 2
    assert {turn: 1}[from_id] == 1
    assert later != turn


async def test_a_turn_reference_from_an_id_names_its_session_and_has_started_none() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = session.turn("some-turn-id")
    assert (turn.id, turn.session_id, turn.started) == ("some-turn-id", session.id, None)


async def test_agent_session_with_an_unknown_id_sends_no_request() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        reference = agent.session("no-such-session")
        turn = reference.turn("no-such-turn")
    assert (reference.id, turn.session_id) == ("no-such-session", "no-such-session")


@pytest.mark.parametrize("call", ["send_message", "start_turn", "run"])
async def test_sending_to_an_unknown_session_raises_session_not_found(call: str) -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        reference = agent.session("no-such-session")
        with pytest.raises(agentlib.SessionNotFoundError, match="no-such-session"):
            await getattr(reference, call)("hello")


async def test_reading_a_turn_of_an_unknown_session_raises_session_not_found() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        reference = agent.session("no-such-session")
        with pytest.raises(agentlib.SessionNotFoundError):
            await reference.turn("no-such-turn").get()


async def test_a_session_without_subagents_lists_none() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        assert await session.subagents() == []


# --- send_message -------------------------------------------------------------------------


async def test_send_message_to_an_idle_session_starts_a_turn() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("hello")
        assert turn.started is True
        assert turn.session_id == session.id
        assert isinstance(await turn.result(), Completed)


async def test_send_message_during_a_turn_joins_it() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        turn = await held_turn(session, gate)
        joined = await session.send_message("and also this")
        gate.opened.set()
        await turn.result()
    assert joined.started is False
    assert joined == turn


async def test_a_joined_message_is_seen_by_the_model_at_its_next_step() -> None:
    gate, recorder = Gate(), Recorder()
    async with agentlib.open_runtime():
        session = await held_agent(gate, recorder).start_session()
        turn = await held_turn(session, gate, "first")
        await session.send_message("and also this")
        gate.opened.set()
        record = await turn.result()
    assert isinstance(record, Completed)
    assert user_texts(recorder.requests[0]) == ["first", "and also this"]


async def test_send_message_during_a_stopping_turn_starts_the_next_turn_after_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    reached = trio.Event()

    async def slow_to_stop() -> str:
        """Take a second to clean up when interrupted."""
        reached.set()
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(1)
        return "never"  # pragma: no cover

    recorder = Recorder()
    agent = Agent(
        "a",
        model=ScriptedModel(
            [ModelReply(tool_calls=[ToolCallRequest(name="slow_to_stop")]), recorder]
        ),
        tools=[slow_to_stop],
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        stopping = await session.send_message("first")
        await reached.wait()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stopping.interrupt)
            await trio.testing.wait_all_tasks_blocked()
            assert not isinstance(await stopping.get(), agentlib.Interrupted)
            turn = await session.send_message("second")
        record = await turn.result()
    assert turn.started is True
    assert turn != stopping
    assert isinstance(record, Completed)
    assert user_texts(recorder.requests[0]) == ["first", "second"]


async def test_send_message_with_the_same_key_returns_the_same_turn() -> None:
    agent = Agent("a", model=ScriptedModel(["hi", "again"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        first = await session.send_message("hello", idempotency_key="k")
        await first.result()
        again = await session.send_message("hello", idempotency_key="k")
    assert again == first


async def test_a_joined_message_sent_twice_with_one_key_is_added_once() -> None:
    gate, recorder = Gate(), Recorder()
    async with agentlib.open_runtime():
        session = await held_agent(gate, recorder).start_session()
        turn = await held_turn(session, gate, "first")
        await session.send_message("more", idempotency_key="k")
        again = await session.send_message("more", idempotency_key="k")
        gate.opened.set()
        await turn.result()
    assert again == turn
    assert user_texts(recorder.requests[0]) == ["first", "more"]


async def test_send_message_with_a_used_key_and_another_message_raises_conflict() -> None:
    agent = Agent("a", model=ScriptedModel(["hi", "again"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        await session.send_message("hello", idempotency_key="k")
        with pytest.raises(agentlib.SessionIdempotencyConflictError):
            await session.send_message("something else", idempotency_key="k")


# --- start_turn ---------------------------------------------------------------------------


async def test_start_turn_on_an_idle_session_starts_a_turn() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.start_turn("hello")
        assert isinstance(turn, Turn)
        assert turn.started is True
        assert isinstance(await turn.result(), Completed)


async def test_start_turn_during_a_turn_returns_busy_with_the_active_turn() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        active = await held_turn(session, gate)
        busy = await session.start_turn("another")
        gate.opened.set()
    assert isinstance(busy, Busy)
    assert busy.turn == active


async def test_start_turn_never_joins_the_running_turn() -> None:
    gate, recorder = Gate(), Recorder()
    async with agentlib.open_runtime():
        session = await held_agent(gate, recorder).start_session()
        turn = await held_turn(session, gate, "first")
        await session.start_turn("refused")
        gate.opened.set()
        await turn.result()
    assert user_texts(recorder.requests[0]) == ["first"]


async def test_start_turn_with_the_same_key_returns_the_same_turn() -> None:
    agent = Agent("a", model=ScriptedModel(["hi", "again"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        first = await session.start_turn("hello", idempotency_key="k")
        await session.turn(first.id).result()  # type: ignore[union-attr]
        again = await session.start_turn("hello", idempotency_key="k")
    assert again == first


async def test_start_turn_with_the_key_of_the_active_turn_returns_it_not_busy() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        first = await session.start_turn("go", idempotency_key="k")
        await gate.reached.wait()
        again = await session.start_turn("go", idempotency_key="k")
        gate.opened.set()
    assert isinstance(again, Turn)
    assert again == first


async def test_start_turn_with_a_used_key_and_another_message_raises_conflict() -> None:
    agent = Agent("a", model=ScriptedModel(["hi", "again"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        await session.start_turn("hello", idempotency_key="k")
        with pytest.raises(agentlib.SessionIdempotencyConflictError):
            await session.start_turn("something else", idempotency_key="k")


async def test_a_key_refused_with_busy_starts_a_turn_once_the_active_one_ended() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done", "second answer").start_session()
        active = await held_turn(session, gate)
        refused = await session.start_turn("later", idempotency_key="k")
        gate.opened.set()
        await active.result()
        retried = await session.start_turn("later", idempotency_key="k")
        assert isinstance(retried, Turn)
        record = await retried.result()
    assert isinstance(refused, Busy)
    assert retried.started is True
    assert retried != active
    assert isinstance(record, Completed)
    assert record.text == "second answer"


# --- run ----------------------------------------------------------------------------------


async def test_run_returns_the_turns_record() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("hello")
        assert isinstance(record, Completed)
        assert (record.output, record.text, record.tool_calls) == ("hi", "hi", ())
        assert record.session_id == session.id
        assert record == await session.turn(record.turn_id).get()


async def test_run_during_a_turn_returns_busy() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        active = await held_turn(session, gate)
        busy = await session.run("another")
        gate.opened.set()
    assert isinstance(busy, Busy)
    assert busy.turn == active


async def test_run_with_a_timeout_returns_running_and_leaves_the_turn_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        record = await session.run("go", timeout=5)
        assert isinstance(record, Running)
        gate.opened.set()
        final = await session.turn(record.turn_id).result()
    assert isinstance(final, Completed)


async def test_run_with_an_output_type_structures_the_answer() -> None:
    agent = Agent("a", model=ScriptedModel(['{"ok": true, "reason": "fine"}']))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("judge", output_type=Verdict)
    assert isinstance(record, Completed)
    assert record.output == Verdict(ok=True, reason="fine")
    assert record.text == '{"ok": true, "reason": "fine"}'


async def test_an_agents_attrs_output_type_structures_the_answer() -> None:
    agent = Agent("a", model=ScriptedModel(['{"ok": false, "reason": "no"}']), output_type=Verdict)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("judge")
    assert isinstance(record, Completed)
    assert record.output == Verdict(ok=False, reason="no")


async def test_an_agents_dataclass_output_type_structures_the_answer() -> None:
    agent = Agent("a", model=ScriptedModel(['{"value": 7}']), output_type=Score)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("score")
    assert isinstance(record, Completed)
    assert record.output == Score(value=7)


async def test_a_reference_from_an_id_keeps_the_agents_output_type_for_get() -> None:
    agent = Agent("a", model=ScriptedModel(['{"value": 7}']), output_type=Score)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("score")
        again = await agent.session(session.id).turn(record.turn_id).get()  # type: ignore[union-attr]
    assert isinstance(again, Completed)
    assert again.output == Score(value=7)


async def test_an_answer_that_does_not_fit_the_output_type_fails_the_turn_clearly() -> None:
    agent = Agent("a", model=ScriptedModel(['{"ok": "yes"}']), output_type=Verdict)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("judge")
    assert isinstance(record, Failed)
    assert record.error.type == "ValidationError"
    assert "Verdict" in record.error.message
    assert "ok" in record.error.message
    assert "reason" in record.error.message


async def test_an_answer_that_is_not_json_fails_the_turn_saying_so() -> None:
    agent = Agent("a", model=ScriptedModel(["sure, it is fine"]), output_type=Verdict)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("judge")
    assert isinstance(record, Failed)
    assert "not JSON" in record.error.message
    assert "Verdict" in record.error.message


async def test_completed_tool_calls_hold_only_this_turns_calls() -> None:
    def lookup(key: str) -> str:
        """Look up."""
        return key

    def calls(*keys: str) -> ModelReply:
        return ModelReply(
            tool_calls=[ToolCallRequest(name="lookup", arguments={"key": key}) for key in keys]
        )

    agent = Agent(
        "a",
        model=ScriptedModel([calls("a"), "first", calls("b", "c"), calls("d"), "second"]),
        tools=[lookup],
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        await session.run("one")
        record = await session.run("two")
    assert isinstance(record, Completed)
    assert [call.arguments["key"] for call in record.tool_calls] == ["b", "c", "d"]
    assert {call.turn_id for call in record.tool_calls} == {record.turn_id}


# --- cancel -------------------------------------------------------------------------------


async def test_cancel_interrupts_the_running_turn_as_cancelled() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        turn = await held_turn(session, gate)
        await session.cancel()
        record = await turn.get()
    assert isinstance(record, Interrupted)
    assert record.cause == "cancelled"


async def test_cancel_returns_once_the_running_turn_has_ended() -> None:
    gate = Gate()
    async with agentlib.open_runtime():
        session = await held_agent(gate, "done").start_session()
        turn = await held_turn(session, gate)
        await session.cancel()
        assert not isinstance(await turn.get(), Running)


async def test_cancel_is_idempotent() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("hello")
        await session.cancel()
        await session.cancel()
        await agent.session(session.id).cancel()
        assert await session.turn(record.turn_id).get() == record  # type: ignore[union-attr]


@pytest.mark.parametrize("call", ["send_message", "start_turn", "run"])
async def test_sends_after_cancel_raise_session_terminated(call: str) -> None:
    agent = Agent("a", model=ScriptedModel(["hi", "again"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        await session.run("hello")
        await session.cancel()
        with pytest.raises(agentlib.SessionTerminatedError):
            await getattr(session, call)("more")


async def test_history_stays_readable_after_cancel() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("hello")
        await session.cancel()
        events = [event async for event in session.iter_events()]
        again = await session.turn(record.turn_id).get()  # type: ignore[union-attr]
    assert isinstance(again, Completed)
    assert again.text == "hi"
    assert isinstance(events[-1], agentlib.TurnEnded)
    assert events[-1].record.turn_id == record.turn_id  # type: ignore[union-attr]


async def test_a_message_may_mix_blocks_and_dicts() -> None:
    agent = Agent("echo", model=agentlib.FunctionModel(lambda request: request.entries[-1].text))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run([TextContentBlock(text="a"), {"type": "text", "text": "b"}])
    assert isinstance(record, Completed)
    assert record.output == "ab"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ([{"type": "text", "text": 3}], "expected a string, got int @ $[0].text"),
        ([TextContentBlock(text="ok"), 5], "got int @ $[1]"),
        ([{"type": "video", "uri": "sk-secret-uri"}], "does not know @ $[0]"),
    ],
)
async def test_a_malformed_block_in_a_message_names_its_index(
    content: object, fragment: str
) -> None:
    agent = Agent("echo", model=ScriptedModel(["unused"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with pytest.raises(agentlib.ValidationError) as raised:
            await session.send_message(content)
    message = str(raised.value)
    assert message.startswith("invalid message: ")
    assert fragment in message
    assert "sk-secret" not in message
