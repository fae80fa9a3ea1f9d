"""Durable sessions through the public API (SPEC 11, issue 6).

A "restart" is two ``async with agentlib.open_runtime(store)`` blocks in a row on the same
store: a shared :class:`MemoryStore` object, or a SQLite file (opened by its
``"sqlite:///..."`` name). The second runtime gets new ``Agent`` objects built the same way,
as a new process would, so nothing survives but what the store kept. Leases use two
runtimes on one file at once; ``agentlib_sync`` with ``AGENTLIB_STORE`` runs in real
subprocesses.

Crashes: a copy of the SQLite files taken while a tool runs, and a child process killed
with SIGKILL mid-tool. Every wait is under ``trio.fail_after`` so that an engine that never
resumes a turn fails fast instead of hanging. Tests of lease renewal run on trio's autojump
clock, which jumps while SQLite's threads work: their waits are bounded on the wall clock
(``fail_after_real``).

Loading a session in a new runtime starts its blocked turns again in tasks of their own;
tests that are not about that moment let those tasks get back to their waits first
(``resumed``), and ``test_the_first_answer_after_a_restart_is_the_one_taken`` is about it.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Annotated, Any

import attrs
import pytest
import trio
import trio.testing
from _support import (
    HOLD,
    WAIT,
    Gate,
    Recorder,
    StoreFor,
    approval_agent,
    call,
    deleter,
    echo,
    events_through,
    fail_after_real,
    lease_owners,
    only_callback,
    pick,
    reply,
    settled,
    turn_events,
    user_texts,
)

import agentlib
from agentlib import (
    Agent,
    AllowApproval,
    Answered,
    Blocked,
    CallbackClosed,
    CallbackOpened,
    ClientToolAnswerError,
    Completed,
    Credentials,
    DenyApproval,
    Depends,
    Interrupted,
    ModelRequest,
    ObservationLost,
    OpenApproval,
    OpenClientToolCall,
    OpenSignIn,
    ScriptedModel,
    SessionBusyError,
    SessionIdempotencyConflictError,
    SessionNotFoundError,
    SignInAnswer,
    SQLiteStore,
    StoreError,
    StoreSchemaError,
    Tool,
    ToolResultEntry,
    ToolSource,
    TurnEnded,
    TurnStarted,
    UnknownOutcome,
)

SECRET = "s3cr3t-notion-token-4f1c9a"
OTHER_SECRET = "an0ther-notion-token-77d2e0"

# --- stores -------------------------------------------------------------------------------------


def is_sqlite(store: StoreFor) -> bool:
    return isinstance(store(), str)


def db_files(tmp_path: Path) -> list[Path]:
    return [path for path in tmp_path.iterdir() if path.name.startswith("s.db")]


def assert_secret_not_on_disk(tmp_path: Path, *secrets: str) -> None:
    files = db_files(tmp_path)
    assert files, "the SQLite store wrote no file"
    for path in files:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"{secret!r} is in {path.name}"


# --- agents and steps -----------------------------------------------------------------------


def looker(calls: list[str], done: trio.Event | None = None) -> Tool:
    """A plain tool, ``lookup``, that appends each term it looks up to ``calls`` (and sets
    ``done``)."""

    @agentlib.tool
    async def lookup(term: str) -> str:
        """Look a term up."""
        calls.append(term)
        if done is not None:
            done.set()
        return f"about {term}"

    return lookup


async def events_after(session: agentlib.Session, after: str, last: str) -> list[agentlib.Event]:
    seen: list[agentlib.Event] = []
    with trio.fail_after(WAIT):
        async with aclosing(session.iter_events(after=after)) as events:
            async for event in events:
                seen.append(event)
                if event.id == last:
                    break
    return seen


async def drain(events: AsyncIterator[agentlib.Event]) -> None:
    """Read ``events`` to their end (or to the error they raise)."""
    async with aclosing(events) as iterator:
        async for _ in iterator:
            pass


async def resumed(turn: agentlib.Turn) -> agentlib.TurnState[Any]:
    """Load the turn's session in this runtime, and let its resumed turn get back to waiting
    on its callbacks (see test_the_first_answer_after_a_restart_is_the_one_taken)."""
    record = await turn.get()
    await trio.testing.wait_all_tasks_blocked()
    return record


def seq(cursor: str | None) -> int:
    assert cursor
    return int(cursor.rpartition(":")[2])


# --- 1. reopen by id --------------------------------------------------------------------------


async def test_reopen_reads_events_records_and_history(store: StoreFor) -> None:
    looked: list[str] = []
    seen_by_first, seen_by_second = Recorder("second"), Recorder("third")

    def make_agent() -> Agent:  # each runtime gets its own objects, as a new process would
        return Agent(
            "keeper",
            model=ScriptedModel(
                [
                    reply(call("lookup", term="trio")),
                    echo("first"),
                    seen_by_first,
                    seen_by_second,
                    "fourth",
                ]
            ),
            tools=[looker(looked)],
        )

    async with agentlib.open_runtime(store()):
        session = await make_agent().start_session()
        one = await session.run("look trio up")
        two = await session.run("again")
        assert isinstance(one, Completed)
        assert one.text == "first: about trio"
        assert isinstance(two, Completed)
        assert two.text == "second"
        turn_ids = [one.turn_id, two.turn_id]
        records = [await session.turn(turn_id).get() for turn_id in turn_ids]
        last = records[-1].cursor
        assert last is not None
        events = await events_through(session, last)

    async with agentlib.open_runtime(store()):
        again = make_agent().session(session.id)
        # The same events, with the same ids (cursors) and types, in the same order.
        replayed = await events_through(again, last)
        assert replayed == events
        assert [event.id for event in replayed] == [
            f"{session.id}:{n:012d}" for n in range(1, len(events) + 1)
        ]
        # The same records; each turn's record reads at once.
        for turn_id, record in zip(turn_ids, records, strict=True):
            now = await again.turn(turn_id).get()
            assert attrs.evolve(now, cursor=None) == attrs.evolve(record, cursor=None)
            assert now.cursor == last
            assert await settled(again.turn(turn_id)) == now
        # A cursor of the first runtime reads on in the second.
        assert await events_after(again, one.cursor or "", last) == events[seq(one.cursor) :]

        # New turns: the model goes on at the step after the ones the stored turns took,
        # and sees the whole history.
        three = await again.run("third")
        assert isinstance(three, Completed)
        assert three.text == "third"
        assert seq(three.cursor) > seq(last)
        four = await again.run("fourth")
        assert isinstance(four, Completed)
        assert four.text == "fourth"

    (before,) = seen_by_first.requests
    (after,) = seen_by_second.requests
    assert list(after.entries)[: len(before.entries)] == list(before.entries)
    assert user_texts(after) == ["look trio up", "again", "third"]
    assert [entry.text for entry in after.entries[len(before.entries) :]] == ["second", "third"]
    assert looked == ["trio"]  # the tool of the first turn never ran again

    async with agentlib.open_runtime(store()):
        # A third runtime reads all four turns' events, numbered on without a gap.
        third = make_agent().session(session.id)
        all_events = await events_through(third, four.cursor or "")
        assert all_events[: len(events)] == events
        assert [seq(event.id) for event in all_events] == list(range(1, len(all_events) + 1))
        assert sum(isinstance(event, TurnStarted) for event in all_events) == 4


async def test_an_unknown_id_is_not_found_after_a_restart(store: StoreFor) -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime(store()):
        await (await agent.start_session()).run("hello")
    async with agentlib.open_runtime(store()):
        with pytest.raises(SessionNotFoundError):
            await agent.session("0" * 32).turn("1" * 32).get()


async def test_memory_keeps_nothing_once_its_runtime_ends() -> None:
    agent = Agent("a", model=ScriptedModel(["hi"]))
    async with agentlib.open_runtime(":memory:"):
        session = await agent.start_session()
        record = await session.run("hello")
    async with agentlib.open_runtime(":memory:"):
        with pytest.raises(SessionNotFoundError):
            await agent.session(session.id).turn(record.turn_id).get()


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
async def test_a_sqlite_file_in_a_missing_directory_says_the_directory_does_not_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, relative: bool
) -> None:
    monkeypatch.chdir(tmp_path)
    directory = "missing/dir" if relative else str(tmp_path / "missing" / "dir")
    with pytest.raises(StoreError) as raised:
        async with agentlib.open_runtime(f"sqlite:///{directory}/x.db"):
            pass
    message = str(raised.value)
    assert f"the directory {directory} does not exist" in message
    assert "create it first" in message
    assert not (tmp_path / "missing").exists()


async def test_a_sqlite_file_under_a_file_says_it_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    with pytest.raises(StoreError, match=r"the directory \S+plain is not a directory"):
        async with agentlib.open_runtime(f"sqlite:///{tmp_path / 'plain' / 'x.db'}"):
            pass


# --- 2. blocked turns survive a restart --------------------------------------------------------


@pytest.mark.parametrize("same_step", [False, True], ids=["earlier-step", "same-step"])
async def test_a_blocked_approval_is_answered_after_a_restart(
    store: StoreFor, same_step: bool
) -> None:
    looked: list[str] = []
    runs: list[str] = []
    looked_up = trio.Event()

    def make_agent() -> Agent:
        steps: list[Any] = (
            [reply(call("lookup", term="x"), call("delete", path="/tmp/x"))]
            if same_step
            else [reply(call("lookup", term="x")), reply(call("delete", path="/tmp/x"))]
        )
        return Agent(
            "approver",
            model=ScriptedModel([*steps, echo("done")]),
            tools=[looker(looked, looked_up), deleter(runs)],
        )

    async with agentlib.open_runtime(store()):
        session = await make_agent().start_session()
        blocked = await session.run("clean up")
        approval = only_callback(blocked, OpenApproval)
        with trio.fail_after(WAIT):  # in the same step, lookup may run after the approval opened
            await looked_up.wait()
        assert approval.tool_name == "delete"
        assert looked == ["x"]
        assert runs == []

    async with agentlib.open_runtime(store()):
        turn = make_agent().session(session.id).turn(blocked.turn_id)
        assert await turn.get() == blocked  # still blocked, on the same callback
        answered = await turn.answer(approval.id, AllowApproval())
        assert answered == Answered(answer=AllowApproval(), session_id=session.id)
        record = await settled(turn)
        assert isinstance(record, Completed), record
        assert record.text == "done: deleted /tmp/x"
        assert [entry.name for entry in record.tool_calls] == ["lookup", "delete"]
        events = [event async for event in turn.iter_events()]

    assert looked == ["x"]  # the tool that ran before the approval did not run again
    assert runs == ["/tmp/x"]
    closed = [event for event in events if isinstance(event, CallbackClosed)]
    assert [(event.callback_id, event.answer, event.answered) for event in closed] == [
        (approval.id, AllowApproval(), True)
    ]
    assert [event for event in events if isinstance(event, CallbackOpened)] == [
        event
        for event in events
        if isinstance(event, CallbackOpened) and event.callback == approval
    ]
    assert [seq(event.id) for event in events] == list(
        range(seq(events[0].id), seq(events[0].id) + len(events))
    )


async def test_a_denial_after_a_restart_reaches_the_model(store: StoreFor) -> None:
    runs: list[str] = []

    def make_agent() -> Agent:
        return Agent(
            "approver",
            model=ScriptedModel([reply(call("delete", path="/tmp/x")), echo("done")]),
            tools=[deleter(runs)],
        )

    async with agentlib.open_runtime(store()):
        session = await make_agent().start_session()
        blocked = await session.run("clean up")
        approval = only_callback(blocked, OpenApproval)

    async with agentlib.open_runtime(store()):
        turn = make_agent().session(session.id).turn(blocked.turn_id)
        await resumed(turn)
        await turn.answer(approval.id, DenyApproval(reason="not today"))
        record = await settled(turn)
    assert isinstance(record, Completed)
    assert record.text == "done: the client denied this call: not today"
    assert runs == []


@pytest.mark.parametrize("kind", ["deny", "client tool"])
async def test_the_first_answer_after_a_restart_is_the_one_taken(
    store: StoreFor, kind: str
) -> None:
    """The plain flow of a new process: ``agent.session(id).turn(t).answer(...)`` first
    thing. Loading the session starts the blocked turn again in a task of its own; an answer
    that lands before that task is back at its wait must still be the answer taken.

    Which of the two runs first is trio's choice (either order, at random); each session
    here is one more chance for the answer to land first, so with 12 of them an answer that
    gets lost shows in all runs but one in 4096.
    """
    sessions = 12
    runs: list[str] = []
    deny = kind == "deny"

    def make_agent() -> Agent:
        if deny:
            return Agent(
                "approver",
                model=ScriptedModel([reply(call("delete", path="/tmp/x")), echo("done")]),
                tools=[deleter(runs)],
            )
        return Agent(
            "client",
            model=ScriptedModel([reply(call("client.pick", prompt="which?")), echo("picked")]),
            tools=[pick],
        )

    answer: Any = DenyApproval(reason="no") if deny else 3
    expected = "done: the client denied this call: no" if deny else "picked: 3"
    blocked: list[tuple[str, str, str]] = []
    async with agentlib.open_runtime(store()):
        agent = make_agent()
        for _ in range(sessions):
            session = await agent.start_session()
            record = await session.run("go")
            callback = only_callback(record, OpenApproval if deny else OpenClientToolCall)
            blocked.append((session.id, record.turn_id, callback.id))

    outcomes: list[str] = []
    async with agentlib.open_runtime(store()):
        agent = make_agent()
        for session_id, turn_id, callback_id in blocked:
            turn = agent.session(session_id).turn(turn_id)
            assert isinstance(await turn.answer(callback_id, answer), Answered)
            record = await settled(turn)
            outcomes.append(record.text if isinstance(record, Completed) else repr(record))
    assert outcomes == [expected] * sessions
    assert runs == []  # a denied call never runs


async def test_a_handler_of_the_new_reference_answers_the_restored_callback(
    store: StoreFor,
) -> None:
    runs: list[str] = []
    asked: list[OpenApproval] = []

    def make_agent() -> Agent:
        return Agent(
            "approver",
            model=ScriptedModel([reply(call("delete", path="/tmp/x")), echo("done")]),
            tools=[deleter(runs)],
        )

    async with agentlib.open_runtime(store()):
        session = await make_agent().start_session()
        blocked = await session.run("clean up")
        approval = only_callback(blocked, OpenApproval)

    def allow(callback: OpenApproval) -> AllowApproval:
        asked.append(callback)
        return AllowApproval()

    async with agentlib.open_runtime(store()):
        again = make_agent().session(session.id, on_approval=allow)
        record = await settled(again.turn(blocked.turn_id))
    assert isinstance(record, Completed)
    assert record.text == "done: deleted /tmp/x"
    assert asked == [approval]
    assert runs == ["/tmp/x"]


async def test_an_approval_allowed_for_the_session_holds_after_a_restart(
    store: StoreFor,
) -> None:
    runs: list[str] = []

    def make_agent() -> Agent:
        return Agent(
            "approver",
            model=ScriptedModel(
                [
                    reply(call("delete", path="/a")),
                    "first done",
                    reply(call("delete", path="/b")),
                    "second done",
                ]
            ),
            tools=[deleter(runs)],
        )

    async with agentlib.open_runtime(store()):
        session = await make_agent().start_session()
        blocked = await session.run("delete /a")
        approval = only_callback(blocked, OpenApproval)
        await session.turn(blocked.turn_id).answer(approval.id, AllowApproval(scope="session"))
        assert isinstance(await settled(session.turn(blocked.turn_id)), Completed)

    async with agentlib.open_runtime(store()):
        record = await make_agent().session(session.id).run("delete /b", timeout=WAIT)
    assert isinstance(record, Completed), record  # no second approval
    assert runs == ["/a", "/b"]


# --- subagents ----------------------------------------------------------------------------------


def subagent_tree(looked: list[str], runs: list[str]) -> tuple[Agent, Agent]:
    """boss -> cleaner: boss looks something up, then delegates; cleaner's delete asks."""
    cleaner = Agent(
        "cleaner",
        model=ScriptedModel([reply(call("delete", path="/tmp/x")), echo("cleaner")]),
        tools=[deleter(runs)],
    )
    boss = Agent(
        "boss",
        model=ScriptedModel(
            [
                reply(call("lookup", term="x")),
                reply(call("cleaner", message="delete /tmp/x")),
                echo("boss"),
            ]
        ),
        tools=[looker(looked)],
        subagents=[cleaner],
    )
    return boss, cleaner


