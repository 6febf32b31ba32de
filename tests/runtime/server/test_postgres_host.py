"""The session actor on Postgres, in-process: routes, hibernation, empty reads, one call at a time."""

from __future__ import annotations

import json

import msgpack
import pytest
import trio

from actors.session_agent import SessionConfig
from actors.session_agent_postgres import PostgresSessionAgent, PostgresSessionEnv, postgres_spec
from common.errors import StorageUnavailableError
from runtime import open_host
from runtime.server.app import bind_sessions, create_app

TOKEN = "pg-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
S = "/v1/sessions/chat-42"


def msg(message_id, words, role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": words}]}


@pytest.fixture
async def host(tmp_path, pg_storage):
    async with open_host(tmp_path / "data") as host:
        env = PostgresSessionEnv(pg_storage, SessionConfig())
        host.sessions = bind_sessions(host, env, agent_class=PostgresSessionAgent)
        yield host


@pytest.fixture
def client(host):
    return create_app(host, token=TOKEN, max_body_bytes=64 * 1024).test_client()


async def call(client, method, path, body=None):
    options = {"headers": dict(AUTH), "scope_base": {"raw_path": path.split("?", 1)[0].encode("ascii")}}
    if body is not None:
        options["data"] = json.dumps(body)
        options["headers"]["Content-Type"] = "application/json"
    response = await client.open(path, method=method, **options)
    data = await response.get_data()
    kind = response.headers.get("Content-Type", "")
    decoded = msgpack.unpackb(data) if kind.startswith("application/msgpack") else json.loads(data) if data else None
    return response.status_code, decoded, response


def hex_of(host, name="chat-42"):
    return host.sessions.id_from_name(name).hex


async def test_the_session_lives_in_postgres_and_survives_hibernation(host, client, pg_storage, tmp_path):
    first = msg("m1", "book flight HAT123 to Lisbon")
    assert (await call(client, "POST", f"{S}/messages", {"message": first}))[0] == 201
    assert (await call(client, "POST", f"{S}/messages", {"message": msg("m2", "done", "assistant")}))[0] == 201
    status, block, _ = await call(client, "PUT", f"{S}/context/memory", {"content": "likes aisle seats"})
    assert status == 200 and block["block"]["content"] == "likes aisle seats"
    prompt = (await call(client, "GET", f"{S}/system-prompt"))[1]["prompt"]
    assert "likes aisle seats" in prompt
    assert (await call(client, "POST", f"{S}/rpc", {"method": "set_metadata", "params": [{"title": "trip"}]}))[0] == 200

    key = hex_of(host)
    assert pg_storage.sql("SELECT id FROM assistant_messages WHERE session_id = ? ORDER BY seq", key) == [
        {"id": "m1"}, {"id": "m2"}]
    blocks = dict(pg_storage.exec("SELECT label, content FROM cf_agents_context_blocks"))
    assert blocks == {f"memory_{key}": "likes aisle seats", f"_system_prompt_{key}": prompt}
    names = pg_storage.exec("SELECT value FROM assistant_config WHERE session_id = ? AND key = 'actor_name'", key)
    assert names == [("chat-42",)]
    file = host.path_for(host.sessions.id_from_name("chat-42"))
    assert file.exists()  # host-local state only: the actor's name, KV, alarm

    assert await host.hibernate_all() == 1
    assert [m["id"] for m in (await call(client, "GET", f"{S}/messages"))[1]["messages"]] == ["m1", "m2"]
    assert [h["id"] for h in (await call(client, "GET", f"{S}/search?q=HAT123"))[1]["results"]] == ["m1"]
    assert (await call(client, "GET", f"{S}/system-prompt"))[1]["prompt"] == prompt
    assert (await call(client, "POST", f"{S}/rpc", {"method": "get_metadata"}))[1]["result"] == {"title": "trip"}
    from storage import SqlStorage

    await host.hibernate_all()  # the host holds its files exclusively while awake
    host_file = SqlStorage.open(file)
    try:
        # Session data lives in Postgres: the host's own file never even creates its tables (they are
        # made on first use, storage/schema.py).
        tables = {row[0] for row in host_file.connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert not tables & {"assistant_messages", "assistant_fts", "cf_agents_context_blocks", "assistant_compactions"}
    finally:
        host_file.close()


async def test_reads_of_a_never_written_session_create_nothing(host, client, pg_storage):
    answers = {}
    for path in ("/messages", "/messages:count", "/search?q=x", "/compactions", "/skills"):
        status, body, _ = await call(client, "GET", f"/v1/sessions/never{path}")
        answers[path] = (status, body)
    assert answers == {
        "/messages": (200, {"messages": []}), "/messages:count": (200, {"count": 0}),
        "/search?q=x": (200, {"results": []}), "/compactions": (200, {"compactions": []}),
        "/skills": (200, {"loaded": []}),
    }
    assert not host.path_for(host.sessions.id_from_name("never")).exists()
    assert pg_storage.scalar("SELECT count(*) FROM assistant_config") == 0
    assert host.statistics().activations == 0


async def test_searchable_blocks_keep_entries_per_session(host, client, pg_storage):
    from actors.session_agent import BlockConfig

    config = SessionConfig(blocks=(BlockConfig("kb", "searchable"),), compaction=None)
    first = postgres_spec(config, pg_storage, "a" * 64).context.blocks[0].provider
    second = postgres_spec(config, pg_storage, "b" * 64).context.blocks[0].provider
    first.init("kb")
    second.init("kb")
    await first.set("k", "alpha entry")
    assert await first.search("alpha") == "[k]\nalpha entry"
    assert await second.search("alpha") is None


async def test_calls_of_one_session_run_one_at_a_time_in_arrival_order(host, client):
    stub = host.sessions.get_by_name("order")
    async with trio.open_nursery() as nursery:
        for i in range(12):
            nursery.start_soon(stub.call, "append_message", msg(f"m{i:02}", f"word {i}"))
            await trio.sleep(0)  # arrival order = start order
    history = await stub.call("get_history")
    assert [m["id"] for m in history] == [f"m{i:02}" for i in range(12)]


async def test_a_storage_that_cannot_answer_gives_503_with_retry_after(tmp_path):
    import psycopg_pool

    from storage.postgres import PostgresStorage

    # Nothing listens on this port: every connection attempt fails at once.
    pool = psycopg_pool.ConnectionPool("host=127.0.0.1 port=1 user=nobody connect_timeout=1", min_size=0,
                                       max_size=1, timeout=1, open=False)
    pool.open(wait=False)
    try:
        async with open_host(tmp_path / "data") as host:
            env = PostgresSessionEnv(PostgresStorage(pool, call_timeout_s=5))
            bind_sessions(host, env, agent_class=PostgresSessionAgent)
            client = create_app(host, token=TOKEN, max_body_bytes=64 * 1024).test_client()
            with trio.fail_after(10):
                status, body, response = await call(client, "POST", f"{S}/messages", {"message": msg("m1", "hi")})
    finally:
        pool.close()
    assert status == 503
    assert body["error"]["type"] == StorageUnavailableError.__name__
    assert response.headers["Retry-After"] == "1"
