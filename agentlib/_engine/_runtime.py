"""The runtime: the nursery where turns run, the sessions it holds, and its store.

It is the only part of the engine that does I/O. The state of its sessions lives in
``_machine``; the runtime asks the machine's transitions what follows an input, and does
it: writes their facts to the store, publishes their events to the readers, spawns the
turns and the tools they ask for, and wakes whoever waits on a callback that closed.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import math
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._data._callbacks import (
    AllowApproval,
    Callback,
    DenyApproval,
    KeepCallbackOpen,
    OpenClientToolCall,
    SignInAnswer,
)
from .._data._entries import Entry
from .._data._errors import (
    LeaseLost,
    LeaseRefused,
    SandboxError,
    SessionBusyError,
    SessionNotFoundError,
    StoreError,
    UnsupportedSessionProcedureError,
    ValidationError,
)
from .._data._events import TurnEnded
from .._data._history import new_id
from .._data._ops import CallbackRow, EventRow, KeyRow, Op, PruneRow
from .._data._records import AlreadySettled, Answered, NotFound, TurnState
from .._mcp._connection import MCPConnection
from .._mcp._servers import MCPServer
from .._sandboxes._environment import workspace_for
from .._sandboxes._local import Workspace
from .._store import open_store
from .._store._base import Store, StoredSession
from . import _machine as machine
from ._live import LiveSession, LiveTurn, check_callback_id
from ._log import EventLog
from ._machine import CallbackPhase, CallState, SessionMachine, StopCause, own, without
from ._mailbox import serve as serve_requests
from ._restore import not_found, read_tree, restore
from ._turns import run_turn

if TYPE_CHECKING:
    from .._define._definition import AgentDefinition

__all__ = ["IDLE_KEPT", "Runtime", "RuntimeHealth", "open_engine"]

#: How many trees of sessions of a durable store a runtime keeps once they are idle (no
#: turn, no handler run, no reader): it lets go of the ones used least recently, and of
#: their leases, and reads them back from the store when they are used again.
IDLE_KEPT = 1_000

#: The inputs of every session started without any: one dict, never changed.
_NO_INPUTS: dict[str, Any] = {}


#: How many times a message that found the active turn ending tries again.
_SEND_TRIES = 3


def _owner_name() -> str:
    """A new runtime's name in the store's leases: its host, its process and an id of its
    own (``"web-2:4242:<hex>"``), which a refused lease's message shows."""
    return f"{socket.gethostname() or 'unknown'}:{os.getpid()}:{uuid.uuid4().hex}"


@attrs.frozen(kw_only=True)
class RuntimeHealth:
    """Whether a runtime can write now (:meth:`Runtime.health`).

    Attributes:
        writable: It takes changes, and makes them durable.
        reason: Why it cannot, when it cannot (its store failed, it is closed, it cannot
            renew its leases); None when it can.
    """

    writable: bool
    reason: str | None = None


