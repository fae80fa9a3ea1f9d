"""The server's edge against hostile and broken clients: a real ``agentlib.serve`` server on
127.0.0.1 and a SQLite file, driven with raw bytes as any client could send them."""

from __future__ import annotations

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
