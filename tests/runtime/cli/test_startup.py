"""The command line starts at once: client commands load no server module.

``--version``, ``--help`` and every client command (``list``, ``history``,
``search``, ``stats``, ``hibernate``, ``import`` without ``--data``) run in a
fresh interpreter against a real served host; the modules loaded when it
exits (``sys.modules``) are checked. The commands that run a host in the
process (``serve``, ``doctor``, ``import --data``) still load it, which shows
the probe sees what a command imports. Wall time is measured in
``benchmarks/``, not here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from tests.support.data import REPO_ROOT, TEST_DATA
from tests.support.processes import cli_env, server_process

TOKEN = "startup-token"
#: Top-level packages of the server stack (and the host's storage) a client command must not import.
SERVER_PACKAGES = frozenset({"trio", "quart", "quart_trio", "hypercorn", "apsw", "psycopg", "psycopg_pool",
                             "jsonschema", "prometheus_client", "swagger_ui"})
#: Project packages a client command must not import.
SERVER_MODULES = ("runtime.host", "runtime.server", "actors", "storage.sqlite", "storage.postgres")


#: Runs the command as ``python -m runtime.cli`` does and writes the modules loaded at exit to ``argv[1]``.
PROBE = """
import atexit, json, runpy, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps([n for n, m in sys.modules.items() if m is not None])))
sys.argv[0] = "durable-sessions"
runpy.run_module("runtime.cli", run_name="__main__")
"""


def imported_by(tmp_path, *args: str, url: str | None = None) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run the command in a fresh interpreter; its result and every module loaded when it exited."""
    out = tmp_path / "modules.json"
    command = [sys.executable, "-c", PROBE, str(out), *args, *(["--url", url] if url else [])]
    result = subprocess.run(command, env=cli_env(TOKEN), capture_output=True, text=True, timeout=120,
                            cwd=REPO_ROOT)
    return result, set(json.loads(out.read_text()))


def server_side(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in SERVER_PACKAGES
                  or any(m == p or m.startswith(p + ".") for p in SERVER_MODULES))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("cli-startup") / "data"
    with server_process(data, token=TOKEN) as server:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "a booking code"}]}
            assert http.post("/v1/sessions/chat-1/messages", json={"message": message}).status_code == 201
        yield server


@pytest.mark.parametrize("args", [("--version",), ("--help",), ("list", "--help")], ids=" ".join)
def test_version_and_help_load_no_server_module(tmp_path, args):
    result, modules = imported_by(tmp_path, *args)
    assert result.returncode == 0, result.stderr
    assert "durable-sessions" in result.stdout
    assert "runtime.cli.main" in modules  # the probe sees the command's own modules
    assert server_side(modules) == []


@pytest.mark.parametrize("args, expected", [
    (("list",), "chat-1"),
    (("history", "chat-1"), "m1 [user] a booking code"),
    (("search", "chat-1", "booking"), "m1 [user]"),
    (("stats",), '"active"'),
    (("hibernate", "chat-1"), "hibernated"),
    (("import", str(TEST_DATA / "tau-bench" / "airline-sample.json"), "--no-progress"), "imported 12 of 12"),
    (("import", str(TEST_DATA / "claude_code" / "projects"), "--no-progress"), "Claude Code files as sessions"),
], ids=lambda value: value[0] if isinstance(value, tuple) else None)
def test_client_commands_load_no_server_module(tmp_path, server, args, expected):
    result, modules = imported_by(tmp_path, *args, url=server.url)
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout
    assert "httpx" in modules  # it did talk to the server, through runtime.client
    assert "runtime.client.http" in modules
    assert server_side(modules) == []


def test_commands_that_run_a_host_load_it(tmp_path):
    result, modules = imported_by(tmp_path, "doctor", "--data", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert {"trio", "apsw"} <= modules

    result, modules = imported_by(tmp_path, "import", str(TEST_DATA / "openai_chat" / "tau-bench-airline-3.json"),
                                  "--data", str(tmp_path / "data"), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert {"trio", "apsw", "runtime.host.actor_host"} <= modules
    assert result.stdout.startswith("imported 3 of 3 sessions")
