"""A file written by the release before schema version 3 opens, migrates and answers as before.

``tests/data/schema_v2/v2_actor.sqlite3`` was written by that release
(``make_v2_file.py`` beside it says how, and prints what that release
answers on it: the values below). Version 3 makes ``assistant_fts``
contentless, replaces ``idx_assistant_msg_created`` by
``idx_assistant_msg_seq`` and drops the ``active_leaf`` rows (the latest
leaf is the session's newest message); every answer stays the same.
"""

import shutil
from pathlib import Path

import apsw
import pytest

from actors import SessionManager
from actors.session import Session
from storage import SqlStorage
from storage.schema import SCHEMA_VERSION

V2_FILE = Path("schema_v2") / "v2_actor.sqlite3"  # under the test_data folder
GLUED = "重跑gen-itgc后再看看"
JP = "Pythonで書いたスクリプトをv2に更新"
BRANCH = "東京 on Friday, a second thought"

# What the v2 release answers on the file (make_v2_file.py --expect).
SEARCHES = {
    "friday": [("short", "user", "Deploy on Friday"), ("branch", "user", BRANCH),
               ("long", "assistant", "We could maybe think about doing the release on Friday after lunch"),
               ("tool", "assistant", "")],
    "itgc": [("glued", "user", GLUED), ("jp", "assistant", JP)],
    "x": [("marker", "user", "a\u2063b 東\u2063x")],
    "python": [("jp", "assistant", JP)],
    "docs/setup.md": [("short", "user", "Deploy on Friday")],
    "東京": [("branch", "user", BRANCH)],
    "gen": [("glued", "user", GLUED), ("jp", "assistant", JP)],
}
MANAGER_SEARCHES = {
    "friday": [("c1", "Friday standup notes"), ("c2", GLUED)],
    "itgc": [("c2", GLUED)], "x": [], "python": [], "docs/setup.md": [], "東京": [], "gen": [("c2", GLUED)],
}


@pytest.fixture
def v2_copy(tmp_path, test_data):
    path = tmp_path / "actor.sqlite3"
    shutil.copyfile(test_data / V2_FILE, path)  # opening the fixture itself would leave a -wal file
    return path


@pytest.fixture
def migrated(v2_copy):
    with SqlStorage.open(v2_copy) as storage:
        yield storage


def test_the_v2_file_is_at_version_2_with_a_text_copy_and_active_leaf_rows(v2_copy):
    con = apsw.Connection(str(v2_copy))
    try:
        assert con.pragma("user_version") == 2
        assert [name for (name,) in con.execute("SELECT name FROM pragma_table_info('assistant_fts')")] == [
            "id", "session_id", "role", "content"]
        assert con.execute("SELECT count(*) FROM assistant_config WHERE key = 'active_leaf'").fetchall() == [(1,)]
    finally:
        con.close()


def test_migration_leaves_the_text_index_contentless_and_the_leaf_to_the_seq_index(migrated):
    assert migrated.user_version == SCHEMA_VERSION == 9  # versions 4 to 9 (tables, an index, tables on first use) move no row
    assert [r["name"] for r in migrated.sql("SELECT name FROM pragma_table_info('assistant_fts')")] == ["content"]
    assert [r["rowid"] for r in migrated.sql("SELECT rowid FROM assistant_fts ORDER BY rowid")] == [
        1, 2, 4, 5, 6, 7, 8, 9]
    assert migrated.sql("SELECT content FROM assistant_fts WHERE rowid = 1") == [{"content": None}]
    names = {r["name"] for r in migrated.sql("SELECT name FROM sqlite_master")}
    assert "idx_assistant_msg_seq" in names
    assert {"idx_assistant_msg_created", "assistant_fts_v2", "assistant_fts_content"} & names == set()
    assert migrated.sql("SELECT key FROM assistant_config WHERE key = 'active_leaf'") == []
    for table in ("assistant_fts", "assistant_fts_tools", "assistant_fts_cjk", "cf_agents_search_fts"):
        migrated.exec(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
    assert migrated.scalar("PRAGMA integrity_check") == "ok"


async def test_the_migrated_file_answers_as_the_v2_release_did(migrated):
    session = Session.create(migrated)
    assert (await session.get_latest_leaf())["id"] == "branch"
    history = await session.get_history()
    compaction = (await session.get_compactions())[0]["id"]
    assert [m["id"] for m in history] == ["short", f"compaction_{compaction}", "glued", "branch"]
    for query, hits in SEARCHES.items():
        assert [(h["id"], h["role"], h["content"]) for h in await session.search(query)] == hits, query
    manager = SessionManager.create(migrated)
    [row] = await manager.list()
    assert (await (await manager.get_session(row["id"])).get_latest_leaf())["id"] == "c2"
    for query, hits in MANAGER_SEARCHES.items():
        assert [(h["id"], h["content"]) for h in await manager.search(query)] == hits, query


async def test_writes_after_the_migration_go_on_from_the_latest_leaf(migrated):
    session = Session.create(migrated)
    await session.append_message({"id": "new", "role": "user", "parts": [{"type": "text", "text": "Friday: 部署gen2"}]})
    assert [m["id"] for m in await session.get_history()][-3:] == ["glued", "branch", "new"]
    assert [h["id"] for h in await session.search("gen2")] == ["new"]
    await session.delete_messages(["new", "short"])
    assert (await session.get_latest_leaf())["id"] == "branch"
    assert [h["id"] for h in await session.search("friday")] == ["branch", "long", "tool"]
