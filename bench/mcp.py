"""The cost of an MCP tool call through a turn, beside the same call through a bare client.

Usage::

    python bench/mcp.py [N]       # N calls each way (500), after 50 warm-up calls

An MCP server written with the SDK (``tools/list`` counted by the server) runs as a stdio
process. The same process of this benchmark times, in alternating blocks of 50:

- ``bare``: ``ClientSession.call_tool("echo", ...)`` on the SDK's own stdio client session;
- ``turn``: a scripted turn whose model asks for ``srv.echo`` once and then answers, minus the
  same turn asking for a local tool that returns at once (``turn_local``): what the MCP call
  costs inside a turn, with the turn's own work taken out.

Prints two JSON lines: ``mcp_call``, the medians in µs and ``overhead_us``, the call through
a turn less the bare call (goal: ≤ 1,000 µs); ``mcp_lists``, the server's ``tools/list``
requests per 100 model steps over every turn run (goal: 1, the connection's first listing).
Compare figures from one run, never absolute times across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time
from typing import Any

# This file is named as the SDK's package: its folder must not shadow ``mcp`` on sys.path.
if sys.path and pathlib.Path(sys.path[0] or ".").resolve() == pathlib.Path(__file__).parent:
    del sys.path[0]

import trio

import agentlib

SERVER = '''
import os
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer


class Counting(MCPServer[Any]):
    async def list_tools(self) -> Any:
        with open(os.environ["BENCH_MCP_LISTS"], "a") as file:
            file.write("list\\n")
        return await super().list_tools()


server = Counting("bench")


@server.tool()
def echo(text: str) -> str:
    """Repeat a text."""
    return text


server.run("stdio")
'''

BLOCK = 50


def echo_local(text: str) -> str:
    """Repeat a text."""
    return text


def scripted(tool: str, turns: int) -> agentlib.ScriptedModel:
    call = agentlib.ToolCallRequest(name=tool, arguments={"text": "hi"})
    replies: list[Any] = []
    for _ in range(turns):
        replies += [agentlib.ModelReply(tool_calls=[call]), "done"]
    return agentlib.ScriptedModel(replies)


async def time_turns(agent: agentlib.Agent, count: int) -> list[float]:
    times = []
    for _ in range(count):
        session = await agent.start_session()
        began = time.perf_counter()
        record = await session.run("go")
        times.append(time.perf_counter() - began)
        assert isinstance(record, agentlib.Completed), record
    return times


async def main(n: int) -> None:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    folder = pathlib.Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    script = folder / "server.py"
    script.write_text(SERVER)
    lists, bare_lists = folder / "lists", folder / "bare-lists"
    lists.touch()
    env = {**os.environ, "BENCH_MCP_LISTS": str(lists)}
    # The bare client's server counts apart: the SDK's session lists the tools itself once,
    # to check results against their output schemas.
    bare_env = {**os.environ, "BENCH_MCP_LISTS": str(bare_lists)}
    command = [sys.executable, str(script)]
    warm, blocks = 50, max(1, n // BLOCK)
    turns_each = warm + blocks * BLOCK

    bare: list[float] = []
    through: list[float] = []
    local: list[float] = []
    parameters = StdioServerParameters(command=command[0], args=command[1:], env=bare_env)
    async with (
        agentlib.open_runtime(),
        stdio_client(parameters, errlog=sys.stderr) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        mcp_agent = agentlib.Agent(
            "bench_mcp",
            model=scripted("srv.echo", turns_each),
            mcps={"srv": agentlib.StdioMCP(command=command, env=env)},
        )
        local_agent = agentlib.Agent(
            "bench_local", model=scripted("echo_local", turns_each), tools=[echo_local]
        )
        for _ in range(warm):
            await client.call_tool("echo", {"text": "hi"})
        await time_turns(mcp_agent, warm)
        await time_turns(local_agent, warm)
        for _ in range(blocks):
            for _ in range(BLOCK):
                began = time.perf_counter()
                await client.call_tool("echo", {"text": "hi"})
                bare.append(time.perf_counter() - began)
            through += await time_turns(mcp_agent, BLOCK)
            local += await time_turns(local_agent, BLOCK)
    # Every listing counted is the turns' (2 model steps a turn).
    listed = lists.read_text().count("list")
    steps = 2 * turns_each
    us = 1e6
    bare_us = statistics.median(bare) * us
    turn_us = statistics.median(through) * us
    local_us = statistics.median(local) * us
    in_turn = turn_us - local_us
    print(
        json.dumps(
            {
                "framework": "agentlib",
                "version": agentlib.__version__,
                "mode": "mcp_call",
                "n": len(bare),
                "python": platform.python_version(),
                "bare_us_median": round(bare_us, 1),
                "turn_us_median": round(turn_us, 1),
                "turn_local_us_median": round(local_us, 1),
                "in_turn_us": round(in_turn, 1),
                "overhead_us": round(in_turn - bare_us, 1),
            }
        )
    )
    print(
        json.dumps(
            {
                "framework": "agentlib",
                "mode": "mcp_lists",
                "lists": listed,
                "model_steps": steps,
                "lists_per_100_steps": round(100 * listed / steps, 3),
            }
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, nargs="?", default=500)
    trio.run(main, parser.parse_args().n)
