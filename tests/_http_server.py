"""A real HTTP/1.1 server on 127.0.0.1 for tests of HTTP model clients (trio + h11).

The server replays queued :class:`Reply` objects, one per request and in order, and records
every :class:`Request` it receives. It runs in a test's own trio loop (:func:`serve`), so
under ``trio.testing.MockClock`` its delays are virtual, or in a thread of its own
(:func:`serve_in_thread`) for tests of blocking APIs.

A connection serves requests one after another (keep-alive) and each connection has its own
task. While a reply is delayed, hangs or streams, the server watches the connection: when
the client closes it (a cancelled request), the reply stops quietly and :attr:`Server.closed`
counts it.

Recordings (``tests/recordings``) are stored as the exact response body that goes on the
wire, so they read like the providers' documentation; :func:`recording` rebuilds the rest:

- the status is 200, or ``NNN`` for a file named ``error_NNN...`` (``error_429.json``);
- the content type follows the suffix: ``.json`` application/json, ``.sse``
  text/event-stream, ``.txt`` text/plain;
- an optional ``<file>.headers`` next to the file (``error_429.json.headers``) holds
  further headers, one ``Name: value`` a line; a ``Content-Type`` there replaces the default;
- an ``.sse`` body is streamed with one chunk per event (each block ending in a blank line).
"""

from __future__ import annotations

import contextlib
import http
import json
import re
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import attrs
import h11
import trio

#: Where :func:`recording` looks for recordings.
RECORDINGS = Path(__file__).parent / "recordings"

_CONTENT_TYPES = {
    ".json": "application/json",
    ".sse": "text/event-stream",
    ".txt": "text/plain; charset=utf-8",
}


@attrs.frozen(kw_only=True)
class Reply:
    """One response the server plays.

    ``body`` is sent whole, with a Content-Length; ``chunks``, if given, are streamed
    instead (Transfer-Encoding: chunked), one write per chunk. ``delay`` waits before the
    status line and ``chunk_delay`` between chunks (trio sleeps: virtual time under a
    MockClock). ``hang`` never answers and waits for the client to go away.
    ``drop_after`` closes the connection after that many chunks, without the terminating
    chunk; ``refuse`` closes it at once without any response.
    """

    status: int = 200
    headers: tuple[tuple[str, str], ...] = (("content-type", "application/json"),)
    body: bytes = b""
    chunks: tuple[bytes, ...] | None = None
    delay: float = 0.0
    chunk_delay: float = 0.0
    hang: bool = False
    drop_after: int | None = None
    refuse: bool = False

    def __attrs_post_init__(self) -> None:
        if self.body and self.chunks is not None:
            raise ValueError("a reply has a body or chunks, not both")
        if self.drop_after is not None and self.chunks is None:
            raise ValueError("drop_after needs chunks")


@attrs.frozen
class Request:
    """One request the server received; header names are lower-cased."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body, parsed as JSON."""
        return json.loads(self.body)


#: What a request gets when no reply is queued.
NO_REPLY = Reply(
    status=500,
    body=json.dumps(
        {
            "object": "error",
            "message": "no reply queued",
            "type": "test_server_error",
            "param": None,
            "code": None,
        }
    ).encode(),
)


class Server:
    """A running server: its base URL, the requests it received and the replies it plays.

    :meth:`play` and :attr:`requests` may be used from another thread than the server's;
    :meth:`wait_requests` and :meth:`wait_closed` must be awaited in the server's own trio run.
    """

    def __init__(self, url: str) -> None:
        #: The base URL, ``http://127.0.0.1:<port>``, without a trailing slash.
        self.url = url
        #: Every request received, in order.
        self.requests: list[Request] = []
        #: How many connections the client closed while a reply was delayed, hanging or
        #: streaming.
        self.closed = 0
        self._replies: deque[Reply] = deque()
        self._replies_lock = threading.Lock()
        self._requests_changed = trio.Event()
        self._closed_changed = trio.Event()

    def play(self, *replies: Reply) -> None:
        """Queue replies: each request takes the next one (a 500 "no reply queued" if none)."""
        with self._replies_lock:
            self._replies.extend(replies)

    async def wait_requests(self, count: int = 1) -> None:
        """Return once :attr:`requests` holds at least ``count`` requests."""
        while len(self.requests) < count:
            await self._requests_changed.wait()

    async def wait_closed(self, count: int = 1) -> None:
        """Return once :attr:`closed` is at least ``count``."""
        while self.closed < count:
            await self._closed_changed.wait()

    def _next_reply(self) -> Reply:
        with self._replies_lock:
            return self._replies.popleft() if self._replies else NO_REPLY

    def _count_closed(self) -> None:
        self.closed += 1
        self._closed_changed.set()
        self._closed_changed = trio.Event()

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        """Serve one connection until either side closes it; a vanished client is no error."""
        async with stream:
            connection = _Connection(stream)
            with contextlib.suppress(trio.BrokenResourceError, h11.RemoteProtocolError):
                await self._serve_requests(connection)

    async def _serve_requests(self, connection: _Connection) -> None:
        while (request := await connection.receive_request()) is not None:
            self.requests.append(request)
            self._requests_changed.set()
            self._requests_changed = trio.Event()
            if not await self._answer(connection, self._next_reply()):
                return
            connection.h11.start_next_cycle()

    async def _answer(self, connection: _Connection, reply: Reply) -> bool:
        """Play ``reply``; whether the connection can carry another request."""
        if reply.refuse:
            return False
        async with trio.open_nursery() as nursery:
            nursery.start_soon(connection.watch_hangup, nursery.cancel_scope)
            try:
                await _send_reply(connection, reply)
            except trio.BrokenResourceError:
                connection.hung_up = True
            nursery.cancel_scope.cancel()
        states = (connection.h11.our_state, connection.h11.their_state)
        if connection.hung_up and states[0] is not h11.DONE:
            self._count_closed()
        return not connection.hung_up and states == (h11.DONE, h11.DONE)


