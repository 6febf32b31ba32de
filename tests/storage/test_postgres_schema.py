"""create_schema: the spec's migration plus ours, idempotent, atomic, versioned."""

from __future__ import annotations

import psycopg
import pytest
import trio

from storage import SchemaTooNewError
from storage.fts import parse_query
from storage.postgres import SCHEMA_VERSION, DatabaseError, PostgresSessionProvider, create_schema
from storage.postgres.schema import SPEC_MIGRATION

OUR_INDEXES = {
    "idx_assistant_msg_seq",
    "idx_assistant_msg_children",
    "idx_assistant_msg_created",
    "idx_assistant_msg_search",
    "idx_assistant_msg_cjk",
    "idx_assistant_compactions_session",
    "idx_search_entries_seq",
    "idx_search_entries_search",
    "idx_search_entries_cjk",
}
SPEC_INDEXES = {"idx_assistant_msg_parent", "idx_assistant_msg_session", "idx_assistant_msg_fts", "idx_search_entries_fts"}


def _catalog(conn):
    tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")}
    columns = {
        r[0]
        for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'assistant_messages'"
        )
    }
    return tables, indexes, columns


async def test_schema_creates_the_spec_tables_and_ours(pg_empty_dsn):
    with psycopg.connect(pg_empty_dsn, autocommit=True) as conn:
        await create_schema(conn)
        tables, indexes, columns = _catalog(conn)
        pk = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'assistant_messages_pkey'"
        ).fetchone()[0]
        version = conn.execute("SELECT value FROM durable_sessions_meta WHERE key = 'schema_version'").fetchone()[0]
        extensions = {r[0] for r in conn.execute("SELECT extname FROM pg_extension")}
    assert {
        "assistant_messages",
        "assistant_compactions",
        "assistant_config",
        "cf_agents_context_blocks",
        "cf_agents_search_entries",
        "durable_sessions_meta",
    } <= tables
    assert SPEC_INDEXES | OUR_INDEXES <= indexes
    assert {"content_tsv", "text_content", "seq", "tools_content", "tokens", "search_tsv", "cjk_content"} <= columns
    assert pk == "PRIMARY KEY (session_id, id)"
    assert version == str(SCHEMA_VERSION)
    assert "pg_trgm" in extensions


