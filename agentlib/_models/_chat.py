"""Models behind a chat-completions HTTP endpoint: Mistral's, and OpenAI-compatible servers'.

One request per model step. :class:`ChatCompletionsModel` puts together, for each step,
what lives in a module of its own:

- ``_wire``: the wire format, without I/O: the session's entries, the agent's tools and an
  output type as the request's body; a whole reply's JSON as a ``ModelReply``; what each
  provider spells its own way (its ``Dialect``);
- ``_sse``: a reply streamed as Server-Sent Events, read line by line and put together,
  without I/O;
- ``_transport``: the request itself: retries with backoff and ``Retry-After``, failures as
  :class:`agentlib.ModelError` without the key, one ``httpx.AsyncClient`` per trio run;
- ``_options``: the options both models take, declared once, and the settings they keep;
- ``_mistral`` and ``_openai``: each provider's URL, key and dialect.

:class:`MistralModel` and :class:`OpenAICompatibleModel` are the model with their provider's
configuration; :func:`model_from_string` makes one from a string such as
``"mistral:mistral-small-latest"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

import attrs

from .._data._content import ContentBlock
from ._base import ModelReply, ModelRequest, TextSink
from ._chat_codec import ChatCodec, Dialect, ToolNames, shown_url
from ._mistral import KEY_HINT, MISTRAL, mistral_key, mistral_url
from ._openai import EXAMPLE_MODEL, EXAMPLE_URL, OPENAI_COMPATIBLE, openai_api
from ._options import ChatOptions, ChatSettings, check_options
from ._request_guard import check_requests_allowed
from ._transport import ChatTransport, RunClients

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["MistralModel", "OpenAICompatibleModel", "model_from_string"]


@attrs.define(kw_only=True, eq=False, repr=False)
class ChatCompletionsModel(ChatSettings):
    """A model behind a chat-completions endpoint: :class:`MistralModel` and
    :class:`OpenAICompatibleModel`."""

    #: Who answers, in messages: the dialect's provider.
    provider: ClassVar[str] = "the model server"
    #: What its endpoint spells its own way.
    dialect: ClassVar[Dialect] = Dialect(provider=provider)
    #: What a 401 says to check.
    _key_hint: ClassVar[str] = "the api_key"

    _clients: RunClients = attrs.field(init=False, factory=RunClients)

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}({self.model!r}, base_url={shown_url(self.base_url)!r})"

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


class MistralModel(ChatCompletionsModel):
    """Mistral's chat completions API (``POST {base_url}/chat/completions``).

    ``tool_choice="required"`` is sent as Mistral's ``"any"``. A tool call id Mistral
    would refuse (one from another provider, in imported history) is sent as one of nine
    letters and digits made from it, the same for the call and its result. Audio goes as
    the file alone, in any format: Mistral reads the format from it.
    """

    provider = MISTRAL.provider
    dialect = MISTRAL
    _key_hint = KEY_HINT

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        **options: Unpack[ChatOptions],
    ) -> None:
        """Every argument but the model's name is a keyword; the key and the API's root
        default to the environment's.

        Args:
            model: The model's name, e.g. ``"mistral-small-latest"``.
            api_key: The API key; by default the ``MISTRAL_API_KEY`` environment variable.
            base_url: The API's root; by default the ``MISTRAL_BASE_URL`` environment
                variable, else ``https://api.mistral.ai/v1``.

        Raises:
            ValueError: No API key, or a malformed argument.
        """
        check_options(MistralModel, options)
        super().__init__(
            model=model, base_url=mistral_url(base_url), api_key=mistral_key(api_key), **options
        )


class OpenAICompatibleModel(ChatCompletionsModel):
    """An OpenAI-compatible chat completions endpoint: vLLM, Ollama (``http://localhost:
    11434/v1``), llama.cpp's server, LM Studio, and hosted ones.

    ``tool_choice="required"`` is sent as is, and a streamed request asks for the usage in
    its last event. Audio goes in the two formats of OpenAI's schema, ``wav`` and ``mp3``
    (``audio/x-wav``, ``audio/mp3`` and the other aliases of their media types mapped);
    audio of another type raises :class:`agentlib.ModelError` before anything is sent.
    """

    provider = OPENAI_COMPATIBLE.provider
    dialect = OPENAI_COMPATIBLE
    _example = EXAMPLE_MODEL
    _example_url = EXAMPLE_URL

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None = None,
        **options: Unpack[ChatOptions],
    ) -> None:
        """Every argument but the model's name and the API's root is a keyword.

        Args:
            model: The model's name, as the server knows it.
            base_url: The API's root, e.g. ``"http://localhost:8000/v1"``.
            api_key: Sent as a bearer token if given; no environment variable is read, so
                that no key goes to a server it was not meant for.

        Raises:
            ValueError: A malformed argument.
        """
        check_options(OpenAICompatibleModel, options)
        super().__init__(model=model, base_url=base_url, api_key=api_key, **options)


def model_from_string(spec: str, options: ChatOptions | None = None) -> ChatCompletionsModel:
    """The model a string names: ``"mistral:<model>"``, ``"openai:<model>"`` (OpenAI's API)
    or ``"openai:<model>@<base_url>"`` (an OpenAI-compatible server), made with ``options``
    (the keywords of :class:`ChatOptions`) as its model object takes them.

    ``"openai:<model>"`` sends ``OPENAI_API_KEY`` to ``OPENAI_BASE_URL`` if set, else to
    ``https://api.openai.com/v1``, as OpenAI's own SDK does. ``"openai:<model>@<base_url>"``
    sends no key: none read from the environment goes to a server it was not meant for.

    Raises:
        TypeError: ``options`` is no mapping, or names no option.
        ValueError: The string names no model this way, or the model cannot be made (no
            Mistral or OpenAI API key, or a malformed option, say).
    """
    chosen = _options(options)
    provider, _, rest = spec.partition(":")
    if provider == "mistral" and rest:
        return MistralModel(rest, **chosen)
    if provider == "openai":
        name, _, url = rest.partition("@http")
        if name and url:
            return OpenAICompatibleModel(name, "http" + url, **chosen)
        if rest and "@" not in rest:
            api_key, base_url = openai_api(rest)
            return OpenAICompatibleModel(rest, base_url, api_key=api_key, **chosen)
    raise ValueError(
        f"model string {spec!r} names no model: use 'mistral:<model>' (e.g. "
        "'mistral:mistral-small-latest'), 'openai:<model>' for OpenAI's API (e.g. "
        "'openai:gpt-4o') or 'openai:<model>@<base_url>' for another server (e.g. "
        "'openai:llama3.1@http://localhost:11434/v1'), or pass a Model object"
    )


def _options(options: object) -> ChatOptions:
    """``options``, checked to be keywords of :class:`ChatOptions`.

    Raises:
        TypeError: They are no mapping, or one is no option.
    """
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(
            f"model_options must be a dict of options (such as {{'stop': ['<end_of_turn>']}}), "
            f"not {type(options).__name__}"
        )
    known = ChatOptions.__optional_keys__
    for name in options:
        if name not in known:
            raise TypeError(
                f"model_options has no option {name!r}; the options are " + ", ".join(sorted(known))
            )
    return cast(ChatOptions, dict(options))
