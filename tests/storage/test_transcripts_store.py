"""LocalTranscriptStore against the Claude Agent SDK's own SessionStore contract,
and our fold rule against the SDK's ``fold_session_summary``."""

import itertools
import json
import random

import pytest
from claude_agent_sdk import fold_session_summary as sdk_fold
from claude_agent_sdk import (
    get_subagent_messages_from_store,
    list_sessions_from_store,
    list_subagents_from_store,
    project_key_for_directory,
)
from claude_agent_sdk.testing import run_session_store_conformance

from common.transcript_summary import fold_session_summary
from runtime.cli.formats.claude_code import find_claude_code_files, read_transcript_entries
from storage.transcripts import CATALOG_FILE_NAME, TRANSCRIPTS_DIR_NAME, LocalTranscriptStore, session_file_id

MAIN = {"project_key": "proj", "session_id": "sess"}
SUB = {**MAIN, "subpath": "subagents/agent-1"}
WORKTREES = "ef958aa1-0e93-49f0-bb71-150f63befcd1"


@pytest.fixture
def store(tmp_path):
    s = LocalTranscriptStore(tmp_path / "data")
    yield s
    s.close()


async def test_sdk_conformance_suite_passes_with_every_optional_method(tmp_path):
    stores: list[LocalTranscriptStore] = []
    counter = itertools.count()

    def make_store():
        stores.append(LocalTranscriptStore(tmp_path / f"store-{next(counter)}"))
        return stores[-1]

    try:
        await run_session_store_conformance(make_store)
    finally:
        for s in stores:
            s.close()
    # One store per contract plus the probe: nothing was skipped for lack of a method.
    assert len(stores) == 15


async def test_a_retried_batch_loads_once(store):
    batch = [{"type": "user", "uuid": "u1", "n": 1}, {"type": "assistant", "uuid": "u2", "n": 2}]
    await store.append(MAIN, batch)
    await store.append(MAIN, batch)
    assert await store.load(MAIN) == batch


async def test_the_same_session_id_under_two_projects_is_two_transcripts(store):
    await store.append({"project_key": "A", "session_id": "s"}, [{"type": "x", "uuid": "1", "from": "A"}])
    await store.append({"project_key": "B", "session_id": "s"}, [{"type": "x", "uuid": "1", "from": "B"}])
    assert await store.load({"project_key": "A", "session_id": "s"}) == [{"type": "x", "uuid": "1", "from": "A"}]
    assert await store.load({"project_key": "B", "session_id": "s"}) == [{"type": "x", "uuid": "1", "from": "B"}]
    files = sorted(p.name for p in (store.data_dir / TRANSCRIPTS_DIR_NAME).glob("*.sqlite3"))
    assert files == sorted(f"{session_file_id(p, 's')}.sqlite3" for p in "AB")


async def test_load_of_an_unknown_key_is_none_and_creates_no_file(store):
    assert await store.load({"project_key": "p", "session_id": "never"}) is None
    assert await store.list_subkeys({"project_key": "p", "session_id": "never"}) == []
    assert not (store.data_dir / TRANSCRIPTS_DIR_NAME).exists()


async def test_deleting_a_session_deletes_its_sub_transcripts_and_its_file(store):
    await store.append(MAIN, [{"type": "user", "uuid": "m"}])
    await store.append(SUB, [{"type": "user", "uuid": "s"}])
    await store.delete(MAIN)
    assert await store.load(MAIN) is None
    assert await store.load(SUB) is None
    assert await store.list_sessions("proj") == []
    assert list((store.data_dir / TRANSCRIPTS_DIR_NAME).iterdir()) == []


async def test_deleting_the_last_sub_transcript_of_a_session_without_main_removes_its_file(store):
    await store.append(SUB, [{"type": "user", "uuid": "s"}])
    assert await store.list_sessions("proj") == []
    await store.delete(SUB)
    assert list((store.data_dir / TRANSCRIPTS_DIR_NAME).iterdir()) == []


