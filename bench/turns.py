"""Turns per second of a scripted turn, the blocking facade's round trip, and long sessions.

The workload is the peers' (shared bench README): the model asks for ``add(a=1, b=2)``, the
tool (a plain sync function) runs, the model answers "The answer is 3." In the ``turns`` mode
each turn runs in a fresh session, as each peer turn runs in a fresh conversation.

Usage::

    python bench/turns.py [N]                     # turns (async, sync) and the round trip
    python bench/turns.py [N] --peers PYTHON      # also the peers, with their interpreter
    python bench/turns.py --mode turns [N] [--peers PYTHON] [--repeats R]
    python bench/turns.py --mode round_trip [N]   # agentlib_sync's call, and anyio's
    python bench/turns.py --mode concurrent [N]   # 20 turns at once, and the loop's ticks
    python bench/turns.py --mode long [N]         # N turns (10,000) in one in-memory session
    python bench/turns.py --mode long_sqlite [N]  # the same in a SQLite runtime

Modes:

- ``turns``: N sequential turns (2,000) after 50 warm-up turns, async then sync, each run in
  a fresh process, R times (5), interleaved with the peers' runs as their ``run_all.py``
  interleaves them. Prints a line per run, then the median of the runs for each framework
  and mode, then a line per mode (``async_vs_peers``, ``sync_vs_peers``) with agentlib's
  µs per turn, each peer's, and ``speedup``: the best peer's µs per turn over agentlib's.
  The ``sync_one_cpu`` runs are the sync runs again, each process kept on one CPU: a blocking
  turn crosses threads four times, and waking a thread on another CPU costs what this shows.
  The ``sync_async_tool`` runs (agentlib's only, set beside the peers' sync runs) are the sync
  runs with ``add`` written ``async def``: it runs in the engine's own thread, so a blocking
  turn crosses threads twice. Neither sets a target: the first changes the machine, the
  second the workload.
  The ``aio`` runs (agentlib's only, set beside the peers' async runs) are the async runs
  through ``agentlib.aio``, awaited from an asyncio loop; ``aio_vs_async`` is their median
  µs per turn over the trio API's (goal: at most 1.2). The ``aio_uvloop`` runs are the same
  on uvloop's loop (uvicorn's, where it is installed), and ``aio_vs_async_uvloop`` their
  ratio. ``async_one_cpu`` and ``aio_one_cpu`` are both again, each process kept on one
  CPU, and ``aio_vs_async_one_cpu`` their ratio: an awaited call crosses threads twice,
  which costs most where each crossing wakes a thread asleep on another CPU.
- ``concurrent``: 20 turns at once, each in a new session whose model takes 50 ms to answer
  (a ``trio.sleep`` in the engine), R times (5): the median wall time through the trio API
  (a nursery), through ``agentlib.aio`` (``asyncio.gather``) and through ``agentlib_sync``
  in ``asyncio.to_thread`` (the workaround before ``agentlib.aio``, capped by the default
  executor's threads). Then the asyncio loop's ticks: a task that sleeps 1 ms records how
  late each wake-up is while N (2,000) scripted turns run through ``agentlib.aio``, 20 at a
  time; while they run again with Python's cyclic collector off (``aio_collector_off``: a
  full collection stops every thread of the process, the loop's too, and this tells its
  pauses from the hops'); while they run again with the collector on and the objects made
  until then frozen (``aio_frozen``: ``gc.freeze()``, which full collections then skip);
  while the same turns run through ``agentlib.aio`` on the same agent served by ``agentlib
  serve`` in a process of its own (``aio_remote``: this process's engine only sends
  requests); while 10 turns run in a row through ``agentlib_sync`` called on the loop
  (which blocks it); for the machine's own lateness, while nothing runs for as long as the
  first; and, after all the others, while the first's turns run on uvloop's loop
  (``aio_uvloop``). The worst and the 99th percentile are printed (goal for
  ``agentlib.aio``: worst ≤ 5 ms).
- ``round_trip``: the median of N (5,000) calls of an async no-op through agentlib_sync's
  portal and through anyio's ``BlockingPortal.call`` (``start_blocking_portal(backend=
  "trio")``), in alternating blocks in one process; ``ratio`` is agentlib's over anyio's.
  Then ``handoffs``: the mean µs of a turn's thread crossings with no engine work, async (the
  sync tool's worker thread and back) and sync (the same inside the portal call of a
  blocking turn): what the blocking facade's shape costs a turn on this machine. Then
  ``aio_round_trip``: the median of N awaited calls of an async no-op through
  ``agentlib.aio``, beside the bare crossing it is built on (from the asyncio loop to a trio
  loop on another thread and back, with no agentlib code), in alternating blocks, the loop's
  thread on one CPU and the other threads on the other: the least a turn through
  ``agentlib.aio`` can cost more than one through the trio API.
- ``long`` and ``long_sqlite``: one session runs N turns (10,000) after 50 warm-up turns in
  another session. Each turn is timed; the median per-turn µs of turns 1-100 and of the last
  100 are printed, and ``ratio``, last over first. Also: the median of each 100 turns from
  every tenth of the session, and of the first 100 turns of a fresh session run after it
  (in the same runtime), to tell a session's growth from the process's.

Prints one JSON line per figure. Compare ratios from one run, never absolute times across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import trio

import agentlib
import agentlib.aio
import agentlib_sync
import serve  # bench/serve.py: its served agents, and agentlib serve in a process
from ticks import lateness, peers_dir, tick_gaps  # bench/ticks.py: the loop's ticker
from agentlib._trio._threads import run_in_thread
from agentlib_sync._portal import portal

WARMUP = 50
WINDOW = 100
REPEATS = 5
DEFAULTS = {
    "turns": 2000,
    "round_trip": 5000,
    "concurrent": 2000,
    "long": 10_000,
    "long_sqlite": 10_000,
}
PEER_SCRIPTS = ("bench_pydantic_ai.py", "bench_openai_agents.py")
#: Each framework's runs: async, sync, and sync again with the process kept on one CPU; then
#: agentlib's sync runs with an async tool, its async runs through agentlib.aio (on asyncio's
#: loop, then on uvloop's), and both async doors again with the process kept on one CPU.
MODES = (
    "async",
    "sync",
    "sync_one_cpu",
    "sync_async_tool",
    "aio",
    "aio_uvloop",
    "async_one_cpu",
    "aio_one_cpu",
)
#: Modes that only agentlib runs, and the peers' mode each is set beside.
OWN_MODES = {
    "sync_async_tool": "sync",
    "aio": "async",
    "aio_uvloop": "async",
    "async_one_cpu": "async_one_cpu",
    "aio_one_cpu": "async_one_cpu",
}
#: Turns at once in the ``concurrent`` mode, and how long each one's model takes (seconds).
CONCURRENT = 20
MODEL_LATENCY = 0.05


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def add_async(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script() -> list[agentlib.ModelReply | str]:
    call = agentlib.ToolCallRequest(name="add", arguments={"a": 1, "b": 2})
    return [agentlib.ModelReply(tool_calls=[call]), "The answer is 3."]


def figures(**values: object) -> dict[str, Any]:
    return {"framework": "agentlib", "python": platform.python_version(), **values}


def emit(**values: object) -> None:
    print(json.dumps(figures(**values)), flush=True)


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


def bench_sync(n: int, tool: Any = add) -> float:
    agent = agentlib_sync.Agent(
        "calc", "You add numbers.", agentlib_sync.ScriptedModel(script()), [tool]
    )

    def turns(count: int) -> None:
        for _ in range(count):
            record = agent.start_session().run("add 1 and 2")
            assert isinstance(record, agentlib.Completed), record

    turns(WARMUP)
    start = time.perf_counter()
    turns(n)
    return time.perf_counter() - start


def bench_aio(n: int) -> float:
    agent = agentlib.aio.Agent(
        "calc", "You add numbers.", agentlib.aio.ScriptedModel(script()), [add]
    )

    async def turns(count: int) -> None:
        for _ in range(count):
            session = await agent.start_session()
            record = await session.run("add 1 and 2")
            assert isinstance(record, agentlib.Completed), record

    async def main() -> float:
        await turns(WARMUP)
        start = time.perf_counter()
        await turns(n)
        return time.perf_counter() - start

    return asyncio.run(main())


async def slow_model(request: agentlib.ModelRequest) -> str:
    await trio.sleep(MODEL_LATENCY)
    return "The answer is 3."


def bench_concurrent(repeats: int) -> dict[str, float]:
    """The median wall seconds of 20 turns at once whose model takes 50 ms, by door."""
    model = agentlib.FunctionModel(slow_model)
    trio_agent = agentlib.Agent("slow", model=model)
    aio_agent = agentlib.aio.Agent("slow", model=model)
    sync_agent = agentlib_sync.Agent("slow", model=model)

    async def trio_turns() -> float:
        async def one() -> None:
            session = await trio_agent.start_session()
            assert isinstance(await session.run("hi"), agentlib.Completed)

        async with agentlib.open_runtime():
            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for _ in range(CONCURRENT):
                    nursery.start_soon(one)
            return time.perf_counter() - start

    async def aio_turns() -> float:
        async def one() -> None:
            session = await aio_agent.start_session()
            assert isinstance(await session.run("hi"), agentlib.Completed)

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(CONCURRENT)))
        return time.perf_counter() - start

    async def to_thread_turns() -> float:
        def one() -> None:
            assert isinstance(sync_agent.start_session().run("hi"), agentlib.Completed)

        start = time.perf_counter()
        await asyncio.gather(*(asyncio.to_thread(one) for _ in range(CONCURRENT)))
        return time.perf_counter() - start

    runs: dict[str, list[float]] = {"trio": [], "aio": [], "sync_to_thread": []}
    for _ in range(repeats + 1):  # the first round warms each door up
        runs["trio"].append(trio.run(trio_turns))
        runs["aio"].append(asyncio.run(aio_turns()))
        runs["sync_to_thread"].append(asyncio.run(to_thread_turns()))
    return {door: statistics.median(seconds[1:]) for door, seconds in runs.items()}


def bench_ticks(n: int) -> dict[str, list[float]]:
    """The loop's lateness while scripted turns run through agentlib.aio (20 at a time) and
    through agentlib_sync called on the loop."""
    aio_agent = agentlib.aio.Agent(
        "calc", "You add numbers.", agentlib.aio.ScriptedModel(script()), [add]
    )
    sync_agent = agentlib_sync.Agent(
        "calc", "You add numbers.", agentlib_sync.ScriptedModel(script()), [add]
    )

    async def one() -> None:
        session = await aio_agent.start_session()
        assert isinstance(await session.run("add 1 and 2"), agentlib.Completed)

    async def aio_turns() -> None:
        for _ in range(max(1, n // CONCURRENT)):
            await asyncio.gather(*(one() for _ in range(CONCURRENT)))

    async def blocking_turns() -> None:
        for _ in range(10):  # as an async handler that calls the blocking API would
            assert isinstance(sync_agent.start_session().run("add 1 and 2"), agentlib.Completed)

    async def remote_turns(url: str) -> list[float]:
        """The loop's lateness while the same turns run through agentlib.aio on a served
        agent: the engine runs them in a process of its own; this one's sends requests."""
        remote = agentlib.aio.Agent.load_from(url, "calc")

        async def one_remote() -> None:
            session = await remote.start_session()
            assert isinstance(await session.run("add 1 and 2"), agentlib.Completed)

        async def turns() -> None:
            for _ in range(max(1, n // CONCURRENT)):
                await asyncio.gather(*(one_remote() for _ in range(CONCURRENT)))

        for _ in range(WARMUP):
            await one_remote()
        return await tick_gaps(turns)

    async def main() -> dict[str, list[float]]:
        for _ in range(WARMUP):
            await one()
        start = time.perf_counter()
        through_aio = await tick_gaps(aio_turns)
        took = time.perf_counter() - start
        # The same with the cyclic collector off: what is left is the hops', not the
        # collector's (whose full collections stop every thread of the process).
        gc.collect()
        gc.disable()
        try:
            collector_off = await tick_gaps(aio_turns)
        finally:
            gc.enable()
            gc.collect()
        # With the collector on and what was made until now frozen (``gc.freeze()``, as the
        # asyncio guide suggests once a service has started): full collections walk only
        # what the turns keep.
        gc.freeze()
        try:
            frozen = await tick_gaps(aio_turns)
        finally:
            gc.unfreeze()
            gc.collect()
        with serve.server() as (url, _):
            through_server = await remote_turns(url)
        return {
            "aio": through_aio,
            "aio_collector_off": collector_off,
            "aio_frozen": frozen,
            "aio_remote": through_server,
            "sync_on_loop": await tick_gaps(blocking_turns),
            # The machine's own lateness: the same ticker as long, with nothing else to run.
            "idle": await tick_gaps(lambda: asyncio.sleep(took)),
        }

    async def on_uvloop() -> list[float]:
        for _ in range(WARMUP):
            await one()
        return await tick_gaps(aio_turns)

    gaps = asyncio.run(main())
    with uvloop_loops():
        gaps["aio_uvloop"] = asyncio.run(on_uvloop())
    return gaps


@contextlib.contextmanager
def uvloop_loops() -> Iterator[None]:
    """``asyncio.run`` makes uvloop's loops within."""
    import uvloop  # the test extra installs it

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        yield
    finally:
        asyncio.set_event_loop_policy(None)


def bench_round_trip(n: int) -> dict[str, float]:
    """The median seconds of a call of an async no-op, by portal: agentlib_sync's and
    anyio's, measured in alternating blocks."""
    from anyio.from_thread import start_blocking_portal

    async def nothing() -> None:
        return None

    blocks = 10
    with start_blocking_portal(backend="trio") as anyio_portal:
        calls = {"agentlib": portal.call, "anyio": anyio_portal.call}
        for call in calls.values():
            for _ in range(200):
                call(nothing)
        samples: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(blocks):
            for name, call in calls.items():
                for _ in range(max(1, n // blocks)):
                    start = time.perf_counter()
                    call(nothing)
                    samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def bench_aio_round_trip(n: int) -> dict[str, float]:
    """The median seconds of an awaited call of an async no-op through agentlib.aio, and of
    the bare crossing it is built on, with no agentlib code: from an asyncio loop to a trio
    loop on another thread (``TrioToken.run_sync_soon``) and back
    (``loop.call_soon_threadsafe``), measured in alternating blocks in one loop.

    The loop's thread is kept on one CPU, the engine's thread and the bare crossing's on
    another (where there are two): left to the system, the threads of one and the other may
    land on one CPU or on two, and a thread woken on another CPU costs several times more."""
    allowed = os.sched_getaffinity(0)
    here, there = min(allowed), max(allowed)
    started = threading.Event()
    tokens: list[trio.lowlevel.TrioToken] = []
    stop = trio.Event()

    async def other_loop() -> None:
        os.sched_setaffinity(0, {there})
        tokens.append(trio.lowlevel.current_trio_token())
        started.set()
        await stop.wait()

    thread = threading.Thread(target=trio.run, args=(other_loop,), daemon=True)
    thread.start()
    started.wait()
    (token,) = tokens

    async def nothing() -> None:
        return None

    async def keep_on(cpus: set[int]) -> None:
        os.sched_setaffinity(0, cpus)  # the engine's thread

    async def main() -> dict[str, float]:
        loop = asyncio.get_running_loop()

        async def bare() -> None:
            done = loop.create_future()
            token.run_sync_soon(loop.call_soon_threadsafe, done.set_result, None)
            await done

        await agentlib.aio._loop.call(keep_on, {there})
        try:
            calls = {"aio": lambda: agentlib.aio._loop.call(nothing), "bare": bare}
            for call in calls.values():
                for _ in range(200):
                    await call()
            samples: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(10):
                for name, call in calls.items():
                    for _ in range(max(1, n // 10)):
                        start = time.perf_counter()
                        await call()
                        samples[name].append(time.perf_counter() - start)
        finally:
            await agentlib.aio._loop.call(keep_on, allowed)
        return {name: statistics.median(values) for name, values in samples.items()}

    os.sched_setaffinity(0, {here})
    try:
        medians = asyncio.run(main())
    finally:
        os.sched_setaffinity(0, allowed)
        token.run_sync_soon(stop.set)
        thread.join()
    return {**medians, "cpus": len({here, there})}


def bench_handoffs(n: int) -> dict[str, float]:
    """The mean seconds of a turn's thread crossings alone, with no engine work: in the
    engine, the sync tool's (to a worker thread and back); from a blocking caller, the same
    inside the portal call that runs the turn (a new in-memory session is started without
    waiting for the engine)."""

    async def tool() -> int:
        return await run_in_thread(add, 1, 2)

    async def in_engine(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            await tool()
        return (time.perf_counter() - start) / count

    def blocking(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            portal.call(tool)
        return (time.perf_counter() - start) / count

    blocking(WARMUP)
    return {"async": portal.call(in_engine, n), "sync": blocking(n)}


async def bench_long(n: int, store: str | None) -> dict[str, Any]:
    """One session of ``n`` turns: the median µs of each turn, wall-clock and CPU (the
    process's, all threads), by window of 100 turns."""
    agent = agentlib.Agent(
        "calc",
        "You add numbers.",
        agentlib.ScriptedModel(script() * (max(n, WARMUP) + WINDOW)),
        [add],
    )

    async def timed(session: agentlib.Session, count: int) -> tuple[list[float], list[float]]:
        wall, cpu = [], []
        for _ in range(count):
            start, start_cpu = time.perf_counter(), time.process_time()
            record = await session.run("add 1 and 2")
            cpu.append(time.process_time() - start_cpu)
            wall.append(time.perf_counter() - start)
            assert isinstance(record, agentlib.Completed), record
        return wall, cpu

    def us(values: list[float]) -> float:
        return round(statistics.median(values) * 1e6, 1)

    async with agentlib.open_runtime(store):
        await timed(await agent.start_session(), WARMUP)
        started = time.perf_counter()
        session = await agent.start_session()
        wall, cpu = await timed(session, n)
        seconds = time.perf_counter() - started
        fresh, _ = await timed(await agent.start_session(), WINDOW)
        # The machine drifts over a long run: the same comparison, measured turn for turn
        # side by side, the long session's next turns against a new session's first ones.
        long_session, new_session = session, await agent.start_session()
        beside_long, beside_new = [], []
        for _ in range(WINDOW):
            beside_long += (await timed(long_session, 1))[0]
            beside_new += (await timed(new_session, 1))[0]
    step = max(WINDOW, n // 10)
    return {
        "n": n,
        "window": WINDOW,
        "first_us_median": us(wall[:WINDOW]),
        "last_us_median": us(wall[-WINDOW:]),
        "ratio": round(statistics.median(wall[-WINDOW:]) / statistics.median(wall[:WINDOW]), 3),
        "first_cpu_us_median": us(cpu[:WINDOW]),
        "last_cpu_us_median": us(cpu[-WINDOW:]),
        "windows_us_median": {
            f"{start + 1}-{start + WINDOW}": us(wall[start : start + WINDOW])
            for start in [*range(0, n - WINDOW, step), n - WINDOW]
        },
        "fresh_session_after_us_median": us(fresh),
        "interleaved_last_us_median": us(beside_long),
        "interleaved_first_us_median": us(beside_new),
        "interleaved_ratio": round(
            statistics.median(beside_long) / statistics.median(beside_new), 3
        ),
        "seconds": round(seconds, 2),
    }


def run_long(n: int, sqlite: bool) -> None:
    if not sqlite:
        emit(mode="long", store="memory", **trio.run(bench_long, n, None))
        return
    with tempfile.TemporaryDirectory() as directory:
        result = trio.run(bench_long, n, f"sqlite:///{directory}/long.db")
    if n < 10_000:
        result["note"] = f"{n:,} turns, fewer than the 10,000 of the target"
    emit(mode="long_sqlite", store="sqlite", **result)


def run_concurrent(n: int, repeats: int) -> None:
    seconds = bench_concurrent(repeats)
    emit(
        mode="concurrent",
        turns=CONCURRENT,
        model_latency_ms=MODEL_LATENCY * 1000,
        repeats=repeats,
        **{f"{door}_s_median": round(value, 3) for door, value in seconds.items()},
        aio_vs_trio=round(seconds["aio"] / seconds["trio"], 3),
    )
    for door, late in bench_ticks(n).items():
        sizes = {"sync_on_loop": 10, "idle": 0}
        emit(mode="tick_gap", door=door, n=sizes.get(door, n), **lateness(late))


def once(mode: str, n: int) -> dict[str, Any]:
    if mode == "async":
        seconds = bench_async(n)
    elif mode == "aio":
        seconds = bench_aio(n)
    elif mode == "aio_uvloop":
        with uvloop_loops():
            seconds = bench_aio(n)
    elif mode == "sync_async_tool":
        seconds = bench_sync(n, agentlib.tool(name="add")(add_async))
    else:
        seconds = bench_sync(n)
    return figures(mode=mode, n=n, turns_per_s=n / seconds, us_per_turn=seconds / n * 1e6)


def one_cpu() -> None:
    """Keep this process (a benchmark's child) and its threads on one CPU."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def run_turns(n: int, repeats: int, python: str | None) -> None:
    """Each mode's runs, a fresh process each, interleaved with the peers' runs; then the
    medians, and agentlib's speed-up on the best peer."""
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    commands = [[sys.executable, __file__, "--once", "{mode}", str(n)]]
    if python:
        commands += [[python, str(peers_dir() / name), "{mode}", str(n)] for name in PEER_SCRIPTS]
    for repeat in range(1, repeats + 1):
        for mode in MODES:
            for command in commands[:1] if mode in OWN_MODES else commands:
                done = subprocess.run(
                    [part.format(mode=mode.removesuffix("_one_cpu")) for part in command],
                    capture_output=True,
                    text=True,
                    check=True,
                    preexec_fn=one_cpu if mode.endswith("_one_cpu") else None,
                )
                run = json.loads(done.stdout.strip().splitlines()[-1])
                run["repeat"] = repeat
                run["mode"] = mode
                print(json.dumps(run), flush=True)
                runs.setdefault((run["framework"], mode), []).append(run)
    medians: dict[tuple[str, str], float] = {}
    for (framework, mode), done_runs in runs.items():
        per_turn = [run["us_per_turn"] for run in done_runs]
        medians[framework, mode] = statistics.median(per_turn)
        line = {
            key: done_runs[0][key]
            for key in ("framework", "python", "version")
            if key in done_runs[0]
        }
        line |= {"mode": f"{mode}_median", "n": n, "repeats": len(done_runs)}
        line |= {
            "us_per_turn": round(medians[framework, mode], 1),
            "us_per_turn_min": round(min(per_turn), 1),
            "us_per_turn_max": round(max(per_turn), 1),
            "turns_per_s": round(1e6 / medians[framework, mode], 1),
        }
        print(json.dumps(line), flush=True)
    for suffix in ("", "_uvloop", "_one_cpu"):
        trio_api = ("agentlib", "async_one_cpu" if suffix == "_one_cpu" else "async")
        aio = ("agentlib", f"aio{suffix}")
        if aio in medians and trio_api in medians:
            emit(
                mode=f"aio_vs_async{suffix}",
                n=n,
                repeats=repeats,
                us_per_turn=round(medians[aio], 1),
                async_us_per_turn=round(medians[trio_api], 1),
                ratio=round(medians[aio] / medians[trio_api], 3),
            )
    for mode in MODES:
        theirs = OWN_MODES.get(mode, mode)
        peers = {fw: us for (fw, m), us in medians.items() if m == theirs and fw != "agentlib"}
        if not peers:
            continue
        best = min(peers, key=peers.__getitem__)
        mine = medians["agentlib", mode]
        emit(
            mode=f"{mode}_vs_peers",
            n=n,
            repeats=repeats,
            us_per_turn=round(mine, 1),
            peers_us_per_turn={fw: round(us, 1) for fw, us in peers.items()},
            best_peer=best,
            speedup=round(peers[best] / mine, 2),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("n", nargs="?", type=int, help="turns (or calls) per run")
    parser.add_argument(
        "--mode",
        choices=["turns", "round_trip", "concurrent", "long", "long_sqlite"],
        help="one figure only (default: turns, round_trip, then concurrent)",
    )
    parser.add_argument("--peers", metavar="PYTHON", help="an interpreter with the peer SDKs")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="runs of each turns mode")
    once_modes = [mode for mode in MODES if not mode.endswith("_one_cpu")]
    parser.add_argument("--once", choices=once_modes, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.once:
        print(json.dumps(once(args.once, args.n or DEFAULTS["turns"])))
        return
    for mode in [args.mode] if args.mode else ["turns", "round_trip", "concurrent"]:
        # Without --mode, N is the turns' (the round trip makes its default number of calls).
        n = (args.n if args.mode or mode == "turns" else None) or DEFAULTS[mode]
        if mode == "turns":
            run_turns(n, args.repeats, args.peers)
        elif mode == "round_trip":
            medians = bench_round_trip(n)
            emit(
                mode="round_trip",
                n=n,
                us_median=round(medians["agentlib"] * 1e6, 2),
                anyio_us_median=round(medians["anyio"] * 1e6, 2),
                ratio=round(medians["agentlib"] / medians["anyio"], 3),
            )
            crossings = bench_handoffs(n)
            emit(
                mode="handoffs",
                n=n,
                async_us_mean=round(crossings["async"] * 1e6, 1),
                sync_us_mean=round(crossings["sync"] * 1e6, 1),
            )
            hops = bench_aio_round_trip(n)
            emit(
                mode="aio_round_trip",
                n=n,
                cpus=hops["cpus"],
                us_median=round(hops["aio"] * 1e6, 2),
                bare_us_median=round(hops["bare"] * 1e6, 2),
            )
        elif mode == "concurrent":
            run_concurrent(n, args.repeats)
        else:
            run_long(n, sqlite=mode == "long_sqlite")


if __name__ == "__main__":
    sys.exit(main())
