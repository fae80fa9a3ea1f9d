"""Every data class round-trips through JSON unchanged (SPEC sections 3, 4, 6, 7).

``agentlib.structure(json.loads(json.dumps(agentlib.unstructure(x))), type(x)) == x``, for
each public data class and through each union the class belongs to.
"""

from __future__ import annotations

import base64
import datetime
import json
import string
import types
import typing
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentlib
from agentlib import (
    AllowApproval,
    AlreadySettled,
    Answered,
    AudioContentBlock,
    Blocked,
    Busy,
    CallbackClosed,
    CallbackOpened,
    Completed,
    ContentAnnotations,
    ContextMessage,
    Credentials,
    DenyApproval,
    EmbeddedResourceContentBlock,
    EntryAdded,
    EntryCompleted,
    EntryDelta,
    ErrorInfo,
    Failed,
    HistoryImportMessage,
    HistoryImportReasoning,
    HistoryImportSnapshot,
    HistoryImportToolCall,
    HistoryImportToolResult,
    ImageContentBlock,
    Interrupted,
    KeepCallbackOpen,
    MessageEntry,
    NotFound,
    OpenApproval,
    OpenClientToolCall,
    OpenSignIn,
    ResourceLinkContentBlock,
    Running,
    SignInAnswer,
    TextContentBlock,
    ToolCallEntry,
    ToolResultEntry,
    TurnConflict,
    TurnEnded,
    TurnStarted,
    UnknownCallback,
    UnknownContentBlock,
    UnknownEntry,
    UnknownEvent,
    UnknownOutcome,
    UnknownRecord,
)

FAST = settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
#: For properties the round trips already exercise from another side.
FASTER = settings(FAST, max_examples=8)


def json_roundtrip(value: object, cls: object) -> object:
    return agentlib.structure(json.loads(json.dumps(agentlib.unstructure(value))), cls)


# --- strategies ---------------------------------------------------------------------------

texts = st.text(max_size=8)
ids = st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=1, max_size=12)
optional_ids = st.none() | ids
optional_texts = st.none() | texts

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=6,
)
json_objects = st.dictionaries(texts, json_values, max_size=3)

#: Keys a raw dict may use without colliding with the tag or an envelope field.
raw_key_chars = string.ascii_lowercase + "_"


def raw_dicts(reserved: frozenset[str]) -> st.SearchStrategy[dict[str, Any]]:
    keys = st.text(alphabet=raw_key_chars, min_size=1, max_size=8).filter(
        lambda key: key not in reserved
    )
    return st.dictionaries(keys, json_values, max_size=3)


def tags(known: frozenset[str]) -> st.SearchStrategy[str]:
    return st.text(alphabet=raw_key_chars, min_size=1, max_size=12).filter(
        lambda tag: tag not in known
    )


timestamps = st.builds(
    lambda moment, suffix: moment.isoformat() + suffix,
    st.datetimes(min_value=datetime.datetime(1970, 1, 1), max_value=datetime.datetime(2200, 1, 1)),
    st.sampled_from(["Z", "+00:00", "-05:30", ""]),
)

annotations = st.builds(
    ContentAnnotations,
    audience=st.none() | st.lists(st.sampled_from(["user", "assistant"]) | texts, max_size=2),
    priority=st.none() | st.floats(min_value=0.0, max_value=1.0),
    last_modified=st.none() | timestamps,
)
block_common = {"annotations": st.none() | annotations, "meta": st.none() | json_objects}

text_blocks = st.builds(TextContentBlock, text=texts, **block_common)
image_blocks = st.builds(
    ImageContentBlock, uri=texts, media_type=optional_texts, alt_text=optional_texts, **block_common
)
audio_blocks = st.builds(AudioContentBlock, uri=texts, media_type=optional_texts, **block_common)
resource_link_blocks = st.builds(
    ResourceLinkContentBlock,
    uri=texts,
    name=optional_texts,
    title=optional_texts,
    description=optional_texts,
    media_type=optional_texts,
    size=st.none() | st.integers(min_value=0, max_value=2**53),
    **block_common,
)
base64_blobs = st.binary(max_size=12).map(lambda data: base64.b64encode(data).decode("ascii"))
embedded_resource_blocks = st.one_of(
    st.builds(
        EmbeddedResourceContentBlock,
        uri=texts,
        media_type=optional_texts,
        text=texts,
        **block_common,
    ),
    st.builds(
        EmbeddedResourceContentBlock,
        uri=texts,
        media_type=optional_texts,
        blob=base64_blobs,
        **block_common,
    ),
)
KNOWN_BLOCK_TAGS = frozenset({"text", "image", "audio", "resource_link", "embedded_resource"})
unknown_blocks = st.builds(
    UnknownContentBlock,
    original_type=tags(KNOWN_BLOCK_TAGS),
    raw=raw_dicts(frozenset({"type"})),
)
known_blocks = (
    text_blocks | image_blocks | audio_blocks | resource_link_blocks | embedded_resource_blocks
)
content = st.lists(known_blocks | unknown_blocks, max_size=2)

