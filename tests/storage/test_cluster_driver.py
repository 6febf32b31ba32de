"""The cluster's Postgres driver under trio: psycopg's private hooks, deadlines, cancellation, lost servers.

These tests are the tripwire for a psycopg upgrade: the driver overrides
``AsyncConnection.wait`` and drives ``_connect_gen`` (storage/cluster/driver.py).
"""

from __future__ import annotations

import time

import psycopg
import pytest
import trio

from common.errors import DatabaseError, StorageUnavailableError
from storage.cluster.driver import PgConnection, PgPool


async def connect(dsn: str, **kwargs) -> PgConnection:
    return await PgConnection.connect(dsn, timeout_s=kwargs.get("timeout_s", 5), statement_timeout_s=kwargs.get(
        "statement_timeout_s", 5))


def test_psycopg_is_the_pinned_series_with_the_hooks_the_driver_uses():
    major, minor = (int(part) for part in psycopg.__version__.split(".")[:2])
    assert (major, minor) == (3, 3), f"storage/cluster/driver.py is written against psycopg 3.3, found {psycopg.__version__}"
    assert callable(getattr(psycopg.AsyncConnection, "_connect_gen", None))
    assert callable(getattr(psycopg.AsyncConnection, "wait", None))


async def test_connect_run_statements_and_parameters(pg_empty_dsn):
    conn = await connect(pg_empty_dsn)
    try:
        assert await conn.execute("SELECT 1 + %(x)s, %(b)s::bytea", {"x": 41, "b": b"\x00\xff"}) == [(42, b"\x00\xff")]
        assert await conn.execute("CREATE TABLE t (a int)") == []
        await conn.execute("INSERT INTO t SELECT generate_series(1, 5000)")
        rows = await conn.execute("SELECT a FROM t ORDER BY a", prepare=True)
        assert len(rows) == 5000 and rows[-1] == (5000,)
        big = bytes(range(256)) * 40_000  # 10 MB: psycopg waits for write readiness several times
        assert await conn.execute("SELECT length(%s::bytea)", [big]) == [(len(big),)]
        assert await conn.execute("SHOW statement_timeout") == [("5s",)]
    finally:
        await conn.close()
    assert conn.broken


async def test_hot_statements_are_prepared_once_and_others_never(pg_empty_dsn):
    """``prepare=True`` makes a server-side prepared statement (parsed and planned once); without it
    nothing is prepared, however often it runs."""
    conn = await connect(pg_empty_dsn)
    try:
        for i in range(3):
            assert await conn.execute("SELECT %(x)s::int + 1", {"x": i}, prepare=True) == [(i + 1,)]
        for i in range(10):
            assert await conn.execute("SELECT %(x)s::int + 2", {"x": i}) == [(i + 2,)]
        assert await conn.execute("SELECT statement FROM pg_prepared_statements") == [("SELECT $1::int + 1",)]
    finally:
        await conn.close()


async def test_a_refused_statement_is_a_database_error_and_the_connection_stays_usable(pg_empty_dsn):
    conn = await connect(pg_empty_dsn)
    with pytest.raises(DatabaseError, match="no_such_table"):
        await conn.execute("SELECT * FROM no_such_table")
    assert await conn.execute("SELECT 2") == [(2,)]
    await conn.close()


async def test_a_deadline_mid_statement_closes_the_connection_and_says_unavailable(pg_empty_dsn):
    conn = await connect(pg_empty_dsn)
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError, match="did not answer in time"):
        await conn.execute("SELECT pg_sleep(5)", timeout_s=0.2)
    assert time.monotonic() - started < 1.5
    assert conn.broken
    with pytest.raises(StorageUnavailableError):
        await conn.execute("SELECT 1")


async def test_cancelling_the_caller_closes_the_connection(pg_empty_dsn):
    conn = await connect(pg_empty_dsn)
    with trio.move_on_after(0.2) as scope:
        await conn.execute("SELECT pg_sleep(5)")
    assert scope.cancelled_caught and conn.broken


async def test_the_server_side_statement_timeout_ends_what_the_client_abandoned(pg_empty_dsn):
    conn = await connect(pg_empty_dsn, statement_timeout_s=0.3)
    with pytest.raises(StorageUnavailableError, match="canceling statement due to statement timeout"):
        await conn.execute("SELECT pg_sleep(3)", timeout_s=5)
    assert await conn.execute("SELECT 4") == [(4,)]  # the server ended it; the connection is fine
    await conn.close()


async def test_nothing_listening_is_unavailable_fast():
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError, match="connecting"):
        await PgConnection.connect("host=127.0.0.1 port=1 user=x dbname=x", timeout_s=3, statement_timeout_s=1)
    assert time.monotonic() - started < 2


async def test_pool_reconnects_after_a_server_restart(pg_server, pg_empty_dsn):
    pool = PgPool(pg_empty_dsn, size=2, connect_timeout_s=5, statement_timeout_s=5)
    assert await pool.execute("SELECT 1") == [(1,)]
    async with pool.connection() as conn:
        idle = conn
    pg_server.restart("immediate")
    assert await pool.execute("SELECT 3") == [(3,)]  # the idle connection died: one more try on a new one
    assert idle.broken
    pg_server.stop("immediate")
    try:
        with pytest.raises(StorageUnavailableError, match="connecting"):
            await pool.execute("SELECT 1")
    finally:
        pg_server.start()
    assert await pool.execute("SELECT 4") == [(4,)]
    pool.close()


async def test_pool_waits_for_a_free_connection_then_gives_up(pg_empty_dsn):
    pool = PgPool(pg_empty_dsn, size=1, connect_timeout_s=5, statement_timeout_s=0.3)
    async with pool.connection():
        with pytest.raises(StorageUnavailableError, match="no Postgres connection free"):
            async with pool.connection():
                pass
    pool.close()
