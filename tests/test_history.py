"""Importing a conversation held elsewhere: agentlib.parse_history (SPEC section 7, seed 004)."""

from __future__ import annotations

import json
from contextlib import aclosing
from pathlib import Path

import pytest

import agentlib
from agentlib import (
    EmbeddedResourceContentBlock,
    HistoryImportMessage,
    HistoryImportReasoning,
    HistoryImportSnapshot,
    HistoryImportToolCall,
    HistoryImportToolResult,
    ImageContentBlock,
    MessageEntry,
    TextContentBlock,
    ToolCallEntry,
    ToolResultEntry,
    UnknownEntry,
)

# Each test runs on a local runtime and on agents served over HTTP (conftest's transport).
pytestmark = pytest.mark.usefixtures("transport")

# The seed's example, as written.
earlier = [
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "text", "text": "Review alert 4711."}],
    },
    {
        "type": "tool_call",
        "tool_call_id": "call-1",
        "name": "get_alert",
        "arguments": {"alert_id": "4711"},
    },
    {
        "type": "tool_result",
        "tool_call_id": "call-1",
        "name": "get_alert",
        "result": "Payment of 9,800 EUR to a new beneficiary.",
    },
    {
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Alert 4711 looks suspicious: I opened case CASE-4711."}
        ],
    },
]


def call(tool_call_id: str = "c1", name: str = "get_alert") -> dict[str, object]:
    return {"type": "tool_call", "tool_call_id": tool_call_id, "name": name}


def without_ids(entries: list[agentlib.Entry]) -> list[dict[str, object]]:
    """The entries as data, minus their fresh ids."""
    out = []
    for entry in entries:
        data = agentlib.unstructure(entry)
        del data["id"]
        out.append(data)
    return out


def problem(items: list[object]) -> agentlib.ValidationError:
    with pytest.raises(agentlib.ValidationError) as info:
        agentlib.parse_history(items)
    return info.value


# --- what parse_history gives -------------------------------------------------------------


def test_parse_history_imports_the_seed_example() -> None:
    user, tool_call, tool_result, assistant = agentlib.parse_history(earlier)

    assert isinstance(user, MessageEntry)
    assert (user.role, user.text) == ("user", "Review alert 4711.")
    assert isinstance(tool_call, ToolCallEntry)
    assert (tool_call.name, tool_call.arguments, tool_call.tool_call_id) == (
        "get_alert",
        {"alert_id": "4711"},
        "call-1",
    )
    assert isinstance(tool_result, ToolResultEntry)
    assert (tool_result.name, tool_result.text, tool_result.is_error) == (
        "get_alert",
        "Payment of 9,800 EUR to a new beneficiary.",
        False,
    )
    assert tool_result.tool_call_id == "call-1"
    assert isinstance(assistant, MessageEntry)
    assert (assistant.role, assistant.text) == (
        "assistant",
        "Alert 4711 looks suspicious: I opened case CASE-4711.",
    )


def test_parse_history_gives_entries_fresh_distinct_ids() -> None:
    first = agentlib.parse_history(earlier)
    second = agentlib.parse_history(earlier)

    ids = [entry.id for entry in first + second]
    assert len(set(ids)) == len(ids)
    assert all(isinstance(entry_id, str) and entry_id for entry_id in ids)


def test_parse_history_entries_belong_to_no_turn() -> None:
    assert [entry.turn_id for entry in agentlib.parse_history(earlier)] == [None] * 4


def test_parse_history_of_nothing_is_no_entries() -> None:
    assert agentlib.parse_history([]) == []


def test_parse_history_takes_any_iterable() -> None:
    from_list = without_ids(agentlib.parse_history(earlier))

    assert without_ids(agentlib.parse_history(iter(earlier))) == from_list
    assert without_ids(agentlib.parse_history(tuple(earlier))) == from_list


def test_parse_history_takes_the_import_classes() -> None:
    items = [
        HistoryImportMessage(role="user", content=[TextContentBlock(text="Review alert 4711.")]),
        HistoryImportToolCall(
            tool_call_id="call-1", name="get_alert", arguments={"alert_id": "4711"}
        ),
        HistoryImportToolResult(
            tool_call_id="call-1",
            name="get_alert",
            result="Payment of 9,800 EUR to a new beneficiary.",
        ),
        HistoryImportMessage(
            role="assistant",
            content=[
                TextContentBlock(text="Alert 4711 looks suspicious: I opened case CASE-4711.")
            ],
        ),
    ]

    assert without_ids(agentlib.parse_history(items)) == without_ids(
        agentlib.parse_history(earlier)
    )


