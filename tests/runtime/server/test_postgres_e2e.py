"""End to end on Postgres: real ``durable-sessions serve --postgres`` processes and a real Postgres.

* tau-bench chats imported through the CLI come back -- every history and
  the booking-code search -- after hibernation and after the host process
  restarted (the 200 trajectories of the shared data set when present,
  the two small copies in ``tests/data`` always);
* a Postgres that is stopped answers 503 with ``Retry-After`` at once, one
  that hangs (every process SIGSTOPped) answers 503 within the call
  deadline, never a hang; both recover without restarting the host;
* a host killed with ``kill -9`` while batches are written leaves each
  batch whole or absent.

These tests run their own Postgres server (they stop and freeze it), not
the shared one of ``tests/support/postgres.py``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psycopg
import pytest
import trio

from common.errors import StorageUnavailableError
from runtime.cli.importer import read_conversations
from runtime.client import SessionsClient
from tests.runtime.server.test_e2e_server import _cli, _hibernate_all, _inputs, _verify
from tests.support.postgres import PostgresServer, _postmaster_pid, find_bin_dir
from tests.support.processes import kill_hard, server_process

TOKEN = "e2e-token"  # what the helpers of test_e2e_server send


@pytest.fixture(scope="module")
def own_pg():
    """A Postgres server of this module's own (stopped and frozen by the tests)."""
    if find_bin_dir() is None:
        pytest.skip("Postgres binaries not found") if not os.environ.get("CI") else pytest.fail("no Postgres in CI")
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def dsn(own_pg):
    """A fresh empty database (the host creates the schema itself)."""
    if not own_pg.is_running():
        own_pg.start()
    name = own_pg.create_database("template0")
    yield own_pg.dsn(name)
    if own_pg.is_running():
        own_pg.drop_database(name)


def _config(tmp_path: Path, timeout_s: float) -> Path:
    path = tmp_path / "sessions.toml"
    path.write_text(f"[storage]\npool_size = 4\ntimeout_s = {timeout_s}\n", encoding="utf-8")
    return path


def _pg_processes(server: PostgresServer) -> list[int]:
    """The postmaster and every process it forked."""
    root = _postmaster_pid(server.data_dir)
    pids = [root]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == root:
                pids.append(int(entry))
    return pids


@pytest.mark.parametrize("source", _inputs())
def test_imported_chats_come_back_after_hibernation_and_a_restart(tmp_path, dsn, source):
    sessions = read_conversations(source)
    total = sum(len(s.messages) for s in sessions)
    data = tmp_path / "data"
    with server_process(data, token=TOKEN, extra=["--postgres", dsn]) as server:
        imported = _cli("import", str(source), "--url", server.url, "--no-progress")
        assert imported.returncode == 0, imported.stderr
        assert imported.stdout == (f"imported {len(sessions)} of {len(sessions)} sessions: {total} messages stored, "
                                   "0 already there\n")
        hibernated, _ = trio.run(_hibernate_all, server.url)
        assert hibernated == len(sessions)
        with_code, _ = trio.run(_verify, server.url, sessions)
        assert with_code >= 1
    with psycopg.connect(dsn) as conn:
        stored = conn.execute("SELECT count(*), count(DISTINCT session_id) FROM assistant_messages").fetchone()
    assert stored == (total, len(sessions))

    with server_process(data, token=TOKEN, extra=["--postgres", dsn]) as server:  # a new host process
        again, stats = trio.run(_verify, server.url, sessions)
        assert again == with_code
        assert stats["activations"] == len(sessions)


async def _append(url: str, session_id: str, message_id: str) -> tuple[int | None, str | None]:
    """``(seconds it took, error class name or None)`` of one append."""
    async with SessionsClient(url, token=TOKEN) as client:
        started = time.monotonic()
        try:
            await client.session(session_id).append_message(
                {"id": message_id, "role": "user", "parts": [{"type": "text", "text": "hello"}]})
        except StorageUnavailableError as exc:
            return time.monotonic() - started, type(exc).__name__
        return time.monotonic() - started, None


def _append_until_it_works(url: str, session_id: str, message_id: str, within_s: float = 30) -> float:
    """Retry an append answered 503 (as a client honouring ``Retry-After`` does); seconds until it worked."""
    started = time.monotonic()
    while True:
        _, error = trio.run(_append, url, session_id, message_id)
        if error is None:
            return time.monotonic() - started
        assert time.monotonic() - started < within_s, "the host did not recover"
        time.sleep(1)


async def _raw_status(url: str, session_id: str) -> tuple[int, str | None]:
    """Status and ``Retry-After`` of a raw append (no client retries)."""
    import httpx

    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{url}/v1/sessions/{session_id}/messages", headers={"Authorization": f"Bearer {TOKEN}"},
            json={"message": {"id": "raw", "role": "user", "parts": []}}, timeout=60)
    return response.status_code, response.headers.get("Retry-After")


def test_a_stopped_or_frozen_postgres_answers_503_and_the_host_recovers(tmp_path, own_pg, dsn):
    data = tmp_path / "data"
    with server_process(data, token=TOKEN, extra=["--postgres", dsn, "--config", str(_config(tmp_path, 1))]) as server:
        assert trio.run(_append, server.url, "s1", "m1")[1] is None

        own_pg.stop("fast")
        started = time.monotonic()
        assert trio.run(_raw_status, server.url, "s1") == (503, "1")
        assert time.monotonic() - started < 5
        own_pg.start()
        _append_until_it_works(server.url, "s1", "m2")  # the pool reconnects in the background

        frozen = _pg_processes(own_pg)
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            status = trio.run(_raw_status, server.url, "s2")
            took = time.monotonic() - started
        finally:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
        assert status == (503, "1")
        assert took < 10  # the call deadline is 2 x timeout_s = 2 s, plus one answer
        _append_until_it_works(server.url, "s1", "m3")
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT id FROM assistant_messages ORDER BY seq").fetchall()
    assert [r[0] for r in rows][:3] == ["m1", "m2", "m3"]


def test_a_host_killed_mid_batch_leaves_each_batch_whole_or_absent(tmp_path, dsn):
    data = tmp_path / "data"
    batch = 200

    async def writer(url: str, index: int) -> None:
        async with SessionsClient(url, token=TOKEN) as client:
            messages = [{"id": f"b{index}-{i}", "role": "user", "parts": [{"type": "text", "text": f"m {i}"}]}
                        for i in range(batch)]
            try:
                await client.session(f"s{index % 4}").append_messages(messages)
            except Exception:  # noqa: BLE001 - the host dies under it
                pass

    with server_process(data, token=TOKEN, extra=["--postgres", dsn]) as server:

        async def run() -> None:
            async with trio.open_nursery() as nursery:
                for index in range(40):
                    nursery.start_soon(writer, server.url, index)
                with psycopg.connect(dsn, autocommit=True) as conn:  # kill once the first batches landed
                    with trio.fail_after(60):
                        while conn.execute("SELECT count(*) FROM assistant_messages").fetchone()[0] < 2 * batch:
                            await trio.sleep(0.01)
                kill_hard(server)

        trio.run(run)
    with psycopg.connect(dsn) as conn:
        counts = conn.execute(
            "SELECT split_part(id, '-', 1), count(*) FROM assistant_messages GROUP BY 1").fetchall()
    assert 2 <= len(counts) < 40, counts  # some batches landed, the kill stopped others
    assert {n for _, n in counts} == {batch}  # every batch stored whole, or not at all
