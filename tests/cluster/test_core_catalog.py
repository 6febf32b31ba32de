"""The cluster catalog (``ds_catalog``) in one process: written with each log entry, fenced, read by any host."""

from __future__ import annotations

import trio

from actors import SessionAgent, SessionConfig
from storage.cluster.schema import CLUSTER_SCHEMA_VERSION, create_cluster_schema
from storage.cluster.driver import PgConnection


def text(i: int, words: str = "hello") -> dict:
    return {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "parts": [{"type": "text", "text": words}]}


async def test_each_write_updates_the_row_in_its_own_statement_and_any_host_reads_it(hosts, pg):
    async with hosts(2) as (a, b):
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        b.bind("sessions", SessionAgent, env=SessionConfig())
        stub = na.get_by_name("trip")
        await stub.append_message(text(0))
        statements = a.cluster.statistics().statements
        for i in range(1, 5):
            await stub.append_message(text(i))
        assert a.cluster.statistics().statements - statements == 4  # no extra round trip
        rows = await b.cluster.catalog_page("sessions", 10)
        assert [(r.actor_hex, r.name, r.messages, r.compactions, r.active) for r in rows] == [
            (stub.id.hex, "trip", 5, 0, True)]
        first = rows[0]
        assert first.created_ms <= first.updated_ms
        await stub.delete_messages(["m4"])
        row = await b.cluster.catalog_get(stub.id)
        assert row is not None and row.messages == 4 and row.updated_ms >= first.updated_ms
        # A read moves nothing.
        await stub.get_history()
        assert await b.cluster.catalog_get(stub.id) == row
        assert pg("SELECT namespace, kind, name, messages FROM ds_catalog") == [("sessions", "session", "trip", 4)]


async def test_counts_stay_exact_after_a_move(hosts, pg):
    async with hosts(2) as (a, b):
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        nb = b.bind("sessions", SessionAgent, env=SessionConfig())
        stub = na.get_by_name("moving")
        for i in range(3):
            await stub.append_message(text(i))
        await a.hibernate(na, stub.id)
        with trio.fail_after(5):
            while pg("SELECT owner FROM ds_actors")[0][0] is not None:
                await trio.sleep(0.01)
        assert (await a.cluster.catalog_page("sessions", 10))[0].active is False
        moved = nb.get(stub.id)
        await moved.append_message(text(3))  # seeded from the rebuilt file, then +1
        assert pg("SELECT messages FROM ds_catalog") == [(4,)]


async def test_paging_and_prefix_walk_the_catalog_once(hosts):
    async with hosts(1) as (a,):
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        names = [f"p-{i}" for i in range(5)] + ["other"]
        for name in names:
            await na.get_by_name(name).append_message(text(0))
        seen, below = [], None
        while True:
            page = await a.cluster.catalog_page("sessions", 2, below, "p-")
            if not page:
                break
            seen += [row.name for row in page]
            below = (page[-1].updated_ms, page[-1].actor_hex)
        assert sorted(seen) == [f"p-{i}" for i in range(5)] and len(seen) == 5


async def test_a_version_1_database_is_upgraded_in_place(pg_empty_dsn, pg):
    conn = await PgConnection.connect(pg_empty_dsn, timeout_s=5, statement_timeout_s=5)
    try:
        await create_cluster_schema(conn)
        pg("DROP TABLE ds_catalog")
        pg("UPDATE ds_cluster_meta SET value = '1' WHERE key = 'schema_version'")
        await create_cluster_schema(conn)
    finally:
        conn.close_nowait()
    assert pg("SELECT value FROM ds_cluster_meta WHERE key = 'schema_version'") == [(str(CLUSTER_SCHEMA_VERSION),)]
    assert pg("SELECT count(*) FROM ds_catalog") == [(0,)]
