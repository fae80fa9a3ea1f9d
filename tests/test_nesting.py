"""Deep nesting is bad input, never a crash (docs/data.md, "Nesting limit"; SPEC 13).

A JSON value agentlib takes may nest 100 levels of arrays and objects. One level more is
refused on every input path with that path's documented error (``ValidationError``,
``ClientToolAnswerError``, an error result to the model) naming where it stopped, and never
the value; a value at the limit goes through every path, to a store and back.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import httpx
import pytest
import trio
from _support import Recorder
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import agentlib
import agentlib_sync
from agentlib import (
    Agent,
    Blocked,
    ClientToolAnswerError,
    Completed,
    Failed,
    FunctionModel,
    ModelReply,
    ScriptedModel,
    SessionInput,
    TextContentBlock,
    ToolCallEntry,
    ToolCallRequest,
    ToolResultEntry,
    ValidationError,
)

# Each test runs on a local runtime and on agents served over HTTP (conftest's transport).
pytestmark = pytest.mark.usefixtures("transport")

LIMIT = 100
#: Deep enough to break anything that recurses once per level.
DEEP = 2_000
#: The innermost value of every nested value here: no message may show it.
SECRET = "sk-live-SECRET123"


def nested(levels: int, leaf: object = SECRET) -> Any:
    """``levels`` objects and arrays around ``leaf``, from the outside in:
    ``{"a": [{"a": [...]}]}``."""
    value = leaf
    for level in reversed(range(levels)):
        value = {"a": value} if level % 2 == 0 else [value]
    return value


def nested_text(levels: int, leaf: str = f'"{SECRET}"') -> str:
    """``nested(levels)`` as JSON text, written without recursion."""
    opening = "".join('{"a": ' if level % 2 == 0 else "[" for level in range(levels))
    closing = "".join("}" if level % 2 == 0 else "]" for level in reversed(range(levels)))
    return opening + leaf + closing


#: How the path into ``nested(DEEP)`` starts in an error; its end is cut, as "...".
TOO_DEEP_AT = ".a[0].a[0]"


def assert_refused_saying_where(error: BaseException, where: str) -> None:
    message = str(error)
    assert "nested deeper than the limit of 100 arrays and objects" in message
    assert f"@ {where}" in message
    assert "..." in message.partition(f"@ {where}")[2]
    assert SECRET not in message
    assert len(message) < 1000


@attrs.frozen
class Tree:
    """A class that contains itself: structuring it recurses as deep as its data."""

    children: list[Tree] = attrs.Factory(list)


attrs.resolve_types(Tree)


def tree(depth: int) -> Tree:
    """A chain of ``depth`` trees: as JSON, an object and an array per tree."""
    value = Tree()
    for _ in range(depth - 1):
        value = Tree(children=[value])
    return value


# --- data classes and the converter -------------------------------------------------------

#: Each JSON field of a data class, as a function of the value it is given.
FIELDS = {
    "text-block-meta": lambda value: TextContentBlock(text="hi", meta=value),
    "unknown-block-raw": lambda value: agentlib.UnknownContentBlock(
        original_type="video", raw={"x": value}
    ),
    "tool-call-arguments": lambda value: ToolCallEntry(
        id="e1", name="lookup", arguments=value, tool_call_id="c1"
    ),
    "tool-result-structured-content": lambda value: ToolResultEntry(
        id="e1", structured_content=value, tool_call_id="c1"
    ),
    "tool-result-annotations": lambda value: ToolResultEntry(
        id="e1", tool_call_id="c1", annotations=value
    ),
    "unknown-entry-raw": lambda value: agentlib.UnknownEntry(
        id="e1", entry_type="reasoning", raw={"x": value}
    ),
    "history-tool-call-arguments": lambda value: agentlib.HistoryImportToolCall(
        tool_call_id="c1", name="lookup", arguments=value
    ),
    "history-tool-result": lambda value: agentlib.HistoryImportToolResult(
        tool_call_id="c1", result=value
    ),
    "history-snapshot-value": lambda value: agentlib.HistoryImportSnapshot(
        task_name="t", snapshot_type="s", value=value
    ),
    "open-approval-arguments": lambda value: agentlib.OpenApproval(
        id="cb", session_id="s", turn_id="t", tool_name="x", arguments=value
    ),
    "modified-arguments": lambda value: agentlib.ModifiedArguments(value),
    "completed-output": lambda value: Completed(turn_id="t", session_id="s", output=value),
}


@pytest.mark.parametrize("build", FIELDS.values(), ids=FIELDS.keys())
def test_a_json_field_nested_at_the_limit_is_taken(build: Any) -> None:
    build({"x": nested(LIMIT - 1)})


@pytest.mark.parametrize("build", FIELDS.values(), ids=FIELDS.keys())
def test_a_json_field_nested_deeper_than_the_limit_is_a_validation_error(build: Any) -> None:
    with pytest.raises(ValidationError) as raised:
        build({"x": nested(DEEP)})
    assert_refused_saying_where(raised.value, "$.")


def test_a_constructor_error_gives_the_path_from_the_field() -> None:
    with pytest.raises(ValidationError) as raised:
        TextContentBlock(text="hi", meta={"x": nested(DEEP)})
    assert_refused_saying_where(raised.value, f"$.meta.x{TOO_DEEP_AT}")


def test_structure_gives_the_path_from_the_data_it_was_given() -> None:
    blocks = [
        {"type": "text", "text": "hi"},
        {"type": "text", "text": "hi", "meta": {"x": nested(DEEP)}},
    ]
    data = {"type": "message", "id": "e1", "role": "user", "content": blocks}
    with pytest.raises(ValidationError) as raised:
        agentlib.structure(data, agentlib.Entry)
    assert_refused_saying_where(raised.value, f"$.content[1].meta.x{TOO_DEEP_AT}")


def test_an_unknown_block_too_deep_is_refused_at_its_own_field_not_at_raw() -> None:
    with pytest.raises(ValidationError) as raised:
        agentlib.structure({"type": "video", "frames": nested(DEEP)}, agentlib.ContentBlock)
    assert_refused_saying_where(raised.value, f"$.frames{TOO_DEEP_AT}")


def test_structure_into_a_class_of_yours_refuses_data_too_deep_before_recursing() -> None:
    with pytest.raises(ValidationError) as raised:
        agentlib.structure(agentlib.unstructure(tree(40)) | {"children": [nested(DEEP)]}, Tree)
    assert_refused_saying_where(raised.value, f"$.children[0]{TOO_DEEP_AT}")


def test_a_class_of_yours_at_the_limit_round_trips() -> None:
    value = tree(LIMIT // 2)  # an object and an array each

    assert agentlib.structure(agentlib.unstructure(value), Tree) == value


@pytest.mark.parametrize(
    "value", [nested(DEEP), tree(DEEP), {"x": nested(LIMIT)}], ids=["lists", "classes", "101"]
)
def test_unstructure_refuses_a_value_too_deep(value: object) -> None:
    with pytest.raises(ValidationError) as raised:
        agentlib.unstructure(value)
    assert_refused_saying_where(raised.value, "$")


def test_unstructure_refuses_a_value_that_contains_itself() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValidationError, match="nested deeper than the limit"):
        agentlib.unstructure(loop)


def test_unstructure_takes_a_data_class_whose_field_is_at_the_limit() -> None:
    entry = ToolCallEntry(id="e1", name="lookup", arguments=nested(LIMIT), tool_call_id="c1")

    assert agentlib.structure(agentlib.unstructure(entry), agentlib.Entry) == entry


def test_a_long_path_is_cut_and_a_long_key_shortened() -> None:
    with pytest.raises(ValidationError) as raised:
        TextContentBlock(text="hi", meta={"k" * 500: nested(DEEP)})
    message = str(raised.value)
    assert f"@ $.meta['{'k' * 24}'...]{TOO_DEEP_AT}" in message
    assert "k" * 25 not in message


# --- history and messages -----------------------------------------------------------------


def test_imported_history_too_deep_is_a_validation_error_with_the_items_path() -> None:
    history = [
        {"type": "message", "role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"type": "tool_call", "tool_call_id": "c1", "name": "lookup", "arguments": nested(DEEP)},
    ]
    with pytest.raises(ValidationError) as raised:
        agentlib.parse_history(history)
    assert_refused_saying_where(raised.value, f"$[1].arguments{TOO_DEEP_AT}")


async def test_start_session_with_history_too_deep_starts_nothing() -> None:
    history = [{"type": "snapshot", "task_name": "t", "snapshot_type": "s", "value": nested(DEEP)}]
    async with agentlib.open_runtime() as runtime:
        with pytest.raises(ValidationError) as raised:
            await Agent("a", model=ScriptedModel([])).start_session(history=history)
        assert runtime._sessions == {}
    assert_refused_saying_where(raised.value, f"$[0].value{TOO_DEEP_AT}")


@pytest.mark.parametrize("how", ["send_message", "start_turn", "run", "steer"])
async def test_a_message_too_deep_is_a_validation_error_and_changes_nothing(how: str) -> None:
    content = [{"type": "text", "text": "hi", "meta": nested(DEEP)}]
    agent = Agent("a", model=ScriptedModel(["first", "second"]))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        first = await session.run("hello")
        send = session.turn(first.turn_id).steer if how == "steer" else getattr(session, how)
        with pytest.raises(ValidationError) as raised:
            await send(content)
        record = await session.run("again")
    assert_refused_saying_where(raised.value, f"$[0].meta{TOO_DEEP_AT}")
    assert isinstance(record, Completed)
    assert record.output == "second"


# --- session inputs and answers -----------------------------------------------------------


class Notes(SessionInput):
    input_id = "notes"
    tags: Any


async def test_a_session_input_too_deep_is_a_validation_error_naming_only_its_field() -> None:
    async with agentlib.open_runtime() as runtime:
        with pytest.raises(ValidationError) as raised:
            await Agent("a", model=ScriptedModel([])).start_session(
                inputs=[Notes(tags={SECRET: nested(DEEP)})]
            )
        assert runtime._sessions == {}
    message = str(raised.value)
    assert "field 'tags' of input 'notes' is nested deeper than the limit" in message
    assert SECRET not in message


@pytest.mark.parametrize(
    "build",
    [
        lambda value: agentlib.DenyApproval(reason=value),
        lambda value: agentlib.AllowApproval(scope=value),
        lambda value: agentlib.SignInAnswer(credentials={"notion": value}),
        lambda value: agentlib.ContentAnnotations(audience=[value]),
    ],
    ids=["deny-reason", "allow-scope", "sign-in-credential", "annotations-audience"],
)
def test_an_answer_or_annotation_holding_a_nested_value_is_a_validation_error(build: Any) -> None:
    with pytest.raises(ValidationError) as raised:
        build(nested(DEEP))
    assert SECRET not in str(raised.value)


@agentlib.client_tool
def pick() -> Any:
    """Let the user pick."""
    ...


@agentlib.client_tool
def pick_tree() -> Tree:
    """Let the user draw a tree."""
    ...


def asking(name: str, then: Any = "done") -> Agent:
    tools = [pick, pick_tree]
    return Agent("a", model=ScriptedModel([calling(name), then]), tools=tools)


def calling(name: str, arguments: Any = None) -> ModelReply:
    return ModelReply(tool_calls=[ToolCallRequest(name=name, arguments=arguments or {})])


@pytest.mark.parametrize(
    ("tool_name", "answer", "where"),
    [
        ("client.pick", nested(DEEP), f"${TOO_DEEP_AT}"),
        ("client.pick_tree", tree(DEEP), "$.children[0].children[0]"),
    ],
    ids=["json", "class"],
)
async def test_a_client_tool_answer_too_deep_is_refused_and_the_call_stays_open(
    tool_name: str, answer: object, where: str
) -> None:
    async with agentlib.open_runtime():
        session = await asking(tool_name).start_session()
        blocked = await session.run("go")
        assert isinstance(blocked, Blocked)
        turn = session.turn(blocked.turn_id)
        with pytest.raises(ClientToolAnswerError) as raised:
            await turn.answer(blocked.callbacks[0].id, answer)
        still = await turn.get()
        await session.cancel()
    assert_refused_saying_where(raised.value, where)
    assert isinstance(still, Blocked)
    assert still.callbacks == blocked.callbacks


async def test_a_client_tool_answer_at_the_limit_reaches_the_model() -> None:
    recorder = Recorder()
    async with agentlib.open_runtime():
        session = await asking("client.pick_tree", recorder).start_session()
        blocked = await session.run("go")
        assert isinstance(blocked, Blocked)
        await session.turn(blocked.turn_id).answer(blocked.callbacks[0].id, tree(LIMIT // 2))
        record = await session.turn(blocked.turn_id).result()
    assert isinstance(record, Completed)
    result = recorder.requests[0].entries[-1]
    assert isinstance(result, ToolResultEntry)
    assert not result.is_error
    assert agentlib.structure(result.structured_content, Tree) == tree(LIMIT // 2)


async def test_an_on_client_tool_handler_answering_too_deep_raises_from_run() -> None:
    async with agentlib.open_runtime():
        session = await asking("client.pick").start_session(
            on_client_tool=lambda call: nested(DEEP)
        )
        with pytest.raises(ClientToolAnswerError) as raised:
            await session.run("go")
        await session.cancel()
    assert_refused_saying_where(raised.value, "$")
    assert "the call stays open" in str(raised.value)


# --- what models and tools give -----------------------------------------------------------


def lookup(query: str) -> str:
    """Look something up."""
    raise AssertionError("a call with bad arguments never runs")


def plant(trees: list[dict[str, Any]]) -> int:
    """Plant trees; returns how many."""
    return len(trees)


def grow(depth: int) -> Any:
    """Grow a value ``depth`` levels deep."""
    return tree(depth // 2) if depth <= LIMIT else nested(depth)


def measure() -> Any:
    """Measure something that cannot be measured."""
    return {"value": math.nan}


async def run_turn(agent: Agent) -> tuple[agentlib.TurnState[Any], Recorder]:
    async with agentlib.open_runtime():
        session = await agent.start_session()
        return await session.run("go"), agent.model.steps[-1]  # type: ignore[attr-defined]


def tool_result(recorder: Recorder) -> ToolResultEntry:
    (request,) = recorder.requests
    result = request.entries[-1]
    assert isinstance(result, ToolResultEntry)
    return result


@pytest.mark.parametrize(
    ("arguments", "told"),
    [
        ({"query": nested(DEEP)}, "the arguments are nested deeper than the limit of 100"),
        ({"query": math.nan}, "the arguments are not JSON: a non-finite number"),
        ({"query": {1, 2}}, "the arguments are not JSON: a value of type set is not JSON"),
        (nested_text(DEEP), "the arguments are nested deeper than the limit of 100"),
        ('{"query": NaN}', "the arguments are not JSON: NaN is not a JSON number"),
    ],
    ids=["deep", "nan", "set", "deep-text", "nan-text"],
)
async def test_a_models_arguments_that_are_not_json_go_back_to_it_and_the_turn_goes_on(
    arguments: Any, told: str
) -> None:
    recorder = Recorder()
    agent = Agent(
        "a", model=ScriptedModel([calling("lookup", arguments), recorder]), tools=[lookup]
    )

    record, _ = await run_turn(agent)

    assert isinstance(record, Completed)
    result = tool_result(recorder)
    assert result.is_error
    assert told in result.text
    assert SECRET not in result.text


async def test_a_function_models_arguments_too_deep_are_an_error_result() -> None:
    def model(request: agentlib.ModelRequest) -> Any:
        if len(request.entries) == 1:
            return calling("lookup", {"query": nested(DEEP)})
        return "done"

    async with agentlib.open_runtime():
        session = await Agent("a", model=FunctionModel(model), tools=[lookup]).start_session()
        record = await session.run("go")
    assert isinstance(record, Completed)
    (call,) = record.tool_calls
    assert call.arguments is None  # what was not JSON is not kept


async def test_a_call_whose_arguments_are_not_json_never_reaches_a_hook() -> None:
    seen: list[str] = []

    @agentlib.pre_tool_call
    def watch(call: ToolCallEntry) -> None:
        seen.append(call.name)

    calls = [
        ToolCallRequest(name="lookup", arguments='{"query": NaN}'),
        ToolCallRequest(name="plant", arguments={"trees": []}),
    ]
    recorder = Recorder()
    agent = Agent(
        "a",
        model=ScriptedModel([ModelReply(tool_calls=calls), recorder]),
        tools=[lookup, plant],
        hooks=[watch],
    )

    record, _ = await run_turn(agent)

    assert isinstance(record, Completed)
    assert seen == ["plant"]
    refused, planted = recorder.requests[0].entries[-2:]
    assert isinstance(refused, ToolResultEntry)
    assert refused.is_error
    assert isinstance(planted, ToolResultEntry)
    assert planted.structured_content == 0


async def test_arguments_at_the_limit_reach_the_tool() -> None:
    recorder = Recorder()
    arguments = {"trees": [nested(LIMIT - 2)]}
    agent = Agent("a", model=ScriptedModel([calling("plant", arguments), recorder]), tools=[plant])

    record, _ = await run_turn(agent)

    assert isinstance(record, Completed)
    assert tool_result(recorder).structured_content == 1


@pytest.mark.parametrize(
    ("depth", "told"),
    [
        (DEEP, "the tool returned a dict that is nested deeper than the limit of 100"),
        (LIMIT + 2, "the tool returned a dict that is nested deeper than the limit of 100"),
    ],
)
async def test_a_tool_value_too_deep_is_an_error_result_and_the_turn_goes_on(
    depth: int, told: str
) -> None:
    recorder = Recorder()
    agent = Agent(
        "a", model=ScriptedModel([calling("grow", {"depth": depth}), recorder]), tools=[grow]
    )

    record, _ = await run_turn(agent)

    assert isinstance(record, Completed)
    result = tool_result(recorder)
    assert result.is_error
    assert told in result.text
    assert SECRET not in result.text


async def test_a_tool_value_at_the_limit_is_its_result() -> None:
    recorder = Recorder()
    agent = Agent(
        "a", model=ScriptedModel([calling("grow", {"depth": LIMIT}), recorder]), tools=[grow]
    )

    record, _ = await run_turn(agent)

    assert isinstance(record, Completed)
    assert agentlib.structure(tool_result(recorder).structured_content, Tree) == tree(LIMIT // 2)


async def test_a_tool_value_that_is_not_json_is_an_error_result_and_the_turn_goes_on() -> None:
    recorder = Recorder()
    agent = Agent("a", model=ScriptedModel([calling("measure"), recorder]), tools=[measure])

    record, _ = await run_turn(agent)

    assert isinstance(record, Completed)
    result = tool_result(recorder)
    assert result.is_error
    assert "is not JSON: a non-finite number (NaN or infinity) is not JSON" in result.text
    assert "@ $.value" in result.text


@attrs.frozen
class Box:
    items: list[Any]


@pytest.mark.parametrize(
    ("answer", "told"),
    [
        (nested_text(DEEP), "the answer is nested deeper than the limit of 100"),
        ('{"items": [NaN]}', "the answer is not JSON (NaN is not a JSON number)"),
    ],
    ids=["deep", "nan"],
)
async def test_an_answer_for_an_output_type_that_is_not_json_fails_the_turn(
    answer: str, told: str
) -> None:
    agent = Agent("a", model=ScriptedModel([answer]), output_type=Box)
    async with agentlib.open_runtime():
        record = await (await agent.start_session()).run("go")
    assert isinstance(record, Failed)
    assert record.error.type == "ValidationError"
    assert told in record.error.message
    assert SECRET not in record.error.message


async def test_an_answer_at_the_limit_is_read_into_its_output_type() -> None:
    text = json.dumps({"items": [nested(LIMIT - 2)]})
    agent = Agent("a", model=ScriptedModel([text]), output_type=Box)
    async with agentlib.open_runtime():
        record = await (await agent.start_session()).run("go")
    assert isinstance(record, Completed)
    assert record.output == Box(items=[nested(LIMIT - 2)])


async def test_text_too_deep_is_refused_with_the_path_its_keys_make() -> None:
    agent = Agent(
        "a", model=ScriptedModel(['{"items": ' + nested_text(DEEP) + "}"]), output_type=Box
    )
    async with agentlib.open_runtime():
        record = await (await agent.start_session()).run("go")
    assert isinstance(record, Failed)
    assert "@ $.items.a[0].a[0].a[0]" in record.error.message


async def test_brackets_and_quotes_inside_strings_are_text_not_levels() -> None:
    items = ["[" * 500, '"[' * 200, "\\" + "{" * 300]
    agent = Agent("a", model=ScriptedModel([json.dumps({"items": items})]), output_type=Box)
    async with agentlib.open_runtime():
        record = await (await agent.start_session()).run("go")
    assert isinstance(record, Completed)
    assert record.output == Box(items=items)


# --- a store ------------------------------------------------------------------------------


async def test_values_at_the_limit_are_stored_and_read_back(tmp_path: Any) -> None:
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    arguments = {"trees": [nested(LIMIT - 2)]}
    agent = Agent("a", model=ScriptedModel([calling("plant", arguments), "done"]), tools=[plant])
    async with agentlib.open_runtime(store):
        session = await agent.start_session(
            history=[
                agentlib.HistoryImportSnapshot(
                    task_name="t", snapshot_type="s", value=nested(LIMIT)
                )
            ]
        )
        record = await session.run("go")
    async with agentlib.open_runtime(store):
        again = await agent.session(session.id).turn(record.turn_id).get()
    assert isinstance(record, Completed)
    assert again == record
    assert record.tool_calls[0].arguments == arguments


# --- the blocking facade ------------------------------------------------------------------


def test_the_facade_refuses_a_message_too_deep_with_a_validation_error() -> None:
    session = agentlib_sync.Agent("a", model=agentlib_sync.ScriptedModel(["done"])).start_session()
    with pytest.raises(ValidationError) as raised:
        session.run([{"type": "text", "text": "hi", "meta": nested(DEEP)}])
    assert_refused_saying_where(raised.value, f"$[0].meta{TOO_DEEP_AT}")


def test_the_facade_refuses_a_client_tool_answer_too_deep() -> None:
    agent = agentlib_sync.Agent(
        "a", model=agentlib_sync.ScriptedModel([calling("client.pick"), "done"]), tools=[pick]
    )
    session = agent.start_session()
    blocked = session.run("go")
    assert isinstance(blocked, Blocked)
    with pytest.raises(ClientToolAnswerError):
        session.turn(blocked.turn_id).answer(blocked.callbacks[0].id, nested(DEEP))
    session.cancel()


def test_the_facade_reports_arguments_too_deep_to_the_model() -> None:
    recorder = Recorder()
    agent = agentlib_sync.Agent(
        "a",
        model=agentlib_sync.ScriptedModel([calling("lookup", nested_text(DEEP)), recorder]),
        tools=[lookup],
    )
    record = agent.start_session().run("go")
    assert isinstance(record, Completed)
    assert tool_result(recorder).is_error


# --- any value, anywhere ------------------------------------------------------------------
#
# Random values, wide and deep, with leaves that are not JSON, go into every entry point, in
# both APIs: each call succeeds or raises its documented error; a model's or a tool's value
# becomes an error result and the turn goes on. Never a RecursionError.

FUZZ = settings(
    max_examples=12,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

keys = st.text(max_size=4)
json_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
odd_leaves = (
    st.sampled_from([math.nan, math.inf, -math.inf])
    | st.binary(max_size=3)
    | st.frozensets(st.integers(), max_size=2)
    | st.builds(object)
)
wide = st.recursive(
    json_leaves | odd_leaves,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(keys, children, max_size=4)
        | st.tuples(children, children)
    ),
    max_leaves=16,
)
depths = st.sampled_from([0, LIMIT, LIMIT + 1, DEEP]) | st.integers(0, 2 * LIMIT)


class Drawn:
    """A drawn value, shown by its shape: printing a deep value recurses, and hypothesis
    prints its examples (an attrs class, field by field)."""

    def __init__(self, value: Any, shape: str) -> None:
        self.value = value
        self.shape = shape

    def __repr__(self) -> str:
        return self.shape


@st.composite
def values(draw: st.DrawFn) -> Drawn:
    """A wide value in a random number of lists, tuples and dicts, maybe beside another."""
    value = inner = draw(wide)
    shapes = draw(st.lists(st.sampled_from(["list", "tuple", "dict"]), min_size=1, max_size=3))
    key = draw(keys)
    levels = draw(depths)
    for level in range(levels):
        shape = shapes[level % len(shapes)]
        value = {key: value} if shape == "dict" else [value] if shape == "list" else (value,)
    shape = f"{levels} levels of {'/'.join(shapes)} (key {key!r}) around {inner!r:.200}"
    if draw(st.booleans()):
        beside = draw(wide)
        value = {key: value, "beside": beside}
        shape = f"{{{key!r}: {shape}, 'beside': {beside!r:.200}}}"
    return Drawn(value, shape)


@st.composite
def texts(draw: st.DrawFn) -> str:
    """JSON text, or nearly: it may hold NaN and Infinity, be cut short, and nest as deep as
    :func:`values` do."""
    inner = draw(
        st.recursive(
            json_leaves | st.floats(),
            lambda children: (
                st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4)
            ),
            max_leaves=16,
        )
    )
    levels = draw(depths)
    text = "[" * levels + json.dumps(inner) + "]" * levels
    if draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]
    return text


def accepted(call: Callable[[], Any], *documented: type[Exception]) -> Any:
    """``call()``, or None when it raised one of the ``documented`` errors."""
    try:
        return call()
    except documented as error:
        refusal = error
    assert "Traceback" not in str(refusal)
    return None


@agentlib.tool
def echo(value: Any) -> Any:
    """Return a value."""
    return value


@agentlib.client_tool
def ask_anything() -> Any:
    """Ask the user for anything."""
    ...


class Anything(SessionInput):
    input_id = "anything"
    value: Any


def fuzz_agent(*steps: Any, **options: Any) -> Agent:
    return Agent("fuzz", model=ScriptedModel(steps), tools=[echo, ask_anything], **options)


def in_a_session(
    agent: Agent, then: Callable[[agentlib.Session], Awaitable[None]], **start: Any
) -> None:
    """Start a session (a refused start ends here), then ``then`` with it."""

    async def main() -> None:
        async with agentlib.open_runtime():
            try:
                session = await agent.start_session(**start)
            except ValidationError:
                return
            await then(session)
            await session.cancel()

    trio.run(main)


async def goes_on(session: agentlib.Session) -> None:
    record = await session.run("go")
    assert isinstance(record, Completed), record


async def starts(session: agentlib.Session) -> None:
    pass


def history_items(value: Any) -> list[Any]:
    text = {"type": "text", "text": "hi", "meta": value}
    return [
        {"type": "message", "role": "user", "content": [text]},
        {"type": "tool_call", "tool_call_id": "c1", "name": "echo", "arguments": value},
        {"type": "tool_result", "tool_call_id": "c1", "result": value, "annotations": value},
        {"type": "snapshot", "task_name": "t", "snapshot_type": "s", "value": value},
    ]


def send_messages(content: Any) -> None:
    """Each way to send a message: each refuses it, or takes it."""

    async def send(session: agentlib.Session) -> None:
        first = await session.run("hi")
        steer = session.turn(first.turn_id).steer
        for how in (steer, session.send_message, session.start_turn, session.run):
            with contextlib.suppress(ValidationError):
                await how(content)

    in_a_session(fuzz_agent(*"abcde"), send)


def answer_client_tool(value: Any) -> None:
    async def answer(session: agentlib.Session) -> None:
        blocked = await session.run("go")
        assert isinstance(blocked, Blocked)
        turn = session.turn(blocked.turn_id)
        try:
            await turn.answer(blocked.callbacks[0].id, value)
        except ClientToolAnswerError:
            return
        assert isinstance(await turn.result(), Completed)

    in_a_session(fuzz_agent(calling("client.ask_anything"), "done"), answer)


def handle_client_tool(value: Any) -> None:
    async def run(session: agentlib.Session) -> None:
        with contextlib.suppress(ClientToolAnswerError):
            await goes_on(session)

    agent = fuzz_agent(calling("client.ask_anything"), "done")
    in_a_session(agent, run, on_client_tool=lambda call: value)


def rewrite_arguments(value: Any) -> None:
    @agentlib.pre_tool_call
    def rewrite(call: ToolCallEntry) -> agentlib.ModifiedArguments:
        return agentlib.ModifiedArguments({"value": value})

    in_a_session(fuzz_agent(calling("echo", {"value": 1}), "done", hooks=[rewrite]), goes_on)


def return_from_a_tool(value: Any) -> None:
    give = agentlib.tool(lambda: value, name="give", description="Give a value.")
    agent = Agent("fuzz", model=ScriptedModel([calling("give"), "done"]), tools=[give])
    in_a_session(agent, goes_on)


def chat_model_calls_echo(text: str, *, stream: bool) -> None:
    """A chat endpoint calls echo with ``text`` as the arguments' text, then answers."""
    messages = [
        {
            "content": None,
            "tool_calls": [{"id": "c1", "function": {"name": "echo", "arguments": text}}],
        },
        {"content": "done"},
    ]

    def respond(request: httpx.Request) -> httpx.Response:
        message = messages.pop(0)
        finish = "tool_calls" if "tool_calls" in message else "stop"
        if not stream:
            body = {"choices": [{"message": message, "finish_reason": finish}]}
            return httpx.Response(200, json=body)
        chunk = {"choices": [{"index": 0, "delta": message, "finish_reason": finish}]}
        events = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
        return httpx.Response(200, text=events, headers={"content-type": "text/event-stream"})

    async def main() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(respond)) as client:
            model = agentlib.MistralModel("m", api_key="k", http_client=client, stream=stream)
            async with agentlib.open_runtime():
                session = await Agent("fuzz", model=model, tools=[echo]).start_session()
                await goes_on(session)

    trio.run(main)