message_entries = st.builds(
    MessageEntry,
    id=ids,
    turn_id=optional_ids,
    role=st.sampled_from(["user", "assistant", "system"]),
    content=content,
)
context_messages = st.builds(
    ContextMessage,
    id=ids,
    turn_id=optional_ids,
    content=content,
    kind=st.sampled_from(["input", "capability_source"]),
    source=optional_texts,
)
tool_call_entries = st.builds(
    ToolCallEntry,
    id=ids,
    turn_id=optional_ids,
    name=texts,
    arguments=json_values,
    tool_call_id=ids,
    tool_kind=st.sampled_from(["local", "client", "mcp", "builtin"]) | texts,
)
tool_result_entries = st.builds(
    ToolResultEntry,
    id=ids,
    turn_id=optional_ids,
    name=optional_texts,
    content=content,
    structured_content=json_values,
    is_error=st.booleans(),
    tool_call_id=ids,
    annotations=json_objects,
)
KNOWN_ENTRY_TAGS = frozenset({"message", "tool_call", "tool_result"})
unknown_entries = st.builds(
    UnknownEntry,
    id=ids,
    turn_id=optional_ids,
    entry_type=tags(KNOWN_ENTRY_TAGS),
    raw=raw_dicts(frozenset({"type", "id", "turn_id"})),
)
entries = (
    message_entries | context_messages | tool_call_entries | tool_result_entries | unknown_entries
)

history_blocks_for = {
    "system": text_blocks,
    "assistant": text_blocks | image_blocks | audio_blocks | resource_link_blocks,
    "user": known_blocks,
}
history_messages = st.sampled_from(sorted(history_blocks_for)).flatmap(
    lambda role: st.builds(
        HistoryImportMessage,
        role=st.just(role),
        content=st.lists(history_blocks_for[role], max_size=2),
    )
)
history_reasonings = st.builds(HistoryImportReasoning, text=texts)
history_tool_calls = st.builds(
    HistoryImportToolCall,
    tool_call_id=ids,
    name=texts,
    arguments=json_values,
    tool_kind=st.sampled_from(["builtin", "local", "mcp", "client", "plugin", "connector"]),
)
errors = st.builds(lambda message, extra: {**extra, "message": message}, texts, json_objects)
history_tool_results = st.one_of(
    st.builds(
        HistoryImportToolResult,
        tool_call_id=ids,
        name=optional_texts,
        result=json_values,
        annotations=json_objects,
    ),
    st.builds(
        HistoryImportToolResult,
        tool_call_id=ids,
        name=optional_texts,
        error=errors,
        annotations=json_objects,
    ),
)
history_snapshots = st.builds(
    HistoryImportSnapshot, task_name=texts, snapshot_type=texts, value=json_values
)

callback_ids = {"id": ids, "session_id": ids, "turn_id": ids}
open_approvals = st.builds(
    OpenApproval,
    tool_name=texts,
    arguments=json_values,
    source=st.sampled_from(["tool", "hook"]),
    reason=optional_texts,
    **callback_ids,
)
open_client_tool_calls = st.builds(
    OpenClientToolCall, tool_name=texts, arguments=json_values, **callback_ids
)
open_sign_ins = st.builds(OpenSignIn, sources=st.lists(texts, max_size=3), **callback_ids)
KNOWN_CALLBACK_TAGS = frozenset({"approval", "client_tool_call", "sign_in"})
unknown_callbacks = st.builds(
    UnknownCallback,
    callback_type=tags(KNOWN_CALLBACK_TAGS),
    raw=raw_dicts(frozenset({"type", "id", "session_id", "turn_id"})),
    **callback_ids,
)
callbacks = open_approvals | open_client_tool_calls | open_sign_ins | unknown_callbacks

