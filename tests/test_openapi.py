"""The OpenAPI description of the HTTP API (``/v1/openapi.json``): made from the routes the
server serves, valid, and true of a real server on 127.0.0.1, which schemathesis checks
with examples made from it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
import trio
from hypothesis import strategies as st
from schemathesis.core.result import Ok
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

import agentlib
from agentlib._http._server import OPERATIONS, Server

TOKEN = "openapi-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

#: Examples schemathesis makes for each route: each is sent as made, and again with the
#: path naming a real session and turn, so that its body reaches the route's own checks.
EXAMPLES = 12


def helper() -> agentlib.Agent:
    return agentlib.Agent("helper", "You help.", agentlib.FunctionModel(lambda _: "ok"))


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Server, httpx.AsyncClient]]:
    store = f"sqlite:///{tmp_path / 'served.db'}"
    async with agentlib.serve([helper()], store=store, port=0, tokens=[TOKEN]) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as http:
            yield server, http


async def description(http: httpx.AsyncClient) -> dict[str, Any]:
    response = await http.get("/v1/openapi.json", headers={"Authorization": ""})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    document: dict[str, Any] = response.json()
    return document


async def test_the_description_is_served_without_a_token_and_is_valid_openapi(
    served: tuple[Server, httpx.AsyncClient],
) -> None:
    _, http = served
    document = await description(http)
    assert document["openapi"] == "3.1.0"
    schema = schemathesis.openapi.from_dict(document)
    schema.validate()  # raises for a document the OpenAPI 3.1 schema refuses
    assert list(schema.iter_schema_warnings()) == []
    assert (await http.get("/v1/agents", headers={"Authorization": ""})).status_code == 401


async def test_every_route_served_is_described_and_every_one_described_is_served(
    served: tuple[Server, httpx.AsyncClient],
) -> None:
    server, http = served
    document = await description(http)
    described = {
        (path, method.upper()) for path, item in document["paths"].items() for method in item
    }
    routes = server.app().routes  # type: ignore[attr-defined]
    served_routes = {
        (route.path, method) for route in routes for method in route.methods if method != "HEAD"
    }
    assert served_routes == described
    assert len(described) == len(OPERATIONS)


async def test_each_route_that_takes_a_token_says_so_and_the_others_say_none(
    served: tuple[Server, httpx.AsyncClient],
) -> None:
    _, http = served
    document = await description(http)
    for path, item in document["paths"].items():
        for method, operation in item.items():
            response = await http.request(method, path, headers={"Authorization": ""})
            wants = operation["security"] == [{"bearer": []}]
            assert (response.status_code == 401) == wants, (method, path, response.text)
            if wants:
                assert "401" in operation["responses"]


async def start_session(http: httpx.AsyncClient) -> tuple[str, str]:
    """A session of ``helper`` with one completed turn: its id and the turn's."""
    made = await http.post("/v1/agents/helper/sessions")
    assert made.status_code == 201, made.text
    session = made.json()["id"]
    turn = await http.post(
        f"/v1/agents/helper/sessions/{session}/turns", params={"wait": 30}, json={"content": "hi"}
    )
    assert turn.status_code == 201, turn.text
    assert turn.json()["record"]["type"] == "completed"
    return session, turn.json()["turn_id"]


async def test_the_event_routes_answer_pages_or_streams_as_described(
    served: tuple[Server, httpx.AsyncClient],
) -> None:
    _, http = served
    document = await description(http)
    session, turn = await start_session(http)
    events = f"/v1/agents/helper/sessions/{session}/turns/{turn}/events"
    described = document["paths"]["/v1/agents/{agent}/sessions/{session_id}/turns/{turn_id}/events"]
    media = described["get"]["responses"]["200"]["content"]
    assert set(media) == {"application/json", "text/event-stream"}
    page = await http.get(events)
    assert page.headers["content-type"].startswith("application/json")
    assert page.json()["ended"] is True
    with trio.fail_after(30):  # only catches a hang: the turn has ended, so the stream ends
        streamed = await http.get(events, headers={"accept": "text/event-stream"})
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert streamed.text.endswith("event: end\ndata: {}\n\n")


async def test_a_body_field_of_the_wrong_type_is_a_400_that_names_its_path(
    served: tuple[Server, httpx.AsyncClient],
) -> None:
    _, http = served
    session, turn = await start_session(http)
    base = f"/v1/agents/helper/sessions/{session}"
    wrong = {
        f"{base}/turns": ({"content": "hi", "max_steps": "3"}, "$.max_steps"),
        f"{base}/messages": ({"content": 5}, "$.content"),
        f"{base}/turns/{turn}/steer": (
            {"content": "hi", "idempotency_key": 1},
            "$.idempotency_key",
        ),
        f"{base}/turns/{turn}/callbacks/c1": ({"answer": {}, "kind": "maybe"}, "$.kind"),
        f"{base}/tokens": ({"rights": ["read", "write"]}, "$.rights[1]"),
        "/v1/agents/helper/sessions": ({"inputs": {"repo": []}}, "$.inputs['repo']"),
    }
    for path, (body, at) in wrong.items():
        refused = await http.post(path, json=body)
        assert refused.status_code == 400, (path, refused.text)
        error = refused.json()["error"]
        assert error["type"] == "ValidationError", (path, error)
        assert error["message"].startswith("invalid body: "), (path, error)
        assert any(problem.endswith(at) for problem in error["errors"]), (path, error)
    missing = await http.post(f"{base}/turns", json={})
    assert missing.status_code == 400
    assert missing.json()["error"]["errors"] == ["required field missing @ $.content"]


def fuzz(url: str, document: dict[str, Any], real: dict[str, dict[str, str]]) -> list[str]:
    """Send each route ``EXAMPLES`` requests made from ``document``, each as made and again
    at a real session's path; the routes checked."""
    schema = schemathesis.openapi.from_dict(document)
    checked = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()
        check_route(operation, url, real[operation.label])()
        checked.append(operation.label)
    return checked


def check_route(operation: Any, url: str, real: dict[str, str]) -> Callable[[], None]:
    """A test of ``operation``: requests made to fit its description and not to fit it."""
    modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)

    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
    )
    @hypothesis.given(case=st.one_of([operation.as_strategy(mode) for mode in modes]))
    def check(case: Any) -> None:
        # A page, never a stream that waits for the session to end.
        case.headers = {**(case.headers or {}), **AUTH, "Accept": "application/json"}
        send(case)
        path = case.path_parameters or {}
        if "agent" in path:
            path["agent"] = "helper"
            path.update((key, value) for key, value in real.items() if key in path)
            send(case)

    def send(case: Any) -> None:
        response = case.call(base_url=url, timeout=60)
        status = response.status_code
        assert status < 500 or status == 503, (case.method, case.path, response.text)
        case.validate_response(
            response, checks=[response_schema_conformance, status_code_conformance]
        )

    return check


@pytest.mark.slow
async def test_a_real_server_answers_as_its_description_says_for_made_up_requests(
    served: tuple[Server, httpx.AsyncClient],
) -> None:
    server, http = served
    document = await description(http)
    labels = [f"{o.method} {o.path}" for o in OPERATIONS]
    real = {}
    for label in labels:  # a session of its own for each route: one may cancel its own
        session, turn = await start_session(http)
        real[label] = {"session_id": session, "turn_id": turn}
    run: Callable[[], list[str]] = lambda: fuzz(server.url, document, real)  # noqa: E731
    checked = await trio.to_thread.run_sync(run)
    assert sorted(checked) == sorted(labels)