def answer_for_an_output_type(text: str) -> None:
    async def run(session: agentlib.Session) -> None:
        record = await session.run("go")
        assert isinstance(record, Completed | Failed), record
        assert isinstance(record, Completed) or record.error.type == "ValidationError"

    in_a_session(fuzz_agent(text, output_type=Box), run)


def through_the_facade(value: Any) -> None:
    """The blocking facade's entry points, one after the other."""
    model = agentlib_sync.ScriptedModel([calling("echo", value), calling("client.ask_anything")])
    agent = agentlib_sync.Agent("fuzz", model=model, tools=[echo, ask_anything])
    accepted(lambda: agent.start_session(history=history_items(value)), ValidationError)
    accepted(lambda: agent.start_session(inputs=[Anything(value=value)]), ValidationError)
    session = agent.start_session()
    blocked = session.run("go")
    assert isinstance(blocked, Blocked), blocked
    turn = session.turn(blocked.turn_id)
    accepted(lambda: turn.answer(blocked.callbacks[0].id, value), ClientToolAnswerError)
    content = [{"type": "text", "text": "hi", "meta": value}]
    accepted(lambda: turn.steer(content), ValidationError)
    accepted(lambda: agentlib_sync.structure(value, Tree), ValidationError)
    accepted(lambda: agentlib_sync.unstructure(value), ValidationError)
    session.cancel()


