"""The store contract's test suite: what :mod:`agentlib.testing.store_contract` exports.

Each test drives a store as a runtime does, through :class:`~agentlib.store.Store` alone:
it opens the store in a trio nursery, writes op rows, flushes, reads them back, leases
sessions, and closes it. The fixtures a store's own test module defines (``store`` and
``other_store``) give the stores; ``clock`` is the wall clock leases are measured on, which
the tests move by hand.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from .._data._callbacks import (
    AllowApproval,
    DenyApproval,
    OpenApproval,
    OpenClientToolCall,
    OpenSignIn,
)
from .._data._content import TextContentBlock
from .._data._entries import Entry, MessageEntry, ToolCallEntry, ToolResultEntry
from .._data._errors import LeaseLost, LeaseRefused, StoreError
from .._data._events import (
    CallbackClosed,
    CallbackOpened,
    EntryAdded,
    EntryCompleted,
    EntryDelta,
    Event,
    TurnEnded,
    TurnStarted,
    UnknownEvent,
)
from .._data._records import Completed, Interrupted
from .._store._base import (
    CallbackRow,
    EntryRow,
    EventRow,
    KeyRow,
    Op,
    PruneRow,
    SessionRow,
    SteerRow,
    StepRow,
    Store,
    StoredSession,
    TurnRow,
)

# --- the clock, and helpers -------------------------------------------------------------------


class ManualClock:
    """A wall clock (seconds since the epoch) that moves only when a test moves it. The
    store under test measures its leases on it: the tests let a lease expire without
    waiting for it.

    Attributes:
        now: The time it tells; a test moves it on (``clock.now += 31``).
    """

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        """The time: :attr:`now`."""
        return self.now


@pytest.fixture
def clock() -> ManualClock:
    """The clock the ``store`` and ``other_store`` fixtures give their stores."""
    return ManualClock()


@asynccontextmanager
async def opened(store: Store) -> AsyncIterator[Store]:
    """The store, open in a nursery for the block; closed (committing everything) after.
    What the block raises leaves it as it is, not in the nursery's exception group."""
    failure: Exception | None = None
    async with trio.open_nursery() as nursery:
        await store.open(nursery.start_soon)
        try:
            yield store
        except Exception as error:
            failure = error
        finally:
            await store.aclose()
    if failure is not None:
        raise failure


def recording(store: Store) -> list[Op]:
    """Every op the store reports committed, in the order it reports them."""
    seen: list[Op] = []
    store.listen(seen.extend)
    return seen


def new_id() -> str:
    return uuid.uuid4().hex


def cursor(session_id: str, seq: int) -> str:
    return f"{session_id}:{seq:012d}"


def text(value: str) -> tuple[TextContentBlock, ...]:
    return (TextContentBlock(text=value),)


def user_message(turn_id: str, value: str) -> MessageEntry:
    return MessageEntry(id=new_id(), turn_id=turn_id, role="user", content=text(value))


def unchecked_message(turn_id: str, value: str) -> MessageEntry:
    """A user message of text ``value`` that the data model would refuse (a lone surrogate):
    what a store is given when text reaches it past the model's checks."""
    message = user_message(turn_id, "placeholder")
    object.__setattr__(message.content[0], "text", value)
    return message


def events_of_a_turn(session_id: str, turn_id: str, first_seq: int = 1) -> list[Event]:
    """A turn's worth of events of several types, numbered from ``first_seq``."""
    message = user_message(turn_id, "hello")
    answer = MessageEntry(id=new_id(), turn_id=turn_id, role="assistant", content=text("hi"))
    approval = approval_callback(session_id, turn_id)
    kinds: list[Any] = [
        lambda id: TurnStarted(id=id, session_id=session_id, turn_id=turn_id, message=message),
        lambda id: CallbackOpened(id=id, session_id=session_id, turn_id=turn_id, callback=approval),
        lambda id: CallbackClosed(
            id=id,
            session_id=session_id,
            turn_id=turn_id,
            callback_id=approval.id,
            answer=AllowApproval(scope="session"),
        ),
        lambda id: EntryAdded(
            id=id,
            session_id=session_id,
            turn_id=turn_id,
            entry=MessageEntry(id=answer.id, turn_id=turn_id, role="assistant"),
        ),
        lambda id: EntryDelta(
            id=id, session_id=session_id, turn_id=turn_id, entry_id=answer.id, delta="h"
        ),
        lambda id: EntryDelta(
            id=id, session_id=session_id, turn_id=turn_id, entry_id=answer.id, delta="i"
        ),
        lambda id: TurnEnded(
            id=id,
            session_id=session_id,
            turn_id=turn_id,
            record=Completed(
                turn_id=turn_id, session_id=session_id, cursor=id, output="hi", text="hi"
            ),
        ),
    ]
    return [make(cursor(session_id, first_seq + n)) for n, make in enumerate(kinds)]


def approval_callback(session_id: str, turn_id: str, path: str = "/tmp/x") -> OpenApproval:
    return OpenApproval(
        id=str(uuid.uuid4()),
        session_id=session_id,
        turn_id=turn_id,
        tool_name="delete",
        arguments={"path": path},
    )


def event_rows(session_id: str, events: Sequence[Event], first_seq: int = 1) -> list[EventRow]:
    """The rows of ``events`` of session ``session_id``, numbered from ``first_seq``."""
    return [EventRow(session_id, seq, event) for seq, event in enumerate(events, start=first_seq)]


def write_all(store: Store, ops: Sequence[Op]) -> None:
    for op in ops:
        store.write(op)


