"""History entries: messages, tool calls, tool results (SPEC section 7, seed 004)."""

from __future__ import annotations

import typing

import attrs
import pytest

import agentlib
import agentlib as agents  # the seed's spelling, so that `describe` is copied as written
from agentlib import (
    ContextMessage,
    ImageContentBlock,
    MessageEntry,
    TextContentBlock,
    ToolCallEntry,
    ToolResultEntry,
    UnknownEntry,
)

# Each test runs on a local runtime and on agents served over HTTP (conftest's transport).
pytestmark = pytest.mark.usefixtures("transport")

# --- the seed's `describe`, as written ---------------------------------------------------

Entry = agents.MessageEntry | agents.ToolCallEntry | agents.ToolResultEntry | agents.UnknownEntry


def describe(entry: Entry) -> str:
    match entry:
        case agents.ContextMessage(kind=kind, source=source) as context:
            return f"context ({kind}, {source}): {context.text}"
        case agents.MessageEntry(role=role) as message:
            return f"{role}: {message.text}"
        case agents.ToolCallEntry(name, arguments):
            return f"{name} called with {arguments}"
        case agents.ToolResultEntry(name, content, is_error=True):
            return f"{name} failed: {content}"
        case agents.ToolResultEntry(name, content, structured_content=output):
            return f"{name} returned {content if output is None else output}"
        case agents.UnknownEntry(entry_type):
            return f"an entry of type {entry_type}"


def text(value: str) -> TextContentBlock:
    return TextContentBlock(text=value)


def test_describe_context_message() -> None:
    entry = ContextMessage(
        id="e1", kind="capability_source", source="notion", content=[text("Notion is linked.")]
    )

    assert describe(entry) == "context (capability_source, notion): Notion is linked."


def test_describe_context_message_sent_with_a_message() -> None:
    entry = ContextMessage(id="e1", content=[text("Today is Monday.")])

    assert describe(entry) == "context (input, None): Today is Monday."


def test_describe_message_entry_by_role() -> None:
    entry = MessageEntry(id="e1", role="user", content=[text("Review alert 4711.")])

    assert describe(entry) == "user: Review alert 4711."


def test_describe_tool_call_entry_by_position() -> None:
    entry = ToolCallEntry(
        id="e1", name="client.get_alert", arguments={"alert_id": "4711"}, tool_call_id="c1"
    )

    assert describe(entry) == "client.get_alert called with {'alert_id': '4711'}"


def test_describe_failed_tool_result() -> None:
    content = (text("timed out"),)
    entry = ToolResultEntry(
        id="e1", name="client.get_alert", content=content, is_error=True, tool_call_id="c1"
    )

    assert describe(entry) == f"client.get_alert failed: {content}"


def test_describe_tool_result_with_structured_content() -> None:
    entry = ToolResultEntry(
        id="e1",
        name="client.open_case",
        content=[text('"CASE-4711"')],
        structured_content="CASE-4711",
        tool_call_id="c1",
    )

    assert describe(entry) == "client.open_case returned CASE-4711"


def test_describe_tool_result_without_structured_content_shows_its_content() -> None:
    content = (text("Payment of 9,800 EUR."),)
    entry = ToolResultEntry(id="e1", name="client.get_alert", content=content, tool_call_id="c1")

    assert describe(entry) == f"client.get_alert returned {content}"


def test_describe_unknown_entry_by_its_type() -> None:
    entry = UnknownEntry(id="e1", entry_type="reasoning", raw={"text": "hmm"})

    assert describe(entry) == "an entry of type reasoning"


# --- MessageEntry ---------------------------------------------------------------------------


def test_message_entry_has_type_message() -> None:
    assert MessageEntry(id="e1", role="user").type == "message"


def test_message_entry_text_joins_its_text_blocks() -> None:
    entry = MessageEntry(
        id="e1",
        role="assistant",
        content=[text("Alert 4711 "), ImageContentBlock(uri="u"), text("looks suspicious.")],
    )

    assert entry.text == "Alert 4711 looks suspicious."


def test_message_entry_text_is_empty_without_text_blocks() -> None:
    entry = MessageEntry(id="e1", role="user", content=[ImageContentBlock(uri="u")])

    assert entry.text == ""


def test_message_entry_content_list_becomes_a_tuple() -> None:
    entry = MessageEntry(id="e1", role="user", content=[text("a")])

    assert entry.content == (text("a"),)


def test_message_entry_turn_id_defaults_to_none() -> None:
    assert MessageEntry(id="e1", role="user").turn_id is None


def test_message_entry_fields_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        MessageEntry("e1", None, "user")  # type: ignore[misc]


# --- ContextMessage -----------------------------------------------------------------------


def test_context_message_is_a_message_entry() -> None:
    assert isinstance(ContextMessage(id="e1"), MessageEntry)


def test_context_message_has_role_context() -> None:
    assert ContextMessage(id="e1").role == "context"


def test_context_message_has_type_message() -> None:
    assert ContextMessage(id="e1").type == "message"


def test_context_message_defaults_to_kind_input_and_no_source() -> None:
    entry = ContextMessage(id="e1")

    assert (entry.kind, entry.source) == ("input", None)