@pytest.mark.parametrize(
    "through", ["root", "subagents()", "root agent, subagent id", "subagent agent after root"]
)
async def test_an_approval_inside_a_subagent_is_answered_after_a_restart(
    store: StoreFor, through: str
) -> None:
    looked: list[str] = []
    runs: list[str] = []
    async with agentlib.open_runtime(store()):
        boss, _ = subagent_tree(looked, runs)
        session = await boss.start_session()
        blocked = await session.run("clean up")
        approval = only_callback(blocked, OpenApproval)
        assert approval.session_id != session.id  # the subagent's
        assert looked == ["x"]
        assert runs == []

    async with agentlib.open_runtime(store()):
        boss, cleaner = subagent_tree(looked, runs)
        root = boss.session(session.id)
        if through == "root":
            answering = root.turn(blocked.turn_id)
        elif through == "subagents()":
            (child,) = await root.subagents()
            assert child.id == approval.session_id
            answering = child.turn(approval.turn_id)
        elif through == "root agent, subagent id":
            answering = boss.session(approval.session_id).turn(approval.turn_id)
        else:  # the tree was loaded through the root: the subagent's agent reads it too
            assert await root.turn(blocked.turn_id).get() == blocked
            answering = cleaner.session(approval.session_id).turn(approval.turn_id)
        sub_blocked = await answering.get()
        assert only_callback(sub_blocked, OpenApproval) == approval
        answered = await answering.answer(approval.id, AllowApproval())
        assert answered == Answered(answer=AllowApproval(), session_id=approval.session_id)
        record = await settled(root.turn(blocked.turn_id))
        assert isinstance(record, Completed), record
        assert record.text == "boss: cleaner: deleted /tmp/x"
        sub_record = await settled(boss.session(approval.session_id).turn(approval.turn_id))
        assert isinstance(sub_record, Completed)
        assert sub_record.text == "cleaner: deleted /tmp/x"

    assert looked == ["x"]
    assert runs == ["/tmp/x"]


