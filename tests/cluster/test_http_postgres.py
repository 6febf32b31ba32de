"""Postgres down under real ``serve --cluster`` hosts: 503 with Retry-After, no duplicates, recovery by itself.

And the start of a host whose Postgres cannot be reached: it keeps trying for
``connect_timeout_s``, then exits 1 with one line naming the database.
"""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest
import trio

from runtime.client import SessionsClient
from tests.cluster.test_http_failover import Writer, final_histories
from tests.support.cluster_hosts import run_cluster
from tests.support.postgres import free_port
from tests.support.processes import cli_command, cli_env

pytestmark = pytest.mark.slow


async def test_postgres_restarted_under_load_gives_503_then_recovers_without_duplicates(
        tmp_path, pg_server, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=3, lease_s=2.0) as cluster:
        async with SessionsClient(cluster.urls, timeout=10, retries=100, failover_s=60) as client, \
                httpx.AsyncClient(timeout=30) as http:
            writers = [Writer(client, f"pg{i}") for i in range(3)]
            async with trio.open_nursery() as nursery:
                for writer in writers:
                    nursery.start_soon(writer.run)
                for writer in writers:
                    await writer.wait_for_acks(5, 30)
                await trio.to_thread.run_sync(pg_server.stop, "immediate")
                # While it is down every host answers 503 with Retry-After, promptly: no hang, no half-write.
                seen = []
                for host in cluster.hosts:
                    for session_id in ("pg0", "fresh-while-down"):
                        started = trio.current_time()
                        response = await http.post(f"{host.url}/v1/sessions/{session_id}/messages",
                                                   json={"message": {"id": f"down-{host.name}", "role": "user",
                                                                     "parts": []}})
                        seen.append((response.status_code, response.headers.get("Retry-After"),
                                     response.json()["error"]["type"], trio.current_time() - started))
                assert {status for status, *_ in seen} == {503}, seen
                assert all(retry is not None and int(retry) >= 1 for _, retry, _, _ in seen), seen
                assert all(seconds < 10 for *_, seconds in seen), seen
                acked_while_down = [len(w.acked) for w in writers]
                await trio.to_thread.run_sync(pg_server.start)
                for writer, count in zip(writers, acked_while_down, strict=True):
                    await writer.wait_for_acks(count + 5, 60)  # recovered by itself
                nursery.cancel_scope.cancel()
        for writer in writers:
            writer.check(await final_histories(cluster, writer.session_id))
        down = [m["id"] for m in await final_histories(cluster, "fresh-while-down")]
        assert down == []  # every write refused while down left nothing


def test_a_host_whose_postgres_cannot_be_reached_exits_1_with_one_line(tmp_path):
    config = tmp_path / "sessions.toml"
    config.write_text("[cluster]\npostgres = 'unused'\nconnect_timeout_s = 1.5\n")
    port = free_port()
    started = time.monotonic()
    result = subprocess.run(
        [*cli_command(), "serve", "--bind", "127.0.0.1:0", "--data", str(tmp_path / "d"), "--config", str(config),
         "--cluster", f"postgresql://nobody:s3cret@127.0.0.1:{port}/sessions?connect_timeout=1"],
        env=cli_env(None), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"durable-sessions serve: cannot reach Postgres at 127.0.0.1:{port}/sessions (tried for 1.5 s): ")
    assert "s3cret" not in result.stderr and "nobody" not in result.stderr
    assert "trying again" in result.stderr  # each failed attempt is logged
    assert time.monotonic() - started < 30
