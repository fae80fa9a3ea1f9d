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

import hashlib
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from .._content import ContentBlock
from ._base import ModelReply, ModelRequest, TextSink
from ._block import check_requests_allowed
from ._options import ChatOptions, ChatSettings
from ._transport import ChatTransport, RunClients
from ._wire import ChatCodec, Dialect, ToolNames

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

    _clients: RunClients = attrs.field(init=False, factory=RunClients)

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}({self.model!r}, base_url={self.base_url!r})"

    @property
    def url(self) -> str:
        """Where requests go."""
        return f"{self.base_url}/chat/completions"

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
        transport = ChatTransport(
            settings=self,
            codec=codec,
            url=self.url,
            key=self._api_key,
            http_client=self._http_client,
            clients=self._clients,
            key_hint=self._key_hint,
        )
        return await transport.send(body, names, on_text=on_text if stream else None)

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
