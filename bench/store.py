"""A store's figures: events appended and replayed per second; for SQLite, bytes on disk per
event; for PostgreSQL, delivery to another process and turns per second with several runtimes.

Usage::

    python bench/store.py [N] [--dir DIR]                  # the SQLite store
    python bench/store.py [N] --store postgresql://HOST/DB  # the PostgreSQL store

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

With ``--store postgresql://...`` (in a schema of its own, dropped at the end), the append
and replay figures, and:

- ``delivery``: a runtime process runs 200 turns, one after the other, of an agent whose
  async tool returns the machine's monotonic clock (which every process shares); a runtime
  in this process follows the session (another runtime holds it) and reads each tool
  result's event: from the tool's return (its event committed, give or take the append) to
  the read, p50/p99 in ms;
- ``failover``: a runtime process holds a turn blocked on an approval and stalls (SIGSTOP:
  its process lives on, as one on another host would, for all this one knows); a runtime in
  this process answers the approval and waits for the turn: the seconds from the stall to
  the turn's end, which another runtime can bring about only once the stalled one's lease
  (10 s) has run out, three times;
- ``turns``: 1, 2 and 3 runtime processes on the database, each running 20 sessions at once
  for 10 s: turns per second, all processes together.

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
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
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


StoreFor = Callable[[], agentlib.Store]


async def append_single(make: StoreFor, n: int) -> float:
    store = make()
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


async def append_concurrent(make: StoreFor, n: int) -> float:
    store = make()
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


async def replay(make: StoreFor, n: int) -> float:
    """Events per second a reader gets from ``session.iter_events()`` in a new runtime: all
    of them read back from the store."""
    agent = agentlib.Agent("bench", model=agentlib.ScriptedModel([]))
    async with agentlib.open_runtime(make()):
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
    parser.add_argument("--store", default=None, help="postgresql://...: that store instead")
    args = parser.parse_args()
    if args.store is not None:
        return postgres(args.store, args.n)
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        path = str(pathlib.Path(directory) / "bench.db")

        def make() -> agentlib.Store:
            return agentlib.SQLiteStore(path)

        emit(mode="append_single", n=args.n, events_per_s=trio.run(append_single, make, args.n))
        emit(
            mode="append_concurrent",
            sessions=CONCURRENT,
            events_per_ack=PER_ACK,
            events_per_s=trio.run(append_concurrent, make, args.n),
        )
        emit(mode="replay", n=args.n, events_per_s=trio.run(replay, make, args.n))
        per_second, count = trio.run(replay_live, max(1, args.n // 10_000) * 100)
        emit(mode="replay_live", n=count, events_per_s=per_second)
        emit(mode="bytes_per_event", bytes=bytes_per_event(path))
    return 0


# -- PostgreSQL ----------------------------------------------------------------------------


#: A runtime process on the bench's schema. ``deliver``: one session of the ``stamp`` agent,
#: printing its id, then 200 turns once a line comes on its input. ``turns``: 20 sessions
#: at once running turns of the scripted workload for the seconds given, then the count.
RUNTIME = """
import sys, time, trio, agentlib
from agentlib.store import PostgresStore

url, schema, mode, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])


async def stamp() -> float:
    \"\"\"The machine's monotonic clock.\"\"\"
    return time.perf_counter()


def add(a: int, b: int) -> int:
    \"\"\"Add two integers.\"\"\"
    return a + b


def model(name):
    arguments = {"add": {"a": 1, "b": 2}, "delete": {"path": "a.txt"}}.get(name, {})
    call = agentlib.ToolCallRequest(name=name, arguments=arguments)
    return agentlib.FunctionModel(
        lambda request: "done" if request.entries[-1].type == "tool_result"
        else agentlib.ModelReply(tool_calls=[call])
    )


@agentlib.tool(requires_approval=True)
def delete(path: str) -> str:
    \"\"\"Delete a file.\"\"\"
    return f"deleted {path}"


async def main():
    async with agentlib.open_runtime(PostgresStore(url, schema=schema)):
        if mode == "hold":
            agent = agentlib.Agent("janitor", model=model("delete"), tools=[delete])
            session = await agent.start_session()
            record = await session.run("clean up")
            print(session.id, record.turn_id, record.callbacks[0].id, flush=True)
            await trio.sleep_forever()
        if mode == "deliver":
            agent = agentlib.Agent("stamp", model=model("stamp"), tools=[stamp])
            session = await agent.start_session()
            print(session.id, flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)
            for _ in range(200):
                await session.run("now?")
                await trio.sleep(0.005)
            return
        agent = agentlib.Agent("calc", model=model("add"), tools=[add])
        count = 0
        await trio.to_thread.run_sync(sys.stdin.readline)  # all processes start together
        deadline = trio.current_time() + seconds

        async def one():
            nonlocal count
            session = await agent.start_session()
            while trio.current_time() < deadline:
                await session.run("add 1 and 2")
                count += 1

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(one)
        print(count, flush=True)


