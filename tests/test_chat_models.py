"""MistralModel and OpenAICompatibleModel against a real HTTP server on 127.0.0.1.

The server (tests/_http_server.py) replays wire-format responses (tests/recordings) and
records every request; the tests check the exact requests sent, the entries and events the
replies become, and what each failure does. Time is trio's MockClock: backoffs, Retry-After
waits and timeouts pass in virtual time.
"""

from __future__ import annotations

import contextlib
import json
from typing import Annotated, Any

import attrs
import httpx
import pytest
import trio
import trio.testing
from _http_server import Reply, Server, recording, serve

import agentlib
from agentlib import (
    Agent,
    Completed,
    Credentials,
    Depends,
    Entry,
    EntryAdded,
    EntryCompleted,
    EntryDelta,
    Event,
    Failed,
    ImageContentBlock,
    Interrupted,
    MessageEntry,
    MistralModel,
    ModelError,
    OpenAICompatibleModel,
    TextContentBlock,
    ToolCallEntry,
    ToolResultEntry,
    ToolSource,
    Usage,
)
from agentlib.testing import block_model_requests

KEY = "sk-test-5f0c2e9a7b1d4c3e"


@pytest.fixture
def clock(mock_clock: trio.testing.MockClock) -> trio.testing.MockClock:
    """Virtual time that jumps once every task has waited 10 ms (real) for something: the
    replies travel over real sockets, and a clock that jumped at once could pass a
    timeout while a reply is on its way."""
    mock_clock.autojump_threshold = 0.01
    return mock_clock


def mistral(server: Server, **options: Any) -> MistralModel:
    return MistralModel("mistral-small-latest", api_key=KEY, base_url=f"{server.url}/v1", **options)


def openai(server: Server, **options: Any) -> OpenAICompatibleModel:
    return OpenAICompatibleModel("Qwen/Qwen2.5-7B-Instruct", f"{server.url}/v1", **options)


def get_weather(city: str) -> str:
    """Today's weather in a city.

    Args:
        city: The city's name.
    """
    return {"Paris": "sunny, 21 °C", "London": "rain, 14 °C"}[city]


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Today's weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's name."}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def reply_json(
    text: str | None = None, calls: list[tuple[str, str, dict[str, Any]]] = (), **usage: int
) -> Reply:
    """A chat completion as Mistral sends it: text and/or tool calls (id, name, arguments)."""
    message = {
        "role": "assistant",
        "content": text or "",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
                "index": index,
            }
            for index, (call_id, name, arguments) in enumerate(calls)
        ]
        or None,
    }
    body = {
        "id": "a1b2c3",
        "object": "chat.completion",
        "model": "mistral-small-latest",
        "created": 1767261600,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": usage or None,
    }
    return Reply(body=json.dumps(body).encode())


def sse(*chunks: dict[str, Any], done: bool = True) -> Reply:
    """A stream of ``chat.completion.chunk`` events carrying these choices' deltas."""
    events = [
        b"data: "
        + json.dumps({"id": "s1", "object": "chat.completion.chunk", **chunk}).encode()
        + b"\n\n"
        for chunk in chunks
    ]
    if done:
        events.append(b"data: [DONE]\n\n")
    return Reply(headers=(("content-type", "text/event-stream"),), chunks=tuple(events))


def delta(finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}


async def run(agent: Agent, *messages: str, **options: Any) -> list[agentlib.TurnState[Any]]:
    async with agentlib.open_runtime():
        session = await agent.start_session()
        return [await session.run(message, **options) for message in messages]


async def run_with_events(agent: Agent, message: str) -> tuple[Any, list[Event]]:
    events: list[Event] = []
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run(message, on_event=events.append)
    return record, events


def completed(events: list[Event]) -> list[Entry]:
    return [event.entry for event in events if isinstance(event, EntryCompleted)]


def without_ids(entry: Entry) -> Entry:
    return attrs.evolve(entry, id="-", turn_id=None)


#: Deep enough to break anything that recurses once per level.
DEEP = 2_000


def nested_text(levels: int) -> str:
    """JSON text of arrays ``levels`` deep, written without recursion."""
    return "[" * levels + '"sk-live-SECRET"' + "]" * levels


def reply_calling(arguments: str) -> Reply:
    """A whole reply calling get_weather with ``arguments``, the text of its arguments."""
    body = json.loads(recording("mistral/chat_tool_calls.json").body)
    body["choices"][0]["message"]["tool_calls"] = [
        {"id": "Q7kd2Rw9a", "function": {"name": "get_weather", "arguments": arguments}}
    ]
    return Reply(body=json.dumps(body).encode())


def stream_calling(arguments: str) -> Reply:
    """A stream calling get_weather, its arguments' text in fragments of 500 characters."""
    pieces = [arguments[start : start + 500] for start in range(0, len(arguments), 500)]
    first = {"id": "Q7kd2Rw9a", "index": 0, "function": {"name": "get_weather", "arguments": ""}}
    return sse(
        delta(role="assistant", tool_calls=[first]),
        *(delta(tool_calls=[{"index": 0, "function": {"arguments": p}}]) for p in pieces),
        delta("tool_calls"),
    )


# --- the wire format ------------------------------------------------------------------------


async def test_a_plain_reply_and_the_exact_request(server: Server) -> None:
    server.play(recording("mistral/chat_text.json"))
    agent = Agent("calc", "You add numbers.", model=mistral(server, stream=False))
    (record,) = await run(agent, "What is 1 + 2?")
    assert isinstance(record, Completed)
    assert record.text == "The answer is 3."
    assert record.usage == Usage(input_tokens=16, output_tokens=7, total_tokens=23)
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == {
        "model": "mistral-small-latest",
        "messages": [
            {"role": "system", "content": "You add numbers."},
            {"role": "user", "content": "What is 1 + 2?"},
        ],
        "stream": False,
    }


async def test_parallel_tool_calls_keep_their_ids_and_order(server: Server) -> None:
    server.play(recording("mistral/chat_tool_calls.json"), recording("mistral/chat_text.json"))
    agent = Agent("w", model=mistral(server, stream=False), tools=[get_weather])
    record, events = await run_with_events(agent, "Weather in Paris and London?")
    assert isinstance(record, Completed)
    calls = [entry for entry in completed(events) if isinstance(entry, ToolCallEntry)]
    assert [(c.tool_call_id, c.arguments) for c in calls] == [
        ("Q7kd2Rw9a", {"city": "Paris"}),
        ("mZ4xT8pLc", {"city": "London"}),
    ]
    assert calls[0].usage == Usage(input_tokens=112, output_tokens=38, total_tokens=150)
    assert record.usage == Usage(input_tokens=128, output_tokens=45, total_tokens=173, requests=2)
    first, second = (request.json() for request in server.requests)
    assert first["tools"] == [WEATHER_TOOL]
    assert "tool_choice" not in first  # the provider's default
    assert second["messages"] == [
        {"role": "user", "content": "Weather in Paris and London?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "Q7kd2Rw9a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "mZ4xT8pLc",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "London"}'},
                },
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "Q7kd2Rw9a",
            "content": "sunny, 21 °C",
            "name": "get_weather",
        },
        {
            "role": "tool",
            "tool_call_id": "mZ4xT8pLc",
            "content": "rain, 14 °C",
            "name": "get_weather",
        },
    ]