async def test_schema_is_idempotent_and_keeps_rows(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        store = PostgresSessionProvider(conn, "s")
        await store.append("m1", "user", '{"id":"m1"}', "kept text")
        before = _catalog(conn)
        await create_schema(conn)
        await create_schema(conn)
        assert _catalog(conn) == before
        assert await store.get("m1") == '{"id":"m1"}'
        assert [r.id for r in await store.search(parse_query("kept"), 5)] == ["m1"]


async def test_schema_upgrades_a_database_migrated_by_the_original(pg_empty_dsn):
    """Rows written under the spec's own migration get seq numbers and become searchable."""
    with psycopg.connect(pg_empty_dsn, autocommit=True) as conn:
        conn.execute(SPEC_MIGRATION)
        conn.execute(
            "INSERT INTO assistant_messages (id, session_id, parent_id, role, content, text_content) VALUES "
            "('a', 's', NULL, 'user', '{\"id\":\"a\"}', 'cats are running'), "
            "('b', 's', 'a', 'assistant', '{\"id\":\"b\"}', '重跑gen-itgc后')"
        )
        await create_schema(conn)
        seqs = conn.execute("SELECT id, seq FROM assistant_messages ORDER BY seq").fetchall()
        store = PostgresSessionProvider(conn, "s")
        assert [i for i, _ in seqs] == ["a", "b"] and seqs[0][1] < seqs[1][1]
        assert await store.path_ids("b") == ["a", "b"]
        assert [r.id for r in await store.search(parse_query("run"), 5)] == ["a"]
        assert [r.id for r in await store.search(parse_query("itgc"), 5)] == ["b"]
        assert await store.latest_leaf() == "b"  # no active-leaf row yet: the newest childless message
        # each row was given its place on its path (depth, JSON bytes and tokens from the root)
        assert await store.place("b") == (2, len('{"id":"a"}') + len('{"id":"b"}'))
        assert (await store.path_tokens("b")).total == 0
        await store.append("c", "user", '{"id":"c"}', "", "b", tokens=7)
        assert await store.place("c") == (3, 30) and (await store.path_tokens("c")).total == 7


EMBEDDING_TABLES = ("assistant_embeddings", "assistant_embeddings_pending", "cf_agents_search_embeddings")


async def test_a_version_3_database_gains_the_embedding_tables_and_keeps_its_messages(pg_dsn):
    """Version 4 adds the vector tables (semantic search); a version-3 database's messages are kept,
    and marking what has no vector picks them up. Deleting a message deletes its vector (cascade)."""
    from storage.postgres import PostgresStorage

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE " + ", ".join(EMBEDDING_TABLES))
        conn.execute("DROP SEQUENCE assistant_embeddings_stamp")
        conn.execute("UPDATE durable_sessions_meta SET value = '3' WHERE key = 'schema_version'")
        store = PostgresSessionProvider(conn, "s")
        await store.append("m1", "user", '{"id":"m1"}', "kept text")
        await store.append("m2", "user", '{"id":"m2"}', "")
        assert not set(EMBEDDING_TABLES) & _catalog(conn)[0]
        await create_schema(conn)
        assert set(EMBEDDING_TABLES) <= _catalog(conn)[0]
        assert conn.execute("SELECT value FROM durable_sessions_meta").fetchone()[0] == str(SCHEMA_VERSION)
        assert await store.get("m1") == '{"id":"m1"}'
        rows = PostgresStorage(conn).vectors("s")
        assert await rows.pending_count() == 0 and await rows.mark_missing("model") == 1  # not the text-less one
        [(seq, mark, text)] = await rows.pending_batch(10)
        assert (mark, text) == (1, "kept text")
        assert await rows.store_vectors("model", 1, [(seq, mark, b"\0\0\x80?")]) == [seq]
        assert [(s, v) for s, _, v in await rows.vectors("model")] == [(seq, b"\0\0\x80?")]
        await store.delete(["m1"])
        assert conn.execute("SELECT count(*) FROM assistant_embeddings").fetchone()[0] == 0


def _compaction_key(conn) -> str:
    return conn.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                        "WHERE conrelid = 'assistant_compactions'::regclass AND contype = 'p'").fetchone()[0]


