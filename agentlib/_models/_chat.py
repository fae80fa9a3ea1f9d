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

import contextlib
import email.utils
import hashlib
import math
import os
import random
import re
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import httpx
import trio

from .._content import ContentBlock
from .._errors import ModelError
from ._base import ModelReply, ModelRequest, TextSink
from ._block import check_requests_allowed
from ._options import ChatOptions, ChatSettings
from ._sse import StreamReader
from ._wire import (
    ChatCodec,
    Dialect,
    ToolNames,
    error_details,
    excerpt,
    json_or_none,
    scrub,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["MistralModel", "OpenAICompatibleModel", "model_from_string"]

#: Where ``"openai:<model>"`` goes unless ``OPENAI_BASE_URL`` says otherwise.
_OPENAI_URL = "https://api.openai.com/v1"
_MISTRAL_CALL_ID = re.compile(r"^[a-zA-Z0-9]{9}$")
_BASE62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@attrs.define(kw_only=True, eq=False, repr=False)
class ChatCompletionsModel(ChatSettings):
    """A model behind a chat-completions endpoint: :class:`MistralModel` and
    :class:`OpenAICompatibleModel`."""

    #: Who answers, in messages.
    provider: ClassVar[str] = "the model server"
    #: What its endpoint spells its own way.
    dialect: ClassVar[Dialect] = Dialect(provider=provider)
    #: What a 401 says to check.
    _key_hint: ClassVar[str] = "the api_key"

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
        codec = self._codec()
        names = ToolNames(request.tools)
        stream = self.stream and on_text is not None
        body = codec.body(request, names, stream=stream)
        client = await self._client()
        attempt = 0
        while True:
            try:
                if stream:
                    assert on_text is not None
                    return await self._streamed(client, codec, body, names, on_text)
                return await self._whole(client, codec, body, names)
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
        return self._codec().body(request, ToolNames(request.tools), stream=stream)

    def check_content(self, blocks: Sequence[ContentBlock]) -> None:
        """Refuse, before a message holding them joins a session's history, blocks this
        endpoint cannot take (where it would fail every later turn of the session).

        Raises:
            ValidationError: A block is audio of a format the endpoint does not take; the
                message names its media type and where it is (``@ $[index]``).
        """
        self._codec().check_content(blocks)

    def _codec(self) -> ChatCodec:
        """The wire format, with the settings as they are now."""
        return ChatCodec(self, self.dialect, self._api_key)

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
        self,
        client: httpx.AsyncClient,
        codec: ChatCodec,
        body: Mapping[str, Any],
        names: ToolNames,
    ) -> ModelReply:
        try:
            response = await client.post(self.url, json=body, headers=self._headers(stream=False))
        except httpx.TransportError as error:
            raise self._unreachable(error) from error
        if response.status_code != 200:
            raise self._refusal(response.status_code, response.headers, response.text)
        return codec.reply(codec.read(response.status_code, response.text), names)

    async def _streamed(
        self,
        client: httpx.AsyncClient,
        codec: ChatCodec,
        body: Mapping[str, Any],
        names: ToolNames,
        on_text: TextSink,
    ) -> ModelReply:
        reader = StreamReader(codec, names)
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
                    whole = codec.read(response.status_code, (await response.aread()).decode())
                    whole_reply = codec.reply(whole, names)
                    if whole_reply.text:
                        await on_text(whole_reply.text)
                    return whole_reply
                # The body is read to its end whatever happens in it: a stream left half
                # read leaves httpx's readers behind, unfinished.
                async for line in response.aiter_lines():
                    for piece in reader.feed(line):
                        delivered = True
                        await on_text(piece)
                if reader.failure is not None:
                    raise reader.failure
        except httpx.TransportError as error:
            broken: httpx.TransportError | None = error
        else:
            broken = httpx.RemoteProtocolError("the stream ended before its last event")
        if broken is not None and not reader.complete:  # lost after the whole reply: no matter
            if delivered:
                raise ModelError(
                    f"the stream from {self.provider} broke after part of the reply had "
                    f"arrived ({type(broken).__name__}: {broken}); the step was not "
                    "retried, so as not to repeat the text already streamed"
                ) from broken
            raise self._unreachable(broken) from broken
        return reader.reply()

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
        code, message = error_details(json_or_none(text))
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

    def _scrub(self, text: str) -> str:
        return scrub(text, self._api_key)

    def _excerpt(self, text: str) -> str:
        return excerpt(text, self._api_key)


def _mistral_call_id(call_id: str) -> str:
    """Mistral takes back only ids of 9 letters and digits: another id (from another
    provider, or imported history) is replaced by one made from it, the same each time, so
    that a call and its result still match."""
    if _MISTRAL_CALL_ID.match(call_id):
        return call_id
    number = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
    digits = []
    for _ in range(9):
        number, digit = divmod(number, 62)
        digits.append(_BASE62[digit])
    return "".join(digits)


class MistralModel(ChatCompletionsModel):
    """Mistral's chat completions API (``POST {base_url}/chat/completions``).

    ``tool_choice="required"`` is sent as Mistral's ``"any"``. A tool call id Mistral
    would refuse (one from another provider, in imported history) is sent as one of nine
    letters and digits made from it, the same for the call and its result. Audio goes as
    the file alone, in any format: Mistral reads the format from it.
    """

    provider = "Mistral"
    dialect = Dialect(
        provider=provider,
        required="any",
        no_content="",
        names_results=True,
        call_id=_mistral_call_id,
        audio_file_alone=True,
    )
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


class OpenAICompatibleModel(ChatCompletionsModel):
    """An OpenAI-compatible chat completions endpoint: vLLM, Ollama (``http://localhost:
    11434/v1``), llama.cpp's server, LM Studio, and hosted ones.

    ``tool_choice="required"`` is sent as is, and a streamed request asks for the usage in
    its last event. Audio goes in the two formats of OpenAI's schema, ``wav`` and ``mp3``
    (``audio/x-wav``, ``audio/mp3`` and the other aliases of their media types mapped);
    audio of another type raises :class:`agentlib.ModelError` before anything is sent.
    """

    provider = "the OpenAI-compatible server"
    dialect = Dialect(
        provider=provider,
        stream_options={"stream_options": {"include_usage": True}},
        context_hint=(
            "the server's context size (llama.cpp's --ctx-size, Ollama's num_ctx, vLLM's "
            "--max-model-len)"
        ),
    )
    _example = "llama3.1"
    _example_url = "http://localhost:11434/v1"

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
