"""``durable-sessions import`` of Claude Code transcripts into a real server process.

For each source (the fixtures under ``tests/data/claude_code`` always; all
99 files of ``../shared/data/claude_code/claude-code-log`` when present),
one server process on a free loopback port:

* as sessions: the command succeeds for every file with a progress bar;
  each session's stored messages, tool calls, results, errors, branch
  points and kept entries equal an independent count of the JSONL
  (``reference_counts`` of ``tests.runtime.cli.formats.test_claude_code``); sub-agents name
  their parent in their metadata; empty files are empty sessions; for
  every ``Read`` call, searching the session for the name of the file it
  read finds the call's message;
* as transcripts: loading each file's key gives back its lines, in order,
  and pushing again stores nothing.
"""

import json
import re
import subprocess
from pathlib import Path

import apsw
import httpx
import pytest

from common.errors import InvalidInputError
from runtime import DurableSessionStore, open_host
from runtime.cli.claude_import import import_claude_code_sessions, push_claude_code_transcripts, session_metadata
from runtime.cli.formats import RESULT_STATES, is_tool_part
from runtime.cli.formats.claude_code import ENTRY_PART, find_claude_code_files, read_claude_code_session
from runtime.client import SessionsClient
from runtime.host.ids import id_from_name
from runtime.server.app import DEFAULT_NAMESPACE, bind_sessions
from runtime.server.transcripts import open_transcripts
from tests.runtime.cli.formats.test_claude_code import reference_counts
from tests.support.data import CLAUDE_CODE_LOG, TEST_DATA, shared_data_dir
from tests.support.processes import cli_command, cli_env, server_process

TOKEN = "import-token"
FIXTURES = TEST_DATA / "claude_code" / "projects"
PREFIX = "cc/"


def _sources():
    shared = shared_data_dir()
    params = [pytest.param(FIXTURES, id="fixtures")]
    if shared is not None and (shared / CLAUDE_CODE_LOG).is_dir():
        params.append(pytest.param(shared / CLAUDE_CODE_LOG, id="claude-code-log", marks=pytest.mark.slow))
    else:
        params.append(pytest.param(None, id="claude-code-log", marks=pytest.mark.skip(
            reason="shared data not found (claude_code/claude-code-log); set DURABLE_SESSIONS_SHARED_DATA")))
    return params


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """One server per source, started on first use and stopped after the module."""
    started, stack = {}, []

    def get(source: Path):
        if source not in started:
            context = server_process(tmp_path_factory.mktemp("import") / "data", token=TOKEN)
            started[source] = context.__enter__()
            stack.append(context)
        return started[source]

    yield get
    for context in reversed(stack):
        context.__exit__(None, None, None)


def run_cli(*args):
    return subprocess.run([*cli_command(), "import", *map(str, args)], env=cli_env(TOKEN), capture_output=True,
                          text=True, timeout=600)


def lines_of(path):
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# -- independent facts from the JSONL -------------------------------------------------------


def read_calls(lines):
    """``(message id, file name)`` of each ``Read`` call: the message is the first entry of its API response."""
    entries = [json.loads(line) for line in lines]
    leaders = {}
    for entry in entries:
        if entry["type"] == "assistant":
            leaders.setdefault(entry["message"]["id"], entry["uuid"])
    found = []
    for entry in entries:
        content = entry.get("message", {}).get("content") if entry["type"] == "assistant" else None
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use" and block["name"] == "Read" and "file_path" in block["input"]:
                found.append((leaders[entry["message"]["id"]], Path(block["input"]["file_path"]).name))
    return found


