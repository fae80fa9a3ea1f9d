"""A session's and its turns' state, and :func:`apply`, the one way it changes.

The state is plain attrs classes (:class:`SessionMachine`, :class:`TurnMachine`, their
:class:`ToolStep`, :class:`Call` and :class:`CallbackState`); a fact is a row of
:mod:`agentlib._data._ops`, the very row the store keeps. :func:`apply` changes the state by one
fact, on the live path as on a restart; :class:`Facts` is what a transition fills: each fact
is applied as it is added. What most sessions never hold is a shared empty value until a
fact adds to it (:func:`own`, :func:`adding`): an idle session is small.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any, TypeVar

import attrs

from ..._data._callbacks import AllowApproval, Callback, OpenApproval
from ..._data._convert import structure
from ..._data._entries import Entry, MessageEntry, ToolCallEntry, ToolResultEntry, UnknownEntry
from ..._data._errors import TurnNotFoundError
from ..._data._events import CallbackClosed, CallbackOpened, EntryAdded, EntryCompleted, Event
from ..._data._json import EMPTY_OBJECT
from ..._data._ops import (
    CallbackRow,
    EntryRow,
    EventRow,
    KeyRow,
    Op,
    PruneRow,
    SessionRow,
    SteerRow,
    StepRow,
    TurnRow,
)
from ..._data._records import TurnState
from ._cursors import seq_of_cursor

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")
A = TypeVar("A", bound=attrs.AttrsInstance)


#: The empty mapping sessions share until they have something of the kind (``own``): the
#: one empty object data classes share too.
NOTHING: Mapping[Any, Any] = EMPTY_OBJECT


# -- the state ------------------------------------------------------------------------------


#: The name and the ``__init__`` argument of each field an attrs class takes in ``__init__``.
_INIT_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {}


def evolve(instance: A, **changes: Any) -> A:
    """A copy of attrs instance ``instance`` with ``changes``, as ``attrs.evolve`` makes
    it (through ``__init__``), with its fields looked up once per class."""
    cls = type(instance)
    names = _INIT_FIELDS.get(cls)
    if names is None:
        fields = attrs.fields(cls)
        names = _INIT_FIELDS[cls] = tuple((f.name, f.alias) for f in fields if f.init)
    for name, alias in names:
        if alias not in changes:
            changes[alias] = getattr(instance, name)
    return cls(**changes)


class CallState(enum.Enum):
    """How far a tool call of a step got. The values are what a store keeps."""

    NEW = "new"  #: its hooks ran, nothing else yet
    WAITING = "waiting"  #: on a callback: its approval, or a client tool's answer
    RUNNING = "running"  #: its tool runs: whether it finished, after a crash, nobody knows
    DELEGATED = "delegated"  #: a subagent's turn runs it
    DONE = "done"  #: it has its result


@attrs.frozen(kw_only=True)
class Call:
    """One tool call of a model reply, and how far it got.

    Attributes:
        entry: The call as the history shows it (after any hook's rewrite).
        refusal: Why it does not run (a hook refused it, it failed): its error result.
        hook_approval: A hook asked for an approval before it runs.
        approval_reason: The hooks' reasons for that approval.
        state: How far it got.
        callback: The callback it waits on (``WAITING``).
        child: The subagent session and turn that run it (``DELEGATED``).
        result: Its result (``DONE``).
    """

    entry: ToolCallEntry
    refusal: str | None = None
    hook_approval: bool = False
    approval_reason: str | None = None
    state: CallState = CallState.NEW
    callback: str | None = None
    child: tuple[str, str] | None = None
    result: ToolResultEntry | None = None


@attrs.frozen(kw_only=True)
class ToolStep:
    """The calls of a model reply, run together; what a store keeps to resume a turn.

    Attributes:
        calls: The calls, in the order the model made them.
        steps: The model steps the turn took so far, this step's included.
        max_steps: The most model steps the turn may take.
    """

    calls: tuple[Call, ...]
    steps: int
    max_steps: int

    def with_call(self, index: int, **changes: Any) -> ToolStep:
        calls = list(self.calls)
        calls[index] = evolve(calls[index], **changes)
        return ToolStep(calls=tuple(calls), steps=self.steps, max_steps=self.max_steps)


class StopCause(enum.Enum):
    """Why a turn was stopped."""

    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"


@attrs.define(eq=False)
class TurnMachine:
    """One turn's state.

    Attributes:
        id: The turn's id.
        session_id: Its session's.
        first_seq: The seq of its ``TurnStarted``.
        max_steps: The most model steps it may take.
        output_type: The type its answer is structured into (None: text).
        model_steps: The model steps it took so far.
        step: Its tool step under way, if it is in one.
        steered: Messages steered into it that have not joined the history yet.
        tool_calls: Its calls, as the history shows them.
        record: How it ended, once it has.
        end_seq: The seq of its ``TurnEnded``, once it has one.
        stop_cause: Why it is being stopped, if it is.
    """

    id: str
    session_id: str
    first_seq: int
    max_steps: int
    output_type: Any = None
    model_steps: int = 0
    step: ToolStep | None = None
    steered: Sequence[MessageEntry] = ()
    tool_calls: tuple[ToolCallEntry, ...] = ()
    record: TurnState[Any] | None = None
    end_seq: int | None = None
    stop_cause: StopCause | None = None


class CallbackPhase(enum.Enum):
    """Whether a callback is open, answered, or closed unanswered (its turn stopped)."""

    OPEN = "open"
    ANSWERED = "answered"
    CLOSED = "closed"


@attrs.define(eq=False)
class CallbackState:
    """A callback a session opened, and how it closed.

    Attributes:
        callback: The callback, as clients see it.
        phase: Open, answered, or closed unanswered.
        answer: The answer taken (a client tool's value, checked; an approval's answer).
        error: For a client tool whose handler failed, what the model is told instead.
    """

    callback: Callback
    phase: CallbackPhase = CallbackPhase.OPEN
    answer: Any = None
    error: str | None = None

    @property
    def open(self) -> bool:
        return self.phase is CallbackPhase.OPEN


@attrs.define(eq=False)
class SessionMachine:
    """One session's state.

    Attributes:
        id: The session's id.
        agent: Its agent's name.
        parent_id: For a subagent's session, the session that delegated to it.
        parent_turn_id: ... and its turn that did.
        key: The idempotency key that started it.
        inputs: Its session inputs, as JSON by input id.
        terminated: Whether it was cancelled.
        last_seq: The seq of its last event.
        entries: Its history.
        hidden: How many entries of the history the model does not see (imported snapshots).
        turns: Its turns, by id, oldest first.
        active: The id of its unended turn, if it has one.
        keys: Its turns' idempotency keys: turn id and message fingerprint, by key.
        callbacks: The callbacks it opened, by id.
        shown: The open callbacks its log shows (its own, and its subagents'): the seq of
            each one's ``CallbackOpened`` here, and the callback, in the order they opened.
        approved_tools: Tools approved for the rest of the session.
        children: Its subagents' sessions, oldest first.
    """

    id: str
    agent: str
    parent_id: str | None = None
    parent_turn_id: str | None = None
    key: str | None = None
    inputs: Any = attrs.field(factory=dict, repr=False)
    terminated: bool = False
    last_seq: int = 0
    entries: list[Entry] = attrs.field(factory=list, repr=False)
    hidden: int = 0
    turns: Mapping[str, TurnMachine] = attrs.field(default=NOTHING, repr=False)
    active: str | None = None
    # What most sessions never have is a shared empty value until the first fact adds to it
    # (``own``): an idle session is small.
    keys: Mapping[str, tuple[str, str]] = attrs.field(default=NOTHING, repr=False)
    callbacks: Mapping[str, CallbackState] = attrs.field(default=NOTHING, repr=False)
    shown: Mapping[str, tuple[int, Callback]] = attrs.field(default=NOTHING, repr=False)
    approved_tools: frozenset[str] = attrs.field(default=frozenset(), repr=False)
    children: Sequence[str] = attrs.field(default=(), repr=False)

    def row(self, *, lease: tuple[str, float] | None = None) -> SessionRow:
        """The session as the store keeps it."""
        return SessionRow(
            self.id,
            self.agent,
            self.parent_id,
            self.parent_turn_id,
            self.key,
            self.inputs,
            self.terminated,
            lease,
        )

    def turn(self, turn_id: str) -> TurnMachine:
        """Raises:
        TurnNotFoundError: The session has no such turn."""
        try:
            return self.turns[turn_id]
        except KeyError:
            raise TurnNotFoundError(
                f"session {self.id} has no turn {turn_id!r}; use an id from a send or a record"
            ) from None


def own(mapping: Mapping[K, V]) -> dict[K, V]:
    """``mapping`` to add to: a dict of its own in place of the shared empty one."""
    return mapping if isinstance(mapping, dict) else {}


def without(mapping: Mapping[K, V], key: K) -> Mapping[K, V]:
    """``mapping`` without ``key``: the shared empty one once nothing is left."""
    left = own(mapping)
    del left[key]
    return left or NOTHING


class _One(Mapping[K, V]):
    """A mapping of one item: what most sessions hold of their turns, in a third of a
    dict's room."""

    __slots__ = ("_key", "_value")

    def __init__(self, key: K, value: V) -> None:
        self._key = key
        self._value = value

    def __getitem__(self, key: K) -> V:
        if key == self._key:
            return self._value
        raise KeyError(key)

    def get(self, key: K, default: Any = None) -> Any:
        return self._value if key == self._key else default

    def __contains__(self, key: object) -> bool:
        return key == self._key

    def __iter__(self) -> Iterator[K]:
        return iter((self._key,))

    def __len__(self) -> int:
        return 1

    def __repr__(self) -> str:
        return f"{{{self._key!r}: {self._value!r}}}"


def adding(mapping: Mapping[K, V], key: K, value: V) -> Mapping[K, V]:
    """``mapping`` with ``key`` added (a new key, at the end): the shared empty mapping
    becomes a mapping of one, which becomes a dict at the second."""
    if not mapping:
        return _One(key, value)
    items = own(mapping) if isinstance(mapping, dict) else dict(mapping)
    items[key] = value
    return items


def own_list(items: Sequence[T]) -> list[T]:
    """``items`` to append to: a list of its own in place of the shared empty tuple."""
    return items if isinstance(items, list) else list(items)


#: The sessions a runtime holds, by id: a transition may reach a whole tree of subagents.
Sessions = MutableMapping[str, SessionMachine]


def hidden_from_model(entry: Entry) -> bool:
    """Whether the model never sees ``entry``: a snapshot imported with the history
    (seed 000), shown as an ``UnknownEntry`` of type ``"checkpoint"``."""
    return isinstance(entry, UnknownEntry) and entry.entry_type == "checkpoint"


def as_step(value: Any) -> ToolStep | None:
    """A stored tool step: as the engine wrote it, or its JSON (read back).

    Raises:
        ValidationError, KeyError, TypeError: It is not what the engine writes.
    """
    if value is None or isinstance(value, ToolStep):
        return value
    data = dict(value)
    # A step stored before turns had step limits holds neither: the agent's applies later.
    data.setdefault("steps", 0)
    data.setdefault("max_steps", 0)
    step: ToolStep = structure(data, ToolStep)
    return step


# -- applying facts -------------------------------------------------------------------------


def apply(sessions: Sessions, fact: Op) -> None:
    """Change the state of the sessions by one fact: the only way it ever changes."""
    if isinstance(fact, SessionRow):
        _apply_session(sessions, fact)
        return
    session = sessions[fact.session_id]
    if isinstance(fact, EventRow):
        _apply_event(session, fact)
    elif isinstance(fact, EntryRow):
        _apply_entry(session, fact)
    elif isinstance(fact, TurnRow):
        _apply_turn(session, fact)
    elif isinstance(fact, StepRow):
        turn = session.turns[fact.turn_id]
        turn.step = as_step(fact.step)
        if turn.step is not None:
            turn.model_steps = turn.step.steps
            if turn.step.max_steps:
                turn.max_steps = turn.step.max_steps
    elif isinstance(fact, SteerRow):
        message = fact.message
        assert isinstance(message, MessageEntry)
        turn = session.turns[fact.turn_id]
        turn.steered = own_list(turn.steered)
        turn.steered.append(message)
    elif isinstance(fact, CallbackRow):
        _apply_callback(session, fact)
    elif isinstance(fact, KeyRow):
        keys = session.keys = own(session.keys)
        keys[fact.key] = (fact.turn_id, fact.fingerprint)
    else:
        assert isinstance(fact, PruneRow)  # the log's: the state keeps no events


def _apply_entry(session: SessionMachine, row: EntryRow) -> None:
    entry = row.entry
    session.entries.append(entry)
    session.hidden += hidden_from_model(entry)
    turn = session.turns.get(entry.turn_id or "")
    if turn is not None:
        if isinstance(entry, ToolCallEntry):
            turn.tool_calls = (*turn.tool_calls, entry)  # the record shares it
        elif turn.steered and any(message.id == entry.id for message in turn.steered):
            turn.steered = [message for message in turn.steered if message.id != entry.id]


def _apply_event(session: SessionMachine, row: EventRow) -> None:
    if row.seq > session.last_seq:
        session.last_seq = row.seq
    event = row.event
    if isinstance(event, CallbackOpened):
        shown = session.shown = own(session.shown)
        shown[event.callback.id] = (row.seq, event.callback)
    elif isinstance(event, CallbackClosed) and event.callback_id in session.shown:
        session.shown = without(session.shown, event.callback_id)


def _apply_session(sessions: Sessions, row: SessionRow) -> None:
    known = sessions.get(row.session_id)
    if known is not None:
        known.terminated = row.terminated
        return
    sessions[row.session_id] = SessionMachine(
        id=row.session_id,
        agent=row.agent,
        parent_id=row.parent_id,
        parent_turn_id=row.parent_turn_id,
        key=row.idempotency_key,
        inputs=row.inputs,
        terminated=row.terminated,
    )
    parent = sessions.get(row.parent_id or "")
    if parent is not None and row.session_id not in parent.children:
        parent.children = own_list(parent.children)
        parent.children.append(row.session_id)


def _apply_turn(session: SessionMachine, row: TurnRow) -> None:
    turn = session.turns.get(row.turn_id)
    if turn is None:
        turn = TurnMachine(
            id=row.turn_id,
            session_id=session.id,
            first_seq=row.first_seq,
            max_steps=row.max_steps or 0,
        )
        session.turns = adding(session.turns, row.turn_id, turn)
        if row.record is None:
            session.active = row.turn_id
    if row.record is not None:
        turn.record = row.record
        turn.end_seq = seq_of_cursor(row.record.cursor)
        if session.active == turn.id:
            session.active = None


def _apply_callback(session: SessionMachine, row: CallbackRow) -> None:
    callback = row.callback
    known = session.callbacks.get(callback.id)
    if known is None:
        callbacks = session.callbacks = own(session.callbacks)
        known = callbacks[callback.id] = CallbackState(callback=callback)
    known.phase = CallbackPhase(row.state)
    known.answer = row.answer
    known.error = row.error
    answer = row.answer
    if (
        isinstance(callback, OpenApproval)
        and callback.source == "tool"
        and isinstance(answer, AllowApproval)
        and answer.scope == "session"
    ):
        session.approved_tools |= {callback.tool_name}


# -- a transition's facts -------------------------------------------------------------------


class Facts(list[Op]):
    """The facts a transition brings, in order; each is applied as it is added."""

    __slots__ = ("sessions",)

    def __init__(self, sessions: Sessions) -> None:  # empty, as list.__new__ made it
        self.sessions = sessions

    def add(self, fact: Op) -> None:
        apply(self.sessions, fact)
        self.append(fact)

    def emit(
        self, session: SessionMachine, event_type: type[Event], turn_id: str | None, **fields: Any
    ) -> Event:
        """Append an event of ``event_type`` to the session's log."""
        seq = session.last_seq + 1
        session_id = session.id
        event = event_type(
            id=f"{session_id}:{seq:012d}",  # format_cursor's, inlined: every event has one
            session_id=session_id,
            turn_id=turn_id,
            **fields,
        )
        row = EventRow(session_id, seq, event)
        # What apply does with it, without finding its session: the seq is the next one.
        session.last_seq = seq
        if event_type is CallbackOpened or event_type is CallbackClosed:
            _apply_event(session, row)
        self.append(row)
        return event

    def entry(self, session: SessionMachine, entry: Entry, *, added: bool = False) -> None:
        """A complete entry joins the history: ``EntryAdded`` (unless it was ``added``
        before, its text streamed), then ``EntryCompleted``."""
        if not added:
            self.emit(session, EntryAdded, entry.turn_id, entry=entry)
        row = EntryRow(session.id, len(session.entries), entry)
        _apply_entry(session, row)  # what apply does with it, without finding its session
        self.append(row)
        self.emit(session, EntryCompleted, entry.turn_id, entry=entry)
