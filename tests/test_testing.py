"""agentlib.testing: TestModel, Agent.override and block_model_requests (SPEC section 15), and
the store contract's suite, agentlib.testing.store_contract (SPEC section 14)."""

from __future__ import annotations

import dataclasses
import enum
import json
import subprocess
import sys
from typing import Annotated, Any, Literal

import attrs
import httpx
import pytest
import trio
import trio.testing
from _http_server import Server, recording

import agentlib
import agentlib.testing
import agentlib.testing.store_contract
from agentlib import (
    Agent,
    Blocked,
    Completed,
    EntryCompleted,
    EntryDelta,
    Event,
    Failed,
    FunctionModel,
    MistralModel,
    ModelError,
    ModelReply,
    ModelRequest,
    OpenAICompatibleModel,
    OpenClientToolCall,
    ScriptedModel,
    ToolResultEntry,
    ToolSchema,
    ToolSource,
    client_tool,
    tool,
)
from agentlib.testing import TestModel, block_model_requests


async def run(agent: Agent, message: str = "go", **options: Any) -> agentlib.TurnState[Any]:
    async with agentlib.open_runtime():
        session = await agent.start_session(**options)
        record = await session.run(message)
    assert not isinstance(record, agentlib.Busy)
    return record


async def run_with_results(
    agent: Agent, message: str = "go", **options: Any
) -> tuple[agentlib.TurnState[Any], list[ToolResultEntry]]:
    """A turn's record, and the tool results its events show."""
    events: list[Event] = []
    async with agentlib.open_runtime():
        session = await agent.start_session(**options)
        record = await session.run(message, on_event=events.append)
    assert not isinstance(record, agentlib.Busy)
    found = [
        event.entry
        for event in events
        if isinstance(event, EntryCompleted) and isinstance(event.entry, ToolResultEntry)
    ]
    return record, found


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def shout(text: str) -> str:
    """Shout a text."""
    return text.upper()


async def complete(model: TestModel, request: ModelRequest) -> ModelReply:
    return await model.complete(request)


def arguments_for(parameters: dict[str, Any], **options: Any) -> Any:
    """The arguments a TestModel's first step gives a tool of this schema."""
    model = TestModel(**options)
    request = ModelRequest(tools=[ToolSchema(name="t", parameters=parameters)], turn_id="t1")
    reply = trio.run(complete, model, request)
    return reply.tool_calls[0].arguments


# --- TestModel: the tools, then the answer ------------------------------------------------


async def test_test_model_calls_every_tool_once_then_answers_with_their_results() -> None:
    model = TestModel()
    record = await run(Agent("a", model=model, tools=[add, shout]))
    assert isinstance(record, Completed)
    assert [(call.name, call.arguments) for call in record.tool_calls] == [
        ("add", {"a": 0, "b": 1}),
        ("shout", {"text": "a"}),
    ]
    assert json.loads(record.text) == {"add": 1, "shout": "A"}
    assert [request.step for request in model.requests] == [1, 2]


async def test_test_model_answers_an_empty_object_when_no_tool_is_offered() -> None:
    record = await run(Agent("a", model=TestModel()))
    assert isinstance(record, Completed)
    assert record.text == "{}"
    assert record.tool_calls == ()


async def test_test_model_calls_only_the_tools_call_tools_names() -> None:
    record = await run(Agent("a", model=TestModel(call_tools=["shout"]), tools=[add, shout]))
    assert isinstance(record, Completed)
    assert [call.name for call in record.tool_calls] == ["shout"]
    assert json.loads(record.text) == {"shout": "A"}


async def test_test_model_passes_over_names_the_request_does_not_offer() -> None:
    record = await run(Agent("a", model=TestModel(call_tools=["nothing", "add"]), tools=[add]))
    assert isinstance(record, Completed)
    assert [call.name for call in record.tool_calls] == ["add"]


