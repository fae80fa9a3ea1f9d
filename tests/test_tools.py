"""Tools: schemas from signatures, argument structuring, where tools run, errors, and results
(SPEC 2)."""

from __future__ import annotations

import dataclasses
import enum
import json
import threading
from typing import Any

import attrs
import pytest
import sniffio
import trio
from _support import Recorder

import agentlib
from agentlib import (
    Agent,
    Completed,
    Failed,
    ModelReply,
    ScriptedModel,
    TextContentBlock,
    ToolCallEntry,
    ToolCallRequest,
    ToolResultEntry,
    tool,
)

# Each test runs on a local runtime and on agents served over HTTP (conftest's transport).
pytestmark = pytest.mark.usefixtures("transport")


@attrs.frozen
class Point:
    x: int
    y: int


def call(name: str, arguments: Any = None, id: str | None = None) -> ModelReply:
    """A model step that calls one tool."""
    return ModelReply(tool_calls=[ToolCallRequest(name=name, arguments=arguments or {}, id=id)])


async def run_agent(agent: Agent, message: str = "go") -> tuple[agentlib.TurnState[Any], list[Any]]:
    """Run one turn in a fresh runtime; return its record and the session's entries."""
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run(message)
        await session.cancel()
        entries = [
            event.entry
            async for event in session.iter_events()
            if isinstance(event, agentlib.EntryCompleted)
        ]
    return record, entries


def results(entries: list[Any]) -> list[ToolResultEntry]:
    return [entry for entry in entries if isinstance(entry, ToolResultEntry)]


# --- schemas ------------------------------------------------------------------------------


@tool
def search(query: str, limit: int = 5, exact: bool = False) -> list[str]:
    """Search the notes.

    Longer explanation that is not part of the summary.

    Args:
        query: What to look for.
        limit: How many results at most,
            counting duplicates.

    Returns:
        The matching notes.
    """
    return [query] * limit


def test_tool_name_is_the_function_name() -> None:
    assert search.name == "search"


def test_tool_description_is_the_docstring_summary() -> None:
    assert search.description == "Search the notes."


def test_tool_parameters_are_a_closed_json_object_schema() -> None:
    assert search.parameters["type"] == "object"
    assert search.parameters["additionalProperties"] is False
    assert set(search.parameters["properties"]) == {"query", "limit", "exact"}


def test_tool_parameter_types_come_from_the_type_hints() -> None:
    properties = search.parameters["properties"]
    assert properties["query"]["type"] == "string"
    assert properties["limit"]["type"] == "integer"
    assert properties["exact"]["type"] == "boolean"


def test_tool_parameters_without_default_are_required() -> None:
    assert search.parameters["required"] == ["query"]


def test_tool_parameter_defaults_are_in_the_schema() -> None:
    properties = search.parameters["properties"]
    assert properties["limit"]["default"] == 5
    assert properties["exact"]["default"] is False
    assert "default" not in properties["query"]


def test_tool_parameter_descriptions_come_from_the_docstring_args_lines() -> None:
    properties = search.parameters["properties"]
    assert properties["query"]["description"] == "What to look for."
    assert properties["limit"]["description"] == "How many results at most, counting duplicates."
    assert "description" not in properties["exact"]


def test_parameter_descriptions_are_read_whatever_the_other_sections_hold() -> None:
    @tool
    def fetch(url: str) -> str:
        """Fetch a page.

        Args:
            url: The page's address.

        Raises:
            anything the network raises
        """
        return url

    assert fetch.parameters["properties"]["url"]["description"] == "The page's address."


def test_tool_schema_of_an_attrs_class_parameter_is_an_object_schema() -> None:
    @tool
    def move(to: Point) -> None:
        """Move."""

    schema = move.parameters["properties"]["to"]
    assert schema["type"] == "object"
    assert schema["properties"] == {"x": {"type": "integer"}, "y": {"type": "integer"}}
    assert schema["required"] == ["x", "y"]


def test_tool_with_options_takes_the_given_name_and_description() -> None:
    @tool(name="find", description="Find a note.")
    def search_notes(query: str) -> str:
        """Search the notes."""
        return query

    assert (search_notes.name, search_notes.description) == ("find", "Find a note.")


def test_tool_schema_is_what_the_model_sees() -> None:
    assert search.schema == agentlib.ToolSchema(
        name="search", description="Search the notes.", parameters=search.parameters
    )


def test_a_tool_taking_var_args_raises_type_error() -> None:
    def spread(*values: int) -> int:
        return sum(values)

    with pytest.raises(TypeError, match="spread"):
        tool(spread)


