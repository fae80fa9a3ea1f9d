"""Fixtures shared by the tests: the HTTP test server, and the stores of tests that open
several runtimes on one store."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio
from _http_server import Server, serve

import agentlib
from agentlib import MemoryStore
from agentlib.store import PostgresStore

if TYPE_CHECKING:
    from _support import StoreFor

# The shared helpers assert as the tests do: pytest reports their failures in full.
pytest.register_assert_rewrite("_support")


#: The PostgreSQL database of the tests: the machine's, unless AGENTLIB_TEST_POSTGRES names one.
POSTGRES = os.environ.get("AGENTLIB_TEST_POSTGRES", "postgresql://127.0.0.1:5432/test")


@pytest.fixture
def postgres_schema() -> Iterator[str]:
    """A schema of its own in the tests' PostgreSQL database, dropped after the test: the
    test's empty database."""
    import psycopg

    name = f"agentlib_test_{uuid.uuid4().hex[:12]}"
    try:
        connection = psycopg.connect(POSTGRES, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as error:
        pytest.fail(
            f"PostgreSQL does not answer at {POSTGRES} ({error}): start it (on Debian, "
            "`service postgresql start`), or name another database in AGENTLIB_TEST_POSTGRES"
        )
    with connection:
        try:
            yield name
        finally:
            connection.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.fixture
async def server(nursery: trio.Nursery) -> Server:
    """The HTTP test server (tests/_http_server.py), serving for the length of the test."""
    return await serve(nursery)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFor:
    """One store for every runtime of the test: a shared MemoryStore, a SQLite file, or a
    schema of the tests' PostgreSQL database (a new store object for each runtime)."""
    if request.param == "memory":
        shared = MemoryStore()
        return lambda: shared
    if request.param == "postgres":
        schema = request.getfixturevalue("postgres_schema")
        return lambda: PostgresStore(POSTGRES, schema=schema)
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
