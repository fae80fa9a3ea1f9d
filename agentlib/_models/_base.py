"""The model protocol: what the engine sends a model, and what it gets back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from .._data._content import ContentBlock, _to_tuple
from .._data._entries import Entry
from .._data._json import TOO_DEEP, nesting_problem, unchecked
from .._data._usage import Usage

__all__ = [
    "Model",
    "ModelReply",
    "ModelRequest",
    "TextSink",
    "ToolCallRequest",
    "ToolSchema",
    "check_for_model",
]

#: Receives streamed text as it arrives.
TextSink = Callable[[str], Awaitable[None]]


@unchecked
@attrs.frozen(kw_only=True)
class ToolSchema:
    """A tool as the model sees it: the ``function`` object of a chat-completions request.

    Attributes:
        name: The tool's full id.
        description: What the tool does.
        parameters: The JSON schema of its arguments (an ``"object"`` schema).
    """

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(factory=dict)


@unchecked
@attrs.frozen(kw_only=True)
class ModelRequest:
    """What the engine asks a model for: the next reply of the conversation.

    Attributes:
        instructions: The agent's instructions (the system prompt).
        entries: The session's history so far, oldest first.
        tools: The tools the model may call.
        output_schema: The JSON schema the final answer must match, or None for free text.
        session_id: The session asking.
        turn_id: The turn asking.
        step: The model step of the turn this request is for, counting from 1; a reply
            with tool calls is followed by the next step, which sees their results.
    """

    instructions: str = ""
    entries: Sequence[Entry] = ()
    tools: tuple[ToolSchema, ...] = attrs.field(default=(), converter=_to_tuple)
    output_schema: Mapping[str, Any] | None = None
    session_id: str = ""
    turn_id: str = ""
    step: int = attrs.field(
        default=1, validator=[attrs.validators.instance_of(int), attrs.validators.ge(1)]
    )


def _arguments_repr(arguments: Any) -> str:
    # A repr recurses as deep as the value goes.
    if nesting_problem(arguments) is not None:
        return f"<{type(arguments).__name__} {TOO_DEEP}>"
    return repr(arguments)


@unchecked
@attrs.frozen(kw_only=True)
class ToolCallRequest:
    """A tool call the model asks for.

    Arguments that are not a JSON object are not refused here: the engine tells the model
    what is wrong with them, in the call's error result, and the turn goes on.

    Attributes:
        name: The tool's full id.
        arguments: The arguments, a JSON object. A model that received text it could not
            read as JSON passes the text (a ``str``): the model is then told why.
        id: The call's id; None lets the engine make one.
    """

    __match_args__ = ("name", "arguments")
    name: str
    arguments: Any = attrs.field(factory=dict, repr=_arguments_repr)
    id: str | None = None


@unchecked
@attrs.frozen(kw_only=True)
class ModelReply:
    """A model's reply: text, tool calls, or both.

    A reply with no tool call ends the turn, its text being the answer.

    Attributes:
        text: The assistant's text, or None.
        tool_calls: The tool calls to run, in order.
        usage: The tokens the reply took, if the model says.
    """

    text: str | None = None
    tool_calls: tuple[ToolCallRequest, ...] = attrs.field(default=(), converter=_to_tuple)
    usage: Usage | None = None


@runtime_checkable
class Model(Protocol):
    """What the engine needs of a model.

    Implement ``complete``; call ``on_text`` with each piece of streamed text, if you stream.
    Raise :class:`agentlib.ModelError` for a failure the turn should report.

    A model may also define ``check_content(blocks)``, which raises
    :class:`agentlib.ValidationError` for content blocks it cannot take: agentlib calls it
    with a message's blocks before the message joins a session's history (a message the
    model cannot read would fail every later turn of the session).
    """

    async def complete(
        self, request: ModelRequest, *, on_text: TextSink | None = None
    ) -> ModelReply:
        """Return the model's next reply to ``request``."""
        ...


def check_for_model(model: object, blocks: Sequence[ContentBlock]) -> None:
    """Raise ``ValidationError`` if ``model`` cannot take ``blocks``, as its optional
    ``check_content`` method tells (a chat endpoint refuses some audio formats, say); a
    model without one takes every block."""
    check = getattr(model, "check_content", None)
    if check is not None:
        check(blocks)