allow_approvals = st.builds(AllowApproval, scope=st.sampled_from(["once", "session"]))
deny_approvals = st.builds(DenyApproval, reason=optional_texts)
approval_answers = allow_approvals | deny_approvals
sign_in_answers = st.builds(
    SignInAnswer, credentials=st.dictionaries(st.text(min_size=1, max_size=8), texts, max_size=3)
)
keep_callback_opens = st.just(KeepCallbackOpen())

record_ids = {"turn_id": ids, "session_id": ids, "cursor": optional_ids}
error_infos = st.builds(ErrorInfo, type=texts, message=texts)
running = st.builds(Running, **record_ids)
blocked = st.builds(Blocked, callbacks=st.lists(callbacks, max_size=2), **record_ids)
completed = st.builds(
    Completed,
    output=json_values,
    text=texts,
    tool_calls=st.lists(tool_call_entries, max_size=2),
    **record_ids,
)
interrupted = st.builds(
    Interrupted, cause=st.sampled_from(["interrupted", "cancelled"]), **record_ids
)
failed = st.builds(Failed, error=error_infos, **record_ids)
unknown_outcomes = st.builds(UnknownOutcome, reason=texts, **record_ids)
KNOWN_RECORD_TAGS = frozenset(
    {"running", "blocked", "completed", "interrupted", "failed", "unknown_outcome"}
)
unknown_records = st.builds(
    UnknownRecord,
    record_type=tags(KNOWN_RECORD_TAGS),
    raw=raw_dicts(frozenset({"type", "turn_id", "session_id", "cursor"})),
    **record_ids,
)
records = running | blocked | completed | interrupted | failed | unknown_outcomes | unknown_records

turn_conflicts = st.builds(TurnConflict, turn_id=ids)
answereds = st.builds(Answered, answer=st.none() | approval_answers, session_id=ids)
already_settleds = st.builds(AlreadySettled, session_id=ids)
not_founds = st.just(NotFound())

event_ids = {"id": ids, "session_id": ids, "turn_id": optional_ids}
turn_starteds = st.builds(TurnStarted, message=message_entries, **event_ids)
entry_addeds = st.builds(EntryAdded, entry=entries, **event_ids)
entry_deltas = st.builds(EntryDelta, entry_id=ids, delta=texts, **event_ids)
entry_completeds = st.builds(EntryCompleted, entry=entries, **event_ids)
callback_openeds = st.builds(CallbackOpened, callback=callbacks, **event_ids)
callback_closeds = st.builds(
    CallbackClosed,
    callback_id=ids,
    answer=st.none() | approval_answers,
    answered=st.booleans(),
    **event_ids,
)
turn_endeds = st.builds(TurnEnded, record=records, **event_ids)
KNOWN_EVENT_TAGS = frozenset(
    {
        "turn_started",
        "entry_added",
        "entry_delta",
        "entry_completed",
        "callback_opened",
        "callback_closed",
        "turn_ended",
    }
)
unknown_events = st.builds(
    UnknownEvent,
    event_type=tags(KNOWN_EVENT_TAGS),
    raw=raw_dicts(frozenset({"type", "id", "session_id", "turn_id"})),
    **event_ids,
)

#: Every public data class but Busy (it holds a live turn reference), with its strategy.
STRATEGIES: dict[type, st.SearchStrategy[Any]] = {
    ContentAnnotations: annotations,
    TextContentBlock: text_blocks,
    ImageContentBlock: image_blocks,
    AudioContentBlock: audio_blocks,
    ResourceLinkContentBlock: resource_link_blocks,
    EmbeddedResourceContentBlock: embedded_resource_blocks,
    UnknownContentBlock: unknown_blocks,
    MessageEntry: message_entries,
    ContextMessage: context_messages,
    ToolCallEntry: tool_call_entries,
    ToolResultEntry: tool_result_entries,
    UnknownEntry: unknown_entries,
    HistoryImportMessage: history_messages,
    HistoryImportReasoning: history_reasonings,
    HistoryImportToolCall: history_tool_calls,
    HistoryImportToolResult: history_tool_results,
    HistoryImportSnapshot: history_snapshots,
    OpenApproval: open_approvals,
    OpenClientToolCall: open_client_tool_calls,
    OpenSignIn: open_sign_ins,
    UnknownCallback: unknown_callbacks,
    AllowApproval: allow_approvals,
    DenyApproval: deny_approvals,
    SignInAnswer: sign_in_answers,
    KeepCallbackOpen: keep_callback_opens,
    Running: running,
    Blocked: blocked,
    Completed: completed,
    Interrupted: interrupted,
    Failed: failed,
    UnknownOutcome: unknown_outcomes,
    UnknownRecord: unknown_records,
    ErrorInfo: error_infos,
    TurnConflict: turn_conflicts,
    Answered: answereds,
    AlreadySettled: already_settleds,
    NotFound: not_founds,
    TurnStarted: turn_starteds,
    EntryAdded: entry_addeds,
    EntryDelta: entry_deltas,
    EntryCompleted: entry_completeds,
    CallbackOpened: callback_openeds,
    CallbackClosed: callback_closeds,
    TurnEnded: turn_endeds,
    UnknownEvent: unknown_events,
}