async def test_dotted_tool_ids_go_out_as_allowed_names_and_come_back(server: Server) -> None:
    """``notion.search`` and ``client.pick`` are no valid function names for a provider:
    they are sent as ``notion_search``, ``client_pick``, and read back as the tools' ids."""

    async def search(query: str, credentials: Annotated[Credentials, Depends()]) -> str:
        """Search the workspace.

        Args:
            query: What to look for.
        """
        return f"3 pages about {query}"

    @agentlib.client_tool
    def pick(options: list[str]) -> str:
        """Ask the user to pick one option."""
        ...

    server.play(
        reply_json(calls=[("aaaaaaaa1", "notion_search", {"query": "trio"})]),
        reply_json("Found them."),
    )
    agent = Agent(
        "n",
        model=mistral(server, stream=False, tool_choice="notion.search"),
        tools=[ToolSource(name="notion", tools=[search], requires_sign_in=True), pick],
    )
    async with agentlib.open_runtime():
        session = await agent.start_session(
            on_sign_in=lambda callback: agentlib.SignInAnswer(credentials={"notion": "tok"})
        )
        record = await session.run("Find trio notes")
    assert isinstance(record, Completed), record
    assert record.tool_calls[0].name == "notion.search"
    first, second = (request.json() for request in server.requests)
    assert [tool["function"]["name"] for tool in first["tools"]] == ["notion_search", "client_pick"]
    assert first["tool_choice"] == {"type": "function", "function": {"name": "notion_search"}}
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "aaaaaaaa1",
        "content": "3 pages about trio",
        "name": "notion_search",
    }


@pytest.mark.parametrize(
    ("choice", "mistral_sends", "openai_sends"),
    [("auto", "auto", "auto"), ("none", "none", "none"), ("required", "any", "required")],
)
async def test_tool_choice_in_each_dialect(
    server: Server, choice: str, mistral_sends: str, openai_sends: str
) -> None:
    server.play(reply_json("ok"), reply_json("ok"))
    for model in (
        mistral(server, stream=False, tool_choice=choice, parallel_tool_calls=False),
        openai(server, stream=False, tool_choice=choice, parallel_tool_calls=False),
    ):
        await run(Agent("w", model=model, tools=[get_weather]), "hi")
    sent = [request.json() for request in server.requests]
    assert [body["tool_choice"] for body in sent] == [mistral_sends, openai_sends]
    assert [body["parallel_tool_calls"] for body in sent] == [False, False]


FORCED_TURN = {
    "mistral": ("mistral/stream_tool_calls.sse", "mistral/stream_text.sse"),
    "openai": ("openai/stream_tool_call_fragments.sse", "openai/stream_text.sse"),
}


@pytest.mark.parametrize(
    ("provider", "choice", "sent"),
    [
        ("mistral", "required", "any"),
        ("openai", "required", "required"),
        ("openai", "get_weather", {"type": "function", "function": {"name": "get_weather"}}),
    ],
)
async def test_a_forcing_tool_choice_goes_out_on_the_first_step_of_each_turn_only(
    server: Server, provider: str, choice: str, sent: Any
) -> None:
    """Sent again after the tool results, it would force another call: the model could never
    answer (the OpenAI Agents SDK resets it likewise)."""
    server.play(*[recording(name) for name in FORCED_TURN[provider] * 2])
    model = (mistral if provider == "mistral" else openai)(server, tool_choice=choice)
    records = await run(Agent("w", model=model, tools=[get_weather]), "Paris?", "And now?")
    assert all(isinstance(record, Completed) for record in records)
    bodies = [request.json() for request in server.requests]
    assert [body.get("tool_choice") for body in bodies] == [sent, None, sent, None]
    assert all(body["tools"] == [WEATHER_TOOL] for body in bodies)  # it may still call them


async def test_reset_tool_choice_false_sends_a_forcing_choice_on_every_step(
    server: Server,
) -> None:
    server.play(recording("mistral/chat_tool_calls.json"), recording("mistral/chat_text.json"))
    model = mistral(server, stream=False, tool_choice="required", reset_tool_choice=False)
    (record,) = await run(Agent("w", model=model, tools=[get_weather]), "Paris?")
    assert isinstance(record, Completed)
    assert [request.json()["tool_choice"] for request in server.requests] == ["any", "any"]


@pytest.mark.parametrize("choice", ["auto", "none"])
async def test_a_tool_choice_that_forces_nothing_goes_out_on_every_step(
    server: Server, choice: str
) -> None:
    server.play(recording("mistral/chat_tool_calls.json"), recording("mistral/chat_text.json"))
    model = mistral(server, stream=False, tool_choice=choice)
    (record,) = await run(Agent("w", model=model, tools=[get_weather]), "Paris?")
    assert isinstance(record, Completed)
    assert [request.json()["tool_choice"] for request in server.requests] == [choice, choice]


async def test_a_tool_choice_naming_no_tool_fails_the_turn_with_a_clear_error(
    server: Server,
) -> None:
    agent = Agent("w", model=mistral(server, tool_choice="get_wether"), tools=[get_weather])
    (record,) = await run(agent, "hi")
    assert isinstance(record, Failed)
    assert "tool_choice names 'get_wether', which is not a tool of this agent" in (
        record.error.message
    )
    assert server.requests == []


@attrs.frozen
class Forecast:
    city: str
    temperature_c: int
    conditions: str


