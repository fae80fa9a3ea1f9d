"""A runtime process killed with SIGKILL while a sandbox command runs (tests/test_sandbox.py).

``python _sandbox_worker.py <store file> <sandboxes root> <fifo>``: starts a session whose
turn runs ``file_system.bash``; the command notes its run, writes its pid into the FIFO and
sleeps until it is killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

import agentlib
from agentlib import Agent, DangerousLocalSandbox, ModelReply, ScriptedModel, ToolCallRequest


def agent(root: Path, fifo: Path) -> Agent:
    command = f"echo ran >> {root}/runs; echo $$ > {fifo}; exec sleep 600"
    return Agent(
        name="crashing",
        model=ScriptedModel(
            [
                ModelReply(
                    tool_calls=[
                        ToolCallRequest(name="file_system.bash", arguments={"command": command})
                    ]
                ),
                "done",
            ]
        ),
        environment=DangerousLocalSandbox(root=root),
    )


async def main(store: str, root: Path, fifo: Path) -> None:
    async with agentlib.open_runtime(f"sqlite:///{store}"):
        session = await agent(root, fifo).start_session()
        turn = await session.start_turn("go")
        assert isinstance(turn, agentlib.Turn)
        print(session.id, turn.id, flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
