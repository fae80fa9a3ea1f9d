"""The options both chat-completions models take: declared once as keywords, kept once as
checked settings."""

from __future__ import annotations

import attrs
import pytest

import agentlib_sync
from agentlib import Agent, MistralModel, ModelRequest, OpenAICompatibleModel
from agentlib._models._options import DEFAULT_TIMEOUT, ChatOptions, ChatSettings

KEY = "sk-test-5f0c2e9a7b1d4c3e"


def test_every_option_is_kept_as_a_setting_and_every_setting_but_the_endpoint_is_an_option() -> (
    None
):
    settings = {field.alias for field in attrs.fields(ChatSettings)}
    assert set(ChatOptions.__annotations__) == settings - {"model", "base_url", "api_key"}


def test_both_models_keep_the_options_they_are_given_as_attributes() -> None:
    for model in (
        MistralModel("m", api_key=KEY, max_tokens=64, timeout=5, extra_body={"seed": 1}),
        OpenAICompatibleModel("m", "http://127.0.0.1:1/v1/", max_tokens=64, timeout=5),
    ):
        assert model.max_tokens == 64
        assert model.timeout.read == 5
        assert model.stream is True
        assert model.max_retries == 3
    assert (model.base_url, model.url) == (
        "http://127.0.0.1:1/v1",
        "http://127.0.0.1:1/v1/chat/completions",
    )


def test_options_left_out_take_their_defaults() -> None:
    model = OpenAICompatibleModel("m", "http://127.0.0.1:1/v1")
    assert (model.tool_choice, model.reset_tool_choice, model.extra_body) == (None, True, {})
    assert model.timeout == DEFAULT_TIMEOUT


def test_a_setting_changed_on_a_model_is_checked_as_when_it_was_made() -> None:
    model = OpenAICompatibleModel("m", "http://127.0.0.1:1/v1")
    with pytest.raises(ValueError, match="max_retries must be an int >= 0"):
        model.max_retries = -1


@pytest.mark.parametrize("seconds", [-1, float("nan"), "60", True])
def test_a_max_retry_wait_that_is_no_number_of_seconds_is_refused(seconds: object) -> None:
    with pytest.raises(ValueError, match="max_retry_wait must be a number of seconds >= 0"):
        OpenAICompatibleModel("m", "http://127.0.0.1:1/v1", max_retry_wait=seconds)  # type: ignore[arg-type]


def test_an_option_neither_model_takes_is_the_type_error_python_gives() -> None:
    unexpected = r"\.__init__\(\) got an unexpected keyword argument 'strem'"
    with pytest.raises(TypeError, match="^OpenAICompatibleModel" + unexpected):
        OpenAICompatibleModel("m", "http://127.0.0.1:1/v1", strem=False)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="^MistralModel" + unexpected):
        MistralModel("m", api_key=KEY, strem=False)  # type: ignore[call-arg]


def test_models_compare_by_identity() -> None:
    first, second = (OpenAICompatibleModel("m", "http://127.0.0.1:1/v1") for _ in range(2))
    assert first != second
    assert len({first, second}) == 2


# -- stop sequences ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop", "sent"),
    [
        ("<end_of_turn>", "<end_of_turn>"),
        (["<end_of_turn>", "\n\nUser:"], ["<end_of_turn>", "\n\nUser:"]),
    ],
    ids=["one", "several"],
)
def test_a_stop_sequence_is_sent_as_stop(stop: str | list[str], sent: object) -> None:
    for model in (
        MistralModel("m", api_key=KEY, stop=stop),
        OpenAICompatibleModel("m", "http://127.0.0.1:1/v1", stop=stop),
    ):
        assert model.request_body(ModelRequest())["stop"] == sent


def test_no_stop_sequence_sends_no_stop() -> None:
    assert "stop" not in OpenAICompatibleModel("m", "http://127.0.0.1:1/v1").request_body(
        ModelRequest()
    )


@pytest.mark.parametrize(
    "stop", ["", [""], ["<end>", 3], 7], ids=["empty", "empty-item", "number-item", "number"]
)
def test_a_stop_that_is_no_string_nor_strings_is_refused(stop: object) -> None:
    with pytest.raises(ValueError, match=r"stop must be a non-empty string, a list of them"):
        OpenAICompatibleModel("m", "http://127.0.0.1:1/v1", stop=stop)  # type: ignore[arg-type]


# -- a model named by a string, with options ---------------------------------------------


def test_a_model_string_takes_the_options_its_model_object_takes() -> None:
    options: ChatOptions = {"stop": ["<end_of_turn>"], "max_tokens": 64, "stream": False}
    agent = Agent("a", model="openai:gemma3@http://127.0.0.1:1/v1", model_options=options)
    model = agent.model
    assert isinstance(model, OpenAICompatibleModel)
    assert (model.stop, model.max_tokens, model.stream) == (("<end_of_turn>",), 64, False)
    assert model.request_body(ModelRequest())["stop"] == ["<end_of_turn>"]


def test_a_mistral_model_string_takes_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MISTRAL_API_KEY", KEY)
    agent = Agent(
        "a", model="mistral:mistral-small-latest", model_options={"temperature": 0.2, "stop": "##"}
    )
    assert isinstance(agent.model, MistralModel)
    body = agent.model.request_body(ModelRequest())
    assert (body["temperature"], body["stop"]) == (0.2, "##")


def test_the_blocking_agent_takes_model_options() -> None:
    agent = agentlib_sync.Agent(
        "a", model="openai:gemma3@http://127.0.0.1:1/v1", model_options={"stop": "##"}
    )
    assert agent.model.request_body(ModelRequest())["stop"] == "##"


def test_model_options_naming_no_option_say_which_and_list_the_options() -> None:
    with pytest.raises(
        TypeError, match=r"model_options has no option 'stops'; the options are .*stop"
    ):
        Agent("a", model="openai:m@http://127.0.0.1:1/v1", model_options={"stops": ["x"]})  # type: ignore[typeddict-unknown-key]


def test_a_malformed_option_of_a_model_string_is_refused_as_on_its_model_object() -> None:
    with pytest.raises(ValueError, match="max_retries must be an int >= 0"):
        Agent("a", model="openai:m@http://127.0.0.1:1/v1", model_options={"max_retries": -1})


def test_model_options_with_a_model_object_say_to_give_it_its_options() -> None:
    model = OpenAICompatibleModel("m", "http://127.0.0.1:1/v1")
    with pytest.raises(
        TypeError,
        match=r"model_options go with a model string.*OpenAICompatibleModel\(\.\.\., stop=",
    ):
        Agent("a", model=model, model_options={"stop": "##"})


def test_model_options_that_are_no_mapping_are_refused() -> None:
    with pytest.raises(TypeError, match="model_options must be a dict of options"):
        Agent("a", model="openai:m@http://127.0.0.1:1/v1", model_options=["stop"])  # type: ignore[arg-type]
