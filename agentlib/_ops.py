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

    A new session's row may carry its lease, (owner, seconds): the session is leased from
    the moment it exists. Rewriting the row (to mark it terminated) leaves the lease be.
    """

    session_id: str
    agent: str
    parent_id: str | None = None
    parent_turn_id: str | None = None
    idempotency_key: str | None = None
    inputs: Any = attrs.field(factory=dict)  # JSON by input id
    terminated: bool = False
    lease: tuple[str, float] | None = None


@attrs.frozen
class EventRow:
    session_id: str
    seq: int
    event: Event


@attrs.frozen
class EntryRow:
    session_id: str
    index: int
    entry: Entry


@attrs.frozen
class TurnRow:
    """A turn: where its events start, and its end record once it has one.

    ``max_steps`` is the turn's step limit when it starts; a store need not keep it (the
    turn's tool steps carry it, and a turn resumes only from one).
    """

    session_id: str
    turn_id: str
    first_seq: int
    output_type: str | None = None
    record: TurnState[Any] | None = None
    max_steps: int | None = None


@attrs.frozen
class StepRow:
    """What a turn's current tool step has done so far (JSON), to resume it; None once the
    step is over."""

    session_id: str
    turn_id: str
    step: Any = None


@attrs.frozen
class CallbackRow:
    """A callback a session opened, and how it closed."""

    session_id: str
    callback: Callback
    state: Literal["open", "answered", "closed"] = "open"
    answer: Any = None  # JSON: the approval answer taken, or a client tool's result
    error: str | None = None  # a client tool's failure, which the model is told of


@attrs.frozen
class KeyRow:
    """An idempotency key of a session, and the turn it started."""

    session_id: str
    key: str
    turn_id: str
    fingerprint: str


@attrs.frozen
class SteerRow:
    """A message steered into a turn, kept until it joins the history at the turn's next
    model step (or its end)."""

    session_id: str
    turn_id: str
    message: Entry


@attrs.frozen
class PruneRow:
    """Forget the session's events before ``before_seq``."""

    session_id: str
    before_seq: int


Op = Union[
    SessionRow, EventRow, EntryRow, TurnRow, StepRow, SteerRow, CallbackRow, KeyRow, PruneRow
]