async def test_an_output_type_asks_for_its_json_schema(server: Server) -> None:
    server.play(recording("mistral/chat_json.json"))
    agent = Agent("f", model=mistral(server, stream=False), output_type=Forecast)
    (record,) = await run(agent, "Paris?")
    assert isinstance(record, Completed)
    assert record.output == Forecast(city="Paris", temperature_c=18, conditions="partly cloudy")
    response_format = server.requests[0].json()["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "Forecast"
    assert response_format["json_schema"]["schema"]["properties"]["temperature_c"] == {
        "type": "integer"
    }


async def test_images_become_image_parts(server: Server) -> None:
    server.play(reply_json("A cat."))
    agent = Agent("v", model=mistral(server, stream=False))
    content = [
        TextContentBlock(text="What is this?"),
        ImageContentBlock(uri="https://example.com/cat.png", media_type="image/png"),
    ]
    await run(agent, content)  # type: ignore[arg-type]
    assert server.requests[0].json()["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        ],
    }


async def test_imported_call_ids_are_made_mistral_shaped_the_same_for_call_and_result(
    server: Server,
) -> None:
    """Mistral takes back only 9-letter-or-digit ids: imported ``call_…`` ids are replaced,
    consistently; OpenAI-compatible servers get them as they are."""
    history = [
        {"type": "message", "role": "user", "content": [{"type": "text", "text": "Paris?"}]},
        {
            "type": "tool_call",
            "tool_call_id": "call_8f3a2c1d9e7b",
            "name": "get_weather",
            "arguments": {"city": "Paris"},
        },
        {"type": "tool_result", "tool_call_id": "call_8f3a2c1d9e7b", "result": "sunny"},
    ]
    server.play(reply_json("ok"), reply_json("ok"))
    for model in (mistral(server, stream=False), openai(server, stream=False)):
        agent = Agent("w", model=model, tools=[get_weather])
        async with agentlib.open_runtime():
            session = await agent.start_session(history=history)
            await session.run("And now?")
    for request, expected in zip(server.requests, ("mistral", "openai"), strict=True):
        messages = request.json()["messages"]
        call_id = messages[1]["tool_calls"][0]["id"]
        assert messages[2]["tool_call_id"] == call_id
        if expected == "mistral":
            assert len(call_id) == 9
            assert call_id.isalnum()
        else:
            assert call_id == "call_8f3a2c1d9e7b"


# --- streaming ------------------------------------------------------------------------------


async def test_streamed_text_arrives_as_deltas_and_ends_as_the_unstreamed_entry(
    server: Server,
) -> None:
    server.play(recording("mistral/stream_text.sse"), recording("mistral/chat_text.json"))
    streamed, events = await run_with_events(Agent("s", model=mistral(server)), "1 + 2?")
    whole, whole_events = await run_with_events(
        Agent("s", model=mistral(server, stream=False)), "1 + 2?"
    )
    assert isinstance(streamed, Completed)
    deltas = [event.delta for event in events if isinstance(event, EntryDelta)]
    assert deltas == ["The", " answer", " is", " 3", "."]
    opened = [event for event in events if isinstance(event, EntryAdded)][-1]
    assert opened.entry.content == ()  # the entry opened empty, then streamed
    assert without_ids(completed(events)[-1]) == without_ids(completed(whole_events)[-1])
    assert attrs.evolve(streamed, turn_id="-", session_id="-", cursor=None) == attrs.evolve(
        whole, turn_id="-", session_id="-", cursor=None
    )
    body = server.requests[0].json()
    assert body["stream"] is True
    assert "stream_options" not in body
    assert server.requests[0].headers["accept"] == "text/event-stream"


async def test_a_streamed_tool_call_sent_whole(server: Server) -> None:
    server.play(recording("mistral/stream_tool_calls.sse"), recording("mistral/stream_text.sse"))
    agent = Agent("w", model=mistral(server), tools=[get_weather])
    record, events = await run_with_events(agent, "Paris?")
    assert isinstance(record, Completed)
    (call,) = record.tool_calls
    assert (call.tool_call_id, call.name, call.arguments) == (
        "Ht3vN6qYe",
        "get_weather",
        {"city": "Paris"},
    )
    assert call.usage == Usage(input_tokens=98, output_tokens=19, total_tokens=117)
    results = [entry for entry in completed(events) if isinstance(entry, ToolResultEntry)]
    assert results[0].text == "sunny, 21 °C"


async def test_streamed_tool_call_fragments_are_assembled_by_index(server: Server) -> None:
    server.play(
        recording("openai/stream_tool_call_fragments.sse"), recording("openai/stream_text.sse")
    )
    agent = Agent("w", model=openai(server), tools=[get_weather])
    record, _ = await run_with_events(agent, "Paris and London?")
    assert isinstance(record, Completed)
    assert [(c.tool_call_id, c.arguments) for c in record.tool_calls] == [
        ("call_8f3a2c1d9e7b4a6f0c5d2e81", {"city": "Paris"}),
        ("call_2b6e9d0a4c8f1e7a3d5b9c60", {"city": "London"}),
    ]
    assert record.tool_calls[0].usage == Usage(input_tokens=187, output_tokens=44, total_tokens=231)
    first = server.requests[0].json()
    assert first["stream_options"] == {"include_usage": True}
    assert "authorization" not in server.requests[0].headers  # no key given, none sent


async def test_streamed_text_and_calls_in_one_reply(server: Server) -> None:
    server.play(
        sse(
            delta(role="assistant", content="Let me "),
            delta(content="check."),
            delta(
                "tool_calls",
                tool_calls=[
                    {
                        "id": "Ht3vN6qYe",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                    }
                ],
            ),
        ),
        recording("mistral/stream_text.sse"),
    )
    agent = Agent("w", model=mistral(server), tools=[get_weather])
    record, events = await run_with_events(agent, "Paris?")
    assert isinstance(record, Completed)
    message, call = completed(events)[1:3]
    assert isinstance(message, MessageEntry)
    assert message.text == "Let me check."
    assert isinstance(call, ToolCallEntry)
    assert call.arguments == {"city": "Paris"}  # arguments sent as an object are taken too


# --- failures -------------------------------------------------------------------------------


async def test_429_waits_as_retry_after_says_then_succeeds(
    server: Server, clock: trio.testing.MockClock
) -> None:
    server.play(recording("mistral/error_429.json"), recording("mistral/chat_text.json"))
    start = trio.current_time()
    (record,) = await run(Agent("a", model=mistral(server, stream=False)), "hi")
    assert isinstance(record, Completed)
    assert len(server.requests) == 2
    assert server.requests[0].json() == server.requests[1].json()
    assert 2.0 <= trio.current_time() - start < 2.5  # Retry-After: 2, no backoff on top


async def test_5xx_is_retried_with_exponential_backoff_and_jitter(
    server: Server, clock: trio.testing.MockClock
) -> None:
    server.play(
        recording("mistral/error_503.json"),
        recording("mistral/error_500.txt"),
        recording("mistral/chat_text.json"),
    )
    start = trio.current_time()
    (record,) = await run(Agent("a", model=mistral(server, stream=False)), "hi")
    assert isinstance(record, Completed)
    assert len(server.requests) == 3
    # 0.5 s then 1 s, each with up to 1 s of jitter.
    assert 1.5 <= trio.current_time() - start <= 3.5


async def test_retries_are_bounded_and_the_error_says_what_failed(
    server: Server, clock: trio.testing.MockClock
) -> None:
    server.play(*[recording("mistral/error_503.json")] * 3)
    agent = Agent("a", model=mistral(server, stream=False, max_retries=2))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("hi")
    assert isinstance(record, Failed)
    assert record.error.type == "ModelError"
    assert "Mistral answered HTTP 503" in record.error.message
    assert "tried 3 times" in record.error.message
    assert len(server.requests) == 3


async def test_a_model_error_carries_status_code_and_body_but_never_the_key(
    server: Server,
) -> None:
    server.play(recording("mistral/error_400_tool_id.json"))
    model = mistral(server, stream=False)
    request = agentlib.ModelRequest(entries=[], session_id="s", turn_id="t")
    with pytest.raises(ModelError) as raised:
        await model.complete(request)
    error = raised.value
    assert (error.status, error.code) == (400, "3280")
    assert error.body is not None
    assert '"code":"3280"' in error.body.replace(" ", "")
    assert "Tool call id was" in str(error)
    assert len(server.requests) == 1  # a 400 is not retried
    for text in (str(error), error.body, repr(model)):
        assert KEY not in text


async def test_a_401_says_to_check_the_key_and_an_echoed_key_is_scrubbed(
    server: Server,
) -> None:
    echo = json.dumps({"object": "error", "message": f"Invalid key {KEY}", "code": "1000"})
    server.play(Reply(status=401, body=echo.encode()))
    agent = Agent("a", model=mistral(server, stream=False))
    (record,) = await run(agent, "hi")
    assert isinstance(record, Failed)
    assert "HTTP 401" in record.error.message
    assert "check the api_key (api_key=... or MISTRAL_API_KEY)" in record.error.message
    assert KEY not in record.error.message
    assert "Invalid key ***" in record.error.message


async def test_a_422_lists_what_the_provider_refused(server: Server) -> None:
    server.play(recording("mistral/error_422.json"))
    with pytest.raises(ModelError) as raised:
        await mistral(server, stream=False).complete(agentlib.ModelRequest())
    assert raised.value.status == 422
    assert "HTTP 422: body." in str(raised.value)


async def test_a_retry_after_beyond_the_limit_fails_at_once(
    server: Server, clock: trio.testing.MockClock
) -> None:
    server.play(
        attrs.evolve(recording("mistral/error_429.json"), headers=(("retry-after", "3600"),))
    )
    with pytest.raises(ModelError, match="asked to retry after 3600 s") as raised:
        await mistral(server, stream=False).complete(agentlib.ModelRequest())
    assert raised.value.status == 429
    assert raised.value.code == "1300"
    assert len(server.requests) == 1


async def test_a_refused_connection_is_retried(
    server: Server, clock: trio.testing.MockClock
) -> None:
    server.play(Reply(refuse=True), recording("mistral/chat_text.json"))
    (record,) = await run(Agent("a", model=mistral(server, stream=False)), "hi")
    assert isinstance(record, Completed)
    assert len(server.requests) == 2


async def test_an_unreachable_server_fails_after_the_retries(
    clock: trio.testing.MockClock,
) -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()  # nothing listens there now
    model = MistralModel("m", api_key=KEY, base_url=f"http://127.0.0.1:{port}/v1", max_retries=1)
    with pytest.raises(
        ModelError, match=r"could not reach Mistral at http://127\.0\.0\.1"
    ) as raised:
        await model.complete(agentlib.ModelRequest())
    assert "tried 2 times" in str(raised.value)
    assert raised.value.status is None


PASSWORD = "pw-9d2e71c4"


async def test_a_password_in_the_base_url_is_never_shown(
    server: Server, clock: trio.testing.MockClock
) -> None:
    url = server.url.replace("http://", f"http://proxy-user:{PASSWORD}@")
    model = OpenAICompatibleModel("m", f"{url}/v1", stream=False, max_retries=0)
    assert (
        repr(model) == f"OpenAICompatibleModel('m', base_url='{url.replace(PASSWORD, '***')}/v1')"
    )
    server.play(Reply(status=404, body=b'{"message": "no such model"}'))
    with pytest.raises(ModelError) as raised:
        await model.complete(agentlib.ModelRequest())
    assert "check the model name ('m') and base_url ('http://proxy-user:***@" in str(raised.value)
    assert server.requests[0].headers["authorization"].startswith("Basic ")  # it was sent
    with block_model_requests(), pytest.raises(ModelError) as blocked:
        await model.complete(agentlib.ModelRequest())
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()
    gone = OpenAICompatibleModel("m", f"http://u:{PASSWORD}@127.0.0.1:{port}/v1", max_retries=0)
    with pytest.raises(ModelError) as unreachable:
        await gone.complete(agentlib.ModelRequest())
    assert f"server at http://u:***@127.0.0.1:{port}/v1/chat" in str(unreachable.value)
    for text in (str(raised.value), str(blocked.value), str(unreachable.value), repr(gone)):
        assert PASSWORD not in text


async def test_a_slow_server_times_out_and_is_retried(
    server: Server, clock: trio.testing.MockClock
) -> None:
    server.play(Reply(hang=True), attrs.evolve(recording("mistral/chat_text.json"), delay=3))
    model = mistral(server, stream=False, timeout=5)
    (record,) = await run(Agent("a", model=model), "hi")
    assert isinstance(record, Completed)
    assert len(server.requests) == 2
    await server.wait_closed()  # the first request was given up


async def test_a_server_that_never_answers_fails_in_time(
    server: Server, clock: trio.testing.MockClock
) -> None:
    server.play(Reply(hang=True), Reply(hang=True))
    model = mistral(server, stream=False, timeout=5, max_retries=1)
    with pytest.raises(ModelError, match="did not answer in time") as raised:
        await model.complete(agentlib.ModelRequest())
    assert "tried 2 times" in str(raised.value)


async def test_a_stream_dropped_before_any_text_is_retried(
    server: Server, clock: trio.testing.MockClock
) -> None:
    server.play(
        attrs.evolve(recording("mistral/stream_text.sse"), drop_after=1),  # the role only
        recording("mistral/stream_text.sse"),
    )
    record, events = await run_with_events(Agent("s", model=mistral(server)), "1 + 2?")
    assert isinstance(record, Completed)
    assert record.text == "The answer is 3."
    assert [e.delta for e in events if isinstance(e, EntryDelta)] == [
        "The",
        " answer",
        " is",
        " 3",
        ".",
    ]


async def test_a_stream_dropped_mid_text_fails_without_a_retry(
    server: Server, clock: trio.testing.MockClock
) -> None:
    server.play(attrs.evolve(recording("mistral/stream_text.sse"), drop_after=3))
    record, events = await run_with_events(Agent("s", model=mistral(server)), "1 + 2?")
    assert isinstance(record, Failed)
    assert "the stream from Mistral broke after part of the reply had arrived" in (
        record.error.message
    )
    assert [e.delta for e in events if isinstance(e, EntryDelta)] == ["The", " answer"]
    assert len(server.requests) == 1


async def test_a_stream_that_ends_early_without_text_is_retried(
    server: Server, clock: trio.testing.MockClock
) -> None:
    server.play(sse(delta(role="assistant"), done=False), recording("mistral/stream_text.sse"))
    (record,) = await run(Agent("s", model=mistral(server)), "1 + 2?")
    assert isinstance(record, Completed)
    assert len(server.requests) == 2


async def test_an_error_inside_the_stream_fails_the_turn(server: Server) -> None:
    server.play(sse({"error": {"message": "overloaded", "code": "3505"}}, done=False))
    (record,) = await run(Agent("s", model=mistral(server, max_retries=0)), "hi")
    assert isinstance(record, Failed)
    assert "Mistral failed mid-stream: overloaded" in record.error.message


async def test_interrupt_aborts_the_request_in_flight(
    server: Server, clock: trio.testing.MockClock
) -> None:
    server.play(Reply(hang=True))
    agent = Agent("s", model=mistral(server))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.start_turn("hi")
        await server.wait_requests()  # the request is in flight
        start = trio.current_time()
        await turn.interrupt()
        record = await turn.result()
        assert isinstance(record, Interrupted)
        assert trio.current_time() - start < 0.01  # at once, not after a timeout
        await server.wait_closed()
    assert len(server.requests) == 1


async def test_cancelling_the_session_aborts_the_stream_in_flight(
    server: Server, clock: trio.testing.MockClock
) -> None:
    stream = recording("mistral/stream_text.sse")
    server.play(attrs.evolve(stream, chunk_delay=60))
    async with agentlib.open_runtime():
        session = await Agent("s", model=mistral(server)).start_session()
        turn = await session.start_turn("hi")
        await server.wait_requests()  # the request is in flight
        await session.cancel()
        record = await turn.result()
        assert isinstance(record, Interrupted)
        assert record.cause == "cancelled"
        await server.wait_closed()


# --- replies cut by the token limit ---------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "name", "max_tokens", "how"),
    [
        ("mistral", "mistral/chat_length.json", 32, "; raise max_tokens (32 now) on the model"),
        ("mistral", "mistral/chat_length.json", None, "; raise the limit with max_tokens=..."),
        (
            "openai",
            "openai/chat_length.json",
            32,
            "; raise max_tokens (32 now) on the model, or the server's context size",
        ),
    ],
)
async def test_a_reply_cut_by_the_token_limit_fails_the_turn_and_says_how_to_raise_it(
    server: Server, provider: str, name: str, max_tokens: int | None, how: str
) -> None:
    server.play(recording(name), recording("mistral/chat_text.json"))
    model = (mistral if provider == "mistral" else openai)(
        server, stream=False, max_tokens=max_tokens
    )
    cut, after = await run(Agent("a", model=model), "What is trio?", "Shorter, please.")
    assert isinstance(cut, Failed)
    assert cut.error.type == "ModelError"
    assert "was cut by the token limit after 32 tokens" in cut.error.message
    assert how in cut.error.message
    assert KEY not in cut.error.message
    assert isinstance(after, Completed)
    assert len(server.requests) == 2  # not retried: the same request would be cut again
    assert server.requests[0].json().get("max_tokens") == max_tokens
    # The cut text is no answer: the next turn's request does not hold it.
    roles = [message["role"] for message in server.requests[1].json()["messages"]]
    assert roles == ["user", "user"]


