"""Stores: where a runtime keeps its sessions."""

from __future__ import annotations

from ._base import Store
from ._memory import MemoryStore
from ._sqlite import SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore", "Store", "open_store"]

_SQLITE = "sqlite:///"


def open_store(store: str | Store | None) -> Store:
    """The store ``store`` names, not opened yet: the runtime opens it.

    Args:
        store: ``None`` or ``":memory:"`` (a :class:`MemoryStore` whose sessions end with
            their runtime), ``"sqlite:///path.db"`` (``"sqlite:////absolute/path.db"``: a
            :class:`SQLiteStore`), or a :class:`Store`, given back as it is.

    Raises:
        ValueError: ``store`` names no kind of store agentlib knows.
    """
    if isinstance(store, Store):
        return store
    if store is None or store == ":memory:":
        return MemoryStore(durable=False)
    if isinstance(store, str) and store.startswith(_SQLITE) and len(store) > len(_SQLITE):
        return SQLiteStore(store[len(_SQLITE) :])
    raise ValueError(
        f"unknown store {store!r}: use ':memory:', 'sqlite:///path/to/file.db', or a Store"
    )
