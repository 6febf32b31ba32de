"""ActorStorage.on_checkpoint: SQLite's automatic checkpoint, run from the WAL hook with a callback."""

from storage.kv import ActorStorage


def test_the_callback_follows_each_automatic_checkpoint_and_none_restores_sqlites_own(tmp_path):
    s = ActorStorage.open(tmp_path / "a.sqlite3")
    s.exec("PRAGMA wal_autocheckpoint = 10")
    seen = []
    s.on_checkpoint(lambda: seen.append(s.wal_file_bytes))
    s.exec("CREATE TABLE t (x)")
    for _ in range(30):
        s.exec("INSERT INTO t VALUES (randomblob(3000))")
    assert len(seen) >= 2  # about 25 pages written past a line of 10
    assert all(size > 0 for size in seen)  # a passive checkpoint keeps the WAL file; the next write restarts it
    s.on_checkpoint(None)
    assert s.scalar("PRAGMA wal_autocheckpoint") == 10
    s.close()
