"""What the suite needs beyond Python (README: Postgres binaries, Chromium with chromedriver): on a machine
without them their tests are skipped, naming what is missing, and under ``CI`` they fail (``.ci/run``
installs both). Each case runs pytest in a fresh process with the tool hidden."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.data import REPO_ROOT

#: Tests that start Postgres: through the fixtures, and servers of their own (tests/support/postgres.py).
POSTGRES_TESTS = ("tests/storage/test_postgres_server.py",)
#: Tests that drive Chromium through chromedriver, or run Chromium alone.
BROWSER_TESTS = ("tests/runtime/server/test_browsers_chromium.py",
                 "tests/runtime/server/test_openapi.py::"
                 "test_swagger_ui_renders_the_document_in_headless_chromium_with_no_other_host")


def run_pytest(tests: tuple[str, ...], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *tests],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)


def environment(ci: bool, **changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return {**env, **changes, **({"CI": "1"} if ci else {})}


def summary(result: subprocess.CompletedProcess) -> str:
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("ci", [False, True], ids=["local", "ci"])
def test_without_postgres_binaries_the_postgres_tests_skip_locally_and_fail_in_ci(ci):
    result = run_pytest(POSTGRES_TESTS, environment(ci, DURABLE_SESSIONS_PG_BIN="/nonexistent"))
    if ci:
        assert result.returncode == 1 and " failed" in summary(result), result.stdout
        assert "CI must run the Postgres tests" in result.stdout
    else:
        # test_binaries_from_the_environment_variable and test_missing_binaries_... run: they unset the variable
        assert result.returncode == 0 and " failed" not in summary(result), result.stdout
        assert " skipped" in summary(result) and "Postgres binaries not found" in result.stdout


@pytest.mark.parametrize("ci", [False, True], ids=["local", "ci"])
def test_without_chromium_the_browser_tests_skip_locally_and_fail_in_ci(ci):
    python_only = str(Path(sys.executable).parent)  # the venv's scripts; no chromium, no chromedriver
    result = run_pytest(BROWSER_TESTS, environment(ci, PATH=python_only))
    if ci:
        assert result.returncode == 1 and summary(result).startswith("4 error"), result.stdout  # in fixtures
        assert "CI must run the browser tests: chromium is not installed" in result.stdout
    else:
        assert result.returncode == 0 and summary(result).startswith("4 skipped"), result.stdout
        assert result.stdout.count(": chromium is not installed") == 4
