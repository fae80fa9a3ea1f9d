"""Tools: Python functions the model may call, with the JSON schema of their arguments."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

import attrs
import cattrs
import trio

from ._convert import CONVERTER, validation_error
from ._json import InvalidValue, json_problem
from ._models._base import ToolSchema
from ._schema import docstring_parameters, json_schema

__all__ = ["Tool", "tool"]

F = TypeVar("F", bound=Callable[..., Any])


@attrs.frozen(kw_only=True)
class _Parameter:
    name: str
    annotation: Any
    required: bool
    default: Any


@attrs.frozen(kw_only=True, eq=False)
class Tool:
    """A function the model may call. Build one with :func:`tool`.

    Attributes:
        name: The tool's id, as the model calls it.
        description: What the tool does, for the model.
        parameters: The JSON schema of the arguments.
        function: The Python function (sync or async).
        requires_approval: Whether every call first opens an approval callback.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    function: Callable[..., Any]
    requires_approval: bool = False
    _signature: tuple[_Parameter, ...] = attrs.field(alias="signature", repr=False)
    _is_async: bool = attrs.field(alias="is_async", repr=False)

    @property
    def schema(self) -> ToolSchema:
        """The tool as the model sees it."""
        return ToolSchema(name=self.name, description=self.description, parameters=self.parameters)

    def structure_arguments(self, arguments: object) -> dict[str, Any]:
        """The model's arguments checked and converted to the parameters' types.

        Raises:
            ValidationError: A required argument is missing, an argument is unknown or of the
                wrong type. The message names the argument, never its value.
        """
        if not isinstance(arguments, Mapping):
            raise validation_error(
                InvalidValue(f"arguments must be a JSON object, not {type(arguments).__name__}"),
                f"arguments for {self.name}",
            )
        known = {parameter.name for parameter in self._signature}
        problems = [f"unknown argument {key!r} @ $.{key}" for key in arguments if key not in known]
        values: dict[str, Any] = {}
        for parameter in self._signature:
            if parameter.name not in arguments:
                if parameter.required:
                    problems.append(f"required argument missing @ $.{parameter.name}")
                continue
            try:
                values[parameter.name] = CONVERTER.structure(
                    arguments[parameter.name], parameter.annotation
                )
            except (cattrs.BaseValidationError, InvalidValue, ValueError, TypeError) as exc:
                error = validation_error(exc, "argument", path=f"$.{parameter.name}")
                problems.extend(error.errors)
        if problems:
            from ._errors import ValidationError

            raise ValidationError(
                f"invalid arguments for {self.name}: " + "; ".join(problems), tuple(problems)
            )
        return values

    async def call(self, arguments: Mapping[str, Any]) -> Any:
        """Run the tool with structured arguments: async tools in this task, sync ones in a
        worker thread so they cannot block the engine."""
        if self._is_async:
            return await self.function(**arguments)
        # A stopped turn does not wait for a sync tool's thread: the thread is left to finish.
        return await trio.to_thread.run_sync(
            functools.partial(self.function, **arguments), abandon_on_cancel=True
        )


def _make_tool(
    function: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    requires_approval: bool,
) -> Tool:
    if isinstance(function, Tool):
        return function
    if not callable(function):
        raise TypeError(f"a tool must be a function, not {type(function).__name__}")
    summary, documented = docstring_parameters(function)
    hints = typing.get_type_hints(function, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    signature: list[_Parameter] = []
    tool_name: str = name or str(getattr(function, "__name__", ""))
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(
                f"tool {tool_name!r}: *args and **kwargs have no schema; name each parameter"
            )
        annotation = hints.get(parameter.name, Any)
        try:
            schema = json_schema(annotation)
        except TypeError as exc:
            raise TypeError(f"tool {tool_name!r}, parameter {parameter.name!r}: {exc}") from None
        if parameter.name in documented:
            schema["description"] = documented[parameter.name]
        is_required = parameter.default is inspect.Parameter.empty
        if is_required:
            required.append(parameter.name)
        elif json_problem(parameter.default) is None:
            schema["default"] = parameter.default
        properties[parameter.name] = schema
        signature.append(
            _Parameter(
                name=parameter.name,
                annotation=annotation,
                required=is_required,
                default=parameter.default,
            )
        )
    if not all(part.isidentifier() for part in tool_name.split(".")):
        raise ValueError(f"tool name {tool_name!r} must be letters, digits and underscores")
    return Tool(
        name=tool_name,
        description=description if description is not None else summary,
        parameters={
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
        function=function,
        requires_approval=requires_approval,
        signature=tuple(signature),
        is_async=inspect.iscoroutinefunction(function),
    )


@overload
def tool(function: F, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
) -> Callable[[F], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a function (sync or async) a tool the model may call.

    The JSON schema of its arguments comes from the type hints, the defaults and the
    docstring's ``Args:`` lines; the description from the docstring's first paragraph.
    Usable bare (``@tool``) or with options (``@tool(requires_approval=True)``); a plain
    function passed in ``Agent(tools=[...])`` is made a tool with the defaults.

    Args:
        function: The function, when used bare.
        name: The tool's id; by default the function's name.
        description: What the tool does; by default the docstring's summary.
        requires_approval: Every call first opens an approval callback.

    Raises:
        TypeError: A parameter's type has no JSON form, or the function takes ``*args``.
    """
    if function is not None:
        return _make_tool(
            function, name=name, description=description, requires_approval=requires_approval
        )
    return functools.partial(
        _make_tool, name=name, description=description, requires_approval=requires_approval
    )
