"""The one cattrs converter: every data class to and from JSON-ready dicts.

Each family of classes (content blocks, entries, callbacks, records, events, history items,
approval answers) is a union tagged by a ``type`` field with stable string tags. An unknown
tag lands in the family's ``Unknown*`` class, which re-emits what it received, so that an
older client reads newer data. Families that are only ever input (history items, answers)
refuse an unknown tag instead.

cattrs' validation errors are exception groups, not ValueErrors: :func:`structure`
translates them, here and only here, into :class:`~agentlib.ValidationError`.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.errors import IterableValidationNote
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from . import _callbacks, _content, _entries, _events, _history_items, _records
from ._errors import ValidationError
from ._json import (
    LONE_SURROGATE,
    TOO_DEEP,
    InvalidValue,
    checked_class,
    nesting_problem,
    storable_text,
)

__all__ = ["structure", "unstructure"]

T = TypeVar("T")

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


class _Family:
    """A tagged union: its members by tag, and how to keep what has an unknown tag."""

    def __init__(
        self,
        name: str,
        members: tuple[type[Any], ...],
        unknown: type[Any] | None = None,
        unknown_tag_field: str = "",
        envelope: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.by_tag: dict[str, type[Any]] = {}
        for cls in members:
            self.by_tag.setdefault(cls.type, cls)
        self.unknown = unknown
        self.unknown_tag_field = unknown_tag_field
        self.envelope = envelope

    def tags(self) -> str:
        return ", ".join(repr(tag) for tag in self.by_tag)


def tag_of(cls: type[Any]) -> str | None:
    """The ``type`` tag a class declares (a class-level string), or None."""
    tag = getattr(cls, "type", None)
    return tag if isinstance(tag, str) else None


def _snake(key: Any) -> Any:
    if isinstance(key, str) and not key.islower():
        return _CAMEL.sub("_", key).lower()
    return key


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


#: How a union's member is named in messages: the JSON kinds, or the class's name.
_KINDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _tp_name(tp: Any) -> str:
    kind = _KINDS.get(tp)
    if kind is not None:
        return kind
    origin = typing.get_origin(tp) or tp
    if origin in (list, tuple, set, frozenset, Sequence):
        return "a list"
    if origin in (dict, Mapping):
        return "an object"
    return getattr(origin, "__name__", repr(tp))


#: The types a JSON scalar is exactly, which a union tries first.
_EXACT = (str, int, float, bool)


def _is_enum(cl: Any) -> bool:
    return isinstance(cl, type) and issubclass(cl, enum.Enum)


def _enum_member(cl: Any, value: Any) -> Any:
    """The member of enum ``cl`` whose value is ``value``, of the same type (True is not
    the member 1).

    Raises:
        InvalidValue: No member has it; the message lists the values, not the one given.
    """
    for member in cl:
        if type(member.value) is type(value) and member.value == value:
            return member
    values = ", ".join(repr(member.value) for member in cl)
    raise InvalidValue(f"expected one of {values}, got another {_type_name(value)}")


def make_converter() -> cattrs.Converter:
    """Build the converter. Hooks are registered before the unions that capture them."""
    conv = cattrs.Converter()

    # cattrs is lenient by default (3 -> "3", a str iterated as a list); input must not be.
    # An enum that is also a str or an int (StrEnum, IntEnum) reaches these hooks too.
    def strict_str(value: object, cl: Any) -> str:
        if cl is not str and _is_enum(cl):
            return _enum_member(cl, value)  # type: ignore[no-any-return]
        if not isinstance(value, str):
            raise InvalidValue(f"expected a string, got {_type_name(value)}")
        if not storable_text(value):
            raise InvalidValue(LONE_SURROGATE)
        return value

    def strict_int(value: object, cl: Any) -> int:
        if cl is not int and _is_enum(cl):
            return _enum_member(cl, value)  # type: ignore[no-any-return]
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidValue(f"expected an integer, got {_type_name(value)}")
        return value

    def strict_float(value: object, _: object) -> float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise InvalidValue(f"expected a number, got {_type_name(value)}")
        return float(value)

    def strict_bool(value: object, _: object) -> bool:
        if not isinstance(value, bool):
            raise InvalidValue(f"expected true or false, got {_type_name(value)}")
        return value

    conv.register_structure_hook(str, strict_str)
    conv.register_structure_hook(int, strict_int)
    conv.register_structure_hook(float, strict_float)
    conv.register_structure_hook(bool, strict_bool)
    conv.register_structure_hook(enum.Enum, lambda value, cl: _enum_member(cl, value))

    # A union of several types (int | str, an attrs class or a list...): the member the
    # value is exactly first (3 is an int before it is a float), then each in order. The
    # tagged unions of agentlib's own families are registered later, and win.
    families = set(UNIONS.values())

    def is_plain_union(tp: Any) -> bool:
        if typing.get_origin(tp) not in (typing.Union, types.UnionType) or tp in families:
            return False
        members = [arg for arg in typing.get_args(tp) if arg is not type(None)]
        # Of classes only, cattrs tells the members apart by their fields (a dict that fits
        # the first class may be meant for a second with more fields): it structures those.
        classes = [m for m in members if attrs.has(m) or dataclasses.is_dataclass(m)]
        return len(members) > 1 and len(classes) < len(members)

    def union_structure_factory(tp: Any) -> Callable[[Any, Any], Any]:
        members = [arg for arg in typing.get_args(tp) if arg is not type(None)]
        optional = len(members) < len(typing.get_args(tp))
        hooks = [(member, conv.get_structure_hook(member)) for member in members]
        names = " or ".join(_tp_name(member) for member in members)

        def structure_union(value: Any, _: Any) -> Any:
            if value is None and optional:
                return None
            for member, hook in hooks:
                if member in _EXACT and type(value) is member:
                    return hook(value, member)
            for member, hook in hooks:
                try:
                    return hook(value, member)
                except Exception:  # the next member may take it
                    continue
            raise InvalidValue(f"expected {names}, got {_type_name(value)}")

        return structure_union

    conv.register_structure_hook_factory(is_plain_union, union_structure_factory)

    # Tuples, lists and sets are read from a list: cattrs' own hooks take any iterable (a
    # str, a dict) and raise a TypeError for None.
    collections: dict[Any, Callable[[list[Any]], Any]] = {
        tuple: tuple,
        list: list,
        set: set,
        frozenset: frozenset,
    }

    def is_collection(tp: Any) -> bool:
        return (typing.get_origin(tp) or tp) in collections

    def is_tuple(tp: Any) -> bool:
        return (typing.get_origin(tp) or tp) is tuple

    def collection_structure_factory(tp: Any) -> Callable[[Any, Any], Any]:
        declared = typing.get_args(tp)
        args = declared or (Any,)
        make = collections[typing.get_origin(tp) or tp]
        # tuple[int, str]: an item of its own type at each position; else (tuple[int, ...], a
        # bare tuple, a list) one type for all.
        fixed = make is tuple and bool(declared) and args[-1] is not Ellipsis
        elements = list(args) if fixed else [args[0]]
        hooks = [conv.get_structure_hook(element) for element in elements]

        def structure_collection(value: Any, _: Any) -> Any:
            if not isinstance(value, (list, tuple)):
                raise InvalidValue(f"expected a list, got {_type_name(value)}")
            if fixed and len(value) != len(elements):
                raise InvalidValue(
                    f"expected a list of {len(elements)} items, got {len(value)} items"
                )
            items, errors = [], []
            for index, item in enumerate(value):
                element = elements[index if fixed else 0]
                try:
                    items.append(hooks[index if fixed else 0](item, element))
                except Exception as exc:
                    note = IterableValidationNote(f"item @ index {index}", index, element)
                    # Python 3.10 has no add_note; cattrs reads __notes__ either way.
                    exc.__notes__ = [*getattr(exc, "__notes__", ()), note]  # type: ignore[attr-defined]
                    errors.append(exc)
            if errors:
                raise cattrs.IterableValidationError(f"invalid items of {tp!r}", errors, tp)
            try:
                return make(items)
            except TypeError:  # a list in a set, say
                raise InvalidValue("the items of a set must be strings, numbers or None") from None

        return structure_collection

    def tuple_unstructure_factory(tp: Any) -> Callable[[tuple[Any, ...]], list[Any]]:
        return lambda value: [conv.unstructure(item) for item in value]

    conv.register_structure_hook_factory(is_collection, collection_structure_factory)
    conv.register_unstructure_hook_factory(is_tuple, tuple_unstructure_factory)

    def is_mapping_type(tp: Any) -> bool:
        return typing.get_origin(tp) in (dict, Mapping) or tp in (dict, Mapping)

    def mapping_structure_factory(tp: Any) -> Callable[[Any, Any], dict[str, Any]]:
        args = typing.get_args(tp)
        value_type = args[1] if len(args) == 2 else Any
        value_hook = None if value_type is Any else conv.get_structure_hook(value_type)

        def structure_mapping(value: Any, _: Any) -> dict[str, Any]:
            if not isinstance(value, Mapping):
                raise InvalidValue(f"expected an object, got {_type_name(value)}")
            for key in value:
                if not isinstance(key, str):
                    raise InvalidValue(f"object keys must be strings, got {_type_name(key)}")
            if value_hook is None:
                return dict(value)
            out, errors = {}, []
            for key, item in value.items():
                try:
                    out[key] = value_hook(item, value_type)
                except Exception as exc:
                    note = IterableValidationNote(f"value @ key {key!r}", key, value_type)
                    exc.__notes__ = [*getattr(exc, "__notes__", ()), note]  # type: ignore[attr-defined]
                    errors.append(exc)
            if errors:
                raise cattrs.IterableValidationError(f"invalid values of {tp!r}", errors, tp)
            return out

        return structure_mapping

    conv.register_structure_hook_factory(is_mapping_type, mapping_structure_factory)

    def mapping_unstructure(value: Mapping[str, Any]) -> dict[str, Any]:
        return {key: conv.unstructure(item) for key, item in value.items()}

    def is_mapping(tp: Any) -> bool:
        return typing.get_origin(tp) is Mapping or tp is Mapping

    conv.register_unstructure_hook_func(is_mapping, mapping_unstructure)

    # Every attrs class: keys in snake_case or camelCase; a ``type`` key, when present, must be
    # the class's own; a rule broken in the constructor becomes an error at the class's path.
    def attrs_structure_factory(cls: type[Any]) -> Callable[[Any, Any], Any]:
        parameters = getattr(cls, "__parameters__", ())
        # A generic class read without its parameters reads them as Any.
        target = cls[tuple(Any for _ in parameters)] if parameters else cls
        inner = make_dict_structure_fn(target, conv)
        tag = tag_of(cls)

        def structure_attrs(value: Any, _: Any) -> Any:
            if not isinstance(value, Mapping):
                raise InvalidValue(f"expected an object, got {_type_name(value)}")
            data: dict[str, Any] = {_snake(key): item for key, item in value.items()}
            if tag is not None and data.pop("type", tag) != tag:
                raise InvalidValue(f"type must be {tag!r} for {cls.__name__}")
            try:
                return inner(data, cls)
            except (ValueError, TypeError) as exc:
                raise cattrs.ClassValidationError(f"invalid {cls.__name__}", [exc], cls) from None

        return structure_attrs

    def attrs_unstructure_factory(cls: type[Any]) -> Callable[[Any], dict[str, Any]]:
        inner = make_dict_unstructure_fn(cls, conv)
        tag = tag_of(cls)
        if tag is None:
            return inner

        def unstructure_attrs(value: Any) -> dict[str, Any]:
            return {"type": tag, **inner(value)}

        return unstructure_attrs

    conv.register_structure_hook_factory(attrs.has, attrs_structure_factory)
    conv.register_unstructure_hook_factory(attrs.has, attrs_unstructure_factory)

    # Busy holds a live turn reference; on the wire it is the turn's ids.
    def is_busy(tp: Any) -> bool:
        return tp is _records.Busy or typing.get_origin(tp) is _records.Busy

    def unstructure_busy(busy: _records.Busy[Any]) -> dict[str, Any]:
        return {"type": "busy", "session_id": busy.turn.session_id, "turn_id": busy.turn.id}

    conv.register_unstructure_hook_func(is_busy, unstructure_busy)

    for family in FAMILIES.values():
        _register_family(conv, family)
    return conv


def _register_family(conv: cattrs.Converter, family: _Family) -> None:
    union = UNIONS[family.name]
    unknown = family.unknown
    member_classes = (*family.by_tag.values(), *([unknown] if unknown is not None else []))

    def structure_member(value: Any, _: Any) -> Any:
        if isinstance(value, member_classes):
            return value  # already built: a list may mix instances and dicts
        if not isinstance(value, Mapping):
            raise InvalidValue(
                f"expected an object with a 'type' ({family.tags()}), got {_type_name(value)}"
            )
        tag = value.get("type")
        if tag is None:
            raise InvalidValue(f"missing 'type': one of {family.tags()}")
        if not isinstance(tag, str):
            raise InvalidValue(f"'type' must be a string, one of {family.tags()}")
        cls = family.by_tag.get(tag)
        if cls is not None:
            if cls is _entries.MessageEntry and value.get("role") == "context":
                cls = _entries.ContextMessage
            return conv.structure(value, cls)
        if unknown is None:
            raise InvalidValue(f"unknown type: expected one of {family.tags()}")
        return conv.structure(value, unknown)

    conv.register_structure_hook(union, structure_member)
    members = set(member_classes)

    def is_this_family(tp: Any) -> bool:
        # The union written another way: TurnState[Any], ApprovalAnswer | None...
        if typing.get_origin(tp) not in (typing.Union, types.UnionType):
            return False
        args = {typing.get_origin(arg) or arg for arg in typing.get_args(tp)}
        args.discard(type(None))
        return bool(args) and args <= members

    def structure_member_or_none(value: Any, tp: Any) -> Any:
        if value is None and type(None) in typing.get_args(tp):
            return None
        return structure_member(value, tp)

    conv.register_structure_hook_func(is_this_family, structure_member_or_none)
    # The Unknown class of a family is re-emitted as it came.
    if unknown is None:
        return
    envelope = family.envelope
    tag_field = family.unknown_tag_field

    def structure_unknown(value: Any, _: Any) -> Any:
        data = {
            _snake(key) if key in envelope or _snake(key) in envelope else key: item
            for key, item in value.items()
        }
        tag = data.get("type")
        if not isinstance(tag, str):
            raise InvalidValue(f"missing 'type': one of {family.tags()}")
        kwargs = {name: data[name] for name in envelope if name in data}
        for name, item in kwargs.items():
            if item is not None and not isinstance(item, str):
                raise InvalidValue(f"{name} must be a string, got {_type_name(item)}")
        raw = {key: item for key, item in data.items() if key != "type" and key not in envelope}
        try:
            return unknown(**kwargs, **{tag_field: tag}, raw=raw)
        except (ValueError, TypeError) as exc:
            if isinstance(exc, InvalidValue) and exc.at.startswith(".raw"):
                # raw's fields are the value's own on the wire: the path leaves raw out.
                exc = InvalidValue(exc.reason, at=exc.at[len(".raw") :])
            raise cattrs.ClassValidationError(
                f"invalid {unknown.__name__}", [exc], unknown
            ) from None

    def unstructure_unknown(value: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"type": getattr(value, tag_field)}
        for name in envelope:
            out[name] = getattr(value, name)
        out.update(value.raw)
        return out

    conv.register_structure_hook(unknown, structure_unknown)
    conv.register_unstructure_hook(unknown, unstructure_unknown)


UNIONS: dict[str, Any] = {
    "content block": _content.ContentBlock,
    "entry": _entries.Entry,
    "callback": _callbacks.Callback,
    "record": _records.TurnState,
    "event": _events.Event,
    "history item": _history_items.HistoryImportEntry,
    "approval answer": _callbacks.ApprovalAnswer,
}

FAMILIES: dict[str, _Family] = {
    family.name: family
    for family in (
        _Family(
            "content block",
            typing.get_args(_content.ContentBlock)[:-1],
            unknown=_content.UnknownContentBlock,
            unknown_tag_field="original_type",
        ),
        _Family(
            "entry",
            (
                _entries.MessageEntry,
                _entries.ToolCallEntry,
                _entries.ToolResultEntry,
            ),
            unknown=_entries.UnknownEntry,
            unknown_tag_field="entry_type",
            envelope=("id", "turn_id"),
        ),
        _Family(
            "callback",
            typing.get_args(_callbacks.Callback)[:-1],
            unknown=_callbacks.UnknownCallback,
            unknown_tag_field="callback_type",
            envelope=("id", "session_id", "turn_id"),
        ),
        _Family(
            "record",
            (
                _records.Running,
                _records.Blocked,
                _records.Completed,
                _records.Interrupted,
                _records.Failed,
                _records.UnknownOutcome,
            ),
            unknown=_records.UnknownRecord,
            unknown_tag_field="record_type",
            envelope=("turn_id", "session_id", "cursor"),
        ),
        _Family(
            "event",
            typing.get_args(_events.Event)[:-1],
            unknown=_events.UnknownEvent,
            unknown_tag_field="event_type",
            envelope=("id", "session_id", "turn_id"),
        ),
        _Family("history item", typing.get_args(_history_items.HistoryImportEntry)),
        _Family("approval answer", typing.get_args(_callbacks.ApprovalAnswer)),
    )
}

CONVERTER = make_converter()


def unstructure(obj: Any) -> Any:
    """``obj`` as JSON-ready data: dicts, lists, strings, numbers, booleans and None.

    Every data class becomes a dict tagged by ``type``; ``json.dumps`` writes the result and
    :func:`structure` reads it back into an equal object.

    Raises:
        ValidationError: ``obj`` nests lists, dicts or classes of yours deeper than the
            nesting limit (100 levels); the message gives the path where it stopped.
    """
    problem = nesting_problem(obj)
    if problem is not None:
        raise validation_error(_too_deep(problem.at), describe(type(obj)))
    return CONVERTER.unstructure(obj)


def structure(data: Any, cls: type[T] | Any) -> T:
    """``data`` (as :func:`unstructure` or a client wrote it) as an instance of ``cls``.

    ``cls`` may be a class or a union such as :data:`agentlib.Event`. Keys may be in
    snake_case or camelCase. An unknown ``type`` becomes the family's ``Unknown*`` class.

    Raises:
        ValidationError: ``data`` does not fit ``cls``; its message lists each problem
            with its path, e.g. ``required field missing @ $.content[0].text``. Data nested
            deeper than the nesting limit (100 levels of arrays and objects) is refused so.
    """
    if not reads_own_classes(cls):
        # A class of yours may contain itself: the converter would recurse as deep as the
        # data goes. agentlib's classes check the JSON they hold when they are built.
        problem = nesting_problem(data)
        if problem is not None:
            raise validation_error(_too_deep(problem.at), describe(cls))
    try:
        return CONVERTER.structure(data, cls)  # type: ignore[no-any-return]
    except (cattrs.BaseValidationError, InvalidValue) as exc:
        raise validation_error(exc, describe(cls)) from exc


def unknown_fields(data: Mapping[str, Any], value: Any) -> list[str]:
    """The keys of ``data`` that name no field of ``value``, the instance it was read into
    (keys in snake_case or camelCase, and ``type``), sorted; [] for a value of no attrs
    class."""
    if not attrs.has(type(value)):
        return []
    names = {field.name for field in attrs.fields(type(value))} | {"type"}
    return sorted(str(key) for key in data if _snake(key) not in names)


def _too_deep(at: str) -> InvalidValue:
    return InvalidValue(f"the value is {TOO_DEEP}; flatten it", at=at)


_SCALARS = (str, int, float, bool, bytes, type(None))
_CONTAINERS = (list, tuple, dict, set, frozenset, Mapping, Sequence, typing.Union)


def reads_own_classes(tp: Any) -> bool:
    """Whether structuring into ``tp`` meets no class but agentlib's: such a structure goes no
    deeper than agentlib's classes nest, whatever the data, and each class checks the JSON
    it holds. A class of yours may contain itself, and be as deep as its data."""
    pending = [tp]
    while pending:
        current = pending.pop()
        if current is Any or current in _SCALARS or isinstance(current, typing.TypeVar):
            continue
        origin = typing.get_origin(current)
        if origin is typing.Literal:
            continue
        if origin is not None:
            if origin in _CONTAINERS or origin is types.UnionType or checked_class(origin):
                pending.extend(arg for arg in typing.get_args(current) if arg is not Ellipsis)
                continue
            return False
        if current in _CONTAINERS or (isinstance(current, type) and checked_class(current)):
            continue
        return False
    return True


def describe(cls: Any) -> str:
    """A readable name for a class or union, for messages."""
    for name, union in UNIONS.items():
        if cls == union:
            return name
    return getattr(cls, "__name__", repr(cls))


def format_problem(exc: BaseException, tp: Any) -> str:
    """One problem, in words that never repeat the offending value."""
    if isinstance(exc, InvalidValue):
        return exc.reason
    if isinstance(exc, KeyError):
        return "required field missing"
    if tp is not None and typing.get_origin(tp) is typing.Literal:
        allowed = ", ".join(repr(arg) for arg in typing.get_args(tp))
        return f"must be one of {allowed}"
    if isinstance(exc, (ValueError, TypeError)):
        return f"invalid value, expected {describe(tp)}" if tp is not None else "invalid value"
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unexpected fields: {', '.join(sorted(exc.extra_fields))}"
    return f"invalid value ({type(exc).__name__})"


def validation_error(exc: BaseException, what: str, path: str = "$") -> ValidationError:
    """``exc`` (a cattrs error or an ``InvalidValue``) as one :class:`ValidationError`."""
    if isinstance(exc, cattrs.BaseValidationError):
        # cattrs writes each problem as "<reason> @ <path>", one per reason it asks for, in
        # order: the path below the value that an InvalidValue names goes at its end.
        below: list[str] = []

        def reason(leaf: BaseException, tp: Any) -> str:
            below.append(leaf.at if isinstance(leaf, InvalidValue) else "")
            return format_problem(leaf, tp)

        found = cattrs.transform_error(exc, path=path, format_exception=reason)
        problems = tuple(problem + at for problem, at in zip(found, below, strict=True))
    else:
        problems = (f"{format_problem(exc, None)} @ {path}{getattr(exc, 'at', '')}",)
    return ValidationError(f"invalid {what}: " + "; ".join(problems), problems)