async def test_a_streamed_reply_cut_by_the_token_limit_is_not_taken_as_the_answer(
    server: Server,
) -> None:
    server.play(recording("mistral/stream_length.sse"), recording("mistral/stream_text.sse"))
    agent = Agent("a", model=mistral(server, max_tokens=32))
    events: list[Event] = []
    async with agentlib.open_runtime():
        session = await agent.start_session()
        cut = await session.run("What is trio?", on_event=events.append)
        await session.run("Shorter, please.")
    assert isinstance(cut, Failed)
    assert "was cut by the token limit after 32 tokens" in cut.error.message
    assert len([event for event in events if isinstance(event, EntryDelta)]) == 4  # shown...
    assert not any(  # ...but never completed as an entry
        isinstance(entry, MessageEntry) and entry.role == "assistant" for entry in completed(events)
    )
    roles = [message["role"] for message in server.requests[1].json()["messages"]]
    assert roles == ["user", "user"]


async def test_the_tool_calls_of_a_reply_cut_by_the_token_limit_never_run(
    server: Server,
) -> None:
    """A small model on llama.cpp's server starts a call and runs out of tokens in its
    arguments: the call is not run (nor reported to the model as a bad call)."""
    ran: list[str] = []

    def get_weather(city: str) -> str:
        """Today's weather in a city.

        Args:
            city: The city's name.
        """
        ran.append(city)
        return "sunny"

    server.play(
        recording("openai/stream_tool_call_length.sse"), recording("openai/stream_text.sse")
    )
    agent = Agent("w", model=openai(server, max_tokens=16), tools=[get_weather])
    events: list[Event] = []
    async with agentlib.open_runtime():
        session = await agent.start_session()
        cut = await session.run("Weather in Paris?", on_event=events.append)
        await session.run("And now?")
    assert isinstance(cut, Failed)
    assert (
        "the reply from the OpenAI-compatible server was cut by the token limit after 16 "
        'tokens (finish_reason "length")'
    ) in cut.error.message
    assert "none of its tool calls ran" in cut.error.message
    assert "llama.cpp's --ctx-size" in cut.error.message
    assert ran == []
    assert not any(isinstance(entry, ToolCallEntry) for entry in completed(events))
    assert [message["role"] for message in server.requests[1].json()["messages"]] == [
        "user",
        "user",
    ]