async def test_test_model_answers_at_once_when_call_tools_is_empty() -> None:
    record = await run(Agent("a", model=TestModel(call_tools=[]), tools=[add]))
    assert isinstance(record, Completed)
    assert record.tool_calls == ()


async def test_test_model_calls_the_tools_again_in_each_turn() -> None:
    agent = Agent("a", model=TestModel(), tools=[add])
    async with agentlib.open_runtime():
        session = await agent.start_session()
        first = await session.run("one")
        second = await session.run("two")
    assert isinstance(first, Completed)
    assert isinstance(second, Completed)
    assert [call.name for call in first.tool_calls] == ["add"]
    assert [call.name for call in second.tool_calls] == ["add"]


async def test_test_model_reports_a_failed_call_as_an_error_in_its_answer() -> None:
    def broken(city: str) -> str:
        """Always fails."""
        raise LookupError("no such city")

    record = await run(Agent("a", model=TestModel(), tools=[broken]))
    assert isinstance(record, Completed)
    assert json.loads(record.text) == {"broken": {"error": "LookupError: no such city"}}


async def test_test_model_records_every_request_it_receives() -> None:
    model = TestModel()
    agent = Agent("a", "Be brief.", model=model, tools=[add])
    record = await run(agent, "hello")
    assert [request.turn_id for request in model.requests] == [record.turn_id] * 2
    assert model.requests[0].instructions == "Be brief."
    assert [schema.name for schema in model.requests[0].tools] == ["add"]
    assert isinstance(model.requests[1].entries[-1], ToolResultEntry)


async def test_test_model_streams_its_answer_as_deltas() -> None:
    events: list[Event] = []
    async with agentlib.open_runtime():
        session = await Agent("a", model=TestModel(custom_output_text="hi")).start_session()
        record = await session.run("go", on_event=events.append)
    assert isinstance(record, Completed)
    assert [event.delta for event in events if isinstance(event, EntryDelta)] == ["hi"]


# --- TestModel: arguments each kind of parameter accepts -------------------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.frozen
class Point:
    x: int
    y: float = 0.0


@attrs.frozen
class Tree:
    label: str
    children: list[Tree] = attrs.field(factory=list)


@dataclasses.dataclass
class Box:
    name: str
    corners: list[Point]
    label: str | None = None


PARAMETER_KINDS: dict[str, tuple[Any, type | tuple[type, ...]]] = {
    "str": (str, str),
    "int": (int, int),
    "float": (float, float),
    "bool": (bool, bool),
    "any": (Any, object),
    "literal_of_strings": (Literal["celsius", "fahrenheit"], str),
    "literal_of_mixed": (Literal["x", 1, True, None], (str, int, type(None))),
    "enum": (Color, Color),
    "int_enum": (Level, Level),
    "union_of_scalars": (int | str, (int, str)),
    "fixed_tuple": (tuple[int, str], tuple),
    "recursive_class": (Tree, Tree),
    "optional": (int | None, int),
    "union_with_none": (Point | None, Point),
    "union_of_classes": (Point | Box, (Point, Box)),
    "list": (list[str], list),
    "bare_list": (list, list),
    "list_of_classes": (list[Point], list),
    "tuple_of_any_length": (tuple[int, ...], tuple),
    "set": (set[int], set),
    "frozenset": (frozenset[str], frozenset),
    "dict": (dict[str, float], dict),
    "bare_dict": (dict, dict),
    "dict_of_classes": (dict[str, Point], dict),
    "attrs_class": (Point, Point),
    "dataclass": (Box, Box),
    "annotated": (Annotated[int, "a count"], int),
}


@pytest.mark.parametrize("kind", sorted(PARAMETER_KINDS))
async def test_test_model_arguments_fit_every_kind_of_parameter(kind: str) -> None:
    annotation, expected = PARAMETER_KINDS[kind]
    seen: list[Any] = []

    def check(value: Any) -> str:
        seen.append(value)
        return "ok"

    check.__name__ = f"take_{kind}"
    check.__annotations__ = {"value": annotation, "return": str}
    for seed in (0, 1, 7):
        record, found = await run_with_results(
            Agent("a", model=TestModel(seed=seed), tools=[check])
        )
        assert isinstance(record, Completed)
        assert [(result.is_error, result.text) for result in found] == [(False, "ok")]
    assert all(isinstance(value, expected) for value in seen)


