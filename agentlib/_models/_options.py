"""The options both chat-completions models take, declared once.

:class:`ChatOptions` is the keywords :class:`MistralModel` and :class:`OpenAICompatibleModel`
accept besides the model, the URL and the key (``**options: Unpack[ChatOptions]``), and
documents them for both. :class:`ChatSettings` is what a model keeps of them, with the model,
the URL and the key: checked, with their defaults, as attributes (``model.max_tokens``) read
each time a step is sent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal, TypedDict

import attrs
import httpx

from .._data._json import TOO_DEEP, json_problem

__all__ = ["DEFAULT_TIMEOUT", "ChatOptions", "ChatSettings", "ToolChoice", "check_options"]

ToolChoice = Literal["auto", "none", "required"]

#: Generation is slow: a minute or two between bytes is normal; connecting is not.
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=120.0, write=30.0, pool=10.0)

_KEY = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no space: what a header value takes


class ChatOptions(TypedDict, total=False):
    """The keyword options of :class:`MistralModel` and :class:`OpenAICompatibleModel`."""

    stream: bool
    """Stream the reply's text as it is written (as ``EntryDelta`` events)."""
    tool_choice: ToolChoice | str | None
    """``"auto"``, ``"none"``, ``"required"`` (sent to Mistral as its ``"any"``) or the name
    of a tool the model must call; None leaves the provider's default."""
    reset_tool_choice: bool
    """Whether a forcing ``tool_choice`` (``"required"`` or a tool's name) goes out on the
    first model step of a turn only, so that the model may answer once it has the results;
    False sends it on every step, where a model that obeys it calls a tool every time and
    never answers. ``"auto"`` and ``"none"`` go out on every step either way."""
    parallel_tool_calls: bool | None
    """Whether the model may call several tools in one reply; None leaves the provider's
    default (Mistral's: it may)."""
    temperature: float | None
    """Sampling temperature; None leaves the model's default."""
    max_tokens: int | None
    """The most tokens a reply may take. A reply cut at the limit is no answer: it raises
    :class:`agentlib.ModelError`, which fails the turn."""
    stop: str | Sequence[str] | None
    """Where the model stops writing: a string, or several; the reply ends before the first
    one it would write. A model whose chat template never ends its turn writes on until
    ``max_tokens`` cuts every reply: give it its template's end-of-turn marker (Gemma's
    ``"<end_of_turn>"``, say). None sends none."""
    extra_body: Mapping[str, Any] | None
    """More fields of the request body (``random_seed``, ``safe_prompt``...)."""
    timeout: float | httpx.Timeout
    """Seconds, or an ``httpx.Timeout``; the read timeout is between bytes."""
    max_retries: int
    """How many times a step is retried after a connection error, a timeout, a 408, 429 or
    5xx answer."""
    max_retry_wait: float
    """The longest ``Retry-After`` waited for; a longer one fails at once."""
    http_client: httpx.AsyncClient | None
    """An ``httpx.AsyncClient`` to send requests with (its own timeout then applies); by
    default one per trio run, closed when the run ends."""


def check_options(owner: type, options: Mapping[str, object]) -> None:
    """Refuse a keyword that is no option, as Python would had ``owner`` listed them.

    Raises:
        TypeError: Naming ``owner``'s constructor and the first such keyword.
    """
    for name in options:
        if name not in ChatOptions.__optional_keys__:
            raise TypeError(
                f"{owner.__name__}.__init__() got an unexpected keyword argument {name!r}"
            )


def _model_name(settings: ChatSettings, attribute: attrs.Attribute[Any], model: object) -> None:
    if not isinstance(model, str) or not model.strip():
        raise ValueError(
            f"{type(settings).__name__} needs a model name, such as {settings._example!r}"
        )


def _without_slash(base_url: str) -> str:
    return base_url.rstrip("/") if isinstance(base_url, str) else base_url


def _base_url(settings: ChatSettings, attribute: attrs.Attribute[Any], base_url: object) -> None:
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(
            f"base_url must be an http:// or https:// URL, such as {settings._example_url!r}"
        )


