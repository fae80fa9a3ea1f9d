"""The store contract: what a store keeps of sessions, and what the runtime counts on.

A store keeps each session as an append-only event log plus the state derived from it: its
history, its turns, the step a turn is in, steered messages, callbacks, idempotency keys. The
runtime tells it what changed with op rows (:data:`Op`), written in order and without waiting
(:meth:`Store.write`); it waits for the store (:meth:`Store.flush`) before it acknowledges
anything to a caller: a started turn, a taken answer, an event a reader sees. It reads one
whole session back at a time (:meth:`Store.load`), and leases the sessions it runs so that
one runtime at a time runs each.

The rules are on :class:`Store` and its methods; :mod:`agentlib.testing.store_contract` is
the suite a store passes.

A runtime writes a turn's row before any row that names the turn (an entry, a steered
message, a callback, an idempotency key): a store that reads back a row naming a turn it
does not have is damaged, and says so.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import attrs

from .._data._entries import Entry
from .._data._errors import LeaseLost, LeaseRefused, StoreError
from .._data._events import Event
from .._data._ops import (
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
    "Progress",
    "PruneRow",
    "Request",
    "SessionRow",
    "SteerRow",
    "StepRow",
    "Store",
    "StoreError",
    "StoredSession",
    "TurnRow",
]


@attrs.frozen
class Progress:
    """How far a session is in a shared store, as :meth:`Store.wait_for_events` reads it.

    Attributes:
        first_seq: The seq of its first event still stored.
        last_seq: The seq of its last event committed, by whichever runtime.
        terminated: Whether it ended (no event will follow).
        subagent: Whether it is a subagent's session (its events end with its turn's).
    """

    first_seq: int
    last_seq: int
    terminated: bool
    subagent: bool


@attrs.frozen
class Request:
    """A request of a runtime that does not hold a session to the one that does, in a
    shared store (:meth:`Store.send_request`): a change only the holder may make.

    Attributes:
        id: The request's id in the store.
        session_id: The session it is for.
        body: What to do, as JSON (the runtime's own form: a store only keeps it).
        age: The seconds since it was sent, on the store's clock (the database's, for one
            shared by several hosts).
    """

    id: int
    session_id: str
    body: dict[str, Any]
    age: float = 0.0


@attrs.frozen
class StoredSession:
    """One session as a store reads it back (:meth:`Store.load`): everything written to it,
    whole.

    Attributes:
        row: Its row, as last written, without a lease.
        first_seq: The seq of its first event still stored (older ones were pruned).
        last_seq: The seq of its last event (``first_seq - 1`` if none is stored):
            :meth:`Store.read_events` reads those from ``first_seq`` to it.
        entries: Its history, by index.
        turns: Its turns, in the order they started.
        steps: The step of each turn that is in one (not None), by turn id.
        steers: The messages steered into each turn, in the order written, by turn id.
        callbacks: Its callbacks, one each, in the order they were opened.
        keys: Its idempotency keys, in any order.
        children: The ids of its subagents' sessions, in the order their rows were
            written.
    """

    row: SessionRow
    first_seq: int
    last_seq: int
    entries: Sequence[Entry]
    turns: Sequence[TurnRow]
    steps: dict[str, Any]
    steers: Mapping[str, Sequence[Entry]]
    callbacks: Sequence[CallbackRow]
    keys: Sequence[KeyRow]
    children: Sequence[str]


class Store(abc.ABC):
    """Where a runtime keeps its sessions: subclass it to keep them elsewhere. The rules
    below are what the runtime counts on; :mod:`agentlib.testing.store_contract` checks them.

    **One runtime per store object.** :func:`agentlib.open_runtime` opens the store
    (:meth:`open`), and closes it (:meth:`aclose`) when it closes; it calls every method
    from its trio thread. Several runtimes, in one process or several, share sessions
    through several store objects on one database: each object tells its own leases from
    the others'. A store object may be opened again once closed.

    **Writes.** The runtime writes op rows (:data:`Op`) with :meth:`write`, which never
    waits, and waits with :meth:`flush` before it acknowledges anything. The store commits
    them soon, without waiting for a flush (readers see an event only once it is committed),
    in the order they were written: once a write is durable, so is every write made before
    it. It may commit several writes at once, in one transaction: such a group is durable
    whole, or not at all.

    **Notification.** The runtime learns what is durable from :meth:`flush`: once a flush
    returns, it shows readers the events written before it (it keeps a task flushing while
    it writes). The store never calls the runtime. It tells its own listeners
    (:meth:`listen`: observers of the store) of each group of writes once it is durable,
    through :meth:`committed`, in the runtime's thread (from :meth:`write` itself where each
    write is durable at once); a store that fails calls it with no op, so that those
    listening hear of it. It reports the writes made through its own object: not those
    another store object made on the same database.

    **Reads.** :meth:`load` reads a session back whole, :meth:`read_events` its events a page
    at a time, :meth:`session_for_key` finds the session a ``start_session`` key made. What
    a read returns is what the writes before it made (those flushed, at least).

    **Leases.** A session is run by one runtime at a time: the runtime leases the sessions it
    runs (:meth:`acquire`, or the ``lease`` of a new session's :class:`SessionRow`), renews
    its leases every third of their length (:meth:`renew`), and lets them go when it closes
    (:meth:`release`). An owner is a runtime's name, unique to it. A lease lasts ``seconds``
    on the store's clock unless renewed; then another owner may take it. A store that can
    tell that an owner died (the SQLite store: its process, on this host, has ended) may
    take its leases at once; it never takes a live owner's lease before it expires.

    **Fencing.** A runtime that stalls past its lease (a paused process, a frozen machine)
    may write after another runtime took its session over. Its store refuses such a write:
    in the transaction of each commit it checks that every session the group writes to, of
    those this store object leased (by :meth:`acquire` or a :class:`SessionRow`), is still
    leased to the owner it leased it to. If one is not, none of the writes to that session
    is written, nor any later one until it is leased again; the rest of the group is
    committed, and the store goes on with its other sessions. It records the refusal, a
    :class:`LeaseLost` naming the session, which :meth:`taken_over` gives the runtime (a
    flush returns once each write is durable or refused), and tells its listeners only of
    the writes it committed. A lost lease is about one session, never the store. A store on
    a database
    shared by several hosts, where an owner's death is known only by its lease expiring,
    relies on this: it may give each lease an epoch, a number bumped each time the session
    is leased to an owner other than the one holding it, remember the epoch of each lease
    it took, and refuse a commit when a session's epoch has moved on. The epoch also tells
    apart two leases of one owner with another's in between.

    **Errors.** A store raises :class:`StoreError` when it fails (a full disk, a lost
    connection) or reads back what it cannot have written (:meth:`damaged`), never its
    driver's errors (those are the ``__cause__``); :class:`StoreSchemaError` from
    :meth:`open` for a database of a newer version, or one that is no store; and
    :class:`LeaseRefused` from :meth:`acquire`. A store that can no longer commit records
    why in :attr:`failure`: then every wait for it raises (:meth:`check`), it writes
    nothing more, and it lets go of its sessions where the database still takes that much,
    so that another runtime takes them over at once.
    """

    #: Whether sessions outlive the runtime. A durable store keeps every write, and the
    #: sessions a runtime runs are leased. One that is not (``":memory:"``, whose sessions end
    #: with the runtime that holds them) is given every write too, but keeps none: it reports
    #: the events as committed at once, and takes no lease.
    #: With a durable store, a runtime that closes leaves a turn blocked on callbacks
    #: blocked, for the next one to resume.
    durable: bool = True

    #: How long a runtime's lease on a session lasts without renewal, in seconds, unless
    #: ``open_runtime(lease_seconds=...)`` says otherwise.
    lease_seconds: float = 30.0

    def listen(self, listener: Callable[[Sequence[Op]], None]) -> Callable[[], None]:
        """Call ``listener`` with each group of writes once it is durable, and with no op
        when the store fails, in the runtime's thread; returns the function that stops it.

        A store calls :meth:`committed`, which calls the listeners, and need not override
        this; the runtime itself does not listen (it flushes).
        """
        listeners: list[Callable[[Sequence[Op]], None]] = self.__dict__.setdefault("_listeners", [])
        listeners.append(listener)
        return lambda: listeners.remove(listener)

    def committed(self, ops: Sequence[Op]) -> None:
        """Tell the listeners that ``ops`` are durable, the very objects written, in the
        order written: a store calls it once for every group it commits (each write in
        exactly one), in the runtime's thread, before a flush waiting for them returns. It
        calls it with no op when it fails, so that those waiting for it hear of it."""
        for listener in self.__dict__.get("_listeners", ()):
            listener(ops)

    #: Why the store can no longer commit, once it cannot: then :meth:`check` raises.
    failure: BaseException | None = None

    def refuse(self, lost: LeaseLost) -> None:
        """Record that the fence refused writes to ``lost.session_id``, which another runtime
        took over: :meth:`taken_over` gives it to the runtime."""
        self.__dict__.setdefault("_taken_over", {}).setdefault(lost.session_id, lost)

    def taken_over(self) -> list[LeaseLost]:
        """The refusals of writes to sessions other runtimes took over since the last call,
        one for each session, oldest first (see fencing, above), and forget them: the
        runtime lets those sessions go."""
        refused: dict[str, LeaseLost] = self.__dict__.pop("_taken_over", {})
        return list(refused.values())

    def damaged(self, session_id: str, table: str, reason: str) -> StoreError:
        """The error for a session the store gave back in a shape it cannot have written:
        the runtime found it so while reading it back, and raises it.

        A store names itself and says how to check it; it never quotes a row (a row may hold
        a session's inputs).

        Args:
            session_id: The session.
            table: Where the store keeps what is wrong (``"turns"``, say).
            reason: What is wrong, in words that quote no row.
        """
        return StoreError(
            f"the store is damaged: session {session_id} cannot be read from table {table} "
            f"({reason}); restore it from a backup"
        )

    def check(self) -> None:
        """Raise if the store can no longer commit (:attr:`failure` is set); return at once
        otherwise. The runtime calls it before it takes a change it would have to write.

        Raises:
            LeaseLost: The store refused a write: another runtime took over a session (a new
                error each call).
            StoreError: The store failed; what was not acknowledged is lost.
        """
        lost = self.failure
        if isinstance(lost, LeaseLost):  # a new one for each call that raises it
            raise LeaseLost(lost.session_id, lost.owner, store=lost.store)
        if self.failure is not None:
            raise StoreError(
                f"the store failed ({self.failure}); what was not acknowledged is lost: check "
                "the disk, then open a new runtime on the store"
            ) from self.failure

    def check_session(self, session_id: str) -> None:
        """Raise if the store can no longer commit, or no longer writes this session; return
        at once otherwise. A reader following the session calls it each time it wakes.

        This one is :meth:`check`: a store that refuses one session's writes and goes on
        with the others (a row the database cannot keep) overrides it.

        Raises:
            LeaseLost: As :meth:`check`.
            StoreError: The store failed, or refused the session's writes.
        """
        self.check()

    @abc.abstractmethod
    async def open(self, start_soon: Callable[..., Any]) -> None:
        """Prepare the store (connect, create or check its tables) before the runtime uses
        it. A store that commits in the background starts its task here.

        Args:
            start_soon: Runs a task in the runtime's nursery (``nursery.start_soon``): it
                runs until the store's :meth:`aclose` ends it.

        Raises:
            StoreSchemaError: The database was written by a newer version of the store, or
                is not one of its databases: it is left as it was.
            StoreError: The database cannot be reached.
        """

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Commit what was written (as :meth:`flush`, but raising nothing for a failed
        store), end the store's tasks and release what it holds: a runtime's last call.
        The runtime has released its leases before."""

    @abc.abstractmethod
    def write(self, op: Op) -> None:
        """Queue ``op``, to commit after every write made before it; never waits, never
        raises for the store's state (a failed store reports it at :meth:`flush`).
        ``op`` is the runtime's: keep it as it is, and report that very object to
        :meth:`committed`."""

    @abc.abstractmethod
    async def flush(self) -> None:
        """Return once every write made so far is durable (and reported to
        :meth:`committed`).

        A write the fence refused (its session was taken over) is done too: it is never
        written, and :meth:`taken_over` says so.

        Raises:
            StoreError: The store failed, or is closed: those writes may be lost.
        """

    @abc.abstractmethod
    async def load(self, session_id: str) -> StoredSession | None:
        """The session, whole, as every write flushed so far made it; None if the store
        never had it.

        Raises:
            StoreError: The store failed, or holds the session damaged: rows that cannot be
                read, or rows missing. A damaged session never reads as empty, nor short.
        """

    @abc.abstractmethod
    async def session_for_key(self, key: str) -> str | None:
        """The id of the session whose :class:`SessionRow` has this ``idempotency_key``
        (a turn's key is not one), or None.

        Raises:
            StoreError: The store failed, or is damaged.
        """

    @abc.abstractmethod
    async def read_events(self, session_id: str, after: int, limit: int) -> list[Event]:
        """A page of the session's events: up to ``limit`` of them after seq ``after``,
        from the first kept one after it (pruned events are gone), each after that, none
        skipped; empty past the last, or for a session the store does not have. The runtime
        checks that none is skipped.

        Raises:
            StoreError: The store failed, or lost events it never pruned.
        """

    @abc.abstractmethod
    async def acquire(self, session_ids: Sequence[str], owner: str, seconds: float) -> None:
        """Lease the sessions (all stored) to ``owner`` for ``seconds``, all or none; an
        owner's own lease is renewed. A session whose lease has expired, or was released,
        is taken; so may be one whose owner the store knows to have died.

        Raises:
            LeaseRefused: Another owner's lease on one of them has not expired, and that
                owner is not known to have died: it names the session, that owner and when
                its lease expires. None of the sessions is taken.
            StoreError: The store failed.
        """

    async def renew(self, session_ids: Sequence[str], owner: str, seconds: float) -> list[str]:
        """Renew ``owner``'s leases on the sessions for ``seconds`` (at once, where the store
        can) and return those ``owner`` does not hold: another owner took them over (and
        may have let them go since), or they were never leased. Sessions the store does not
        have are skipped. A renewal takes no session: the runtime lets the ones returned go,
        and writes to them are refused (see fencing, above).

        This one renews them one by one with :meth:`acquire`, which cannot tell a session
        let go by another owner from one never leased, nor skip those the store does not
        have; a store overrides it to pass the contract's suite.

        Raises:
            StoreError: The store failed.
        """
        lost = []
        for session_id in session_ids:
            try:
                await self.acquire([session_id], owner, seconds)
            except LeaseRefused:
                lost.append(session_id)
        return lost

    #: Whether runtimes in other processes commit to this store's sessions (a database that
    #: several runtimes share, each through a store object of its own). A runtime then
    #: follows the events of a session another runtime holds, as it commits them, with
    #: :meth:`wait_for_events`. A store that is not shared need not implement it.
    shared: bool = False

    async def wait_for_events(self, session_id: str, after: int) -> Progress | None:
        """Return once the session has an event after seq ``after`` committed (by any
        store object on the database), or has ended, or soon after in any case (a
        reader then asks again); None if the store does not have the session. A shared
        store hears of other objects' commits as they happen, and reads the session's
        progress now and then in case it missed one.

        Raises:
            StoreError: The store failed.
        """
        raise NotImplementedError(f"{type(self).__name__} is not shared: nothing to follow")

    async def claim_callback(self, row: CallbackRow, key: KeyRow | None) -> CallbackRow | None:
        """Settle an open callback in a shared store, the first writer winning, for a
        runtime that holds its session or not: ``row`` (how it closed) is written, with the
        answer's idempotency ``key``, only where the callback is still open. The runtime
        that holds the session hears of it through :meth:`wait_for_claims`. A settled
        callback's row never changes again, whoever writes to it.

        The callback is one the store has (its opening was committed).

        Returns:
            None if this claim settled it; else the callback's row as it is: settled
            before.

        Raises:
            StoreError: The store failed.
        """
        raise NotImplementedError(f"{type(self).__name__} is not shared: nothing to claim")

    async def wait_for_claims(self, open_callbacks: Sequence[tuple[str, str]]) -> list[CallbackRow]:
        """The rows of those of ``open_callbacks`` (session id, callback id), which the
        runtime holds open, that another claim settled; waits for a claim (or a while, as
        a claim's notice may be lost) while none is.

        Raises:
            StoreError: The store failed.
        """
        raise NotImplementedError(f"{type(self).__name__} is not shared: nothing to claim")

    async def send_request(self, session_id: str, body: Mapping[str, Any]) -> int:
        """Keep a request (``body``, JSON) for the runtime that holds the session, in a
        shared store: it hears of it through :meth:`wait_for_requests`, and replies with
        :meth:`reply_request`.

        Returns:
            The request's id.

        Raises:
            StoreError: The store failed.
        """
        raise NotImplementedError(f"{type(self).__name__} is not shared: no request to send")

    async def wait_for_requests(self, owner: str, skip: Collection[int]) -> list[Request]:
        """The requests not yet replied to, nor in ``skip``, for the sessions ``owner``
        leases, oldest first; waits for one (or a while, as a request's notice may be lost)
        while there is none.

        Raises:
            StoreError: The store failed.
        """
        raise NotImplementedError(f"{type(self).__name__} is not shared: no request to wait for")

    async def reply_request(self, request_id: int, reply: Mapping[str, Any]) -> None:
        """Reply to a request (``reply``, JSON), unless it was withdrawn; its sender hears
        of it through :meth:`wait_for_reply`.

        Raises:
            StoreError: The store failed.
        """
        raise NotImplementedError(f"{type(self).__name__} is not shared: no request to reply to")

    async def wait_for_reply(self, request_id: int) -> dict[str, Any] | None:
        """The reply to a request, once there (the request is then forgotten); or None
        after a while with no reply (the sender then asks again), or when the store no
        longer has the request (a reply no one read is forgotten after a while, an hour on
        PostgreSQL).

        Raises:
            StoreError: The store failed.
        """
        raise NotImplementedError(f"{type(self).__name__} is not shared: no reply to wait for")

    async def withdraw_request(self, request_id: int) -> bool:
        """Withdraw a request no one replied to yet: True if it was withdrawn (its reply
        will never come); False if it has a reply (:meth:`wait_for_reply` gives it) or the
        store no longer has it.

        Raises:
            StoreError: The store failed.
        """
        raise NotImplementedError(f"{type(self).__name__} is not shared: no request to withdraw")

    @abc.abstractmethod
    async def release(self, session_ids: Sequence[str], owner: str) -> None:
        """End ``owner``'s leases on the sessions, at once: another owner may take them.
        A session another owner holds is left be. It works on a failed store too, where
        the database still takes it.

        Raises:
            StoreError: The store failed.
        """