class Opaque:
    """A class with no JSON form."""


def test_a_tool_parameter_with_no_json_form_raises_type_error() -> None:
    def use(thing: Opaque) -> None:
        pass

    with pytest.raises(TypeError, match="thing"):
        tool(use)


def test_a_tool_parameter_without_a_type_annotation_raises_type_error_naming_it() -> None:
    def add(a, b: int) -> int:  # type: ignore[no-untyped-def]
        return b

    with pytest.raises(TypeError) as info:
        tool(add)
    message = str(info.value)
    assert "'add'" in message
    assert "'a'" in message
    assert "`a: int`" in message


def test_a_plain_function_with_an_untyped_parameter_in_tools_raises_type_error() -> None:
    def add(a: int, b):  # type: ignore[no-untyped-def]
        return a + b

    with pytest.raises(TypeError, match="parameter 'b' has no type annotation"):
        Agent("a", model=ScriptedModel([]), tools=[add])


def test_a_client_tool_parameter_without_a_type_annotation_raises_type_error() -> None:
    def pick(options) -> str:  # type: ignore[no-untyped-def]
        ...

    with pytest.raises(TypeError, match="parameter 'options' has no type annotation"):
        agentlib.client_tool(pick)


async def test_a_tool_parameter_annotated_any_takes_any_json_value() -> None:
    seen: list[Any] = []

    def keep(value: Any) -> str:
        """Keep a value."""
        seen.append(value)
        return "kept"

    made = tool(keep)
    assert made.parameters["properties"] == {"value": {}}
    agent = Agent(
        "a",
        model=ScriptedModel([call("keep", {"value": {"any": [1, "json"]}}), "ok"]),
        tools=[made],
    )
    record, _ = await run_agent(agent)
    assert isinstance(record, Completed)
    assert seen == [{"any": [1, "json"]}]


def test_an_agent_with_two_tools_of_one_name_raises_value_error() -> None:
    def add(a: int) -> int:
        return a

    with pytest.raises(ValueError, match="add"):
        Agent("a", model=ScriptedModel([]), tools=[add, tool(add)])


# --- plain functions ----------------------------------------------------------------------


async def test_a_plain_function_in_tools_is_offered_with_its_derived_schema() -> None:
    def add(a: int, b: int = 1) -> int:
        """Add two integers."""
        return a + b

    recorder = Recorder()
    await run_agent(Agent("a", model=ScriptedModel([recorder]), tools=[add]))
    assert recorder.requests[0].tools == (tool(add).schema,)


async def test_a_plain_function_in_tools_is_called_by_the_model() -> None:
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    agent = Agent("a", model=ScriptedModel([call("add", {"a": 2, "b": 3}), "5"]), tools=[add])
    record, entries = await run_agent(agent)
    assert isinstance(record, Completed)
    [result] = results(entries)
    assert (result.text, result.is_error) == ("5", False)


# --- arguments ----------------------------------------------------------------------------


async def test_arguments_are_structured_into_an_attrs_class_instance() -> None:
    received: list[object] = []

    def move(to: Point) -> str:
        """Move."""
        received.append(to)
        return "moved"

    agent = Agent(
        "a", model=ScriptedModel([call("move", {"to": {"x": 1, "y": 2}}), "ok"]), tools=[move]
    )
    await run_agent(agent)
    assert received == [Point(1, 2)]


async def test_arguments_are_structured_into_the_annotated_container_types() -> None:
    received: list[object] = []

    async def total(values: tuple[int, ...], scale: float = 1.0) -> float:
        """Sum."""
        received.append((values, scale))
        return sum(values) * scale

    agent = Agent(
        "a",
        model=ScriptedModel([call("total", {"values": [1, 2], "scale": 2}), "ok"]),
        tools=[total],
    )
    await run_agent(agent)
    assert received == [((1, 2), 2.0)]
    assert isinstance(received[0][1], float)  # type: ignore[index]


class Unit(enum.IntEnum):
    METRE = 1
    FOOT = 2


class Scale(str, enum.Enum):
    LINEAR = "linear"
    LOG = "log"


def measure_tool(received: list[object]) -> agentlib.Tool:
    @agentlib.tool
    def measure(
        size: int | str, at: tuple[int, str], unit: Unit, scale: Scale = Scale.LINEAR
    ) -> str:
        """Measure."""
        received.append((size, at, unit, scale))
        return "measured"

    return measure