class _Connection:
    """One accepted connection and its h11 state machine."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.SERVER)
        self.hung_up = False

    async def send(self, *events: h11.Event) -> None:
        """Send ``events`` in one write."""
        data = b"".join(self.h11.send(event) or b"" for event in events)
        await self.stream.send_all(data)

    async def receive_request(self) -> Request | None:
        """The next whole request, or None if the client closed the connection first."""
        head: h11.Request | None = None
        body = bytearray()
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                self.h11.receive_data(await self.stream.receive_some())
            elif isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return _request(head, bytes(body))
            elif isinstance(event, h11.ConnectionClosed):
                return None

    async def watch_hangup(self, scope: trio.CancelScope) -> None:
        """Wait until the client closes the connection, then note it and cancel ``scope``.

        Bytes that arrive meanwhile (a pipelined request) are kept for h11.
        """
        with contextlib.suppress(trio.BrokenResourceError):
            while data := await self.stream.receive_some():
                self.h11.receive_data(data)
        self.hung_up = True
        scope.cancel()


def _request(head: h11.Request, body: bytes) -> Request:
    headers: dict[str, str] = {}
    for name, value in head.headers:
        key = name.decode("latin-1")
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return Request(head.method.decode("ascii"), head.target.decode("ascii"), headers, body)


async def _send_reply(connection: _Connection, reply: Reply) -> None:
    if reply.hang:
        await trio.sleep_forever()
    await trio.sleep(reply.delay)
    response = h11.Response(
        status_code=reply.status, headers=_response_headers(reply), reason=_reason(reply.status)
    )
    if reply.chunks is None:
        await connection.send(response, h11.Data(data=reply.body), h11.EndOfMessage())
        return
    await connection.send(response)
    sent = reply.chunks if reply.drop_after is None else reply.chunks[: reply.drop_after]
    for number, chunk in enumerate(sent):
        if number:
            await trio.sleep(reply.chunk_delay)
        await connection.send(h11.Data(data=chunk))
    if reply.drop_after is None:
        await connection.send(h11.EndOfMessage())


def _response_headers(reply: Reply) -> list[tuple[str, str]]:
    headers = list(reply.headers)
    names = {name.lower() for name, _ in headers}
    if reply.chunks is not None:
        if "transfer-encoding" not in names:
            headers.append(("transfer-encoding", "chunked"))
    elif "content-length" not in names:
        headers.append(("content-length", str(len(reply.body))))
    return headers


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


async def serve(nursery: trio.Nursery) -> Server:
    """Start a server on 127.0.0.1 (a port the OS picks) in ``nursery``; return once listening."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    server = Server(f"http://127.0.0.1:{port}")
    await nursery.start(trio.serve_listeners, server._serve_connection, listeners)
    return server


@contextlib.contextmanager
def serve_in_thread() -> Iterator[Server]:
    """A server run by ``trio.run`` in a daemon thread, stopped (and joined) on exit."""
    started: Future[tuple[Server, trio.lowlevel.TrioToken, trio.CancelScope]] = Future()
    thread = threading.Thread(
        target=trio.run, args=(_serve_until_cancelled, started), name="http-server", daemon=True
    )
    thread.start()
    server, token, scope = started.result()
    try:
        yield server
    finally:
        trio.from_thread.run_sync(scope.cancel, trio_token=token)
        thread.join()


async def _serve_until_cancelled(
    started: Future[tuple[Server, trio.lowlevel.TrioToken, trio.CancelScope]],
) -> None:
    async with trio.open_nursery() as nursery:
        try:
            server = await serve(nursery)
        except OSError as error:
            started.set_exception(error)
            return
        started.set_result((server, trio.lowlevel.current_trio_token(), nursery.cancel_scope))


def recording(name: str) -> Reply:
    """The reply stored as ``tests/recordings/<name>`` (see the module docstring).

    ``attrs.evolve`` adjusts it: ``attrs.evolve(recording("mistral/stream_text.sse"),
    drop_after=2)``.
    """
    path = RECORDINGS / name
    body = path.read_bytes()
    headers = _recording_headers(path)
    status = re.match(r"error_(\d{3})", path.name)
    reply = Reply(status=int(status[1]) if status else 200, headers=headers)
    if path.suffix == ".sse":
        return attrs.evolve(reply, chunks=sse_events(body))
    return attrs.evolve(reply, body=body)


def _recording_headers(path: Path) -> tuple[tuple[str, str], ...]:
    headers = {"content-type": _CONTENT_TYPES[path.suffix]}
    extra = path.with_name(path.name + ".headers")
    if extra.exists():
        for line in extra.read_text().splitlines():
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return tuple(headers.items())


def sse_events(body: bytes) -> tuple[bytes, ...]:
    """Split a server-sent-events body into its events, each with its closing blank line."""
    *events, rest = body.split(b"\n\n")
    if rest:
        raise ValueError(f"the stream does not end with a blank line: {rest[:80]!r}")
    return tuple(event + b"\n\n" for event in events)
