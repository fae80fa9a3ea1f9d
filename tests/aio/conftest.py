"""Every test of the asyncio door runs on each loop a service may run it on: asyncio's own,
and uvloop's (uvicorn's, where it is installed, as with ``uvicorn[standard]``)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator

import pytest

#: The loops, by the name of the test's parameter. uvloop has no Windows build.
LOOPS = ["asyncio"] if sys.platform == "win32" else ["asyncio", "uvloop"]


@pytest.fixture(params=LOOPS, autouse=True)
def event_loop_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """The loop the test's ``asyncio.run`` (and ``new_event_loop``) makes, for the test."""
    if request.param == "asyncio":
        yield request.param
        return
    import uvloop  # the test extra installs it

    before = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        yield request.param
    finally:
        asyncio.set_event_loop_policy(before)
