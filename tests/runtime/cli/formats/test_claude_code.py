"""Claude Code transcripts -> Session messages (tree, tool folding, sub-agents)."""

import json
from collections import Counter

import pytest

from runtime.cli.formats import RESULT_STATES, FormatError, iter_tool_parts
from runtime.cli.formats.claude_code import (
    BLOCK_PART,
    ENTRY_PART,
    LINE_PART,
    ClaudeCodeFile,
    convert_claude_code_entries,
    find_claude_code_files,
    iter_claude_code_sessions,
    read_claude_code_session,
    read_transcript_entries,
)

SAMPLE = "-Users-user-workspace-claude-code-log-sample"
WORKTREES_SESSION = "ef958aa1-0e93-49f0-bb71-150f63befcd1"


@pytest.fixture
def projects(test_data):
    return test_data / "claude_code" / "projects"


# -- an independent reference counter -------------------------------------------


def reference_counts(lines):
    """Counts a correct conversion must give, taken straight from the JSONL.

    A message is an API response (distinct ``message.id``) or a user entry with
    some content besides tool results; anything else stands for the message of
    its nearest ancestor. Assumes what holds for the shared data: uuids are
    unique and every tool result names a call of the same file.
    """
    entries = [json.loads(line) for line in lines if line.strip()]
    by_uuid = {e["uuid"]: e for e in entries if "uuid" in e}
    assert len(by_uuid) == sum("uuid" in e for e in entries), "reference counter assumes unique uuids"
    leaders = {}
    for e in entries:
        if e["type"] == "assistant":
            leaders.setdefault(e["message"]["id"], e["uuid"])

    def content(e):
        c = e["message"]["content"]
        return [{"type": "text", "text": c}] if isinstance(c, str) else c

    def is_message(e):
        return e["type"] == "assistant" or (
            e["type"] == "user" and any(b["type"] != "tool_result" for b in content(e)))

    def message_of(uuid):
        e = by_uuid.get(uuid)
        if e is None:
            return None
        if is_message(e):
            return leaders[e["message"]["id"]] if e["type"] == "assistant" else uuid
        return message_of(e.get("parentUuid"))

    firsts = {}
    for e in entries:
        if is_message(e):
            firsts.setdefault(message_of(e["uuid"]), e)
    children = Counter(message_of(e.get("parentUuid")) for e in firsts.values())
    calls = [b for e in entries if e["type"] == "assistant" for b in content(e) if b["type"] == "tool_use"]
    results = [b for e in entries if e["type"] == "user" for b in content(e) if b["type"] == "tool_result"]
    assert {r["tool_use_id"] for r in results} <= {c["id"] for c in calls}
    others = sum(e["type"] not in ("user", "assistant") for e in entries)
    return {
        "messages": len(firsts) or (1 if entries else 0),
        "tool_calls": len(calls),
        "results": len(results),
        "errors": sum(r.get("is_error") is True for r in results),
        "branch_points": sum(1 for parent, n in children.items() if parent is not None and n > 1),
        "kept_entries": others,
    }


def conversion_counts(session):
    parts = list(iter_tool_parts(session))
    children = Counter(m.parent_id for m in session.messages)
    return {
        "messages": len(session.messages),
        "tool_calls": len(parts),
        "results": sum(p["state"] in RESULT_STATES for p in parts),
        "errors": sum(p["state"] == "output-error" for p in parts),
        "branch_points": sum(1 for parent, n in children.items() if parent is not None and n > 1),
        "kept_entries": sum(p["type"] == ENTRY_PART for m in session.messages for p in m.message["parts"]),
    }


def assert_appendable(session):
    """Ids unique, and every parent appears before its children."""
    seen = set()
    for item in session.messages:
        assert item.message["id"] not in seen
        assert item.parent_id is None or item.parent_id in seen
        assert item.message["role"] in ("user", "assistant", "system")
        seen.add(item.message["id"])


def test_every_shared_transcript_converts_with_reference_counts(claude_code_log_file):
    lines = claude_code_log_file.read_text(encoding="utf-8").splitlines()
    session = read_claude_code_session(claude_code_log_file)
    assert session.warnings == []
    assert conversion_counts(session) == reference_counts(lines)
    assert_appendable(session)