async def load(store: Store, session_id: str) -> StoredSession:
    stored = await store.load(session_id)
    assert stored is not None, f"the store lost session {session_id}"
    return stored


async def acquire_refused(store: Store, session_ids: list[str], owner: str) -> LeaseRefused:
    """Acquire ``session_ids`` for ``owner`` (for 30 s), which must be refused: the
    LeaseRefused raised."""
    with pytest.raises(LeaseRefused) as raised:
        await store.acquire(session_ids, owner, 30)
    return raised.value


async def events_of(store: Store, stored: StoredSession) -> list[Event]:
    """The events of a session read back, all of them, as ``read_events`` reads them a page
    at a time; they run from its ``first_seq`` to its ``last_seq``."""
    session_id = stored.row.session_id
    events: list[Event] = []
    while True:
        page = await store.read_events(session_id, stored.first_seq - 1 + len(events), 2)
        if not page:
            break
        events += page
    assert stored.last_seq == stored.first_seq - 1 + len(events), "last_seq is not the last"
    return events


# --- reading what was never written -----------------------------------------------------------


@pytest.mark.trio
async def test_an_unknown_session_reads_as_nothing(store: Store) -> None:
    async with opened(store):
        assert await store.load("nope") is None
        assert await store.session_for_key("no such key") is None
        assert await store.read_events("nope", 0, 100) == []
        # A known session does not make an unknown one appear.
        store.write(SessionRow("known", "agent"))
        await store.flush()
        assert await store.load("nope") is None
        assert await store.load("known") is not None


# --- sessions ---------------------------------------------------------------------------------


@pytest.mark.trio
async def test_session_rows_and_their_children_in_order(store: Store) -> None:
    root, first, second, grandchild = (new_id() for _ in range(4))
    turn = new_id()
    async with opened(store):
        write_all(
            store,
            [
                SessionRow(root, "root", idempotency_key="k-root", inputs={"repo": {"name": "x"}}),
                TurnRow(root, turn, 1),
                SessionRow(first, "sub", parent_id=root, parent_turn_id=turn),
                SessionRow(second, "sub", parent_id=root, parent_turn_id=turn),
                SessionRow(grandchild, "leaf", parent_id=second, parent_turn_id="t2"),
            ],
        )
        await store.flush()

        stored = await load(store, root)
        assert stored.row == SessionRow(
            root, "root", idempotency_key="k-root", inputs={"repo": {"name": "x"}}
        )
        assert list(stored.children) == [first, second]  # in the order they were written
        assert stored.first_seq == 1
        assert await events_of(store, stored) == []
        assert list(stored.entries) == []
        assert list(stored.callbacks) == []
        assert list(stored.keys) == []
        assert stored.steps == {}

        sub = await load(store, second)
        assert sub.row == SessionRow(second, "sub", parent_id=root, parent_turn_id=turn)
        assert list(sub.children) == [grandchild]
        assert list((await load(store, first)).children) == []
        assert (await load(store, grandchild)).row.parent_id == second

        # A later row of the same session (it was cancelled) updates it.
        store.write(
            SessionRow(
                root,
                "root",
                idempotency_key="k-root",
                inputs={"repo": {"name": "x"}},
                terminated=True,
            )
        )
        await store.flush()
        again = await load(store, root)
        assert again.row.terminated is True
        assert again.row.inputs == {"repo": {"name": "x"}}
        assert list(again.children) == [first, second]


@pytest.mark.trio
async def test_a_sessions_later_row_changes_only_terminated_and_none_reads_back_a_lease(
    store: Store,
) -> None:
    session = new_id()
    async with opened(store):
        store.write(SessionRow(session, "agent", inputs={"n": 1}, lease=("A", 30)))
        await store.flush()
        assert (await load(store, session)).row == SessionRow(session, "agent", inputs={"n": 1})
        store.write(SessionRow(session, "other", inputs={"n": 2}, terminated=True))
        await store.flush()
        assert (await load(store, session)).row == SessionRow(
            session, "agent", inputs={"n": 1}, terminated=True
        )


@pytest.mark.trio
async def test_session_for_key_finds_the_session_its_key_started(store: Store) -> None:
    one, two = new_id(), new_id()
    async with opened(store):
        store.write(SessionRow(one, "a", idempotency_key="key-1"))
        store.write(SessionRow(two, "a", idempotency_key="key-2"))
        store.write(SessionRow(new_id(), "a"))
        await store.flush()
        assert await store.session_for_key("key-1") == one
        assert await store.session_for_key("key-2") == two
        assert await store.session_for_key("key-3") is None


# --- events -----------------------------------------------------------------------------------


@pytest.mark.trio
async def test_events_come_back_as_written_whatever_their_fields(store: Store) -> None:
    """Events come back equal, also those a store may lay out apart: an id that is not the
    cursor, an event of another turn than its entry's (or of none), one entry carried by
    several events, an event type of a later version."""
    session = new_id()
    turn = new_id()
    entry = user_message(turn, "hello")
    later = UnknownEvent(
        id=cursor(session, 6),
        session_id=session,
        turn_id=turn,
        event_type="turn_paused",
        raw={"reason": "later version", "nested": {"n": 1}},
    )
    events: list[Event] = [
        TurnStarted(id=cursor(session, 1), session_id=session, turn_id=turn, message=entry),
        EntryAdded(id="not-a-cursor", session_id=session, turn_id=turn, entry=entry),
        EntryCompleted(id=cursor(session, 3), session_id=session, turn_id="other", entry=entry),
        EntryCompleted(id=cursor(session, 4), session_id=session, turn_id=None, entry=entry),
        EntryAdded(
            id=cursor(session, 5),
            session_id=session,
            turn_id=turn,
            entry=MessageEntry(id=new_id(), role="user", content=text("imported")),
        ),
        later,
    ]
    async with opened(store):
        store.write(SessionRow(session, "agent"))
        write_all(store, event_rows(session, events))
        await store.flush()
        stored = await load(store, session)
        assert await events_of(store, stored) == events
        assert await store.read_events(session, 1, 3) == events[1:4]