UNIONS = {
    "ContentBlock": agentlib.ContentBlock,
    "Entry": agentlib.Entry,
    "Callback": agentlib.Callback,
    "TurnState": agentlib.TurnState,
    "Event": agentlib.Event,
    "HistoryImportEntry": agentlib.HistoryImportEntry,
    "ApprovalAnswer": agentlib.ApprovalAnswer,
}


def union_members(union: Any) -> set[type]:
    return {typing.get_origin(arg) or arg for arg in typing.get_args(union)}


UNION_CASES = [
    pytest.param(cls, union, id=f"{cls.__name__}-{name}")
    for name, union in UNIONS.items()
    for cls in STRATEGIES
    if cls in union_members(union)
]


DATA_MODULES = (
    agentlib._data._content,
    agentlib._data._entries,
    agentlib._data._history_items,
    agentlib._data._callbacks,
    agentlib._data._records,
    agentlib._data._events,
)


def test_every_public_data_class_has_a_strategy() -> None:
    data_classes = {
        obj
        for module in DATA_MODULES
        for name in module.__all__
        if isinstance(obj := getattr(agentlib, name), type)
    }

    # Busy holds a live turn reference; Credentials are handed to tools, never sent anywhere.
    assert data_classes - set(STRATEGIES) == {Busy, Credentials}
    assert set(STRATEGIES) <= data_classes


def test_every_union_member_is_covered() -> None:
    covered = {(case.values[0], case.values[1]) for case in UNION_CASES}

    for union in UNIONS.values():
        for member in union_members(union):
            assert (member, union) in covered


# --- round trips --------------------------------------------------------------------------


@pytest.mark.parametrize("cls", list(STRATEGIES), ids=lambda cls: cls.__name__)
@FAST
@given(data=st.data())
def test_json_round_trip_through_the_class_is_unchanged(cls: type, data: st.DataObject) -> None:
    value = data.draw(STRATEGIES[cls])

    assert json_roundtrip(value, type(value)) == value


@pytest.mark.parametrize(("cls", "union"), UNION_CASES)
@FAST
@given(data=st.data())
def test_json_round_trip_through_the_union_is_unchanged(
    cls: type, union: Any, data: st.DataObject
) -> None:
    value = data.draw(STRATEGIES[cls])

    assert json_roundtrip(value, union) == value


@pytest.mark.parametrize("cls", list(STRATEGIES), ids=lambda cls: cls.__name__)
@FASTER
@given(data=st.data())
def test_unstructure_gives_json_ready_data(cls: type, data: st.DataObject) -> None:
    unstructured = agentlib.unstructure(data.draw(STRATEGIES[cls]))

    assert json.loads(json.dumps(unstructured, allow_nan=False)) == unstructured


TAGGED = [
    cls
    for cls in STRATEGIES
    if isinstance(getattr(cls, "type", None), str) and cls is not UnknownContentBlock
]


@pytest.mark.parametrize("cls", TAGGED, ids=lambda cls: cls.__name__)
@FASTER
@given(data=st.data())
def test_tagged_class_unstructures_with_its_type_tag(cls: type, data: st.DataObject) -> None:
    assert agentlib.unstructure(data.draw(STRATEGIES[cls]))["type"] == cls.type


def test_busy_unstructures_to_its_turns_ids() -> None:
    turn = types.SimpleNamespace(session_id="s1", id="t1")

    assert agentlib.unstructure(Busy(turn=turn)) == {
        "type": "busy",
        "session_id": "s1",
        "turn_id": "t1",
    }


