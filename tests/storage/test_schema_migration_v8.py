"""Schema version 9: the message, compaction and block tables are made on first use (issue 28).

``tests/data/schema_v8/`` holds two files written by the release before (``make_v8_files.py``
beside them says how). A file whose tables hold rows keeps them and answers as before; a file
whose tables are empty loses them, answers every read as if empty without making anything, and
gets each back, exactly as the ladder made it, from its first write. A new file never has them
until written, so a session only read costs three pages; a cluster capture makes them before it
attaches, and a changeset of their rows applies to a template without them.
"""

import os
import shutil
from pathlib import Path

import apsw
import pytest

from actors import SessionAgent, SessionManager
from actors.session import Session
from actors.session_archive import export_lines, import_records
from common.archive import parse_archive
from runtime import open_host
from storage import SqlStorage, embeddings
from storage.archive_rows import export_records, holds_session_data
from storage.catalog import last_write_ms
from storage.cluster.capture import ChangeCapture, Marker
from storage.cluster.restore import restore_file
from storage.context import delete_blocks, read_block, write_block
from storage.embeddings import EmbeddingMessageStore
from storage.integrity import actor_facts, examine
from storage.messages import MessageStore
from storage.schema import SCHEMA_VERSION, table_exists

FOLDER = Path("schema_v8")  # under the test_data folder
LAZY = ("assistant_messages", "assistant_compactions", "cf_agents_context_blocks")


def msg(mid, text):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def copy(tmp_path, test_data, name):
    path = tmp_path / name
    shutil.copyfile(test_data / FOLDER / name, path)  # opening the fixture itself would leave a -wal file
    return path


def schema_of(storage_or_con, tables):
    """``{name: sql}`` of ``tables`` and their indexes (the automatic ones have no SQL)."""
    con = storage_or_con.connection if isinstance(storage_or_con, SqlStorage) else storage_or_con
    marks = ", ".join("?" * len(tables))
    return dict(con.execute(f"SELECT name, sql FROM sqlite_schema WHERE tbl_name IN ({marks})", tables))


@pytest.fixture
def storage(tmp_path):
    opened = SqlStorage.open(tmp_path / "new.sqlite3")
    yield opened
    opened.close()


def present(storage):
    return {name for (name,) in storage.exec("SELECT name FROM sqlite_schema WHERE type = 'table'")} & set(LAZY)


def test_the_v8_files_are_at_version_8_with_the_three_tables(tmp_path, test_data):
    for name in ("v8_actor.sqlite3", "v8_empty.sqlite3"):
        con = apsw.Connection(str(copy(tmp_path, test_data, name)))
        try:
            assert con.pragma("user_version") == 8
            assert len(schema_of(con, LAZY)) == 9  # 3 tables, their 3 keys, 3 indexes
        finally:
            con.close()


async def test_a_v8_file_with_rows_keeps_its_tables_and_answers_as_before(tmp_path, test_data):
    storage = SqlStorage.open(copy(tmp_path, test_data, "v8_actor.sqlite3"))
    try:
        assert storage.user_version == SCHEMA_VERSION == 9
        assert present(storage) == set(LAZY)
        session = Session.create(storage)
        [compaction] = await session.get_compactions()
        assert [m["id"] for m in await session.get_history()] == [f"compaction_{compaction['id']}", "c", "d"]
        assert (compaction["summary"], compaction["fromMessageId"], compaction["toMessageId"]) == \
            ("the user asked for flights", "a", "b")
        assert [m["id"] for m in await session.search("lisbon")] == ["a", "b"]  # text, then tool input
        assert [m["id"] for m in await session.search("東京")] == ["c"]
        assert read_block(storage, "memory") == "likes window seats"
        assert read_block(storage, "_system_prompt_") == "You are helpful."
        await session.append_message(msg("e", "lisbon again"))
        assert [m["id"] for m in await session.get_history()][-2:] == ["d", "e"]
        facts = actor_facts(storage)
        assert (facts.name, facts.messages, facts.compactions, facts.compacted_through) == ("actor", 5, 1, "b")
        assert storage.scalar("PRAGMA integrity_check") == "ok"
    finally:
        storage.close()


async def test_a_v8_file_with_empty_tables_loses_them_and_each_first_write_makes_its_own(tmp_path, test_data):
    con = apsw.Connection(str(copy(tmp_path, test_data, "v8_actor.sqlite3")))  # as versions 1-5 left them
    made_by_ladder = schema_of(con, LAZY)
    con.close()
    storage = SqlStorage.open(copy(tmp_path, test_data, "v8_empty.sqlite3"))
    try:
        assert storage.user_version == 9
        assert present(storage) == set()
        assert storage.scalar("SELECT value FROM assistant_config WHERE key = 'actor_name'") == "empty"
        session = Session.create(storage)
        assert await session.get_history() == [] and await session.get_compactions() == []
        assert read_block(storage, "memory") is None
        assert present(storage) == set()  # read: nothing made
        await session.append_message(msg("a", "first flight"))
        assert present(storage) == {"assistant_messages"}
        await session.add_compaction("summary", "a", "a")
        assert present(storage) == {"assistant_messages", "assistant_compactions"}
        write_block(storage, "memory", "notes")
        assert present(storage) == set(LAZY)
        assert schema_of(storage, LAZY) == made_by_ladder  # the same text: the same tables, keys and indexes
        assert [m["id"] for m in await session.search("flight")] == ["a"]
        assert read_block(storage, "memory") == "notes"
    finally:
        storage.close()