async def test_test_model_arguments_fit_optional_parameters_and_defaults() -> None:
    def search(
        query: str, limit: int = 10, exact: bool = False, tags: list[str] | None = None
    ) -> str:
        """Search."""
        return "ok"

    record, found = await run_with_results(Agent("a", model=TestModel(), tools=[search]))
    assert [result.is_error for result in found] == [False]
    assert record.tool_calls[0].arguments == {
        "query": "a",
        "limit": 1,
        "exact": True,
        "tags": ["d"],
    }


async def test_test_model_calls_tools_of_a_source_and_leaves_out_session_inputs() -> None:
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    source = ToolSource(name="store", tools=[lookup])
    record, found = await run_with_results(Agent("a", model=TestModel(), tools=[source]))
    assert [call.name for call in record.tool_calls] == ["store.lookup"]
    assert [(result.name, result.is_error) for result in found] == [("store.lookup", False)]


@attrs.frozen
class Location:
    latitude: float
    longitude: float


async def test_test_model_calls_a_client_tool_that_the_client_answers() -> None:
    @client_tool
    def device_location(precise: bool) -> Location:
        """The device's location."""
        ...

    asked: list[OpenClientToolCall] = []

    def locate(call: OpenClientToolCall) -> Location:
        asked.append(call)
        return Location(latitude=48.85, longitude=2.35)

    record = await run(
        Agent("a", model=TestModel(), tools=[device_location]), on_client_tool=locate
    )
    assert isinstance(record, Completed)
    assert [(call.tool_name, call.arguments) for call in asked] == [
        ("client.device_location", {"precise": True})
    ]
    assert json.loads(record.text) == {
        "client.device_location": {"latitude": 48.85, "longitude": 2.35}
    }


async def test_test_model_delegates_to_each_subagent() -> None:
    helper = Agent("helper", model=TestModel(custom_output_text="helped"))
    record = await run(Agent("a", model=TestModel(), subagents=[helper]))
    assert isinstance(record, Completed)
    assert [(call.name, call.arguments) for call in record.tool_calls] == [
        ("helper", {"message": "a"})
    ]
    assert json.loads(record.text) == {"helper": "helped"}


async def test_test_model_blocks_on_a_tool_that_requires_approval() -> None:
    @tool(requires_approval=True)
    def delete(name: str) -> str:
        """Delete something."""
        return f"deleted {name}"

    record = await run(Agent("a", model=TestModel(), tools=[delete]))
    assert isinstance(record, Blocked)


# --- TestModel: the answer of an output type -----------------------------------------------


@attrs.frozen
class Forecast:
    city: str
    degrees: float
    sky: Literal["sunny", "cloudy"]
    color: Color
    hours: list[int]
    location: Point
    note: str | None = None


async def test_test_model_answers_with_a_value_of_the_output_type() -> None:
    record = await run(Agent("a", model=TestModel(), tools=[add], output_type=Forecast))
    assert isinstance(record, Completed)
    assert [call.name for call in record.tool_calls] == ["add"]
    assert isinstance(record.output, Forecast)
    assert record.output == agentlib.structure(json.loads(record.text), Forecast)


@pytest.mark.parametrize("output_type", [int, float, bool, list[str], Color, Point | Box])
async def test_test_model_answers_with_a_value_of_any_output_type(output_type: Any) -> None:
    record = await run(Agent("a", model=TestModel(), output_type=output_type))
    assert isinstance(record, Completed)


async def test_custom_output_text_is_the_answer() -> None:
    record = await run(Agent("a", model=TestModel(custom_output_text="Done."), tools=[add]))
    assert isinstance(record, Completed)
    assert [call.name for call in record.tool_calls] == ["add"]
    assert record.text == "Done."


