"""The host catalog (_catalog.sqlite3): rows per actor, generation only rising, quarantine, rescans."""

from storage.catalog import CATALOG_FILE, HostCatalog
from storage.integrity import ActorFacts


def facts(generation=1, messages=5, name="chat", first=1_000, last=2_000):
    return ActorFacts(name=name, generation=generation, messages=messages, compactions=1, compacted_through="m3",
                      first_message_ms=first, last_message_ms=last)


def test_record_and_read_back(tmp_path):
    catalog = HostCatalog.open(tmp_path)
    try:
        catalog.record("sessions", "ab" * 32, facts(), written_ms=5_000)
        entry = catalog.get("sessions", "ab" * 32)
        assert (entry.name, entry.generation, entry.messages, entry.compactions, entry.compacted_through) == \
            ("chat", 1, 5, 1, "m3")
        assert (entry.created_ms, entry.updated_ms, entry.state, entry.quarantined) == (1_000, 5_000, "ok", False)
        assert catalog.get("sessions", "cd" * 32) is None
    finally:
        catalog.close()
    assert (tmp_path / CATALOG_FILE).exists()


def test_the_generation_never_goes_down_and_created_stays(tmp_path):
    catalog = HostCatalog.open(tmp_path)
    catalog.record("s", "a" * 64, facts(generation=4, first=1_000), written_ms=5_000)
    catalog.record("s", "a" * 64, facts(generation=2, messages=9, name=None, first=3_000), written_ms=6_000)
    entry = catalog.get("s", "a" * 64)
    assert (entry.generation, entry.messages, entry.name, entry.created_ms, entry.updated_ms) == \
        (4, 9, "chat", 1_000, 6_000)
    catalog.close()


def test_a_rescan_without_writes_keeps_the_last_message_time(tmp_path):
    catalog = HostCatalog.open(tmp_path)
    catalog.record("s", "a" * 64, facts(first=1_000, last=2_000), written_ms=9_000, wrote=False)
    assert catalog.get("s", "a" * 64).updated_ms == 2_000
    catalog.close()


def test_quarantine_sticks_until_forgotten(tmp_path):
    catalog = HostCatalog.open(tmp_path)
    catalog.record("s", "a" * 64, facts())
    catalog.quarantine("s", "a" * 64, name=None, problem="the file is empty (0 bytes)", moved_to="_quarantine/s/x")
    catalog.record("s", "a" * 64, facts(generation=9))  # a quarantined row is not overwritten
    entry = catalog.get("s", "a" * 64)
    assert (entry.state, entry.problem, entry.quarantined_to, entry.name, entry.generation) == \
        ("quarantined", "the file is empty (0 bytes)", "_quarantine/s/x", "chat", 1)
    assert catalog.forget("s", "a" * 64) and not catalog.forget("s", "a" * 64)
    assert catalog.get("s", "a" * 64) is None
    catalog.close()


def test_entries_list_a_namespace_newest_first(tmp_path):
    catalog = HostCatalog.open(tmp_path)
    for i, hex_id in enumerate(("a" * 64, "b" * 64, "c" * 64)):
        catalog.record("s", hex_id, facts(name=f"n{i}"), written_ms=10_000 + i)
    catalog.record("t", "d" * 64, facts())
    assert [e.name for e in catalog.entries("s")] == ["n2", "n1", "n0"]
    assert [(e.namespace, e.actor_id[0]) for e in catalog.entries()] == [("s", "a"), ("s", "b"), ("s", "c"),
                                                                          ("t", "d")]
    catalog.close()


def test_unlisted_finds_files_without_a_row(tmp_path):
    for hex_id in ("a" * 64, "b" * 64):
        folder = tmp_path / "s" / hex_id[:2]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{hex_id}.sqlite3").write_bytes(b"")
        (folder / f"{hex_id}.sqlite3-wal").write_bytes(b"")
    catalog = HostCatalog.open(tmp_path)
    catalog.record("s", "a" * 64, facts())
    assert list(catalog.unlisted("s")) == ["b" * 64]
    assert list(catalog.unlisted("nothing")) == []
    catalog.close()


def test_a_write_records_its_commit_times_not_the_time_of_recording(tmp_path):
    catalog = HostCatalog.open(tmp_path)
    catalog.record("s", "a" * 64, facts(first=None, last=None), written_ms=9_000, first_written_ms=4_000)
    catalog.record("s", "b" * 64, facts(first=1_000, last=2_000), written_ms=9_000, first_written_ms=4_000)
    catalog.record("s", "a" * 64, facts(first=None, last=None), written_ms=7_000)  # an older time: kept
    a, b = catalog.get("s", "a" * 64), catalog.get("s", "b" * 64)
    assert (a.created_ms, a.updated_ms) == (4_000, 9_000)  # no messages: the first commit is the creation
    assert (b.created_ms, b.updated_ms) == (1_000, 9_000)  # an older message wins
    catalog.close()


def test_a_catalog_of_the_previous_release_gains_the_namespace_classes_and_keeps_its_rows(tmp_path):
    import apsw

    # What release 2 wrote: the actors table alone, user_version 1. Never edit: it stands for files on disk.
    con = apsw.Connection(str(tmp_path / CATALOG_FILE))
    con.execute(
        "CREATE TABLE actors (namespace TEXT NOT NULL, actor_id TEXT NOT NULL, name TEXT, generation INTEGER NOT "
        "NULL DEFAULT 0, messages INTEGER NOT NULL DEFAULT 0, compactions INTEGER NOT NULL DEFAULT 0, "
        "compacted_through TEXT, created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL, state TEXT NOT NULL "
        "DEFAULT 'ok' CHECK (state IN ('ok', 'quarantined')), problem TEXT, quarantined_to TEXT, "
        "PRIMARY KEY (namespace, actor_id)) WITHOUT ROWID;"
        "CREATE INDEX actors_by_update ON actors (namespace, updated_ms);"
        "INSERT INTO actors (namespace, actor_id, name, created_ms, updated_ms) VALUES ('s', 'aa', 'chat', 1, 2);"
        "PRAGMA user_version = 1;")
    con.close()
    catalog = HostCatalog.open(tmp_path)
    try:
        assert catalog.get("s", "aa").name == "chat"
        assert catalog.bound_class("s") is None
        catalog.record_class("s", "app.Agent")
        catalog.record_class("s", "app.Other")
        assert catalog.bound_class("s") == "app.Other"
    finally:
        catalog.close()
