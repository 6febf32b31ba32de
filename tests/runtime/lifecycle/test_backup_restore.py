"""Online backups (``POST /v1/host:backup``) under concurrent writes, and ``restore`` into a new data folder."""

import subprocess

import pytest
import trio

from common.errors import InvalidInputError
from runtime import open_host
from runtime.cli.lifecycle import LifecycleUsageError, restore
from runtime.client import SessionsClient
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ServerSettings
from storage.backup import check_database
from tests.support.processes import cli_command, cli_env

TOKEN = "backup-token"
SESSIONS = 12


def msg(mid):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": f"text of {mid}"}]}


async def start(nursery, host):
    bind_sessions(host)
    urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                         task_status=task_status))
    return urls[0]


async def test_a_backup_under_writes_holds_every_write_acknowledged_before_it_and_restores(tmp_path, nursery):
    data, copy, restored = tmp_path / "data", tmp_path / "backup", tmp_path / "restored"
    acked: list[tuple[str, str]] = []
    before: list[tuple[str, str]] = []
    async with open_host(data, idle_timeout_s=0.05) as host:  # actors hibernate between writes too
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            for s in range(SESSIONS):
                await client.session(f"s{s}").append_message(msg(f"s{s}-seed"))
                acked.append((f"s{s}", f"s{s}-seed"))
            stop = trio.Event()

            async def writer(name):
                i = 0
                while not stop.is_set():
                    await client.session(name).append_message(msg(f"{name}-{i}"))
                    acked.append((name, f"{name}-{i}"))
                    i += 1

            async with trio.open_nursery() as writers:
                for s in range(SESSIONS):
                    writers.start_soon(writer, f"s{s}")
                while len(acked) < SESSIONS * 5:
                    await trio.sleep(0.01)
                before = list(acked)
                report = await client.backup_host(str(copy))
                while len(acked) < len(before) + SESSIONS * 3:  # writes went on during the backup and after
                    await trio.sleep(0.01)
                stop.set()
            assert report["sessions"] == SESSIONS and report["to"] == str(copy) and report["bytes"] > 0
            with pytest.raises(InvalidInputError, match="is not empty"):
                await client.backup_host(str(copy))
            with pytest.raises(InvalidInputError, match="is inside the data folder"):
                await client.backup_host(str(data / "backup"))
            with pytest.raises(InvalidInputError, match="must be an absolute path"):
                await client.backup_host("relative/folder")
    for path in copy.rglob("*.sqlite3"):
        assert check_database(path) is None, path
    assert not list(copy.rglob("*-wal"))
    assert restore(copy, restored) == 0
    async with open_host(restored) as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            stored = set()
            for s in range(SESSIONS):
                stored |= {(f"s{s}", m["id"]) for m in await client.session(f"s{s}").get_history()}
            assert set(before) <= stored
            assert sorted([e["id"] async for e in client.iter_sessions()]) == sorted(f"s{s}" for s in range(SESSIONS))


async def test_restore_refuses_a_folder_in_use_a_non_empty_one_and_a_damaged_backup(tmp_path, nursery):
    data, copy = tmp_path / "data", tmp_path / "backup"
    async with open_host(data) as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            await client.session("one").append_message(msg("m1"))
            await client.backup_host(str(copy))
        done = subprocess.run([*cli_command(), "restore", "--from", str(copy), "--data", str(data)],
                              env=cli_env(None), capture_output=True, text=True, timeout=120)
        assert done.returncode == 2
        assert done.stderr.startswith("durable-sessions restore: DataFolderLockedError: ")
    with pytest.raises(LifecycleUsageError, match="is not empty"):
        restore(copy, data)
    with pytest.raises(LifecycleUsageError, match="is not a backup"):
        restore(tmp_path / "nothing", tmp_path / "new")
    victim = next(copy.glob("sessions/*/*.sqlite3"))
    victim.write_bytes(victim.read_bytes()[:100] + b"\0" * 500)
    with pytest.raises(LifecycleUsageError, match="does not open cleanly"):
        restore(copy, tmp_path / "new")
    assert not (tmp_path / "new").exists() or not any(p.suffix == ".sqlite3" for p in (tmp_path / "new").rglob("*"))