def stored_counts(data_dir, session_id):
    """The same counts, read straight from the session's actor file (the server is left running,
    the session hibernated)."""
    actor = id_from_name(DEFAULT_NAMESPACE, session_id)
    path = data_dir / DEFAULT_NAMESPACE / actor.shard / f"{actor.hex}.sqlite3"
    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = [(parent, json.loads(content)) for parent, content in
                con.execute("SELECT parent_id, content FROM assistant_messages WHERE session_id = ''")]
    finally:
        con.close()
    parts = [part for _, message in rows for part in message["parts"]]
    tools = [part for part in parts if is_tool_part(part)]
    children = {}
    for parent, _ in rows:
        children[parent] = children.get(parent, 0) + 1
    return {
        "messages": len(rows),
        "tool_calls": len(tools),
        "results": sum(part["state"] in RESULT_STATES for part in tools),
        "errors": sum(part["state"] == "output-error" for part in tools),
        "branch_points": sum(1 for parent, n in children.items() if parent is not None and n > 1),
        "kept_entries": sum(part["type"] == ENTRY_PART for part in parts),
    }


def parent_of(file, lines):
    """The session a sub-agent transcript belongs to, from its place or its entries."""
    if file.subpath is not None:
        return file.session_id
    return next(json.loads(line)["sessionId"] for line in lines if "sessionId" in json.loads(line))


# -- as sessions, end to end ----------------------------------------------------------------


@pytest.mark.parametrize("source", _sources())
async def test_every_file_imports_as_a_session_matching_the_jsonl(source, servers):
    server = servers(source)
    files = find_claude_code_files(source)
    result = run_cli(source, "--url", server.url, "--prefix", PREFIX)
    assert result.returncode == 0, result.stderr
    n = len(files)
    assert "import:" not in result.stderr  # stderr is no terminal: no progress bar (one shows on a terminal:
    # tests/runtime/cli/test_operations.py)
    assert re.fullmatch(rf"imported {n} of {n} Claude Code files as sessions: \d+ messages stored, 0 already there\n",
                        result.stdout)
    async with SessionsClient(server.url, token=TOKEN) as client:
        for file in files:
            lines = lines_of(file.path)
            session_id = PREFIX + read_claude_code_session(file).session_id
            handle = client.session(session_id)
            metadata = await handle.call("get_metadata")
            assert metadata["source"] == "claude-code"
            assert metadata["transcriptKey"] == file.transcript_key
            if file.agent_id is not None:
                parent = PREFIX + parent_of(file, lines)
                assert metadata["parentSessionId"] == parent
                assert session_id == f"{parent}:agent-{file.agent_id}"
            else:
                assert "parentSessionId" not in metadata
            if not lines:
                assert await handle.get_history() == []
                continue
            await client.hibernate(session_id)  # a running host holds an awake actor's file exclusively
            assert stored_counts(server.data_dir, session_id) == reference_counts(lines), file.path
            for message_id, name in sorted(set(read_calls(lines))):
                hits = await handle.search(name, limit=500)
                assert message_id in [hit["id"] for hit in hits], (file.path, name)


def test_the_shared_folder_has_99_files_17_empty_and_32_sessions_that_read_files(shared_data):
    files = find_claude_code_files(shared_data / CLAUDE_CODE_LOG)
    assert len(files) == 99
    assert sum(not lines_of(f.path) for f in files) == 17
    assert sum(bool(read_calls(lines_of(f.path))) for f in files) == 32


async def test_importing_again_stores_nothing_new(servers):
    server = servers(FIXTURES)
    first = run_cli(FIXTURES, "--url", server.url, "--prefix", "again/", "--no-progress")
    second = run_cli(FIXTURES, "--url", server.url, "--prefix", "again/", "--no-progress")
    stored = int(re.search(r": (\d+) messages stored", first.stdout).group(1))
    assert stored > 0
    assert second.stdout == f"imported 6 of 6 Claude Code files as sessions: 0 messages stored, {stored} already there\n"
    assert second.stderr == ""


async def test_a_branching_session_keeps_its_branches_over_http(servers):
    server = servers(FIXTURES)
    run_cli(FIXTURES, "--url", server.url, "--prefix", "branch/", "--no-progress")
    async with SessionsClient(server.url, token=TOKEN) as client:
        handle = client.session("branch/71c9afe9-d9cc-4583-86b3-e62ba682b83a")
        children = await handle.get_branches("cc67b20e-4350-4a71-bc4f-8b64f2adb806")
        assert [m["id"][:8] for m in children] == ["e042a3e0", "972dc1ad"]
        latest = [m["id"][:8] for m in await handle.get_history()]
        assert latest == ["cc67b20e", "972dc1ad", "c97a4bd2"]
        tool = next(p for m in await handle.get_history("15de182e-96fb-4e8d-b839-b8d42714aaeb")
                    for p in m["parts"] if p.get("toolName") == "Read")
        assert tool["state"] == "output-available" and tool["output"].startswith("    38→def get_project_display_name(")


