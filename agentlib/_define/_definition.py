"""What the engine and the references read of an agent: its definition, as a protocol.

``Agent`` (``_agent.py``) is a definition: it imports nothing of the engine nor of the
references, which depend on it through this protocol; it reaches the current runtime
through ``_context``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from .._mcp._servers import MCPServer
from .._models._base import Model, ToolSchema
from .._sandboxes._environment import Environment
from .._toolkit._hooks import Hook
from .._toolkit._tools import Tool

__all__ = ["AgentDefinition", "check_max_steps"]


class AgentDefinition(Protocol):
    """An agent, as the engine runs it."""

    @property
    def name(self) -> str: ...
    @property
    def instructions(self) -> str: ...
    @property
    def model(self) -> Model: ...
    @property
    def output_type(self) -> Any: ...
    @property
    def tools_by_name(self) -> Mapping[str, Tool]: ...
    @property
    def tool_schemas(self) -> tuple[ToolSchema, ...]: ...
    @property
    def subagents(self) -> Sequence[AgentDefinition]: ...
    @property
    def subagents_by_name(self) -> Mapping[str, AgentDefinition]: ...
    @property
    def hooks(self) -> tuple[Hook, ...]: ...
    @property
    def tool_errors(self) -> Literal["report", "raise"]: ...
    @property
    def max_steps(self) -> int: ...
    @property
    def max_running_subagents(self) -> int: ...
    @property
    def mcps(self) -> Mapping[str, MCPServer]: ...
    @property
    def environment(self) -> Environment: ...


def check_max_steps(value: object, where: str = "") -> int:
    """``value`` as a step limit.

    Raises:
        ValueError: It is not an int of at least 1.
    """
    if isinstance(value, bool) or not (isinstance(value, int) and value >= 1):
        raise ValueError(
            f"{where}max_steps must be an int of at least 1 (the most model steps of a turn), "
            f"not {value!r}"
        )
    return value
