"""A test module's tests on both transports: for the remote run, ``agentlib.open_runtime``
serves the agents over HTTP on 127.0.0.1 and puts a front door in place through which
``Agent.start_session`` and ``Agent.session`` reach them with ``Agent.load_from``: the
test's own code stays as it is, and meets remote references."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import agentlib
from agentlib import Agent
from agentlib._data._entries import (
    Entry,
    MessageEntry,
    ToolCallEntry,
    ToolResultEntry,
    UnknownEntry,
)
from agentlib._trio._context import reset_door, set_door


class RemoteDoor:
    """The verbs of the public API that need a runtime, answered by a served agent."""

    def __init__(self, server: Any) -> None:
        self.server = server

    @property
    def runtime(self) -> agentlib.Runtime:
        runtime: agentlib.Runtime = self.server._runtime
        return runtime

    def remote(self, agent: Agent) -> agentlib.RemoteAgent:
        if self.server.agents.get(agent.name) is not agent:
            self.server.deploy(agent)
        return agentlib.Agent.load_from(
            self.server.url,
            agent.name,
            output_type=agent.output_type,
            subagent_output_types={sub.name: sub.output_type for sub in _below(agent)},
        )

    async def start_session(
        self,
        agent: Agent,
        *,
        history: Sequence[Entry],
        inputs: Any,
        idempotency_key: str | None,
        **handlers: Any,
    ) -> agentlib.Session:
        remote = self.remote(agent)
        if not inputs:
            items = [_import_item(entry) for entry in history]
            return await remote.start_session(
                history=items or None, idempotency_key=idempotency_key, **handlers
            )
        # The door has the inputs as the session stores them (JSON by input id): the body
        # RemoteAgent.start_session would send for them.
        body = {"inputs": dict(inputs), "history": [_import_item(entry) for entry in history]}
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        made = await remote._wire.call("POST", f"/agents/{agent.name}/sessions", body)
        return remote.session(made["id"], **handlers)

    def session(self, agent: Agent, session_id: str, **handlers: Any) -> agentlib.Session:
        return self.remote(agent).session(session_id, **handlers)


def _below(agent: Agent) -> list[Agent]:
    """The agent's subagents, at any depth."""
    return [below for sub in agent.subagents for below in (sub, *_below(sub))]


def _import_item(entry: Entry) -> dict[str, Any]:
    """A parsed history entry as the history item that would give it."""
    if isinstance(entry, MessageEntry):
        content = [agentlib.unstructure(block) for block in entry.content]
        return {"type": "message", "role": entry.role, "content": content}
    if isinstance(entry, ToolCallEntry):
        return {
            "type": "tool_call",
            "tool_call_id": entry.tool_call_id,
            "name": entry.name,
            "arguments": entry.arguments,
        }
    if isinstance(entry, ToolResultEntry):
        return {
            "type": "tool_result",
            "tool_call_id": entry.tool_call_id,
            "name": entry.name,
            "result": entry.text,
        }
    if isinstance(entry, UnknownEntry) and entry.entry_type == "reasoning":
        return {"type": "reasoning", "text": entry.raw["text"]}
    if isinstance(entry, UnknownEntry) and entry.entry_type == "checkpoint":
        task_name, _, snapshot_type = entry.raw["message"].partition(":")
        return {
            "type": "snapshot",
            "task_name": task_name,
            "snapshot_type": snapshot_type,
            "value": entry.raw["details"],
        }
    raise NotImplementedError(f"no history item gives a {type(entry).__name__}")


@asynccontextmanager
async def open_remote_runtime(
    store: str | agentlib.Store | None = None,
    *,
    event_retention: int | None = None,
    lease_seconds: float = 30.0,
) -> AsyncIterator[agentlib.Runtime]:
    """``agentlib.open_runtime``, served: the block's sessions are reached over HTTP."""
    async with agentlib.serve(
        store=store, port=0, event_retention=event_retention, lease_seconds=lease_seconds
    ) as server:
        door = RemoteDoor(server)
        token = set_door(door)
        try:
            yield door.runtime
        finally:
            reset_door(token)
