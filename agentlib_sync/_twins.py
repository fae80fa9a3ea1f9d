"""What the blocking and the asyncio twins of agentlib's references share, whichever door
they are of: the agentlib object each wraps (an agent built from the same arguments), and
their names, reprs and equality. Each door's own classes add its methods."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal

import agentlib
from agentlib._models._options import ChatOptions

__all__ = ["AgentTwin", "RemoteAgentTwin", "SessionTwin", "TurnTwin"]


class AgentTwin:
    """An agent: the :class:`agentlib.Agent` built from the same arguments, as ``agent``."""

    def __init__(
        self,
        name: str,
        instructions: str = "",
        model: agentlib.Model | str | None = None,
        tools: Iterable[agentlib.Tool | agentlib.ToolSource | Callable[..., Any]] = (),
        output_type: type[Any] | None = None,
        subagents: Sequence[AgentTwin | agentlib.Agent] = (),
        hooks: Sequence[agentlib.Hook] = (),
        tool_errors: Literal["report", "raise"] = "report",
        *,
        description: str = "",
        max_running_subagents: int = 8,
        max_steps: int = 25,
        model_options: ChatOptions | None = None,
        mcps: Mapping[str, agentlib.RemoteMCP | agentlib.StdioMCP] | None = None,
        environment: (
            agentlib.NoSandbox
            | agentlib.DangerousLocalSandbox
            | agentlib.IsolatedSandbox
            | agentlib.BashkitSandbox
            | None
        ) = None,
    ) -> None:
        delegates = [sub.agent if isinstance(sub, AgentTwin) else sub for sub in subagents]
        tools, hooks, asyncio_code = self._user_code(tools, hooks)
        #: What of the agent, its subagents' included, is asyncio code: the names of its
        #: tools and hooks that only a door's asyncio loop runs.
        self._asyncio_code: tuple[str, ...] = tuple(asyncio_code) + tuple(
            name for sub in subagents if isinstance(sub, AgentTwin) for name in sub._asyncio_code
        )
        self.agent: agentlib.Agent = agentlib.Agent(
            name, instructions, model, tools, output_type, delegates, hooks, tool_errors,
            description=description, max_running_subagents=max_running_subagents,
            max_steps=max_steps, model_options=model_options, mcps=mcps,
            environment=environment,
        )  # fmt: skip

    @staticmethod
    def _user_code(
        tools: Iterable[agentlib.Tool | agentlib.ToolSource | Callable[..., Any]],
        hooks: Sequence[agentlib.Hook],
    ) -> tuple[
        Iterable[agentlib.Tool | agentlib.ToolSource | Callable[..., Any]],
        Sequence[agentlib.Hook],
        Sequence[str],
    ]:
        """The tools and hooks as the engine is to call them, and the names of those made
        to run elsewhere: as given, none (a door whose callers' code runs elsewhere says
        how)."""
        return tools, hooks, ()

    @property
    def max_steps(self) -> int:
        """The most model steps a turn may take."""
        return self.agent.max_steps

    @property
    def name(self) -> str:
        """The agent's name."""
        return self.agent.name

    @property
    def model(self) -> agentlib.Model:
        """The model that drives the agent."""
        return self.agent.model

    def __repr__(self) -> str:
        return repr(self.agent)

    def override(self, *, model: agentlib.Model | str) -> AbstractContextManager[None]:
        """Run this agent on ``model`` for the ``with`` block, for tests; see
        :meth:`agentlib.Agent.override` (the twin's agent is the same object: its sessions'
        steps in the engine's thread ask ``model`` too)."""
        return self.agent.override(model=model)


class RemoteAgentTwin:
    """A deployed agent: the :class:`agentlib.RemoteAgent` it wraps, as ``agent``."""

    def __init__(self, agent: agentlib.RemoteAgent) -> None:
        self.agent = agent

    @property
    def name(self) -> str:
        """The agent's name on the server."""
        return self.agent.name

    @property
    def url(self) -> str:
        """The server's address."""
        return self.agent.url

    def __repr__(self) -> str:
        return repr(self.agent)


class SessionTwin:
    """A session: the :class:`agentlib.Session` it wraps. Two are equal when they are of
    one door and name the same session in the same runtime."""

    def __init__(self, session: agentlib.Session) -> None:
        self._session = session
        self.id = session.id

    def __repr__(self) -> str:
        return repr(self._session)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self._session == other._session

    def __hash__(self) -> int:
        return hash(self._session)


class TurnTwin:
    """A turn: the :class:`agentlib.Turn` it wraps, and its session's twin."""

    def __init__(self, turn: agentlib.Turn, session: Any) -> None:
        self._turn = turn
        self._session = session
        self.id = turn.id
        self.session_id = turn.session_id
        self.started = turn.started

    def __repr__(self) -> str:
        return repr(self._turn)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self._turn == other._turn

    def __hash__(self) -> int:
        return hash(self._turn)
