"""The child process of the lease tests (``tests/test_leases.py``), which kill it with SIGKILL.

Not a test module. Run as ``python _lease_worker.py SCENARIO PATH RUNS``, it opens a runtime
on the SQLite file PATH (``agentlib_sync`` scenarios: through ``AGENTLIB_STORE``), does what
SCENARIO says, prints one JSON line, flushed, for each thing acknowledged to it, and, for
most scenarios, then waits to be killed:

    blocked              a session whose turn is blocked on an approval: prints its ids
    blocked_disk_full    the same, then the disk fills and a call fails: prints the error
    sync_blocked         ``blocked`` through agentlib_sync
    sync_answer IDS      answers the approval of IDS through agentlib_sync and prints the
                         record, and when it found the session free (then ends)

The approval tool, ``delete``, appends each path it deletes to the file RUNS. The tests
build the same agent with :func:`approver`.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import trio

import agentlib

#: A message the full disk has no room for.
TOO_BIG = "x" * 50_000


def approver(runs: str, make: Callable[..., Any] = agentlib.Agent) -> Any:
    """An agent (``make``: agentlib's or agentlib_sync's class) whose turn asks to delete
    /tmp/x, then says what the tool did."""

    @agentlib.tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        with open(runs, "a") as file:
            file.write(path + "\n")
        return f"deleted {path}"

    return make(
        "approver",
        model=agentlib.ScriptedModel(
            [
                agentlib.ModelReply(
                    tool_calls=[
                        agentlib.ToolCallRequest(name="delete", arguments={"path": "/tmp/x"})
                    ]
                ),
                lambda request: f"done: {request.entries[-1].text}",
            ]
        ),
        tools=[delete],
    )


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def ids_of(session_id: str, record: Any) -> dict[str, str]:
    assert isinstance(record, agentlib.Blocked), record
    (callback,) = record.callbacks
    return {"session": session_id, "turn": record.turn_id, "callback": callback.id}


async def blocked(path: str, runs: str, *, fill_the_disk: bool = False) -> None:
    store = agentlib.SQLiteStore(path)
    async with agentlib.open_runtime(store):
        agent = approver(runs)
        session = await agent.start_session()
        say(**ids_of(session.id, await session.run("clean up")))
        if fill_the_disk:
            # No more pages for the store's writer (PRAGMA max_page_count): the disk is full.
            writer = store._writer
            assert writer is not None
            pages = writer.execute("PRAGMA page_count").fetchone()[0]
            writer.execute(f"PRAGMA max_page_count = {pages}")
            try:
                other = await agent.start_session()
                await other.start_turn(TOO_BIG)
            except agentlib.StoreError as error:
                say(failed=str(error))
            else:
                say(failed=None)
        await trio.sleep_forever()


def sync_blocked(runs: str) -> None:
    import agentlib_sync

    agent = approver(runs, agentlib_sync.Agent)
    session = agent.start_session()
    say(**ids_of(session.id, session.run("clean up")))
    time.sleep(3600)


def sync_answer(runs: str, ids: dict[str, str]) -> None:
    import agentlib_sync

    agent = approver(runs, agentlib_sync.Agent)
    turn = agent.session(ids["session"]).turn(ids["turn"])
    found = turn.get()
    free_at = time.time()
    answered = turn.answer(ids["callback"], agentlib_sync.AllowApproval())
    assert isinstance(answered, agentlib_sync.Answered), answered
    record = turn.result(timeout=60)
    say(found=type(found).__name__, free_at=free_at, record=agentlib.unstructure(record))


def main() -> None:
    scenario, path, runs, *rest = sys.argv[1:]
    if scenario == "blocked":
        trio.run(blocked, path, runs)
    elif scenario == "blocked_disk_full":
        trio.run(lambda: blocked(path, runs, fill_the_disk=True))
    elif scenario == "sync_blocked":
        sync_blocked(runs)
    elif scenario == "sync_answer":
        sync_answer(runs, json.loads(rest[0]))
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    main()