def refused(build: Callable[[Any], Any], *documented: type[Exception]) -> Callable[[Any], Any]:
    return lambda value: accepted(lambda: build(value), *documented)


#: Each entry point, as a function of the value it is given; it raises nothing but what is
#: documented for it.
VALUE_ENTRY_POINTS: dict[str, Callable[[Any], Any]] = {
    **{f"new-{name}": refused(build, ValidationError) for name, build in FIELDS.items()},
    "deny-approval": refused(lambda value: agentlib.DenyApproval(reason=value), ValidationError),
    "sign-in-answer": refused(
        lambda value: agentlib.SignInAnswer(credentials={"notion": value}), ValidationError
    ),
    "structure-block": refused(
        lambda value: agentlib.structure(value, agentlib.ContentBlock), ValidationError
    ),
    "structure-block-meta": refused(
        lambda value: agentlib.structure(
            {"type": "text", "text": "hi", "meta": value}, agentlib.ContentBlock
        ),
        ValidationError,
    ),
    "structure-unknown-block": refused(
        lambda value: agentlib.structure({"type": "video", "frames": value}, agentlib.ContentBlock),
        ValidationError,
    ),
    "structure-entry": refused(
        lambda value: agentlib.structure(value, agentlib.Entry), ValidationError
    ),
    "structure-your-class": refused(lambda value: agentlib.structure(value, Tree), ValidationError),
    "structure-list": refused(lambda value: agentlib.structure(value, list[Any]), ValidationError),
    "unstructure": refused(agentlib.unstructure, ValidationError),
    "parse-history": refused(
        lambda value: agentlib.parse_history(history_items(value)), ValidationError
    ),
    "start-session-history": lambda value: in_a_session(
        fuzz_agent(), starts, history=history_items(value)
    ),
    "start-session-inputs": lambda value: in_a_session(
        fuzz_agent(), starts, inputs=[Anything(value=value)]
    ),
    "send-a-block-dict": lambda value: send_messages(
        [{"type": "text", "text": "hi", "meta": value}]
    ),
    "send-anything": send_messages,
    "model-arguments": lambda value: in_a_session(
        fuzz_agent(calling("echo", value), "done"), goes_on
    ),
    "model-argument": lambda value: in_a_session(
        fuzz_agent(calling("echo", {"value": value}), "done"), goes_on
    ),
    "tool-value": return_from_a_tool,
    "client-tool-answer": answer_client_tool,
    "client-tool-handler": handle_client_tool,
    "hook-modified-arguments": rewrite_arguments,
    "facade": through_the_facade,
}

