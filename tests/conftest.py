"""Fixtures shared by every test: data paths, a real actor file and a recording agent on it."""

from __future__ import annotations

from pathlib import Path

import pytest

# Storage on SQLite or on Postgres for the behaviour suite (tests/support/backends.py).
from tests.support.backends import parametrize_storages, pg_shared_db, pg_storage  # noqa: F401
from tests.support.data import CLAUDE_CODE_LOG, TEST_DATA, claude_code_log_files, missing_reason, shared_data_dir

# The throwaway Postgres server and its per-test databases (tests/support/postgres.py).
from tests.support.postgres import pg_conn, pg_dsn, pg_empty_dsn, pg_server  # noqa: F401


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave tests marked ``anyio`` or ``asyncio`` to their own plugin.

    ``trio_mode`` makes pytest-trio mark every coroutine test ``trio`` and run
    it under trio, whatever else it is marked with. A test marked
    ``@pytest.mark.anyio`` (run once per anyio backend, asyncio and trio) or
    ``@pytest.mark.asyncio`` (pytest-asyncio) loses that mark here, after
    pytest-trio added it.
    """
    for item in items:
        if item.get_closest_marker("anyio") or item.get_closest_marker("asyncio"):
            item.own_markers[:] = [mark for mark in item.own_markers if mark.name != "trio"]


@pytest.fixture
def shared_data() -> Path:
    """Path of ``../shared/data``; skips the test when it is absent."""
    path = shared_data_dir()
    if path is None:
        pytest.skip(missing_reason())
    return path


@pytest.fixture
def test_data() -> Path:
    """Path of ``tests/data`` (fixtures kept in the repository)."""
    return TEST_DATA


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise ``storage`` of ``both_storages`` tests, and ``claude_code_log_file`` over the
    shared transcripts (or one skip)."""
    parametrize_storages(metafunc)
    if "claude_code_log_file" not in metafunc.fixturenames:
        return
    files = claude_code_log_files()
    if files:
        base = shared_data_dir() / CLAUDE_CODE_LOG
        params = [pytest.param(path, id=path.relative_to(base).as_posix()) for path in files]
    else:
        params = [pytest.param(None, marks=pytest.mark.skip(reason=missing_reason()))]
    metafunc.parametrize("claude_code_log_file", params)


@pytest.fixture
def storage(request, tmp_path):
    """A real actor file (``SqlStorage`` on ``tmp_path/actor.sqlite3``), closed after the test.

    In a ``both_storages`` module, also a ``PostgresStorage`` (``[postgres]``: tests/support/backends.py).
    """
    if getattr(request, "param", "sqlite") == "postgres":
        yield request.getfixturevalue("pg_storage")
        return
    from storage import SqlStorage

    s = SqlStorage.open(tmp_path / "actor.sqlite3")
    yield s
    s.close()


@pytest.fixture
def recording_agent(storage):
    """A real ``actors.Agent`` on the ``storage`` file whose broadcasts are recorded (``tests.support.agents``)."""
    from tests.support.agents import RecordingAgent

    return RecordingAgent(storage)
