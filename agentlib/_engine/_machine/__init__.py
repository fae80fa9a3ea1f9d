"""The engine's core: a session's and its turns' state, and the transitions between them.

No I/O here: neither trio nor the store. A session's state changes only through
:func:`apply`, one fact at a time (the rows of :mod:`agentlib._data._ops`, which the store keeps). A
transition takes an input (a message, a model's reply, a tool's result, an answer, a steer,
a stop, a restart), decides the facts it brings, applies them, and returns them: the runtime
writes them to the store and publishes their events, and does what the transition asks
(call the model, run a tool, wait). A session read back from a store is its stored facts
applied again, then the events of its unended turn, through the same :func:`apply`; then
:func:`restart` decides how that turn goes on. The live path and the restart path share
every line that changes state.

Its modules:

- ``_state``: the state classes, :func:`apply`, and :class:`Facts`, which a transition fills;
- ``_cursors``: an event's cursor, and the seq it names;
- ``_queries``: what the engine reads of the state (a session's tree, a turn's record);
- ``_transitions``: sessions and turns (started, steered, stopped, ended; subagents);
- ``_steps``: a turn's model steps and tool steps;
- ``_callbacks``: a turn's callbacks, opened, answered and closed;
- ``_restart``: how the turns of a tree read back from a store go on.

The engine imports this package (``from . import _machine as machine``), never its modules.
"""

from __future__ import annotations

from ._callbacks import add_close as add_close
from ._callbacks import answer_key as answer_key
from ._callbacks import check_not_a_class as check_not_a_class
from ._callbacks import close_callback as close_callback
from ._callbacks import fit_answer as fit_answer
from ._callbacks import open_callback as open_callback
from ._callbacks import open_sign_in as open_sign_in
from ._callbacks import show_settled as show_settled
from ._callbacks import sources_to_sign_in as sources_to_sign_in
from ._cursors import format_cursor as format_cursor
from ._cursors import seq_of_cursor as seq_of_cursor
from ._queries import HistoryView as HistoryView
from ._queries import ancestors as ancestors
from ._queries import find_callback as find_callback
from ._queries import model_history as model_history
from ._queries import open_below as open_below
from ._queries import record_of as record_of
from ._queries import resumable as resumable
from ._queries import root_of as root_of
from ._queries import running_subagents as running_subagents
from ._queries import tree_of as tree_of
from ._restart import LOST as LOST
from ._restart import Restart as Restart
from ._restart import restart as restart
from ._state import NOTHING as NOTHING
from ._state import Call as Call
from ._state import CallbackPhase as CallbackPhase
from ._state import CallbackState as CallbackState
from ._state import CallState as CallState
from ._state import Facts as Facts
from ._state import SessionMachine as SessionMachine
from ._state import Sessions as Sessions
from ._state import StopCause as StopCause
from ._state import ToolStep as ToolStep
from ._state import TurnMachine as TurnMachine
from ._state import adding as adding
from ._state import apply as apply
from ._state import as_step as as_step
from ._state import evolve as evolve
from ._state import hidden_from_model as hidden_from_model
from ._state import own as own
from ._state import own_list as own_list
from ._state import without as without
from ._steps import begin_model_step as begin_model_step
from ._steps import begin_tool_step as begin_tool_step
from ._steps import capability_note as capability_note
from ._steps import completed as completed
from ._steps import end_tool_step as end_tool_step
from ._steps import error_result as error_result
from ._steps import model_replied as model_replied
from ._steps import note_capability as note_capability
from ._steps import text_streamed as text_streamed
from ._steps import update_call as update_call
from ._transitions import Occupied as Occupied
from ._transitions import Started as Started
from ._transitions import cancel as cancel
from ._transitions import check_open as check_open
from ._transitions import end_turn as end_turn
from ._transitions import failed as failed
from ._transitions import fingerprint as fingerprint
from ._transitions import import_history as import_history
from ._transitions import interrupted as interrupted
from ._transitions import keyed_turn as keyed_turn
from ._transitions import new_session as new_session
from ._transitions import start_subagent as start_subagent
from ._transitions import start_turn as start_turn
from ._transitions import steer as steer
from ._transitions import stop as stop
