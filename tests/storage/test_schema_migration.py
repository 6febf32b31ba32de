"""A file written by the release before schema version 2 opens, migrates and searches right.

``tests/data/schema_v1/v1_actor.sqlite3`` was written by that release
(``make_v1_file.py`` beside it says how). Version 2 moves tool calls out of
``assistant_fts`` (so text matches rank as in the original) and splits
text at CJK boundaries for the porter indexes; nothing else changes.
"""

import shutil
from pathlib import Path

import pytest

from actors import SessionManager
from actors.context import AgentSearchProvider, ContextBlocks
from actors.session import Session
from storage import SqlStorage
from storage.schema import SCHEMA_VERSION

V1_FILE = Path("schema_v1") / "v1_actor.sqlite3"  # under the test_data folder
GLUED = "重跑gen-itgc后再看看"


@pytest.fixture
def v1_file(test_data):
    return test_data / V1_FILE


@pytest.fixture
def migrated(tmp_path, v1_file):
    path = tmp_path / "actor.sqlite3"
    shutil.copyfile(v1_file, path)
    with SqlStorage.open(path) as storage:
        yield storage


def test_the_v1_file_is_at_version_1_with_tools_in_the_text_index(tmp_path, v1_file):
    import apsw

    copy = tmp_path / "copy.sqlite3"  # opening the fixture itself would leave -shm/-wal files
    shutil.copyfile(v1_file, copy)
    con = apsw.Connection(str(copy))
    try:
        assert con.pragma("user_version") == 1
        assert [name for (name,) in con.execute("SELECT name FROM pragma_table_info('assistant_fts')")] == [
            "id", "session_id", "role", "content", "tools"]
    finally:
        con.close()


def test_migration_moves_tool_calls_out_of_the_text_index(migrated):
    assert migrated.user_version == SCHEMA_VERSION == 9  # versions 4 to 9 (tables, an index, tables on first use) move no row
    # version 3 leaves the text index only its text (contentless): see test_schema_migration_v2.py
    assert [r["name"] for r in migrated.sql("SELECT name FROM pragma_table_info('assistant_fts')")] == ["content"]
    assert [r["rowid"] for r in migrated.sql("SELECT rowid FROM assistant_fts ORDER BY rowid")] == [1, 2, 4, 5, 6, 7, 8]
    assert [r["rowid"] for r in migrated.sql("SELECT rowid FROM assistant_fts_tools ORDER BY rowid")] == [1, 3, 6, 8]
    assert migrated.sql("SELECT name FROM sqlite_master WHERE name LIKE 'assistant_fts_v%'") == []
    for table in ("assistant_fts", "assistant_fts_tools", "cf_agents_search_fts"):
        migrated.exec(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")


async def test_migrated_session_search_ranks_text_as_the_original_and_finds_glued_words(migrated):
    session = Session.create(migrated)
    assert [h["id"] for h in await session.search("friday")] == ["short", "long", "tool"]
    assert [(h["id"], h["content"]) for h in await session.search("itgc")] == [("glued", GLUED), ("jp", "Pythonで書いたスクリプトをv2に更新")]
    assert [h["content"] for h in await session.search("x")] == ["a\u2063b 東\u2063x"]
    assert [h["id"] for h in await session.search("python")] == ["jp"]
    assert [h["id"] for h in await session.search("docs/setup.md")] == ["short"]
    history = await session.get_history()
    assert [m["id"] for m in history][:2] == ["short", f"compaction_{(await session.get_compactions())[0]['id']}"]


async def test_migrated_manager_search_and_tools_find_glued_words(migrated):
    manager = SessionManager.create(migrated).with_searchable_history("history")
    [row] = await manager.list()
    assert [(h["id"], h["content"]) for h in await manager.search("itgc")] == [("c2", GLUED)]
    assert [h["id"] for h in await manager.search("friday")] == ["c1", "c2"]
    assert await manager.tools()["session_search"].execute({"query": "gen"}) == f"[user] {GLUED}"
    session = await manager.get_session(row["id"])
    search = (await session.tools())["search_context"]
    assert await search.execute({"label": "history", "query": "itgc"}) == f"[user] {GLUED}"


async def test_migrated_search_entries_find_glued_words(migrated):
    blocks = ContextBlocks(migrated).with_context("knowledge", provider=AgentSearchProvider(migrated))
    search = (await blocks.tools())["search_context"]
    assert await search.execute({"label": "knowledge", "query": "itgc"}) == f"[rerun]\n{GLUED}"
    assert await search.execute({"label": "knowledge", "query": "friday"}) == "[deploy]\nDeploy on Friday"
    assert await search.execute({"label": "knowledge", "query": "b"}) == "[mark]\na\u2063b"


async def test_writes_after_migration_index_as_new_files_do(migrated):
    session = Session.create(migrated)
    await session.append_message({"id": "new", "role": "user", "parts": [{"type": "text", "text": "Friday: 部署gen2"}]})
    assert [h["id"] for h in await session.search("gen2")] == ["new"]
    await session.delete_messages(["short", "tool"])
    assert [h["id"] for h in await session.search("friday")] == ["new", "long"]  # the shorter text first
    assert migrated.scalar("SELECT count(*) FROM assistant_fts_tools WHERE rowid IN (1, 3)") == 0
