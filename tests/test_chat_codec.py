"""The chat-completions wire format, without a server: request bodies from requests, and
replies from the JSON an endpoint answers with, in each provider's dialect."""

from __future__ import annotations

from typing import Any

import pytest

from agentlib import (
    AudioContentBlock,
    ContentAnnotations,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    MessageEntry,
    MistralModel,
    ModelError,
    ModelReply,
    ModelRequest,
    OpenAICompatibleModel,
    ResourceLinkContentBlock,
    TextContentBlock,
    ToolCallEntry,
    ToolCallRequest,
    ToolResultEntry,
    ToolSchema,
    Usage,
    ValidationError,
)
from agentlib._models._chat_codec import (
    CallParts,
    ChatCodec,
    Dialect,
    ToolNames,
    excerpt,
    shown_url,
)
from agentlib._models._options import ChatSettings

KEY = "sk-test-5f0c2e9a7b1d4c3e"
MISTRAL = MistralModel.dialect
OPENAI = OpenAICompatibleModel.dialect
WEATHER = ToolSchema(name="get_weather", parameters={"type": "object"})


def codec(dialect: Dialect = OPENAI, key: str | None = None, **options: Any) -> ChatCodec:
    settings = ChatSettings(model="m", base_url="http://127.0.0.1:1/v1", **options)
    return ChatCodec(settings, dialect, key)


def user(text: str) -> MessageEntry:
    return MessageEntry(id="u", role="user", content=[TextContentBlock(text=text)])


def call(call_id: str, name: str = "get_weather") -> ToolCallEntry:
    return ToolCallEntry(id=f"e{call_id}", tool_call_id=call_id, name=name, arguments={"a": 1})


def result(call_id: str, text: str, name: str = "get_weather") -> ToolResultEntry:
    return ToolResultEntry(
        id=f"r{call_id}", tool_call_id=call_id, name=name, content=[TextContentBlock(text=text)]
    )


def body(request: ModelRequest, dialect: Dialect = OPENAI, **options: Any) -> dict[str, Any]:
    return codec(dialect, **options).body(request, ToolNames(request.tools), stream=False)


def answer(message: dict[str, Any], finish: str = "stop", **usage: int) -> dict[str, Any]:
    return {
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage or None,
    }


# --- request bodies -------------------------------------------------------------------------


def test_the_instructions_and_the_history_become_messages() -> None:
    request = ModelRequest(instructions="Be brief.", entries=[user("Hi")])
    assert body(request) == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
        "stream": False,
    }


@pytest.mark.parametrize(
    ("dialect", "no_content", "named"), [(OPENAI, None, False), (MISTRAL, "", True)]
)
def test_a_steps_calls_join_one_assistant_message_and_their_results_follow(
    dialect: Dialect, no_content: str | None, named: bool
) -> None:
    request = ModelRequest(
        entries=[user("Both?"), call("abcdefgh1"), call("abcdefgh2"), result("abcdefgh1", "sunny")]
    )
    assistant, *tools = body(request, dialect)["messages"][1:]
    assert assistant["content"] == no_content
    assert [c["id"] for c in assistant["tool_calls"]] == ["abcdefgh1", "abcdefgh2"]
    assert assistant["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"a": 1}',
    }
    assert [(m["tool_call_id"], m["content"]) for m in tools] == [
        ("abcdefgh1", "sunny"),
        ("abcdefgh2", "(no result: the turn stopped before this call finished)"),
    ]
    assert ("name" in tools[0]) is named


def test_a_tool_results_blocks_that_are_not_text_are_named_and_user_only_ones_left_out() -> None:
    blocks = [
        TextContentBlock(text="found 2"),
        TextContentBlock(text="for your eyes", annotations=ContentAnnotations(audience=["user"])),
        ImageContentBlock(uri="data:image/png;base64,AAAA", media_type="image/png"),
        ResourceLinkContentBlock(uri="file:///a.txt", name="a.txt"),
        EmbeddedResourceContentBlock(uri="file:///b.txt", text="note b"),
    ]
    entry = ToolResultEntry(id="r", tool_call_id="abcdefgh1", name="get_weather", content=blocks)
    request = ModelRequest(entries=[user("Find"), call("abcdefgh1"), entry])
    tool_message = body(request)["messages"][-1]
    assert tool_message["content"] == (
        "found 2\n[image: image/png]\n[resource link: a.txt <file:///a.txt>]\nnote b"
    )