@pytest.mark.trio
async def test_events_come_back_in_order(store: Store) -> None:
    session = new_id()
    turn_1, turn_2 = new_id(), new_id()
    events = events_of_a_turn(session, turn_1) + events_of_a_turn(session, turn_2, first_seq=8)
    async with opened(store):
        store.write(SessionRow(session, "agent"))
        store.write(TurnRow(session, turn_1, 1))
        write_all(store, event_rows(session, events[:7]))
        await store.flush()
        # A second group, written after the first was committed.
        store.write(TurnRow(session, turn_2, 8))
        write_all(store, event_rows(session, events[7:], first_seq=8))
        await store.flush()

        stored = await load(store, session)
        assert await events_of(store, stored) == events
        assert [event.id for event in events] == [cursor(session, n) for n in range(1, 15)]
        assert (stored.first_seq, stored.last_seq) == (1, 14)

        assert await store.read_events(session, 0, 100) == events
        assert await store.read_events(session, 0, 3) == events[:3]
        assert await store.read_events(session, 3, 4) == events[3:7]
        assert await store.read_events(session, 12, 100) == events[12:]
        assert await store.read_events(session, 14, 100) == []
        assert await store.read_events(session, 99, 100) == []


@pytest.mark.trio
async def test_events_of_sessions_stay_apart(store: Store) -> None:
    one, two = new_id(), new_id()
    turn = new_id()
    async with opened(store):
        store.write(SessionRow(one, "agent"))
        store.write(SessionRow(two, "agent"))
        mine = events_of_a_turn(one, turn)
        theirs = events_of_a_turn(two, turn)
        for seq, (a, b) in enumerate(zip(mine, theirs, strict=True), start=1):  # interleaved writes
            store.write(EventRow(one, seq, a))
            store.write(EventRow(two, seq, b))
        await store.flush()
        assert await store.read_events(one, 0, 100) == mine
        assert await store.read_events(two, 0, 100) == theirs
        assert await events_of(store, await load(store, two)) == theirs


# --- entries, turns, steps --------------------------------------------------------------------


@pytest.mark.trio
async def test_entries_come_back_in_order(store: Store) -> None:
    session, turn = new_id(), new_id()
    call = ToolCallEntry(
        id=new_id(),
        turn_id=turn,
        name="lookup",
        arguments={"term": "trio", "depth": [1, 2]},
        tool_call_id="abc123XYZ",
    )
    entries: list[Entry] = [
        MessageEntry(id=new_id(), turn_id=None, role="system", content=text("imported")),
        user_message(turn, "look trio up"),
        call,
        ToolResultEntry(
            id=new_id(),
            turn_id=turn,
            name="lookup",
            content=text("about trio"),
            tool_call_id="abc123XYZ",
        ),
        MessageEntry(id=new_id(), turn_id=turn, role="assistant", content=text("done")),
    ]
    async with opened(store):
        store.write(SessionRow(session, "agent"))
        store.write(TurnRow(session, turn, 1))  # a runtime writes a turn before its entries
        for index, entry in enumerate(entries):
            store.write(EntryRow(session, index, entry))
        await store.flush()
        assert list((await load(store, session)).entries) == entries


@pytest.mark.trio
async def test_a_turn_gets_its_record_later(store: Store) -> None:
    session = new_id()
    first, second = new_id(), new_id()
    record = Completed(
        turn_id=first, session_id=session, cursor=cursor(session, 7), output="hi", text="hi"
    )
    async with opened(store):
        store.write(SessionRow(session, "agent"))
        store.write(TurnRow(session, first, 1, output_type="builtins.str"))
        await store.flush()
        (row,) = (await load(store, session)).turns
        assert row == TurnRow(session, first, 1, output_type="builtins.str", record=None)

        # The end record comes in a second row of the same turn.
        store.write(TurnRow(session, first, 1, output_type="builtins.str", record=record))
        store.write(TurnRow(session, second, 8))
        await store.flush()
        turns = list((await load(store, session)).turns)
        assert turns == [
            TurnRow(session, first, 1, output_type="builtins.str", record=record),
            TurnRow(session, second, 8),
        ]

        # The end record's row names no output type (the runtime's does not): the first
        # row's stays, as does where the turn's events start.
        interrupted = Interrupted(
            turn_id=second, session_id=session, cursor=cursor(session, 9), cause="cancelled"
        )
        store.write(TurnRow(session, first, 1, record=interrupted))
        store.write(TurnRow(session, second, 99, output_type="builtins.int", record=interrupted))
        await store.flush()
        assert list((await load(store, session)).turns) == [
            TurnRow(session, first, 1, output_type="builtins.str", record=interrupted),
            TurnRow(session, second, 8, record=interrupted),
        ]


