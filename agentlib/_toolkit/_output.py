"""Output types: the JSON schema a final answer must match, and parsing the answer into it."""

from __future__ import annotations

from typing import Any

import cattrs

from .._data._convert import CONVERTER, validation_error
from .._data._errors import ValidationError
from .._data._json import TOO_DEEP, InvalidValue, NotJson, read_json
from ._schema import json_schema

__all__ = ["output_schema", "parse_output"]


def output_schema(output_type: type[Any] | None) -> dict[str, Any] | None:
    """The JSON schema of ``output_type``, or None for free text."""
    if output_type is None or output_type is str:
        return None
    return json_schema(output_type)


def parse_output(text: str, output_type: type[Any] | None) -> Any:
    """The final answer ``text`` as an instance of ``output_type`` (``text`` itself if None).

    Raises:
        ValidationError: ``text`` is not JSON (NaN and Infinity are not), nests deeper than
            the nesting limit, or does not fit ``output_type``; the message gives the path
            of each problem, not the text.
    """
    if output_type is None or output_type is str:
        return text
    name = getattr(output_type, "__name__", repr(output_type))
    try:
        # Every answer is read by the same rules, whoever structures it next.
        data = read_json(text)
    except NotJson as error:
        problem = error.problem
        if problem.too_deep:
            what = f"the answer is {TOO_DEEP}"
        else:
            what = f"the answer is not JSON ({problem.reason})"
        raise ValidationError(
            f"{what}, so it cannot be read as {name}; the model was asked for JSON matching "
            f"its schema @ ${problem.at}"
        ) from None
    validate_json = getattr(output_type, "model_validate_json", None)
    if validate_json is not None:  # a pydantic model
        try:
            return validate_json(text)
        except ValueError as exc:
            raise ValidationError(
                f"the answer does not fit {name}: {exc.__class__.__name__} "
                f"({getattr(exc, 'error_count', lambda: '?')()} error(s))"
            ) from exc
    try:
        return CONVERTER.structure(data, output_type)
    except (cattrs.BaseValidationError, InvalidValue, ValueError, TypeError) as exc:
        raise validation_error(exc, f"answer for {name}") from exc