# -- as transcripts, end to end ----------------------------------------------------------------


@pytest.mark.parametrize("source", _sources())
async def test_every_file_round_trips_as_transcript_entries(source, servers):
    server = servers(source)
    files = find_claude_code_files(source)
    n = len(files)
    result = run_cli(source, "--url", server.url, "--as", "transcripts")
    assert result.returncode == 0, result.stderr
    assert "import:" not in result.stderr  # no terminal: no progress bar (test_operations.py: one on a terminal)
    total = sum(len(lines_of(f.path)) for f in files)
    assert result.stdout == (f"pushed {n} of {n} Claude Code files as transcripts: "
                             f"{total} entries stored, 0 already there\n")
    async with DurableSessionStore(server.url, token=TOKEN) as store:
        for file in files:
            lines = [json.loads(line) for line in lines_of(file.path)]
            assert await store.load(file.transcript_key) == (lines or None), file.path
        for project in {f.project_key for f in files}:
            listed = sorted(s["session_id"] for s in await store.list_sessions(project))
            assert listed == sorted(f.session_id for f in files
                                    if f.project_key == project and f.subpath is None and lines_of(f.path))
    again = run_cli(source, "--url", server.url, "--as", "transcripts", "--no-progress")
    assert again.stdout == f"pushed {n} of {n} Claude Code files as transcripts: 0 entries stored, {total} already there\n"


# -- in process: failures, warnings, --data -----------------------------------------------------


def _write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


USER = {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "s1", "timestamp": "2025-01-01T00:00:00Z",
        "message": {"role": "user", "content": "read notes.md please"}}
ODD = {"type": "brand-new-kind", "uuid": "x1", "parentUuid": "u1", "payload": [1, 2]}


async def test_unknown_entries_and_bad_lines_are_kept_and_a_failing_file_does_not_stop_the_others(tmp_path):
    project = tmp_path / "projects" / "-p"
    good = _write(project / "s1.jsonl", [json.dumps(USER), json.dumps(ODD), "not json {"])
    _write(project / "s2.jsonl", [json.dumps({**USER, "sessionId": "s2"}),
                                  json.dumps({"type": "summary", "summary": "Notes", "leafUuid": "u1"})])
    files = find_claude_code_files(tmp_path / "projects")
    steps = []
    async with open_host(tmp_path / "data") as host, open_transcripts(host) as store:
        namespace = bind_sessions(host)
        report = await import_claude_code_sessions(files, namespace.get_by_name, on_progress=steps.append)
        assert (report.files, report.failures, steps) == (2, [], [1, 1])
        assert report.warnings == [(str(good), "line 3: not a JSON object; kept as a data-claude-code-line part")]
        [message] = await namespace.get_by_name("s1").get_history()
        assert [p["type"] for p in message["parts"]] == ["text", ENTRY_PART, "data-claude-code-line"]
        assert message["parts"][1]["data"] == ODD

        pushed = await push_claude_code_transcripts(files, store)
        assert pushed.files == 1 and pushed.stored == 2
        [(path, error)] = pushed.failures
        assert path.endswith("s1.jsonl") and error.startswith("FormatError: ") and ":3: not JSON" in error
        assert await store.load({"project_key": "-p", "session_id": "s1"}) is None
        assert [s["session_id"] for s in await store.list_sessions("-p")] == ["s2"]


