"""The server's edge against hostile and broken clients: a real ``agentlib.serve`` server on
127.0.0.1 and a SQLite file, driven with raw bytes as any client could send them."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _support import approval_agent

import agentlib
from agentlib import ScriptedModel

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: A JSON body's escape of a lone surrogate, as a client may send it: the parser takes it,
#: and no store can keep it.
LONE = "\\ud800"
JSON = {"content-type": "application/json"}


def echo_agent() -> agentlib.Agent:
    return agentlib.Agent("echo", model=ScriptedModel(["fine"] * 200))


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    store = f"sqlite:///{tmp_path / 'served.db'}"
    async with agentlib.serve([echo_agent(), approval_agent([])], store=store, port=0) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url + "/v1", timeout=30) as client:
            yield client


async def post(http: httpx.AsyncClient, path: str, raw: str) -> httpx.Response:
    return await http.post(path, content=raw.encode(), headers=JSON)


async def started(http: httpx.AsyncClient, agent: str = "echo") -> str:
    made = await http.post(f"/agents/{agent}/sessions")
    assert made.status_code == 201, made.text
    session_id: str = made.json()["id"]
    return session_id


def refused(response: httpx.Response, field: str) -> dict[str, Any]:
    """The error of a 400 that names ``field`` and says what to do."""
    assert response.status_code == 400, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["type"] == "ValidationError"
    assert field in error["message"]
    assert "lone surrogate" in error["message"] or "NUL" in error["message"]
    return error


async def test_a_message_with_a_lone_surrogate_is_a_400_naming_content_and_the_server_goes_on(
    http: httpx.AsyncClient,
) -> None:
    session = await started(http)
    path = f"/agents/echo/sessions/{session}"
    for route in ("turns", "messages"):
        refused(await post(http, f"{path}/{route}", f'{{"content": "a{LONE}b"}}'), "'content'")
    blocks = f'{{"content": [{{"type": "text", "text": "{LONE}"}}]}}'
    refused(await post(http, f"{path}/turns", blocks), "'content[0].text'")
    then = await http.post(f"{path}/turns?wait=10", json={"content": "hi"})
    assert then.status_code == 201, then.text
    assert then.json()["record"]["type"] == "completed"
    assert (await http.get("/health")).status_code == 200


async def test_an_idempotency_key_no_store_keeps_is_a_400_naming_it(
    http: httpx.AsyncClient,
) -> None:
    refused(
        await post(http, "/agents/echo/sessions", f'{{"idempotency_key": "k{LONE}"}}'),
        "idempotency_key",
    )
    session = await started(http)
    for key in (f"k{LONE}", "k\\u0000"):
        body = f'{{"content": "hi", "idempotency_key": "{key}"}}'
        refused(await post(http, f"/agents/echo/sessions/{session}/turns", body), "idempotency_key")
    made = await http.post(f"/agents/echo/sessions/{session}/turns", json={"content": "hi"})
    assert made.status_code == 201, made.text


async def test_history_and_inputs_with_a_lone_surrogate_are_a_400_naming_the_place(
    http: httpx.AsyncClient,
) -> None:
    item = '{"type": "message", "role": "user", "content": [{"type": "text", "text": "hi"}]}'
    bad = item.replace('"hi"', f'"{LONE}"')
    history = f'{{"history": [{item}, {item}, {bad}]}}'
    refused(await post(http, "/agents/echo/sessions", history), "'history[2].content[0].text'")
    inputs = f'{{"inputs": {{"repo": {{"name": "{LONE}"}}}}}}'
    refused(await post(http, "/agents/echo/sessions", inputs), "'inputs.repo.name'")
    key = f'{{"inputs": {{"re{LONE}po": {{}}}}}}'
    refused(await post(http, "/agents/echo/sessions", key), "an object key in 'inputs'")
    assert (await http.post("/agents/echo/sessions")).status_code == 201


# --- tokens, agents, answers, history ---------------------------------------------------------

TOKEN = "s3cret-token"


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """A server that takes requests with ``TOKEN`` only."""
    store = f"sqlite:///{tmp_path / 'served.db'}"
    async with agentlib.serve([echo_agent()], store=store, port=0, tokens=[TOKEN]) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url + "/v1", timeout=30) as client:
            yield client


@pytest.mark.parametrize(
    "header",
    [b"Bearer t\xf6ken", b"Bearer as1.\xe9t\xe9.sig\xe9", b"Bearer as1.payload.\xff\xfe"],
    ids=["plain", "scoped-payload", "scoped-signature"],
)
async def test_a_bearer_token_that_is_not_ascii_is_a_401_on_every_route(
    guarded: httpx.AsyncClient, header: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    mine = {"Authorization": f"Bearer {TOKEN}"}
    session = (await guarded.post("/agents/echo/sessions", headers=mine)).json()["id"]
    path = f"/agents/echo/sessions/{session}"
    routes = [("GET", "/agents"), ("POST", "/agents/echo/sessions"), ("GET", path)]
    routes += [("GET", f"{path}/events"), ("POST", f"{path}/turns"), ("POST", f"{path}/tokens")]
    for method, route in routes:
        response = await guarded.request(method, route, headers={"Authorization": header})
        assert response.status_code == 401, (route, response.text)
        assert response.json()["error"]["type"] == "Unauthorized"
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert (await guarded.get(path, headers=mine)).status_code == 200


async def test_a_session_under_another_agents_path_is_a_404_in_memory_and_after_a_restart(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'served.db'}"
    agents = [echo_agent(), approval_agent([])]
    for restarted in (False, True):
        async with agentlib.serve(agents, store=store, port=0) as server:  # noqa: SIM117
            async with httpx.AsyncClient(base_url=server.url + "/v1", timeout=30) as http:
                if not restarted:
                    session = await started(http)
                own = await http.get(f"/agents/echo/sessions/{session}")
                other = await http.get(f"/agents/approver/sessions/{session}")
                turn = await http.post(
                    f"/agents/approver/sessions/{session}/turns", json={"content": "hi"}
                )
        assert own.status_code == 200, own.text
        assert own.json()["agent"] == "echo"
        assert (other.status_code, turn.status_code) == (404, 404), (restarted, other.text)
        assert other.json()["error"]["type"] == "SessionNotFoundError"


async def test_an_answer_with_an_unknown_field_is_a_400_and_the_callback_stays_open(
    http: httpx.AsyncClient,
) -> None:
    session = await started(http, "approver")
    path = f"/agents/approver/sessions/{session}"
    made = await http.post(f"{path}/turns?wait=10", json={"content": "go"})
    record = made.json()["record"]
    assert record["type"] == "blocked", record
    callback = record["callbacks"][0]["id"]
    answer = f"{path}/turns/{made.json()['turn_id']}/callbacks/{callback}"
    for body in (
        {"answer": {"type": "allow", "scpoe": "session"}},
        {"answer": {"type": "allow", "scpoe": "session"}, "kind": "approval"},
    ):
        response = await http.post(answer, json=body)
        assert response.status_code == 400, response.text
        assert "unknown field(s) 'scpoe'" in response.json()["error"]["message"]
    still = await http.get(f"{path}/turns/{made.json()['turn_id']}")
    assert still.json()["type"] == "blocked"
    taken = await http.post(answer, json={"answer": {"type": "allow", "scope": "once"}})
    assert taken.status_code == 200, taken.text


async def test_a_history_item_with_an_unknown_field_is_a_400_naming_it(
    http: httpx.AsyncClient,
) -> None:
    item = {"type": "message", "role": "user", "content": [{"type": "text", "text": "hi"}]}
    history = [item, {**item, "rloe": "user"}]
    response = await http.post("/agents/echo/sessions", json={"history": history})
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "unknown field(s) 'rloe'" in message
    assert "$[1]" in message
    camel = {"type": "tool_call", "toolCallId": "c1", "name": "n", "arguments": {}}
    fine = await http.post("/agents/echo/sessions", json={"history": [camel]})
    assert fine.status_code == 201, fine.text
