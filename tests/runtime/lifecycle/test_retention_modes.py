"""Retention in cluster mode and with the sessions in Postgres (issue 27, item 3): ``durable-sessions gc``
finds the idle sessions in the catalog (``ds_catalog``, ``durable_sessions_catalog``) by their last write,
``--dry-run`` lists them, a real run deletes them through the delete path and logs each; nothing without
``[retention] delete_idle_after_days``. Real ``serve --cluster`` / ``serve --postgres`` processes on a real
Postgres; the catalog rows are aged by hand (the clock is not moved)."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import httpx
import psycopg

from tests.support.cluster_hosts import run_cluster
from tests.support.processes import cli_command, cli_env, server_process

TOKEN = "retention-modes-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DAY_MS = 86_400_000
RETENTION = "[retention]\ndelete_idle_after_days = 30\n"


def message(message_id: str, text: str) -> dict:
    return {"message": {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}}


def gc(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*cli_command(), "gc", *args, "--url", url], env=cli_env(TOKEN), capture_output=True,
                          text=True, timeout=120)


def age(dsn: str, table: str, names: list[str], days: int) -> None:
    """Make the catalog say these sessions were last written ``days`` ago."""
    stamp = int(time.time() * 1000) - days * DAY_MS
    with psycopg.connect(dsn) as conn:
        changed = conn.execute(f"UPDATE {table} SET updated_ms = %s, created_ms = %s WHERE name = ANY(%s)",
                               (stamp, stamp, names)).rowcount
    assert changed == len(names)


def files_holding(folders: list[Path], marker: str) -> list[Path]:
    return [path for folder in folders for path in folder.rglob("*")
            if path.is_file() and marker.encode() in path.read_bytes()]


async def test_gc_in_a_cluster_lists_then_erases_idle_sessions_everywhere_and_logs_each(tmp_path, pg_empty_dsn):
    marker = f"idle-{uuid.uuid4().hex}"
    config = tmp_path / "retention.toml"
    config.write_text(RETENTION, encoding="utf-8")
    with run_cluster(tmp_path, pg_empty_dsn, hosts=3, lease_s=2.0, app=None, token=TOKEN,
                     extra=["--config", str(config), "--log-level", "INFO"]) as cluster:
        h1, h2, h3 = cluster.hosts
        async with httpx.AsyncClient(headers=AUTH, timeout=60) as http:
            for name, host in (("old-1", h1), ("old-2", h2), ("fresh", h1)):
                stored = await http.post(f"{host.url}/v1/sessions/{name}/messages", json=message("m1", f"{marker} {name}"))
                assert stored.status_code == 201, stored.text
            age(cluster.dsn, "ds_catalog", ["old-1", "old-2"], 40)

            dry = gc(h3.url, "--dry-run")
            assert dry.returncode == 0, dry
            lines = dry.stdout.splitlines()
            assert sorted(line.split(" (")[0] for line in lines[:-1]) == ["would delete old-1", "would delete old-2"]
            assert lines[-1] == "would delete 2 sessions idle for more than 30 days"
            listed = {e["id"] for e in (await http.get(f"{h3.url}/v1/sessions")).json()["sessions"]}
            assert listed == {"old-1", "old-2", "fresh"}

            done = gc(h3.url)  # a host that owns neither: the deletes go to their owners
            assert done.returncode == 0, done
            assert done.stdout.splitlines()[-1] == "deleted 2 sessions idle for more than 30 days"
            for host in cluster.hosts:
                listed = [e["id"] for e in (await http.get(f"{host.url}/v1/sessions")).json()["sessions"]]
                assert listed == ["fresh"], host.name
                for name in ("old-1", "old-2"):
                    history = await http.get(f"{host.url}/v1/sessions/{name}/messages")
                    assert history.json()["messages"] == [], history.text
            with psycopg.connect(cluster.dsn) as conn:
                for table in ("ds_log", "ds_snapshots", "ds_actors", "ds_catalog"):
                    rows = conn.execute(f"SELECT count(*) FROM {table} t WHERE t::text LIKE %s",
                                        (f"%{marker} old%",)).fetchone()[0]
                    assert rows == 0, table
                assert conn.execute("SELECT count(*) FROM ds_catalog WHERE name LIKE 'old-%'").fetchone()[0] == 0
            assert [p.name for p in files_holding([h.data_dir for h in cluster.hosts], f"{marker} old")] == []
            again = gc(h1.url)
            assert again.stdout.splitlines() == ["deleted 0 sessions idle for more than 30 days"]
            fresh = (await http.get(f"{h2.url}/v1/sessions/fresh/messages")).json()["messages"]
            assert [m["id"] for m in fresh] == ["m1"]
        logged = [line for line in h3.log_path.read_text().splitlines() if "deleted session 'old-" in line]
        assert len(logged) == 2 and all("idle since" in line and "(more than 30 days)" in line for line in logged)


async def test_gc_with_the_sessions_in_postgres_deletes_idle_rows_and_nothing_unconfigured(tmp_path, pg_empty_dsn):
    config = tmp_path / "retention.toml"
    config.write_text(RETENTION, encoding="utf-8")
    data = tmp_path / "data"
    with server_process(data, token=TOKEN, extra=["--postgres", pg_empty_dsn]) as server:  # retention off
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as http:
            for name in ("old-1", "old-2", "fresh"):
                assert http.post(f"/v1/sessions/{name}/messages", json=message("m1", name)).status_code == 201
        age(pg_empty_dsn, "durable_sessions_catalog", ["old-1", "old-2"], 40)
        off = gc(server.url)
        assert off.returncode == 0 and off.stdout.startswith("retention is off"), off
    with server_process(data, token=TOKEN, extra=["--postgres", pg_empty_dsn, "--config", str(config),
                                                 "--log-level", "INFO"]) as server:
        dry = gc(server.url, "--dry-run")
        assert dry.returncode == 0, dry
        assert sorted(line.split(" (")[0] for line in dry.stdout.splitlines()[:-1]) == [
            "would delete old-1", "would delete old-2"]
        done = gc(server.url)
        assert done.stdout.splitlines()[-1] == "deleted 2 sessions idle for more than 30 days", done
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as http:
            assert [e["id"] for e in http.get("/v1/sessions").json()["sessions"]] == ["fresh"]
            assert http.get("/v1/sessions/old-1/messages").json()["messages"] == []
        with psycopg.connect(pg_empty_dsn) as conn:
            names = [row[0] for row in conn.execute("SELECT name FROM durable_sessions_catalog ORDER BY name")]
            assert names == ["fresh"]
            texts = [row[0] for row in conn.execute("SELECT content FROM assistant_messages")]
            assert len(texts) == 1 and '"fresh"' in texts[0]
    log = data.with_name(data.name + "-server.log").read_text()
    assert sum("deleted session 'old-" in line and "(more than 30 days)" in line for line in log.splitlines()) == 2
