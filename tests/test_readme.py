"""The README's walk-through pastes cleanly: its shell and Python blocks run as written against a real
``durable-sessions serve`` (only the address, and ``.venv/bin/`` for this interpreter's folder, are replaced),
and the Python blocks run a second time with the same output."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.data import REPO_ROOT
from tests.support.processes import server_process

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
DEFAULT = "127.0.0.1:8787"
BIN = str(Path(sys.executable).parent) + "/"


def block(language: str, marker: str) -> str:
    """The one fenced ``language`` block of the README that contains ``marker``."""
    found = [text for text in re.findall(rf"```{language}\n(.*?)```", README, re.DOTALL) if marker in text]
    assert len(found) == 1, f"{len(found)} {language} blocks hold {marker!r}"
    return found[0]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("DURABLE_SESSIONS_URL", "DURABLE_SESSIONS_TOKEN")}


def run(command: list[str], text: str, address: str, cwd: Path) -> str:
    script = text.replace(DEFAULT, address).replace(".venv/bin/", BIN)
    done = subprocess.run([*command, script], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout


def bash(text: str, address: str, cwd: Path) -> str:
    return run(["bash", "-euo", "pipefail", "-c"], text, address, cwd)


def python(text: str, address: str, cwd: Path) -> str:
    return run([sys.executable, "-c"], text, address, cwd)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with server_process(tmp_path_factory.mktemp("readme") / "data") as running:
        yield running


def address_of(server) -> str:
    return server.url.removeprefix("http://")


def test_the_session_walk_through_runs_and_its_python_part_runs_twice_alike(server, tmp_path):
    address = address_of(server)
    shell = [block("sh", marker) for marker in ("S=http://127.0.0.1:8787/v1/sessions/chat-42", "$S/system-prompt:refresh",
                                                 "/v1/actors:hibernate")]
    out = bash("".join(shell), address, tmp_path)  # one terminal: $S carries over
    assert out.startswith('{"id":"m1","inserted":true}')
    first = python(block("python", 'client.session("chat-42")'), address, tmp_path)
    second = python(block("python", 'client.session("chat-42")'), address, tmp_path)
    assert first == second
    assert "['m1', 'm2']" in first.splitlines()
    assert first.splitlines()[:3] == ["m1 user My booking code is ZFA04Y.",
                                      "m2 assistant Thanks, I found reservation ZFA04Y.",
                                      "m3 user Can I move it to Friday?"]


def test_the_listing_and_paging_walk_through_runs(server, tmp_path):
    address = address_of(server)
    setup = block("sh", "S=http://127.0.0.1:8787/v1/sessions/chat-42") + block("sh", "/v1/actors:hibernate")
    listing = "".join(line + "\necho\n" for line in block("sh", "/v1/sessions?limit=10").splitlines())  # one per line
    answers = [json.loads(line) for line in bash(setup + "echo\n" + listing, address, tmp_path).splitlines()[-7:]]
    assert answers[0]["cursor"] is None and [e["id"] for e in answers[0]["sessions"]] == ["chat-42"]
    assert answers[0]["sessions"][0]["messages"] >= 2
    assert [e["id"] for e in answers[1]["sessions"]] == ["chat-42"]
    assert answers[2]["session"]["id"] == "chat-42"
    newest, before = answers[3]["messages"], answers[4]["messages"]
    assert len(newest) == 1 and [m["id"] for m in before] == ["m1"]
    assert answers[5] == {"error": {"type": "MessageNotFoundError", "message": "message 'm9' not found"}}
    assert [m["id"] for m in answers[6]["messages"]][:2] == ["m1", "m2"]
    cli = bash(f"export DURABLE_SESSIONS_URL=http://{address}\n" + block("sh", "durable-sessions list --prefix"),
               address, tmp_path)
    assert cli.splitlines()[0].endswith("  chat-42")
    assert cli.splitlines()[1] == "m1 [user] My booking code is ZFA04Y."
    assert cli.splitlines()[2:] == ["[", "  {", '    "id": "m1",']


def test_the_manager_walk_through_runs_and_its_python_part_runs_twice_alike(server, tmp_path):
    address = address_of(server)
    out = bash(block("sh", "M=http://127.0.0.1:8787/v1/managers/user-7"), address, tmp_path)
    assert '"name":"Lisbon trip"' in out
    first = python(block("python", "client.manager("), address, tmp_path)
    second = python(block("python", "client.manager("), address, tmp_path)
    assert first == second
    assert "Lisbon trip, plan B" in first


def free_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def test_the_token_example_sends_the_token_it_set(tmp_path):
    text = block("sh", "DURABLE_SESSIONS_TOKEN")
    address = free_address()
    assert "0.0.0.0:8787" in text
    out = bash(text.replace("0.0.0.0:8787", address) + 'kill "$!"; wait\n', address, tmp_path)
    assert '{"messages":[]}' in out and "UnauthorizedError" not in out, out  # the server's own lines around it
