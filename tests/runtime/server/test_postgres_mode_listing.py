"""Sessions in Postgres, in-process: Postgres decides what exists, and the listing comes from its catalog."""

from __future__ import annotations

import trio

from actors.session_agent import SessionConfig
from actors.session_agent_postgres import PostgresSessionAgent, PostgresSessionEnv
from common.errors import StorageUnavailableError
from runtime import open_host
from runtime.server.app import bind_sessions, create_app
from tests.runtime.server.test_postgres_host import TOKEN, call, msg


def _client(host, storage):
    host.sessions = bind_sessions(host, PostgresSessionEnv(storage, SessionConfig()), agent_class=PostgresSessionAgent)
    return create_app(host, token=TOKEN, max_body_bytes=64 * 1024).test_client()


async def _write(client, name, *ids):
    for message_id in ids:
        status, _, _ = await call(client, "POST", f"/v1/sessions/{name}/messages", {"message": msg(message_id, "hi")})
        assert status == 201


async def test_a_host_on_an_empty_folder_serves_what_postgres_holds(tmp_path, pg_storage):
    async with open_host(tmp_path / "first") as host:
        client = _client(host, pg_storage)
        await _write(client, "chat-1", "m1", "m2")
        assert (await call(client, "PUT", "/v1/sessions/chat-1/context/memory", {"content": "aisle"}))[0] == 200
        prompt = (await call(client, "GET", "/v1/sessions/chat-1/system-prompt"))[1]["prompt"]
    async with open_host(tmp_path / "second") as host:  # a new disk: no actor file of chat-1
        client = _client(host, pg_storage)
        status, body, _ = await call(client, "GET", "/v1/sessions/chat-1/messages")
        assert status == 200 and [m["id"] for m in body["messages"]] == ["m1", "m2"]
        assert (await call(client, "GET", "/v1/sessions/chat-1/messages:count"))[1] == {"count": 2}
        assert (await call(client, "GET", "/v1/sessions/chat-1/context/memory"))[1]["block"]["content"] == "aisle"
        assert (await call(client, "GET", "/v1/sessions/chat-1/system-prompt"))[1]["prompt"] == prompt
        # a session never written is still answered as empty, and nothing is stored for it
        assert (await call(client, "GET", "/v1/sessions/never/messages"))[1] == {"messages": []}
        assert not await pg_storage.written(host.sessions.id_from_name("never").hex)
        assert not host.path_for(host.sessions.id_from_name("never")).exists()


async def test_the_listing_comes_from_postgres(tmp_path, pg_storage):
    async with open_host(tmp_path / "first") as host:
        client = _client(host, pg_storage)
        await _write(client, "a-1", "m1")
        await _write(client, "b-1", "m1", "m2", "m3")
        await _write(client, "a-2", "m1", "m2")
    async with open_host(tmp_path / "second") as host:  # another host, an empty folder: the same listing
        client = _client(host, pg_storage)
        status, body, _ = await call(client, "GET", "/v1/sessions")
        assert status == 200 and body["cursor"] is None
        assert [(s["id"], s["messages"]) for s in body["sessions"]] == [("a-2", 2), ("b-1", 3), ("a-1", 1)]
        first = body["sessions"][0]
        assert set(first) == {"id", "messages", "compactions", "compactedThrough", "createdAt", "updatedAt",
                              "state", "problem", "active"}
        assert (first["state"], first["problem"], first["active"], first["compactions"]) == ("ok", None, False, 0)

        page = (await call(client, "GET", "/v1/sessions?limit=2"))[1]
        rest = (await call(client, "GET", f"/v1/sessions?limit=2&cursor={page['cursor']}"))[1]
        assert [s["id"] for s in page["sessions"] + rest["sessions"]] == ["a-2", "b-1", "a-1"]
        assert rest["cursor"] is None
        assert [s["id"] for s in (await call(client, "GET", "/v1/sessions?prefix=a-"))[1]["sessions"]] == \
            ["a-2", "a-1"]

        # reads (history, the frozen prompt) do not move updatedAt; a write moves the session to the top
        await call(client, "GET", "/v1/sessions/a-1/messages")
        await call(client, "GET", "/v1/sessions/a-1/system-prompt")
        status, one, _ = await call(client, "GET", "/v1/sessions/a-1")
        assert status == 200 and one["session"]["updatedAt"] == body["sessions"][2]["updatedAt"]
        assert one["session"]["id"] == "a-1" and one["session"]["messages"] == 1
        assert one["session"]["active"] is True  # awake on this host now
        assert [s["id"] for s in (await call(client, "GET", "/v1/sessions"))[1]["sessions"]][0] == "a-2"
        await _write(client, "a-1", "m9")
        listed = (await call(client, "GET", "/v1/sessions"))[1]["sessions"]
        assert [(s["id"], s["messages"]) for s in listed][0] == ("a-1", 2)

        status, body, _ = await call(client, "GET", "/v1/sessions/nobody")
        assert status == 404 and body["error"]["type"] == "SessionNotFoundError"
        assert (await call(client, "GET", "/v1/sessions?cursor=garbage"))[0] == 400


async def test_listing_while_postgres_is_down_is_503_with_retry_after(tmp_path):
    import psycopg_pool

    from storage.postgres import PostgresStorage

    pool = psycopg_pool.ConnectionPool("host=127.0.0.1 port=1 user=nobody connect_timeout=1", min_size=0,
                                       max_size=1, timeout=1, open=False)
    pool.open(wait=False)
    try:
        async with open_host(tmp_path / "data") as host:
            client = _client(host, PostgresStorage(pool, call_timeout_s=5))
            with trio.fail_after(10):
                listed = await call(client, "GET", "/v1/sessions")
                one = await call(client, "GET", "/v1/sessions/chat")
                read = await call(client, "GET", "/v1/sessions/chat/messages")
    finally:
        pool.close()
    for status, body, response in (listed, one, read):
        assert status == 503 and body["error"]["type"] == StorageUnavailableError.__name__
        assert response.headers["Retry-After"] == "1"
