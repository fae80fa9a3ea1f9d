"""Malformed input: a ValidationError whose message says what and where, and leaks nothing."""

from __future__ import annotations

from typing import Any

import pytest

import agentlib
from agentlib import Credentials, SignInAnswer

SECRET = "sk-live-SECRET123"
#: A long base64 blob (about 12 KB), as an image or a file would carry.
BLOB = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ" * 280

HISTORY = "history"
BLOCK = agentlib.ContentBlock
ITEM = agentlib.HistoryImportEntry
APPROVAL = agentlib.ApprovalAnswer
SIGN_IN = agentlib.SignInAnswer

#: Words that betray a message written for the library, not for its user.
UNREADABLE = ("AttributeError", "KeyError", "TypeError", "Traceback", "<member", "<class", " at 0x")


def call(**fields: object) -> dict[str, object]:
    return {"type": "tool_call", "tool_call_id": "c1", "name": "get_alert", **fields}


def result(**fields: object) -> dict[str, object]:
    return {"type": "tool_result", "tool_call_id": "c1", **fields}


def message(role: str, *blocks: object) -> dict[str, object]:
    return {"type": "message", "role": role, "content": list(blocks)}


def text(**fields: object) -> dict[str, object]:
    return {"type": "text", "text": "hi", **fields}


