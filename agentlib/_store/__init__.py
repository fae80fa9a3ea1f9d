"""Stores: where a runtime keeps its sessions."""

from __future__ import annotations

import urllib.parse

from ._base import Store
from ._memory import MemoryStore
from ._postgres import PostgresStore
from ._sqlite import SQLiteStore

__all__ = ["MemoryStore", "PostgresStore", "SQLiteStore", "Store", "open_store"]

_SQLITE = "sqlite:///"
_POSTGRES = ("postgresql://", "postgres://")


def open_store(store: str | Store | None) -> Store:
    """The store ``store`` names, not opened yet: the runtime opens it.

    Args:
        store: ``None`` or ``":memory:"`` (a :class:`MemoryStore` whose sessions end with
            their runtime), ``"sqlite:///path.db"`` (``"sqlite:////absolute/path.db"``: a
            :class:`SQLiteStore`), ``"postgresql://host/database"`` (a
            :class:`PostgresStore`, with the extra ``agentlib[postgres]``; ``?schema=name``
            picks the schema its tables live in, ``agentlib`` by default), or a
            :class:`Store`, given back as it is.

    Raises:
        ValueError: ``store`` names no kind of store agentlib knows.
    """
    if isinstance(store, Store):
        return store
    if store is None or store == ":memory:":
        return MemoryStore(durable=False)
    if isinstance(store, str) and store.startswith(_SQLITE) and len(store) > len(_SQLITE):
        return SQLiteStore(store[len(_SQLITE) :])
    if isinstance(store, str) and store.startswith(_POSTGRES):
        return _postgres_store(store)
    shown = repr(store) if not isinstance(store, str) or "@" not in store else "that URL"
    raise ValueError(
        f"unknown store {shown}: use ':memory:', 'sqlite:///path/to/file.db', "
        "'postgresql://host/database', or a Store"
    )


def _postgres_store(url: str) -> PostgresStore:
    """The PostgreSQL store of ``url``, whose ``schema`` parameter (psycopg knows none) names
    the schema of its tables."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    rest = urllib.parse.urlencode([(key, value) for key, value in query if key != "schema"])
    conninfo = urllib.parse.urlunsplit(parts._replace(query=rest))
    if not schemas:
        return PostgresStore(conninfo)
    return PostgresStore(conninfo, schema=schemas[-1])
