"""PostgreSQL under load, beside a crash loop: how many turns of many remote clients fail.

One ``python -m agentlib serve`` on the PostgreSQL store (a schema of its own) serves this
module's ``calculator``; ``--clients`` remote clients (``agentlib.Agent.load_from``), each
with a session of its own, run turns one after the other for ``--seconds``. Meanwhile, on
the same database but another schema, a second server is started, given a few clients of
its own, and killed with SIGKILL at a random moment, again and again.

With ``--end-connections N``, the database also ends the loaded server's connections every
N seconds (``pg_terminate_backend``, as a restart of PostgreSQL, a failover or an
administrator does): the store must go on, on new ones.

Usage::

    python bench/load.py [--clients 200] [--seconds 60] [--store postgresql://127.0.0.1/test]
                         [--end-connections N] [--log FILE]

Prints one JSON line: the turns that completed (``ok``), those whose run raised
(``failed``, with the errors' messages counted in ``errors``), those whose record was
``UnknownOutcome`` (``unknown``, which a turn on a server that was never restarted must
never read), and the crash loop's kills (``kills``). Both schemas are dropped at the end.

Figures, not tests: compare them from one run.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import trio

import agentlib

HERE = pathlib.Path(__file__).resolve().parent


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _reply(request: agentlib.ModelRequest) -> str | agentlib.ModelReply:
    if request.entries[-1].type == "tool_result":
        return "The answer is 3."
    return agentlib.ModelReply(
        tool_calls=[agentlib.ToolCallRequest(name="add", arguments={"a": 1, "b": 2})]
    )


calculator = agentlib.Agent("calc", "You add numbers.", agentlib.FunctionModel(_reply), [add])


def store_url(database: str, schema: str) -> str:
    """The store on ``schema``, whose connections are named after it (application_name)."""
    joiner = "&" if "?" in database else "?"
    return f"{database}{joiner}schema={schema}&application_name={schema}"


def start(process: subprocess.Popen[str]) -> str:
    """The URL the server says it serves on, once it says so."""
    assert process.stdout is not None
    line = process.stdout.readline()
    if " on http" not in line:
        raise SystemExit(f"the server did not start: {line!r}")
    return line.split(" on ")[1].split("/v1")[0]


@contextlib.asynccontextmanager
async def server(
    store: str, log: Any = subprocess.DEVNULL
) -> AsyncIterator[tuple[str, subprocess.Popen[str]]]:
    """``agentlib serve`` on a free port, on ``store``, its log to ``log``: its URL and
    process."""
    command = [sys.executable, "-m", "agentlib", "serve", "load:calculator"]
    command += ["--store", store, "--port", "0"]
    process = subprocess.Popen(command, cwd=HERE, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        yield await trio.to_thread.run_sync(start, process), process
    finally:
        if process.poll() is None:
            process.terminate()
        await trio.to_thread.run_sync(process.wait, 30)


def drop(database: str, *schemas: str) -> None:
    import psycopg

    with psycopg.connect(database, autocommit=True) as connection:
        for schema in schemas:
            connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


async def clients(url: str, count: int, seconds: float, tally: collections.Counter[str]) -> None:
    """``count`` clients running turns on the server at ``url`` for ``seconds``."""
    remote = agentlib.Agent.load_from(url, "calc")
    deadline = trio.current_time() + seconds

    async def one() -> None:
        session = None
        while trio.current_time() < deadline:
            try:
                if session is None:
                    session = await remote.start_session()
                record = await session.run("add 1 and 2")
            except agentlib.SdkError as error:
                tally["failed"] += 1
                tally[f"error: {type(error).__name__}: {str(error)[:160]}"] += 1
                continue
            if isinstance(record, agentlib.UnknownOutcome):
                tally["unknown"] += 1
            elif isinstance(record, agentlib.Completed):
                tally["ok"] += 1
            else:
                tally["failed"] += 1
                tally[f"record: {type(record).__name__}"] += 1

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(one)


async def crash_loop(store: str, stop: trio.Event, tally: collections.Counter[str]) -> None:
    """Start a server on ``store`` with a few clients, kill it at a random moment; again,
    until ``stop``."""
    rng = random.Random(25)
    while not stop.is_set():
        async with server(store) as (url, process):
            ignored: collections.Counter[str] = collections.Counter()
            with trio.move_on_after(rng.uniform(0.5, 3.0)):
                await clients(url, 10, 3600, ignored)
            process.send_signal(signal.SIGKILL)
            tally["kills"] += 1


def end_connections(database: str, schema: str) -> int:
    """End the database sessions of the connections named ``schema``: how many."""
    import psycopg

    with psycopg.connect(database, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


async def connections_ended(
    database: str, schema: str, every: float, stop: trio.Event, tally: collections.Counter[str]
) -> None:
    """End the connections named ``schema`` every ``every`` seconds, until ``stop``."""
    while True:
        with trio.move_on_after(every):
            await stop.wait()
        if stop.is_set():
            return
        tally["connections_ended"] += await trio.to_thread.run_sync(
            end_connections, database, schema
        )


async def run(
    database: str, count: int, seconds: float, log: Any, every: float | None
) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    loaded, crashing = f"load_{tag}", f"load_crash_{tag}"
    tally: collections.Counter[str] = collections.Counter()
    kills: collections.Counter[str] = collections.Counter()
    try:
        async with server(store_url(database, loaded), log) as (url, process):
            stop = trio.Event()
            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(crash_loop, store_url(database, crashing), stop, kills)
                if every is not None:
                    nursery.start_soon(connections_ended, database, loaded, every, stop, kills)
                await clients(url, count, seconds, tally)
                stop.set()
            elapsed = time.perf_counter() - started
            alive = process.poll() is None
    finally:
        drop(database, loaded, crashing)
    errors = {k: v for k, v in tally.items() if k.startswith(("error", "record"))}
    return {
        "framework": "agentlib",
        "mode": "load_beside_crash_loop",
        "clients": count,
        "seconds": round(elapsed, 1),
        "ok": tally["ok"],
        "failed": tally["failed"],
        "unknown": tally["unknown"],
        "kills": kills["kills"],
        "connections_ended": kills["connections_ended"],
        "server_alive": alive,
        "errors": errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--store", default="postgresql://127.0.0.1:5432/test")
    parser.add_argument("--log", help="a file for the loaded server's log (default: none)")
    parser.add_argument(
        "--end-connections",
        type=float,
        metavar="N",
        help="end the loaded server's database connections every N seconds",
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        log = subprocess.DEVNULL if args.log is None else stack.enter_context(open(args.log, "w"))
        figures = trio.run(run, args.store, args.clients, args.seconds, log, args.end_connections)
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
