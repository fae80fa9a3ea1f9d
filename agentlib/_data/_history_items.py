"""The items ``start_session(history=...)`` imports: a conversation held elsewhere."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Union

import attrs

from ._content import ContentBlock, EmbeddedResourceContentBlock, TextContentBlock, _to_tuple
from ._json import InvalidValue, as_json, check_json_object, check_text_fields, json_field

__all__ = [
    "HistoryImportEntry",
    "HistoryImportMessage",
    "HistoryImportReasoning",
    "HistoryImportSnapshot",
    "HistoryImportToolCall",
    "HistoryImportToolResult",
]


@attrs.frozen(kw_only=True)
class HistoryImportMessage:
    """A message of the conversation: what the user, the model or the system said.

    A system message takes text blocks only; an assistant message takes no embedded resource.

    Attributes:
        role: ``"system"``, ``"user"`` or ``"assistant"``.
        content: The message's content blocks.
    """

    type: ClassVar[str] = "message"
    role: Literal["system", "user", "assistant"]
    content: tuple[ContentBlock, ...] = attrs.field(default=(), converter=_to_tuple)

    def __attrs_post_init__(self) -> None:
        for index, block in enumerate(self.content):
            if self.role == "system" and not isinstance(block, TextContentBlock):
                raise InvalidValue(
                    f"a system message takes text blocks only; content[{index}] is {block.type!r}"
                )
            if self.role == "assistant" and isinstance(block, EmbeddedResourceContentBlock):
                raise InvalidValue(
                    f"an assistant message takes no embedded resource; content[{index}] is one"
                )


@attrs.frozen(kw_only=True)
class HistoryImportReasoning:
    """The model's reasoning.

    Attributes:
        text: The reasoning.
    """

    type: ClassVar[str] = "reasoning"
    text: str

    def __attrs_post_init__(self) -> None:
        check_text_fields(self)


@attrs.frozen(kw_only=True)
class HistoryImportToolCall:
    """A tool call the model made.

    Attributes:
        tool_call_id: The call's id; its result carries the same one.
        name: The tool the model called.
        arguments: The call's arguments as the history shows them.
        tool_kind: Where the tool came from, e.g. ``"local"`` or ``"mcp"``.
    """

    type: ClassVar[str] = "tool_call"
    tool_call_id: str
    name: str
    arguments: Any = json_field()
    tool_kind: Literal["builtin", "local", "mcp", "client", "plugin", "connector"] = "local"

    def __attrs_post_init__(self) -> None:
        check_text_fields(self)


def _check_error(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    check_json_object(instance, attribute, value)
    assert isinstance(value, Mapping)
    if not isinstance(value.get("message"), str):
        raise InvalidValue("error must have a 'message' string, e.g. {'message': 'timed out'}")


@attrs.frozen(kw_only=True)
class HistoryImportToolResult:
    """The result of a tool call: ``result`` for a call that worked, or ``error``, not both.

    Attributes:
        tool_call_id: The id of the call this result answers.
        name: The tool's name, or None (then the call's name is used).
        result: The tool's result, for a call that worked.
        error: For a failed call, its error, e.g. ``{"message": "..."}``.
        annotations: Metadata kept with the result.
    """

    type: ClassVar[str] = "tool_result"
    tool_call_id: str
    name: str | None = None
    result: Any = json_field()
    error: Mapping[str, Any] | None = attrs.field(
        default=None, converter=as_json, validator=_check_error
    )
    annotations: Mapping[str, Any] = attrs.field(
        factory=dict, converter=as_json, validator=check_json_object
    )

    def __attrs_post_init__(self) -> None:
        check_text_fields(self)
        if self.result is not None and self.error is not None:
            raise InvalidValue("a tool result has result or error, not both")


@attrs.frozen(kw_only=True)
class HistoryImportSnapshot:
    """Data kept in the history that the model never sees.

    The session shows it as an ``UnknownEntry`` of type ``"checkpoint"`` whose
    ``raw["message"]`` is ``"task_name:snapshot_type"`` and ``raw["details"]`` is ``value``.

    Attributes:
        task_name: The task the snapshot belongs to.
        snapshot_type: The kind of snapshot.
        value: The snapshot's data.
    """

    type: ClassVar[str] = "snapshot"
    task_name: str
    snapshot_type: str
    value: Any = json_field()

    def __attrs_post_init__(self) -> None:
        check_text_fields(self)


HistoryImportEntry = Union[
    HistoryImportMessage,
    HistoryImportReasoning,
    HistoryImportToolCall,
    HistoryImportToolResult,
    HistoryImportSnapshot,
]
"""An item of ``start_session(history=...)`` (a dict with the same fields and a ``type``
works too)."""
