"""``pre_tool_call`` hooks: functions that see every tool call before it runs."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any, Union

import attrs

from .._data._callbacks import Credentials
from .._data._json import json_field
from ._inputs import Dependency, dependencies_of

__all__ = [
    "DenyToolCall",
    "Hook",
    "HookDecision",
    "ModifiedArguments",
    "RequestApproval",
    "pre_tool_call",
]


@attrs.frozen
class ModifiedArguments:
    """Run the call with these arguments instead; the history shows them.

    Attributes:
        arguments: The new arguments, a JSON object.
    """

    arguments: Any = json_field()


@attrs.frozen
class DenyToolCall:
    """Refuse the call: the model gets ``reason`` as the tool's error result.

    Attributes:
        reason: Why, for the model.
    """

    reason: str


@attrs.frozen
class RequestApproval:
    """Ask the client to approve the call: an ``OpenApproval`` with ``source="hook"`` opens.

    Attributes:
        reason: Why, for the client; it is shown as ``OpenApproval.reason``.
    """

    reason: str | None = None


HookDecision = Union[ModifiedArguments, DenyToolCall, RequestApproval, None]
"""What a hook returns: None to go on, or one of these."""


@attrs.frozen(eq=False)
class Hook:
    """A ``pre_tool_call`` hook. Build one with :func:`pre_tool_call`.

    Attributes:
        function: The function (sync or async), called with the ``ToolCallEntry`` about to
            run and any ``Depends`` parameters.
    """

    function: Callable[..., Any]
    dependencies: tuple[Dependency, ...] = attrs.field(repr=False)

    @property
    def name(self) -> str:
        return str(getattr(self.function, "__qualname__", self.function))


def pre_tool_call(function: Callable[..., Any]) -> Hook:
    """Make ``function`` a hook that runs before every tool call of an agent.

    It takes the :class:`ToolCallEntry` about to run as its first parameter, and any number
    of ``Annotated[T, Depends()]`` parameters (session inputs). It returns None (go on),
    :class:`ModifiedArguments`, :class:`DenyToolCall` or :class:`RequestApproval`. Sync hooks
    run on the engine's thread, so they must not block.

    Raises:
        TypeError: A parameter after the first is not a ``Depends`` parameter.
    """
    if isinstance(function, Hook):
        return function
    if not callable(function):
        raise TypeError(f"a hook must be a function, not {type(function).__name__}")
    name = getattr(function, "__qualname__", repr(function))
    parameters = list(inspect.signature(function).parameters.values())
    if not parameters or parameters[0].kind not in (
        parameters[0].POSITIONAL_ONLY,
        parameters[0].POSITIONAL_OR_KEYWORD,
    ):
        raise TypeError(f"hook {name}: its first parameter receives the ToolCallEntry")
    hints = typing.get_type_hints(function, include_extras=True)
    rest = [
        (p.name, hints.get(p.name, Any), p.default is not p.empty, p.default)
        for p in parameters[1:]
    ]
    arguments, dependencies = dependencies_of(rest)
    if arguments:
        raise TypeError(
            f"hook {name}: parameter {arguments[0][0]!r} must be a session input, "
            "annotated Annotated[YourInput, Depends()]"
        )
    if any(dependency.annotation is Credentials for dependency in dependencies):
        raise TypeError(f"hook {name}: only the tools of a tool source receive Credentials")
    return Hook(function=function, dependencies=dependencies)