async def test_a_stored_transcript_that_is_not_a_prefix_of_the_file_is_a_conflict(tmp_path):
    file = _write(tmp_path / "projects" / "-p" / "s1.jsonl", [json.dumps(USER)])
    files = find_claude_code_files(file)
    async with open_host(tmp_path / "data") as host, open_transcripts(host) as store:
        await store.append({"project_key": "-p", "session_id": "s1"}, [{"type": "other"}])
        report = await push_claude_code_transcripts(files, store)
        [(_, error)] = report.failures
        assert error.startswith("ConflictError: the store holds 1 entries under")
        _write(file, [json.dumps(USER), json.dumps(ODD)])
        await store.delete({"project_key": "-p", "session_id": "s1"})
        await push_claude_code_transcripts(files, store)
        _write(file, [json.dumps(USER), json.dumps(ODD), json.dumps({"type": "later"})])
        grown = await push_claude_code_transcripts(files, store)
        assert (grown.sent, grown.stored) == (3, 1)
        assert await store.load({"project_key": "-p", "session_id": "s1"}) == [USER, ODD, {"type": "later"}]


def test_offline_import_into_a_data_folder_serves_the_same_sessions(tmp_path):
    data = tmp_path / "data"
    for target in ("sessions", "transcripts"):
        result = subprocess.run([*cli_command(), "import", str(FIXTURES), "--data", str(data), "--as", target,
                                 "--no-progress"], env=cli_env(None), capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"{'pushed' if target == 'transcripts' else 'imported'} 6 of 6 ")
    with server_process(data) as server:
        client_check = subprocess.run(
            [*cli_command(), "history", "71c9afe9-d9cc-4583-86b3-e62ba682b83a", "--url", server.url, "--json"],
            env=cli_env(None), capture_output=True, text=True, timeout=60)
        assert [m["id"][:8] for m in json.loads(client_check.stdout)] == ["cc67b20e", "972dc1ad", "c97a4bd2"]
        reply = httpx.get(f"{server.url}/v1/transcripts/subkeys",
                          params={"project_key": "-experiments-worktrees",
                                  "session_id": "ef958aa1-0e93-49f0-bb71-150f63befcd1"}, timeout=60)
        assert reply.json() == {"subkeys": ["subagents/agent-aef063ba534d73153"]}


@pytest.mark.parametrize(("args", "message"), [
    (["--as", "transcripts", "--prefix", "x/"], "--prefix does not apply to --as transcripts"),
    (["--as", "transcripts", "--format", "openai-chat"], "--as transcripts takes Claude Code transcripts"),
])
def test_usage_errors_exit_2(args, message):
    result = run_cli(FIXTURES, *args)
    assert result.returncode == 2
    assert result.stderr.startswith(f"durable-sessions import: {message}")


def test_a_missing_transcript_is_a_usage_error(tmp_path):
    result = run_cli(tmp_path / "missing.jsonl")
    assert result.returncode == 2
    assert "missing.jsonl" in result.stderr


# -- session metadata -------------------------------------------------------------------------------


def test_session_metadata_of_a_sub_agent_names_its_parent(test_data):
    file = test_data / "claude_code" / "projects" / "-experiments-worktrees" / \
        "ef958aa1-0e93-49f0-bb71-150f63befcd1" / "subagents" / "agent-aef063ba534d73153.jsonl"
    metadata = session_metadata(read_claude_code_session(file), prefix="p/")
    assert metadata["source"] == "claude-code"
    assert metadata["parentSessionId"] == "p/ef958aa1-0e93-49f0-bb71-150f63befcd1"
    assert metadata["agentId"] == "aef063ba534d73153"
    assert list(metadata)[0] == "source"


async def test_metadata_is_validated_and_survives_hibernation(tmp_path):
    async with open_host(tmp_path / "data") as host:
        stub = bind_sessions(host).get_by_name("s")
        assert await stub.get_metadata() == {}
        assert await stub.set_metadata({"name": "n", "nested": {"a": [1]}}) == {"name": "n", "nested": {"a": [1]}}
        await host.hibernate_all()
        assert await stub.get_metadata() == {"name": "n", "nested": {"a": [1]}}
        for bad, match in (([1], "must be a JSON object"), ({"x": float("inf")}, "is not JSON data"),
                           ({"x": "y" * 70_000}, "the limit is 65536")):
            with pytest.raises(InvalidInputError, match=match):
                await stub.set_metadata(bad)
        assert await stub.set_metadata({}) == {}
        assert await stub.get_metadata() == {}
