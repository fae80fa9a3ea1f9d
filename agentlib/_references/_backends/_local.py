"""A session of this process's runtime: held here, or, on a shared store, by another
runtime, which the verbs reach through ``_shared.SharedBackend``."""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from typing import Any

import trio

from ..._data._errors import SessionBusyError
from ..._data._events import Event
from ..._data._records import TurnState
from ..._engine import _machine as machine
from ..._engine._live import LiveSession, check_callback_id
from ..._engine._machine import TurnMachine
from ..._engine._mailbox import (
    Cancel,
    Interrupt,
    Report,
    SendMessage,
    StartTurn,
    Steer,
    request_key,
)
from ..._engine._runtime import Runtime
from ..._trio._context import check_trio
from ._base import (
    Backend,
    Content,
    Occupied,
    Started,
    Told,
    event_for_reader,
    message_content,
)
from ._shared import SharedBackend, StoreReader

__all__ = ["LocalBackend"]


class LocalBackend:
    """The sessions of ``runtime``, of ``agent``: each verb is done here when this runtime
    holds the session (or can take it), else sent to the runtime that holds it on a shared
    store; and done here after all if this runtime takes the session over meanwhile.

    Attributes:
        runtime: The runtime.
        agent: The sessions' agent.
    """

    __slots__ = ("agent", "runtime")

    def __init__(self, runtime: Runtime, agent: Any) -> None:
        self.runtime = runtime
        self.agent = agent

    @property
    def place(self) -> object:
        return self.runtime

    @property
    def _shared(self) -> SharedBackend:
        return SharedBackend(self.runtime, self.agent)

    def describe(self, session_id: str) -> str:
        return f"Session(id={session_id!r}, agent={self.agent.name!r})"

    def describe_turn(self, session_id: str, turn_id: str, started: bool | None) -> str:
        return f"Turn(id={turn_id!r}, session_id={session_id!r}, started={started!r})"

    async def _load(self, session_id: str) -> LiveSession:
        """The session's live state, read from the runtime's store the first time.

        Raises:
            RuntimeError: This is not trio code (asyncio, say).
        """
        check_trio()
        return await self.runtime._session(session_id, self.agent)

    async def _writable(self, session_id: str, procedure: str) -> LiveSession:
        """The session, if ``procedure`` may change it: a subagent's session only reads.

        Raises:
            UnsupportedSessionProcedureError: It is a subagent's.
        """
        live = await self._load(session_id)
        self.runtime._check_open()
        self.runtime._check_writable(live, procedure)
        return live

    async def _held(self, session_id: str, procedure: str | None = None) -> LiveSession | None:
        """The session if this runtime holds it (or can take it), checked as
        :meth:`_writable` checks it for ``procedure``; None if another runtime holds it on
        a shared store.

        Raises:
            SessionBusyError: Another runtime holds it, and the store is not shared.
        """
        try:
            if procedure is None:
                return await self._load(session_id)
            return await self._writable(session_id, procedure)
        except SessionBusyError:
            if not self.runtime.store.shared:
                raise
            return None

    async def start(
        self,
        session_id: str,
        procedure: str,
        content: Content,
        key: str | None,
        output_type: Any,
        max_steps: int | None,
        *,
        timeout: float | None = None,
        wait: bool = False,
    ) -> Started | Occupied:
        live = await self._held(session_id, procedure)
        if live is None:
            if output_type is not self.agent.output_type:
                raise SessionBusyError(
                    f"session {session_id} is run by another runtime, which runs its turns "
                    "with its agent's output type: a turn with another output type starts "
                    "only in the runtime that holds the session (or once it has let it go)"
                )
            key = request_key(key)  # a turn the holder started before it died is found
            blocks = message_content(content, self.agent.model)
            request = StartTurn(asked_as=procedure, content=blocks, key=key, max_steps=max_steps)
            reply = await self._shared.ask(session_id, request)
            if reply is not None:
                return _started(StartTurn.read(reply), timeout)
            live = await self._writable(session_id, procedure)  # this runtime holds it now
        blocks = message_content(content, self.agent.model)
        started = self.runtime._start_turn(live, blocks, key, output_type, max_steps)
        if isinstance(started, machine.Started):
            await self.runtime._flush(live)  # a started turn is acknowledged once durable
        return _started(started, timeout)

    async def send_message(
        self, session_id: str, content: Content, key: str | None
    ) -> tuple[str, bool]:
        live = await self._held(session_id, "send_message")
        if live is None:
            key = request_key(key)  # a message the holder took before it died is found
            blocks = message_content(content, self.agent.model)
            reply = await self._shared.ask(session_id, SendMessage(content=blocks, key=key))
            if reply is not None:
                return SendMessage.read(reply)
            live = await self._writable(session_id, "send_message")  # held here now
        blocks = message_content(content, self.agent.model)
        return await self.runtime._send_message(live, blocks, key, self.agent.output_type)

    async def steer(self, session_id: str, turn_id: str, content: Content) -> bool:
        key = None
        if await self._held(session_id, "steer") is None:
            key = request_key(key)  # a steer the holder took before it died is found
            blocks = message_content(content, self.agent.model)
            request = Steer(turn_id=turn_id, content=blocks, key=key)
            reply = await self._shared.ask(session_id, request)
            if reply is not None:
                return Steer.read(reply)
            await self._writable(session_id, "steer")  # this runtime holds it now
        blocks = message_content(content, self.agent.model)
        live = await self._load(session_id)
        live.state.turn(turn_id)  # raises TurnNotFoundError
        if self.runtime._steer(live, turn_id, blocks, key):
            await self.runtime._flush(live)  # acknowledged once durable
            return True
        return False

    async def interrupt(self, session_id: str, turn_id: str) -> bool:
        live = await self._held(session_id)
        if live is None:
            reply = await self._shared.ask(session_id, Interrupt(turn_id=turn_id))
            if reply is not None:
                return Interrupt.read(reply)
            live = await self._load(session_id)  # this runtime holds it now
        return await self.runtime._interrupt(live, turn_id)  # acknowledged once durable

    async def cancel(self, session_id: str) -> None:
        live = await self._held(session_id, "cancel")
        if live is None:
            if await self._shared.ask(session_id, Cancel()) is not None:
                return
            live = await self._writable(session_id, "cancel")  # this runtime holds it now
        await self.runtime._cancel(live)
        await self.runtime._flush(live)

    async def answer(
        self, session_id: str, turn_id: str, callback_id: str, answer: object, key: str | None
    ) -> Told:
        live = await self._held(session_id)
        if live is None:
            return await self._shared.answer(session_id, callback_id, answer, key)
        self.runtime._check_open()
        answered = await self.runtime._answer(live, callback_id, answer, key)
        await self.runtime._flush(live)  # a taken answer is acknowledged once durable
        return answered

    async def report(
        self, session_id: str, turn_id: str, callback_id: str, failure: str
    ) -> Told | None:
        live = await self._held(session_id)
        if live is None:
            check_callback_id(callback_id)  # refused here, as the holder would refuse it
            request = Report(callback_id=callback_id, failure=failure)
            reply = await self._shared.ask(session_id, request)
            if reply is not None:
                return Report.read(reply)
            live = await self._load(session_id)  # this runtime holds it now
        self.runtime._check_open()
        told = await self.runtime._report(live, callback_id, failure)
        await self.runtime._flush(live)
        return told

    async def record(self, session_id: str, turn_id: str) -> TurnState[Any]:
        live = await self._held(session_id)
        if live is None:
            return await self._shared.record(session_id, turn_id)  # another runtime holds it
        return self.runtime._record(live, turn_id)

    async def subagents(self, session_id: str) -> list[tuple[str, Backend]]:
        live = await self._held(session_id)
        if live is None:
            # Another runtime holds it: its children as the shared store has them.
            children = await self._shared.subagents(session_id)
        else:
            children = [
                (child_id, self.runtime._live(child_id).agent) for child_id in live.state.children
            ]
        return [
            (child_id, LocalBackend(self.runtime, agent)) for child_id, agent in reversed(children)
        ]

    async def settled(
        self, session_id: str, turn_id: str, after: str | None, deadline: float
    ) -> None:
        return None  # the wait follows the turn's events, from the log or the store

    def events(self, session_id: str, after: str | None, turn_id: str | None) -> LogReader:
        return LogReader(self, session_id, after, turn_id)


