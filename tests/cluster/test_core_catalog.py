"""The cluster catalog (``ds_catalog``) in one process: written with each log entry, fenced, read by any host."""

from __future__ import annotations

import pytest
import trio

from actors import SessionAgent, SessionConfig
from common.errors import OwnershipLostError
from runtime.server.transcripts import ClusterTranscriptStore, bind_cluster_transcripts
from storage.transcripts import CATALOG_FILE_NAME
from storage.cluster.schema import CLUSTER_SCHEMA_VERSION, create_cluster_schema
from storage.cluster.driver import PgConnection


def text(i: int, words: str = "hello") -> dict:
    return {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "parts": [{"type": "text", "text": words}]}


async def written_then_released(a, b, name, pg):
    """Three messages to session ``name`` on host ``a``, which then hibernates it and releases its lease;
    the stub on ``a`` and ``b``'s namespace."""
    na = a.bind("sessions", SessionAgent, env=SessionConfig())
    nb = b.bind("sessions", SessionAgent, env=SessionConfig())
    stub = na.get_by_name(name)
    for i in range(3):
        await stub.append_message(text(i))
    await a.hibernate(na, stub.id)
    with trio.fail_after(5):
        while pg("SELECT owner FROM ds_actors")[0][0] is not None:
            await trio.sleep(0.01)
    return stub, nb


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
        stub, nb = await written_then_released(a, b, "moving", pg)
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


async def test_a_deposed_owners_late_write_changes_neither_the_log_nor_the_row(hosts, pg):
    async with hosts(1) as (a,):
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        stub = na.get_by_name("fenced")
        await stub.append_message(text(0))
        before = pg("SELECT messages, updated_ms FROM ds_catalog")
        logged = pg("SELECT count(*) FROM ds_log")
        pg("UPDATE ds_actors SET epoch = epoch + 1, owner = 'someone-else'")  # another host took it over
        with pytest.raises(OwnershipLostError):
            await stub.append_message(text(1))
        assert pg("SELECT messages, updated_ms FROM ds_catalog") == before
        assert pg("SELECT count(*) FROM ds_log") == logged


async def test_transcript_rows_are_published_with_the_log_and_listed_by_any_host(hosts, pg):
    async with hosts(2) as (a, b):
        store_a = ClusterTranscriptStore(bind_cluster_transcripts(a))
        store_b = ClusterTranscriptStore(bind_cluster_transcripts(b))
        key = {"project_key": "proj", "session_id": "s1"}
        statements = a.cluster.statistics().statements
        assert await store_a.append(key, [{"type": "user", "uuid": "u1", "message": {"content": "hello"}}]) == 1
        assert a.cluster.statistics().statements - statements == 1  # entries and row in one statement
        listed = await store_b.list_session_summaries("proj")
        assert [(s["session_id"], s["data"].get("first_prompt")) for s in listed] == [("s1", "hello")]
        # A duplicate batch stores nothing but moves the mtime, as on a single host: the row alone is shipped.
        assert await store_a.append(key, [{"type": "user", "uuid": "u1", "message": {"content": "hello"}}]) == 0
        again = await store_b.list_sessions("proj")
        assert again[0]["mtime"] > listed[0]["mtime"]
        # A sub-transcript leaves the row as it is; deleting the main key removes it.
        await store_a.append({**key, "subpath": "subagents/agent-1"}, [{"type": "user", "uuid": "u2"}])
        assert await store_b.list_sessions("proj") == again
        assert await store_a.delete(key) == 2
        assert await store_b.list_sessions("proj") == []
        assert pg("SELECT count(*) FROM ds_catalog WHERE kind = 'transcript'") == [(0,)]
        # The host-level catalog file is not used in a cluster.
        assert not (a.data_dir / CATALOG_FILE_NAME).exists()


async def test_a_session_written_before_the_catalog_gets_its_row_when_it_next_wakes(hosts, pg):
    async with hosts(2) as (a, b):
        stub, nb = await written_then_released(a, b, "old", pg)
        newest = pg("SELECT updated_ms FROM ds_catalog")[0][0]
        pg("DELETE FROM ds_catalog")  # as a database upgraded from version 1 has it
        assert await b.cluster.catalog_get(stub.id) is None
        assert len(await nb.get(stub.id).get_history()) == 3  # a read wakes it on b: the row comes back
        row = await a.cluster.catalog_get(stub.id)
        assert row is not None and (row.name, row.messages) == ("old", 3)
        assert row.updated_ms <= newest  # dated by its newest message, not by the read