async def test_custom_output_args_is_the_answer_of_an_output_type() -> None:
    wanted = Point(x=3, y=4.5)
    record = await run(Agent("a", model=TestModel(custom_output_args=wanted), output_type=Point))
    assert isinstance(record, Completed)
    assert record.output == wanted


async def test_custom_output_args_is_sent_as_json_without_an_output_type() -> None:
    record = await run(Agent("a", model=TestModel(custom_output_args={"ok": True})))
    assert isinstance(record, Completed)
    assert record.text == '{"ok": true}'


# --- TestModel: generated values -----------------------------------------------------------


def test_the_same_seed_gives_the_same_arguments_and_another_seed_others() -> None:
    schema = tool(add).parameters
    assert arguments_for(dict(schema), seed=5) == arguments_for(dict(schema), seed=5)
    assert arguments_for(dict(schema), seed=5) == {"a": 5, "b": 6}
    assert arguments_for(dict(schema)) != arguments_for(dict(schema), seed=5)


def test_a_tools_arguments_do_not_depend_on_the_other_tools() -> None:
    async def calls() -> tuple[ModelReply, ModelReply]:
        alone = ModelRequest(tools=[tool(shout).schema], turn_id="t")
        both = ModelRequest(tools=[tool(add).schema, tool(shout).schema], turn_id="t")
        return await TestModel().complete(alone), await TestModel().complete(both)

    alone, both = trio.run(calls)
    assert alone.tool_calls[0].arguments == both.tool_calls[1].arguments


def test_generated_values_keep_within_bounds_and_lengths() -> None:
    arguments = arguments_for(
        {
            "type": "object",
            "properties": {
                "small": {"type": "integer", "minimum": 10, "maximum": 12},
                "above": {"type": "integer", "exclusiveMinimum": 100},
                "below": {"type": "number", "exclusiveMaximum": 0},
                "even": {"type": "integer", "minimum": 3, "multipleOf": 2},
                "code": {"type": "string", "minLength": 4, "maxLength": 4},
                "pair": {"type": "array", "items": {"type": "integer"}, "minItems": 2},
                "none": {"type": "array", "items": {"type": "integer"}, "maxItems": 0},
            },
            "required": ["small", "above", "below", "even", "code", "pair", "none"],
        }
    )
    assert 10 <= arguments["small"] <= 12
    assert arguments["above"] > 100
    assert arguments["below"] < 0
    assert arguments["even"] >= 3
    assert arguments["even"] % 2 == 0
    assert len(arguments["code"]) == 4
    assert len(set(arguments["pair"])) == 2
    assert arguments["none"] == []


def test_generated_values_follow_refs_consts_formats_and_type_lists() -> None:
    arguments = arguments_for(
        {
            "type": "object",
            "$defs": {
                "Pet": {
                    "type": "object",
                    "properties": {"kind": {"const": "cat"}, "born": {"format": "date"}},
                    "required": ["kind", "born"],
                }
            },
            "properties": {
                "pet": {"$ref": "#/$defs/Pet"},
                "both": {"allOf": [{"$ref": "#/$defs/Pet"}], "description": "A pet."},
                "when": {"type": "string", "format": "date-time"},
                "maybe": {"type": ["null", "integer"]},
                "either": {"oneOf": [{"type": "null"}, {"type": "boolean"}]},
                "fixed": {"default": 3},
            },
            "required": ["pet", "both", "when", "maybe", "either", "fixed"],
        }
    )
    assert arguments["pet"] == {"kind": "cat", "born": "2000-01-01"}
    assert arguments["both"] == {"kind": "cat", "born": "2000-01-01"}
    assert arguments["when"] == "2000-01-01T00:00:00Z"
    assert isinstance(arguments["maybe"], int)
    assert isinstance(arguments["either"], bool)
    assert arguments["fixed"] == 3


