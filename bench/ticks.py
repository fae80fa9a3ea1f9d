"""The asyncio loop's lateness while turns run: the measure ``turns.py --mode concurrent``
takes of agentlib, and the same of the peers, whose turns run on the loop itself.

Usage::

    PYTHON bench/ticks.py [N]   # PYTHON: an interpreter with the peer SDKs

A task that sleeps 1 ms records how late each of its wake-ups is while N (2,000) scripted
turns of each peer (the shared bench's agents: the model asks for ``add``, the tool runs, the
model answers) run on the same loop, 20 at a time, after 50 warm-up turns. Prints one JSON
line per peer: its ticks' worst, 99th and 90th percentiles and median lateness. This file
imports nothing of agentlib's: ``turns.py`` takes its ticker from here.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

#: How long the loop's ticker sleeps between ticks (seconds).
TICK = 0.001
#: Turns at once.
CONCURRENT = 20
WARMUP = 50


async def tick_gaps(work: Callable[[], Awaitable[Any]]) -> list[float]:
    """How late (seconds) each wake-up of a task that sleeps 1 ms is while ``work()`` runs
    on this loop."""
    late: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            await asyncio.sleep(TICK)
            late.append(time.perf_counter() - start - TICK)

    ticking = asyncio.ensure_future(ticker())
    await asyncio.sleep(0)
    try:
        await work()
    finally:
        stop.set()
        await ticking
    return late


def lateness(late: list[float]) -> dict[str, Any]:
    """The figures printed of a run's ticks (ms)."""
    ordered = sorted(late)
    return {
        "ticks": len(late),
        "tick_ms": TICK * 1000,
        "worst_ms": round(ordered[-1] * 1000, 2),
        "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 2),
        "p90_ms": round(ordered[int(len(ordered) * 0.9)] * 1000, 2),
        "median_ms": round(statistics.median(ordered) * 1000, 3),
    }


def peers_dir() -> pathlib.Path:
    """The peers' scripts: ``shared/bench/peers`` beside the checkout or one of its parents."""
    for parent in pathlib.Path(__file__).resolve().parents:
        if (parent / "shared" / "bench" / "peers").is_dir():
            return parent / "shared" / "bench" / "peers"
    raise SystemExit("no shared/bench/peers directory above this checkout")


def peer_turns() -> dict[str, tuple[str, Callable[[], Awaitable[Any]]]]:
    """Each peer SDK's framework name, version and one scripted turn on the loop."""
    from importlib.metadata import version

    here = pathlib.Path(__file__).resolve().parent
    # Not this folder: its mcp.py would stand for the mcp package, which openai-agents imports.
    sys.path[:] = [entry for entry in sys.path if pathlib.Path(entry or ".").resolve() != here]
    sys.path.insert(0, str(peers_dir()))
    import bench_openai_agents
    import bench_pydantic_ai
    from agents import Runner

    openai_agent = bench_openai_agents.make_agent()
    pydantic_agent = bench_pydantic_ai.make_agent()

    async def openai_turn() -> None:
        result = await Runner.run(openai_agent, "add 1 and 2")
        assert result.final_output == "The answer is 3.", result

    async def pydantic_turn() -> None:
        result = await pydantic_agent.run("add 1 and 2")
        assert result.output == "The answer is 3.", result

    return {
        "openai-agents": (version("openai-agents"), openai_turn),
        "pydantic-ai-slim": (version("pydantic-ai-slim"), pydantic_turn),
    }


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    for framework, (version, turn) in peer_turns().items():

        async def turns(turn: Callable[[], Awaitable[Any]] = turn) -> None:
            for _ in range(max(1, n // CONCURRENT)):
                await asyncio.gather(*(turn() for _ in range(CONCURRENT)))

        async def measured(turn: Callable[[], Awaitable[Any]] = turn) -> list[float]:
            for _ in range(WARMUP):
                await turn()
            return await tick_gaps(turns)

        late = asyncio.run(measured())
        line: dict[str, Any] = {"framework": framework, "version": version}
        line["python"] = platform.python_version()
        line |= {"mode": "tick_gap", "door": "on_loop", "n": n, **lateness(late)}
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
