"""Where blocking calls may be made: any thread but the engine's, inside any event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trio

import agentlib_sync as agents
from agentlib._trio import _threads as threads_module

from ._support import WAIT, Gate, add, call_tool, in_thread, scripted_agent

FACADE_DIR = os.path.dirname(agents.__file__)


# -- inside other event loops -------------------------------------------------------------


def test_blocking_calls_work_inside_a_running_asyncio_loop() -> None:
    agent = scripted_agent(call_tool("add", a=1, b=2), "3", tools=[add])

    async def notebook_cell() -> tuple[Any, list[agents.Event]]:
        asyncio.get_running_loop()  # a loop is running here, as in Jupyter
        session = agent.start_session()
        record = session.run("1 + 2?")
        return record, list(session.turn(record.turn_id).iter_events())

    record, events = asyncio.run(notebook_cell())

    assert isinstance(record, agents.Completed)
    assert record.output == "3"
    assert isinstance(events[-1], agents.TurnEnded)


def test_blocking_calls_work_inside_another_trio_program() -> None:
    agent = scripted_agent(call_tool("add", a=2, b=2), "4", tools=[add])

    async def main() -> tuple[Any, list[agents.Event]]:
        await trio.lowlevel.checkpoint()  # a trio run of our own
        session = agent.start_session()
        record = session.run("2 + 2?")
        return record, list(session.turn(record.turn_id).iter_events())

    record, events = trio.run(main)

    assert isinstance(record, agents.Completed)
    assert record.output == "4"
    assert isinstance(events[-1], agents.TurnEnded)


# -- the engine's own thread --------------------------------------------------------------


def assert_explains_engine_thread(error: BaseException) -> None:
    message = str(error)
    assert "engine" in message
    assert "await" in message


def test_a_call_from_an_on_event_handler_raises_runtime_error() -> None:
    session = scripted_agent("done").start_session()
    errors: list[BaseException] = []
    handler_threads: set[threading.Thread] = set()

    def handler(event: agents.Event) -> None:
        handler_threads.add(threading.current_thread())
        if isinstance(event, agents.TurnStarted):
            try:
                session.turn(event.turn_id).get()
            except RuntimeError as error:
                errors.append(error)

    record = in_thread(lambda: session.run("hi", on_event=handler))

    assert isinstance(record, agents.Completed)
    assert len(errors) == 1
    assert_explains_engine_thread(errors[0])
    assert threading.current_thread() not in handler_threads


def test_a_call_from_an_async_tool_raises_runtime_error() -> None:
    errors: list[BaseException] = []
    sessions: list[agents.Session] = []

    async def peek() -> str:
        """Look at the session through the blocking facade."""
        try:
            sessions[0].subagents()
        except RuntimeError as error:
            errors.append(error)
            return "refused"
        return "allowed"

    session = scripted_agent(call_tool("peek"), "done", tools=[peek]).start_session()
    sessions.append(session)

    record = in_thread(lambda: session.run("peek"))

    assert isinstance(record, agents.Completed)
    assert len(errors) == 1
    assert_explains_engine_thread(errors[0])


def test_a_sync_tool_runs_in_a_worker_thread_and_may_call_the_facade() -> None:
    inner = scripted_agent("inner answer").start_session()

    def ask_inner() -> str:
        """Ask another session."""
        record = inner.run("hi")
        assert isinstance(record, agents.Completed)
        return record.output

    session = scripted_agent(call_tool("ask_inner"), "done", tools=[ask_inner]).start_session()

    record = in_thread(lambda: session.run("ask"))

    assert isinstance(record, agents.Completed)
    results = [
        event.entry
        for event in session.turn(record.turn_id).iter_events()
        if isinstance(event, agents.EntryCompleted)
        and isinstance(event.entry, agents.ToolResultEntry)
    ]
    assert [(result.text, result.is_error) for result in results] == [("inner answer", False)]


# -- many threads -------------------------------------------------------------------------


def count_up(request: agents.ModelRequest) -> agents.ModelReply:
    number = int(request.entries[0].text)
    return call_tool("add", a=number, b=1)


def answer_with_the_tool_result(request: agents.ModelRequest) -> str:
    return request.entries[-1].text


def test_calls_from_several_threads_at_once_all_succeed() -> None:
    agent = scripted_agent(count_up, answer_with_the_tool_result, tools=[add])
    workers = 20  # more than the engine keeps waiting for calls: some come and go
    barrier = threading.Barrier(workers)

    def job(number: int) -> tuple[agents.Session, Any, list[agents.Event]]:
        barrier.wait(WAIT)
        session = agent.start_session()
        record = session.run(str(number))
        return session, record, list(session.turn(record.turn_id).iter_events())

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(job, number) for number in range(workers)]
        outcomes = [future.result(timeout=WAIT) for future in futures]

    assert [record.output for _, record, _ in outcomes] == [str(n + 1) for n in range(workers)]
    assert len({session for session, _, _ in outcomes}) == workers
    for session, record, events in outcomes:
        assert record.session_id == session.id
        assert {event.session_id for event in events} == {session.id}
        assert isinstance(events[-1], agents.TurnEnded)


# -- the interpreter's lock ---------------------------------------------------------------


class Naps:
    """``time`` as agentlib's threads module sees it, noting the sleeps that let another
    thread have the interpreter's lock; its clock is the real one, or one the test moves."""

    def __init__(self, now: float | None = None) -> None:
        self.now = now
        self.naps: list[float] = []

    def perf_counter(self) -> float:
        return time.perf_counter() if self.now is None else self.now

    def sleep(self, seconds: float) -> None:
        self.naps.append(seconds)
        time.sleep(seconds)

    def __enter__(self) -> Naps:  # the module sees this clock until the block ends
        self._patch = pytest.MonkeyPatch()
        self._patch.setattr(threads_module, "time", self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._patch.undo()


def test_a_busy_engine_lets_other_threads_have_the_interpreters_lock() -> None:
    # A tool that keeps the engine busy for 5 ms, never waiting: the engine lets go of the
    # lock in a way a waiting thread can take it (a sleep of no time) every millisecond.
    naps = Naps()
    steps = 0

    async def busy() -> str:
        nonlocal steps
        until = time.perf_counter() + 0.005
        while time.perf_counter() < until:
            await trio.lowlevel.cancel_shielded_checkpoint()
            steps += 1
        return "done"

    agent = scripted_agent(call_tool("busy"), "ok", tools=[agents.tool(name="busy")(busy)])
    with naps:
        record = agent.start_session().run("go")

    assert isinstance(record, agents.Completed)
    assert set(naps.naps) == {0}
    # About one a millisecond (a few more on a machine that stalls the engine), not a step.
    assert 1 <= len(naps.naps) <= 20 < steps


def test_the_lock_is_let_go_only_after_a_millisecond_of_work_since_the_loop_last_waited() -> None:
    naps = Naps(now=100.0)

    async def main() -> None:
        trio.lowlevel.add_instrument(threads_module.LockSharing())
        for _ in range(3):  # 0.4 ms a step: it lets go after the third
            naps.now += 0.0004
            await trio.lowlevel.cancel_shielded_checkpoint()
        assert naps.naps == [0]
        naps.now += 0.0009
        # The loop has nothing to run for a while: it waits for I/O, which lets go of the
        # lock anyway (the millisecond is what the loop waits, not a wait for a state).
        await trio.sleep(0.001)
        naps.now += 0.0009
        await trio.lowlevel.cancel_shielded_checkpoint()
        assert naps.naps == [0]

    with naps:
        trio.run(main)


def test_the_millisecond_counts_from_when_the_loop_woke_not_from_when_it_went_to_sleep() -> None:
    naps = Naps(now=100.0)

    class Slept(trio.abc.Instrument):
        def after_io_wait(self, timeout: float) -> None:
            if timeout > 0:
                naps.now += 0.005  # the loop slept 5 ms, the lock free meanwhile

    async def main() -> None:
        trio.lowlevel.add_instrument(Slept())
        trio.lowlevel.add_instrument(threads_module.LockSharing())
        await trio.sleep(0.001)
        await trio.lowlevel.cancel_shielded_checkpoint()
        assert naps.naps == []  # no work since it woke: nothing to let go
        naps.now += 0.001
        await trio.lowlevel.cancel_shielded_checkpoint()
        assert naps.naps == [0]

    with naps:
        trio.run(main)


# -- Ctrl-C -------------------------------------------------------------------------------


WAITING_FILES = (FACADE_DIR, threading.__file__, concurrent.futures.__path__[0])


def is_waiting_in_facade(thread_id: int, method: str) -> bool:
    """Whether the thread is inside agentlib_sync's ``method``, waiting (not inside trio)."""
    frame = sys._current_frames().get(thread_id)
    if frame is None or not frame.f_code.co_filename.startswith(WAITING_FILES):
        return False
    while frame is not None:
        code = frame.f_code
        if code.co_name == method and code.co_filename.startswith(FACADE_DIR):
            return True
        frame = frame.f_back
    return False


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in the main thread, as in a terminal, even when the
    suite runs with SIGINT ignored (started in the background by a shell, under ``nohup``,
    on some CI runners); the handler that was there is put back after the test."""
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if previous is not None:  # None: not set from Python, nothing to put back
            signal.signal(signal.SIGINT, previous)


def ctrl_c_during_result(turn: agents.Turn, gate: Gate) -> KeyboardInterrupt:
    """Press Ctrl-C while the main thread waits in ``turn.result()``, the turn held at
    ``gate``; the ``KeyboardInterrupt`` it raised, which ended the wait while the turn was
    still held: the gate opens only for a wait that outlives the press by ``WAIT``."""
    assert threading.current_thread() is threading.main_thread()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    main_id = threading.get_ident()
    waiting = threading.Event()  # set by the engine once the blocked call's task runs
    pressed = threading.Event()
    interrupted = threading.Event()
    released = threading.Event()  # the wait outlived the press: the gate had to open

    def press_ctrl_c() -> None:
        try:
            if not (waiting.wait(WAIT) and gate.reached.wait(WAIT)):
                return
            # A thread blocked on a lock gives no event to wait on: poll its stack.
            deadline = time.monotonic() + WAIT
            while not is_waiting_in_facade(main_id, "result"):
                if time.monotonic() > deadline:
                    return
                time.sleep(0.001)
            pressed.set()
            signal.pthread_kill(main_id, signal.SIGINT)
            interrupted.wait(WAIT)
        finally:
            if not interrupted.is_set() and gate.reached.is_set():
                released.set()
                gate.open()  # never leave the main thread waiting forever: fail instead

    presser = threading.Thread(target=press_ctrl_c, daemon=True)
    presser.start()
    with pytest.raises(KeyboardInterrupt) as raised:
        turn.result(on_event=lambda event: waiting.set())
    interrupted.set()
    presser.join(WAIT)

    assert pressed.is_set(), "the main thread was never seen waiting in turn.result()"
    assert not released.is_set(), "Ctrl-C ended the wait only once the turn was let go"
    return raised.value


@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_interrupts_the_blocking_wait_and_the_turn_goes_on() -> None:
    gate = Gate("finished anyway")
    session = scripted_agent(gate, "next").start_session()
    turn = session.start_turn("a long job")
    assert isinstance(turn, agents.Turn)

    ctrl_c_during_result(turn, gate)

    assert isinstance(turn.get(), agents.Running)
    record = turn.result(on_event=lambda event: gate.open_now())
    assert isinstance(record, agents.Completed)
    assert record.output == "finished anyway"
    assert isinstance(session.run("and the session goes on"), agents.Completed)


@pytest.mark.usefixtures("ctrl_c_raises")
def test_the_ctrl_c_of_a_blocking_wait_notes_the_turn_that_goes_on() -> None:
    gate = Gate("finished anyway")
    session = scripted_agent(gate).start_session()
    turn = session.start_turn("a long job")
    assert isinstance(turn, agents.Turn)

    stop = ctrl_c_during_result(turn, gate)

    notes = getattr(stop, "__notes__", [])
    assert any(turn.id in note and "interrupt()" in note for note in notes), notes
    assert isinstance(turn.result(on_event=lambda event: gate.open_now()), agents.Completed)


# -- interpreter exit ---------------------------------------------------------------------


def run_script(script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a new interpreter; only a script that hangs takes a minute."""
    env = {key: value for key, value in os.environ.items() if key != "AGENTLIB_STORE"}
    try:
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=os.path.dirname(FACADE_DIR),
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"the script hung: {expired.stdout!r} {expired.stderr!r}")


