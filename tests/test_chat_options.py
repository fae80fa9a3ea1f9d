"""The options both chat-completions models take: declared once as keywords, kept once as
checked settings."""

from __future__ import annotations

import attrs
import pytest

from agentlib import MistralModel, OpenAICompatibleModel
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
