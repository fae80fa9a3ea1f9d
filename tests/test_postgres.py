"""The PostgreSQL store shared by several runtimes (SPEC section 14): readers in one runtime
follow the events another commits; real processes killed, or stalled past their lease, lose
nothing acknowledged and write nothing after their sessions were taken over. The store
contract's suite runs against it in ``test_store_contract.py``."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from _support import (
    Gate,
    approval_agent,
    held_agent,
    held_turn,
    past_refused_writes,
    replies_unkeepable_text,
    turn_events,
)
from conftest import POSTGRES

import agentlib
from agentlib import Completed, ScriptedModel, TurnEnded
from agentlib.store import PostgresStore, open_store


def shared(schema: str, **options: Any) -> PostgresStore:
    return PostgresStore(POSTGRES, schema=schema, **options)


def test_a_postgresql_url_opens_the_postgresql_store() -> None:
    store = open_store("postgresql://someone:pa55word@db.example/sessions")
    assert isinstance(store, PostgresStore)
    assert "pa55word" not in repr(store)
    assert (
        repr(store)
        == "PostgresStore('postgresql://someone@db.example/sessions', schema='agentlib')"
    )


def test_a_postgresql_urls_schema_parameter_names_the_schema_of_its_tables() -> None:
    store = open_store("postgresql://127.0.0.1/test?schema=mine&connect_timeout=5")
    assert isinstance(store, PostgresStore)
    assert store.schema == "mine"
    assert store.conninfo == "postgresql://127.0.0.1/test?connect_timeout=5"
    with pytest.raises(ValueError, match="schema must be a plain name"):
        open_store("postgresql://127.0.0.1/test?schema=drop table")


async def test_a_database_that_does_not_answer_is_a_store_error_without_its_password() -> None:
    store = PostgresStore("postgresql://someone:pa55word@127.0.0.1:1/nowhere")
    with pytest.raises(agentlib.StoreError) as raised:
        async with agentlib.open_runtime(store):
            pass
    assert "127.0.0.1:1/nowhere" in str(raised.value)
    assert "pa55word" not in str(raised.value)


async def test_a_reader_in_another_runtime_follows_the_events_as_they_are_committed(
    postgres_schema: str,
) -> None:
    agent = agentlib.Agent("echo", model=ScriptedModel(["one", "two", "three"]))
    seen: list[agentlib.Event] = []
    with trio.fail_after(30):  # only catches a hang
        async with agentlib.open_runtime(shared(postgres_schema)):  # the one that runs it
            session = await agent.start_session()
            async with agentlib.open_runtime(shared(postgres_schema)):  # the reader's
                elsewhere = agent.session(session.id)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(three_turns, elsewhere, seen)
                    for text in ("1", "2", "3"):
                        record = await session.run(text)
                        assert isinstance(record, Completed)
            written: list[agentlib.Event] = []
            await three_turns(session, written)
    assert seen == written
    assert [e.record.output for e in seen if isinstance(e, TurnEnded)] == ["one", "two", "three"]


async def three_turns(session: agentlib.Session, into: list[agentlib.Event]) -> None:
    """The session's events from its start, into ``into``, until its third turn ended."""
    async with contextlib.aclosing(session.iter_events()) as events:
        async for event in events:
            into.append(event)
            if sum(isinstance(e, TurnEnded) for e in into) == 3:
                return


async def test_another_runtimes_reader_hears_the_end_of_a_cancelled_session(
    postgres_schema: str,
) -> None:
    gate = Gate()
    with trio.fail_after(30):  # only catches a hang
        async with agentlib.open_runtime(shared(postgres_schema)):
            session = await held_agent(gate, "done").start_session()
            await held_turn(session, gate)
            async with agentlib.open_runtime(shared(postgres_schema)):
                elsewhere = held_agent(gate).session(session.id)
                async with trio.open_nursery() as nursery:
                    ended = trio.Event()

                    async def read() -> None:
                        async with contextlib.aclosing(elsewhere.iter_events()) as events:
                            async for _ in events:
                                pass
                        ended.set()

                    nursery.start_soon(read)
                    await session.cancel()
                    await ended.wait()


#: A runtime process on the test's schema: it starts a session of ``agent``, starts a turn,
#: and prints their ids once its model is at work; the model answers "late" once a line
#: comes on its input. It prints the name of each error it meets, then "closed".
RUNTIME = textwrap.dedent(
    """
    import sys

    import trio

    import agentlib
    from agentlib.store import PostgresStore

    url, schema, lease = sys.argv[1], sys.argv[2], float(sys.argv[3])
    at_work = trio.Event()


    async def model(request):
        at_work.set()
        await trio.to_thread.run_sync(sys.stdin.readline)
        return "late"


    agent = agentlib.Agent("worker", model=agentlib.FunctionModel(model))


    async def main():
        try:
            async with agentlib.open_runtime(
                PostgresStore(url, schema=schema), lease_seconds=lease
            ):
                session = await agent.start_session()
                turn = await session.start_turn("go")
                await at_work.wait()
                print(session.id, turn.id, flush=True)
                try:
                    print("record", type(await turn.result()).__name__, flush=True)
                except Exception as error:
                    print("raised", type(error).__name__, flush=True)
                    print(repr(error), file=sys.stderr)
        except BaseException as error:
            print("raised", type(error).__name__, flush=True)
        print("closed", flush=True)


    trio.run(main)
    """
)