# --- unknown tags ---------------------------------------------------------------------------

#: For each lenient union: its Unknown class, and the envelope fields every member carries.
LENIENT = [
    pytest.param(
        agentlib.ContentBlock,
        UnknownContentBlock,
        {"type": "video", "uri": "https://example.com/v.mp4", "durationSeconds": 12},
        id="content-block",
    ),
    pytest.param(
        agentlib.Entry,
        UnknownEntry,
        {"type": "reasoning", "id": "e1", "turn_id": "t1", "text": "hmm", "summary": ["a"]},
        id="entry",
    ),
    pytest.param(
        agentlib.Callback,
        UnknownCallback,
        {
            "type": "payment",
            "id": "cb1",
            "session_id": "s1",
            "turn_id": "t1",
            "amount": {"value": 9800, "currency": "EUR"},
        },
        id="callback",
    ),
    pytest.param(
        agentlib.TurnState,
        UnknownRecord,
        {"type": "paused", "turn_id": "t1", "session_id": "s1", "cursor": "c9", "until": None},
        id="record",
    ),
    pytest.param(
        agentlib.Event,
        UnknownEvent,
        {"type": "usage", "id": "ev1", "session_id": "s1", "turn_id": None, "tokens": 31},
        id="event",
    ),
]


@pytest.mark.parametrize(("union", "unknown", "data"), LENIENT)
def test_unknown_tag_lands_in_the_unknown_class(union: Any, unknown: type, data: dict) -> None:
    assert type(agentlib.structure(data, union)) is unknown


@pytest.mark.parametrize(("union", "unknown", "data"), LENIENT)
def test_unknown_tag_unstructures_back_to_the_input(union: Any, unknown: type, data: dict) -> None:
    assert agentlib.unstructure(agentlib.structure(data, union)) == data


ENVELOPES = {
    "content-block": (agentlib.ContentBlock, UnknownContentBlock, (), KNOWN_BLOCK_TAGS),
    "entry": (agentlib.Entry, UnknownEntry, ("id", "turn_id"), KNOWN_ENTRY_TAGS),
    "callback": (
        agentlib.Callback,
        UnknownCallback,
        ("id", "session_id", "turn_id"),
        KNOWN_CALLBACK_TAGS,
    ),
    "record": (
        agentlib.TurnState,
        UnknownRecord,
        ("turn_id", "session_id", "cursor"),
        KNOWN_RECORD_TAGS,
    ),
    "event": (agentlib.Event, UnknownEvent, ("id", "session_id", "turn_id"), KNOWN_EVENT_TAGS),
}


@pytest.mark.parametrize("family", list(ENVELOPES))
@FAST
@given(data=st.data())
def test_any_unknown_tag_survives_a_json_round_trip(family: str, data: st.DataObject) -> None:
    union, unknown, envelope, known = ENVELOPES[family]
    payload = {"type": data.draw(tags(known | {"unknown"}))}
    for name in envelope:
        payload[name] = data.draw(optional_ids if name in ("turn_id", "cursor") else ids)
    payload.update(data.draw(raw_dicts(frozenset({"type", *envelope}))))

    value = agentlib.structure(json.loads(json.dumps(payload)), union)

    assert type(value) is unknown
    assert agentlib.unstructure(value) == payload


@pytest.mark.parametrize(
    ("union", "data"),
    [
        pytest.param(agentlib.HistoryImportEntry, {"type": "banana"}, id="history-item"),
        pytest.param(agentlib.HistoryImportEntry, {"type": "unknown"}, id="history-item-unknown"),
        pytest.param(agentlib.ApprovalAnswer, {"type": "maybe"}, id="approval-answer"),
        pytest.param(agentlib.ApprovalAnswer, {"type": "keep_open"}, id="approval-keep-open"),
        pytest.param(
            agentlib.ApprovalAnswer, {"type": "sign_in", "credentials": {}}, id="approval-sign-in"
        ),
    ],
)
def test_unknown_tag_on_an_input_union_raises_validation_error(union: Any, data: dict) -> None:
    with pytest.raises(agentlib.ValidationError, match="unknown type"):
        agentlib.structure(data, union)


# --- values a constructor accepts must round-trip too -----------------------------------------


def refused_or_round_trips(build: typing.Callable[[], object], cls: object) -> None:
    """A value the class accepts comes back equal; or the class refuses to build it."""
    try:
        value = build()
    except ValueError:
        return
    assert json_roundtrip(value, cls) == value