async def test_a_subagent_session_opened_by_its_own_agent_first(store: StoreFor) -> None:
    """``cleaner.session(sub_id)`` in a new runtime, before anything loaded the tree: SPEC
    11 says the tree is opened through the root agent; this one must say so clearly."""
    looked: list[str] = []
    runs: list[str] = []
    async with agentlib.open_runtime(store()):
        boss, _ = subagent_tree(looked, runs)
        blocked = await (await boss.start_session()).run("clean up")
        approval = only_callback(blocked, OpenApproval)

    async with agentlib.open_runtime(store()):
        boss, cleaner = subagent_tree(looked, runs)
        with pytest.raises(SessionNotFoundError, match="boss") as error:
            await cleaner.session(approval.session_id).turn(approval.turn_id).get()
        assert "root" in str(error.value)
        # The failed attempt left nothing half-loaded: through the root it works.
        turn = boss.session(approval.session_id).turn(approval.turn_id)
        await turn.answer(approval.id, AllowApproval())
        record = await settled(boss.session(blocked.session_id).turn(blocked.turn_id))
        assert isinstance(record, Completed), record
    assert runs == ["/tmp/x"]


# --- client tools and sign-ins ----------------------------------------------------------------


async def test_a_blocked_client_tool_call_is_answered_after_a_restart(store: StoreFor) -> None:
    looked: list[str] = []

    def make_agent() -> Agent:
        return Agent(
            "client",
            model=ScriptedModel(
                [
                    reply(call("lookup", term="x")),
                    reply(call("client.pick", prompt="which?")),
                    echo("picked"),
                ]
            ),
            tools=[looker(looked), pick],
        )

    async with agentlib.open_runtime(store()):
        session = await make_agent().start_session()
        blocked = await session.run("pick one")
        callback = only_callback(blocked, OpenClientToolCall)
        assert callback.tool_name == "client.pick"
        assert callback.arguments == {"prompt": "which?"}

    async with agentlib.open_runtime(store()):
        turn = make_agent().session(session.id).turn(blocked.turn_id)
        await resumed(turn)
        # The answer is still checked against the stub's return type.
        with pytest.raises(ClientToolAnswerError):
            await turn.answer(callback.id, "three")
        assert await turn.get() == blocked
        assert await turn.answer(callback.id, 3) == Answered(answer=None, session_id=session.id)
        record = await settled(turn)
    assert isinstance(record, Completed), record
    assert record.text == "picked: 3"
    assert looked == ["x"]


def notion(seen: list[Credentials], *, requires_approval: bool = False) -> ToolSource:
    """A sign-in source, ``notion``, whose ``search`` records the credentials it gets."""

    async def search(query: str, creds: Annotated[Credentials, Depends()]) -> str:
        """Search the workspace."""
        seen.append(creds)
        return f"found {query}"

    made = agentlib.tool(requires_approval=requires_approval)(search)
    return ToolSource(name="notion", tools=[made], requires_sign_in=True)


