"""One behaviour suite, two storages: the ``storage`` fixture on SQLite or on Postgres.

A test module opts in with ``pytestmark = pytest.mark.both_storages``: every
test of it that uses the ``storage`` fixture (directly, or through
``recording_agent`` or a fixture of its own) then runs twice, ids
``[sqlite]`` and ``[postgres]``. ``storage`` is

* ``sqlite`` -- a real actor file (:class:`storage.SqlStorage` on
  ``tmp_path/actor.sqlite3``), as before;
* ``postgres`` -- a :class:`PgTestStorage`: a real
  :class:`storage.postgres.PostgresStorage` on the throwaway server
  (``tests/support/postgres.py``), where a Session and a SessionManager
  auto-wire everything the file would hold.

A test that inspects what only SQLite has (FTS5 tables, its transactions,
file limits) says so with ``@pytest.mark.sqlite_only("reason")`` and runs
once. :func:`reopen` gives the storage a woken actor (or a restarted
process) would see: the file closed and opened again, or a new
``PostgresStorage`` on the same database.

Postgres isolation: one database (from the schema template) serves the
whole test session over one connection; each test starts with every table
emptied (``DELETE``: ~0.5 ms, against ~0.45 s for a fresh database).
"""

from __future__ import annotations

import contextlib
import datetime
import re
from collections.abc import Iterator
from typing import Any

import pytest

from storage import SqlStorage
from storage.messages import TEXT_OF_CONTENT
from storage.postgres import PostgresStorage
from storage.postgres.connection import _lock_for

#: The two storages, as parameter ids.
STORAGES = ("sqlite", "postgres")

#: Every table a test may write (emptied before each Postgres test).
TABLES = (
    "assistant_messages",
    "assistant_compactions",
    "assistant_config",
    "cf_agents_context_blocks",
    "cf_agents_search_entries",
    "assistant_sessions",
    "durable_sessions_catalog",
)

def to_postgres_sql(query: str) -> str:
    """SQLite-flavoured test SQL for psycopg: ``?`` placeholders -> ``%s``, ``%`` -> ``%%``.

    Raises:
        ValueError: numbered placeholders (``?1``), which only SQLite reads.
    """
    if re.search(r"\?\d", query):
        raise ValueError("numbered placeholders are SQLite only")
    return query.replace("%", "%%").replace("?", "%s")


def _sqlite_value(value: Any) -> Any:
    """A timestamp as the SQLite file stores it (UTC ``YYYY-MM-DD HH:MM:SS.SSS``); else ``value``."""
    if isinstance(value, datetime.datetime):
        utc = value.astimezone(datetime.timezone.utc)
        return f"{utc:%Y-%m-%d %H:%M:%S}.{utc.microsecond // 1000:03d}"
    return value


