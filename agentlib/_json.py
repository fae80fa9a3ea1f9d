"""JSON values: the type alias and the attrs validators that check them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Union

import attrs

from ._errors import ValidationError

#: A value that ``json.dumps`` writes and ``json.loads`` reads back unchanged.
JsonValue = Union[None, bool, int, float, str, list[Any], dict[str, Any]]


class InvalidValue(ValidationError):
    """A rule of a data class was broken; the message is safe to show (it never holds the
    value). Constructors raise it directly; :func:`agentlib.structure` folds it into one
    ValidationError with the path of the offending value."""


def json_problem(value: object) -> str | None:
    """Why ``value`` is not JSON, or None when it is.

    Tuples count as arrays. The reason names a type and a position, never the value.
    """
    stack: list[tuple[object, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        if item is None or isinstance(item, (bool, int, str)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"a non-finite number{where} is not JSON"
            continue
        if isinstance(item, (list, tuple)):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
            continue
        if isinstance(item, Mapping):
            for k, v in item.items():
                if not isinstance(k, str):
                    return f"a key of type {type(k).__name__}{where} is not a JSON object key"
                stack.append((v, f"{where}.{k}"))
            continue
        return f"a value of type {type(item).__name__}{where} is not JSON"
    return None


def check_json(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: ``value`` must be JSON."""
    problem = json_problem(value)
    if problem is not None:
        raise InvalidValue(f"{attribute.name} must be JSON: {problem}")


def check_json_object(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: ``value`` must be None or a JSON object (a dict with string keys)."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise InvalidValue(
            f"{attribute.name} must be a JSON object (a dict), not {type(value).__name__}"
        )
    check_json(instance, attribute, value)
