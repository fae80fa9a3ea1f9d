"""History entries: the messages, tool calls and tool results of a session, in order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Union

import attrs

from ._content import ContentBlock, _to_tuple, text_of
from ._json import (
    EMPTY_OBJECT,
    InvalidValue,
    as_json,
    check_json_object,
    json_field,
    known_tag_refused,
    raw_field,
)
from ._usage import Usage

__all__ = [
    "ContextMessage",
    "Entry",
    "MessageEntry",
    "ToolCallEntry",
    "ToolResultEntry",
    "UnknownEntry",
]


@attrs.frozen(kw_only=True)
class MessageEntry:
    """A message from the user, the model or the system, or a context message.

    Attributes:
        id: The entry's id.
        turn_id: The turn the entry belongs to; None for imported history.
        role: ``"user"``, ``"assistant"``, ``"system"`` or ``"context"``.
        content: The message's content blocks.
        usage: For a model's message, the tokens its reply took, if the model said.
    """

    type: ClassVar[str] = "message"
    __match_args__ = ("role", "content")

    id: str
    turn_id: str | None = None
    role: Literal["user", "assistant", "system", "context"] = attrs.field()
    content: tuple[ContentBlock, ...] = attrs.field(default=(), converter=_to_tuple)
    usage: Usage | None = None

    @role.validator
    def _check_role(self, attribute: attrs.Attribute[Any], value: str) -> None:
        if value == "context" and not isinstance(self, ContextMessage):
            raise InvalidValue("a context message is a ContextMessage(kind=..., source=...)")

    @property
    def text(self) -> str:
        """The message's text blocks, joined."""
        return text_of(self.content)


def _check_context_role(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value != "context":
        raise InvalidValue("a ContextMessage always has role 'context'")


@attrs.frozen(kw_only=True)
class ContextMessage(MessageEntry):
    """A context message the model received with a turn's input (a ``MessageEntry``).

    Attributes:
        kind: ``"input"`` for context sent with a message, ``"capability_source"`` for context
            the session added about a tool source.
        source: That tool source, e.g. ``"notion"``; None for context sent with a message.
    """

    role: Literal["context"] = attrs.field(default="context", validator=_check_context_role)
    kind: Literal["input", "capability_source"] = "input"
    source: str | None = None


@attrs.frozen(kw_only=True)
class ToolCallEntry:
    """A tool call made by the model.

    Attributes:
        id: The entry's id.
        turn_id: The turn the entry belongs to; None for imported history.
        name: The tool's full id, e.g. ``"add"``, ``"client.get_alert"``, ``"notion.search"``.
        arguments: The call's arguments as the history shows them (after any hook's rewrite).
        tool_call_id: The call's id; its result carries the same one.
        tool_kind: Where the tool came from: ``"local"``, ``"client"``, ``"mcp"``...
        usage: The tokens the model's reply took, on the first call of a reply without
            text (a reply's text carries it otherwise), if the model said.
    """

    type: ClassVar[str] = "tool_call"
    __match_args__ = ("name", "arguments")

    id: str
    turn_id: str | None = None
    name: str
    arguments: Any = json_field()
    tool_call_id: str
    tool_kind: str = "local"
    usage: Usage | None = None


@attrs.frozen(kw_only=True)
class ToolResultEntry:
    """The result of a tool call.

    Attributes:
        id: The entry's id.
        turn_id: The turn the entry belongs to; None for imported history.
        name: The tool's full id, or None when it is not known.
        content: The result as content blocks (what the model reads).
        structured_content: The result as a JSON value, when the tool returned one.
        is_error: True when the call failed and ``content`` describes the error.
        tool_call_id: The id of the call this result answers.
        annotations: Metadata kept with the result; the model does not see it.
    """

    type: ClassVar[str] = "tool_result"
    __match_args__ = ("name", "content", "structured_content", "is_error")

    id: str
    turn_id: str | None = None
    name: str | None = None
    content: tuple[ContentBlock, ...] = attrs.field(default=(), converter=_to_tuple)
    structured_content: Any = json_field()
    is_error: bool = False
    tool_call_id: str
    annotations: Mapping[str, Any] = attrs.field(
        default=EMPTY_OBJECT, converter=as_json, validator=check_json_object
    )

    @property
    def text(self) -> str:
        """The result's text blocks, joined."""
        return text_of(self.content)


@attrs.frozen(kw_only=True)
class UnknownEntry:
    """An entry of a type this version of agentlib has no class for, such as reasoning.

    Attributes:
        id: The entry's id.
        turn_id: The turn the entry belongs to; None for imported history.
        entry_type: The entry's type as received, e.g. ``"reasoning"`` or ``"checkpoint"``.
        raw: Its other fields as received (all but type, ids and cursor); re-emitted unchanged.
    """

    __match_args__ = ("entry_type",)

    id: str
    turn_id: str | None = None
    entry_type: str = attrs.field(validator=known_tag_refused(lambda: Entry, "entry"))
    raw: Mapping[str, Any] = raw_field("id", "turn_id")


Entry = Union[MessageEntry, ContextMessage, ToolCallEntry, ToolResultEntry, UnknownEntry]
"""An entry of a session's history: match it by class (``ContextMessage`` before
``MessageEntry``, which it subclasses)."""
