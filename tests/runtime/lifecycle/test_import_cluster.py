"""Cluster mode: ``POST /v1/sessions/{id}/import`` through a host that does not own the session is imported by
the owner as one turn, its writes in the cluster log before the answer: after kill -9 of that owner another
host exports the same archive (issue 27, item 2), with real ``serve --cluster`` processes on a real Postgres."""

import uuid

import httpx

from common.wire import OWNER_HEADER
from runtime.client import SessionsClient

from tests.runtime.lifecycle.rich_session import CONFIG, message, same_apart_from_header, write_rich_session
from tests.support.cluster_hosts import await_until, run_cluster

LEASE_S = 1.5


async def test_an_import_acknowledged_by_a_forwarding_host_survives_kill_9_of_the_owner(tmp_path, pg_empty_dsn):
    marker = f"import-{uuid.uuid4().hex}"
    source, copy = f"source-{marker}", f"copy-{marker}"
    config = tmp_path / "sessions.toml"
    config.write_text(CONFIG, encoding="utf-8")
    with run_cluster(tmp_path, pg_empty_dsn, hosts=3, lease_s=LEASE_S, app=None,
                     extra=["--config", str(config)]) as cluster:
        first = cluster.hosts[0]
        async with httpx.AsyncClient(timeout=60) as http:
            await write_rich_session(http, first.url, source, marker)
            exported = await http.get(f"{first.url}/v1/sessions/{source}/export")
            assert exported.status_code == 200, exported.text
            archive = exported.text
            assert archive.count(marker) >= 9

            # A socket held on the first host makes it the (empty) session's owner, and keeps it the owner
            # while the actor hibernates after the import; the import goes through another host.
            owner, other = first, cluster.hosts[1]
            async with SessionsClient(owner.url) as client, client.session(copy).events():
                assert cluster.owner_of(copy, via=other) is owner
                imported = await http.post(f"{other.url}/v1/sessions/{copy}/import", content=archive.encode(),
                                           headers={"Content-Type": "application/x-ndjson"})
                assert imported.status_code == 201, imported.text
                assert imported.json() == {"imported": 6}
                assert imported.headers[OWNER_HEADER] == owner.url  # forwarded to the owner, run there
                owner.kill()  # kill -9 at once: the import must already be durable in Postgres

            survivors = [host for host in cluster.hosts if host is not owner]

            async def exported_copy():
                answer = await http.get(f"{survivors[-1].url}/v1/sessions/{copy}/export")
                return answer if answer.status_code == 200 else None

            again = await await_until(exported_copy, LEASE_S + 60, "a survivor to export the imported session",
                                      interval=0.1)
            same_apart_from_header(archive, again.text, copy)
            history = (await http.get(f"{survivors[0].url}/v1/sessions/{copy}/messages")).json()["messages"]
            original = (await http.get(f"{survivors[0].url}/v1/sessions/{source}/messages")).json()["messages"]
            assert history == original and [m["id"] for m in history][1:] == ["m2", "m3", "m4"]  # the overlay first
            listed = {entry["id"] for entry in (await http.get(f"{survivors[0].url}/v1/sessions")).json()["sessions"]}
            assert listed == {source, copy}

            # A second import into the now written session is refused (409), through any host.
            refused = await http.post(f"{survivors[0].url}/v1/sessions/{copy}/import", content=archive.encode())
            assert refused.status_code == 409, refused.text
            assert refused.json()["error"]["type"] == "ConflictError"


async def test_a_bad_archive_is_refused_by_line_and_stores_nothing_in_the_cluster(tmp_path, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=2, lease_s=LEASE_S, app=None) as cluster:
        first, second = cluster.hosts
        async with httpx.AsyncClient(timeout=60) as http:
            stored = await http.post(f"{first.url}/v1/sessions/src/messages", json={"message": message("m1", "hi")})
            assert stored.status_code == 201, stored.text
            archive = (await http.get(f"{second.url}/v1/sessions/src/export")).text
            lines = archive.split("\n")
            cut = "\n".join(lines[:-2]) + "\n"  # no end record: cut short
            damaged = "\n".join([lines[0], lines[1].replace('"parentId":null,', ""), *lines[2:]])
            for body, expected in ((cut, "line 3: the archive ends before its end record"),
                                   (damaged, "line 2: a message record needs 'parentId'")):
                for host in cluster.hosts:
                    answer = await http.post(f"{host.url}/v1/sessions/dst/import", content=body.encode())
                    assert answer.status_code == 400, answer.text
                    assert answer.json()["error"]["message"].startswith(expected), answer.text
            for host in cluster.hosts:
                assert (await http.get(f"{host.url}/v1/sessions/dst/export")).status_code == 404
                history = await http.get(f"{host.url}/v1/sessions/dst/messages")
                assert history.json()["messages"] == []