def test_parse_history_takes_camel_case_dicts() -> None:
    camel = [
        {"type": "tool_call", "toolCallId": "c1", "name": "search", "toolKind": "mcp"},
        {"type": "tool_result", "toolCallId": "c1", "result": [1]},
        {"type": "snapshot", "taskName": "triage", "snapshotType": "state", "value": {"step": 2}},
    ]
    snake = [
        {"type": "tool_call", "tool_call_id": "c1", "name": "search", "tool_kind": "mcp"},
        {"type": "tool_result", "tool_call_id": "c1", "result": [1]},
        {"type": "snapshot", "task_name": "triage", "snapshot_type": "state", "value": {"step": 2}},
    ]

    assert without_ids(agentlib.parse_history(camel)) == without_ids(agentlib.parse_history(snake))


def test_parse_history_takes_camel_case_content_block_fields() -> None:
    items = [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "image", "uri": "u", "mediaType": "image/png", "altText": "a"}],
        }
    ]

    (entry,) = agentlib.parse_history(items)

    assert entry.content == (ImageContentBlock(uri="u", media_type="image/png", alt_text="a"),)


def test_parse_history_takes_classes_and_dicts_mixed() -> None:
    items = [
        HistoryImportToolCall(tool_call_id="c1", name="add"),
        {"type": "tool_result", "tool_call_id": "c1", "result": 3},
    ]

    tool_call, tool_result = agentlib.parse_history(items)

    assert (tool_call.tool_call_id, tool_result.tool_call_id, tool_result.name) == (
        "c1",
        "c1",
        "add",
    )


def test_message_keeps_its_role_and_content() -> None:
    content = [TextContentBlock(text="Be brief.")]

    (entry,) = agentlib.parse_history([HistoryImportMessage(role="system", content=content)])

    assert entry == MessageEntry(id=entry.id, role="system", content=content)


def test_reasoning_becomes_an_unknown_entry_of_type_reasoning() -> None:
    (entry,) = agentlib.parse_history(
        [{"type": "reasoning", "text": "The amount is just under 10k."}]
    )

    assert isinstance(entry, UnknownEntry)
    assert (entry.entry_type, entry.raw) == ("reasoning", {"text": "The amount is just under 10k."})


def test_reasoning_class_becomes_an_unknown_entry_of_type_reasoning() -> None:
    (entry,) = agentlib.parse_history([HistoryImportReasoning(text="hmm")])

    assert (type(entry), entry.entry_type) == (UnknownEntry, "reasoning")


def test_snapshot_becomes_a_checkpoint_unknown_entry() -> None:
    snapshot = HistoryImportSnapshot(task_name="task", snapshot_type="type", value={"step": [1, 2]})

    (entry,) = agentlib.parse_history([snapshot])

    assert isinstance(entry, UnknownEntry)
    assert entry.entry_type == "checkpoint"
    assert entry.raw["message"] == "task:type"
    assert entry.raw["details"] == {"step": [1, 2]}


def test_snapshot_dict_becomes_a_checkpoint_unknown_entry() -> None:
    item = {"type": "snapshot", "task_name": "task", "snapshot_type": "type", "value": 3}

    (entry,) = agentlib.parse_history([item])

    assert (entry.entry_type, entry.raw) == ("checkpoint", {"message": "task:type", "details": 3})


def test_tool_call_keeps_tool_kind_and_arguments() -> None:
    item = HistoryImportToolCall(
        tool_call_id="c1", name="notion.search", arguments=["q"], tool_kind="mcp"
    )

    (entry,) = agentlib.parse_history([item])

    assert entry == ToolCallEntry(
        id=entry.id, name="notion.search", arguments=["q"], tool_call_id="c1", tool_kind="mcp"
    )


def test_tool_call_kind_defaults_to_local() -> None:
    (entry,) = agentlib.parse_history([call()])

    assert entry.tool_kind == "local"


