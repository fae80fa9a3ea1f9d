"""Tools: Python functions the model may call, with the JSON schema of their arguments."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar, overload

import attrs
import cattrs

from .._data._callbacks import Credentials
from .._data._convert import CONVERTER, validation_error
from .._data._errors import ClientToolAnswerError
from .._data._json import (
    TOO_DEEP,
    InvalidValue,
    NotJson,
    Problem,
    json_problem,
    nesting_problem,
    read_json,
)
from .._models._base import ToolSchema
from .._trio._threads import run_in_thread
from ._inputs import Dependency, dependencies_of
from ._schema import Definitions, docstring_parameters

__all__ = ["Tool", "ToolOutput", "ToolSource", "arguments_problem", "client_tool", "tool"]

F = TypeVar("F", bound=Callable[..., Any])


@attrs.frozen(kw_only=True)
class _Parameter:
    name: str
    annotation: Any
    required: bool


@attrs.frozen(kw_only=True, eq=False)
class Tool:
    """A function the model may call. Build one with :func:`tool`.

    Attributes:
        name: The tool's id, as the model calls it.
        description: What the tool does, for the model.
        parameters: The JSON schema of the arguments.
        function: The Python function (sync or async); a client tool's stub never runs.
        requires_approval: Whether every call first opens an approval callback.
        kind: ``"local"`` for a tool the engine runs, ``"client"`` for a client tool,
            ``"mcp"`` for a tool of an MCP server (its arguments go to the server as
            they are: the server checks them against its schema), ``"builtin"`` for the
            ``file_system.*`` tools of the agent's sandbox.
        source: The :class:`ToolSource` the tool belongs to, if any.
        requires_sign_in: Whether its source needs credentials before a call.
        return_type: The stub's return type, which a client tool's answer is checked against.
        dependencies: The parameters that receive session inputs or credentials.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    function: Callable[..., Any]
    requires_approval: bool = False
    kind: Literal["local", "client", "mcp", "builtin"] = "local"
    source: str | None = None
    requires_sign_in: bool = False
    return_type: Any = attrs.field(default=Any, repr=False)
    dependencies: tuple[Dependency, ...] = attrs.field(default=(), repr=False)
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
        if self.kind == "mcp":
            return dict(arguments)
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
            from .._data._errors import ValidationError

            raise ValidationError(
                f"invalid arguments for {self.name}: " + "; ".join(problems), tuple(problems)
            )
        return values

    def check_answer(self, answer: object) -> Any:
        """A client tool's answer, checked against the stub's return type.

        Raises:
            ClientToolAnswerError: The answer does not fit, or nests deeper than the limit
                of 100 arrays and objects; the message names the type and the field, never
                the value.
        """
        wanted = self.return_type
        # Before anything walks the answer recursively (the converter does).
        deep = nesting_problem(answer)
        if deep is not None:
            raise answer_error(self.name, deep)
        if wanted is Any:
            value = answer
        else:
            try:
                # Through JSON and back: a built instance is checked field by field, and a
                # bool is not an int.
                value = CONVERTER.structure(CONVERTER.unstructure(answer), wanted)
            except (cattrs.BaseValidationError, InvalidValue, ValueError, TypeError) as exc:
                error = validation_error(exc, f"answer for {self.name}")
                raise ClientToolAnswerError(
                    f"{error}; answer with a value of the stub's return type"
                ) from None
        problem = json_problem(CONVERTER.unstructure(value))
        if problem is not None:
            raise answer_error(self.name, problem)
        return value

    async def call(self, arguments: Mapping[str, Any]) -> Any:
        """Run the tool with structured arguments (and dependencies): async tools in this
        task, sync ones in a worker thread so they cannot block the engine."""
        if self._is_async:
            return await self.function(**arguments)
        # A stopped turn does not wait for a sync tool's thread: the thread is left to finish.
        return await run_in_thread(
            functools.partial(self.function, **arguments), abandon_on_cancel=True
        )


@attrs.frozen(kw_only=True)
class ToolOutput:
    """A tool's result as content blocks, when the tool makes them itself (an MCP server's
    tools do): what the history keeps of it, as it is.

    Attributes:
        content: The blocks the model reads.
        structured_content: The result as a JSON value, if the tool gave one.
        is_error: The tool says the call failed (the agent's ``tool_errors`` decides).
    """

    content: tuple[Any, ...]
    structured_content: Any = None
    is_error: bool = False


def arguments_problem(arguments: object) -> str | None:
    """Why a model's arguments are not JSON, told to the model in words that never repeat
    them; None when they are JSON (whether they fit the tool is checked when it is called).

    A ``str`` is the text of arguments the model could not read: it says why.
    """
    if isinstance(arguments, str):
        try:
            read_json(arguments)
        except NotJson as error:
            problem = error.problem
        else:
            return None
    else:
        found = json_problem(arguments)
        if found is None:
            return None
        problem = found
    if problem.too_deep:
        return (
            f"the arguments are {TOO_DEEP}; call the tool again with flatter arguments "
            f"@ ${problem.at}"
        )
    at = f" @ ${problem.at}" if problem.at else ""
    return (
        f"the arguments are not JSON: {problem.reason}; call the tool again with its arguments "
        f"as a JSON object{at}"
    )