async def test_a_reply_that_never_stopped_says_a_stop_sequence_or_the_chat_template_may_be_why(
    server: Server,
) -> None:
    """llama.cpp's server with a chat template that never ends the model's turn: the model
    writes the next turns itself until max_tokens cuts every reply."""
    server.play(recording("openai/chat_endless_length.json"))
    model = openai(server, stream=False, max_tokens=64)
    (cut,) = await run(Agent("a", model=model), "What is trio?")
    assert isinstance(cut, Failed)
    message = cut.error.message
    assert "was cut by the token limit after 64 tokens" in message
    assert "raise max_tokens (64 now) on the model" in message
    assert "a missing stop sequence or the model's chat template may be the cause" in message
    assert "stop=[...]" in message
    assert "--jinja" in message


async def test_a_stop_sequence_given_with_a_model_string_reaches_the_server(
    server: Server,
) -> None:
    server.play(recording("openai/chat_text.json"))
    agent = Agent(
        "a",
        model=f"openai:gemma-3-270m-it@{server.url}/v1",
        model_options={"stop": ["<end_of_turn>"], "max_tokens": 64, "stream": False},
    )
    (record,) = await run(agent, "What is trio?")
    assert isinstance(record, Completed)
    sent = server.requests[0].json()
    assert (sent["stop"], sent["max_tokens"], sent["stream"]) == (["<end_of_turn>"], 64, False)


async def test_a_reply_mistral_cut_at_max_tokens_says_nothing_of_chat_templates(
    server: Server,
) -> None:
    server.play(recording("mistral/chat_length.json"))
    (cut,) = await run(Agent("a", model=mistral(server, stream=False)), "What is trio?")
    assert isinstance(cut, Failed)
    assert "raise the limit with max_tokens=... on the model" in cut.error.message
    assert "chat template" not in cut.error.message


@pytest.mark.parametrize("stream", [False, True])
async def test_a_reply_that_filled_the_models_context_says_to_shorten_it(
    server: Server, stream: bool
) -> None:
    """Mistral's ``model_length``: the model's context window, not max_tokens, ran out."""
    if stream:
        reply = sse(delta(role="assistant", content="Trio is"), delta("model_length"))
    else:
        data = json.loads(recording("mistral/chat_length.json").body)
        data["choices"][0]["finish_reason"] = "model_length"
        reply = Reply(body=json.dumps(data).encode())
    server.play(reply)
    (record,) = await run(Agent("a", model=mistral(server, stream=stream)), "What is trio?")
    assert isinstance(record, Failed)
    message = record.error.message
    assert "was cut by the token limit" in message
    assert 'finish_reason "model_length"' in message
    assert "filled the model's context window: shorten the history" in message
    assert len(server.requests) == 1


