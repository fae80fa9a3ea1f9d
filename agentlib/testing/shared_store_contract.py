"""The shared store contract's test suite: the tests a shared store passes, beside
:mod:`agentlib.testing.store_contract`'s.

A shared store (``shared = True``) is one database that runtimes in several processes use,
each through a store object of its own: they follow each other's events
(``wait_for_events``), claim callbacks (``claim_callback``, ``wait_for_claims``) and pass
requests to the runtime that holds a session (``send_request``, ``wait_for_requests``,
``reply_request``, ``wait_for_reply``, ``withdraw_request``). Every test takes the
``store`` and ``other_store`` fixtures of the store contract's suite (two store objects on
one new database, on the suite's ``clock``); a store's shared tests import both suites::

    from agentlib.testing.shared_store_contract import *  # noqa: F403
    from agentlib.testing.store_contract import *  # noqa: F403

The tests run under pytest-trio, as the store contract's do.
"""

import pytest

# The suite builds on the store contract's helpers: both have their asserts rewritten.
pytest.register_assert_rewrite(
    "agentlib.testing._store_contract", "agentlib.testing._shared_store_contract"
)

from ._shared_store_contract import (  # noqa: E402  (registered for rewriting first)
    ManualClock,
    clock,
    test_a_claim_settles_an_open_callback_once_and_its_holder_hears_of_it,
    test_a_request_is_served_by_the_holder_and_its_reply_read_once,
    test_a_withdrawn_request_is_never_served_and_a_replied_one_cannot_be_withdrawn,
    test_another_store_object_hears_of_a_commit_and_of_the_end,
)

__all__ = [
    "ManualClock",
    "clock",
    "test_a_claim_settles_an_open_callback_once_and_its_holder_hears_of_it",
    "test_a_request_is_served_by_the_holder_and_its_reply_read_once",
    "test_a_withdrawn_request_is_never_served_and_a_replied_one_cannot_be_withdrawn",
    "test_another_store_object_hears_of_a_commit_and_of_the_end",
]