@pytest.mark.parametrize(
    ("build", "cls"),
    [
        pytest.param(
            lambda: UnknownContentBlock(original_type="video", raw={"type": "map"}),
            agentlib.ContentBlock,
            id="content-block-raw-type",
        ),
        pytest.param(
            lambda: UnknownEntry(id="e1", entry_type="reasoning", raw={"id": "e2"}),
            agentlib.Entry,
            id="entry-raw-id",
        ),
        pytest.param(
            lambda: UnknownEntry(id="e1", entry_type="reasoning", raw={"turnId": "t2"}),
            agentlib.Entry,
            id="entry-raw-camel-turn-id",
        ),
        pytest.param(
            lambda: UnknownCallback(
                id="c1", session_id="s1", turn_id="t1", callback_type="pay", raw={"sessionId": "x"}
            ),
            agentlib.Callback,
            id="callback-raw-camel-session-id",
        ),
        pytest.param(
            lambda: UnknownRecord(
                turn_id="t1", session_id="s1", record_type="paused", raw={"cursor": "c2"}
            ),
            agentlib.TurnState,
            id="record-raw-cursor",
        ),
        pytest.param(
            lambda: UnknownEvent(id="v1", session_id="s1", event_type="usage", raw={"type": "x"}),
            agentlib.Event,
            id="event-raw-type",
        ),
    ],
)
def test_unknown_raw_fields_never_replace_the_tag_or_envelope(
    build: typing.Callable[[], object], cls: object
) -> None:
    refused_or_round_trips(build, cls)


@pytest.mark.parametrize(
    ("build", "cls"),
    [
        pytest.param(
            lambda: UnknownEntry(id="e1", entry_type="tool_call"), agentlib.Entry, id="entry"
        ),
        pytest.param(
            lambda: UnknownCallback(
                id="c1", session_id="s1", turn_id="t1", callback_type="sign_in"
            ),
            agentlib.Callback,
            id="callback",
        ),
        pytest.param(
            lambda: UnknownRecord(turn_id="t1", session_id="s1", record_type="failed"),
            agentlib.TurnState,
            id="record",
        ),
        pytest.param(
            lambda: UnknownEvent(id="v1", session_id="s1", event_type="entry_delta"),
            agentlib.Event,
            id="event",
        ),
    ],
)
def test_unknown_class_with_a_known_tag_is_refused_or_round_trips(
    build: typing.Callable[[], object], cls: object
) -> None:
    refused_or_round_trips(build, cls)


def test_message_entry_with_role_context_is_refused_or_round_trips() -> None:
    refused_or_round_trips(lambda: MessageEntry(id="e1", role="context"), agentlib.Entry)


def test_json_array_given_as_a_tuple_is_refused_or_round_trips() -> None:
    refused_or_round_trips(
        lambda: ToolCallEntry(id="e1", name="add", tool_call_id="c1", arguments={"xs": (1, 2)}),
        ToolCallEntry,
    )


# --- the converter's conventions -----------------------------------------------------------


def test_structure_takes_camel_case_keys() -> None:
    data = {"type": "tool_result", "id": "e1", "turnId": "t1", "toolCallId": "c1", "isError": True}

    entry = agentlib.structure(data, agentlib.Entry)

    assert entry == ToolResultEntry(id="e1", turn_id="t1", tool_call_id="c1", is_error=True)


def test_structure_of_a_class_refuses_another_classes_tag() -> None:
    with pytest.raises(agentlib.ValidationError, match="type must be 'deny'"):
        agentlib.structure({"type": "allow"}, DenyApproval)


def test_structure_of_a_class_takes_data_without_a_type() -> None:
    assert agentlib.structure({"reason": "no"}, DenyApproval) == DenyApproval(reason="no")


def test_structure_does_not_coerce_a_number_to_a_string() -> None:
    with pytest.raises(agentlib.ValidationError, match="expected a string, got int"):
        agentlib.structure({"type": "text", "text": 3}, agentlib.ContentBlock)


def test_structure_does_not_coerce_a_string_to_a_list() -> None:
    with pytest.raises(agentlib.ValidationError, match="expected a list, got str"):
        agentlib.structure(
            {"type": "sign_in", "id": "c", "session_id": "s", "turn_id": "t", "sources": "notion"},
            agentlib.Callback,
        )
