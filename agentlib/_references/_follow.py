"""A session's events as its readers follow them, from any backend: pages of stored events
(the backend's one source: the live log, a store follower, a server), replayed from a
cursor, then waited for until the session (or the turn) ends."""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from .._data._events import Event
from .._data._records import TurnState
from .._engine._log import cursor_of

if TYPE_CHECKING:
    from ._backends._base import Backend

__all__ = ["PAGE", "follow_events"]

#: The most events a page brings.
PAGE = 1000


async def follow_events(
    backend: Backend,
    session_id: str,
    after: TurnState[Any] | str | None,
    turn_id: str | None = None,
) -> AsyncGenerator[Event, None]:
    """The session's events (one turn's, with ``turn_id``) after ``after`` (a record or a
    cursor), or from its start; then each as it comes, until no more will.

    Raises:
        InvalidCursorError: ``after`` belongs to another session or is not a cursor.
        TurnNotFoundError: The session has no such turn.
        ObservationLost: The events after ``after`` were pruned: resume from its cursor.
    """
    cursor = cursor_of(after, session_id)
    with contextlib.closing(backend.events(session_id, cursor, turn_id)) as reader:
        while not reader.ended:
            for event in await reader.page(PAGE, math.inf):
                yield event