async def test_every_read_of_a_new_file_answers_empty_and_makes_nothing(storage):
    version = storage.connection.data_version()
    session = Session.create(storage)
    store = MessageStore(storage)
    assert await session.get_history() == [] and await session.get_compactions() == []
    assert await session.get_message("x") is None and await session.get_latest_leaf() is None
    assert await session.get_path_length() == 0 and await session.get_branches("x") == []
    assert await session.search("flight") == [] and await session.estimate_tokens() == 0
    assert (store.count(), store.exists("x"), store.place("x"), store.path_json("x")) == (0, False, None, ("[]", 0))
    assert (list(store.path_chunks("x")), store.window("x", 100, 1), store.token_places(["x"])) == ([], ([], False), {})
    assert (store.path_tokens("x"), store.latest_path_tokens(), store.children("x")) == (None, None, [])
    assert store.update("x", "user", "{}", "") is False and store.delete(["x"]) == []
    store.clear()
    assert read_block(storage, "memory") is None and delete_blocks(storage, ["memory"]) == 0
    assert list(export_records(storage)) == [] and not holds_session_data(storage)
    facts = actor_facts(storage)
    assert (facts.messages, facts.compactions, facts.compacted_through, facts.first_message_ms) == (0, 0, None, None)
    assert last_write_ms(storage) is None
    assert (embeddings.has_messages(storage, ""), embeddings.pending_count(storage, ""),
            embeddings.pending_batch(storage, "", 10), embeddings.mark_missing(storage, "", "m")) == (False, 0, [], 0)
    assert EmbeddingMessageStore(storage).delete(["x"]) == [] and embeddings.hit_rows(storage, "", [1]) == {}
    manager = SessionManager.create(storage)
    assert await manager.list() == [] and await manager.search("flight") == []
    assert present(storage) == set()
    assert storage.connection.data_version() == version  # nothing was written


async def test_a_rolled_back_first_write_takes_its_table_with_it(storage):
    session = Session.create(storage)
    for write in (lambda: session.append_message(msg("a", "gone")),
                  lambda: session.add_compaction("s", "a", "a")):
        with pytest.raises(ZeroDivisionError):
            with storage.transaction():
                await write()
                1 / 0
    with pytest.raises(ZeroDivisionError), storage.transaction():
        write_block(storage, "memory", "gone")
        1 / 0
    assert present(storage) == set()
    assert await session.get_history() == [] and await session.get_compactions() == []
    assert read_block(storage, "memory") is None


async def test_a_session_without_compactions_reads_its_overlays_and_branches_without_the_table(storage):
    session = Session.create(storage)
    await session.append_message(msg("a", "one"))
    await session.append_message(msg("b", "two"), "compaction_unknown")  # no such compaction: the latest leaf
    store = MessageStore(storage)
    [(inserted, parent)] = store.append_chain(
        [session.prepared_rows([msg("c", "three")])[0]], "compaction_unknown")
    assert (inserted, parent) == (True, "b")
    assert [m["id"] for m in await session.get_history()] == ["a", "b", "c"]
    assert store.path_tokens("c").hidden == () and store.latest_path_tokens().hidden == ()
    assert "assistant_compactions" not in present(storage)
    store.clear()
    assert await session.get_history() == [] and "assistant_compactions" not in present(storage)


async def test_an_archive_of_a_file_only_read_imports_into_a_new_file_that_stays_without_tables(tmp_path):
    source = SqlStorage.open(tmp_path / "source.sqlite3")
    try:
        lines = export_lines(source, "s")
    finally:
        source.close()
    target = SqlStorage.open(tmp_path / "target.sqlite3")
    try:
        assert import_records(target, Session.create(target), parse_archive(lines)) == 0
        assert present(target) == set()
    finally:
        target.close()


def test_a_capture_makes_the_three_tables_and_a_restore_rebuilds_their_rows_on_a_template_without_them(tmp_path):
    source = SqlStorage.open(tmp_path / "source.sqlite3")
    try:
        assert present(source) == set()
        capture = ChangeCapture(source)  # makes every table of ON_FIRST_USE before it attaches
        assert present(source) == set(LAZY)
        store = MessageStore(source)
        store.append("a", "user", '{"id":"a","role":"user","parts":[]}', "flight")
        store.add_compaction("c1", "summary", "a", "a")
        write_block(source, "memory", "notes")
        changeset = capture.cut()
        capture.detach()
    finally:
        source.close()
    target = tmp_path / "restored.sqlite3"
    restore_file(target, template=tmp_path / "template.sqlite3", image=None, tail=[changeset],
                 marker=Marker("c", 1, True))
    with SqlStorage.open(target) as restored:
        store = MessageStore(restored)
        assert store.get("a") == '{"id":"a","role":"user","parts":[]}'
        assert [(c.id, c.to_message_id) for c in store.compactions()] == [("c1", "a")]
        assert read_block(restored, "memory") == "notes"
        assert table_exists(restored.connection, "assistant_fts")


async def test_a_new_session_activated_once_leaves_at_most_16_kib(tmp_path):
    async with open_host(tmp_path / "data") as host:
        ns = host.bind("sessions", SessionAgent)
        stub = ns.get_by_name("read-only")
        assert await stub.get_history() == []
        await host.hibernate(ns, stub.id)
        path = Path(host.path_for(stub.id))
        size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
        assert size <= 16 * 1024, size  # issue 28's goal: sqlite_schema, the host's generation, the actor's name
    problem, facts = examine(path)
    assert problem is None and (facts.name, facts.messages) == ("read-only", 0)