@attrs.define(eq=False)
class Runtime:
    """Owns the engine: the nursery where turns run, the sessions, and the store. Use
    :func:`agentlib.open_runtime` to get one.

    Attributes:
        store: Where the sessions live.
        owner: This runtime's name in the store's leases.
        lease_seconds: How long a lease on a session lasts without renewal.
        event_retention: How many events each session keeps (None: all).

    It holds the sessions it runs (with a durable store, only the :data:`IDLE_KEPT` idle
    trees of sessions used last: the others are read back from the store when used); its
    methods for them are the engine's own, and sessions are reached through
    :class:`agentlib.Agent` and :class:`agentlib.Session`. :meth:`health` says whether it
    can write now.
    """

    _nursery: trio.Nursery
    store: Store
    owner: str = attrs.field(factory=_owner_name)
    lease_seconds: float = 30.0
    event_retention: int | None = None
    _sessions: dict[str, LiveSession] = attrs.field(factory=dict, init=False)
    _states: dict[str, SessionMachine] = attrs.field(factory=dict, repr=False, init=False)
    _agents: dict[str, Any] = attrs.field(factory=dict, init=False)  # Agents, by name
    _session_keys: dict[str, str] = attrs.field(factory=dict, init=False)
    _loads: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _renewal: trio.CancelScope = attrs.field(factory=trio.CancelScope, init=False)
    _renewed: trio.Event = attrs.field(factory=trio.Event, init=False)
    _closing: bool = attrs.field(default=False, init=False)
    # Events written and not yet durable, oldest first: (session, seq).
    _unseen: list[tuple[LiveSession, int]] = attrs.field(factory=list, init=False)
    _written: trio.Event = attrs.field(factory=trio.Event, init=False)
    # The callbacks this runtime is claiming in a shared store, while it claims them (with
    # how many claims of each are under way).
    _claiming: collections.Counter[str] = attrs.field(factory=collections.Counter, init=False)
    # Sessions started without waiting that could not be made, and why (_make_session).
    _unmade: dict[str, Exception] = attrs.field(factory=dict, init=False)
    # With a durable store, the roots of the trees of sessions held, least recently used
    # first.
    _recent: collections.OrderedDict[str, None] = attrs.field(
        factory=collections.OrderedDict, init=False
    )
    # The leases: when the last renewal that returned started (trio's clock), when the
    # last one was tried, when the one under way started, why the last one failed; and how
    # many sessions were found taken over, and the last.
    _renewed_at: float = attrs.field(factory=trio.current_time, init=False)
    _renew_tried_at: float = attrs.field(default=-math.inf, init=False)
    _renewing_since: float | None = attrs.field(default=None, init=False)
    _renew_failure: str | None = attrs.field(default=None, init=False)
    _renewing: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _taken: int = attrs.field(default=0, init=False)
    _last_taken: LeaseLost | None = attrs.field(default=None, init=False)
    # The connections to MCP servers, by server name, declaration and the session whose
    # sign-in they carry (None: one for every session); each is owned by one task.
    _mcp_connections: dict[tuple[str, MCPServer, str | None], MCPConnection] = attrs.field(
        factory=dict, init=False, repr=False
    )
    # The sandboxes of the root sessions this runtime holds, by root session id: made at
    # their first use by a turn, each deleted when its session is cancelled.
    _sandboxes: dict[str, Workspace] = attrs.field(factory=dict, init=False, repr=False)

    # -- doing what the machine decided -------------------------------------------------------

    def _commit(self, facts: Iterable[Op]) -> None:
        """Do what the facts of a transition ask: write them to the store; publish their
        events (to readers once durable); wake the waits on the callbacks they close; and
        note the ends of turns. The machine applied them already."""
        durable, write, sessions = self.store.durable, self.store.write, self._sessions
        for fact in facts:
            write(fact)
            if type(fact) is EventRow:
                live = sessions.get(fact.session_id)
                if live is None:
                    continue
                log, event = live.log, fact.event
                log.append(event)
                if durable:
                    self._unseen.append((live, fact.seq))
                    self._written.set()
                else:  # nothing to wait for: readers see it at once
                    log.made_visible(fact.seq)
                if type(event) is TurnEnded:
                    self._turn_ended(live, event)
            elif type(fact) is CallbackRow and fact.state != "open":
                live = self._sessions.get(fact.session_id)
                if live is not None:
                    self._callback_closed(live, fact.callback.id)

    def _callback_closed(self, live: LiveSession, callback_id: str) -> None:
        state = live.state.callbacks[callback_id]
        if isinstance(state.answer, SignInAnswer):  # never stored: this runtime keeps them
            live.credentials = {**live.credentials, **state.answer.credentials}
        closed = live.closed.get(callback_id)
        if closed is not None:
            live.closed = without(live.closed, callback_id)
            closed.set()
        self._wake_turn(live, state.callback.turn_id)

    def _turn_ended(self, live: LiveSession, ended: TurnEnded) -> None:
        """Prune the session's oldest events beyond the retention (never those of the turn
        that just ended, whose readers read them, nor any a reader cannot see yet); a
        subagent's session runs one turn, and ends with it."""
        keep = self.event_retention
        log = live.log
        if keep is not None:
            first_seq = live.state.turns[ended.turn_id or ""].first_seq
            before = min(log.last_seq - keep + 1, first_seq, log.visible + 1)
            if before > log.first_seq:
                log.prune(before)
                self.store.write(PruneRow(live.id, before))
        if live.state.parent_id is not None:
            log.close()
        if not live.readers:
            log.pack()  # idle, unless another turn starts

    async def _flush(self, *written: LiveSession) -> None:
        """Return once everything written so far is durable, and readers see its events:
        what a caller is told after this survives any crash.

        Args:
            written: The sessions the caller changed. A write to a session another runtime
                took over is refused: then this raises. With none given, it raises if any
                session was found taken over meanwhile.

        Raises:
            LeaseLost: Another runtime took over a session of ``written`` (this one stalled
                past its lease): this runtime let it go, and the change was not made here.
            StoreError: The store failed.
        """
        taken = self._taken
        await self._flush_writes()
        for live in written:
            if live.taken_over is not None:
                raise _taken_over(live.id, live.taken_over.owner)
        if not written and self._taken != taken:
            assert self._last_taken is not None
            raise _taken_over(self._last_taken.session_id, self._last_taken.owner)

    async def _flush_writes(self) -> None:
        """Return once each write made so far is durable, or refused for a session another
        runtime took over (whose tree this runtime lets go of), and readers see the events
        made durable.

        Raises:
            StoreError: The store failed.
        """
        batch, self._unseen = self._unseen, []
        try:
            await self.store.flush()
        except BaseException as error:
            self._unseen[:0] = batch
            if isinstance(error, StoreError):
                self._refused()
            raise
        finally:
            # Let go of the trees of the sessions whose writes the store refused.
            for lost in self.store.taken_over():
                self._taken += 1
                self._last_taken = lost
                self._taken_over(lost.session_id, lost.owner)
        for live, seq in batch:
            if live.taken_over is None:  # else it may have been refused: never shown
                live.log.made_visible(seq)

    def _taken_over(self, session_id: str, owner: str | None) -> None:
        """Another runtime (``owner``, if known) took over session ``session_id``, and with
        it its whole tree of subagent sessions: this one stalled past its lease. Hold the
        tree no more: its turns stop here without writing anything (the other runtime runs
        them), and its readers and waiters raise ``LeaseLost`` (read again, the session is
        read from the store, as the other runtime has it): the handler runs that follow it
        stop. Every other session goes on."""
        if session_id not in self._sessions:
            return
        root_id = machine.root_of(self._states, session_id).id
        tree = self._tree(root_id)
        for live in tree:
            active = live.state.active
            if active is not None:
                self._suspend_turn(live, active)
        self._recent.pop(root_id, None)
        for live in tree:
            self._sessions.pop(live.id, None)
            if live.state.key is not None:
                self._session_keys.pop(live.state.key, None)
            live.taken_over = _taken_over(live.id, owner)
            live.log.take_over(functools.partial(_taken_over, live.id, owner))
        self._spawn(self._forget, tree, name="agentlib forget taken over")

    async def _forget(self, tree: list[LiveSession]) -> None:
        """Forget the states of a tree taken over, once its turns' tasks and its readers
        here have left (a reader raises at its next wait), unless it was read back
        meanwhile."""
        for live in tree:
            for turn in list(live.turns.values()):
                if turn.scope is not None:  # its task is still leaving
                    await turn.done.wait()
            await live.no_readers()
        for live in tree:
            if live.id not in self._sessions and self._states.get(live.id) is live.state:
                del self._states[live.id]
        self._close_mcp_connections(live.id for live in tree if live.id not in self._sessions)
        for live in tree:
            if live.id not in self._sessions:
                self._sandboxes.pop(live.id, None)  # its workspace stays, for its new runtime

    def _refused(self) -> None:
        """The store failed, or refused a session's writes: every reader hears of it (their
        waits return, and raise StoreError where the store no longer writes their session),
        and the turns of a session it refused stop here, writing nothing more, as if its
        lease were lost."""
        for live in self._sessions.values():
            live.log.wake()
            if self.store.failure is None and live.state.active is not None:
                try:
                    self.store.check_session(live.id)
                except StoreError:
                    self._suspend_turn(live, live.state.active)

    async def _publish(self) -> None:
        """Show readers the events the store made durable, as it does (a durable store)."""
        while True:
            await self._written.wait()
            self._written = trio.Event()
            try:
                await self._flush_writes()
            except StoreError:
                if self.store.failure is not None:
                    return
                # The store refused one session's rows and wrote the others': go on.

    def _spawn(self, function: Callable[..., Awaitable[None]], *args: Any, name: str) -> None:
        """Run ``function(*args)`` in the runtime's nursery; it must not raise."""
        self._nursery.start_soon(function, *args, name=name)

    def _mcp_connection(
        self, name: str, server: MCPServer, session_id: str | None = None
    ) -> MCPConnection:
        """The runtime's connection to MCP server ``name`` as ``server`` declares it, made
        (not yet opened) if there is none."""
        key = (name, server, session_id)
        connection = self._mcp_connections.get(key)
        if connection is None:
            connection = MCPConnection(name, server, self._spawn)
            self._mcp_connections[key] = connection
        return connection

    def _sandbox(self, root: LiveSession) -> Workspace | None:
        """The sandbox of root session ``root`` as its agent declares it (not yet opened);
        None when it has none."""
        sandbox = self._sandboxes.get(root.id)
        if sandbox is None:
            sandbox = workspace_for(root.agent.environment, root.id)
            if sandbox is not None:
                self._sandboxes[root.id] = sandbox
        return sandbox

    def _own_mcp_connections(self, session_ids: Iterable[str]) -> list[MCPConnection]:
        """The connections of the sessions' own (to the servers they signed in to), which no
        other session uses, taken from the runtime's: to close, as the sessions ended or
        this runtime let them go."""
        ids = set(session_ids)
        return [
            self._mcp_connections.pop(key) for key in list(self._mcp_connections) if key[2] in ids
        ]

    def _close_mcp_connections(self, session_ids: Iterable[str]) -> None:
        """Close the sessions' own connections, in tasks of the runtime's nursery."""
        for connection in self._own_mcp_connections(session_ids):
            self._spawn(connection.aclose, name=f"agentlib MCP close {connection.name}")

    def _spawn_turn(self, live: LiveSession, turn_id: str, *, resume: bool = False) -> LiveTurn:
        """Run the turn in a task of its own (going on from its tool step, ``resume``)."""
        turn = live.turns.get(turn_id)
        if turn is None:
            turns = live.turns = own(live.turns)
            turn = turns[turn_id] = LiveTurn()
        turn.scope = trio.CancelScope()
        if turn.stopping:
            turn.scope.cancel()
        name = f"agentlib turn {turn_id}"
        self._nursery.start_soon(run_turn, self, live, turn_id, resume, name=name)
        return turn

    def _park_turn(self, live: LiveSession, turn_id: str) -> None:
        """The turn's task only waits: it leaves, and the turn is parked until what it
        waits on closes or ends (:meth:`wake_turn`)."""
        turn = live.turns[turn_id]
        turn.parked = True
        assert turn.scope is not None
        turn.scope.cancel()

    def _wake_turn(self, live: LiveSession, turn_id: str | None) -> None:
        """Something the turn may wait on closed or ended: a parked turn resumes."""
        turn = live.turns.get(turn_id or "")
        if turn is None or not turn.parked or turn.suspended:
            return
        if turn.scope is not None:  # its task is still leaving: it resumes once out
            turn.woken = True
            return
        turn.parked = False
        self._spawn_turn(live, live.state.turns[turn_id or ""].id, resume=True)

    def _turn_left(self, live: LiveSession, turn_id: str) -> None:
        """The task of a parked turn has left; resume it at once if it was woken (or must
        stop) meanwhile."""
        turn = live.turns[turn_id]
        turn.scope = None
        turn.working = 0
        turn.waiting.clear()
        if turn.suspended:
            turn.finish()
        elif turn.woken or turn.stopping:
            turn.woken = turn.parked = False
            self._spawn_turn(live, turn_id, resume=True)

    def _know(self, agent: AgentDefinition) -> None:
        """Remember ``agent`` and its subagents, to resume their sessions from the store."""
        if self._agents.get(agent.name) is agent:
            return
        self._agents[agent.name] = agent
        for sub in agent.subagents:
            self._know(sub)

    def _deploy(self, agent: AgentDefinition) -> None:
        """Run the sessions of ``agent``'s name with ``agent`` from now on (a new
        deployment): held ones from their next step, with their subagents' sessions taking
        its subagents of their names; stored ones when they are read back."""
        self._agents[agent.name] = agent
        for sub in agent.subagents:
            self._know(sub)
        for live in list(self._sessions.values()):
            if live.state.parent_id is None and live.agent.name == agent.name:
                self._redeploy(live, agent)

    def _redeploy(self, live: LiveSession, agent: AgentDefinition) -> None:
        live.agent = agent
        for child_id in live.state.children:
            child = self._sessions.get(child_id)
            sub = None if child is None else agent.subagents_by_name.get(child.agent.name)
            if child is not None and sub is not None:
                self._redeploy(child, sub)

    # -- sessions ---------------------------------------------------------------------------

    def _adopt(
        self,
        state: SessionMachine,
        agent: AgentDefinition,
        *,
        first_seq: int = 1,
        stored_seq: int | None = None,
        ready: bool = True,
    ) -> LiveSession:
        """Hold a session whose state is ``state``, run by ``agent`` (read back from the
        store: its events from ``first_seq`` to ``stored_seq`` are there)."""
        read = functools.partial(self.store.read_events, state.id) if self.store.durable else None
        live = LiveSession(
            state=state,
            agent=agent,
            log=EventLog(state.id, first_seq=first_seq, stored_seq=stored_seq, read=read),
            ready=ready,
        )
        self._sessions[state.id] = live
        if state.key is not None:
            self._session_keys[state.key] = state.id
        if state.parent_id is None:
            self._used(state.id)
        return live

    def _used(self, root_id: str) -> None:
        """The tree of sessions rooted at ``root_id`` was used: with a durable store, it is
        kept, and the idle trees used least recently beyond :data:`IDLE_KEPT` let go of."""
        if not self.store.durable:
            return
        recent = self._recent
        recent[root_id] = None
        recent.move_to_end(root_id)
        # A few at a time: a tree under way stays, as the most recent.
        for _ in range(min(4, len(recent) - IDLE_KEPT)):
            oldest = next(iter(recent))
            tree = self._tree(oldest)
            if not tree:  # let go of already: its lease was lost
                del recent[oldest]
            elif all(live.idle for live in tree):
                del recent[oldest]
                self._let_go(tree)
            else:
                recent.move_to_end(oldest)

    def _tree(self, root_id: str) -> list[LiveSession]:
        """The sessions this runtime holds of the tree rooted at ``root_id``."""
        tree = []
        todo = [root_id]
        while todo:
            live = self._sessions.get(todo.pop())
            if live is not None:
                tree.append(live)
                todo.extend(live.state.children)
        return tree

    def _let_go(self, tree: list[LiveSession]) -> None:
        """Hold the tree no more: its state is in the store, to read back when it is used;
        its leases end once all this runtime wrote is durable."""
        for live in tree:
            self._sessions.pop(live.id, None)
            self._states.pop(live.id, None)
            if live.state.key is not None:
                self._session_keys.pop(live.state.key, None)
            self._sandboxes.pop(live.id, None)  # its workspace stays, for when it is read back
        self._close_mcp_connections(live.id for live in tree)
        self._spawn(self._release, [live.id for live in tree], name="agentlib release")

    async def _release(self, session_ids: list[str]) -> None:
        """End this runtime's leases on sessions it let go of (unless it read them back
        meanwhile); a store that fails leaves them to expire."""
        with contextlib.suppress(StoreError):
            await self._flush_writes()
            async with self._loads:
                gone = [
                    session_id for session_id in session_ids if session_id not in self._sessions
                ]
                await self.store.release(gone, self.owner)

    def _new_session(
        self,
        agent: AgentDefinition,
        inputs: Mapping[str, Any],
        *,
        key: str | None = None,
        history: Sequence[Entry] = (),
        session_id: str | None = None,
    ) -> LiveSession:
        """A new session (``session_id``, or a new id), written to the store (leased as it
        is made)."""
        self._check_open()
        session_id = session_id or new_id()
        lease = (self.owner, self.lease_seconds) if self.store.durable else None
        facts = machine.new_session(
            self._states,
            session_id,
            agent.name,
            dict(inputs) if inputs else _NO_INPUTS,
            key=key,
            lease=lease,
        )
        live = self._adopt(self._states[session_id], agent)
        self._commit(facts)
        if history:
            self._commit(machine.import_history(self._states, session_id, history))
        return live

    def _make_session(
        self,
        agent: AgentDefinition,
        inputs: Mapping[str, Any],
        history: Sequence[Entry],
        session_id: str,
    ) -> None:
        """Make a session that a thread other than the runtime's started without waiting
        (:func:`~agentlib._references._open.start_session_soon`), in the runtime's loop,
        outside any task; a runtime that closed meanwhile makes none (calls on it say so)."""
        try:
            self._new_session(agent, inputs, history=history, session_id=session_id)
        except Exception as error:  # never out of a loop callback: it would stop the loop
            self._unmade[session_id] = error

    async def _start_session(
        self,
        agent: AgentDefinition,
        history: Sequence[Entry],
        inputs: Mapping[str, Any],
        idempotency_key: str | None,
    ) -> LiveSession:
        """A new session (or the one ``idempotency_key`` started) with ``history`` and
        ``inputs`` (JSON by input id), acknowledged once durable."""
        self._know(agent)
        if idempotency_key is not None:
            async with self._loads:  # two starts with one key make one session
                known = self._session_keys.get(idempotency_key)
                if known is None:
                    known = await self.store.session_for_key(idempotency_key)
                if known is None:
                    live = self._new_session(agent, inputs, key=idempotency_key, history=history)
            if known is not None:  # the first start may still wait for the store: flushed below
                live = await self._session(known, agent)
        else:
            live = self._new_session(agent, inputs, history=history)
        await self._flush(live)
        return live

    async def _session(self, session_id: str, agent: AgentDefinition) -> LiveSession:
        """A session this runtime holds, read back from the store (with its whole tree of
        subagent sessions) the first time.

        Raises:
            SessionNotFoundError: The store has no such session.
            LeaseRefused: Another runtime holds the session's lease (a
                :class:`SessionBusyError`).
            StoreError: The store failed, or is damaged.
            RuntimeError: The runtime is closing.
        """
        live = self._sessions.get(session_id)
        if live is not None and live.ready and self._leases_in_doubt():
            # This runtime stalled (a paused process): before it goes on with the session,
            # a renewal finds whether another runtime took it over meanwhile.
            with trio.move_on_after(self.lease_seconds / 3):  # a store that hangs: go on
                await self._renew_now()
            live = self._sessions.get(session_id)
        if live is not None and live.ready:
            self._used(machine.root_of(self._states, session_id).id)
            return live
        unmade = self._unmade.get(session_id)
        if unmade is not None:
            raise SessionNotFoundError(
                f"session {session_id} was started but never made ({unmade}); start another"
            ) from unmade
        self._know(agent)
        # One load at a time: two loads of one tree (by its root and by a subagent) must not
        # both resume its turns. A read of a session being loaded waits here for the load.
        async with self._loads:
            live = self._sessions.get(session_id)
            if live is not None and live.ready:
                return live
            self._check_open()
            await restore(self, session_id, agent)
        return self._live(session_id)

    def _live(self, session_id: str) -> LiveSession:
        """Raises:
        SessionNotFoundError: This runtime holds no such session."""
        try:
            return self._sessions[session_id]
        except KeyError:
            raise not_found(session_id) from None

    def _check_open(self) -> None:
        """Raises:
        RuntimeError: The runtime is closing or closed: it changes nothing any more."""
        if self._closing:
            raise RuntimeError(
                "this runtime is closing or closed, and changes nothing any more; open a new "
                "runtime (on the same store, to go on with its sessions)"
            )

    def _check_writable(self, live: LiveSession, procedure: str) -> None:
        """Raises:
        UnsupportedSessionProcedureError: The session is a subagent's, whose references
            only read (and interrupt its turns): ``procedure`` would change it."""
        if live.state.parent_id is not None:
            root = machine.root_of(self._states, live.id)
            raise UnsupportedSessionProcedureError(
                f"session {live.id} is a subagent's, whose references only read and interrupt "
                f"its turns, so {procedure} is refused; send to its root session "
                f"{root.id} instead, or cancel that one to stop it"
            )

    # -- turns ------------------------------------------------------------------------------

    def _start_turn(
        self,
        live: LiveSession,
        content: tuple[Any, ...],
        key: str | None,
        output_type: Any,
        max_steps: int | None,
    ) -> machine.Started | machine.Occupied:
        """Start a turn (and its task) with ``content``, or say which turn occupies the
        session."""
        agent = live.agent
        started, facts = machine.start_turn(
            self._states,
            live.id,
            content,
            key,
            max_steps=agent.max_steps if max_steps is None else max_steps,
            output_type=output_type,
            output_type_name=_type_name(output_type),
        )
        self._commit(facts)
        if isinstance(started, machine.Started) and started.new:
            self._spawn_turn(live, started.turn_id)
        return started

    def _steer(
        self, live: LiveSession, turn_id: str, content: tuple[Any, ...], key: str | None = None
    ) -> bool:
        steered, facts = machine.steer(self._states, live.id, turn_id, content, key)
        self._commit(facts)
        return steered

    async def _send_message(
        self, live: LiveSession, content: tuple[Any, ...], key: str | None, output_type: Any
    ) -> tuple[str, bool]:
        """Start a turn with the message, or add it to the running turn; acknowledged once
        durable. The turn's id, and whether it started.

        Raises:
            SessionIdempotencyConflictError: The key was used for another message.
            SessionTerminatedError: The session was cancelled.
            SessionBusyError: It still could not take the message after several tries.
        """
        for _ in range(_SEND_TRIES):
            started = self._start_turn(live, content, key, output_type, None)
            if isinstance(started, machine.Started):
                await self._flush(live)
                return started.turn_id, started.new
            if self._steer(live, started.turn_id, content, key):
                await self._flush(live)
                return started.turn_id, False
            # The active turn is ending: let it finish, then start a new one.
            await self._turn_done(live, started.turn_id).wait()
        raise SessionBusyError(
            f"session {live.id} could not take the message after {_SEND_TRIES} tries; "
            "nothing changed: send it again"
        )

    async def _interrupt(self, live: LiveSession, turn_id: str) -> bool:
        """Stop the session's active turn ``turn_id`` (``Interrupted(cause="interrupted")``)
        and wait for its end to be durable; False if it is not the active turn.

        Raises:
            TurnNotFoundError: The session has no such turn.
        """
        live.state.turn(turn_id)
        if live.state.active != turn_id:
            return False
        self._stop_turn(live, turn_id, StopCause.INTERRUPTED)
        await self._turn_done(live, turn_id).wait()
        await self._flush(live)
        return True

    def _turn_done(self, live: LiveSession, turn_id: str) -> trio.Event:
        """Set once the turn's task has ended (at once for a turn that runs no task here)."""
        turn = live.turns.get(turn_id)
        if turn is not None:
            return turn.done
        done = trio.Event()
        done.set()
        return done

    def _stop_turn(self, live: LiveSession, turn_id: str, cause: StopCause) -> None:
        """Stop the turn: it ends Interrupted (with the first cause given); a parked turn
        resumes to stop."""
        machine.stop(self._states, live.id, turn_id, cause)
        turn = live.turns.get(turn_id)
        if turn is None or turn.stopping or turn.suspended:
            return
        turn.stopping = True
        if turn.scope is not None:
            turn.scope.cancel()
        elif turn.parked:
            turn.parked = False
            self._spawn_turn(live, turn_id, resume=True)

    def _suspend_turn(self, live: LiveSession, turn_id: str) -> None:
        """Stop the turn's task, leaving it unended and its callbacks open in the store, for
        a later runtime to resume."""
        turn = live.turns.get(turn_id)
        if turn is None or turn.suspended:
            return
        turn.suspended = True
        if turn.scope is not None:
            turn.scope.cancel()
        else:  # parked: no task to stop, nor to stop its subagents' turns as it leaves
            turn.finish()
            step = live.state.turns[turn_id].step
            for call in step.calls if step is not None else ():
                if call.state is CallState.DELEGATED and call.child is not None:
                    child = self._sessions.get(call.child[0])
                    if child is None:
                        continue
                    child_state = child.state.turns[call.child[1]]
                    if machine.resumable(self._states, child_state):
                        self._suspend_turn(child, call.child[1])
                    else:
                        self._stop_turn(child, call.child[1], StopCause.CANCELLED)

    def _end_turn(self, live: LiveSession, turn_id: str, record: TurnState[Any]) -> None:
        """Record how the turn ended: TurnEnded is its last event."""
        _, facts = machine.end_turn(self._states, live.id, turn_id, record)
        self._commit(facts)
        turn = live.turns.get(turn_id)
        if turn is not None:
            live.turns = without(live.turns, turn_id)
            turn.finish()
        parent_id = live.state.parent_id
        if parent_id is not None:  # the parent's turn may wait on this one, parked
            parent = self._sessions.get(parent_id)
            if parent is not None:
                self._wake_turn(parent, live.state.parent_turn_id)

    def _record(self, live: LiveSession, turn_id: str) -> TurnState[Any]:
        """The turn's record as readers may see it now."""
        return machine.record_of(self._states, live.state.turn(turn_id), live.log.visible)

    async def _cancel(self, live: LiveSession) -> None:
        """End the session and its subagents: stop its turn, take no more commands, close
        the logs."""
        self._commit(machine.cancel(self._states, live.id))
        active = live.state.active
        if active is not None:
            self._stop_turn(live, active, StopCause.CANCELLED)
            await self._turn_done(live, active).wait()
        for child_id in live.state.children:
            child = self._sessions.get(child_id)
            if child is not None:
                await self._cancel(child)
        for connection in self._own_mcp_connections([live.id]):
            await connection.aclose()
        try:
            if live.state.parent_id is None:
                sandbox = self._sandbox(live)
                self._sandboxes.pop(live.id, None)
                if sandbox is not None:
                    await sandbox._destroy(live.state.inputs)
        finally:
            if not live.log.closed:
                live.log.close()

    # -- callbacks --------------------------------------------------------------------------

    def _closed_wait(self, owner: LiveSession, callback_id: str) -> trio.Event:
        """Set once the callback (of ``owner``) closes."""
        closed = owner.closed.get(callback_id)
        if closed is None:
            waits = owner.closed = own(owner.closed)
            closed = waits[callback_id] = trio.Event()
            if not owner.state.callbacks[callback_id].open:
                closed.set()
        return closed

    def _close_callback(self, owner: LiveSession, callback_id: str, **closing: Any) -> None:
        self._commit(machine.close_callback(self._states, owner.id, callback_id, **closing))

    async def _answer(
        self, live: LiveSession, callback_id: str, answer: object, key: str | None = None
    ) -> Answered | AlreadySettled | NotFound:
        """Settle callback ``callback_id`` of the session (or of a subagent's below it)
        with ``answer``; the first answer wins. An answer that repeats the idempotency
        ``key`` of the answer taken is told ``Answered``, as it was, also after a restart.

        Raises:
            ValueError: ``callback_id`` is not a UUID.
            SdkError: ``answer`` does not fit the callback.
        """
        callback_id = _check_answer(callback_id, answer)
        state = machine.find_callback(self._states, live.id, callback_id)
        if state is None:
            return NotFound()
        owner = self._live(state.callback.session_id)
        kept = None if key is None else machine.answer_key(callback_id, key)
        repeated = kept is not None and kept in owner.state.keys
        if not repeated:
            fitted = machine.fit_answer(state.callback, answer, owner.agent.tools_by_name)
            was_open = state.open
            lost_to = None
            if self.store.shared and was_open:
                # Another runtime may answer it too: the store's claim decides which wins.
                # Meanwhile this claim is this runtime's own, not one to take in from the
                # store (which keeps no credentials).
                self._claiming[callback_id] += 1
                try:
                    lost_to = await self.store.claim_callback(
                        _answered(owner.id, state.callback, fitted),
                        _key_row(owner.id, state, kept),
                    )
                finally:
                    self._claiming[callback_id] -= 1
                    if not self._claiming[callback_id]:
                        del self._claiming[callback_id]
                if lost_to is not None:
                    self._close_claimed(lost_to)
            else:
                # The read above and the write below are two steps, as with any shared
                # store: an answer that read the callback open may find another answer
                # took it meanwhile.
                await trio.lowlevel.checkpoint()
            if was_open and state.open and lost_to is None:
                self._close_callback(owner, callback_id, answer=fitted, key=kept)
            if not (was_open and state.phase is CallbackPhase.ANSWERED):
                return AlreadySettled(session_id=owner.id)
        return _told(state.answer, owner.id)

    def _close_claimed(self, row: CallbackRow) -> None:
        """Close a callback this runtime holds open that another runtime settled in the
        shared store (``row``, as the claim wrote it), as an answer here would: its turn goes
        on here."""
        if row.session_id not in self._sessions:
            return  # let go of meanwhile (taken over, say)
        state = machine.find_callback(self._states, row.session_id, row.callback.id)
        if state is None or not state.open:
            return
        if row.callback.id in self._claiming:
            return  # this runtime's own claim, under way: its answer closes it
        self._close_callback(
            self._live(row.session_id),
            row.callback.id,
            answered=row.state == "answered",
            answer=row.answer,
            error=row.error,
        )

    async def _apply_claims(self) -> None:
        """While the runtime is open, on a shared store: close the callbacks it holds open
        that other runtimes settled (a claim), as they are settled."""
        while True:
            waited = [
                (session.id, callback_id)
                for session in self._states.values()
                if session.id in self._sessions
                for callback_id, state in session.callbacks.items()
                if state.open
            ]
            try:
                settled = await self.store.wait_for_claims(waited)
            except StoreError:
                await trio.sleep(self.lease_seconds / 3)  # the store's failure is said elsewhere
                continue
            for row in settled:
                self._close_claimed(row)

    async def _claim_answer(
        self,
        session_id: str,
        agent: AgentDefinition,
        callback_id: str,
        answer: object,
        key: str | None,
    ) -> Answered | AlreadySettled | NotFound:
        """Settle a callback of a session another runtime holds on a shared store (of the
        session or of a subagent's below it): checked here, then claimed in the store, the
        first writer winning; the holder hears of it and its turn goes on there.

        Raises:
            ValueError: ``callback_id`` is not a UUID.
            SdkError: ``answer`` does not fit the callback.
            SessionBusyError: It is a sign-in's: credentials never reach the store, so only
                the runtime that holds the session takes them.
        """
        callback_id = _check_answer(callback_id, answer)
        tree, agents = await read_tree(self, session_id, agent)
        found = [
            (node, row)
            for node in tree
            for row in node.callbacks
            if row.callback.id == callback_id and _below(tree, node.row.session_id, session_id)
        ]
        if not found:
            return NotFound()
        node, row = found[0]
        owner_id = node.row.session_id
        kept = None if key is None else machine.answer_key(callback_id, key)
        if row.state != "open":
            if row.state == "answered" and any(k.key == kept for k in node.keys):
                return _told(row.answer, owner_id)
            return AlreadySettled(session_id=owner_id)
        fitted = machine.fit_answer(row.callback, answer, agents[owner_id].tools_by_name)
        if isinstance(fitted, SignInAnswer):
            raise SessionBusyError(
                f"session {session_id} is run by another runtime, and a sign-in's credentials "
                "never reach the store: answer the sign-in through that runtime (or once it "
                "has closed)"
            )
        lost_to = await self.store.claim_callback(
            _answered(owner_id, row.callback, fitted), _key_row(owner_id, row, kept)
        )
        if lost_to is None:
            return _told(fitted, owner_id)
        return AlreadySettled(session_id=owner_id)

    async def _report(
        self, live: LiveSession, callback_id: str, failure: str
    ) -> Answered | AlreadySettled | NotFound | None:
        """Close client tool call ``callback_id`` with the failure of a handler that ran
        elsewhere (``"LookupError: ..."``), which its model is told, as a local handler's
        failure is told when the agent reports tool errors; None when the agent raises them
        (the handler's caller raises the failure, and the call stays open).

        Raises:
            ValueError: ``callback_id`` is not a UUID.
            ValidationError: The callback is not a client tool call (an SdkError).
        """
        callback_id = check_callback_id(callback_id)
        state = machine.find_callback(self._states, live.id, callback_id)
        if state is None:
            return NotFound()
        if not isinstance(state.callback, OpenClientToolCall):
            raise ValidationError(
                f"callback {callback_id} is not a client tool call: only a client tool "
                "handler's failure is told to the model"
            )
        owner = self._live(state.callback.session_id)
        if owner.agent.tool_errors != "report":
            return None
        was_open = state.open
        await trio.lowlevel.checkpoint()  # as an answer's read and write are two steps
        if not (was_open and state.open):
            return AlreadySettled(session_id=owner.id)
        self._close_callback(owner, callback_id, error=failure)
        return Answered(session_id=owner.id)

    # -- leases and closing -------------------------------------------------------------------

    async def _renew_leases(self) -> None:
        try:
            with self._renewal:
                while True:
                    await trio.sleep(self.lease_seconds / 3)
                    async with self._renewing:
                        await self._renew()
        finally:
            self._renewed.set()  # also when the runtime is cancelled from outside

    def _leases_in_doubt(self) -> bool:
        """Whether no renewal started in the last lease has returned (this runtime stalled,
        or its store is slow): another runtime may have taken its sessions over. A store
        whose renewal failed is tried again after a third of a lease."""
        if not self.store.durable or self._closing:
            return False
        now = trio.current_time()
        if now - self._renewed_at <= self.lease_seconds:
            return False
        return self._renew_failure is None or now - self._renew_tried_at > self.lease_seconds / 3

    async def _renew_now(self) -> None:
        """Renew this runtime's leases at once, letting go of the sessions other runtimes
        took over (after a renewal under way, if any). A store that fails is told by
        :meth:`health`."""
        if not self.store.durable:
            return
        tried = trio.current_time()
        async with self._renewing:
            if self._renew_tried_at < tried:  # none started while this one waited
                await self._renew()

    async def _renew(self) -> None:
        """One renewal of every lease held; the sessions found taken over are let go of."""
        held = [live.id for live in self._sessions.values() if not live.state.terminated]
        started = self._renewing_since = self._renew_tried_at = trio.current_time()
        try:
            lost = await self.store.renew(held, self.owner, self.lease_seconds)
        except Exception as error:  # a busy store: the next round retries
            self._renew_failure = (
                str(error) if isinstance(error, StoreError) else type(error).__name__
            )
            return
        finally:
            self._renewing_since = None
        self._renewed_at = started
        self._renew_failure = None
        for session_id in lost:
            # Another runtime took it over (this one stalled past its lease): this one lets
            # its tree go, and leaves its turns to the new owner.
            self._taken_over(session_id, None)

    def health(self) -> RuntimeHealth:
        """Whether this runtime can write now: not if it is closing or closed, if its store
        failed, or if it cannot renew its leases (its store does not answer). A lost lease
        is about one session: the runtime goes on with the others, and stays writable.

        Returns:
            ``RuntimeHealth(writable=True)``, or ``writable=False`` with the reason.
        """
        if self._closing:
            return RuntimeHealth(writable=False, reason="the runtime is closing or closed")
        try:
            self.store.check()
        except StoreError as error:
            return RuntimeHealth(writable=False, reason=f"its store failed: {error}")
        if self.store.durable:
            since = self._renewing_since
            if since is not None and trio.current_time() - since > self.lease_seconds:
                return RuntimeHealth(
                    writable=False,
                    reason=f"its store has not answered a renewal of its leases for "
                    f"{trio.current_time() - since:.0f} s",
                )
            if self._renew_failure is not None:
                return RuntimeHealth(
                    writable=False,
                    reason=f"it cannot renew its leases: {self._renew_failure}",
                )
        return RuntimeHealth(writable=True)

    async def _close_sandboxes(self) -> None:
        """Kill what still runs in the sandboxes; with a store that forgets its sessions,
        destroy them too (their sessions end with the runtime). With a durable store, a
        workspace stays for the next runtime, which finds it again, until its session is
        cancelled."""
        sandboxes, self._sandboxes = self._sandboxes, {}
        for root_id, sandbox in sandboxes.items():
            await sandbox._kill_commands()
            live = self._sessions.get(root_id)
            if not self.store.durable:
                with contextlib.suppress(SandboxError):  # a hook's failure: deleted anyway
                    await sandbox._destroy(live.state.inputs if live is not None else {})

    def _stop_turns(self) -> list[trio.Event]:
        """Stop (or, with a durable store, suspend) the trees of turns still going; the
        events set once they have stopped."""
        stopping = []
        for live in list(self._sessions.values()):
            turn_id = live.state.active
            turn = live.turns.get(turn_id or "")
            if turn_id is None or turn is None or turn.stopping or turn.suspended:
                continue
            stopping.append(turn.done)
            if live.state.parent_id is not None:
                continue  # its parent's turn decides: it stops or suspends its subagents
            state = live.state.turns[turn_id]
            if self.store.durable and machine.resumable(self._states, state):
                self._suspend_turn(live, turn_id)
            else:
                self._stop_turn(live, turn_id, StopCause.CANCELLED)
        return stopping

    async def _aclose(self) -> None:
        """Stop every running turn and wait until all have ended; with a durable store, a
        tree of turns blocked on callbacks stays blocked, for the next runtime to resume."""
        self._closing = True
        stopping = self._stop_turns()  # at once: no turn takes another step
        async with self._loads:  # no load is half done (a load started now is refused)
            pass
        stopping += self._stop_turns()  # those a load resumed meanwhile
        for done in stopping:
            await done.wait()
        for live in self._sessions.values():
            live.log.close()  # readers of a suspended turn stop waiting
        async with trio.open_nursery() as nursery:  # no turn uses them now
            for connection in self._mcp_connections.values():
                nursery.start_soon(connection.aclose)
        await self._close_sandboxes()
        self._renewal.cancel()
        if self.store.durable:
            await self._renewed.wait()
        with contextlib.suppress(StoreError):  # a failed store: the callers were told
            await self._flush_writes()
        if self.store.durable:
            # Also once the store failed: a session it can still let go of, the next runtime
            # takes at once; the others' leases expire by themselves.
            with contextlib.suppress(StoreError):
                await self.store.release(list(self._sessions), self.owner)