def test_generated_values_follow_refs_to_the_definitions_of_a_nested_schema() -> None:
    # A pydantic model's schema, as a tool parameter's, keeps its own $defs.
    order = {
        "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string"}}}},
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
        "required": ["items"],
    }
    arguments = arguments_for(
        {"type": "object", "properties": {"order": order}, "required": ["order"]}
    )
    assert arguments == {"order": {"items": [{"sku": "a"}]}}


def test_generated_values_end_for_a_schema_that_refers_to_itself() -> None:
    arguments = arguments_for(
        {
            "type": "object",
            "$defs": {
                "Node": {
                    "type": "object",
                    "properties": {
                        "next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
                        "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                    },
                    "required": ["next", "children"],
                }
            },
            "properties": {"node": {"$ref": "#/$defs/Node"}},
            "required": ["node"],
        }
    )
    depth, node = 0, arguments["node"]
    while node is not None:
        depth, node = depth + 1, node["next"]
    assert 1 < depth < 10


def test_a_ref_to_nothing_is_a_model_error_naming_the_tool() -> None:
    with pytest.raises(ModelError, match=r"TestModel cannot call t: .*'#/\$defs/Gone'"):
        arguments_for({"type": "object", "properties": {"x": {"$ref": "#/$defs/Gone"}}})


# --- TestModel: its arguments --------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"call_tools": "add"}, r"call_tools takes 'all' or a list of tool ids, such as \['add'\]"),
        ({"call_tools": [1]}, "call_tools takes 'all' or a list of tool ids"),
        ({"custom_output_text": "a", "custom_output_args": {}}, "not both"),
        ({"custom_output_text": 1}, "custom_output_text must be a str"),
        ({"custom_output_args": {"a": object()}}, "custom_output_args has no JSON form"),
        ({"seed": True}, "seed must be an int"),
    ],
)
def test_test_model_refuses_malformed_arguments(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TestModel(**options)


def test_test_model_is_a_model_of_agentlib_testing() -> None:
    assert isinstance(TestModel(), agentlib.Model)
    assert TestModel.__module__ == "agentlib.testing"
    assert block_model_requests.__module__ == "agentlib.testing"
    assert agentlib.testing.__all__ == sorted(agentlib.testing.__all__)
    assert agentlib.testing.ScriptedModel is ScriptedModel
    assert agentlib.testing.FunctionModel is FunctionModel


# --- Agent.override -----------------------------------------------------------------------


def answering(text: str) -> ScriptedModel:
    return ScriptedModel([text] * 10)


async def test_override_runs_the_sessions_of_the_block_on_the_model() -> None:
    agent = Agent("a", model=answering("own"))
    async with agentlib.open_runtime():
        with agent.override(model=answering("override")):
            session = await agent.start_session()
            inside = await session.run("go")
        outside = await session.run("go")
    assert isinstance(inside, Completed)
    assert inside.text == "override"
    assert isinstance(outside, Completed)
    assert outside.text == "own"


async def test_override_reaches_a_session_started_before_the_block() -> None:
    agent = Agent("a", model=answering("own"))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with agent.override(model=answering("override")):
            record = await session.run("go")
    assert isinstance(record, Completed)
    assert record.text == "override"


async def test_override_reaches_a_session_resumed_from_a_store(tmp_path: Any) -> None:
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    agent = Agent("a", model=answering("own"))
    async with agentlib.open_runtime(store):
        session_id = (await agent.start_session()).id
    async with agentlib.open_runtime(store):
        with agent.override(model=answering("override")):
            record = await agent.session(session_id).run("go")
    assert isinstance(record, Completed)
    assert record.text == "override"


async def test_override_puts_the_model_back_when_the_block_raises() -> None:
    own = answering("own")
    agent = Agent("a", model=own)
    with pytest.raises(LookupError), agent.override(model=TestModel()):
        raise LookupError
    assert agent.model is own


def test_overrides_nest_and_the_innermost_wins() -> None:
    own, outer, inner = answering("own"), TestModel(), TestModel()
    agent = Agent("a", model=own)
    with agent.override(model=outer):
        with agent.override(model=inner):
            assert agent.model is inner
        assert agent.model is outer
    assert agent.model is own


async def test_overlapping_overrides_ending_out_of_order_keep_the_one_still_in_force() -> None:
    own, first, second = answering("own"), TestModel(), TestModel()
    agent = Agent("a", model=own)
    first_in, second_in, first_out = trio.Event(), trio.Event(), trio.Event()

    async def hold_first() -> None:
        with agent.override(model=first):
            first_in.set()
            await second_in.wait()
        first_out.set()

    async def hold_second() -> None:
        await first_in.wait()
        with agent.override(model=second):
            second_in.set()
            await first_out.wait()
            assert agent.model is second
        assert agent.model is own

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold_first)
        nursery.start_soon(hold_second)
    assert agent.model is own