@contextlib.contextmanager
def runtime_process(schema: str, lease: float = 30.0) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-c", RUNTIME, POSTGRES, schema, str(lease)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=60)


def worker() -> agentlib.Agent:
    return agentlib.Agent("worker", model=ScriptedModel(["after"]))


async def test_a_runtime_killed_mid_turn_leaves_it_unknown_and_its_session_to_another(
    postgres_schema: str,
) -> None:
    with runtime_process(postgres_schema) as process:
        assert process.stdout is not None
        session_id, turn_id = process.stdout.readline().split()
        process.send_signal(signal.SIGKILL)  # mid-turn: its model is at work
        process.wait(timeout=60)
    with trio.fail_after(30):  # only catches a hang
        # Its lease is taken at once: its holder, a process of this host, has ended.
        async with agentlib.open_runtime(shared(postgres_schema)):
            session = worker().session(session_id)
            killed = await session.turn(turn_id).get()
            record = await session.run("again")
    assert isinstance(killed, agentlib.UnknownOutcome)
    assert isinstance(record, Completed)
    assert record.output == "after"


async def test_a_runtime_stalled_past_its_lease_writes_nothing_once_taken_over(
    postgres_schema: str,
) -> None:
    # The taker's clock is a minute ahead: the stalled runtime's 30-second lease has expired
    # for it, without the test waiting for it in real time.
    ahead = shared(postgres_schema, clock=lambda: time.time() + 60)
    with runtime_process(postgres_schema, lease=30.0) as process:
        assert process.stdout is not None
        assert process.stdin is not None
        session_id, turn_id = process.stdout.readline().split()
        process.send_signal(signal.SIGSTOP)
        with trio.fail_after(30):  # only catches a hang
            async with agentlib.open_runtime(ahead):
                session = worker().session(session_id)
                taken = await session.turn(turn_id).get()  # taken over: it was running
                process.send_signal(signal.SIGCONT)
                process.stdin.write("answer now\n")  # its model answers "late": a write
                process.stdin.flush()
                said = [process.stdout.readline().strip() for _ in range(2)]
                record = await session.run("again")
                async with contextlib.aclosing(session.iter_events()) as events:
                    texts = []
                    async for event in events:
                        texts.append(repr(event))
                        if isinstance(event, TurnEnded) and event.turn_id == record.turn_id:
                            break
    assert isinstance(taken, agentlib.UnknownOutcome)
    assert said == ["raised LeaseLost", "closed"]
    assert isinstance(record, Completed)
    assert not any("late" in text for text in texts)  # its late answer was never written


SERVED = '''
import agentlib


@agentlib.tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


CALL = agentlib.ToolCallRequest(name="delete", arguments={"path": "a.txt"})
janitor = agentlib.Agent(
    "janitor",
    model=agentlib.FunctionModel(
        lambda request: "Done." if request.entries[-1].type == "tool_result"
        else agentlib.ModelReply(tool_calls=[CALL])
    ),
    tools=[delete],
)
'''


@contextlib.contextmanager
def served(directory: Path, store: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``agentlib serve`` of SERVED's janitor on ``store``, on a free port: it and its URL."""
    (directory / "served.py").write_text(SERVED)
    process = subprocess.Popen(
        [sys.executable, "-m", "agentlib", "serve", "served:janitor", "--port", "0",
         "--store", store],
        cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert " on http://" in line, line
        yield process, line.split(" on ")[1].split("/v1")[0]
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=60)


async def test_a_client_whose_server_dies_goes_on_with_the_session_through_another(
    postgres_schema: str, tmp_path: Path
) -> None:
    store = f"{POSTGRES}?schema={postgres_schema}"
    with served(tmp_path, store) as (first, one), served(tmp_path, store) as (_, other):
        remote = agentlib.Agent.load_from([one, other], "janitor")
        with trio.fail_after(60):  # only catches a hang
            session = await remote.start_session()
            record = await session.run("Clean up.")  # through the first server
            assert isinstance(record, agentlib.Blocked)
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=60)
            turn = session.turn(record.turn_id)
            answered = await turn.answer(record.callbacks[0].id, agentlib.AllowApproval())
            final = await turn.result()
    assert isinstance(answered, agentlib.Answered)
    assert isinstance(final, Completed)
    assert final.output == "Done."
    assert session == agentlib.Agent.load_from(one, "janitor").session(session.id)


