"""Agents: a model, instructions, tools, an output type, subagents and hooks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ._callbacks import Credentials
from ._engine._runtime import current_runtime
from ._history import parse_history
from ._history_items import HistoryImportEntry
from ._hooks import Hook
from ._inputs import SessionInput, stored_inputs
from ._models._base import Model, ToolSchema
from ._tools import Tool, ToolSource, tool

if TYPE_CHECKING:
    from ._session import ApprovalHandler, ClientToolHandler, Session, SignInHandler

__all__ = ["Agent"]


class Agent:
    """An agent: what runs a session's turns.

    Args:
        name: The agent's name.
        instructions: What the model is told to do (the system prompt).
        model: The model that drives the agent: a :class:`Model` such as
            :class:`ScriptedModel`.
        tools: The tools the model may call: functions (sync or async), :func:`tool`\\ s,
            :func:`client_tool` stubs and :class:`ToolSource`\\ s.
        output_type: Structure the final answer into this type (an attrs class, a
            dataclass, a pydantic model...); None keeps the text.
        subagents: Agents this one may delegate to.
        hooks: :func:`pre_tool_call` hooks, run in order before every tool call.
        tool_errors: ``"report"`` sends a tool's exception to the model as an error result;
            ``"raise"`` fails the turn.

    Raises:
        TypeError: A tool has no JSON schema, ``model`` is not a model, or a hook is not
            made with :func:`pre_tool_call`.
        ValueError: Two tools share a name, a tool outside a sign-in source takes
            ``Credentials``, or ``tool_errors`` is neither value.
    """

    def __init__(
        self,
        name: str,
        instructions: str = "",
        model: Model | None = None,
        tools: Iterable[Tool | ToolSource | Callable[..., Any]] = (),
        output_type: type[Any] | None = None,
        subagents: Sequence[Agent] = (),
        hooks: Sequence[Hook] = (),
        tool_errors: Literal["report", "raise"] = "report",
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("an agent needs a name, e.g. Agent(name='assistant', ...)")
        if model is None or not isinstance(model, Model):
            raise TypeError(
                f"agent {name!r}: model must be a model object such as "
                f"agentlib.ScriptedModel([...]), not {type(model).__name__}"
            )
        if tool_errors not in ("report", "raise"):
            raise ValueError(f"tool_errors must be 'report' or 'raise', not {tool_errors!r}")
        self.name = name
        self.instructions = instructions
        self.model = model
        self.tools: tuple[Tool, ...] = _tools(name, tools)
        self.tools_by_name: dict[str, Tool] = {}
        for t in self.tools:
            if t.name in self.tools_by_name:
                raise ValueError(f"agent {name!r} has two tools named {t.name!r}")
            self.tools_by_name[t.name] = t
        self.tool_schemas: tuple[ToolSchema, ...] = tuple(t.schema for t in self.tools)
        self.output_type = output_type
        self.subagents = tuple(subagents)
        for hook in hooks:
            if not isinstance(hook, Hook):
                raise TypeError(
                    f"agent {name!r}: hooks take functions decorated with "
                    f"@agentlib.pre_tool_call, not {hook!r}"
                )
        self.hooks: tuple[Hook, ...] = tuple(hooks)
        self.tool_errors: Literal["report", "raise"] = tool_errors

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r})"

    async def start_session(
        self,
        *,
        history: Iterable[HistoryImportEntry | Mapping[str, Any]] | None = None,
        inputs: Sequence[SessionInput] = (),
        idempotency_key: str | None = None,
        on_approval: ApprovalHandler | None = None,
        on_sign_in: SignInHandler | None = None,
        on_client_tool: ClientToolHandler | None = None,
    ) -> Session:
        """Start a session in the current runtime.

        Args:
            history: A conversation to start from (see "History entries").
            inputs: Session inputs for tools and hooks.
            idempotency_key: The same key returns the session it started (the history is
                not compared).
            on_approval: Answers approval callbacks while a call of this reference waits.
            on_sign_in: Answers sign-in callbacks while a call of this reference waits.
            on_client_tool: Runs client tools while a call of this reference waits.

        Raises:
            ValidationError: ``history`` or ``inputs`` is malformed; nothing was started.
            RuntimeError: No runtime is running here (use ``open_runtime()``, or
                ``agentlib_sync``).
        """
        from ._session import Session

        runtime = current_runtime()
        entries = parse_history(history) if history is not None else []
        core = runtime.start_session(self, entries, stored_inputs(inputs), idempotency_key)
        return Session(
            runtime,
            core.id,
            agent=self,
            on_approval=on_approval,
            on_sign_in=on_sign_in,
            on_client_tool=on_client_tool,
        )

    def session(
        self,
        session_id: str,
        *,
        on_approval: ApprovalHandler | None = None,
        on_sign_in: SignInHandler | None = None,
        on_client_tool: ClientToolHandler | None = None,
    ) -> Session:
        """A reference to a session of the current runtime, from its id; sends no request.

        Raises:
            RuntimeError: No runtime is running here.
        """
        from ._session import Session

        return Session(
            current_runtime(),
            session_id,
            agent=self,
            on_approval=on_approval,
            on_sign_in=on_sign_in,
            on_client_tool=on_client_tool,
        )


def _tools(agent: str, items: Iterable[Tool | ToolSource | Callable[..., Any]]) -> tuple[Tool, ...]:
    tools: list[Tool] = []
    for item in items:
        if isinstance(item, ToolSource):
            tools.extend(item.resolved())
            continue
        made = item if isinstance(item, Tool) else tool(item)
        if any(d.annotation is Credentials for d in made.dependencies):
            raise ValueError(
                f"agent {agent!r}: tool {made.name} takes Credentials, which only the tools "
                "of a ToolSource(..., requires_sign_in=True) receive"
            )
        tools.append(made)
    return tuple(tools)
