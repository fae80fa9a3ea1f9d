"""The facts a session's state is made of: what a runtime writes to its store, in order.

Each is a row of the store's tables and a step of the engine's state: the engine changes a
session's state only by applying one of these (``_engine/_machine.py``), and a session read
back from a store is those it wrote, applied again.
"""

from __future__ import annotations

from typing import Any, Literal, Union

import attrs

from ._callbacks import Callback
from ._entries import Entry
from ._events import Event
from ._records import TurnState

__all__ = [
    "CallbackRow",
    "EntryRow",
    "EventRow",
    "KeyRow",
    "Op",
    "PruneRow",
    "SessionRow",
    "SteerRow",
    "StepRow",
    "TurnRow",
]


@attrs.frozen
class SessionRow:
    """A session: its agent, where it sits in a tree of subagents, its inputs.

    The first row of a session creates it. The runtime writes it again only to mark the
    session terminated: a later row changes ``terminated`` alone, and leaves the lease be.

    Attributes:
        session_id: The session.
        agent: The name of its agent.
        parent_id: The session whose turn delegated to this one (a subagent's), or None.
            The parent's row is written first.
        parent_turn_id: That parent's turn.
        idempotency_key: The key of ``start_session`` that made it, found again by
            :meth:`Store.session_for_key`.
        inputs: Its session inputs, JSON by input id.
        terminated: Whether it was cancelled.
        lease: On a new session's row, its lease, (owner, seconds): the session is leased to
            the owner from the moment it exists, as :meth:`Store.acquire` would lease it. A
            row read back carries no lease.
    """

    session_id: str
    agent: str
    parent_id: str | None = None
    parent_turn_id: str | None = None
    idempotency_key: str | None = None
    inputs: Any = attrs.field(factory=dict)
    terminated: bool = False
    lease: tuple[str, float] | None = None


@attrs.frozen
class EventRow:
    """An event appended to a session's log.

    Attributes:
        session_id: The session.
        seq: Its place in the log: 1 for a session's first event, and each next one 1 more
            than the last written, pruned or not. The event's ``id`` is most often the
            session's cursor at ``seq`` (``f"{session_id}:{seq:012d}"``), not always.
        event: The event, read back equal.
    """

    session_id: str
    seq: int
    event: Event


@attrs.frozen
class EntryRow:
    """An entry appended to a session's history.

    Attributes:
        session_id: The session.
        index: Its place in the history: 0 for the first, each next one 1 more.
        entry: The entry, read back equal.
    """

    session_id: str
    index: int
    entry: Entry


@attrs.frozen
class TurnRow:
    """A turn: where its events start, and its end record once it has one.

    The first row of a turn starts it; a later row of the same turn sets its ``record``,
    and leaves ``first_seq`` and ``output_type`` as the first row wrote them.

    Attributes:
        session_id: The session.
        turn_id: The turn.
        first_seq: The seq of its first event.
        output_type: The name of the type of its output, if not text.
        record: How it ended (``Completed``, ``Failed``...), None while it has not.
        max_steps: The turn's step limit when it starts. A store need not keep it: the
            turn's tool steps carry it, and a turn resumes only from one.
    """

    session_id: str
    turn_id: str
    first_seq: int
    output_type: str | None = None
    record: TurnState[Any] | None = None
    max_steps: int | None = None


@attrs.frozen
class StepRow:
    """What a turn's current tool step has done so far, to resume it.

    Attributes:
        session_id: The session.
        turn_id: The turn (its row is written first).
        step: The step, which replaces the turn's last; None once the step is over. A
            store keeps its JSON (``agentlib.unstructure``), and may give back either.
    """

    session_id: str
    turn_id: str
    step: Any = None


@attrs.frozen
class CallbackRow:
    """A callback a session opened, and how it closed.

    The first row of a callback opens it; a later row of the same callback (by
    ``callback.id``) sets its ``state``, ``answer`` and ``error``.

    Attributes:
        session_id: The session.
        callback: The callback (``OpenApproval``, ``OpenClientToolCall``, ``OpenSignIn``...).
        state: ``"open"``, then ``"answered"`` or ``"closed"`` (closed unanswered).
        answer: The answer taken: an ``AllowApproval`` or a ``DenyApproval`` for an
            approval, JSON for a client tool's result, None for a sign-in (credentials are
            never stored). A store that keeps it as JSON reads an approval's answer back as
            the class its ``type`` names.
        error: A client tool's failure, which the model is told of.
    """

    session_id: str
    callback: Callback
    state: Literal["open", "answered", "closed"] = "open"
    answer: Any = None
    error: str | None = None


@attrs.frozen
class KeyRow:
    """An idempotency key of a session's ``start_turn`` or ``steer``, and the turn it went
    to; or of an answer a server took (``"answer <callback id> <key>"``, fingerprint
    ``"answer"``), with the callback's turn. Each key of a session is written once.

    Attributes:
        session_id: The session.
        key: The key.
        turn_id: The turn it started or steered.
        fingerprint: What was sent with it, to tell a retry from another message.
    """

    session_id: str
    key: str
    turn_id: str
    fingerprint: str


@attrs.frozen
class SteerRow:
    """A message steered into a turn, kept until it joins the history at the turn's next
    model step (or its end).

    Attributes:
        session_id: The session.
        turn_id: The turn.
        message: The message.
    """

    session_id: str
    turn_id: str
    message: Entry


@attrs.frozen
class PruneRow:
    """Forget the session's events before ``before_seq`` (fewer if it has fewer): the
    first kept is then the one at ``before_seq``, or the next one written. Later events
    are numbered on; pruning less than is gone changes nothing.

    Attributes:
        session_id: The session.
        before_seq: The seq of the first event to keep.
    """

    session_id: str
    before_seq: int


Op = Union[
    SessionRow, EventRow, EntryRow, TurnRow, StepRow, SteerRow, CallbackRow, KeyRow, PruneRow
]
"""A write the runtime makes to a store: one of the row classes, matched by class."""
