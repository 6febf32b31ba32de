"""Cluster mode: ``DELETE /v1/sessions/{id}`` through a host that does not own the session erases it
everywhere -- its rows in every cluster table, the owner's working copy and a former owner's copy -- with
real ``serve --cluster`` processes on a real Postgres (issue 27, item 1)."""

import uuid
from pathlib import Path

import httpx
import psycopg

from storage.cluster.restore import decompress_image
from tests.support.cluster_hosts import run_cluster

def message(message_id: str, text: str) -> dict:
    return {"message": {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}}


def rows_holding(dsn: str, marker: str) -> dict[str, int]:
    """How many rows of each cluster table hold ``marker`` (snapshot images decompressed)."""
    needle = marker.encode()
    with psycopg.connect(dsn) as conn:
        found = {
            "ds_log": sum(needle in bytes(blob) for (blob,) in conn.execute("SELECT changeset FROM ds_log")),
            "ds_snapshots": sum(needle in decompress_image(bytes(blob))
                                for (blob,) in conn.execute("SELECT image FROM ds_snapshots")),
        }
        for table in ("ds_actors", "ds_alarms", "ds_catalog"):
            found[table] = conn.execute(
                f"SELECT count(*) FROM {table} t WHERE t::text LIKE %s", (f"%{marker}%",)).fetchone()[0]
    return found


def files_holding(folders: list[Path], marker: str) -> list[Path]:
    needle = marker.encode()
    return [path for folder in folders for path in folder.rglob("*") if path.is_file() and needle in path.read_bytes()]


def actor_rows(dsn: str, session_id: str) -> dict[str, int]:
    """Rows per table of the actor whose catalog row names ``session_id`` (before the erase: its id)."""
    with psycopg.connect(dsn) as conn:
        [(actor,)] = conn.execute("SELECT actor_id FROM ds_catalog WHERE name = %s", (session_id,)).fetchall()
        return {table: conn.execute(f"SELECT count(*) FROM {table} WHERE actor_id = %s", (actor,)).fetchone()[0]
                for table in ("ds_log", "ds_snapshots", "ds_actors", "ds_alarms", "ds_catalog")}, actor


async def test_delete_through_a_non_owner_erases_every_row_and_file(tmp_path, pg_empty_dsn):
    doomed, kept = f"doomed-{uuid.uuid4().hex}", f"kept-{uuid.uuid4().hex}"  # the ids are markers too
    marker, kept_marker = f"erase-me-{uuid.uuid4().hex}", f"keep-me-{uuid.uuid4().hex}"
    with run_cluster(tmp_path, pg_empty_dsn, hosts=3, lease_s=2.0, app=None) as cluster:
        first = cluster.hosts[0]
        async with httpx.AsyncClient(timeout=30) as http:
            for i in range(3):
                for session, text in ((doomed, marker), (kept, kept_marker)):
                    stored = await http.post(f"{first.url}/v1/sessions/{session}/messages",
                                             json=message(f"m{i}", f"{text} #{i}"))
                    assert stored.status_code == 201, stored.text
            # The session moves: its first owner stops (releasing its lease, keeping a clean working copy), a
            # second host takes it over with a write, and the first starts again. Two hosts hold a copy.
            former = cluster.owner_of(doomed)
            former.stop()
            second = next(host for host in cluster.hosts if host is not former)
            moved = await http.post(f"{second.url}/v1/sessions/{doomed}/messages", json=message("m3", f"{marker} #3"))
            assert moved.status_code == 201, moved.text
            former.start()
            owner = cluster.owner_of(doomed, via=second)
            assert owner is second
            assert {path.relative_to(tmp_path).parts[0] for path in files_holding(
                [host.data_dir for host in cluster.hosts], marker)} == {former.data_dir.name, second.data_dir.name}
            other = next(host for host in cluster.hosts if host not in (former, second))
            before, actor = actor_rows(cluster.dsn, doomed)
            assert before["ds_log"] + before["ds_snapshots"] >= 1 and before["ds_actors"] == 1, before
            assert sum(rows_holding(cluster.dsn, marker).values()) >= 1  # the check below can find the marker

            # Export works from any host (forwarded to the owner like any session call).
            exported = [await http.get(f"{host.url}/v1/sessions/{doomed}/export") for host in cluster.hosts]
            for answer in exported:
                assert answer.status_code == 200, answer.text
                assert answer.headers["content-type"].startswith("application/x-ndjson")
                assert answer.text.count(marker) >= 4 and answer.text.endswith("\n")
            missing = await http.get(f"{other.url}/v1/sessions/never-written/export")
            assert missing.status_code == 404 and missing.json()["error"]["type"] == "SessionNotFoundError"

            deleted = await http.delete(f"{other.url}/v1/sessions/{doomed}")
            assert deleted.status_code == 204, deleted.text
            assert deleted.content == b""

            folders = [host.data_dir for host in cluster.hosts]
            assert rows_holding(cluster.dsn, marker) == dict.fromkeys(
                ("ds_log", "ds_snapshots", "ds_actors", "ds_alarms", "ds_catalog"), 0)
            assert rows_holding(cluster.dsn, doomed) == dict.fromkeys(
                ("ds_log", "ds_snapshots", "ds_actors", "ds_alarms", "ds_catalog"), 0)
            with psycopg.connect(cluster.dsn) as conn:
                for table in ("ds_log", "ds_snapshots", "ds_actors", "ds_alarms", "ds_catalog"):
                    assert conn.execute(f"SELECT count(*) FROM {table} WHERE actor_id = %s",
                                        (actor,)).fetchone()[0] == 0, table
            assert files_holding(folders, marker) == []
            # The other session is untouched (and the same searches find its marker).
            assert rows_holding(cluster.dsn, kept_marker)["ds_log"] + rows_holding(
                cluster.dsn, kept_marker)["ds_snapshots"] >= 1
            for host in cluster.hosts:
                listed = (await http.get(f"{host.url}/v1/sessions")).json()["sessions"]
                assert [entry["id"] for entry in listed] == [kept], host.name
                history = await http.get(f"{host.url}/v1/sessions/{doomed}/messages")
                assert history.status_code == 200 and history.json()["messages"] == [], history.text
                kept_history = (await http.get(f"{host.url}/v1/sessions/{kept}/messages")).json()["messages"]
                assert [m["id"] for m in kept_history] == ["m0", "m1", "m2"]
                gone = await http.get(f"{host.url}/v1/sessions/{doomed}/export")
                assert gone.status_code == 404, gone.text

            again = await http.delete(f"{first.url}/v1/sessions/{doomed}")
            assert again.status_code == 404, again.text
            assert again.json()["error"]["type"] == "SessionNotFoundError"

            fresh = await http.post(f"{other.url}/v1/sessions/{doomed}/messages", json=message("new", "a new start"))
            assert fresh.status_code == 201, fresh.text
            for host in cluster.hosts:
                history = (await http.get(f"{host.url}/v1/sessions/{doomed}/messages")).json()["messages"]
                assert [m["id"] for m in history] == ["new"], host.name
            assert files_holding(folders, marker) == []