@pytest.mark.trio
async def test_steps_are_set_and_cleared(store: Store) -> None:
    session = new_id()
    first, second = new_id(), new_id()
    step = {"signed_in": False, "calls": [{"state": "waiting", "callback": "c", "n": [1, 2.5]}]}
    async with opened(store):
        store.write(SessionRow(session, "agent"))
        store.write(TurnRow(session, first, 1))
        store.write(TurnRow(session, second, 5))
        store.write(StepRow(session, first, step))
        await store.flush()
        assert (await load(store, session)).steps == {first: step}

        later = {"signed_in": True, "calls": [{"state": "done", "callback": None}]}
        store.write(StepRow(session, first, later))  # a later state of the step replaces it
        store.write(StepRow(session, second, step))
        await store.flush()
        assert (await load(store, session)).steps == {first: later, second: step}

        store.write(StepRow(session, first, None))  # the step is over
        await store.flush()
        assert (await load(store, session)).steps == {second: step}
        store.write(StepRow(session, second, None))
        await store.flush()
        assert (await load(store, session)).steps == {}


@pytest.mark.trio
async def test_steered_messages_are_kept_by_turn(store: Store) -> None:
    session = new_id()
    first, second = new_id(), new_id()
    one, two, three = (
        user_message(first, "one"),
        user_message(first, "two"),
        user_message(second, "three"),
    )
    async with opened(store):
        store.write(SessionRow(session, "agent"))
        store.write(TurnRow(session, first, 1))
        store.write(SteerRow(session, first, one))
        await store.flush()
        steers = (await load(store, session)).steers
        assert {turn: list(messages) for turn, messages in steers.items()} == {first: [one]}

        store.write(TurnRow(session, second, 9))
        store.write(SteerRow(session, second, three))
        store.write(SteerRow(session, first, two))
        await store.flush()
        steers = (await load(store, session)).steers
        assert {turn: list(messages) for turn, messages in steers.items()} == {
            first: [one, two],  # in the order they were steered
            second: [three],
        }


# --- callbacks --------------------------------------------------------------------------------


@pytest.mark.trio
async def test_callbacks_open_then_settled(store: Store) -> None:
    session, turn = new_id(), new_id()
    once = approval_callback(session, turn, "/a")
    for_session = approval_callback(session, turn, "/b")
    denied = approval_callback(session, turn, "/c")
    client = OpenClientToolCall(
        id=str(uuid.uuid4()),
        session_id=session,
        turn_id=turn,
        tool_name="client.pick",
        arguments={"prompt": "which?"},
    )
    sources: Any = ("notion", "github")  # converted to a tuple: a type checker reads neither
    sign_in = OpenSignIn(id=str(uuid.uuid4()), session_id=session, turn_id=turn, sources=sources)
    stopped = approval_callback(session, turn, "/d")
    opened_rows = [CallbackRow(session, c) for c in (once, for_session, denied, client, sign_in)]
    async with opened(store):
        store.write(SessionRow(session, "agent"))
        store.write(TurnRow(session, turn, 1))
        write_all(store, opened_rows)
        await store.flush()
        assert list((await load(store, session)).callbacks) == opened_rows

        settled = [
            CallbackRow(session, once, "answered", AllowApproval()),
            CallbackRow(session, for_session, "answered", AllowApproval(scope="session")),
            CallbackRow(session, denied, "answered", DenyApproval(reason="no")),
            CallbackRow(session, client, "answered", 3),
            CallbackRow(session, sign_in, "answered", None),  # credentials are never stored
        ]
        write_all(store, settled)
        store.write(CallbackRow(session, stopped))
        store.write(CallbackRow(session, stopped, "closed"))
        await store.flush()
        callbacks = list((await load(store, session)).callbacks)
        # One row per callback, in the order they were opened; a settled one loads equal.
        assert callbacks == [*settled, CallbackRow(session, stopped, "closed")]
        assert type(callbacks[0].answer) is AllowApproval
        assert type(callbacks[2].answer) is DenyApproval


# --- idempotency keys -------------------------------------------------------------------------


@pytest.mark.trio
async def test_key_rows(store: Store) -> None:
    session, other = new_id(), new_id()
    turn_1, turn_2 = new_id(), new_id()
    async with opened(store):
        store.write(SessionRow(session, "agent"))
        store.write(SessionRow(other, "agent"))
        store.write(TurnRow(session, turn_1, 1))
        store.write(KeyRow(session, "t1", turn_1, "f" * 64))
        store.write(TurnRow(session, turn_2, 5))
        store.write(KeyRow(session, "t2", turn_2, "0" * 64))
        store.write(TurnRow(other, "x", 1))
        store.write(KeyRow(other, "t1", "x", "1" * 64))  # keys are per session
        await store.flush()
        keys = sorted((await load(store, session)).keys, key=lambda row: row.key)
        assert keys == [
            KeyRow(session, "t1", turn_1, "f" * 64),
            KeyRow(session, "t2", turn_2, "0" * 64),
        ]
        assert list((await load(store, other)).keys) == [KeyRow(other, "t1", "x", "1" * 64)]
        # A turn's key is not a session's key.
        assert await store.session_for_key("t1") is None


# --- pruning ----------------------------------------------------------------------------------


@pytest.mark.trio
async def test_prune_forgets_old_events(store: Store) -> None:
    session, turn = new_id(), new_id()
    events = events_of_a_turn(session, turn)  # seq 1..7
    async with opened(store):
        store.write(SessionRow(session, "agent"))
        store.write(TurnRow(session, turn, 1))
        write_all(store, event_rows(session, events))
        store.write(PruneRow(session, 4))
        await store.flush()
        stored = await load(store, session)
        assert stored.first_seq == 4
        assert await events_of(store, stored) == events[3:]
        assert await store.read_events(session, 0, 100) == events[3:]
        assert await store.read_events(session, 4, 2) == events[4:6]

        # Pruning less than is gone already changes nothing; pruning more moves on.
        store.write(PruneRow(session, 2))
        await store.flush()
        assert (await load(store, session)).first_seq == 4
        store.write(PruneRow(session, 7))
        await store.flush()
        stored = await load(store, session)
        assert stored.first_seq == 7
        assert await events_of(store, stored) == events[6:]

        # Later events are kept, numbered on.
        more = events_of_a_turn(session, new_id(), first_seq=8)
        write_all(store, event_rows(session, more, first_seq=8))
        await store.flush()
        stored = await load(store, session)
        assert stored.first_seq == 7
        assert await events_of(store, stored) == [events[6], *more]
        assert await store.read_events(session, 7, 100) == more


