"""Errors a newcomer meets on the command line, each from a real process: an import with no server is one
line and a hint, ``--bind`` without a port says ``host:port``, and a data folder another process holds exits
2 (docs/operations.md)."""

from __future__ import annotations

import subprocess

import pytest

from runtime.server.config import ConfigError, load_config
from tests.support.data import TEST_DATA
from tests.support.postgres import free_port
from tests.support.processes import cli_command, cli_env, server_process


def run(*args: str, token: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*cli_command(), *args], env=cli_env(token), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("source", [TEST_DATA / "tau-bench" / "airline-sample.json",
                                    TEST_DATA / "claude_code" / "projects"], ids=["openai-chat", "claude-code"])
def test_an_import_with_no_server_is_one_line_and_a_hint(source):
    url = f"http://127.0.0.1:{free_port()}"
    result = run("import", str(source), "--url", url, "--no-progress")
    assert result.returncode == 1
    assert result.stdout == ""
    first, hint = result.stderr.splitlines()  # was one "failed:" line per conversation and no hint
    assert first.startswith(f"durable-sessions import: ServerUnreachableError: no server answered at {url} (")
    assert hint == (f"  no server answers at {url}: start one (durable-sessions serve), or name another "
                    "with --url or DURABLE_SESSIONS_URL")


def test_a_bind_without_a_port_says_host_port_not_token(tmp_path):
    result = run("serve", "--bind", "8788", "--data", str(tmp_path / "data"))
    assert result.returncode == 2
    assert result.stderr == "durable-sessions serve: server.bind must be 'host:port', not '8788'\n"
    assert not (tmp_path / "data").exists()


def test_a_bind_without_a_port_in_the_file_is_a_config_error(tmp_path):
    config = tmp_path / "sessions.toml"
    config.write_text('[server]\nbind = "8788"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="server.bind must be 'host:port', not '8788'"):
        load_config(config)


def test_a_data_folder_in_use_exits_2_for_serve_import_and_doctor(tmp_path):
    data = tmp_path / "data"
    with server_process(data) as server:
        refused = [
            run("serve", "--bind", "127.0.0.1:0", "--data", str(data)),
            run("import", str(TEST_DATA / "openai_chat" / "tau-bench-airline-3.json"), "--data", str(data),
                "--no-progress"),
            run("doctor", "--data", str(data)),
        ]
        assert server.process.poll() is None
    for result, command in zip(refused, ("serve", "import", "doctor"), strict=True):
        assert result.returncode == 2, result.stderr
        first = result.stderr.splitlines()[0]
        assert first.startswith(f"durable-sessions {command}: DataFolderLockedError: the data folder {data} is in "
                                f"use by another process (pid {server.process.pid}, since ")