async def test_keys_with_path_characters_never_become_paths(store):
    key = {"project_key": "../../etc", "session_id": "/passwd\x00", "subpath": "../../x"}
    await store.append(key, [{"type": "x"}])
    assert await store.load(key) == [{"type": "x"}]
    assert sorted(p.name for p in store.data_dir.rglob("*.sqlite3")) == sorted(
        [CATALOG_FILE_NAME, f"{session_file_id('../../etc', '/passwd' + chr(0))}.sqlite3"]
    )


async def test_transcripts_survive_reopening_the_store(tmp_path):
    async with LocalTranscriptStore(tmp_path / "d") as first:
        await first.append(MAIN, [{"type": "user", "uuid": "m", "customTitle": "t"}])
        await first.append(SUB, [{"type": "user", "uuid": "s"}])
        listed = await first.list_sessions("proj")
    async with LocalTranscriptStore(tmp_path / "d") as second:
        assert await second.load(MAIN) == [{"type": "user", "uuid": "m", "customTitle": "t"}]
        assert await second.list_subkeys(MAIN) == ["subagents/agent-1"]
        assert await second.list_sessions("proj") == listed
        assert (await second.list_session_summaries("proj"))[0]["data"]["custom_title"] == "t"


async def test_files_beyond_the_open_limit_are_closed_and_reopened(tmp_path):
    async with LocalTranscriptStore(tmp_path / "d", max_open_files=2) as store:
        keys = [{"project_key": "p", "session_id": f"s{i}"} for i in range(5)]
        for i, key in enumerate(keys):
            await store.append(key, [{"type": "x", "i": i}])
        assert len(store._files) == 2
        assert [await store.load(k) for k in keys] == [[{"type": "x", "i": i}] for i in range(5)]


async def test_append_of_bad_input_raises_and_stores_nothing(store):
    with pytest.raises(ValueError, match=r"entries\[1\] must be a JSON object"):
        await store.append(MAIN, [{"type": "x"}, "line"])
    with pytest.raises(ValueError, match="subpath must be omitted or a non-empty string"):
        await store.append({**MAIN, "subpath": ""}, [{"type": "x"}])
    assert await store.load(MAIN) is None
    assert await store.list_sessions("proj") == []


def test_max_open_files_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="max_open_files must be at least 1, not 0"):
        LocalTranscriptStore(tmp_path, max_open_files=0)


async def test_summary_is_folded_only_from_entries_actually_stored(tmp_path):
    ticks = iter(range(1_700_000_000_000, 1_700_000_000_100))
    async with LocalTranscriptStore(tmp_path / "d", clock_ms=lambda: next(ticks)) as store:
        await store.append(MAIN, [{"type": "user", "uuid": "a", "customTitle": "old"}])
        await store.append(MAIN, [{"type": "user", "uuid": "b", "customTitle": "new"}])
        await store.append(MAIN, [{"type": "user", "uuid": "a", "customTitle": "old"}])  # late retry
        [summary] = await store.list_session_summaries("proj")
        assert summary == {"session_id": "sess", "mtime": 1_700_000_000_002,
                           "data": {"is_sidechain": False, "custom_title": "new"}}
        assert await store.list_sessions("proj") == [{"session_id": "sess", "mtime": 1_700_000_000_002}]


# -- the fold rule equals the SDK's ----------------------------------------


FOLD_CASES = [
    [{"type": "user", "isSidechain": True, "timestamp": "2024-05-01T10:00:00.5+02:00", "cwd": ""}],
    [{"type": "user", "timestamp": "not a date"}, {"type": "user", "timestamp": "2024-05-01T10:00:00"}],
    [{"type": "user", "message": {"content": "<command-name>/clear</command-name>"}},
     {"type": "user", "message": {"content": "<command-name>/other</command-name>"}},
     {"type": "user", "message": {"content": "<local-command-stdout>x</local-command-stdout>"}},
     {"type": "user", "message": {"content": "  <ide_opened_file>a</ide_opened_file> "}},
     {"type": "user", "message": {"content": "[Request interrupted by user for tool use]"}},
     {"type": "user", "isMeta": True, "message": {"content": "meta"}},
     {"type": "user", "isCompactSummary": True, "message": {"content": "summary"}},
     {"type": "user", "message": {"content": [{"type": "tool_result", "content": "r"}, {"type": "text", "text": "t"}]}},
     {"type": "user", "message": {"content": [{"type": "image"}, {"type": "text", "text": "   "},
                                              {"type": "text", "text": "x" * 250 + "   y"}]}},
     {"type": "user", "message": {"content": "later prompt"}}],
    [{"type": "tag", "tag": "a"}, {"type": "tag", "tag": ""}, {"type": "tag"}, {"type": "tag", "tag": "b"}],
    [{"type": "summary", "summary": "s", "aiTitle": "ai", "lastPrompt": "lp", "gitBranch": 3}],
]