def test_mistral_gets_call_ids_of_nine_letters_and_digits_made_the_same_each_time() -> None:
    request = ModelRequest(entries=[call("call_8f3a2c1d9e7b"), result("call_8f3a2c1d9e7b", "ok")])
    first, again = (body(request, MISTRAL)["messages"] for _ in range(2))
    sent = first[0]["tool_calls"][0]["id"]
    assert len(sent) == 9
    assert sent.isalnum()
    assert first[1]["tool_call_id"] == sent
    assert again == first
    assert body(request)["messages"][0]["tool_calls"][0]["id"] == "call_8f3a2c1d9e7b"


def test_tool_ids_the_endpoint_would_refuse_get_names_it_takes_and_are_read_back() -> None:
    long = "x." * 40
    names = ToolNames([ToolSchema(name="a.b"), ToolSchema(name="a_b"), ToolSchema(name=long)])
    assert [names.wire("a.b"), names.wire("a_b")] == ["a_b", "a_b_2"]
    assert len(names.wire(long)) <= 64
    assert [names.id_of("a_b"), names.id_of("a_b_2"), names.id_of(names.wire(long))] == [
        "a.b",
        "a_b",
        long,
    ]


@pytest.mark.parametrize(
    ("choice", "mistral", "openai"),
    [
        ("auto", "auto", "auto"),
        ("required", "any", "required"),
        (
            "get_weather",
            {"type": "function", "function": {"name": "get_weather"}},
            {"type": "function", "function": {"name": "get_weather"}},
        ),
    ],
)
def test_tool_choice_in_each_dialect(choice: str, mistral: Any, openai: Any) -> None:
    request = ModelRequest(tools=[WEATHER])
    assert body(request, MISTRAL, tool_choice=choice)["tool_choice"] == mistral
    assert body(request, OPENAI, tool_choice=choice)["tool_choice"] == openai


def test_a_forcing_tool_choice_goes_out_on_the_first_step_only_unless_kept() -> None:
    later = ModelRequest(tools=[WEATHER], step=2)
    assert "tool_choice" not in body(later, tool_choice="required")
    assert body(later, tool_choice="required", reset_tool_choice=False)["tool_choice"] == (
        "required"
    )
    assert body(later, tool_choice="none")["tool_choice"] == "none"


def test_a_tool_choice_naming_no_tool_is_refused() -> None:
    with pytest.raises(ModelError, match="tool_choice names 'get_wether'"):
        body(ModelRequest(tools=[WEATHER]), tool_choice="get_wether")


def test_the_options_and_the_output_schema_go_in_the_body_and_extra_body_last() -> None:
    request = ModelRequest(
        tools=[WEATHER], output_schema={"title": "My Forecast", "type": "object"}
    )
    sent = body(
        request,
        parallel_tool_calls=False,
        temperature=0.2,
        max_tokens=64,
        extra_body={"random_seed": 7, "temperature": 0.5},
    )
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "My_Forecast", "schema": request.output_schema},
    }
    assert (sent["parallel_tool_calls"], sent["max_tokens"]) == (False, 64)
    assert (sent["temperature"], sent["random_seed"]) == (0.5, 7)


def test_a_streamed_request_adds_the_dialects_stream_options() -> None:
    request = ModelRequest(entries=[user("Hi")])
    assert codec(OPENAI).body(request, ToolNames(()), stream=True)["stream_options"] == {
        "include_usage": True
    }
    assert "stream_options" not in codec(MISTRAL).body(request, ToolNames(()), stream=True)


def test_audio_goes_as_wav_or_mp3_or_as_the_file_alone_to_mistral() -> None:
    clip = AudioContentBlock(uri="data:audio/x-wav;base64,UklGRg==")
    request = ModelRequest(entries=[MessageEntry(id="m", role="user", content=[clip])])
    assert body(request)["messages"][0]["content"] == [
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    ]
    assert body(request, MISTRAL)["messages"][0]["content"] == [
        {"type": "input_audio", "input_audio": "UklGRg=="}
    ]


def test_audio_of_another_type_is_refused_as_content_and_in_a_request() -> None:
    ogg = AudioContentBlock(uri="data:audio/ogg;base64,T2dnUw==")
    with pytest.raises(ValidationError, match=r"holds audio/ogg: .* @ \$\[1\]"):
        codec().check_content([TextContentBlock(text="Listen:"), ogg])
    codec(MISTRAL).check_content([ogg])
    with pytest.raises(ModelError, match="takes audio as wav or mp3 only"):
        body(ModelRequest(entries=[MessageEntry(id="m", role="user", content=[ogg])]))


# --- replies --------------------------------------------------------------------------------


