"""How a model step's body reaches a chat-completions endpoint, and what is done when it
does not: the transport policy.

Each attempt is one HTTP request, answered whole or streamed (a server that answers a stream
request whole is read whole). A connection error, a timeout, a 408, 429 or 5xx answer, or a
stream that broke before any of its text reached the engine is retried, at most
``max_retries`` times, after an exponential backoff with jitter or as long as a
``Retry-After`` header asks (up to ``max_retry_wait``): the policy of ``_retry``. Any other
answer fails at once. Every failure becomes one :class:`ModelError` saying what the provider
answered and what to check, with its status, the provider's error code and an excerpt of
the body, the API key scrubbed from all of them.

Requests go through one ``httpx.AsyncClient`` per trio run (:class:`RunClients`): its
connections are reused from step to step, and it is closed when the run ends. Cancelling the
step aborts the request in flight.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import httpx
import trio

from .._data._errors import ModelError
from .._trio._retry import Backoff, RetryPolicy, retry_after
from ._base import ModelReply, TextSink
from ._chat_codec import (
    ChatCodec,
    ToolNames,
    error_details,
    excerpt,
    json_or_none,
    scrub,
    shown_url,
)
from ._sse import StreamReader

if TYPE_CHECKING:
    from ._options import ChatSettings

__all__ = ["BACKOFF", "ChatTransport", "RunClients"]

_SHOWN = 300  # characters of the provider's own message kept in ours

#: The pauses between a step's attempts: 0.5 s, 1 s, 2 s... at most 8 s, plus up to 1 s of
#: jitter.
BACKOFF = Backoff(first=0.5, most=8.0, jitter=1.0)


@attrs.define(eq=False)
class RunClients:
    """The ``httpx.AsyncClient`` of each trio run a model sends from: made on first use,
    closed when the run ends (an ``httpx.AsyncClient`` belongs to one event loop)."""

    _clients: dict[trio.lowlevel.TrioToken, httpx.AsyncClient] = attrs.field(factory=dict)

    async def current(self, timeout: httpx.Timeout) -> httpx.AsyncClient:
        """The client of the current trio run."""
        token = trio.lowlevel.current_trio_token()
        client = self._clients.get(token)
        if client is None:
            client = httpx.AsyncClient(timeout=timeout)
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


@attrs.frozen(kw_only=True)
class ChatTransport:
    """One model step's exchange with the endpoint at ``url``, retried as ``settings`` say.

    Attributes:
        settings: The model's: its retries, its timeout, and its name for messages.
        codec: Reads the answers, in the provider's dialect.
        url: Where the body is posted.
        key: Sent as a bearer token; scrubbed from every message and excerpt.
        http_client: The user's client, or None for the run's own from ``clients``.
        clients: The model's clients, one per trio run.
        key_hint: What a 401 or 403 says to check.
    """

    settings: ChatSettings
    codec: ChatCodec
    url: str
    key: str | None = attrs.field(repr=False)
    http_client: httpx.AsyncClient | None
    clients: RunClients
    key_hint: str

    @property
    def provider(self) -> str:
        return self.codec.dialect.provider

    async def send(
        self, body: Mapping[str, Any], names: ToolNames, *, on_text: TextSink | None
    ) -> ModelReply:
        """Post ``body`` and return the reply; stream its text to ``on_text`` if given (the
        body asks for a stream then).

        Raises:
            ModelError: The endpoint could not be reached or refused the request, after the
                retries the failure is worth; or its reply could not be read, was cut by the
                token limit, or was stopped with an error.
        """
        client = self.http_client or await self.clients.current(self.settings.timeout)
        settings = self.settings
        retries = RetryPolicy(
            backoff=BACKOFF,
            attempts=settings.max_retries + 1,
            longest_asked=settings.max_retry_wait,
        ).start()
        while True:
            try:
                if on_text is not None:
                    return await self._streamed(client, body, names, on_text)
                return await self._whole(client, body, names)
            except _Retryable as failure:  # nothing of this attempt reached the engine
                pause = retries.next_pause(failure.retry_after)
                if pause is None:
                    more = ""
                    if retries.refused is not None:
                        more = (
                            f"; it asked to retry after {retries.refused:g} s, more than "
                            f"max_retry_wait={settings.max_retry_wait:g}"
                        )
                    raise failure.error(retries.failures, more) from failure.__cause__
                await trio.sleep(pause)

    def _headers(self, *, stream: bool) -> dict[str, str]:
        headers = {"Accept": "text/event-stream" if stream else "application/json"}
        if self.key is not None:
            headers["Authorization"] = f"Bearer {self.key}"
        return headers

    async def _whole(
        self, client: httpx.AsyncClient, body: Mapping[str, Any], names: ToolNames
    ) -> ModelReply:
        try:
            response = await client.post(self.url, json=body, headers=self._headers(stream=False))
        except httpx.TransportError as error:
            raise self._unreachable(error) from error
        if response.status_code != 200:
            raise self._refusal(response.status_code, response.headers, response.text)
        return self.codec.reply(self.codec.read(response.status_code, response.text), names)

    async def _streamed(
        self,
        client: httpx.AsyncClient,
        body: Mapping[str, Any],
        names: ToolNames,
        on_text: TextSink,
    ) -> ModelReply:
        reader = StreamReader(self.codec, names)
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
                    text = (await response.aread()).decode()
                    reply = self.codec.reply(self.codec.read(response.status_code, text), names)
                    if reply.text:
                        await on_text(reply.text)
                    return reply
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

    def _unreachable(self, error: httpx.TransportError) -> _Retryable:
        if isinstance(error, httpx.TimeoutException):
            what = f"{self.provider} did not answer in time ({type(error).__name__})"
        else:
            what = (
                f"could not reach {self.provider} at {shown_url(self.url)} "
                f"({type(error).__name__}: {error})"
            )
        retryable = _Retryable(scrub(what, self.key), status=None, code=None, body=None)
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
            what += f": {_shorten(scrub(message, self.key))}"
        what = scrub(what, self.key) + self._hint(status)
        body = excerpt(text, self.key)
        if status in (408, 429) or status >= 500:
            return _Retryable(
                what, status=status, code=code, body=body, retry_after=retry_after(headers)
            )
        return ModelError(what, status=status, code=code, body=body)

    def _hint(self, status: int) -> str:
        if status in (401, 403):
            return f"; check {self.key_hint}"
        if status == 404:
            return (
                f"; check the model name ({self.settings.model!r}) and base_url "
                f"({shown_url(self.settings.base_url)!r})"
            )
        return ""


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
    return message if len(message) <= _SHOWN else message[: _SHOWN - 3] + "..."
