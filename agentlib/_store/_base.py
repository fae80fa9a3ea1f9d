"""The store interface: where sessions' event logs, and the state derived from them, live.

The engine writes to a store in order, without waiting (:meth:`Store.write`), and waits for
the store (:meth:`Store.flush`) before it acknowledges anything to a caller: a started turn,
a taken answer, an event a reader sees. A store reads back one whole session tree at a time
(:meth:`Store.load`), and leases sessions to one runtime at a time.

A runtime writes a turn's row before any row that names the turn (an entry, a steered
message, a callback, an idempotency key): a store that reads back a row naming a turn it
does not have is damaged, and says so.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from .._entries import Entry
from .._errors import LeaseLost, LeaseRefused, StoreError
from .._events import Event
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

__all__ = [
    "CallbackRow",
    "EntryRow",
    "EventRow",
    "KeyRow",
    "LeaseLost",
    "LeaseRefused",
    "Op",
    "PruneRow",
    "SessionRow",
    "SteerRow",
    "StepRow",
    "Store",
    "StoreError",
    "StoredSession",
    "TurnRow",
]


@attrs.frozen
class StoredSession:
    """One session as a store holds it."""

    row: SessionRow
    first_seq: int  # the seq of its first event still stored (older ones were pruned)
    last_seq: int  # the seq of its last event (first_seq - 1 if none): read_events reads them
    entries: Sequence[Entry]
    turns: Sequence[TurnRow]
    steps: dict[str, Any]
    steers: Mapping[str, Sequence[Entry]]  # by turn id
    callbacks: Sequence[CallbackRow]
    keys: Sequence[KeyRow]
    children: Sequence[str]


class Store(abc.ABC):
    """Where a runtime keeps its sessions. Subclass it to keep them elsewhere.

    Writes are applied in the order they were made. A store calls :meth:`committed`, in the
    runtime's trio thread, with each group of writes once it is durable.
    """

    #: Whether sessions outlive the runtime: then a runtime that closes leaves a turn that
    #: is blocked on callbacks blocked, for the next one to resume.
    durable: bool = True

    def listen(self, listener: Callable[[Sequence[Op]], None]) -> Callable[[], None]:
        """Call ``listener`` with each group of writes once it is durable (in the runtime's
        thread); returns the function that stops it. Each runtime on the store listens."""
        listeners: list[Callable[[Sequence[Op]], None]] = self.__dict__.setdefault("_listeners", [])
        listeners.append(listener)
        return lambda: listeners.remove(listener)

    def committed(self, ops: Sequence[Op]) -> None:
        """Tell the listeners that ``ops`` are durable: a store calls it for every write,
        and with no op when it fails (so that those waiting for it hear of it)."""
        for listener in self.__dict__.get("_listeners", ()):
            listener(ops)

    #: Why the store can no longer commit, once it cannot.
    failure: BaseException | None = None

    def damaged(self, session_id: str, table: str, reason: str) -> StoreError:
        """The error for a session the store gave back in a shape it cannot have written
        (the runtime found it so while reading it back): ``reason`` says what, in words
        that quote no row. A store names itself and says how to check it."""
        return StoreError(
            f"the store is damaged: session {session_id} cannot be read from table {table} "
            f"({reason}); restore it from a backup"
        )

    def check(self) -> None:
        """Raises:
        StoreError: The store failed; what was not acknowledged is lost."""
        lost = self.failure
        if isinstance(lost, LeaseLost):  # a new one for each call that raises it
            raise LeaseLost(lost.session_id, lost.owner, store=lost.store)
        if self.failure is not None:
            raise StoreError(
                f"the store failed ({self.failure}); what was not acknowledged is lost: check "
                "the disk, then open a new runtime on the store"
            ) from self.failure

    @abc.abstractmethod
    async def open(self, start_soon: Callable[..., Any]) -> None:
        """Prepare the store; ``start_soon`` runs a background task in the runtime."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Commit what was written, then release the store."""

    @abc.abstractmethod
    def write(self, op: Op) -> None:
        """Queue ``op``; never waits. :meth:`flush` waits until it is durable."""

    @abc.abstractmethod
    async def flush(self) -> None:
        """Return once every write made so far is durable."""

    @abc.abstractmethod
    async def load(self, session_id: str) -> StoredSession | None:
        """The session, or None if the store never had it.

        Raises:
            StoreError: The store failed, or holds the session damaged: rows that cannot be
                read, or rows missing. A damaged session never reads as empty, nor short.
        """

    @abc.abstractmethod
    async def session_for_key(self, key: str) -> str | None:
        """The session an idempotency key of ``start_session`` started.

        Raises:
            StoreError: The store failed, or is damaged.
        """

    @abc.abstractmethod
    async def read_events(self, session_id: str, after: int, limit: int) -> list[Event]:
        """Up to ``limit`` events of the session after seq ``after``: the first kept one
        after it, and each after that, none skipped (the engine checks).

        Raises:
            StoreError: The store failed, or lost events it never pruned.
        """

    @abc.abstractmethod
    async def acquire(self, session_ids: Sequence[str], owner: str, seconds: float) -> None:
        """Lease the sessions to ``owner`` for ``seconds``, or renew its lease.

        A store that can tell that another owner died (the SQLite store: its process, on
        this host, has ended) takes its leases at once; it never takes a live owner's.

        Raises:
            LeaseRefused: Another owner's lease on one of them has not expired, and that
                owner is not known to have died. None of the sessions is taken.
        """

    async def renew(self, session_ids: Sequence[str], owner: str, seconds: float) -> list[str]:
        """Renew ``owner``'s leases on the sessions for ``seconds`` (at once, where the store
        can) and return those ``owner`` no longer holds: another owner took them over (and
        may have let them go since). Sessions the store does not have yet are skipped.

        This one renews them one by one with :meth:`acquire`, which cannot tell a session
        let go by another owner from one never leased; stores override it.
        """
        lost = []
        for session_id in session_ids:
            try:
                await self.acquire([session_id], owner, seconds)
            except LeaseRefused:
                lost.append(session_id)
        return lost

    @abc.abstractmethod
    async def release(self, session_ids: Sequence[str], owner: str) -> None:
        """End ``owner``'s leases on the sessions."""
