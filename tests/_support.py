"""Helpers shared by the engine's tests: tool calls and the model replies that make them, the
tools ``delete`` (an approval tool) and ``client.pick`` (a client tool), an agent that asks
for an approval, a session input, a gate that holds a turn, recording and echoing steps, a
turn's events, and a deadline on the wall clock for tests on trio's MockClock.

For tests of durable sessions: bounded waits on a turn's record and a session's events, the
one callback a turn is Blocked on, what a crash leaves of a SQLite file, who holds its
leases, and a full disk."""

from __future__ import annotations

import contextlib
import math
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import trio

import agentlib
from agentlib import (
    Agent,
    Blocked,
    MessageEntry,
    ModelReply,
    ModelRequest,
    ScriptedModel,
    SessionInput,
    SQLiteStore,
    Store,
    Tool,
    ToolCallRequest,
    ToolResultEntry,
    Turn,
    tool,
)

T = TypeVar("T")

#: The longest any wait of a test of durable sessions may take (real seconds): only a hang
#: reaches it, even on a busy machine.
WAIT = 30

#: Where tests run ``python -m agentlib``: a directory without the project's sources, so that
#: it imports the installed package, as a user's would (the project's root would shadow it).
HERE = Path(__file__).resolve().parent

#: Gives the ``store`` argument of each ``open_runtime`` of a test: the same store each time.
StoreFor = Callable[[], "str | Store"]


def in_thread(function: Callable[..., T], *args: Any) -> Future[T]:
    """``function(*args)`` in a daemon thread of its own (as agentlib_sync calls an
    on_approval handler): a call that never returns fails the test at the future's timeout,
    and does not keep the tests from ending."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(function(*args))
        except BaseException as error:
            future.set_exception(error)

    threading.Thread(target=run, daemon=True).start()
    return future


class Gate:
    """An async tool, ``hold``, that holds the turn calling it until the test opens the gate."""

    def __init__(self) -> None:
        self.reached = trio.Event()
        self.opened = trio.Event()

        async def hold() -> str:
            """Wait for the gate to open."""
            self.reached.set()
            await self.opened.wait()
            return "opened"

        self.tool = tool(hold)


HOLD = ModelReply(tool_calls=[ToolCallRequest(name="hold")])


def call(name: str, **arguments: Any) -> ToolCallRequest:
    """A call of the tool ``name`` with ``arguments``, as a model reply makes it."""
    return ToolCallRequest(name=name, arguments=arguments)


def reply(*calls: ToolCallRequest) -> ModelReply:
    """One model reply that makes ``calls`` (at once when there are several)."""
    return ModelReply(tool_calls=list(calls))


def call_tool(name: str, **arguments: Any) -> ModelReply:
    """A model step that calls one tool."""
    return reply(call(name, **arguments))


def tool_results(request: ModelRequest) -> list[ToolResultEntry]:
    return [entry for entry in request.entries if isinstance(entry, ToolResultEntry)]


def deleter(runs: list[str]) -> Tool:
    """An approval tool, ``delete``, that appends each path it deletes to ``runs``."""

    @agentlib.tool(requires_approval=True)
    async def delete(path: str) -> str:
        """Delete a file."""
        runs.append(path)
        return f"deleted {path}"

    return delete


def echo(prefix: str) -> Callable[[ModelRequest], str]:
    """A final step that answers ``"<prefix>: <text of the last entry>"`` (a tool result)."""

    def step(request: ModelRequest) -> str:
        return f"{prefix}: {request.entries[-1].text}"

    return step


def approval_agent(runs: list[str], *steps: Any, **options: Any) -> Agent:
    """``approver``, whose model plays ``steps`` with the approval tool ``delete`` (see
    ``deleter``). Without steps, it asks to delete /tmp/x, then answers ``done: <the tool's
    result>``."""
    return Agent(
        "approver",
        model=ScriptedModel(steps or [reply(call("delete", path="/tmp/x")), echo("done")]),
        tools=[deleter(runs)],
        **options,
    )


@agentlib.client_tool
def pick(prompt: str) -> int:
    """Ask the user to pick a number."""
    ...


class Repo(SessionInput):
    """A session input: the repository a session works on."""

    input_id = "repo"
    name: str


class Recorder:
    """A model step that records its request and answers ``text``."""

    def __init__(self, text: str = "done") -> None:
        self.text = text
        self.requests: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> str:
        self.requests.append(request)
        return self.text


def user_texts(request: ModelRequest) -> list[str]:
    return [
        entry.text
        for entry in request.entries
        if isinstance(entry, MessageEntry) and entry.role == "user"
    ]


def held_agent(gate: Gate, *then: Any, **options: Any) -> Agent:
    """An agent whose first step holds the turn at ``gate``; ``then`` are the next steps."""
    return Agent("held", model=ScriptedModel([HOLD, *then]), tools=[gate.tool], **options)


async def held_turn(session: agentlib.Session, gate: Gate, message: str = "go") -> Turn:
    """Start a turn and wait until it is held at the gate."""
    turn = await session.send_message(message)
    await gate.reached.wait()
    return turn


async def turn_events(
    turn: Turn, after: agentlib.TurnState[Any] | str | None = None, *, timeout: float = math.inf
) -> list[agentlib.Event]:
    """The turn's events after ``after`` (a record or a cursor), or from its start, through
    its ``TurnEnded``: the turn must have ended, or end within ``timeout`` seconds."""
    with trio.fail_after(timeout):
        async with contextlib.aclosing(turn.iter_events(after=after)) as events:
            return [event async for event in events]


@contextlib.contextmanager
def fail_after_real(seconds: float) -> Iterator[None]:
    """``trio.fail_after`` on the wall clock, for tests on trio's autojump clock whose waits
    include SQLite's worker threads.

    The autojump clock jumps to the next deadline whenever every task waits, and a task
    waiting on a worker thread counts as waiting: on a busy machine, a commit can take long
    enough for a virtual deadline to pass while it is under way. Only a hang reaches this one.

    Raises:
        trio.TooSlowError: The block was still running after ``seconds`` real seconds.
    """
    token = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as scope:

        def expire() -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(scope.cancel)

        timer = threading.Timer(seconds, expire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
    if scope.cancelled_caught:
        raise trio.TooSlowError


# --- durable sessions ----------------------------------------------------------------------


async def settled(turn: Turn, **options: Any) -> agentlib.TurnState[Any]:
    """``turn.result()``, which must come before ``WAIT``."""
    with trio.fail_after(WAIT):
        return await turn.result(**options)


async def events_through(session: agentlib.Session, last: str) -> list[agentlib.Event]:
    """The session's events from its start through the one whose id is ``last``."""
    seen: list[agentlib.Event] = []
    with trio.fail_after(WAIT):
        async with contextlib.aclosing(session.iter_events()) as events:
            async for event in events:
                seen.append(event)
                if event.id == last:
                    break
    return seen


