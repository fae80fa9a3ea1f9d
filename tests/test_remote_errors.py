"""What a remote reference (``Agent.load_from``) raises when its servers cannot be reached,
are stalled, or refuse its token: errors of agentlib's own tree, after a bounded retry,
that say what was wrong and what to do; real sockets on 127.0.0.1."""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing
from _proxy import CuttingProxy, GatewayProxy
from _support import Gate, approval_agent, held_agent, held_turn

import agentlib
import agentlib_sync
from agentlib import ModelReply, ScriptedModel, ToolCallRequest


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def calculator() -> agentlib.Agent:
    call = ToolCallRequest(name="add", arguments={"a": 1, "b": 2})
    return agentlib.Agent("calc", "You add.", ScriptedModel([ModelReply(tool_calls=[call]), "3"]))


@pytest.fixture
def closed_port() -> int:
    """A port of 127.0.0.1 that nothing listens on: connections to it are refused."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port: int = free.getsockname()[1]
    return port


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A server that takes connections and never answers (as a stopped process does: the
    kernel accepts for it)."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(16)
        yield f"http://127.0.0.1:{listening.getsockname()[1]}"


async def test_a_dead_server_raises_server_unreachable_naming_it_after_retry_for(
    autojump_clock: trio.testing.MockClock, closed_port: int
) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    remote = agentlib.Agent.load_from(url, "calc")
    started = trio.current_time()
    with pytest.raises(agentlib.ServerUnreachableError) as raised:
        await remote.start_session()
    tried = trio.current_time() - started
    assert 60 <= tried < 70  # the documented default, and the last pause cut to fit it
    error = raised.value
    assert isinstance(error, agentlib.SdkError)
    assert error.urls == (url,)
    assert error.seconds >= 60
    assert url in str(error)
    assert "60 s" in str(error)
    assert isinstance(error.__cause__, httpx.TransportError)


async def test_retry_for_bounds_the_tries_of_a_call(
    autojump_clock: trio.testing.MockClock, closed_port: int
) -> None:
    remote = agentlib.Agent.load_from(f"http://127.0.0.1:{closed_port}", "calc", retry_for=5)
    started = trio.current_time()
    with pytest.raises(agentlib.ServerUnreachableError, match="in 5 s of tries"):
        await remote.session("s" * 32).turn("t").get()
    assert 5 <= trio.current_time() - started < 6


async def test_a_client_moves_on_from_a_server_that_never_answers(
    autojump_clock: trio.testing.MockClock, silent_url: str
) -> None:
    async with agentlib.serve([calculator()], port=0) as server:
        remote = agentlib.Agent.load_from([silent_url, server.url], "calc", connect_timeout=3)
        started = trio.current_time()
        with trio.fail_after(30):  # only catches a hang: a silent server held it for good
            session = await remote.start_session()
            record = await session.run("1+2?")
        assert trio.current_time() - started >= 3  # the first server had its deadline
    assert isinstance(record, agentlib.Completed)
    assert record.output == "3"


@pytest.mark.slow
async def test_a_client_moves_on_from_a_stopped_server_process(tmp_path: Path) -> None:
    (tmp_path / "stopped_agents.py").write_text(STOPPED_AGENTS)
    command = [sys.executable, "-m", "agentlib", "serve", "stopped_agents:calc", "--port", "0"]
    with subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            line = await trio.to_thread.run_sync(process.stdout.readline)
            assert line.startswith("agentlib: serving calc on http://127.0.0.1:"), line
            stopped = line.split(" on ")[1].split(" ")[0]
            process.send_signal(signal.SIGSTOP)  # its kernel still accepts connections
            async with agentlib.serve([calculator()], port=0) as server:
                remote = agentlib.Agent.load_from([stopped, server.url], "calc", connect_timeout=1)
                with trio.fail_after(60):  # only catches a hang: the stopped one held it
                    session = await remote.start_session()
                    record = await session.run("1+2?")
        finally:
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGINT)
            try:
                process.communicate(timeout=60)
            except subprocess.TimeoutExpired:  # a failure, not a hang of the suite
                process.kill()
                _, stderr = process.communicate()
                pytest.fail(f"the server did not stop on SIGINT; it said: {stderr[-2000:]}")
    assert isinstance(record, agentlib.Completed)
    assert record.output == "3"


#: The module of agents of the process that is stopped.
STOPPED_AGENTS = """
import agentlib

