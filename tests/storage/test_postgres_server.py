"""The throwaway Postgres of tests/support/postgres.py: restarts, stale runs, skipping and CI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest

from tests.support import postgres as _postgres
from tests.support.postgres import PostgresServer, find_bin_dir, remove_stale_runs, require_bin_dir

TESTS_DIR = Path(__file__).resolve().parents[2]  # the repository root: tests is a package


def test_server_runs_as_an_unprivileged_user_on_loopback(pg_server):
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        listen, port = conn.execute(
            "SELECT current_setting('listen_addresses'), current_setting('port')::int"
        ).fetchone()
        data_owner = os.stat(pg_server.data_dir).st_uid
    assert (listen, port) == ("127.0.0.1", pg_server.port)
    if os.geteuid() == 0:
        assert data_owner != 0
        assert pg_server.user is not None and data_owner == pg_server.user.pw_uid


def test_restart_keeps_the_port_and_the_data(pg_server, pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (v TEXT)")
        conn.execute("INSERT INTO kept VALUES ('before')")
    port = pg_server.port
    pg_server.restart("immediate")  # a crash: recovery replays the WAL
    assert pg_server.port == port and pg_server.is_running()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT v FROM kept").fetchall() == [("before",)]


def test_a_killed_run_leaves_nothing_that_breaks_the_next(tmp_path):
    """A test process killed with SIGKILL leaves its server running; the next run stops it."""
    require_bin_dir()  # the child starts a server of its own
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(TESTS_DIR)!r})
        from tests.support.postgres import PostgresServer
        server = PostgresServer().start()
        print(server.run_dir, flush=True)
        time.sleep(600)
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        run_dir = Path(owner.stdout.readline().strip())
        postmaster = _postgres._postmaster_pid(run_dir / "data")
        assert postmaster is not None and _postgres._process_start(postmaster) is not None
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        owner.stdout.close()
    assert _postgres._process_start(postmaster) is not None  # orphaned, still serving

    removed = remove_stale_runs()

    assert run_dir in removed and not run_dir.exists()
    deadline = time.monotonic() + 10
    while _postgres._process_start(postmaster) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _postgres._process_start(postmaster) is None


def test_live_runs_are_not_stale(pg_server):
    assert pg_server.run_dir not in remove_stale_runs()
    assert pg_server.is_running()


def test_close_stops_the_server_and_removes_its_directory():
    server = PostgresServer(require_bin_dir()).start()
    run_dir, pid = server.run_dir, _postgres._postmaster_pid(server.data_dir)
    server.close()
    server.close()  # twice is fine
    assert not run_dir.exists()
    assert _postgres._process_start(pid) is None


def test_binaries_from_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv(_postgres.BIN_ENV, str(tmp_path))
    assert find_bin_dir() is None  # an empty directory has no initdb
    monkeypatch.delenv(_postgres.BIN_ENV)
    found = require_bin_dir()
    assert found is not None and all((found / name).exists() for name in ("initdb", "pg_ctl", "postgres"))


def test_missing_binaries_skip_locally_and_fail_in_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not found"):
        _postgres._unavailable("Postgres binaries not found")
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="CI must run the Postgres tests"):
        _postgres._unavailable("Postgres binaries not found")
