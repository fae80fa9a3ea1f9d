"""Deployed sessions: turns through a server, event delivery, idle event-stream subscribers.

The server is ``python -m agentlib serve`` in a process of its own, on 127.0.0.1, serving
this module's ``calculator`` (the scripted workload of ``turns.py``) from memory; the
clients run here, through ``agentlib.Agent.load_from``.

Usage::

    python bench/serve.py [--sessions 200] [--turns 5] [--subscribers 1000]

Prints one JSON line per figure:

- ``turns``: ``--sessions`` sessions at once, each running ``--turns`` turns: turns per
  second, and the p50/p99 of ``run`` (start to record) in ms;
- ``delivery``: for 200 turns, one after the other, from the moment the client sends
  ``start_turn`` to the moment another client, reading the session's events, receives the
  turn's ``TurnStarted``: an upper bound of commit-to-client delivery, p50/p99 in ms;
- ``commit_to_frame``: for 200 turns of the ``stamp`` agent, one after the other, whose
  async tool returns the server's monotonic clock (which every process of the machine
  shares): from then, which is when its result's event is committed give or take the
  engine's append, to the moment a client holding a Server-Sent Events stream of the session
  has read that event's frame, p50/p99 in ms;
- ``subscribers``: the server's RSS before and after ``--subscribers`` Server-Sent Event
  streams (one per idle session) are open, and the KiB each adds.

Figures, not tests: compare them from one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import trio

import agentlib

HERE = pathlib.Path(__file__).resolve().parent


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def calls_then(call: agentlib.ToolCallRequest, answer: str) -> agentlib.FunctionModel:
    """A model that calls ``call``, then, given its result, answers ``answer``."""
    return agentlib.FunctionModel(
        lambda request: (
            answer
            if request.entries[-1].type == "tool_result"
            else agentlib.ModelReply(tool_calls=[call])
        )
    )


_CALL = agentlib.ToolCallRequest(name="add", arguments={"a": 1, "b": 2})
calculator = agentlib.Agent(
    "calc", "You add numbers.", calls_then(_CALL, "The answer is 3."), [add]
)


async def stamp() -> float:
    """The engine's clock now: the moment this tool's result is appended, give or take."""
    return time.perf_counter()  # CLOCK_MONOTONIC, which every process of the machine shares


_STAMP = agentlib.ToolCallRequest(name="stamp", arguments={})
stamper = agentlib.Agent("stamp", "You read the clock.", calls_then(_STAMP, "Read."), [stamp])
agents = [calculator, stamper]


@contextlib.contextmanager
def server() -> Iterator[tuple[str, int]]:
    """``agentlib serve`` on a free port: its URL and pid, until the block ends."""
    command = [sys.executable, "-m", "agentlib", "serve", "serve:agents", "--port", "0"]
    process = subprocess.Popen(command, cwd=HERE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if " on http" not in line:
            raise SystemExit(f"the server did not start: {line!r}")
        yield line.split(" on ")[1].split("/v1")[0], process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def rss_kib(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit("no VmRSS: this figure needs Linux's /proc")


def ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)


def emit(**values: Any) -> None:
    print(json.dumps({"framework": "agentlib", **values}), flush=True)


async def turns(url: str, sessions: int, per_session: int) -> None:
    remote = agentlib.Agent.load_from(url, "calc")
    times: list[float] = []

    async def one() -> None:
        session = await remote.start_session()
        for _ in range(per_session):
            start = time.perf_counter()
            record = await session.run("add 1 and 2")
            times.append(time.perf_counter() - start)
            assert isinstance(record, agentlib.Completed), record

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(sessions):
            nursery.start_soon(one)
    seconds = time.perf_counter() - started
    emit(
        mode="turns",
        sessions=sessions,
        turns=len(times),
        turns_per_s=round(len(times) / seconds, 1),
        run_p50_ms=ms(times, 0.5),
        run_p99_ms=ms(times, 0.99),
    )


async def delivery(url: str, count: int = 200) -> None:
    remote = agentlib.Agent.load_from(url, "calc")
    session = await remote.start_session()
    sent = 0.0  # when the turn now started was sent
    lags: list[float] = []
    seen = trio.Event()

    async def read() -> None:
        async with contextlib.aclosing(remote.session(session.id).iter_events()) as events:
            async for event in events:
                if isinstance(event, agentlib.TurnStarted):
                    lags.append(time.perf_counter() - sent)
                    seen.set()
                    if len(lags) == count:
                        return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        for _ in range(count):
            seen = trio.Event()
            sent = time.perf_counter()
            turn = await session.start_turn("add 1 and 2")
            assert isinstance(turn, agentlib.Turn)
            await seen.wait()
            await turn.result()
    emit(
        mode="delivery",
        turns=count,
        send_to_reader_p50_ms=ms(lags, 0.5),
        send_to_reader_p99_ms=ms(lags, 0.99),
        note="start_turn sent -> its TurnStarted read by another client: an upper bound",
    )


async def commit_to_frame(url: str, count: int = 200) -> None:
    remote = agentlib.Agent.load_from(url, "stamp")
    session = await remote.start_session()
    lags: list[float] = []
    seen = trio.Event()

    async def read(client: httpx.AsyncClient, task_status: Any) -> None:
        nonlocal seen
        path = f"{url}/v1/agents/stamp/sessions/{session.id}/events"
        headers = {"accept": "text/event-stream"}
        async with client.stream("GET", path, headers=headers) as response:
            task_status.started()
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                read_at = time.perf_counter()
                data = json.loads(line[6:])
                entry = data.get("entry") or {}
                if data.get("type") == "entry_added" and entry.get("type") == "tool_result":
                    lags.append(read_at - entry["structured_content"])
                    seen.set()
                    if len(lags) == count:
                        return

    async with httpx.AsyncClient(timeout=None) as client, trio.open_nursery() as nursery:
        await nursery.start(read, client)
        for _ in range(count):
            seen = trio.Event()
            record = await session.run("What time is it?")
            assert isinstance(record, agentlib.Completed), record
            await seen.wait()
    emit(
        mode="commit_to_frame",
        turns=count,
        p50_ms=ms(lags, 0.5),
        p99_ms=ms(lags, 0.99),
        goal_ms="2 / 10",
        note="a tool result's commit (the tool's clock) -> its SSE frame read by a client",
    )


async def subscribers(url: str, pid: int, count: int) -> None:
    remote = agentlib.Agent.load_from(url, "calc")
    ids = [(await remote.start_session()).id for _ in range(count)]
    before = rss_kib(pid)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    opened = 0
    async with httpx.AsyncClient(limits=limits, timeout=None) as client:

        async def subscribe(session_id: str, task_status: Any) -> None:
            nonlocal opened
            path = f"{url}/v1/agents/calc/sessions/{session_id}/events"
            headers = {"accept": "text/event-stream"}
            async with client.stream("GET", path, headers=headers) as response:
                assert response.status_code == 200
                opened += 1
                task_status.started()
                await trio.sleep_forever()

        async with trio.open_nursery() as nursery:
            for session_id in ids:
                await nursery.start(subscribe, session_id)
            await trio.sleep(1.0)  # let the server settle before reading its RSS
            after = rss_kib(pid)
            nursery.cancel_scope.cancel()
    emit(
        mode="subscribers",
        subscribers=opened,
        server_rss_before_kib=before,
        server_rss_after_kib=after,
        kib_per_subscriber=round((after - before) / opened, 1),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--subscribers", type=int, default=1000)
    args = parser.parse_args()
    with server() as (url, pid):
        trio.run(turns, url, args.sessions, args.turns)
        trio.run(delivery, url)
        trio.run(commit_to_frame, url)
        trio.run(subscribers, url, pid, args.subscribers)
        emit(mode="server_rss", rss_kib=rss_kib(pid))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
