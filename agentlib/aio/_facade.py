"""asyncio twins of :class:`agentlib.Agent`, :class:`agentlib.Session` and
:class:`agentlib.Turn`: each method awaits one hop into the trio method (in the engine's
thread) and back to the caller's loop; handlers given here run on the caller's loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, TypeVar, overload

import agentlib
import agentlib.aio._loop as _loop
from agentlib._references._session import (
    ApprovalHandler,
    ClientToolHandler,
    Content,
    EventHandler,
    SignInHandler,
)
from agentlib_sync._twins import AgentTwin, RemoteAgentTwin, SessionTwin, TurnTwin

from ._loop import on_loop

__all__ = ["Agent", "RemoteAgent", "Session", "Turn", "configure"]

OutputT = TypeVar("OutputT")


def configure(
    store: str | agentlib.Store | None = None,
    *,
    event_retention: int | None = None,
    lease_seconds: float | None = None,
) -> None:
    """Say where the asyncio API keeps its sessions: call it first, before the first session.

    The asyncio API and ``agentlib_sync`` share one engine (a trio loop on a thread of its
    own): this is :func:`agentlib_sync.configure`, which says what it does. Called once the
    engine runs, it stops it first and waits (a few seconds at most) for it to end, blocking
    the loop meanwhile: call it at startup.

    Args:
        store: Where sessions live: ``":memory:"``, ``"sqlite:///path.db"``,
            ``"postgresql://host/database"`` or a :class:`agentlib.Store`; None:
            ``AGENTLIB_STORE``, else in memory.
        event_retention: Keep only the last N events of each session; None keeps them all.
        lease_seconds: How long the engine's hold on a session lasts if it stops renewing
            it; None: the store's default.

    Raises:
        ValueError: ``store`` names no kind of store agentlib knows.
        RuntimeError: Called at interpreter exit.
    """
    _loop.configure(store, event_retention, lease_seconds)


def _turn_or_busy(
    value: agentlib.Turn | agentlib.Busy[agentlib.Turn], session: Session
) -> Turn | agentlib.Busy[Turn]:
    if isinstance(value, agentlib.Busy):
        return agentlib.Busy(turn=Turn(value.turn, session))
    return Turn(value, session)


class Agent(AgentTwin):
    """An agent; the asyncio twin of :class:`agentlib.Agent` (same arguments).

    Its tools and hooks that are coroutine functions (those of its tool sources too) are
    asyncio code: the engine runs them on the loop of the call that set their turn going.
    """

    _user_code = staticmethod(_loop.user_code)

    @staticmethod
    def load_from(
        url: str | Sequence[str],
        name: str,
        *,
        token: str | None = None,
        output_type: type[Any] | None = None,
        subagent_output_types: Mapping[str, type[Any]] | None = None,
        connect_timeout: float = 10.0,
        retry_for: float = 60.0,
    ) -> RemoteAgent:
        """A reference to the agent ``name`` served at ``url``; see
        :meth:`agentlib.Agent.load_from`."""
        return RemoteAgent(
            agentlib.Agent.load_from(
                url,
                name,
                token=token,
                output_type=output_type,
                subagent_output_types=subagent_output_types,
                connect_timeout=connect_timeout,
                retry_for=retry_for,
            )
        )

    async def start_session(
        self,
        *,
        history: Iterable[agentlib.HistoryImportEntry | Mapping[str, Any]] | None = None,
        inputs: Sequence[agentlib.SessionInput] = (),
        idempotency_key: str | None = None,
        on_approval: ApprovalHandler | None = None,
        on_sign_in: SignInHandler | None = None,
        on_client_tool: ClientToolHandler | None = None,
    ) -> Session:
        """Start a session; see :meth:`agentlib.Agent.start_session`. Its handlers run on
        this loop."""
        session = await _loop.start_session(
            self.agent, history, inputs, idempotency_key, on_loop(on_approval),
            on_loop(on_sign_in), on_loop(on_client_tool),
        )  # fmt: skip
        return Session(session)

    def session(
        self,
        session_id: str,
        *,
        on_approval: ApprovalHandler | None = None,
        on_sign_in: SignInHandler | None = None,
        on_client_tool: ClientToolHandler | None = None,
    ) -> Session:
        """A reference from a saved id; see :meth:`agentlib.Agent.session`. Its handlers run
        on the loop running here (the first call of the process starts the engine: it waits
        for that)."""
        return Session(
            _loop.reference(
                self.agent,
                session_id,
                on_approval=on_loop(on_approval),
                on_sign_in=on_loop(on_sign_in),
                on_client_tool=on_loop(on_client_tool),
            )
        )


class RemoteAgent(RemoteAgentTwin):
    """A deployed agent (from :meth:`Agent.load_from`); the asyncio twin of
    :class:`agentlib.RemoteAgent`."""

    async def start_session(
        self,
        *,
        history: Iterable[agentlib.HistoryImportEntry | Mapping[str, Any]] | None = None,
        inputs: Sequence[agentlib.SessionInput] = (),
        idempotency_key: str | None = None,
        on_approval: ApprovalHandler | None = None,
        on_sign_in: SignInHandler | None = None,
        on_client_tool: ClientToolHandler | None = None,
    ) -> Session:
        """Start a session on the server; see :meth:`agentlib.RemoteAgent.start_session`."""
        session = await _loop.call(
            self.agent.start_session,
            history=history,
            inputs=inputs,
            idempotency_key=idempotency_key,
            on_approval=on_loop(on_approval),
            on_sign_in=on_loop(on_sign_in),
            on_client_tool=on_loop(on_client_tool),
        )
        return Session(session)

    def session(
        self,
        session_id: str,
        *,
        on_approval: ApprovalHandler | None = None,
        on_sign_in: SignInHandler | None = None,
        on_client_tool: ClientToolHandler | None = None,
    ) -> Session:
        """A reference to a session on the server; see :meth:`agentlib.RemoteAgent.session`."""
        return Session(
            self.agent.session(
                session_id,
                on_approval=on_loop(on_approval),
                on_sign_in=on_loop(on_sign_in),
                on_client_tool=on_loop(on_client_tool),
            )
        )


class Session(SessionTwin):
    """A session; the asyncio twin of :class:`agentlib.Session`."""

    def turn(self, turn_id: str) -> Turn:
        """A reference to a turn; see :meth:`agentlib.Session.turn`."""
        return Turn(self._session.turn(turn_id), self)

    async def send_message(self, content: Content, *, idempotency_key: str | None = None) -> Turn:
        """Start or join a turn; see :meth:`agentlib.Session.send_message`."""
        turn = await _loop.call(
            self._session.send_message, content, idempotency_key=idempotency_key
        )
        return Turn(turn, self)

    async def start_turn(
        self,
        content: Content,
        *,
        idempotency_key: str | None = None,
        max_steps: int | None = None,
    ) -> Turn | agentlib.Busy[Turn]:
        """Start a turn, or get ``Busy``; see :meth:`agentlib.Session.start_turn`."""
        started = await _loop.call(
            self._session.start_turn,
            content,
            idempotency_key=idempotency_key,
            max_steps=max_steps,
        )
        return _turn_or_busy(started, self)

    @overload
    async def run(
        self,
        content: Content,
        *,
        output_type: type[OutputT],
        idempotency_key: str | None = None,
        timeout: float | None = None,
        on_event: EventHandler | None = None,
        max_steps: int | None = None,
    ) -> agentlib.TurnState[OutputT] | agentlib.Busy[Turn]: ...

    @overload
    async def run(
        self,
        content: Content,
        *,
        output_type: None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        on_event: EventHandler | None = None,
        max_steps: int | None = None,
    ) -> agentlib.TurnState[Any] | agentlib.Busy[Turn]: ...

    async def run(
        self,
        content: Content,
        *,
        output_type: type[Any] | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        on_event: EventHandler | None = None,
        max_steps: int | None = None,
    ) -> agentlib.TurnState[Any] | agentlib.Busy[Turn]:
        """Start a turn and wait for its record; see :meth:`agentlib.Session.run`.
        ``on_event`` runs on this loop."""
        record = await _loop.call(
            self._session.run,
            content,
            output_type=output_type,
            idempotency_key=idempotency_key,
            timeout=timeout,
            on_event=on_loop(on_event),
            max_steps=max_steps,
        )
        if isinstance(record, agentlib.Busy):
            return _turn_or_busy(record, self)  # type: ignore[return-value]
        return record

    def iter_events(
        self, *, after: agentlib.TurnState[Any] | str | None = None
    ) -> AsyncIterator[agentlib.Event]:
        """The session's events, replayed then live; see :meth:`agentlib.Session.iter_events`."""
        return _loop.iterate(lambda: self._session.iter_events(after=after))

    async def cancel(self) -> None:
        """End the session; see :meth:`agentlib.Session.cancel`."""
        await _loop.call(self._session.cancel)

    async def subagents(self) -> list[Session]:
        """Direct subagent sessions, newest first; see :meth:`agentlib.Session.subagents`."""
        return [Session(session) for session in await _loop.call(self._session.subagents)]


