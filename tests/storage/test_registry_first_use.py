"""The session registry (``assistant_sessions``) is made by the first session a SessionManager registers.

A plain session's file never has one (schema version 7: four pages less in every such file). A
file without one answers as a registry with no row; the first registration makes it exactly as
version 1 of the ladder made it; a rolled back registration takes it away again.
"""

import shutil
from pathlib import Path

import apsw
import pytest

from actors import SessionManager
from actors.session import Session
from storage import SqlStorage, registry
from storage.fts import parse_query
from storage.schema import SCHEMA_VERSION

REGISTRY = ("assistant_sessions", "idx_assistant_sessions_updated")


def msg(mid, text):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def schema(storage, prefix="assistant_sessions"):
    return {name: sql for name, sql in storage.exec("SELECT name, sql FROM sqlite_schema WHERE tbl_name = ?", prefix)}


@pytest.fixture
def storage(tmp_path):
    s = SqlStorage.open(tmp_path / "actor.sqlite3")
    yield s
    s.close()


async def test_a_plain_sessions_file_has_no_registry(storage):
    session = Session.create(storage)
    await session.append_message(msg("a", "hello"))
    assert schema(storage) == {}


def test_a_file_without_a_registry_answers_as_an_empty_one_and_writes_nothing(storage):
    version = storage.scalar("PRAGMA schema_version")
    assert registry.get_session(storage, "s") is None
    assert registry.session_exists(storage, "s") is False
    assert registry.list_sessions(storage) == []
    assert registry.count_sessions(storage) == 0
    assert registry.touch_session(storage, "s") is False
    assert registry.rename_session(storage, "s", "n") is None
    assert registry.end_session(storage, "s", "done") is None
    assert registry.add_usage(storage, "s", 1, 2, 0.5) is None
    assert registry.delete_session(storage, "s") is False
    assert registry.search_messages(storage, parse_query("hello"), 10) == []
    assert storage.scalar("PRAGMA schema_version") == version  # no table made
    assert schema(storage) == {}


def test_the_first_registration_makes_the_registry_as_the_ladder_did_and_a_rollback_takes_it_away(
        storage, tmp_path, test_data):
    with pytest.raises(ZeroDivisionError):
        with storage.transaction():
            registry.insert_session(storage, "s1", "first")
            1 / 0
    assert schema(storage) == {}
    row = registry.insert_session(storage, "s1", "first")
    assert (row["id"], row["name"]) == ("s1", "first")
    shutil.copyfile(test_data / "schema_v6" / "v6_actor.sqlite3", tmp_path / "v6.sqlite3")
    con = apsw.Connection(str(tmp_path / "v6.sqlite3"))  # made by versions 1-6 of the ladder
    try:
        ladder = {name: sql for name, sql in con.execute(
            "SELECT name, sql FROM sqlite_schema WHERE tbl_name = 'assistant_sessions'")}
    finally:
        con.close()
    assert schema(storage) == ladder and set(REGISTRY) <= set(ladder)
    assert [r["id"] for r in registry.list_sessions(storage)] == ["s1"]


async def test_deleting_a_session_of_a_manager_that_never_embedded_deletes_it(storage):
    # Regression: the deletion named the embedding tables, which exist only once a vector was stored.
    manager = SessionManager.create(storage)
    sid = (await manager.create("chat"))["id"]
    await manager.append(sid, msg("m1", "hello there"))
    assert not storage.scalar("SELECT count(*) FROM sqlite_schema WHERE name = 'assistant_embeddings'")
    await manager.delete(sid)
    assert await manager.list() == []
    assert storage.scalar("SELECT count(*) FROM assistant_messages") == 0
    assert await manager.search("hello") == []


def test_a_v6_file_keeps_a_registry_with_rows_and_loses_an_empty_one(tmp_path, test_data):
    for name, kept in (("v6_actor.sqlite3", True), ("v6_empty.sqlite3", False)):
        shutil.copyfile(test_data / "schema_v6" / name, tmp_path / name)
        with SqlStorage.open(tmp_path / name) as migrated:
            assert migrated.user_version == SCHEMA_VERSION
            assert set(schema(migrated)) == (set(REGISTRY) | {"sqlite_autoindex_assistant_sessions_1",
                                                              "sqlite_autoindex_assistant_sessions_2"}
                                             if kept else set())
            assert registry.count_sessions(migrated) == (1 if kept else 0)
