"""Output types a client names by their JSON schema: ``run(..., output_type=T)`` on a
remote session sends T's schema, and the served turn asks its model for JSON matching it,
as a local run asks for T; the client structures the answer into T."""

from __future__ import annotations

import json
from typing import Any

from .._data._errors import ValidationError
from .._data._json import TOO_DEEP, nesting_problem, read_json
from .._toolkit._output import output_schema

__all__ = ["MAX_SCHEMA", "requested_output"]

#: The largest output schema a turn takes, in bytes of JSON.
MAX_SCHEMA = 64 * 1024


def requested_output(own: Any, schema: object) -> Any:
    """The output type of a turn whose client asked for JSON matching ``schema`` (None:
    nothing asked), for an agent whose own output type is ``own``: ``own`` when the schema
    is its own, else a type that asks the model for the schema and takes the JSON answer.

    Raises:
        ValidationError: ``schema`` is not a JSON object, is larger than
            :data:`MAX_SCHEMA` bytes or nests deeper than the JSON limit, or the agent has
            an output type of its own with another schema.
    """
    if schema is None:
        return own
    if not isinstance(schema, dict):
        raise ValidationError(
            '\'output_schema\' must be a JSON schema object, such as {"type": "object"}'
        )
    problem = nesting_problem(schema)
    if problem is not None:
        raise ValidationError(f"'output_schema' is {TOO_DEEP} @ $.output_schema{problem.at}")
    size = len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False))
    if size > MAX_SCHEMA:
        raise ValidationError(
            f"'output_schema' is {size:,} bytes of JSON, more than the {MAX_SCHEMA:,} a turn "
            "takes: ask for a smaller type"
        )
    if own is not None and own is not str:
        if output_schema(own) == schema:
            return own
        name = getattr(own, "__name__", repr(own))
        raise ValidationError(
            f"this agent answers in its own output type, {name}, whose schema is not the "
            "one asked for: run without output_type (or with that type), and structure the "
            "output on the client with Agent.load_from(..., output_type=...)"
        )
    return _schema_type(schema)


def _schema_type(schema: dict[str, Any]) -> type[Any]:
    """A type whose schema is ``schema`` and whose values are the JSON of an answer.

    It offers the two class methods by which an output type that describes itself (a
    pydantic model) is asked for its schema and reads an answer."""
    text = json.dumps(schema)

    class RequestedOutput:
        @classmethod
        def model_json_schema(cls) -> dict[str, Any]:
            copy: dict[str, Any] = json.loads(text)  # each request gets its own copy
            return copy

        @classmethod
        def model_validate_json(cls, answer: str) -> Any:
            return read_json(answer)

    return RequestedOutput
