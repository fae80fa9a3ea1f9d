"""JSON values: the type alias and the attrs validators that check them."""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Mapping
from typing import Any, Union

import attrs

from ._errors import ValidationError

#: A value that ``json.dumps`` writes and ``json.loads`` reads back unchanged.
JsonValue = Union[None, bool, int, float, str, list[Any], dict[str, Any]]


class InvalidValue(ValidationError):
    """A rule of a data class was broken; the message is safe to show (it never holds the
    value). Constructors raise it directly; :func:`agentlib.structure` folds it into one
    ValidationError with the path of the offending value."""


def json_problem(value: object, *, positions: bool = True) -> str | None:
    """Why ``value`` is not JSON, or None when it is.

    Tuples count as arrays. The reason names a type and, with ``positions``, a position
    (whose object keys may be data), never the value.
    """
    stack: list[tuple[object, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        at = f" at {where}" if where and positions else ""
        if item is None or isinstance(item, (bool, int, str)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"a non-finite number{at} is not JSON"
            continue
        if isinstance(item, (list, tuple)):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
            continue
        if isinstance(item, Mapping):
            for k, v in item.items():
                if not isinstance(k, str):
                    return f"a key of type {type(k).__name__}{at} is not a JSON object key"
                stack.append((v, f"{where}.{k}"))
            continue
        return f"a value of type {type(item).__name__}{at} is not JSON"
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


def as_json(value: Any) -> Any:
    """``value`` with every tuple made a list, as ``json.loads`` would give it back.

    Returns ``value`` itself when it holds no tuple (the common case: no copy).
    """
    if isinstance(value, tuple):
        return [as_json(item) for item in value]
    if isinstance(value, list):
        items = [as_json(item) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if isinstance(value, dict):
        pairs = {key: as_json(item) for key, item in value.items()}
        return pairs if any(pairs[key] is not value[key] for key in value) else value
    return value


def json_field(default: Any = None) -> Any:
    """An attrs field holding a JSON value (tuples are stored as lists)."""
    return attrs.field(default=default, converter=as_json, validator=check_json)


def raw_field(*reserved: str) -> Any:
    """The ``raw`` field of an ``Unknown*`` class: a JSON object of the fields it arrived
    with, none of which may be one of the class's own (``type`` and ``reserved``)."""
    camel = (
        name.split("_")[0] + "".join(p.title() for p in name.split("_")[1:]) for name in reserved
    )
    names = frozenset(("type", *reserved, *camel))

    def check_raw(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_json_object(instance, attribute, value)
        clashes = sorted(key for key in value if key in names)
        if clashes:
            raise InvalidValue(
                f"raw holds the received fields other than {', '.join(sorted(names))}; "
                f"pass {', '.join(clashes)} as arguments, not in raw"
            )

    return attrs.field(factory=dict, converter=as_json, validator=check_raw)


def known_tag_refused(union: Callable[[], Any], family: str) -> Any:
    """An attrs validator: an ``Unknown*`` class's tag must not be the ``type`` of another
    member of its family's union (``union`` returns it: it is defined after the class)."""

    def check_tag(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
        for member in typing.get_args(union()):
            cls = typing.get_origin(member) or member
            if cls is not type(instance) and getattr(cls, "type", None) == value:
                raise InvalidValue(
                    f"{attribute.name} {value!r} is a known {family} type: "
                    f"build {cls.__name__} instead"
                )

    return check_tag