@pytest.mark.trio
async def test_pruning_past_the_last_event_keeps_the_numbering(store: Store) -> None:
    session = new_id()
    events = events_of_a_turn(session, new_id())
    async with opened(store):
        store.write(SessionRow(session, "agent"))
        write_all(store, event_rows(session, events[:3]))
        store.write(PruneRow(session, 10))
        await store.flush()
        stored = await load(store, session)
        assert (stored.first_seq, stored.last_seq) == (4, 3)
        assert await events_of(store, stored) == []
        write_all(store, event_rows(session, events[3:], first_seq=4))
        await store.flush()
        stored = await load(store, session)
        assert (stored.first_seq, stored.last_seq) == (4, 7)
        assert await events_of(store, stored) == events[3:]


# --- leases -----------------------------------------------------------------------------------


@pytest.mark.trio
async def test_leases(store: Store, clock: ManualClock) -> None:
    one, two = new_id(), new_id()
    async with opened(store):
        store.write(SessionRow(one, "agent"))
        store.write(SessionRow(two, "agent"))
        await store.flush()

        await store.acquire([one], "A", 30)
        await store.acquire([one], "A", 30)  # the owner renews
        refusal = await acquire_refused(store, [one], "B")
        assert refusal.session_id == one
        assert refusal.owner == "A"
        assert refusal.until == pytest.approx(clock.now + 30)

        # A refused acquire takes none of the sessions it names.
        await acquire_refused(store, [two, one], "B")
        await store.acquire([two], "A", 30)

        clock.now += 29.5  # not expired yet
        await acquire_refused(store, [one], "B")
        await store.acquire([one], "A", 30)  # renewed: now until now + 30
        clock.now += 29.5
        await acquire_refused(store, [one], "B")

        clock.now += 1  # past the expiry: the owner is taken for dead
        await store.acquire([one], "B", 10)
        assert (await acquire_refused(store, [one], "A")).owner == "B"

        # Release lets the other one in at once; releasing another's lease does nothing.
        await store.release([one], "A")
        await acquire_refused(store, [one], "A")
        await store.release([one], "B")
        await store.acquire([one], "A", 30)
        await store.release([one, two], "A")
        await store.acquire([one, two], "B", 30)


@pytest.mark.trio
async def test_renewing_leases(store: Store, clock: ManualClock) -> None:
    """A renewal extends the owner's leases at once, and names the sessions the owner no
    longer holds: taken over by another owner (theirs now), or let go since."""
    one, two, unleased = new_id(), new_id(), new_id()
    async with opened(store):
        for session in (one, two, unleased):
            store.write(SessionRow(session, "agent"))
        await store.flush()
        await store.acquire([one, two], "A", 30)

        clock.now += 20
        assert await store.renew([one, two, unleased, "never-written"], "A", 30) == [unleased]
        clock.now += 29  # 49 s after the first lease: renewed, so held
        await acquire_refused(store, [one], "B")

        clock.now += 2  # past the renewed lease: A stalled
        await store.acquire([two], "B", 30)
        assert await store.renew([one, two], "A", 30) == [two]
        assert (await acquire_refused(store, [two], "A")).owner == "B"
        await store.release([two], "B")
        assert await store.renew([one, two], "A", 30) == [two]  # let go, still not A's
        await store.acquire([one], "A", 30)  # still A's


@pytest.mark.trio
async def test_a_session_is_leased_as_its_row_is_written(store: Store, clock: ManualClock) -> None:
    session = new_id()
    async with opened(store):
        store.write(SessionRow(session, "agent", lease=("A", 30)))
        store.write(SessionRow(session, "agent", terminated=True))  # leaves the lease be
        await store.flush()
        assert (await acquire_refused(store, [session], "B")).until == pytest.approx(clock.now + 30)
        assert await store.renew([session], "A", 30) == []
        clock.now += 31
        await store.acquire([session], "B", 30)


# --- order ------------------------------------------------------------------------------------


@pytest.mark.trio
async def test_writes_apply_in_the_order_they_were_made(store: Store) -> None:
    """Writes made one after the other, with no flush between them (as the runtime makes
    a turn's): each applies over the ones before it."""
    session, turn = new_id(), new_id()
    events = events_of_a_turn(session, turn)
    callback = approval_callback(session, turn)
    record = Completed(
        turn_id=turn, session_id=session, cursor=cursor(session, 7), output="hi", text="hi"
    )
    async with opened(store):
        write_all(
            store,
            [
                SessionRow(session, "agent"),
                TurnRow(session, turn, 1, output_type="builtins.str"),
                StepRow(session, turn, {"n": 1}),
                *event_rows(session, events),
                CallbackRow(session, callback),
                StepRow(session, turn, None),
                PruneRow(session, 4),
                CallbackRow(session, callback, "answered", AllowApproval()),
                StepRow(session, turn, {"n": 2}),
                TurnRow(session, turn, 1, record=record),
                SessionRow(session, "agent", terminated=True),
            ],
        )
        await store.flush()
        stored = await load(store, session)
        assert stored.row.terminated
        assert list(stored.turns) == [TurnRow(session, turn, 1, "builtins.str", record)]
        assert stored.steps == {turn: {"n": 2}}
        assert list(stored.callbacks) == [
            CallbackRow(session, callback, "answered", AllowApproval())
        ]
        assert (stored.first_seq, stored.last_seq) == (4, 7)
        assert await events_of(store, stored) == events[3:]


