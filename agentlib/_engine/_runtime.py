"""The runtime: the nursery where turns run, the sessions it holds, and its store."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._entries import Entry
from .._errors import SessionNotFoundError
from .._history import new_id
from .._store import open_store
from .._store._base import EventRow, Op, PruneRow, Store, StoreError
from ._core import SessionCore, TurnCore
from ._log import EventLog
from ._loop import run_turn

if TYPE_CHECKING:
    from .._agent import Agent

__all__ = ["Runtime", "check_trio", "current_runtime", "open_runtime"]

_CURRENT: contextvars.ContextVar[Runtime] = contextvars.ContextVar("agentlib_runtime")


@attrs.define(eq=False)
class Runtime:
    """Owns the engine: the nursery where turns run, the sessions, and the store. Use
    :func:`open_runtime` to get one.

    Attributes:
        store: Where the sessions live.
        owner: This runtime's name in the store's leases.
        lease_seconds: How long a lease on a session lasts without renewal.
        event_retention: How many events each session keeps (None: all).
    """

    _nursery: trio.Nursery
    store: Store
    owner: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    lease_seconds: float = 30.0
    event_retention: int | None = None
    sessions: dict[str, SessionCore] = attrs.field(factory=dict)
    agents: dict[str, Any] = attrs.field(factory=dict)  # Agents, by name
    _session_keys: dict[str, str] = attrs.field(factory=dict)
    _loads: trio.Lock = attrs.field(factory=trio.Lock)
    _renewal: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    _renewed: trio.Event = attrs.field(factory=trio.Event)
    _closing: bool = False

    def spawn_turn(self, turn: TurnCore) -> None:
        self._nursery.start_soon(run_turn, turn, name=f"agentlib turn {turn.id}")

    def spawn(self, function: Callable[..., Awaitable[None]], *args: Any, name: str) -> None:
        """Run ``function(*args)`` in the runtime's nursery; it must not raise."""
        self._nursery.start_soon(function, *args, name=name)

    def know(self, agent: Agent) -> None:
        """Remember ``agent`` and its subagents, to resume their sessions from the store."""
        if self.agents.get(agent.name) is agent:
            return
        self.agents[agent.name] = agent
        for sub in agent.subagents:
            self.know(sub)

    # -- the store ---------------------------------------------------------------------------

    def committed(self, ops: Sequence[Op]) -> None:
        """The store made ``ops`` durable: readers may see their events. No op: the store
        failed, and every reader hears of it."""
        if not ops:
            for held in self.sessions.values():
                held.log.wake()
        for op in ops:
            if isinstance(op, EventRow):
                core = self.sessions.get(op.session_id)
                if core is not None:
                    core.log.made_visible(op.seq)

    def turn_ended(self, core: SessionCore, turn: TurnCore) -> None:
        """Prune the session's oldest events beyond the retention: never those of the turn
        that just ended (its readers are reading them), nor any a reader cannot see yet."""
        keep = self.event_retention
        if keep is None:
            return
        before = min(core.log.last_seq - keep + 1, turn.first_seq, core.log.visible + 1)
        if before > core.log.first_seq:
            core.log.prune(before)
            core.write(PruneRow(core.id, before))

    # -- sessions ----------------------------------------------------------------------------

    def new_session(
        self,
        agent: Agent,
        inputs: Mapping[str, Any],
        *,
        key: str | None = None,
        parent: tuple[SessionCore, TurnCore] | None = None,
    ) -> SessionCore:
        """A new session, written to the store."""
        if self._closing:
            raise RuntimeError("this runtime is closing; open a new one to start sessions")
        session_id = new_id()
        core = SessionCore(
            id=session_id,
            agent=agent,
            runtime=self,
            log=self.event_log(session_id),
            idempotency_key=key,
            inputs=dict(inputs),
        )
        if parent is not None:
            core.parent, core.parent_turn = parent
        self.sessions[session_id] = core
        if key is not None:
            self._session_keys[key] = session_id
        lease = (self.owner, self.lease_seconds) if self.store.durable else None
        core.write(attrs.evolve(core.row, lease=lease))  # leased from the start
        return core

    async def start_session(
        self,
        agent: Agent,
        history: Sequence[Entry],
        inputs: Mapping[str, Any],
        idempotency_key: str | None,
    ) -> SessionCore:
        """A new session (or the one ``idempotency_key`` started) with ``history`` and
        ``inputs`` (JSON by input id), acknowledged once durable."""
        self.know(agent)
        if idempotency_key is not None:
            async with self._loads:  # two starts with one key make one session
                known = self._session_keys.get(idempotency_key)
                if known is None:
                    known = await self.store.session_for_key(idempotency_key)
                if known is None:
                    core = self.new_session(agent, inputs, key=idempotency_key)
            if known is not None:
                core = await self.session(known, agent)
                await self.store.flush()  # the first start may still wait for the store
                return core
        else:
            core = self.new_session(agent, inputs, key=None)
        for entry in history:
            core.add_entry(entry)
        await self.store.flush()
        return core

    def event_log(
        self, session_id: str, *, first_seq: int = 1, stored_seq: int | None = None
    ) -> EventLog:
        """A session's log; with a durable store, it reads back the events it lets go of."""
        read = None
        if self.store.durable:
            read = functools.partial(self.store.read_events, session_id)
        return EventLog(session_id, first_seq=first_seq, stored_seq=stored_seq, read=read)

    def core(self, session_id: str) -> SessionCore:
        """The live state of a session this runtime holds.

        Raises:
            SessionNotFoundError: It holds none with this id.
        """
        try:
            return self.sessions[session_id]
        except KeyError:
            raise not_found(session_id) from None

    async def session(self, session_id: str, agent: Agent) -> SessionCore:
        """The live state of a session, loaded from the store (with its whole tree of
        subagent sessions) the first time.

        Raises:
            SessionNotFoundError: The store has no such session.
            LeaseRefused: Another runtime holds the session's lease (a
                :class:`SessionBusyError`).
            StoreError: The store failed, or is damaged.
            RuntimeError: The runtime is closing.
        """
        core = self.sessions.get(session_id)
        if core is not None and core.ready:
            return core
        from ._restore import restore

        self.know(agent)
        # One load at a time: two loads of one tree (by its root and by a subagent) must not
        # both resume its turns. A read of a session being loaded waits here for the load.
        async with self._loads:
            core = self.sessions.get(session_id)
            if core is not None and core.ready:
                return core
            self.check_open()
            await restore(self, session_id, agent)
        return self.core(session_id)

    def check_open(self) -> None:
        """Raises:
        RuntimeError: The runtime is closing or closed: it changes nothing any more."""
        if self._closing:
            raise RuntimeError(
                "this runtime is closing or closed, and changes nothing any more; open a new "
                "runtime (on the same store, to go on with its sessions)"
            )

    async def _renew_leases(self) -> None:
        try:
            await self._renew_until_closed()
        finally:
            self._renewed.set()  # also when the runtime is cancelled from outside

    async def _renew_until_closed(self) -> None:
        with self._renewal:
            while True:
                await trio.sleep(self.lease_seconds / 3)
                held = [core.id for core in self.sessions.values() if not core.terminated]
                try:
                    lost = await self.store.renew(held, self.owner, self.lease_seconds)
                except Exception:  # a busy store: the next round retries
                    continue
                for session_id in lost:
                    # Another runtime took it over (this one stalled past its lease): this
                    # one lets it go, and leaves its turns to the new owner.
                    core = self.sessions.pop(session_id, None)
                    if core is not None and core.active is not None and core.active.record is None:
                        core.active.suspend()

    def _stop_turns(self) -> list[TurnCore]:
        """Stop (or, with a durable store, suspend) the trees of turns still going."""
        running = [
            core.active
            for core in self.sessions.values()
            if core.active is not None and not core.active.scope.cancel_called
        ]
        for turn in running:
            if turn.session.parent is not None:
                continue  # its parent's turn decides: it stops or suspends its subagents
            if self.store.durable and turn.resumable():
                turn.suspend()
            else:
                turn.stop("cancelled")
        return running

    async def aclose(self) -> None:
        """Stop every running turn and wait until all have ended; with a durable store, a
        tree of turns blocked on callbacks stays blocked, for the next runtime to resume."""
        self._closing = True
        running = self._stop_turns()  # at once: no turn takes another step
        async with self._loads:  # no load is half done (a load started now is refused)
            pass
        running += self._stop_turns()  # those a load resumed meanwhile
        for turn in running:
            await turn.done.wait()
        for core in self.sessions.values():
            core.log.close()  # readers of a suspended turn stop waiting
        self._renewal.cancel()
        if self.store.durable:
            await self._renewed.wait()
        with contextlib.suppress(StoreError):  # a failed store: the callers were told
            await self.store.flush()
        if self.store.durable:
            # Also once the store failed: a session it can still let go of, the next runtime
            # takes at once; the others' leases expire by themselves.
            with contextlib.suppress(StoreError):
                await self.store.release(list(self.sessions), self.owner)


