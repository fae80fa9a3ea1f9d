"""Helpers shared by the facade's tests: parked model steps, a plain function tool, and
bounded waits."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import trio
from _support import in_thread as started_in_thread

import agentlib_sync as agents

T = TypeVar("T")

#: The safety net of every handshake (real seconds): a broken facade fails the test instead of
#: hanging it; a busy machine never takes this long.
WAIT = 30.0


class Gate:
    """A model step that parks until the test opens the gate.

    ``reached`` is set once the step runs (so the turn is known to be running); ``open()``
    lets the step return ``answer``.
    """

    def __init__(self, answer: str = "opened") -> None:
        self.answer = answer
        self.reached = threading.Event()
        self._release = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None

    async def __call__(self, request: agents.ModelRequest) -> str:
        self._token = trio.lowlevel.current_trio_token()
        self.reached.set()
        await self._release.wait()
        return self.answer

    def wait_reached(self) -> None:
        assert self.reached.wait(WAIT), "the model step never ran"

    def open(self) -> None:
        """Let the parked step return (call from any thread but the engine's)."""
        self.wait_reached()
        trio.from_thread.run_sync(self._release.set, trio_token=self._token)

    def open_now(self) -> None:
        """Let the parked step return; call from the engine's thread (a handler)."""
        self._release.set()


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first one.
        b: The second one.
    """
    return a + b


def scripted_agent(*steps: Any, name: str = "scripted", **options: Any) -> agents.Agent:
    return agents.Agent(name=name, model=agents.ScriptedModel(steps), **options)


def call_tool(name: str, **arguments: Any) -> agents.ModelReply:
    return agents.ModelReply(tool_calls=[agents.ToolCallRequest(name=name, arguments=arguments)])


def in_thread(fn: Callable[[], T]) -> T:
    """``fn()`` on a helper thread, failing (not hanging) if it does not return in time."""
    try:
        return started_in_thread(fn).result(WAIT)
    except concurrent.futures.TimeoutError:
        raise AssertionError(f"{fn!r} did not return within {WAIT} s (deadlock?)") from None


class BlockingApproval:
    """A plain ``on_approval`` handler that blocks until another thread releases it.

    ``start(read)`` starts that thread: once the handler runs, it calls ``read(callback)``
    (a blocking call into the engine, which must answer while the handler blocks), keeps
    what it returns in ``states_while_blocked``, and releases the handler, which allows.
    """

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.handler_threads: list[threading.Thread] = []
        self.seen: list[agents.OpenApproval] = []
        self.states_while_blocked: list[Any] = []
        self._releaser: threading.Thread | None = None

    def __call__(self, callback: agents.OpenApproval) -> agents.AllowApproval:
        self.handler_threads.append(threading.current_thread())
        self.seen.append(callback)
        self.entered.set()
        assert self.release.wait(WAIT), "the releasing thread never set the event"
        return agents.AllowApproval()

    def start(self, read: Callable[[agents.OpenApproval], Any]) -> None:
        def release_when_entered() -> None:
            assert self.entered.wait(WAIT), "the handler never ran"
            self.states_while_blocked.append(read(self.seen[0]))
            self.release.set()

        self._releaser = threading.Thread(target=release_when_entered, daemon=True)
        self._releaser.start()

    def join(self) -> bool:
        """Wait for the releasing thread; True once it has finished."""
        assert self._releaser is not None
        self._releaser.join(WAIT)
        return not self._releaser.is_alive()
