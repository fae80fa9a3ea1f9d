"""JSON values: the type alias, the nesting limit, and the checks every JSON input passes."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Union

import attrs

from ._errors import ValidationError

#: How deeply arrays and objects may nest in one JSON value that agentlib takes in
#: (docs/data.md, "Nesting limit"). serde_json stops at 128; 100 keeps a value, with the
#: classes around it, well inside Python's recursion limit wherever it is processed.
MAX_DEPTH = 100

T = TypeVar("T")

#: Why a value over the limit is refused ("meta is ..."); what to do and the path follow it.
TOO_DEEP = f"nested deeper than the limit of {MAX_DEPTH} arrays and objects"

#: How many steps of a long path an error shows; "..." stands for the rest.
_PATH_STEPS = 10
#: The longest object key an error shows whole.
_KEY_CHARS = 24


class InvalidValue(ValidationError):
    """A rule of a data class was broken; the message is safe to show (it never holds the
    value). Constructors raise it directly; :func:`agentlib.structure` folds it into one
    ValidationError with the path of the offending value.

    Attributes:
        reason: The message without its path.
        at: The path below the value the message is about (``".meta.a[0]"``), or ``""``.
    """

    def __init__(self, reason: str, *, at: str = "") -> None:
        message = f"{reason} @ ${at}" if at else reason
        super().__init__(message, (message,) if at else ())
        self.reason = reason
        self.at = at


@attrs.frozen
class Problem:
    """Why a value is not JSON that agentlib takes.

    Attributes:
        reason: What is wrong, in words that never hold the value.
        at: Where, as a path below the value (``".a[0][0]"``); ``""`` for the value itself
            or a place that is not known.
        too_deep: The value nests deeper than :data:`MAX_DEPTH`.
    """

    reason: str
    at: str = ""
    too_deep: bool = False


class NotJson(ValueError):
    """:func:`read_json` was given text it does not take; ``problem`` says why."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.reason)
        self.problem = problem


# A path is built only for a value that is refused: while a value is walked, each item
# keeps a link to its parent's link and its own key or index.
_Link = Union[tuple["_Link", Union[str, int, None]], None]


def _path(link: _Link) -> str:
    steps: list[str] = []
    while link is not None:
        link, key = link
        steps.append(_step(key))
    steps.reverse()
    if len(steps) > _PATH_STEPS:
        steps = [*steps[:_PATH_STEPS], "..."]
    return "".join(steps)


def _step(key: str | int | None) -> str:
    if isinstance(key, int):
        return f"[{key}]"
    if key is None:  # a key that is neither a string nor an integer
        return "[...]"
    if len(key) > _KEY_CHARS:
        return f"[{key[:_KEY_CHARS]!r}...]"
    return f".{key}" if key.isidentifier() else f"[{key!r}]"


_UNCHECKED: set[type[Any]] = set()


def unchecked(cls: type[T]) -> type[T]:
    """Mark one of agentlib's classes as holding data it does not check (what a model gave):
    the nesting checks walk into it as into a class of yours."""
    _UNCHECKED.add(cls)
    return cls


@functools.cache
def checked_class(cls: Any) -> bool:
    """Whether instances of ``cls`` checked their data when they were built, as agentlib's
    data classes do (their ``__module__`` is ``agentlib``, or one of its modules)."""
    module = getattr(cls, "__module__", "") or ""
    return (module == "agentlib" or module.startswith("agentlib.")) and cls not in _UNCHECKED


#: Types whose values are JSON as they are (subclasses are walked: ``bool`` is ``int``'s).
JSON_SCALARS = (str, int, bool)

#: Half of a UTF-16 surrogate pair. A Python string may hold one on its own (``json.loads``
#: makes one of the escape ``"\\ud800"``), but UTF-8 cannot encode it: no store, response
#: or log line can carry it.
_SURROGATE = re.compile("[\ud800-\udfff]")

#: What is wrong with text that holds a lone surrogate.
SURROGATE_REASON = (
    "holds a lone surrogate (a half of a UTF-16 pair, such as the escape \\ud800), which "
    "UTF-8 cannot encode"
)
#: Why a string with a lone surrogate is refused, and what to send instead.
LONE_SURROGATE = f"a string {SURROGATE_REASON}; send whole characters"