async def test_an_answer_through_another_runtime_is_claimed_and_the_holder_goes_on(
    postgres_schema: str,
) -> None:
    runs: list[str] = []
    agent = approval_agent(runs)
    seen: list[agentlib.Event] = []
    with trio.fail_after(30):  # only catches a hang
        async with agentlib.open_runtime(shared(postgres_schema)):  # holds the session
            session = await agent.start_session()
            blocked = await session.run("clean up")
            assert isinstance(blocked, agentlib.Blocked)
            async with agentlib.open_runtime(shared(postgres_schema)):  # another runtime
                elsewhere = agent.session(session.id)
                turn = elsewhere.turn(blocked.turn_id)
                callback = blocked.callbacks[0]
                answered = await turn.answer(callback.id, agentlib.AllowApproval())
                again = await turn.answer(callback.id, agentlib.DenyApproval(reason="late"))
                final = await session.turn(blocked.turn_id).result(after=blocked)
                async with contextlib.aclosing(elsewhere.iter_events(after=blocked)) as events:
                    async for event in events:
                        seen.append(event)
                        if isinstance(event, TurnEnded):
                            break
    assert answered == agentlib.Answered(answer=agentlib.AllowApproval(), session_id=session.id)
    assert again == agentlib.AlreadySettled(session_id=session.id)
    assert isinstance(final, Completed)
    assert runs == ["/tmp/x"]
    closed = [event for event in seen if isinstance(event, agentlib.CallbackClosed)]
    assert [(event.callback_id, event.answer) for event in closed] == [
        (callback.id, agentlib.AllowApproval())
    ]


@pytest.mark.parametrize("allow_here", [True, False])
async def test_concurrent_answers_through_two_runtimes_take_one(
    postgres_schema: str, allow_here: bool
) -> None:
    runs: list[str] = []
    agent = approval_agent(runs)
    allow, deny = agentlib.AllowApproval(), agentlib.DenyApproval(reason="no")
    told: dict[str, Any] = {}
    with trio.fail_after(30):  # only catches a hang
        async with agentlib.open_runtime(shared(postgres_schema)):
            session = await agent.start_session()
            blocked = await session.run("clean up")
            assert isinstance(blocked, agentlib.Blocked)
            callback_id = blocked.callbacks[0].id
            async with agentlib.open_runtime(shared(postgres_schema)):
                here = session.turn(blocked.turn_id)
                there = agent.session(session.id).turn(blocked.turn_id)

                async def answer(name: str, turn: agentlib.Turn, value: Any) -> None:
                    told[name] = await turn.answer(callback_id, value)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(answer, "here", here, allow if allow_here else deny)
                    nursery.start_soon(answer, "there", there, deny if allow_here else allow)
                final = await here.result(after=blocked)
    taken = [value for value in told.values() if isinstance(value, agentlib.Answered)]
    assert taken, told
    assert all(value == taken[0] for value in taken)  # each told the one answer taken
    assert isinstance(final, Completed)
    assert runs == (["/tmp/x"] if taken[0].answer == allow else [])


#: A runtime process taking commands, one a line: ``start`` (a session of SERVED's janitor,
#: run until it is blocked: prints the session's, turn's and callback's ids),
#: ``answer S T C`` (allow it, through this runtime: prints what it was told), ``read S T``
#: (the session's events until the turn ended: prints their types), ``quit``.
COMMANDED = SERVED + textwrap.dedent(
    """
    import contextlib
    import sys

    import trio

    from agentlib.store import PostgresStore

    url, schema = sys.argv[1], sys.argv[2]
    agent = janitor


    async def main():
        async with agentlib.open_runtime(PostgresStore(url, schema=schema)):
            while True:
                command = (await trio.to_thread.run_sync(sys.stdin.readline)).split()
                if not command or command[0] == "quit":
                    return
                if command[0] == "start":
                    session = await agent.start_session()
                    record = await session.run("clean up")
                    print(session.id, record.turn_id, record.callbacks[0].id, flush=True)
                elif command[0] == "answer":
                    session_id, turn_id, callback_id = command[1:]
                    turn = agent.session(session_id).turn(turn_id)
                    told = await turn.answer(callback_id, agentlib.AllowApproval())
                    print(type(told).__name__, flush=True)
                elif command[0] == "read":
                    session_id, turn_id = command[1:]
                    kinds = []
                    events = agent.session(session_id).iter_events()
                    async with contextlib.aclosing(events) as events:
                        async for event in events:
                            kinds.append(event.type)
                            if event.type == "turn_ended" and event.turn_id == turn_id:
                                kinds.append(type(event.record).__name__)
                                break
                    print(" ".join(kinds), flush=True)


    trio.run(main)
    """
)