# --- commits ----------------------------------------------------------------------------------


@pytest.mark.trio
async def test_committed_sees_every_op_once_in_order(store: Store) -> None:
    seen = recording(store)
    session, child, turn = new_id(), new_id(), new_id()
    callback = approval_callback(session, turn)
    events = events_of_a_turn(session, turn)
    ended = events[-1]
    assert isinstance(ended, TurnEnded)
    first_group: list[Op] = [
        SessionRow(session, "agent", idempotency_key="k"),
        TurnRow(session, turn, 1),
        KeyRow(session, "t", turn, "f" * 64),
        *event_rows(session, events[:3]),
        EntryRow(session, 0, user_message(turn, "hello")),
        CallbackRow(session, callback),
        StepRow(session, turn, {"calls": []}),
        SteerRow(session, turn, user_message(turn, "and also")),
        SessionRow(child, "sub", parent_id=session, parent_turn_id=turn),
    ]
    second_group: list[Op] = [
        CallbackRow(session, callback, "answered", AllowApproval()),
        StepRow(session, turn, None),
        *event_rows(session, events[3:], first_seq=4),
        TurnRow(session, turn, 1, record=ended.record),
        PruneRow(session, 3),
    ]
    async with opened(store):
        write_all(store, first_group)
        await store.flush()
        assert seen == first_group
        write_all(store, second_group)
        await store.flush()
        assert seen == first_group + second_group
        # Each op is the very object written, not a copy.
        assert all(a is b for a, b in zip(seen, first_group + second_group, strict=True))
        await store.flush()  # nothing new: nothing reported again
        assert len(seen) == len(first_group) + len(second_group)
    assert len(seen) == len(first_group) + len(second_group)


@pytest.mark.trio
async def test_aclose_commits_what_was_written(store: Store) -> None:
    seen = recording(store)
    session, turn = new_id(), new_id()
    events = events_of_a_turn(session, turn)
    ops: list[Op] = [
        SessionRow(session, "agent"),
        *event_rows(session, events),
    ]
    async with opened(store):
        write_all(store, ops)  # no flush: closing commits them
    assert seen == ops
    async with opened(store):
        assert await events_of(store, await load(store, session)) == events


@pytest.mark.trio
async def test_listeners_hear_in_the_runtimes_thread_until_they_stop(store: Store) -> None:
    threads: list[int] = []
    heard: list[Sequence[Op]] = []

    def listener(ops: Sequence[Op]) -> None:
        threads.append(threading.get_ident())
        heard.append(ops)

    session = new_id()
    async with opened(store):
        stop = store.listen(listener)
        store.write(SessionRow(session, "agent"))
        await store.flush()
        assert [op for ops in heard for op in ops] == [SessionRow(session, "agent")]
        assert set(threads) == {threading.get_ident()}
        stop()
        store.write(SessionRow(session, "agent", terminated=True))
        await store.flush()
        assert len([op for ops in heard for op in ops]) == 1


@pytest.mark.trio
async def test_a_store_object_opens_again_after_aclose(store: Store) -> None:
    """One store object, opened for a runtime, closed, and opened for the next one: its
    writes of the second opening are committed too."""
    async with opened(store):
        store.write(SessionRow("first", "agent"))
    async with trio.open_nursery() as nursery:
        await store.open(nursery.start_soon)
        committed = True
        for n in range(3):
            store.write(SessionRow(f"again-{n}", "agent"))
            with trio.move_on_after(30) as waited:  # only a flush that waits forever takes this
                await store.flush()
            if waited.cancelled_caught:
                committed = False
                break
        if not committed:
            # aclose() may wait for the same commit: leave the store as it is.
            nursery.cancel_scope.cancel()
        else:
            assert (await load(store, "first")).row.agent == "agent"
            for n in range(3):
                assert (await load(store, f"again-{n}")).row.session_id == f"again-{n}"
            await store.aclose()
    assert committed, "the second opening's writes were never committed (flush waits forever)"


# --- several store objects on one database ----------------------------------------------------


@pytest.mark.trio
async def test_what_a_flush_made_durable_another_store_object_reads(
    store: Store, other_store: Store
) -> None:
    session, turn = new_id(), new_id()
    events = events_of_a_turn(session, turn)
    async with opened(store), opened(other_store):
        store.write(SessionRow(session, "agent", idempotency_key="k"))
        store.write(TurnRow(session, turn, 1))
        write_all(store, event_rows(session, events))
        await store.flush()
        assert await other_store.session_for_key("k") == session
        assert await other_store.load(session) == await store.load(session)
        assert await other_store.read_events(session, 2, 3) == events[2:5]


