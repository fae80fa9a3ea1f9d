"""The transport's policy apart from any server: how long to wait before a retry, and the
HTTP client each trio run gets."""

from __future__ import annotations

import httpx
import pytest
import trio

from agentlib._models._options import DEFAULT_TIMEOUT
from agentlib._models._transport import BACKOFF, RunClients
from agentlib._trio._retry import retry_after


def test_the_backoff_doubles_from_half_a_second_up_to_eight_plus_a_second_of_jitter() -> None:
    for attempt, base in [(0, 0.5), (1, 1.0), (2, 2.0), (4, 8.0), (9, 8.0)]:
        for _ in range(20):
            assert base <= BACKOFF.pause(attempt) <= base + 1.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("2", 2.0), ("0.5", 0.5), ("-3", 0.0), ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0)],
)
def test_retry_after_is_seconds_or_an_http_date(value: str, seconds: float) -> None:
    assert retry_after({"retry-after": value}) == seconds


def test_retry_after_in_the_future_asks_for_the_time_until_then() -> None:
    wait = retry_after({"retry-after": "Fri, 01 Jan 2100 00:00:00 GMT"})
    assert wait is not None
    assert wait > 365 * 24 * 3600


@pytest.mark.parametrize("headers", [{}, {"retry-after": "soon"}, {"retry-after": "nan"}])
def test_retry_after_that_says_nothing_usable_is_none(headers: dict[str, str]) -> None:
    assert retry_after(headers) is None


def test_each_trio_run_gets_one_client_closed_when_the_run_ends() -> None:
    clients = RunClients()
    seen: list[httpx.AsyncClient] = []

    async def step() -> None:
        first = await clients.current(DEFAULT_TIMEOUT)
        assert await clients.current(DEFAULT_TIMEOUT) is first
        assert not first.is_closed
        seen.append(first)

    trio.run(step)
    trio.run(step)
    assert seen[0] is not seen[1]
    assert all(client.is_closed for client in seen)
