"""The cost of a ``file_system.bash`` call of ``true`` through a turn, per sandbox kind, beside
the same command run bare.

Usage::

    python bench/sandbox.py [N]       # N calls each way (200), after 20 warm-up calls

In one process, for ``DangerousLocalSandbox``, ``IsolatedSandbox`` (where this machine can
make one) and ``BashkitSandbox`` (where bashkit is installed), it times:

- ``bare``: ``subprocess.run(["bash", "-c", "true"])`` (for the isolated kind, with the
  same ``unshare`` command line the sandbox uses; for the bashkit kind,
  ``bashkit.Bash().execute_sync("true")`` on an interpreter made as the sandbox makes its
  own);
- ``turn``: a scripted turn of one session whose model asks for ``file_system.bash`` with
  ``true`` and then answers, minus the same turn asking for a local tool that returns at
  once (``turn_local``): what the command costs inside a turn, the turn's own work taken out.

Prints one JSON line per kind: the medians in µs and ``overhead_us``, the call through a turn
less the bare command. Compare figures from one run, never absolute times across runs.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

import agentlib


def nothing() -> str:
    """Return at once."""
    return "ok"


def scripted(tool: str, arguments: dict[str, Any], turns: int) -> agentlib.ScriptedModel:
    call = agentlib.ToolCallRequest(name=tool, arguments=arguments)
    replies: list[Any] = []
    for _ in range(turns):
        replies += [agentlib.ModelReply(tool_calls=[call]), "done"]
    return agentlib.ScriptedModel(replies)


async def time_turns(session: agentlib.Session, count: int) -> list[float]:
    times = []
    for _ in range(count):
        began = time.perf_counter()
        record = await session.run("go")
        times.append(time.perf_counter() - began)
        assert isinstance(record, agentlib.Completed), record
    return times


def time_bare(command: list[str], count: int) -> list[float]:
    times = []
    for _ in range(count):
        began = time.perf_counter()
        subprocess.run(command, check=True)
        times.append(time.perf_counter() - began)
    return times


def time_bare_bashkit(sandbox: agentlib.BashkitSandbox, count: int) -> list[float]:
    bash = sandbox._new_interpreter()
    times = []
    for _ in range(count):
        began = time.perf_counter()
        done = bash.execute_sync("true")
        times.append(time.perf_counter() - began)
        assert done.exit_code == 0, done
    return times


def median_us(times: list[float]) -> float:
    return round(statistics.median(times) * 1e6, 1)


async def bench(kind: type[Any], n: int, warm: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    sandbox = kind() if kind is agentlib.BashkitSandbox else kind(root=root)
    turns = warm + n
    bash = agentlib.Agent(
        name="bash",
        model=scripted("file_system.bash", {"command": "true"}, turns),
        environment=sandbox,
    )
    local = agentlib.Agent(
        name="local", model=scripted("nothing", {}, turns), tools=[nothing], environment=sandbox
    )
    async with agentlib.open_runtime():
        through_session = await bash.start_session()
        local_session = await local.start_session()
        await time_turns(through_session, warm)
        await time_turns(local_session, warm)
        through = await time_turns(through_session, n)
        turn_local = await time_turns(local_session, n)
        await through_session.cancel()
        await local_session.cancel()
    if kind is agentlib.BashkitSandbox:
        time_bare_bashkit(sandbox, warm)
        bare = time_bare_bashkit(sandbox, n)
    else:
        workspace = root / "bare"
        workspace.mkdir()
        command = sandbox.command_line("true", workspace, workspace)
        time_bare(command, warm)
        bare = time_bare(command, n)
    turn = median_us(through) - median_us(turn_local)
    return {
        "bench": "sandbox_bash_true",
        "kind": kind.__name__,
        "n": n,
        "bare_us": median_us(bare),
        "turn_us": round(turn, 1),
        "turn_local_us": median_us(turn_local),
        "overhead_us": round(turn - median_us(bare), 1),
        "python": platform.python_version(),
    }


async def main(n: int) -> None:
    kinds: list[Any] = [agentlib.DangerousLocalSandbox]
    try:
        agentlib.IsolatedSandbox()
    except agentlib.SandboxError as error:
        print(json.dumps({"bench": "sandbox_bash_true", "kind": "IsolatedSandbox",
                          "skipped": str(error)}))  # fmt: skip
    else:
        kinds.append(agentlib.IsolatedSandbox)
    try:
        agentlib.BashkitSandbox()
    except agentlib.SandboxError as error:
        print(json.dumps({"bench": "sandbox_bash_true", "kind": "BashkitSandbox",
                          "skipped": str(error)}))  # fmt: skip
    else:
        kinds.append(agentlib.BashkitSandbox)
    for kind in kinds:
        print(json.dumps(await bench(kind, n, max(1, n // 10))), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=200)
    trio.run(main, parser.parse_args().n)
