"""The store contract's suite (``agentlib.testing.store_contract``), run against every store
agentlib ships, as a store's own tests run it.

A :class:`MemoryStore` keeps its sessions in the object: no second object reaches them, and
the tests of several store objects on one database are skipped for it. What only the SQLite
store promises is in ``test_sqlite_store.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlib.store import MemoryStore, SQLiteStore, Store
from agentlib.testing.store_contract import *  # noqa: F403
from agentlib.testing.store_contract import ManualClock


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(kind: str, tmp_path: Path, clock: ManualClock) -> Store:
    if kind == "memory":
        return MemoryStore(clock=clock)
    return SQLiteStore(str(tmp_path / "s.db"), clock=clock)


@pytest.fixture
def other_store(kind: str, tmp_path: Path, clock: ManualClock) -> Store:
    if kind == "memory":
        pytest.skip("a MemoryStore's sessions live in the object: no other object reaches them")
    return SQLiteStore(str(tmp_path / "s.db"), clock=clock)
