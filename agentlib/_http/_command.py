"""``python -m agentlib serve``: agents named by ``module:attribute``, served until Ctrl-C."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import TypeVar

import trio

from .._data._errors import StoreError
from .._define._agent import Agent
from .._store import Store, open_store

__all__ = ["serve"]

E = TypeVar("E", bound=BaseException)


def agents_named(spec: str) -> list[Agent]:
    """The agents ``module:attribute`` names.

    Raises:
        ValueError: It names no agent, or no module or attribute; the message says which.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"AGENTS must be module:attribute (such as myapp:agent), not {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise ValueError(f"no module {error.name!r} to import, for {spec!r}") from None
    value: object = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ValueError(f"module {module_name!r} has no attribute {attribute!r}") from None
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    for item in items:
        asyncio_code = getattr(item, "_asyncio_code", ())  # agentlib.aio's agents
        if asyncio_code:
            raise ValueError(
                f"{spec} is an agent of agentlib.aio with asyncio code "
                f"({', '.join(asyncio_code)}), which only an asyncio program that awaits "
                "agentlib.aio runs, and serve runs agents on trio: define the agent to "
                "serve with agentlib.Agent (its coroutine tools and hooks then run on trio)"
            )
    found = [getattr(item, "agent", item) for item in items]  # agentlib_sync's wrap one
    agents = [item for item in found if isinstance(item, Agent)]
    if len(agents) < len(found) or not agents:
        wrong = ", ".join(type(item).__name__ for item in found if not isinstance(item, Agent))
        raise ValueError(f"{spec} is not an agent or a list of agents (found {wrong or 'none'})")
    return agents


def serve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run the ``serve`` command; returns its exit status."""
    try:
        agents = agents_named(args.agents)
    except ValueError as error:
        parser.error(str(error))
    try:
        store = open_store(args.store)
    except ValueError as error:  # a kind of store agentlib does not know, a bad parameter
        parser.error(f"--store: {error}")
    tokens = [*args.token, *filter(None, os.environ.get("AGENTLIB_TOKENS", "").split(","))]
    serving = trio.Event()
    show_logs()
    try:
        trio.run(_serve, agents, store, serving, args, tokens)
    except BaseException as error:
        if any(isinstance(leaf, KeyboardInterrupt) for leaf in _leaves(error)):
            # Ctrl-C before the server serves, or again while it stops, is trio's: it may land
            # in any task. What else failed while stopping is said, not raised.
            for leaf in _leaves(error):
                if not isinstance(leaf, (KeyboardInterrupt, trio.Cancelled)):
                    print(
                        f"agentlib: while stopping: {type(leaf).__name__}: {leaf}", file=sys.stderr
                    )
            return _stopped()
        opening = _only(error, StoreError)
        if opening is not None and not serving.is_set():
            # The store could not be opened (a missing directory, a database out of reach, a
            # newer schema): --store is what to change, as for a store agentlib does not know.
            parser.error(f"--store: {' '.join(str(opening).split())}")  # on one line
        listening = _only(error, OSError)  # the port is taken, the address is not ours
        if listening is not None:
            print(
                f"agentlib: cannot listen on {args.host}:{args.port}: {listening}", file=sys.stderr
            )
            return 1
        raise
    return _stopped()


def _stopped() -> int:
    print("agentlib: stopped", file=sys.stderr)
    return 130


def show_logs() -> None:
    """Write the server's log on stderr, from INFO up (the access log's line per request,
    a 503's cause, a failure), unless the logging of the process is set up already."""
    root = logging.getLogger()
    served = logging.getLogger("agentlib")
    if root.handlers or served.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    served.addHandler(handler)
    if served.level == logging.NOTSET:
        served.setLevel(logging.INFO)


def _leaves(error: BaseException) -> list[BaseException]:
    """The exceptions in ``error``, a group's flattened."""
    inner = getattr(error, "exceptions", None)  # an exception group (backported on 3.10)
    if isinstance(inner, tuple):
        return [leaf for one in inner for leaf in _leaves(one)]
    return [error]


def _only(error: BaseException, kind: type[E]) -> E | None:
    """``error`` if it is a ``kind``, or the first of a group of nothing else."""
    leaves = _leaves(error)
    found = [leaf for leaf in leaves if isinstance(leaf, kind)]
    return found[0] if len(found) == len(leaves) else None


async def _serve(
    agents: Sequence[Agent],
    store: Store,
    serving: trio.Event,
    args: argparse.Namespace,
    tokens: list[str],
) -> None:
    from ._serve import serve as serve_agents

    async with serve_agents(
        agents,
        store=store,
        host=args.host,
        port=args.port,
        tokens=tokens,
        event_retention=args.event_retention,
        lease_seconds=args.lease_seconds,
    ) as server:
        serving.set()
        names = ", ".join(agent.name for agent in agents)
        checked = "with tokens" if tokens else "without tokens: anyone who reaches it may use it"
        # Ctrl-C stops the server as its closing does: event streams end, the other requests
        # under way have a second to finish. (As trio's KeyboardInterrupt, it would land in
        # any task: a connection's, halfway through closing, say.) Ctrl-C again while it
        # stops is trio's again.
        with trio.open_signal_receiver(signal.SIGINT) as interrupts:
            print(
                f"agentlib: serving {names} on {server.url}/v1 ({checked}); Ctrl-C stops",
                flush=True,
            )
            async for _ in interrupts:
                break
