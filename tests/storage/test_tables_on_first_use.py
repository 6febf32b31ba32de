"""Tables most actors never use are made by their first write (schema version 6, storage.schema.ON_FIRST_USE).

A new file holds none of them; every read of one that does not exist finds
nothing (and makes nothing); the first write makes it exactly as the ladder
did, inside its own transaction (a rollback takes the table away too); a
file written by an older release keeps the ones that hold rows; and a
cluster changeset carrying rows of such tables (cluster mode makes them all
before its capture attaches) applies to the template, which lacks them.
"""

import apsw
import pytest

from storage import SqlStorage
from storage.archive_rows import export_records, holds_session_data
from storage.cluster.capture import Marker
from storage.cluster.restore import restore_file
from storage.context import count_search_entries, search_entries, upsert_search_entry
from storage.embeddings import pending_count, stored_dimensions, vectors
from storage.kv import ActorStorage
from storage.schema import MIGRATIONS, ON_FIRST_USE, create_every_table, table_exists
from storage.transcripts import TranscriptFile

OPTIONAL = ("_cf_KV", "_cf_alarm", "transcript_entries", "cf_agents_search_entries", "cf_agents_search_fts",
            "cf_agents_search_fts_cjk", "cf_agents_search_embeddings", "assistant_embeddings",
            "assistant_embeddings_pending")


def tables(storage):
    return {name for (name,) in storage.exec("SELECT name FROM sqlite_schema WHERE type = 'table'")}


@pytest.fixture
def storage(tmp_path):
    opened = ActorStorage.open(tmp_path / "actor.sqlite3")
    yield opened
    opened.close()


def test_a_new_file_holds_none_of_them_and_reads_find_nothing(storage):
    assert not tables(storage) & set(OPTIONAL)
    version = storage.connection.data_version()
    assert storage.get("k") is None and storage.list() == {} and storage.delete("k") is False
    assert storage.get_alarm() is None
    storage.delete_alarm()
    transcripts = TranscriptFile(storage)
    assert transcripts.load("") is None and transcripts.load_json("") is None
    assert transcripts.list_subkeys() == [] and transcripts.count() == 0 and transcripts.delete() == 0
    assert count_search_entries(storage, "kb") == 0 and search_entries(storage, "kb", "flight") == []
    assert pending_count(storage, "") == 0 and vectors(storage, "", "m") == [] and stored_dimensions(storage, "") == []
    assert list(export_records(storage)) == [] and not holds_session_data(storage)
    assert not tables(storage) & set(OPTIONAL)
    assert storage.connection.data_version() == version  # nothing was written


def test_the_first_write_makes_the_table_as_the_ladder_did(storage, tmp_path):
    storage.put("k", {"a": 1})
    storage.set_alarm(2_000_000_000_000)
    TranscriptFile(storage).append("", [{"type": "user", "uuid": "u1"}])
    upsert_search_entry(storage, "kb", "flight", "Flight to Paris")
    assert storage.get("k") == {"a": 1} and storage.get_alarm() == 2_000_000_000_000
    assert search_entries(storage, "kb", "paris") == [{"key": "flight", "content": "Flight to Paris"}]
    assert holds_session_data(storage)
    with SqlStorage.open(tmp_path / "ladder.sqlite3", migrations=MIGRATIONS[:5]) as ladder:
        expected = dict(ladder.exec("SELECT name, sql FROM sqlite_schema WHERE tbl_name IN "
                                    "('_cf_KV', '_cf_alarm', 'transcript_entries', 'cf_agents_search_entries', "
                                    "'cf_agents_search_fts', 'cf_agents_search_fts_cjk')"))
    made = dict(storage.exec("SELECT name, sql FROM sqlite_schema WHERE tbl_name IN "
                             "('_cf_KV', '_cf_alarm', 'transcript_entries', 'cf_agents_search_entries', "
                             "'cf_agents_search_fts', 'cf_agents_search_fts_cjk')"))
    normal = {name: "".join(sql.replace("IF NOT EXISTS ", "").split()) for name, sql in made.items() if sql}
    assert normal == {name: "".join(sql.split()) for name, sql in expected.items() if sql}
    assert len(normal) == 8  # 4 tables, 2 indexes, 2 full-text tables


def test_a_write_rolled_back_takes_the_table_it_made_with_it(storage):
    with pytest.raises(KeyError), storage.transaction():
        storage.put("k", 1)
        assert table_exists(storage.connection, "_cf_KV")
        raise KeyError
    assert "_cf_KV" not in tables(storage)
    assert storage.get("k") is None
    storage.put("k", 2)
    assert storage.get("k") == 2


def test_an_older_file_keeps_the_tables_holding_rows_and_drops_the_empty_ones(tmp_path):
    path = tmp_path / "v5.sqlite3"
    with ActorStorage.open(path, migrations=MIGRATIONS[:5]) as old:
        old.put("kept", "value")
        assert set(OPTIONAL) <= tables(old)
    with ActorStorage.open(path) as new:
        assert new.get("kept") == "value"
        assert tables(new) & set(OPTIONAL) == {"_cf_KV"}
        assert new.scalar("PRAGMA integrity_check") == "ok"


def test_a_changeset_filling_tables_made_on_first_use_applies_to_a_template_without_them(tmp_path):
    template = tmp_path / "template.sqlite3"
    source = ActorStorage.open(tmp_path / "source.sqlite3")
    try:
        create_every_table(source.connection)  # as the cluster's capture does before it attaches
        session = apsw.Session(source.connection, "main")
        session.attach()
        source.put("k", "v")
        upsert_search_entry(source, "kb", "flight", "Flight to Paris 東京行き")
        changeset = session.changeset()
        session.close()
    finally:
        source.close()
    target = tmp_path / "restored.sqlite3"
    restore_file(target, template=template, image=None, tail=[changeset], marker=Marker("c", 1, True))
    with ActorStorage.open(target) as restored:
        assert set(OPTIONAL) <= tables(restored)  # every one, as the capture that recorded the changeset had
        assert restored.get("k") == "v"
        assert search_entries(restored, "kb", "paris") == [{"key": "flight", "content": "Flight to Paris 東京行き"}]
        assert search_entries(restored, "kb", "東京行") == [{"key": "flight", "content": "Flight to Paris 東京行き"}]


def test_every_table_made_on_first_use_is_dropped_by_version_6_when_empty(tmp_path):
    with SqlStorage.open(tmp_path / "v6.sqlite3") as new:
        assert not tables(new) & set(ON_FIRST_USE)
