"""agentlib.aio in an asyncio web service: a Starlette app on hypercorn's asyncio worker
serves a chat endpoint, and the loop goes on serving other requests while turns run; an
agent's tool queries PostgreSQL through the app's asyncpg pool, on the app's loop; a client
that stops following a turn's events leaves nothing of its stream in the engine."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
from conftest import POSTGRES
from hypercorn.asyncio import serve
from hypercorn.config import Config
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

import agentlib.aio as agents

from ._support import Gate, call_tool, calls_in_engine, run, scripted_agent


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


async def chats(app: Starlette, messages: list[str]) -> list[dict[str, Any]]:
    """The JSON replies of ``app`` served, to each message POSTed to /chat, all at once."""
    stop = asyncio.Event()
    server, url = await serving(app, stop)
    try:
        async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
            replies = await asyncio.gather(
                *(client.post("/chat", json={"message": message}) for message in messages)
            )
    finally:
        stop.set()
        await server
    return [reply.json() for reply in replies]


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


def test_a_tool_queries_postgresql_through_the_apps_asyncpg_pool_on_the_apps_loop(
    postgres_schema: str,
) -> None:
    # asyncpg's pool is asyncio code bound to the loop that made it (the app's lifespan):
    # the agent's coroutine tool runs there, however many chats run at once.
    orders = f"{postgres_schema}.orders"
    pools: list[asyncpg.Pool] = []

    async def order_status(order: str) -> str:
        """The status of an order.

        Args:
            order: The order's id.
        """
        status = await pools[0].fetchval(f"SELECT status FROM {orders} WHERE id = $1", order)
        return f"{order} is {status}" if status is not None else f"no order {order}"

    def says_the_status(request: agents.ModelRequest) -> str:
        (result,) = [e for e in request.entries if isinstance(e, agents.ToolResultEntry)]
        return result.text

    def step(request: agents.ModelRequest) -> agents.ModelReply:
        return call_tool("order_status", order=str(request.entries[-1].text))

    agent = agents.Agent(
        "orders",
        model=agents.ScriptedModel([step, says_the_status]),
        tools=[order_status],
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with asyncpg.create_pool(POSTGRES, min_size=1, max_size=3) as pool:
            await pool.execute(f"CREATE SCHEMA {postgres_schema}")
            await pool.execute(f"CREATE TABLE {orders} (id text PRIMARY KEY, status text)")
            await pool.executemany(
                f"INSERT INTO {orders} VALUES ($1, $2)",
                [(f"A-{n}", "shipped" if n % 2 else "packed") for n in range(6)],
            )
            pools.append(pool)
            yield

    async def main() -> list[dict[str, Any]]:
        app = chat_app(agent)
        app.router.lifespan_context = lifespan
        return await chats(app, [f"A-{n}" for n in range(6)])

    answers = run(main)
    assert sorted(answer["answer"] for answer in answers) == sorted(
        f"A-{n} is {'shipped' if n % 2 else 'packed'}" for n in range(6)
    )


def test_concurrent_chats_each_get_their_answer() -> None:
    async def main() -> list[dict[str, Any]]:
        def answer(request: agents.ModelRequest) -> str:
            return f"you said {request.entries[-1].text}"

        return await chats(chat_app(scripted_agent(answer)), [f"hi {n}" for n in range(10)])

    answers = run(main)
    assert [answer["answer"] for answer in answers] == [f"you said hi {n}" for n in range(10)]
    assert len({answer["session"] for answer in answers}) == 10


def test_a_client_that_leaves_a_stream_of_events_leaves_nothing_of_it_in_the_engine() -> None:
    """Starlette ends a streamed response whose client has gone by cancelling it with an
    anyio cancel scope: the engine has ended the follow by the time the response has."""

    async def main() -> agents.TurnState[Any]:
        gate = Gate("finished after the client left")
        agent = scripted_agent(gate)
        resumed = asyncio.Event()
        ended = asyncio.Event()

        async def follow(request: Request) -> StreamingResponse:
            session = await agent.start_session()
            turn = await session.start_turn("a long job")
            assert isinstance(turn, agents.Turn)
            turns.append(turn)

            async def lines() -> AsyncIterator[str]:
                try:
                    async for event in turn.iter_events():
                        if isinstance(event, agents.TurnStarted):
                            yield "TurnStarted\n"
                            # Starlette asks for the next line: the first one was sent, and
                            # the stream waits in the door for the next event. (Cancelled
                            # while it sends instead, Starlette leaves the generator to be
                            # closed when it is collected.)
                            resumed.set()
                finally:
                    ended.set()

            return StreamingResponse(lines(), media_type="text/plain")

        turns: list[agents.Turn] = []
        stop = asyncio.Event()
        app = Starlette(routes=[Route("/follow", follow)])
        server, url = await serving(app, stop)
        try:
            async with (
                httpx.AsyncClient(base_url=url, trust_env=False) as client,
                client.stream("GET", "/follow") as response,
            ):
                async for line in response.aiter_lines():
                    assert line == "TurnStarted"
                    await resumed.wait()
                    break  # the client goes: it closes the connection
            await ended.wait()
            assert calls_in_engine() == 0
            (turn,) = turns
            assert isinstance(await turn.get(), agents.Running)  # it goes on without them
            await gate.open()
            return await turn.result()
        finally:
            stop.set()
            await server

    record = run(main)
    assert isinstance(record, agents.Completed)
    assert record.output == "finished after the client left"
