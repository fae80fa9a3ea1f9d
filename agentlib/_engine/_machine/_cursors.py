"""Cursors: where an event stands in its session's log, as a string that sorts like its
position."""

from __future__ import annotations


def format_cursor(session_id: str, seq: int) -> str:
    """The cursor of a session's ``seq``-th event (1-based); strings sort like positions."""
    return f"{session_id}:{seq:012d}"


def seq_of_cursor(cursor: str | None) -> int | None:
    """The seq a cursor names, or None for no cursor."""
    if not cursor:
        return None
    return int(cursor.rpartition(":")[2])
