"""A session's and a turn's live state, and the rules of starting, steering and stopping.

Everything here runs in the runtime's trio thread and changes state only between awaits, so
no lock is needed: a method that does not await is atomic.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from .._callbacks import (
    AllowApproval,
    Callback,
    Credentials,
    DenyApproval,
    KeepCallbackOpen,
    OpenApproval,
    OpenClientToolCall,
    OpenSignIn,
    SignInAnswer,
)
from .._content import TextContentBlock
from .._convert import unstructure
from .._entries import Entry, MessageEntry, ToolCallEntry, UnknownEntry
from .._errors import (
    ClientToolAnswerError,
    SdkError,
    SessionBusyError,
    SessionIdempotencyConflictError,
    SessionTerminatedError,
    TurnNotFoundError,
)
from .._events import (
    CallbackClosed,
    CallbackOpened,
    EntryAdded,
    EntryCompleted,
    Event,
    TurnEnded,
    TurnStarted,
)
from .._history import new_id
from .._records import (
    AlreadySettled,
    Answered,
    Blocked,
    Interrupted,
    NotFound,
    Running,
    TurnState,
)
from .._store._base import (
    CallbackRow,
    EntryRow,
    EventRow,
    KeyRow,
    Op,
    SessionRow,
    SteerRow,
    StepRow,
    TurnRow,
)
from ._log import EventLog, format_cursor

if TYPE_CHECKING:
    from .._agent import Agent
    from .._tools import Tool
    from ._handlers import HandlerRun
    from ._runtime import Runtime

__all__ = [
    "PendingCallback",
    "SessionCore",
    "TurnCore",
    "check_callback_id",
    "hidden_from_model",
]


@attrs.define(eq=False)
class TurnCore:
    """One turn's live state."""

    id: str
    session: SessionCore
    first_seq: int
    output_type: Any
    max_steps: int  # the most model steps it may take
    model_steps: int = 0  # the model steps it took so far
    record: TurnState[Any] | None = None
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    done: trio.Event = attrs.field(factory=trio.Event)
    stop_cause: Literal["interrupted", "cancelled"] | None = None
    steered: list[MessageEntry] = attrs.field(factory=list)
    open_callbacks: dict[str, Callback] = attrs.field(factory=dict)
    opened_at: dict[str, int] = attrs.field(factory=dict)  # seq of each one's CallbackOpened
    tool_calls: list[ToolCallEntry] = attrs.field(factory=list)
    end_seq: int | None = None  # the seq of its TurnEnded
    # The tool step under way (its calls), and how many model steps or tools run now: a
    # turn in a tool step with none running is blocked, and a later runtime can resume it.
    step: list[Any] | None = None
    working: int = 0
    suspended: bool = False  # stopped without an end, for a later runtime

    @property
    def ended(self) -> bool:
        return self.record is not None

    def state(self) -> TurnState[Any]:
        """The turn's record now, as far as the store has made it durable (a reader is never
        told of an end, or a callback, that a crash could still lose): its end record, or
        Blocked, or Running."""
        log = self.session.log
        cursor = log.last_cursor()
        if self.record is not None and self.end_seq is not None and self.end_seq <= log.visible:
            return attrs.evolve(self.record, cursor=cursor)
        callbacks = tuple(
            callback
            for callback_id, callback in self.open_callbacks.items()
            if self.opened_at.get(callback_id, log.visible + 1) <= log.visible
        )
        if callbacks:
            return Blocked(
                turn_id=self.id, session_id=self.session.id, cursor=cursor, callbacks=callbacks
            )
        return Running(turn_id=self.id, session_id=self.session.id, cursor=cursor)

    def resumable(self) -> bool:
        """Whether a later runtime can resume the turn from the store: in a tool step, it
        waits on an open callback (its own, or a subagent's below it), or it runs nothing
        and waits on subagent turns that can be resumed.

        A turn with an open callback is Blocked, as a caller may have been told, and stays
        so: the calls of its step that still run are cut short, and a later runtime gives
        the model an error result for each (their outcome is unknown).
        """
        if self.record is not None or self.step is None:
            return False
        if self.open_callbacks:  # any callback at any depth below: what Blocked lists
            return True
        if self.working:
            return False
        for call in self.step:
            if call.state == "running":
                return False
            if call.state == "delegated" and call.child is not None:
                child = self.session.runtime.sessions[call.child[0]].turns[call.child[1]]
                if child.record is None and not child.resumable():
                    return False
        return True

    def suspend(self) -> None:
        """Stop the turn's task but leave it unended and its callbacks open in the store,
        for a later runtime to resume."""
        self.suspended = True
        self.scope.cancel()

    def stop(self, cause: Literal["interrupted", "cancelled"]) -> None:
        if self.stop_cause is None:
            self.stop_cause = cause
        self.scope.cancel()


