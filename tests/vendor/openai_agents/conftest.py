"""The OpenAI Agents SDK's session tests, run against our two session classes.

``test_session.py`` and ``test_session_limit.py`` are the SDK's own tests
(see their headers for source and licence). Every test runs twice: with
``host`` its sessions are :class:`runtime.client.DurableAgentsSession` on a
real ``durable-sessions serve`` process (one for the whole run), with
``embedded`` they are :class:`actors.openai_agents.EmbeddedAgentsSession`
on SQLite files (``shim.py`` builds them where the tests build a
``SQLiteSession``).

Left out (:data:`LEFT_OUT`): tests of ``SQLiteSession``'s own machinery --
its SQL tables, connections, file locks, worker threads, error text and
recovery from corrupt rows it inserts itself -- and tests that use no
session at all. Each is named with the reason; a name that no longer
matches a collected test fails the run, so the list cannot rot.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from agents import set_tracing_disabled

from tests.support.processes import server_process
from tests.vendor.openai_agents import shim

set_tracing_disabled(True)  # no trace exporter thread (and no "OPENAI_API_KEY is not set" at exit)

#: Vendored tests not run here, and why.
LEFT_OUT = {
    "test_await_mutation_cancellation_hides_later_failure_without_loop_error": "tests an SDK helper; no session",
    "test_session_memory_disabled_parametrized": "runs the SDK with no session",
    "test_session_settings_resolve": "tests SessionSettings alone; no session",
    "test_sqlite_session_close_closes_worker_thread_connections": "SQLiteSession's thread-local sqlite3 connections",
    "test_sqlite_session_closed_rejects_empty_add_items": "asserts the text 'SQLiteSession is closed' (ours names "
                                                          "our class: tests/runtime/client/test_openai_agents_session.py)",
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": "inserts a corrupt row into SQLiteSession's table",
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": "inserts corrupt rows into its table",
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": "inserts a corrupt row into SQLiteSession's table",
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": "inserts a corrupt row into its table",
    "test_sqlite_session_file_lock_is_shared_across_instances": "SQLiteSession's per-file lock registry",
    "test_sqlite_session_failed_add_items_releases_write_lock": "probes SQLiteSession's tables with sqlite3",
    "test_sqlite_session_failed_clear_session_rolls_back": "drops SQLiteSession's tables with sqlite3",
    "test_sqlite_session_failed_pop_item_releases_write_lock": "drops SQLiteSession's tables with sqlite3",
    "test_sqlite_session_rollback_failure_evicts_connection": "swaps SQLiteSession's sqlite3 connection",
    "test_sqlite_session_close_retries_quarantined_connection": "swaps SQLiteSession's sqlite3 connection",
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": "swaps its sqlite3 connection",
}

HERE = Path(__file__).resolve().parent
TOKEN = "vendored-sdk-tests"


def pytest_report_header() -> str:
    return f"openai-agents {version('openai-agents')} (tests/vendor/openai_agents run against it)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [item for item in items if Path(str(item.path)).parent == HERE]
    if not mine:
        return
    stale = set(LEFT_OUT) - {item.originalname for item in mine}
    if stale and len({item.path for item in mine}) == 2:  # both files collected: every name must exist
        raise pytest.UsageError(f"LEFT_OUT names tests the vendored files no longer have: {sorted(stale)}")
    dropped = [item for item in mine if item.originalname in LEFT_OUT]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in set(dropped)]


@pytest.fixture(scope="session")
def vendored_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a ``durable-sessions serve`` process shared by every vendored test."""
    with server_process(tmp_path_factory.mktemp("vendored-host") / "data", token=TOKEN) as server:
        yield server.url


@pytest.fixture(autouse=True, params=["host", "embedded"])
def session_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Point ``shim.SQLiteSession`` at the backend of this run of the test."""
    if request.param == "host":
        backend = shim.Backend("host", url=request.getfixturevalue("vendored_host"), token=TOKEN)
    else:
        backend = shim.Backend("embedded", folder=tmp_path)
    shim.BACKEND = backend
    try:
        yield request.param
    finally:
        shim.BACKEND = None
        backend.close()