def only_callback(record: agentlib.TurnState[Any], kind: type[T]) -> T:
    """The one callback ``record`` is Blocked on, of type ``kind``."""
    assert isinstance(record, Blocked), record
    (callback,) = record.callbacks
    assert isinstance(callback, kind), callback
    return callback


def crash_copy(live: Path, crashed: Path) -> SQLiteStore:
    """The SQLite files of ``live``, copied while nothing is being written, as a process killed
    now leaves them; the store on the copy reads the lease clock an hour on, past the dead
    owner's lease."""
    crashed.mkdir(exist_ok=True)
    for path in live.iterdir():
        shutil.copy(path, crashed / path.name)
    return SQLiteStore(str(crashed / "s.db"), clock=lambda: time.time() + 3600)


def lease_owners(path: Path) -> list[str | None]:
    """The lease owner of each session in the SQLite file (None: not leased)."""
    db = sqlite3.connect(path)
    try:
        return [owner for (owner,) in db.execute("SELECT lease_owner FROM sessions")]
    finally:
        db.close()


def fill_the_disk(store: SQLiteStore) -> None:
    """No more pages for the store's writer (PRAGMA max_page_count): the disk is full."""
    writer = store._writer
    assert writer is not None
    pages = writer.execute("PRAGMA page_count").fetchone()[0]
    writer.execute(f"PRAGMA max_page_count = {pages}")


async def past_refused_writes(call: Any) -> Any:
    """What ``call()`` returns once it does not fail for another session's refused writes: a
    call made while the refused session's turn still writes shares its commits, and fails
    with it (a few times at most: its turn stops at the first)."""
    for _ in range(5):
        try:
            return await call()
        except agentlib.StoreError:
            pass
    return await call()


def replies_unkeepable_text(request: agentlib.ModelRequest) -> str:
    """A model whose reply to "odd" is text with a lone surrogate, which no UTF-8 encodes."""
    last = request.entries[-1]
    said = last.content[0].text if isinstance(last, agentlib.MessageEntry) else ""  # type: ignore[union-attr]
    return "odd \udc80 reply" if said == "odd" else "fine"
