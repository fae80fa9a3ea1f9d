"""The JSON bodies the server's routes take, one class each, read with the converter.

A body is read as deep as the wire needs: its fields' JSON types. What a field holds
(content, history items, an answer) is checked by the public API the route calls, as a
local session checks it, so its errors are the same. Each field's ``metadata`` may carry
a ``description`` and a JSON ``schema`` that says more than its type (the OpenAPI
description reads both).
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from ._access import MOST_SECONDS
from ._openapi import tagged

__all__ = [
    "AnswerBody",
    "InterruptBody",
    "MessageBody",
    "MintBody",
    "StartSessionBody",
    "StartTurnBody",
    "SteerBody",
]

#: A message's content: a text, or content blocks.
CONTENT_SCHEMA = {
    "oneOf": [
        {"type": "string"},
        # A message holds no block of a type this version does not know.
        {"type": "array", "items": tagged("content block", "a content block", known_only=True)},
    ]
}


def _key() -> Any:
    return attrs.field(
        default=None,
        metadata={
            "description": "repeats of a request with this key are told what the first was "
            "(the Idempotency-Key header, if sent, wins)"
        },
    )


def _content() -> Any:
    return attrs.field(
        metadata={"description": "a text, or content blocks", "schema": CONTENT_SCHEMA}
    )


@attrs.frozen(kw_only=True)
class StartSessionBody:
    """A new session: its history to start from, and its inputs."""

    history: list[Any] | None = attrs.field(
        default=None,
        metadata={
            "description": "history items to start from, oldest first",
            "schema": {"type": "array", "items": tagged("history item", "a history item")},
        },
    )
    inputs: dict[str, dict[str, Any]] | None = attrs.field(
        default=None,
        metadata={"description": "JSON objects by input id, as a session stores them"},
    )
    idempotency_key: str | None = _key()


@attrs.frozen(kw_only=True)
class StartTurnBody:
    """A new turn of a session."""

    content: str | list[Any] = _content()
    idempotency_key: str | None = _key()
    max_steps: int | None = attrs.field(
        default=None,
        metadata={
            "description": "the most model steps of the turn (the agent's by default)",
            "schema": {"type": "integer", "minimum": 1},
        },
    )
    output_schema: dict[str, Any] | None = attrs.field(
        default=None,
        metadata={
            "description": "the JSON schema the turn's answer must match (run(output_type=T) "
            "of a remote session sends T's); the served agent's own output type by default"
        },
    )


@attrs.frozen(kw_only=True)
class MessageBody:
    """A message: a new turn, or added to the running one."""

    content: str | list[Any] = _content()
    idempotency_key: str | None = _key()


@attrs.frozen(kw_only=True)
class SteerBody:
    """A message for the running turn, which it reads at its next step."""

    content: str | list[Any] = _content()
    idempotency_key: str | None = _key()


@attrs.frozen(kw_only=True)
class InterruptBody:
    """A turn stopped."""

    idempotency_key: str | None = _key()


#: What an answer's ``kind`` may say it is.
AnswerKind = Literal["approval", "credentials", "sign_in", "keep_open", "value", "failure"]


@attrs.frozen(kw_only=True)
class AnswerBody:
    """A callback's answer."""

    answer: Any = attrs.field(
        metadata={
            "description": "an approval's, a sign-in's, or a client tool's result as it is; "
            "with kind 'failure', the message of the client tool's failure"
        }
    )
    kind: AnswerKind | None = attrs.field(
        default=None,
        metadata={"description": "what the answer is; without it, as the open callback takes it"},
    )
    idempotency_key: str | None = _key()


@attrs.frozen(kw_only=True)
class MintBody:
    """A token for one session, with some rights there."""

    rights: tuple[Literal["answer", "read"], ...] = attrs.field(
        metadata={
            "description": "what the token may do in the session",
            "schema": {
                "type": "array",
                "items": {"enum": ["answer", "read"]},
                "minItems": 1,
                "uniqueItems": True,
            },
        }
    )
    seconds: float = attrs.field(
        default=3600.0,
        metadata={
            "description": "how long the token lasts",
            "schema": {"type": "number", "exclusiveMinimum": 0, "maximum": MOST_SECONDS},
        },
    )
