"""Cluster mode refuses import, gc and backup, ``serve --postgres`` export too, with 501 by name (delete works
in both, export in cluster mode: test_erase_cluster.py, test_erase_postgres.py); a host whose placement has no
erase hook refuses ``erase`` before it changes anything."""

import httpx
import pytest

from actors.session_agent_postgres import PostgresSessionAgent
from common.errors import NotSupportedError
from runtime import open_host
from runtime.host.placement import LocalPlacement
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ServerSettings
from tests.support.cluster_hosts import run_cluster

TOKEN = "other-modes-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
REQUESTS = (("GET", "/v1/sessions/chat/export", None),
            ("POST", "/v1/sessions/chat/import", b'{"type":"header"}\n'), ("POST", "/v1/host:gc", b"{}"),
            ("POST", "/v1/host:backup", b'{"to": "/tmp/nowhere-backup"}'))


async def refusals(url, requests=REQUESTS):
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
        return [await http.request(method, path, content=body,
                                   headers={"Content-Type": "application/json"} if body else None)
                for method, path, body in requests]


async def test_cluster_mode_answers_501_naming_what_is_missing(tmp_path, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=1, lease_s=2.0, app=None, token=TOKEN) as cluster:
        [url] = cluster.urls
        async with httpx.AsyncClient(headers=AUTH) as http:
            stored = await http.post(f"{url}/v1/sessions/chat/messages", json={
                "message": {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}})
            assert stored.status_code == 201
        answers = await refusals(url, REQUESTS[2:])  # export and import work in cluster mode
        async with httpx.AsyncClient(headers=AUTH) as http:
            still = await http.get(f"{url}/v1/sessions/chat/messages")
    for answer in answers:
        assert answer.status_code == 501, answer.text
        assert answer.json()["error"]["type"] == "NotSupportedError"
        assert "not supported in cluster mode yet" in answer.json()["error"]["message"]
        assert "the cluster keeps sessions in Postgres" in answer.json()["error"]["message"]
    assert [m["id"] for m in still.json()["messages"]] == ["m1"]


async def test_postgres_mode_answers_501(tmp_path, nursery):
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host, agent_class=PostgresSessionAgent)
        urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                             task_status=task_status))
        answers = await refusals(urls[0], REQUESTS[2:])  # export and import: test_archive_postgres.py
    for answer in answers:
        assert answer.status_code == 501, answer.text
        assert "with the sessions in Postgres (serve --postgres)" in answer.json()["error"]["message"]


class NoErase(LocalPlacement):
    erase = None  # a placement that does not offer the hook


async def test_a_placement_without_erase_is_refused_before_anything_changes(tmp_path):
    async with open_host(tmp_path / "data", placement=NoErase()) as host:
        namespace = bind_sessions(host)
        stub = namespace.get_by_name("kept")
        await stub.call("append_message", {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "x"}]})
        with pytest.raises(NotSupportedError, match=r"placement \(NoErase\): it needs an erase\(actor_id\) hook"):
            await host.erase(namespace, namespace.id_from_name("kept"))
        assert [m["id"] for m in await stub.call("get_history")] == ["m1"]
