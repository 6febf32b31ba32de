"""Managers with ``serve --postgres`` (in-process): registries and sessions in Postgres, one registry per manager."""

from __future__ import annotations

from actors.manager_agent_postgres import PostgresManagerAgent
from actors.session_agent import SessionConfig
from actors.session_agent_postgres import PostgresSessionAgent, PostgresSessionEnv
from runtime import open_host
from runtime.server.app import bind_sessions, create_app
from runtime.server.managers import bind_managers
from tests.runtime.server.test_postgres_host import TOKEN, call, msg

M = "/v1/managers"


def _client(host, storage):
    env = PostgresSessionEnv(storage, SessionConfig())
    bind_sessions(host, env, agent_class=PostgresSessionAgent)
    assert bind_managers(host, env).agent_class is PostgresManagerAgent
    return create_app(host, token=TOKEN, max_body_bytes=64 * 1024).test_client()


async def test_a_manager_survives_a_new_data_folder(tmp_path, pg_storage):
    async with open_host(tmp_path / "first") as host:
        client = _client(host, pg_storage)
        status, body, _ = await call(client, "POST", f"{M}/ana/sessions", {"name": "trip"})
        assert status == 201
        trip = body["session"]["id"]
        for message_id in ("m1", "m2"):
            status, _, _ = await call(client, "POST", f"{M}/ana/sessions/{trip}/messages",
                                      {"message": msg(message_id, "flight HAT123")})
            assert status == 201
        assert (await call(client, "PUT", f"{M}/ana/sessions/{trip}/context/memory", {"content": "aisle"}))[0] == 200
        other = (await call(client, "POST", f"{M}/bob/sessions", {"name": "bob's"}))[1]["session"]["id"]
    async with open_host(tmp_path / "second") as host:  # a new disk: no file of either manager
        client = _client(host, pg_storage)
        status, body, _ = await call(client, "GET", f"{M}/ana/sessions")
        assert status == 200 and [s["id"] for s in body["sessions"]] == [trip]  # not bob's
        assert [s["id"] for s in (await call(client, "GET", f"{M}/bob/sessions"))[1]["sessions"]] == [other]
        history = (await call(client, "GET", f"{M}/ana/sessions/{trip}/messages"))[1]["messages"]
        assert [m["id"] for m in history] == ["m1", "m2"]
        memory = (await call(client, "GET", f"{M}/ana/sessions/{trip}/context/memory"))[1]["block"]
        assert memory["content"] == "aisle"
        hits = (await call(client, "GET", f"{M}/ana/search?q=HAT123"))[1]["results"]
        assert {hit["sessionId"] for hit in hits} == {trip}
        assert (await call(client, "GET", f"{M}/bob/search?q=HAT123"))[1]["results"] == []
        # another manager cannot reach ana's session by its id
        status, body, _ = await call(client, "GET", f"{M}/bob/sessions/{trip}/messages")
        assert status == 404
        # metadata of a managed session is in Postgres too
        status, body, _ = await call(client, "POST", f"{M}/ana/sessions/{trip}/rpc",
                                     {"method": "set_metadata", "params": {"metadata": {"a": 1}}})
        assert status == 200, body
        # a manager never written answers its reads empty, and stores nothing
        assert (await call(client, "GET", f"{M}/nobody/sessions"))[1] == {"sessions": []}
        assert (await call(client, "GET", f"{M}/nobody/sessions/x/messages"))[0] == 404
    async with open_host(tmp_path / "third") as host:
        client = _client(host, pg_storage)
        status, body, _ = await call(client, "POST", f"{M}/ana/sessions/{trip}/rpc", {"method": "get_metadata"})
        assert status == 200 and body == {"result": {"a": 1}}
        assert (await call(client, "DELETE", f"{M}/ana/sessions/{trip}"))[0] == 200
        assert (await call(client, "GET", f"{M}/ana/sessions"))[1] == {"sessions": []}
    owners = pg_storage_owners(pg_storage)
    assert owners == {host.namespace("managers").id_from_name("bob").hex}


def pg_storage_owners(storage):
    from storage.postgres.connection import _lock_for

    with _lock_for(storage.conn):
        return {row[0] for row in storage.conn.execute("SELECT DISTINCT owner FROM assistant_sessions")}
