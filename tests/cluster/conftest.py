"""Fixtures of the cluster tests: several actor hosts in one trio process, one real Postgres.

``async with hosts(n, **options) as [a, b, ...]:`` opens ``n`` hosts in
cluster mode, each on its own data folder (``tmp_path/host-<i>``) with its
own host id ``h<i>`` and advertised URL ``http://h<i>``. Leases are
short (``lease_s=1.5`` unless given) so failover tests take seconds. New
Postgres connections get :data:`CONNECT_TIMEOUT_S` (unless given), not the
statement timeout (a quarter of that lease): on a loaded 2-core machine a
backend can take longer than 0.375 s to start, and no test here is about
how fast a connection opens (Postgres stopped refuses at once; the
partition test makes its own cut-off host).
"""

from __future__ import annotations

from contextlib import AsyncExitStack, asynccontextmanager

import psycopg
import pytest

from runtime.host import open_host
from runtime.host.cluster import ClusterOptions

DEFAULT_LEASE_S = 1.5
#: Seconds a new Postgres connection may take (see the module docstring).
CONNECT_TIMEOUT_S = 2.0


@pytest.fixture
def hosts(pg_empty_dsn, tmp_path):
    """``async with hosts(n, **options) as [host, ...]:`` -- n hosts on the test's database."""

    @asynccontextmanager
    async def open_hosts(n: int, *, first: int = 0, idle_timeout_s: float | None = None, **options):
        options.setdefault("lease_s", DEFAULT_LEASE_S)
        options.setdefault("connect_timeout_s", CONNECT_TIMEOUT_S)
        async with AsyncExitStack() as stack:
            made = []
            for i in range(first, first + n):
                cluster = ClusterOptions(pg_empty_dsn, f"http://h{i}", host_id=f"h{i}", **options)
                made.append(await stack.enter_async_context(
                    open_host(tmp_path / f"host-{i}", idle_timeout_s=idle_timeout_s, cluster=cluster)))
            yield made

    return open_hosts


@pytest.fixture
def second_dsn(pg_server):
    """A second empty database on the fixture's server, for a cluster on two databases (with ``pg_empty_dsn``)."""
    name = pg_server.create_database("template0")
    yield pg_server.dsn(name)
    if pg_server.is_running():
        pg_server.drop_database(name)


@pytest.fixture
def pg(pg_empty_dsn):
    """Run one statement on the cluster database (autocommit); rows as tuples."""

    def run(query: str, *params):
        with psycopg.connect(pg_empty_dsn, autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    return run
