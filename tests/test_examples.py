"""Every example in ``examples/`` runs end to end, the way its docstring says.

Each example runs as its own process from the repository root with this
interpreter (``.venv/bin/python examples/<name>.py ...``). The ones that talk
to a host get a real ``durable-sessions serve`` process on a free loopback
port with a temporary data folder and a token. The tests check what each
example prints and what it stored (the SQLite files, or the host through
the client).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trio

from runtime.client import SessionsClient
from storage import SqlStorage
from tests.support.data import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"
TOKEN = "examples-token"
SERVE = Path(sys.executable).with_name("durable-sessions")
#: Variables that would point an example at a real model or another host.
FOREIGN = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "DURABLE_SESSIONS_URL", "DURABLE_SESSIONS_TOKEN",
           "ANTHROPIC_API_KEY", "PYTHONPATH")


def example_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


async def run_example(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    """``<python> examples/<name> *args`` from the repository root; its stdout (exit status 0, no stderr)."""
    done = await trio.run_process(
        [sys.executable, f"examples/{name}", *args], cwd=REPO_ROOT, env=env or example_env(),
        capture_stdout=True, capture_stderr=True, check=False,
    )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, f"{name} failed ({done.returncode}):\n{out}\n{err}"
    assert err == "", err
    return out


def section(output: str, title: str) -> list[str]:
    """The lines printed under ``== title``, up to the next ``== `` heading (trailing blank lines dropped)."""
    lines = output.splitlines()
    start = lines.index(f"== {title}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("== ")), len(lines))
    while end > start and not lines[end - 1]:
        end -= 1
    return lines[start:end]


@pytest.fixture
def host(tmp_path):
    """Start ``durable-sessions serve`` (optionally with ``--app``); yields a function returning its URL."""
    processes = []

    def start(*args: str) -> str:
        ready = tmp_path / f"ready-{len(processes)}.json"
        process = subprocess.Popen(
            [str(SERVE), "serve", "--bind", "127.0.0.1:0", "--data", str(tmp_path / "data"),
             "--ready-file", str(ready), *args],
            cwd=REPO_ROOT, env=example_env(DURABLE_SESSIONS_TOKEN=TOKEN),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        processes.append(process)
        deadline = time.monotonic() + 30
        while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), f"the host did not start: {process.communicate(timeout=5)}"
        return json.loads(ready.read_text())["url"]

    yield start
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=20)
            assert process.returncode == 0, err


# -- embedded_session.py -------------------------------------------------------------------------


async def test_embedded_session_example_prints_each_step_and_stores_the_session(tmp_path):
    out = await run_example("embedded_session.py", "--data", str(tmp_path))

    assert section(out, "open") == ["database: " + str(tmp_path / "embedded.sqlite3")]
    prompt = section(out, "frozen system prompt")
    assert prompt[:4] == ["═" * 46, "SOUL [readonly]", "═" * 46, "You are a concise assistant for a small software team."]
    assert section(out, "memory") == [
        "memory holds 16 of 1100 tokens:", "The team deploys on Tuesdays.", "Alice owns the billing service.",
        "frozen prompt unchanged: True", "after refresh the prompt mentions Alice: True",
    ]
    tools = section(out, "tools")
    assert tools[:3] == [
        "tools: set_context, load_context, unload_context, search_context",
        "OpenAI tools=:    ['set_context', 'load_context', 'unload_context', 'search_context']",
        "Anthropic tools=: ['set_context', 'load_context', 'unload_context', 'search_context']",
    ]
    assert json.loads(tools[3])["input_schema"]["properties"]["label"]["enum"] == ["knowledge"]
    assert section(out, "running tools") == [
        'Indexed "e1042" in knowledge.', "[e1042]", "E1042: raise export_timeout_s to 120.",
        'Error: invalid arguments for set_context: label: Invalid option: expected one of "memory"|"skills"|"knowledge"',
    ]
    assert section(out, "skills") == ["loaded: # Reviewing a pull request", "loaded skills: ['skills:code-review']"]
    assert section(out, "search") == ["u1 [user] Our invoice export failed last night with error E1042."]
    compaction = section(out, "compaction")
    assert compaction[:3] == ["compacted a1..a2", "history now: ['u1', 'compaction_…', 'u3', 'a3', 'u4']", "## Topic"]
    assert compaction[-2:] == ["still searchable: ['u1', 'a1']", "knowledge block in the new prompt: 1 entries indexed."]
    assert section(out, "reopen") == [
        "same frozen prompt: True", "loaded skills: ['skills:code-review']", "messages on the path: 7",
    ]

    storage = SqlStorage.open(tmp_path / "embedded.sqlite3")
    try:
        ids = [r["id"] for r in storage.sql("SELECT id FROM assistant_messages WHERE session_id = ? ORDER BY seq",
                                            "embedded-demo")]
        assert ids == ["u1", "a1", "u2", "a2", "u3", "a3", "u4"]
        [compaction_row] = storage.sql("SELECT from_message_id, to_message_id FROM assistant_compactions")
        assert compaction_row == {"from_message_id": "a1", "to_message_id": "a2"}
        assert storage.sql("SELECT key FROM cf_agents_search_entries") == [{"key": "e1042"}]
    finally:
        storage.close()


async def test_embedded_session_example_starts_over_on_the_same_data_folder(tmp_path):
    await run_example("embedded_session.py", "--data", str(tmp_path))
    again = await run_example("embedded_session.py", "--data", str(tmp_path))
    assert section(again, "open")[1] == "cleared the messages of an earlier run"
    assert section(again, "reopen")[-1] == "messages on the path: 7"


async def test_embedded_session_example_prints_the_same_under_asyncio(tmp_path):
    under_trio = await run_example("embedded_session.py", "--data", str(tmp_path / "trio"))
    under_asyncio = await run_example("embedded_session.py", "--data", str(tmp_path / "asyncio"), "--loop", "asyncio")

    assert under_asyncio.replace(str(tmp_path / "asyncio"), "DATA") == under_trio.replace(str(tmp_path / "trio"), "DATA")
    assert section(under_asyncio, "reopen") == [
        "same frozen prompt: True", "loaded skills: ['skills:code-review']", "messages on the path: 7",
    ]


# -- chat_agent.py -------------------------------------------------------------------------------------

CHAT_SCRIPT = [
    "Hello",
    "Remember that I deploy on Tuesdays.",
    "What is our refund policy?",
    "How should I review a pull request?",
    "What about bananas?",
]


def stored_tool_parts(path: Path) -> list[dict]:
    storage = SqlStorage.open(path)
    try:
        rows = storage.sql("SELECT content FROM assistant_messages WHERE session_id = 'chat' ORDER BY seq")
    finally:
        storage.close()
    return [p for row in rows for p in json.loads(row["content"])["parts"] if p["type"].startswith("tool-")]


async def test_chat_agent_example_runs_a_script_offline_and_stores_tool_parts(tmp_path):
    script = tmp_path / "script.txt"
    script.write_text("\n".join(CHAT_SCRIPT) + "\n", encoding="utf-8")
    out = await run_example("chat_agent.py", "--script", str(script), "--data", str(tmp_path))

    assert out.splitlines() == [
        "model: the scripted offline model",
        f"database: {tmp_path / 'chat.sqlite3'}",
        "",
        "you: Hello",
        "assistant: Hello! Tell me something to remember, ask about the team, or ask for a skill.",
        "you: Remember that I deploy on Tuesdays.",
        '  -> set_context({"label": "memory", "content": "I deploy on Tuesdays.", "action": "append"})'
        " = Written to memory. Usage: 1% (6/1100 tokens)",
        "assistant: Noted, I will remember that.",
        "you: What is our refund policy?",
        '  -> search_context({"label": "knowledge", "query": "refund"}) = [refund-policy]',
        "assistant: From the handbook: Refund policy: refunds are paid within 5 working days of approval.",
        "you: How should I review a pull request?",
        '  -> load_context({"label": "skills", "key": "code-review"}) = # Reviewing a pull request',
        "assistant: Following code-review, start here: 1. Read the description first: what problem does the change solve?",
        "you: What about bananas?",
        '  -> search_context({"label": "knowledge", "query": "bananas"}) = No results found.',
        "assistant: The handbook says nothing about that.",
        "",
        "stored: 14 messages, 4 tool parts (load_context, search_context, set_context)",
        'memory block: "I deploy on Tuesdays."',
        "loaded skills: ['skills:code-review']",
    ]
    parts = stored_tool_parts(tmp_path / "chat.sqlite3")
    assert [(p["type"], p["toolName"], p["state"]) for p in parts] == [
        ("tool-set_context", "set_context", "output-available"),
        ("tool-search_context", "search_context", "output-available"),
        ("tool-load_context", "load_context", "output-available"),
        ("tool-search_context", "search_context", "output-available"),
    ]
    assert parts[1]["output"] == "[refund-policy]\nRefund policy: refunds are paid within 5 working days of approval."
    assert parts[2]["output"].startswith("# Reviewing a pull request\n\n1. Read the description first")
    assert all(re.fullmatch(r"call-[0-9a-f]{8}", p["toolCallId"]) for p in parts)


async def test_chat_agent_example_continues_the_conversation_from_stdin(tmp_path):
    await run_example("chat_agent.py", "--data", str(tmp_path), "Remember that my name is Sam.")
    # Lines on stdin (not a terminal) are read without a prompt and echoed.
    done = await trio.run_process(
        [sys.executable, "examples/chat_agent.py", "--data", str(tmp_path)], cwd=REPO_ROOT, env=example_env(),
        stdin=b"How do I write up an incident?\n", capture_stdout=True, capture_stderr=True,
    )
    out = done.stdout.decode()
    assert "you: How do I write up an incident?\n" in out
    assert "assistant: Following incident-report, start here: - **Summary**:" in out
    assert out.endswith('memory block: "my name is Sam."\nloaded skills: [\'skills:incident-report\']\n')
    assert "stored: 6 messages, 2 tool parts (load_context, set_context)" in out


class FakeChatEndpoint(BaseHTTPRequestHandler):
    """An OpenAI-compatible ``/chat/completions``: first a search_context call, then text."""

    requests: list[tuple[str, dict, dict]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append((self.path, dict(self.headers), body))
        if body["messages"][-1]["role"] == "tool":
            message = {"role": "assistant", "content": "Deploys: Tuesdays and Thursdays after 10:00 UTC."}
        else:
            call = {"id": "call_abc", "type": "function",
                    "function": {"name": "search_context", "arguments": '{"label":"knowledge","query":"deploy"}'}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        data = json.dumps({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


async def test_chat_agent_example_talks_to_an_openai_compatible_endpoint(tmp_path):
    FakeChatEndpoint.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeChatEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = example_env(OPENAI_BASE_URL=f"http://127.0.0.1:{server.server_port}/v1", OPENAI_API_KEY="sk-test",
                          OPENAI_MODEL="tiny-model")
        out = await run_example("chat_agent.py", "--data", str(tmp_path), "When can I deploy?", env=env)
    finally:
        server.shutdown()
        server.server_close()

    assert out.splitlines()[0] == f"model: tiny-model at http://127.0.0.1:{server.server_port}/v1"
    assert '  -> search_context({"label": "knowledge", "query": "deploy"}) = [deploy-windows]\n' in out
    assert "assistant: Deploys: Tuesdays and Thursdays after 10:00 UTC.\n" in out
    (path, headers, first), (_, _, second) = FakeChatEndpoint.requests
    assert (path, headers["Authorization"], first["model"]) == ("/v1/chat/completions", "Bearer sk-test", "tiny-model")
    assert [t["function"]["name"] for t in first["tools"]] == ["set_context", "load_context", "unload_context",
                                                              "search_context"]
    assert first["messages"][0]["role"] == "system" and first["messages"][0]["content"].startswith("═" * 46)
    assert first["messages"][1:] == [{"role": "user", "content": "When can I deploy?"}]
    assert second["messages"][2:] == [
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_abc", "type": "function",
            "function": {"name": "search_context", "arguments": '{"label": "knowledge", "query": "deploy"}'}}]},
        {"role": "tool", "tool_call_id": "call_abc",
         "content": "[deploy-windows]\nDeploy windows: Tuesdays and Thursdays after 10:00 UTC, never on Fridays."},
    ]
    [part] = stored_tool_parts(tmp_path / "chat.sqlite3")
    assert (part["toolCallId"], part["input"]) == ("call_abc", {"label": "knowledge", "query": "deploy"})


# -- quickstart_client.py (needs a host) ----------------------------------------------------------------


async def test_quickstart_client_example_against_a_running_host(host):
    url = host()
    env = example_env(DURABLE_SESSIONS_URL=url, DURABLE_SESSIONS_TOKEN=TOKEN)
    out = await run_example("quickstart_client.py", "--session", "quickstart-test", env=env)

    assert out.splitlines()[:2] == [f"host: {url} ok", "session: quickstart-test"]
    assert section(out, "append") == ["stored again? False"]
    assert section(out, "branch and regenerate") == [
        "answers to u1: ['a1', 'a1-retry']",
        "latest path:",
        "  u1 [user] Which database should a small team start with?",
        "  a1-retry [assistant] SQLite: one file, zero setup, surprisingly fast.",
        "first answer's path:",
        "  u1 [user] Which database should a small team start with?",
        "  a1 [assistant] PostgreSQL: boring, well documented, it scales.",
    ]
    assert section(out, "search") == ["  a1-retry [assistant] SQLite: one file, zero setup, surprisingly fast."]
    assert section(out, "frozen system prompt")[:4] == ["═" * 46, "SOUL [readonly]", "═" * 46,
                                                        "You are a helpful assistant."]
    assert section(out, "tools") == [
        '  openai: set_context ["label", "content"]',
        "  Written to memory. Usage: 1% (6/1100 tokens)",
        "  memory block: The team uses SQLite.",
    ]
    events = section(out, "events")
    assert re.fullmatch(r"  cf_agent_session: phase=idle tokenEstimate=\d+ tokenThreshold=100000", events[0])
    assert events[1:] == ["  messages on the path (RPC over the socket): 3"]
    assert section(out, "hibernate") == [
        "  actors hibernated: 1", "  latest leaf after waking: u2", "  messages on the path: 3",
    ]

    async with SessionsClient(url, token=TOKEN) as client:
        session = client.session("quickstart-test")
        assert [m["id"] for m in await session.get_history()] == ["u1", "a1-retry", "u2"]
        assert (await session.get_message("a1"))["parts"][0]["text"] == "PostgreSQL: boring, well documented, it scales."


# -- openai_agents_session.py (needs a host) ---------------------------------------------------------------


async def test_openai_agents_session_example_keeps_the_sdks_memory_on_the_host(host):
    from runtime.client import DurableAgentsSession

    url = host()
    env = example_env(DURABLE_SESSIONS_URL=url, DURABLE_SESSIONS_TOKEN=TOKEN)
    out = await run_example("openai_agents_session.py", "--session", "agents-test", env=env)

    assert out.splitlines()[:2] == [f"host: {url}", "session: agents-test"]
    assert section(out, "first turn") == ["assistant: Paris is sunny (21 °C); Oslo has rain (9 °C).",
                                          "items stored: 6"]
    assert section(out, "second turn, from a fresh session object") == [
        "assistant: You asked about Paris and Oslo; Paris was the sunnier.", "items the model was sent: 7"]
    assert section(out, "as Session messages") == [
        "  [user] text \"What's the weather in Paris and Oslo?\"",
        "  [assistant] tool-get_weather({'city': 'Paris'}) output-available -> 'Sunny, 21 °C', "
        "tool-get_weather({'city': 'Oslo'}) output-available -> 'Rain, 9 °C'",
        "  [assistant] text 'Paris is sunny (21 °C); Oslo has rain (9 °C).'",
        "  [user] text 'Which city did I ask about?'",
        "  [assistant] text 'You asked about Paris and Oslo; Paris was the sunnier.'",
        "search 'sunny': ['Paris is sunny (21 °C); Oslo has rain (9 °C).']",
    ]
    assert section(out, "hibernate") == ["actors hibernated: 1", "items after waking: 8"]
    assert section(out, "pop") == ["popped: You asked about Paris and Oslo; Paris was the sunnier.",
                                   "popped: Which city did I ask about?", "items left: 6"]
    embedded = section(out, "embedded")
    assert re.fullmatch(r"database: .*/durable-sessions-agents-\w+/agents\.sqlite3", embedded[0])
    assert embedded[1:] == ["assistant: Paris: pack sunglasses.", "stored in the file: ['user', 'assistant']"]

    # The SDK's items, read back here under trio (the session works on either loop).
    items = await DurableAgentsSession("agents-test", url, TOKEN).get_items()
    assert [item.get("type", item.get("role")) for item in items] == [
        "user", "function_call", "function_call", "function_call_output", "function_call_output", "message"]
    storage = SqlStorage.open(embedded[0].removeprefix("database: "))
    try:
        assert storage.sql("SELECT role FROM assistant_messages WHERE session_id = 'trip' ORDER BY seq") == [
            {"role": "user"}, {"role": "assistant"}]
    finally:
        storage.close()


# -- custom_agent.py (served with --app) --------------------------------------------------------------


async def test_custom_agent_example_served_with_app(host):
    url = host("--app", "examples.custom_agent:NotesAgent")
    env = example_env(DURABLE_SESSIONS_URL=url, DURABLE_SESSIONS_TOKEN=TOKEN)
    out = await run_example("custom_agent.py", "--notebook", "team", env=env)

    assert section(out, "rpc over HTTP") == [
        "{'id': 1, 'author': 'alice', 'body': 'Ship the export fix on Tuesday.'}",
        "{'id': 2, 'author': 'bob', 'body': 'Rotate the staging keys.'}",
        "{'id': 3, 'author': 'alice', 'body': 'Write up the E1042 incident.'}",
        "  #3 alice: Write up the E1042 incident.",
        "  #2 bob: Rotate the staging keys.",
        "counts: {'alice': 2, 'bob': 1}",
    ]
    assert section(out, "errors") == [
        "  on_start: UnknownMethodError: actor class NotesAgent has no callable method 'on_start'",
        "  add_note: InvalidInputError: body must be a non-empty string",
    ]
    socket = section(out, "websocket")
    assert re.fullmatch(r"  alarm set for epoch ms \d{13}", socket[0])
    assert socket[1:] == ["  broadcast: {'type': 'digest', 'notes': 3, 'latest': 'Write up the E1042 incident.'}"]
    assert section(out, "hibernate") == ["  actors hibernated: 1", "  notes after waking: 3"]

    async with SessionsClient(url, token=TOKEN) as client:
        notes = client.session("team")
        assert await notes.call("counts") == {"alice": 2, "bob": 1}
        assert await notes.call("list_notes", limit=1) == [
            {"id": 3, "author": "alice", "body": "Write up the E1042 incident."}]


# -- claude_agent_store.py (needs a host) -------------------------------------------------------------


async def test_claude_agent_store_example_mirrors_a_transcript_and_imports_claude_code(host):
    from claude_agent_sdk import project_key_for_directory

    from runtime.client.transcripts import DurableSessionStore

    url = host()
    env = example_env(DURABLE_SESSIONS_URL=url, DURABLE_SESSIONS_TOKEN=TOKEN)
    out = await run_example("claude_agent_store.py", env=env)

    sample = "94604a7b-062f-4369-bdf0-da948381c3e5"
    project_key = project_key_for_directory(str(REPO_ROOT))
    store_lines = section(out, "transcript store")
    assert store_lines[:4] == [
        f"store: <DurableSessionStore {url}>",
        f"project key: {project_key}",
        "appended 3 entries twice, stored: 3",
        f"session {sample}: 'What are the tools that are available to you (allowed or not'",
    ]
    assert store_lines[4] == "  user: What are the tools that are available to you (allowed or not)?"
    assert store_lines[5].startswith("  assistant: Here are all the tools available to me: ## File Operations")
    assert store_lines[6:] == [
        f"options: session_store = DurableSessionStore | resume = {sample}",
        "ANTHROPIC_API_KEY is not set: stopping before the model call.",
    ]
    fixtures = REPO_ROOT / "tests" / "data" / "claude_code" / "projects"
    assert section(out, "import Claude Code transcripts") == [
        f"imported 6 of 6 files from {fixtures}: 20 messages stored, 0 already there",
        "  4e27c414-a885-46a0-b5c8-d58e1417377d: 1 messages on the latest path",
        "  4fe49c7c-ff82-4ac7-b3f2-79c22036bd58: 0 messages on the latest path",
        "  71c9afe9-d9cc-4583-86b3-e62ba682b83a: 3 messages on the latest path",
        "  58edcfae-5291-436c-91e4-54fbb188a0ca:agent-3be551df: 2 messages on the latest path, "
        "sub-agent of 58edcfae-5291-436c-91e4-54fbb188a0ca",
        "  ef958aa1-0e93-49f0-bb71-150f63befcd1:agent-aef063ba534d73153: 6 messages on the latest path, "
        "'Round 2: bob comparison', sub-agent of ef958aa1-0e93-49f0-bb71-150f63befcd1",
        "  94604a7b-062f-4369-bdf0-da948381c3e5: 2 messages on the latest path",
    ]
    assert section(out, "search for 'renderer.py'") == [
        "71c9afe9-d9cc-4583-86b3-e62ba682b83a:",
        "  9caaa981 [user] Please have a look at this patch diff, I changed my mind a b",
        "  81874968 [assistant] I'll analyze this patch and help you implement the combined ",
        "  3a290b78 [assistant] Now I'll implement the combined logic that takes the least n",
    ]

    lines = (fixtures / "-src-experiments-claude_p" / f"{sample}.jsonl").read_text(encoding="utf-8").splitlines()
    async with DurableSessionStore(url, token=TOKEN) as store:
        stored = await store.load({"project_key": project_key, "session_id": sample})
    assert stored == [entry for entry in map(json.loads, lines) if "uuid" in entry]
    async with SessionsClient(url, token=TOKEN) as client:
        session = client.session("71c9afe9-d9cc-4583-86b3-e62ba682b83a")
        found = await session.get_message((await session.search("renderer.py"))[1]["id"])
    [read] = [p for p in found["parts"] if p["type"] == "tool-Read"]
    assert (read["input"]["file_path"], read["state"]) == (
        "/Users/user/workspace/claude-code-log/claude_code_log/renderer.py", "output-available")


async def test_claude_agent_store_example_checks_the_sdk_contracts_first(host):
    url = host()
    env = example_env(DURABLE_SESSIONS_URL=url, DURABLE_SESSIONS_TOKEN=TOKEN)
    out = await run_example("claude_agent_store.py", "--check", env=env)
    assert section(out, "SessionStore conformance") == ["14 contracts passed (one fresh store each, plus one probe)"]
    assert section(out, "transcript store")[2] == "appended 3 entries twice, stored: 3"


# -- test_hibernation_example.py ---------------------------------------------------------------------------


async def test_hibernation_example_passes_under_pytest():
    done = await trio.run_process(
        [sys.executable, "-m", "pytest", "examples/test_hibernation_example.py", "-q", "-p", "no:cacheprovider"],
        cwd=REPO_ROOT, env=example_env(), capture_stdout=True, capture_stderr=True, check=False,
    )
    out = done.stdout.decode()
    assert done.returncode == 0, out
    assert re.search(r"^6 passed in [\d.]+s$", out, re.MULTILINE), out


# -- README ----------------------------------------------------------------------------------------------------


def test_readme_links_every_example_and_each_docstring_names_its_command():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    examples = sorted(path.name for path in EXAMPLES.glob("*.py"))
    linked = sorted(set(re.findall(r"\]\(examples/([\w.]+\.py)\)", readme)))
    assert linked == examples
    for name in examples:
        doc = (EXAMPLES / name).read_text(encoding="utf-8").split('"""')[1]
        assert f"examples/{name}" in doc, f"{name}: its docstring does not say how to run it"


