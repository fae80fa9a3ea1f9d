"""The shared store contract's suite (``agentlib.testing.shared_store_contract``), run against
the PostgreSQL store, the one shared store agentlib ships, as a shared store's own tests run
it (the store contract's suite runs against it in ``test_store_contract.py``)."""

from __future__ import annotations

import pytest
from conftest import POSTGRES

from agentlib.store import PostgresStore
from agentlib.testing.shared_store_contract import *  # noqa: F403
from agentlib.testing.shared_store_contract import ManualClock


@pytest.fixture
def store(postgres_schema: str, clock: ManualClock) -> PostgresStore:
    return PostgresStore(POSTGRES, schema=postgres_schema, clock=clock)


@pytest.fixture
def other_store(postgres_schema: str, clock: ManualClock) -> PostgresStore:
    return PostgresStore(POSTGRES, schema=postgres_schema, clock=clock)