def test_a_script_with_a_turn_parked_forever_exits_once_the_engine_cancelled_it() -> None:
    # Exit handlers run last registered first: the script's own, registered before the
    # engine starts (and registers its close), runs after that close returned.
    done = run_script(
        """
        import atexit
        import threading
        import trio
        import agentlib_sync as agents

        @atexit.register
        def engine_state():
            engines = [t for t in threading.enumerate() if t.name == "agentlib-engine"]
            print("engine running" if engines else "engine stopped", flush=True)

        reached = threading.Event()

        async def park(request):
            reached.set()
            try:
                await trio.sleep_forever()
            finally:
                print("the parked step was cancelled", flush=True)

        agent = agents.Agent(name="parked", model=agents.ScriptedModel([park]))
        session = agent.start_session()
        turn = session.start_turn("wait forever")
        assert reached.wait(30)
        print(type(turn.get()).__name__, flush=True)
        """
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Running",
        "the parked step was cancelled",
        "engine stopped",  # the close did not give up on it after its few seconds
    ]


def test_first_calls_from_several_threads_start_one_engine() -> None:
    done = run_script(
        """
        import threading
        import agentlib_sync as agents

        agent = agents.Agent(name="many", model=agents.ScriptedModel(["ok"]))
        barrier = threading.Barrier(6)
        sessions = []

        def first_call():
            barrier.wait(30)
            sessions.append(agent.start_session())

        threads = [threading.Thread(target=first_call) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(sessions) == 6
        # A reference from an id equals its session only in the same runtime.
        assert all(agent.session(session.id) == session for session in sessions)
        assert all(type(agent.session(s.id).run("hi")).__name__ == "Completed" for s in sessions)
        print("one engine")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "one engine"


def test_a_script_exits_cleanly_with_an_events_iterator_left_open() -> None:
    # The iterator is finalized while the interpreter shuts down, after atexit has closed
    # the engine: closing it must not start a new engine, nor wait for one (the script would
    # hang at exit, or write the error it ignores there to stderr).
    done = run_script(
        """
        import agentlib_sync as agents

        agent = agents.Agent(name="reader", model=agents.ScriptedModel(["hi"]))
        session = agent.start_session()
        session.run("hello")
        events = session.iter_events()
        print(type(next(events)).__name__, flush=True)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["TurnStarted"]
    assert done.stderr == ""