@pytest.mark.parametrize("entries", FOLD_CASES)
def test_fold_matches_the_sdk_on_edge_cases(entries):
    key = {"project_key": "p", "session_id": "s"}
    for split in range(len(entries) + 1):
        ours = fold_session_summary(fold_session_summary(None, "s", entries[:split]), "s", entries[split:])
        theirs = sdk_fold(sdk_fold(None, key, entries[:split]), key, entries[split:])
        assert ours == theirs


def test_fold_matches_the_sdk_on_every_real_transcript(claude_code_log_file):
    entries = [json.loads(line) for line in claude_code_log_file.read_text(encoding="utf-8").splitlines() if line]
    key = {"project_key": "p", "session_id": claude_code_log_file.stem}
    rng = random.Random(claude_code_log_file.name)
    ours = theirs = None
    start = 0
    while start < len(entries):
        end = start + rng.randint(1, 40)
        ours = fold_session_summary(ours, key["session_id"], entries[start:end])
        theirs = sdk_fold(theirs, key, entries[start:end])
        assert ours == theirs
        start = end


# -- Claude Code files pushed as raw transcript entries ---------------------


async def test_every_shared_transcript_round_trips_through_the_store(shared_data, tmp_path):
    files = find_claude_code_files(shared_data / "claude_code" / "claude-code-log")
    assert len(files) == 99
    async with LocalTranscriptStore(tmp_path / "d") as store:
        for file in files:
            await store.append(file.transcript_key, read_transcript_entries(file.path))
        for file in files:
            lines = [json.loads(line) for line in file.path.read_text(encoding="utf-8").splitlines() if line.strip()]
            assert await store.load(file.transcript_key) == (lines or None), file.path
        main_keys = {(f.project_key, f.session_id) for f in files if f.subpath is None and f.path.stat().st_size}
        listed = {(f.project_key, s["session_id"]) for f in files for s in await store.list_sessions(f.project_key)}
        assert listed == main_keys
        assert await store.list_subkeys({"project_key": "-experiments-worktrees", "session_id": WORKTREES}) == [
            f"subagents/agent-{a}" for a in sorted(
                ["a36efb2a1231c41e2", "a4ca7529859c158c2", "a52886dc180afb356", "a6aa8ad077d9ea083",
                 "ab1e6e141221a29ab", "aef063ba534d73153"])]


async def test_the_sdk_store_helpers_read_what_we_stored(test_data, tmp_path):
    project_dir = tmp_path / "project"
    project_dir.mkdir()
    project_key = project_key_for_directory(project_dir)
    async with LocalTranscriptStore(tmp_path / "d") as store:
        for file in find_claude_code_files(test_data / "claude_code" / "projects"):
            await store.append({**file.transcript_key, "project_key": project_key}, read_transcript_entries(file.path))
        infos = await list_sessions_from_store(store, directory=str(project_dir))
        assert sorted((i.session_id, i.summary[:40]) for i in infos) == [
            ("4e27c414-a885-46a0-b5c8-d58e1417377d", "TUI Cache Handling: Empty State Fix"),
            ("71c9afe9-d9cc-4583-86b3-e62ba682b83a", "Please have a look at this patch diff, I"),
            ("94604a7b-062f-4369-bdf0-da948381c3e5", "What are the tools that are available to"),
        ]
        assert await list_subagents_from_store(store, WORKTREES, directory=str(project_dir)) == ["aef063ba534d73153"]
        messages = await get_subagent_messages_from_store(
            store, WORKTREES, "aef063ba534d73153", directory=str(project_dir))
        assert len(messages) == 16
