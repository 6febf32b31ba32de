"""One process per data folder: a second host (or an offline import) is refused while one runs."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from common.errors import DataFolderLockedError
from runtime import open_host
from runtime.host.folder_lock import LOCK_FILE, DataFolderLock
from tests.support.data import TEST_DATA
from tests.support.processes import cli_command, cli_env, kill_hard, server_process


def run_cli(*args, timeout=60):
    return subprocess.run([*cli_command(), *args], env=cli_env(None), capture_output=True, text=True,
                          timeout=timeout)


async def test_a_second_serve_on_the_same_data_folder_refuses_to_start(tmp_path):
    data = tmp_path / "data"
    with server_process(data) as first:
        started = time.monotonic()
        second = run_cli("serve", "--bind", "127.0.0.1:0", "--data", str(data))
        assert second.returncode == 2  # as docs/operations.md says: the folder is in use, nothing was done
        assert time.monotonic() - started < 20  # refused at once, not after a timeout
        assert f"the data folder {data} is in use by another process (pid {first.process.pid}: " in second.stderr
        assert "stop it first, or give this one another data folder" in second.stderr
        assert "serving" not in second.stdout
        assert first.process.poll() is None  # the first one is untouched
    with server_process(data):  # stopped: the folder is free again
        pass


async def test_offline_import_refuses_a_folder_a_running_host_holds(tmp_path):
    data = tmp_path / "data"
    source = TEST_DATA / "openai_chat" / "tau-bench-airline-3.json"
    with server_process(data) as server:
        refused = run_cli("import", str(source), "--data", str(data), "--no-progress")
        assert refused.returncode == 2
        assert "is in use by another process" in refused.stderr
        kill_hard(server)  # the kernel drops a killed holder's lock: no stale lock blocks the folder
    imported = run_cli("import", str(source), "--data", str(data), "--no-progress")
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith("imported 3 of 3 sessions")


async def test_two_hosts_in_one_process_cannot_share_a_folder(tmp_path):
    async with open_host(tmp_path):
        with pytest.raises(DataFolderLockedError, match="is in use by another process"):
            async with open_host(tmp_path):
                pass
        holder = json.loads((tmp_path / LOCK_FILE).read_text())
        assert holder["pid"] > 0 and holder["since"]
    async with open_host(tmp_path):  # released on close
        pass


def test_the_lock_is_released_once_and_the_file_stays(tmp_path):
    lock = DataFolderLock.acquire(tmp_path, purpose="test")
    assert lock.held and json.loads((tmp_path / LOCK_FILE).read_text())["command"] == "test"
    lock.release()
    lock.release()
    assert not lock.held and (tmp_path / LOCK_FILE).exists()
    DataFolderLock.acquire(tmp_path).release()