# --- configuration --------------------------------------------------------------------------


def test_mistral_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    with pytest.raises(ValueError, match=r"pass api_key=\.\.\. or set MISTRAL_API_KEY"):
        MistralModel("mistral-small-latest")
    with pytest.raises(ValueError, match=r"pass api_key=\.\.\. or set MISTRAL_API_KEY"):
        Agent("a", model="mistral:mistral-small-latest")


async def test_the_key_and_base_url_come_from_the_environment(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MISTRAL_API_KEY", KEY)
    monkeypatch.setenv("MISTRAL_BASE_URL", f"{server.url}/v1")
    server.play(recording("mistral/stream_text.sse"))
    agent = Agent("a", model="mistral:mistral-small-latest")
    (record,) = await run(agent, "hi")
    assert isinstance(record, Completed)
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert server.requests[0].json()["model"] == "mistral-small-latest"
    assert KEY not in repr(agent.model)


async def test_an_openai_string_names_the_model_and_its_server(server: Server) -> None:
    server.play(recording("openai/stream_text.sse"))
    agent = Agent("a", model=f"openai:llama3.1:8b@{server.url}/v1")
    assert isinstance(agent.model, OpenAICompatibleModel)
    assert (agent.model.model, agent.model.base_url) == ("llama3.1:8b", f"{server.url}/v1")
    (record,) = await run(agent, "hi")
    assert isinstance(record, Completed)
    assert server.requests[0].json()["model"] == "llama3.1:8b"


def test_an_openai_string_without_a_base_url_names_openais_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    agent = Agent("a", model="openai:gpt-4o")
    assert isinstance(agent.model, OpenAICompatibleModel)
    assert (agent.model.model, agent.model.base_url) == ("gpt-4o", "https://api.openai.com/v1")
    assert KEY not in repr(agent.model)


async def test_an_openai_string_without_a_base_url_sends_openai_api_key_to_openai_base_url(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
    server.play(recording("openai/stream_text.sse"))
    (record,) = await run(Agent("a", model="openai:gpt-4o"), "hi")
    assert isinstance(record, Completed)
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert server.requests[0].json()["model"] == "gpt-4o"


def test_an_openai_string_without_a_base_url_or_a_key_says_to_set_openai_api_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="set OPENAI_API_KEY, or pass a model object"):
        Agent("a", model="openai:gpt-4o")


def test_an_openai_api_key_that_cannot_be_sent_is_refused_without_being_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", f"{KEY}\n")
    with pytest.raises(ValueError, match="api_key holds") as info:
        Agent("a", model="openai:gpt-4o")
    assert KEY not in str(info.value)


def test_a_malformed_openai_base_url_is_refused_without_being_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "api.openai.com/v1")
    with pytest.raises(ValueError, match="OPENAI_BASE_URL must be an http") as info:
        Agent("a", model="openai:gpt-4o")
    assert "api.openai.com/v1" not in str(info.value)


async def test_an_openai_string_with_a_base_url_sends_no_key_from_the_environment(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1")
    server.play(recording("openai/stream_text.sse"))
    agent = Agent("a", model=f"openai:llama3.1:8b@{server.url}/v1")
    (record,) = await run(agent, "hi")
    assert isinstance(record, Completed)
    assert "authorization" not in server.requests[0].headers


@pytest.mark.parametrize(
    "spec",
    [
        "mistral:",
        "openai:",
        "openai:@http://x/v1",
        "openai:llama3@localhost:11434",
        "gpt-4o",
        "anthropic:claude",
    ],
)
def test_a_model_string_naming_no_model_says_what_to_write(spec: str) -> None:
    with pytest.raises(ValueError, match="use 'mistral:<model>'") as info:
        Agent("a", model=spec)
    assert "'openai:<model>' for OpenAI's API" in str(info.value)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"model": ""}, "needs a model name"),
        ({"base_url": "api.mistral.ai"}, "base_url must be an http"),
        ({"max_retries": -1}, "max_retries must be an int >= 0"),
        ({"api_key": ""}, "api_key must be a non-empty string"),
        ({"reset_tool_choice": "no"}, "reset_tool_choice must be True or False"),
        ({"extra_body": {"seed": float("nan")}}, "extra_body must be a JSON object: a non-finite"),
        ({"extra_body": {"a": json.loads(nested_text(150))}}, "it is nested deeper than the"),
    ],
)
def test_bad_arguments_are_refused(
    arguments: dict[str, Any], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    options = {"model": "m", "api_key": KEY, **arguments}
    with pytest.raises(ValueError, match=message):
        MistralModel(**options)


def test_a_model_given_its_own_http_client_uses_it() -> None:
    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            nursery = await stack.enter_async_context(trio.open_nursery())
            server = await serve(nursery)
            server.play(recording("mistral/chat_text.json"))
            seen: list[str] = []

            async def note(request: Any) -> None:
                seen.append(str(request.url))

            client = await stack.enter_async_context(
                httpx.AsyncClient(event_hooks={"request": [note]})
            )
            model = mistral(server, stream=False, http_client=client)
            reply = await model.complete(agentlib.ModelRequest())
            assert reply.text == "The answer is 3."
            assert seen == [f"{server.url}/v1/chat/completions"]
            nursery.cancel_scope.cancel()

    trio.run(main)


# --- odd replies and histories --------------------------------------------------------------


async def test_a_reply_that_is_not_json_is_a_clear_model_error(server: Server) -> None:
    server.play(Reply(body=b"<html>Bad gateway page</html>"))
    with pytest.raises(ModelError, match="answered with a body that is not JSON") as raised:
        await mistral(server, stream=False).complete(agentlib.ModelRequest())
    assert raised.value.body == "<html>Bad gateway page</html>"


async def test_arguments_that_are_not_json_go_back_to_the_model_as_a_tool_error(
    server: Server,
) -> None:
    broken = json.loads(recording("mistral/chat_tool_calls.json").body)
    broken["choices"][0]["message"]["tool_calls"] = [
        {"id": "Q7kd2Rw9a", "function": {"name": "get_weather", "arguments": '{"city": "Par'}}
    ]
    server.play(Reply(body=json.dumps(broken).encode()), recording("mistral/chat_text.json"))
    agent = Agent("w", model=mistral(server, stream=False), tools=[get_weather])
    record, events = await run_with_events(agent, "Paris?")
    assert isinstance(record, Completed)
    (result,) = [entry for entry in completed(events) if isinstance(entry, ToolResultEntry)]
    assert result.is_error
    assert result.text.startswith("the arguments are not JSON: Unterminated string")
    assert "Par" not in result.text
    assert server.requests[1].json()["messages"][-1]["tool_call_id"] == "Q7kd2Rw9a"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    ("arguments", "told"),
    [
        ('{"city": NaN}', "the arguments are not JSON: NaN is not a JSON number"),
        ('{"city": -Infinity}', "the arguments are not JSON: -Infinity is not a JSON number"),
        ('{"city": 1e999}', "the arguments are not JSON: a number is too large"),
        (nested_text(DEEP), "the arguments are nested deeper than the limit of 100 arrays"),
    ],
    ids=["nan", "infinity", "overflow", "deep"],
)
async def test_arguments_that_are_not_json_are_bad_arguments_and_the_turn_goes_on(
    server: Server, stream: bool, arguments: str, told: str
) -> None:
    then = recording("mistral/stream_text.sse" if stream else "mistral/chat_text.json")
    server.play((stream_calling if stream else reply_calling)(arguments), then)
    agent = Agent("w", model=mistral(server, stream=stream), tools=[get_weather])
    record, events = await run_with_events(agent, "Paris?")
    assert isinstance(record, Completed)
    (result,) = [entry for entry in completed(events) if isinstance(entry, ToolResultEntry)]
    assert result.is_error
    assert told in result.text
    assert "SECRET" not in result.text
    call, told_model = server.requests[1].json()["messages"][-2:]
    assert (told_model["tool_call_id"], told_model["content"]) == ("Q7kd2Rw9a", result.text)
    # The call goes back with no arguments: an endpoint may refuse text it cannot parse.
    assert call["tool_calls"][0]["function"]["arguments"] == "{}"