def not_found(session_id: str) -> SessionNotFoundError:
    return SessionNotFoundError(
        f"no session {session_id!r} in this runtime's store; start one with "
        "agent.start_session(), or open the runtime on the store that holds it"
    )


def current_runtime() -> Runtime:
    """The runtime of the enclosing :func:`open_runtime` block.

    Raises:
        RuntimeError: There is none, or this is not trio code (asyncio, say).
    """
    try:
        return _CURRENT.get()
    except LookupError:
        check_trio()
        raise RuntimeError(
            "no agentlib runtime is running here: in trio code, wrap the calls in "
            "`async with agentlib.open_runtime():`; in a plain script, use `agentlib_sync`, "
            "which runs one for you"
        ) from None


def check_trio() -> None:
    """Refuse a call of the async API outside trio, before trio fails deep inside it.

    Raises:
        RuntimeError: This is not a trio task: an asyncio loop runs here, or no loop does.
    """
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        raise RuntimeError(
            "agentlib's async API runs under trio (`trio.run(main)`), and this call is not "
            "in a trio task; from asyncio code, Jupyter or a plain script, use "
            "`agentlib_sync`: its blocking calls run the engine on a thread of its own, and "
            "work inside a running event loop too"
        ) from None


def set_current_runtime(runtime: Runtime) -> contextvars.Token[Runtime]:
    return _CURRENT.set(runtime)


