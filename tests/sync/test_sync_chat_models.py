"""MistralModel and OpenAICompatibleModel from blocking scripts: the engine's thread talks to
a real HTTP server on 127.0.0.1 (run in a thread of its own), streaming and retrying as in
async code."""

from __future__ import annotations

from _http_server import Reply, recording, serve_in_thread

import agentlib_sync as agents

from ._support import WAIT

KEY = "sk-test-sync-71c3"


def get_weather(city: str) -> str:
    """Today's weather in a city.

    Args:
        city: The city's name.
    """
    return "sunny, 21 °C"


def test_a_blocking_script_streams_a_mistral_turn_with_a_tool_call() -> None:
    with serve_in_thread() as server:
        server.play(
            recording("mistral/stream_tool_calls.sse"), recording("mistral/stream_text.sse")
        )
        model = agents.MistralModel(
            "mistral-small-latest", api_key=KEY, base_url=f"{server.url}/v1"
        )
        agent = agents.Agent("w", model=model, tools=[get_weather])
        session = agent.start_session()
        events: list[agents.Event] = []
        record = session.run("Paris?", on_event=events.append, timeout=WAIT)
        session.cancel()
    assert isinstance(record, agents.Completed)
    assert record.text == "The answer is 3."
    assert record.tool_calls[0].arguments == {"city": "Paris"}
    assert [e.delta for e in events if isinstance(e, agents.EntryDelta)] == [
        "The",
        " answer",
        " is",
        " 3",
        ".",
    ]
    assert record.usage == agents.Usage(
        input_tokens=114, output_tokens=26, total_tokens=140, requests=2
    )
    assert [request.headers["authorization"] for request in server.requests] == [
        f"Bearer {KEY}"
    ] * 2


def test_a_blocking_script_gets_a_failed_turn_for_a_reply_cut_by_the_token_limit() -> None:
    with serve_in_thread() as server:
        server.play(recording("openai/stream_tool_call_length.sse"))
        model = agents.OpenAICompatibleModel("qwen2.5-1.5b", f"{server.url}/v1", max_tokens=16)
        session = agents.Agent("w", model=model, tools=[get_weather]).start_session()
        events: list[agents.Event] = []
        record = session.run("Weather in Paris?", on_event=events.append, timeout=WAIT)
        session.cancel()
    assert isinstance(record, agents.Failed)
    assert record.error.type == "ModelError"
    assert "cut by the token limit after 16 tokens" in record.error.message
    assert not any(isinstance(e, agents.EntryAdded) and e.entry.type == "tool_call" for e in events)
    assert len(server.requests) == 1


def test_a_blocking_script_gets_the_model_error_of_a_refused_request() -> None:
    with serve_in_thread() as server:
        server.play(recording("mistral/error_401.json"))
        model = agents.OpenAICompatibleModel("llama3.1", f"{server.url}/v1", api_key=KEY)
        session = agents.Agent("a", model=model).start_session()
        record = session.run("hi", timeout=WAIT)
        session.cancel()
    assert isinstance(record, agents.Failed)
    assert record.error.type == "ModelError"
    assert "HTTP 401" in record.error.message
    assert "check the api_key" in record.error.message
    assert KEY not in record.error.message
    assert len(server.requests) == 1


def test_an_interrupt_from_the_script_aborts_the_request_in_flight() -> None:
    with serve_in_thread() as server:
        server.play(Reply(hang=True))
        model = agents.MistralModel("m", api_key=KEY, base_url=f"{server.url}/v1")
        session = agents.Agent("a", model=model).start_session()
        turn = session.start_turn("hi")
        assert isinstance(turn, agents.Turn)
        assert isinstance(turn.interrupt(), agents.Turn)
        record = turn.result(timeout=WAIT)
        session.cancel()
    assert isinstance(record, agents.Interrupted)
