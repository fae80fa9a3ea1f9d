"""The shared store contract's test suite: what :mod:`agentlib.testing.shared_store_contract`
exports.

A shared store (``shared = True``) is one database that runtimes in several processes use,
each through a store object of its own. Each test drives two such objects, ``store`` and
``other_store``, as two runtimes would: one commits, the other follows its events; one
claims a callback the other holds open; one sends a request to the runtime that holds a
session, the other serves it. Waits that find nothing return after a while of the store's
choosing (its poll); every wait here is bounded, to catch a hang.
"""

from __future__ import annotations

import pytest
import trio

from .._data._callbacks import AllowApproval, DenyApproval
from .._data._events import TurnStarted
from .._store._base import CallbackRow, EventRow, KeyRow, Request, SessionRow, Store, TurnRow
from ._store_contract import (
    ManualClock,
    approval_callback,
    clock,
    load,
    new_id,
    opened,
    user_message,
)

__all__ = [
    "ManualClock",
    "clock",
    "test_a_claim_settles_an_open_callback_once_and_its_holder_hears_of_it",
    "test_a_request_is_served_by_the_holder_and_its_reply_read_once",
    "test_a_withdrawn_request_is_never_served_and_a_replied_one_cannot_be_withdrawn",
    "test_another_store_object_hears_of_a_commit_and_of_the_end",
]

#: The longest any wait of these tests may take (real seconds): only a hang reaches it.
WAIT = 30.0


def made(store: Store, session_id: str) -> None:
    """Write a new session's row, leased to ``"holder"``."""
    store.write(SessionRow(session_id, "agent", lease=("holder", 30)))


def started(session_id: str, seq: int, turn_id: str | None = None) -> EventRow:
    """The row of a turn's ``TurnStarted``, event ``seq`` of the session."""
    turn_id = turn_id or new_id()
    event = TurnStarted(
        id=f"{session_id}:{seq:012d}",
        session_id=session_id,
        turn_id=turn_id,
        message=user_message(turn_id, "hello"),
    )
    return EventRow(session_id, seq, event)


@pytest.mark.trio
async def test_another_store_object_hears_of_a_commit_and_of_the_end(
    store: Store, other_store: Store
) -> None:
    assert store.shared, "the store is not shared: this suite is for shared stores"
    assert other_store.shared
    session_id = new_id()
    async with opened(store), opened(other_store):
        with trio.fail_after(WAIT):
            assert await other_store.wait_for_events("no such session", 0) is None
            made(store, session_id)
            await store.flush()
            heard = []

            async def follow() -> None:
                progress = await other_store.wait_for_events(session_id, 0)
                while progress is not None and progress.last_seq < 1:
                    progress = await other_store.wait_for_events(session_id, 0)
                heard.append(progress)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                await trio.sleep(0)
                store.write(started(session_id, 1))
                await store.flush()
            (progress,) = heard
            assert progress is not None
            assert (progress.first_seq, progress.last_seq) == (1, 1)
            assert not progress.terminated
            assert not progress.subagent
            store.write(SessionRow(session_id, "agent", terminated=True))
            await store.flush()
            ended = await other_store.wait_for_events(session_id, 1)
            while ended is not None and not ended.terminated:
                ended = await other_store.wait_for_events(session_id, 1)
            assert ended is not None
            assert ended.last_seq == 1


@pytest.mark.trio
async def test_a_claim_settles_an_open_callback_once_and_its_holder_hears_of_it(
    store: Store, other_store: Store
) -> None:
    session_id, turn_id = new_id(), new_id()
    callback = approval_callback(session_id, turn_id)
    allowed = CallbackRow(session_id, callback, "answered", AllowApproval(), None)
    denied = CallbackRow(session_id, callback, "answered", DenyApproval(reason="no"), None)
    key = KeyRow(session_id, f"answer {callback.id} k", turn_id, "answer")
    async with opened(store), opened(other_store):
        with trio.fail_after(WAIT):
            made(store, session_id)
            store.write(started(session_id, 1, turn_id))
            store.write(TurnRow(session_id, turn_id, 1))
            store.write(CallbackRow(session_id, callback, "open", None, None))
            await store.flush()
            assert await other_store.claim_callback(allowed, key) is None  # the first wins
            assert await store.claim_callback(denied, None) == allowed  # as it is
            settled = await store.wait_for_claims([(session_id, callback.id)])
            while not settled:
                settled = await store.wait_for_claims([(session_id, callback.id)])
            assert settled == [allowed]
            # A settled callback's row never changes again, whoever writes to it.
            store.write(denied)
            await store.flush()
            stored = await load(other_store, session_id)
            assert list(stored.callbacks) == [allowed]
            assert [(k.key, k.turn_id) for k in stored.keys] == [(key.key, turn_id)]


@pytest.mark.trio
async def test_a_request_is_served_by_the_holder_and_its_reply_read_once(
    store: Store, other_store: Store
) -> None:
    session_id = new_id()
    async with opened(store), opened(other_store):
        with trio.fail_after(WAIT):
            made(store, session_id)
            await store.flush()
            sent = await other_store.send_request(session_id, {"do": ["this", 1]})
            requests = await store.wait_for_requests("holder", ())
            while not requests:
                requests = await store.wait_for_requests("holder", ())
            (request,) = requests
            assert request == Request(sent, session_id, {"do": ["this", 1]}, age=request.age)
            assert 0 <= request.age < WAIT  # seconds since it was sent
            assert await store.wait_for_requests("holder", {sent}) == []  # under way
            assert await store.wait_for_requests("someone else", ()) == []
            await store.reply_request(sent, {"done": True})
            reply = await other_store.wait_for_reply(sent)
            while reply is None:
                reply = await other_store.wait_for_reply(sent)
            assert reply == {"done": True}
            assert await other_store.wait_for_reply(sent) is None  # read once: forgotten
            assert await store.wait_for_requests("holder", ()) == []


@pytest.mark.trio
async def test_a_withdrawn_request_is_never_served_and_a_replied_one_cannot_be_withdrawn(
    store: Store, other_store: Store
) -> None:
    session_id = new_id()
    async with opened(store), opened(other_store):
        with trio.fail_after(WAIT):
            made(store, session_id)
            await store.flush()
            withdrawn = await other_store.send_request(session_id, {"n": 1})
            assert await other_store.withdraw_request(withdrawn)
            assert await store.wait_for_requests("holder", ()) == []
            await store.reply_request(withdrawn, {"late": True})  # to no one
            assert await other_store.wait_for_reply(withdrawn) is None
            replied = await other_store.send_request(session_id, {"n": 2})
            await store.reply_request(replied, {"n": 2})
            assert not await other_store.withdraw_request(replied)
            assert await other_store.wait_for_reply(replied) == {"n": 2}