async def test_arguments_are_structured_into_unions_fixed_tuples_and_enums() -> None:
    received: list[object] = []
    arguments = {"size": "big", "at": [3, "m"], "unit": 2, "scale": "log"}
    agent = Agent(
        "a",
        model=ScriptedModel([call("measure", arguments), "ok"]),
        tools=[measure_tool(received)],
    )
    _, entries = await run_agent(agent)
    assert [result.is_error for result in results(entries)] == [False]
    assert received == [("big", (3, "m"), Unit.FOOT, Scale.LOG)]
    [(_, _, unit, scale)] = received
    assert type(unit) is Unit  # not the plain int 2
    assert type(scale) is Scale


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"size": 2.5}, "size"),
        ({"at": [3]}, "at"),
        ({"at": ["m", 3]}, "at"),
        ({"unit": 5}, "unit"),
        ({"unit": True}, "unit"),
        ({"scale": "cubic"}, "scale"),
    ],
    ids=[
        "float-for-int-or-str",
        "short-tuple",
        "tuple-items-swapped",
        "no-such-unit",
        "bool-for-int-enum",
        "no-such-scale",
    ],
)
async def test_arguments_outside_unions_fixed_tuples_and_enums_are_an_error_result(
    change: dict[str, Any], named: str
) -> None:
    received: list[object] = []
    arguments = {"size": 3, "at": [3, "m"], "unit": 1} | change
    agent = Agent(
        "a",
        model=ScriptedModel([call("measure", arguments), "sorry"]),
        tools=[measure_tool(received)],
    )
    record, entries = await run_agent(agent)
    assert isinstance(record, Completed)  # the turn goes on
    [result] = results(entries)
    assert result.is_error is True
    assert f"$.{named}" in result.text
    assert received == []


async def test_missing_defaults_are_the_functions_own() -> None:
    received: list[object] = []

    def greet(name: str, greeting: str = "hello") -> str:
        """Greet."""
        received.append(greeting)
        return f"{greeting} {name}"

    agent = Agent("a", model=ScriptedModel([call("greet", {"name": "ada"}), "ok"]), tools=[greet])
    _, entries = await run_agent(agent)
    assert received == ["hello"]
    assert results(entries)[0].text == "hello ada"


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"a": "two", "b": 3}, "a"),
        ({"a": 2}, "b"),
        ({"a": 2, "b": 3, "c": 4}, "c"),
        ({"a": True, "b": 3}, "a"),
    ],
    ids=["wrong-type", "missing", "unknown", "bool-for-int"],
)
async def test_invalid_arguments_are_reported_to_the_model_as_an_error_result(
    arguments: dict[str, Any], named: str
) -> None:
    calls: list[object] = []

    def add(a: int, b: int) -> int:
        """Add."""
        calls.append((a, b))
        return a + b

    agent = Agent("a", model=ScriptedModel([call("add", arguments), "sorry"]), tools=[add])
    _, entries = await run_agent(agent)
    [result] = results(entries)
    assert result.is_error is True
    assert f"$.{named}" in result.text
    assert calls == []


async def test_arguments_that_are_not_an_object_are_reported_as_an_error_result() -> None:
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    agent = Agent("a", model=ScriptedModel([call("add", [1, 2]), "sorry"]), tools=[add])
    _, entries = await run_agent(agent)
    assert results(entries)[0].is_error is True


async def test_the_turn_goes_on_after_invalid_arguments() -> None:
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    recorder = Recorder("sorry")
    agent = Agent("a", model=ScriptedModel([call("add", {"a": "x"}), recorder]), tools=[add])
    record, _ = await run_agent(agent)
    assert isinstance(record, Completed)
    assert record.text == "sorry"
    last = recorder.requests[0].entries[-1]
    assert isinstance(last, ToolResultEntry)
    assert last.is_error


async def test_an_unknown_tool_is_reported_to_the_model_as_an_error_result() -> None:
    agent = Agent("a", model=ScriptedModel([call("nope"), "sorry"]), tools=[search])
    record, entries = await run_agent(agent)
    [result] = results(entries)
    assert result.is_error is True
    assert "nope" in result.text
    assert result.name == "nope"
    assert isinstance(record, Completed)


# --- where tools run ----------------------------------------------------------------------


async def test_a_sync_tool_runs_in_a_worker_thread() -> None:
    trio_thread = threading.current_thread()
    threads: list[threading.Thread] = []

    def where() -> str:
        """Tell where I run."""
        threads.append(threading.current_thread())
        return "here"

    await run_agent(Agent("a", model=ScriptedModel([call("where"), "ok"]), tools=[where]))
    assert len(threads) == 1
    assert threads[0] is not trio_thread