def _taken_over(session_id: str, owner: str | None) -> LeaseLost:
    """The error of a change to, or a wait on, session ``session_id``, which another runtime
    (``owner``, if known) took over."""
    lost = LeaseLost(session_id, owner)
    host, pid = LeaseRefused._holder_of(owner or "")
    by = "another runtime" if owner is None else f"another runtime ({owner})"
    if pid is not None:
        by = f"another runtime (host {host}, pid {pid})"
    lost.args = (
        f"session {session_id} is now run by {by}, which took it over while this runtime "
        "stalled past its lease: this runtime let it go, and what it was changing there was "
        "not written. Read the session again (it is read from the store, as the runtime "
        "that holds it now runs it), and make the change again if it is not there",
    )
    return lost


def _type_name(output_type: Any) -> str | None:
    if output_type is None:
        return None
    return f"{getattr(output_type, '__module__', '?')}.{getattr(output_type, '__qualname__', '?')}"


@contextlib.asynccontextmanager
async def open_engine(
    store: str | Store | None, *, event_retention: int | None, lease_seconds: float | None
) -> Any:
    """A runtime on ``store`` for the block: see :func:`agentlib.open_runtime`."""
    if event_retention is not None and (
        isinstance(event_retention, bool)
        or not isinstance(event_retention, int)
        or event_retention < 1
    ):
        raise ValueError(f"event_retention must be a positive int or None, not {event_retention!r}")
    if lease_seconds is not None and not (
        isinstance(lease_seconds, (int, float)) and 0 < lease_seconds < math.inf
    ):
        raise ValueError(f"lease_seconds must be a positive number, not {lease_seconds!r}")
    backend = open_store(store)
    if lease_seconds is None:
        lease_seconds = backend.lease_seconds
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
            if backend.durable:
                nursery.start_soon(runtime._publish)
                nursery.start_soon(runtime._renew_leases)
            if backend.shared:
                nursery.start_soon(runtime._apply_claims)
                nursery.start_soon(serve_requests, runtime)
            try:
                yield runtime
            except Exception as error:
                failure = error
            finally:
                with trio.CancelScope(shield=True):
                    await runtime._aclose()
                    await backend.aclose()
                nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure


