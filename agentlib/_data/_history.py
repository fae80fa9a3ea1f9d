"""Turning imported history items into the entries a session starts from."""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import cattrs

from ._content import TextContentBlock
from ._convert import CONVERTER, unknown_fields, validation_error
from ._entries import Entry, MessageEntry, ToolCallEntry, ToolResultEntry, UnknownEntry
from ._errors import ValidationError
from ._history_items import (
    HistoryImportEntry,
    HistoryImportMessage,
    HistoryImportReasoning,
    HistoryImportSnapshot,
    HistoryImportToolCall,
    HistoryImportToolResult,
)
from ._json import InvalidValue

__all__ = ["parse_history"]

_ITEM_CLASSES = (
    HistoryImportMessage,
    HistoryImportReasoning,
    HistoryImportToolCall,
    HistoryImportToolResult,
    HistoryImportSnapshot,
)


#: Ids made from one read of the system's random source (one system call, where a call
#: each would let go of the interpreter's lock, and wait to take it back, for every id).
_ID_BATCH = 256
#: Ids made and not yet handed out; a deque, so that threads taking them at once each take
#: their own.
_ids: collections.deque[str] = collections.deque()
# A forked child must not hand out the ids its parent will.
os.register_at_fork(after_in_child=_ids.clear)


def new_id() -> str:
    """A fresh id for an entry, a turn, an event's session...: a random (version 4) UUID's
    32 hex digits, as ``uuid.uuid4().hex`` gives, made without building a ``UUID``."""
    try:
        return _ids.popleft()
    except IndexError:
        pass
    data = os.urandom(16 * _ID_BATCH)
    made = []
    for start in range(0, len(data), 16):
        one = bytearray(data[start : start + 16])
        one[6] = one[6] & 0x0F | 0x40  # version 4
        one[8] = one[8] & 0x3F | 0x80  # RFC 4122 variant
        made.append(one.hex())
    _ids.extend(made[1:])
    return made[0]


def parse_history(items: Iterable[HistoryImportEntry | Mapping[str, Any]]) -> list[Entry]:
    """Check imported history items and turn them into session entries.

    Each item is a ``HistoryImport*`` instance or a dict with the same fields (snake_case or
    camelCase) and a ``type``: ``"message"``, ``"reasoning"``, ``"tool_call"``,
    ``"tool_result"`` or ``"snapshot"``. Reasoning becomes an ``UnknownEntry`` of type
    ``"reasoning"``; a snapshot one of type ``"checkpoint"``.

    Args:
        items: The conversation, oldest first.

    Returns:
        The entries, oldest first, with fresh ids and no turn.

    Raises:
        ValidationError: An item is malformed, breaks a rule (result xor error; a system
            message holds text only; an assistant message no embedded resource) or answers a
            tool call that is not before it. The message names each item's index and field.
    """
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise ValidationError(
            f"invalid history: expected a list of history items, got {type(items).__name__}"
        )
    parsed: list[HistoryImportEntry] = []
    problems: list[str] = []
    for index, item in enumerate(items):
        if isinstance(item, _ITEM_CLASSES):
            parsed.append(item)
            continue
        try:
            parsed.append(CONVERTER.structure(item, HistoryImportEntry))  # type: ignore[arg-type]
        except (cattrs.BaseValidationError, InvalidValue) as exc:
            problems.extend(validation_error(exc, "history", path=f"$[{index}]").errors)
            continue
        unknown = unknown_fields(item, parsed[-1])  # as a request body's are refused
        if unknown:
            cls = type(parsed[-1])
            takes = ", ".join(repr(field.name) for field in attrs.fields(cls))
            problems.append(
                f"unknown field(s) {', '.join(map(repr, unknown))}: a {cls.type!r} item "
                f"takes {takes} @ $[{index}]"
            )
    if problems:
        raise ValidationError("invalid history: " + "; ".join(problems), tuple(problems))
    return _to_entries(parsed)


def _to_entries(items: list[HistoryImportEntry]) -> list[Entry]:
    entries: list[Entry] = []
    calls: dict[str, str] = {}
    problems: list[str] = []
    for index, item in enumerate(items):
        if isinstance(item, HistoryImportMessage):
            entries.append(MessageEntry(id=new_id(), role=item.role, content=item.content))
        elif isinstance(item, HistoryImportReasoning):
            entries.append(
                UnknownEntry(id=new_id(), entry_type="reasoning", raw={"text": item.text})
            )
        elif isinstance(item, HistoryImportToolCall):
            if item.tool_call_id in calls:
                problems.append(
                    f"tool_call_id {item.tool_call_id!r} is used by an earlier tool call "
                    f"@ $[{index}].tool_call_id"
                )
            calls[item.tool_call_id] = item.name
            entries.append(
                ToolCallEntry(
                    id=new_id(),
                    name=item.name,
                    arguments=item.arguments,
                    tool_call_id=item.tool_call_id,
                    tool_kind=item.tool_kind,
                )
            )
        elif isinstance(item, HistoryImportToolResult):
            if item.tool_call_id not in calls:
                problems.append(
                    f"tool_call_id {item.tool_call_id!r} matches no tool call before this "
                    f"result; put the tool_call item first @ $[{index}].tool_call_id"
                )
            entries.append(_tool_result(item, calls.get(item.tool_call_id)))
        else:
            entries.append(
                UnknownEntry(
                    id=new_id(),
                    entry_type="checkpoint",
                    raw={
                        "message": f"{item.task_name}:{item.snapshot_type}",
                        "details": item.value,
                    },
                )
            )
    if problems:
        raise ValidationError("invalid history: " + "; ".join(problems), tuple(problems))
    return entries


def _tool_result(item: HistoryImportToolResult, call_name: str | None) -> ToolResultEntry:
    if item.error is not None:
        text, structured, is_error = str(item.error["message"]), None, True
    elif isinstance(item.result, str):
        text, structured, is_error = item.result, None, False
    else:
        text, structured, is_error = json.dumps(item.result), item.result, False
    return ToolResultEntry(
        id=new_id(),
        name=item.name if item.name is not None else call_name,
        content=(TextContentBlock(text=text),),
        structured_content=structured,
        is_error=is_error,
        tool_call_id=item.tool_call_id,
        annotations=item.annotations,
    )
