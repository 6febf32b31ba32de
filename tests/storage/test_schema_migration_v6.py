"""Files written by the release before schema version 7 open, migrate and answer as before.

``tests/data/schema_v6/`` holds two files written by that release (``make_v6_files.py`` beside
them says how). Version 7 makes the message text indexes (``assistant_fts``,
``assistant_fts_tools``, ``assistant_fts_cjk``) on the first write to the messages: a file whose
indexes hold rows keeps them and finds what it found; a file whose indexes are empty loses them,
finds nothing, and gets them back, exactly as the ladder made them, at its first append.
"""

import shutil
from pathlib import Path

import apsw
import pytest

from actors import SessionManager
from actors.session import Session
from storage import SqlStorage
from storage.cluster.capture import ChangeCapture
from storage.schema import SCHEMA_VERSION

FOLDER = Path("schema_v6")  # under the test_data folder
INDEXES = ("assistant_fts", "assistant_fts_cjk", "assistant_fts_tools")


def msg(mid, text):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def copy(tmp_path, test_data, name):
    path = tmp_path / name
    shutil.copyfile(test_data / FOLDER / name, path)  # opening the fixture itself would leave a -wal file
    return path


def tables(storage):
    return {name: sql for name, sql in storage.exec("SELECT name, sql FROM sqlite_schema WHERE type = 'table'")}


def test_the_v6_files_are_at_version_6_with_the_indexes(tmp_path, test_data):
    for name in ("v6_actor.sqlite3", "v6_empty.sqlite3"):
        con = apsw.Connection(str(copy(tmp_path, test_data, name)))
        try:
            assert con.pragma("user_version") == 6
            assert {n for (n,) in con.execute("SELECT name FROM sqlite_schema WHERE name IN (?, ?, ?)", INDEXES)} \
                == set(INDEXES)
        finally:
            con.close()


async def test_a_file_with_indexed_messages_keeps_its_indexes_and_finds_as_before(tmp_path, test_data):
    storage = SqlStorage.open(copy(tmp_path, test_data, "v6_actor.sqlite3"))
    try:
        assert storage.user_version == SCHEMA_VERSION == 9
        assert set(INDEXES) <= set(tables(storage))
        session = Session.create(storage)
        assert [m["id"] for m in await session.search("lisbon")] == ["a", "b"]  # text, then tool input
        assert [m["id"] for m in await session.search("東京")] == ["c"]
        assert [m["id"] for m in await session.search("book_flight")] == ["b"]
        await session.append_message(msg("d", "lisbon again"))
        assert {m["id"] for m in await session.search("lisbon")} == {"a", "b", "d"}
        manager = SessionManager.create(storage)
        [(sid,)] = storage.exec("SELECT id FROM assistant_sessions").fetchall()
        hits = await manager.search("managed")
        assert [(h["id"], h["sessionId"]) for h in hits] == [("m1", sid)]
    finally:
        storage.close()


async def test_a_file_with_empty_indexes_loses_them_and_makes_them_again_at_its_first_append(tmp_path, test_data):
    con = apsw.Connection(str(copy(tmp_path, test_data, "v6_actor.sqlite3")))  # as versions 1-3 made them
    made_by_ladder = {name: sql for name, sql in con.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'table'")
                      if name.startswith("assistant_fts")}
    con.close()
    storage = SqlStorage.open(copy(tmp_path, test_data, "v6_empty.sqlite3"))
    try:
        assert storage.user_version == 9
        assert not any(name.startswith("assistant_fts") for name in tables(storage))
        assert storage.scalar("SELECT value FROM assistant_config WHERE key = 'actor_name'") == "empty"
        session = Session.create(storage)
        assert await session.search("flight") == []  # no index: nothing found, nothing made
        assert not any(name.startswith("assistant_fts") for name in tables(storage))
        await session.append_message(msg("a", "first flight"))
        made = {name: sql for name, sql in tables(storage).items() if name.startswith("assistant_fts")}
        assert made == made_by_ladder and len(made) == 16  # 3 tables and their 13 shadow tables
        assert [m["id"] for m in await session.search("flight")] == ["a"]
    finally:
        storage.close()


async def test_a_new_file_has_no_message_index_until_its_first_append_and_a_rollback_takes_it_away(tmp_path):
    storage = SqlStorage.open(tmp_path / "new.sqlite3")
    try:
        session = Session.create(storage)
        assert not any(name.startswith("assistant_fts") for name in tables(storage))
        with pytest.raises(ZeroDivisionError):
            with storage.transaction():
                await session.append_message(msg("a", "rolled back"))
                1 / 0
        assert not any(name.startswith("assistant_fts") for name in tables(storage))
        assert await session.search("rolled") == []
        await session.append_message(msg("b", "kept"))
        assert [m["id"] for m in await session.search("kept")] == ["b"]
    finally:
        storage.close()


def test_a_capture_makes_the_message_indexes_before_it_attaches(tmp_path):
    storage = SqlStorage.open(tmp_path / "captured.sqlite3")
    try:
        assert not any(name.startswith("assistant_fts") for name in tables(storage))
        capture = ChangeCapture(storage)
        try:
            assert set(INDEXES) <= set(tables(storage))
        finally:
            capture.detach()
    finally:
        storage.close()
