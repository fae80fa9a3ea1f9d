"""The store contract's test suite: the tests a store passes, for pytest and pytest-trio.

Every test takes a ``store`` fixture, and some an ``other_store``: the module that runs the
suite defines them. It imports the tests and the suite's ``clock`` fixture into its own
namespace, where pytest collects them::

    import pytest

    from agentlib.store import SQLiteStore
    from agentlib.testing.store_contract import *  # noqa: F403
    from agentlib.testing.store_contract import ManualClock


    @pytest.fixture
    def store(tmp_path, clock: ManualClock) -> SQLiteStore:
        return SQLiteStore(str(tmp_path / "sessions.db"), clock=clock)


    @pytest.fixture
    def other_store(tmp_path, clock: ManualClock) -> SQLiteStore:
        return SQLiteStore(str(tmp_path / "sessions.db"), clock=clock)

``store`` is a new store object, not opened, on an empty database, that measures its leases
on ``clock`` (a :class:`ManualClock`, which the tests move on by hand). ``other_store`` is
a second store object on the same database and clock, as another runtime's would be; a
store whose sessions live in its object alone (as a :class:`~agentlib.store.MemoryStore`'s)
has none: its fixture calls ``pytest.skip()``, and the tests that take it are skipped.

The tests run under pytest-trio (each is marked ``trio``): install ``pytest`` and
``pytest-trio`` with your tests. Importing this module imports pytest; agentlib itself never
imports it. It has pytest rewrite the suite's asserts, to show the values that differ.
"""

import pytest

pytest.register_assert_rewrite("agentlib.testing._store_contract")

from ._store_contract import (  # noqa: E402  (registered for rewriting before it is imported)
    ManualClock,
    clock,
    test_a_session_is_leased_as_its_row_is_written,
    test_a_session_leased_as_it_was_made_is_fenced,
    test_a_session_taken_over_is_written_again_once_leased_again,
    test_a_session_whose_rows_cannot_be_kept_is_refused_and_the_others_are_written,
    test_a_sessions_later_row_changes_only_terminated_and_none_reads_back_a_lease,
    test_a_store_object_opened_later_reads_the_same,
    test_a_store_object_opens_again_after_aclose,
    test_a_store_that_commits_is_durable_and_checks_out,
    test_a_turn_gets_its_record_later,
    test_a_write_to_a_session_taken_over_is_refused_and_the_others_go_on,
    test_aclose_commits_what_was_written,
    test_an_id_the_store_cannot_hold_reads_as_nothing,
    test_an_unknown_session_reads_as_nothing,
    test_callbacks_open_then_settled,
    test_committed_sees_every_op_once_in_order,
    test_damaged_is_a_store_error_naming_the_session_and_the_table,
    test_entries_come_back_in_order,
    test_events_come_back_as_written_whatever_their_fields,
    test_events_come_back_in_order,
    test_events_of_sessions_stay_apart,
    test_key_rows,
    test_leases,
    test_leases_hold_across_store_objects,
    test_listeners_hear_in_the_runtimes_thread_until_they_stop,
    test_prune_forgets_old_events,
    test_pruning_past_the_last_event_keeps_the_numbering,
    test_renewing_leases,
    test_session_for_key_finds_the_session_its_key_started,
    test_session_rows_and_their_children_in_order,
    test_steered_messages_are_kept_by_turn,
    test_steps_are_set_and_cleared,
    test_what_a_flush_made_durable_another_store_object_reads,
    test_writes_apply_in_the_order_they_were_made,
)

__all__ = [
    "ManualClock",
    "clock",
    "test_a_session_is_leased_as_its_row_is_written",
    "test_a_session_leased_as_it_was_made_is_fenced",
    "test_a_session_taken_over_is_written_again_once_leased_again",
    "test_a_session_whose_rows_cannot_be_kept_is_refused_and_the_others_are_written",
    "test_a_sessions_later_row_changes_only_terminated_and_none_reads_back_a_lease",
    "test_a_store_object_opened_later_reads_the_same",
    "test_a_store_object_opens_again_after_aclose",
    "test_a_store_that_commits_is_durable_and_checks_out",
    "test_a_turn_gets_its_record_later",
    "test_a_write_to_a_session_taken_over_is_refused_and_the_others_go_on",
    "test_aclose_commits_what_was_written",
    "test_an_id_the_store_cannot_hold_reads_as_nothing",
    "test_an_unknown_session_reads_as_nothing",
    "test_callbacks_open_then_settled",
    "test_committed_sees_every_op_once_in_order",
    "test_damaged_is_a_store_error_naming_the_session_and_the_table",
    "test_entries_come_back_in_order",
    "test_events_come_back_as_written_whatever_their_fields",
    "test_events_come_back_in_order",
    "test_events_of_sessions_stay_apart",
    "test_key_rows",
    "test_leases",
    "test_leases_hold_across_store_objects",
    "test_listeners_hear_in_the_runtimes_thread_until_they_stop",
    "test_prune_forgets_old_events",
    "test_pruning_past_the_last_event_keeps_the_numbering",
    "test_renewing_leases",
    "test_session_for_key_finds_the_session_its_key_started",
    "test_session_rows_and_their_children_in_order",
    "test_steered_messages_are_kept_by_turn",
    "test_steps_are_set_and_cleared",
    "test_what_a_flush_made_durable_another_store_object_reads",
    "test_writes_apply_in_the_order_they_were_made",
]


def _set_public_module() -> None:
    import inspect

    for name in __all__:
        obj = globals()[name]
        if inspect.isclass(obj) or inspect.isfunction(obj):
            obj.__module__ = __name__


_set_public_module()
del _set_public_module
