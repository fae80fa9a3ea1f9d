"""Every figure of the bench, beside the peers' from the same run, as a Markdown table.

Usage::

    python bench/report.py [--peers PYTHON] [--quick]

Runs, each in a process of its own (``turns.py`` and ``memory.py``, which start more):

- ``turns.py --mode turns``: a scripted turn, async, sync, sync with each process kept on
  one CPU, and through ``agentlib.aio`` (on uvloop's loop too, and it and the trio API on
  one CPU), the median of 5 runs (and of the peers' runs, interleaved, with ``--peers``);
- ``turns.py --mode concurrent``: 20 turns at once by door (trio, ``agentlib.aio``,
  ``agentlib_sync`` in ``asyncio.to_thread``), and the asyncio loop's lateness while turns
  run through ``agentlib.aio``, in this process's engine (on uvloop's loop too) and on a
  served agent;
- ``ticks.py`` (with ``--peers``, in the peers' interpreter): the same loop's lateness while
  the same turns of each peer run on the loop itself;
- ``turns.py --mode round_trip``: agentlib_sync's round trip, and anyio's; agentlib.aio's,
  and the bare crossing beneath it; a turn's thread crossings alone;
- ``turns.py --mode long`` and ``--mode long_sqlite``: turns 1-100 and the last 100 of one
  10,000-turn session, in memory and on SQLite;
- ``memory.py all``: a held session, a parked turn, 100,000 durable sessions (and the peers'
  held and inflight, with ``--peers``);
- ``mcp.py``: an MCP tool call through a turn beside the same call through the SDK's bare
  client session, and the server's ``tools/list`` requests per 100 model steps (needs the
  ``mcp`` extra).

Prints the table (figure, agentlib, best peer or reference, ratio, target, met?), notes on
how the figures were made, then every JSON line the benchmarks printed. ``--quick`` runs
each with a small N: it checks that the report works; its figures judge no target.
Compare ratios from one run, never absolute times across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent

#: What each run is given: full, then quick.
SIZES = {
    "turns": (2000, 200),
    "repeats": (5, 1),
    "round_trip": (5000, 1000),
    "concurrent": (2000, 200),
    "long": (10_000, 1000),
    "long_sqlite": (10_000, 300),
    "memory": (None, 1000),  # None: memory.py's own (10,000 sessions or turns; 100,000 durable)
    "mcp": (500, 50),
}
#: Durable sessions: RSS is flat if it grows by no more than this after the first tenth.
FLAT = 0.05


def steps(quick: bool, peers: str | None) -> list[list[str]]:
    def size(name: str) -> str:
        return str(SIZES[name][quick])

    turns = [sys.executable, str(HERE / "turns.py"), "--mode"]
    memory = [sys.executable, str(HERE / "memory.py"), "all"]
    with_peers = ["--peers", peers] if peers else []
    memory_n = [] if SIZES["memory"][quick] is None else [size("memory")]
    return [
        [*turns, "turns", size("turns"), "--repeats", size("repeats"), *with_peers],
        [*turns, "round_trip", size("round_trip")],
        [*turns, "concurrent", size("concurrent"), "--repeats", size("repeats")],
        *([[peers, str(HERE / "ticks.py"), size("concurrent")]] if peers else []),
        [*turns, "long", size("long")],
        [*turns, "long_sqlite", size("long_sqlite")],
        [*memory, *memory_n, *with_peers],
        [sys.executable, str(HERE / "mcp.py"), size("mcp")],
    ]


def run(command: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """The JSON lines ``command`` printed, and whether it succeeded."""
    shown = " ".join(pathlib.Path(part).name if os.sep in part else part for part in command)
    print(f"report: {shown} ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    print(f"report: ... {seconds:.0f} s, exit status {done.returncode}", file=sys.stderr)
    if done.returncode:
        print(done.stderr, file=sys.stderr)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return lines, done.returncode == 0


def number(value: float, unit: str = "") -> str:
    text = f"{value:,.0f}" if value >= 100 else f"{value:,.1f}" if value >= 10 else f"{value:.2f}"
    return f"{text} {unit}".rstrip()


def lateness(line: dict[str, Any]) -> str:
    """A tick_gap line's worst lateness, then its 99th and 90th percentiles."""
    worst, p99, p90 = (number(line[key], "ms") for key in ("worst_ms", "p99_ms", "p90_ms"))
    return f"{worst} (p99 {p99}, p90 {p90})"


