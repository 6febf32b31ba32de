"""Retention with the sessions in Postgres, in-process (runtime/server/retention.py): a session listed as idle
but written before its turn to go is kept; rows of the catalog that are not this namespace's sessions are left
alone."""

from __future__ import annotations

import time

from actors.session_agent import SessionConfig
from actors.session_agent_postgres import PostgresSessionAgent, PostgresSessionEnv
from runtime import open_host
from runtime.server import retention
from runtime.server.app import bind_sessions, create_app

DAY_MS = 86_400_000


def msg(message_id):
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": f"text of {message_id}"}]}


def age(pg_storage, name, days):
    stamp = int(time.time() * 1000) - days * DAY_MS
    pg_storage.exec("UPDATE durable_sessions_catalog SET updated_ms = ? WHERE name = ?", stamp, name)


async def test_a_session_written_after_the_listing_is_kept(tmp_path, pg_storage):
    async with open_host(tmp_path / "data") as host:
        sessions = bind_sessions(host, PostgresSessionEnv(pg_storage, SessionConfig()), agent_class=PostgresSessionAgent)
        server = create_app(host, token=None).extensions["durable_sessions"]
        for name in ("old", "revived"):
            await sessions.get_by_name(name).call("append_message", msg(f"{name}-1"))
            age(pg_storage, name, 40)
        # A row of another writer of the tables (a session key that is no actor of this namespace's names).
        pg_storage.exec("INSERT INTO durable_sessions_catalog (session_id, name, created_ms, updated_ms) "
                        "VALUES ('not-an-actor', 'stranger', 0, 0)")
        listed = await retention.collect(server, 30, dry_run=True)
        assert sorted(idle.name for idle in listed) == ["old", "revived"]

        await sessions.get_by_name("revived").call("append_message", msg("revived-2"))  # written since
        cutoff = int(time.time() * 1000) - 30 * DAY_MS
        erase = retention._PostgresEraser(server, cutoff)
        revived = next(idle for idle in listed if idle.name == "revived")
        assert await erase(revived) is False
        assert [m["id"] for m in await sessions.get_by_name("revived").call("get_history")] == [
            "revived-1", "revived-2"]

        deleted = await retention.collect(server, 30, dry_run=False)
        assert [idle.name for idle in deleted] == ["old"]
        names = {row["name"] for row in pg_storage.sql("SELECT name FROM durable_sessions_catalog")}
        assert names == {"revived", "stranger"}
        assert pg_storage.scalar("SELECT count(*) FROM assistant_messages WHERE id = 'old-1'") == 0
        assert (await retention.collect(server, 30, dry_run=True)) == []