def test_three_runtime_processes_start_answer_and_read_each_others_sessions(
    postgres_schema: str,
) -> None:
    command = [sys.executable, "-c", COMMANDED, POSTGRES, postgres_schema]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    processes = [subprocess.Popen(command, text=True, **pipes) for _ in range(3)]

    def ask(index: int, command: str) -> str:
        process = processes[index]
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write(command + "\n")
        process.stdin.flush()
        return process.stdout.readline().strip()

    try:
        started = [ask(index, "start").split() for index in range(3)]  # each holds its own
        told = [ask((index + 1) % 3, "answer " + " ".join(started[index])) for index in range(3)]
        read = [ask((index + 2) % 3, "read " + " ".join(started[index][:2])) for index in range(3)]
        for index in range(3):
            ask(index, "quit")
    finally:
        errors = []
        for process in processes:
            if process.poll() is None:
                process.kill()
            errors.append(process.communicate(timeout=60)[1])
    assert told == ["Answered"] * 3, errors
    for kinds in read:
        assert kinds.split()[-3:] == ["entry_completed", "turn_ended", "Completed"], errors
        assert "callback_closed" in kinds.split()


async def test_a_runtime_on_postgresql_leases_for_10_seconds_unless_told(
    postgres_schema: str,
) -> None:
    agent = agentlib.Agent("echo", model=ScriptedModel(["one"]))
    stopped = shared(postgres_schema, clock=lambda: 1000.0)  # leases measured on a still clock
    with trio.fail_after(30):  # only catches a hang
        async with agentlib.open_runtime(stopped):
            session = await agent.start_session()
            other = shared(postgres_schema, clock=lambda: 1000.0)
            async with agentlib.open_runtime(other):
                with pytest.raises(agentlib.LeaseRefused) as refused:
                    await other.acquire([session.id], "another owner", 10.0)
    assert refused.value.until == 1010.0


async def test_another_runtime_reads_a_turns_record_and_waits_for_its_end(
    postgres_schema: str,
) -> None:
    runs: list[str] = []
    agent = approval_agent(runs)
    with trio.fail_after(30):  # only catches a hang
        async with agentlib.open_runtime(shared(postgres_schema)):  # holds the session
            session = await agent.start_session()
            blocked = await session.run("clean up")
            assert isinstance(blocked, agentlib.Blocked)
            async with agentlib.open_runtime(shared(postgres_schema)):
                turn = agent.session(session.id).turn(blocked.turn_id)
                read = await turn.get()
                waited = await turn.result(timeout=0.2)  # blocked on a callback it knew
                async with trio.open_nursery() as nursery:
                    ended: list[agentlib.TurnState[Any]] = []

                    async def wait() -> None:
                        ended.append(await turn.result(after=blocked))

                    nursery.start_soon(wait)
                    callback = blocked.callbacks[0]
                    await session.turn(blocked.turn_id).answer(
                        callback.id, agentlib.AllowApproval()
                    )
                with pytest.raises(agentlib.TurnNotFoundError):
                    await agent.session(session.id).turn("no-such-turn").get()
    assert read == blocked
    assert waited == blocked
    (final,) = ended
    assert isinstance(final, Completed)
    assert runs == ["/tmp/x"]


async def test_another_runtimes_wait_runs_its_approval_handler(postgres_schema: str) -> None:
    runs: list[str] = []
    agent = approval_agent(runs)
    seen: list[agentlib.OpenApproval] = []

    def approve(callback: agentlib.OpenApproval) -> agentlib.AllowApproval:
        seen.append(callback)
        return agentlib.AllowApproval()

    with trio.fail_after(30):  # only catches a hang
        async with agentlib.open_runtime(shared(postgres_schema)):
            session = await agent.start_session()
            turn = await session.start_turn("clean up")
            assert isinstance(turn, agentlib.Turn)
            async with agentlib.open_runtime(shared(postgres_schema)):
                elsewhere = agent.session(session.id, on_approval=approve).turn(turn.id)
                final = await elsewhere.result()
    assert isinstance(final, Completed)
    assert [callback.tool_name for callback in seen] == ["delete"]
    assert runs == ["/tmp/x"]


async def test_two_waits_through_another_runtime_share_one_handler_run(
    postgres_schema: str,
) -> None:
    runs: list[str] = []
    agent = approval_agent(runs)
    calls: list[str] = []
    opened: list[agentlib.Event] = []
    both_saw_it = trio.Event()

    def saw(event: agentlib.Event) -> None:
        # Each wait hands the callback to its handler as soon as this returns.
        if isinstance(event, agentlib.CallbackOpened):
            opened.append(event)
            if len(opened) == 2:
                both_saw_it.set()

    async def approve(callback: agentlib.OpenApproval) -> agentlib.AllowApproval:
        calls.append(callback.id)
        await both_saw_it.wait()
        return agentlib.AllowApproval()

    finals: list[agentlib.TurnState[Any]] = []
    with trio.fail_after(30):  # only catches a hang
        async with agentlib.open_runtime(shared(postgres_schema)):
            session = await agent.start_session()
            blocked = await session.run("clean up")
            assert isinstance(blocked, agentlib.Blocked)
            async with agentlib.open_runtime(shared(postgres_schema)):
                elsewhere = agent.session(session.id, on_approval=approve).turn(blocked.turn_id)

                async def wait() -> None:
                    finals.append(await elsewhere.result(on_event=saw))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(wait)
                    nursery.start_soon(wait)
    assert calls == [blocked.callbacks[0].id]  # one run, shared by both waits
    assert [type(final) for final in finals] == [Completed, Completed]
    assert runs == ["/tmp/x"]