# -- postgres_session.py -------------------------------------------------------------------------


async def test_postgres_session_example_runs_the_specs_wiring_on_a_real_postgres(pg_dsn):
    import psycopg

    out = await run_example("postgres_session.py", "--dsn", pg_dsn)
    assert section(out, "tools") == [
        "tools: set_context, search_context",
        "Written to memory. Usage: 1% (7/1100 tokens)",
        'Indexed "economy-fares-include-one-23-kg-bag-ni0i2z" in knowledge.',
        "[economy-fares-include-one-23-kg-bag-ni0i2z]",
        "Economy fares include one 23 kg bag.",
    ]
    prompt = section(out, "frozen system prompt")
    assert prompt[:4] == ["═" * 46, "SOUL [readonly]", "═" * 46, "You are a helpful assistant."]
    assert "MEMORY (Short facts) [1% — 7/1100 tokens] [writable]" in prompt
    assert prompt[-2:] == ["1 entries indexed.", "frozen: True"]
    assert section(out, "messages") == [
        "history: ['u1', 'a1', 'u2']", "search second bag: ['u1', 'a1']", "search 東京: ['u1']",
        "search \"seat 12A\": ['u2']",
    ]
    assert section(out, "a second Session, as after a wake") == [
        "same frozen prompt: True", "memory: The user flies from Lisbon.", "history: ['u1', 'a1', 'u2']",
        "latest leaf: u2",
    ]
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute("SELECT id FROM assistant_messages WHERE session_id = 'pg-demo' ORDER BY seq").fetchall()
        labels = {r[0] for r in conn.execute("SELECT label FROM cf_agents_context_blocks")}
    assert [r[0] for r in rows] == ["u1", "a1", "u2"]
    assert labels == {"memory_pg-demo", "_prompt_pg-demo"}

    again = await run_example("postgres_session.py", env=example_env(DURABLE_SESSIONS_POSTGRES=pg_dsn))
    assert section(again, "open")[1] == "cleared the messages of an earlier run"
    assert section(again, "a second Session, as after a wake")[2] == "history: ['u1', 'a1', 'u2']"


def test_postgres_session_example_needs_a_database():
    done = subprocess.run([sys.executable, "examples/postgres_session.py"], cwd=REPO_ROOT, env=example_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "give --dsn or set DURABLE_SESSIONS_POSTGRES" in done.stderr