async def test_a_sync_tool_does_not_block_the_engine() -> None:
    # The tool waits for the test, which can only act if the trio thread is free.
    in_tool = threading.Event()
    proceed = threading.Event()

    def blocking() -> str:
        """Block until told."""
        in_tool.set()
        proceed.wait(30)  # only a test that never tells it waits this long
        return "unblocked"

    agent = Agent("a", model=ScriptedModel([call("blocking"), "ok"]), tools=[blocking])
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.send_message("go")
        assert await trio.to_thread.run_sync(in_tool.wait, 30)
        assert isinstance(await turn.get(), agentlib.Running)
        proceed.set()
        record = await turn.result()
    assert isinstance(record, Completed)


async def test_a_sync_tool_runs_outside_any_async_library() -> None:
    # Libraries that ask which one runs (httpx's sync client, say) see none in its thread.
    found: list[str] = []

    def which() -> str:
        """Tell which async library runs here."""
        try:
            found.append(sniffio.current_async_library())
        except sniffio.AsyncLibraryNotFoundError:
            found.append("none")
        return found[-1]

    await run_agent(Agent("a", model=ScriptedModel([call("which"), "ok"]), tools=[which]))
    assert found == ["none"]


async def test_sync_tools_share_trios_default_thread_limiter() -> None:
    limiter = trio.to_thread.current_default_thread_limiter()
    lock = threading.Lock()
    running: list[int] = [0]
    most: list[int] = []

    def busy() -> str:
        """Be busy for a moment."""
        with lock:
            running[0] += 1
            most.append(running[0])
        threading.Event().wait(0.02)  # room for another thread to start, were it allowed
        with lock:
            running[0] -= 1
        return "done"

    calls = [ToolCallRequest(name="busy", arguments={}) for _ in range(3)]
    agent = Agent("a", model=ScriptedModel([ModelReply(tool_calls=calls), "ok"]), tools=[busy])
    total, limiter.total_tokens = limiter.total_tokens, 1
    try:
        record, _ = await run_agent(agent)
    finally:
        limiter.total_tokens = total
    assert isinstance(record, Completed)
    assert most == [1, 1, 1]
    assert limiter.borrowed_tokens == 0


async def test_an_async_tool_runs_in_the_trio_thread() -> None:
    trio_thread = threading.current_thread()
    threads: list[threading.Thread] = []

    async def where() -> str:
        """Tell where I run."""
        threads.append(threading.current_thread())
        return "here"

    await run_agent(Agent("a", model=ScriptedModel([call("where"), "ok"]), tools=[where]))
    assert threads == [trio_thread]


# --- errors -------------------------------------------------------------------------------


class OutOfStock(Exception):
    pass


def order(item: str) -> str:
    """Order an item."""
    raise OutOfStock(f"no {item} left")


async def test_tool_errors_report_sends_the_exception_to_the_model_as_an_error_result() -> None:
    agent = Agent(
        "a",
        model=ScriptedModel([call("order", {"item": "tea"}), "sorry"]),
        tools=[order],
        tool_errors="report",
    )
    _, entries = await run_agent(agent)
    [result] = results(entries)
    assert result.is_error is True
    assert "OutOfStock" in result.text
    assert "no tea left" in result.text


async def test_tool_errors_report_lets_the_model_continue() -> None:
    recorder = Recorder("sorry")
    agent = Agent(
        "a",
        model=ScriptedModel([call("order", {"item": "tea"}), recorder]),
        tools=[order],
        tool_errors="report",
    )
    record, _ = await run_agent(agent)
    assert isinstance(record, Completed)
    assert record.output == "sorry"
    assert len(recorder.requests) == 1


async def test_tool_errors_report_is_the_default() -> None:
    agent = Agent(
        "a", model=ScriptedModel([call("order", {"item": "tea"}), "sorry"]), tools=[order]
    )
    record, _ = await run_agent(agent)
    assert isinstance(record, Completed)


async def test_tool_errors_raise_fails_the_turn_with_the_exceptions_type() -> None:
    agent = Agent(
        "a",
        model=ScriptedModel([call("order", {"item": "tea"}), "unreachable"]),
        tools=[order],
        tool_errors="raise",
    )
    record, _ = await run_agent(agent)
    assert isinstance(record, Failed)
    assert record.error.type == "OutOfStock"
    assert "no tea left" in record.error.message


