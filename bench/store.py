"""The SQLite store: events appended and replayed per second, and bytes on disk per event.

Usage::

    python bench/store.py [N] [--dir DIR]

Prints one JSON line per figure:

- ``append_single``: one session; events are appended as a turn appends them (without
  waiting for each), then acknowledged together. Group commit turns them into few
  transactions.
- ``append_concurrent``: 100 sessions at once; each appends a turn's worth of events (10)
  and waits for their acknowledgement, again and again. Every caller is acknowledged only
  after its events are committed; concurrent callers share commits.
- ``replay``: in a new runtime on the file, a reader replays the session's whole log from
  its start with ``session.iter_events()``: the session is opened, and every event is read
  back from disk, a page at a time, and decoded.
- ``replay_live``: a reader replays the events a runtime holds in memory (a session it
  runs on ``":memory:"``; on SQLite, a runtime holds the last few thousand events of each
  session), as readers following a live session do.
- ``bytes_per_event``: the database file's size (after a checkpoint) over the events in it.

The events are those of real turns: a user message, a tool call and its result, the answer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import platform
import sqlite3
import tempfile
import time
from typing import Any

import trio

import agentlib
from agentlib._store._base import EventRow, SessionRow

CONCURRENT = 100
PER_ACK = 10


def emit(**figures: object) -> None:
    print(json.dumps({"framework": "agentlib", "python": platform.python_version(), **figures}))


def events(session_id: str, start: int, count: int) -> list[agentlib.Event]:
    """``count`` events of ``session_id`` from seq ``start``, as turns write them: a user
    message, a tool call and its result, then the answer (10 events a turn)."""
    made: list[agentlib.Event] = []
    seq = start
    while len(made) < count:
        turn = f"turn-{seq}"
        user = agentlib.MessageEntry(
            id=f"u{seq}",
            turn_id=turn,
            role="user",
            content=(agentlib.TextContentBlock(text="What is the weather in Paris today?"),),
        )
        call = agentlib.ToolCallEntry(
            id=f"c{seq}",
            turn_id=turn,
            name="get_weather",
            arguments={"city": "Paris"},
            tool_call_id="abc123XYZ",
        )
        result = agentlib.ToolResultEntry(
            id=f"r{seq}",
            turn_id=turn,
            name="get_weather",
            content=(agentlib.TextContentBlock(text='{"sky": "sunny", "celsius": 21}'),),
            tool_call_id="abc123XYZ",
        )
        answer = agentlib.MessageEntry(
            id=f"a{seq}",
            turn_id=turn,
            role="assistant",
            content=(agentlib.TextContentBlock(text="It is sunny in Paris, 21 °C."),),
        )
        record = agentlib.Completed(
            turn_id=turn,
            session_id=session_id,
            output=None,
            text="It is sunny.",
            tool_calls=(call,),
        )
        kinds: list[tuple[type[Any], dict[str, Any]]] = [(agentlib.TurnStarted, {"message": user})]
        for entry in (user, call, result, answer):
            kinds += [
                (agentlib.EntryAdded, {"entry": entry}),
                (agentlib.EntryCompleted, {"entry": entry}),
            ]
        kinds.append((agentlib.TurnEnded, {"record": record}))
        for kind, fields in kinds:
            made.append(
                kind(id=f"{session_id}:{seq:012d}", session_id=session_id, turn_id=turn, **fields)
            )
            seq += 1
    return made[:count]


async def append_single(path: str, n: int) -> float:
    store = agentlib.SQLiteStore(path)
    async with trio.open_nursery() as nursery:
        await store.open(nursery.start_soon)
        store.write(SessionRow("single", "bench"))
        batch = events("single", 1, n)
        start = time.perf_counter()
        for seq, event in enumerate(batch, start=1):
            store.write(EventRow("single", seq, event))
        await store.flush()
        seconds = time.perf_counter() - start
        await store.aclose()
    return n / seconds


async def append_concurrent(path: str, n: int) -> float:
    store = agentlib.SQLiteStore(path)
    rounds = max(1, n // (CONCURRENT * PER_ACK))

    made = {
        f"session-{index}": events(f"session-{index}", 1, rounds * PER_ACK)
        for index in range(CONCURRENT)
    }

    async def writer(session_id: str) -> None:
        store.write(SessionRow(session_id, "bench"))
        mine = made[session_id]
        for turn in range(rounds):
            for offset in range(turn * PER_ACK, (turn + 1) * PER_ACK):
                store.write(EventRow(session_id, offset + 1, mine[offset]))
            await store.flush()  # acknowledged only once committed

    async with trio.open_nursery() as nursery:
        await store.open(nursery.start_soon)
        start = time.perf_counter()
        async with trio.open_nursery() as writers:
            for index in range(CONCURRENT):
                writers.start_soon(writer, f"session-{index}")
        seconds = time.perf_counter() - start
        await store.aclose()
    return rounds * CONCURRENT * PER_ACK / seconds


async def replay(path: str, n: int) -> float:
    """Events per second a reader gets from ``session.iter_events()`` in a new runtime: all
    of them read back from disk."""
    agent = agentlib.Agent("bench", model=agentlib.ScriptedModel([]))
    async with agentlib.open_runtime(f"sqlite:///{path}"):
        start = time.perf_counter()
        count = 0
        async with contextlib.aclosing(agent.session("single").iter_events()) as events:
            async for _ in events:
                count += 1
                if count == n:
                    break
        seconds = time.perf_counter() - start
    return count / seconds


async def replay_live(turns: int) -> tuple[float, int]:
    """Events per second a reader gets from ``session.iter_events()`` of the events its
    runtime holds: a session that just ran ``turns`` turns (tool call, then answer)."""

    def weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    steps: list[Any] = []
    for _ in range(turns):
        steps += [
            agentlib.ModelReply(
                tool_calls=[agentlib.ToolCallRequest(name="weather", arguments={"city": "Paris"})]
            ),
            "It is sunny.",
        ]
    agent = agentlib.Agent(
        "bench", model=agentlib.ScriptedModel(steps), tools=[agentlib.tool(weather)]
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        for _ in range(turns):
            await session.run("What is the weather in Paris?")
        last = (await session.run("bye")).cursor  # type: ignore[union-attr]
        start = time.perf_counter()
        count = 0
        async with contextlib.aclosing(session.iter_events()) as events:
            async for event in events:
                count += 1
                if event.id == last:
                    break
        seconds = time.perf_counter() - start
    return count / seconds, count


def bytes_per_event(path: str) -> float:
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        count = db.execute("SELECT count(*) FROM events").fetchone()[0]
    return os.path.getsize(path) / count


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("n", nargs="?", type=int, default=100_000)
    parser.add_argument("--dir", default=None, help="where to put the database (default: tmp)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        path = str(pathlib.Path(directory) / "bench.db")
        emit(mode="append_single", n=args.n, events_per_s=trio.run(append_single, path, args.n))
        emit(
            mode="append_concurrent",
            sessions=CONCURRENT,
            events_per_ack=PER_ACK,
            events_per_s=trio.run(append_concurrent, path, args.n),
        )
        emit(mode="replay", n=args.n, events_per_s=trio.run(replay, path, args.n))
        per_second, count = trio.run(replay_live, max(1, args.n // 10_000) * 100)
        emit(mode="replay_live", n=count, events_per_s=per_second)
        emit(mode="bytes_per_event", bytes=bytes_per_event(path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