def storable_text(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8: it holds no lone surrogate."""
    return text.isascii() or _SURROGATE.search(text) is None


#: The annotations of the fields :func:`check_text_fields` reads: text, or a tuple of texts
#: (as classes, or as the strings they are until attrs resolves them).
_TEXT_TYPES: tuple[object, ...] = (
    str,
    Union[str, None],
    tuple[str, ...],
    Union[tuple[str, ...], None],
    "str",
    "str | None",
    "tuple[str, ...]",
    "tuple[str, ...] | None",
)


@functools.cache
def _text_fields(cls: type[Any]) -> tuple[str, ...]:
    return tuple(
        field.name for field in attrs.fields(cls) if field.type is str or field.type in _TEXT_TYPES
    )


def check_text_fields(instance: object) -> None:
    """Refuse an attrs instance whose text fields (``str``, or a tuple of them) hold text
    no store can keep: called by data classes when they are built.

    Raises:
        InvalidValue: A field holds a lone surrogate; the error names the field.
    """
    for name in _text_fields(typing.cast(Any, type(instance))):
        value = getattr(instance, name)
        if type(value) is str:
            if not value.isascii() and not storable_text(value):
                raise InvalidValue(
                    f"{name} {SURROGATE_REASON}; send whole characters", at=f".{name}"
                )
        elif type(value) is tuple:
            for index, item in enumerate(value):
                if type(item) is str and not storable_text(item):
                    raise InvalidValue(
                        f"{name} {SURROGATE_REASON}; send whole characters", at=f".{name}[{index}]"
                    )


def key_problem(key: object) -> str | None:
    """Why ``key``, an idempotency key, is refused; None for None or a key every store
    keeps: a string without NUL (PostgreSQL's text cannot hold it) or a lone surrogate.
    The reason follows "it" and never holds the key."""
    if key is None:
        return None
    if not isinstance(key, str):
        return f"must be a string, not {type(key).__name__}"
    if "\x00" in key:
        return "holds a NUL character (\\u0000), which a store cannot keep in a key"
    if not storable_text(key):
        return SURROGATE_REASON
    return None


def check_key(key: object, name: str = "idempotency_key") -> None:
    """Refuse an idempotency key that a store cannot keep, before anything is written.

    Raises:
        ValidationError: ``key`` is not a string, or holds NUL or a lone surrogate; the
            message names ``name``, never the key.
    """
    problem = key_problem(key)
    if problem is not None:
        raise ValidationError(
            f"invalid {name}: it {problem}; send a key of printable text, such as a UUID"
        )


def _walk(value: object, *, strict: bool) -> Problem | None:
    """The first problem of ``value``, walked without recursion so that no depth breaks it.

    ``strict`` asks for JSON (tuples count as arrays). Otherwise any Python value goes, as
    :func:`agentlib.unstructure` takes it: sets count as arrays, and attrs classes and
    dataclasses as objects, except agentlib's own, which checked their data when built.
    """
    if value is None or _flat(value, strict):
        return None  # the common cases, without building a stack
    if type(value) in JSON_SCALARS:
        return Problem(LONE_SURROGATE) if strict and not _storable((value,)) else None
    stack: list[tuple[object, int, _Link]] = [(value, 0, None)]
    while stack:
        item, depth, link = stack.pop()
        if item is None or isinstance(item, (bool, int)):
            continue
        if isinstance(item, str):
            if strict and not storable_text(item):
                return Problem(LONE_SURROGATE, _path(link))
            continue
        if isinstance(item, float):
            if strict and not math.isfinite(item):
                return Problem("a non-finite number (NaN or infinity) is not JSON", _path(link))
            continue
        children: list[tuple[object, str | int | None]]
        if isinstance(item, (list, tuple)) or (not strict and isinstance(item, (set, frozenset))):
            children = [(child, index) for index, child in enumerate(item)]
        elif isinstance(item, Mapping):
            children = []
            for key, child in item.items():
                if isinstance(key, str):
                    if strict and not storable_text(key):
                        return Problem(f"an object key: {LONE_SURROGATE}", _path(link))
                    children.append((child, key))
                elif strict:
                    return Problem(
                        f"a key of type {type(key).__name__} is not a JSON object key",
                        _path(link),
                    )
                else:
                    children.append((child, key if isinstance(key, int) else None))
        elif strict:
            return Problem(f"a value of type {type(item).__name__} is not JSON", _path(link))
        elif attrs.has(cls := type(item)) and not isinstance(item, type):
            if checked_class(cls):
                continue
            children = [(getattr(item, f.name), f.name) for f in attrs.fields(cls)]
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            children = [(getattr(item, f.name), f.name) for f in dataclasses.fields(item)]
        else:
            continue  # an object the converter passes on as it is
        if depth >= MAX_DEPTH:
            return Problem(TOO_DEEP, _path(link), too_deep=True)
        stack.extend((child, depth + 1, (link, key)) for child, key in reversed(children))
    return None


def read_whole_text(text: str) -> Any:
    """``json.loads(text)``, each lone surrogate of its strings (an escape such as
    ``\\ud800`` without its pair) read as U+FFFD, the replacement character, as a UTF-8
    decoder reads bytes it cannot decode: for what a model's provider sends, which agentlib
    stores as it came but for that.

    Raises:
        ValueError: ``text`` is not JSON.
        RecursionError: It nests deeper than the parser recurses.
    """
    value = json.loads(text)
    if "\\ud" in text or "\\uD" in text:  # a surrogate comes only from an escape
        return _whole_text(value)
    return value


def _whole_text(value: Any) -> Any:
    if type(value) is str:
        return value if storable_text(value) else _SURROGATE.sub("\ufffd", value)
    if type(value) is list:
        return [_whole_text(item) for item in value]
    if type(value) is dict:
        return {_whole_text(key): _whole_text(item) for key, item in value.items()}
    return value


def unstorable_text(value: object) -> Problem | None:
    """Where JSON ``value`` (as ``json.loads`` gives it) holds a string or an object key
    that no store can keep (a lone surrogate), at any depth; None when it holds none."""
    if _flat(value, strict=True):
        return None
    stack: list[tuple[object, _Link]] = [(value, None)]
    while stack:
        item, link = stack.pop()
        if type(item) is str:
            if not storable_text(item):
                return Problem(LONE_SURROGATE, _path(link))
        elif type(item) is list:
            stack.extend((child, (link, index)) for index, child in enumerate(item))
        elif type(item) is dict:
            for key, child in item.items():
                if not storable_text(key):
                    return Problem(f"an object key: {LONE_SURROGATE}", _path(link))
                stack.append((child, (link, key)))
    return None


def _flat(value: object, strict: bool) -> bool:
    """Whether ``value`` is an empty object, or a dict of string keys, or a list, whose
    values are all None, strings, integers or booleans: JSON at any nesting limit (and,
    ``strict``, each string one that can be stored)."""
    if type(value) is dict:
        return (
            set(map(type, value)) <= _STR
            and set(map(type, value.values())) <= _FLAT_TYPES
            and (not strict or (_storable(value) and _storable(value.values())))
        )
    if type(value) is list:
        return set(map(type, value)) <= _FLAT_TYPES and (not strict or _storable(value))
    return type(value) is _EmptyObject


def _storable(items: typing.Iterable[object]) -> bool:
    return all(storable_text(item) for item in items if type(item) is str)


_STR = frozenset((str,))
_FLAT_TYPES = frozenset((str, int, bool, type(None)))


def json_problem(value: object) -> Problem | None:
    """Why ``value`` is not JSON within the nesting limit, or None when it is.

    Tuples count as arrays. The reason names a type, never the value; the path's object
    keys may be data.
    """
    return _walk(value, strict=True)


def nesting_problem(value: object) -> Problem | None:
    """Why ``value`` cannot be turned into JSON without going deeper than the nesting limit
    (counting each of its lists, dicts, sets, attrs classes and dataclasses as a level), or
    None. Checked before anything walks ``value`` recursively."""
    return _walk(value, strict=False)


# Strings whole (their brackets are text), and the characters that shape the value.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]', re.DOTALL)


def _text_nesting_problem(text: str, limit: int) -> Problem | None:
    """Whether JSON ``text`` nests deeper than ``limit``, found without parsing it (the
    parser recurses once per level)."""
    if text.count("[") + text.count("{") <= limit:
        return None
    # Per open array or object: whether it is an object, its current index, its current key.
    open_: list[list[Any]] = []
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            if len(open_) >= limit:
                link: _Link = None
                for is_object, index, key in open_:
                    link = (link, _key_of(key) if is_object else index)
                return Problem(TOO_DEEP, _path(link), too_deep=True)
            open_.append([token == "{", 0, None])
        elif token in ("]", "}"):
            if open_:
                open_.pop()
        elif token == ",":
            if open_:
                open_[-1][1] += 1
                open_[-1][2] = None
        elif open_ and open_[-1][0] and open_[-1][2] is None:
            open_[-1][2] = token  # the first string of an object's member is its key
    return None


def _key_of(token: str | None) -> str | None:
    if token is None:
        return None
    try:
        key = json.loads(token)
    except ValueError:
        return token[1:-1]
    return key if isinstance(key, str) else None


def _refuse_constant(name: str) -> Any:
    raise NotJson(Problem(f"{name} is not a JSON number"))


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise NotJson(Problem("a number is too large to be read as a float"))
    return number


def read_json(text: str, *, wrapping: int = 0) -> Any:
    """``text`` parsed as JSON, strictly: no NaN or Infinity, at most :data:`MAX_DEPTH`
    levels deep (checked before parsing), and ``wrapping`` more: the levels of a request
    body around values that are checked again on their own.

    Raises:
        NotJson: Why the text is not such JSON: the parser's reason and position, or where
            it nests too deeply; never the text itself.
    """
    problem = _text_nesting_problem(text, MAX_DEPTH + wrapping)
    if problem is not None:
        raise NotJson(problem)
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as error:
        raise NotJson(Problem(f"{error.msg} at line {error.lineno} column {error.colno}")) from None
    except NotJson:
        raise
    except ValueError:  # an integer longer than Python converts
        raise NotJson(Problem("a number has too many digits to be read")) from None


def _field_error(name: str, problem: Problem) -> InvalidValue:
    if problem.too_deep:
        return InvalidValue(
            f"{name} is {TOO_DEEP}; flatten it, or pass the deep part as a JSON string",
            at=f".{name}{problem.at}",
        )
    return InvalidValue(f"{name} must be JSON: {problem.reason}", at=f".{name}{problem.at}")


def check_json(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: ``value`` must be JSON within the nesting limit."""
    problem = json_problem(value)
    if problem is not None:
        raise _field_error(attribute.name, problem)


def check_json_object(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: ``value`` must be None or a JSON object (a dict with string keys)."""
    if value is None:
        return
    if type(value) is not dict and not isinstance(value, Mapping):
        raise InvalidValue(
            f"{attribute.name} must be a JSON object (a dict), not {type(value).__name__}"
        )
    check_json(instance, attribute, value)


def check_nesting(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator for a field that holds any value: its JSON form must be within the
    nesting limit."""
    problem = nesting_problem(value)
    if problem is not None:
        raise _field_error(attribute.name, problem)


class _TooDeep(Exception):
    pass


def as_json(value: Any) -> Any:
    """``value`` with every tuple made a list, as ``json.loads`` would give it back.

    Returns ``value`` itself when it holds no tuple (the common case: no copy), or when it
    nests deeper than the limit (the field's validator refuses it, saying where).
    """
    try:
        return _lists(value, 0)
    except _TooDeep:
        return value


def _lists(value: Any, depth: int) -> Any:
    # Recursive, but never past the nesting limit.
    if not isinstance(value, (tuple, list, dict)):
        return value
    if depth >= MAX_DEPTH:
        raise _TooDeep
    if isinstance(value, tuple):
        return [_lists(item, depth + 1) for item in value]
    if isinstance(value, list):
        items = [_lists(item, depth + 1) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    pairs = {key: _lists(item, depth + 1) for key, item in value.items()}
    return pairs if any(pairs[key] is not value[key] for key in value) else value


class _EmptyObject(Mapping[str, Any]):
    """The empty JSON object that values without one share: it cannot change."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> typing.Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "{}"


#: The default of an object field most values leave empty: one for all, rather than a
#: dict each.
EMPTY_OBJECT: Mapping[str, Any] = _EmptyObject()


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
        if not isinstance(value, Mapping):
            raise InvalidValue(f"raw must be a JSON object (a dict), not {type(value).__name__}")
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidValue(
                    f"raw must be JSON: a key of type {type(key).__name__} is not a JSON object key"
                )
            # Each is a field of the value as received, and counts from itself, as a known
            # class's fields do.
            problem = json_problem(item)
            if problem is not None:
                raise _field_error("raw", attrs.evolve(problem, at=_step(key) + problem.at))
        clashes = sorted(key for key in value if key in names)
        if clashes:
            raise InvalidValue(
                f"raw holds the received fields other than {', '.join(sorted(names))}; "
                f"pass {', '.join(clashes)} as arguments, not in raw"
            )

    return attrs.field(factory=dict, converter=_as_json_fields, validator=check_raw)


def _as_json_fields(value: Any) -> Any:
    """:func:`as_json` of each value of a dict of fields."""
    if not isinstance(value, dict):
        return value
    fields = {key: as_json(item) for key, item in value.items()}
    return fields if any(fields[key] is not value[key] for key in value) else value


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
