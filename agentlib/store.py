"""The store contract: what a store implements, and the stores agentlib ships.

A runtime keeps its sessions in a :class:`Store`: it writes op rows (:data:`Op`) in order,
waits for them to be durable, reads whole sessions back, and leases the sessions it runs.
:class:`Store`'s docstrings say what a store must do; :mod:`agentlib.testing.store_contract`
is the suite a store passes; the guide "Writing a store" walks through one.

:func:`open_store` gives the store a URL names; :class:`MemoryStore`, :class:`SQLiteStore`
and :class:`PostgresStore` are the stores behind ``":memory:"``, ``"sqlite:///PATH"`` and
``"postgresql://..."``. :class:`Holder`,
:func:`this_process` and :func:`gone` tell whether the process holding a lease has ended, for
a store that takes a dead process's leases at once.
"""

from ._data._errors import LeaseLost as LeaseLost
from ._data._errors import LeaseRefused as LeaseRefused
from ._data._errors import StoreError as StoreError
from ._data._errors import StoreSchemaError as StoreSchemaError
from ._store import MemoryStore as MemoryStore
from ._store import PostgresStore as PostgresStore
from ._store import SQLiteStore as SQLiteStore
from ._store import open_store as open_store
from ._store._base import CallbackRow as CallbackRow
from ._store._base import EntryRow as EntryRow
from ._store._base import EventRow as EventRow
from ._store._base import KeyRow as KeyRow
from ._store._base import Op as Op
from ._store._base import Progress as Progress
from ._store._base import PruneRow as PruneRow
from ._store._base import Request as Request
from ._store._base import SessionRow as SessionRow
from ._store._base import SteerRow as SteerRow
from ._store._base import StepRow as StepRow
from ._store._base import Store as Store
from ._store._base import StoredSession as StoredSession
from ._store._base import TurnRow as TurnRow
from ._store._holder import Holder as Holder
from ._store._holder import gone as gone
from ._store._holder import this_process as this_process

__all__ = [
    "CallbackRow",
    "EntryRow",
    "EventRow",
    "Holder",
    "KeyRow",
    "LeaseLost",
    "LeaseRefused",
    "MemoryStore",
    "Op",
    "PostgresStore",
    "Progress",
    "PruneRow",
    "Request",
    "SQLiteStore",
    "SessionRow",
    "SteerRow",
    "StepRow",
    "Store",
    "StoreError",
    "StoreSchemaError",
    "StoredSession",
    "TurnRow",
    "gone",
    "open_store",
    "this_process",
]


def _set_public_module() -> None:
    # Names shown as `agentlib.store.SessionRow`; those agentlib also exports keep its name.
    # Type hints are resolved first: they are looked up in the defining module's globals.
    import inspect

    import attrs

    import agentlib

    for name in __all__:
        obj = globals()[name]
        if name in agentlib.__all__ or not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if inspect.isclass(obj) and attrs.has(obj):
            attrs.resolve_types(obj)
        obj.__module__ = __name__


_set_public_module()
del _set_public_module
