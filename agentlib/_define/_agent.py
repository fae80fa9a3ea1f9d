"""Agents: a model, instructions, tools, an output type, subagents and hooks."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from .._data._callbacks import Credentials
from .._data._entries import Entry, MessageEntry
from .._data._errors import ValidationError
from .._data._history import parse_history
from .._data._history_items import HistoryImportEntry
from .._data._json import check_key
from .._mcp._servers import MCPServer, check_mcps
from .._models._base import Model, ToolSchema, check_for_model
from .._models._chat import model_from_string
from .._models._options import ChatOptions
from .._sandboxes._environment import Environment, check_environment
from .._sandboxes._local import NAMESPACE
from .._toolkit._hooks import Hook
from .._toolkit._inputs import SessionInput, stored_inputs
from .._toolkit._tools import Tool, ToolSource, tool
from .._trio._context import check_trio, current_door, remote_agent
from ._definition import check_max_steps

if TYPE_CHECKING:
    from .._http._client import RemoteAgent
    from .._references._session import ApprovalHandler, ClientToolHandler, Session, SignInHandler

__all__ = ["Agent"]

# Overrides of every agent: entering and leaving one is quick and never waits on the engine.
_overrides_lock = threading.Lock()


class Agent:
    """An agent: what runs a session's turns.

    Args:
        name: The agent's name.
        instructions: What the model is told to do (the system prompt).
        model: The model that drives the agent: a :class:`Model` such as
            :class:`ScriptedModel` or :class:`MistralModel`, or a string naming one:
            ``"mistral:<model>"``, ``"openai:<model>"`` (OpenAI's API, with
            ``OPENAI_API_KEY``) or ``"openai:<model>@<base_url>"`` (another server).
        tools: The tools the model may call: functions (sync or async), :func:`tool`\\ s,
            :func:`client_tool` stubs and :class:`ToolSource`\\ s.
        output_type: Structure the final answer into this type (an attrs class, a
            dataclass, a pydantic model...); None keeps the text.
        subagents: Agents this one may delegate to: each is offered to the model as a tool
            named after it, whose call runs a turn of a new subagent session.
        hooks: :func:`pre_tool_call` hooks, run in order before every tool call.
        tool_errors: ``"report"`` sends a tool's exception to the model as an error result;
            ``"raise"`` fails the turn.
        description: What the agent does, for a model that may delegate to it; by default
            the first line of ``instructions``.
        max_running_subagents: How many subagent turns may run at once below a session of
            this agent (at any depth); a delegation beyond it gets an error result.
        max_steps: The most model steps a turn may take (each model reply is one); a turn
            that reaches it without an answer ends ``Failed`` with
            :class:`MaxStepsExceeded`. ``start_turn`` and ``run`` take one per turn.
        model_options: The options of the model a string names, as its model object takes
            them as keywords (``{"stop": ["<end_of_turn>"], "max_tokens": 512}``: see
            :class:`MistralModel`); a model object is given its options itself.
        mcps: MCP servers whose tools the model gets, by name (``{"github":
            RemoteMCP(url=...)}``); a server's tools are named ``"<server>.<tool>"``. Needs
            the ``mcp`` extra (``pip install 'agentlib[mcp]'``): see "Tools from MCP
            servers".
        environment: The computer a root session gets (its subagents share it):
            :class:`NoSandbox` (none, the default), :class:`DangerousLocalSandbox` (a
            workspace folder on this machine), :class:`IsolatedSandbox` (the same, its
            commands in Linux namespaces) or :class:`BashkitSandbox` (a bash interpreter
            in this process, over a virtual file system); its ``access`` decides the
            ``file_system.*`` tools the model gets. See "A session's computer".

    Raises:
        TypeError: A tool has no JSON schema, ``model`` is not a model, a subagent is not an
            agent, a hook is not made with :func:`pre_tool_call`, ``model_options`` names no
            option, or comes with a model object, or ``environment`` is not a sandbox.
        ValueError: ``model`` is a string naming no model (or a Mistral or OpenAI model
            without an API key), two tools (or a tool and a subagent) share a name, a tool
            outside a sign-in source takes ``Credentials``, ``tool_errors`` is neither
            value, ``max_running_subagents`` or ``max_steps`` is not an int of at least 1,
            or an MCP server's name is not letters, digits and underscores, or is a tool's
            (or ``file_system``, with a sandbox).
    """

    def __init__(
        self,
        name: str,
        instructions: str = "",
        model: Model | str | None = None,
        tools: Iterable[Tool | ToolSource | Callable[..., Any]] = (),
        output_type: type[Any] | None = None,
        subagents: Sequence[Agent] = (),
        hooks: Sequence[Hook] = (),
        tool_errors: Literal["report", "raise"] = "report",
        *,
        description: str = "",
        max_running_subagents: int = 8,
        max_steps: int = 25,
        model_options: ChatOptions | None = None,
        mcps: Mapping[str, MCPServer] | None = None,
        environment: Environment | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("an agent needs a name, e.g. Agent(name='assistant', ...)")
        if isinstance(model, str):
            model = model_from_string(model, model_options)
        elif model_options is not None:
            raise TypeError(
                f"agent {name!r}: model_options go with a model string such as "
                "'mistral:mistral-small-latest'; a model object takes its options as "
                f"keywords instead ({type(model).__name__}(..., stop=[...]))"
            )
        if model is None or not isinstance(model, Model):
            raise TypeError(
                f"agent {name!r}: model must be a model object such as "
                "agentlib.ScriptedModel([...]), or a string such as "
                f"'mistral:mistral-small-latest'; not {type(model).__name__}"
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
        self.description = description or _first_line(instructions) or f"The agent {name}."
        if isinstance(max_running_subagents, bool) or not (
            isinstance(max_running_subagents, int) and max_running_subagents >= 1
        ):
            raise ValueError(
                f"agent {name!r}: max_running_subagents must be an int of at least 1, "
                f"not {max_running_subagents!r}"
            )
        self.max_running_subagents = max_running_subagents
        self.max_steps = check_max_steps(max_steps, f"agent {name!r}: ")
        self.subagents = tuple(subagents)
        self.subagents_by_name: dict[str, Agent] = {}
        for sub in self.subagents:
            if not isinstance(sub, Agent):
                raise TypeError(f"agent {name!r}: subagents are Agents, not {sub!r}")
            if not sub.name.isidentifier():
                raise ValueError(
                    f"agent {name!r}: subagent {sub.name!r} is offered to the model as a "
                    "tool, so its name must be letters, digits and underscores"
                )
            if sub.name in self.tools_by_name or sub.name in self.subagents_by_name:
                raise ValueError(f"agent {name!r} has two tools or subagents named {sub.name!r}")
            self.subagents_by_name[sub.name] = sub
        self.tool_schemas: tuple[ToolSchema, ...] = tuple(t.schema for t in self.tools) + tuple(
            _delegation_schema(sub) for sub in self.subagents
        )
        self.mcps: dict[str, MCPServer] = check_mcps(name, mcps)
        for server in self.mcps:
            if server in self.subagents_by_name or any(t.source == server for t in self.tools):
                raise ValueError(
                    f"agent {name!r}: MCP server {server!r} has the name of a subagent or a "
                    "tool source; rename one of them"
                )
        self.environment: Environment = check_environment(environment)
        if NAMESPACE in self.mcps or any(t.source == NAMESPACE for t in self.tools):
            raise ValueError(
                f"agent {name!r}: {NAMESPACE!r} names the tools of a session's sandbox; "
                "give the tool source or MCP server another name"
            )
        self.output_type = output_type
        for hook in hooks:
            if not isinstance(hook, Hook):
                raise TypeError(
                    f"agent {name!r}: hooks take functions decorated with "
                    f"@agentlib.pre_tool_call, not {hook!r}"
                )
        self.hooks: tuple[Hook, ...] = tuple(hooks)
        self.tool_errors: Literal["report", "raise"] = tool_errors
        # The overrides in force, oldest first, and the model they replaced.
        self._overrides: list[tuple[object, Model]] = []
        self._own_model: Model = model

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r})"

    def override(self, *, model: Model | str) -> contextlib.AbstractContextManager[None]:
        """Run this agent on ``model`` for the ``with`` block, for tests.

        Every step a session of this agent takes inside the block asks ``model``: sessions
        started, read back or resumed in it, and those that were already running (from their
        next step). When the block ends, even by an exception, the agent's model is again
        the one it had before. Overrides nest: the innermost one in force wins, and each
        ending puts back the one in force around it, whatever order they end in.

        The override is this agent's only: its subagents keep their models (override each
        of them too, to replace theirs). It changes the agent object for every task and
        thread that uses it, so it is meant for tests, not for a server whose sessions of
        one agent want different models at the same time.

        Args:
            model: A model object, or a string naming one (``"mistral:<model>"``...).

        Raises:
            TypeError: ``model`` is not a model.
            ValueError: ``model`` is a string naming no model.
        """
        if isinstance(model, str):
            model = model_from_string(model)
        if not isinstance(model, Model):
            raise TypeError(
                f"agent {self.name!r}: override takes a model object such as "
                "agentlib.testing.TestModel(), or a string such as "
                f"'mistral:mistral-small-latest'; not {type(model).__name__}"
            )
        return _Override(self, model)

    @staticmethod
    def load_from(
        url: str | Sequence[str],
        name: str,
        *,
        token: str | None = None,
        output_type: type[Any] | None = None,
        subagent_output_types: Mapping[str, type[Any]] | None = None,
        connect_timeout: float = 10.0,
        retry_for: float = 60.0,
    ) -> RemoteAgent:
        """A reference to the agent ``name`` served at ``url`` (by ``agentlib serve``); sends
        no request.

        Its sessions, turns, records, events, callbacks and errors are those of a local
        agent, over HTTP: see the "Deploying" guide.

        Args:
            url: The server's address, e.g. ``"http://127.0.0.1:8000"``; or the addresses
                of several servers of one store (PostgreSQL): requests go to the first, and
                move to the next when a server cannot be connected to.
            name: The agent's name on the server.
            token: A token the server takes, sent as ``Authorization: Bearer <token>``.
            output_type: Structure completed turns' outputs into this type (as the served
                agent's ``output_type`` does on the server); by default, the JSON it sends.
            subagent_output_types: The same for its subagents' sessions (from
                ``session.subagents()``), by subagent name, at any depth.
            connect_timeout: How long, in seconds, a server has to accept a connection and
                to begin its answer (beyond the time a call asks it to wait on a turn);
                past it, the call is tried again, on the next server if there are several.
            retry_for: How long, in seconds, a call is retried while no server answers it
                (and an event stream, while no page of events comes), with pauses of up to
                5 s; then it raises :class:`~agentlib.ServerUnreachableError`.

        Raises:
            ValueError: ``url`` is not an HTTP address, or a time is not a positive number.
        """
        remote: RemoteAgent = remote_agent(
            url,
            name,
            token,
            output_type,
            subagent_output_types,
            connect_timeout=connect_timeout,
            retry_for=retry_for,
        )
        return remote

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
                ``agentlib_sync``), or this is not trio code (from asyncio, use
                ``agentlib_sync``).
        """
        check_trio()
        check_key(idempotency_key)
        door = current_door()
        entries = history_for(self.model, history)
        session: Session = await door.start_session(
            self,
            history=entries,
            inputs=stored_inputs(inputs),
            idempotency_key=idempotency_key,
            on_approval=on_approval,
            on_sign_in=on_sign_in,
            on_client_tool=on_client_tool,
        )
        return session

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
        session: Session = current_door().session(
            self,
            session_id,
            on_approval=on_approval,
            on_sign_in=on_sign_in,
            on_client_tool=on_client_tool,
        )
        return session


