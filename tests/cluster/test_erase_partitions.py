"""A cluster on two databases (``serve --cluster A --cluster B``): ``DELETE /v1/sessions/{id}`` erases the
session's rows in the database of its partition (``PartitionedCluster.erase``) and leaves every other
session's rows alone; real processes, real Postgres (issue 27, item 1)."""

from __future__ import annotations

import httpx
import psycopg

from runtime.host.ids import id_from_name
from runtime.host.partitions import database_index
from tests.support.cluster_hosts import run_cluster

TABLES = ("ds_log", "ds_snapshots", "ds_actors", "ds_alarms", "ds_catalog")


def actor_of(session_id: str) -> str:
    return f"sessions/{id_from_name('sessions', session_id).hex}"


def rows_of(dsn: str, session_id: str) -> dict[str, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {table: conn.execute(f"SELECT count(*) FROM {table} WHERE actor_id = %s",
                                    (actor_of(session_id),)).fetchone()[0] for table in TABLES}


def names_in(database: int, count: int) -> list[str]:
    names = (f"erase-{i}" for i in range(100))
    return [name for name in names if database_index(id_from_name("sessions", name), 2) == database][:count]


async def test_delete_erases_in_the_database_of_the_partition(tmp_path, pg_empty_dsn, second_dsn):
    dsns = [pg_empty_dsn, second_dsn]
    sessions = {database: names_in(database, 2) for database in (0, 1)}  # (doomed, kept) in each database
    with run_cluster(tmp_path, dsns, hosts=2, lease_s=2.0, app=None) as cluster:
        first, second = cluster.hosts
        async with httpx.AsyncClient(timeout=30) as http:
            for names in sessions.values():
                for name in names:
                    answer = await http.post(f"{first.url}/v1/sessions/{name}/messages", json={"message": {
                        "id": "m1", "role": "user", "parts": [{"type": "text", "text": f"text of {name}"}]}})
                    assert answer.status_code == 201, answer.text
            for database, (doomed, kept) in sessions.items():
                assert rows_of(dsns[database], doomed)["ds_actors"] == 1
                assert rows_of(dsns[1 - database], doomed) == dict.fromkeys(TABLES, 0)
                deleted = await http.delete(f"{second.url}/v1/sessions/{doomed}")  # the first host owns it
                assert deleted.status_code == 204, deleted.text
            for database, (doomed, kept) in sessions.items():
                assert rows_of(dsns[database], doomed) == dict.fromkeys(TABLES, 0)
                assert rows_of(dsns[database], kept)["ds_actors"] == 1 and rows_of(dsns[database], kept)["ds_catalog"]
            listed = (await http.get(f"{second.url}/v1/sessions")).json()["sessions"]
            assert sorted(entry["id"] for entry in listed) == sorted(kept for _doomed, kept in sessions.values())