@pytest.mark.trio
async def test_a_store_object_opened_later_reads_the_same(store: Store, other_store: Store) -> None:
    root, child, turn = new_id(), new_id(), new_id()
    callback = approval_callback(root, turn)
    events = events_of_a_turn(root, turn)
    ops: list[Op] = [
        SessionRow(root, "root", idempotency_key="k", inputs={"repo": {"name": "x"}}),
        TurnRow(root, turn, 1, output_type="builtins.str"),
        KeyRow(root, "t", turn, "f" * 64),
        *event_rows(root, events),
        EntryRow(root, 0, user_message(turn, "hello")),
        CallbackRow(root, callback),
        CallbackRow(root, callback, "answered", AllowApproval(scope="session")),
        StepRow(root, turn, {"signed_in": True, "calls": []}),
        SteerRow(root, turn, user_message(turn, "and also")),
        SessionRow(child, "sub", parent_id=root, parent_turn_id=turn),
        PruneRow(root, 2),
    ]
    async with opened(store):
        write_all(store, ops)
        await store.flush()
        before = (await load(store, root), await load(store, child))
    async with opened(other_store):
        after = (await load(other_store, root), await load(other_store, child))
        assert after == before
        assert await other_store.session_for_key("k") == root
        assert await other_store.read_events(root, 0, 100) == events[1:]
        # It goes on where the first left off.
        other_store.write(EventRow(root, 8, events_of_a_turn(root, turn, first_seq=8)[0]))
        await other_store.flush()
        assert [event.id for event in await other_store.read_events(root, 6, 100)] == [
            cursor(root, 7),
            cursor(root, 8),
        ]


@pytest.mark.trio
async def test_leases_hold_across_store_objects(
    store: Store, other_store: Store, clock: ManualClock
) -> None:
    session = new_id()
    mine, theirs = store, other_store
    async with opened(mine), opened(theirs):
        mine.write(SessionRow(session, "agent"))
        await mine.flush()
        await mine.acquire([session], "A", 30)
        refusal = await acquire_refused(theirs, [session], "B")
        assert refusal.owner == "A"
        assert refusal.until == pytest.approx(clock.now + 30)
        clock.now += 31
        await theirs.acquire([session], "B", 30)
        await acquire_refused(mine, [session], "A")
        assert await mine.renew([session], "A", 30) == [session]
        await theirs.release([session], "B")
        await mine.acquire([session], "A", 30)


# --- fencing ----------------------------------------------------------------------------------


@pytest.mark.trio
async def test_a_write_to_a_session_taken_over_is_refused_and_the_others_go_on(
    store: Store, other_store: Store, clock: ManualClock
) -> None:
    """A runtime that stalled past its lease may write before its next renewal finds the
    session taken over: its store refuses the writes to that session (recorded, for
    ``taken_over``), and to it only: the rest of the group, and later writes to its other
    sessions, are committed; the new owner's writes are untouched."""
    session, kept, later = new_id(), new_id(), new_id()
    events = events_of_a_turn(session, new_id())
    kept_events = events_of_a_turn(kept, new_id())
    mine, theirs = store, other_store
    groups: list[Sequence[Op]] = []
    mine.listen(groups.append)
    async with opened(mine), opened(theirs):
        mine.write(SessionRow(session, "agent"))
        mine.write(SessionRow(kept, "agent"))
        mine.write(EventRow(session, 1, events[0]))
        await mine.flush()
        await mine.acquire([session, kept], "A", 30)
        mine.write(EventRow(session, 2, events[1]))
        await mine.flush()  # A holds the lease: written
        mine.check()
        assert mine.taken_over() == []

        clock.now += 31  # A stalled: it renewed one lease only
        assert await mine.renew([kept], "A", 30) == []
        await theirs.acquire([session], "B", 30)
        groups.clear()
        refused = EventRow(session, 3, events[2])
        made = SessionRow(later, "agent")  # after the refused write
        mine.write(refused)
        mine.write(made)
        await mine.flush()
        (lost,) = mine.taken_over()
        assert isinstance(lost, LeaseLost)
        assert isinstance(lost, StoreError)
        assert (lost.session_id, lost.owner) == (session, "B")
        assert mine.taken_over() == []  # told once
        assert refused not in [op for ops in groups for op in ops]
        assert made in [op for ops in groups for op in ops]
        mine.check()
        assert mine.failure is None

        mine.write(EventRow(session, 3, events[3]))  # refused again
        mine.write(EventRow(kept, 1, kept_events[0]))
        await mine.flush()
        assert [error.session_id for error in mine.taken_over()] == [session]
        assert (await theirs.load(later)) is not None
        assert await theirs.read_events(kept, 0, 10) == kept_events[:1]
        await acquire_refused(theirs, [kept], "B")  # still A's

        theirs.write(EventRow(session, 3, events[3]))
        await theirs.flush()
        stored = await load(theirs, session)
        assert await events_of(theirs, stored) == [*events[:2], events[3]]


@pytest.mark.trio
async def test_a_session_taken_over_is_written_again_once_leased_again(
    store: Store, other_store: Store, clock: ManualClock
) -> None:
    session = new_id()
    events = events_of_a_turn(session, new_id())
    mine, theirs = store, other_store
    async with opened(mine), opened(theirs):
        mine.write(SessionRow(session, "agent", lease=("A", 30)))
        await mine.flush()
        clock.now += 31
        await theirs.acquire([session], "B", 30)
        mine.write(EventRow(session, 1, events[0]))
        await mine.flush()
        assert [error.session_id for error in mine.taken_over()] == [session]
        await theirs.release([session], "B")
        await mine.acquire([session], "A", 30)
        mine.write(EventRow(session, 1, events[0]))
        await mine.flush()
        assert mine.taken_over() == []
        assert await events_of(theirs, await load(theirs, session)) == events[:1]