async def test_a_version_4_database_keys_its_compactions_per_session_and_keeps_them(pg_dsn):
    """Version 5 keys compactions by ``(session_id, id)``, as messages; the rows a version-4 database (key
    ``id`` alone, the original's) holds are read back unchanged, and an id one session holds becomes free
    for another session, never twice in one session."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE assistant_compactions DROP CONSTRAINT assistant_compactions_pkey")
        conn.execute("ALTER TABLE assistant_compactions ADD PRIMARY KEY (id)")
        conn.execute("UPDATE durable_sessions_meta SET value = '4' WHERE key = 'schema_version'")
        one, two = PostgresSessionProvider(conn, "one"), PostgresSessionProvider(conn, "two")
        for store in (one, two):
            await store.append("a", "user", '{"id":"a"}', "first")
            await store.append("b", "assistant", '{"id":"b"}', "second", "a")
        await one.add_compaction("k1", "summary one", "a", "b")
        await two.add_compaction("k2", "summary two", "a", "b")
        before = {store.session_id: await store.compactions() for store in (one, two)}
        with pytest.raises(DatabaseError, match="assistant_compactions_pkey"):  # the version-4 key
            await two.add_compaction("k1", "taken", "a", "b")

        await create_schema(conn)
        assert _compaction_key(conn) == "PRIMARY KEY (session_id, id)"
        assert conn.execute("SELECT value FROM durable_sessions_meta").fetchone()[0] == str(SCHEMA_VERSION) == "5"
        assert {store.session_id: await store.compactions() for store in (one, two)} == before
        assert await one.path_ids("b") == ["a", "b"]
        assert [r.id for r in before["one"]] == ["k1"] and [r.id for r in before["two"]] == ["k2"]

        copied = await two.add_compaction("k1", "same id, other session", "a", "b")
        assert [(r.id, r.summary) for r in await two.compactions()] == [("k2", "summary two"),
                                                                         ("k1", "same id, other session")]
        assert copied.seq > before["two"][0].seq
        with pytest.raises(DatabaseError, match="assistant_compactions_pkey"):
            await one.add_compaction("k1", "twice in one session", "a", "b")
        assert await one.compactions() == before["one"]
        await create_schema(conn)  # idempotent: the key stays, no row moves
        assert _compaction_key(conn) == "PRIMARY KEY (session_id, id)"
        assert len(await two.compactions()) == 2


async def test_a_database_migrated_by_the_original_keys_its_compactions_per_session(pg_empty_dsn):
    with psycopg.connect(pg_empty_dsn, autocommit=True) as conn:
        conn.execute(SPEC_MIGRATION)
        assert _compaction_key(conn) == "PRIMARY KEY (id)"
        conn.execute("INSERT INTO assistant_compactions (id, session_id, summary, from_message_id, to_message_id) "
                     "VALUES ('k', 's', 'the original wrote it', 'a', 'b')")
        await create_schema(conn)
        assert _compaction_key(conn) == "PRIMARY KEY (session_id, id)"
        [row] = await PostgresSessionProvider(conn, "s").compactions()
        assert (row.id, row.summary, row.from_message_id, row.to_message_id) == ("k", "the original wrote it", "a", "b")


async def test_schema_from_two_connections_at_once(pg_empty_dsn):
    with psycopg.connect(pg_empty_dsn, autocommit=True) as one, psycopg.connect(pg_empty_dsn, autocommit=True) as two:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(create_schema, one)
            nursery.start_soon(create_schema, two)
        assert SPEC_INDEXES | OUR_INDEXES <= _catalog(one)[1]


async def test_a_newer_schema_is_refused_and_left_alone(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE durable_sessions_meta SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
        with pytest.raises(SchemaTooNewError) as err:
            await create_schema(conn)
        assert (err.value.found, err.value.known) == (SCHEMA_VERSION + 1, SCHEMA_VERSION)
        assert conn.execute("SELECT value FROM durable_sessions_meta").fetchone()[0] == str(SCHEMA_VERSION + 1)


async def test_a_failed_migration_leaves_nothing(pg_server, pg_empty_dsn):
    """A user without the right to create the extension gets an error and an untouched database."""
    name = pg_empty_dsn.split("dbname=")[1].split()[0]
    with psycopg.connect(pg_empty_dsn, autocommit=True) as admin:
        admin.execute("DROP ROLE IF EXISTS weak")
        admin.execute("CREATE ROLE weak LOGIN")
        admin.execute("GRANT CREATE ON SCHEMA public TO weak")
        admin.execute(f'REVOKE CREATE ON DATABASE "{name}" FROM PUBLIC')
        try:
            weak_dsn = pg_empty_dsn.replace("user=durable", "user=weak")
            with psycopg.connect(weak_dsn, autocommit=True) as weak:
                with pytest.raises(DatabaseError, match="pg_trgm|permission denied"):
                    await create_schema(weak)
            tables = {r[0] for r in admin.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
            assert tables == set()
        finally:
            admin.execute("DROP OWNED BY weak")
    pg_server.drop_database(name)
    pg_server.execute("DROP ROLE weak")


async def test_a_database_that_is_not_utf8_is_refused(pg_server):
    pg_server.execute("CREATE DATABASE latin TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'")
    try:
        with psycopg.connect(pg_server.dsn("latin"), autocommit=True) as conn:
            with pytest.raises(DatabaseError, match="encoding LATIN1; durable-sessions needs UTF8"):
                await create_schema(conn)
    finally:
        pg_server.drop_database("latin")