@asynccontextmanager
async def open_runtime(
    store: str | Store | None = None,
    *,
    event_retention: int | None = None,
    lease_seconds: float = 30.0,
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
            over at once.

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
    if event_retention is not None and (
        isinstance(event_retention, bool)
        or not isinstance(event_retention, int)
        or event_retention < 1
    ):
        raise ValueError(f"event_retention must be a positive int or None, not {event_retention!r}")
    if not (isinstance(lease_seconds, (int, float)) and 0 < lease_seconds < math.inf):
        raise ValueError(f"lease_seconds must be a positive number, not {lease_seconds!r}")
    backend = open_store(store)
    # Errors leave the block as they are, not wrapped in a group by the runtime's nursery.
    failure: Exception | None = None
    async with trio.open_nursery() as nursery:
        try:
            await backend.open(nursery.start_soon)
        except Exception as error:
            failure = error
        if failure is None:
            runtime = Runtime(
                nursery, backend, lease_seconds=lease_seconds, event_retention=event_retention
            )
            stop_listening = backend.listen(runtime.committed)
            if backend.durable:
                nursery.start_soon(runtime._renew_leases)
            token = _CURRENT.set(runtime)
            try:
                yield runtime
            except Exception as error:
                failure = error
            finally:
                _CURRENT.reset(token)
                with trio.CancelScope(shield=True):
                    await runtime.aclose()
                    stop_listening()
                    await backend.aclose()
                nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