@pytest.mark.parametrize("let_go", [False, True])
@pytest.mark.trio
async def test_a_session_leased_as_it_was_made_is_fenced(
    store: Store, other_store: Store, clock: ManualClock, let_go: bool
) -> None:
    """A session leased by its own row (a new session, a subagent's) is fenced like one
    acquired; so is one the new owner has let go of since."""
    session = new_id()
    events = events_of_a_turn(session, new_id())
    mine, theirs = store, other_store
    async with opened(mine), opened(theirs):
        mine.write(SessionRow(session, "agent", lease=("A", 30)))
        mine.write(EventRow(session, 1, events[0]))
        await mine.flush()
        clock.now += 31
        await theirs.acquire([session], "B", 30)
        if let_go:
            await theirs.release([session], "B")
        mine.write(EventRow(session, 2, events[1]))
        await mine.flush()
        (refused,) = mine.taken_over()
        assert refused.owner == (None if let_go else "B")
        assert await events_of(theirs, await load(theirs, session)) == events[:1]


# --- failures ---------------------------------------------------------------------------------


@pytest.mark.trio
async def test_a_store_that_commits_is_durable_and_checks_out(store: Store) -> None:
    async with opened(store):
        assert store.durable
        store.write(SessionRow(new_id(), "agent"))
        await store.flush()
        assert store.failure is None
        store.check()


@pytest.mark.trio
async def test_damaged_is_a_store_error_naming_the_session_and_the_table(store: Store) -> None:
    session = new_id()
    async with opened(store):
        error = store.damaged(session, "turns", "turn t-1, which delegated, is missing")
    assert isinstance(error, StoreError)
    assert session in str(error)
    assert "turns" in str(error)


#: Text no database need keep: lone surrogates (which no UTF-8 encodes), and NUL (which a
#: PostgreSQL text column refuses).
UNKEEPABLE = ("\ud800", "b\udfffc", "nul\x00")


@pytest.mark.trio
@pytest.mark.parametrize("bad", UNKEEPABLE, ids=["surrogate", "low-surrogate", "nul"])
async def test_a_session_whose_rows_cannot_be_kept_is_refused_and_the_others_are_written(
    store: Store, bad: str
) -> None:
    """A store may keep any text; one that cannot keep a write's refuses that session's
    writes, then and after: the flush that waited for them raises a StoreError naming the
    session (never the text); the other sessions' writes of the same commit are written,
    and the store goes on committing."""
    seen = recording(store)
    refused, keyed, first, last = new_id(), new_id(), new_id(), new_id()
    turn = new_id()
    kept_message, first_message = user_message(turn, "kept"), user_message(turn, "first")
    acknowledged: list[Op] = [
        SessionRow(refused, "agent"),
        TurnRow(refused, turn, 1),
        EntryRow(refused, 0, kept_message),
    ]
    bad_message = unchecked_message(turn, bad)
    events = events_of_a_turn(first, turn)
    group: list[Op] = [
        SessionRow(first, "agent"),
        TurnRow(first, turn, 1),
        EntryRow(refused, 1, bad_message),
        EntryRow(first, 0, first_message),
        SessionRow(keyed, "agent", idempotency_key=f"key-{bad}"),
        SessionRow(last, "agent", inputs={"name": "last"}),
        *event_rows(first, events),
    ]
    async with opened(store):
        write_all(store, acknowledged)
        await store.flush()
        write_all(store, group)
        raised: StoreError | None = None
        try:
            await store.flush()
        except StoreError as error:
            raised = error
        store.check()  # the store has not failed
        # The other sessions of the commit are whole.
        assert list((await load(store, first)).entries) == [first_message]
        assert await events_of(store, await load(store, first)) == events
        assert (await load(store, last)).row.inputs == {"name": "last"}
        # Nothing acknowledged is lost; a session is written whole, or up to the refusal.
        entries = list((await load(store, refused)).entries)
        kept_entry = len(entries) == 2
        assert entries == [kept_message, bad_message][: len(entries)]
        kept_key = await store.load(keyed) is not None
        assert (raised is None) == (kept_entry and kept_key)
        if raised is not None:
            unkept = [s for s, kept in ((refused, kept_entry), (keyed, kept_key)) if not kept]
            assert any(s in str(raised) for s in unkept), "it names no session it refused"
            assert bad not in str(raised), "it quotes the text"
            assert "key-" not in str(raised), "it quotes the key"
        later, after = new_id(), SessionRow(refused, "agent", terminated=True)
        store.write(after)
        store.write(SessionRow(later, "agent"))
        if kept_entry:
            await store.flush()
        else:
            # Its rows would no longer follow one another: nothing more of it is written.
            with pytest.raises(StoreError, match=refused):
                await store.flush()
        assert (await load(store, refused)).row.terminated == kept_entry
        assert await store.load(later) is not None
        assert (after in seen, group[2] in seen) == (kept_entry, kept_entry)
        assert [op for op in seen if op.session_id == first] == [
            op for op in group if op.session_id == first
        ]


#: Ids a client may send that no session has: with NUL, with a lone surrogate, huge.
ODD_IDS = ("a\x00b", "\ud800", "\udcff\x00", "x" * 100_000)


@pytest.mark.trio
@pytest.mark.parametrize("odd", ODD_IDS, ids=["nul", "surrogate", "both", "huge"])
async def test_an_id_the_store_cannot_hold_reads_as_nothing(store: Store, odd: str) -> None:
    """Whatever a client puts in an id or a key, a session the store does not have reads as
    not found, never as a failure: the store is not failed for it, and renewing or letting go
    of it skips it."""
    kept = new_id()
    async with opened(store):
        store.write(SessionRow(kept, "agent"))
        await store.flush()
        assert await store.load(odd) is None
        assert await store.session_for_key(odd) is None
        assert await store.read_events(odd, 0, 100) == []
        if store.shared:
            assert await store.wait_for_events(odd, 0) is None
        assert await store.renew([odd], "owner", 30.0) == []
        await store.release([odd], "owner")
        store.check()
        assert await store.load(kept) is not None
