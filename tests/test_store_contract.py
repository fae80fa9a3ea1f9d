"""The store contract's suite (``agentlib.testing.store_contract``), run against every store
agentlib ships and against the example store of the guide "Writing a store", as a store's own
tests run it.

A :class:`MemoryStore` keeps its sessions in the object: its second object, for the tests of
several store objects on one database, is made ``shared_with`` the first. What only the
SQLite store promises is in ``test_sqlite_store.py``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import POSTGRES

from agentlib.store import MemoryStore, PostgresStore, SQLiteStore, Store
from agentlib.testing.store_contract import *  # noqa: F403
from agentlib.testing.store_contract import ManualClock

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "stores.md"


@functools.cache
def guide_store() -> dict[str, Any]:
    """The names the guide's example store defines: its page's first script, run as the
    docs' tests run it (what it prints aside)."""
    found = re.search(r"^```python\n(.*?)^```\n", GUIDE.read_text(), re.MULTILINE | re.DOTALL)
    assert found is not None, "the guide shows no store"
    namespace: dict[str, Any] = {"__name__": "docs_stores"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(found.group(1), GUIDE.name, "exec"), namespace)
    return namespace


@pytest.fixture(params=["memory", "sqlite", "postgres", "guide"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(
    kind: str, tmp_path: Path, clock: ManualClock, request: pytest.FixtureRequest
) -> Callable[[], Store]:
    """Makes store objects of the kind, each on the test's one database."""
    if kind == "memory":
        return lambda: MemoryStore(clock=clock)
    if kind == "sqlite":
        return lambda: SQLiteStore(str(tmp_path / "s.db"), clock=clock)
    if kind == "postgres":
        schema = request.getfixturevalue("postgres_schema")
        return lambda: PostgresStore(POSTGRES, schema=schema, clock=clock)
    guide = guide_store()
    database = guide["Database"]()
    return lambda: guide["DictStore"](database, clock=clock)


@pytest.fixture
def store(make_store: Callable[[], Store]) -> Store:
    return make_store()


@pytest.fixture
def other_store(
    kind: str, store: Store, make_store: Callable[[], Store], clock: ManualClock
) -> Store:
    if kind == "memory":  # its sessions live in the object: another shares them
        assert isinstance(store, MemoryStore)
        return MemoryStore(shared_with=store, clock=clock)
    return make_store()
