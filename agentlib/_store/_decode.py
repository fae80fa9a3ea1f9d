"""Reading back the JSON a store wrote.

What a store wrote, the converter wrote: it needs none of the converter's checks of outside
input (camelCase keys, strict types, paths in error messages). These decoders build the
classes straight from the JSON, several times faster; anything they do not expect (a type
of a later version, say) goes to the converter, which reads everything.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, Union

import attrs

from .._data._convert import structure, tag_of
from .._data._entries import ContextMessage

__all__ = ["reader"]

Decoder = Callable[[Any], Any]

_DECODERS: dict[Any, Decoder] = {}


def reader(tp: Any) -> Callable[[Any], Any]:
    """A function building an instance of ``tp`` from the JSON value a store wrote (parsed)."""
    fast = _decoder(tp)

    def read(data: Any) -> Any:
        try:
            return fast(data)
        except Exception:  # not what this version writes: the converter reads anything
            return structure(data, tp)

    return read


def _identity(value: Any) -> Any:
    return value


def _decoder(tp: Any) -> Decoder:
    known = _DECODERS.get(tp)
    if known is None:
        # While it is built, a type that refers to itself finds this stand-in.
        made: list[Decoder] = []
        _DECODERS[tp] = lambda value: made[0](value)
        try:
            made.append(_build(tp))
        except BaseException:
            del _DECODERS[tp]
            raise
        known = _DECODERS[tp] = made[0]
    return known


def _build(tp: Any) -> Decoder:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return _union(typing.get_args(tp))
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            item = _decoder(args[0])
            if item is _identity:
                return tuple
            return lambda value: tuple([item(element) for element in value])
        return _identity
    cls = origin or tp
    if isinstance(cls, type) and attrs.has(cls):
        return _attrs_class(cls)
    return _identity  # str, int, bool, Any, Literal, JSON values, mappings


def _union(members: tuple[Any, ...]) -> Decoder:
    optional = type(None) in members
    rest = tuple(member for member in members if member is not type(None))
    if len(rest) == 1:
        inner = _decoder(rest[0])
    else:
        table: dict[str, Decoder] = {}
        context: Decoder | None = None
        for member in rest:
            cls = typing.get_origin(member) or member
            if cls is ContextMessage:  # a message whose role is "context"
                context = _decoder(member)
                continue
            tag = tag_of(cls) if isinstance(cls, type) else None
            if tag is not None:
                table[tag] = _decoder(member)

        # An unknown tag raises KeyError: the converter reads the value.
        def inner(value: Any) -> Any:
            if context is not None and value.get("role") == "context":
                return context(value)
            return table[value["type"]](value)

    if not optional:
        return inner
    if inner is _identity:
        return _identity
    return lambda value: None if value is None else inner(value)


def _attrs_class(cls: type[Any]) -> Decoder:
    if tag_of(cls) is None and any(field.name == "raw" for field in attrs.fields(cls)):
        return _refuse(f"{cls.__name__} keeps unknown fields: the converter reads it")
    try:
        return _compile(cls)
    except TypeError as error:  # a type it cannot write out: the converter reads it
        return _refuse(str(error))


def _refuse(message: str) -> Decoder:
    def refuse(value: Any) -> Any:
        raise TypeError(message)

    return refuse


def _compile(cls: type[Any]) -> Decoder:
    """A function building ``cls`` from its JSON, written out field by field (a store writes
    every field; a missing one raises KeyError, and the converter reads the value).

    The value was checked when it was made, before the store wrote it: it is set field by
    field, as the class's own ``__init__`` would after its converters and validators.
    """
    namespace: dict[str, Any] = {"cls": cls, "new": object.__new__, "put": object.__setattr__}
    direct = all(field.init for field in attrs.fields(cls)) and not hasattr(
        cls, "__attrs_post_init__"
    )
    lines = ["def build(value):"]
    arguments = []
    if direct:
        lines.append("    made = new(cls)")
    for index, (key, alias, read) in enumerate(_specs(cls)):
        item = f"value[{key!r}]"
        if read is not None:
            namespace[f"read{index}"] = read
            item = f"read{index}({item})"
        if direct:
            lines.append(f"    put(made, {key!r}, {item})")
        else:
            arguments.append(f"{alias}={item}")
    lines.append("    return made" if direct else f"    return cls({', '.join(arguments)})")
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<agentlib decoder {cls.__qualname__}>", "exec"), namespace)
    return namespace["build"]  # type: ignore[no-any-return]


def _specs(cls: type[Any]) -> list[tuple[str, str, Decoder | None]]:
    """(JSON key, argument name, decoder or None to take the value as it is) per field."""
    specs: list[tuple[str, str, Decoder | None]] = []
    for field in attrs.fields(cls):  # their types were resolved when agentlib was imported
        if not field.init:
            continue
        if isinstance(field.type, str):
            raise TypeError(f"{cls.__name__}.{field.name}'s type is not resolved")
        read = _identity if isinstance(field.type, TypeVar) else _decoder(field.type)
        specs.append((field.name, field.alias or field.name, None if read is _identity else read))
    return specs
