"""The runtime: the nursery where turns run, and the sessions it holds."""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._entries import Entry
from .._errors import SessionNotFoundError
from .._history import new_id
from ._core import SessionCore, TurnCore
from ._log import EventLog
from ._loop import run_turn

if TYPE_CHECKING:
    from .._agent import Agent

__all__ = ["Runtime", "current_runtime", "open_runtime"]

_CURRENT: contextvars.ContextVar[Runtime] = contextvars.ContextVar("agentlib_runtime")


@attrs.define(eq=False)
class Runtime:
    """Owns the engine: the nursery where turns run, and the sessions. Use
    :func:`open_runtime` to get one."""

    _nursery: trio.Nursery
    store: str
    sessions: dict[str, SessionCore] = attrs.field(factory=dict)
    _session_keys: dict[str, str] = attrs.field(factory=dict)
    _closing: bool = False

    def spawn_turn(self, turn: TurnCore) -> None:
        self._nursery.start_soon(run_turn, turn, name=f"agentlib turn {turn.id}")

    def spawn(self, function: Callable[..., Awaitable[None]], *args: Any, name: str) -> None:
        """Run ``function(*args)`` in the runtime's nursery; it must not raise."""
        self._nursery.start_soon(function, *args, name=name)

    def core(self, session_id: str) -> SessionCore:
        """The live state of a session.

        Raises:
            SessionNotFoundError: No session has this id here.
        """
        try:
            return self.sessions[session_id]
        except KeyError:
            raise SessionNotFoundError(
                f"no session {session_id!r} in this runtime; start one with "
                "agent.start_session(), or open the runtime on the store that holds it"
            ) from None

    def start_session(
        self,
        agent: Agent,
        history: Sequence[Entry],
        inputs: Mapping[str, Any],
        idempotency_key: str | None,
    ) -> SessionCore:
        """A new session (or the one ``idempotency_key`` started) with ``history`` and
        ``inputs`` (JSON by input id)."""
        if self._closing:
            raise RuntimeError("this runtime is closing; open a new one to start sessions")
        if idempotency_key is not None and idempotency_key in self._session_keys:
            return self.sessions[self._session_keys[idempotency_key]]
        session_id = new_id()
        core = SessionCore(
            id=session_id,
            agent=agent,
            runtime=self,
            log=EventLog(session_id),
            idempotency_key=idempotency_key,
            inputs=dict(inputs),
        )
        self.sessions[session_id] = core
        if idempotency_key is not None:
            self._session_keys[idempotency_key] = session_id
        for entry in history:
            core.add_entry(entry)
        return core

    async def aclose(self) -> None:
        """Interrupt every running turn (``cause="cancelled"``) and wait until all have ended."""
        self._closing = True
        running = [core.active for core in self.sessions.values() if core.active is not None]
        for turn in running:
            turn.stop("cancelled")
        for turn in running:
            await turn.done.wait()
        self._nursery.cancel_scope.cancel()


def current_runtime() -> Runtime:
    """The runtime of the enclosing :func:`open_runtime` block.

    Raises:
        RuntimeError: There is none.
    """
    try:
        return _CURRENT.get()
    except LookupError:
        raise RuntimeError(
            "no agentlib runtime is running here: in trio code, wrap the calls in "
            "`async with agentlib.open_runtime():`; in a plain script, use `agentlib_sync`, "
            "which runs one for you"
        ) from None


def set_current_runtime(runtime: Runtime) -> contextvars.Token[Runtime]:
    return _CURRENT.set(runtime)


@asynccontextmanager
async def open_runtime(store: str | None = None) -> AsyncIterator[Runtime]:
    """Run an engine for the duration of the block; sessions started inside use it.

    Args:
        store: Where sessions' event logs live; ``None`` or ``":memory:"`` keeps them in
            memory.

    Leaving the block interrupts running turns (``Interrupted(cause="cancelled")``) and
    returns once every task has ended.

    Raises:
        ValueError: ``store`` names a kind of store agentlib does not know.
    """
    if store is None:
        store = ":memory:"
    if store != ":memory:":
        raise ValueError(f"unknown store {store!r}: use ':memory:'")
    async with trio.open_nursery() as nursery:
        runtime = Runtime(nursery, store)
        token = _CURRENT.set(runtime)
        try:
            yield runtime
        finally:
            _CURRENT.reset(token)
            with trio.CancelScope(shield=True):
                await runtime.aclose()