CASES = [
    # --- content blocks, through structure(data, agentlib.ContentBlock) ---
    pytest.param(
        BLOCK, None, ["$", "expected an object with a 'type'", "got null"], id="block-null"
    ),
    pytest.param(BLOCK, "hello", ["$", "expected an object", "got str"], id="block-str"),
    pytest.param(
        BLOCK, {"text": "hi"}, ["$", "missing 'type'", "'text', 'image'"], id="block-no-type"
    ),
    pytest.param(BLOCK, {"type": 5}, ["$", "'type' must be a string"], id="block-type-int"),
    pytest.param(BLOCK, text(text=3), ["$.text", "expected a string, got int"], id="text-int"),
    pytest.param(BLOCK, text(text=None), ["$.text", "expected a string, got null"], id="text-null"),
    pytest.param(BLOCK, {"type": "image"}, ["$.uri", "required field missing"], id="image-no-uri"),
    pytest.param(
        BLOCK, {"type": "image", "uri": 3}, ["$.uri", "expected a string"], id="image-uri-int"
    ),
    pytest.param(
        BLOCK,
        {"type": "image", "uri": "u", "altText": 3},
        ["$.alt_text", "expected a string"],
        id="image-alt-text-int",
    ),
    pytest.param(
        BLOCK,
        {"type": "image", "uri": f"data:image/png;base64,{BLOB}", "media_type": ["image/png"]},
        ["$.media_type", "expected a string, got list"],
        id="image-blob-uri-bad-media-type",
    ),
    pytest.param(BLOCK, {"type": "audio"}, ["$.uri", "required field missing"], id="audio-no-uri"),
    pytest.param(
        BLOCK,
        {"type": "resource_link", "uri": "u", "size": -1},
        ["size", "0 or more"],
        id="link-negative-size",
    ),
    pytest.param(
        BLOCK,
        {"type": "resource_link", "uri": "u", "size": "12 KB"},
        ["$.size", "expected an integer"],
        id="link-size-str",
    ),
    pytest.param(
        BLOCK,
        {"type": "resource_link", "uri": "u", "size": 1.5},
        ["$.size", "expected an integer"],
        id="link-size-float",
    ),
    pytest.param(
        BLOCK,
        {"type": "resource_link", "uri": "u", "size": True},
        ["$.size", "expected an integer"],
        id="link-size-bool",
    ),
    pytest.param(
        BLOCK,
        {"type": "embedded_resource", "uri": "u"},
        ["exactly one of text and blob", "neither"],
        id="embedded-neither",
    ),
    pytest.param(
        BLOCK,
        {"type": "embedded_resource", "uri": "u", "text": "t", "blob": BLOB},
        ["exactly one of text and blob", "both"],
        id="embedded-both-with-blob",
    ),
    pytest.param(
        BLOCK,
        {"type": "embedded_resource", "uri": "u", "blob": BLOB + "!*"},
        ["blob must be base64"],
        id="embedded-bad-long-blob",
    ),
    pytest.param(
        BLOCK,
        {"type": "embedded_resource", "uri": "u", "blob": 3},
        ["$.blob", "expected a string"],
        id="embedded-blob-int",
    ),
    pytest.param(
        BLOCK,
        text(annotations={"priority": 1.5}),
        ["priority must be between 0 and 1", "annotations"],
        id="priority-too-high",
    ),
    pytest.param(
        BLOCK,
        text(annotations={"priority": SECRET}),
        ["$.annotations.priority", "expected a number"],
        id="priority-secret",
    ),
    pytest.param(
        BLOCK,
        text(annotations={"priority": True}),
        ["$.annotations.priority", "expected a number"],
        id="priority-bool",
    ),
    pytest.param(
        BLOCK,
        text(annotations={"lastModified": "yesterday"}),
        ["last_modified", "ISO 8601"],
        id="last-modified-not-iso",
    ),
    pytest.param(
        BLOCK,
        text(annotations={"audience": "user"}),
        ["$.annotations.audience", "expected a list"],
        id="audience-str",
    ),
    pytest.param(
        BLOCK,
        text(annotations=["user"]),
        ["$.annotations", "expected an object, got list"],
        id="annotations-list",
    ),
    pytest.param(BLOCK, text(meta=["a"]), ["meta", "object"], id="meta-list"),
    pytest.param(BLOCK, text(meta=SECRET), ["meta", "object"], id="meta-secret-str"),
    pytest.param(BLOCK, text(meta={"x": float("nan")}), ["meta", "non-finite"], id="meta-nan"),
    pytest.param(
        agentlib.TextContentBlock,
        {"type": "image", "uri": "u"},
        ["type must be 'text'"],
        id="text-class-wrong-tag",
    ),
    pytest.param(
        agentlib.ContentAnnotations,
        {"priority": -1},
        ["priority must be between 0 and 1"],
        id="annotations-class-priority",
    ),
    # --- history items, through parse_history ---
    pytest.param(
        HISTORY, "not a list", ["expected a list of history items", "str"], id="history-str"
    ),
    pytest.param(HISTORY, [3], ["$[0]", "expected an object with a 'type'"], id="history-item-int"),
    pytest.param(HISTORY, [{"role": "user"}], ["$[0]", "missing 'type'"], id="history-no-type"),
    pytest.param(
        HISTORY,
        [message("user"), {"type": "banana"}],
        ["$[1]", "unknown type", "'reasoning'"],
        id="history-unknown-type",
    ),
    pytest.param(
        HISTORY,
        [{"type": SECRET}],
        ["$[0]", "unknown type", "'message'"],
        id="history-secret-as-type",
    ),
    pytest.param(
        HISTORY,
        [{"type": "message", "role": "bot"}],
        ["$[0].role", "'system', 'user', 'assistant'"],
        id="history-bad-role",
    ),
    pytest.param(
        HISTORY,
        [{"type": "message", "role": SECRET}],
        ["$[0].role", "must be one of"],
        id="history-secret-as-role",
    ),
    pytest.param(
        HISTORY,
        [{"type": "message", "role": "user", "content": "hello"}],
        ["$[0].content", "expected a list, got str"],
        id="history-content-str",
    ),
    pytest.param(
        HISTORY,
        [message("user", text(), {"type": "image"})],
        ["$[0].content[1].uri", "required"],
        id="history-nested-missing-uri",
    ),
    pytest.param(
        HISTORY,
        [message("system", {"type": "image", "uri": f"data:image/png;base64,{BLOB}"})],
        ["$[0]", "system message takes text blocks only", "content[0]"],
        id="history-system-image-blob",
    ),
    pytest.param(
        HISTORY,
        [message("assistant", {"type": "embedded_resource", "uri": "u", "blob": BLOB})],
        ["$[0]", "assistant message takes no embedded resource"],
        id="history-assistant-embedded-blob",
    ),
    pytest.param(
        HISTORY,
        [message("user"), {"type": "tool_call", "name": "n"}],
        ["$[1].tool_call_id", "required field missing"],
        id="history-call-no-id",
    ),
    pytest.param(
        HISTORY,
        [call(tool_call_id=3)],
        ["$[0].tool_call_id", "expected a string"],
        id="history-call-id-int",
    ),
    pytest.param(
        HISTORY,
        [call(tool_kind="alien")],
        ["$[0].tool_kind", "'local'", "'mcp'"],
        id="history-bad-tool-kind",
    ),
    pytest.param(
        HISTORY,
        [call(arguments={"token": SECRET, "n": float("inf")})],
        ["$[0]", "arguments must be JSON"],
        id="history-arguments-inf-with-secret",
    ),
    pytest.param(
        HISTORY,
        [call(), result(result={"token": SECRET}, error={"message": "failed"})],
        ["$[1]", "result or error, not both"],
        id="history-result-and-error",
    ),
    pytest.param(
        HISTORY,
        [call(), result(error={"code": 504, "token": SECRET})],
        ["$[1]", "'message' string"],
        id="history-error-without-message",
    ),
    pytest.param(
        HISTORY,
        [call(), result(error=SECRET)],
        ["$[1].error", "object"],
        id="history-error-secret-str",
    ),
    pytest.param(
        HISTORY,
        [call(), result(annotations=[BLOB])],
        ["$[1].annotations", "object"],
        id="history-annotations-list",
    ),
    pytest.param(
        HISTORY,
        [result(result="ok")],
        ["$[0].tool_call_id", "matches no tool call before"],
        id="history-result-without-call",
    ),
    pytest.param(
        HISTORY,
        [call(), call()],
        ["$[1].tool_call_id", "earlier tool call"],
        id="history-call-id-reused",
    ),
    pytest.param(
        HISTORY,
        [{"type": "reasoning"}],
        ["$[0].text", "required field missing"],
        id="history-reasoning-no-text",
    ),
    pytest.param(
        HISTORY,
        [{"type": "snapshot", "taskName": "t"}],
        ["$[0].snapshot_type", "required"],
        id="history-snapshot-no-type",
    ),
    pytest.param(
        HISTORY,
        [{"type": "message", "role": "bot"}, {"type": "reasoning", "text": 3}],
        ["$[0].role", "$[1].text"],
        id="history-two-problems",
    ),
    # --- history items, through structure ---
    pytest.param(
        ITEM, {"type": "banana"}, ["$", "unknown type", "'tool_result'"], id="item-unknown-type"
    ),
    pytest.param(
        ITEM, {"type": "message"}, ["$.role", "required field missing"], id="item-no-role"
    ),
    pytest.param(
        ITEM,
        {"type": "message", "role": "system", "content": [{"type": "audio", "uri": "u"}]},
        ["system message takes text blocks only"],
        id="item-system-audio",
    ),
    pytest.param(
        agentlib.HistoryImportToolResult,
        {"toolCallId": "c1", "result": 1, "error": {"message": "m"}},
        ["result or error, not both"],
        id="item-class-result-and-error",
    ),
    pytest.param(
        agentlib.HistoryImportReasoning,
        {"type": "message", "text": "t"},
        ["type must be 'reasoning'"],
        id="item-class-wrong-tag",
    ),
    # --- approval answers ---
    pytest.param(
        APPROVAL, True, ["$", "expected an object with a 'type'", "got bool"], id="approval-bool"
    ),
    pytest.param(APPROVAL, None, ["$", "got null"], id="approval-null"),
    pytest.param(APPROVAL, "allow", ["$", "got str"], id="approval-str"),
    pytest.param(
        APPROVAL,
        {"scope": "once"},
        ["$", "missing 'type'", "'allow', 'deny'"],
        id="approval-no-type",
    ),
    pytest.param(
        APPROVAL, {"type": "maybe"}, ["$", "unknown type", "'allow', 'deny'"], id="approval-unknown"
    ),
    pytest.param(APPROVAL, {"type": "keep_open"}, ["$", "unknown type"], id="approval-keep-open"),
    pytest.param(
        APPROVAL,
        {"type": "sign_in", "credentials": {"notion": SECRET}},
        ["$", "unknown type"],
        id="approval-sign-in-with-secret",
    ),
    pytest.param(APPROVAL, {"type": SECRET}, ["$", "unknown type"], id="approval-secret-as-type"),
    pytest.param(
        APPROVAL,
        {"type": "allow", "scope": "forever"},
        ["$.scope", "'once', 'session'"],
        id="approval-bad-scope",
    ),
    pytest.param(
        APPROVAL,
        {"type": "allow", "scope": SECRET},
        ["$.scope", "'once', 'session'"],
        id="approval-secret-as-scope",
    ),
    pytest.param(
        APPROVAL,
        {"type": "deny", "reason": 3},
        ["$.reason", "expected a string"],
        id="deny-reason-int",
    ),
    pytest.param(
        agentlib.DenyApproval, {"type": "allow"}, ["type must be 'deny'"], id="deny-class-wrong-tag"
    ),
    # --- sign-in answers ---
    pytest.param(SIGN_IN, "x", ["$", "expected an object, got str"], id="sign-in-str"),
    pytest.param(SIGN_IN, {}, ["$.credentials", "required field missing"], id="sign-in-empty"),
    pytest.param(
        SIGN_IN, {"credentials": None}, ["$.credentials", "object"], id="sign-in-null-credentials"
    ),
    pytest.param(
        SIGN_IN,
        {"credentials": SECRET},
        ["$.credentials", "object"],
        id="sign-in-secret-as-credentials",
    ),
    pytest.param(
        SIGN_IN,
        {"credentials": [SECRET]},
        ["$.credentials", "object"],
        id="sign-in-credentials-list",
    ),
    pytest.param(
        SIGN_IN,
        {"credentials": {"notion": 3}},
        ["$.credentials", "notion", "expected a string"],
        id="sign-in-credential-int",
    ),
    pytest.param(
        SIGN_IN,
        {"credentials": {"notion": [SECRET]}},
        ["$.credentials", "notion", "expected a string"],
        id="sign-in-credential-list-with-secret",
    ),
    pytest.param(
        SIGN_IN,
        {"credentials": {"notion": {"token": SECRET}}},
        ["notion", "expected a string"],
        id="sign-in-credential-dict-with-secret",
    ),
    pytest.param(
        SIGN_IN,
        {"credentials": {"": SECRET}},
        ["credentials", "tool source's name"],
        id="sign-in-empty-source-with-secret",
    ),
    pytest.param(
        SIGN_IN,
        {"type": "allow", "credentials": {"notion": SECRET}},
        ["type must be 'sign_in'"],
        id="sign-in-wrong-tag-with-secret",
    ),
]


