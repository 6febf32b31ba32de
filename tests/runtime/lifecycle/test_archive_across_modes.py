"""An archive moves between a single host and the sessions in Postgres, KV rows included: exported from
Postgres, imported into a SQLite actor, exported again, imported back into Postgres after a delete -- each
export equal to the first apart from the header (in-process hosts, a real Postgres; issue 27, item 2)."""

from __future__ import annotations

import json

import msgpack

from actors.session_agent import BlockConfig, SessionConfig
from actors.session_agent_postgres import PostgresSessionAgent, PostgresSessionEnv
from runtime import open_host
from runtime.server.app import bind_sessions, create_app
from runtime.testing import run_in_actor
from tests.runtime.lifecycle.rich_session import same_apart_from_header

TOKEN = "across-modes-token"
CONFIG = SessionConfig(blocks=(BlockConfig("memory", "writable", description="Facts"),
                               BlockConfig("kb", "searchable", description="Knowledge")))


async def call(client, method, path, body=None, *, raw=None):
    headers = {"Authorization": f"Bearer {TOKEN}"}
    options = {"headers": headers, "scope_base": {"raw_path": path.encode("ascii")}}
    if raw is not None:
        options["data"] = raw
        headers["Content-Type"] = "application/x-ndjson"
    elif body is not None:
        options["data"] = json.dumps(body)
        headers["Content-Type"] = "application/json"
    response = await client.open(path, method=method, **options)
    data = await response.get_data()
    kind = response.headers.get("Content-Type", "")
    if kind.startswith("application/msgpack"):
        return response.status_code, msgpack.unpackb(data)
    if kind.startswith("application/json"):
        return response.status_code, json.loads(data)
    return response.status_code, data.decode("utf-8")


def msg(message_id, text, role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": text}]}


async def write(client, session):
    base = f"/v1/sessions/{session}"
    steps = [("POST", "/messages:batch", {"messages": [msg("m0", "flight to Lisbon"), msg("m1", "noted", "assistant"),
                                                      msg("m2", "aisle seat please")]}),
             ("POST", "/messages", {"message": msg("b1", "window seat instead"), "parentId": "m1"}),
             ("PUT", "/context/memory", {"content": "likes aisle seats"}),
             ("POST", "/tools/set_context", {"label": "kb", "content": "Gate B12 opens early",
                                             "metadata": {"title": "Gates"}}),
             ("POST", "/rpc", {"method": "set_metadata", "params": [{"title": "trip"}]})]
    for method, path, body in steps:
        status, answer = await call(client, method, base + path, body)
        assert status in (200, 201), answer
    assert (await call(client, "GET", base + "/system-prompt"))[0] == 200


async def test_an_archive_goes_from_postgres_to_a_file_and_back_with_its_kv_rows(tmp_path, pg_storage):
    async with open_host(tmp_path / "pg") as pg_host, open_host(tmp_path / "file") as file_host:
        pg_sessions = bind_sessions(pg_host, PostgresSessionEnv(pg_storage, CONFIG), agent_class=PostgresSessionAgent)
        bind_sessions(file_host, CONFIG)
        pg = create_app(pg_host, token=TOKEN).test_client()
        files = create_app(file_host, token=TOKEN).test_client()
        await write(pg, "trip")
        await run_in_actor(pg_sessions.get_by_name("trip"), lambda agent: agent.storage.put("seat", {"row": 12}))
        status, archive = await call(pg, "GET", "/v1/sessions/trip/export")
        assert status == 200, archive
        kinds = [json.loads(line)["type"] for line in archive.splitlines()]
        assert kinds.count("kv") == 1 and kinds.count("message") == 4
        history = (await call(pg, "GET", "/v1/sessions/trip/messages"))[1]

        status, answer = await call(files, "POST", "/v1/sessions/trip/import", raw=archive)
        assert (status, answer) == (201, {"imported": 4})
        status, from_file = await call(files, "GET", "/v1/sessions/trip/export")
        same_apart_from_header(archive, from_file, "trip")
        assert (await call(files, "GET", "/v1/sessions/trip/messages"))[1] == history

        assert (await call(pg, "DELETE", "/v1/sessions/trip"))[0] == 204
        status, answer = await call(pg, "POST", "/v1/sessions/trip/import", raw=from_file)
        assert (status, answer) == (201, {"imported": 4})
        status, again = await call(pg, "GET", "/v1/sessions/trip/export")
        same_apart_from_header(archive, again, "trip")
        assert (await call(pg, "GET", "/v1/sessions/trip/messages"))[1] == history
        seat = await run_in_actor(pg_sessions.get_by_name("trip"), lambda agent: agent.storage.get("seat"))
        assert seat == {"row": 12}
        hits = (await call(pg, "POST", "/v1/sessions/trip/tools/search_context", {"label": "kb", "query": "gate"}))[1]
        assert "Gate B12 opens early" in json.dumps(hits)


async def test_an_actor_holding_kv_rows_is_refused_and_keeps_them(tmp_path, pg_storage):
    async with open_host(tmp_path / "pg") as pg_host:
        sessions = bind_sessions(pg_host, PostgresSessionEnv(pg_storage, CONFIG), agent_class=PostgresSessionAgent)
        pg = create_app(pg_host, token=TOKEN).test_client()
        await write(pg, "source")
        archive = (await call(pg, "GET", "/v1/sessions/source/export"))[1]
        await run_in_actor(sessions.get_by_name("kept"), lambda agent: agent.storage.put("mine", 1))
        status, answer = await call(pg, "POST", "/v1/sessions/kept/import", raw=archive.replace(
            '"sessionId":"source"', '"sessionId":"kept"'))
        assert status == 409 and "KV rows" in answer["error"]["message"], answer
        assert (await call(pg, "GET", "/v1/sessions/kept/messages"))[1]["messages"] == []
        assert await run_in_actor(sessions.get_by_name("kept"), lambda agent: agent.storage.get("mine")) == 1
        assert pg_storage.sql("SELECT count(*) AS n FROM assistant_messages WHERE session_id = ?",
                              sessions.id_from_name("kept").hex) == [{"n": 0}]