def test_a_reply_brings_its_text_its_calls_and_its_usage() -> None:
    data = answer(
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Let me "}, {"type": "text", "text": "see."}],
            "tool_calls": [
                {"id": "c1", "function": {"name": "a_b", "arguments": '{"x": 1}'}},
                {"id": "c2", "function": {"name": "a_b", "arguments": {"x": 2}}},
            ],
        },
        "tool_calls",
        prompt_tokens=5,
        completion_tokens=3,
    )
    names = ToolNames([ToolSchema(name="a.b")])
    assert codec().reply(data, names) == ModelReply(
        text="Let me see.",
        tool_calls=[
            ToolCallRequest(name="a.b", arguments={"x": 1}, id="c1"),
            ToolCallRequest(name="a.b", arguments={"x": 2}, id="c2"),
        ],
        usage=Usage(input_tokens=5, output_tokens=3, total_tokens=8),
    )


def test_arguments_that_are_not_json_come_back_as_their_text() -> None:
    data = answer({"tool_calls": [{"function": {"name": "f", "arguments": '{"a": NaN}'}}]})
    (request,) = codec().reply(data, ToolNames(())).tool_calls
    assert request.arguments == '{"a": NaN}'


def test_a_reply_without_a_message_is_a_model_error_whose_excerpt_hides_the_key() -> None:
    with pytest.raises(ModelError, match="answered without a choice holding a message") as raised:
        codec(key=KEY).reply({"choices": [], "echo": KEY}, ToolNames(()))
    assert raised.value.status == 200
    assert raised.value.body is not None
    assert KEY not in raised.value.body
    assert "***" in raised.value.body


@pytest.mark.parametrize(
    ("text", "problem"),
    [("<html>", "that is not JSON"), ("[" * 100_000 + "]" * 100_000, "nested too deeply")],
)
def test_a_body_that_cannot_be_read_as_json_is_a_model_error(text: str, problem: str) -> None:
    with pytest.raises(ModelError, match=problem) as raised:
        codec().read(502, text)
    assert raised.value.status == 502
    assert raised.value.body == text[:500]


@pytest.mark.parametrize(
    ("dialect", "max_tokens", "how"),
    [
        (MISTRAL, None, "raise the limit with max_tokens=... on the model"),
        (OPENAI, 16, "raise max_tokens (16 now) on the model, or the server's context size"),
    ],
)
def test_a_reply_cut_by_the_token_limit_is_no_answer(
    dialect: Dialect, max_tokens: int | None, how: str
) -> None:
    data = answer({"content": "Trio is a"}, "length", completion_tokens=16)
    with pytest.raises(ModelError) as raised:
        codec(dialect, max_tokens=max_tokens).reply(data, ToolNames(()))
    assert "cut by the token limit after 16 tokens" in str(raised.value)
    assert how in str(raised.value)
    assert raised.value.body is not None


def test_a_reply_that_filled_the_context_says_to_shorten_it() -> None:
    with pytest.raises(ModelError, match="filled the model's context window"):
        codec(MISTRAL).check_finish("model_length", None)


def test_a_reply_stopped_with_an_error_is_a_model_error() -> None:
    with pytest.raises(ModelError, match="Mistral stopped the reply with an error"):
        codec(MISTRAL).check_finish("error", None)
    codec().check_finish("stop", None)
    codec().check_finish(None, None)


def test_a_call_is_put_together_from_its_fragments() -> None:
    parts = CallParts()
    for raw in (
        {"id": "c1", "function": {"name": "f", "arguments": '{"ci'}},
        {"function": {"arguments": 'ty": "Paris"}'}},
    ):
        parts.add(raw)
    assert parts.request(ToolNames(())) == ToolCallRequest(
        name="f", arguments={"city": "Paris"}, id="c1"
    )
    assert CallParts(name="f").request(ToolNames(())).arguments == {}


def test_an_excerpt_hides_the_key_before_it_is_cut() -> None:
    text = "x" * 490 + KEY
    assert excerpt(text, KEY) == "x" * 490 + "***"
    assert excerpt(text, None) == text[:500]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://api.example.com/v1", "https://api.example.com/v1"),
        ("https://user@api.example.com/v1", "https://user@api.example.com/v1"),
        (
            "https://user:s3cr:et@api.example.com:8443/v1",
            "https://user:***@api.example.com:8443/v1",
        ),
        ("http://:pw@[::1]:8000/v1?x=1", "http://:***@[::1]:8000/v1?x=1"),
    ],
)
def test_a_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert shown_url(url) == shown
