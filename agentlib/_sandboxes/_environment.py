"""An agent's environment: no computer, or one of the sandbox kinds that give its sessions
one (those with a workspace folder in ``_sandbox.py``, the in-process one in
``_bashkit.py``)."""

from __future__ import annotations

from ._bashkit import BashkitSandbox
from ._local import DangerousLocalSandbox, IsolatedSandbox, NoSandbox, Workspace

__all__ = ["Environment", "Sandbox", "check_environment", "workspace_for"]

#: The sandboxes that give a session a computer.
Sandbox = DangerousLocalSandbox | IsolatedSandbox | BashkitSandbox
Environment = NoSandbox | Sandbox


def check_environment(value: object) -> Environment:
    """``value`` as an agent's environment.

    Raises:
        TypeError: It is not a sandbox.
    """
    if value is None:
        return NoSandbox()
    if not isinstance(value, (NoSandbox, DangerousLocalSandbox, IsolatedSandbox, BashkitSandbox)):
        raise TypeError(
            "environment takes a sandbox, e.g. agentlib.DangerousLocalSandbox(), or "
            f"agentlib.NoSandbox(); not {type(value).__name__}"
        )
    return value


def workspace_for(environment: Environment, session_id: str) -> Workspace | None:
    """The workspace ``environment`` gives root session ``session_id``; None for none."""
    if isinstance(environment, NoSandbox):
        return None
    return environment._workspace(session_id)
