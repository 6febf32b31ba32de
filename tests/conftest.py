"""Shared test helpers: where the real conversation data lives.

The data set (``../shared/data`` beside the repository, see its README) is
not part of the repository. CI has it at ``../shared`` beside the clone; set
``DURABLE_SESSIONS_SHARED_DATA`` to point elsewhere. Tests that need it ask
for the ``shared_data`` fixture (or the parametrised ``claude_code_log_file``)
and are skipped, with the reason, when it is absent. Small copies under
``tests/data/`` always run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The throwaway Postgres server and its per-test databases (see tests/_postgres.py).
from _postgres import pg_conn, pg_dsn, pg_empty_dsn, pg_server  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Fixtures copied into the repository (always present).
TEST_DATA = Path(__file__).resolve().parent / "data"

#: The Claude Code transcripts of the shared data set, relative to it.
CLAUDE_CODE_LOG = Path("claude_code") / "claude-code-log"


def _shared_data_candidate() -> Path:
    configured = os.environ.get("DURABLE_SESSIONS_SHARED_DATA")
    return Path(configured) if configured else REPO_ROOT.parent / "shared" / "data"


def shared_data_dir() -> Path | None:
    """The shared data folder, or ``None`` when it is not on this machine."""
    path = _shared_data_candidate()
    return path if path.is_dir() else None


def _missing_reason() -> str:
    return f"shared data not found at {_shared_data_candidate()} (set DURABLE_SESSIONS_SHARED_DATA)"


@pytest.fixture
def shared_data() -> Path:
    """Path of ``../shared/data``; skips the test when it is absent."""
    path = shared_data_dir()
    if path is None:
        pytest.skip(_missing_reason())
    return path


@pytest.fixture
def test_data() -> Path:
    """Path of ``tests/data`` (fixtures kept in the repository)."""
    return TEST_DATA


def claude_code_log_files() -> list[Path]:
    """Every ``.jsonl`` of the shared Claude Code data, sorted; ``[]`` if absent."""
    root = shared_data_dir()
    if root is None or not (root / CLAUDE_CODE_LOG).is_dir():
        return []
    return sorted((root / CLAUDE_CODE_LOG).rglob("*.jsonl"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise ``claude_code_log_file`` over the shared transcripts (or one skip)."""
    if "claude_code_log_file" not in metafunc.fixturenames:
        return
    files = claude_code_log_files()
    if files:
        base = shared_data_dir() / CLAUDE_CODE_LOG
        params = [pytest.param(path, id=path.relative_to(base).as_posix()) for path in files]
    else:
        params = [pytest.param(None, marks=pytest.mark.skip(reason=_missing_reason()))]
    metafunc.parametrize("claude_code_log_file", params)


@pytest.fixture
def storage(tmp_path):
    """A real actor file (``SqlStorage`` on ``tmp_path/actor.sqlite3``), closed after the test."""
    from storage import SqlStorage

    s = SqlStorage.open(tmp_path / "actor.sqlite3")
    yield s
    s.close()
