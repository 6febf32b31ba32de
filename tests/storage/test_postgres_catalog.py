"""durable_sessions_catalog: one row per session, kept by triggers in the writing transaction (schema v3)."""

from __future__ import annotations

import psycopg
import pytest

from storage.postgres import PostgresStorage, create_schema
from storage.postgres.catalog import CATALOG_SCHEMA
from storage.tree.rows import NewMessage

HEX = "ab" * 32
OTHER = "cd" * 32


def _row(conn, session_id=HEX):
    return conn.execute("SELECT name, messages, compactions, compacted_through, created_ms, updated_ms "
                        "FROM durable_sessions_catalog WHERE session_id = %s", (session_id,)).fetchone()


def _set_updated(conn, ms, session_id=HEX):
    conn.execute("UPDATE durable_sessions_catalog SET updated_ms = %s WHERE session_id = %s", (ms, session_id))


@pytest.fixture
def conn(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


async def test_writes_keep_the_counts_and_move_updated(conn):
    storage = PostgresStorage(conn)
    store = storage.messages(HEX)
    assert not await storage.written(HEX)
    await store.set_config("actor_name", "chat-1")
    name, messages, _, _, created, updated = _row(conn)
    assert (name, messages) == ("chat-1", 0) and created == updated
    assert await storage.written(HEX)

    _set_updated(conn, 1)  # so that each write below shows it moved the time
    await store.append("m1", "user", '{"id":"m1"}', "hello")
    await store.append_chain([NewMessage("m2", "assistant", '{"id":"m2"}', "", "", 0),
                              NewMessage("m3", "user", '{"id":"m3"}', "", "", 0)])
    assert _row(conn)[1] == 3 and _row(conn)[5] > 1
    await store.append("m1", "user", '{"id":"m1"}', "hello")  # a duplicate: nothing stored
    assert _row(conn)[1] == 3

    await store.add_compaction("c1", "summary one", "m1", "m2")
    await store.add_compaction("c2", "summary two", "m1", "m3")
    assert _row(conn)[2:4] == (2, "m3")

    _set_updated(conn, 2)
    await store.update("m2", "assistant", '{"id":"m2","v":2}', "")
    assert _row(conn)[5] > 2

    _set_updated(conn, 3)
    assert await store.delete(["m3"]) == ["m3"]
    assert _row(conn)[1] == 2 and _row(conn)[5] > 3

    await store.clear()
    assert _row(conn)[:4] == ("chat-1", 0, 0, None)


async def test_reads_the_name_and_the_frozen_prompt_do_not_move_updated(conn):
    storage = PostgresStorage(conn)
    store = storage.messages(HEX)
    await store.append("m1", "user", '{"id":"m1"}', "hello")
    _set_updated(conn, 5)
    await store.set_config("actor_name", "renamed")  # what a wake on a new host records
    await storage.block(f"_system_prompt_{HEX}").set("frozen prompt")  # what the first read freezes
    await store.get_config("metadata")
    await store.path_ids("m1")
    assert _row(conn)[0] == "renamed" and _row(conn)[5] == 5

    await store.set_config("metadata", '{"a":1}')  # a caller's write
    assert _row(conn)[5] > 5
    _set_updated(conn, 6)
    await storage.block(f"memory_{HEX}").set("a writable block")
    assert _row(conn)[5] > 6
    _set_updated(conn, 7)
    await storage.search(key=f"notes_{HEX}").set("k1", "an entry")
    assert _row(conn)[5] > 7
    _set_updated(conn, 8)
    await storage.block("memory_not-a-session").set("x")  # no session of ours: nothing moves
    assert _row(conn)[5] == 8
    assert _row(conn, "not-a-session") is None


async def test_pages_newest_first_by_keyset_with_a_prefix(conn):
    storage = PostgresStorage(conn)
    for index, name in enumerate(["a-1", "a-2", "b-1"]):
        session = f"{index:02x}" * 32
        await storage.messages(session).set_config("actor_name", name)
        await storage.messages(session).append("m", "user", '{"id":"m"}', "")
        _set_updated(conn, 100 + index, session)
    await storage.messages(OTHER).append("m", "user", '{"id":"m"}', "")  # never named: not listed
    _set_updated(conn, 100, "02" * 32)  # a tie with a-1: the higher session id first
    names = [row.name for row in await storage.catalog_page(10)]
    assert names == ["a-2", "b-1", "a-1"]
    first = await storage.catalog_page(2)
    rest = await storage.catalog_page(2, below=first[-1].key)
    assert [r.name for r in first] + [r.name for r in rest] == names
    assert [r.name for r in await storage.catalog_page(10, prefix="a-")] == ["a-2", "a-1"]
    assert (await storage.catalog_entry("01" * 32)).messages == 1
    assert await storage.catalog_entry("ff" * 32) is None


async def test_a_version_2_database_gets_its_rows(conn):
    """A database written before the catalog existed is completed by the migration, from its tables."""
    storage = PostgresStorage(conn)
    store = storage.messages(HEX)
    await store.set_config("actor_name", "old-chat")
    await store.append("m1", "user", '{"id":"m1"}', "hello")
    await store.append("m2", "user", '{"id":"m2"}', "again")
    await store.add_compaction("c1", "summary", "m1", "m2")
    await storage.messages(OTHER).append("x", "user", '{"id":"x"}', "")
    await storage.registry.insert_session("r1", "a manager's session")
    # back to what version 2 left: no catalog, no triggers, registry rows without an owner
    conn.execute("DROP TABLE durable_sessions_catalog")
    conn.execute("ALTER TABLE assistant_sessions DROP COLUMN owner")
    for function in ("added", "removed", "rewritten", "compacted", "named", "configured", "blocks"):
        conn.execute(f"DROP FUNCTION durable_sessions_catalog_{function}() CASCADE")
    conn.execute("UPDATE durable_sessions_meta SET value = '2' WHERE key = 'schema_version'")
    created = conn.execute("SELECT floor(extract(epoch FROM min(created_at)) * 1000)::bigint, "
                           "floor(extract(epoch FROM max(created_at)) * 1000)::bigint "
                           "FROM assistant_messages WHERE session_id = %s", (HEX,)).fetchone()

    await create_schema(conn)
    name, messages, compactions, through, created_ms, updated_ms = _row(conn)
    assert (name, messages, compactions, through) == ("old-chat", 2, 1, "m2")
    assert created_ms == created[0] and updated_ms >= created[1]
    assert _row(conn, OTHER)[:2] == (None, 1)
    assert conn.execute("SELECT id, owner FROM assistant_sessions").fetchall() == [("r1", "")]
    assert [r["id"] for r in await storage.registry.list_sessions()] == ["r1"]  # the whole database's registry
    assert await storage.for_owner("ab" * 32).registry.list_sessions() == []  # a manager's sees only its own
    await store.append("m3", "user", '{"id":"m3"}', "")  # and the triggers keep it from now on
    assert _row(conn)[1] == 3
    conn.execute(CATALOG_SCHEMA)  # idempotent
    await create_schema(conn)
    assert _row(conn)[1] == 3
