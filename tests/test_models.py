"""Models: ScriptedModel steps, FunctionModel, and the ModelRequest the engine sends (SPEC 2)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
from _support import Recorder

import agentlib
from agentlib import (
    Agent,
    Completed,
    Failed,
    FunctionModel,
    MessageEntry,
    ModelReply,
    ModelRequest,
    ScriptedModel,
    ToolCallEntry,
    ToolCallRequest,
    ToolResultEntry,
)


@attrs.frozen
class Verdict:
    ok: bool
    reason: str


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"value of {key}"


def lookup_call() -> ModelReply:
    return ModelReply(tool_calls=[ToolCallRequest(name="lookup", arguments={"key": "k"})])


async def run_once(agent: Agent, message: str = "hello") -> agentlib.TurnState[Any]:
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run(message)
    assert not isinstance(record, agentlib.Busy)
    return record


# --- ScriptedModel steps ------------------------------------------------------------------


async def test_a_str_step_is_the_final_answer() -> None:
    record = await run_once(Agent("a", model=ScriptedModel(["the answer"])))
    assert isinstance(record, Completed)
    assert (record.output, record.text) == ("the answer", "the answer")


async def test_a_model_reply_step_with_text_only_is_the_final_answer() -> None:
    record = await run_once(Agent("a", model=ScriptedModel([ModelReply(text="the answer")])))
    assert isinstance(record, Completed)
    assert record.text == "the answer"


async def test_a_model_reply_step_with_tool_calls_runs_them_then_takes_the_next_step() -> None:
    recorder = Recorder()
    agent = Agent("a", model=ScriptedModel([lookup_call(), recorder]), tools=[lookup])
    record = await run_once(agent)
    assert isinstance(record, Completed)
    assert [call.name for call in record.tool_calls] == ["lookup"]
    assert len(recorder.requests) == 1


async def test_a_sync_callable_step_receives_the_request_and_its_reply_is_used() -> None:
    seen: list[ModelRequest] = []

    def step(request: ModelRequest) -> ModelReply:
        seen.append(request)
        return ModelReply(text="from a function")

    record = await run_once(Agent("a", model=ScriptedModel([step])))
    assert isinstance(seen[0], ModelRequest)
    assert isinstance(record, Completed)
    assert record.text == "from a function"


async def test_an_async_callable_step_receives_the_request_and_its_reply_is_used() -> None:
    seen: list[ModelRequest] = []

    async def step(request: ModelRequest) -> str:
        await trio.lowlevel.checkpoint()
        seen.append(request)
        return "from a coroutine"

    record = await run_once(Agent("a", model=ScriptedModel([step])))
    assert isinstance(seen[0], ModelRequest)
    assert isinstance(record, Completed)
    assert record.text == "from a coroutine"


async def test_a_step_giving_neither_str_nor_reply_fails_the_turn_with_model_error() -> None:
    record = await run_once(Agent("a", model=ScriptedModel([lambda request: 42])))
    assert isinstance(record, Failed)
    assert record.error.type == "ModelError"
    assert "int" in record.error.message


# --- the request --------------------------------------------------------------------------


async def test_the_request_holds_the_agents_instructions() -> None:
    recorder = Recorder()
    await run_once(Agent("a", instructions="Be brief.", model=ScriptedModel([recorder])))
    assert recorder.requests[0].instructions == "Be brief."


async def test_the_request_holds_the_tool_schemas() -> None:
    recorder = Recorder()
    await run_once(Agent("a", model=ScriptedModel([recorder]), tools=[lookup]))
    [schema] = recorder.requests[0].tools
    assert schema.name == "lookup"
    assert schema.description == "Look a key up."
    assert schema.parameters == {
        "type": "object",
        "properties": {"key": {"type": "string", "description": "The key."}},
        "required": ["key"],
        "additionalProperties": False,
    }


async def test_the_request_has_no_tools_for_an_agent_without_tools() -> None:
    recorder = Recorder()
    await run_once(Agent("a", model=ScriptedModel([recorder])))
    assert recorder.requests[0].tools == ()


async def test_the_first_request_of_a_turn_ends_with_the_users_message() -> None:
    recorder = Recorder()
    await run_once(Agent("a", model=ScriptedModel([recorder])), "hello there")
    [message] = recorder.requests[0].entries
    assert isinstance(message, MessageEntry)
    assert (message.role, message.text) == ("user", "hello there")


async def test_the_next_request_holds_the_tool_call_and_its_result() -> None:
    recorder = Recorder()
    agent = Agent("a", model=ScriptedModel([lookup_call(), recorder]), tools=[lookup])
    await run_once(agent)
    user, tool_call, result = recorder.requests[0].entries
    assert isinstance(user, MessageEntry)
    assert isinstance(tool_call, ToolCallEntry)
    assert (tool_call.name, tool_call.arguments) == ("lookup", {"key": "k"})
    assert isinstance(result, ToolResultEntry)
    assert result.text == "value of k"


async def test_the_request_holds_the_earlier_turns_of_the_session() -> None:
    recorder = Recorder()
    agent = Agent("a", model=ScriptedModel(["first answer", recorder]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        await session.run("one")
        await session.run("two")
    texts = [(entry.role, entry.text) for entry in recorder.requests[0].entries]  # type: ignore[union-attr]
    assert texts == [("user", "one"), ("assistant", "first answer"), ("user", "two")]


async def test_the_requests_entries_do_not_change_after_the_step() -> None:
    seen: list[ModelRequest] = []

    def first(request: ModelRequest) -> ModelReply:
        seen.append(request)
        return lookup_call()

    await run_once(Agent("a", model=ScriptedModel([first, "done"]), tools=[lookup]))
    assert [entry.type for entry in seen[0].entries] == ["message"]


async def test_the_request_names_the_session_and_the_turn() -> None:
    recorder = Recorder()
    agent = Agent("a", model=ScriptedModel([recorder]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("hello")
        await turn.result()
    request = recorder.requests[0]
    assert (request.session_id, request.turn_id) == (session.id, turn.id)


async def test_the_request_counts_the_model_steps_of_its_turn_from_one() -> None:
    steps: list[int] = []

    def model(request: ModelRequest) -> ModelReply | str:
        steps.append(request.step)
        if request.step < 3:
            return lookup_call()
        return "done"

    agent = Agent("a", model=FunctionModel(model), tools=[lookup])
    async with agentlib.open_runtime():
        session = await agent.start_session()
        await session.run("one")
        await session.run("two")
    assert steps == [1, 2, 3, 1, 2, 3]  # each turn counts again


async def test_a_scripted_step_sees_which_step_of_the_turn_it_plays() -> None:
    recorder = Recorder()
    agent = Agent(
        "a", model=ScriptedModel([lookup_call(), lookup_call(), recorder]), tools=[lookup]
    )
    await run_once(agent)
    assert recorder.requests[0].step == 3


def test_a_request_is_for_the_first_step_unless_it_says_otherwise() -> None:
    assert ModelRequest().step == 1
    for step in (0, -1):
        with pytest.raises(ValueError, match="step"):
            ModelRequest(step=step)


async def test_the_request_has_no_output_schema_without_an_output_type() -> None:
    recorder = Recorder()
    await run_once(Agent("a", model=ScriptedModel([recorder])))
    assert recorder.requests[0].output_schema is None


async def test_the_request_holds_the_output_types_json_schema() -> None:
    recorder = Recorder('{"ok": true, "reason": "fine"}')
    await run_once(Agent("a", model=ScriptedModel([recorder]), output_type=Verdict))
    schema = recorder.requests[0].output_schema
    assert schema is not None
    assert schema["type"] == "object"
    assert schema["properties"] == {"ok": {"type": "boolean"}, "reason": {"type": "string"}}
    assert schema["required"] == ["ok", "reason"]


async def test_the_request_holds_the_schema_of_the_output_type_given_to_run() -> None:
    recorder = Recorder('{"ok": true, "reason": "fine"}')
    agent = Agent("a", model=ScriptedModel([recorder]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        await session.run("judge", output_type=Verdict)
    schema = recorder.requests[0].output_schema
    assert schema is not None
    assert set(schema["properties"]) == {"ok", "reason"}


# --- scripts and sessions -----------------------------------------------------------------


async def test_each_session_starts_the_script_at_its_first_step() -> None:
    agent = Agent("a", model=ScriptedModel(["first", "second"]))
    async with agentlib.open_runtime():
        one = await agent.start_session()
        two = await agent.start_session()
        record_one = await one.run("hi")
        record_two = await two.run("hi")
    assert isinstance(record_one, Completed)
    assert isinstance(record_two, Completed)
    assert (record_one.text, record_two.text) == ("first", "first")


async def test_the_turns_of_a_session_play_the_following_steps() -> None:
    agent = Agent("a", model=ScriptedModel(["first", "second"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        texts = [getattr(await session.run(message), "text", None) for message in ("a", "b")]
    assert texts == ["first", "second"]


async def test_running_out_of_steps_fails_the_turn_with_a_model_error() -> None:
    agent = Agent("a", model=ScriptedModel([lookup_call()]), tools=[lookup])
    record = await run_once(agent)
    assert isinstance(record, Failed)
    assert record.error.type == "ModelError"
    assert "no step left" in record.error.message
    assert "ScriptedModel" in record.error.message


async def test_an_empty_script_fails_the_first_turn_with_a_model_error() -> None:
    record = await run_once(Agent("a", model=ScriptedModel([])))
    assert isinstance(record, Failed)
    assert record.error.type == "ModelError"


async def test_a_session_out_of_steps_does_not_affect_a_new_session() -> None:
    agent = Agent("a", model=ScriptedModel(["only"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        await session.run("a")
        failed = await session.run("b")
        fresh = await (await agent.start_session()).run("c")
    assert isinstance(failed, Failed)
    assert isinstance(fresh, Completed)


# --- FunctionModel ------------------------------------------------------------------------


async def test_a_function_model_is_called_for_every_step() -> None:
    requests: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelReply | str:
        requests.append(request)
        if len(requests) < 3:
            return lookup_call()
        return "done"

    record = await run_once(Agent("a", model=FunctionModel(model), tools=[lookup]))
    assert isinstance(record, Completed)
    assert len(requests) == 3
    assert [len(request.entries) for request in requests] == [1, 3, 5]


async def test_a_function_model_may_be_async() -> None:
    async def model(request: ModelRequest) -> str:
        await trio.lowlevel.checkpoint()
        return f"you said {request.entries[-1].text}"  # type: ignore[union-attr]

    record = await run_once(Agent("a", model=FunctionModel(model)), "hi")
    assert isinstance(record, Completed)
    assert record.output == "you said hi"


async def test_a_model_error_raised_by_the_model_fails_the_turn() -> None:
    def model(request: ModelRequest) -> str:
        raise agentlib.ModelError("upstream said 503", status=503)

    record = await run_once(Agent("a", model=FunctionModel(model)))
    assert isinstance(record, Failed)
    assert record.error == agentlib.ErrorInfo(type="ModelError", message="upstream said 503")


async def test_any_object_with_an_async_complete_method_is_a_model() -> None:
    class Echo:
        async def complete(self, request: ModelRequest, *, on_text: Any = None) -> ModelReply:
            return ModelReply(text=request.entries[-1].text)  # type: ignore[union-attr]

    record = await run_once(Agent("a", model=Echo()), "echo me")
    assert isinstance(record, Completed)
    assert record.text == "echo me"


def test_an_agent_without_a_model_object_raises_type_error() -> None:
    with pytest.raises(TypeError, match="ScriptedModel"):
        Agent("a", model=42)  # type: ignore[arg-type]


def test_an_agent_with_a_string_naming_no_model_raises_value_error() -> None:
    with pytest.raises(ValueError, match="'mistral:<model>'"):
        Agent("a", model="not a model")
