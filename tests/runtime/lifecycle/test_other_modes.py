"""Cluster mode and ``serve --postgres`` refuse ``backup`` by name -- 501 over HTTP, one line and exit status 1
from ``durable-sessions backup`` -- pointing at ``pg_dump`` / ``pg_basebackup`` (delete, export, import and gc
work there: test_erase_cluster.py, test_import_cluster.py, test_archive_postgres.py, test_retention_modes.py);
a host whose placement has no erase hook refuses ``erase`` before it changes anything."""

import subprocess

import httpx
import pytest
import trio

from actors.session_agent_postgres import PostgresSessionAgent
from common.errors import NotSupportedError
from runtime import open_host
from runtime.host.placement import LocalPlacement
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ServerSettings
from tests.support.cluster_hosts import run_cluster
from tests.support.processes import cli_command, cli_env

TOKEN = "other-modes-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def backup_answer(url, folder):
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
        return await http.post("/v1/host:backup", json={"to": str(folder)})


def backup_command(url, folder):
    return subprocess.run([*cli_command(), "backup", "--to", str(folder), "--url", url], env=cli_env(TOKEN),
                          capture_output=True, text=True, timeout=120)


async def test_cluster_mode_refuses_backup_naming_the_postgres_tools(tmp_path, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=1, lease_s=2.0, app=None, token=TOKEN) as cluster:
        [url] = cluster.urls
        async with httpx.AsyncClient(headers=AUTH) as http:
            stored = await http.post(f"{url}/v1/sessions/chat/messages", json={
                "message": {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}})
            assert stored.status_code == 201
        answer = await backup_answer(url, tmp_path / "backup")
        command = backup_command(url, tmp_path / "backup")
        async with httpx.AsyncClient(headers=AUTH) as http:
            still = await http.get(f"{url}/v1/sessions/chat/messages")
    assert answer.status_code == 501, answer.text
    assert answer.json()["error"]["type"] == "NotSupportedError"
    message = answer.json()["error"]["message"]
    assert "a cluster keeps its sessions in Postgres" in message and "pg_dump" in message
    assert "pg_basebackup" in message
    assert command.returncode == 1, command
    assert command.stdout == "" and command.stderr.count("\n") == 1 and "pg_dump" in command.stderr, command
    assert "Traceback" not in command.stderr
    assert not (tmp_path / "backup").exists()
    assert [m["id"] for m in still.json()["messages"]] == ["m1"]


async def test_postgres_mode_refuses_backup_naming_the_postgres_tools(tmp_path, nursery):
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host, agent_class=PostgresSessionAgent)
        urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                             task_status=task_status))
        answer = await backup_answer(urls[0], tmp_path / "backup")
        command = await trio.to_thread.run_sync(backup_command, urls[0], tmp_path / "backup")
    assert answer.status_code == 501, answer.text
    message = answer.json()["error"]["message"]
    assert "with serve --postgres the sessions are in Postgres" in message and "pg_dump" in message
    assert command.returncode == 1 and command.stderr.count("\n") == 1 and "pg_basebackup" in command.stderr
    assert not (tmp_path / "backup").exists()


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
