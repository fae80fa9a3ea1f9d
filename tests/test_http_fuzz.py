"""The server's edge against hostile and broken clients: a real ``agentlib.serve`` server on
127.0.0.1 and a SQLite file, driven with raw bytes as any client could send them."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any
from urllib.parse import quote

import attrs
import httpx
import pytest
import trio
from _support import approval_agent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


async def test_a_request_answered_before_its_body_is_read_leaves_its_connection_usable(
    tmp_path: Path,
) -> None:
    mine = {**JSON, "Authorization": f"Bearer {TOKEN}"}
    body = json.dumps({"content": "a" * 1_500_000}).encode()  # over the limit, too
    refusals = [
        ("POST", "/agents/echo/sessions", JSON, 401),
        ("POST", "/agents/nobody/sessions", mine, 404),
        ("POST", "/agents/echo/sessions", mine, 413),
        ("GET", "/health", mine, 200),
        ("POST", "/nowhere", mine, 404),
    ]

    def send(url: str) -> None:  # a blocking client: one connection, used again
        with httpx.Client(base_url=url + "/v1", timeout=30) as http:
            for method, route, headers, status in refusals * 2:
                refused = http.request(method, route, content=body, headers=headers)
                assert refused.status_code == status, refused.text
                again = http.get("/agents", headers=mine)  # on the same connection
                assert again.status_code == 200

    store = f"sqlite:///{tmp_path / 'served.db'}"
    async with agentlib.serve([echo_agent()], store=store, port=0, tokens=[TOKEN]) as server:
        await trio.to_thread.run_sync(send, server.url)


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


@pytest.mark.parametrize(
    ("method", "path", "status", "kind", "said"),
    [
        ("GET", "/nowhere", 404, "RouteNotFound", "no route GET /v1/nowhere"),
        # A segment ".." the client resolves: the request goes to the path above.
        ("GET", "/agents/echo/sessions/..", 404, "RouteNotFound", "no route GET /v1/agents/echo"),
        ("DELETE", "/agents", 405, "MethodNotAllowed", "/v1/agents takes GET, HEAD, not DELETE"),
        ("GET", "/agents/echo/sessions/s/turns", 405, "MethodNotAllowed", "takes POST, not GET"),
    ],
)
async def test_a_path_or_method_no_route_takes_is_an_error_body_naming_it(
    http: httpx.AsyncClient, method: str, path: str, status: int, kind: str, said: str
) -> None:
    response = await http.request(method, path)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["type"] == kind
    assert said in error["message"]
    assert error["message"].endswith("see /v1/openapi.json for the server's routes")
    if status == 405:
        assert response.headers["allow"] in error["message"]


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


# --- what the server logs ---------------------------------------------------------------------


async def wait_for_record(
    caplog: pytest.LogCaptureFixture, found: Callable[[logging.LogRecord], bool]
) -> logging.LogRecord:
    """The first log record ``found`` takes, once there is one (the deadline catches only
    a hang)."""
    with trio.fail_after(30):
        while True:
            for record in caplog.records:
                if found(record):
                    return record
            await trio.sleep(0.01)


async def test_a_client_that_hangs_up_mid_body_is_logged_at_debug_not_as_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    store = f"sqlite:///{tmp_path / 'served.db'}"
    async with agentlib.serve([echo_agent()], store=store, port=0) as server:
        host, port = server.url.removeprefix("http://").split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        head = "POST /v1/agents/echo/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
        await stream.send_all(f'{head}Content-Type: application/json\r\n\r\n{{"his'.encode())
        await stream.aclose()
        said = await wait_for_record(caplog, lambda record: "hung up" in record.getMessage())
        async with httpx.AsyncClient(base_url=server.url + "/v1") as http:
            assert (await http.get("/health")).status_code == 200
    assert (said.name, said.levelno) == ("agentlib.serve", logging.DEBUG)
    assert "POST /v1/agents/echo/sessions" in said.getMessage()
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert not errors, [record.getMessage() for record in errors]


async def test_a_503_is_logged_on_the_server_with_its_cause(
    postgres_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    import psycopg
    from conftest import POSTGRES

    from agentlib.store import PostgresStore

    caplog.set_level(logging.INFO)
    store = PostgresStore(POSTGRES, schema=postgres_schema)
    async with agentlib.serve([echo_agent()], store=store, port=0, tokens=[TOKEN]) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url + "/v1", timeout=30) as http:
            mine = {"Authorization": f"Bearer {TOKEN}"}
            assert (await http.post("/agents/echo/sessions", headers=mine)).status_code == 201
            with psycopg.connect(POSTGRES, autocommit=True) as connection:
                connection.execute(f"DROP TABLE {postgres_schema}.sessions CASCADE")
            failed = await http.get("/agents/echo/sessions/not-read-yet", headers=mine)
            assert failed.status_code == 503, failed.text
            assert (await http.get("/health")).status_code == 200
    said = await wait_for_record(caplog, lambda record: record.name == "agentlib.serve")
    assert said.levelno == logging.WARNING
    message = said.getMessage()
    assert "GET /v1/agents/echo/sessions/not-read-yet: 503, StoreError" in message
    assert failed.json()["error"]["message"] in message
    assert "caused by UndefinedTable" in message
    assert TOKEN not in caplog.text


ACCESS_LINE = re.compile(r"^(GET|POST) (/\S*) (\d{3}) \d+\.\dms$")


def access_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, int]]:
    lines = []
    for record in caplog.records:
        if record.name == "agentlib.access":
            assert record.levelno == logging.INFO
            match = ACCESS_LINE.match(record.getMessage())
            assert match is not None, record.getMessage()
            lines.append((match[1], match[2], int(match[3])))
    return lines


async def test_each_request_is_one_access_log_line_without_its_query_or_headers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    store = f"sqlite:///{tmp_path / 'served.db'}"
    async with agentlib.serve([echo_agent()], store=store, port=0, tokens=[TOKEN]) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url + "/v1", timeout=30) as http:
            mine = {"Authorization": f"Bearer {TOKEN}"}
            session = (await http.post("/agents/echo/sessions", headers=mine)).json()["id"]
            path = f"/v1/agents/echo/sessions/{session}"
            made = await http.post(
                f"{path[3:]}/turns?wait=10", json={"content": "hi"}, headers=mine
            )
            turn = made.json()["turn_id"]
            await http.get(f"{path[3:]}/events", params={"after": "secret-cursor"}, headers=mine)
            stream = {**mine, "Accept": "text/event-stream"}
            sse = await http.get(f"{path[3:]}/turns/{turn}/events", headers=stream)
            assert sse.status_code == 200
            assert "event: end" in sse.text  # the line is written once the stream ends
            await http.get("/agents")  # no token
            await wait_for_record(caplog, lambda record: "/v1/agents " in record.getMessage())
    assert access_lines(caplog) == [
        ("POST", "/v1/agents/echo/sessions", 201),
        ("POST", f"{path}/turns", 201),
        ("GET", f"{path}/events", 400),
        ("GET", f"{path}/turns/{turn}/events", 200),
        ("GET", "/v1/agents", 401),
    ]
    served = [
        record.getMessage() for record in caplog.records if record.name.startswith("agentlib")
    ]
    assert not [line for line in served if "secret-cursor" in line or TOKEN in line]


def test_the_serve_command_writes_the_access_log_on_stderr(tmp_path: Path) -> None:
    (tmp_path / "my_agents.py").write_text(
        "import agentlib\n\necho = agentlib.Agent('echo', model=agentlib.ScriptedModel([]))\n"
    )
    command = [sys.executable, "-m", "agentlib", "serve", "my_agents:echo", "--port", "0"]
    command += ["--store", f"sqlite:///{tmp_path / 'served.db'}", "--token", TOKEN]
    err: list[str] = []
    logged = threading.Semaphore(0)

    def read_stderr(stream: Any) -> None:
        for line in stream:
            err.append(line)
            if " agentlib.access INFO " in line:
                logged.release()

    with subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        reader = threading.Thread(target=read_stderr, args=(process.stderr,), daemon=True)
        reader.start()
        try:
            assert process.stdout is not None
            url = process.stdout.readline().split(" on ")[1].split(" ")[0]
            with httpx.Client(base_url=url, timeout=30) as http:
                mine = {"Authorization": f"Bearer {TOKEN}"}
                assert http.get("/agents?x=secret-query", headers=mine).status_code == 200
                assert http.post("/agents/echo/sessions").status_code == 401
            # A line is written once its response has ended, which the client may read
            # first: the server is stopped once both are written.
            for _ in range(2):
                assert logged.acquire(timeout=60)
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)
            reader.join(timeout=60)
    assert process.returncode == 130, "".join(err)
    lines = [line for line in err if " agentlib.access INFO " in line]
    assert [line.split(" INFO ")[1].rsplit(" ", 1)[0] for line in lines] == [
        "GET /v1/agents 200",
        "POST /v1/agents/echo/sessions 401",
    ]
    assert "secret-query" not in "".join(err)
    assert TOKEN not in "".join(err)


# --- every route, fuzzed ----------------------------------------------------------------------

#: The fields the routes take, and a few they do not.
FIELDS = [
    "content",
    "history",
    "inputs",
    "idempotency_key",
    "max_steps",
    "rights",
    "seconds",
    "answer",
    "kind",
    "type",
    "nope",
]
#: Text a client may send: anything, and the characters a store chokes on.
TEXT = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["\ud800", "a\udfffb", "\x00", "nul\x00key", "\U0001f600", "", "é"]),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
BLOCK = st.fixed_dictionaries({"type": st.sampled_from(["text", "image", "nope"]), "text": TEXT})
ITEM = st.fixed_dictionaries(
    {"type": st.sampled_from(["message", "tool_call", "tool_result", "x"])},
    optional={"role": st.sampled_from(["user", "system", "x"]), "content": st.lists(BLOCK)},
)
FIELD_VALUES = st.one_of(JSON_VALUES, st.lists(BLOCK, max_size=3), st.lists(ITEM, max_size=3))
OBJECTS = st.dictionaries(st.sampled_from(FIELDS) | TEXT, FIELD_VALUES, max_size=4)
#: Bodies no JSON parser takes whole, and bodies at the limits, by name (a name is what an
#: example shows: the largest is a megabyte).
ODD_BODIES = {
    "not UTF-8": b"\xff\xfe{}",
    "a surrogate as UTF-8": b'{"content": "\xed\xa0\x80"}',
    "cut short": b'{"content": "\\ud800"',
    "too deep": b"[" * 150 + b"]" * 150,
    "inputs too deep": b'{"inputs": {"a": ' + b"[" * 120 + b"]" * 120 + b"}}",
    "over the limit": b'{"content": "' + b"a" * (1 << 20) + b'"}',
    "NaN": b"NaN",
    "a float too large": b'{"max_steps": 1e999}',
    "a long integer": b'{"seconds": 123456789012345678901234567890}',
    "empty": b"",
    "null": b"null",
}
BODIES = st.one_of(
    OBJECTS.map(lambda data: json.dumps(data).encode()),  # escapes what UTF-8 cannot hold
    JSON_VALUES.map(lambda data: json.dumps(data).encode()),
    st.sampled_from(sorted(ODD_BODIES)),
    st.binary(max_size=40),
)
#: Header text a client library sends: printable Latin-1 (h11 refuses control characters).
HEADER_TEXT = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=30
).map(lambda text: text.strip().encode("latin-1"))
#: Query values; none is a wait a server would sit out (it would only slow the test).
QUERY_TEXT = st.one_of(
    st.sampled_from(["-1", "nan", "inf", "1e999", "61", "0", "1001", "abc", "as1.x.y"]),
    st.text(max_size=20).filter(lambda text: not _a_real_wait(text)),
)
ROUTES = [
    ("GET", "/v1/health"),
    ("GET", "/v1/agents"),
    ("POST", "/v1/agents/{agent}/sessions"),
    ("GET", "/v1/agents/{agent}/sessions/{session}"),
    ("POST", "/v1/agents/{agent}/sessions/{session}/cancel"),
    ("POST", "/v1/agents/{agent}/sessions/{session}/tokens"),
    ("POST", "/v1/agents/{agent}/sessions/{session}/turns"),
    ("POST", "/v1/agents/{agent}/sessions/{session}/messages"),
    ("GET", "/v1/agents/{agent}/sessions/{session}/events"),
    ("GET", "/v1/agents/{agent}/sessions/{session}/subagents"),
    ("GET", "/v1/agents/{agent}/sessions/{session}/turns/{turn}"),
    ("POST", "/v1/agents/{agent}/sessions/{session}/turns/{turn}/steer"),
    ("POST", "/v1/agents/{agent}/sessions/{session}/turns/{turn}/interrupt"),
    ("POST", "/v1/agents/{agent}/sessions/{session}/turns/{turn}/callbacks/{callback}"),
    ("GET", "/v1/agents/{agent}/sessions/{session}/turns/{turn}/events"),
]


def _a_real_wait(text: str) -> bool:
    try:
        return 0 < float(text) <= 60
    except ValueError:
        return False


@attrs.frozen
class Fuzzed:
    """A server in a thread of its own, and the ids of what it holds."""

    url: str
    ids: dict[str, list[str]]


@contextlib.contextmanager
def served_in_a_thread(store: Any) -> Iterator[Fuzzed]:
    """A server on ``store`` with a session of each agent (the approver's turn blocked on
    its callback), run by ``trio.run`` in a thread, stopped and joined on exit; what
    failed in it (the server stopping, say) is raised here."""
    ready: Future[tuple[Fuzzed, trio.lowlevel.TrioToken, trio.Event]] = Future()

    async def run() -> None:
        agents = [echo_agent(), approval_agent([])]
        async with agentlib.serve(agents, store=store, port=0, tokens=[TOKEN]) as server:
            base = server.url + "/v1/agents"
            async with httpx.AsyncClient(headers=BEARER, timeout=30) as http:
                echo = (await http.post(f"{base}/echo/sessions")).json()["id"]
                done = await http.post(f"{base}/echo/sessions/{echo}/turns?wait=10", json=HI)
                held = (await http.post(f"{base}/approver/sessions")).json()["id"]
                made = await http.post(f"{base}/approver/sessions/{held}/turns?wait=10", json=HI)
            blocked = made.json()["record"]
            ids = {
                "agent": ["echo", "approver"],
                "session": [echo, held],
                "turn": [done.json()["turn_id"], made.json()["turn_id"]],
                "callback": [blocked["callbacks"][0]["id"]],
            }
            stop = trio.Event()
            ready.set_result((Fuzzed(server.url, ids), trio.lowlevel.current_trio_token(), stop))
            await stop.wait()

    failed: list[BaseException] = []

    def main() -> None:
        try:
            trio.run(run)
        except BaseException as error:
            failed.append(error)
            if not ready.done():
                ready.set_exception(error)

    thread = threading.Thread(target=main, name="fuzzed-server", daemon=True)
    thread.start()
    fuzzed, token, stop = ready.result(timeout=60)
    try:
        yield fuzzed
    finally:
        trio.from_thread.run_sync(stop.set, trio_token=token)
        thread.join(timeout=60)
    if failed:
        raise failed[0]


BEARER = {"Authorization": f"Bearer {TOKEN}"}
HI = {"content": "hi"}


def fuzz_every_route(fuzzed: Fuzzed) -> None:
    """Send requests of every route, with junk where a client can put it, and check each
    answer: no 5xx but a 503, no traceback, and the server still answers."""
    # Dot segments, which the client resolves, send the request to a path no route takes.
    junk_ids = st.one_of(
        TEXT.filter(lambda text: "/" not in text and text), st.sampled_from(["x", ".", ".."])
    )

    @settings(
        max_examples=120,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        route=st.sampled_from(ROUTES),
        names=st.fixed_dictionaries(
            {name: st.sampled_from(values) | junk_ids for name, values in fuzzed.ids.items()}
        ),
        body=BODIES | st.none(),
        token=st.one_of(st.just(f"Bearer {TOKEN}".encode()), HEADER_TEXT, st.none()),
        key=HEADER_TEXT | st.none(),
        cursor=HEADER_TEXT | st.none(),
        query=st.dictionaries(st.sampled_from(["wait", "after", "limit", "x"]), QUERY_TEXT),
    )
    def one_request(
        route: tuple[str, str],
        names: dict[str, str],
        body: bytes | str | None,
        token: bytes | None,
        key: bytes | None,
        cursor: bytes | None,
        query: dict[str, str],
    ) -> None:
        method, template = route
        content = ODD_BODIES[body] if isinstance(body, str) else body
        # A lone surrogate goes as the (invalid) UTF-8 a careless client writes.
        segments = {
            name: quote(value.encode("utf-8", "surrogatepass"), safe="")
            for name, value in names.items()
        }
        path = template.format(**segments)
        headers: dict[str, bytes] = {"content-type": b"application/json"}
        for name, value in (("authorization", token), ("idempotency-key", key)):
            if value is not None:
                headers[name] = value
        if cursor is not None:
            headers["last-event-id"] = cursor
        with httpx.Client(base_url=fuzzed.url, timeout=60) as http:
            response = http.request(method, path, content=content, headers=headers, params=query)
            assert response.status_code < 500 or response.status_code == 503, (
                method,
                path,
                response.status_code,
                response.text[:500],
            )
            assert "Traceback" not in response.text
            if response.status_code >= 400:
                said = response.json()  # an error, or the record of a conflict (a 409)
                assert said["error"]["message"] if "error" in said else said["type"], said
            assert http.get("/v1/health").status_code == 200

    one_request()


@pytest.mark.slow
def test_no_request_to_any_route_fails_the_server_on_sqlite(tmp_path: Path) -> None:
    with served_in_a_thread(f"sqlite:///{tmp_path / 'fuzzed.db'}") as fuzzed:
        fuzz_every_route(fuzzed)


@pytest.mark.slow
def test_no_request_to_any_route_fails_the_server_on_postgresql(postgres_schema: str) -> None:
    from conftest import POSTGRES

    from agentlib.store import PostgresStore

    with served_in_a_thread(PostgresStore(POSTGRES, schema=postgres_schema)) as fuzzed:
        fuzz_every_route(fuzzed)


async def test_a_failure_of_the_server_is_a_500_in_json_logged_with_where_not_what(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "-".join(("s3cret", "value"))  # not in the source its frames show

    async def fails(self: object, request: object) -> object:
        raise RuntimeError(f"a value of the request: {secret}")

    from agentlib._http import _server

    # A fault of the server's own, in the route that lists the agents.
    operations = tuple(
        attrs.evolve(operation, endpoint=fails) if operation.path == "/v1/agents" else operation
        for operation in _server.OPERATIONS
    )
    monkeypatch.setattr(_server, "OPERATIONS", operations)
    store = f"sqlite:///{tmp_path / 'served.db'}"
    async with agentlib.serve([echo_agent()], store=store, port=0) as server:  # noqa: SIM117
        async with httpx.AsyncClient(base_url=server.url + "/v1", timeout=30) as http:
            failed = await http.get("/agents")
            assert (await http.get("/health")).status_code == 200
    assert failed.status_code == 500
    assert failed.json()["error"]["type"] == "InternalServerError"
    assert "s3cret-value" not in failed.text
    said = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert [record.name for record in said] == ["agentlib.serve"]
    message = said[0].getMessage()
    assert message.startswith("GET /v1/agents: 500, the server failed with RuntimeError at\n")
    assert "in fails" in message
    assert "s3cret-value" not in caplog.text
