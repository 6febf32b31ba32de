"""Semantic and hybrid search through real ``durable-sessions serve --postgres`` processes
(and a SessionManager's cross-session search, in both modes).

The vectors are ``bytea`` rows in Postgres; the append answers before the
model runs and the actor's alarm embeds after commit; ``search:status``
counts what is pending; a host killed with work pending leaves its markers
in Postgres, and another host (on a new, empty data folder) finishes them;
deleting messages or erasing the session deletes their vectors; a
searchable block ranks its entries by meaning too.
"""

from __future__ import annotations

import subprocess
import time

import httpx
import psycopg
import pytest
import trio

pytest.importorskip("wordllama")

from tests.runtime.server.test_semantic_search_server import (  # noqa: E402
    DEADLINE_S,
    TEXTS,
    append_all,
    config,
    wait_embedded,
)
from tests.support.processes import cli_command, cli_env, kill_hard, server_process  # noqa: E402

MODEL = "wordllama/l2_supercat-256"
LOCAL = '[search]\nembedder = "local"\n\n[[session.blocks]]\nlabel = "kb"\nkind = "searchable"\n'
DEAD = ('[search]\nembedder = "openai"\nurl = "http://127.0.0.1:9/v1"\nmodel = "nowhere"\n'
        'api_key_env = ""\ndimension = 8\n')


def status_of(http, session):
    reply = http.get(f"/v1/sessions/{session}/search:status")
    assert reply.status_code == 200, reply.text
    return reply.json()["status"]


def search(http, session, q, mode, limit=20):
    reply = http.get(f"/v1/sessions/{session}/search", params={"q": q, "mode": mode, "limit": limit})
    assert reply.status_code == 200, reply.text
    return [hit["id"] for hit in reply.json()["results"]]


def vector_rows(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in ("assistant_embeddings", "assistant_embeddings_pending", "cf_agents_search_embeddings")}


