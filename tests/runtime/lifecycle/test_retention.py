"""Retention: ``[retention] delete_idle_after_days`` and ``POST /v1/host:gc`` (runtime/server/lifecycle_routes.py)."""

import logging
import time

import pytest

from runtime import open_host
from runtime.client import SessionsClient
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ConfigError, ServerSettings, load_config
from storage.catalog import CATALOG_FILE, CATALOG_MIGRATIONS
from storage.sqlite import SqlStorage

TOKEN = "retention-token"
DAY_MS = 86_400_000


def msg(mid):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": f"text of {mid}"}]}


async def start(nursery, host, days):
    bind_sessions(host)
    urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                         retention_days=days, task_status=task_status))
    return urls[0]



def age(data, names, days):
    """Make the catalog say these sessions were last written ``days`` ago (no host running)."""
    storage = SqlStorage.open(data / CATALOG_FILE, migrations=CATALOG_MIGRATIONS)
    try:
        stamp = int(time.time() * 1000) - days * DAY_MS
        for name in names:
            storage.exec("UPDATE actors SET updated_ms = ?, created_ms = ? WHERE name = ?", stamp, stamp, name)
    finally:
        storage.close()


async def test_gc_lists_then_deletes_sessions_idle_past_the_limit_and_logs_each(tmp_path, nursery, caplog):
    data = tmp_path / "data"
    async with open_host(data) as host:
        url = await start(nursery, host, None)
        async with SessionsClient(url, token=TOKEN) as client:
            for name in ("old-1", "old-2", "fresh"):
                await client.session(name).append_message(msg(f"{name}-1"))
    age(data, ["old-1", "old-2"], 40)
    caplog.set_level(logging.INFO, logger="durable_sessions.retention")
    async with open_host(data) as host:
        url = await start(nursery, host, 30)
        async with SessionsClient(url, token=TOKEN) as client:
            dry = await client.collect_garbage(dry_run=True)
            assert dry["idleDays"] == 30 and dry["deleted"] is False
            assert sorted(entry["id"] for entry in dry["sessions"]) == ["old-1", "old-2"]
            assert sorted([e["id"] async for e in client.iter_sessions()]) == ["fresh", "old-1", "old-2"]
            assert not [r for r in caplog.records if r.name == "durable_sessions.retention"]
            done = await client.collect_garbage()
            assert sorted(entry["id"] for entry in done["sessions"]) == ["old-1", "old-2"] and done["deleted"]
            assert [e["id"] async for e in client.iter_sessions()] == ["fresh"]
            assert (await client.collect_garbage())["sessions"] == []
    logged = sorted(r.getMessage() for r in caplog.records if r.name == "durable_sessions.retention")
    assert len(logged) == 2
    assert logged[0].startswith("deleted session 'old-1': idle since ") and logged[0].endswith("(more than 30 days)")


async def test_without_configuration_gc_deletes_nothing(tmp_path, nursery):
    data = tmp_path / "data"
    async with open_host(data) as host:
        url = await start(nursery, host, None)
        async with SessionsClient(url, token=TOKEN) as client:
            await client.session("ancient").append_message(msg("a"))
    age(data, ["ancient"], 4000)
    async with open_host(data) as host:
        url = await start(nursery, host, None)
        async with SessionsClient(url, token=TOKEN) as client:
            assert await client.collect_garbage() == {"idleDays": None, "sessions": [], "deleted": False}
            assert [e["id"] async for e in client.iter_sessions()] == ["ancient"]


def test_retention_config_key(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[retention]\ndelete_idle_after_days = 90\n")
    assert load_config(path).retention.delete_idle_after_days == 90
    assert load_config(None).retention.delete_idle_after_days is None
    for bad, message in (("0", "retention.delete_idle_after_days must be a whole number of days >= 1, not 0"),
                         ('"30"', "retention.delete_idle_after_days must be a whole number of days >= 1, not '30'")):
        path.write_text(f"[retention]\ndelete_idle_after_days = {bad}\n")
        with pytest.raises(ConfigError, match=message):
            load_config(path)
    path.write_text("[retention]\nkeep = 3\n")
    with pytest.raises(ConfigError, match="unknown key retention.keep"):
        load_config(path)
