"""Exclusive locking: one connection owns a file, its WAL index lives in heap memory (no ``-shm``)."""

import os
import signal

import apsw
import pytest

from storage import SqlStorage
from storage.kv import ActorStorage


def open_files_in(folder):
    """Paths under ``folder`` this process holds open."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder)):
            found.append(os.path.basename(target))
    return sorted(found)


def test_an_open_file_has_no_shm_file_and_holds_two_descriptors(tmp_path):
    folder = tmp_path / "actors"
    with ActorStorage.open(folder / "a.sqlite3") as storage:
        storage.put("k", 1)
        assert storage.scalar("PRAGMA locking_mode") == "exclusive"
        assert sorted(p.name for p in folder.iterdir()) == ["a.sqlite3", "a.sqlite3-wal"]
        assert open_files_in(folder) == ["a.sqlite3", "a.sqlite3-wal"]


def test_a_second_connection_is_refused_while_the_file_is_open(tmp_path):
    path = tmp_path / "a.sqlite3"
    with SqlStorage.open(path) as storage:
        storage.sql("INSERT INTO assistant_config VALUES ('s', 'k', 'v')")
        other = apsw.Connection(str(path))
        try:
            with pytest.raises(apsw.BusyError):
                other.execute("SELECT count(*) FROM assistant_config").fetchall()
        finally:
            other.close()
    with SqlStorage.open(path) as storage:  # closed: the next owner opens it and sees the write
        assert storage.scalar("SELECT value FROM assistant_config") == "v"


def test_normal_locking_keeps_the_shared_index_file(tmp_path):
    path = tmp_path / "a.sqlite3"
    with SqlStorage.open(path, locking="normal") as storage:
        storage.sql("INSERT INTO assistant_config VALUES ('s', 'k', 'v')")
        assert storage.scalar("PRAGMA locking_mode") == "normal"
        assert (tmp_path / "a.sqlite3-shm").exists()
        with SqlStorage.open(path, locking="normal") as reader:
            assert reader.scalar("SELECT value FROM assistant_config") == "v"


def test_bad_locking_is_refused(tmp_path):
    with pytest.raises(ValueError, match="locking must be 'exclusive' or 'normal'"):
        SqlStorage.open(tmp_path / "x.sqlite3", locking="shared")
    assert not (tmp_path / "x.sqlite3").exists()


def test_a_wal_left_by_a_killed_process_is_recovered_without_a_shm_file(tmp_path):
    path = tmp_path / "a.sqlite3"
    pid = os.fork()
    if pid == 0:  # the child writes, then dies without closing anything
        try:
            storage = ActorStorage.open(path)
            for i in range(200):
                storage.put(f"k{i}", i)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    assert not (tmp_path / "a.sqlite3-shm").exists()
    with ActorStorage.open(path) as storage:
        assert storage.get("k199") == 199 and len(storage.list()) == 200
