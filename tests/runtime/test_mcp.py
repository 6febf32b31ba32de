"""The session's memory over MCP (issue 30, part 1), driven by the ``mcp`` SDK's own client.

Both doors of :mod:`runtime.mcp` against a real ``durable-sessions serve``
process (token set, a writable, a skills and a searchable block):

* stdio: the client spawns ``durable-sessions mcp --session ID --url URL``;
* streamable HTTP: ``/mcp/{session_id}`` of the server (:mod:`runtime.mcp_http`).

Each lists the tools, calls every one of them, reads the resources, and gets
tool errors as ``isError`` results (the session answering the next call).
The calls run under trio: the SDK is anyio-based.
"""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import asynccontextmanager

import httpx
import pytest

from tests.support.data import REPO_ROOT
from tests.support.processes import cli_command, cli_env, run_fresh_python, server_process

mcp = pytest.importorskip("mcp", reason="the mcp extra is not installed")  # installed by the test extra in CI
httpx2 = pytest.importorskip("httpx2")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

TOKEN = "mcp-test-token"
SKILL = "---\ndescription: Write a haiku\n---\nFive, seven, five syllables.\n"
CONFIG = """
[[session.blocks]]
label = "memory"
kind = "writable"
description = "Learned facts"
max_tokens = 50

[[session.blocks]]
label = "skills"
kind = "skills"
description = "Loadable skills"
path = "{skills}"

[[session.blocks]]
label = "notes"
kind = "searchable"
description = "Searchable notes"
"""
SESSION_TOOLS = ["set_context", "load_context", "unload_context", "search_context"]
MEMORY_TOOLS = ["get_history", "search_history", "append_message"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("mcp")
    (root / "skills").mkdir()
    (root / "skills" / "haiku.md").write_text(SKILL, encoding="utf-8")
    config = root / "sessions.toml"
    config.write_text(CONFIG.format(skills=root / "skills"), encoding="utf-8")
    with server_process(root / "data", token=TOKEN, extra=["--config", str(config)]) as running:
        yield running


@asynccontextmanager
async def over_stdio(server, session_id):
    params = StdioServerParameters(command=cli_command()[0], args=[*cli_command()[1:], "mcp", "--session", session_id,
                                                                   "--url", server.url], env=cli_env(TOKEN))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def over_http(server, session_id):
    # Generous timeout: the first call imports the MCP SDK in the server, slow on a loaded machine.
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http, \
            streamable_http_client(f"{server.url}/mcp/{session_id}", http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


DOORS = {"stdio": over_stdio, "http": over_http}


def text(result):
    assert len(result.content) == 1
    return result.content[0].text


async def ok(session, name, arguments):
    result = await session.call_tool(name, arguments)
    assert not result.is_error, text(result)
    return text(result)


async def failed(session, name, arguments):
    result = await session.call_tool(name, arguments)
    assert result.is_error, text(result)
    return text(result)


@pytest.mark.parametrize("door", sorted(DOORS))
async def test_tools_listed_with_the_sessions_own_schemas(server, door):
    session_id = f"list-{door}"
    async with DOORS[door](server, session_id) as session:
        listed = (await session.list_tools()).tools
    assert [tool.name for tool in listed] == SESSION_TOOLS + MEMORY_TOOLS
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        own = (await http.get(f"/v1/sessions/{session_id}/tools")).json()["tools"]
    by_name = {tool.name: tool for tool in listed}
    for name in SESSION_TOOLS:  # exactly what tools() gives: descriptions and raw JSON Schemas
        assert by_name[name].description == own[name]["description"]
        assert by_name[name].input_schema == own[name]["inputSchema"]
    assert by_name["search_history"].input_schema["required"] == ["query"]


@pytest.mark.parametrize("door", sorted(DOORS))
async def test_every_tool_runs(server, door):
    async with DOORS[door](server, f"run-{door}") as session:
        out = await ok(session, "set_context", {"label": "memory", "content": "The user likes tea."})
        assert "memory" in out
        await ok(session, "set_context", {"label": "notes", "content": "The launch is on Friday.",
                                          "metadata": {"title": "Launch date"}})
        assert "Friday" in await ok(session, "search_context", {"label": "notes", "query": "launch"})
        assert "Five, seven, five" in await ok(session, "load_context", {"label": "skills", "key": "haiku"})
        await ok(session, "unload_context", {"label": "skills", "key": "haiku"})

        first = json.loads(await ok(session, "append_message", {"role": "user", "text": "Plan the tea party",
                                                               "id": "m1"}))
        assert first == {"id": "m1", "stored": True}
        second = json.loads(await ok(session, "append_message", {"role": "assistant", "text": "Scones and tea"}))
        assert second["stored"] is True and second["id"].startswith("mcp-")
        again = json.loads(await ok(session, "append_message", {"role": "user", "text": "x", "id": "m1"}))
        assert again == {"id": "m1", "stored": False}

        history = json.loads(await ok(session, "get_history", {}))
        assert [(m["id"], m["role"], m["parts"][0]["text"]) for m in history] == [
            ("m1", "user", "Plan the tea party"), (second["id"], "assistant", "Scones and tea")]
        assert [m["id"] for m in json.loads(await ok(session, "get_history", {"limit": 1}))] == [second["id"]]
        hits = json.loads(await ok(session, "search_history", {"query": "scones"}))
        assert [hit["id"] for hit in hits] == [second["id"]]

        resources = {str(r.uri) for r in (await session.list_resources()).resources}
        assert resources == {"memory://system-prompt", "memory://blocks/memory", "memory://blocks/skills",
                             "memory://blocks/notes"}
        block = (await session.read_resource("memory://blocks/memory")).contents[0].text
        assert block == "The user likes tea."
        prompt = (await session.read_resource("memory://system-prompt")).contents[0].text
        assert "MEMORY" in prompt


@pytest.mark.parametrize("door", sorted(DOORS))
async def test_tool_errors_are_tool_results(server, door):
    async with DOORS[door](server, f"errors-{door}") as session:
        assert "invalid arguments for set_context" in await failed(session, "set_context", {"label": "soul"})
        assert "Block" in await failed(session, "set_context", {"label": "memory", "content": "word " * 400})
        assert "no tool named 'rm_rf'" in await failed(session, "rm_rf", {})
        assert "limit" in await failed(session, "get_history", {"limit": 0})
        assert "query" in await failed(session, "search_history", {})
        assert "MessageNotFoundError" in await failed(session, "get_history", {"before": "no-such-message"})
        # the connection still serves
        assert json.loads(await ok(session, "get_history", {})) == []


async def test_http_endpoint_is_guarded_like_the_api(server):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=server.url) as http:
        no_token = await http.post("/mcp/guarded", json=body, headers=headers)
        assert no_token.status_code == 401
        assert no_token.json()["error"]["type"] == "UnauthorizedError"
        assert no_token.headers["WWW-Authenticate"] == "Bearer"
        authorized = {**headers, "Authorization": f"Bearer {TOKEN}"}
        foreign = await http.post("/mcp/guarded", json=body, headers={**authorized, "Origin": "https://evil.example"})
        assert foreign.status_code == 403
        assert foreign.json()["error"]["type"] == "OriginNotAllowedError"
        stream = await http.get("/mcp/guarded", headers={**authorized, "Accept": "text/event-stream"})
        assert (stream.status_code, stream.headers["Allow"]) == (405, "POST")
        assert (await http.delete("/mcp/guarded", headers=authorized)).status_code == 405
        nameless = await http.post("/mcp", json=body, headers=authorized)
        assert nameless.status_code == 400
        assert nameless.json()["error"]["field"] == "session_id"
    # /mcp?session=ID names the same session as /mcp/ID
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http2, \
            streamable_http_client(f"{server.url}/mcp?session=by-query", http_client=http2) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        await ok(session, "append_message", {"role": "user", "text": "via the query", "id": "q1"})
    async with over_http(server, "by-query") as session:
        assert [m["id"] for m in json.loads(await ok(session, "get_history", {}))] == ["q1"]


def test_missing_sdk_is_one_line_naming_the_extra():
    code = ("import sys; sys.modules['mcp'] = None\n"  # as if the mcp extra were not installed
            "from runtime.cli.main import main\n"
            "sys.exit(main(['mcp', '--session', 'x', '--url', 'http://127.0.0.1:9']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "durable-sessions mcp: the MCP server needs the mcp extra: pip install 'durable-sessions[mcp]'"]


def test_stdio_server_loads_no_server_module():
    loaded = run_fresh_python(
        "import sys, runtime.mcp, mcp.server.lowlevel\n"
        "print(sorted(m for m in ('quart', 'hypercorn', 'apsw', 'runtime.server', 'runtime.host') if m in sys.modules))")
    assert loaded.strip() == "[]"


async def test_stdio_embedded_on_a_data_folder(tmp_path):
    config = tmp_path / "sessions.toml"
    config.write_text('[[session.blocks]]\nlabel = "facts"\nkind = "writable"\n', encoding="utf-8")
    args = [*cli_command()[1:], "mcp", "--session", "embedded", "--data", str(tmp_path / "data")]
    params = StdioServerParameters(command=cli_command()[0], args=[*args, "--config", str(config)], env=cli_env(None))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert [tool.name for tool in (await session.list_tools()).tools] == ["set_context", *MEMORY_TOOLS]
        await ok(session, "set_context", {"label": "facts", "content": "Stored on disk."})
        await ok(session, "append_message", {"role": "user", "text": "first", "id": "e1"})
    # a second process on the same folder (the first has exited and released it) sees both
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert [m["id"] for m in json.loads(await ok(session, "get_history", {}))] == ["e1"]
        assert (await session.read_resource("memory://blocks/facts")).contents[0].text == "Stored on disk."