async def test_arguments_sent_as_an_object_too_deep_are_bad_arguments(server: Server) -> None:
    body = reply_calling("@").body.decode().replace('"@"', "[" * 150 + "]" * 150)
    server.play(Reply(body=body.encode()), recording("mistral/chat_text.json"))
    agent = Agent("w", model=mistral(server, stream=False), tools=[get_weather])
    record, events = await run_with_events(agent, "Paris?")
    assert isinstance(record, Completed)
    (result,) = [entry for entry in completed(events) if isinstance(entry, ToolResultEntry)]
    assert "the arguments are nested deeper than the limit of 100" in result.text


async def test_arguments_sent_as_an_object_holding_nan_go_back_as_none(server: Server) -> None:
    body = reply_calling("@").body.decode().replace('"@"', '{"city": NaN}')
    server.play(Reply(body=body.encode()), recording("mistral/chat_text.json"))
    agent = Agent("w", model=mistral(server, stream=False), tools=[get_weather])
    record, events = await run_with_events(agent, "Paris?")
    assert isinstance(record, Completed)
    (result,) = [entry for entry in completed(events) if isinstance(entry, ToolResultEntry)]
    assert "not JSON" in result.text
    call = server.requests[1].json()["messages"][-2]
    assert call["tool_calls"][0]["function"]["arguments"] == "{}"  # never "null"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_reply_nested_too_deeply_to_read_is_a_clear_model_error(
    server: Server, stream: bool
) -> None:
    deep = ("[" * 100_000 + "]" * 100_000).encode()
    if stream:
        first = sse(delta(role="assistant", content="Let me check."), done=False).chunks or ()
        event = b'data: {"id": "s1", "choices": ' + deep + b"}\n\n"
        server.play(attrs.evolve(sse(), chunks=(*first, event, b"data: [DONE]\n\n")))
    else:
        server.play(Reply(body=reply_calling("@").body.replace(b'"@"', deep)))
    agent = Agent("w", model=mistral(server, stream=stream), tools=[get_weather])
    (record,) = await run(agent, "Paris?")
    assert isinstance(record, Failed)
    assert record.error.type == "ModelError"
    assert "nested too deeply to read" in record.error.message


async def test_a_call_left_without_a_result_gets_one_in_the_request(server: Server) -> None:
    """Chat endpoints refuse an assistant's tool call with no tool message after it: a call
    whose turn stopped before it finished is sent with a result that says so."""
    history = [
        {"type": "message", "role": "user", "content": [{"type": "text", "text": "Paris?"}]},
        {"type": "tool_call", "tool_call_id": "Q7kd2Rw9a", "name": "get_weather", "arguments": {}},
    ]
    server.play(reply_json("ok"))
    async with agentlib.open_runtime():
        agent = Agent("w", model=mistral(server, stream=False), tools=[get_weather])
        session = await agent.start_session(history=history)
        await session.run("Never mind.")
    messages = server.requests[0].json()["messages"]
    assert [message["role"] for message in messages] == ["user", "assistant", "tool", "user"]
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": "Q7kd2Rw9a",
        "content": "(no result: the turn stopped before this call finished)",
    }


def test_content_blocks_become_each_providers_parts() -> None:
    audio = "data:audio/wav;base64,UklGRg=="
    blocks = (
        TextContentBlock(text="Listen:"),
        agentlib.AudioContentBlock(uri=audio, media_type="audio/wav"),
        agentlib.ResourceLinkContentBlock(uri="https://example.com/r.pdf", name="report"),
        agentlib.EmbeddedResourceContentBlock(uri="file:///notes.txt", text="the notes"),
    )
    request = agentlib.ModelRequest(entries=[MessageEntry(id="m", role="user", content=blocks)])
    text_parts = [
        {"type": "text", "text": "Listen:"},
        None,
        {"type": "text", "text": "[resource link: report <https://example.com/r.pdf>]"},
        {"type": "text", "text": "the notes"},
    ]
    for model, audio_part in (
        (
            MistralModel("m", api_key=KEY),
            {"type": "input_audio", "input_audio": "UklGRg=="},
        ),
        (
            OpenAICompatibleModel("m", "http://127.0.0.1:1/v1"),
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        ),
    ):
        (message,) = model.request_body(request)["messages"]
        assert message["content"] == [text_parts[0], audio_part, *text_parts[2:]]


def audio_request(media_type: str) -> agentlib.ModelRequest:
    clip = agentlib.AudioContentBlock(uri=f"data:{media_type};base64,UklGRg==")
    entry = MessageEntry(id="m", role="user", content=(TextContentBlock(text="Listen:"), clip))
    return agentlib.ModelRequest(entries=[entry])


@pytest.mark.parametrize(
    ("media_type", "audio_format"),
    [
        ("audio/wav", "wav"),
        ("audio/x-wav", "wav"),  # what Python's mimetypes gives a .wav file
        ("audio/wave", "wav"),
        ("audio/vnd.wave", "wav"),
        ("audio/x-pn-wav", "wav"),
        ("audio/WAV;codecs=1", "wav"),
        ("audio/mpeg", "mp3"),
        ("audio/mp3", "mp3"),
        ("audio/mpeg3", "mp3"),
        ("audio/x-mpeg-3", "mp3"),
        ("audio/x-mp3", "mp3"),
        ("audio/x-mpeg", "mp3"),
    ],
)
def test_audio_goes_out_in_the_two_formats_openais_schema_takes(
    media_type: str, audio_format: str
) -> None:
    model = OpenAICompatibleModel("m", "http://127.0.0.1:1/v1")
    (message,) = model.request_body(audio_request(media_type))["messages"]
    assert message["content"][1] == {
        "type": "input_audio",
        "input_audio": {"data": "UklGRg==", "format": audio_format},
    }