@attrs.define(eq=False)
class PendingCallback:
    """An open (or settled) callback, and what its turn is waiting for.

    Attributes:
        callback: The callback as clients see it.
        turn: The turn waiting on it.
        tool: For a client tool call, the stub its answer is checked against.
        closed: Set once it is settled or closed unanswered.
        answered: Whether an answer settled it.
        answer: The answer taken (checked: a client tool's value is of the stub's type).
        error: For a client tool whose handler failed (``tool_errors="report"``), the message
            the model gets instead of a result.
    """

    callback: Callback
    turn: TurnCore
    tool: Tool | None = None
    closed: trio.Event = attrs.field(factory=trio.Event)
    answered: bool = False
    answer: Any = None
    error: str | None = None

    @property
    def id(self) -> str:
        return self.callback.id


#: Answers of other callbacks, which a client tool's result must not be (a credential would
#: reach the model).
_NOT_RESULTS = (AllowApproval, DenyApproval, SignInAnswer, Credentials, KeepCallbackOpen)


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


def _type_name(output_type: Any) -> str | None:
    if output_type is None:
        return None
    return f"{getattr(output_type, '__module__', '?')}.{getattr(output_type, '__qualname__', '?')}"


def _fingerprint(content: Sequence[Any]) -> str:
    data = json.dumps(unstructure(tuple(content)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()


@attrs.define(eq=False)
class SessionCore:
    """One session's live state: its log, turns, history and idempotency keys."""

    id: str
    agent: Agent
    runtime: Runtime
    log: EventLog
    entries: list[Entry] = attrs.field(factory=list)
    turns: dict[str, TurnCore] = attrs.field(factory=dict)
    active: TurnCore | None = None
    terminated: bool = False
    idempotency: dict[str, tuple[str, str]] = attrs.field(factory=dict)
    idempotency_key: str | None = None
    inputs: dict[str, Any] = attrs.field(factory=dict, repr=False)
    callbacks: dict[str, PendingCallback] = attrs.field(factory=dict)
    handler_runs: dict[str, HandlerRun] = attrs.field(factory=dict)
    approved_tools: set[str] = attrs.field(factory=set)
    credentials: dict[str, str] = attrs.field(factory=dict, repr=False)
    # A subagent session: the session and turn that delegated to it.
    parent: SessionCore | None = attrs.field(default=None, repr=False)
    parent_turn: TurnCore | None = attrs.field(default=None, repr=False)
    children: list[SessionCore] = attrs.field(factory=list, repr=False)
    below: dict[str, PendingCallback] = attrs.field(factory=dict, repr=False)
    running_subagents: int = 0  # on a root: its subagent turns running, at any depth
    hidden: int = 0  # how many entries of the history the model does not see
    # False while the session is read back from the store: until the store holds what the
    # restore decided (a turn ended as UnknownOutcome, say), readers wait.
    ready: bool = True

    @property
    def row(self) -> SessionRow:
        """The session as the store keeps it."""
        return SessionRow(
            self.id,
            self.agent.name,
            None if self.parent is None else self.parent.id,
            None if self.parent_turn is None else self.parent_turn.id,
            self.idempotency_key,
            self.inputs,
            self.terminated,
        )

    @property
    def root(self) -> SessionCore:
        core = self
        while core.parent is not None:
            core = core.parent
        return core

    def ancestors(self) -> Iterator[tuple[SessionCore, TurnCore]]:
        """Each session above this one, with its turn that (indirectly) delegated to it."""
        core = self
        while core.parent is not None:
            assert core.parent_turn is not None
            yield core.parent, core.parent_turn
            core = core.parent

    # -- reading ---------------------------------------------------------------------------

    def turn(self, turn_id: str) -> TurnCore:
        try:
            return self.turns[turn_id]
        except KeyError:
            raise TurnNotFoundError(
                f"session {self.id} has no turn {turn_id!r}; use an id from a send or a record"
            ) from None

    def find_open(self, callback_id: str) -> PendingCallback | None:
        """The open callback ``callback_id`` of this session or of a subagent below it."""
        pending = self.callbacks.get(callback_id) or self.below.get(callback_id)
        if pending is None or pending.closed.is_set():
            return None
        return pending

    # -- callbacks -------------------------------------------------------------------------

    def open_callback(
        self,
        turn: TurnCore,
        callback_type: type[OpenApproval | OpenClientToolCall | OpenSignIn],
        tool: Tool | None = None,
        **fields: Any,
    ) -> PendingCallback:
        """Open a callback ``turn`` waits on: ``CallbackOpened`` joins the log."""
        callback = callback_type(
            id=str(uuid.uuid4()), session_id=self.id, turn_id=turn.id, **fields
        )
        pending = PendingCallback(callback=callback, turn=turn, tool=tool)
        self.callbacks[callback.id] = pending
        turn.open_callbacks[callback.id] = callback
        if self.durable:
            self.write(CallbackRow(self.id, callback))
        self.emit(CallbackOpened, turn.id, callback=callback)
        turn.opened_at[callback.id] = self.log.last_seq
        # Every session above lists it too, so that its turn reads Blocked and its readers
        # (and handlers) see it.
        for ancestor, delegating in self.ancestors():
            ancestor.below[callback.id] = pending
            delegating.open_callbacks[callback.id] = callback
            ancestor.emit(CallbackOpened, delegating.id, callback=callback)
            delegating.opened_at[callback.id] = ancestor.log.last_seq
        return pending

    def close_callback(
        self,
        pending: PendingCallback,
        *,
        answered: bool = True,
        answer: Any = None,
        error: str | None = None,
    ) -> None:
        """Close ``pending`` with ``answer`` (or a client tool's ``error``), or unanswered
        when its turn stopped. ``CallbackClosed`` joins the log."""
        if pending.closed.is_set():
            return
        callback = pending.callback
        pending.answered = answered
        pending.answer = answer
        pending.error = error
        del pending.turn.open_callbacks[callback.id]
        closed = {
            "callback_id": callback.id,
            "answer": answer if isinstance(answer, (AllowApproval, DenyApproval)) else None,
            "answered": pending.answered,
        }
        if self.durable:
            self.write(
                CallbackRow(
                    self.id,
                    callback,
                    "answered" if answered else "closed",
                    # A sign-in's credentials are never stored: a restarted runtime asks again.
                    None if isinstance(answer, SignInAnswer) else answer,
                    error,
                )
            )
        self.emit(CallbackClosed, pending.turn.id, **closed)
        for ancestor, delegating in self.ancestors():
            del ancestor.below[callback.id]
            del delegating.open_callbacks[callback.id]
            ancestor.emit(CallbackClosed, delegating.id, **closed)
        pending.closed.set()
        run = self.handler_runs.get(callback.id)
        if run is not None:
            run.scope.cancel()  # its answer is moot now
        if isinstance(answer, AllowApproval) and answer.scope == "session":
            assert isinstance(callback, OpenApproval)
            self.approved_tools.add(callback.tool_name)
            for other in list(self.callbacks.values()):
                waiting = other.callback
                if (
                    not other.closed.is_set()
                    and isinstance(waiting, OpenApproval)
                    and waiting.source == "tool"
                    and waiting.tool_name == callback.tool_name
                ):
                    self.close_callback(other, answer=answer)
        if isinstance(answer, SignInAnswer):
            self.credentials.update(answer.credentials)

    def fit_answer(self, pending: PendingCallback, answer: object) -> Any:
        """``answer`` checked against the callback it settles.

        Raises:
            SdkError: It does not fit (a :class:`ClientToolAnswerError` for a client tool);
                the message never repeats a credential or the value.
        """
        callback = pending.callback
        if isinstance(answer, type):
            raise SdkError(
                f"{answer.__name__} is a class: answer with an instance, {answer.__name__}(...)"
            )
        if isinstance(callback, OpenApproval):
            if not isinstance(answer, (AllowApproval, DenyApproval)):
                raise SdkError(
                    f"an approval is answered with AllowApproval() or DenyApproval(reason), "
                    f"not a {type(answer).__name__}"
                )
            if isinstance(answer, AllowApproval) and (
                callback.source == "hook" and answer.scope == "session"
            ):
                raise SdkError(
                    "a hook asked for this approval, so it can only be allowed once: "
                    'answer AllowApproval() (scope="once")'
                )
            return answer
        if isinstance(callback, OpenSignIn):
            if not isinstance(answer, SignInAnswer):
                raise SdkError(
                    f"a sign-in is answered with SignInAnswer(credentials={{source: ...}}), "
                    f"not a {type(answer).__name__}"
                )
            missing = [s for s in callback.sources if s not in answer.credentials]
            extra = sorted(s for s in answer.credentials if s not in callback.sources)
            if missing or extra:
                problems = []
                if missing:
                    problems.append("no credential for " + ", ".join(map(repr, missing)))
                if extra:
                    problems.append(
                        "credentials for sources not asked for: " + ", ".join(map(repr, extra))
                    )
                raise SdkError(
                    f"the SignInAnswer must name every requested source and only those "
                    f"({', '.join(map(repr, callback.sources))}): {'; '.join(problems)}"
                )
            return answer
        assert isinstance(callback, OpenClientToolCall), "only known callbacks are opened"
        assert pending.tool is not None
        if isinstance(answer, _NOT_RESULTS):
            raise ClientToolAnswerError(
                f"a {type(answer).__name__} answers another kind of callback; a client tool "
                "call is answered with the tool's result"
            )
        return pending.tool.check_answer(answer)

    async def answer(
        self, callback_id: str, answer: object
    ) -> Answered | AlreadySettled | NotFound:
        """Settle callback ``callback_id`` of this session with ``answer``; first answer wins."""
        callback_id = check_callback_id(callback_id)
        if isinstance(answer, KeepCallbackOpen):
            raise SdkError(
                "KeepCallbackOpen() is a handler's return value, never an answer: to leave "
                "a callback open, do not answer it"
            )
        # A subagent's callback is found here while it is open, and answered in its session.
        pending = self.callbacks.get(callback_id) or self.below.get(callback_id)
        if pending is None:
            return NotFound()
        owner = pending.turn.session
        fitted = self.fit_answer(pending, answer)
        was_open = not pending.closed.is_set()
        # The read above and the write below are two steps, as with any shared store: an
        # answer that read the callback open may find another answer took it meanwhile.
        await trio.lowlevel.checkpoint()
        if was_open and not pending.closed.is_set():
            owner.close_callback(pending, answer=fitted)
        if not (was_open and pending.answered):
            return AlreadySettled(session_id=owner.id)
        taken = pending.answer
        return Answered(
            answer=taken if isinstance(taken, (AllowApproval, DenyApproval)) else None,
            session_id=owner.id,
        )

    # -- writing ---------------------------------------------------------------------------

    @property
    def durable(self) -> bool:
        return self.runtime.store.durable

    def write(self, op: Op) -> None:
        self.runtime.store.write(op)

    def emit(self, event_type: type[Event], turn_id: str | None, **fields: Any) -> Event:
        """Append an event of ``event_type`` with the log's next id."""
        seq = self.log.last_seq + 1
        event = event_type(
            id=format_cursor(self.id, seq), session_id=self.id, turn_id=turn_id, **fields
        )
        self.log.append(event)
        if self.durable:
            self.write(EventRow(self.id, seq, event))
        else:  # nothing to wait for: readers see it at once
            self.log.made_visible(seq)
        return event

    def add_entry(self, entry: Entry) -> None:
        """A complete entry joins the history: EntryAdded then EntryCompleted."""
        self.emit(EntryAdded, entry.turn_id, entry=entry)
        self.complete_entry(entry)

    def complete_entry(self, entry: Entry) -> None:
        """An entry whose EntryAdded was emitted is complete: it joins the history."""
        if self.durable:
            self.write(EntryRow(self.id, len(self.entries), entry))
        self.entries.append(entry)
        self.hidden += hidden_from_model(entry)
        self.emit(EntryCompleted, entry.turn_id, entry=entry)

    def check_open(self) -> None:
        if self.terminated:
            raise SessionTerminatedError(
                f"session {self.id} was cancelled and takes no more messages; its history "
                "stays readable: start a new session to go on"
            )

    def check_key(self, key: str | None, fingerprint: str) -> TurnCore | None:
        """The turn an idempotency key started, or None for a new key.

        Raises:
            SessionIdempotencyConflictError: The key started a turn with another message.
        """
        if key is None or key not in self.idempotency:
            return None
        turn_id, known = self.idempotency[key]
        if known != fingerprint:
            raise SessionIdempotencyConflictError(
                f"idempotency key {key!r} already started turn {turn_id} with a different "
                "message; use a new key for a new message"
            )
        return self.turns[turn_id]

    def start_turn(
        self,
        content: tuple[Any, ...],
        key: str | None,
        output_type: Any,
        max_steps: int | None = None,
    ) -> tuple[TurnCore, bool] | TurnCore:
        """Start a turn with ``content``, of at most ``max_steps`` model steps (by default
        the agent's).

        Returns:
            ``(turn, True)`` for a new turn, ``(turn, False)`` for the turn the key already
            started, or the active turn alone when the session is busy.
        """
        fingerprint = _fingerprint(content) if key is not None else ""
        known = self.check_key(key, fingerprint)
        if known is not None:
            return known, False
        self.check_open()
        if self.active is not None:
            return self.active
        turn_id = new_id()
        message = MessageEntry(id=new_id(), turn_id=turn_id, role="user", content=content)
        turn = TurnCore(
            id=turn_id,
            session=self,
            first_seq=self.log.last_seq + 1,
            output_type=output_type,
            max_steps=self.agent.max_steps if max_steps is None else max_steps,
        )
        self.turns[turn_id] = turn
        self.active = turn
        if self.durable:
            self.write(TurnRow(self.id, turn_id, turn.first_seq, _type_name(output_type)))
        if key is not None:
            self.idempotency[key] = (turn_id, fingerprint)
            if self.durable:
                self.write(KeyRow(self.id, key, turn_id, fingerprint))
        self.emit(TurnStarted, turn_id, message=message)
        self.add_entry(message)
        self.runtime.spawn_turn(turn)
        return turn, True

    def steer(self, turn: TurnCore, content: tuple[Any, ...], key: str | None = None) -> bool:
        """Queue a message for the active turn's next model step; False if it is not active."""
        if self.active is not turn or turn.stop_cause is not None:
            return False
        message = MessageEntry(id=new_id(), turn_id=turn.id, role="user", content=content)
        turn.steered.append(message)
        if self.durable:  # acknowledged: kept until it is history
            self.write(SteerRow(self.id, turn.id, message))
        if key is not None:
            fingerprint = _fingerprint(content)
            self.idempotency[key] = (turn.id, fingerprint)
            if self.durable:
                self.write(KeyRow(self.id, key, turn.id, fingerprint))
        return True

    def end_turn(self, turn: TurnCore, record: TurnState[Any]) -> None:
        """Record how ``turn`` ended: TurnEnded is its last event."""
        if turn.record is not None:
            return
        for message in turn.steered:  # steered too late for a model step: still history
            self.add_entry(message)
        turn.steered.clear()
        for callback_id in list(turn.open_callbacks):
            pending = self.callbacks.get(callback_id) or self.below[callback_id]
            pending.turn.session.close_callback(pending, answered=False)
        turn.end_seq = self.log.last_seq + 1
        turn.record = record = attrs.evolve(record, cursor=self.log.next_id())
        if self.durable:
            self.write(TurnRow(self.id, turn.id, turn.first_seq, record=record))
            self.write(StepRow(self.id, turn.id, None))
        self.emit(TurnEnded, turn.id, record=record)
        if self.active is turn:
            self.active = None
            if self.parent is not None:
                self.root.running_subagents -= 1
        if self.parent is not None:  # a subagent's session runs one turn and ends with it
            self.log.close()
        self.runtime.turn_ended(self, turn)
        turn.done.set()

    async def cancel(self) -> None:
        """End the session and its subagents: stop its turn, take no more commands, close
        the logs."""
        if not self.terminated:
            self.write(attrs.evolve(self.row, terminated=True))
        self.terminated = True
        turn = self.active
        if turn is not None:
            turn.stop("cancelled")
            await turn.done.wait()
        for child in self.children:
            await child.cancel()
        if not self.log.closed:
            self.log.close()

    def start_subagent(self, turn: TurnCore, agent: Agent, message: str) -> TurnCore:
        """A new subagent session of ``agent`` below this one, running a turn on ``message``.

        Raises:
            SessionBusyError: The root already runs as many subagent turns as its agent
                allows; nothing changed.
        """
        root = self.root
        limit = root.agent.max_running_subagents
        if root.running_subagents >= limit:
            raise SessionBusyError(
                f"session {root.id} already runs {limit} subagent turns, its agent's "
                "max_running_subagents; nothing was started: delegate again once one ends"
            )
        child = self.runtime.new_session(agent, self.inputs, parent=(self, turn))
        self.children.append(child)
        started = child.start_turn((TextContentBlock(text=message),), None, agent.output_type)
        assert isinstance(started, tuple)
        root.running_subagents += 1
        return started[0]


def hidden_from_model(entry: Entry) -> bool:
    """Whether the model never sees ``entry``: a snapshot imported with the history
    (seed 000), shown as an ``UnknownEntry`` of type ``"checkpoint"``."""
    return isinstance(entry, UnknownEntry) and entry.entry_type == "checkpoint"


def interrupted(turn: TurnCore) -> Interrupted:
    return Interrupted(
        turn_id=turn.id, session_id=turn.session.id, cause=turn.stop_cause or "interrupted"
    )
