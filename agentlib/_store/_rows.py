"""How the SQLite store lays an event out in a row, and reads it back.

A row holds the event's type and turn in columns, and its other fields as JSON. The session
and the seq are the row's key, and the event's id is their cursor: it is written only when it
is something else.

An event carrying one entry (``turn_started``, ``entry_added``, ``entry_completed``) holds
that entry's JSON alone, serialized once per entry and shared by the events and history rows
holding it; reading a log back, equal JSON is decoded once. An entry is thus parsed about once
however many events carry it, which is most of a log's reading. Its turn column is NULL for
the entry's own turn, and "" for none.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from .._data._convert import unstructure
from .._data._entries import Entry
from .._data._events import EntryAdded, EntryCompleted, Event, TurnStarted
from ._decode import reader

__all__ = ["EventRows"]

#: Event types carrying a single entry, and the field holding it.
_CARRIERS: dict[str, str] = {
    TurnStarted.type: "message",
    EntryAdded.type: "entry",
    EntryCompleted.type: "entry",
}
_CARRIER_CLASSES: dict[str, tuple[type[Any], str]] = {
    cls.type: (cls, _CARRIERS[cls.type]) for cls in (TurnStarted, EntryAdded, EntryCompleted)
}
for _cls, _field in _CARRIER_CLASSES.values():  # the layout relies on it
    _fields = [field.name for field in attrs.fields(_cls)]
    assert _fields == ["id", "session_id", "turn_id", _field], _cls
    assert not hasattr(_cls, "__attrs_post_init__"), _cls

_new = object.__new__
_put = object.__setattr__

#: How many distinct entries' JSON a writer or a reader remembers.
_REMEMBERED = 4096


def _cursor(session_id: str, seq: int) -> str:
    return f"{session_id}:{seq:012d}"


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class EventRows:
    """Turns events into rows and rows into events, remembering the entries seen last.

    One instance serves one thread: the writer's, or one read.
    """

    def __init__(self) -> None:
        self._written: dict[str, tuple[Entry, str]] = {}  # entry id -> (entry, its JSON)
        self._read: dict[str, Entry] = {}  # an entry's JSON -> the entry
        self._read_entry: Callable[[Any], Any] = reader(Entry)
        self._read_event: Callable[[Any], Any] = reader(Event)
        self._scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # json.loads's parser

    def _parse(self, text: str) -> Any:
        """``json.loads(text)`` for JSON this store wrote: half the cost, for small values."""
        try:
            value, end = self._scan(text, 0)
        except StopIteration:
            end = -1
        if end != len(text):  # not one JSON value alone: json.loads says what is wrong
            return json.loads(text)
        return value

    # -- writing ---------------------------------------------------------------------------

    def entry_json(self, entry: Entry) -> str:
        """The JSON of ``entry``, written once however many rows hold it."""
        known = self._written.get(entry.id)
        if known is not None and known[0] is entry:
            return known[1]
        if len(self._written) >= _REMEMBERED:
            self._written.clear()
        text = _dump(unstructure(entry))
        self._written[entry.id] = (entry, text)
        return text

    def row(self, session_id: str, seq: int, event: Event) -> tuple[Any, ...]:
        """The columns (session_id, seq, type, turn_id, id, data) holding ``event``."""
        event_id = None if event.id == _cursor(session_id, seq) else event.id
        kind: str = getattr(event, "type", "")  # an UnknownEvent has none
        field = _CARRIERS.get(kind)
        if field is not None:
            entry = getattr(event, field)
            turn_id = None if event.turn_id == entry.turn_id else event.turn_id or ""
            return (session_id, seq, kind, turn_id, event_id, self.entry_json(entry))
        fields = unstructure(event)
        kind = fields.pop("type")
        for key in ("id", "session_id", "turn_id"):
            fields.pop(key, None)
        return (session_id, seq, kind, event.turn_id, event_id, _dump(fields))

    # -- reading ---------------------------------------------------------------------------

    def entry(self, text: str) -> Entry:
        """The entry written as ``text``; equal texts give the same entry."""
        entry = self._read.get(text)
        if entry is None:
            entry = self._read_entry(self._parse(text))
            if len(self._read) >= _REMEMBERED:
                self._read.clear()
            self._read[text] = entry
        return entry

    def events(
        self, session_id: str, rows: Iterable[tuple[int, str, str | None, str | None, str]]
    ) -> list[Event]:
        """The events the rows (seq, type, turn_id, id, data) of ``session_id`` hold."""
        carriers = _CARRIER_CLASSES
        read_entry = self.entry
        events: list[Event] = []
        append = events.append
        prefix = session_id + ":"
        for seq, kind, turn_id, event_id, data in rows:
            if event_id is None:
                event_id = prefix + str(seq).zfill(12)
            carrier = carriers.get(kind)
            if carrier is not None:
                # Set field by field, as the class's __init__ would: the store wrote a valid
                # event.
                cls, field = carrier
                entry = read_entry(data)
                event = _new(cls)
                _put(event, "id", event_id)
                _put(event, "session_id", session_id)
                _put(event, "turn_id", entry.turn_id if turn_id is None else turn_id or None)
                _put(event, field, entry)
                append(event)
                continue
            fields = self._parse(data)
            fields["type"] = kind
            fields["id"] = event_id
            fields["session_id"] = session_id
            fields["turn_id"] = turn_id
            append(self._read_event(fields))
        return events