async def test_a_blocked_sign_in_is_answered_after_a_restart(
    store: StoreFor, tmp_path: Path
) -> None:
    seen: list[Credentials] = []

    def make_agent() -> Agent:
        return Agent(
            "signer",
            model=ScriptedModel([reply(call("notion.search", query="q")), echo("done")]),
            tools=[notion(seen)],
        )

    async with agentlib.open_runtime(store()):
        session = await make_agent().start_session()
        blocked = await session.run("search")
        sign_in = only_callback(blocked, OpenSignIn)
        assert sign_in.sources == ("notion",)

    async with agentlib.open_runtime(store()):
        turn = make_agent().session(session.id).turn(blocked.turn_id)
        await turn.answer(sign_in.id, SignInAnswer(credentials={"notion": SECRET}))
        record = await settled(turn)
        events = [event async for event in turn.iter_events()]
    assert isinstance(record, Completed), record
    assert record.text == "done: found q"
    assert seen == [Credentials(source="notion", value=SECRET)]
    assert SECRET not in repr(events)
    assert SECRET not in repr(record)
    if is_sqlite(store):
        assert_secret_not_on_disk(tmp_path, SECRET)


async def test_a_sign_in_answered_before_a_restart_is_asked_again(
    store: StoreFor, tmp_path: Path
) -> None:
    """The call signed in, then waits on its approval when the runtime stops: credentials
    are not stored, so after the restart the allowed call asks to sign in again."""
    seen: list[Credentials] = []

    def make_agent() -> Agent:
        return Agent(
            "signer",
            model=ScriptedModel([reply(call("notion.search", query="q")), echo("done")]),
            tools=[notion(seen, requires_approval=True)],
        )

    async with agentlib.open_runtime(store()):
        session = await make_agent().start_session()
        turn = (await session.start_turn("search")).id
        first = await settled(session.turn(turn))
        sign_in = only_callback(first, OpenSignIn)
        await session.turn(turn).answer(sign_in.id, SignInAnswer(credentials={"notion": SECRET}))
        second = await settled(session.turn(turn), after=first)
        approval = only_callback(second, OpenApproval)
        assert approval.tool_name == "notion.search"
        if is_sqlite(store):
            assert_secret_not_on_disk(tmp_path, SECRET)

    async with agentlib.open_runtime(store()):
        again = make_agent().session(session.id).turn(turn)
        assert only_callback(await again.get(), OpenApproval) == approval
        await again.answer(approval.id, AllowApproval())
        third = await settled(again, after=second)
        renewed = only_callback(third, OpenSignIn)  # asked again: the secret was not kept
        assert renewed.id != sign_in.id
        assert renewed.sources == ("notion",)
        assert seen == []  # the tool has not run without credentials
        await again.answer(renewed.id, SignInAnswer(credentials={"notion": OTHER_SECRET}))
        record = await settled(again, after=third)
        events = [event async for event in again.iter_events()]
    assert isinstance(record, Completed), record
    assert record.text == "done: found q"
    assert seen == [Credentials(source="notion", value=OTHER_SECRET)]
    assert SECRET not in repr(events)
    assert OTHER_SECRET not in repr(events)
    if is_sqlite(store):
        assert_secret_not_on_disk(tmp_path, SECRET, OTHER_SECRET)


async def test_a_later_step_signs_in_again_after_a_restart(store: StoreFor, tmp_path: Path) -> None:
    """Signed in and searched before the restart; the turn then waits on an approval. After
    the restart the next search of the same turn asks for a sign-in again."""
    seen: list[Credentials] = []
    runs: list[str] = []

    def make_agent() -> Agent:
        return Agent(
            "signer",
            model=ScriptedModel(
                [
                    reply(call("notion.search", query="one")),
                    reply(call("delete", path="/tmp/x")),
                    reply(call("notion.search", query="two")),
                    echo("done"),
                ]
            ),
            tools=[notion(seen), deleter(runs)],
        )

    async with agentlib.open_runtime(store()):
        session = await make_agent().start_session()
        first = await session.run("search twice")
        sign_in = only_callback(first, OpenSignIn)
        turn = session.turn(first.turn_id)
        await turn.answer(sign_in.id, SignInAnswer(credentials={"notion": SECRET}))
        second = await settled(turn, after=first)
        approval = only_callback(second, OpenApproval)
        assert seen == [Credentials(source="notion", value=SECRET)]

    async with agentlib.open_runtime(store()):
        again = make_agent().session(session.id).turn(first.turn_id)
        await again.answer(approval.id, AllowApproval())
        third = await settled(again, after=second)
        renewed = only_callback(third, OpenSignIn)
        await again.answer(renewed.id, SignInAnswer(credentials={"notion": OTHER_SECRET}))
        record = await settled(again, after=third)
    assert isinstance(record, Completed), record
    assert record.text == "done: found two"
    assert seen == [
        Credentials(source="notion", value=SECRET),
        Credentials(source="notion", value=OTHER_SECRET),
    ]
    assert runs == ["/tmp/x"]
    if is_sqlite(store):
        assert_secret_not_on_disk(tmp_path, SECRET, OTHER_SECRET)


# --- 3. idempotency keys ---------------------------------------------------------------------


async def test_idempotency_keys_survive_a_restart(store: StoreFor) -> None:
    requests: list[ModelRequest] = []

    def answer(request: ModelRequest) -> str:
        requests.append(request)
        return "hi there"

    def make_agent() -> Agent:
        return Agent("keyed", model=ScriptedModel([answer, answer]))

    async with agentlib.open_runtime(store()):
        session = await make_agent().start_session(idempotency_key="k")
        turn = await session.start_turn("hello", idempotency_key="t")
        assert isinstance(turn, agentlib.Turn)
        record = await settled(turn)
        assert isinstance(record, Completed)

    async with agentlib.open_runtime(store()):
        agent = make_agent()
        again = await agent.start_session(idempotency_key="k")
        assert again.id == session.id
        retried = await again.start_turn("hello", idempotency_key="t")
        assert isinstance(retried, agentlib.Turn), retried
        assert retried.id == turn.id
        assert await settled(retried) == record
        with pytest.raises(SessionIdempotencyConflictError):
            await again.start_turn("something else", idempotency_key="t")
        # A new key starts a new turn; the retry started none.
        other = await again.start_turn("bye", idempotency_key="u")
        assert isinstance(other, agentlib.Turn)
        assert other.id != turn.id
        last = await settled(other)
        events = await events_through(again, last.cursor or "")
        # A different key is a different session.
        assert (await agent.start_session(idempotency_key="k2")).id != session.id

    assert len(requests) == 2
    assert [event.turn_id for event in events if isinstance(event, TurnStarted)] == [
        turn.id,
        other.id,
    ]


async def test_a_retried_start_turn_after_a_restart_returns_the_blocked_turn(
    store: StoreFor,
) -> None:
    runs: list[str] = []

    def make_agent() -> Agent:
        return Agent(
            "approver",
            model=ScriptedModel([reply(call("delete", path="/tmp/x")), echo("done")]),
            tools=[deleter(runs)],
        )

    async with agentlib.open_runtime(store()):
        session = await make_agent().start_session(idempotency_key="k")
        turn = await session.start_turn("clean up", idempotency_key="t")
        assert isinstance(turn, agentlib.Turn)
        blocked = await settled(turn)
        approval = only_callback(blocked, OpenApproval)

    async with agentlib.open_runtime(store()):
        again = await make_agent().start_session(idempotency_key="k")
        retried = await again.start_turn("clean up", idempotency_key="t")
        assert isinstance(retried, agentlib.Turn), retried
        assert retried.id == turn.id
        assert await retried.get() == blocked
        await retried.answer(approval.id, AllowApproval())
        assert isinstance(await settled(retried), Completed)
    assert runs == ["/tmp/x"]


