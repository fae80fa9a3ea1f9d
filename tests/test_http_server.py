"""The HTTP test server (tests/_http_server.py), driven by httpx as the model clients use it,
and the recordings it replays."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import AsyncIterator

import attrs
import httpx
import pytest
import trio
import trio.testing
from _http_server import RECORDINGS, Reply, Server, recording, serve_in_thread

CHAT = "/v1/chat/completions"

RECORDED = sorted(
    str(path.relative_to(RECORDINGS))
    for path in RECORDINGS.glob("*/*")
    if path.suffix in {".json", ".sse", ".txt"}
)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False) as client:
        yield client


def client_port(response: httpx.Response) -> int:
    """The local port of the connection that carried ``response``."""
    port: int = response.extensions["network_stream"].get_extra_info("client_addr")[1]
    return port


async def read_lines(response: httpx.Response, lines: list[str]) -> None:
    """Append the lines of ``response`` to ``lines`` as they arrive."""
    async for line in response.aiter_lines():
        lines.append(line)


async def test_a_json_reply_and_the_recorded_request(
    server: Server, client: httpx.AsyncClient
) -> None:
    server.play(recording("mistral/chat_text.json"))
    payload = {"model": "mistral-small-latest", "messages": [{"role": "user", "content": "1+2?"}]}

    response = await client.post(
        server.url + CHAT, json=payload, headers={"Authorization": "Bearer sk-test"}
    )

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json()["choices"][0]["message"]["content"] == "The answer is 3."
    [request] = server.requests
    assert (request.method, request.path) == ("POST", CHAT)
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == payload


async def test_a_request_with_no_reply_queued_gets_a_500(
    server: Server, client: httpx.AsyncClient
) -> None:
    response = await client.get(server.url + "/v1/models")

    assert response.status_code == 500
    assert response.json()["message"] == "no reply queued"
    assert [request.path for request in server.requests] == ["/v1/models"]


async def test_keep_alive_serves_sequential_requests_on_one_connection(
    server: Server, client: httpx.AsyncClient
) -> None:
    server.play(Reply(body=b'{"n":1}'), Reply(body=b'{"n":2}'))

    first = await client.post(server.url + CHAT, json={"turn": 1})
    second = await client.post(server.url + CHAT, json={"turn": 2})

    assert [first.json(), second.json()] == [{"n": 1}, {"n": 2}]
    assert client_port(first) == client_port(second)
    assert [request.json() for request in server.requests] == [{"turn": 1}, {"turn": 2}]


async def test_concurrent_requests_are_served_at_once(
    server: Server, client: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    server.play(*(Reply(body=b'{"n":%d}' % n, delay=1.0) for n in range(3)))
    answers: list[int] = []

    async def ask() -> None:
        response = await client.post(server.url + CHAT, json={}, timeout=None)
        answers.append(response.json()["n"])

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(ask)

    assert trio.current_time() - start < 2
    assert sorted(answers) == [0, 1, 2]
    assert len(server.requests) == 3


async def test_a_stream_arrives_chunk_by_chunk(
    server: Server, client: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    reply = attrs.evolve(recording("mistral/stream_text.sse"), chunk_delay=0.1)
    server.play(reply)

    async with client.stream("POST", server.url + CHAT, json={"stream": True}) as response:
        assert response.headers["content-type"] == "text/event-stream"
        assert response.headers["transfer-encoding"] == "chunked"
        chunks = [chunk async for chunk in response.aiter_raw()]

    assert chunks == list(reply.chunks or ())


async def test_a_stream_read_by_lines(server: Server, client: httpx.AsyncClient) -> None:
    reply = recording("mistral/stream_text.sse")
    server.play(reply)

    async with client.stream("POST", server.url + CHAT, json={"stream": True}) as response:
        lines = [line async for line in response.aiter_lines() if line]

    assert lines == [chunk.decode().strip() for chunk in reply.chunks or ()]
    assert lines[-1] == "data: [DONE]"


async def test_drop_after_breaks_the_stream_after_its_first_chunks(
    server: Server, client: httpx.AsyncClient
) -> None:
    server.play(attrs.evolve(recording("mistral/stream_text.sse"), drop_after=2))
    lines: list[str] = []

    async with client.stream("POST", server.url + CHAT, json={"stream": True}) as response:
        with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
            await read_lines(response, lines)

    assert len([line for line in lines if line.startswith("data: ")]) == 2
    assert server.closed == 0


async def test_refuse_closes_the_connection_without_a_response(
    server: Server, client: httpx.AsyncClient
) -> None:
    server.play(Reply(refuse=True), recording("mistral/chat_text.json"))

    with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
        await client.post(server.url + CHAT, json={})
    response = await client.post(server.url + CHAT, json={})

    assert response.status_code == 200
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "reply",
    [
        Reply(hang=True),
        Reply(body=b"{}", delay=10.0),
        Reply(chunks=(b"data: 1\n\n", b"data: 2\n\n"), chunk_delay=10.0),
    ],
    ids=["hang", "delay", "stream"],
)
async def test_a_cancelled_request_closes_its_connection(
    server: Server,
    client: httpx.AsyncClient,
    autojump_clock: trio.testing.MockClock,
    reply: Reply,
) -> None:
    server.play(reply)

    with trio.move_on_after(1.0) as scope:
        await client.post(server.url + CHAT, json={}, timeout=None)
    with trio.fail_after(60):
        await server.wait_closed()

    assert scope.cancelled_caught
    assert server.closed == 1
    assert len(server.requests) == 1


async def test_delay_waits_on_the_trio_clock(
    server: Server, client: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    server.play(attrs.evolve(recording("mistral/chat_text.json"), delay=30.0))
    start = trio.current_time()

    response = await client.post(server.url + CHAT, json={}, timeout=None)

    assert 30 <= trio.current_time() - start < 31
    assert response.status_code == 200
    assert server.closed == 0


def test_serve_in_thread_answers_a_blocking_client() -> None:
    with serve_in_thread() as server, httpx.Client(trust_env=False) as client:
        server.play(recording("mistral/chat_text.json"))
        response = client.post(server.url + CHAT, json={"model": "m"})

        assert response.json()["object"] == "chat.completion"
        assert [request.json() for request in server.requests] == [{"model": "m"}]
    assert "http-server" not in {thread.name for thread in threading.enumerate()}


def test_a_reply_has_a_body_or_chunks() -> None:
    with pytest.raises(ValueError, match="not both"):
        Reply(body=b"{}", chunks=(b"data: 1\n\n",))
    with pytest.raises(ValueError, match="drop_after"):
        Reply(body=b"{}", drop_after=1)


@pytest.mark.parametrize("name", RECORDED)
def test_every_recording_loads(name: str) -> None:
    reply = recording(name)

    status = re.search(r"error_(\d{3})", name)
    assert reply.status == (int(status[1]) if status else 200)
    if name.endswith(".sse"):
        assert_server_sent_events(reply.chunks or ())
    elif name.endswith(".json"):
        json.loads(reply.body)
    else:
        assert reply.body


def assert_server_sent_events(chunks: tuple[bytes, ...]) -> None:
    """Each chunk is one ``data:`` event holding JSON, and the last is ``[DONE]``."""
    assert chunks
    data = []
    for chunk in chunks:
        event = re.fullmatch(rb"data: (.+)\n\n", chunk)
        assert event, chunk
        data.append(event[1])
    assert data[-1] == b"[DONE]"
    for item in data[:-1]:
        assert json.loads(item)["object"] == "chat.completion.chunk"


def test_recorded_headers_come_back() -> None:
    assert ("retry-after", "2") in recording("mistral/error_429.json").headers
    assert recording("mistral/error_401.json").headers == (
        ("content-type", "application/json; charset=utf-8"),
    )
    assert recording("mistral/stream_text.sse").headers == (("content-type", "text/event-stream"),)
