"""Models behind a chat-completions HTTP endpoint: Mistral's, and OpenAI-compatible servers'.

One request per model step: the session's entries become system, user, assistant and tool
messages; the agent's tools become JSON-schema functions; an output type becomes a
``response_format``. The reply comes back whole, or streamed as Server-Sent Events whose
text reaches the engine as it arrives. Connection errors, timeouts, 429 and 5xx answers are
retried with exponential backoff and jitter (a 429's ``Retry-After`` is honoured), a bounded
number of times; anything else raises :class:`agentlib.ModelError` at once, as does a reply
that the token limit cut short.

Requests go through one ``httpx.AsyncClient`` per trio run (connections are reused across
steps), closed when the run ends. Cancelling the step (``interrupt``, ``cancel``) aborts the
request in flight.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import hashlib
import json
import math
import os
import random
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import httpx
import trio

from .._content import (
    AudioContentBlock,
    ContentBlock,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceLinkContentBlock,
    TextContentBlock,
)
from .._entries import ContextMessage, Entry, MessageEntry, ToolCallEntry, ToolResultEntry
from .._errors import ModelError, ValidationError
from .._json import NotJson, read_json
from .._usage import Usage
from ._base import ModelReply, ModelRequest, TextSink, ToolCallRequest, ToolSchema
from ._block import check_requests_allowed
from ._options import ChatOptions, ChatSettings

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["MistralModel", "OpenAICompatibleModel", "model_from_string"]

#: Where ``"openai:<model>"`` goes unless ``OPENAI_BASE_URL`` says otherwise.
_OPENAI_URL = "https://api.openai.com/v1"

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_-]")
_MISTRAL_CALL_ID = re.compile(r"^[a-zA-Z0-9]{9}$")
_BASE62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_EXCERPT = 500  # characters of an error body kept on ModelError
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


@attrs.define(kw_only=True, eq=False, repr=False)
class ChatCompletionsModel(ChatSettings):
    """A model behind a chat-completions endpoint: :class:`MistralModel` and
    :class:`OpenAICompatibleModel`."""

    #: Who answers, in messages.
    provider: ClassVar[str] = "the model server"
    #: How to say tool_choice="required"; the content of an assistant message of calls only.
    _required: ClassVar[str] = "required"
    _no_content: ClassVar[str | None] = None
    #: What a 401 says to check.
    _key_hint: ClassVar[str] = "the api_key"
    #: Where else the limit of a cut reply may be raised.
    _context_hint: ClassVar[str | None] = None

    _clients: dict[trio.lowlevel.TrioToken, httpx.AsyncClient] = attrs.field(
        init=False, factory=dict
    )

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}({self.model!r}, base_url={self.base_url!r})"

    # -- the protocol ----------------------------------------------------------------------

    async def complete(
        self, request: ModelRequest, *, on_text: TextSink | None = None
    ) -> ModelReply:
        """Ask the endpoint for the next reply; stream its text to ``on_text``."""
        check_requests_allowed(self)
        names = _ToolNames(request.tools)
        stream = self.stream and on_text is not None
        body = self._body(request, names, stream=stream)
        client = await self._client()
        attempt = 0
        while True:
            try:
                if stream:
                    assert on_text is not None
                    return await self._streamed(client, body, names, on_text)
                return await self._whole(client, body, names)
            except _Retryable as failure:  # nothing of this attempt reached the engine
                if attempt >= self.max_retries:
                    raise failure.error(attempt + 1) from failure.__cause__
                wait = failure.retry_after
                if wait is None:
                    wait = min(8.0, 0.5 * 2**attempt) + random.uniform(0.0, 1.0)
                elif wait > self.max_retry_wait:
                    raise failure.error(
                        attempt + 1,
                        f"; it asked to retry after {wait:g} s, more than "
                        f"max_retry_wait={self.max_retry_wait:g}",
                    ) from failure.__cause__
                attempt += 1
                await trio.sleep(wait)

    # -- the request -----------------------------------------------------------------------

    def request_body(self, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON body this model sends for ``request`` (to see what the endpoint gets),
        at the model step of the turn that ``request.step`` says.

        Raises:
            ModelError: ``tool_choice`` names no tool of the request, or the request holds
                audio in a format the endpoint does not take.
        """
        return self._body(request, _ToolNames(request.tools), stream=stream)

    def _body(self, request: ModelRequest, names: _ToolNames, *, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": self._messages(request, names)}
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
            if self.tool_choice is not None:
                choice = self._tool_choice(self.tool_choice, names, request.tools)
                # A forcing choice sent again after the results would force another call,
                # and another: the model could never answer.
                forcing = self.tool_choice not in ("auto", "none")
                if request.step == 1 or not forcing or not self.reset_tool_choice:
                    body["tool_choice"] = choice
            if self.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = self.parallel_tool_calls
        if request.output_schema is not None:
            schema = dict(request.output_schema)
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": _schema_name(schema), "schema": schema},
            }
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        body["stream"] = stream
        if stream:
            body.update(self._stream_options())
        body.update(self.extra_body)
        return body

    def _stream_options(self) -> dict[str, Any]:
        return {}

    def _tool_choice(
        self, choice: str, names: _ToolNames, tools: Sequence[ToolSchema]
    ) -> str | dict[str, Any]:
        if choice in ("auto", "none"):
            return choice
        if choice == "required":
            return self._required
        if choice not in {tool.name for tool in tools}:
            raise ModelError(
                f"tool_choice names {choice!r}, which is not a tool of this agent; name one "
                f'of {sorted(tool.name for tool in tools)}, or use "auto", "none" or "required"'
            )
        return {"type": "function", "function": {"name": names.wire(choice)}}

    def _messages(self, request: ModelRequest, names: _ToolNames) -> list[dict[str, Any]]:
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
                    self._close_calls(messages, unanswered)
                    last = {"role": "assistant", "content": self._no_content}
                    messages.append(last)
                call_id = self._call_id(entry.tool_call_id)
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
                call_id = self._call_id(entry.tool_call_id)
                if call_id in unanswered:
                    unanswered.remove(call_id)
                messages.append(self._tool_message(entry, call_id, names))
            else:
                message = self._message(entry)
                if message is not None:
                    self._close_calls(messages, unanswered)
                    messages.append(message)
        self._close_calls(messages, unanswered)
        return messages

    def _close_calls(self, messages: list[dict[str, Any]], unanswered: list[str]) -> None:
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

    def _tool_message(
        self, entry: ToolResultEntry, call_id: str, names: _ToolNames
    ) -> dict[str, Any]:
        content = _text_of(entry.content)
        if not content and entry.structured_content is not None:
            content = json.dumps(entry.structured_content, ensure_ascii=False)
        return {"role": "tool", "tool_call_id": call_id, "content": content}

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

    def check_content(self, blocks: Sequence[ContentBlock]) -> None:
        """Refuse, before a message holding them joins a session's history, blocks this
        endpoint cannot take (where it would fail every later turn of the session).

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

    def _audio_refusal(self, media_type: str) -> str | None:
        """Why this endpoint cannot take audio of ``media_type``, or None if it can."""
        if _AUDIO_FORMATS.get(media_type.partition(";")[0].strip().lower()) is not None:
            return None
        return (
            f"{self.provider} takes audio as wav or mp3 only, and a message holds "
            f"{media_type}: convert the clip to WAV (audio/wav) or MP3 (audio/mpeg) "
            "before sending it"
        )

    def _audio_part(self, media_type: str, data: str) -> dict[str, Any]:
        refusal = self._audio_refusal(media_type)
        if refusal is not None:  # the server would refuse the whole request
            raise ModelError(refusal)
        audio_format = _AUDIO_FORMATS[media_type.partition(";")[0].strip().lower()]
        return {"type": "input_audio", "input_audio": {"data": data, "format": audio_format}}

    def _call_id(self, call_id: str) -> str:
        return call_id

    # -- the exchange ----------------------------------------------------------------------

    def _headers(self, *, stream: bool) -> dict[str, str]:
        headers = {"Accept": "text/event-stream" if stream else "application/json"}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    @property
    def url(self) -> str:
        """Where requests go."""
        return f"{self.base_url}/chat/completions"

    async def _client(self) -> httpx.AsyncClient:
        """The client of this trio run: made on first use, closed when the run ends."""
        if self._http_client is not None:
            return self._http_client
        token = trio.lowlevel.current_trio_token()
        client = self._clients.get(token)
        if client is None:
            client = httpx.AsyncClient(timeout=self.timeout)
            self._clients[token] = client
            trio.lowlevel.spawn_system_task(self._close_at_end, token, client)
        return client

    async def _close_at_end(
        self, token: trio.lowlevel.TrioToken, client: httpx.AsyncClient
    ) -> None:
        try:
            await trio.sleep_forever()
        finally:  # the run is ending: its system tasks are cancelled
            self._clients.pop(token, None)
            # Nothing is to be done about a socket that will not close.
            with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                await client.aclose()

    async def _whole(
        self, client: httpx.AsyncClient, body: Mapping[str, Any], names: _ToolNames
    ) -> ModelReply:
        try:
            response = await client.post(self.url, json=body, headers=self._headers(stream=False))
        except httpx.TransportError as error:
            raise self._unreachable(error) from error
        if response.status_code != 200:
            raise self._refusal(response.status_code, response.headers, response.text)
        return self._reply(self._parse(response.status_code, response.text), names)

    def _parse(self, status: int, text: str) -> Any:
        try:
            return json.loads(text)
        except ValueError:
            raise ModelError(
                f"{self.provider} answered with a body that is not JSON",
                status=status,
                body=self._excerpt(text),
            ) from None
        except RecursionError:  # the parser recurses once per level of the text
            raise ModelError(
                f"{self.provider} answered with a body nested too deeply to read",
                status=status,
                body=self._excerpt(text),
            ) from None

    async def _streamed(
        self,
        client: httpx.AsyncClient,
        body: Mapping[str, Any],
        names: _ToolNames,
        on_text: TextSink,
    ) -> ModelReply:
        reply = _StreamedReply()
        delivered = False  # text reached the engine: a failure from now on is not retried
        try:
            async with client.stream(
                "POST", self.url, json=body, headers=self._headers(stream=True)
            ) as response:
                if response.status_code != 200:
                    text = (await response.aread()).decode("utf-8", "replace")
                    raise self._refusal(response.status_code, response.headers, text)
                if "text/event-stream" not in response.headers.get("content-type", ""):
                    # A server that answers a stream request whole: take it whole.
                    whole = self._parse(response.status_code, (await response.aread()).decode())
                    whole_reply = self._reply(whole, names)
                    if whole_reply.text:
                        await on_text(whole_reply.text)
                    return whole_reply
                # The body is read to its end whatever happens in it: a stream left half
                # read leaves httpx's readers behind, unfinished.
                failure: ModelError | None = None
                async for line in response.aiter_lines():
                    if reply.done or failure is not None or not line.startswith("data:"):
                        continue  # comments, event names, blank lines between events
                    data = line[5:].strip()
                    if data == "[DONE]":
                        reply.done = True
                        continue
                    try:
                        chunk = self._chunk(data)
                    except ModelError as error:
                        failure = error
                        continue
                    for piece in reply.add(chunk):
                        delivered = True
                        await on_text(piece)
                if failure is not None:
                    raise failure
        except httpx.TransportError as error:
            broken: httpx.TransportError | None = error
        else:
            broken = httpx.RemoteProtocolError("the stream ended before its last event")
        if broken is not None and not reply.complete:  # lost after the whole reply: no matter
            if delivered:
                raise ModelError(
                    f"the stream from {self.provider} broke after part of the reply had "
                    f"arrived ({type(broken).__name__}: {broken}); the step was not "
                    "retried, so as not to repeat the text already streamed"
                ) from broken
            raise self._unreachable(broken) from broken
        if reply.finish_reason == "error":
            raise ModelError(f"{self.provider} stopped the reply with an error")
        if reply.finish_reason in _CUT:
            raise self._cut(reply.finish_reason, reply.usage)
        return ModelReply(
            text="".join(reply.text) if reply.text else None,
            tool_calls=[call.request(names) for call in reply.calls],
            usage=reply.usage,
        )

    def _chunk(self, data: str) -> Mapping[str, Any]:
        try:
            chunk = json.loads(data)
        except ValueError:
            raise ModelError(
                f"{self.provider} streamed an event that is not JSON",
                body=self._excerpt(data),
            ) from None
        except RecursionError:  # the parser recurses once per level of the text
            raise ModelError(
                f"{self.provider} streamed an event nested too deeply to read",
                body=self._excerpt(data),
            ) from None
        if not isinstance(chunk, dict):
            raise ModelError(
                f"{self.provider} streamed an event that is not a JSON object",
                body=self._excerpt(data),
            )
        if "error" in chunk:  # some servers report a failure inside the stream
            code, message = _error_details(chunk)
            raise ModelError(
                self._scrub(
                    f"{self.provider} failed mid-stream" + (f": {message}" if message else "")
                ),
                code=code,
                body=self._excerpt(data),
            )
        return chunk

    def _reply(self, data: Any, names: _ToolNames) -> ModelReply:
        try:
            choice = data["choices"][0]
            message = choice["message"]
            if not isinstance(message, dict):
                raise TypeError(message)
        except (KeyError, IndexError, TypeError):
            raise ModelError(
                f"{self.provider} answered without a choice holding a message",
                status=200,
                body=self._excerpt(_dumps_or_empty(data)),
            ) from None
        if choice.get("finish_reason") == "error":
            raise ModelError(f"{self.provider} stopped the reply with an error", status=200)
        usage = _usage(data.get("usage"))
        if choice.get("finish_reason") in _CUT:
            raise self._cut(
                choice["finish_reason"],
                usage,
                status=200,
                body=self._excerpt(_dumps_or_empty(data)),
            )
        text = "".join(_text_pieces(message.get("content")))
        calls = []
        for raw in message.get("tool_calls") or ():
            call = _CallParts()
            call.add(raw)
            calls.append(call.request(names))
        return ModelReply(text=text or None, tool_calls=calls, usage=usage)

    # -- failures --------------------------------------------------------------------------

    def _unreachable(self, error: httpx.TransportError) -> _Retryable:
        if isinstance(error, httpx.TimeoutException):
            what = f"{self.provider} did not answer in time ({type(error).__name__})"
        else:
            what = (
                f"could not reach {self.provider} at {self.url} ({type(error).__name__}: {error})"
            )
        retryable = _Retryable(self._scrub(what), status=None, code=None, body=None)
        retryable.__cause__ = error
        return retryable

    def _refusal(
        self, status: int, headers: Mapping[str, str], text: str
    ) -> ModelError | _Retryable:
        code, message = _error_details(_json_or_none(text))
        what = f"{self.provider} answered HTTP {status}"
        if code:
            what += f" (code {code})"
        if message:
            what += f": {_shorten(self._scrub(message))}"
        what = self._scrub(what) + _hint(status, self)
        body = self._excerpt(text)
        if status in (408, 429) or status >= 500:
            return _Retryable(
                what, status=status, code=code, body=body, retry_after=_after(headers)
            )
        return ModelError(what, status=status, code=code, body=body)

    def _cut(
        self,
        finish_reason: str,
        usage: Usage | None,
        *,
        status: int | None = None,
        body: str | None = None,
    ) -> ModelError:
        """A reply the token limit cut short: its text may stop mid-sentence and its last
        call's arguments mid-JSON, so it is neither an answer nor calls to run. Not retried:
        the same request would be cut again."""
        after = ""
        if usage is not None and usage.output_tokens:
            after = f" after {usage.output_tokens} tokens"
        if finish_reason == "model_length":
            how = (
                "the conversation filled the model's context window: shorten the history or "
                "the instructions, or use a model with a longer context"
            )
        elif self.max_tokens is not None:
            how = f"raise max_tokens ({self.max_tokens} now) on the model"
        else:
            how = "raise the limit with max_tokens=... on the model"
        if finish_reason != "model_length" and self._context_hint is not None:
            how += f", or {self._context_hint}"
        return ModelError(
            self._scrub(
                f"the reply from {self.provider} was cut by the token limit{after} "
                f'(finish_reason "{finish_reason}"): it was not taken as an answer and none of '
                f"its tool calls ran; {how}"
            ),
            status=status,
            body=body,
        )

    def _scrub(self, text: str) -> str:
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return text

    def _excerpt(self, text: str) -> str:
        return self._scrub(text)[:_EXCERPT]


class MistralModel(ChatCompletionsModel):
    """Mistral's chat completions API (``POST {base_url}/chat/completions``).

    ``tool_choice="required"`` is sent as Mistral's ``"any"``. A tool call id Mistral
    would refuse (one from another provider, in imported history) is sent as one of nine
    letters and digits made from it, the same for the call and its result. Audio goes as
    the file alone, in any format: Mistral reads the format from it.
    """

    provider = "Mistral"
    _required = "any"
    _no_content = ""
    _key_hint = "the api_key (api_key=... or MISTRAL_API_KEY)"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        **options: Unpack[ChatOptions],
    ) -> None:
        """
        Args:
            model: The model's name, e.g. ``"mistral-small-latest"``.
            api_key: The API key; by default the ``MISTRAL_API_KEY`` environment variable.
            base_url: The API's root; by default the ``MISTRAL_BASE_URL`` environment
                variable, else ``https://api.mistral.ai/v1``.

        Raises:
            ValueError: No API key, or a malformed argument.
        """
        if api_key is None:
            api_key = os.environ.get("MISTRAL_API_KEY") or None
        if api_key is None:
            raise ValueError(
                "MistralModel needs an API key: pass api_key=... or set MISTRAL_API_KEY "
                "(https://console.mistral.ai/api-keys)"
            )
        if base_url is None:
            base_url = os.environ.get("MISTRAL_BASE_URL") or "https://api.mistral.ai/v1"
        super().__init__(model=model, base_url=base_url, api_key=api_key, **options)

    def _tool_message(
        self, entry: ToolResultEntry, call_id: str, names: _ToolNames
    ) -> dict[str, Any]:
        message = super()._tool_message(entry, call_id, names)
        if entry.name is not None:
            message["name"] = names.wire(entry.name)
        return message

    def _call_id(self, call_id: str) -> str:
        """Mistral takes back only ids of 9 letters and digits: another id (from another
        provider, or imported history) is replaced by one made from it, the same each time,
        so that a call and its result still match."""
        if _MISTRAL_CALL_ID.match(call_id):
            return call_id
        number = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
        digits = []
        for _ in range(9):
            number, digit = divmod(number, 62)
            digits.append(_BASE62[digit])
        return "".join(digits)

    def _audio_refusal(self, media_type: str) -> str | None:
        # Mistral takes the file alone, with no format field, and tells the format from its
        # bytes: there is nothing to map, and no list of formats it documents to check.
        return None

    def _audio_part(self, media_type: str, data: str) -> dict[str, Any]:
        return {"type": "input_audio", "input_audio": data}


class OpenAICompatibleModel(ChatCompletionsModel):
    """An OpenAI-compatible chat completions endpoint: vLLM, Ollama (``http://localhost:
    11434/v1``), llama.cpp's server, LM Studio, and hosted ones.

    ``tool_choice="required"`` is sent as is, and a streamed request asks for the usage in
    its last event. Audio goes in the two formats of OpenAI's schema, ``wav`` and ``mp3``
    (``audio/x-wav``, ``audio/mp3`` and the other aliases of their media types mapped);
    audio of another type raises :class:`agentlib.ModelError` before anything is sent.
    """

    provider = "the OpenAI-compatible server"
    _example = "llama3.1"
    _example_url = "http://localhost:11434/v1"
    _key_hint = "the api_key"
    _context_hint = (
        "the server's context size (llama.cpp's --ctx-size, Ollama's num_ctx, vLLM's "
        "--max-model-len)"
    )

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None = None,
        **options: Unpack[ChatOptions],
    ) -> None:
        """
        Args:
            model: The model's name, as the server knows it.
            base_url: The API's root, e.g. ``"http://localhost:8000/v1"``.
            api_key: Sent as a bearer token if given; no environment variable is read, so
                that no key goes to a server it was not meant for.

        Raises:
            ValueError: A malformed argument.
        """
        super().__init__(model=model, base_url=base_url, api_key=api_key, **options)

    def _stream_options(self) -> dict[str, Any]:
        return {"stream_options": {"include_usage": True}}


def model_from_string(spec: str) -> ChatCompletionsModel:
    """The model a string names: ``"mistral:<model>"``, ``"openai:<model>"`` (OpenAI's API)
    or ``"openai:<model>@<base_url>"`` (an OpenAI-compatible server).

    ``"openai:<model>"`` sends ``OPENAI_API_KEY`` to ``OPENAI_BASE_URL`` if set, else to
    ``https://api.openai.com/v1``, as OpenAI's own SDK does. ``"openai:<model>@<base_url>"``
    sends no key: none read from the environment goes to a server it was not meant for.

    Raises:
        ValueError: The string names no model this way, or the model cannot be made (no
            Mistral or OpenAI API key, say).
    """
    provider, _, rest = spec.partition(":")
    if provider == "mistral" and rest:
        return MistralModel(rest)
    if provider == "openai":
        name, _, url = rest.partition("@http")
        if name and url:
            return OpenAICompatibleModel(name, "http" + url)
        if rest and "@" not in rest:
            return _openai(rest)
    raise ValueError(
        f"model string {spec!r} names no model: use 'mistral:<model>' (e.g. "
        "'mistral:mistral-small-latest'), 'openai:<model>' for OpenAI's API (e.g. "
        "'openai:gpt-4o') or 'openai:<model>@<base_url>' for another server (e.g. "
        "'openai:llama3.1@http://localhost:11434/v1'), or pass a Model object"
    )


def _openai(model: str) -> OpenAICompatibleModel:
    """``model`` on OpenAI's API, with the key and the URL the environment gives."""
    api_key = os.environ.get("OPENAI_API_KEY") or None
    if api_key is None:
        raise ValueError(
            f"model string 'openai:{model}' names OpenAI's API, which needs a key: set "
            "OPENAI_API_KEY, or pass a model object such as OpenAICompatibleModel("
            f"{model!r}, {_OPENAI_URL!r}, api_key=...); for another server, give its URL: "
            f"'openai:{model}@http://localhost:11434/v1'"
        )
    base_url = os.environ.get("OPENAI_BASE_URL") or _OPENAI_URL
    if not base_url.startswith(("http://", "https://")):
        # Not shown: a URL may hold a password.
        raise ValueError("OPENAI_BASE_URL must be an http:// or https:// URL, or unset")
    return OpenAICompatibleModel(model, base_url, api_key=api_key)


# -- helpers -------------------------------------------------------------------------------


class _ToolNames:
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
class _CallParts:
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

    def request(self, names: _ToolNames) -> ToolCallRequest:
        arguments: Any = self.whole
        if arguments is None:
            try:
                arguments = read_json(self.arguments) if self.arguments.strip() else {}
            except NotJson:  # the engine tells the model why its text is not JSON
                arguments = self.arguments
        return ToolCallRequest(name=names.id_of(self.name), arguments=arguments, id=self.id)


@attrs.define
class _StreamedReply:
    """A streamed reply, put together event by event."""

    text: list[str] = attrs.field(factory=list)
    calls: list[_CallParts] = attrs.field(factory=list)
    slots: dict[Any, _CallParts] = attrs.field(factory=dict)
    usage: Usage | None = None
    finish_reason: str | None = None
    done: bool = False

    @property
    def complete(self) -> bool:
        """Whether the whole reply arrived: ``[DONE]``, or a finish reason."""
        return self.done or self.finish_reason is not None

    def add(self, chunk: Mapping[str, Any]) -> list[str]:
        """Take in one event; returns its text, in pieces."""
        usage = _usage(chunk.get("usage"))
        if usage is not None:
            self.usage = usage
        pieces: list[str] = []
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            for piece in _text_pieces(delta.get("content")):
                if piece:
                    pieces.append(piece)
                    self.text.append(piece)
            for raw in delta.get("tool_calls") or ():
                self._slot(raw).add(raw)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return pieces

    def _slot(self, raw: Mapping[str, Any]) -> _CallParts:
        """The call a fragment belongs to: by its index (unless it brings a new id); else by
        its id; else the last one."""
        call_id = raw.get("id")
        key: Any = raw.get("index")
        if key is None:
            key = ("id", call_id) if call_id else None
        if key is None:
            if not self.calls:
                self.calls.append(_CallParts())
            return self.calls[-1]
        slot = self.slots.get(key)
        # A fragment with another call's id starts a new call, though some servers give
        # every call the same index.
        if slot is None or (call_id and slot.id is not None and slot.id != call_id):
            slot = self.slots[key] = _CallParts()
            self.calls.append(slot)
        return slot


class _Retryable(Exception):
    """A failure worth another attempt."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None,
        code: str | None,
        body: str | None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.body = body
        self.retry_after = retry_after

    def error(self, attempts: int, more: str = "") -> ModelError:
        tries = "once" if attempts == 1 else f"{attempts} times"
        return ModelError(
            f"{self.message} (tried {tries}{more})",
            status=self.status,
            code=self.code,
            body=self.body,
        )


def _usage(data: Any) -> Usage | None:
    if not isinstance(data, dict):
        return None
    prompt = _tokens(data.get("prompt_tokens"))
    completion = _tokens(data.get("completion_tokens"))
    total = _tokens(data.get("total_tokens")) or prompt + completion
    return Usage(input_tokens=prompt, output_tokens=completion, total_tokens=total)


def _tokens(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


def _text_pieces(content: Any) -> list[str]:
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


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # the parser recurses once per level of the text
        return None


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


def _error_details(data: Any) -> tuple[str | None, str | None]:
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


def _shorten(message: str) -> str:
    return message if len(message) <= 300 else message[:297] + "..."


def _hint(status: int, model: ChatCompletionsModel) -> str:
    if status in (401, 403):
        return f"; check {model._key_hint}"
    if status == 404:
        return f"; check the model name ({model.model!r}) and base_url ({model.base_url!r})"
    return ""


def _after(headers: Mapping[str, str]) -> float | None:
    """The wait a ``Retry-After`` header asks for, in seconds (a number or an HTTP date)."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)
