"""Malformed input: a ValidationError whose message says what and where, and leaks nothing."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import pytest
import trio
from _support import Repo

import agentlib
from agentlib import (
    AllowApproval,
    Credentials,
    Depends,
    KeepCallbackOpen,
    ModelReply,
    ScriptedModel,
    SessionInput,
    SignInAnswer,
    ToolCallRequest,
)

# Each test runs on a local runtime and on agents served over HTTP (conftest's transport).
pytestmark = pytest.mark.usefixtures("transport")

SECRET = "sk-live-SECRET123"
#: A long base64 blob (about 12 KB), as an image or a file would carry.
BLOB = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ" * 280

HISTORY = "history"
BLOCK = agentlib.ContentBlock
ITEM = agentlib.HistoryImportEntry
APPROVAL = agentlib.ApprovalAnswer
SIGN_IN = agentlib.SignInAnswer
#: ``SignInAnswer(credentials=data)``.
NEW_SIGN_IN = "SignInAnswer(credentials=...)"
#: ``agent.start_session(inputs=data)``.
INPUTS = "start_session(inputs=...)"
#: ``turn.answer(data, AllowApproval())`` for an open approval.
ANSWER_ID = "turn.answer(callback_id, ...)"
#: ``turn.answer(callback.id, data)`` for an open approval of a tool, of a hook, a sign-in.
ANSWER_APPROVAL = "turn.answer(<tool approval>, ...)"
ANSWER_HOOK_APPROVAL = "turn.answer(<hook approval>, ...)"
ANSWER_SIGN_IN = "turn.answer(<sign-in>, ...)"

#: What these inputs raise instead of a ValidationError.
RAISES: dict[Any, type[Exception]] = {
    ANSWER_ID: ValueError,
    ANSWER_APPROVAL: agentlib.SdkError,
    ANSWER_HOOK_APPROVAL: agentlib.SdkError,
    ANSWER_SIGN_IN: agentlib.SdkError,
}

#: Words that betray a message written for the library, not for its user.
UNREADABLE = ("AttributeError", "KeyError", "TypeError", "Traceback", "<member", "<class", " at 0x")


def deep(levels: int = 2_000) -> object:
    """Arrays ``levels`` deep around the secret: past the nesting limit of 100."""
    value: object = SECRET
    for _ in range(levels):
        value = [value]
    return value


def call(**fields: object) -> dict[str, object]:
    return {"type": "tool_call", "tool_call_id": "c1", "name": "get_alert", **fields}


def result(**fields: object) -> dict[str, object]:
    return {"type": "tool_result", "tool_call_id": "c1", **fields}


def message(role: str, *blocks: object) -> dict[str, object]:
    return {"type": "message", "role": role, "content": list(blocks)}


def text(**fields: object) -> dict[str, object]:
    return {"type": "text", "text": "hi", **fields}


class Tagged(SessionInput):
    input_id = "tagged"
    tags: dict[str, Any]


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
        BLOCK,
        text(meta={"x": deep()}),
        ["meta is nested deeper than the limit of 100", "@ $.meta.x[0][0][0]", "..."],
        id="meta-too-deep",
    ),
    pytest.param(
        BLOCK,
        {"type": "video", "frames": deep()},
        ["nested deeper than the limit of 100", "@ $.frames[0][0]", "..."],
        id="unknown-block-too-deep",
    ),
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
        [call(arguments={"token": deep()})],
        ["arguments is nested deeper than the limit of 100", "@ $[0].arguments.token[0]"],
        id="history-arguments-too-deep",
    ),
    pytest.param(
        HISTORY,
        [message("user", text(meta={"x": deep()}))],
        ["meta is nested deeper than the limit of 100", "@ $[0].content[0].meta.x[0]"],
        id="history-block-meta-too-deep",
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
    # --- lists and sets, through structure(data, list[...]) ---
    pytest.param(list[int], None, ["$", "expected a list, got null"], id="list-null"),
    pytest.param(list[str], SECRET, ["$", "expected a list, got str"], id="list-str-secret"),
    pytest.param(list[int], {"a": 1}, ["$", "expected a list, got dict"], id="list-dict"),
    pytest.param(set[Any], [[SECRET]], ["$", "items of a set must be"], id="set-of-lists"),
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
    # --- sign-in answers, through the constructor ---
    pytest.param(
        NEW_SIGN_IN,
        {"notion": 3},
        ["credential for 'notion'", "must be a string", "int"],
        id="new-sign-in-credential-int",
    ),
    pytest.param(
        NEW_SIGN_IN,
        {"notion": None},
        ["credential for 'notion'", "must be a string", "NoneType"],
        id="new-sign-in-credential-none",
    ),
    pytest.param(
        NEW_SIGN_IN,
        {"notion": SECRET.encode()},
        ["credential for 'notion'", "must be a string", "bytes"],
        id="new-sign-in-credential-bytes-secret",
    ),
    pytest.param(
        NEW_SIGN_IN,
        {"notion": "ok", "github": [SECRET]},
        ["credential for 'github'", "must be a string", "list"],
        id="new-sign-in-second-credential-list-secret",
    ),
    pytest.param(
        NEW_SIGN_IN,
        {"notion": {"token": SECRET}},
        ["credential for 'notion'", "must be a string", "dict"],
        id="new-sign-in-credential-dict-secret",
    ),
    pytest.param(NEW_SIGN_IN, SECRET, ["credentials must be a dict", "str"], id="new-sign-in-str"),
    pytest.param(
        NEW_SIGN_IN, {3: SECRET}, ["tool source's name"], id="new-sign-in-int-source-secret"
    ),
    pytest.param(
        SIGN_IN,
        {"credentials": {"notion": None}},
        ["$.credentials", "notion", "expected a string"],
        id="sign-in-credential-null",
    ),
    pytest.param(
        SIGN_IN,
        {"credentials": {"notion": True}},
        ["$.credentials", "notion", "expected a string"],
        id="sign-in-credential-bool",
    ),
    pytest.param(
        SIGN_IN,
        {"credentials": {"notion": 1.5}},
        ["$.credentials", "notion", "expected a string"],
        id="sign-in-credential-float",
    ),
    # --- session inputs, through agent.start_session(inputs=...) ---
    pytest.param(
        INPUTS,
        [{"name": SECRET}],
        ["invalid inputs", "dict is not a SessionInput", "$[0]", "subclass agentlib.SessionInput"],
        id="inputs-dict-item-secret",
    ),
    pytest.param(
        INPUTS,
        [Repo(name="a"), SECRET],
        ["invalid inputs", "str is not a SessionInput", "$[1]"],
        id="inputs-str-item-secret",
    ),
    pytest.param(
        INPUTS,
        [Repo(name=SECRET), Repo(name=SECRET)],
        ["two inputs have input_id 'repo'", "$[1]", "one value per input"],
        id="inputs-duplicate-id-secret",
    ),
    pytest.param(
        INPUTS, SECRET, ["inputs must be a list of SessionInput values", "str"], id="inputs-str"
    ),
    pytest.param(INPUTS, None, ["inputs must be a list", "NoneType"], id="inputs-none"),
    pytest.param(
        INPUTS,
        {"repo": Repo(name=SECRET)},
        ["inputs must be a list", "dict"],
        id="inputs-dict-secret",
    ),
    pytest.param(
        INPUTS,
        Repo(name=SECRET),
        ["inputs must be a list", "Repo"],
        id="inputs-one-input-not-in-a-list",
    ),
    pytest.param(
        INPUTS,
        [Tagged(tags={"note": SECRET, "n": float("nan")})],
        ["invalid inputs", "non-finite", "$[0]", "tagged"],
        id="inputs-nan-beside-secret",
    ),
    pytest.param(
        INPUTS,
        [Tagged(tags={SECRET: float("nan")})],
        ["invalid inputs", "non-finite", "$[0]", "tagged"],
        id="inputs-nan-under-secret-key",
    ),
    pytest.param(
        INPUTS,
        [Tagged(tags={SECRET: deep()})],
        ["invalid inputs", "field 'tags' of input 'tagged' is nested deeper", "$[0]"],
        id="inputs-too-deep-under-secret-key",
    ),
    pytest.param(
        INPUTS,
        [Tagged(tags={"blob": SECRET.encode()})],
        ["invalid inputs", "bytes", "not JSON", "$[0]"],
        id="inputs-bytes-secret",
    ),
    # --- turn.answer: the callback id ---
    pytest.param(
        ANSWER_ID,
        "not-a-uuid",
        ["callback_id", "UUID", "Blocked.callbacks"],
        id="answer-id-not-uuid",
    ),
    pytest.param(ANSWER_ID, SECRET, ["callback_id", "UUID"], id="answer-id-secret"),
    pytest.param(ANSWER_ID, "", ["callback_id", "UUID"], id="answer-id-empty"),
    pytest.param(ANSWER_ID, 42, ["callback_id must be"], id="answer-id-int"),
    pytest.param(ANSWER_ID, None, ["callback_id must be"], id="answer-id-none"),
    pytest.param(
        ANSWER_ID,
        uuid.UUID(int=1),
        ["callback_id must be", "UUID"],
        id="answer-id-uuid-object",
    ),
    # --- turn.answer: the answer ---
    pytest.param(
        ANSWER_APPROVAL,
        True,
        ["AllowApproval()", "DenyApproval(reason)", "bool"],
        id="answer-approval-true",
    ),
    pytest.param(ANSWER_APPROVAL, None, ["AllowApproval()", "NoneType"], id="answer-approval-none"),
    pytest.param(
        ANSWER_APPROVAL,
        {"type": "allow", "scope": "once"},
        ["AllowApproval()", "dict"],
        id="answer-approval-dict",
    ),
    pytest.param(ANSWER_APPROVAL, "allow", ["AllowApproval()", "str"], id="answer-approval-str"),
    pytest.param(
        ANSWER_APPROVAL,
        KeepCallbackOpen(),
        ["KeepCallbackOpen()", "never an answer"],
        id="answer-approval-keep-open",
    ),
    pytest.param(
        ANSWER_APPROVAL,
        SignInAnswer(credentials={"notion": SECRET}),
        ["AllowApproval()", "SignInAnswer"],
        id="answer-approval-sign-in-secret",
    ),
    pytest.param(
        ANSWER_HOOK_APPROVAL,
        AllowApproval(scope="session"),
        ["hook", 'scope="once"'],
        id="answer-hook-approval-for-the-session",
    ),
    pytest.param(
        ANSWER_HOOK_APPROVAL,
        KeepCallbackOpen(),
        ["KeepCallbackOpen()", "never an answer"],
        id="answer-hook-approval-keep-open",
    ),
    pytest.param(
        ANSWER_SIGN_IN,
        {"credentials": {"notion": SECRET}},
        ["SignInAnswer(credentials=", "dict"],
        id="answer-sign-in-dict-secret",
    ),
    pytest.param(
        ANSWER_SIGN_IN, True, ["SignInAnswer(credentials=", "bool"], id="answer-sign-in-true"
    ),
    pytest.param(
        ANSWER_SIGN_IN,
        AllowApproval(),
        ["SignInAnswer(credentials=", "AllowApproval"],
        id="answer-sign-in-allow",
    ),
    pytest.param(
        ANSWER_SIGN_IN,
        SignInAnswer(credentials={"notion": SECRET, "github": SECRET}),
        ["every requested source", "not asked for: 'github'"],
        id="answer-sign-in-extra-source-secret",
    ),
    pytest.param(
        ANSWER_SIGN_IN,
        SignInAnswer(credentials={"github": SECRET}),
        ["every requested source", "no credential for 'notion'"],
        id="answer-sign-in-wrong-source-secret",
    ),
    pytest.param(
        ANSWER_SIGN_IN,
        KeepCallbackOpen(),
        ["KeepCallbackOpen()", "never an answer"],
        id="answer-sign-in-keep-open",
    ),
]


@agentlib.tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    return "deleted"


@agentlib.pre_tool_call
def ask(call: agentlib.ToolCallEntry) -> agentlib.RequestApproval:
    return agentlib.RequestApproval("check first")


def search(query: str, creds: Annotated[Credentials, Depends()]) -> str:
    """Search the notes."""
    return "found"


def calling(name: str, **arguments: Any) -> ScriptedModel:
    return ScriptedModel([ModelReply(tool_calls=[ToolCallRequest(name=name, arguments=arguments)])])


def lookup(query: str) -> str:
    """Look something up."""
    return "found"


#: An agent whose first turn blocks on a callback, for each kind of answer.
BLOCKING = {
    ANSWER_ID: agentlib.Agent("a", model=calling("delete", path="x"), tools=[delete]),
    ANSWER_APPROVAL: agentlib.Agent("a", model=calling("delete", path="x"), tools=[delete]),
    ANSWER_HOOK_APPROVAL: agentlib.Agent(
        "a", model=calling("lookup", query="q"), tools=[lookup], hooks=[ask]
    ),
    ANSWER_SIGN_IN: agentlib.Agent(
        "a",
        model=calling("notion.search", query="q"),
        tools=[agentlib.ToolSource(name="notion", tools=[search], requires_sign_in=True)],
    ),
}


async def answer_blocked_turn(target: str, data: object) -> object:
    """Answer the callback a new session's first turn blocks on; the answer, or the callback
    id for ANSWER_ID, is ``data``. A refused answer leaves the callback open."""
    async with agentlib.open_runtime():
        session = await BLOCKING[target].start_session()
        blocked = await session.run("go")
        assert isinstance(blocked, agentlib.Blocked)
        turn = session.turn(blocked.turn_id)
        callback_id = data if target == ANSWER_ID else blocked.callbacks[0].id
        answer = AllowApproval() if target == ANSWER_ID else data
        try:
            return await turn.answer(callback_id, answer)  # type: ignore[arg-type]
        except Exception as error:  # re-raised outside the runtime's nursery
            refused = error
        still = await turn.get()
        await session.cancel()
    assert isinstance(still, agentlib.Blocked), "a refused answer was sent"
    assert still.callbacks == blocked.callbacks, "a refused answer was sent"
    raise refused


async def start_with_inputs(inputs: object) -> object:
    """Start a session with ``inputs``; a refused start leaves the runtime without one."""
    agent = agentlib.Agent("a", model=ScriptedModel([]))
    async with agentlib.open_runtime() as runtime:
        try:
            return await agent.start_session(inputs=inputs)  # type: ignore[arg-type]
        except Exception as error:  # re-raised outside the runtime's nursery
            refused = error
        started = dict(runtime._sessions)
    assert started == {}, "a refused start started a session"
    raise refused


def run(target: Any, data: object) -> object:
    if target == HISTORY:
        return agentlib.parse_history(data)  # type: ignore[arg-type]
    if target == NEW_SIGN_IN:
        return SignInAnswer(credentials=data)  # type: ignore[arg-type]
    if target == INPUTS:
        return trio.run(start_with_inputs, data)
    if target in BLOCKING:
        return trio.run(answer_blocked_turn, target, data)
    return agentlib.structure(data, target)


def test_there_are_at_least_45_cases() -> None:
    assert len(CASES) >= 45


@pytest.mark.parametrize(("target", "data", "fragments"), CASES)
def test_malformed_input_raises_a_readable_validation_error_that_leaks_nothing(
    target: Any, data: object, fragments: list[str]
) -> None:
    expected = RAISES.get(target, agentlib.ValidationError)
    with pytest.raises(expected) as info:
        run(target, data)

    message = str(info.value)
    if expected is agentlib.ValidationError:
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


# --- text that no store can keep --------------------------------------------------------------

#: A lone surrogate, as ``json.loads`` makes of the escape "\ud800": UTF-8 cannot encode it.
LONE = "left \ud800 right"


def stored_rows(path: str) -> int:
    """How many sessions and events the SQLite file at ``path`` holds."""
    import sqlite3

    with sqlite3.connect(path) as connection:
        sessions = connection.execute("SELECT count(*) FROM sessions").fetchone()[0]
        events = connection.execute("SELECT count(*) FROM events").fetchone()[0]
    return int(sessions) + int(events)


async def test_a_message_with_a_lone_surrogate_is_refused_before_anything_is_written(
    tmp_path: Any,
) -> None:
    agent = agentlib.Agent("a", model=ScriptedModel(["fine"]))
    db = tmp_path / "s.db"
    async with agentlib.open_runtime(f"sqlite:///{db}"):
        session = await agent.start_session()
        with pytest.raises(agentlib.ValidationError, match="lone surrogate") as info:
            await session.run(LONE)
        with pytest.raises(agentlib.ValidationError, match=r"lone surrogate.*\$\[0\]\.text"):
            await session.run([{"type": "text", "text": LONE}])
        record = await session.run("still here")  # the session and its runtime go on
    assert isinstance(record, agentlib.Completed)
    assert "text" in str(info.value)
    assert LONE not in str(info.value)


@pytest.mark.parametrize("key", [LONE, "nul\x00key"], ids=["surrogate", "nul"])
async def test_an_idempotency_key_no_store_keeps_is_refused_naming_it(key: str) -> None:
    agent = agentlib.Agent("a", model=ScriptedModel(["fine"] * 3))
    async with agentlib.open_runtime():
        with pytest.raises(agentlib.ValidationError, match="invalid idempotency_key") as started:
            await agent.start_session(idempotency_key=key)
        session = await agent.start_session()
        with pytest.raises(agentlib.ValidationError, match="invalid idempotency_key") as run:
            await session.run("hi", idempotency_key=key)
        with pytest.raises(agentlib.ValidationError, match="invalid idempotency_key") as sent:
            await session.send_message("hi", idempotency_key=key)
        record = await session.run("hi", idempotency_key="a fine key")
    assert isinstance(record, agentlib.Completed)
    for error in (started, run, sent):
        assert key not in str(error.value)
        assert "printable text" in str(error.value)


async def test_a_session_input_with_a_lone_surrogate_is_refused_naming_its_field() -> None:
    agent = agentlib.Agent("a", model=ScriptedModel([]))
    async with agentlib.open_runtime():
        with pytest.raises(agentlib.ValidationError, match="lone surrogate") as info:
            await agent.start_session(inputs=[Repo(name=LONE)])
    assert "'name' of input 'repo'" in str(info.value)
    assert LONE not in str(info.value)


async def test_imported_history_with_a_lone_surrogate_is_refused_naming_the_item() -> None:
    agent = agentlib.Agent("a", model=ScriptedModel([]))
    history = [message("user", text()), message("assistant", text()), message("user", text())]
    history[2]["content"] = [text(text=LONE)]
    async with agentlib.open_runtime():
        with pytest.raises(agentlib.ValidationError, match="lone surrogate") as info:
            await agent.start_session(history=history)
        with pytest.raises(agentlib.ValidationError, match="lone surrogate"):
            await agent.start_session(history=[agentlib.HistoryImportReasoning(text=LONE)])
    assert "$[2].content[0].text" in str(info.value)


async def test_nul_in_a_message_an_input_and_history_is_stored_and_read_back_unchanged(
    store: Any,
) -> None:
    def echo(request: agentlib.ModelRequest) -> str:
        return "|".join(entry.text for entry in request.entries if entry.role == "user")

    agent = agentlib.Agent("a", model=agentlib.FunctionModel(echo))
    history = [message("user", text(text="old \x00 one"))]
    async with agentlib.open_runtime(store()):
        session = await agent.start_session(inputs=[Repo(name="a\x00b")], history=history)
        first = await session.run("nul \x00 inside")
        session_id = session.id
    async with agentlib.open_runtime(store()):  # read back from the store
        second = await agent.session(session_id).run("again")
    assert isinstance(first, agentlib.Completed)
    assert isinstance(second, agentlib.Completed)
    assert first.text == "old \x00 one|nul \x00 inside"
    assert second.text == "old \x00 one|nul \x00 inside|again"