def test_tool_result_string_result_becomes_its_text() -> None:
    _, entry = agentlib.parse_history(
        [call(), {"type": "tool_result", "tool_call_id": "c1", "result": "ok"}]
    )

    assert (entry.content, entry.structured_content, entry.is_error) == (
        (TextContentBlock(text="ok"),),
        None,
        False,
    )


def test_tool_result_json_result_becomes_structured_content_and_json_text() -> None:
    result = {"case": "CASE-4711", "amount": 9800}

    _, entry = agentlib.parse_history(
        [call(), {"type": "tool_result", "tool_call_id": "c1", "result": result}]
    )

    assert entry.structured_content == result
    assert json.loads(entry.text) == result
    assert entry.is_error is False


def test_tool_result_error_becomes_an_error_result_with_its_message() -> None:
    item = {"type": "tool_result", "tool_call_id": "c1", "error": {"message": "timed out"}}

    _, entry = agentlib.parse_history([call(), item])

    assert (entry.text, entry.structured_content, entry.is_error) == ("timed out", None, True)


def test_tool_result_without_a_name_takes_its_calls_name() -> None:
    _, entry = agentlib.parse_history(
        [call(name="get_alert"), {"type": "tool_result", "tool_call_id": "c1"}]
    )

    assert entry.name == "get_alert"


def test_tool_result_name_wins_over_its_calls_name() -> None:
    item = {"type": "tool_result", "tool_call_id": "c1", "name": "renamed"}

    _, entry = agentlib.parse_history([call(name="get_alert"), item])

    assert entry.name == "renamed"


def test_tool_result_keeps_its_annotations() -> None:
    item = {"type": "tool_result", "tool_call_id": "c1", "result": 1, "annotations": {"cost": 0.1}}

    _, entry = agentlib.parse_history([call(), item])

    assert entry.annotations == {"cost": 0.1}


def test_user_message_may_hold_an_embedded_resource() -> None:
    block = EmbeddedResourceContentBlock(uri="file:///a.txt", text="a")

    (entry,) = agentlib.parse_history([HistoryImportMessage(role="user", content=[block])])

    assert entry.content == (block,)


def test_assistant_message_may_hold_an_image() -> None:
    block = ImageContentBlock(uri="https://example.com/chart.png")

    (entry,) = agentlib.parse_history([HistoryImportMessage(role="assistant", content=[block])])

    assert entry.content == (block,)


# --- the rules, each a ValidationError ------------------------------------------------------


def test_validation_error_is_an_sdk_error_and_a_value_error() -> None:
    assert issubclass(agentlib.ValidationError, agentlib.SdkError)
    assert issubclass(agentlib.ValidationError, ValueError)


def test_tool_result_with_result_and_error_is_refused() -> None:
    item = {"type": "tool_result", "tool_call_id": "c1", "result": 1, "error": {"message": "no"}}

    message = str(problem([call(), item]))

    assert "$[1]" in message
    assert "result or error, not both" in message


def test_tool_result_class_with_result_and_error_raises_validation_error() -> None:
    with pytest.raises(agentlib.ValidationError, match="result or error, not both"):
        agentlib.parse_history(
            [
                HistoryImportToolCall(tool_call_id="c1", name="add"),
                HistoryImportToolResult(tool_call_id="c1", result=1, error={"message": "no"}),
            ]
        )


def test_tool_result_error_must_have_a_message_string() -> None:
    item = {"type": "tool_result", "tool_call_id": "c1", "error": {"code": 504}}

    message = str(problem([call(), item]))

    assert "$[1]" in message
    assert "'message' string" in message


def test_system_message_with_a_non_text_block_is_refused() -> None:
    item = {
        "type": "message",
        "role": "system",
        "content": [{"type": "text", "text": "a"}, {"type": "image", "uri": "u"}],
    }

    message = str(problem([{"type": "reasoning", "text": "r"}, item]))

    assert "$[1]" in message
    assert "system message takes text blocks only" in message
    assert "content[1]" in message


def test_assistant_message_with_an_embedded_resource_is_refused() -> None:
    item = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "embedded_resource", "uri": "file:///a", "text": "a"}],
    }

    message = str(problem([item]))

    assert "$[0]" in message
    assert "assistant message takes no embedded resource" in message
    assert "content[0]" in message


def test_unknown_item_type_is_refused() -> None:
    message = str(problem([{"type": "reasoning", "text": "r"}, {"type": "banana"}]))

    assert "$[1]" in message
    assert "'message', 'reasoning', 'tool_call', 'tool_result', 'snapshot'" in message