OGG_REFUSED = (
    "the OpenAI-compatible server takes audio as wav or mp3 only, and a message holds "
    "audio/ogg: convert the clip to WAV (audio/wav) or MP3 (audio/mpeg) before sending it"
)


async def test_audio_in_a_format_the_server_cannot_take_is_refused_before_it_joins_the_history(
    server: Server,
) -> None:
    # Taken in, it would fail this turn and every later one of the session: the message is
    # refused as bad input, and the session goes on.
    clip = agentlib.AudioContentBlock(uri="data:audio/ogg;base64,T2dnUw==")
    agent = Agent("a", model=openai(server, api_key=KEY))
    server.play(recording("openai/chat_text.json"))
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with pytest.raises(agentlib.ValidationError) as raised:
            await session.run([TextContentBlock(text="Listen:"), clip])
        assert str(raised.value) == f"invalid message: {OGG_REFUSED} @ $[1]"
        assert server.requests == []
        record = await session.run("Hello?", output_type=None)
        assert isinstance(record, agentlib.Completed), record
        with pytest.raises(agentlib.ValidationError, match=r"invalid history item 0: .*audio/ogg"):
            await agent.start_session(
                history=[agentlib.HistoryImportMessage(role="user", content=[clip])]
            )
    [request] = server.requests
    assert [m["role"] for m in json.loads(request.body)["messages"]] == ["user"]


async def test_audio_the_server_cannot_take_fails_a_request_built_otherwise_before_sending() -> (
    None
):
    model = OpenAICompatibleModel("m", "http://127.0.0.1:1/v1")
    with pytest.raises(ModelError) as raised:
        model.request_body(audio_request("audio/ogg"))
    assert str(raised.value) == OGG_REFUSED


def test_mistral_takes_audio_of_any_type_as_it_is() -> None:
    """Mistral's input_audio is the file alone, with no format: the API reads it."""
    model = MistralModel("m", api_key=KEY)
    for media_type in ("audio/x-wav", "audio/ogg", "audio/flac"):
        (message,) = model.request_body(audio_request(media_type))["messages"]
        assert message["content"][1] == {"type": "input_audio", "input_audio": "UklGRg=="}


def test_a_key_that_would_not_fit_a_header_is_refused_without_showing_it() -> None:
    for key in (f"{KEY}\n", f"{KEY} ", "sk-clé"):
        with pytest.raises(ValueError, match="strip what was read with it") as raised:
            MistralModel("m", api_key=key)
        assert KEY not in str(raised.value)
        assert "clé" not in str(raised.value)


async def test_a_key_echoed_where_the_message_is_cut_is_scrubbed_first(server: Server) -> None:
    message = "x" * 290 + KEY + "y" * 50  # the key straddles the 300-character cut
    server.play(Reply(status=400, body=json.dumps({"message": message}).encode()))
    with pytest.raises(ModelError) as raised:
        await mistral(server, stream=False).complete(agentlib.ModelRequest())
    assert "sk-" not in str(raised.value)  # not even the part before the cut
    assert "x***y" in str(raised.value)
    assert "x***y" in (raised.value.body or "")


async def test_calls_streamed_whole_under_one_index_stay_apart(server: Server) -> None:
    def whole(call_id: str, city: str) -> dict[str, Any]:
        return delta(
            tool_calls=[
                {
                    "index": 0,
                    "id": call_id,
                    "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
                }
            ]
        )

    server.play(
        sse(whole("Zq8Lm2Pw1", "Paris"), whole("Ab3Cd4Ef5", "London"), delta("tool_calls")),
        recording("mistral/stream_text.sse"),
    )
    (record,) = await run(Agent("w", model=mistral(server), tools=[get_weather]), "Both?")
    assert isinstance(record, Completed)
    assert [(c.tool_call_id, c.arguments) for c in record.tool_calls] == [
        ("Zq8Lm2Pw1", {"city": "Paris"}),
        ("Ab3Cd4Ef5", {"city": "London"}),
    ]


async def test_a_connection_lost_after_the_whole_stream_is_no_failure(server: Server) -> None:
    stream = recording("mistral/stream_text.sse")
    assert stream.chunks is not None
    server.play(attrs.evolve(stream, drop_after=len(stream.chunks)))  # [DONE], then no end
    (record,) = await run(Agent("s", model=mistral(server)), "1 + 2?")
    assert isinstance(record, Completed)
    assert record.text == "The answer is 3."
    assert len(server.requests) == 1


async def test_a_server_that_answers_a_stream_request_whole_is_understood(
    server: Server,
) -> None:
    server.play(recording("mistral/chat_text.json"))  # application/json, not events
    record, events = await run_with_events(Agent("s", model=mistral(server)), "1 + 2?")
    assert isinstance(record, Completed)
    assert record.text == "The answer is 3."
    assert [e.delta for e in events if isinstance(e, EntryDelta)] == ["The answer is 3."]
    assert server.requests[0].json()["stream"] is True


async def test_an_empty_reply_still_counts_its_tokens(server: Server) -> None:
    server.play(reply_json("", prompt_tokens=9, completion_tokens=0, total_tokens=9))
    (record,) = await run(Agent("s", model=mistral(server, stream=False)), "Say nothing.")
    assert isinstance(record, Completed)
    assert record.text == ""
    assert record.usage == Usage(input_tokens=9, output_tokens=0, total_tokens=9)


@pytest.mark.parametrize("name", ["openai/chat_text.json", "openai/stream_text.sse"])
async def test_a_lone_surrogate_a_model_sent_reads_as_the_replacement_character_and_is_stored(
    server: Server, tmp_path: Any, name: str
) -> None:
    """A provider's JSON may escape half of a UTF-16 pair alone (``\\ud800``), which no
    store can keep: the reply reads it as U+FFFD, as UTF-8 bytes it cannot decode."""
    played = recording(name)
    if played.chunks is None:
        played = attrs.evolve(played, body=played.body.replace(b" answer", b" answer\\ud800"))
    else:
        chunks = tuple(chunk.replace(b" answer", b" answer\\ud800") for chunk in played.chunks)
        played = attrs.evolve(played, chunks=chunks)
    server.play(played)
    store = f"sqlite:///{tmp_path / 'replies.db'}"
    agent = Agent("a", model=openai(server, stream=name.endswith(".sse")))
    async with agentlib.open_runtime(store):
        session = await agent.start_session()
        record = await session.run("What is 1 + 2?")
    assert isinstance(record, Completed)
    assert record.output == "The answer\ufffd is 3."
    async with agentlib.open_runtime(store):  # read back from the file
        stored = await agent.session(session.id).turn(record.turn_id).get()
    assert isinstance(stored, Completed)
    assert stored.output == "The answer\ufffd is 3."
