"""The engine's core: a session's and its turns' state, and the transitions between them.

No I/O here: neither trio nor the store. A session's state changes only through
:func:`apply`, one fact at a time (the rows of :mod:`agentlib._ops`, which the store keeps). A
transition takes an input (a message, a model's reply, a tool's result, an answer, a steer,
a stop, a restart), decides the facts it brings, applies them, and returns them: the runtime
writes them to the store and publishes their events, and does what the transition asks
(call the model, run a tool, wait). A session read back from a store is its stored facts
applied again, then the events of its unended turn, through the same :func:`apply`; then
:func:`restart` decides how that turn goes on. The live path and the restart path share
every line that changes state.
"""

from __future__ import annotations

import enum
import hashlib
import json
import uuid
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any, TypeVar

import attrs

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
from .._convert import structure, unstructure
from .._entries import (
    ContextMessage,
    Entry,
    MessageEntry,
    ToolCallEntry,
    ToolResultEntry,
    UnknownEntry,
)
from .._errors import (
    ClientToolAnswerError,
    MaxStepsExceeded,
    SdkError,
    SessionBusyError,
    SessionIdempotencyConflictError,
    SessionTerminatedError,
    TurnNotFoundError,
    ValidationError,
)
from .._events import (
    CallbackClosed,
    CallbackOpened,
    EntryAdded,
    EntryCompleted,
    EntryDelta,
    Event,
    TurnEnded,
    TurnStarted,
)
from .._history import new_id
from .._json import EMPTY_OBJECT
from .._ops import (
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
from .._output import parse_output
from .._records import (
    Blocked,
    Completed,
    ErrorInfo,
    Failed,
    Interrupted,
    Running,
    TurnState,
    UnknownOutcome,
)
from .._usage import Usage

__all__ = [
    "Call",
    "CallState",
    "CallbackPhase",
    "CallbackState",
    "Facts",
    "SessionMachine",
    "StopCause",
    "ToolStep",
    "TurnMachine",
    "apply",
    "format_cursor",
]


K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")
A = TypeVar("A", bound=attrs.AttrsInstance)

#: The empty mapping sessions share until they have something of the kind (``own``): the
#: one empty object data classes share too.
NOTHING: Mapping[Any, Any] = EMPTY_OBJECT


def format_cursor(session_id: str, seq: int) -> str:
    """The cursor of a session's ``seq``-th event (1-based); strings sort like positions."""
    return f"{session_id}:{seq:012d}"


def seq_of_cursor(cursor: str | None) -> int | None:
    """The seq a cursor names, or None for no cursor."""
    if not cursor:
        return None
    return int(cursor.rpartition(":")[2])


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
    # (``_own``): an idle session is small.
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


# -- reading the state ----------------------------------------------------------------------


def ancestors(
    sessions: Mapping[str, SessionMachine], session_id: str
) -> Iterator[tuple[SessionMachine, TurnMachine]]:
    """Each session above ``session_id``, with its turn that (indirectly) delegated to it."""
    session = sessions[session_id]
    while session.parent_id is not None:
        parent = sessions[session.parent_id]
        yield parent, parent.turns[session.parent_turn_id or ""]
        session = parent


def root_of(sessions: Mapping[str, SessionMachine], session_id: str) -> SessionMachine:
    session = sessions[session_id]
    while session.parent_id is not None:
        session = sessions[session.parent_id]
    return session


def tree_of(sessions: Mapping[str, SessionMachine], session_id: str) -> Iterator[SessionMachine]:
    """The session and its subagents' sessions, at any depth, parents first."""
    todo = [sessions[session_id]]
    while todo:
        session = todo.pop(0)
        yield session
        todo.extend(sessions[child] for child in session.children if child in sessions)


def find_callback(
    sessions: Mapping[str, SessionMachine], session_id: str, callback_id: str
) -> CallbackState | None:
    """Callback ``callback_id`` of the session or of a subagent's below it: the session's
    own whatever its phase, a subagent's while it is open (the session's log shows it)."""
    session = sessions[session_id]
    own = session.callbacks.get(callback_id)
    if own is not None:
        return own
    if callback_id not in session.shown:
        return None
    for below in tree_of(sessions, session_id):
        found = below.callbacks.get(callback_id)
        if found is not None:
            return found
    return None


def running_subagents(sessions: Mapping[str, SessionMachine], root_id: str) -> int:
    """The subagent turns running below a root session, at any depth."""
    return sum(
        session.active is not None
        for session in tree_of(sessions, root_id)
        if session.id != root_id
    )


def open_below(sessions: Mapping[str, SessionMachine], turn: TurnMachine) -> list[CallbackState]:
    """The open callbacks of ``turn``, and of the subagent turns it delegated to, at any
    depth."""
    session = sessions[turn.session_id]
    found = [
        state
        for state in session.callbacks.values()
        if state.open and state.callback.turn_id == turn.id
    ]
    for call in turn.step.calls if turn.step is not None else ():
        if call.state is CallState.DELEGATED and call.child is not None:
            child_session = sessions.get(call.child[0])
            child = None if child_session is None else child_session.turns.get(call.child[1])
            if child is not None and child.record is None:
                found.extend(open_below(sessions, child))
    return found


def record_of(
    sessions: Mapping[str, SessionMachine], turn: TurnMachine, visible: int
) -> TurnState[Any]:
    """The turn's record as readers may see it, when the store has made its log durable up
    to ``visible``: its end, once that is durable; else Blocked on the callbacks whose
    opening is durable; else Running (a reader is never told what a crash could undo)."""
    session = sessions[turn.session_id]
    cursor = format_cursor(session.id, visible) if visible else None
    if turn.record is not None and turn.end_seq is not None and turn.end_seq <= visible:
        return attrs.evolve(turn.record, cursor=cursor)
    if session.active == turn.id:
        callbacks = tuple(callback for seq, callback in session.shown.values() if seq <= visible)
        if callbacks:
            return Blocked(
                turn_id=turn.id, session_id=session.id, cursor=cursor, callbacks=callbacks
            )
    return Running(turn_id=turn.id, session_id=session.id, cursor=cursor)


def resumable(sessions: Mapping[str, SessionMachine], turn: TurnMachine) -> bool:
    """Whether a later runtime can resume the turn from the store: in a tool step, it waits
    on an open callback (its own or a subagent's below it), or nothing of it runs and every
    subagent turn it waits on can be resumed.

    A turn with an open callback is Blocked, as a caller may have been told, and stays so:
    the calls of its step that still run are cut short, and a later runtime gives the model
    an error result for each (:func:`restart`).
    """
    if turn.record is not None or turn.step is None or sessions[turn.session_id].terminated:
        return False
    if open_below(sessions, turn):
        return True
    for call in turn.step.calls:
        if call.state is CallState.RUNNING:
            return False
        if call.state is CallState.DELEGATED and call.child is not None:
            child = sessions[call.child[0]].turns[call.child[1]]
            if child.record is None and not resumable(sessions, child):
                return False
    return True


def model_history(session: SessionMachine) -> Sequence[Entry]:
    """The history as the model sees it: without the snapshots imported with it."""
    if not session.hidden:
        return HistoryView(session.entries)
    return tuple(entry for entry in session.entries if not hidden_from_model(entry))


class HistoryView(Sequence[Entry]):
    """The first ``length`` entries of a list that only grows: a snapshot without a copy."""

    __slots__ = ("_entries", "_length")

    def __init__(self, entries: list[Entry]) -> None:
        self._entries = entries
        self._length = len(entries)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self._entries[: self._length][index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("history index out of range")
        return self._entries[index]

    def __iter__(self) -> Iterator[Entry]:
        entries = self._entries
        for index in range(self._length):
            yield entries[index]


# -- transitions ----------------------------------------------------------------------------


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


def new_session(
    sessions: Sessions,
    session_id: str,
    agent: str,
    inputs: Any,
    *,
    key: str | None = None,
    parent: tuple[str, str] | None = None,
    lease: tuple[str, float] | None = None,
) -> Facts:
    """A new session (leased from the start, with ``lease``)."""
    facts = Facts(sessions)
    parent_id, parent_turn_id = parent if parent is not None else (None, None)
    facts.add(SessionRow(session_id, agent, parent_id, parent_turn_id, key, inputs, False, lease))
    return facts


def import_history(sessions: Sessions, session_id: str, entries: Sequence[Entry]) -> Facts:
    """A conversation held elsewhere joins a new session's history."""
    facts = Facts(sessions)
    session = sessions[session_id]
    for entry in entries:
        facts.entry(session, entry)
    return facts


#: Answers of other callbacks, which a client tool's result must not be (a credential would
#: reach the model).
_NOT_RESULTS = (AllowApproval, DenyApproval, SignInAnswer, Credentials, KeepCallbackOpen)


def check_not_a_class(answer: object) -> None:
    """Raises:
    SdkError: ``answer`` is a class (``AllowApproval``), not an instance of it."""
    if isinstance(answer, type):
        raise SdkError(
            f"{answer.__name__} is a class: answer with an instance, {answer.__name__}(...)"
        )


def fit_answer(callback: Callback, answer: object, tools: Mapping[str, Any]) -> Any:
    """``answer`` checked against the callback it settles (a client tool's against its
    stub's return type, ``tools`` by id).

    Raises:
        SdkError: It does not fit (a :class:`ClientToolAnswerError` for a client tool); the
            message never repeats a credential or the value.
    """
    check_not_a_class(answer)
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
    if isinstance(answer, _NOT_RESULTS):
        raise ClientToolAnswerError(
            f"a {type(answer).__name__} answers another kind of callback; a client tool "
            "call is answered with the tool's result"
        )
    return tools[callback.tool_name].check_answer(answer)


def fingerprint(content: Sequence[Any]) -> str:
    """What identifies a message, for an idempotency key."""
    data = json.dumps(unstructure(tuple(content)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()


def keyed_turn(session: SessionMachine, key: str | None, content_fingerprint: str) -> str | None:
    """The turn an idempotency key started, or None for a new key.

    Raises:
        SessionIdempotencyConflictError: The key started a turn with another message.
    """
    if key is None or key not in session.keys:
        return None
    turn_id, known = session.keys[key]
    if known != content_fingerprint:
        raise SessionIdempotencyConflictError(
            f"idempotency key {key!r} already started turn {turn_id} with a different "
            "message; use a new key for a new message"
        )
    return turn_id


def check_open(session: SessionMachine) -> None:
    """Raises:
    SessionTerminatedError: The session was cancelled."""
    if session.terminated:
        raise SessionTerminatedError(
            f"session {session.id} was cancelled and takes no more messages; its history "
            "stays readable: start a new session to go on"
        )


@attrs.frozen
class Started:
    """A turn a message started (``new``), or the one its key started before."""

    turn_id: str
    new: bool


@attrs.frozen
class Occupied:
    """The session has an active turn: no turn was started."""

    turn_id: str


def start_turn(
    sessions: Sessions,
    session_id: str,
    content: tuple[Any, ...],
    key: str | None,
    *,
    max_steps: int,
    output_type: Any = None,
    output_type_name: str | None = None,
) -> tuple[Started | Occupied, Facts]:
    """Start a turn with the user's message ``content``.

    Raises:
        SessionIdempotencyConflictError: ``key`` started a turn with another message.
        SessionTerminatedError: The session was cancelled.
    """
    facts = Facts(sessions)
    session = sessions[session_id]
    content_fingerprint = fingerprint(content) if key is not None else ""
    known = keyed_turn(session, key, content_fingerprint)
    if known is not None:
        return Started(known, new=False), facts
    check_open(session)
    if session.active is not None:
        return Occupied(session.active), facts
    turn_id = new_id()
    message = MessageEntry(id=new_id(), turn_id=turn_id, role="user", content=content)
    facts.add(
        TurnRow(session.id, turn_id, session.last_seq + 1, output_type_name, max_steps=max_steps)
    )
    turn = session.turns[turn_id]
    turn.output_type = output_type
    if key is not None:
        facts.add(KeyRow(session.id, key, turn_id, content_fingerprint))
    facts.emit(session, TurnStarted, turn_id, message=message)
    facts.entry(session, message)
    return Started(turn_id, new=True), facts


def steer(
    sessions: Sessions,
    session_id: str,
    turn_id: str,
    content: tuple[Any, ...],
    key: str | None = None,
) -> tuple[bool, Facts]:
    """Queue a message for the active turn's next model step; False if it is not active
    (or is being stopped). A ``key`` the session has seen was that steer: it is not queued
    again (True if it steered this turn)."""
    facts = Facts(sessions)
    session = sessions[session_id]
    turn = session.turns[turn_id]
    if key is not None and key in session.keys:
        return session.keys[key][0] == turn_id, facts
    if session.active != turn_id or turn.stop_cause is not None:
        return False, facts
    message = MessageEntry(id=new_id(), turn_id=turn_id, role="user", content=content)
    facts.add(SteerRow(session.id, turn_id, message))
    if key is not None:
        facts.add(KeyRow(session.id, key, turn_id, fingerprint(content)))
    return True, facts


def cancel(sessions: Sessions, session_id: str) -> Facts:
    """Mark the session cancelled: it takes no more messages."""
    facts = Facts(sessions)
    session = sessions[session_id]
    if not session.terminated:
        facts.add(attrs.evolve(session.row(), terminated=True))
    return facts


def stop(sessions: Sessions, session_id: str, turn_id: str, cause: StopCause) -> None:
    """Note why the turn is being stopped (the first cause stays); its runtime stops it."""
    turn = sessions[session_id].turns[turn_id]
    if turn.stop_cause is None:
        turn.stop_cause = cause


def interrupted(turn: TurnMachine) -> Interrupted:
    cause = turn.stop_cause or StopCause.INTERRUPTED
    return Interrupted(turn_id=turn.id, session_id=turn.session_id, cause=cause.value)


def failed(turn: TurnMachine, error: BaseException) -> Failed:
    return Failed(
        turn_id=turn.id,
        session_id=turn.session_id,
        error=ErrorInfo(type=type(error).__name__, message=str(error)),
    )


# -- model steps ----------------------------------------------------------------------------


def begin_model_step(
    sessions: Sessions, session_id: str, turn_id: str
) -> tuple[TurnState[Any] | None, Facts]:
    """The steered messages join the history, and the turn takes a model step: None, or the
    turn's end if it reached its step limit."""
    facts = Facts(sessions)
    session = sessions[session_id]
    turn = session.turns[turn_id]
    for message in list(turn.steered):
        facts.entry(session, message)
    if turn.model_steps >= turn.max_steps:
        return failed(turn, _too_many_steps(turn)), facts
    turn.model_steps += 1
    return None, facts


def _too_many_steps(turn: TurnMachine) -> MaxStepsExceeded:
    steps = f"{turn.max_steps} model step" + ("s" if turn.max_steps != 1 else "")
    return MaxStepsExceeded(
        f"turn {turn.id} reached its limit of {steps} without an answer; if it needs more, "
        "raise max_steps: Agent(max_steps=...) or run(..., max_steps=...)"
    )


def text_streamed(
    sessions: Sessions, session_id: str, turn_id: str, entry_id: str, delta: str, first: bool
) -> Facts:
    """A piece of the model's text arrived: the first opens its entry."""
    facts = Facts(sessions)
    session = sessions[session_id]
    if first:
        opening = MessageEntry(id=entry_id, turn_id=turn_id, role="assistant")
        facts.emit(session, EntryAdded, turn_id, entry=opening)
    facts.emit(session, EntryDelta, turn_id, entry_id=entry_id, delta=delta)
    return facts


def model_replied(
    sessions: Sessions,
    session_id: str,
    turn_id: str,
    entry_id: str,
    text: str | None,
    *,
    streamed: bool,
    usage: Usage | None,
    has_calls: bool,
) -> tuple[bool, Facts]:
    """The model's reply arrived: its text joins the history (carrying the reply's usage,
    unless the reply has calls and no text: the first call carries it). Returns whether
    the usage went on the text."""
    facts = Facts(sessions)
    session = sessions[session_id]
    if text or streamed or (usage is not None and not has_calls):
        message = MessageEntry(
            id=entry_id,
            turn_id=turn_id,
            role="assistant",
            content=(TextContentBlock(text=text or ""),),
            usage=usage,
        )
        facts.entry(session, message, added=streamed)
        return True, facts
    return False, facts


def completed(sessions: Sessions, session_id: str, turn_id: str, text: str) -> TurnState[Any]:
    """The record of a turn the model answered with ``text``: Completed, or Failed if the
    text does not fit the turn's output type."""
    session = sessions[session_id]
    turn = session.turns[turn_id]
    try:
        output = parse_output(text, turn.output_type)
    except ValidationError as error:
        return failed(turn, error)
    return Completed(
        turn_id=turn.id,
        session_id=session.id,
        output=output,
        text=text,
        tool_calls=tuple(turn.tool_calls),  # the same tuple
        usage=_usage(session, turn),
    )


def _usage(session: SessionMachine, turn: TurnMachine) -> Usage | None:
    """The sum of the usages on the turn's entries (the last ones of the history)."""
    total: Usage | None = None
    for entry in reversed(session.entries):
        if entry.turn_id != turn.id:
            break
        usage = getattr(entry, "usage", None)
        if usage is not None:
            total = usage if total is None else usage + total
    return total


def capability_note(session: SessionMachine, source: str) -> str | None:
    """What the last context message about tool source ``source`` said, if any."""
    for entry in reversed(session.entries):
        if (
            isinstance(entry, ContextMessage)
            and entry.kind == "capability_source"
            and entry.source == source
        ):
            return entry.text
    return None


def note_capability(
    sessions: Sessions, session_id: str, turn_id: str, source: str, text: str
) -> Facts:
    """A context message about tool source ``source`` joins the history (before a model
    step), unless the last one about it says ``text`` already."""
    facts = Facts(sessions)
    session = sessions[session_id]
    if capability_note(session, source) != text:
        message = ContextMessage(
            id=new_id(),
            turn_id=turn_id,
            kind="capability_source",
            source=source,
            content=(TextContentBlock(text=text),),
        )
        facts.entry(session, message)
    return facts


# -- tool steps -----------------------------------------------------------------------------


def begin_tool_step(
    sessions: Sessions, session_id: str, turn_id: str, calls: Sequence[Call]
) -> Facts:
    """The calls of a model reply join the history; the turn is in a tool step."""
    facts = Facts(sessions)
    session = sessions[session_id]
    turn = session.turns[turn_id]
    for call in calls:
        facts.entry(session, call.entry)
    facts.add(_step_row(turn, ToolStep(calls=tuple(calls), steps=0, max_steps=0)))
    return facts


def _step_row(turn: TurnMachine, step: ToolStep | None) -> StepRow:
    if step is not None and (step.steps, step.max_steps) != (turn.model_steps, turn.max_steps):
        step = ToolStep(calls=step.calls, steps=turn.model_steps, max_steps=turn.max_steps)
    return StepRow(turn.session_id, turn.id, step)


def update_call(
    sessions: Sessions, session_id: str, turn_id: str, index: int, **changes: Any
) -> Facts:
    """Call ``index`` of the turn's tool step got further (``changes``): the step is saved,
    for a later runtime to resume it from there."""
    facts = Facts(sessions)
    turn = sessions[session_id].turns[turn_id]
    assert turn.step is not None
    facts.add(_step_row(turn, turn.step.with_call(index, **changes)))
    return facts


def end_tool_step(sessions: Sessions, session_id: str, turn_id: str, unfinished: str) -> Facts:
    """The step is over: each call's result joins the history, in call order (a call left
    without one gets an error result saying ``unfinished``: every call in the history
    keeps a result, so the next model request is valid)."""
    facts = Facts(sessions)
    session = sessions[session_id]
    turn = session.turns[turn_id]
    assert turn.step is not None
    for call in turn.step.calls:
        facts.entry(session, call.result or error_result(call.entry, call.refusal or unfinished))
    facts.add(_step_row(turn, None))
    return facts


def error_result(call: ToolCallEntry, message: str) -> ToolResultEntry:
    return ToolResultEntry(
        id=new_id(),
        turn_id=call.turn_id,
        name=call.name,
        content=(TextContentBlock(text=message),),
        is_error=True,
        tool_call_id=call.tool_call_id,
    )


def sources_to_sign_in(
    turn: TurnMachine, needs: Mapping[int, str], credentials: Mapping[str, str]
) -> tuple[str, ...]:
    """The sources the step's calls need credentials for, that the session lacks (``needs``:
    the source of each call, by index, whose tool needs a sign-in)."""
    assert turn.step is not None
    sources: list[str] = []
    for index, source in needs.items():
        call = turn.step.calls[index]
        if (
            call.refusal is None
            and call.state not in (CallState.DONE, CallState.RUNNING)
            and source not in credentials
            and source not in sources
        ):
            sources.append(source)
    return tuple(sources)


def open_sign_in(
    sessions: Sessions,
    session_id: str,
    turn_id: str,
    sources: tuple[str, ...],
    authorization_urls: Mapping[str, str] | None = None,
) -> tuple[str, Facts]:
    """The turn's sign-in callback: one a runtime before this one opened and left open, or
    a new one for ``sources`` (with the ``authorization_urls`` of those that have one)."""
    session = sessions[session_id]
    for state in session.callbacks.values():
        callback = state.callback
        if state.open and isinstance(callback, OpenSignIn) and callback.turn_id == turn_id:
            return callback.id, Facts(sessions)
    return open_callback(
        sessions,
        session_id,
        turn_id,
        OpenSignIn,
        sources=sources,
        authorization_urls=authorization_urls or {},
    )


def open_callback(
    sessions: Sessions,
    session_id: str,
    turn_id: str,
    callback_type: type[OpenApproval | OpenClientToolCall | OpenSignIn],
    **fields: Any,
) -> tuple[str, Facts]:
    """Open a callback the turn waits on. ``CallbackOpened`` joins the session's log, and
    the log of every session above it (whose turn that delegated to it reads Blocked)."""
    facts = Facts(sessions)
    session = sessions[session_id]
    callback = callback_type(id=str(uuid.uuid4()), session_id=session.id, turn_id=turn_id, **fields)
    facts.add(CallbackRow(session.id, callback))
    facts.emit(session, CallbackOpened, turn_id, callback=callback)
    for ancestor, delegating in ancestors(sessions, session_id):
        facts.emit(ancestor, CallbackOpened, delegating.id, callback=callback)
    return callback.id, facts


def close_callback(
    sessions: Sessions,
    session_id: str,
    callback_id: str,
    *,
    answered: bool = True,
    answer: Any = None,
    error: str | None = None,
    key: str | None = None,
) -> Facts:
    """Close an open callback of the session with ``answer`` (or a client tool's ``error``),
    or unanswered when its turn stopped; ``CallbackClosed`` joins every log that showed it.
    An approval for the whole session closes the tool's other open approvals too. The
    answer's idempotency ``key`` (see :func:`answer_key`) is kept with it."""
    facts = Facts(sessions)
    session = sessions[session_id]
    if key is not None and session.callbacks[callback_id].open:
        callback = session.callbacks[callback_id].callback
        facts.add(KeyRow(session.id, key, callback.turn_id, "answer"))
    _close(facts, session, callback_id, answered, answer, error)
    return facts


def show_settled(sessions: Sessions, root_id: str) -> Facts:
    """The ``CallbackClosed`` events of the tree's callbacks that were settled in the store
    by another runtime (a shared store's claim) while their logs still show them open: each
    joins every log that showed it, as a close here would."""
    facts = Facts(sessions)
    for session in tree_of(sessions, root_id):
        for callback_id, state in session.callbacks.items():
            if state.open or callback_id not in session.shown:
                continue
            callback = state.callback
            answer = (
                state.answer if isinstance(state.answer, (AllowApproval, DenyApproval)) else None
            )
            answered = state.phase is CallbackPhase.ANSWERED
            closed = {"callback_id": callback_id, "answer": answer, "answered": answered}
            facts.emit(session, CallbackClosed, callback.turn_id, **closed)
            for ancestor, delegating in ancestors(facts.sessions, session.id):
                facts.emit(ancestor, CallbackClosed, delegating.id, **closed)
    return facts


def answer_key(callback_id: str, key: str) -> str:
    """How the idempotency key ``key`` of an answer to ``callback_id`` is kept among the
    session's keys."""
    return f"answer {callback_id} {key}"


def _close(
    facts: Facts,
    session: SessionMachine,
    callback_id: str,
    answered: bool,
    answer: Any,
    error: str | None,
) -> None:
    state = session.callbacks[callback_id]
    if not state.open:
        return
    callback = state.callback
    stored = None if isinstance(answer, SignInAnswer) else answer  # credentials never stored
    facts.add(
        CallbackRow(session.id, callback, "answered" if answered else "closed", stored, error)
    )
    state.answer = answer  # the live answer (a sign-in's credentials reach its turn)
    shown_answer = answer if isinstance(answer, (AllowApproval, DenyApproval)) else None
    closed = {"callback_id": callback.id, "answer": shown_answer, "answered": answered}
    facts.emit(session, CallbackClosed, callback.turn_id, **closed)
    for ancestor, delegating in ancestors(facts.sessions, session.id):
        facts.emit(ancestor, CallbackClosed, delegating.id, **closed)
    if isinstance(answer, AllowApproval) and answer.scope == "session":
        assert isinstance(callback, OpenApproval)
        for other_id, other in list(session.callbacks.items()):
            waiting = other.callback
            if (
                other.open
                and isinstance(waiting, OpenApproval)
                and waiting.source == "tool"
                and waiting.tool_name == callback.tool_name
            ):
                _close(facts, session, other_id, True, answer, None)


# -- ending ---------------------------------------------------------------------------------


def end_turn(
    sessions: Sessions, session_id: str, turn_id: str, record: TurnState[Any]
) -> tuple[TurnState[Any], Facts]:
    """Record how the turn ended. Messages steered too late for a model step join the
    history; its open callbacks (and its subagents' below it) close unanswered; its
    ``TurnEnded`` is its last event. Returns the record, with its cursor."""
    facts = Facts(sessions)
    session = sessions[session_id]
    turn = session.turns[turn_id]
    if turn.record is not None:
        return turn.record, facts
    for message in list(turn.steered):
        facts.entry(session, message)
    for state in open_below(sessions, turn):
        owner = sessions[state.callback.session_id]
        _close(facts, owner, state.callback.id, False, None, None)
    if turn.step is not None:
        facts.add(_step_row(turn, None))
    end = session.last_seq + 1
    record = evolve(record, cursor=format_cursor(session.id, end))
    facts.add(TurnRow(session.id, turn.id, turn.first_seq, record=record))
    facts.emit(session, TurnEnded, turn.id, record=record)
    return record, facts


# -- subagents ------------------------------------------------------------------------------


def start_subagent(
    sessions: Sessions,
    session_id: str,
    turn_id: str,
    *,
    child_id: str,
    agent: str,
    message: str,
    limit: int,
    max_steps: int,
    output_type: Any,
    lease: tuple[str, float] | None,
) -> tuple[str, Facts]:
    """A new subagent session below this one, of ``agent``, running a turn on ``message``.
    Returns the new turn's id.

    Raises:
        SessionBusyError: The root already runs ``limit`` subagent turns; nothing changed.
    """
    session = sessions[session_id]
    root = root_of(sessions, session_id)
    if running_subagents(sessions, root.id) >= limit:
        raise SessionBusyError(
            f"session {root.id} already runs {limit} subagent turns, its agent's "
            "max_running_subagents; nothing was started: delegate again once one ends"
        )
    facts = new_session(
        sessions, child_id, agent, session.inputs, parent=(session.id, turn_id), lease=lease
    )
    started, more = start_turn(
        sessions,
        child_id,
        (TextContentBlock(text=message),),
        None,
        max_steps=max_steps,
        output_type=output_type,
    )
    facts.extend(more)
    assert isinstance(started, Started)
    return started.turn_id, facts


# -- restarting -----------------------------------------------------------------------------


def _lost(call: Call, unknown: set[str]) -> bool:
    """Whether the call's outcome was lost with its runtime: its tool may have run, or its
    subagent's turn ended as UnknownOutcome."""
    if call.state is CallState.DELEGATED:
        return call.child is not None and call.child[1] in unknown
    return call.state is CallState.RUNNING or (call.state is CallState.DONE and call.result is None)


#: What the model is told of a call that was running when its runtime stopped, in a step
#: that goes on.
LOST = (
    "this call's outcome is unknown: the runtime stopped while it ran, and it was not run "
    "again (it may or may not have taken effect)"
)


@attrs.frozen
class Restart:
    """How a tree of sessions read back goes on: the turns to resume (deepest first)."""

    resume: tuple[tuple[str, str], ...]


def restart(sessions: Sessions, root_id: str) -> tuple[Restart, Facts]:
    """Decide how each unended turn of a tree read back from the store goes on, now that
    the runtime that ran it is gone.

    A turn goes on from its tool step when nothing of the step was running, or when a
    callback of it (or of a subagent below it) is still open: it was Blocked, as a caller
    may have been told, and stays so; each call that was running gets an error result and
    never runs again. Any other unended turn (a model step, a tool running) reads
    ``UnknownOutcome``; one of a cancelled session, ``Interrupted``; a subagent's whose
    delegating turn does not go on, ``Interrupted`` too.
    """
    facts = Facts(sessions)
    tree = list(tree_of(sessions, root_id))
    going_on: list[tuple[str, str]] = []
    unknown: set[str] = set()
    for session in reversed(tree):  # deepest first: a parent waits on its subagent's turn
        if session.active is None:
            continue
        turn = session.turns[session.active]
        if session.terminated:
            _, more = end_turn(
                sessions, session.id, turn.id, attrs.evolve(interrupted(turn), cause="cancelled")
            )
            facts.extend(more)
            continue
        step = turn.step
        lost = (
            []
            if step is None
            else [index for index, call in enumerate(step.calls) if _lost(call, unknown)]
        )
        for index in lost:  # what a running call asked (an MCP server's URL) ended with it
            callback_id = step.calls[index].callback if step is not None else None
            if callback_id is not None and session.callbacks[callback_id].open:
                facts.extend(close_callback(sessions, session.id, callback_id, answered=False))
        if step is None or (lost and not open_below(sessions, turn)):
            unknown.add(turn.id)
            _, more = end_turn(
                sessions,
                session.id,
                turn.id,
                UnknownOutcome(
                    turn_id=turn.id,
                    session_id=session.id,
                    reason="the runtime running this turn stopped before the turn ended",
                ),
            )
            facts.extend(more)
            continue
        for index in lost:
            call = step.calls[index]
            if call.state is not CallState.DELEGATED:  # a subagent's turn says how it ended
                result = error_result(call.entry, LOST)
                facts.extend(
                    update_call(
                        sessions, session.id, turn.id, index, state=CallState.DONE, result=result
                    )
                )
        going_on.append((session.id, turn.id))
    # A subagent's turn goes on only if the turn that delegated to it does (top down).
    kept = {turn_id for _, turn_id in going_on}
    for session in tree:
        if session.parent_id is None or session.active is None:
            continue
        turn = session.turns[session.active]
        if turn.id in kept and session.parent_turn_id not in kept:
            kept.discard(turn.id)
            _, more = end_turn(
                sessions,
                session.id,
                turn.id,
                Interrupted(turn_id=turn.id, session_id=session.id, cause="cancelled"),
            )
            facts.extend(more)
    return Restart(tuple(pair for pair in going_on if pair[1] in kept)), facts