def test_the_shared_folder_has_99_transcripts_17_empty_and_53_sub_agents(shared_data):
    files = find_claude_code_files(shared_data / "claude_code" / "claude-code-log")
    sessions = list(iter_claude_code_sessions(shared_data / "claude_code" / "claude-code-log"))
    assert len(files) == len(sessions) == 99
    assert sum(not s.messages for s in sessions) == 17
    subs = [s for s in sessions if s.parent_session_id is not None]
    assert len(subs) == sum(f.agent_id is not None for f in files) == 53
    assert all(s.session_id == f"{s.parent_session_id}:agent-{s.metadata['agentId']}" for s in subs)
    assert len({s.session_id for s in sessions}) == 99


def test_raw_entries_of_every_shared_transcript_equal_its_lines(claude_code_log_file):
    lines = [line for line in claude_code_log_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert read_transcript_entries(claude_code_log_file) == [json.loads(line) for line in lines]


# -- fixtures copied into tests/data (always run) --------------------------------


def test_fixture_transcripts_match_the_reference_counts(projects):
    files = find_claude_code_files(projects)
    assert len(files) == 6
    for file in files:
        session = read_claude_code_session(file)
        assert conversion_counts(session) == reference_counts(file.path.read_text().splitlines()), file.path
        assert_appendable(session)


def test_files_are_classified_like_the_sdk_keys_them(projects):
    keys = {
        f.path.relative_to(projects).as_posix(): (f.transcript_key, f.agent_id) for f in find_claude_code_files(projects)
    }
    old_layout = ({"project_key": SAMPLE, "session_id": "agent-3be551df"}, "3be551df")
    assert keys[f"{SAMPLE}/agent-3be551df.jsonl"] == old_layout
    nested = f"-experiments-worktrees/{WORKTREES_SESSION}/subagents/agent-aef063ba534d73153.jsonl"
    assert keys[nested] == (
        {"project_key": "-experiments-worktrees", "session_id": WORKTREES_SESSION,
         "subpath": "subagents/agent-aef063ba534d73153"},
        "aef063ba534d73153",
    )
    main = f"{SAMPLE}/71c9afe9-d9cc-4583-86b3-e62ba682b83a.jsonl"
    assert keys[main] == ({"project_key": SAMPLE, "session_id": "71c9afe9-d9cc-4583-86b3-e62ba682b83a"}, None)


def test_a_branching_session_keeps_both_branches(projects):
    session = read_claude_code_session(projects / SAMPLE / "71c9afe9-d9cc-4583-86b3-e62ba682b83a.jsonl")
    ids = [m.message["id"][:8] for m in session.messages]
    parents = [m.parent_id and m.parent_id[:8] for m in session.messages]
    assert list(zip(ids, parents)) == [
        ("cc67b20e", None),
        ("e042a3e0", "cc67b20e"),
        ("092e3ca9", "e042a3e0"),
        ("9caaa981", "092e3ca9"),
        ("81874968", "9caaa981"),
        ("3a290b78", "81874968"),
        ("15de182e", "3a290b78"),
        ("972dc1ad", "cc67b20e"),
        ("c97a4bd2", "972dc1ad"),
    ]
    first = session.messages[0].message
    assert first["createdAt"] == "2025-07-17T22:21:50.622Z"
    assert first["metadata"] == {"claudeCode": {"uuids": ["cc67b20e-4350-4a71-bc4f-8b64f2adb806"], "isMeta": True}}
    assert session.name is None
    assert session.metadata["cwd"] == "/Users/user/workspace/claude-code-log"


def test_one_api_response_is_one_message_with_its_results_folded_in(projects):
    session = read_claude_code_session(projects / SAMPLE / "71c9afe9-d9cc-4583-86b3-e62ba682b83a.jsonl")
    reply = session.messages[4].message
    assert reply["role"] == "assistant"
    assert reply["metadata"]["claudeCode"]["model"] == "claude-opus-4-20250514"
    assert len(reply["metadata"]["claudeCode"]["uuids"]) == 2
    text, read = reply["parts"]
    assert text["text"].startswith("I'll analyze this patch and help you implement the combined logic")
    assert {k: read[k] for k in ("type", "toolCallId", "toolName", "state", "input")} == {
        "type": "tool-Read",
        "toolCallId": "toolu_01XUP9weCA4RGj429ZoPuZfo",
        "toolName": "Read",
        "state": "output-available",
        "input": {"file_path": "/Users/user/workspace/claude-code-log/claude_code_log/renderer.py", "offset": 38,
                  "limit": 40},
    }
    assert read["output"].startswith("    38→def get_project_display_name(")
    # hook messages after the Edit result are kept as data parts of the next reply's parent
    edit_reply = session.messages[5].message
    assert [p["type"] for p in edit_reply["parts"]] == ["text", "tool-Edit", ENTRY_PART, ENTRY_PART]
    assert edit_reply["parts"][2]["data"]["content"] == "Running \x1b[1mPostToolUse:Edit\x1b[22m..."
    assert edit_reply["parts"][2]["id"] == "77a1e162-9ba8-48b3-8bbf-c20936f9f8bf"


def test_leading_bookkeeping_entries_go_to_the_first_message(projects):
    path = projects / "-src-experiments-claude_p" / "94604a7b-062f-4369-bdf0-da948381c3e5.jsonl"
    session = read_claude_code_session(path)
    assert [m.message["role"] for m in session.messages] == ["user", "assistant"]
    user = session.messages[0].message
    assert [(p["type"], p.get("data", {}).get("type")) for p in user["parts"]] == [
        (ENTRY_PART, "queue-operation"), (ENTRY_PART, "progress"), ("text", None)]
    assert user["parts"][2] == {
        "type": "text", "text": "What are the tools that are available to you (allowed or not)?"}
    assert session.messages[1].parent_id == "c8fc3f44-cce3-44c5-8310-2615f46c301a"


def test_a_file_with_only_a_summary_becomes_one_system_message(projects):
    session = read_claude_code_session(projects / SAMPLE / "4e27c414-a885-46a0-b5c8-d58e1417377d.jsonl")
    [item] = session.messages
    assert item.parent_id is None
    assert item.message == {
        "id": "4e27c414-a885-46a0-b5c8-d58e1417377d:entries",
        "role": "system",
        "parts": [{"type": ENTRY_PART, "data": {"type": "summary", "summary": "TUI Cache Handling: Empty State Fix",
                                                "leafUuid": "2369a617-e71c-48aa-8c5c-d53ad8274d71"}}],
    }


def test_an_empty_file_is_an_empty_session(projects):
    session = read_claude_code_session(projects / SAMPLE / "4fe49c7c-ff82-4ac7-b3f2-79c22036bd58.jsonl")
    assert (session.session_id, session.messages, session.warnings) == ("4fe49c7c-ff82-4ac7-b3f2-79c22036bd58", [], [])
    assert read_transcript_entries(projects / SAMPLE / "4fe49c7c-ff82-4ac7-b3f2-79c22036bd58.jsonl") == []


def test_sub_agent_transcripts_become_sessions_linked_to_their_parent(projects):
    old = read_claude_code_session(projects / SAMPLE / "agent-3be551df.jsonl")
    assert old.session_id == "58edcfae-5291-436c-91e4-54fbb188a0ca:agent-3be551df"
    assert old.parent_session_id == "58edcfae-5291-436c-91e4-54fbb188a0ca"
    assert old.metadata["agentId"] == "3be551df"
    assert old.messages[0].message["metadata"]["claudeCode"]["isSidechain"] is True
    path = projects / "-experiments-worktrees" / WORKTREES_SESSION / "subagents" / "agent-aef063ba534d73153.jsonl"
    nested = read_claude_code_session(path)
    assert nested.session_id == f"{WORKTREES_SESSION}:agent-aef063ba534d73153"
    assert nested.parent_session_id == WORKTREES_SESSION
    assert nested.name == "Round 2: bob comparison"
    assert {k: nested.metadata[k] for k in ("agentId", "agentType", "description", "transcriptKey")} == {
        "agentId": "aef063ba534d73153",
        "agentType": "general-purpose",
        "description": "Round 2: bob comparison",
        "transcriptKey": {"project_key": "-experiments-worktrees", "session_id": WORKTREES_SESSION,
                          "subpath": "subagents/agent-aef063ba534d73153"},
    }


# -- edge cases, built inline ---------------------------------------------------


def line(**entry):
    return json.dumps(entry)


def user(uuid, parent, content, **extra):
    return line(type="user", uuid=uuid, parentUuid=parent, message={"role": "user", "content": content}, **extra)


def assistant(uuid, parent, api_id, *blocks, **extra):
    return line(type="assistant", uuid=uuid, parentUuid=parent,
                message={"id": api_id, "role": "assistant", "model": "m", "content": list(blocks)}, **extra)


def test_parallel_tool_results_on_side_branches_do_not_make_branches():
    lines = [
        user("u1", None, "go"),
        assistant("a1", "u1", "r1", {"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": 1}}),
        assistant("a2", "a1", "r1", {"type": "tool_use", "id": "t2", "name": "Read", "input": {"p": 2}}),
        user("u2", "a2", [{"type": "tool_result", "tool_use_id": "t2", "content": "two"}]),
        user("u3", "a1", [{"type": "tool_result", "tool_use_id": "t1", "content": "one", "is_error": True}]),
        assistant("a3", "u3", "r2", {"type": "text", "text": "done"}),
    ]
    session = convert_claude_code_entries(lines, session_id="s")
    assert [(m.message["id"], m.parent_id) for m in session.messages] == [("u1", None), ("a1", "u1"), ("a3", "a1")]
    assert session.messages[1].message["parts"] == [
        {"type": "tool-Read", "toolCallId": "t1", "toolName": "Read", "state": "output-error", "input": {"p": 1},
         "errorText": "one"},
        {"type": "tool-Read", "toolCallId": "t2", "toolName": "Read", "state": "output-available", "input": {"p": 2},
         "output": "two"},
    ]
    assert session.messages[1].message["metadata"] == {"claudeCode": {"uuids": ["a1", "a2"], "model": "m"}}


