"""Fixtures shared by the tests: the HTTP test server, and the stores of tests that open
several runtimes on one store."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio
from _http_server import Server, serve

import agentlib
from agentlib import MemoryStore

if TYPE_CHECKING:
    from _support import StoreFor

# The shared helpers assert as the tests do: pytest reports their failures in full.
pytest.register_assert_rewrite("_support")


@pytest.fixture
async def server(nursery: trio.Nursery) -> Server:
    """The HTTP test server (tests/_http_server.py), serving for the length of the test."""
    return await serve(nursery)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFor:
    """One store for every runtime of the test: a shared MemoryStore, or a SQLite file."""
    if request.param == "memory":
        shared = MemoryStore()
        return lambda: shared
    url = f"sqlite:///{tmp_path / 's.db'}"  # tmp_path is absolute: "sqlite:////tmp/.../s.db"
    return lambda: url


@pytest.fixture(params=[":memory:", "memory", "sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFor:
    """Like ``store``, and also ``":memory:"`` (nothing outlives the runtime)."""
    if request.param == ":memory:":
        return lambda: ":memory:"
    if request.param == "memory":
        shared = MemoryStore()
        return lambda: shared
    url = f"sqlite:///{tmp_path / 's.db'}"
    return lambda: url


@pytest.fixture(params=["local", "remote"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test on a local runtime, then on agents served on 127.0.0.1: for the second,
    ``agentlib.open_runtime`` serves (tests/_transport.py). A module opts in with
    ``pytestmark = pytest.mark.usefixtures("transport")``."""
    if request.param == "remote":
        from _transport import open_remote_runtime

        monkeypatch.setattr(agentlib, "open_runtime", open_remote_runtime)
    return str(request.param)
