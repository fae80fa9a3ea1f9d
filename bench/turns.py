"""Turns per second of a scripted turn, and the blocking facade's round trip.

The workload is the peers' (shared bench README): the model asks for ``add(a=1, b=2)``, the
tool (a plain sync function) runs, the model answers "The answer is 3." Each turn runs in a
fresh session, as each peer turn runs in a fresh conversation.

Usage::

    python bench/turns.py [N]                      # agentlib only
    python bench/turns.py [N] --peers PYTHON       # also the peers, with their interpreter

Prints one JSON line per figure. Compare ratios from one run, never absolute times across runs.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import statistics
import subprocess
import sys
import time

import trio

import agentlib
import agentlib_sync
from agentlib_sync._portal import portal

WARMUP = 50
PEERS = pathlib.Path(__file__).resolve().parents[2] / "shared" / "bench" / "peers"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script() -> list[agentlib.ModelReply | str]:
    call = agentlib.ToolCallRequest(name="add", arguments={"a": 1, "b": 2})
    return [agentlib.ModelReply(tool_calls=[call]), "The answer is 3."]


def emit(**figures: object) -> None:
    print(json.dumps({"framework": "agentlib", "python": platform.python_version(), **figures}))


def bench_async(n: int) -> float:
    agent = agentlib.Agent("calc", "You add numbers.", agentlib.ScriptedModel(script()), [add])

    async def turns(count: int) -> None:
        for _ in range(count):
            session = await agent.start_session()
            record = await session.run("add 1 and 2")
            assert isinstance(record, agentlib.Completed), record

    async def main() -> float:
        async with agentlib.open_runtime():
            await turns(WARMUP)
            start = time.perf_counter()
            await turns(n)
            return time.perf_counter() - start

    return trio.run(main)


def bench_sync(n: int) -> float:
    agent = agentlib_sync.Agent(
        "calc", "You add numbers.", agentlib_sync.ScriptedModel(script()), [add]
    )

    def turns(count: int) -> None:
        for _ in range(count):
            record = agent.start_session().run("add 1 and 2")
            assert isinstance(record, agentlib.Completed), record

    turns(WARMUP)
    start = time.perf_counter()
    turns(n)
    return time.perf_counter() - start


def bench_round_trip(n: int) -> float:
    async def nothing() -> None:
        return None

    for _ in range(200):
        portal.call(nothing)
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        portal.call(nothing)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def run_peers(python: str) -> None:
    for script_name in ("bench_pydantic_ai.py", "bench_openai_agents.py"):
        for mode in ("sync", "async"):
            done = subprocess.run(
                [python, str(PEERS / script_name), mode],
                capture_output=True,
                text=True,
                check=True,
            )
            print(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("n", nargs="?", type=int, default=2000, help="turns per mode")
    parser.add_argument("--peers", metavar="PYTHON", help="an interpreter with the peer SDKs")
    args = parser.parse_args()
    for mode, bench in (("async", bench_async), ("sync", bench_sync)):
        seconds = bench(args.n)
        emit(mode=mode, n=args.n, turns_per_s=args.n / seconds, us_per_turn=seconds / args.n * 1e6)
    emit(mode="round_trip", n=5000, us_median=bench_round_trip(5000) * 1e6)
    if args.peers:
        run_peers(args.peers)


if __name__ == "__main__":
    sys.exit(main())