async def test_tool_errors_raise_does_not_ask_the_model_again() -> None:
    recorder = Recorder()
    agent = Agent(
        "a",
        model=ScriptedModel([call("order", {"item": "tea"}), recorder]),
        tools=[order],
        tool_errors="raise",
    )
    await run_agent(agent)
    assert recorder.requests == []


async def test_tool_errors_raise_still_reports_invalid_arguments_to_the_model() -> None:
    agent = Agent(
        "a",
        model=ScriptedModel([call("order", {"item": 3}), "sorry"]),
        tools=[order],
        tool_errors="raise",
    )
    record, entries = await run_agent(agent)
    assert isinstance(record, Completed)
    assert results(entries)[0].is_error


def test_an_unknown_tool_errors_value_raises_value_error() -> None:
    with pytest.raises(ValueError, match="tool_errors"):
        Agent("a", model=ScriptedModel([]), tool_errors="ignore")  # type: ignore[arg-type]


# --- several calls in one reply -----------------------------------------------------------


async def test_tool_calls_of_one_reply_run_concurrently(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Each tool waits for the other: run one after the other, they would never end.
    ping_started, pong_started = trio.Event(), trio.Event()

    async def ping() -> str:
        """Ping."""
        ping_started.set()
        await pong_started.wait()
        return "ping"

    async def pong() -> str:
        """Pong."""
        pong_started.set()
        await ping_started.wait()
        return "pong"

    reply = ModelReply(tool_calls=[ToolCallRequest(name="ping"), ToolCallRequest(name="pong")])
    agent = Agent("a", model=ScriptedModel([reply, "ok"]), tools=[ping, pong])
    with trio.fail_after(60):
        record, _ = await run_agent(agent)
    assert isinstance(record, Completed)


async def test_results_of_one_reply_go_back_in_call_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    finished: list[str] = []

    async def slow() -> str:
        """Take a while."""
        await trio.sleep(10)
        finished.append("slow")
        return "slow"

    async def fast() -> str:
        """Be quick."""
        finished.append("fast")
        return "fast"

    reply = ModelReply(
        tool_calls=[
            ToolCallRequest(name="slow", id="call-1"),
            ToolCallRequest(name="fast", id="call-2"),
        ]
    )
    recorder = Recorder()
    agent = Agent("a", model=ScriptedModel([reply, recorder]), tools=[slow, fast])
    await run_agent(agent)
    assert finished == ["fast", "slow"]
    tail = recorder.requests[0].entries[-4:]
    assert [type(entry).__name__ for entry in tail] == [
        "ToolCallEntry",
        "ToolCallEntry",
        "ToolResultEntry",
        "ToolResultEntry",
    ]
    assert [(entry.tool_call_id, entry.text) for entry in tail[2:]] == [  # type: ignore[union-attr]
        ("call-1", "slow"),
        ("call-2", "fast"),
    ]


# --- results ------------------------------------------------------------------------------


async def result_of(value: object) -> ToolResultEntry:
    def produce() -> object:
        """Produce a value."""
        return value

    _, entries = await run_agent(
        Agent("a", model=ScriptedModel([call("produce"), "ok"]), tools=[produce])
    )
    [result] = results(entries)
    return result


async def test_a_str_result_is_the_text_of_the_result() -> None:
    result = await result_of("plain words")
    assert result.content == (TextContentBlock(text="plain words"),)
    assert result.structured_content is None
    assert result.is_error is False


async def test_a_dict_result_is_structured_content_and_its_json_text() -> None:
    result = await result_of({"total": 3, "items": ["a", "b"]})
    assert result.structured_content == {"total": 3, "items": ["a", "b"]}
    assert json.loads(result.text) == {"total": 3, "items": ["a", "b"]}


async def test_an_attrs_instance_result_is_unstructured_into_structured_content() -> None:
    result = await result_of(Point(1, 2))
    assert result.structured_content == {"x": 1, "y": 2}
    assert json.loads(result.text) == {"x": 1, "y": 2}


async def test_a_dataclass_result_is_unstructured_into_structured_content() -> None:
    @dataclasses.dataclass
    class Size:
        width: int
        height: int

    result = await result_of(Size(3, 4))
    assert result.structured_content == {"width": 3, "height": 4}


async def test_a_content_block_result_is_the_content_of_the_result() -> None:
    block = agentlib.ImageContentBlock(uri="https://example.com/a.png", media_type="image/png")
    result = await result_of(block)
    assert result.content == (block,)
    assert result.structured_content is None


async def test_a_result_with_no_json_form_is_reported_as_an_error_result() -> None:
    result = await result_of(object())
    assert result.is_error is True
    assert "object" in result.text


async def test_a_result_answers_its_call_by_id_and_name() -> None:
    def echo(text: str) -> str:
        """Echo."""
        return text

    agent = Agent(
        "a", model=ScriptedModel([call("echo", {"text": "hi"}, id="call-7"), "ok"]), tools=[echo]
    )
    _, entries = await run_agent(agent)
    [tool_call] = [entry for entry in entries if isinstance(entry, ToolCallEntry)]
    [result] = results(entries)
    assert (tool_call.name, tool_call.arguments, tool_call.tool_call_id) == (
        "echo",
        {"text": "hi"},
        "call-7",
    )
    assert (result.name, result.tool_call_id) == ("echo", "call-7")


async def test_a_call_without_an_id_gets_one_its_result_shares() -> None:
    def echo(text: str) -> str:
        """Echo."""
        return text

    agent = Agent("a", model=ScriptedModel([call("echo", {"text": "hi"}), "ok"]), tools=[echo])
    _, entries = await run_agent(agent)
    [tool_call] = [entry for entry in entries if isinstance(entry, ToolCallEntry)]
    assert tool_call.tool_call_id
    assert results(entries)[0].tool_call_id == tool_call.tool_call_id


@attrs.frozen
class Tree:
    """A labelled tree."""

    label: str
    children: list[Tree] = attrs.field(factory=list)


async def test_a_parameter_of_a_class_that_holds_itself_is_described_once_and_read_whole() -> None:
    received: list[object] = []

    def plant(tree: Tree) -> str:
        """Plant a tree."""
        received.append(tree)
        return "planted"

    schema = agentlib.tool(plant).parameters
    node = schema["$defs"]["Tree"]
    assert node["properties"]["children"] == {"type": "array", "items": {"$ref": "#/$defs/Tree"}}
    assert schema["properties"]["tree"] == node
    arguments = {"tree": {"label": "a", "children": [{"label": "b", "children": []}]}}
    agent = Agent("a", model=ScriptedModel([call("plant", arguments), "ok"]), tools=[plant])
    _, entries = await run_agent(agent)
    assert [result.is_error for result in results(entries)] == [False]
    assert received == [Tree("a", [Tree("b")])]


@attrs.frozen
class Cat:
    name: str


@attrs.frozen
class Dog:
    name: str
    breed: str


async def test_a_union_of_classes_takes_the_class_whose_fields_the_arguments_fill() -> None:
    received: list[object] = []

    def adopt(pet: Cat | Dog, tags: tuple) -> str:  # type: ignore[type-arg]
        """Adopt a pet."""
        received.append((pet, tags))
        return "adopted"

    arguments = {"pet": {"name": "Rex", "breed": "lab"}, "tags": ["a", 1, True]}
    agent = Agent("a", model=ScriptedModel([call("adopt", arguments), "ok"]), tools=[adopt])
    _, entries = await run_agent(agent)
    assert [result.is_error for result in results(entries)] == [False]
    assert received == [(Dog("Rex", "lab"), ("a", 1, True))]  # a bare tuple: any length


def words_tree() -> type:
    @attrs.frozen
    class Node:
        label: str
        children: list[Node] = attrs.field(factory=list)

    return Node


def numbers_tree() -> type:
    @attrs.frozen
    class Node:
        label: int
        children: list[Node] = attrs.field(factory=list)

    return Node


def test_two_classes_of_one_name_in_a_tools_parameters_get_a_definition_each() -> None:
    Words, Numbers = words_tree(), numbers_tree()

    def both(words: Words, numbers: Numbers) -> str:  # type: ignore[valid-type]
        """Take two trees."""
        return "ok"

    both.__annotations__ = {"words": Words, "numbers": Numbers, "return": str}
    parameters = agentlib.tool(both).parameters
    defs = parameters["$defs"]
    assert sorted(defs) == ["Node", "Node2"]
    labels = {name: node["properties"]["label"]["type"] for name, node in defs.items()}
    assert labels == {"Node": "string", "Node2": "integer"}
    words_ref = parameters["properties"]["words"]["properties"]["children"]["items"]["$ref"]
    numbers_ref = parameters["properties"]["numbers"]["properties"]["children"]["items"]["$ref"]
    assert (words_ref, numbers_ref) == ("#/$defs/Node", "#/$defs/Node2")
