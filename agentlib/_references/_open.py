"""Opening a runtime: an engine for the block, and the front door through which ``Agent``
reaches it (to start sessions, or refer to one) without importing it."""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs

from .._data._entries import Entry
from .._data._history import new_id
from .._define._agent import history_for
from .._engine._runtime import Runtime, open_engine
from .._store._base import Store
from .._toolkit._inputs import stored_inputs
from .._trio._context import check_trio, current_door, reset_door, set_door
from ._backends._local import LocalBackend
from ._session import Session

if TYPE_CHECKING:
    from .._define._agent import Agent
    from .._define._definition import AgentDefinition

__all__ = ["current_runtime", "enter", "open_runtime", "start_session_soon"]


@attrs.define(eq=False)
class _Door:
    """The verbs of the public API that need the current runtime."""

    runtime: Runtime
    #: The backend of the agent last reached: its sessions' references share it.
    _last: LocalBackend | None = attrs.field(default=None, init=False)

    def _backend(self, agent: AgentDefinition) -> LocalBackend:
        last = self._last
        if last is None or last.agent is not agent:
            last = self._last = LocalBackend(self.runtime, agent)
        return last

    async def start_session(
        self,
        agent: AgentDefinition,
        *,
        history: Sequence[Entry],
        inputs: Any,
        idempotency_key: str | None,
        **handlers: Any,
    ) -> Session:
        live = await self.runtime._start_session(agent, history, inputs, idempotency_key)
        return Session(self._backend(agent), live.id, **handlers)

    def session(self, agent: AgentDefinition, session_id: str, **handlers: Any) -> Session:
        return Session(self._backend(agent), session_id, **handlers)


def start_session_soon(
    runtime: Runtime | None,
    agent: Agent,
    send: Callable[..., None],
    history: Iterable[Any] | None,
    inputs: Sequence[Any],
    idempotency_key: str | None,
    on_approval: Any,
    on_sign_in: Any,
    on_client_tool: Any,
) -> Session | None:
    """A new session of ``agent``, from a thread other than the runtime's, without waiting
    for it, where nothing is to be waited for: an in-memory runtime, no idempotency key.
    What is given is checked here (as :meth:`Agent.start_session` checks it); ``send``
    (``TrioToken.run_sync_soon``, or a queue in front of it) has the session made in the
    runtime's loop before any call sent after it. None where the start must be waited for:
    start it then.

    Raises:
        ValidationError: ``history`` or ``inputs`` is malformed; nothing was started.
    """
    if runtime is None or runtime.store.durable or idempotency_key is not None:
        return None
    entries = history_for(agent.model, history)
    stored = stored_inputs(inputs)
    session = Session(
        LocalBackend(runtime, agent),
        new_id(),
        on_approval=on_approval,
        on_sign_in=on_sign_in,
        on_client_tool=on_client_tool,
    )
    send(runtime._make_session, agent, stored, entries, session.id)
    return session


@asynccontextmanager
async def open_runtime(
    store: str | Store | None = None,
    *,
    event_retention: int | None = None,
    lease_seconds: float | None = None,
) -> AsyncIterator[Runtime]:
    """Run an engine for the duration of the block; sessions started inside use it.

    Args:
        store: Where sessions live: ``None`` or ``":memory:"`` keeps them in memory;
            ``"sqlite:///path.db"`` in a SQLite file (created on first use); or a
            :class:`Store`.
        event_retention: Keep only the last N events of each session (pruned when a turn
            ends); reading before them raises ``ObservationLost``. None keeps them all.
        lease_seconds: How long this runtime's hold on a session lasts if it stops renewing
            it (it stalled, or its process died on another host): then another runtime may
            take the session over. A runtime on this host whose process has ended is taken
            over at once. None: the store's default, 30 seconds (10 on PostgreSQL, whose
            runtimes may be on several hosts).

    Leaving the block interrupts running turns (``Interrupted(cause="cancelled")``); with a
    durable store, a turn blocked on callbacks stays blocked, for the next runtime on the
    store to resume. Returns once every task has ended.

    Raises:
        RuntimeError: The block is entered outside trio (under asyncio, say): use
            ``agentlib_sync`` there.
        ValueError: ``store`` names a kind of store agentlib does not know, or
            ``event_retention`` or ``lease_seconds`` is not positive.
        StoreSchemaError: The store's file was written by a newer agentlib.
    """
    check_trio()
    async with open_engine(
        store, event_retention=event_retention, lease_seconds=lease_seconds
    ) as runtime:
        token = set_door(_Door(runtime))
        try:
            yield runtime
        finally:
            reset_door(token)


def enter(runtime: Runtime) -> contextvars.Token[Any]:
    """Make ``runtime`` the current one in this context (a task the blocking facade runs)."""
    return set_door(_Door(runtime))


def current_runtime() -> Runtime:
    """The runtime of the enclosing :func:`open_runtime` block.

    Raises:
        RuntimeError: There is none.
    """
    runtime: Runtime = current_door().runtime
    return runtime