async def test_concurrent_answers_through_another_runtime_are_each_told_the_one_taken(
    postgres_schema: str,
) -> None:
    runs: list[str] = []
    agent = approval_agent(runs)
    offers = [agentlib.AllowApproval(), agentlib.DenyApproval(reason="no")] * 3
    told: list[Any] = []
    with trio.fail_after(30):  # only catches a hang
        async with agentlib.open_runtime(shared(postgres_schema)):
            session = await agent.start_session()
            blocked = await session.run("clean up")
            assert isinstance(blocked, agentlib.Blocked)
            async with agentlib.open_runtime(shared(postgres_schema)):
                elsewhere = agent.session(session.id).turn(blocked.turn_id)

                async def offer(value: Any) -> None:
                    told.append(await elsewhere.answer(blocked.callbacks[0].id, value))

                async with trio.open_nursery() as nursery:
                    for value in offers:
                        nursery.start_soon(offer, value)
            final = await session.turn(blocked.turn_id).result(after=blocked)
    assert all(isinstance(value, agentlib.Answered) for value in told), told
    assert len({value.answer for value in told}) == 1  # the answer taken, told to each
    assert isinstance(final, Completed)


async def test_concurrent_answers_through_the_holder_take_one(postgres_schema: str) -> None:
    runs: list[str] = []
    agent = approval_agent(runs)
    offers = [agentlib.AllowApproval(), agentlib.DenyApproval(reason="no")] * 5
    told: list[Any] = []
    with trio.fail_after(30):  # only catches a hang
        async with agentlib.open_runtime(shared(postgres_schema)):
            session = await agent.start_session()
            blocked = await session.run("clean up")
            assert isinstance(blocked, agentlib.Blocked)
            turn = session.turn(blocked.turn_id)

            async def offer(value: Any) -> None:
                told.append(await turn.answer(blocked.callbacks[0].id, value))

            async with trio.open_nursery() as nursery:
                for value in offers:
                    nursery.start_soon(offer, value)
            final = await turn.result(after=blocked)
            events = [e async for e in turn.iter_events() if isinstance(e, agentlib.CallbackClosed)]
    (closed,) = events
    taken = [value for value in told if isinstance(value, agentlib.Answered)]
    assert taken
    assert all(value.answer == closed.answer for value in taken)
    assert len(taken) + sum(isinstance(v, agentlib.AlreadySettled) for v in told) == len(offers)
    assert isinstance(final, Completed)
    assert runs == (["/tmp/x"] if closed.answer == agentlib.AllowApproval() else [])


async def test_another_runtime_changes_a_session_through_the_runtime_that_holds_it(
    postgres_schema: str,
) -> None:
    gate = Gate()
    agent = held_agent(gate, "answer")
    seen: list[agentlib.Event] = []
    with trio.fail_after(60):  # only catches a hang
        async with agentlib.open_runtime(shared(postgres_schema)):  # holds the session
            session = await agent.start_session()
            async with agentlib.open_runtime(shared(postgres_schema)):  # another runtime
                elsewhere = agent.session(session.id)
                turn = await elsewhere.start_turn("go")
                assert isinstance(turn, agentlib.Turn)
                await gate.reached.wait()  # it runs in the runtime that holds the session
                busy = await elsewhere.start_turn("another")
                steered = await elsewhere.turn(turn.id).steer("and this")
                sent = await elsewhere.send_message("and that")
                interrupted = await elsewhere.turn(turn.id).interrupt()
                again = await elsewhere.turn(turn.id).interrupt()
                record = await elsewhere.run("once more", on_event=seen.append)
                await elsewhere.cancel()
                with pytest.raises(agentlib.SessionTerminatedError):
                    await elsewhere.send_message("too late")
            held = [await session.turn(t).get() for t in (turn.id, record.turn_id)]
            held_events = await turn_events(session.turn(record.turn_id))
    assert busy == agentlib.Busy(turn=elsewhere.turn(turn.id))
    assert steered == elsewhere.turn(turn.id)
    assert (sent.id, sent.started) == (turn.id, False)
    assert interrupted == elsewhere.turn(turn.id)
    assert again == agentlib.TurnConflict(turn_id=turn.id)
    assert isinstance(held[0], agentlib.Interrupted)
    assert held[0].cause == "interrupted"
    assert isinstance(record, Completed)
    assert record.output == "answer"
    assert held[1] == record
    assert seen == held_events
    steers = [e.entry.text for e in held_events if isinstance(e, agentlib.EntryCompleted)]
    assert steers[0] == "once more"


