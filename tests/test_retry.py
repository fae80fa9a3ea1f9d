"""The retry policy the models' requests and the HTTP client share: pauses, limits, the
server's asked-for wait. Time is trio's MockClock."""

from __future__ import annotations

import trio
import trio.testing

from agentlib._trio._retry import Backoff, RetryPolicy

STEADY = Backoff(first=1.0, most=4.0)


def test_pauses_double_up_to_the_most_then_stay() -> None:
    assert [STEADY.pause(attempt) for attempt in range(5)] == [1.0, 2.0, 4.0, 4.0, 4.0]


def test_jitter_adds_up_to_its_seconds() -> None:
    backoff = Backoff(first=1.0, most=4.0, jitter=0.5)
    for _ in range(50):
        assert 2.0 <= backoff.pause(1) <= 2.5


def test_full_jitter_draws_a_pause_from_none_to_its_length() -> None:
    backoff = Backoff(first=1.0, most=4.0, full_jitter=True)
    pauses = [backoff.pause(3) for _ in range(200)]
    assert all(0.0 <= pause <= 4.0 for pause in pauses)
    assert min(pauses) < 2.0 < max(pauses)


def test_a_pause_after_very_many_attempts_is_the_most_not_an_overflow() -> None:
    assert STEADY.pause(10**6) == 4.0


async def test_attempts_bound_the_tries_the_first_one_counted() -> None:
    retries = RetryPolicy(backoff=STEADY, attempts=3).start()
    assert retries.next_pause() == 1.0
    assert retries.next_pause() == 2.0
    assert retries.next_pause() is None
    assert retries.failures == 3
    assert retries.refused is None


async def test_a_wait_the_server_asks_for_replaces_the_pause() -> None:
    retries = RetryPolicy(backoff=STEADY, attempts=5, longest_asked=10.0).start()
    assert retries.next_pause(asked=7.0) == 7.0
    assert retries.next_pause() == 2.0  # the backoff went on growing meanwhile


async def test_a_wait_longer_than_the_longest_asked_gives_up_and_says_it() -> None:
    retries = RetryPolicy(backoff=STEADY, attempts=5, longest_asked=10.0).start()
    assert retries.next_pause(asked=3600.0) is None
    assert retries.refused == 3600.0


async def test_no_attempt_starts_after_the_give_up_time_and_the_last_pause_ends_then(
    autojump_clock: trio.testing.MockClock,
) -> None:
    retries = RetryPolicy(backoff=STEADY, give_up_after=6.0).start()
    pauses = []
    while (pause := retries.next_pause()) is not None:
        pauses.append(pause)
        await trio.sleep(pause)
    assert pauses == [1.0, 2.0, 3.0]  # the 4 s pause cut to end at 6 s
    assert retries.elapsed == 6.0


async def test_steady_failures_keep_the_pauses_from_growing_past_steady_after() -> None:
    retries = RetryPolicy(backoff=STEADY, attempts=10, steady_after=1).start()
    pauses = [retries.next_pause(steady=True) for _ in range(4)]
    assert pauses == [1.0, 2.0, 2.0, 2.0]
    assert retries.next_pause() == 2.0  # a failure of another kind grows them again
    assert retries.next_pause() == 4.0
