"""The host's alarm index file: rows, ordering, sync from an actor file, files of earlier releases."""

import apsw
import pytest

from storage import SchemaTooNewError
from storage.alarm_index import INDEX_FILE, INDEX_MIGRATIONS, AlarmIndex
from storage.kv import ActorStorage

# The index file exactly as the first release wrote it (runtime/host/alarms.py before the
# index moved to storage): this DDL, user_version 1, WAL. Never edit: it stands for files on disk.
RELEASE_1_DDL = """
CREATE TABLE alarms (
    namespace    TEXT NOT NULL,
    actor_id     TEXT NOT NULL,
    scheduled_ms INTEGER NOT NULL,
    PRIMARY KEY (namespace, actor_id)
) WITHOUT ROWID;
CREATE INDEX alarms_by_time ON alarms (scheduled_ms);
"""


def write_release_1_index(data_dir, rows, *, user_version=1):
    con = apsw.Connection(str(data_dir / INDEX_FILE))
    con.pragma("journal_mode", "wal")
    with con:
        con.execute(RELEASE_1_DDL)
        con.executemany("INSERT INTO alarms VALUES (?, ?, ?)", rows)
        con.pragma("user_version", user_version)
    con.close()


def schema(path):
    con = apsw.Connection(str(path))
    try:
        return sorted(con.execute("SELECT type, name, sql FROM sqlite_master"))
    finally:
        con.close()


@pytest.fixture
def index(tmp_path):
    index = AlarmIndex.open(tmp_path)
    yield index
    index.close()


def test_a_new_index_has_the_schema_of_the_first_release(tmp_path):
    AlarmIndex.open(tmp_path / "new").close()
    (tmp_path / "old").mkdir()
    write_release_1_index(tmp_path / "old", [])
    assert schema(tmp_path / "new" / INDEX_FILE) == schema(tmp_path / "old" / INDEX_FILE)
    assert len(INDEX_MIGRATIONS) == 1


def test_an_index_written_by_the_first_release_opens_and_keeps_its_rows(tmp_path):
    write_release_1_index(tmp_path, [("r", "b" * 64, 2_000), ("r", "a" * 64, 3_000), ("s", "c" * 64, 1_000)])
    index = AlarmIndex.open(tmp_path)
    try:
        assert index.entries() == [("r", "a" * 64, 3_000), ("r", "b" * 64, 2_000), ("s", "c" * 64, 1_000)]
        assert index.earliest({"r"}) == ("r", "b" * 64, 2_000)
        index.upsert("r", "b" * 64, 5_000)
        assert index.earliest({"r"}) == ("r", "a" * 64, 3_000)
    finally:
        index.close()


def test_an_index_from_a_newer_release_is_refused_untouched(tmp_path):
    write_release_1_index(tmp_path, [("r", "a" * 64, 1)], user_version=2)
    before = (tmp_path / INDEX_FILE).read_bytes()
    with pytest.raises(SchemaTooNewError):
        AlarmIndex.open(tmp_path)
    assert (tmp_path / INDEX_FILE).read_bytes() == before


def test_upsert_get_remove(index):
    assert index.get("r", "a") is None
    index.upsert("r", "a", 10)
    index.upsert("r", "a", 20)  # moves, never duplicates
    assert index.get("r", "a") == 20 and index.entries() == [("r", "a", 20)]
    index.remove("r", "a")
    index.remove("r", "a")  # absent: no error
    assert index.get("r", "a") is None and index.entries() == []


def test_earliest_among_the_named_namespaces(index):
    index.upsert("r", "a", 30)
    index.upsert("r", "b", 20)
    index.upsert("s", "c", 10)
    assert index.earliest(set()) is None
    assert index.earliest({"r"}) == ("r", "b", 20)
    assert index.earliest(["r", "s"]) == ("s", "c", 10)
    assert index.earliest({"t"}) is None


def test_sync_copies_the_actors_row_and_keeps_a_delivery_lease(index, tmp_path):
    actor = ActorStorage.open(tmp_path / "actor.sqlite3")
    try:
        actor.set_alarm(5_000)
        index.sync("r", "a", actor)
        assert index.get("r", "a") == 5_000
        index.upsert("r", "a", 65_000)  # the scheduler's lease while delivering
        actor.delivering_alarm = actor.alarm_generation
        index.sync("r", "a", actor)
        assert index.get("r", "a") == 65_000
        actor.delivering_alarm = None
        actor.delete_alarm()
        index.sync("r", "a", actor)
        assert index.get("r", "a") is None
    finally:
        actor.close()
