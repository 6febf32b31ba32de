"""The README's two set-up commands: the run command installs the package alone (no test extras) and
serves, run as written in a fresh virtual environment; the test command is the one ``.ci/run`` runs, and
the lines above it say what the suite needs beyond Python."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import tomllib

import httpx
import pytest

from tests.support.data import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
SETUP = README.split("## Set up\n", 1)[1].split("\n## ", 1)[0]


def commands() -> tuple[str, str]:
    """The section's two shell commands: (run, test)."""
    run, test = (text.strip() for text in re.findall(r"```sh\n(.*?)```", SETUP, re.DOTALL))
    return run, test


def test_the_run_command_installs_the_package_alone():
    run, _ = commands()
    assert run == "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/durable-sessions serve"


def test_the_test_command_is_the_one_ci_runs_and_says_what_the_suite_needs():
    _, test = commands()
    assert test == "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest -q -n auto"
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python -m pip install --quiet -e '.[test]'" in ci and "\npython -m pytest -q -n auto\n" in ci
    needs = SETUP.split("Run the tests.", 1)[1].split("```", 1)[0]
    for what in ("Postgres", "initdb", "Chromium", "chromedriver", "skipped", "`CI`", "`.ci/run` installs both"):
        assert what in needs, what
    assert "apt-get -qq install -y postgresql" in ci and "apt-get -qq install -y chromium chromium-driver" in ci


def test_the_supported_python_versions_are_the_projects():
    requires = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    assert requires == ">=3.11"
    assert "Python 3.11 or newer" in SETUP and sys.version_info >= (3, 11)


@pytest.mark.slow
def test_the_run_command_serves_from_a_fresh_environment(tmp_path):
    """The run command as written (the venv in a temporary folder; ``serve`` on a free port): nothing but the
    package's own dependencies is installed, and they serve."""
    run, _ = commands()
    venv = tmp_path / "venv"
    create, install, serve = run.replace(".venv/", f"{venv}/").replace("venv .venv", f"venv {venv}").split(" && ")
    for step in (create, install):
        done = subprocess.run(step, shell=True, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
    python = venv / "bin" / "python"
    missing = subprocess.run([python, "-c", "import pytest"], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "No module named 'pytest'" in missing.stderr  # no test extras

    ready = tmp_path / "ready.json"
    process = subprocess.Popen([*serve.split(), "--bind", "127.0.0.1:0", "--data", str(tmp_path / "data"),
                                "--ready-file", str(ready)], cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
            time.sleep(0.05)
        url = json.loads(ready.read_text())["url"]
        message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}
        appended = httpx.post(f"{url}/v1/sessions/s/messages", json={"message": message}, timeout=30)
        assert (appended.status_code, appended.json()) == (201, {"id": "m1", "inserted": True})
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
