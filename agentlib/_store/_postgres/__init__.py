"""The PostgreSQL store: sessions in one database, shared by several runtime processes.

Writes queue up in the runtime's thread; the writer task commits everything queued in one
transaction, then acknowledges the group, as the SQLite store does (``_writer``: fenced by
the leases, notified, tried again after failures that wrote nothing). The tables live in a
schema of their own (``agentlib`` by default), created and brought up to date by versioned
migrations when the store opens (``_schema``). The database is reached through a pool of
connections, each used by one worker thread at a time (``_database``).

Several runtimes share the database: a reader of a session that another runtime holds
follows its events as they are committed there (``_notifications``: LISTEN/NOTIFY, and a
poll); a runtime settles a callback another holds open (``_claims``), and asks the runtime
that holds a session to change it (``_mailbox``). A lease whose holder is a process of this
host that has ended is taken at once; any other, once it expires (``_store``).
"""

from ._notifications import POLL_SECONDS as POLL_SECONDS
from ._schema import MIGRATIONS as MIGRATIONS
from ._store import PostgresStore as PostgresStore

__all__ = ["MIGRATIONS", "POLL_SECONDS", "PostgresStore"]