def _started(
    started: machine.Started | machine.Occupied, timeout: float | None
) -> Started | Occupied:
    if isinstance(started, machine.Started):
        return Started(turn_id=started.turn_id, new=started.new, left=timeout)
    return Occupied(turn_id=started.turn_id)


class LogReader:
    """A reader of the events of a session of this runtime (:class:`~._base.EventReader`):
    from its log while this runtime holds it (a reader of it, which keeps it in memory);
    else from the shared store as the runtime that holds it commits them, until this
    runtime takes it over (tried again after each page that brought nothing: its holder
    may have died or stalled, and each of those pages waits a third of a lease at most)."""

    def __init__(
        self, backend: LocalBackend, session_id: str, after: str | None, turn_id: str | None
    ) -> None:
        self._backend = backend
        self._session_id = session_id
        self._turn_id = turn_id
        self.cursor = after
        self.ended = False
        self._live: LiveSession | None = None
        self._turn: TurnMachine | None = None
        self._position = 0
        self._store: StoreReader | None = None  # while another runtime holds the session
        self._reading: AbstractContextManager[None] | None = None  # while this one does

    async def _hold(self) -> bool:
        """Whether this runtime holds the session (or could take it): then the reader
        reads its log, from the position read up to.

        Raises:
            InvalidCursorError: The session never had that position.
            TurnNotFoundError: The session has no such turn.
        """
        live = await self._backend._held(self._session_id)
        if live is None:
            return False
        position = live.log.seq_of(self.cursor)
        if self._turn_id is not None:
            self._turn = live.state.turn(self._turn_id)
            position = max(position, self._turn.first_seq - 1)
        self._reading = live.reading()
        self._reading.__enter__()
        self._live, self._position, self._store = live, position, None
        return True

    async def page(self, limit: int, wait: float) -> list[Event]:
        if self._live is None and (self._store is not None or not await self._hold()):
            return await self._store_page(limit, wait)
        live = self._live
        assert live is not None
        log, turn, position = live.log, self._turn, self._position

        def ended() -> bool:
            if turn is not None and turn.end_seq is not None and position >= turn.end_seq:
                return True
            return log.finished(position)

        if position >= log.visible and not ended():
            if wait < math.inf:
                with trio.move_on_after(wait):
                    await log.wait_beyond(position)
            else:
                await log.wait_beyond(position)
            self._backend.runtime.store.check_session(self._session_id)
        output_type = self._backend.agent.output_type
        events: list[Event] = []
        # A page of the log at most (the events held, or a page read back from the store):
        # a reader that stops between two pages has not read the next one yet.
        while position < log.visible and not events and limit and not ended():
            for event in await log.read_page(position + 1):
                position += 1
                if turn is None or event.turn_id == turn.id:
                    events.append(event_for_reader(event, output_type))
                if len(events) >= limit or position >= log.visible or ended():
                    break
        self._position = position
        if position:
            self.cursor = machine.format_cursor(self._session_id, position)
        self.ended = ended()
        return events

    async def _store_page(self, limit: int, wait: float) -> list[Event]:
        """A page read from the shared store: another runtime holds the session."""
        store = self._store
        if store is None:
            store = self._store = self._backend._shared.events(
                self._session_id, self.cursor, self._turn_id
            )
        events = await store.page(limit, min(wait, self._backend.runtime.lease_seconds / 3))
        self.cursor, self.ended = store.cursor, store.ended
        if not events and not self.ended:
            self._store = None  # nothing for a while: the next page tries to take it over
        return events

    def close(self) -> None:
        if self._reading is not None:
            self._reading.__exit__(None, None, None)
            self._reading = None