async def test_a_turns_events_and_pages_are_read_through_another_runtime(
    postgres_schema: str,
) -> None:
    agent = agentlib.Agent("echo", model=ScriptedModel(["one", "two"]))
    with trio.fail_after(30):  # only catches a hang
        async with agentlib.open_runtime(shared(postgres_schema)):
            session = await agent.start_session()
            first = await session.run("a")
            second = await session.run("b")
            async with agentlib.open_runtime(shared(postgres_schema)):
                elsewhere = agent.session(session.id)
                read = await turn_events(elsewhere.turn(second.turn_id))
                after_first = await turn_events(elsewhere.turn(first.turn_id), first)
                children = await elsewhere.subagents()
            here = await turn_events(session.turn(second.turn_id))
    assert read == here
    assert after_first == []
    assert children == []


async def test_a_client_of_another_server_runs_turns_of_a_session_the_first_holds(
    postgres_schema: str, tmp_path: Path
) -> None:
    store = f"{POSTGRES}?schema={postgres_schema}"
    seen: list[agentlib.Event] = []
    with served(tmp_path, store) as (_, one), served(tmp_path, store) as (_, other):
        with trio.fail_after(60):  # only catches a hang
            session = await agentlib.Agent.load_from(one, "janitor").start_session()
            elsewhere = agentlib.Agent.load_from(other, "janitor").session(session.id)
            blocked = await elsewhere.run("Clean up.")  # the first server runs it
            assert isinstance(blocked, agentlib.Blocked)
            turn = elsewhere.turn(blocked.turn_id)
            await turn.answer(blocked.callbacks[0].id, agentlib.AllowApproval())
            final = await turn.result(on_event=seen.append)
            streamed = await turn_events(turn)
            held = await turn_events(session.turn(blocked.turn_id))
    assert isinstance(final, Completed)
    assert final.output == "Done."
    assert seen == streamed == held


class Ahead(PostgresStore):
    """A store whose clock jumps a minute ahead once it has done ``after`` (a method's
    name): from then on, the leases of a holder that stalled have expired, for it, without
    waiting for them."""

    ahead = 0.0

    def __init__(self, schema: str, after: str) -> None:
        super().__init__(POSTGRES, schema=schema, clock=lambda: time.time() + self.ahead)
        self.after = after

    def done(self, name: str) -> None:
        if name == self.after:
            self.ahead = 60.0

    async def send_request(self, session_id: str, body: Any) -> int:
        sent = await super().send_request(session_id, body)
        self.done("send_request")
        return sent

    async def wait_for_events(self, session_id: str, after: int) -> Any:
        progress = await super().wait_for_events(session_id, after)
        self.done("wait_for_events")
        return progress


@pytest.mark.slow
async def test_a_request_to_a_holder_that_stalled_is_withdrawn_and_done_by_the_sender(
    postgres_schema: str,
) -> None:
    with runtime_process(postgres_schema, lease=30.0) as process:
        assert process.stdout is not None
        assert process.stdin is not None
        session_id, turn_id = process.stdout.readline().split()
        process.send_signal(signal.SIGSTOP)  # it holds the session, and replies to nothing
        with trio.fail_after(30):  # only catches a hang
            async with agentlib.open_runtime(Ahead(postgres_schema, after="send_request")):
                session = worker().session(session_id)
                record = await session.run("again")  # asked, then taken over
                stalled = await session.turn(turn_id).get()
                process.send_signal(signal.SIGCONT)
                process.stdin.write("answer now\n")
                process.stdin.flush()
                said = [process.stdout.readline().strip() for _ in range(2)]
                started = []
                async with contextlib.aclosing(session.iter_events()) as events:
                    async for event in events:
                        if isinstance(event, agentlib.TurnStarted):
                            started.append(event)
                        if isinstance(event, TurnEnded) and event.turn_id == record.turn_id:
                            break
    assert isinstance(record, Completed)
    assert record.output == "after"
    assert isinstance(stalled, agentlib.UnknownOutcome)
    assert said == ["raised LeaseLost", "closed"]
    assert [event.turn_id for event in started] == [turn_id, record.turn_id]


@pytest.mark.slow
async def test_a_wait_elsewhere_takes_over_a_stalled_holders_blocked_turn_and_ends_it(
    postgres_schema: str, tmp_path: Path
) -> None:
    served_module: dict[str, Any] = {}
    exec(SERVED, served_module)  # the served janitor, here too
    store = f"{POSTGRES}?schema={postgres_schema}"
    with served(tmp_path, store) as (server, url):
        with trio.fail_after(60):  # only catches a hang
            remote = await agentlib.Agent.load_from(url, "janitor").start_session()
            blocked = await remote.run("Clean up.")
            assert isinstance(blocked, agentlib.Blocked)
            server.send_signal(signal.SIGSTOP)  # it holds the session, and does nothing
            ahead = Ahead(postgres_schema, after="wait_for_events")
            async with agentlib.open_runtime(ahead, lease_seconds=1.0):
                turn = served_module["janitor"].session(remote.id).turn(blocked.turn_id)
                await turn.answer(blocked.callbacks[0].id, agentlib.AllowApproval())
                waiting = await turn.get()  # the answer is taken: the holder is to go on
                final = await turn.result()  # taken over once the holder's lease is out
            server.send_signal(signal.SIGCONT)
    assert isinstance(waiting, agentlib.Running)
    assert isinstance(final, Completed)
    assert final.output == "Done."