def met(ok: bool | None) -> str:
    return "—" if ok is None else "yes" if ok else "**no**"


class Table:
    def __init__(self, lines: list[dict[str, Any]]) -> None:
        self.lines = lines
        self.rows: list[tuple[str, ...]] = []
        self.notes: list[str] = []

    def find(self, framework: str, mode: str) -> dict[str, Any] | None:
        for line in self.lines:
            if line.get("framework") == framework and line.get("mode") == mode:
                return line
        return None

    def peers(self, mode: str) -> dict[str, dict[str, Any]]:
        return {
            line["framework"]: line
            for line in self.lines
            if line.get("mode") == mode and line.get("framework") != "agentlib"
        }

    def row(self, figure: str, *cells: str) -> None:
        self.rows.append((figure, *cells))

    def missing(self, figure: str, target: str) -> None:
        self.row(figure, "not measured", "—", "—", target, "—")

    def memory(self, figure: str, mode: str, key: str, peer_mode: str, peer_key: str) -> None:
        target = "≤ 3 KiB" if mode == "held" else "≤ 8 KiB"
        mine = self.find("agentlib", mode)
        if mine is None:
            self.missing(figure, target)
            return
        value = mine[key]
        peers = {name: line[peer_key] for name, line in self.peers(peer_mode).items()}
        best = min(peers, key=peers.__getitem__) if peers else None
        reference = f"{best} {number(peers[best], 'KiB')}" if best else "—"
        ratio = f"{value / peers[best]:.2f}x the best peer" if best else "—"
        limit = 3.0 if mode == "held" else 8.0
        self.row(figure, number(value, "KiB"), reference, ratio, target, met(value <= limit))

    def durable(self) -> None:
        figure, target = "Durable idle sessions: RSS", f"flat (≤ +{FLAT:.0%} after the first tenth)"
        mine = self.find("agentlib", "durable")
        if mine is None:
            self.missing(figure, target)
            return
        before, after = mine["rss_after_first_tenth_kib"], mine["rss_after_kib"]
        growth = after - before
        self.row(
            f"Durable idle sessions ({mine['n']:,}): RSS after the first tenth → after all",
            f"{before / 1024:,.1f} → {after / 1024:,.1f} MiB ({growth / 1024:+,.1f} MiB)",
            "—",
            f"{after / before:.3f}x (after / first tenth)",
            target,
            met(growth <= FLAT * before),
        )
        if "python_blocks_after" in mine:
            blocks = mine["python_blocks_per_session_after_first_tenth"]
            self.row(
                f"Durable idle sessions ({mine['n']:,}): Python's allocated blocks after the "
                "first tenth → after all (RSS also holds SQLite's page cache, up to 64 MiB)",
                f"{mine['python_blocks_after_first_tenth']:,} → {mine['python_blocks_after']:,}",
                "—",
                f"{blocks:+.2f} blocks per session",
                "flat (< 1 block per session)",
                met(blocks < 1),
            )
        samples = ", ".join(f"{kib / 1024:,.1f}" for kib in mine["rss_samples_kib"])
        self.notes.append(
            f"Durable sessions: RSS (MiB) after each fifth: {samples}; the runtime held "
            f"{mine['sessions_held_by_runtime']:,} sessions at the end."
        )

    def round_trip(self) -> None:
        figure, target = "Blocking facade round trip (median)", "≤ 50 µs or ≤ 0.40x anyio"
        mine = self.find("agentlib", "round_trip")
        if mine is None:
            self.missing(figure, target)
            return
        ok = mine["us_median"] <= 50 or mine["ratio"] <= 0.4
        self.row(
            figure,
            number(mine["us_median"], "µs"),
            f"anyio BlockingPortal.call {number(mine['anyio_us_median'], 'µs')}",
            f"{mine['ratio']:.2f}x anyio",
            target,
            met(ok),
        )

    def turn(self, mode: str) -> None:
        label = mode.replace("_one_cpu", ", every process on one CPU").replace(
            "_async_tool", ", agentlib's tool written `async def` (the peers' is sync)"
        )
        figure = f"Scripted turn, {label} (median µs/turn)"
        target = "≥ 6x the best peer" if mode in ("async", "sync") else "— (not a target)"
        mine = self.find("agentlib", f"{mode}_median")
        if mine is None:
            self.missing(figure, target)
            return
        versus = self.find("agentlib", f"{mode}_vs_peers")
        if versus is None:
            self.row(figure, number(mine["us_per_turn"], "µs"), "no peers run", "—", target, "—")
            return
        best = versus["best_peer"]
        self.row(
            figure,
            number(mine["us_per_turn"], "µs"),
            f"{best} {number(versus['peers_us_per_turn'][best], 'µs')}",
            f"{versus['speedup']:.2f}x faster",
            target,
            met(versus["speedup"] >= 6) if mode in ("async", "sync") else "—",
        )
        others = ", ".join(
            f"{name} {number(value, 'µs')}" for name, value in versus["peers_us_per_turn"].items()
        )
        self.notes.append(
            f"Turns, {label}: median of {mine['repeats']} runs of {mine['n']:,} turns, a fresh "
            f"process each (agentlib {number(mine['us_per_turn_min'], 'µs')} to "
            f"{number(mine['us_per_turn_max'], 'µs')}); peers: {others}."
        )

    def aio(self) -> None:
        """agentlib.aio's rows: its turn beside the trio API's and the peers', 20 turns at
        once, and the loop's worst tick while turns run."""
        figure, target = "Scripted turn through agentlib.aio (median µs/turn)", "≤ 1.2x trio"
        versus_trio = self.find("agentlib", "aio_vs_async")
        if versus_trio is None:
            self.missing(figure, target)
        else:
            self.row(
                figure,
                number(versus_trio["us_per_turn"], "µs"),
                f"agentlib's trio API {number(versus_trio['async_us_per_turn'], 'µs')}",
                f"{versus_trio['ratio']:.2f}x trio",
                target,
                met(versus_trio["ratio"] <= 1.2),
            )
        on_uvloop = self.find("agentlib", "aio_vs_async_uvloop")
        if on_uvloop is not None:
            self.row(
                "Scripted turn through agentlib.aio on uvloop's loop (median µs/turn)",
                number(on_uvloop["us_per_turn"], "µs"),
                f"agentlib's trio API {number(on_uvloop['async_us_per_turn'], 'µs')}",
                f"{on_uvloop['ratio']:.2f}x trio",
                "— (not a target)",
                "—",
            )
        one_cpu = self.find("agentlib", "aio_vs_async_one_cpu")
        if one_cpu is not None:
            self.row(
                "Scripted turn through agentlib.aio, every process on one CPU (median µs/turn)",
                number(one_cpu["us_per_turn"], "µs"),
                f"agentlib's trio API on one CPU {number(one_cpu['async_us_per_turn'], 'µs')}",
                f"{one_cpu['ratio']:.2f}x trio",
                "— (not a target)",
                "—",
            )
        versus_peers = self.find("agentlib", "aio_vs_peers")
        if versus_peers is not None:
            best = versus_peers["best_peer"]
            self.row(
                "Scripted turn through agentlib.aio, beside the peers' async turns (median)",
                number(versus_peers["us_per_turn"], "µs"),
                f"{best} {number(versus_peers['peers_us_per_turn'][best], 'µs')}",
                f"{versus_peers['speedup']:.2f}x faster",
                "ahead of every peer",
                met(versus_peers["speedup"] > 1),
            )
        concurrent = self.find("agentlib", "concurrent")
        figure = "20 turns at once, each model call 50 ms (median wall time)"
        if concurrent is None:
            self.missing(figure, "—")
        else:
            to_thread = number(concurrent["sync_to_thread_s_median"] * 1000, "ms")
            self.row(
                figure,
                f"agentlib.aio {number(concurrent['aio_s_median'] * 1000, 'ms')}",
                f"trio API {number(concurrent['trio_s_median'] * 1000, 'ms')}; agentlib_sync "
                f"in asyncio.to_thread {to_thread}",
                f"{concurrent['aio_vs_trio']:.2f}x trio",
                "— (not a target)",
                "—",
            )
        gaps = {
            line["door"]: line
            for line in self.lines
            if line.get("mode") == "tick_gap" and line.get("framework") == "agentlib"
        }
        figure, target = "asyncio loop's worst tick while turns run through agentlib.aio", "≤ 5 ms"
        if "aio" not in gaps:
            self.missing(figure, target)
            return
        mine, idle = gaps["aio"], gaps.get("idle")
        on_loop = self.peers("tick_gap")
        reference, ratio = [], "—"
        if on_loop:
            best = min(on_loop, key=lambda framework: on_loop[framework]["worst_ms"])
            reference.append(f"{best}, its turns on the loop: {lateness(on_loop[best])}")
            ratio = f"{mine['worst_ms'] / on_loop[best]['worst_ms']:.2f}x the best peer"
            self.notes.append(
                "The loop's lateness while each peer's turns run on it (worst, p99, p90): "
                + "; ".join(f"{peer} {lateness(line)}" for peer, line in on_loop.items())
                + "."
            )
        if idle:
            reference.append(f"the same loop idle: {number(idle['worst_ms'], 'ms')}")
        self.row(
            f"{figure} ({mine['n']:,} turns, 20 at a time)",
            lateness(mine),
            "; ".join(reference) or "—",
            ratio,
            target,
            met(mine["worst_ms"] <= 5),
        )
        variants = {
            "aio_collector_off": "The same with Python's cyclic collector off ({n:,} turns, 20 "
            "at a time): the hops' lateness without the collector's full collections",
            "aio_frozen": "The same with the objects made before the turns frozen "
            "(`gc.freeze()`, {n:,} turns, 20 at a time)",
            "aio_remote": "The same, the agent served by `agentlib serve` in a process of "
            "its own ({n:,} turns, 20 at a time)",
            "aio_uvloop": "The same on uvloop's loop, after the rows above ({n:,} turns, 20 "
            "at a time)",
        }
        for key, label in variants.items():
            variant = gaps.get(key)
            if variant is not None:
                self.row(
                    label.format(n=variant["n"]),
                    lateness(variant),
                    f"the same loop idle: {number(idle['worst_ms'], 'ms')}" if idle else "—",
                    "—",
                    "— (not a target)",
                    "—",
                )
        if "sync_on_loop" in gaps:
            self.notes.append(
                "The loop's lateness with 10 turns run in a row through agentlib_sync called "
                f"on the loop: {number(gaps['sync_on_loop']['worst_ms'], 'ms')}; idle, the "
                "same ticker's worst is the machine's own lateness."
            )

    def handoffs(self) -> None:
        mine = self.find("agentlib", "handoffs")
        if mine is None:
            return
        self.notes.append(
            f"A turn's thread crossings alone, with no engine work (mean of {mine['n']:,}): "
            f"{number(mine['async_us_mean'], 'µs')} async (the sync tool's worker thread and "
            f"back), {number(mine['sync_us_mean'], 'µs')} from a blocking caller (the same "
            "inside the two portal calls of a blocking turn). Waking a thread that sleeps on "
            "another CPU is most of it: the sync turns on one CPU show what is left."
        )

    def aio_round_trip(self) -> None:
        mine = self.find("agentlib", "aio_round_trip")
        if mine is None:
            return
        where = "on two CPUs" if mine["cpus"] == 2 else "on one CPU"
        self.row(
            f"Awaited call of a no-op through agentlib.aio, the loop's thread and the engine's "
            f"{where} (median)",
            number(mine["us_median"], "µs"),
            "the bare crossing it is built on (asyncio loop → trio loop on another thread → "
            f"back, no agentlib code) {number(mine['bare_us_median'], 'µs')}",
            f"+{number(mine['us_median'] - mine['bare_us_median'], 'µs')}",
            "— (not a target)",
            "—",
        )

    def long(self, mode: str, where: str) -> None:
        figure, target = f"{where} session, turns 1-100 vs the last 100", "≤ 1.10x"
        mine = self.find("agentlib", mode)
        if mine is None:
            self.missing(figure, target)
            return
        n = mine["n"]
        self.row(
            f"{where} session of {n:,} turns: the last 100 vs turns 1-100 (median µs/turn)",
            f"turns {n - 99:,}-{n:,}: {number(mine['last_us_median'], 'µs')}",
            f"turns 1-100: {number(mine['first_us_median'], 'µs')}",
            f"{mine['ratio']:.2f}x (last / first)",
            target,
            met(mine["ratio"] <= 1.10),
        )
        if "interleaved_ratio" in mine:
            self.row(
                f"{where} session of {n:,} turns, measured turn for turn beside a new "
                "session's first 100 (median µs/turn)",
                f"turns {n + 1:,}-{n + 100:,}: {number(mine['interleaved_last_us_median'], 'µs')}",
                f"a new session's 1-100: {number(mine['interleaved_first_us_median'], 'µs')}",
                f"{mine['interleaved_ratio']:.2f}x (long / new)",
                target,
                met(mine["interleaved_ratio"] <= 1.10),
            )
        windows = ", ".join(
            f"{span}: {number(value)}" for span, value in mine["windows_us_median"].items()
        )
        note = (
            f"{where} session: median µs/turn by window: {windows}; a fresh session's first "
            f"100 turns right after it: {number(mine['fresh_session_after_us_median'], 'µs')}; "
            f"CPU time, last / first: {number(mine['last_cpu_us_median'])} / "
            f"{number(mine['first_cpu_us_median'])} µs."
        )
        if "note" in mine:
            note += f" {mine['note'][0].upper()}{mine['note'][1:]}."
        self.notes.append(note)

    def mcp(self) -> None:
        figure, target = (
            "MCP tool call through a turn, over the SDK's bare call (median)",
            "≤ +1 ms",
        )
        mine = self.find("agentlib", "mcp_call")
        if mine is None:
            self.missing(figure, target)
        else:
            self.row(
                figure,
                number(mine["in_turn_us"], "µs"),
                f"bare ClientSession.call_tool {number(mine['bare_us_median'], 'µs')}",
                f"{mine['overhead_us']:+,.0f} µs",
                target,
                met(mine["overhead_us"] <= 1000),
            )
            self.notes.append(
                f"MCP call in a turn: a turn calling the stdio server's tool "
                f"({number(mine['turn_us_median'], 'µs')}) less the same turn calling a local "
                f"tool ({number(mine['turn_local_us_median'], 'µs')}), medians of "
                f"{mine['n']:,} each, in blocks alternating with the bare calls."
            )
        figure, target = "MCP tools/list requests per 100 model steps", "≤ 1"
        lists = self.find("agentlib", "mcp_lists")
        if lists is None:
            self.missing(figure, target)
            return
        self.row(
            f"{figure} ({lists['model_steps']:,} steps)",
            f"{lists['lists_per_100_steps']:.2f}",
            "—",
            f"{lists['lists']} in all",
            target,
            met(lists["lists_per_100_steps"] <= 1),
        )

    def markdown(self) -> str:
        header = ("Figure", "agentlib", "Best peer / reference", "Ratio", "Target", "Met?")
        lines = [header, ("---",) * len(header), *self.rows]
        return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def environment(lines: list[dict[str, Any]], quick: bool) -> str:
    versions = sorted(
        {f"{line['framework']} {line['version']}" for line in lines if "version" in line}
    )
    parts = [
        f"Python {platform.python_version()}",
        f"{os.cpu_count()} CPUs",
        time.strftime("%Y-%m-%d"),
        *versions,
    ]
    text = "Measured in one run: " + ", ".join(parts) + "."
    if quick:
        text += " Quick run (small N): a check that the report works, not a measure of targets."
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", metavar="PYTHON", help="an interpreter with the peer SDKs")
    parser.add_argument("--quick", action="store_true", help="small N: a smoke run")
    args = parser.parse_args()
    lines: list[dict[str, Any]] = []
    failed = 0
    for command in steps(args.quick, args.peers):
        got, ok = run(command)
        lines += got
        failed += not ok
    table = Table(lines)
    table.memory("Idle in-memory session, one finished turn", "held", "kib_per_session",
                 "held", "kib_per_session")  # fmt: skip
    table.memory("Turn parked on a tool approval", "parked", "kib_per_parked_turn",
                 "inflight", "kib_per_inflight_turn")  # fmt: skip
    table.memory("Turn parked in its model call", "inflight", "kib_per_inflight_turn",
                 "inflight", "kib_per_inflight_turn")  # fmt: skip
    table.durable()
    table.round_trip()
    table.turn("async")
    table.turn("sync")
    table.turn("sync_one_cpu")
    table.turn("sync_async_tool")
    table.aio()
    table.aio_round_trip()
    table.handoffs()
    table.long("long", "In-memory")
    table.long("long_sqlite", "SQLite")
    table.mcp()
    print(table.markdown())
    print()
    print(environment(lines, args.quick))
    print(
        "The peers' parked turn is their inflight figure: a turn parked inside its first "
        "model call, as a turn waiting on an approval would be."
    )
    for note in table.notes:
        print(f"- {note}")
    print()
    print("Raw figures, one JSON line each:")
    print()
    print("```json")
    for line in lines:
        print(json.dumps(line))
    print("```")
    if failed:
        print(f"report: {failed} benchmark(s) failed; see above", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