def history_for(
    model: Model, history: Iterable[HistoryImportEntry | Mapping[str, Any]] | None
) -> list[Entry]:
    """A session's imported history as entries, each message checked against ``model``.

    Raises:
        ValidationError: An item is malformed, or holds content ``model`` cannot take.
    """
    entries = parse_history(history) if history is not None else []
    for index, entry in enumerate(entries):
        if isinstance(entry, MessageEntry):
            try:
                check_for_model(model, entry.content)
            except ValidationError as error:
                raise ValidationError(f"invalid history item {index}: {error}") from None
    return entries


class _Override(contextlib.AbstractContextManager[None]):
    """One ``Agent.override`` block. A ``with`` block only: not a decorator, which on an
    ``async def`` test would end before the test runs."""

    def __init__(self, agent: Agent, model: Model) -> None:
        self._agent = agent
        self._model = model

    def __enter__(self) -> None:
        agent = self._agent
        with _overrides_lock:
            if not agent._overrides:
                agent._own_model = agent.model
            agent._overrides.append((self, self._model))
            agent.model = self._model

    def __exit__(self, *exc_info: object) -> None:
        agent = self._agent
        with _overrides_lock:
            agent._overrides = [entry for entry in agent._overrides if entry[0] is not self]
            agent.model = agent._overrides[-1][1] if agent._overrides else agent._own_model


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


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].strip() if text.strip() else ""


def _delegation_schema(agent: Agent) -> ToolSchema:
    """The tool a parent's model calls to delegate a task to ``agent``."""
    return ToolSchema(
        name=agent.name,
        description=agent.description,
        parameters={
            "type": "object",
            "properties": {
                "message": {
                    "type": "string",
                    "description": (
                        f"The task for {agent.name}, with everything it needs to know: it "
                        "does not see this conversation."
                    ),
                }
            },
            "required": ["message"],
            "additionalProperties": False,
        },
    )