async def test_a_turn_with_another_output_type_is_refused_through_another_runtime(
    postgres_schema: str,
) -> None:
    agent = agentlib.Agent("echo", model=ScriptedModel(["one"]))
    with trio.fail_after(30):  # only catches a hang
        async with agentlib.open_runtime(shared(postgres_schema)):
            session = await agent.start_session()
            async with agentlib.open_runtime(shared(postgres_schema)):
                with pytest.raises(agentlib.SessionBusyError, match="another output type"):
                    await agent.session(session.id).run("a", output_type=int)
            record = await session.run("a")
    assert isinstance(record, Completed)  # nothing was started elsewhere
    assert record.output == "one"


async def test_a_request_that_waited_too_long_is_refused_not_done(postgres_schema: str) -> None:
    import psycopg

    agent = agentlib.Agent("echo", model=ScriptedModel(["one"]))
    sender = shared(postgres_schema)
    with trio.fail_after(30):  # only catches a hang
        async with agentlib.open_runtime(shared(postgres_schema)):  # holds the session
            session = await agent.start_session()
            async with agentlib.open_runtime(sender):
                with psycopg.connect(POSTGRES, autocommit=True) as db:  # sent 11 minutes ago
                    row = db.execute(
                        f"INSERT INTO {postgres_schema}.requests (session_id, body, made)"
                        " VALUES (%s, %s, now() - interval '11 minutes') RETURNING request_id",
                        (session.id, '{"procedure": "cancel"}'),
                    ).fetchone()
                    assert row is not None
                    sent = int(row[0])
                reply = await sender.wait_for_reply(sent)
                while reply is None:
                    reply = await sender.wait_for_reply(sent)
            record = await session.run("a")
    assert reply["error"]["type"] == "SessionBusyError"
    assert "nothing was done" in reply["error"]["message"]
    assert isinstance(record, Completed)  # not cancelled


async def test_a_turn_whose_text_postgresql_cannot_keep_fails_and_the_runtime_goes_on(
    postgres_schema: str,
) -> None:
    """Text with a lone surrogate reaching the store fails that session with a StoreError
    naming it, not the text; an idempotency key with NUL is refused before anything is
    written; the runtime and its other sessions go on."""
    agent = agentlib.Agent("a", model=agentlib.FunctionModel(replies_unkeepable_text))
    async with agentlib.open_runtime(shared(postgres_schema)):
        odd, other = await agent.start_session(), await agent.start_session()
        with pytest.raises(agentlib.StoreError) as raised, trio.fail_after(30):
            await odd.run("odd")
        assert odd.id in str(raised.value)
        assert "\udc80" not in str(raised.value)
        assert "odd reply" not in str(raised.value)
        with pytest.raises(agentlib.ValidationError) as refused, trio.fail_after(30):
            await other.run("x", idempotency_key="key\x00")
        assert "idempotency_key" in str(refused.value)
        assert "key\x00" not in str(refused.value)
        assert isinstance(await past_refused_writes(lambda: other.run("x")), Completed)
        with trio.fail_after(30):
            assert isinstance(await past_refused_writes(agent.start_session), agentlib.Session)


@pytest.mark.parametrize("odd", ["a\x00b", "\ud800"], ids=["nul", "surrogate"])
async def test_a_session_id_postgresql_cannot_hold_is_not_found(
    postgres_schema: str, odd: str
) -> None:
    """A session id with NUL or a lone surrogate is no session's: SessionNotFoundError (a 404
    over HTTP), not a StoreError; the store goes on."""
    agent = agentlib.Agent("a", model=ScriptedModel(["done"]))
    async with agentlib.open_runtime(shared(postgres_schema)) as runtime:
        with pytest.raises(agentlib.SessionNotFoundError):
            await agent.session(odd).run("hi")
        with pytest.raises(agentlib.SessionNotFoundError):
            async for _ in agent.session(odd).iter_events():
                pass
        runtime.store.check()
        session = await agent.start_session()
        assert isinstance(await session.run("hi"), Completed)


def named(schema: str) -> PostgresStore:
    """A store whose connections name themselves ``schema`` (their application_name)."""
    joiner = "&" if "?" in POSTGRES else "?"
    return PostgresStore(f"{POSTGRES}{joiner}application_name={schema}", schema=schema)


