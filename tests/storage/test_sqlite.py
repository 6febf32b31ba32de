"""SqlStorage: settings, queries, transactions, the migration ladder."""

import apsw
import pytest

from storage import SchemaTooNewError, SqlStorage, StorageClosedError
from storage.schema import SCHEMA_VERSION, create_on_first_use


def test_open_applies_settings_and_schema(storage):
    assert storage.sql("PRAGMA journal_mode") == [{"journal_mode": "wal"}]
    assert storage.scalar("PRAGMA synchronous") == 1  # NORMAL
    assert storage.scalar("PRAGMA foreign_keys") == 1
    assert storage.user_version == SCHEMA_VERSION
    tables = {r["name"] for r in storage.sql("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "assistant_config" in tables
    for name in ("assistant_messages", "assistant_compactions", "cf_agents_context_blocks",
                 "cf_agents_search_entries", "cf_agents_search_fts", "_cf_KV", "_cf_alarm", "transcript_entries",
                 "assistant_embeddings", "assistant_embeddings_pending", "cf_agents_search_embeddings",
                 "assistant_fts", "assistant_fts_tools", "assistant_fts_cjk", "assistant_sessions"):
        assert name not in tables  # made by their first write (storage.schema.ON_FIRST_USE)


def test_full_durability_sets_synchronous_full(tmp_path):
    with SqlStorage.open(tmp_path / "f.sqlite3", durability="full") as s:
        assert s.scalar("PRAGMA synchronous") == 2


def test_bad_durability_is_refused(tmp_path):
    with pytest.raises(ValueError, match="durability must be 'normal' or 'full'"):
        SqlStorage.open(tmp_path / "x.sqlite3", durability="fast")


def test_double_quoted_strings_are_identifiers_only(storage):
    with pytest.raises(apsw.SQLError, match="no such column"):
        storage.sql('SELECT "not a string"')


def test_sql_returns_dicts_and_binds_params(storage):
    storage.sql("INSERT INTO assistant_config VALUES (?, ?, ?)", "s", "k", "v")
    assert storage.sql("SELECT * FROM assistant_config WHERE key = ?", "k") == [
        {"session_id": "s", "key": "k", "value": "v"}
    ]
    assert storage.sql("SELECT * FROM assistant_config WHERE key = ?", "nope") == []
    assert storage.scalar("SELECT count(*) FROM assistant_config") == 1
    assert list(storage.exec("SELECT key, value FROM assistant_config")) == [("k", "v")]


def test_created_at_has_milliseconds(storage):
    create_on_first_use(storage.connection, "cf_agents_context_blocks")
    storage.sql("INSERT INTO cf_agents_context_blocks (label, content) VALUES ('a', 'b')")
    stamp = storage.scalar("SELECT updated_at FROM cf_agents_context_blocks")
    assert len(stamp) == len("2026-01-01 00:00:00.000") and stamp[19] == "."


def test_transaction_rolls_back_on_error(storage):
    with pytest.raises(RuntimeError):
        with storage.transaction():
            storage.sql("INSERT INTO assistant_config VALUES ('s', 'a', '1')")
            raise RuntimeError("boom")
    assert storage.sql("SELECT * FROM assistant_config") == []


def test_nested_transaction_is_a_savepoint(storage):
    with storage.transaction():
        storage.sql("INSERT INTO assistant_config VALUES ('s', 'outer', '1')")
        with pytest.raises(RuntimeError):
            with storage.transaction():
                storage.sql("INSERT INTO assistant_config VALUES ('s', 'inner', '1')")
                raise RuntimeError("inner fails")
        assert storage.in_transaction
    assert [r["key"] for r in storage.sql("SELECT key FROM assistant_config")] == ["outer"]


def test_database_size_is_page_count_times_page_size(storage):
    pages = storage.scalar("PRAGMA page_count")
    assert storage.database_size == pages * storage.scalar("PRAGMA page_size") > 0


def test_reopen_keeps_data_and_version(tmp_path):
    path = tmp_path / "r.sqlite3"
    with SqlStorage.open(path) as s:
        s.sql("INSERT INTO assistant_config VALUES ('s', 'k', 'v')")
    with SqlStorage.open(path) as s:
        assert s.user_version == SCHEMA_VERSION
        assert s.scalar("SELECT value FROM assistant_config") == "v"


def test_file_newer_than_code_is_refused_untouched(tmp_path):
    path = tmp_path / "new.sqlite3"
    with SqlStorage.open(path) as s:
        s.connection.pragma("user_version", SCHEMA_VERSION + 1)
    with pytest.raises(SchemaTooNewError, match=f"schema version {SCHEMA_VERSION + 1} is newer"):
        SqlStorage.open(path)
    con = apsw.Connection(str(path))
    assert con.pragma("user_version") == SCHEMA_VERSION + 1


def test_ladder_climbs_from_older_version(tmp_path):
    path = tmp_path / "old.sqlite3"
    steps = ("CREATE TABLE t (a)", "ALTER TABLE t ADD COLUMN b")
    with SqlStorage.open(path, migrations=steps[:1]) as s:
        assert s.user_version == 1
    with SqlStorage.open(path, migrations=steps) as s:
        assert s.user_version == 2
        assert [r["name"] for r in s.sql("PRAGMA table_info(t)")] == ["a", "b"]


def test_failed_migration_leaves_file_at_old_version(tmp_path):
    path = tmp_path / "bad.sqlite3"
    with SqlStorage.open(path, migrations=("CREATE TABLE t (a)",)) as s:
        pass
    with pytest.raises(apsw.SQLError):
        SqlStorage.open(path, migrations=("CREATE TABLE t (a)", "CREATE TABLE u (x)", "ALTER TABLE t ADD COLUMN a"))
    with SqlStorage.open(path, migrations=("CREATE TABLE t (a)",)) as s:
        assert s.user_version == 1
        assert s.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'u'") == 0


def test_closed_storage_raises(tmp_path):
    s = SqlStorage.open(tmp_path / "c.sqlite3")
    s.close()
    s.close()
    assert s.closed
    with pytest.raises(StorageClosedError):
        s.sql("SELECT 1")
