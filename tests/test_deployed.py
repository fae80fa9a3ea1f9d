"""Deployed sessions over HTTP (SPEC section 12): a real server on 127.0.0.1, driven with
httpx as a client on any machine would drive it."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from _support import Gate, approval_agent, held_agent

import agentlib
from agentlib import ModelReply, ScriptedModel, ToolCallRequest
from agentlib._cli._main import main as cli_main
from agentlib._http._access import Access, Tokens

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def calculator() -> agentlib.Agent:
    call = ToolCallRequest(name="add", arguments={"a": 1, "b": 2})
    reply = ModelReply(tool_calls=[call])
    return agentlib.Agent("calc", "You add.", ScriptedModel([reply, "3"] * 50), [add])


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    store = f"sqlite:///{tmp_path / 'served.db'}"
    agents = [calculator(), approval_agent([])]
    async with agentlib.serve(agents, store=store, port=0) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url + "/v1") as http:
            yield http


async def start(client: httpx.AsyncClient, agent: str = "calc") -> str:
    response = await client.post(f"/agents/{agent}/sessions")
    assert response.status_code == 201, response.text
    session_id: str = response.json()["id"]
    return session_id


async def test_a_turn_runs_and_its_record_reads_as_the_converter_writes_it(
    client: httpx.AsyncClient,
) -> None:
    session = await start(client)
    started = await client.post(f"/agents/calc/sessions/{session}/turns", json={"content": "1+2?"})
    assert started.status_code == 201, started.text
    turn = started.json()["turn_id"]
    read = await client.get(f"/agents/calc/sessions/{session}/turns/{turn}", params={"wait": 10})
    record = agentlib.structure(read.json(), agentlib.TurnState[Any])
    assert isinstance(record, agentlib.Completed)
    assert record.output == "3"
    assert record.session_id == session


async def test_an_idempotency_key_repeated_returns_the_turn_it_started(
    client: httpx.AsyncClient,
) -> None:
    session = await start(client)
    path = f"/agents/calc/sessions/{session}/turns"
    headers = {"Idempotency-Key": "k1"}
    first = await client.post(path, json={"content": "1+2?"}, headers=headers)
    again = await client.post(path, json={"content": "1+2?"}, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["turn_id"] == again.json()["turn_id"]
    other = await client.post(path, json={"content": "2+2?"}, headers=headers)
    assert other.status_code == 422
    assert other.json()["error"]["type"] == "SessionIdempotencyConflictError"


async def test_concurrent_starts_with_one_key_start_one_turn(client: httpx.AsyncClient) -> None:
    session = await start(client)
    path = f"/agents/calc/sessions/{session}/turns"
    statuses: list[int] = []
    turns: set[str] = set()

    async def send() -> None:
        response = await client.post(
            path, json={"content": "1+2?"}, headers={"Idempotency-Key": "k"}
        )
        statuses.append(response.status_code)
        turns.add(response.json()["turn_id"])

    async with trio.open_nursery() as nursery:
        for _ in range(100):
            nursery.start_soon(send)
    assert sorted(statuses) == [200] * 99 + [201]
    assert len(turns) == 1


async def test_a_blocked_turn_is_answered_over_the_wire(client: httpx.AsyncClient) -> None:
    session = await start(client, "approver")
    base = f"/agents/approver/sessions/{session}"
    turn = (await client.post(f"{base}/turns", json={"content": "clean up"})).json()["turn_id"]
    blocked = (await client.get(f"{base}/turns/{turn}", params={"wait": 10})).json()
    assert blocked["type"] == "blocked"
    callback = blocked["callbacks"][0]["id"]
    allow = agentlib.unstructure(agentlib.AllowApproval())
    answered = await client.post(
        f"{base}/turns/{turn}/callbacks/{callback}", json={"answer": allow}
    )
    assert answered.json()["type"] == "answered", answered.text
    again = await client.post(f"{base}/turns/{turn}/callbacks/{callback}", json={"answer": allow})
    assert again.json()["type"] == "already_settled"  # no key: not a retry of the first
    done = (await client.get(f"{base}/turns/{turn}", params={"wait": 10})).json()
    assert done["type"] == "completed"
    assert done["output"] == "done: deleted /tmp/x"


async def test_errors_travel_as_a_status_and_a_typed_body(client: httpx.AsyncClient) -> None:
    missing = await client.get("/agents/calc/sessions/0123456789abcdef0123456789abcdef")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "SessionNotFoundError"
    nobody = await client.post("/agents/nobody/sessions")
    assert nobody.status_code == 404
    assert "/v1/agents" in nobody.json()["error"]["message"]
    session = await start(client)
    bad_cursor = await client.get(f"/agents/calc/sessions/{session}/events", params={"after": "x"})
    assert bad_cursor.status_code == 400
    assert bad_cursor.json()["error"]["type"] == "InvalidCursorError"


# httpx leaves its request body's iterator unfinished when the server answers 413 before
# reading it all: the warning is the test client's, not the server's.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_malformed_and_oversized_bodies_are_refused_with_a_reason(
    client: httpx.AsyncClient,
) -> None:
    session = await start(client)
    path = f"/agents/calc/sessions/{session}/turns"
    bad = await client.post(
        path, content=b'{"content": ', headers={"content-type": "application/json"}
    )
    assert bad.status_code == 400
    assert "not JSON" in bad.json()["error"]["message"]
    unknown = await client.post(path, json={"content": "hi", "colour": "red"})
    assert unknown.status_code == 400
    assert "'colour'" in unknown.json()["error"]["message"]
    huge = await client.post(path, json={"content": "x" * (2 << 20)})
    assert huge.status_code == 413
    deep = await client.post(path, content=b'{"content": ' + b"[" * 200 + b"]" * 200 + b"}")
    assert deep.status_code == 400
    assert "nested deeper" in deep.json()["error"]["message"]


async def test_events_replay_as_pages_and_as_server_sent_events(
    client: httpx.AsyncClient,
) -> None:
    session = await start(client)
    base = f"/agents/calc/sessions/{session}"
    turn = (await client.post(f"{base}/turns", json={"content": "1+2?"})).json()["turn_id"]
    await client.get(f"{base}/turns/{turn}", params={"wait": 10})

    page = (await client.get(f"{base}/events", params={"limit": 3})).json()
    assert page["events"][0]["type"] == "turn_started"
    assert len(page["events"]) == 3
    assert not page["ended"]
    rest = (await client.get(f"{base}/events", params={"after": page["cursor"]})).json()
    everything = page["events"] + rest["events"]
    assert everything[-1]["type"] == "turn_ended"
    ids = [event["id"] for event in everything]
    assert ids == sorted(set(ids))

    # The same events as Server-Sent Events, resumed from the third by Last-Event-ID.
    frames: list[dict[str, str]] = []
    headers = {"accept": "text/event-stream", "last-event-id": ids[2]}
    with trio.fail_after(10):  # only catches a hang
        async with client.stream("GET", f"{base}/turns/{turn}/events", headers=headers) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            frame: dict[str, str] = {}
            async for line in stream.aiter_lines():
                if not line:
                    frames.append(frame)
                    frame = {}
                    continue
                field, _, value = line.partition(": ")
                frame[field] = value
    assert frames[-1] == {"event": "end", "data": "{}"}  # the end, said: not a cut
    frames = frames[:-1]
    assert [frame["id"] for frame in frames] == ids[3:]
    assert [frame["event"] for frame in frames] == [e["type"] for e in everything[3:]]
    assert [json.loads(frame["data"]) for frame in frames] == everything[3:]


async def test_a_session_stream_sends_each_event_once_in_order_past_its_buffer(
    client: httpx.AsyncClient,
) -> None:
    session = await start(client)
    base = f"/agents/calc/sessions/{session}"
    for _ in range(15):  # more events than a stream holds ahead of its client
        turn = (await client.post(f"{base}/turns", json={"content": "1+2?"})).json()["turn_id"]
        await client.get(f"{base}/turns/{turn}", params={"wait": 10})
    stored = (await client.get(f"{base}/events", params={"limit": 1000})).json()["events"]
    assert len(stored) > 2 * agentlib._http._server.STREAM_BUFFER
    ids: list[str] = []
    with trio.fail_after(10):  # only catches a hang
        headers = {"accept": "text/event-stream"}
        async with client.stream("GET", f"{base}/events", headers=headers) as stream:
            async for line in stream.aiter_lines():  # read to its end: the session's
                field, _, value = line.partition(": ")
                if field == "id":
                    ids.append(value)
                    if len(ids) == len(stored):  # then one more turn, followed live
                        await client.post(f"{base}/turns", json={"content": "1+2?"})
                elif field == "event" and value == "turn_ended" and len(ids) > len(stored):
                    await client.post(f"{base}/cancel")
    everything = (await client.get(f"{base}/events", params={"limit": 1000})).json()["events"]
    assert ids == [event["id"] for event in everything]


async def test_with_tokens_every_route_but_health_wants_one() -> None:
    async with agentlib.serve([calculator()], port=0, tokens=["s3cret"]) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url + "/v1") as http:
            assert (await http.get("/health")).status_code == 200
            refused = await http.post("/agents/calc/sessions")
            assert refused.status_code == 401
            assert "Authorization: Bearer" in refused.json()["error"]["message"]
            wrong = await http.post("/agents/calc/sessions", headers={"Authorization": "Bearer no"})
            assert wrong.status_code == 401
            assert "s3cret" not in wrong.text
            ok = await http.post(
                "/agents/calc/sessions", headers={"Authorization": "Bearer s3cret"}
            )
            assert ok.status_code == 201


async def test_a_new_deployment_keeps_the_sessions(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'served.db'}"
    async with agentlib.serve([calculator()], store=store, port=0) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url + "/v1") as http:
            session = await start(http)
            path = f"/agents/calc/sessions/{session}/turns"
            first = (await http.post(path, json={"content": "1+2?"})).json()["turn_id"]
            await http.get(f"{path}/{first}", params={"wait": 10})
            server.deploy(agentlib.Agent("calc", "", agentlib.FunctionModel(lambda _: "four")))
            second = (await http.post(path, json={"content": "2+2?"})).json()["turn_id"]
            record = (await http.get(f"{path}/{second}", params={"wait": 10})).json()
            assert record["output"] == "four"
            page = (await http.get(f"/agents/calc/sessions/{session}/events")).json()
            assert {event["turn_id"] for event in page["events"]} == {first, second}


AGENTS_MODULE = """
import agentlib

