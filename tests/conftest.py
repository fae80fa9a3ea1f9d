"""Fixtures shared by the tests: the HTTP test server."""

from __future__ import annotations

import pytest
import trio
from _http_server import Server, serve


@pytest.fixture
async def server(nursery: trio.Nursery) -> Server:
    """The HTTP test server (tests/_http_server.py), serving for the length of the test."""
    return await serve(nursery)