def _make_tool(
    function: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    requires_approval: bool,
    kind: Literal["local", "client"] = "local",
) -> Tool:
    if isinstance(function, Tool):
        return function
    if not callable(function):
        raise TypeError(f"a tool must be a function, not {type(function).__name__}")
    summary, documented = docstring_parameters(function)
    hints = typing.get_type_hints(function, include_extras=True)
    properties: dict[str, Any] = {}
    definitions = Definitions()  # one document: a class is named once in its $defs
    required: list[str] = []
    signature: list[_Parameter] = []
    tool_name: str = name or str(getattr(function, "__name__", ""))
    if kind == "client":
        tool_name = f"client.{tool_name}"
    parameters = list(inspect.signature(function).parameters.values())
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(
                f"tool {tool_name!r}: *args and **kwargs have no schema; name each parameter"
            )
    try:
        _, dependencies = dependencies_of(
            [
                (p.name, hints.get(p.name, Any), p.default is not p.empty, p.default)
                for p in parameters
            ]
        )
    except TypeError as exc:
        raise TypeError(f"tool {tool_name!r}: {exc}") from None
    if kind == "client" and dependencies:
        raise TypeError(
            f"tool {tool_name!r}: a client tool runs in the client, which has no session "
            "inputs: remove its Depends() parameters"
        )
    dependency_names = {dependency.name for dependency in dependencies}
    for parameter in parameters:
        if parameter.name in dependency_names:
            continue
        if parameter.name not in hints:
            # Its schema would be {}: the model could send anything, and nothing would check it.
            raise TypeError(
                f"tool {tool_name!r}: parameter {parameter.name!r} has no type annotation, so "
                "nothing would check what the model sends for it; annotate it, e.g. "
                f"`{parameter.name}: int` (or `{parameter.name}: Any` to take any JSON value)"
            )
        annotation = hints[parameter.name]
        try:
            schema = definitions.schema(annotation)
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
            _Parameter(name=parameter.name, annotation=annotation, required=is_required)
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
            **({"$defs": definitions.defs} if definitions.defs else {}),
        },
        function=function,
        requires_approval=requires_approval,
        kind=kind,
        return_type=hints.get("return", Any) if kind == "client" else Any,
        dependencies=dependencies,
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
        TypeError: A parameter has no type annotation (``Any`` takes any JSON value), its
            type has no JSON form, or the function takes ``*args``.
    """
    make = functools.partial(
        _make_tool, name=name, description=description, requires_approval=requires_approval
    )
    return make(function) if function is not None else make


@overload
def client_tool(function: F, /) -> Tool: ...


@overload
def client_tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[F], Tool]: ...


def client_tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a stub a client tool: the model may call it, and the client runs it.

    The stub declares the parameters and the return type; its body (``...``) never runs.
    A call opens an ``OpenClientToolCall`` callback, answered with the tool's result
    (``turn.answer`` or an ``on_client_tool`` handler), which is checked against the return
    type before the model sees it. The tool's id is ``"client.<name>"``.

    Args:
        function: The stub, when used bare.
        name: The tool's name, by default the stub's (the id is ``"client.<name>"``).
        description: What the tool does; by default the docstring's summary.

    Raises:
        TypeError: A parameter has no type annotation, its type has no JSON form, or the
            stub has ``Depends`` parameters (the client has no session inputs).
    """
    make = functools.partial(
        _make_tool, name=name, description=description, requires_approval=False, kind="client"
    )
    return make(function) if function is not None else make


def _source_tools(value: Iterable[Tool | Callable[..., Any]]) -> tuple[Tool, ...]:
    return tuple(item if isinstance(item, Tool) else tool(item) for item in value)


@attrs.frozen(kw_only=True)
class ToolSource:
    """Tools that share a source, such as a service the session signs in to.

    Each tool's id becomes ``"<source>.<tool>"``. With ``requires_sign_in=True``, the first
    call into the source in a session opens an ``OpenSignIn`` callback; the credentials of
    its ``SignInAnswer`` reach the source's tools through a parameter annotated
    ``Annotated[Credentials, Depends()]``, and never appear in events, entries or records.

    Attributes:
        name: The source's name: letters, digits and underscores.
        tools: Its tools (functions or :func:`tool`\\ s).
        requires_sign_in: Whether a session must sign in before calling its tools.
    """

    name: str
    tools: tuple[Tool, ...] = attrs.field(converter=_source_tools)
    requires_sign_in: bool = False

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(
                f"tool source name {self.name!r} must be letters, digits and underscores"
            )
        if self.name == "client":
            raise ValueError('"client" names client tools; choose another tool source name')
        for item in self.tools:
            if item.kind == "client":
                raise ValueError(f"{item.name} is a client tool; it cannot be in a tool source")
            if item.source is not None:
                raise ValueError(f"tool {item.name} is already in tool source {item.source!r}")
            if any(d.annotation is Credentials for d in item.dependencies) and (
                not self.requires_sign_in
            ):
                raise ValueError(
                    f"tool {item.name} takes Credentials, which only a source with "
                    "requires_sign_in=True receives"
                )

    def resolved(self) -> tuple[Tool, ...]:
        """The source's tools, named ``"<source>.<tool>"``."""
        return tuple(
            attrs.evolve(
                item,
                name=f"{self.name}.{item.name}",
                source=self.name,
                requires_sign_in=self.requires_sign_in,
            )
            for item in self.tools
        )


def answer_problem(answer: object) -> tuple[Problem | None, Any]:
    """Why a client tool's answer is no JSON value within the nesting limit, whatever the
    tool, and else its JSON: what can be checked of an answer without the tool's stub."""
    problem = nesting_problem(answer)  # before anything walks it recursively
    if problem is not None:
        return problem, None
    data = CONVERTER.unstructure(answer)
    return json_problem(data), data


def answer_error(tool_name: str, problem: Problem) -> ClientToolAnswerError:
    """The error for an answer to ``tool_name`` that is not JSON: ``problem`` says why."""
    if problem.too_deep:
        what = f"it is {TOO_DEEP}; answer with a flatter value"
    else:
        what = f"{problem.reason}; answer with JSON values, attrs classes or dataclasses"
    return ClientToolAnswerError(f"invalid answer for {tool_name}: {what} @ ${problem.at}")
