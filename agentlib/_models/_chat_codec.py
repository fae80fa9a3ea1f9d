"""The chat-completions wire format, without I/O: a request as the JSON body an endpoint
takes, and the JSON of its reply as a :class:`ModelReply`.

The session's entries become system, user, assistant and tool messages (a model step's calls
join its assistant message, and a call its turn left without a result gets one); content
blocks become text, ``image_url`` and ``input_audio`` parts; the agent's tools become
functions, under names the endpoint takes (:class:`ToolNames`); ``tool_choice`` and an output
type's ``response_format`` are added. A reply's text, tool calls (arguments as JSON text or as
an object) and usage are read back; a reply the token limit cut, or that the provider stopped
with an error, is a :class:`ModelError`. What one provider spells its own way is its
:class:`Dialect`.

Nothing here sends or receives: the transport hands this module the text it read, as httpx
keeps its models apart from its client and h11 keeps HTTP apart from any socket.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .._data._content import (
    AudioContentBlock,
    ContentBlock,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceLinkContentBlock,
    TextContentBlock,
)
from .._data._entries import ContextMessage, Entry, MessageEntry, ToolCallEntry, ToolResultEntry
from .._data._errors import ModelError, ValidationError
from .._data._json import NotJson, read_json, read_whole_text
from .._data._usage import Usage
from ._base import ModelReply, ModelRequest, ToolCallRequest, ToolSchema

if TYPE_CHECKING:
    from ._options import ChatSettings

__all__ = [
    "CallParts",
    "ChatCodec",
    "Dialect",
    "ToolNames",
    "error_details",
    "excerpt",
    "json_or_none",
    "scrub",
    "shown_url",
    "text_pieces",
    "usage_of",
]

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_-]")
_EXCERPT = 500  # characters of a body kept on ModelError
#: The ``input_audio`` formats of OpenAI's schema, by the media types (and their aliases in
#: use: Python's mimetypes says audio/x-wav) that name them.
_AUDIO_FORMATS = {
    **dict.fromkeys(
        ("audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave", "audio/x-pn-wav"), "wav"
    ),
    **dict.fromkeys(
        ("audio/mpeg", "audio/mp3", "audio/mpeg3", "audio/x-mpeg-3", "audio/x-mp3", "audio/x-mpeg"),
        "mp3",
    ),
}
#: Finish reasons of a reply the token limit cut: "length" (max_tokens, or the server's
#: context), and Mistral's "model_length" (the model's context window).
_CUT = ("length", "model_length")


def shown_url(url: str) -> str:
    """``url`` as messages and reprs show it: the password of its user info, if any, is
    ``***`` (``https://user:***@host/v1``)."""
    parts = urllib.parse.urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def scrub(text: str, key: str | None) -> str:
    """``text`` with the API key, wherever the endpoint echoed it, shown as ``***``."""
    return text.replace(key, "***") if key else text


def excerpt(text: str, key: str | None) -> str:
    """The start of a body, for :attr:`ModelError.body`: scrubbed before it is cut, so
    that no part of a key is left at the cut."""
    return scrub(text, key)[:_EXCERPT]


def _same(call_id: str) -> str:
    return call_id


@attrs.frozen(kw_only=True)
class Dialect:
    """What one provider's chat-completions endpoint spells its own way.

    Attributes:
        provider: Who answers, in messages (``"Mistral"``).
        required: How ``tool_choice="required"`` is sent.
        no_content: The content of an assistant message that holds calls only.
        names_results: Whether a tool message names its tool.
        call_id: A call's id as the endpoint takes it back in a history.
        audio_file_alone: Whether ``input_audio`` is the file alone, of any type (the
            provider reads its format from it), rather than OpenAI's data and format, which
            is wav or mp3.
        stream_options: More fields of a streamed request's body.
        context_hint: Where else the limit of a cut reply may be raised.
        endless_hint: Why a reply may run on to the limit (a model that never stops), said
            when ``max_tokens`` cut it.
    """

    provider: str
    required: str = "required"
    no_content: str | None = None
    names_results: bool = False
    call_id: Callable[[str], str] = _same
    audio_file_alone: bool = False
    stream_options: Mapping[str, Any] = attrs.field(factory=dict)
    context_hint: str | None = None
    endless_hint: str | None = None


class ToolNames:
    """Tool ids as the endpoint takes them (letters, digits, ``_`` and ``-``, at most 64):
    ``"notion.search"`` is sent as ``"notion_search"``, and read back as its id."""

    def __init__(self, tools: Iterable[ToolSchema]) -> None:
        self._wire: dict[str, str] = {}
        self._ids: dict[str, str] = {}
        for tool in tools:
            wire = base = _wire_name(tool.name)
            n = 1
            while wire in self._ids:
                n += 1
                wire = f"{base[: 64 - len(str(n)) - 1]}_{n}"
            self._wire[tool.name] = wire
            self._ids[wire] = tool.name

    def wire(self, name: str) -> str:
        known = self._wire.get(name)
        return known if known is not None else _wire_name(name)

    def id_of(self, wire: str) -> str:
        return self._ids.get(wire, wire)


def _wire_name(name: str) -> str:
    if _NAME.match(name):
        return name
    cleaned = _NOT_IN_NAME.sub("_", name) or "tool"
    if len(cleaned) > 64:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        cleaned = f"{cleaned[:55]}_{digest}"
    return cleaned


@attrs.define
class CallParts:
    """A tool call as it arrives: whole, or in fragments of a stream."""

    id: str | None = None
    name: str = ""
    arguments: str = ""
    whole: Any = None  # arguments given as a JSON object rather than text

    def add(self, raw: Mapping[str, Any]) -> None:
        if raw.get("id"):
            self.id = str(raw["id"])
        function = raw.get("function") or {}
        if function.get("name") and not self.name:
            self.name = str(function["name"])
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            self.arguments += arguments
        elif arguments is not None:
            self.whole = arguments

    def request(self, names: ToolNames) -> ToolCallRequest:
        arguments: Any = self.whole
        if arguments is None:
            try:
                arguments = read_json(self.arguments) if self.arguments.strip() else {}
            except NotJson:  # the engine tells the model why its text is not JSON
                arguments = self.arguments
        return ToolCallRequest(name=names.id_of(self.name), arguments=arguments, id=self.id)


@attrs.frozen
class ChatCodec:
    """Requests and replies of one model's endpoint, as JSON: ``settings`` are the model's
    (its name and the options that go in the body, read as they are now), ``dialect`` its
    provider's, and ``key`` the API key kept out of every message and excerpt."""

    settings: ChatSettings
    dialect: Dialect
    key: str | None = attrs.field(default=None, repr=False)

    # -- the request -----------------------------------------------------------------------

    def body(self, request: ModelRequest, names: ToolNames, *, stream: bool) -> dict[str, Any]:
        """The JSON body of ``request``, at the model step that ``request.step`` says.

        Raises:
            ModelError: ``tool_choice`` names no tool of the request, or the request holds
                audio in a format the endpoint does not take.
        """
        settings = self.settings
        body: dict[str, Any] = {
            "model": settings.model,
            "messages": self._messages(request, names),
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": names.wire(tool.name),
                        "description": tool.description,
                        "parameters": dict(tool.parameters),
                    },
                }
                for tool in request.tools
            ]
            choice = settings.tool_choice
            if choice is not None:
                sent = self._tool_choice(choice, names, request.tools)
                # A forcing choice sent again after the results would force another call,
                # and another: the model could never answer.
                forcing = choice not in ("auto", "none")
                if request.step == 1 or not forcing or not settings.reset_tool_choice:
                    body["tool_choice"] = sent
            if settings.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = settings.parallel_tool_calls
        if request.output_schema is not None:
            schema = dict(request.output_schema)
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": _schema_name(schema), "schema": schema},
            }
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        if settings.max_tokens is not None:
            body["max_tokens"] = settings.max_tokens
        if settings.stop is not None:
            body["stop"] = settings.stop if isinstance(settings.stop, str) else [*settings.stop]
        body["stream"] = stream
        if stream:
            body.update(self.dialect.stream_options)
        body.update(settings.extra_body)
        return body

    def _tool_choice(
        self, choice: str, names: ToolNames, tools: Sequence[ToolSchema]
    ) -> str | dict[str, Any]:
        if choice in ("auto", "none"):
            return choice
        if choice == "required":
            return self.dialect.required
        if choice not in {tool.name for tool in tools}:
            raise ModelError(
                f"tool_choice names {choice!r}, which is not a tool of this agent; name one "
                f'of {sorted(tool.name for tool in tools)}, or use "auto", "none" or "required"'
            )
        return {"type": "function", "function": {"name": names.wire(choice)}}

    def _messages(self, request: ModelRequest, names: ToolNames) -> list[dict[str, Any]]:
        """The chat messages of ``request``: the instructions, then the history.

        The tool calls of a model step join its assistant message (one without text if the
        step had none), and their results follow it as tool messages.
        """
        messages: list[dict[str, Any]] = []
        if request.instructions:
            messages.append({"role": "system", "content": request.instructions})
        unanswered: list[str] = []  # ids of the calls sent without a result so far
        for entry in request.entries:
            last = messages[-1] if messages else None
            if isinstance(entry, ToolCallEntry):
                if last is None or last["role"] != "assistant":
                    _close_calls(messages, unanswered)
                    last = {"role": "assistant", "content": self.dialect.no_content}
                    messages.append(last)
                call_id = self.dialect.call_id(entry.tool_call_id)
                last.setdefault("tool_calls", []).append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": names.wire(entry.name),
                            "arguments": _arguments_text(entry.arguments),
                        },
                    }
                )
                unanswered.append(call_id)
            elif isinstance(entry, ToolResultEntry):
                call_id = self.dialect.call_id(entry.tool_call_id)
                if call_id in unanswered:
                    unanswered.remove(call_id)
                messages.append(self._tool_message(entry, call_id, names))
            else:
                message = self._message(entry)
                if message is not None:
                    _close_calls(messages, unanswered)
                    messages.append(message)
        _close_calls(messages, unanswered)
        return messages

    def _tool_message(
        self, entry: ToolResultEntry, call_id: str, names: ToolNames
    ) -> dict[str, Any]:
        content = _result_text(entry.content)
        if not content and entry.structured_content is not None:
            content = json.dumps(entry.structured_content, ensure_ascii=False)
        message = {"role": "tool", "tool_call_id": call_id, "content": content}
        if self.dialect.names_results and entry.name is not None:
            message["name"] = names.wire(entry.name)
        return message

    def _message(self, entry: Entry) -> dict[str, Any] | None:
        if not isinstance(entry, MessageEntry):
            return None  # an entry of a later version: the model never saw it
        role = "system" if isinstance(entry, ContextMessage) else entry.role
        if role == "assistant":
            return {"role": "assistant", "content": _text_of(entry.content)}
        return {"role": role, "content": self._content(entry.content)}

    def _content(self, blocks: Sequence[ContentBlock]) -> str | list[dict[str, Any]]:
        parts = [part for block in blocks for part in self._parts(block)]
        if all(part["type"] == "text" for part in parts):
            return "".join(part["text"] for part in parts)
        return parts

    def _parts(self, block: ContentBlock) -> list[dict[str, Any]]:
        if isinstance(block, TextContentBlock):
            return [{"type": "text", "text": block.text}]
        if isinstance(block, ImageContentBlock):
            return [{"type": "image_url", "image_url": {"url": block.uri}}]
        if isinstance(block, AudioContentBlock):
            audio = _data_uri(block.uri)
            if audio is not None:
                return [self._audio_part(*audio)]
            return [{"type": "text", "text": f"[audio: {block.uri}]"}]
        if isinstance(block, EmbeddedResourceContentBlock):
            if block.text is not None:
                return [{"type": "text", "text": block.text}]
            if block.blob is not None and (block.media_type or "").startswith("image/"):
                uri = f"data:{block.media_type};base64,{block.blob}"
                return [{"type": "image_url", "image_url": {"url": uri}}]
            return [{"type": "text", "text": f"[resource: {block.uri}]"}]
        if isinstance(block, ResourceLinkContentBlock):
            label = block.title or block.name or block.uri
            return [{"type": "text", "text": f"[resource link: {label} <{block.uri}>]"}]
        return []  # a block of a later version

    def _audio_part(self, media_type: str, data: str) -> dict[str, Any]:
        if self.dialect.audio_file_alone:
            return {"type": "input_audio", "input_audio": data}
        refusal = self._audio_refusal(media_type)
        if refusal is not None:  # the server would refuse the whole request
            raise ModelError(refusal)
        audio_format = _AUDIO_FORMATS[_bare(media_type)]
        return {"type": "input_audio", "input_audio": {"data": data, "format": audio_format}}

    def _audio_refusal(self, media_type: str) -> str | None:
        """Why the endpoint cannot take audio of ``media_type``, or None if it can."""
        if self.dialect.audio_file_alone or _bare(media_type) in _AUDIO_FORMATS:
            return None
        return (
            f"{self.dialect.provider} takes audio as wav or mp3 only, and a message holds "
            f"{media_type}: convert the clip to WAV (audio/wav) or MP3 (audio/mpeg) "
            "before sending it"
        )

    def check_content(self, blocks: Sequence[ContentBlock]) -> None:
        """Refuse blocks the endpoint cannot take.

        Raises:
            ValidationError: A block is audio of a format the endpoint does not take; the
                message names its media type and where it is (``@ $[index]``).
        """
        problems = []
        for index, block in enumerate(blocks):
            audio = _data_uri(block.uri) if isinstance(block, AudioContentBlock) else None
            refusal = None if audio is None else self._audio_refusal(audio[0])
            if refusal is not None:
                problems.append(f"{refusal} @ $[{index}]")
        if problems:
            raise ValidationError("invalid message: " + "; ".join(problems), tuple(problems))

    # -- the reply -------------------------------------------------------------------------

    def read(self, status: int, text: str) -> Any:
        """The JSON of a whole reply's body.

        Raises:
            ModelError: The body is not JSON, or is nested too deeply to read.
        """
        try:
            return read_whole_text(text)
        except ValueError:
            problem = "that is not JSON"
        except RecursionError:  # the parser recurses once per level of the text
            problem = "nested too deeply to read"
        raise ModelError(
            f"{self.dialect.provider} answered with a body {problem}",
            status=status,
            body=excerpt(text, self.key),
        )

    def reply(self, data: Any, names: ToolNames) -> ModelReply:
        """The reply a whole answer's JSON holds.

        Raises:
            ModelError: It holds no choice with a message, or its reply was cut by the token
                limit or stopped with an error.
        """
        try:
            choice = data["choices"][0]
            message = choice["message"]
            if not isinstance(message, dict):
                raise TypeError(message)
        except (KeyError, IndexError, TypeError):
            raise ModelError(
                f"{self.dialect.provider} answered without a choice holding a message",
                status=200,
                body=excerpt(_dumps_or_empty(data), self.key),
            ) from None
        usage = usage_of(data.get("usage"))
        self.check_finish(choice.get("finish_reason"), usage, status=200, data=data)
        text = "".join(text_pieces(message.get("content")))
        calls = []
        for raw in message.get("tool_calls") or ():
            call = CallParts()
            call.add(raw)
            calls.append(call.request(names))
        return ModelReply(text=text or None, tool_calls=calls, usage=usage)

    def check_finish(
        self,
        finish_reason: object,
        usage: Usage | None,
        *,
        status: int | None = None,
        data: Any = None,
    ) -> None:
        """Refuse a reply that did not finish: the provider stopped it with an error, or the
        token limit cut it. ``data``, the whole reply's JSON, is kept in an excerpt.

        A cut reply's text may stop mid-sentence and its last call's arguments mid-JSON, so
        it is neither an answer nor calls to run. It is not worth retrying: the same request
        would be cut again.

        Raises:
            ModelError: Saying what stopped the reply, and for a cut one how to raise the
                limit.
        """
        provider = self.dialect.provider
        if finish_reason == "error":
            raise ModelError(f"{provider} stopped the reply with an error", status=status)
        if finish_reason not in _CUT:
            return
        after = ""
        if usage is not None and usage.output_tokens:
            after = f" after {usage.output_tokens} tokens"
        if finish_reason == "model_length":
            how = (
                "the conversation filled the model's context window: shorten the history or "
                "the instructions, or use a model with a longer context"
            )
        elif self.settings.max_tokens is not None:
            how = f"raise max_tokens ({self.settings.max_tokens} now) on the model"
        else:
            how = "raise the limit with max_tokens=... on the model"
        if finish_reason != "model_length" and self.dialect.context_hint is not None:
            how += f", or {self.dialect.context_hint}"
        if finish_reason == "length" and self.dialect.endless_hint is not None:
            how += f". {self.dialect.endless_hint}"
        raise ModelError(
            scrub(
                f"the reply from {provider} was cut by the token limit{after} "
                f'(finish_reason "{finish_reason}"): it was not taken as an answer and none of '
                f"its tool calls ran; {how}",
                self.key,
            ),
            status=status,
            body=None if data is None else excerpt(_dumps_or_empty(data), self.key),
        )