class PgTestStorage(PostgresStorage):
    """A :class:`PostgresStorage` with the synchronous helpers tests use on a ``SqlStorage``.

    ``sql``, ``scalar`` and ``exec`` run test SQL (``?`` placeholders) on the
    same connection, outside any provider call, and give timestamps as the
    SQLite file's text; ``close`` is a no-op (the connection belongs to the
    fixture). ``kind`` is ``"postgres"``.
    """

    kind = "postgres"

    def _run(self, query: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        from psycopg.rows import dict_row

        with _lock_for(self.conn), self.conn.cursor(row_factory=dict_row) as cur:
            if params:
                cur.execute(to_postgres_sql(query), params)
            else:
                cur.execute(query.encode())  # as written: no placeholders, % is a plain character
            rows = cur.fetchall() if cur.description is not None else []
        return [{key: _sqlite_value(value) for key, value in row.items()} for row in rows]

    def sql(self, query: str, *params: Any) -> list[dict[str, Any]]:
        return self._run(query, params)

    def exec(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        return [tuple(row.values()) for row in self._run(query, params)]

    def scalar(self, query: str, *params: Any) -> Any:
        rows = self._run(query, params)
        return next(iter(rows[0].values())) if rows else None

    def close(self) -> None:
        """Nothing to close: the connection is the fixture's."""


def kind_of(storage: Any) -> str:
    """``"sqlite"`` or ``"postgres"``."""
    return "sqlite" if isinstance(storage, SqlStorage) else "postgres"


def _has_table(storage: SqlStorage, table: str) -> bool:
    return bool(storage.scalar("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?", table))


def row_count(storage: Any, table: str) -> int:
    """Rows of ``table``; on SQLite a table made on first use (``storage.schema.ON_FIRST_USE``) that
    does not exist holds none."""
    if isinstance(storage, SqlStorage) and not _has_table(storage, table):
        return 0
    return int(storage.scalar(f"SELECT count(*) FROM {table}"))


def index_rows(storage: Any) -> list[dict[str, Any]]:
    """The messages indexed by their text, oldest first: ``{id, session_id, role, content}``.

    SQLite: the messages with a row in ``assistant_fts`` (a message without
    text parts has none), with the text that row indexes; Postgres: messages
    whose searched text (``text_content``) is not empty -- the search columns
    live in the message row there.
    """
    if isinstance(storage, SqlStorage):
        if not _has_table(storage, "assistant_fts"):
            return []  # made by the file's first message write (storage.schema.ON_FIRST_USE)
        return storage.sql(
            f"SELECT m.id, m.session_id, m.role, {TEXT_OF_CONTENT} AS content FROM assistant_fts AS f "
            "JOIN assistant_messages AS m ON m.seq = f.rowid ORDER BY f.rowid"
        )
    return storage.sql(
        "SELECT id, session_id, role, text_content AS content FROM assistant_messages "
        "WHERE text_content <> '' ORDER BY seq"
    )


def write_counts(storage: Any) -> dict[str, int]:
    """Rows of everything a message write touches: messages, the text index, the CJK index, config rows."""
    if isinstance(storage, SqlStorage):
        tables = ("assistant_messages", "assistant_fts", "assistant_fts_cjk", "assistant_config")
        # a table made on first use (storage.schema.ON_FIRST_USE) that does not exist holds no row
        return {table: storage.scalar(f"SELECT count(*) FROM {table}") if _has_table(storage, table) else 0
                for table in tables}
    return {
        "assistant_messages": storage.scalar("SELECT count(*) FROM assistant_messages"),
        "text index": len(index_rows(storage)),
        "cjk index": storage.scalar("SELECT count(*) FROM assistant_messages WHERE cjk_content <> ''"),
        "assistant_config": storage.scalar("SELECT count(*) FROM assistant_config"),
    }


@contextlib.contextmanager
def refusing_inserts(storage: Any, table: str, message: str, when: str = "TRUE") -> Iterator[type[Exception]]:
    """A trigger refusing inserts into ``table`` (where ``when``, SQL on ``NEW``) with ``message``.

    Yields the exception class a write then raises (apsw's on SQLite, our
    :class:`~common.errors.DatabaseError` on Postgres); the trigger is
    dropped on exit (the Postgres database is shared by the whole run).
    """
    if isinstance(storage, SqlStorage):
        import apsw

        from storage.schema import ON_FIRST_USE, create_on_first_use

        if table in ON_FIRST_USE:  # a trigger needs its table, made here as its first write would
            create_on_first_use(storage.connection, table)
        storage.exec(f"CREATE TRIGGER refuse BEFORE INSERT ON {table} WHEN {when} "
                     f"BEGIN SELECT RAISE(ABORT, '{message}'); END")
        try:
            yield apsw.ConstraintError
        finally:
            storage.exec("DROP TRIGGER IF EXISTS refuse")
        return
    from common.errors import DatabaseError

    storage.exec(f"CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                 f"$$ BEGIN IF {when} THEN RAISE EXCEPTION '{message}'; END IF; RETURN NEW; END $$")
    storage.exec(f"CREATE TRIGGER refuse BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION refuse()")
    try:
        yield DatabaseError
    finally:
        storage.exec(f"DROP TRIGGER IF EXISTS refuse ON {table}")
        storage.exec("DROP FUNCTION IF EXISTS refuse()")


def reopen(storage: Any) -> Any:
    """The same data seen afresh: the SQLite file closed and opened again, or a new Postgres handle."""
    if isinstance(storage, SqlStorage):
        storage.close()
        return SqlStorage.open(storage.path)
    return PgTestStorage(storage.conn)


# -- fixtures (registered in tests/conftest.py) -----------------------------------------------


class _SharedDatabase:
    """One database for the whole test session and a connection to it, opened again when a test
    restarted the server (tests/storage/test_postgres_failures.py does)."""

    def __init__(self, server: Any) -> None:
        from tests.support.postgres import SCHEMA_TEMPLATE

        self.server = server
        self.name = server.create_database(SCHEMA_TEMPLATE)
        self.conn: Any = None

    def connection(self) -> Any:
        import psycopg

        if self.conn is not None and not self.conn.closed:
            try:
                with _lock_for(self.conn):
                    self.conn.execute("SELECT 1")
                return self.conn
            except psycopg.OperationalError:
                self.conn.close()
        self.conn = psycopg.connect(self.server.dsn(self.name), autocommit=True)
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.server.is_running():
            self.server.drop_database(self.name)


@pytest.fixture(scope="session")
def pg_shared_db(pg_server):
    """One database holding the schema for the whole test session (see :class:`_SharedDatabase`)."""
    shared = _SharedDatabase(pg_server)
    yield shared
    shared.close()


@pytest.fixture
def pg_storage(pg_shared_db):
    """A :class:`PgTestStorage` on an emptied database."""
    conn = pg_shared_db.connection()
    with _lock_for(conn):
        conn.execute(";".join(f"DELETE FROM {table}" for table in TABLES))
    return PgTestStorage(conn)


def parametrize_storages(metafunc: pytest.Metafunc) -> None:
    """``pytest_generate_tests`` part: run ``both_storages`` tests on each storage."""
    if "storage" not in metafunc.fixturenames or metafunc.definition.get_closest_marker("both_storages") is None:
        return
    if metafunc.definition.get_closest_marker("sqlite_only") is not None:
        return
    metafunc.parametrize("storage", STORAGES, indirect=True)
