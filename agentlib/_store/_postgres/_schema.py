"""The PostgreSQL store's tables: their versions, the migrations that bring a database up to
date under an advisory lock (several processes opening one database at once migrate it
once), and the dialect its SQL is written in (see ``_sql``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..._data._errors import StoreSchemaError
from .._sql import Dialect

if TYPE_CHECKING:
    import psycopg

__all__ = ["MIGRATIONS", "dialect", "migrate"]

#: The schema's versions, in order: each one's statements (``{schema}`` is the schema's
#: name). A database at a later version than the last is refused; one at an earlier version
#: gets the migrations after it, in one transaction.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE {schema}.sessions (
            session_id TEXT PRIMARY KEY,
            made BIGSERIAL NOT NULL,
            agent TEXT NOT NULL,
            parent_id TEXT,
            parent_turn_id TEXT,
            idempotency_key TEXT UNIQUE,
            inputs TEXT NOT NULL,
            terminated BOOLEAN NOT NULL DEFAULT FALSE,
            first_seq BIGINT NOT NULL DEFAULT 1,
            last_seq BIGINT NOT NULL DEFAULT 0,
            last_idx BIGINT NOT NULL DEFAULT -1,
            lease_owner TEXT,
            lease_until DOUBLE PRECISION,
            lease_epoch BIGINT NOT NULL DEFAULT 0,
            lease_host TEXT,
            lease_pid BIGINT,
            lease_started BIGINT
        )""",
        "CREATE INDEX sessions_by_parent ON {schema}.sessions (parent_id, made)",
        """CREATE TABLE {schema}.events (
            session_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            type TEXT NOT NULL,
            turn_id TEXT,
            id TEXT,
            data TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        )""",
        """CREATE TABLE {schema}.entries (
            session_id TEXT NOT NULL,
            idx BIGINT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (session_id, idx)
        )""",
        """CREATE TABLE {schema}.turns (
            session_id TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            first_seq BIGINT NOT NULL,
            output_type TEXT,
            record TEXT,
            step TEXT,
            PRIMARY KEY (session_id, turn_id)
        )""",
        """CREATE TABLE {schema}.steers (
            n BIGSERIAL PRIMARY KEY,
            session_id TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            data TEXT NOT NULL
        )""",
        "CREATE INDEX steers_by_session ON {schema}.steers (session_id, n)",
        """CREATE TABLE {schema}.callbacks (
            n BIGSERIAL NOT NULL,
            session_id TEXT NOT NULL,
            callback_id TEXT NOT NULL,
            callback TEXT NOT NULL,
            state TEXT NOT NULL,
            answer TEXT,
            error TEXT,
            PRIMARY KEY (session_id, callback_id)
        )""",
        """CREATE TABLE {schema}.keys (
            session_id TEXT NOT NULL,
            key TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            PRIMARY KEY (session_id, key)
        )""",
    ),
    (  # 2: requests to the runtime that holds a session (times on the database's clock)
        """CREATE TABLE {schema}.requests (
            request_id BIGSERIAL PRIMARY KEY,
            session_id TEXT NOT NULL,
            body TEXT NOT NULL,
            reply TEXT,
            made TIMESTAMPTZ NOT NULL DEFAULT now(),
            replied TIMESTAMPTZ
        )""",
        "CREATE INDEX requests_waiting ON {schema}.requests (session_id) WHERE reply IS NULL",
    ),
)

#: The key of the advisory lock under which a store migrates its schema.
_MIGRATING = 0x6167656E746C6962  # "agentlib"


def dialect(schema: str) -> Dialect:
    """The dialect of the store's SQL, its tables in ``schema``."""
    return Dialect(
        placeholder="%s",
        tables=f"{schema}.",
        greatest="greatest",
        least="least",
        written="n",
        sessions_written="made",
        lease_epoch=True,
        claims=True,
        kept_in="database",
    )


def migrate(db: psycopg.Connection[Any], schema: str, where: str) -> None:
    """Create the schema's tables, or bring them up to date, in one transaction.

    Raises:
        StoreSchemaError: A newer agentlib wrote the schema.
    """

    def sql(statement: str) -> str:
        return statement.replace("{schema}", schema)

    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATING,))
        db.execute(sql("CREATE SCHEMA IF NOT EXISTS {schema}"))
        db.execute(
            sql("CREATE TABLE IF NOT EXISTS {schema}.schema_version (version INTEGER NOT NULL)")
        )
        row = db.execute(sql("SELECT max(version) FROM {schema}.schema_version"))
        version = (row.fetchone() or (None,))[0] or 0
        if version > len(MIGRATIONS):
            raise StoreSchemaError(
                f"the schema {schema} of {where} is at version {version}, "
                f"written by a newer agentlib; this one reads up to version "
                f"{len(MIGRATIONS)}: upgrade agentlib to open it"
            )
        for number, statements in enumerate(MIGRATIONS[version:], version + 1):
            for statement in statements:
                db.execute(sql(statement))
            db.execute(sql("INSERT INTO {schema}.schema_version (version) VALUES (%s)"), (number,))