async def test_concurrent_starts_with_one_key_return_one_session(
    store: StoreFor, tmp_path: Path
) -> None:
    """Two ``start_session(idempotency_key="k")`` at once make one session; the runtime goes on."""
    agent = Agent("a", model=ScriptedModel(["hi"]))
    ids: list[str] = []
    async with agentlib.open_runtime(store()):

        async def start() -> None:
            ids.append((await agent.start_session(idempotency_key="k")).id)

        with trio.fail_after(WAIT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(start)
                nursery.start_soon(start)
        assert len(ids) == 2
        assert ids[0] == ids[1]
        record = await agent.session(ids[0]).run("hello", timeout=WAIT)
        assert isinstance(record, Completed), record
    async with agentlib.open_runtime(store()):
        assert (await agent.start_session(idempotency_key="k")).id == ids[0]
    if isinstance(store(), str):
        assert len(lease_owners(tmp_path / "s.db")) == 1  # one session in the file


# --- 4. turns running when a runtime stops ------------------------------------------------------


async def test_a_running_turn_is_cancelled_when_its_runtime_closes(store: StoreFor) -> None:
    gate = Gate()
    calls: list[str] = []

    def make_agent() -> Agent:
        async def hold() -> str:
            """Wait for the gate."""
            calls.append("hold")
            gate.reached.set()
            await gate.opened.wait()
            return "opened"

        return Agent(
            "held",
            model=ScriptedModel([HOLD, "after the restart"]),
            tools=[agentlib.tool(hold)],
        )

    async with agentlib.open_runtime(store()):
        session = await make_agent().start_session()
        turn = await session.send_message("go")
        with trio.fail_after(WAIT):
            await gate.reached.wait()
        # Leaving the block with the tool still held (the gate never opens).

    async with agentlib.open_runtime(store()):
        again = make_agent().session(session.id)
        record = await again.turn(turn.id).get()
        assert isinstance(record, Interrupted), record
        assert record.cause == "cancelled"
        events = [event async for event in again.turn(turn.id).iter_events()]
        assert isinstance(events[-1], TurnEnded)
        assert events[-1].record == record
        results = [
            event.entry
            for event in events
            if isinstance(event, agentlib.EntryCompleted)
            and isinstance(event.entry, ToolResultEntry)
        ]
        assert [(result.is_error, result.text) for result in results] == [
            (True, "the turn was stopped before this call finished")
        ]
        # The session takes new turns, and the model goes on at its next step.
        new = await again.run("again", timeout=WAIT)
        assert isinstance(new, Completed)
        assert new.text == "after the restart"
    assert calls == ["hold"]


async def test_a_turn_running_when_its_runtime_died_reads_unknown_outcome(
    tmp_path: Path,
) -> None:
    """A copy of the SQLite files taken while a tool runs is what a crash leaves; a runtime
    on the copy (whose clock is past the dead owner's lease) finds the turn's outcome
    unknown, and the session takes new turns."""
    gate = Gate()
    live = tmp_path / "live"
    crashed = tmp_path / "crashed"
    live.mkdir()
    crashed.mkdir()

    def make_agent() -> Agent:
        return Agent("held", model=ScriptedModel([HOLD, "after the crash"]), tools=[gate.tool])

    async with agentlib.open_runtime(f"sqlite:///{live / 's.db'}"):
        session = await make_agent().start_session()
        turn = await session.send_message("go")
        with trio.fail_after(WAIT):
            await gate.reached.wait()
        for path in live.iterdir():  # the tool is running: nothing is being written
            shutil.copy(path, crashed / path.name)
        gate.opened.set()
        assert isinstance(await settled(turn), Completed)

    later = SQLiteStore(str(crashed / "s.db"), clock=lambda: time.time() + 3600)
    async with agentlib.open_runtime(later):
        again = make_agent().session(session.id)
        record = await again.turn(turn.id).get()
        assert isinstance(record, UnknownOutcome), record
        assert record.reason
        new = await again.run("again", timeout=WAIT)
        assert isinstance(new, Completed)
        assert new.text == "after the crash"


_CRASHING_CHILD = """
import json, sys
import trio
import agentlib

async def hold() -> str:
    \"\"\"Hold the turn.\"\"\"
    print("running", flush=True)
    await trio.sleep_forever()
    return "never"

agent = agentlib.Agent(
    "held",
    model=agentlib.ScriptedModel(
        [agentlib.ModelReply(tool_calls=[agentlib.ToolCallRequest(name="hold")]), "after"]
    ),
    tools=[hold],
)

async def main() -> None:
    async with agentlib.open_runtime("sqlite:///" + sys.argv[1]):
        session = await agent.start_session(idempotency_key="job-1")
        turn = await session.start_turn("go", idempotency_key="turn-1")
        print(json.dumps({"session": session.id, "turn": turn.id}), flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


def _run_until_killed(script: Path, *args: str, lines: int) -> list[str]:
    """Run ``script``, read ``lines`` lines of its output, then SIGKILL it."""
    process = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,  # unbuffered: select() sees every byte not read yet
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert process.stdout is not None
        output = b""
        deadline = time.monotonic() + 30
        while output.count(b"\n") < lines:
            ready, _, _ = select.select([process.stdout], [], [], deadline - time.monotonic())
            assert ready, f"the child printed {output!r} only"
            chunk = os.read(process.stdout.fileno(), 4096)
            assert chunk, f"the child ended: {process.communicate(timeout=10)[1]!r}"
            output += chunk
        return output.decode().splitlines()[:lines]
    finally:
        process.kill()  # SIGKILL: no cleanup, no lease release
        process.communicate(timeout=10)


async def test_a_process_killed_mid_tool_leaves_an_unknown_outcome(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(_CRASHING_CHILD)
    path = tmp_path / "s.db"
    printed = await trio.to_thread.run_sync(lambda: _run_until_killed(script, str(path), lines=2))
    # The tool may start before start_turn returns: the two lines come in either order.
    assert "running" in printed
    (ids,) = [json.loads(line) for line in printed if line != "running"]

    def make_agent() -> Agent:
        return Agent("held", model=ScriptedModel([HOLD, "after"]), tools=[Gate().tool])

    # The dead process's lease runs 30 s more on the wall clock: this runtime's is past it.
    later = SQLiteStore(str(path), clock=lambda: time.time() + 3600)
    async with agentlib.open_runtime(later):
        agent = make_agent()
        session = await agent.start_session(idempotency_key="job-1")  # keys survive
        assert session.id == ids["session"]
        retried = await session.start_turn("go", idempotency_key="turn-1")
        assert isinstance(retried, agentlib.Turn)
        assert retried.id == ids["turn"]
        record = await retried.get()
        assert isinstance(record, UnknownOutcome), record
        events = [event async for event in retried.iter_events()]
        assert isinstance(events[0], TurnStarted)
        assert events[0].turn_id == ids["turn"]
        assert isinstance(events[-1], TurnEnded)
        assert events[-1].record == record
        assert [seq(event.id) for event in events] == list(range(1, len(events) + 1))
        new = await session.run("again", timeout=WAIT)
        assert isinstance(new, Completed)
        assert new.text == "after"


# --- 5. retention --------------------------------------------------------------------------------


async def test_retention_prunes_events_but_not_history(store: StoreFor) -> None:
    keep = 10  # a turn here has 7 events: three turns are more than 10
    recorder = Recorder("a4")

    def make_agent() -> Agent:
        return Agent("talker", model=ScriptedModel(["a1", "a2", "a3", recorder, "a5"]))

    async with agentlib.open_runtime(store(), event_retention=keep):
        session = await make_agent().start_session()
        records = [await session.run(f"m{n}") for n in (1, 2, 3)]
        assert [record.text for record in records] == ["a1", "a2", "a3"]  # type: ignore[union-attr]
        last = records[-1].cursor or ""
        with pytest.raises(ObservationLost) as lost:
            await drain(session.iter_events())
        resume = lost.value.cursor
        assert resume == f"{session.id}:{seq(last) - keep:012d}"  # right before the oldest kept
        kept = await events_after(session, resume, last)
        assert len(kept) == keep
        assert seq(kept[0].id) == seq(resume) + 1
        assert kept[-1].id == last
        assert isinstance(kept[-1], TurnEnded)
        # A turn whose events are gone still reads its record.
        first = await session.turn(records[0].turn_id).get()
        assert isinstance(first, Completed)
        assert first.text == "a1"

    async with agentlib.open_runtime(store(), event_retention=keep):
        again = make_agent().session(session.id)
        with pytest.raises(ObservationLost) as lost_again:
            await drain(again.iter_events())
        assert lost_again.value.cursor == resume
        assert await events_after(again, resume, last) == kept
        first = await again.turn(records[0].turn_id).get()
        assert isinstance(first, Completed)
        assert first.text == "a1"
        with pytest.raises(ObservationLost):
            await drain(again.turn(records[0].turn_id).iter_events())
        # The model still sees the whole history.
        four = await again.run("m4")
        assert isinstance(four, Completed)
        assert four.text == "a4"
        with pytest.raises(ObservationLost) as lost_later:
            await drain(again.iter_events(after=resume))
        assert seq(lost_later.value.cursor) > seq(resume)

    (request,) = recorder.requests
    assert user_texts(request) == ["m1", "m2", "m3", "m4"]
    assert [entry.text for entry in request.entries] == ["m1", "a1", "m2", "a2", "m3", "a3", "m4"]


@pytest.mark.parametrize("keep", [2, 5])
async def test_a_turn_with_more_events_than_the_retention_still_reads_its_end(
    store: StoreFor, keep: int
) -> None:
    """``run()`` waits for the turn's end: pruning the turn's first events (a turn here has
    7) must not make that wait fail; the record is known."""
    agent = Agent("talker", model=ScriptedModel(["a1", "a2"]))
    async with agentlib.open_runtime(store(), event_retention=keep):
        session = await agent.start_session()
        with trio.fail_after(WAIT):
            one = await session.run("m1")
            two = await session.run("m2")
    assert isinstance(one, Completed)
    assert one.text == "a1"
    assert isinstance(two, Completed)
    assert two.text == "a2"


async def test_result_of_an_older_turn_under_retention_returns_its_record(
    any_store: StoreFor,
) -> None:
    """With event_retention, ``result()`` of a turn whose events were pruned returns its record, as
    ``get()`` does; no ObservationLost."""
    agent = Agent("a", model=ScriptedModel(["one", "two", "three"]))
    async with agentlib.open_runtime(any_store(), event_retention=2):
        session = await agent.start_session()
        first = await session.run("a")
        await session.run("b")
        await session.run("c")
        turn = session.turn(first.turn_id)
        now = await turn.get()
        assert isinstance(now, Completed)
        assert now.text == "one"
        with trio.fail_after(WAIT):
            assert await turn.result() == now


# --- 5b. long logs ------------------------------------------------------------------------------


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Readers read 3 events from the store at a time, and a log holds 8 events at most
    (then 4): a few turns make a long log."""
    monkeypatch.setattr(agentlib._engine._log, "_PAGE", 3)
    monkeypatch.setattr(agentlib._engine._log, "_HELD_MAX", 8)
    monkeypatch.setattr(agentlib._engine._log, "_HELD_KEEP", 4)


async def test_long_logs_are_read_back_whole_a_page_at_a_time(
    store: StoreFor, small_pages: None
) -> None:
    """A log lets go of its old durable events, and a reopened session holds none: readers
    read them back from the store, in pages, the same as they were."""
    agent = Agent("talker", model=ScriptedModel([f"a{n}" for n in range(1, 7)]))
    async with agentlib.open_runtime(store()):
        session = await agent.start_session()
        records = [await session.run(f"m{n}") for n in range(1, 6)]
        last = records[-1].cursor or ""
        live = await events_through(session, last)
        assert [seq(event.id) for event in live] == list(range(1, seq(last) + 1))
        ended = [event.record for event in live if isinstance(event, TurnEnded)]
        assert ended == records
        first_turn = await turn_events(session.turn(records[0].turn_id), timeout=WAIT)
        assert first_turn == [event for event in live if event.turn_id == records[0].turn_id]
        delivered: list[agentlib.Event] = []
        second = await session.turn(records[1].turn_id).result(on_event=delivered.append)
        assert attrs.evolve(second, cursor=None) == attrs.evolve(records[1], cursor=None)
        assert delivered == [event for event in live if event.turn_id == records[1].turn_id]

    async with agentlib.open_runtime(store()):
        again = agent.session(session.id)
        assert await events_through(again, last) == live
        assert (
            await events_after(again, records[2].cursor or "", last)
            == (live[seq(records[2].cursor) :])
        )
        assert await turn_events(again.turn(records[3].turn_id), timeout=WAIT) == [
            event for event in live if event.turn_id == records[3].turn_id
        ]
        six = await again.run("m6")  # the reopened log goes on after the stored events
        assert isinstance(six, Completed)
        assert six.text == "a6"
        more = await events_after(again, last, six.cursor or "")
        assert seq(more[0].id) == seq(last) + 1
        assert more[-1] == TurnEnded(
            id=six.cursor or "", session_id=session.id, turn_id=six.turn_id, record=six
        )


async def test_a_reader_whose_next_page_was_pruned_meanwhile_loses_observation(
    store: StoreFor, small_pages: None
) -> None:
    """A reader reading old events back from the store, page by page, while retention
    prunes them: the events of the page it read come, then ObservationLost names the
    cursor to resume after."""
    agent = Agent("talker", model=ScriptedModel([f"a{n}" for n in range(1, 5)]))
    async with agentlib.open_runtime(store()):
        session = await agent.start_session()
        for n in (1, 2, 3):
            await session.run(f"m{n}")

    async with agentlib.open_runtime(store(), event_retention=10):
        again = agent.session(session.id)
        seen: list[agentlib.Event] = []

        async def read_on(events: AsyncIterator[agentlib.Event]) -> None:
            async for event in events:
                seen.append(event)

        with trio.fail_after(WAIT):
            async with aclosing(again.iter_events()) as events:
                seen.append(await events.__anext__())  # reads the page of events 1 to 3
                four = await again.run("m4")  # prunes all but the last 10 events
                with pytest.raises(ObservationLost) as lost:
                    await read_on(events)
        assert [seq(event.id) for event in seen] == [1, 2, 3]
        resume = lost.value.cursor
        assert resume == f"{session.id}:{seq(four.cursor) - 10:012d}"
        kept = await events_after(again, resume, four.cursor or "")
        assert len(kept) == 10


# --- 6. leases ------------------------------------------------------------------------------------


async def test_a_session_another_live_runtime_holds_is_busy(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    runs: list[str] = []
    async with agentlib.open_runtime(SQLiteStore(path)):
        session = await approval_agent(runs).start_session()
        blocked = await session.run("clean up")
        approval = only_callback(blocked, OpenApproval)
        async with agentlib.open_runtime(SQLiteStore(path)):
            other = approval_agent(runs).session(session.id)
            with pytest.raises(agentlib.LeaseRefused) as refused:
                await other.turn(blocked.turn_id).get()
            assert isinstance(refused.value, SessionBusyError)
            assert refused.value.session_id == session.id
            assert refused.value.owner not in (None, "")
            with pytest.raises(agentlib.LeaseRefused):
                await other.turn(blocked.turn_id).answer(approval.id, AllowApproval())
            # Sessions it starts itself are its own.
            mine = await approval_agent(runs).start_session()
            assert isinstance(await mine.run("clean up"), Blocked)
        # The first runtime still runs its session.
        await session.turn(blocked.turn_id).answer(approval.id, AllowApproval())
        assert isinstance(await settled(session.turn(blocked.turn_id)), Completed)
    assert runs == ["/tmp/x"]


async def test_a_closed_runtime_releases_its_sessions(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    runs: list[str] = []
    async with agentlib.open_runtime(SQLiteStore(path)):
        async with agentlib.open_runtime(SQLiteStore(path)):
            session = await approval_agent(runs).start_session()
            blocked = await session.run("clean up")
        # The inner runtime closed: its lease is gone, though 30 s have not passed.
        turn = approval_agent(runs).session(session.id).turn(blocked.turn_id)
        assert await turn.get() == blocked


async def test_a_dead_owners_session_is_taken_over_once_its_lease_expired(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    runs: list[str] = []
    async with agentlib.open_runtime(SQLiteStore(str(path))):
        session = await approval_agent(runs).start_session()
        blocked = await session.run("clean up")
        approval = only_callback(blocked, OpenApproval)
    # A process that died while holding it: its lease is still there, for 30 s more.
    now = 1_000_000.0
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE sessions SET lease_owner = 'dead', lease_until = ?", (now + 30,))
    db.close()

    class Clock:
        now = 1_000_000.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    async with agentlib.open_runtime(SQLiteStore(str(path), clock=clock)):
        turn = approval_agent(runs).session(session.id).turn(blocked.turn_id)
        with pytest.raises(SessionBusyError, match="dead"):
            await turn.get()
        clock.now += 29
        with pytest.raises(SessionBusyError):
            await turn.get()
        clock.now += 2  # the dead owner's lease expired
        assert await turn.get() == blocked
        await turn.answer(approval.id, AllowApproval())
        record = await settled(turn)
    assert isinstance(record, Completed)
    assert record.text == "done: deleted /tmp/x"
    assert runs == ["/tmp/x"]


async def test_a_stalled_runtime_lets_go_of_a_session_taken_over(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """Runtime 1 holds a blocked turn; runtime 2, whose wall clock is past runtime 1's lease,
    takes the session over. Runtime 1's next renewal (on trio's clock, which autojumps) is
    refused: it lets the session go, and its own references find it busy.

    trio's clock jumps once every task has waited 50 ms (real) for something: a task waiting
    on a SQLite worker thread counts as waiting, so the clock may jump while a commit is
    under way. The waits are bounded on the wall clock (``fail_after_real``), which no jump
    reaches."""
    mock_clock.autojump_threshold = 0.05
    path = str(tmp_path / "s.db")
    runs: list[str] = []

    class Clock:
        now = time.time()

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    async with agentlib.open_runtime(SQLiteStore(path), lease_seconds=30):
        session = await approval_agent(runs).start_session()
        blocked = await session.run("clean up")
        approval = only_callback(blocked, OpenApproval)
        async with agentlib.open_runtime(SQLiteStore(path, clock=clock), lease_seconds=30):
            turn = approval_agent(runs).session(session.id).turn(blocked.turn_id)
            with pytest.raises(SessionBusyError):
                await turn.get()
            clock.now = time.time() + 3600  # runtime 1 stopped renewing an hour ago
            assert await turn.get() == blocked
            # Runtime 1 renews within lease_seconds / 3 and finds the lease taken.
            with fail_after_real(WAIT):
                while True:
                    try:
                        await session.turn(blocked.turn_id).get()
                    except SessionBusyError:
                        break
                    await trio.sleep(5)
            await turn.answer(approval.id, AllowApproval())
            with fail_after_real(WAIT):
                record = await turn.result()
            assert isinstance(record, Completed)
            assert record.text == "done: deleted /tmp/x"
    assert runs == ["/tmp/x"]


async def test_a_stalled_runtime_writes_nothing_to_a_session_taken_over(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """Runtime 2 takes over runtime 1's blocked turn (runtime 1 stopped renewing, as far as
    the wall clock says); before runtime 1's next renewal, a caller answers the approval
    through runtime 1. Its store refuses the write: the answer fails with a StoreError that
    says why, and the tool does not run there. Runtime 2 runs the turn to its end."""
    mock_clock.autojump_threshold = 0.05  # see the test above
    path = str(tmp_path / "s.db")
    runs: list[str] = []

    class Clock:
        now = time.time() + 3600  # runtime 1 stopped renewing an hour ago

        def __call__(self) -> float:
            return self.now

    async with agentlib.open_runtime(SQLiteStore(path), lease_seconds=30):
        session = await approval_agent(runs).start_session()
        blocked = await session.run("clean up")
        approval = only_callback(blocked, OpenApproval)
        async with agentlib.open_runtime(SQLiteStore(path, clock=Clock()), lease_seconds=30):
            turn = approval_agent(runs).session(session.id).turn(blocked.turn_id)
            assert await turn.get() == blocked  # taken over
            with pytest.raises(StoreError, match="now run by another runtime"):
                await session.turn(blocked.turn_id).answer(approval.id, AllowApproval())
            assert runs == []
            await turn.answer(approval.id, AllowApproval())
            with fail_after_real(WAIT):
                record = await turn.result()
            assert isinstance(record, Completed)
            assert record.text == "done: deleted /tmp/x"
    assert runs == ["/tmp/x"]


class SlowRenewal(SQLiteStore):
    """Its first renewal is under way when ``renewing`` is set, and goes on whatever happens
    meanwhile, as one whose worker thread is running would: it waits until the block is
    being left (``leaving``) and the close either waits on it or has released the leases,
    then renews. The store stays open until it has."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.calls = 0
        self.renewing = trio.Event()
        self.renewed = trio.Event()
        self.leaving = trio.Event()
        self.releasing = False
        self.released = trio.Event()

    async def renew(self, session_ids: Any, owner: str, seconds: float) -> list[str]:
        self.calls += 1
        if self.calls != 1:
            return await super().renew(session_ids, owner, seconds)
        self.renewing.set()
        with trio.CancelScope(shield=True):
            await self.leaving.wait()
            await trio.testing.wait_all_tasks_blocked()
            if self.releasing:
                await self.released.wait()
            lost = await super().renew(session_ids, owner, seconds)
        self.renewed.set()
        return lost

    async def release(self, session_ids: Any, owner: str) -> None:
        self.releasing = True
        await super().release(session_ids, owner)
        self.released.set()
        if self.renewing.is_set():
            await self.renewed.wait()


async def test_a_renewal_under_way_at_close_leaves_no_lease_held(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The block exits while a lease renewal is under way: the renewal does not take the lease again
    after the close released it."""
    path = tmp_path / "s.db"
    store = SlowRenewal(str(path))
    agent = Agent("a", model=ScriptedModel(["x"]))
    async with agentlib.open_runtime(store, lease_seconds=3):
        session = await agent.start_session()
        with fail_after_real(WAIT):
            await store.renewing.wait()
        store.leaving.set()
    assert store.calls == 1
    assert lease_owners(path) == [None]
    async with agentlib.open_runtime(f"sqlite:///{path}"):
        assert isinstance(await agent.session(session.id).run("hi"), Completed)


async def test_no_lease_is_left_held_after_a_close_with_fast_renewals(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """With tiny leases, renewals run all the time (the clock jumps while SQLite works); whenever
    the block exits, no session is left leased."""
    agent = Agent("a", model=ScriptedModel(["x"]))
    for attempt in range(5):
        path = tmp_path / f"s{attempt}.db"
        async with agentlib.open_runtime(f"sqlite:///{path}", lease_seconds=0.03):
            for _ in range(3):
                await agent.start_session()
            await trio.sleep(0.05 * (attempt + 1))
        assert lease_owners(path) == [None, None, None]


class LockedOnRenewal(SQLiteStore):
    """Every renewal fails: the database is locked."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.tries: list[float] = []  # when each renewal was tried, on trio's clock
        self._tried = trio.Event()

    async def renew(self, session_ids: Any, owner: str, seconds: float) -> list[str]:
        self.tries.append(trio.current_time())
        self._tried.set()
        self._tried = trio.Event()
        raise sqlite3.OperationalError("database is locked")

    async def tried(self, count: int) -> None:
        """Return once ``count`` renewals have been tried."""
        while len(self.tries) < count:
            await self._tried.wait()


async def test_an_error_renewing_a_lease_does_not_crash_the_runtime(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Renewals that fail (a locked database) are retried later; the runtime, its sessions and its
    block go on.

    The clock may jump while a commit is under way (see ``fail_after_real``): the waits are for the
    renewals themselves, never for a span of time."""
    autojump_clock.autojump_threshold = 0.02  # not a jump (a failed renewal) per poll meanwhile
    store = LockedOnRenewal(str(tmp_path / "s.db"))
    agent = Agent("a", model=ScriptedModel(["x", "y"]))
    async with agentlib.open_runtime(store, lease_seconds=30):  # renewed every 10 s
        session = await agent.start_session()
        with fail_after_real(WAIT):
            await store.tried(2)  # two renewals ran, and failed
            record = await session.run("hi")
            assert isinstance(record, Completed), record
            await store.tried(len(store.tries) + 1)  # and the next one is tried all the same
            assert isinstance(await session.run("again"), Completed)
    gaps = [later - earlier for earlier, later in itertools.pairwise(store.tries)]
    assert gaps == [pytest.approx(10)] * len(gaps)  # each retried a third of a lease later


async def test_a_load_with_an_unknown_agent_leaves_no_lease_held(
    store: StoreFor, tmp_path: Path
) -> None:
    """Opening a session with an agent that did not run it fails, and leaves the session free:
    another runtime opens it at once with the right agent."""
    root = Agent("root", model=ScriptedModel(["x", "y"]))
    async with agentlib.open_runtime(store()):
        session = await root.start_session()
        assert isinstance(await session.run("hi"), Completed)
    async with agentlib.open_runtime(store()):
        other = Agent("other", model=ScriptedModel(["x"]))
        with pytest.raises(SessionNotFoundError):
            await other.session(session.id).subagents()
        if isinstance(store(), str):
            assert lease_owners(tmp_path / "s.db") == [None]
        async with agentlib.open_runtime(store()):
            record = await root.session(session.id).run("again", timeout=WAIT)
            assert isinstance(record, Completed), record


async def test_concurrent_loads_of_a_session_another_runtime_holds_are_both_busy(
    store: StoreFor,
) -> None:
    """Two loads at once of a session another live runtime holds: both get SessionBusyError (not
    some other error of a load that waited on the first); on a shared store, both read it as
    the store has it."""
    agent = Agent("a", model=ScriptedModel(["x"]))
    errors: list[BaseException] = []
    read: list[list[agentlib.Session]] = []
    async with agentlib.open_runtime(store()):
        session = await agent.start_session()
        async with agentlib.open_runtime(store()) as runtime:

            async def load() -> None:
                try:
                    read.append(await agent.session(session.id).subagents())
                except Exception as error:
                    errors.append(error)

            with trio.fail_after(WAIT):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(load)
                    nursery.start_soon(load)
        if runtime.store.shared:
            assert (errors, read) == ([], [[], []])
        else:
            assert [type(error) for error in errors] == [agentlib.LeaseRefused] * 2
        assert isinstance(await session.run("hi", timeout=WAIT), Completed)


# --- 7. schema -----------------------------------------------------------------------------------


async def test_open_runtime_refuses_a_store_of_a_newer_agentlib(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 4")
    db.commit()
    db.close()
    # The documented error itself, not an exception group holding it.
    with pytest.raises(StoreSchemaError, match="newer agentlib"):
        async with agentlib.open_runtime(f"sqlite:///{path}"):
            pass  # pragma: no cover


# --- 8. agentlib_sync with AGENTLIB_STORE ---------------------------------------------------------

_SYNC_AGENT = '''
import json, sys
import agentlib_sync as agents

RUNS = sys.argv[1]

@agents.tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    with open(RUNS, "a") as runs:
        runs.write(path + "\\n")
    return f"deleted {path}"

def finish(request):
    return "done: " + request.entries[-1].text

agent = agents.Agent(
    "approver",
    model=agents.ScriptedModel(
        [agents.ModelReply(tool_calls=[agents.ToolCallRequest(name="delete",
                                                              arguments={"path": "/tmp/x"})]),
         finish]
    ),
    tools=[delete],
)
'''

_SYNC_FIRST = """
session = agent.start_session()
record = session.run("clean up")
assert isinstance(record, agents.Blocked), record
(callback,) = record.callbacks
print(json.dumps({"session": session.id, "turn": record.turn_id, "callback": callback.id}))
"""

_SYNC_SECOND = """
ids = json.loads(sys.argv[2])
turn = agent.session(ids["session"]).turn(ids["turn"])
answered = turn.answer(ids["callback"], agents.AllowApproval())
assert isinstance(answered, agents.Answered), answered
record = turn.result(timeout=30)
print(json.dumps({"type": type(record).__name__, "text": getattr(record, "text", None)}))
"""


def _run_sync(script: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_agentlib_sync_resumes_a_blocked_turn_in_another_process(tmp_path: Path) -> None:
    runs = tmp_path / "runs.txt"
    runs.touch()
    first = tmp_path / "first.py"
    second = tmp_path / "second.py"
    first.write_text(textwrap.dedent(_SYNC_AGENT) + _SYNC_FIRST)
    second.write_text(textwrap.dedent(_SYNC_AGENT) + _SYNC_SECOND)
    env = {
        **os.environ,
        "AGENTLIB_STORE": f"sqlite:///{tmp_path / 's.db'}",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    ids = _run_sync(first, env, str(runs))
    assert runs.read_text() == ""
    result = json.loads(_run_sync(second, env, str(runs), ids))
    assert result == {"type": "Completed", "text": "done: deleted /tmp/x"}
    assert runs.read_text() == "/tmp/x\n"
