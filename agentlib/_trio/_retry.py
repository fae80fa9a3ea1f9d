"""Retries: how long to wait before another attempt, and when to stop trying.

One policy serves the models' requests and the HTTP client's calls to a server: pauses that
double from one attempt to the next up to a cap, with jitter so that clients that failed
together do not come back together; a limit on the attempts, or a time after which none
starts; a wait the server asks for (``Retry-After``) honoured up to a cap. Time is trio's
(``trio.current_time()``), so a test's ``MockClock`` runs the pauses at once.

A call starts its :class:`Retries` from its :class:`RetryPolicy`, tries, and after each
failure asks :meth:`Retries.next_pause` how long to sleep before the next attempt (None:
give up, and raise its own error saying what failed).
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Mapping

import attrs
import trio

__all__ = ["Backoff", "Retries", "RetryPolicy", "retry_after"]

#: Pauses stop doubling after this many (a pause past the cap would overflow a float).
_MOST_DOUBLINGS = 64


@attrs.frozen(kw_only=True)
class Backoff:
    """Pauses that double after each failed attempt, from ``first`` up to ``most`` seconds.

    Attributes:
        first: The pause after the first failed attempt, in seconds, before jitter.
        most: The longest pause, before jitter.
        jitter: Seconds added to each pause at random, from none to this many.
        full_jitter: Whether each pause is drawn at random from none to its whole length
            instead (the pauses of many clients spread the most).
    """

    first: float
    most: float
    jitter: float = 0.0
    full_jitter: bool = False

    def pause(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (from 0)."""
        pause = min(self.most, self.first * 2.0 ** min(attempt, _MOST_DOUBLINGS))
        if self.full_jitter:
            pause = random.uniform(0.0, pause)
        return pause + random.uniform(0.0, self.jitter) if self.jitter else pause


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """When a failed call is tried again, and how long is waited before.

    Attributes:
        backoff: The pauses between attempts.
        attempts: The most attempts, the first one counted; None for as many as
            ``give_up_after`` leaves time for.
        give_up_after: Seconds from the first attempt after which no other one starts; the
            last pause is cut short to end then. None for no limit but ``attempts``.
        longest_asked: The longest wait a server may ask for, in seconds: it is waited
            instead of the backoff's pause; a longer one gives up at once.
        steady_after: After a failure said to be ``steady`` (a server at work, whose
            answer was cut short), pauses grow no further than this many doublings.
    """

    backoff: Backoff
    attempts: int | None = None
    give_up_after: float | None = None
    longest_asked: float = math.inf
    steady_after: int = 0

    def start(self) -> Retries:
        """The retries of a call whose first attempt starts now."""
        return Retries(policy=self, started=trio.current_time())


@attrs.define(kw_only=True)
class Retries:
    """The attempts of one call under a :class:`RetryPolicy`.

    Attributes:
        policy: What it follows.
        started: When the first attempt started, on trio's clock.
        failures: How many attempts have failed.
        refused: The wait the server asked for, once it was longer than the policy allows
            (then :meth:`next_pause` gave up).
    """

    policy: RetryPolicy
    started: float
    failures: int = 0
    refused: float | None = None
    _doublings: int = 0

    @property
    def elapsed(self) -> float:
        """Seconds since the first attempt started."""
        return trio.current_time() - self.started

    def next_pause(self, asked: float | None = None, *, steady: bool = False) -> float | None:
        """Count a failed attempt; the seconds to wait before the next one, or None when
        there is to be none.

        Args:
            asked: The wait the server asked for, if it asked (see :func:`retry_after`).
            steady: The failure came from a server at work: the pauses stop growing at
                the policy's ``steady_after``.
        """
        policy = self.policy
        self.failures += 1
        if policy.attempts is not None and self.failures >= policy.attempts:
            return None
        if asked is not None and asked > policy.longest_asked:
            self.refused = asked
            return None
        pause = policy.backoff.pause(self._doublings) if asked is None else asked
        self._doublings += 1
        if steady:
            self._doublings = min(self._doublings, policy.steady_after)
        if policy.give_up_after is not None:
            left = policy.give_up_after - self.elapsed
            if left <= 0:
                return None
            pause = min(pause, left)
        return pause


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The wait a ``Retry-After`` header asks for, in seconds (a number or an HTTP date)."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)
