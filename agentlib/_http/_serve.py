"""``agentlib.serve``: importable without the server's dependencies, which it imports."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._define._agent import Agent
    from .._store._base import Store
    from ._server import Server

__all__ = ["check_port", "serve"]


def serve(
    agents: Iterable[Agent] = (),
    *,
    store: str | Store | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    tokens: Iterable[str] | Mapping[str, str] = (),
    event_retention: int | None = None,
    lease_seconds: float | None = None,
) -> AbstractAsyncContextManager[Server]:
    """Serve agents over HTTP for the duration of an ``async with`` block, from a runtime
    of the block's own::

        async with agentlib.serve([agent], port=0) as server:
            print(server.url)

    Sessions, turns, records, events and errors are the public API's, as JSON under
    ``/v1`` (see the "Deploying" guide); events also stream as Server-Sent Events. Each
    request is a line of the ``agentlib.access`` log, at INFO, and a 503's cause or a
    failure of the server's own one of ``agentlib.serve``: your application's logging
    shows them (``agentlib serve`` writes them on stderr).

    Args:
        agents: The agents to serve; ``server.deploy(agent)`` adds more, or replaces one.
        store: The runtime's store, as for :func:`agentlib.open_runtime`.
        host: The address to listen on.
        port: The port; 0 picks a free one (read ``server.url``).
        tokens: With any, every route but ``/v1/health`` and ``/v1/openapi.json`` takes
            only requests that carry one as ``Authorization: Bearer <token>``. Each token
            is a principal: a session is found only with the token that started it
            (another's gets 404). Give a mapping of names to tokens to name the principals.
        event_retention: As for :func:`agentlib.open_runtime`.
        lease_seconds: As for :func:`agentlib.open_runtime`.

    Raises:
        ValueError: ``port`` is not a port number (0 to 65535).
        ImportError: The server's dependencies are missing: ``pip install 'agentlib[server]'``.
    """
    check_port(port)
    try:
        from ._server import serve as serve_agents
    except ImportError as error:
        raise ImportError(
            "agentlib.serve needs the server's dependencies (Starlette and hypercorn): "
            "pip install 'agentlib[server]'"
        ) from error
    return serve_agents(
        agents,
        store=store,
        host=host,
        port=port,
        tokens=tokens,
        event_retention=event_retention,
        lease_seconds=lease_seconds,
    )


def check_port(port: object) -> None:
    """Raises:
    ValueError: ``port`` is not a port number (0 to 65535), said before anything starts."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(
            f"port must be a whole number from 0 to 65535 (0 picks a free one), not {port!r}"
        )
