"""Where the current runtime is found: the one of the enclosing ``open_runtime`` block.

This module imports nothing of the engine nor of the references: ``Agent`` reaches the
runtime through it (``Agent.start_session`` asks the current runtime's front door for a
session), and the engine and the references depend on ``Agent``, not the other way round.
"""

from __future__ import annotations

import contextvars
from typing import Any, Protocol

import trio

__all__ = ["FrontDoor", "check_trio", "current_door", "remote_agent", "set_door", "set_remote"]


class FrontDoor(Protocol):
    """What ``open_runtime`` puts in reach of the code it runs: a runtime, and the verbs of
    the public API that need one."""

    @property
    def runtime(self) -> Any: ...

    async def start_session(
        self,
        agent: Any,
        *,
        history: Any,
        inputs: Any,
        idempotency_key: str | None,
        **handlers: Any,
    ) -> Any: ...

    def session(self, agent: Any, session_id: str, **handlers: Any) -> Any: ...


_CURRENT: contextvars.ContextVar[FrontDoor] = contextvars.ContextVar("agentlib_runtime")


def check_trio() -> None:
    """Refuse a call of the async API outside trio, before trio fails deep inside it.

    Raises:
        RuntimeError: This is not a trio task: an asyncio loop runs here, or no loop does.
    """
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        raise RuntimeError(
            "agentlib's async API runs under trio (`trio.run(main)`), and this call is not "
            "in a trio task; from asyncio code (or Jupyter), use `agentlib.aio`: the same "
            "API, awaited from asyncio; from a plain script, `agentlib_sync`: its blocking "
            "calls run the engine on a thread of its own"
        ) from None


def current_door() -> FrontDoor:
    """The front door of the runtime of the enclosing ``open_runtime`` block.

    Raises:
        RuntimeError: There is none (or this is not trio: the message says what to do).
    """
    try:
        return _CURRENT.get()
    except LookupError:
        check_trio()
        raise RuntimeError(
            "no agentlib runtime is running here: in trio code, wrap the calls in "
            "`async with agentlib.open_runtime():`; in a plain script, use `agentlib_sync`, "
            "which runs one for you"
        ) from None


def set_door(door: FrontDoor) -> contextvars.Token[FrontDoor]:
    return _CURRENT.set(door)


def reset_door(token: contextvars.Token[FrontDoor]) -> None:
    _CURRENT.reset(token)


#: What makes a reference to a deployed agent: set when the HTTP client's module is imported
#: (``agentlib`` imports it), so that ``Agent.load_from`` imports nothing of it.
_REMOTE: list[Any] = []


def set_remote(factory: Any) -> None:
    _REMOTE[:] = [factory]


def remote_agent(
    url: Any,
    name: str,
    token: str | None,
    output_type: Any,
    subagent_output_types: Any,
    **options: Any,
) -> Any:
    """A reference to the agent ``name`` that the server at ``url`` serves (``options``:
    its keyword arguments of time)."""
    if not _REMOTE:  # only when agentlib's package was not imported: never in practice
        raise RuntimeError("import agentlib first: its HTTP client is not loaded")
    return _REMOTE[0](url, name, token, output_type, subagent_output_types, **options)