# -- the parts of a reply, and of an error -------------------------------------------------


def usage_of(data: Any) -> Usage | None:
    """The usage a reply reports, if it reports one."""
    if not isinstance(data, dict):
        return None
    prompt = _tokens(data.get("prompt_tokens"))
    completion = _tokens(data.get("completion_tokens"))
    total = _tokens(data.get("total_tokens")) or prompt + completion
    return Usage(input_tokens=prompt, output_tokens=completion, total_tokens=total)


def _tokens(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


def text_pieces(content: Any) -> list[str]:
    """The text of a message's content: a string, or a list of chunks (Mistral's)."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            chunk["text"]
            for chunk in content
            if isinstance(chunk, dict) and chunk.get("type") == "text" and "text" in chunk
        ]
    return []


def error_details(data: Any) -> tuple[str | None, str | None]:
    """(code, message) of an error body: Mistral's ``{"message", "code"}``, OpenAI's
    ``{"error": {...}}``, or a validation error's ``{"detail": [...]}``."""
    if not isinstance(data, dict):
        return None, None
    inner = data.get("error")
    if isinstance(inner, dict):
        data = inner
    elif isinstance(inner, str):
        return None, inner
    code = data.get("code")
    message = data.get("message")
    detail = data.get("detail")
    if message is None and isinstance(detail, list):
        message = "; ".join(
            f"{'.'.join(str(part) for part in item.get('loc', ()))}: {item.get('msg', '')}"
            for item in detail
            if isinstance(item, dict)
        )
    elif message is None and isinstance(detail, str):
        message = detail
    return (str(code) if code not in (None, "") else None), (
        str(message) if message not in (None, "") else None
    )


def json_or_none(text: str) -> Any:
    """The JSON of ``text``, or None if it is not JSON (an error page, say)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # the parser recurses once per level of the text
        return None


# -- helpers -------------------------------------------------------------------------------


def _close_calls(messages: list[dict[str, Any]], unanswered: list[str]) -> None:
    """Calls left without a result (their turn stopped): the endpoint wants one each."""
    for call_id in unanswered:
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": "(no result: the turn stopped before this call finished)",
            }
        )
    unanswered.clear()


def _bare(media_type: str) -> str:
    """A media type without its parameters, in lower case: ``audio/WAV;codecs=1`` is
    ``audio/wav``."""
    return media_type.partition(";")[0].strip().lower()


def _result_text(blocks: Sequence[ContentBlock]) -> str:
    """A tool result's blocks as the text of a tool message: a block whose audience leaves
    out the assistant is not sent; one that is not text is named in brackets (its bytes
    would not fit a tool message)."""
    shown = [block for block in blocks if _for_assistant(block)]
    if all(isinstance(block, TextContentBlock) for block in shown):
        return _text_of(shown)  # a local tool's result, as it always was
    parts = []
    for block in shown:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, EmbeddedResourceContentBlock):
            parts.append(block.text if block.text is not None else f"[resource: {block.uri}]")
        elif isinstance(block, ImageContentBlock):
            parts.append(f"[image: {block.alt_text or block.media_type or 'image'}]")
        elif isinstance(block, AudioContentBlock):
            parts.append(f"[audio: {block.media_type or 'audio'}]")
        elif isinstance(block, ResourceLinkContentBlock):
            label = block.title or block.name or block.uri
            parts.append(f"[resource link: {label} <{block.uri}>]")
    return "\n".join(parts)


def _for_assistant(block: ContentBlock) -> bool:
    """Whether the block's audience (MCP's annotations) takes in the assistant."""
    annotations = getattr(block, "annotations", None)
    audience = None if annotations is None else annotations.audience
    return audience is None or "assistant" in audience


def _text_of(blocks: Sequence[ContentBlock]) -> str:
    return "".join(block.text for block in blocks if isinstance(block, TextContentBlock))


def _data_uri(uri: str) -> tuple[str, str] | None:
    """(media type, base64 data) of a ``data:<type>;base64,<data>`` URI."""
    head, comma, data = uri.partition(",")
    if not (uri.startswith("data:") and comma and head.endswith(";base64")):
        return None
    try:
        base64.b64decode(data, validate=True)
    except ValueError:
        return None
    return head[5:-7] or "application/octet-stream", data


def _schema_name(schema: Mapping[str, Any]) -> str:
    title = schema.get("title")
    name = _NOT_IN_NAME.sub("_", title) if isinstance(title, str) and title else "output"
    return name[:64]


def _arguments_text(arguments: Any) -> str:
    """A call's arguments as the endpoint takes them back: JSON text. A call the model made
    with arguments that were not JSON (its entry holds their text as a str, or None for
    values such as NaN) goes back with none: an endpoint may refuse a history holding
    arguments it cannot parse, and the call's error result tells the model what was
    wrong."""
    if arguments is None or isinstance(arguments, str):
        return "{}"
    return json.dumps(arguments, ensure_ascii=False)


def _dumps_or_empty(data: Any) -> str:
    try:
        return json.dumps(data)
    except (ValueError, TypeError, RecursionError):  # as deep as the body it was read from
        return ""
