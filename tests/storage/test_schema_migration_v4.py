"""A file written by the release before schema version 5 opens, migrates and answers as before.

``tests/data/schema_v4/v4_actor.sqlite3`` was written by that release
(``make_v4_file.py`` beside it says how, and prints what that release
answers on it, and after a delete, two appends and an update: the values
below). Version 5 keys ``idx_assistant_msg_parent`` by ``parent_seq``
(children are found by their parent's rowid); every answer stays the same,
before and after writes that list, move and re-place children.
"""

import shutil
from pathlib import Path

import apsw
import pytest

from actors import SessionManager
from actors.session import Session
from storage import SqlStorage
from storage.schema import SCHEMA_VERSION

V4_FILE = Path("schema_v4") / "v4_actor.sqlite3"  # under the test_data folder
IDS = ("a", "b", "c", "d", "x", "y", "z")

# What the v4 release answers on the file (make_v4_file.py --expect): message -> (children, path length).
BEFORE = {"a": (["b"], 1), "b": (["d", "x", "z"], 2), "c": ([], None), "d": ([], 3), "x": (["y"], 3),
          "y": ([], 4), "z": ([], 3)}
AFTER_WRITES = {"a": (["d", "x", "z"], 1), "b": ([], None), "c": ([], None), "d": (["v"], 2), "x": (["y", "w"], 2),
                "y": ([], 3), "z": ([], 2)}


def msg(mid, text):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


@pytest.fixture
def v4_copy(tmp_path, test_data):
    path = tmp_path / "actor.sqlite3"
    shutil.copyfile(test_data / V4_FILE, path)  # opening the fixture itself would leave a -wal file
    return path


async def answers(session):
    found = {}
    for mid in IDS:
        length = await session.get_path_length(mid) if await session.get_message(mid) else None
        found[mid] = ([m["id"] for m in await session.get_branches(mid)], length)
    return found


def test_the_v4_file_is_at_version_4_with_the_parent_index_on_text_ids(v4_copy):
    con = apsw.Connection(str(v4_copy))
    try:
        assert con.pragma("user_version") == 4
        columns = [row[2] for row in con.execute("PRAGMA index_info(idx_assistant_msg_parent)")]
        assert columns == ["session_id", "parent_id", "seq"]
    finally:
        con.close()


async def test_a_v4_file_migrates_and_answers_as_the_v4_release_did(v4_copy):
    with SqlStorage.open(v4_copy) as storage:
        assert storage.user_version == SCHEMA_VERSION == 9
        columns = [row[2] for row in storage.exec("PRAGMA index_info(idx_assistant_msg_parent)")]
        assert columns == ["parent_seq"]
        assert storage.scalar("PRAGMA integrity_check") == "ok"
        session = Session.create(storage)
        assert (await session.get_latest_leaf())["id"] == "z"
        history = [m["id"] for m in await session.get_history()]
        assert history[0].startswith("compaction_") and history[1:] == ["z"]
        assert await answers(session) == BEFORE
        assert await session.estimate_tokens() == 18


async def test_writes_on_a_migrated_v4_file_move_and_list_children_as_the_v4_release_did(v4_copy):
    with SqlStorage.open(v4_copy) as storage:
        session = Session.create(storage)
        await session.delete_messages(["b"])  # d, z and x move up to a
        await session.append_message(msg("w", "under x again"), "x")
        await session.append_message(msg("v", "under d"), "d")
        await session.update_message(msg("x", "x grows: a longer text than it had"))
        assert (await session.get_latest_leaf())["id"] == "v"
        assert [m["id"] for m in await session.get_history()] == ["a", "d", "v"]
        assert await answers(session) == AFTER_WRITES
        assert await session.estimate_tokens() == 21
        manager = SessionManager.create(storage)
        [row] = await manager.list()
        managed = await manager.get_session(row["id"])
        assert [m["id"] for m in await managed.get_history()] == ["m1", "m2", "m3"]
        assert [m["id"] for m in await managed.get_branches("m1")] == ["m2"]