def _api_key(settings: ChatSettings, attribute: attrs.Attribute[Any], api_key: object) -> None:
    if api_key is None:
        return
    if not isinstance(api_key, str) or not api_key.strip():
        raise ValueError("api_key must be a non-empty string, or None")
    if not _KEY.fullmatch(api_key):
        raise ValueError(
            "api_key holds a space, a line break or a character outside ASCII: it would "
            "not go in an HTTP header; strip what was read with it (the key is not shown)"
        )


def _tool_choice(settings: ChatSettings, attribute: attrs.Attribute[Any], choice: object) -> None:
    if choice is not None and not isinstance(choice, str):
        raise ValueError('tool_choice must be "auto", "none", "required" or a tool\'s name')


def _reset(settings: ChatSettings, attribute: attrs.Attribute[Any], reset: object) -> None:
    if not isinstance(reset, bool):
        raise ValueError("reset_tool_choice must be True or False")


def _extra_body(extra_body: Mapping[str, Any] | None) -> dict[str, Any]:
    try:
        body = dict(extra_body or {})
    except (TypeError, ValueError):
        raise ValueError(
            f"extra_body must be a JSON object, not {type(extra_body).__name__}"
        ) from None
    problem = json_problem(body)
    if problem is not None:
        reason = f"it is {TOO_DEEP}" if problem.too_deep else problem.reason
        raise ValueError(f"extra_body must be a JSON object: {reason} @ ${problem.at}")
    return body


def _stop(stop: str | Sequence[str] | None) -> str | tuple[str, ...] | None:
    if stop is None or (isinstance(stop, str) and stop):
        return stop
    if not isinstance(stop, (list, tuple)) or not all(isinstance(one, str) and one for one in stop):
        raise ValueError(
            "stop must be a non-empty string, a list of them (such as ['<end_of_turn>']) "
            f"or None, not {stop!r}"
        )
    return tuple(stop)


def _timeout(timeout: float | httpx.Timeout) -> httpx.Timeout:
    return timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)


def _max_retries(settings: ChatSettings, attribute: attrs.Attribute[Any], count: object) -> None:
    if not isinstance(count, int) or count < 0:
        raise ValueError("max_retries must be an int >= 0 (0 never retries)")


def _max_retry_wait(
    settings: ChatSettings, attribute: attrs.Attribute[Any], seconds: object
) -> None:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
        raise ValueError(f"max_retry_wait must be a number of seconds >= 0, not {seconds!r}")


@attrs.define(kw_only=True, eq=False, repr=False)
class ChatSettings:
    """What a chat-completions model is set up with: its model name, its endpoint, its key,
    and the options of :class:`ChatOptions`, each checked as it is set.

    Models compare by identity (``eq=False``): each owns its own HTTP clients.
    """

    #: Examples for the messages of bad arguments.
    _example: ClassVar[str] = "mistral-small-latest"
    _example_url: ClassVar[str] = "https://api.mistral.ai/v1"

    model: str = attrs.field(validator=_model_name)
    base_url: str = attrs.field(converter=_without_slash, validator=_base_url)
    _api_key: str | None = attrs.field(default=None, alias="api_key", validator=_api_key)
    stream: bool = True
    tool_choice: ToolChoice | str | None = attrs.field(default=None, validator=_tool_choice)
    reset_tool_choice: bool = attrs.field(default=True, validator=_reset)
    parallel_tool_calls: bool | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    stop: str | tuple[str, ...] | None = attrs.field(default=None, converter=_stop)
    extra_body: dict[str, Any] = attrs.field(default=None, converter=_extra_body)
    timeout: httpx.Timeout = attrs.field(default=DEFAULT_TIMEOUT, converter=_timeout)
    max_retries: int = attrs.field(default=3, validator=_max_retries)
    max_retry_wait: float = attrs.field(default=60.0, validator=_max_retry_wait)
    _http_client: httpx.AsyncClient | None = attrs.field(default=None, alias="http_client")
