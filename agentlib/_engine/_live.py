"""What a runtime holds of a session beyond its state: the trio parts, and what only this
process knows (credentials, handler runs, waits); and what the drivers of turns, handlers
and restores may ask of the runtime."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from .._data._errors import LeaseLost
from .._data._ops import Op
from .._data._records import TurnState
from .._mcp._connection import MCPConnection
from .._mcp._servers import MCPServer
from .._sandboxes._local import Workspace
from .._store._base import Store
from ._log import EventLog
from ._machine import NOTHING, SessionMachine, StopCause

if TYPE_CHECKING:
    from .._define._definition import AgentDefinition

__all__ = ["Engine", "LiveSession", "LiveTurn", "check_callback_id"]


@attrs.define(eq=False)
class LiveTurn:
    """What an unended turn is in this runtime beyond its state: the task that runs it, if
    any.

    A turn whose task has nothing left to do but wait on callbacks (and on its subagents'
    turns, which wait on theirs) holds no task: it is *parked*. The runtime resumes it, as a
    restart would, once one of them closes or ends.

    Attributes:
        scope: Cancelled to stop its task; None while no task runs it.
        stopping: A stop was asked: its task stops, and a parked turn resumes to stop.
        suspended: It was stopped without an end, for a later runtime to resume.
        parked: No task runs it, or the one that did is leaving: it only waits.
        woken: What it waits on closed or ended while its task was leaving: it resumes.
        working: The waits and calls of its task under way (its sign-in, each call).
        waiting: What those wait on: a callback's closing, a subagent's turn's end.
    """

    scope: trio.CancelScope | None = None
    stopping: bool = False
    suspended: bool = False
    parked: bool = False
    woken: bool = False
    working: int = 0
    waiting: list[trio.Event] = attrs.field(factory=list)
    _done: trio.Event | None = None

    @property
    def done(self) -> trio.Event:
        """Set once the turn has ended here (or was suspended, for a later runtime)."""
        if self._done is None:
            self._done = trio.Event()
        return self._done

    def finish(self) -> None:
        """The turn ended, or was suspended: its waits return."""
        self.scope = None
        if self._done is not None:
            self._done.set()

    @property
    def can_park(self) -> bool:
        """Whether everything its task does is waiting: then it may leave."""
        return (
            0 < self.working == len(self.waiting)
            and not (self.stopping or self.suspended)
            and not any(closed.is_set() for closed in self.waiting)
        )


@attrs.define(eq=False)
class LiveSession:
    """A session a runtime holds: its state, its log for readers, and what only this
    process knows of it (credentials, waits).

    Attributes:
        state: The session's state (``_machine``).
        agent: Its agent.
        log: Its events, for readers.
        ready: False while it is read back from the store: readers wait until it is.
        credentials: The sign-in credentials it was given (never stored), by source.
        closed: The waits on its callbacks: set when each closes, by callback id.
        turns: Its unended turns that run (or are parked) in this runtime, by id.
        readers: How many readers follow its log now: while one does, the runtime keeps it.
        taken_over: Set once another runtime took it over (this one stalled past its
            lease), and this one let it go: the error of a change made to it meanwhile.
    """

    state: SessionMachine
    agent: AgentDefinition
    log: EventLog
    ready: bool = True
    # Empty and shared until something is added (``own``): an idle session is small.
    credentials: Mapping[str, str] = attrs.field(default=NOTHING, repr=False)
    closed: Mapping[str, trio.Event] = attrs.field(default=NOTHING)
    turns: Mapping[str, LiveTurn] = attrs.field(default=NOTHING)
    readers: int = 0
    taken_over: LeaseLost | None = None
    _unread: trio.Event | None = attrs.field(default=None, repr=False)

    @property
    def id(self) -> str:
        return self.state.id

    def reading(self) -> _Reading:
        """A reader follows the session's log for the block."""
        return _Reading(self)

    async def no_readers(self) -> None:
        """Return once no reader follows the session's log."""
        while self.readers:
            if self._unread is None:
                self._unread = trio.Event()
            await self._unread.wait()

    def _read_no_more(self) -> None:
        """The last reader left."""
        if self._unread is not None:
            self._unread.set()
            self._unread = None

    @property
    def idle(self) -> bool:
        """Nothing of it is under way here: no turn, no reader."""
        return self.ready and self.state.active is None and not self.turns and not self.readers


class _Reading:
    """A reader follows a session's log for a ``with`` block (:meth:`LiveSession.reading`)."""

    __slots__ = ("live",)

    def __init__(self, live: LiveSession) -> None:
        self.live = live

    def __enter__(self) -> None:
        self.live.readers += 1

    def __exit__(self, *exc_info: object) -> None:
        live = self.live
        live.readers -= 1
        if not live.readers:
            live._read_no_more()
            if live.state.active is None:
                live.log.pack()  # idle


def check_callback_id(callback_id: object) -> str:
    """``callback_id`` in the canonical form of a UUID (as callbacks' ids are written).

    Raises:
        ValueError: It is not a UUID; nothing was sent.
    """
    if not isinstance(callback_id, str):
        raise ValueError(
            f"callback_id must be a callback's id (a UUID string), not {type(callback_id).__name__}"
        )
    try:
        return str(uuid.UUID(callback_id))
    except ValueError:
        raise ValueError(
            "callback_id must be a callback's id (a UUID), as listed in Blocked.callbacks"
        ) from None


class Engine(Protocol):
    """What the drivers of turns, handlers and restores may ask of their runtime, the only
    part of the engine that does I/O."""

    store: Store
    owner: str
    lease_seconds: float
    _states: dict[str, SessionMachine]
    _sessions: dict[str, LiveSession]
    _agents: dict[str, Any]

    def _commit(self, facts: Iterable[Op]) -> None: ...

    async def _flush(self, *written: LiveSession) -> None: ...

    async def _flush_writes(self) -> None: ...

    def _spawn(self, function: Callable[..., Awaitable[None]], *args: Any, name: str) -> None: ...

    def _spawn_turn(self, live: LiveSession, turn_id: str, *, resume: bool = False) -> LiveTurn: ...

    def _mcp_connection(
        self, name: str, server: MCPServer, session_id: str | None = None
    ) -> MCPConnection: ...

    def _sandbox(self, root: LiveSession) -> Workspace | None: ...

    def _park_turn(self, live: LiveSession, turn_id: str) -> None: ...

    def _wake_turn(self, live: LiveSession, turn_id: str | None) -> None: ...

    def _turn_left(self, live: LiveSession, turn_id: str) -> None: ...

    def _adopt(
        self,
        state: SessionMachine,
        agent: AgentDefinition,
        *,
        first_seq: int = 1,
        stored_seq: int | None = None,
        ready: bool = True,
    ) -> LiveSession: ...

    def _live(self, session_id: str) -> LiveSession: ...

    def _turn_done(self, live: LiveSession, turn_id: str) -> trio.Event: ...

    def _stop_turn(self, live: LiveSession, turn_id: str, cause: StopCause) -> None: ...

    def _suspend_turn(self, live: LiveSession, turn_id: str) -> None: ...

    def _end_turn(self, live: LiveSession, turn_id: str, record: TurnState[Any]) -> None: ...

    def _closed_wait(self, owner: LiveSession, callback_id: str) -> trio.Event: ...

    def _close_callback(
        self,
        owner: LiveSession,
        callback_id: str,
        *,
        answered: bool = True,
        answer: Any = None,
        error: str | None = None,
    ) -> None: ...

    async def _answer(self, live: LiveSession, callback_id: str, answer: object) -> Any: ...