#: The same for entry points that take text.
TEXT_ENTRY_POINTS: dict[str, Callable[[str], Any]] = {
    "model-arguments-text": lambda text: in_a_session(
        fuzz_agent(calling("echo", text), "done"), goes_on
    ),
    "chat-model-whole": functools.partial(chat_model_calls_echo, stream=False),
    "chat-model-streamed": functools.partial(chat_model_calls_echo, stream=True),
    "output-type-answer": answer_for_an_output_type,
}


@pytest.mark.parametrize("enter", VALUE_ENTRY_POINTS.values(), ids=VALUE_ENTRY_POINTS.keys())
@FUZZ
@given(drawn=values())
@example(drawn=Drawn(nested(DEEP), "nested(DEEP)"))
@example(drawn=Drawn(nested(LIMIT + 1), "nested(LIMIT + 1)"))
@example(drawn=Drawn(tree(DEEP), "tree(DEEP)"))
@example(drawn=Drawn({"value": [math.nan, math.inf]}, "NaN and infinity"))
def test_any_value_anywhere_raises_only_the_documented_error(
    enter: Callable[[Any], Any], drawn: Drawn
) -> None:
    enter(drawn.value)


@pytest.mark.parametrize("enter", TEXT_ENTRY_POINTS.values(), ids=TEXT_ENTRY_POINTS.keys())
@FUZZ
@given(text=texts())
@example(text=nested_text(DEEP))
@example(text=nested_text(DEEP)[:-10])
@example(text=nested_text(LIMIT + 1))
@example(text='{"value": [NaN, -Infinity, 1e999]}')
def test_any_text_a_model_gives_is_an_error_result_or_a_failed_turn_never_a_crash(
    enter: Callable[[str], Any], text: str
) -> None:
    enter(text)
