"""Processes for tests: a real ``durable-sessions serve`` (started once per test module) and fresh interpreters.

``with server_process(data_dir, token=...) as server:`` starts the console
script on a free loopback port, waits until it has written its ready file,
and yields a :class:`ServerProcess`. On exit it sends SIGTERM and waits for
a clean stop (the test fails if the process does not exit 0).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.data import REPO_ROOT

STARTUP_TIMEOUT_S = 30.0


@dataclass
class ServerProcess:
    process: subprocess.Popen
    url: str
    data_dir: Path
    token: str | None


def cli_command() -> list[str]:
    """The ``durable-sessions`` console script of this interpreter (or ``python -m runtime.cli``)."""
    script = Path(sys.executable).with_name("durable-sessions")
    return [str(script)] if script.exists() else [sys.executable, "-m", "runtime.cli"]


def cli_env(token: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DURABLE_SESSIONS_TOKEN", "DURABLE_SESSIONS_URL")}
    if token:
        env["DURABLE_SESSIONS_TOKEN"] = token
    return {**env, "PYTHONUNBUFFERED": "1"}


@contextmanager
def server_process(data_dir: Path, *, token: str | None = None, extra: Sequence[str] = (),
                   files_dir: Path | None = None, bind: str = "127.0.0.1:0") -> Iterator[ServerProcess]:
    """Run ``durable-sessions serve`` on ``bind`` (default: any free loopback port) over ``data_dir``
    until the block ends.

    Its ready file and log go beside ``data_dir``, or into ``files_dir`` (a
    data folder on a disk the test fills up).
    """
    beside = data_dir if files_dir is None else files_dir / data_dir.name
    ready = beside.with_name(beside.name + "-ready.json")
    ready.unlink(missing_ok=True)
    log = beside.with_name(beside.name + "-server.log").open("w")
    process = subprocess.Popen(
        [*cli_command(), "--log-level", "WARNING", "serve", "--bind", bind, "--data", str(data_dir),
         "--ready-file", str(ready), *extra],
        env=cli_env(token), stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the server did not start: {Path(log.name).read_text()}")
            time.sleep(0.05)
        yield ServerProcess(process, json.loads(ready.read_text())["url"], data_dir, token)
        if process.poll() is None:  # not killed by the test itself
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0, Path(log.name).read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()


def kill_hard(server: ServerProcess) -> None:
    """``kill -9`` the server (no shutdown at all)."""
    server.process.kill()
    server.process.wait()


def run_fresh_python(code: str, timeout: float = 60.0) -> str:
    """Run ``code`` in a new interpreter (``sys.executable -c`` in the repository root); its stdout.

    The child starts with none of this process's modules loaded, so it shows
    what an import pulls in on its own. A non-zero exit fails the test with
    the child's stderr.
    """
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                            cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    return result.stdout
