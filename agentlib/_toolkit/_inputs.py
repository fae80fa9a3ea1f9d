"""Session inputs, and the ``Depends()`` marker that hands them (and credentials) to tools."""

# No ``from __future__ import annotations`` here: subclasses of SessionInput are resolved with
# typing.get_type_hints, which must be able to read SessionInput's own annotation as a type.

import abc
import typing
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import attrs
import cattrs

from .._data._callbacks import Credentials
from .._data._convert import CONVERTER, validation_error
from .._data._errors import ValidationError
from .._data._json import TOO_DEEP, InvalidValue, json_problem, nesting_problem

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Any:
        return lambda cls: cls


__all__ = ["Dependency", "Depends", "SessionInput", "dependencies_of", "stored_inputs"]


@attrs.frozen
class Depends:
    """Marks a parameter as a session input: ``Annotated[Repo, Depends()]``.

    The annotated type is the :class:`SessionInput` subclass (or :class:`Credentials`, for a
    tool of a :class:`ToolSource` that requires sign-in). The model never sees the parameter:
    it is left out of the tool's schema.
    """


# The class attribute naming the class each SessionInput subclass was built as.
_BUILT = "__agentlib_session_input__"


class _InputClass(abc.ABCMeta):
    """The type of SessionInput classes: an ``@attrs`` decorator on one changes nothing.

    Each subclass is made a frozen, keyword-only attrs class as it is created. A slotted
    ``@attrs.frozen`` or ``@attrs.define`` above it would rebuild the class by calling this
    type with a copy of its namespace, from fields whose defaults and validators the first
    build took away: the class as first built is returned instead, unchanged.
    """

    def __new__(
        mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any
    ) -> Any:
        built = namespace.get(_BUILT)
        if built is not None and "__attrs_attrs__" in namespace:
            return built
        return super().__new__(mcs, name, bases, namespace, **kwargs)

    def __setattr__(cls, name: str, value: Any) -> None:
        # An attrs decorator that patches the class in place (slots=False, attr.s) would keep
        # its own options and lose the fields' defaults and validators: refused, not half done.
        if name == "__attrs_attrs__" and cls.__dict__.get(_BUILT) is cls:
            raise TypeError(
                f"session input {cls.__name__} is a frozen, keyword-only attrs class already; "
                "an attrs decorator that patches it in place (slots=False, @attr.s) would "
                "drop its fields' defaults and validators: remove the decorator"
            )
        super().__setattr__(name, value)


@dataclass_transform(frozen_default=True, field_specifiers=(attrs.field,))
class SessionInput(metaclass=_InputClass):
    """A value given when a session starts, that tools and hooks can read.

    Subclass it with the fields you need and a stable ``input_id``; the subclass becomes a
    frozen, keyword-only attrs class by itself::

        class Repo(SessionInput):
            input_id = "repo"
            name: str

    An ``@attrs.frozen`` or ``@attrs.define`` written above the class changes nothing: it
    stays that class. A tool or a hook reads it through a parameter annotated
    ``Annotated[Repo, Depends()]``; the model never sees it. The session keeps its inputs for
    its whole life, as JSON: each use structures the stored value again, so a validator's
    rule is checked where the value is used. Never put a credential in an input, nor the value
    in a validator's message.

    Attributes:
        input_id: The input's stable name, which the session finds it by. Not part of the
            value.

    Raises:
        TypeError: The subclass has no ``input_id``, or an attrs decorator with
            ``slots=False`` (or ``@attr.s``) would patch it in place.
    """

    input_id: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        input_id = cls.__dict__.get("input_id", getattr(cls, "input_id", None))
        if not isinstance(input_id, str) or not input_id:
            raise TypeError(
                f"session input {cls.__name__} needs an input_id: a class attribute such as "
                'input_id = "repo"'
            )
        attrs.define(cls, frozen=True, slots=False, kw_only=True)
        # Frozen by the base's __setattr__ rather than an own one: attrs refuses to freeze
        # a class with its own __setattr__, which an @attrs.frozen above it would try.
        for name in ("__setattr__", "__delattr__"):
            if name in cls.__dict__:
                delattr(cls, name)
        setattr(cls, _BUILT, cls)

    def __setattr__(self, name: str, value: Any) -> None:
        raise attrs.exceptions.FrozenInstanceError

    def __delattr__(self, name: str) -> None:
        raise attrs.exceptions.FrozenInstanceError


@attrs.frozen
class Dependency:
    """A parameter that receives a session input or credentials, not a model argument."""

    name: str
    annotation: Any
    has_default: bool
    default: Any

    @property
    def label(self) -> str:
        if self.annotation is Credentials:
            return "credentials"
        return f"session input {self.annotation.input_id!r} ({self.annotation.__name__})"


