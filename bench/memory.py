"""What sessions and turns cost in memory: held, parked, and many durable sessions.

Usage::

    python bench/memory.py held [N]        # N in-memory sessions, one finished turn each
    python bench/memory.py inflight [N]    # N turns parked at once inside the model call
    python bench/memory.py parked [N]      # N turns blocked at once on a tool approval
    python bench/memory.py durable [N]     # N SQLite sessions, each touched once
    python bench/memory.py all             # each of the above, in a process of its own
    python bench/memory.py all --peers PYTHON   # also the peers' held and inflight

The workload is the peers' (shared bench README): the model asks for ``add(a=1, b=2)`` and
then answers "The answer is 3." Figures are the growth of the process's resident memory
(RSS, after a garbage collection) divided by N. Prints one JSON line per figure.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import platform
import resource
import subprocess
import sys
import tempfile
from typing import Any

import trio

import agentlib

DEFAULTS = {"held": 10_000, "inflight": 10_000, "parked": 10_000, "durable": 100_000}


def peers_dir() -> pathlib.Path:
    """The peers' scripts: ``shared/bench/peers`` beside the checkout or one of its parents."""
    for parent in pathlib.Path(__file__).resolve().parents:
        if (parent / "shared" / "bench" / "peers").is_dir():
            return parent / "shared" / "bench" / "peers"
    raise SystemExit("no shared/bench/peers directory above this checkout")


def rss_kib() -> float:
    """This process's resident memory now, in KiB, after a full collection."""
    gc.collect()
    with open("/proc/self/statm") as statm:
        resident = int(statm.read().split()[1])
    return resident * resource.getpagesize() / 1024


def emit(**figures: object) -> None:
    print(json.dumps({"framework": "agentlib", "python": platform.python_version(), **figures}))


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def answer(request: agentlib.ModelRequest) -> agentlib.ModelReply:
    """The scripted workload: call add(1, 2) first, then answer."""
    if any(isinstance(entry, agentlib.ToolResultEntry) for entry in request.entries):
        return agentlib.ModelReply(text="The answer is 3.")
    call = agentlib.ToolCallRequest(name="add", arguments={"a": 1, "b": 2})
    return agentlib.ModelReply(tool_calls=[call])


def agent(**options: Any) -> agentlib.Agent[str]:
    return agentlib.Agent(
        "calc", "You add numbers.", agentlib.FunctionModel(answer), [add], **options
    )


async def held(n: int) -> None:
    """N sessions, each holding one finished turn, held by the caller and the runtime."""
    calc = agent()
    async with agentlib.open_runtime():
        await (await calc.start_session()).run("warm")
        before = rss_kib()
        sessions = []
        for i in range(n):
            session = await calc.start_session()
            record = await session.run(f"conversation {i}: add 1 and 2")
            assert isinstance(record, agentlib.Completed), record
            sessions.append(session)
        after = rss_kib()
    emit(mode="held", n=n, rss_before_kib=before, rss_after_kib=after,
         kib_per_session=(after - before) / n)  # fmt: skip


async def inflight(n: int) -> None:
    """N turns at once, each parked inside its first model call."""
    gate = trio.Event()
    parked = 0

    async def slow(request: agentlib.ModelRequest) -> agentlib.ModelReply:
        nonlocal parked
        if not request.entries or not isinstance(request.entries[-1], agentlib.ToolResultEntry):
            parked += 1
            await gate.wait()
        return answer(request)

    calc = agentlib.Agent("calc", "You add numbers.", agentlib.FunctionModel(slow), [add])
    async with agentlib.open_runtime():
        warm = await calc.start_session()
        gate.set()
        await warm.run("warm")
        gate = trio.Event()
        parked = 0
        before = rss_kib()
        turns = []
        for i in range(n):
            session = await calc.start_session()
            turns.append(await session.start_turn(f"conversation {i}"))
        while parked < n:
            await trio.sleep(0.01)
        after = rss_kib()
        gate.set()
        for turn in turns:
            assert isinstance(await turn.result(), agentlib.Completed)
    emit(mode="inflight", n=n, rss_before_kib=before, rss_after_kib=after,
         kib_per_inflight_turn=(after - before) / n)  # fmt: skip


async def parked(n: int) -> None:
    """N turns at once, each blocked on the approval of its tool call."""
    guarded = agentlib.tool(requires_approval=True)(add)
    calc = agentlib.Agent("calc", "You add numbers.", agentlib.FunctionModel(answer), [guarded])
    async with agentlib.open_runtime():
        warm = await calc.start_session()
        record = await warm.run("warm")
        assert isinstance(record, agentlib.Blocked), record
        before = rss_kib()
        turns = []
        for i in range(n):
            session = await calc.start_session()
            turn = await session.start_turn(f"conversation {i}")
            assert isinstance(await turn.result(), agentlib.Blocked)
            turns.append(turn)
        after = rss_kib()
    emit(mode="parked", n=n, rss_before_kib=before, rss_after_kib=after,
         kib_per_parked_turn=(after - before) / n)  # fmt: skip


async def durable(n: int) -> None:
    """N sessions of a SQLite store, each started, run once and let go."""
    calc = agent()
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{directory}/sessions.db"
        async with agentlib.open_runtime(url) as runtime:
            # The first tenth fills whatever bounded caches there are.
            warm = n // 10
            samples = []
            before = 0.0
            blocks_before = 0
            for i in range(n):
                session = await calc.start_session()
                record = await session.run(f"conversation {i}: add 1 and 2")
                assert isinstance(record, agentlib.Completed), record
                del session
                if i + 1 == warm:
                    before = rss_kib()
                    gc.collect()
                    blocks_before = sys.getallocatedblocks()
                if (i + 1) % (n // 5) == 0:
                    samples.append(round(rss_kib()))
            after = rss_kib()
            gc.collect()
            blocks_after = sys.getallocatedblocks()
            held_sessions = len(runtime._sessions)
        size = os.path.getsize(f"{directory}/sessions.db")
    emit(mode="durable", n=n, rss_after_first_tenth_kib=before, rss_after_kib=after,
         rss_samples_kib=samples, growth_kib=after - before,
         bytes_per_session_after_first_tenth=(after - before) * 1024 / (n - warm),
         sessions_held_by_runtime=held_sessions, file_bytes=size,
         # Python's own objects (RSS also holds SQLite's page cache, up to its cache_size).
         python_blocks_after_first_tenth=blocks_before, python_blocks_after=blocks_after,
         python_blocks_per_session_after_first_tenth=(blocks_after - blocks_before)
         / (n - warm))  # fmt: skip


MODES = {"held": held, "inflight": inflight, "parked": parked, "durable": durable}


def run_peers(python: str) -> None:
    for script_name in ("bench_pydantic_ai.py", "bench_openai_agents.py"):
        for mode in ("held", "inflight"):
            done = subprocess.run(
                [python, str(peers_dir() / script_name), mode, str(DEFAULTS[mode] // 10)],
                capture_output=True,
                text=True,
                check=True,
            )
            print(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=[*MODES, "all"])
    parser.add_argument("n", nargs="?", type=int, help="sessions or turns")
    parser.add_argument("--peers", metavar="PYTHON", help="an interpreter with the peer SDKs")
    args = parser.parse_args()
    if args.mode == "all":
        for mode in MODES:
            command = [sys.executable, __file__, mode]
            if args.n:
                command.append(str(args.n))
            subprocess.run(command, check=True)
        if args.peers:
            run_peers(args.peers)
        return
    trio.run(MODES[args.mode], args.n or DEFAULTS[args.mode])


if __name__ == "__main__":
    main()