def _check_answer(callback_id: str, answer: object) -> str:
    """The callback's id, checked, if ``answer`` may be an answer.

    Raises:
        ValueError: ``callback_id`` is not a UUID.
        ValidationError: ``answer`` is ``KeepCallbackOpen()`` (an SdkError).
    """
    callback_id = check_callback_id(callback_id)
    if isinstance(answer, KeepCallbackOpen):
        raise ValidationError(
            "KeepCallbackOpen() is a handler's return value, never an answer: to leave "
            "a callback open, do not answer it"
        )
    return callback_id


def _answered(session_id: str, callback: Callback, answer: Any) -> CallbackRow:
    """The row of a callback that ``answer`` settles (a sign-in's credentials never stored)."""
    stored = None if isinstance(answer, SignInAnswer) else answer
    return CallbackRow(session_id, callback, "answered", stored, None)


def _key_row(session_id: str, state: Any, key: str | None) -> KeyRow | None:
    return None if key is None else KeyRow(session_id, key, state.callback.turn_id, "answer")


def _told(answer: Any, session_id: str) -> Answered:
    approval = answer if isinstance(answer, (AllowApproval, DenyApproval)) else None
    return Answered(answer=approval, session_id=session_id)


def _below(tree: Sequence[StoredSession], session_id: str, top_id: str) -> bool:
    """Whether ``session_id`` is ``top_id`` or a subagent's session below it."""
    parents = {node.row.session_id: node.row.parent_id for node in tree}
    at: str | None = session_id
    while at is not None:
        if at == top_id:
            return True
        at = parents.get(at)
    return False