def dependency_type(annotation: Any) -> Any | None:
    """The type ``T`` of an ``Annotated[T, Depends()]`` annotation; None for other ones.

    Raises:
        TypeError: ``T`` is neither a :class:`SessionInput` subclass nor :class:`Credentials`.
    """
    if typing.get_origin(annotation) is not Annotated:
        return None
    if not any(isinstance(extra, Depends) for extra in annotation.__metadata__):
        return None
    target = typing.get_args(annotation)[0]
    if target is Credentials or (isinstance(target, type) and issubclass(target, SessionInput)):
        return target
    raise TypeError(
        f"Depends() marks a SessionInput subclass or Credentials, not {target!r}: "
        "declare the input as `class Repo(SessionInput): input_id = 'repo'; ...`"
    )


def dependencies_of(
    parameters: Sequence[tuple[str, Any, bool, Any]],
) -> tuple[list[tuple[str, Any, bool, Any]], tuple[Dependency, ...]]:
    """Split ``(name, annotation, has_default, default)`` parameters into model arguments
    and dependencies."""
    arguments = []
    dependencies = []
    for name, annotation, has_default, default in parameters:
        target = dependency_type(annotation)
        if target is None:
            arguments.append((name, annotation, has_default, default))
        else:
            dependencies.append(Dependency(name, target, has_default, default))
    return arguments, tuple(dependencies)


def stored_inputs(inputs: Sequence[Any]) -> dict[str, Any]:
    """Session inputs as the session stores them: JSON by ``input_id``.

    Raises:
        ValidationError: An input is not a :class:`SessionInput`, two share an ``input_id``,
            or one has no JSON form. The message names the input and field, never a value.
    """
    if isinstance(inputs, (str, bytes, Mapping)) or not isinstance(inputs, Sequence):
        raise ValidationError(
            f"inputs must be a list of SessionInput values, not {type(inputs).__name__}"
        )
    stored: dict[str, Any] = {}
    for index, value in enumerate(inputs):
        if not isinstance(value, SessionInput):
            raise ValidationError(
                f"invalid inputs: {type(value).__name__} is not a SessionInput @ $[{index}]; "
                "subclass agentlib.SessionInput"
            )
        if value.input_id in stored:
            raise ValidationError(
                f"invalid inputs: two inputs have input_id {value.input_id!r} @ $[{index}]; "
                "a session takes one value per input"
            )
        # Only the field is named: deeper positions may be keys of the value's dicts.
        for field in attrs.fields(typing.cast(Any, type(value))):
            # Each field is one JSON value; checked before the converter walks it, recursively.
            if nesting_problem(getattr(value, field.name)) is not None:
                raise ValidationError(
                    f"invalid inputs: field {field.name!r} of input {value.input_id!r} is "
                    f"{TOO_DEEP}; inputs are stored as JSON: flatten it @ $[{index}]"
                )
        raw = CONVERTER.unstructure(value)
        for field, item in raw.items():
            problem = json_problem(item)
            if problem is not None:
                raise ValidationError(
                    f"invalid inputs: in field {field!r} of input {value.input_id!r}, "
                    f"{problem.reason}; inputs are stored as JSON @ $[{index}]"
                )
        stored[value.input_id] = raw
    return stored


def read_input(stored: Mapping[str, Any], dependency: Dependency) -> Any:
    """The session input ``dependency`` asks for, structured from its stored JSON.

    Raises:
        ValidationError: The session has no such input, or its value fails the class's
            validation; the message never holds the value.
    """
    cls = dependency.annotation
    if cls.input_id not in stored:
        if dependency.has_default:
            return dependency.default
        raise ValidationError(
            f"the session has no {dependency.label}: pass it when the session starts, "
            f"start_session(inputs=[{cls.__name__}(...)])"
        )
    raw = stored[cls.input_id]
    try:
        return CONVERTER.structure(raw, cls)
    except (cattrs.BaseValidationError, InvalidValue, ValueError, TypeError) as exc:
        raise _input_error(exc, raw, dependency) from None


def _input_error(exc: BaseException, raw: Any, dependency: Dependency) -> ValidationError:
    """The error of an input that fails its class: a validator's own message goes on, unless
    it quotes a value of the input (as attrs' stock validators do)."""
    rules = [
        str(leaf)
        for leaf in _leaves(exc)
        if isinstance(leaf, ValueError) and not isinstance(leaf, InvalidValue) and str(leaf)
    ]
    if rules and not any(_quotes(rule, raw) for rule in rules):
        return ValidationError(f"invalid {dependency.label}: " + "; ".join(rules), tuple(rules))
    if isinstance(exc, (cattrs.BaseValidationError, InvalidValue)) and not rules:
        return validation_error(exc, dependency.label)
    name = dependency.annotation.__name__
    message = f"the value fails {name}'s validation ({type(_leaves(exc)[0]).__name__})"
    return ValidationError(f"invalid {dependency.label}: {message}", (message,))


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, cattrs.BaseValidationError):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _quotes(message: str, value: Any) -> bool:
    """Whether ``message`` holds a scalar of the JSON ``value``, as text or as its repr.

    A guard only: a validator may transform the value before it quotes it, so its message
    must never hold the value.
    """
    if isinstance(value, Mapping):
        return any(_quotes(message, item) for item in value.values())
    if isinstance(value, list):
        return any(_quotes(message, item) for item in value)
    if value is None or isinstance(value, bool):
        return False
    return str(value) in message or repr(value) in message
