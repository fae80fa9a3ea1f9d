"""An asyncio agent's own code is asyncio code: its tools and ``pre_tool_call`` hooks that
are coroutine functions (and the tools of its tool sources) run on the loop of the call that
set their turn going, so they may await what that loop holds (a connection pool, an
``asyncio.Event``); sync tools still run in a worker thread."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys
import threading
from typing import Annotated, Any

import pytest

import agentlib.aio as agents

from ._support import WAIT, Gate, call_tool, result_in_engine, run, scripted_agent


def tool_results(request: agents.ModelRequest) -> list[agents.ToolResultEntry]:
    return [entry for entry in request.entries if isinstance(entry, agents.ToolResultEntry)]


def says_tool_result(request: agents.ModelRequest) -> str:
    """A model step that answers with the text of the last tool result it was given."""
    return tool_results(request)[-1].text


class Loops:
    """A coroutine tool, ``lookup``, that notes the loop it runs on and awaits an asyncio
    event of that loop."""

    def __init__(self) -> None:
        self.seen: list[asyncio.AbstractEventLoop] = []

        async def lookup(city: str) -> str:
            """Look the weather up."""
            loop = asyncio.get_running_loop()
            self.seen.append(loop)
            ready = asyncio.Event()
            loop.call_soon(ready.set)
            await ready.wait()  # asyncio's own primitive: this is asyncio code
            return f"sunny in {city}"

        self.lookup = lookup


def test_a_coroutine_tool_runs_on_the_callers_loop_and_the_model_sees_its_result() -> None:
    loops = Loops()
    agent = scripted_agent(
        call_tool("lookup", city="Paris"), says_tool_result, tools=[loops.lookup]
    )

    async def main() -> tuple[asyncio.AbstractEventLoop, agents.TurnState[Any]]:
        session = await agent.start_session()
        return asyncio.get_running_loop(), await session.run("weather?")

    loop, record = run(main)
    assert isinstance(record, agents.Completed)
    assert record.output == "sunny in Paris"
    assert loops.seen == [loop]


def test_a_decorated_coroutine_tool_that_requires_approval_runs_on_the_loop_once_approved() -> None:
    ran_on: list[asyncio.AbstractEventLoop] = []

    @agents.tool(requires_approval=True)
    async def delete(path: str) -> str:
        """Delete a file."""
        ran_on.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return f"deleted {path}"

    agent = scripted_agent(call_tool("delete", path="a.txt"), says_tool_result, tools=[delete])

    async def approve(callback: agents.OpenApproval) -> agents.AllowApproval:
        return agents.AllowApproval()

    async def main() -> tuple[asyncio.AbstractEventLoop, agents.TurnState[Any]]:
        session = await agent.start_session(on_approval=approve)
        return asyncio.get_running_loop(), await session.run("delete a.txt")

    loop, record = run(main)
    assert isinstance(record, agents.Completed)
    assert record.output == "deleted a.txt"
    assert ran_on == [loop]


def test_turns_from_two_loops_at_once_run_each_tool_on_its_own_callers_loop() -> None:
    loops = Loops()
    agent = scripted_agent(
        call_tool("lookup", city="Paris"), says_tool_result, tools=[loops.lookup]
    )
    both = threading.Barrier(2)
    ran: dict[str, asyncio.AbstractEventLoop] = {}
    errors: list[BaseException] = []

    def thread_main(name: str) -> None:
        async def main() -> None:
            session = await agent.start_session()
            await asyncio.to_thread(both.wait, WAIT)  # the two sessions start together
            turn = await session.start_turn("weather?")
            assert isinstance(turn, agents.Turn)
            record = await turn.result()
            assert isinstance(record, agents.Completed), record
            ran[name] = asyncio.get_running_loop()

        try:
            run(main)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=thread_main, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not errors
    assert sorted(loops.seen, key=id) == sorted(ran.values(), key=id)
    assert ran["a"] is not ran["b"]


def test_a_sync_tool_of_an_asyncio_agent_still_runs_in_a_worker_thread() -> None:
    threads: list[threading.Thread] = []

    def where() -> str:
        """Say where this runs."""
        threads.append(threading.current_thread())
        return "somewhere"

    agent = scripted_agent(call_tool("where"), says_tool_result, tools=[where])

    async def main() -> agents.TurnState[Any]:
        session = await agent.start_session()
        return await session.run("where?")

    record = run(main)
    assert isinstance(record, agents.Completed)
    assert record.output == "somewhere"
    (thread,) = threads
    assert thread is not threading.main_thread()


def test_a_coroutine_tools_exception_is_reported_to_the_model() -> None:
    async def broken() -> str:
        """Fail."""
        await asyncio.sleep(0)
        raise LookupError("no such city")

    agent = scripted_agent(call_tool("broken"), says_tool_result, tools=[broken])

    async def main() -> agents.TurnState[Any]:
        session = await agent.start_session()
        return await session.run("go")

    record = run(main)
    assert isinstance(record, agents.Completed)
    assert record.output == "LookupError: no such city"


def test_with_tool_errors_raise_a_coroutine_tools_exception_fails_the_turn() -> None:
    async def broken() -> str:
        """Fail."""
        await asyncio.sleep(0)
        raise LookupError("no such city")

    agent = scripted_agent(call_tool("broken"), "unreached", tools=[broken], tool_errors="raise")

    async def main() -> agents.TurnState[Any]:
        session = await agent.start_session()
        return await session.run("go")

    record = run(main)
    assert isinstance(record, agents.Failed)
    assert "no such city" in record.error.message


def test_interrupting_a_turn_cancels_its_tools_asyncio_task() -> None:
    async def main() -> tuple[agents.TurnState[Any], list[str]]:
        started = asyncio.Event()
        happened: list[str] = []

        async def wait_forever() -> str:
            """Wait."""
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                happened.append("cancelled")
                raise
            return "unreached"

        agent = scripted_agent(call_tool("wait_forever"), "unreached", tools=[wait_forever])
        session = await agent.start_session()
        turn = await session.start_turn("go")
        assert isinstance(turn, agents.Turn)
        await started.wait()
        await turn.interrupt()
        return await turn.result(), happened

    record, happened = run(main)
    assert isinstance(record, agents.Interrupted)
    assert happened == ["cancelled"]


def test_a_coroutine_pre_tool_call_hook_runs_on_the_loop_and_its_decision_holds() -> None:
    ran_on: list[asyncio.AbstractEventLoop] = []
    deleted: list[str] = []

    @agents.pre_tool_call
    async def guard(call: agents.ToolCallEntry) -> agents.DenyToolCall | None:
        ran_on.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        if call.arguments.get("path") == "/":
            return agents.DenyToolCall("never the root")
        return None

    def delete(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return f"deleted {path}"

    agent = scripted_agent(
        call_tool("delete", path="/"), says_tool_result, tools=[delete], hooks=[guard]
    )

    async def main() -> tuple[asyncio.AbstractEventLoop, agents.TurnState[Any]]:
        session = await agent.start_session()
        return asyncio.get_running_loop(), await session.run("delete /")

    loop, record = run(main)
    assert isinstance(record, agents.Completed)
    assert "never the root" in str(record.output)
    assert ran_on == [loop]
    assert deleted == []


def test_a_tool_sources_coroutine_tool_runs_on_the_loop_with_the_sessions_credentials() -> None:
    ran_on: list[asyncio.AbstractEventLoop] = []

    async def whoami(
        credentials: Annotated[agents.Credentials, agents.Depends()],
    ) -> str:
        """Say who the session signed in as."""
        ran_on.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return f"signed in to {credentials.source}"

    source = agents.ToolSource(name="crm", tools=[whoami], requires_sign_in=True)
    agent = scripted_agent(call_tool("crm.whoami"), says_tool_result, tools=[source])

    async def sign_in(callback: agents.OpenSignIn) -> agents.SignInAnswer:
        return agents.SignInAnswer(credentials={"crm": "token-of-bob"})

    async def main() -> tuple[asyncio.AbstractEventLoop, agents.TurnState[Any]]:
        session = await agent.start_session(on_sign_in=sign_in)
        return asyncio.get_running_loop(), await session.run("who am I?")

    loop, record = run(main)
    assert isinstance(record, agents.Completed), record
    assert record.output == "signed in to crm"
    assert ran_on == [loop]


class ParkedLookup:
    """A turn whose first model step parks until released, then calls the coroutine tool
    ``lookup`` (of :class:`Loops`)."""

    def __init__(self) -> None:
        self.loops = Loops()
        self.gate: Gate | None = None
        self.agent = scripted_agent(self.step, says_tool_result, tools=[self.loops.lookup])

    async def step(self, request: agents.ModelRequest) -> agents.ModelReply:
        assert self.gate is not None
        await self.gate(request)
        return call_tool("lookup", city="Oslo")

    async def start(self) -> agents.Turn:
        """Start the turn, and return once its step is parked."""
        self.gate = Gate()
        session = await self.agent.start_session()
        turn = await session.start_turn("weather?")
        assert isinstance(turn, agents.Turn)
        await self.gate.reached()
        return turn

    def release(self) -> None:
        assert self.gate is not None
        self.gate.release()


def test_a_coroutine_tool_whose_callers_loop_closed_runs_on_the_next_callers_loop() -> None:
    parked = ParkedLookup()
    turn = run(parked.start)  # the loop that started the turn closes, the step parked

    async def finish() -> tuple[asyncio.AbstractEventLoop, agents.TurnState[Any]]:
        assert isinstance(await turn.get(), agents.Running)  # this loop's call is the latest
        parked.release()
        return asyncio.get_running_loop(), await turn.result()

    loop, record = run(finish)
    assert isinstance(record, agents.Completed), record
    assert record.output == "sunny in Oslo"
    assert parked.loops.seen == [loop]


def test_a_coroutine_tool_with_no_callers_loop_left_fails_with_an_error_saying_so() -> None:
    parked = ParkedLookup()
    turn = run(parked.start)  # every loop that called the door has closed
    parked.release()
    record = result_in_engine(turn)
    assert isinstance(record, agents.Completed), record
    assert record.output.startswith("RuntimeError: tool lookup is asyncio code")
    assert "await the session from a running loop" in record.output
    assert parked.loops.seen == []


def test_a_turn_blocked_on_a_durable_store_runs_its_coroutine_tool_on_the_next_engines_caller(
    tmp_path: pathlib.Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    agents.configure(store=store)
    ran_on: list[asyncio.AbstractEventLoop] = []

    @agents.tool(requires_approval=True)
    async def refund(order: str) -> str:
        """Refund an order."""
        ran_on.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return f"refunded {order}"

    agent = scripted_agent(call_tool("refund", order="A-17"), says_tool_result, tools=[refund])

    async def block() -> tuple[str, agents.TurnState[Any] | agents.Busy[agents.Turn]]:
        session = await agent.start_session()
        return session.id, await session.run("Refund A-17.")

    try:
        session_id, record = run(block)
        assert isinstance(record, agents.Blocked)
        agents.configure(store=store)  # a new engine on the same file, as a restarted service

        async def resume() -> tuple[asyncio.AbstractEventLoop, agents.TurnState[Any]]:
            turn = agent.session(session_id).turn(record.turn_id)
            answered = await turn.answer(record.callbacks[0].id, agents.AllowApproval())
            assert isinstance(answered, agents.Answered)
            return asyncio.get_running_loop(), await turn.result()

        loop, final = run(resume)
    finally:
        agents.configure()
    assert isinstance(final, agents.Completed), final
    assert final.output == "refunded A-17"
    assert ran_on == [loop]


SERVED_MODULE = """
import agentlib.aio as agents


async def lookup(city: str) -> str:
    '''Look the weather up.'''
    return "sunny"


def add(a: int, b: int) -> int:
    '''Add two integers.'''
    return a + b


helper = agents.Agent("helper", model=agents.ScriptedModel(["ok"]), tools=[lookup])
weather = agents.Agent("weather", model=agents.ScriptedModel(["ok"]), subagents=[helper])
adder = agents.Agent("adder", model=agents.ScriptedModel(["ok"]), tools=[add])
"""


def test_serve_refuses_an_asyncio_agent_with_asyncio_code_and_says_what_to_do(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "served.py").write_text(SERVED_MODULE)
    done = subprocess.run(
        [sys.executable, "-m", "agentlib", "serve", "served:weather"],
        cwd=tmp_path, capture_output=True, text=True, timeout=WAIT, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "served:weather is an agent of agentlib.aio with asyncio code (tool lookup)" in (
        done.stderr
    )
    assert "define the agent to serve with agentlib.Agent" in done.stderr


def test_serve_takes_an_asyncio_agent_whose_code_is_all_sync(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentlib._http._command import agents_named

    (tmp_path / "served.py").write_text(SERVED_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "served", raising=False)
    (agent,) = agents_named("served:adder")
    assert agent.name == "adder"