class Turn(TurnTwin):
    """A turn; the asyncio twin of :class:`agentlib.Turn`."""

    async def get(self) -> agentlib.TurnState[Any]:
        """The turn's record now; see :meth:`agentlib.Turn.get`."""
        return await _loop.call(self._turn.get)

    @overload
    async def result(
        self,
        *,
        output_type: type[OutputT],
        after: agentlib.TurnState[Any] | str | None = None,
        timeout: float | None = None,
        on_event: EventHandler | None = None,
    ) -> agentlib.TurnState[OutputT]: ...

    @overload
    async def result(
        self,
        *,
        output_type: None = None,
        after: agentlib.TurnState[Any] | str | None = None,
        timeout: float | None = None,
        on_event: EventHandler | None = None,
    ) -> agentlib.TurnState[Any]: ...

    async def result(
        self,
        *,
        output_type: type[Any] | None = None,
        after: agentlib.TurnState[Any] | str | None = None,
        timeout: float | None = None,
        on_event: EventHandler | None = None,
    ) -> agentlib.TurnState[Any]:
        """Wait for the turn's record; see :meth:`agentlib.Turn.result`. Cancelled, the wait
        stops and the turn goes on."""
        return await _loop.call(
            self._turn.result,
            output_type=output_type,
            after=after,
            timeout=timeout,
            on_event=on_loop(on_event),
        )

    def iter_events(
        self, *, after: agentlib.TurnState[Any] | str | None = None
    ) -> AsyncIterator[agentlib.Event]:
        """This turn's events until its end; see :meth:`agentlib.Turn.iter_events`."""
        return _loop.iterate(lambda: self._turn.iter_events(after=after))

    async def steer(self, content: Content) -> Turn | agentlib.TurnConflict:
        """Add a message to the running turn; see :meth:`agentlib.Turn.steer`."""
        steered = await _loop.call(self._turn.steer, content)
        return self if isinstance(steered, agentlib.Turn) else steered

    async def answer(
        self, callback_id: str, answer: object
    ) -> agentlib.Answered | agentlib.AlreadySettled | agentlib.NotFound:
        """Settle an open callback of the session; see :meth:`agentlib.Turn.answer`."""
        return await _loop.call(self._turn.answer, callback_id, answer)

    async def interrupt(self) -> Turn | agentlib.TurnConflict:
        """Stop the turn; see :meth:`agentlib.Turn.interrupt`."""
        stopped = await _loop.call(self._turn.interrupt)
        return self if isinstance(stopped, agentlib.Turn) else stopped