def test_item_without_a_type_is_refused() -> None:
    message = str(problem([{"role": "user", "content": []}]))

    assert "$[0]" in message
    assert "missing 'type'" in message


def test_tool_result_without_a_prior_tool_call_is_refused() -> None:
    message = str(
        problem([{"type": "reasoning", "text": "r"}, {"type": "tool_result", "tool_call_id": "c1"}])
    )

    assert "$[1].tool_call_id" in message
    assert "matches no tool call before this result" in message


def test_tool_result_before_its_tool_call_is_refused() -> None:
    message = str(problem([{"type": "tool_result", "tool_call_id": "c1"}, call("c1")]))

    assert "$[0].tool_call_id" in message


def test_tool_call_id_used_twice_is_refused() -> None:
    message = str(problem([call("c1"), call("c1")]))

    assert "$[1].tool_call_id" in message
    assert "earlier tool call" in message


def test_missing_field_error_names_the_item_index_and_field() -> None:
    items = [earlier[0], {"type": "reasoning", "text": "r"}, {"type": "tool_call", "name": "add"}]

    error = problem(items)

    assert "$[2].tool_call_id" in str(error)
    assert error.errors == ("required field missing @ $[2].tool_call_id",)


def test_invalid_role_is_refused_with_the_roles_allowed() -> None:
    message = str(problem([{"type": "message", "role": "context"}]))

    assert "$[0].role" in message
    assert "'system', 'user', 'assistant'" in message


def test_every_problem_is_listed() -> None:
    items = [{"type": "message", "role": "bot"}, {"type": "reasoning"}, {"type": "banana"}]

    error = problem(items)

    assert len(error.errors) == 3
    assert [p.rsplit(" @ ", 1)[1] for p in error.errors] == ["$[0].role", "$[1].text", "$[2]"]


@pytest.mark.parametrize("items", ["a string", {"type": "message"}, None, 3, b"bytes"])
def test_history_must_be_a_list(items: object) -> None:
    with pytest.raises(agentlib.ValidationError, match="expected a list of history items"):
        agentlib.parse_history(items)  # type: ignore[arg-type]


def test_structure_of_a_history_item_checks_the_same_rules() -> None:
    data = {"type": "message", "role": "system", "content": [{"type": "image", "uri": "u"}]}

    with pytest.raises(agentlib.ValidationError, match="system message takes text blocks only"):
        agentlib.structure(data, agentlib.HistoryImportEntry)


# --- what the model sees (seed 000: it never sees a snapshot) ------------------------------


@pytest.mark.parametrize("store", [":memory:", "sqlite"])
async def test_the_model_never_sees_an_imported_snapshot(store: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}" if store == "sqlite" else store
    requests: list[agentlib.ModelRequest] = []

    def answer(request: agentlib.ModelRequest) -> str:
        requests.append(request)
        return "ok"

    agent = agentlib.Agent("a", model=agentlib.FunctionModel(answer))
    history = [
        HistoryImportMessage(role="user", content=[TextContentBlock(text="Review alert 4711.")]),
        HistoryImportSnapshot(task_name="triage", snapshot_type="state", value={"step": 2}),
        HistoryImportReasoning(text="It looks benign."),
    ]
    async with agentlib.open_runtime(url):
        session = await agent.start_session(history=history)
        record = await session.run("Go on.")
        events = []
        async with aclosing(session.iter_events()) as reader:
            async for event in reader:
                events.append(event)
                if event.id == record.cursor:
                    break
    if store == "sqlite":  # read back from the store, the history is the same
        async with agentlib.open_runtime(url):
            await agent.session(session.id).run("And now?")

    checkpoints = [
        event.entry
        for event in events
        if isinstance(event, agentlib.EntryCompleted)
        and isinstance(event.entry, UnknownEntry)
        and event.entry.entry_type == "checkpoint"
    ]
    assert len(checkpoints) == 1  # the session's history keeps it
    for request in requests:
        kinds = [getattr(entry, "entry_type", type(entry).__name__) for entry in request.entries]
        assert "checkpoint" not in kinds, kinds
        assert "reasoning" in kinds  # only the snapshot is left out
        assert request.entries[0].text == "Review alert 4711."
    assert len(requests) == (2 if store == "sqlite" else 1)