def run(target: Any, data: object) -> object:
    if target == HISTORY:
        return agentlib.parse_history(data)  # type: ignore[arg-type]
    return agentlib.structure(data, target)


def test_there_are_at_least_45_cases() -> None:
    assert len(CASES) >= 45


@pytest.mark.parametrize(("target", "data", "fragments"), CASES)
def test_malformed_input_raises_a_readable_validation_error_that_leaks_nothing(
    target: Any, data: object, fragments: list[str]
) -> None:
    with pytest.raises(agentlib.ValidationError) as info:
        run(target, data)

    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, agentlib.SdkError)
    for fragment in fragments:
        assert fragment in message
    for word in UNREADABLE:
        assert word not in message
    assert SECRET not in message
    assert BLOB[:200] not in message
    assert len(message) < 1000


# --- credentials stay out of reprs ----------------------------------------------------------


def test_sign_in_answer_repr_hides_the_credentials() -> None:
    answer = SignInAnswer(credentials={"notion": "sk-secret"})

    assert "sk-secret" not in repr(answer)
    assert "notion" in repr(answer)


def test_sign_in_answer_str_hides_the_credentials() -> None:
    assert "sk-secret" not in str(SignInAnswer(credentials={"notion": "sk-secret"}))


def test_credentials_repr_hides_the_value() -> None:
    credentials = Credentials(source="notion", value="sk-secret")

    assert "sk-secret" not in repr(credentials)
    assert "notion" in repr(credentials)


def test_sign_in_answer_constructor_error_hides_the_credentials() -> None:
    with pytest.raises(ValueError, match="must be a string") as info:
        SignInAnswer(credentials={"notion": b"sk-secret"})  # type: ignore[dict-item]

    assert "sk-secret" not in str(info.value)
