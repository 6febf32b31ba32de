"""A host that was down while a session was deleted never serves its stale copy (real processes).

The host keeps a clean working copy of the session (marker: the cluster, the
log's newest entry). It is killed with ``kill -9``, the session is deleted
through another host (which cannot tell the dead one to drop its copy) and
written again up to exactly the same sequence number, then the dead host
comes back and is asked first. The copy's marker names the session's old
incarnation (``ds_actors.incarnation``), so the host rebuilds the file from
the log instead of taking the copy for current.
"""

from __future__ import annotations

import httpx
import psycopg
import pytest

from runtime.client import SessionsClient
from tests.cluster.test_http_forwarding import msg
from tests.support.cluster_hosts import run_cluster, wait_until

pytestmark = pytest.mark.slow


def last_seq(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT last_seq FROM ds_actors").fetchone()
    return 0 if row is None else int(row[0])


def owner(dsn: str) -> str | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT owner FROM ds_actors").fetchone()
    return None if row is None else row[0]


async def test_a_host_down_during_a_delete_rebuilds_instead_of_serving_its_stale_copy(tmp_path, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=2, lease_s=2.0) as cluster:
        first, other = cluster.hosts
        async with httpx.AsyncClient(timeout=60) as http:
            async with SessionsClient(first.url) as client:
                for i in range(3):
                    await client.session("s").append_messages([msg(f"old-{i}", "the old secret")])
            assert cluster.owner_of("s", via=first) is first
            hibernated = await http.post(f"{first.url}/v1/actors:hibernate", json={"sessionIds": ["s"]})
            assert hibernated.json() == {"hibernated": 1}  # its copy is clean now, at the log's newest entry
            wait_until(lambda: owner(pg_empty_dsn) is None, 20, "the lease released")
            stale_seq = last_seq(pg_empty_dsn)
            first.kill()

            deleted = await http.delete(f"{other.url}/v1/sessions/s")
            assert deleted.status_code == 204, deleted.text
            async with SessionsClient(other.url) as client:
                i = 0
                while last_seq(pg_empty_dsn) < stale_seq:  # written again, up to the same sequence number
                    await client.session("s").append_messages([msg(f"new-{i}", "fresh")])
                    i += 1
            assert last_seq(pg_empty_dsn) == stale_seq
            hibernated = await http.post(f"{other.url}/v1/actors:hibernate", json={"sessionIds": ["s"]})
            assert hibernated.json() == {"hibernated": 1}
            wait_until(lambda: owner(pg_empty_dsn) is None, 20, "the lease released")

            first.start()  # the stale copy is still in its data folder
            async with SessionsClient(first.url) as client:
                history = await client.session("s").get_history()
            assert [m["id"] for m in history] == [f"new-{j}" for j in range(i)]
            assert cluster.owner_of("s", via=first) is first  # it served the session itself, rebuilt