async def test_override_leaves_the_subagents_models() -> None:
    helper = Agent("helper", model=answering("helper's own"))
    agent = Agent("a", model=answering("own"), subagents=[helper])
    async with agentlib.open_runtime():
        with agent.override(model=TestModel()):
            record = await (await agent.start_session()).run("go")
    assert isinstance(record, Completed)
    assert json.loads(record.text) == {"helper": "helper's own"}


def test_override_takes_a_model_string() -> None:
    agent = Agent("a", model=answering("own"))
    with agent.override(model="openai:llama3.1@http://localhost:11434/v1"):
        assert isinstance(agent.model, OpenAICompatibleModel)


def test_override_refuses_what_is_not_a_model() -> None:
    agent = Agent("a", model=answering("own"))
    with pytest.raises(TypeError, match="override takes a model object"), agent.override(model=42):
        pass


# --- block_model_requests ------------------------------------------------------------------


@pytest.fixture
def clock(mock_clock: trio.testing.MockClock) -> trio.testing.MockClock:
    """Virtual time that jumps once every task has waited 10 ms (real) for something: the
    replies travel over real sockets."""
    mock_clock.autojump_threshold = 0.01
    return mock_clock


KEY = "sk-test-guard-4b1e9c"


def mistral(server: Server, **options: Any) -> MistralModel:
    return MistralModel("mistral-small-latest", api_key=KEY, base_url=f"{server.url}/v1", **options)


async def test_a_blocked_http_model_fails_the_turn_and_sends_nothing(server: Server) -> None:
    with block_model_requests():
        record = await run(Agent("a", model=mistral(server)))
    assert isinstance(record, Failed)
    assert record.error.type == "ModelError"
    assert record.error.message.startswith("model requests are blocked: MistralModel(")
    assert "agentlib.testing.block_model_requests()" in record.error.message
    assert server.requests == []


async def test_a_blocked_model_raises_before_its_client_sends_anything() -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        model = OpenAICompatibleModel("llama3.1", "http://localhost:1/v1", http_client=client)
        with block_model_requests(), pytest.raises(ModelError, match="model requests are blocked"):
            await model.complete(ModelRequest())
    assert sent == []


@pytest.mark.parametrize("stream", [True, False])
async def test_a_blocked_model_never_holds_its_key_in_the_message(stream: bool) -> None:
    model = MistralModel("mistral-small-latest", api_key=KEY, stream=stream)
    with block_model_requests():
        record = await run(Agent("a", model=model))
    assert isinstance(record, Failed)
    assert KEY not in record.error.message


async def test_requests_go_through_once_the_block_ends(
    server: Server, clock: trio.testing.MockClock
) -> None:
    server.play(recording("mistral/chat_text.json"))
    agent = Agent("a", model=mistral(server, stream=False))
    with block_model_requests():
        blocked = await run(agent)
    record = await run(agent)
    assert isinstance(blocked, Failed)
    assert isinstance(record, Completed)
    assert len(server.requests) == 1


