"""JSON schemas of Python types, for tool parameters and output types."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union

import attrs

__all__ = ["Definitions", "docstring_parameters", "json_schema", "lift_defs"]

_SIMPLE: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


def json_schema(tp: Any) -> dict[str, Any]:
    """The JSON schema of values of type ``tp``.

    Handles str, int, float, bool, None, Any, Literal, Enum, Optional and unions, lists,
    tuples, sets, dicts with string keys, attrs classes, dataclasses, and pydantic models
    (through their own ``model_json_schema``). A class that holds itself (a tree of nodes)
    is described once, under ``"$defs"`` at the schema's root, and referred to from within
    (``{"$ref": "#/$defs/Node"}``).

    Raises:
        TypeError: ``tp`` has no JSON form (a callable, a custom class...).
    """
    definitions = Definitions()
    schema = definitions.schema(tp)
    return {**schema, "$defs": definitions.defs} if definitions.defs else schema


class Definitions:
    """The ``$defs`` of schemas placed in one document (a tool's parameters in its
    arguments' object): each class that holds itself described once, under a name no other
    class of the document has.

    Attributes:
        defs: The definitions, by name, for the document's root.
    """

    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}
        self._classes = _Classes(self.defs)

    def schema(self, tp: Any) -> dict[str, Any]:
        """The JSON schema of ``tp``, its definitions joining :attr:`defs`.

        Raises:
            TypeError: ``tp`` has no JSON form.
        """
        return _schema(tp, self._classes)


def lift_defs(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without its ``"$defs"``, which join ``defs``: for a schema placed inside
    another, whose references are to the root of the whole."""
    found = schema.pop("$defs", None)
    if found:
        defs.update(found)
    return schema


@attrs.define
class _Classes:
    """The classes being described, outermost first, and the ``$defs`` of those that hold
    themselves."""

    defs: dict[str, Any]
    open: list[type[Any]] = attrs.field(factory=list)
    recursive: set[type[Any]] = attrs.field(factory=set)
    names: dict[type[Any], str] = attrs.field(factory=dict)

    def name(self, cls: type[Any]) -> str:
        """The key of ``cls`` in ``$defs``: its name, made unique."""
        known = self.names.get(cls)
        if known is None:
            taken = set(self.names.values())
            known, n = cls.__name__, 1
            while known in taken:
                n += 1
                known = f"{cls.__name__}{n}"
            self.names[cls] = known
        return known


def _schema(tp: Any, classes: _Classes) -> dict[str, Any]:
    if tp in _SIMPLE:
        return dict(_SIMPLE[tp])
    if tp is Any or tp is object:
        return {}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _schema(args[0], classes)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is Union or origin is types.UnionType:
        options = [_schema(arg, classes) for arg in args]
        return {"anyOf": options}
    if origin in (list, tuple, set, frozenset, Sequence) or tp in (list, tuple, set):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return {
                "type": "array",
                "prefixItems": [_schema(arg, classes) for arg in args],
                "minItems": len(args),
                "maxItems": len(args),
            }
        return {"type": "array", "items": _schema(args[0], classes) if args else {}}
    if origin in (dict, Mapping) or tp is dict:
        if args and args[0] is not str:
            raise TypeError(f"{tp!r} has no JSON form: JSON object keys are strings")
        return {"type": "object", "additionalProperties": _schema(args[1], classes) if args else {}}
    if inspect.isclass(tp) and issubclass(tp, enum.Enum):
        return {"enum": [member.value for member in tp]}
    if inspect.isclass(tp) and hasattr(tp, "model_json_schema"):
        # Its own $defs join the root's, where its references point.
        return lift_defs(dict(tp.model_json_schema()), classes.defs)
    if inspect.isclass(tp) and (attrs.has(tp) or dataclasses.is_dataclass(tp)):
        return _class_schema(tp, classes)
    raise TypeError(f"{tp!r} has no JSON form; use JSON types, attrs classes or dataclasses")


def _class_schema(cls: type[Any], classes: _Classes) -> dict[str, Any]:
    if cls in classes.open:  # it holds itself: a reference to its description in $defs
        classes.recursive.add(cls)
        return {"$ref": f"#/$defs/{classes.name(cls)}"}
    classes.open.append(cls)
    try:
        schema = _fields_schema(cls, classes)
    finally:
        classes.open.pop()
    if cls in classes.recursive:
        classes.defs[classes.name(cls)] = schema
    return schema


def _fields_schema(cls: type[Any], classes: _Classes) -> dict[str, Any]:
    # A class defined in a function refers to itself by a name its module does not hold.
    hints = typing.get_type_hints(cls, localns={cls.__name__: cls}, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    if attrs.has(cls):
        fields = [(f.name, f.init, f.default is attrs.NOTHING) for f in attrs.fields(cls)]
    else:
        missing = dataclasses.MISSING
        fields = [
            (f.name, f.init, f.default is missing and f.default_factory is missing)
            for f in dataclasses.fields(cls)
        ]
    for name, init, needed in fields:
        if init:
            properties[name] = _schema(hints.get(name, Any), classes)
            if needed:
                required.append(name)
    schema: dict[str, Any] = {
        "type": "object",
        "title": cls.__name__,
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    description = inspect.getdoc(cls)
    if description and not description.startswith(f"{cls.__name__}("):
        schema["description"] = description.split("\n\n")[0]
    return schema


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters)\s*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_LINE = re.compile(r"^\s*:param\s+(?:[\w\[\], ]+\s+)?(\w+)\s*:\s*(.*)$")


def docstring_parameters(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The summary of ``fn``'s docstring and its parameters' descriptions.

    Reads Google style (``Args:`` then ``name: text`` lines, continuation lines indented)
    and Sphinx style (``:param name: text``).
    """
    # Read here, line by line, rather than by docstring_parser: that one drops every
    # description of a docstring one of whose other sections it cannot read (a "Raises:"
    # line without a colon), and it would be a dependency of every install.
    doc = inspect.getdoc(fn) or ""
    lines = doc.splitlines()
    summary_lines: list[str] = []
    for line in lines:
        if not line.strip() or _ARGS_HEADER.match(line) or _SPHINX_LINE.match(line):
            break
        summary_lines.append(line.strip())
    params: dict[str, str] = {}
    in_args = False
    current: str | None = None
    args_indent = param_indent = 0
    for line in lines:
        sphinx = _SPHINX_LINE.match(line)
        if sphinx:
            current = sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            continue
        if _ARGS_HEADER.match(line):
            in_args, current = True, None
            args_indent = len(line) - len(line.lstrip())
            continue
        if not in_args:
            continue
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent <= args_indent:
            in_args = False  # the next section ("Returns:", ...)
            continue
        match = _ARG_LINE.match(line)
        if match and (current is None or indent <= param_indent):
            current = match.group(1).lstrip("*")
            param_indent = indent
            params[current] = match.group(3).strip()
        elif current is not None:
            params[current] = f"{params[current]} {line.strip()}".strip()
    return " ".join(summary_lines), params