def test_context_message_refuses_another_role() -> None:
    with pytest.raises(ValueError, match="role 'context'"):
        ContextMessage(id="e1", role="user")  # type: ignore[arg-type]


def test_context_message_text_joins_its_text_blocks() -> None:
    entry = ContextMessage(id="e1", content=[text("a"), text("b")])

    assert entry.text == "ab"


def test_context_message_matches_as_a_message_entry_by_role() -> None:
    match ContextMessage(id="e1"):
        case MessageEntry(role=role):
            matched = role
        case _:
            matched = None

    assert matched == "context"


def test_message_dict_with_role_context_structures_into_a_context_message() -> None:
    data = {"type": "message", "id": "e1", "role": "context", "kind": "capability_source"}

    entry = agentlib.structure(data, agentlib.Entry)

    assert entry == ContextMessage(id="e1", kind="capability_source")


# --- ToolCallEntry ------------------------------------------------------------------------


def test_tool_call_entry_has_type_tool_call() -> None:
    assert ToolCallEntry(id="e1", name="add", tool_call_id="c1").type == "tool_call"


def test_tool_call_entry_defaults() -> None:
    entry = ToolCallEntry(id="e1", name="add", tool_call_id="c1")

    assert (entry.turn_id, entry.arguments, entry.tool_kind) == (None, None, "local")


def test_tool_call_entry_matches_name_then_arguments_by_position() -> None:
    assert ToolCallEntry.__match_args__ == ("name", "arguments")


def test_tool_call_entry_arguments_must_be_json() -> None:
    with pytest.raises(ValueError, match="arguments must be JSON"):
        ToolCallEntry(id="e1", name="add", tool_call_id="c1", arguments={"a": {1, 2}})


# --- ToolResultEntry ----------------------------------------------------------------------


def test_tool_result_entry_has_type_tool_result() -> None:
    assert ToolResultEntry(id="e1", tool_call_id="c1").type == "tool_result"


def test_tool_result_entry_defaults() -> None:
    entry = ToolResultEntry(id="e1", tool_call_id="c1")

    assert (entry.name, entry.content, entry.structured_content, entry.is_error) == (
        None,
        (),
        None,
        False,
    )
    assert entry.annotations == {}


def test_tool_result_entry_text_joins_its_text_blocks() -> None:
    entry = ToolResultEntry(id="e1", tool_call_id="c1", content=[text("4"), text("2")])

    assert entry.text == "42"


def test_tool_result_entry_matches_name_content_structured_content_is_error() -> None:
    assert ToolResultEntry.__match_args__ == ("name", "content", "structured_content", "is_error")


def test_tool_result_entry_structured_content_must_be_json() -> None:
    with pytest.raises(ValueError, match="structured_content must be JSON"):
        ToolResultEntry(id="e1", tool_call_id="c1", structured_content=object())


def test_tool_result_entry_annotations_must_be_json() -> None:
    with pytest.raises(ValueError, match="annotations must be JSON"):
        ToolResultEntry(id="e1", tool_call_id="c1", annotations={"at": object()})


# --- UnknownEntry -------------------------------------------------------------------------


def test_unknown_entry_keeps_its_type_and_raw_fields() -> None:
    entry = UnknownEntry(id="e1", entry_type="reasoning", raw={"text": "hmm"})

    assert (entry.entry_type, entry.raw) == ("reasoning", {"text": "hmm"})


def test_unknown_entry_raw_must_be_json() -> None:
    with pytest.raises(ValueError, match="raw must be JSON"):
        UnknownEntry(id="e1", entry_type="reasoning", raw={"t": object()})


def test_unknown_entry_tag_structures_into_unknown_entry() -> None:
    data = {"type": "reasoning", "id": "e1", "turn_id": "t1", "text": "hmm"}

    entry = agentlib.structure(data, agentlib.Entry)

    assert entry == UnknownEntry(id="e1", turn_id="t1", entry_type="reasoning", raw={"text": "hmm"})


# --- all entries --------------------------------------------------------------------------

ENTRIES = [
    pytest.param(MessageEntry(id="e1", role="user", content=[text("a")]), id="message"),
    pytest.param(ContextMessage(id="e1", content=[text("a")]), id="context"),
    pytest.param(ToolCallEntry(id="e1", name="add", tool_call_id="c1"), id="tool_call"),
    pytest.param(ToolResultEntry(id="e1", tool_call_id="c1"), id="tool_result"),
    pytest.param(UnknownEntry(id="e1", entry_type="reasoning"), id="unknown"),
]


@pytest.mark.parametrize("entry", ENTRIES)
def test_entries_are_frozen(entry: Entry) -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        entry.id = "changed"  # type: ignore[misc]


@pytest.mark.parametrize("entry", ENTRIES)
def test_entries_have_an_id_and_a_turn_id(entry: Entry) -> None:
    assert (entry.id, entry.turn_id) == ("e1", None)


@pytest.mark.parametrize("entry", ENTRIES)
def test_entries_are_members_of_the_entry_union(entry: Entry) -> None:
    assert type(entry) in typing.get_args(agentlib.Entry)


@pytest.mark.parametrize("entry", ENTRIES)
def test_entries_structure_back_through_the_entry_union(entry: Entry) -> None:
    assert agentlib.structure(agentlib.unstructure(entry), agentlib.Entry) == entry
