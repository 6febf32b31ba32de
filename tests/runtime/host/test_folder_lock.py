"""One process per data folder: a second host (or an offline import) is refused while one runs."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import stat
import subprocess
import time
import urllib.request

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
        assert f"the data folder {data} is in use by another process (pid {first.process.pid}, since " in second.stderr
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
        assert set(holder) == {"pid", "since"} and holder["pid"] == os.getpid() and holder["since"]
    async with open_host(tmp_path):  # released on close
        pass


def test_the_lock_is_released_once_and_its_file_deleted(tmp_path):
    (tmp_path / LOCK_FILE).write_text("left by an older version")
    (tmp_path / LOCK_FILE).chmod(0o644)
    lock = DataFolderLock.acquire(tmp_path)
    assert lock.held and json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert stat.S_IMODE((tmp_path / LOCK_FILE).stat().st_mode) == 0o600
    lock.release()
    lock.release()
    assert not lock.held and not (tmp_path / LOCK_FILE).exists()
    DataFolderLock.acquire(tmp_path).release()


def test_a_taker_that_opened_a_released_lock_file_takes_the_new_one(tmp_path):
    """The race of deleting lock files: B opens the file, A releases (deletes) it, B locks the deleted
    inode. B must notice and lock the file the path names now, or C could lock a second one."""
    first = DataFolderLock.acquire(tmp_path)
    stale = os.open(tmp_path / LOCK_FILE, os.O_RDWR)
    first.release()
    fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what B's flock would get on the deleted file
    try:
        second = DataFolderLock.acquire(tmp_path)
        with pytest.raises(DataFolderLockedError, match=f"pid {os.getpid()}, since "):
            DataFolderLock.acquire(tmp_path)
        second.release()
    finally:
        os.close(stale)


SECRET_TOKEN = "tok-5ecret-d0-not-leak"
SECRET_PASSWORD = "pw-5ecret-d0-not-leak"


def _secrets_in(path):
    text = path.read_bytes()
    return [secret for secret in (SECRET_TOKEN, SECRET_PASSWORD) if secret.encode() in text]


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
async def test_the_lock_file_holds_no_secret_is_private_and_goes_at_exit(tmp_path, pg_dsn, stop):
    """``serve --token T --postgres postgresql://u:PASSWORD@...``: the lock file holds the pid and the
    start time only (mode 0600), a second process is told nothing more, and a clean exit deletes it.
    No file of the data folder and no line of the log holds the token or the password."""
    keys = dict(pair.split("=", 1) for pair in pg_dsn.split())
    # trust authentication ignores the password, but it is on the command line all the same
    dsn = f"postgresql://{keys['user']}:{SECRET_PASSWORD}@{keys['host']}:{keys['port']}/{keys['dbname']}"
    data = tmp_path / "data"
    ready = tmp_path / "ready.json"
    log_path = tmp_path / "server.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [*cli_command(), "--log-level", "DEBUG", "serve", "--bind", "127.0.0.1:0", "--data", str(data),
             "--ready-file", str(ready), "--token", SECRET_TOKEN, "--postgres", dsn, "--access-log"],
            env=cli_env(None), stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while not ready.exists():
                assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.05)
            url = json.loads(ready.read_text())["url"]
            lock = data / LOCK_FILE
            assert set(json.loads(lock.read_text())) == {"pid", "since"}
            assert json.loads(lock.read_text())["pid"] == process.pid
            assert stat.S_IMODE(lock.stat().st_mode) == 0o600
            assert _secrets_in(lock) == []
            request = urllib.request.Request(f"{url}/v1/health", headers={"Authorization": f"Bearer {SECRET_TOKEN}"})
            with urllib.request.urlopen(request, timeout=30) as answer:
                assert answer.status == 200
            second = run_cli("serve", "--bind", "127.0.0.1:0", "--data", str(data))
            assert second.returncode == 2  # a data folder in use exits 2 (docs/operations.md)
            assert f"in use by another process (pid {process.pid}, since " in second.stderr
            assert SECRET_TOKEN not in second.stderr and SECRET_PASSWORD not in second.stderr
            process.send_signal(stop)
            assert process.wait(timeout=30) == 0, log_path.read_text()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert not (data / LOCK_FILE).exists()
    files = [path for path in data.rglob("*") if path.is_file()]
    assert files  # the server did write its files
    assert {path.name: _secrets_in(path) for path in files} == {path.name: [] for path in files}
    assert "serving" in log_path.read_text() and _secrets_in(log_path) == []