calculator = agentlib.Agent("calc", "", agentlib.ScriptedModel(["3"] * 10))
"""


def test_the_serve_command_serves_the_named_agents_until_ctrl_c(tmp_path: Path) -> None:
    (tmp_path / "my_agents.py").write_text(AGENTS_MODULE)
    command = [sys.executable, "-m", "agentlib", "serve", "my_agents:calculator", "--port", "0"]
    command += ["--event-retention", "2", "--lease-seconds", "5"]
    store = f"sqlite:///{tmp_path / 'served.db'}"
    env = {**os.environ, "AGENTLIB_TOKENS": "t0ken"}
    with subprocess.Popen(
        [*command, "--store", store], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env,
    ) as process:  # fmt: skip
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("agentlib: serving calc on http://127.0.0.1:"), line
            assert "t0ken" not in line
            url = line.split(" on ")[1].split(" ")[0]
            with httpx.Client(base_url=url, timeout=30) as http:
                assert http.post("/agents/calc/sessions").status_code == 401
                auth = {"Authorization": "Bearer t0ken"}
                created = http.post("/agents/calc/sessions", headers=auth)
                assert created.status_code == 201
                session = f"/agents/calc/sessions/{created.json()['id']}"
                for _ in range(2):  # the first turn's events go once the second ends
                    made = http.post(f"{session}/turns", headers=auth, json={"content": "1+2?"})
                    http.get(f"{session}/turns/{made.json()['turn_id']}?wait=30", headers=auth)
                pruned = http.get(f"{session}/events", headers=auth)
                assert pruned.status_code == 410, pruned.text
                assert pruned.json()["error"]["type"] == "ObservationLost"
        finally:
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert err.strip().endswith("agentlib: stopped")
    assert "t0ken" not in err


def test_ctrl_c_stops_the_serve_command_while_a_client_follows_events(tmp_path: Path) -> None:
    """Ctrl-C with a request under way (a client following a session's events) stops the
    server as its closing does: the stream ends cut short (without its end frame, so the
    client opens it again from its cursor), and the command says it stopped, status 130."""
    (tmp_path / "my_agents.py").write_text(AGENTS_MODULE)
    command = [sys.executable, "-m", "agentlib", "serve", "my_agents:calculator", "--port", "0"]
    interrupted = False
    with subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            url = process.stdout.readline().split(" on ")[1].split(" ")[0]
            with httpx.Client(base_url=url, timeout=30) as http:
                session = f"/agents/calc/sessions/{http.post('/agents/calc/sessions').json()['id']}"
                made = http.post(f"{session}/turns", json={"content": "1+2?"}).json()
                http.get(f"{session}/turns/{made['turn_id']}?wait=30")
                headers = {"accept": "text/event-stream"}
                with http.stream("GET", f"{session}/events", headers=headers) as stream:
                    lines = stream.iter_lines()
                    assert next(line for line in lines if line.startswith("id: "))
                    process.send_signal(signal.SIGINT)  # the stream is open, and served
                    interrupted = True
                    rest = list(lines)
            assert "event: end" not in rest
        finally:
            if not interrupted:
                process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert err.strip().endswith("agentlib: stopped")
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argument", "said"),
    [
        (["--event-retention", "0"], "--event-retention: it must be above 0, not 0"),
        (["--event-retention", "2.5"], "--event-retention: '2.5' is not a whole number"),
        (["--lease-seconds", "-1"], "--lease-seconds: it must be above 0, not -1"),
        (["--lease-seconds", "soon"], "--lease-seconds: 'soon' is not a number"),
    ],
)
def test_the_serve_command_refuses_a_bad_number(
    argument: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main(["serve", "my_agents:calculator", *argument])
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


def test_the_serve_command_says_when_its_argument_names_no_agent(tmp_path: Path) -> None:
    (tmp_path / "my_agents.py").write_text(AGENTS_MODULE)
    for spec, said in [
        ("my_agents", "must be module:attribute"),
        ("nowhere:agent", "no module 'nowhere'"),
        ("my_agents:nobody", "has no attribute 'nobody'"),
        ("my_agents:agentlib", "is not an agent"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "agentlib", "serve", spec],
            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert said in done.stderr
        assert done.stderr.startswith("usage: python -m agentlib serve")


async def test_a_retried_answer_is_told_what_the_first_was(client: httpx.AsyncClient) -> None:
    session = await start(client, "approver")
    base = f"/agents/approver/sessions/{session}"
    turn = (await client.post(f"{base}/turns", json={"content": "clean up"})).json()["turn_id"]
    blocked = (await client.get(f"{base}/turns/{turn}", params={"wait": 10})).json()
    answer = f"{base}/turns/{turn}/callbacks/{blocked['callbacks'][0]['id']}"
    body = {"answer": {"type": "allow"}, "idempotency_key": "a1"}
    first = (await client.post(answer, json=body)).json()
    (await client.get(f"{base}/turns/{turn}", params={"wait": 10})).json()  # it completed
    retried = (await client.post(answer, json=body)).json()
    assert first["type"] == retried["type"] == "answered"
    assert retried == first
    other = (await client.post(answer, json={**body, "idempotency_key": "a2"})).json()
    assert other["type"] == "already_settled"


async def test_a_retried_answer_is_told_what_the_first_was_by_a_restarted_server(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'served.db'}"
    agents = [approval_agent([])]
    async with agentlib.serve(agents, store=store, port=0) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url + "/v1") as http:
            session = await start(http, "approver")
            base = f"/agents/approver/sessions/{session}"
            made = await http.post(f"{base}/turns", json={"content": "clean up"})
            turn = made.json()["turn_id"]
            blocked = (await http.get(f"{base}/turns/{turn}", params={"wait": 10})).json()
            answer = f"{base}/turns/{turn}/callbacks/{blocked['callbacks'][0]['id']}"
            body = {"answer": {"type": "deny", "reason": "no"}, "idempotency_key": "a1"}
            first = (await http.post(answer, json=body)).json()
    async with agentlib.serve(agents, store=store, port=0) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url + "/v1") as http:
            retried = (await http.post(answer, json=body)).json()
            other = (await http.post(answer, json={**body, "idempotency_key": "a2"})).json()
    assert first["type"] == "answered"
    assert retried == first
    assert other["type"] == "already_settled"


PRINCIPALS = {"alice": "alice-s3cret", "bob": "bob-s3cret"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_session_is_found_only_by_its_principal_on_every_route(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    async with agentlib.serve([approval_agent([])], port=0, tokens=PRINCIPALS) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url + "/v1") as http:
            alice, bob = bearer(PRINCIPALS["alice"]), bearer(PRINCIPALS["bob"])
            made = await http.post("/agents/approver/sessions", headers=alice)
            base = f"/agents/approver/sessions/{made.json()['id']}"
            started = await http.post(f"{base}/turns", json={"content": "go"}, headers=alice)
            turn = started.json()["turn_id"]
            blocked = (await http.get(f"{base}/turns/{turn}?wait=10", headers=alice)).json()
            callback = blocked["callbacks"][0]["id"]
            routes = [
                ("GET", base, None),
                ("GET", f"{base}/events", None),
                ("POST", f"{base}/turns", {"content": "hi"}),
                ("GET", f"{base}/turns/{turn}", None),
                ("GET", f"{base}/turns/{turn}/events", None),
                ("POST", f"{base}/turns/{turn}/steer", {"content": "hi"}),
                ("POST", f"{base}/turns/{turn}/callbacks/{callback}", {"answer": {}}),
                ("POST", f"{base}/turns/{turn}/interrupt", None),
                ("POST", f"{base}/tokens", {"rights": ["read"]}),
                ("POST", f"{base}/cancel", None),
            ]
            for method, path, body in routes:
                other = await http.request(method, path, json=body, headers=bob)
                assert other.status_code == 404, (method, path, other.text)
                assert other.json()["error"]["type"] == "SessionNotFoundError"
                texts.append(other.text)
            mine = await http.get(base, headers=alice)
            assert mine.status_code == 200
            texts += [started.text, mine.text, json.dumps(blocked)]
    for secret in PRINCIPALS.values():
        assert secret not in caplog.text
        assert all(secret not in text for text in texts)
    assert all("agentlib.principal" not in text for text in texts)


async def test_a_session_scoped_token_reads_and_answers_that_session_only() -> None:
    async with agentlib.serve([approval_agent([])], port=0, tokens=PRINCIPALS) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url + "/v1") as http:
            alice = bearer(PRINCIPALS["alice"])
            first = (await http.post("/agents/approver/sessions", headers=alice)).json()["id"]
            second = (await http.post("/agents/approver/sessions", headers=alice)).json()["id"]
            base = f"/agents/approver/sessions/{first}"
            turn = (await http.post(f"{base}/turns", json={"content": "go"}, headers=alice)).json()
            path = f"{base}/turns/{turn['turn_id']}"
            minted = await http.post(f"{base}/tokens", json={"rights": ["read"]}, headers=alice)
            assert minted.status_code == 201
            reader = bearer(minted.json()["token"])
            blocked = (await http.get(f"{path}?wait=10", headers=reader)).json()
            assert blocked["type"] == "blocked"
            assert (await http.get(f"{base}/events", headers=reader)).status_code == 200
            refused = await http.post(f"{base}/turns", json={"content": "hi"}, headers=reader)
            assert refused.status_code == 403
            assert "scoped to one session" in refused.json()["error"]["message"]
            answer = f"{path}/callbacks/{blocked['callbacks'][0]['id']}"
            allow = {"answer": {"type": "allow"}}
            assert (await http.post(answer, json=allow, headers=reader)).status_code == 403
            elsewhere = await http.get(f"/agents/approver/sessions/{second}", headers=reader)
            assert elsewhere.status_code == 404
            rights = {"rights": ["answer"]}
            made = await http.post(f"{base}/tokens", json=rights, headers=alice)
            answerer = bearer(made.json()["token"])
            answered = await http.post(answer, json=allow, headers=answerer)
            assert answered.json()["type"] == "answered"
            assert (await http.get(path, headers=answerer)).status_code == 403
            forged = minted.json()["token"][:-2] + "xx"
            assert (await http.get(base, headers=bearer(forged))).status_code == 401
            wrong = await http.post(f"{base}/tokens", json={"rights": ["write"]}, headers=alice)
            assert wrong.status_code == 400


def test_a_session_scoped_token_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = Tokens(["t"])
    token, expires = tokens.mint("s1", frozenset({"read"}), 60)
    assert tokens.access(token) == Access(session_id="s1", rights=frozenset({"read"}))
    monkeypatch.setattr(agentlib._http._access.time, "time", lambda: expires + 1.0)
    assert tokens.access(token) is None
    assert Tokens(["other"]).access(token) is None  # another server's key


async def test_a_remote_reference_sends_its_token() -> None:
    async with agentlib.serve([calculator()], port=0, tokens=["t0ken"]) as server:
        with pytest.raises(PermissionError, match="Authorization: Bearer"):
            await agentlib.Agent.load_from(server.url, "calc").start_session()
        remote = agentlib.Agent.load_from(server.url, "calc", token="t0ken")
        record = await (await remote.start_session()).run("1+2?")
        assert isinstance(record, agentlib.Completed)


async def test_an_idle_event_stream_gets_a_comment_every_15_seconds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentlib.serve([calculator()], port=0) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url + "/v1", timeout=None) as http:
            session = await start(http)
            path = f"/agents/calc/sessions/{session}"
            headers = {"accept": "text/event-stream"}
            lines: list[tuple[float, str]] = []
            started = trio.current_time()
            async with http.stream("GET", f"{path}/events", headers=headers) as stream:
                async for line in stream.aiter_lines():  # read to its end: the session's
                    lines.append((trio.current_time() - started, line))
                    if len(lines) == 4:  # two pings, each a comment and a blank line
                        await http.post(f"{path}/cancel")
    assert [line for _, line in lines[:4]] == [": ping", "", ": ping", ""]
    assert [round(at) for at, _ in lines[:4:2]] == [15, 30]
    assert [line for _, line in lines[-3:]] == ["event: end", "data: {}", ""]


async def test_two_servers_on_one_store_serve_a_session_one_at_a_time(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'shared.db'}"
    async with agentlib.serve([calculator()], store=store, port=0) as second:
        async with agentlib.serve([calculator()], store=store, port=0) as first:
            remote = agentlib.Agent.load_from(first.url, "calc")
            session = await remote.start_session()
            record = await session.run("1+2?")
            elsewhere = agentlib.Agent.load_from(second.url, "calc").session(session.id)
            with pytest.raises(agentlib.LeaseRefused):
                await elsewhere.turn(record.turn_id).get()
        # The first server stopped and let its sessions go: the second takes them up.
        assert await elsewhere.turn(record.turn_id).get() == record
        assert isinstance(await elsewhere.run("2+2?"), agentlib.Completed)


async def test_a_retried_steer_or_interrupt_is_told_what_the_first_was() -> None:
    gate = Gate()
    heard: list[list[str]] = []

    def answer(request: agentlib.ModelRequest) -> str:
        heard.append([e.text for e in request.entries if isinstance(e, agentlib.MessageEntry)])
        return "ok"

    async with agentlib.serve([held_agent(gate, answer)], port=0) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url + "/v1") as http:

            async def held_turn() -> str:
                made = await http.post("/agents/held/sessions")
                base = f"/agents/held/sessions/{made.json()['id']}/turns"
                turn = (await http.post(base, json={"content": "go"})).json()["turn_id"]
                return f"{base}/{turn}"

            stopping = await held_turn()
            await gate.reached.wait()
            stop = {"idempotency_key": "i1"}
            stopped = await http.post(f"{stopping}/interrupt", json=stop)
            retried = await http.post(f"{stopping}/interrupt", json=stop)
            fresh = await http.post(f"{stopping}/interrupt", json={"idempotency_key": "i2"})
            assert stopped.status_code == retried.status_code == 200
            assert retried.json() == stopped.json()
            assert fresh.status_code == 409  # not a retry: that turn is no longer active

            steered = await held_turn()  # held at the gate too, which is still closed
            steer = {"content": "also this", "idempotency_key": "s1"}
            first = await http.post(f"{steered}/steer", json=steer)
            again = await http.post(f"{steered}/steer", json=steer)
            assert first.json() == again.json()
            assert first.json()["steered"] is True
            gate.opened.set()
            done = (await http.get(steered, params={"wait": 10})).json()
            assert done["type"] == "completed"
    assert heard[-1].count("also this") == 1


async def test_an_output_schema_that_is_no_object_too_deep_or_too_large_is_refused(
    client: httpx.AsyncClient,
) -> None:
    path = f"/agents/calc/sessions/{await start(client)}/turns"
    refused = {
        "no object": {"content": "hi", "output_schema": "integer"},
        "too deep": {"content": "hi", "output_schema": _deep(101)},
        "too large": {"content": "hi", "output_schema": {"enum": ["x" * 100] * 1000}},
    }
    says = {
        "no object": "expected an object, got str @ $.output_schema",
        "too deep": "'output_schema' is nested deeper than the limit of 100",
        "too large": "more than the 65,536 a turn takes",
    }
    for name, body in refused.items():
        response = await client.post(path, json=body)
        assert response.status_code == 400, name
        assert response.json()["error"]["type"] == "ValidationError"
        assert says[name] in response.json()["error"]["message"], name
    taken = await client.post(path, json={"content": "hi", "output_schema": {"type": "object"}})
    assert taken.status_code == 201, taken.text


def _deep(levels: int) -> dict[str, Any]:
    """A JSON object ``levels`` objects deep."""
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("port", [65536, -1, 80.0, "8000", True])
def test_serve_refuses_what_is_not_a_port_before_it_starts(port: Any) -> None:
    with pytest.raises(ValueError, match="port must be a whole number from 0 to 65535") as caught:
        agentlib.serve([calculator()], port=port)
    assert repr(port) in str(caught.value)


async def test_a_start_key_is_each_principals_and_each_agents_own() -> None:
    other = agentlib.Agent("other", model=ScriptedModel(["Hi."]))
    tokens = {"alice": "a-token", "bob": "b-token"}
    async with agentlib.serve([calculator(), other], port=0, tokens=tokens) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url + "/v1") as http:

            async def start(agent: str, token: str) -> str:
                reply = await http.post(
                    f"/agents/{agent}/sessions",
                    json={"idempotency_key": "shared"},
                    headers={"Authorization": f"Bearer {token}"},
                )
                assert reply.status_code == 201, reply.text
                session_id: str = reply.json()["id"]
                return session_id

            alices = await start("calc", "a-token")
            assert await start("calc", "a-token") == alices  # her retry: her session
            bobs = await start("calc", "b-token")
            others = await start("other", "a-token")
            assert len({alices, bobs, others}) == 3
            for agent, session_id, token in [
                ("calc", bobs, "b-token"),
                ("other", others, "a-token"),
            ]:
                read = await http.get(
                    f"/agents/{agent}/sessions/{session_id}",
                    headers={"Authorization": f"Bearer {token}"},
                )
                assert read.status_code == 200, read.text


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            {"kind": "sign_in", "answer": {"credentials": {"github": "t0ken"}}},
            "an approval is answered with",
        ),
        ({"kind": "failure", "answer": "no"}, "is not a client tool call"),
    ],
)
async def test_an_answer_that_does_not_fit_its_callback_is_a_400_that_keeps_it_open(
    client: httpx.AsyncClient, answer: dict[str, Any], said: str
) -> None:
    session = await start(client, "approver")
    base = f"/agents/approver/sessions/{session}"
    turn = (await client.post(f"{base}/turns", json={"content": "clean up"})).json()["turn_id"]
    blocked = (await client.get(f"{base}/turns/{turn}", params={"wait": 10})).json()
    url = f"{base}/turns/{turn}/callbacks/{blocked['callbacks'][0]['id']}"
    wrong = await client.post(url, json=answer)
    assert wrong.status_code == 400, wrong.text
    assert wrong.json()["error"]["type"] == "ValidationError"
    assert said in wrong.json()["error"]["message"]
    assert "t0ken" not in wrong.text
    allowed = await client.post(url, json={"answer": {"type": "allow"}})
    assert allowed.json()["type"] == "answered", allowed.text
