"""OpenAI-compatible chat completions endpoints (vLLM, Ollama, llama.cpp's server, LM
Studio, OpenAI's own API): what their wire format spells its own way
(:data:`OPENAI_COMPATIBLE`), and where OpenAI's API and its key are.

These servers take OpenAI's ``tool_choice`` values as they are, report a streamed reply's
usage in its last event only when asked to, and take audio as wav or mp3. Their context
size, not only ``max_tokens``, may cut a reply: a cut reply's error says where to raise it.
"""

from __future__ import annotations

import os

from ._chat_codec import Dialect

__all__ = ["EXAMPLE_MODEL", "EXAMPLE_URL", "OPENAI_COMPATIBLE", "OPENAI_URL", "openai_api"]

#: Where ``"openai:<model>"`` goes unless ``OPENAI_BASE_URL`` says otherwise.
OPENAI_URL = "https://api.openai.com/v1"
#: For the messages of bad arguments.
EXAMPLE_MODEL = "llama3.1"
EXAMPLE_URL = "http://localhost:11434/v1"

OPENAI_COMPATIBLE = Dialect(
    provider="the OpenAI-compatible server",
    stream_options={"stream_options": {"include_usage": True}},
    context_hint=(
        "the server's context size (llama.cpp's --ctx-size, Ollama's num_ctx, vLLM's "
        "--max-model-len)"
    ),
    endless_hint=(
        "If every reply is cut, the model may never stop writing: a missing stop sequence or "
        "the model's chat template may be the cause. Give the model its template's "
        "end-of-turn marker as stop=[...] (Gemma's '<end_of_turn>', say; with a model "
        "string, in model_options), or serve it with a chat template that ends its turns "
        "(llama.cpp's server: --jinja, or --chat-template-file)"
    ),
)


def openai_api(model: str) -> tuple[str, str]:
    """The key and the URL for ``model`` on OpenAI's API, as the environment gives them
    (``OPENAI_API_KEY``, and ``OPENAI_BASE_URL`` or OpenAI's own), as OpenAI's SDK reads
    them.

    Raises:
        ValueError: No ``OPENAI_API_KEY``, or an ``OPENAI_BASE_URL`` that is no http:// or
            https:// URL (not shown: a URL may hold a password).
    """
    api_key = os.environ.get("OPENAI_API_KEY") or None
    if api_key is None:
        raise ValueError(
            f"model string 'openai:{model}' names OpenAI's API, which needs a key: set "
            "OPENAI_API_KEY, or pass a model object such as OpenAICompatibleModel("
            f"{model!r}, {OPENAI_URL!r}, api_key=...); for another server, give its URL: "
            f"'openai:{model}@{EXAMPLE_URL}'"
        )
    base_url = os.environ.get("OPENAI_BASE_URL") or OPENAI_URL
    if not base_url.startswith(("http://", "https://")):
        raise ValueError("OPENAI_BASE_URL must be an http:// or https:// URL, or unset")
    return api_key, base_url