def test_blocks_map_to_ai_sdk_parts_and_unknown_ones_are_kept():
    lines = [
        user("u1", None, [
            {"type": "text", "text": "see"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
            {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
            {"type": "mystery", "x": 1},
        ]),
        assistant("a1", "u1", "r1",
                  {"type": "thinking", "thinking": "hm", "signature": "sig"},
                  {"type": "redacted_thinking", "data": "xyz"},
                  {"type": "server_tool_use", "id": "s1", "name": "web_search"}),
    ]
    user_parts, reply_parts = (m.message["parts"] for m in convert_claude_code_entries(lines, session_id="s").messages)
    assert user_parts == [
        {"type": "text", "text": "see"},
        {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,iVBO"},
        {"type": "file", "mediaType": "application/pdf", "url": "https://example.com/a.pdf"},
        {"type": BLOCK_PART, "data": {"type": "mystery", "x": 1}},
    ]
    assert reply_parts == [
        {"type": "reasoning", "text": "hm", "providerMetadata": {"anthropic": {"signature": "sig"}}},
        {"type": "reasoning", "text": "", "providerMetadata": {"anthropic": {"redactedData": "xyz"}}},
        {"type": BLOCK_PART, "data": {"type": "server_tool_use", "id": "s1", "name": "web_search"}},
    ]


def test_compact_summary_and_boundary_are_kept():
    lines = [
        user("u1", None, "before"),
        line(type="system", subtype="compact_boundary", uuid="b1", parentUuid=None, logicalParentUuid="u1"),
        user("u2", "b1", "This session is being continued... Summary: X", isCompactSummary=True),
        assistant("a1", "u2", "r1", {"type": "text", "text": "ok"}),
    ]
    session = convert_claude_code_entries(lines, session_id="s")
    assert [(m.message["id"], m.parent_id) for m in session.messages] == [("u1", None), ("u2", None), ("a1", "u2")]
    summary = session.messages[1].message
    assert summary["metadata"]["claudeCode"]["isCompactSummary"] is True
    assert [p["type"] for p in summary["parts"]] == [ENTRY_PART, "text"]
    assert summary["parts"][0]["data"]["subtype"] == "compact_boundary"


def test_bad_lines_unknown_types_and_orphans_never_crash():
    lines = [
        "",
        "{truncated",
        "[1, 2]",
        user("u1", None, "hi"),
        line(type="brand-new-type", uuid="n1", parentUuid="u1", payload=[1]),
        user("u2", "n1", [{"type": "tool_result", "tool_use_id": "nowhere", "content": "lost?"}]),
        line(type="user", uuid="u3", parentUuid="u2", message="not an object"),
        user("u1", None, "duplicate uuid"),
        assistant("a1", "ghost", "r1", {"type": "tool_use", "id": "t1", "input": {}}),
    ]
    session = convert_claude_code_entries(lines, session_id="s")
    assert session.warnings == [
        "line 2: not a JSON object; kept as a data-claude-code-line part",
        "line 3: not a JSON object; kept as a data-claude-code-line part",
    ]
    assert [(m.message["id"], m.parent_id) for m in session.messages] == [("u1", None), ("u2", "u1"), ("a1", None)]
    first, orphan, reply = (m.message["parts"] for m in session.messages)
    assert [p["type"] for p in first] == [LINE_PART, LINE_PART, "text", ENTRY_PART, ENTRY_PART]
    assert first[0] == {"type": LINE_PART, "data": {"line": 2, "text": "{truncated"}}
    assert first[3]["data"]["type"] == "brand-new-type"
    assert first[4] == {"type": ENTRY_PART, "id": "u1", "data": json.loads(lines[7])}  # a repeated uuid joins its first
    assert orphan[0] == {
        "type": BLOCK_PART, "data": {"type": "tool_result", "tool_use_id": "nowhere", "content": "lost?"}}
    assert orphan[1] == {"type": ENTRY_PART, "id": "u3", "data": json.loads(lines[6])}
    assert reply == [{"type": BLOCK_PART, "data": {"type": "tool_use", "id": "t1", "input": {}}}]


def test_a_forward_parent_reference_still_puts_parents_first():
    lines = [
        user("u2", "u1", "child written first"),
        user("u1", None, "parent"),
    ]
    session = convert_claude_code_entries(lines, session_id="s")
    assert [(m.message["id"], m.parent_id) for m in session.messages] == [("u1", None), ("u2", "u1")]


def test_a_parent_cycle_is_broken_with_a_warning():
    session = convert_claude_code_entries([user("a", "b", "x"), user("b", "a", "y")], session_id="s")
    assert [(m.message["id"], m.parent_id) for m in session.messages] == [("a", None), ("b", "a")]
    assert session.warnings == ["message a: parent cycle; stored as a root"]


def test_long_chains_of_bookkeeping_entries_do_not_recurse():
    lines = [user("u0", None, "start")]
    lines += [line(type="progress", uuid=f"p{i}", parentUuid=f"p{i - 1}" if i else "u0") for i in range(5000)]
    lines.append(user("u1", "p4999", "end"))
    session = convert_claude_code_entries(lines, session_id="s")
    assert [(m.message["id"], m.parent_id) for m in session.messages] == [("u0", None), ("u1", "u0")]
    assert len(session.messages[0].message["parts"]) == 5001


def test_titles_come_from_custom_title_then_summary_of_a_leaf_in_the_file():
    lines = [user("u1", None, "x"), line(type="summary", summary="About x", leafUuid="u1")]
    assert convert_claude_code_entries(lines, session_id="s").name == "About x"
    lines.append(line(type="custom-title", customTitle="Mine", sessionId="s"))
    assert convert_claude_code_entries(lines, session_id="s").name == "Mine"


def test_raw_mode_refuses_lines_that_are_not_objects(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"type": "user"}\n\n[1]\n')
    with pytest.raises(FormatError, match=r"t.jsonl:3: a transcript entry must be a JSON object"):
        read_transcript_entries(path)
    path.write_text('{"type": "user"}\n{oops\n')
    with pytest.raises(FormatError, match=r"t.jsonl:2: not JSON"):
        read_transcript_entries(path)


def test_find_refuses_a_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no Claude Code transcript or folder at"):
        find_claude_code_files(tmp_path / "nope")


def test_a_single_file_path_is_classified_by_its_folders(projects):
    [file] = find_claude_code_files(projects / SAMPLE / "agent-3be551df.jsonl")
    assert file == ClaudeCodeFile(projects / SAMPLE / "agent-3be551df.jsonl", SAMPLE, "agent-3be551df")
