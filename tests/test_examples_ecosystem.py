"""The ecosystem examples (issue 30) run end to end against a real ``durable-sessions serve``,
the way their docstrings say (helpers and the ``host`` fixture of :mod:`tests.test_examples`)."""

from __future__ import annotations

import pytest

from runtime.client import SessionsClient
from storage import SqlStorage
from tests.test_examples import TOKEN, example_env, host, run_example  # noqa: F401 - host is a fixture

pytest.importorskip("mcp", reason="the mcp extra is not installed")  # the test extra installs it in CI


async def test_mcp_memory_example_over_stdio_and_http(host):  # noqa: F811 - the fixture
    url = host()
    out = await run_example("mcp_memory.py", "--session", "mcp-example",
                            env=example_env(DURABLE_SESSIONS_URL=url, DURABLE_SESSIONS_TOKEN=TOKEN))
    assert out.splitlines() == [
        "== stdio: durable-sessions mcp --session mcp-example",
        "tools: set_context, get_history, search_history, append_message",
        "set_context ok: Written to memory. Usage: 1% (7/1100 tokens)",
        'append_message ok: {"id": "u1", "stored": true}',
        'a bad call error: Error: invalid arguments for set_context: label: Invalid input: expected "memory"',
        f"== http: {url}/mcp/mcp-example",
        "search_history: ['u1']",
        "memory block: The user prefers green tea.",
    ]
    async with SessionsClient(url, token=TOKEN) as client:
        session = client.session("mcp-example")
        assert [m["id"] for m in await session.get_history()] == ["u1"]
        assert (await session.get_context_block("memory"))["content"] == "The user prefers green tea."


EXPECTED_REFUND = [
    "== first process: run until the approval",
    "  planned a refund of 42 EUR for A-1001",
    "  waiting before: approve",
    "== second process: resume the same thread",
    "  found it waiting before: approve",
    "  planned a refund of 42 EUR for A-1001",
    "  approved by a human",
    "  paid 42 EUR",
    "  checkpoints in the thread: 5",
]


async def test_langgraph_checkpointer_example_against_a_running_host(host):  # noqa: F811 - the fixture
    pytest.importorskip("langgraph.graph")
    url = host()
    out = await run_example("langgraph_checkpointer.py", "--thread", "refund-test",
                            env=example_env(DURABLE_SESSIONS_URL=url, DURABLE_SESSIONS_TOKEN=TOKEN))
    assert out.splitlines() == EXPECTED_REFUND
    async with SessionsClient(url, token=TOKEN) as client:  # the thread is an actor of the host
        actors = await client.request("GET", "/v1/actors")
    assert "checkpoints" in actors["namespaces"]


async def test_langgraph_checkpointer_example_embedded_on_a_data_folder(tmp_path):
    pytest.importorskip("langgraph.graph")
    out = await run_example("langgraph_checkpointer.py", "--thread", "refund-embedded", "--data",
                            str(tmp_path / "graph-data"))
    assert out.splitlines() == EXPECTED_REFUND
    files = [path.name for path in (tmp_path / "graph-data" / "checkpoints").glob("*/*.sqlite3")]
    assert len(files) == 1  # one thread, one actor file
    with SqlStorage.open(tmp_path / "graph-data" / "checkpoints" / files[0][:2] / files[0]) as storage:
        assert storage.scalar("SELECT count(*) FROM langgraph_checkpoints") == 5


async def test_tracing_example_prints_each_requests_spans_with_the_turns_under_them():
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
    out = await run_example("tracing.py")
    assert out.splitlines() == [
        "POST /v1/sessions/{id}/messages (http.request.method=POST, http.route=/v1/sessions/{id}/messages, "
        "http.response.status_code=201)",
        "  actor activation",
        "  actor turn",
        "GET /v1/sessions/{id}/messages (http.request.method=GET, http.route=/v1/sessions/{id}/messages, "
        "http.response.status_code=200)",
        "  actor turn",
        "actor hibernation",
        "6 spans, 3 traces",
    ]
    assert "private note" not in out
