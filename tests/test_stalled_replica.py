"""A replica that stalled past its lease recovers by itself.

Two real ``agentlib serve`` processes share one PostgreSQL schema with 3-second leases. The
one holding a session blocked on an approval is stopped (SIGSTOP); the approval is answered
through the other, which takes the session over once the lease has run out; the first is
continued (SIGCONT). From then on, every request through it works: a new session and its
turn, the old session as the other runtime left it, and its health. Deadlines only catch
hangs.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio
from _lease_worker import TOO_BIG, approver
from _support import fill_the_disk
from conftest import POSTGRES

import agentlib
from agentlib import MemoryStore, SQLiteStore, StoreError

#: How long a wait here may take: only a hang reaches it.
WAIT = 60.0

SERVED = '''
import agentlib


@agentlib.tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


CALL = agentlib.ToolCallRequest(name="delete", arguments={"path": "a.txt"})
janitor = agentlib.Agent(
    "janitor",
    model=agentlib.FunctionModel(
        lambda request: "Done." if request.entries[-1].type == "tool_result"
        else agentlib.ModelReply(tool_calls=[CALL])
    ),
    tools=[delete],
)
'''


@contextlib.contextmanager
def served(
    directory: Path, store: str, lease: float
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``agentlib serve`` of SERVED's janitor on ``store``, with leases of ``lease``
    seconds, on a free port: the process and its URL."""
    (directory / "served.py").write_text(SERVED)
    process = subprocess.Popen(
        [sys.executable, "-m", "agentlib", "serve", "served:janitor", "--port", "0",
         "--store", store, "--lease-seconds", str(lease)],
        cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert " on http://" in line, line
        yield process, line.split(" on ")[1].split("/v1")[0]
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
        _, errors = process.communicate(timeout=60)
        print(errors[-3000:], file=sys.stderr)  # shown when the test fails


async def health(url: str) -> tuple[int, object]:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"{url}/v1/health")
    return response.status_code, response.json()


@pytest.mark.slow
async def test_a_server_stopped_past_its_lease_serves_every_request_once_continued(
    postgres_schema: str, tmp_path: Path
) -> None:
    store = f"{POSTGRES}?schema={postgres_schema}"
    with served(tmp_path, store, 3.0) as (stalled, one), served(tmp_path, store, 3.0) as (_, other):
        first = agentlib.Agent.load_from(one, "janitor")
        second = agentlib.Agent.load_from(other, "janitor")
        with trio.fail_after(WAIT):
            session = await first.start_session()
            blocked = await session.run("Clean up.")
        for cycle in range(10):
            assert isinstance(blocked, agentlib.Blocked), (cycle, blocked)
            # Stopped wherever it is: in a transaction, the database ends it once idle.
            stalled.send_signal(signal.SIGSTOP)
            try:
                with trio.fail_after(WAIT):
                    turn = second.session(session.id).turn(blocked.turn_id)
                    answered = await turn.answer(blocked.callbacks[0].id, agentlib.AllowApproval())
                    final = await turn.result()  # the other takes it over once the lease is out
            finally:
                stalled.send_signal(signal.SIGCONT)
            assert isinstance(answered, agentlib.Answered), (cycle, answered)
            assert isinstance(final, agentlib.Completed), (cycle, final)

            with trio.fail_after(WAIT):
                # The old session reads through the stalled server as the other left it.
                read = await first.session(session.id).turn(blocked.turn_id).get()
                assert read == final, cycle
                # A new session, and its turn, through the stalled server.
                session = await first.start_session()
                blocked = await session.run("Clean up.")
                assert isinstance(blocked, agentlib.Blocked), (cycle, blocked)
                assert await health(one) == (200, {"status": "ok"}), cycle
                # The next cycle's session is held by the stalled server.
                assert await first.session(session.id).turn(blocked.turn_id).get() == blocked


# --- health: whether the runtime can write ----------------------------------------------------


class RenewalFails(MemoryStore):
    """A durable memory store whose renewals fail while ``failing`` is set (a database that
    does not answer)."""

    failing = False

    async def renew(self, session_ids: object, owner: str, seconds: float) -> list[str]:
        if self.failing:
            raise StoreError("the store db.example failed: ConnectionRefused: no route")
        return await super().renew(session_ids, owner, seconds)  # type: ignore[arg-type]


async def wait_for_health(url: str, status: int) -> object:
    """The body of the server's health once it has ``status`` (polled: a renewal comes
    every third of a lease)."""
    with trio.fail_after(WAIT):  # only catches a hang
        while True:
            got, body = await health(url)
            if got == status:
                return body
            await trio.sleep(0.05)


async def test_health_is_503_with_the_reason_while_the_runtime_cannot_renew_its_leases(
    tmp_path: Path,
) -> None:
    store = RenewalFails()
    agent = approver(str(tmp_path / "runs.txt"))
    async with agentlib.serve([agent], store=store, port=0, lease_seconds=0.3) as server:
        assert await health(server.url) == (200, {"status": "ok"})
        store.failing = True
        body = await wait_for_health(server.url, 503)
        assert body == {
            "status": "unavailable",
            "reason": "it cannot renew its leases: the store db.example failed: "
            "ConnectionRefused: no route",
        }
        store.failing = False
        assert await wait_for_health(server.url, 200) == {"status": "ok"}


async def test_a_runtime_whose_store_failed_or_that_closed_cannot_write(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"))
    agent = approver(str(tmp_path / "runs.txt"))
    async with agentlib.open_runtime(store) as runtime:
        assert runtime.health().writable
        assert runtime.health().reason is None
        fill_the_disk(store)
        session = await agent.start_session()
        with pytest.raises(StoreError, match="full"):
            await session.start_turn(TOO_BIG)
        failed = runtime.health()
        assert not failed.writable
        assert failed.reason is not None
        assert failed.reason.startswith("its store failed: ")
        assert "full" in failed.reason
        assert TOO_BIG not in failed.reason
    closed = runtime.health()
    assert not closed.writable
    assert closed.reason == "the runtime is closing or closed"