calc = agentlib.Agent("calc", "", agentlib.ScriptedModel(["3"] * 10))
"""


async def test_a_server_that_never_answers_is_unreachable_after_retry_for(
    autojump_clock: trio.testing.MockClock, silent_url: str
) -> None:
    remote = agentlib.Agent.load_from(silent_url, "calc", connect_timeout=2, retry_for=20)
    with pytest.raises(agentlib.ServerUnreachableError) as raised:
        await remote.start_session()
    assert silent_url in str(raised.value)
    assert isinstance(raised.value.__cause__, httpx.TimeoutException)


async def test_a_wait_on_the_server_longer_than_the_connect_timeout_is_no_stall(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = Gate()
    async with agentlib.serve([held_agent(gate, "done")], port=0) as server:
        remote = agentlib.Agent.load_from(server.url, "held", connect_timeout=1, retry_for=2)
        session = await remote.start_session()
        turn = await held_turn(session, gate)
        # Each read waits on the server, sending no byte, for longer than the deadline.
        started = trio.current_time()
        record = await turn.result(timeout=25)
        assert isinstance(record, agentlib.Running)
        assert trio.current_time() - started >= 25
        gate.opened.set()
        done = await turn.result(timeout=25)
    assert isinstance(done, agentlib.Completed)


async def test_a_proxys_answers_for_a_server_that_is_away_are_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentlib.serve([calculator()], port=0) as server, trio.open_nursery() as nursery:
        proxy = GatewayProxy(int(server.url.rsplit(":", 1)[1]), failures=6, status=503)
        remote = agentlib.Agent.load_from(await proxy.serve(nursery), "calc")
        session = await remote.start_session()
        record = await session.run("1+2?")
        nursery.cancel_scope.cancel()
    assert isinstance(record, agentlib.Completed)
    assert proxy.answered == 6


async def test_a_proxy_whose_server_stays_away_makes_it_unreachable(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentlib.serve([calculator()], port=0) as server, trio.open_nursery() as nursery:
        proxy = GatewayProxy(int(server.url.rsplit(":", 1)[1]), failures=10**6)
        url = await proxy.serve(nursery)
        with pytest.raises(agentlib.ServerUnreachableError) as raised:
            await agentlib.Agent.load_from(url, "calc", retry_for=20).start_session()
        nursery.cancel_scope.cancel()
    assert "502 Away from a proxy" in str(raised.value)
    assert isinstance(raised.value.__cause__, httpx.HTTPStatusError)


async def test_answers_cut_short_again_and_again_are_asked_for_again_soon(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentlib.serve([calculator()], port=0) as server, trio.open_nursery() as nursery:
        port = int(server.url.rsplit(":", 1)[1])
        proxy = CuttingProxy(port, cuts=12, rng=random.Random(3), most=10)
        remote = agentlib.Agent.load_from(await proxy.serve(nursery), "calc")
        started = trio.current_time()
        await remote.start_session()
        paused = trio.current_time() - started
        nursery.cancel_scope.cancel()
    assert proxy.cut == 12
    # The server is at work: the pauses after cut answers stop growing at 0.4 s.
    assert paused <= 0.4 * 12


async def test_a_missing_token_is_an_authentication_error_saying_to_pass_one() -> None:
    async with agentlib.serve([calculator()], port=0, tokens=["t0ken-right"]) as server:
        with pytest.raises(agentlib.AuthenticationError) as raised:
            await agentlib.Agent.load_from(server.url, "calc").start_session()
    assert isinstance(raised.value, agentlib.SdkError)
    assert isinstance(raised.value, PermissionError)  # as before there was a class of its own
    assert raised.value.status == 401
    assert "token=" in str(raised.value)
    assert server.url in str(raised.value)


async def test_a_refused_token_is_an_authentication_error_that_never_shows_it() -> None:
    async with agentlib.serve([calculator()], port=0, tokens=["t0ken-right"]) as server:
        remote = agentlib.Agent.load_from(server.url, "calc", token="t0ken-wrong")
        with pytest.raises(agentlib.AuthenticationError) as raised:
            await remote.start_session()
    message = str(raised.value)
    assert "refused this reference's token" in message
    assert "t0ken-wrong" not in message
    assert "t0ken-right" not in message


async def test_a_token_without_the_right_is_an_authentication_error() -> None:
    async with agentlib.serve([calculator()], port=0, tokens=["t0ken"]) as server:
        owner = agentlib.Agent.load_from(server.url, "calc", token="t0ken")
        session = await owner.start_session()
        async with httpx.AsyncClient(headers={"authorization": "Bearer t0ken"}) as http:
            minted = await http.post(
                f"{server.url}/v1/agents/calc/sessions/{session.id}/tokens",
                json={"rights": ["read"]},
            )
        reader = agentlib.Agent.load_from(server.url, "calc", token=minted.json()["token"])
        with pytest.raises(agentlib.AuthenticationError) as raised:
            await reader.session(session.id).run("1+2?")
    assert raised.value.status == 403
    assert "rights" in str(raised.value)


async def test_another_principals_session_may_exist_under_another_token() -> None:
    tokens = {"ann": "t0ken-ann", "bob": "t0ken-bob"}
    async with agentlib.serve([calculator()], port=0, tokens=tokens) as server:
        ann = agentlib.Agent.load_from(server.url, "calc", token="t0ken-ann")
        session = await ann.start_session()
        bob = agentlib.Agent.load_from(server.url, "calc", token="t0ken-bob")
        with pytest.raises(agentlib.SessionNotFoundError) as raised:
            await bob.session(session.id).run("1+2?")
    message = str(raised.value)
    assert session.id in message
    assert "may exist under another token" in message
    assert "start one with agent.start_session()" in message
    assert "t0ken" not in message


@pytest.mark.parametrize(
    ("suffix", "says"),
    [
        ("/v1", "give Agent.load_from the address without its '/v1' ('{root}')"),
        ("/api", "the address the server answers at, as `agentlib serve` prints it"),
    ],
)
async def test_an_address_that_is_not_the_servers_root_is_an_error_saying_which_to_give(
    suffix: str, says: str
) -> None:
    async with agentlib.serve([calculator()], port=0) as server:
        remote = agentlib.Agent.load_from(server.url + suffix, "calc")
        with pytest.raises(agentlib.SdkError) as raised:
            await remote.start_session()
        # The root itself works.
        assert (await agentlib.Agent.load_from(server.url, "calc").start_session()).id
    message = str(raised.value)
    assert f"has no route POST {suffix}/v1/agents/calc/sessions" in message
    assert says.format(root=server.url) in message


async def test_a_route_the_server_lacks_says_it_may_be_older_than_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentlib._http import _server

    # A server of an older version, without the route that starts sessions.
    operations = tuple(op for op in _server.OPERATIONS if op.name != "start_session")
    monkeypatch.setattr(_server, "OPERATIONS", operations)
    async with agentlib.serve([calculator()], port=0) as server:
        with pytest.raises(agentlib.SdkError) as raised:
            await agentlib.Agent.load_from(server.url, "calc").start_session()
    message = str(raised.value)
    assert message == (
        f"the server at {server.url} has no route POST /v1/agents/calc/sessions: it may run "
        "an older agentlib than this client: upgrade the server"
    )


@pytest.mark.parametrize(
    ("url", "connect_timeout", "retry_for", "says"),
    [
        ("127.0.0.1:8000", 10.0, 60.0, "is not an HTTP address"),
        ("ftp://127.0.0.1", 10.0, 60.0, "is not an HTTP address"),
        ("http://127.0.0.1:8000", 10.0, 0.0, "retry_for must be a positive number"),
        ("http://127.0.0.1:8000", -1.0, 60.0, "connect_timeout must be"),
        ("http://127.0.0.1:8000", 10.0, float("inf"), "retry_for must be"),
    ],
)
def test_a_bad_address_or_time_is_refused_when_the_reference_is_made(
    url: str, connect_timeout: float, retry_for: float, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        agentlib.Agent.load_from(url, "calc", connect_timeout=connect_timeout, retry_for=retry_for)
    with pytest.raises(ValueError, match=says):
        agentlib_sync.Agent.load_from(
            url, "calc", connect_timeout=connect_timeout, retry_for=retry_for
        )


def test_the_blocking_twin_raises_server_unreachable(closed_port: int) -> None:
    remote = agentlib_sync.Agent.load_from(f"http://127.0.0.1:{closed_port}", "calc", retry_for=0.5)
    with pytest.raises(agentlib_sync.ServerUnreachableError):
        remote.start_session()


async def test_a_handlers_answer_that_its_token_may_not_send_raises_authentication_error() -> None:
    async with agentlib.serve([approval_agent([])], port=0, tokens=["t0ken"]) as server:
        owner = agentlib.Agent.load_from(server.url, "approver", token="t0ken")
        session = await owner.start_session()
        blocked = await session.run("clean up")
        assert isinstance(blocked, agentlib.Blocked)
        async with httpx.AsyncClient(headers={"authorization": "Bearer t0ken"}) as http:
            minted = await http.post(
                f"{server.url}/v1/agents/approver/sessions/{session.id}/tokens",
                json={"rights": ["read"]},
            )
        reader = agentlib.Agent.load_from(server.url, "approver", token=minted.json()["token"])
        allowing = reader.session(session.id, on_approval=lambda _: agentlib.AllowApproval())
        with trio.fail_after(30), pytest.raises(agentlib.AuthenticationError) as raised:
            await allowing.turn(blocked.turn_id).result(timeout=20)
        assert raised.value.status == 403
        # The answer was never heard: the callback is open, for a token that may answer it.
        still = await session.turn(blocked.turn_id).get()
        assert isinstance(still, agentlib.Blocked)
