"""A host's Postgres: one connection pool, the schema, and a :class:`PostgresStorage` on them.

:func:`open_postgres_storage` is what ``durable-sessions serve --postgres
URL`` runs: it opens a ``psycopg_pool.ConnectionPool`` (its workers are
threads; every call still runs on a worker thread, see
:mod:`storage.postgres.connection`), waits until Postgres answers, creates
or completes the schema, and yields a :class:`PostgresStorage` whose calls
never wait longer than ``timeout_s``. Every actor of the host shares it.

Timeouts, so that a database that is down or stalled gives
:class:`~common.errors.StorageUnavailableError` (503) and never a hang:

* ``connect_timeout`` -- opening a connection;
* the pool's ``timeout`` -- waiting for a free connection;
* ``statement_timeout`` (server side) -- one statement;
* TCP keepalives and ``tcp_user_timeout`` -- a peer that vanished;
* the storage's call deadline (twice ``timeout_s``) -- anything
  else, e.g. a server process stopped with SIGSTOP, which still accepts
  TCP but never answers.

Each connection is checked when it is taken from the pool
(``ConnectionPool.check_connection``: one empty round trip), so after a
Postgres restart the first call gets a fresh connection instead of an error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from common.errors import StorageUnavailableError

from .schema import create_schema
from .storage import PostgresStorage

#: Defaults of the ``[storage]`` settings.
DEFAULT_POOL_SIZE = 10
DEFAULT_TIMEOUT_S = 10.0
#: The call deadline in units of ``timeout_s`` (a call may wait for a connection, then run).
DEADLINE_FACTOR = 2


def describe_dsn(dsn: str) -> str:
    """``user@host:port/dbname`` of a connection string, without its password (for logs)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - a malformed string is reported by the connection attempt
        return "<unparsable connection string>"
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"{user}{parts.get('host', 'localhost')}{port}/{parts.get('dbname', '')}"


def pool_kwargs(timeout_s: float) -> dict[str, Any]:
    """Connection settings of every pooled connection (see the module docstring)."""
    return {
        "autocommit": True,
        "connect_timeout": max(1, round(timeout_s)),
        "application_name": "durable-sessions",
        "options": f"-c statement_timeout={int(timeout_s * 1000)}",
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": int(timeout_s * 1000),
    }


@asynccontextmanager
async def open_postgres_storage(
    dsn: str, *, pool_size: int = DEFAULT_POOL_SIZE, timeout_s: float = DEFAULT_TIMEOUT_S
) -> AsyncIterator[PostgresStorage]:
    """``async with open_postgres_storage(dsn) as storage:`` -- a pooled, schema-ready Postgres.

    Args:
        dsn: a libpq connection string or ``postgresql://`` URL.
        pool_size: most connections open at once (also the most concurrent calls).
        timeout_s: seconds for connecting, for waiting on a connection and
            for one statement (see the module docstring).

    Raises:
        StorageUnavailableError: Postgres does not answer within ``timeout_s``.
        DatabaseError: the schema cannot be created (rights, encoding, a newer schema).
        ValueError: a bad ``pool_size`` or ``timeout_s``.
    """
    from psycopg_pool import ConnectionPool, PoolTimeout

    if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
        raise ValueError(f"pool_size must be a positive integer, not {pool_size!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, not {timeout_s!r}")
    pool = ConnectionPool(
        dsn, min_size=1, max_size=pool_size, timeout=timeout_s, open=False, name="durable-sessions",
        kwargs=pool_kwargs(timeout_s), check=ConnectionPool.check_connection,
    )
    try:
        try:
            await anyio.to_thread.run_sync(lambda: pool.open(wait=True, timeout=timeout_s))
        except PoolTimeout:
            raise StorageUnavailableError(
                f"Postgres at {describe_dsn(dsn)} did not answer within {timeout_s:g} s"
            ) from None
        storage = PostgresStorage(pool, call_timeout_s=timeout_s * DEADLINE_FACTOR)
        await create_schema(storage)
        yield storage
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(lambda: pool.close(timeout=timeout_s))
