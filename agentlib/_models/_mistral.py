"""Mistral's chat completions API: where it is, the key it takes, and what its wire format
spells its own way (:data:`MISTRAL`).

Mistral says ``"any"`` for OpenAI's ``tool_choice="required"``, names the tool of each tool
message, and takes ``input_audio`` as the file alone, reading its format from it. It takes
back only tool call ids of nine letters and digits (any other is a 400, code ``3280``), so
the ids of calls from another provider are replaced in the history it is sent.
"""

from __future__ import annotations

import hashlib
import os
import re

from ._chat_codec import Dialect

__all__ = ["DEFAULT_URL", "KEY_HINT", "MISTRAL", "mistral_call_id", "mistral_key", "mistral_url"]

DEFAULT_URL = "https://api.mistral.ai/v1"
#: What a 401 says to check.
KEY_HINT = "the api_key (api_key=... or MISTRAL_API_KEY)"

_CALL_ID = re.compile(r"^[a-zA-Z0-9]{9}$")
_BASE62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def mistral_call_id(call_id: str) -> str:
    """A call id Mistral takes back: ``call_id`` itself if it is nine letters and digits,
    else one made from it, the same each time, so that a call and its result still match."""
    if _CALL_ID.match(call_id):
        return call_id
    number = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
    digits = []
    for _ in range(9):
        number, digit = divmod(number, 62)
        digits.append(_BASE62[digit])
    return "".join(digits)


MISTRAL = Dialect(
    provider="Mistral",
    required="any",
    no_content="",
    names_results=True,
    call_id=mistral_call_id,
    audio_file_alone=True,
)


def mistral_key(api_key: str | None) -> str:
    """The key given, else ``MISTRAL_API_KEY``.

    Raises:
        ValueError: Neither is set.
    """
    if api_key is None:
        api_key = os.environ.get("MISTRAL_API_KEY") or None
    if api_key is None:
        raise ValueError(
            "MistralModel needs an API key: pass api_key=... or set MISTRAL_API_KEY "
            "(https://console.mistral.ai/api-keys)"
        )
    return api_key


def mistral_url(base_url: str | None) -> str:
    """The API's root given, else ``MISTRAL_BASE_URL``, else Mistral's own."""
    if base_url is None:
        base_url = os.environ.get("MISTRAL_BASE_URL") or DEFAULT_URL
    return base_url