def terminate_backends(schema: str) -> int:
    """End the database's sessions of the connections named ``schema`` (as a restart of
    PostgreSQL, a failover or an administrator does): how many."""
    import psycopg

    with psycopg.connect(POSTGRES, autocommit=True) as db:
        ended = db.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s",
            (schema,),
        ).fetchone()
    return int(ended[0]) if ended else 0


@pytest.mark.slow
async def test_turns_go_on_after_the_databases_sessions_of_the_store_are_ended(
    postgres_schema: str,
) -> None:
    """The connections the store holds are ended under it: what it commits next is committed
    on new ones, never a failed store; every turn completes."""
    agent = agentlib.Agent("a", model=ScriptedModel(["done"] * 20))
    async with agentlib.open_runtime(named(postgres_schema)) as runtime:
        sessions = [await agent.start_session() for _ in range(4)]
        for session in sessions:
            assert isinstance(await session.run("hi"), Completed)
        for _ in range(3):
            assert terminate_backends(postgres_schema) > 0
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    for session in sessions:
                        nursery.start_soon(run_completes, session)
        runtime.store.check()


def waiting_for_a_lock(schema: str, other_than: int) -> int | None:
    """The pid of a database session of the connections named ``schema`` that waits for a
    lock, other than ``other_than``; None if none does."""
    import psycopg

    with psycopg.connect(POSTGRES, autocommit=True) as db:
        row = db.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE application_name = %s AND wait_event_type = 'Lock' AND pid <> %s",
            (schema, other_than),
        ).fetchone()
    return None if row is None else int(row[0])


async def a_read_waits_for_a_lock(schema: str, other_than: int = 0) -> int:
    """The pid of the database session of a read of the store named ``schema`` once it waits
    for a lock. The database's own view of its sessions is read until it shows one: nothing
    tells of it otherwise."""
    with trio.fail_after(30):  # only catches a hang
        while (
            pid := await trio.to_thread.run_sync(waiting_for_a_lock, schema, other_than)
        ) is None:
            await trio.sleep(0.01)
    return pid


async def test_a_read_whose_connection_the_database_ends_under_it_is_read_again(
    postgres_schema: str,
) -> None:
    """The database ends the connection a read of the store is using, after the pool checked
    it: the read runs again on another connection and answers, rather than failing with
    "server closed the connection unexpectedly"."""
    import psycopg

    agent = agentlib.Agent("a", model=ScriptedModel(["done"]))
    async with agentlib.open_runtime(named(postgres_schema)) as runtime:
        session = await agent.start_session()
        assert isinstance(await session.run("hi"), Completed)
        store = runtime.store
        events = await store.read_events(session.id, 0, 100)
        read: list[list[agentlib.Event]] = []

        async def read_events() -> None:
            read.append(await store.read_events(session.id, 0, 100))

        with psycopg.connect(POSTGRES) as locker:  # holds the events table until rolled back
            locker.execute(f"LOCK TABLE {postgres_schema}.events IN ACCESS EXCLUSIVE MODE")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_events)
                first = await a_read_waits_for_a_lock(postgres_schema)
                assert terminate_backends(postgres_schema) > 0
                # Read again, on another connection: it waits for the table in turn.
                assert await a_read_waits_for_a_lock(postgres_schema, other_than=first) != first
                locker.rollback()
        assert read == [events]
        assert [event.type for event in events][-1] == "turn_ended"
        runtime.store.check()


async def run_completes(session: agentlib.Session) -> None:
    record = await session.run("again")
    assert isinstance(record, Completed), record


@pytest.mark.slow
async def test_tens_of_remote_clients_lose_no_turn_while_the_servers_connections_are_ended(
    postgres_schema: str,
) -> None:
    """30 remote clients run turns on one server while the database ends its connections
    again and again (every 15 turns done): every turn completes, none fails or reads
    UnknownOutcome."""
    agent = agentlib.Agent("calc", model=agentlib.FunctionModel(lambda _: "done"))
    records: list[agentlib.TurnState[Any]] = []
    done = trio.Condition()
    async with agentlib.serve([agent], store=named(postgres_schema), port=0) as server:
        remote = agentlib.Agent.load_from(server.url, "calc")

        async def client() -> None:
            session = await remote.start_session()
            for _ in range(6):
                records.append(await session.run("add"))
                async with done:
                    done.notify_all()

        async def end_connections() -> None:
            ended = 0
            while len(records) < 30 * 6:
                async with done:
                    await done.wait()
                if len(records) >= 15 * (ended + 1):
                    ended += 1
                    await trio.to_thread.run_sync(terminate_backends, postgres_schema)

        with trio.fail_after(120):  # only catches a hang
            async with trio.open_nursery() as nursery:
                nursery.start_soon(end_connections)
                async with trio.open_nursery() as clients:
                    for _ in range(30):
                        clients.start_soon(client)
    assert len(records) == 30 * 6
    assert all(isinstance(record, Completed) for record in records), {
        type(record).__name__ for record in records
    }
