"""agentlib.aio in an asyncio web service: a Starlette app on hypercorn's asyncio worker
serves a chat endpoint, and the loop goes on serving other requests while turns run."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
from hypercorn.asyncio import serve
from hypercorn.config import Config
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

import agentlib.aio as agents

from ._support import Gate, run, scripted_agent


def chat_app(agent: agents.Agent) -> Starlette:
    """The app a service would write: POST /chat runs a turn, GET /ping answers at once."""

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        session = await agent.start_session()
        record = await session.run(body["message"])
        assert isinstance(record, agents.Completed)
        return JSONResponse({"session": session.id, "answer": record.output})

    async def ping(request: Request) -> PlainTextResponse:
        return PlainTextResponse("pong")

    return Starlette(routes=[Route("/chat", chat, methods=["POST"]), Route("/ping", ping)])


async def serving(app: Starlette, stop: asyncio.Event) -> tuple[asyncio.Future[Any], str]:
    """``app`` served by hypercorn on this loop, on a port of its own, until ``stop``."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{listener.detach()}"]  # hypercorn's socket from now on
    config.accesslog = None
    config.errorlog = None
    server = asyncio.ensure_future(serve(app, config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
    return server, f"http://127.0.0.1:{port}"


def test_a_chat_endpoint_answers_while_ping_is_served_during_the_turn() -> None:
    async def main() -> tuple[Any, str]:
        gate = Gate("Hello from the chat.")
        stop = asyncio.Event()
        server, url = await serving(chat_app(scripted_agent(gate)), stop)
        try:
            async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
                chatting = asyncio.ensure_future(client.post("/chat", json={"message": "hi"}))
                await gate.reached()  # the turn runs in the engine, parked
                pong = await client.get("/ping")  # the loop serves meanwhile
                assert not chatting.done()
                await gate.open()
                reply = await chatting
        finally:
            stop.set()
            await server
        return reply.json(), pong.text

    answer, pong = run(main)
    assert pong == "pong"
    assert answer["answer"] == "Hello from the chat."


def test_concurrent_chats_each_get_their_answer() -> None:
    async def main() -> list[dict[str, Any]]:
        def answer(request: agents.ModelRequest) -> str:
            return f"you said {request.entries[-1].text}"

        agent = scripted_agent(answer)
        stop = asyncio.Event()
        server, url = await serving(chat_app(agent), stop)
        try:
            async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
                replies = await asyncio.gather(
                    *(client.post("/chat", json={"message": f"hi {n}"}) for n in range(10))
                )
        finally:
            stop.set()
            await server
        return [reply.json() for reply in replies]

    answers = run(main)
    assert [answer["answer"] for answer in answers] == [f"you said hi {n}" for n in range(10)]
    assert len({answer["session"] for answer in answers}) == 10