trio.run(main)
"""


def runtime(url: str, schema: str, mode: str, seconds: float = 0) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", RUNTIME, url, schema, mode, str(seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


async def delivery(url: str, schema: str) -> list[float]:
    from agentlib.store import PostgresStore

    process = runtime(url, schema, "deliver")
    assert process.stdin is not None
    assert process.stdout is not None
    session_id = process.stdout.readline().strip()
    agent = agentlib.Agent("stamp", model=agentlib.ScriptedModel([]))
    lags: list[float] = []
    async with agentlib.open_runtime(PostgresStore(url, schema=schema)):
        reader = agent.session(session_id)
        process.stdin.write("go\n")
        process.stdin.flush()
        async with contextlib.aclosing(reader.iter_events()) as followed:
            async for event in followed:
                entry = getattr(event, "entry", None)
                if isinstance(event, agentlib.EntryAdded) and entry.type == "tool_result":
                    lags.append(time.perf_counter() - entry.structured_content)
                    if len(lags) == 200:
                        break
    process.wait(timeout=120)
    return lags


async def failover(url: str, schema: str) -> float:
    """Seconds from the moment the runtime holding a blocked turn stalls (SIGSTOP: its
    process lives on, as one on another host would for all this one knows) to the turn's
    end in a runtime of this process, which answered its approval and waited for it."""
    import signal

    from agentlib.store import PostgresStore

    process = runtime(url, schema, "hold")
    assert process.stdout is not None
    session_id, turn_id, callback_id = process.stdout.readline().split()
    answers = agentlib.FunctionModel(lambda request: "done")  # after the tool: as the holder's
    agent = agentlib.Agent("janitor", model=answers, tools=[delete])
    try:
        async with agentlib.open_runtime(PostgresStore(url, schema=schema)):
            turn = agent.session(session_id).turn(turn_id)
            process.send_signal(signal.SIGSTOP)
            start = time.perf_counter()
            await turn.answer(callback_id, agentlib.AllowApproval())
            record = await turn.result()
            elapsed = time.perf_counter() - start
            assert isinstance(record, agentlib.Completed), record
    finally:
        process.kill()
        process.wait(timeout=60)
    return elapsed


@agentlib.tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def turns_per_second(url: str, schema: str, processes: int, seconds: float = 10.0) -> float:
    started = [runtime(url, schema, "turns", seconds) for _ in range(processes)]
    time.sleep(2.0)  # each opens its runtime before they all start
    for process in started:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    counts = [int(process.communicate(timeout=120)[0].split()[-1]) for process in started]
    return sum(counts) / seconds


def postgres(url: str, n: int) -> int:
    import psycopg

    from agentlib.store import PostgresStore

    schema = f"bench_{uuid.uuid4().hex[:12]}"

    def make() -> agentlib.Store:
        return PostgresStore(url, schema=schema)

    try:
        emit(mode="append_single", store="postgresql", n=n,
             events_per_s=trio.run(append_single, make, n))  # fmt: skip
        emit(
            mode="append_concurrent",
            store="postgresql",
            sessions=CONCURRENT,
            events_per_ack=PER_ACK,
            events_per_s=trio.run(append_concurrent, make, n),
        )
        emit(mode="replay", store="postgresql", n=n, events_per_s=trio.run(replay, make, n))
        lags = sorted(trio.run(delivery, url, schema))
        emit(
            mode="delivery",
            store="postgresql",
            turns=len(lags),
            p50_ms=round(lags[len(lags) // 2] * 1000, 2),
            p99_ms=round(lags[min(len(lags) - 1, int(len(lags) * 0.99))] * 1000, 2),
            goal_ms="10 / 50",
        )
        waits = [trio.run(failover, url, schema) for _ in range(3)]
        emit(
            mode="failover",
            store="postgresql",
            lease_s=10,
            seconds=[round(wait, 2) for wait in waits],
            goal_s="lease + 5 = 15",
        )
        for processes in (1, 2, 3):
            emit(mode="turns", store="postgresql", runtimes=processes,
                 turns_per_s=round(turns_per_second(url, schema, processes), 1))  # fmt: skip
    finally:
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