def test_search_modes_vectors_in_postgres_and_erase(tmp_path, pg_dsn):
    extra = ("--postgres", pg_dsn, "--config", config(tmp_path, LOCAL))
    with server_process(tmp_path / "data", extra=extra) as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:
        append_all(http, "s1")
        assert wait_embedded(http, "s1", 4) == {"embedder": MODEL, "dimension": 256, "embedded": 4, "pending": 0}
        assert vector_rows(pg_dsn) == {"assistant_embeddings": 4, "assistant_embeddings_pending": 0,
                                       "cf_agents_search_embeddings": 0}
        assert search(http, "s1", "the trip that got called off", "text") == []
        assert search(http, "s1", "the trip that got called off", "semantic", 1) == ["flight"]
        hybrid = search(http, "s1", "billing deploy", "hybrid", 4)
        assert hybrid[0] == "deploy" and sorted(hybrid) == sorted(TEXTS)
        bad = http.get("/v1/sessions/s1/search", params={"q": "x", "mode": "fuzzy"})
        assert bad.status_code == 400 and "mode" in bad.text
        # Deleting a message deletes its vector; reembed (CLI) makes every vector again.
        assert http.delete("/v1/sessions/s1/messages/flight").status_code == 200
        assert "flight" not in search(http, "s1", "the trip that got called off", "semantic")
        assert status_of(http, "s1")["embedded"] == 3
        again = subprocess.run([*cli_command(), "reembed", "s1", "--wait", "--url", server.url], env=cli_env(None),
                               capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == f"s1: 0 pending, 3 embedded ({MODEL})"
        # A searchable block: entries found by meaning, their vectors in Postgres too.
        for text in TEXTS.values():
            stored = http.post("/v1/sessions/s1/tools/set_context", json={"label": "kb", "content": text})
            assert stored.status_code == 200, stored.text
        found = http.post("/v1/sessions/s1/tools/search_context",
                          json={"label": "kb", "query": "a young dog damaging furniture"})
        assert found.status_code == 200, found.text
        assert found.json()["result"].split("\n")[1] == TEXTS["dog"]  # the best entry first (keys are made up)
        assert vector_rows(pg_dsn)["cf_agents_search_embeddings"] == 4
        # Erasing the session deletes every vector and marker with its rows.
        assert http.delete("/v1/sessions/s1").status_code == 204
        assert vector_rows(pg_dsn) == {"assistant_embeddings": 0, "assistant_embeddings_pending": 0,
                                       "cf_agents_search_embeddings": 0}


def test_pending_work_left_by_a_killed_host_is_finished_by_another(tmp_path, pg_dsn):
    # First host: an embeddings endpoint nobody answers -- the appends commit with their markers
    # (in Postgres), the embedding fails and would retry; the process is then killed hard.
    dead = ("--postgres", pg_dsn, "--config", config(tmp_path, DEAD))
    with server_process(tmp_path / "first", extra=dead) as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:
        append_all(http, "s1")
        assert status_of(http, "s1") == {"embedder": "nowhere", "dimension": None, "embedded": 0, "pending": 4}
        kill_hard(server)
    assert vector_rows(pg_dsn)["assistant_embeddings_pending"] == 4
    # Another host on a new, empty data folder, with the local model: the markers are in Postgres.
    (tmp_path / "sessions.toml").unlink()
    local = ("--postgres", pg_dsn, "--config", config(tmp_path, LOCAL))
    with server_process(tmp_path / "second", extra=local) as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:
        wait_embedded(http, "s1", 4)
        assert search(http, "s1", "a young dog damaging furniture", "semantic", 1) == ["dog"]
        # Sessions written without an embedder (none here) and with one agree on text search.
        assert search(http, "s1", "pasta", "text") == ["pasta"]


def test_without_an_embedder_semantic_search_is_a_400_naming_the_setting(tmp_path, pg_dsn):
    with server_process(tmp_path / "data", extra=("--postgres", pg_dsn)) as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:
        append_all(http, "s1")
        for mode in ("semantic", "hybrid"):
            reply = http.get("/v1/sessions/s1/search", params={"q": "flight", "mode": mode})
            assert reply.status_code == 400, reply.text
            error = reply.json()["error"]
            assert "embedder" in error["message"] and "[search]" in error["message"]
        assert search(http, "s1", "flight", "text") == ["flight"]
        assert status_of(http, "s1") == {"embedder": None, "dimension": None, "embedded": 0, "pending": 0}


async def _manager_search(url):
    from runtime.client import SessionsClient

    async with SessionsClient(url) as client:
        manager = client.manager("ana")
        trip, home = await manager.create("trip"), await manager.create("home")
        await manager.append(trip["id"], {"id": "flight", "role": "user",
                                          "parts": [{"type": "text", "text": TEXTS["flight"]}]})
        for mid in ("dog", "deploy"):
            await manager.append(home["id"], {"id": mid, "role": "user", "parts": [{"type": "text", "text": TEXTS[mid]}]})
        deadline = time.monotonic() + DEADLINE_S
        while True:  # each managed session's own status route says when its messages are embedded
            statuses = [await (await manager.get_session(row["id"])).search_status() for row in (trip, home)]
            if [s["pending"] for s in statuses] == [0, 0] and [s["embedded"] for s in statuses] == [1, 2]:
                break
            assert time.monotonic() < deadline, statuses
            await trio.sleep(0.1)
        semantic = await manager.search("the trip that got called off", mode="semantic", limit=1)
        hybrid = await manager.search("billing deploy", mode="hybrid", limit=3)
        text = await manager.search("the trip that got called off")
        return trip["id"], home["id"], semantic, hybrid, text


@pytest.mark.parametrize("mode", ["sqlite", "postgres"])
def test_a_manager_searches_its_sessions_by_meaning(tmp_path, pg_dsn, mode):
    extra = ["--config", config(tmp_path, LOCAL)] + (["--postgres", pg_dsn] if mode == "postgres" else [])
    with server_process(tmp_path / "data", extra=extra) as server:
        trip, home, semantic, hybrid, text = trio.run(_manager_search, server.url)
    assert [(h["sessionId"], h["id"]) for h in semantic] == [(trip, "flight")]
    assert semantic[0]["content"] == TEXTS["flight"]
    assert [(h["sessionId"], h["id"]) for h in hybrid][0] == (home, "deploy") and len(hybrid) == 3
    assert text == []


async def _manager_write(url):
    from runtime.client import SessionsClient

    async with SessionsClient(url) as client:
        row = await client.manager("bo").create("trip")
        await client.manager("bo").append(row["id"], {"id": "flight", "role": "user",
                                                      "parts": [{"type": "text", "text": TEXTS["flight"]}]})
        return row["id"]


async def _manager_wait_and_search(url, session_id):
    from runtime.client import SessionsClient

    async with SessionsClient(url) as client:
        manager = client.manager("bo")
        assert await manager.search("the trip that got called off", mode="text") == []
        deadline = time.monotonic() + DEADLINE_S
        while not (found := await manager.search("the trip that got called off", mode="semantic")):
            assert time.monotonic() < deadline, await (await manager.get_session(session_id)).search_status()
            await trio.sleep(0.1)
        return [(h["sessionId"], h["id"]) for h in found]


def test_a_manager_written_before_the_embedder_was_configured_gets_embedded_at_its_next_wake(tmp_path):
    with server_process(tmp_path / "data") as server:
        session_id = trio.run(_manager_write, server.url)
    with server_process(tmp_path / "data", extra=("--config", config(tmp_path, LOCAL))) as server:
        assert trio.run(_manager_wait_and_search, server.url, session_id) == [(session_id, "flight")]
