"""A streamed chat completion put together from the lines of its body, without a server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentlib import (
    MistralModel,
    ModelError,
    ModelReply,
    OpenAICompatibleModel,
    ToolCallRequest,
    ToolSchema,
    Usage,
)
from agentlib._models._chat_codec import ChatCodec, ToolNames
from agentlib._models._options import ChatSettings
from agentlib._models._sse import StreamReader

KEY = "sk-test-5f0c2e9a7b1d4c3e"


def reader(*tools: str, max_tokens: int | None = None) -> StreamReader:
    settings = ChatSettings(model="m", base_url="http://127.0.0.1:1/v1", max_tokens=max_tokens)
    codec = ChatCodec(settings, MistralModel.dialect, KEY)
    return StreamReader(codec, ToolNames([ToolSchema(name=name) for name in tools]))


def event(finish: str | None = None, usage: dict[str, int] | None = None, **delta: Any) -> str:
    chunk: dict[str, Any] = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        chunk["usage"] = usage
    return "data: " + json.dumps(chunk)


def fragment(index: int | None, call_id: str | None = None, **function: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"function": function}
    if index is not None:
        raw["index"] = index
    if call_id is not None:
        raw["id"] = call_id
    return raw


def feed(stream: StreamReader, *lines: str) -> list[str]:
    return [piece for line in lines for piece in stream.feed(line)]


def test_text_arrives_piece_by_piece_and_ends_as_one_reply() -> None:
    stream = reader()
    pieces = feed(
        stream,
        event(role="assistant"),
        "",
        event(content="The"),
        ": a comment",
        "event: message",
        event(content=" answer."),
        event("stop", usage={"prompt_tokens": 4, "completion_tokens": 2}),
        "data: [DONE]",
    )
    assert pieces == ["The", " answer."]
    assert stream.complete
    assert stream.reply() == ModelReply(
        text="The answer.", usage=Usage(input_tokens=4, output_tokens=2, total_tokens=6)
    )


def test_call_fragments_are_put_together_by_index() -> None:
    stream = reader("get.weather")
    feed(
        stream,
        event(tool_calls=[fragment(0, "c1", name="get_weather", arguments='{"ci')]),
        event(tool_calls=[fragment(1, "c2", name="get_weather", arguments='{"city": ')]),
        event(tool_calls=[fragment(0, arguments='ty": "Paris"}')]),
        event("tool_calls", tool_calls=[fragment(1, arguments='"London"}')]),
    )
    assert stream.reply().tool_calls == (
        ToolCallRequest(name="get.weather", arguments={"city": "Paris"}, id="c1"),
        ToolCallRequest(name="get.weather", arguments={"city": "London"}, id="c2"),
    )


def test_calls_sent_whole_under_one_index_stay_apart() -> None:
    stream = reader()
    feed(
        stream,
        event(tool_calls=[fragment(0, "c1", name="f", arguments="{}")]),
        event(tool_calls=[fragment(0, "c2", name="f", arguments="{}")]),
    )
    assert [call.id for call in stream.reply().tool_calls] == ["c1", "c2"]


def test_fragments_without_an_index_go_by_their_id_or_else_to_the_last_call() -> None:
    stream = reader()
    feed(
        stream,
        event(tool_calls=[fragment(None, "c1", name="f", arguments='{"a": ')]),
        event(tool_calls=[fragment(None, arguments="1}")]),
        event(tool_calls=[fragment(None, "c2", name="g", arguments={"b": 2})]),
    )
    assert stream.reply().tool_calls == (
        ToolCallRequest(name="f", arguments={"a": 1}, id="c1"),
        ToolCallRequest(name="g", arguments={"b": 2}, id="c2"),
    )


def test_other_choices_and_lines_after_done_are_skipped() -> None:
    stream = reader()
    other = {"choices": [{"index": 1, "delta": {"content": "no"}}]}
    pieces = feed(
        stream, "data: " + json.dumps(other), event(content="yes"), "data: [DONE]", event("x")
    )
    assert pieces == ["yes"]
    assert (stream.done, stream.finish_reason) == (True, None)


def test_a_stream_is_complete_at_its_finish_reason_or_done() -> None:
    stream = reader()
    feed(stream, event(content="Hi"))
    assert not stream.complete
    feed(stream, event("stop"))
    assert stream.complete


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("data: {not json", "Mistral streamed an event that is not JSON"),
        ("data: [1, 2]", "Mistral streamed an event that is not a JSON object"),
        ("data: " + "[" * 100_000 + "]" * 100_000, "nested too deeply to read"),
    ],
)
def test_an_event_that_cannot_be_read_is_kept_as_the_failure_and_ends_the_reading(
    line: str, problem: str
) -> None:
    stream = reader()
    assert feed(stream, event(content="a"), line, event(content="b")) == ["a"]
    assert stream.failure is not None
    assert problem in str(stream.failure)
    assert stream.failure.body == line[6:506]


def test_an_error_in_the_stream_is_the_failure_without_the_key() -> None:
    stream = reader()
    error = {"error": {"message": f"overloaded for {KEY}", "code": "3505"}}
    feed(stream, "data: " + json.dumps(error))
    assert stream.failure is not None
    assert str(stream.failure) == "Mistral failed mid-stream: overloaded for ***"
    assert stream.failure.code == "3505"
    assert KEY not in (stream.failure.body or "")


def test_a_stream_cut_by_the_token_limit_is_no_reply() -> None:
    stream = reader(max_tokens=8)
    feed(stream, event(content="Trio"), event("length", usage={"completion_tokens": 8}))
    with pytest.raises(ModelError, match=r"cut by the token limit after 8 tokens") as raised:
        stream.reply()
    assert "raise max_tokens (8 now)" in str(raised.value)


def test_a_stream_stopped_with_an_error_is_no_reply() -> None:
    stream = reader()
    feed(stream, event("error"))
    with pytest.raises(ModelError, match="Mistral stopped the reply with an error"):
        stream.reply()


def test_the_openai_compatible_dialect_reads_the_same_stream() -> None:
    settings = ChatSettings(model="m", base_url="http://127.0.0.1:1/v1")
    stream = StreamReader(ChatCodec(settings, OpenAICompatibleModel.dialect), ToolNames(()))
    feed(stream, event(content="ok"), event("stop"))
    assert stream.reply().text == "ok"