def test_blocks_nest_and_requests_stay_blocked_until_the_last_ends() -> None:
    model = OpenAICompatibleModel("llama3.1", "http://localhost:1/v1")
    outer = block_model_requests()
    with outer:
        with block_model_requests():
            pass
        with pytest.raises(ModelError, match="blocked"):
            trio.run(model.complete, ModelRequest())


async def test_offline_models_answer_inside_the_block() -> None:
    with block_model_requests():
        scripted = await run(Agent("a", model=ScriptedModel(["scripted"])))
        function = await run(Agent("a", model=FunctionModel(lambda request: "function")))
        test = await run(Agent("a", model=TestModel()))
    assert [type(record) for record in (scripted, function, test)] == [Completed] * 3


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
async def test_the_environment_variable_blocks_requests(
    server: Server, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("AGENTLIB_BLOCK_MODEL_REQUESTS", value)
    record = await run(Agent("a", model=mistral(server)))
    assert isinstance(record, Failed)
    assert record.error.message.startswith("model requests are blocked: MistralModel(")
    assert "unset AGENTLIB_BLOCK_MODEL_REQUESTS" in record.error.message
    assert server.requests == []


@pytest.mark.parametrize("value", ["", "0", "false", "no", "off"])
async def test_the_environment_variable_set_off_lets_requests_through(
    server: Server, clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("AGENTLIB_BLOCK_MODEL_REQUESTS", value)
    server.play(recording("mistral/chat_text.json"))
    record = await run(Agent("a", model=mistral(server, stream=False)))
    assert isinstance(record, Completed)


async def test_an_environment_variable_neither_on_nor_off_blocks_requests(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLIB_BLOCK_MODEL_REQUESTS", "maybe")
    record = await run(Agent("a", model=mistral(server)))
    assert isinstance(record, Failed)
    assert "neither on nor off; set it to 1" in record.error.message
    assert server.requests == []


async def test_a_block_entered_in_another_thread_blocks_this_ones_requests(server: Server) -> None:
    entered, leave = trio.Event(), trio.Event()
    token = trio.lowlevel.current_trio_token()

    def hold_block() -> None:
        with block_model_requests():
            trio.from_thread.run_sync(entered.set, trio_token=token)
            trio.from_thread.run(leave.wait, trio_token=token)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, hold_block)
        await entered.wait()
        try:
            record = await run(Agent("a", model=mistral(server)))
        finally:
            leave.set()
    assert isinstance(record, Failed)
    assert server.requests == []


# --- agentlib.testing.store_contract ----------------------------------------------------------


def test_store_contract_exports_every_test_of_the_suite_its_clock_and_its_fixture() -> None:
    suite = agentlib.testing._store_contract
    tests = [name for name in vars(suite) if name.startswith("test_")]
    assert agentlib.testing.store_contract.__all__ == sorted(["ManualClock", "clock", *tests])


def test_every_test_of_the_store_contract_runs_under_pytest_trio() -> None:
    for name in agentlib.testing.store_contract.__all__:
        if name.startswith("test_"):
            test = getattr(agentlib.testing.store_contract, name)
            assert "trio" in [mark.name for mark in test.pytestmark], name


def test_agentlib_and_its_namespaces_never_import_pytest() -> None:
    """pytest is a dependency of a store's tests, not of agentlib: only the suite imports it."""
    code = (
        "import sys, agentlib, agentlib.store, agentlib.testing, agentlib_sync\n"
        "suite = ('pytest', 'agentlib.testing._store_contract')\n"
        "print([name for name in suite if name in sys.modules])"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert ran.stdout == "[]\n"


def test_override_is_a_with_block_and_never_a_decorator_that_would_end_too_soon() -> None:
    agent = Agent("a", model=ScriptedModel(["own"]))
    override = agent.override(model=TestModel())
    with pytest.raises(TypeError):

        @override  # type: ignore[operator]
        async def test_something() -> None:
            pass
