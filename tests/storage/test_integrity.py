"""File checks of storage.integrity on real SQLite files damaged on purpose."""

import os
import random
import re

import pytest

from storage.integrity import (
    actor_facts,
    bump_generation,
    check_files,
    examine,
    quick_check,
    read_generation,
    wal_checksum_problem,
)
from storage.kv import ActorStorage
from storage.schema import create_on_first_use

PAGE = 4096
FRAME = PAGE + 24


@pytest.fixture
def written(tmp_path):
    """An actor file whose last 250 commits sit in its WAL (closed without a checkpoint, below its 1,000 pages)."""
    path = tmp_path / "a.sqlite3"
    storage = ActorStorage.open(path)
    storage.skip_checkpoint_on_close()
    for i in range(250):
        storage.put(f"k{i}", "value " * 100)
    storage.close()
    return path


def wal(path):
    return path.with_name(path.name + "-wal")


def test_a_sound_file_has_no_problem(written):
    assert check_files(written) is None
    assert wal_checksum_problem(written) is None
    problem, facts = examine(written)
    assert problem is None and facts.generation == 0 and facts.messages == 0


def test_a_missing_file_is_not_a_header_problem(tmp_path):
    assert check_files(tmp_path / "nope.sqlite3") is None


@pytest.mark.parametrize(("damage", "problem"), [
    (lambda p: p.write_bytes(b""), "the file is empty (0 bytes)"),
    (lambda p: p.write_bytes(p.read_bytes()[:60]), "the file is 60 bytes, shorter than a database header"),
    (lambda p: p.write_bytes(b"x" * 16 + p.read_bytes()[16:]), "does not start with a SQLite header"),
    (lambda p: p.write_bytes(p.read_bytes()[:-100]), "not a whole number of 4096-byte pages"),
])
def test_a_damaged_database_header_is_named(written, damage, problem):
    damage(written)
    assert problem in check_files(written)


def test_a_database_cut_short_is_found_when_no_wal_is_pending(tmp_path):
    path = tmp_path / "a.sqlite3"
    with ActorStorage.open(path) as storage:
        for i in range(100):
            storage.put(f"k{i}", "v" * 1000)
    assert not wal(path).exists()  # checkpointed on close
    size = path.stat().st_size
    with path.open("r+b") as file:
        file.truncate(size - 4 * PAGE)
    assert check_files(path) == f"the file holds {size // PAGE - 4} pages but its header says {size // PAGE} (cut short)"


def test_a_damaged_wal_header_would_make_sqlite_ignore_the_log(written):
    with wal(written).open("r+b") as file:
        file.seek(16)
        file.write(b"\x01\x02\x03\x04")  # a salt: the header checksum no longer matches
    frames = (wal(written).stat().st_size - 32) // FRAME
    assert check_files(written) == f"the WAL header is damaged (checksum); SQLite would ignore its {frames} frames"


def test_a_damaged_frame_header_is_found_from_the_headers_alone(written):
    with wal(written).open("r+b") as file:
        file.seek(32 + 10 * FRAME + 8)
        file.write(os.urandom(8))  # its salts
    frames = (wal(written).stat().st_size - 32) // FRAME
    assert check_files(written) == (f"WAL frame 11 of {frames} is damaged (its header); SQLite would drop every "
                                    "commit from there on")


def test_damage_inside_a_frame_fails_its_checksum(written):
    with wal(written).open("r+b") as file:
        file.seek(32 + 20 * FRAME + 24 + 500)
        file.write(random.Random(1).randbytes(100))
    assert check_files(written) is None  # the headers are intact
    assert wal_checksum_problem(written) == "WAL frame 21 fails its checksum; SQLite drops the commits after it"
    assert examine(written)[0] == wal_checksum_problem(written)


def test_the_generation_starts_at_zero_and_only_rises(tmp_path):
    with ActorStorage.open(tmp_path / "a.sqlite3") as storage:
        assert read_generation(storage) == 0
        assert [bump_generation(storage) for _ in range(3)] == [1, 2, 3]
        assert read_generation(storage) == 3
    problem, facts = examine(tmp_path / "a.sqlite3", known_generation=4)
    assert problem == "its file went back in time (generation 3, the catalog saw 4)" and facts is None
    assert examine(tmp_path / "a.sqlite3", known_generation=3)[0] is None


def test_facts_count_messages_and_compactions_and_read_the_name(tmp_path):
    with ActorStorage.open(tmp_path / "a.sqlite3") as storage:
        storage.sql("INSERT INTO assistant_config VALUES ('', 'actor_name', 'chat-42')")
        assert actor_facts(storage).messages == 0  # no message table yet (made by the first message)
        create_on_first_use(storage.connection, "assistant_messages")
        create_on_first_use(storage.connection, "assistant_compactions")
        for i in range(3):
            storage.sql("INSERT INTO assistant_messages (id, role, content, created_at) VALUES (?, 'user', '{}', ?)",
                        f"m{i}", f"2026-01-0{i + 1} 00:00:00.000")
        storage.sql("INSERT INTO assistant_compactions (id, summary, from_message_id, to_message_id) "
                    "VALUES ('c1', 's', 'm0', 'm1')")
        facts = actor_facts(storage)
    assert (facts.name, facts.messages, facts.compactions, facts.compacted_through) == ("chat-42", 3, 1, "m1")
    assert (facts.first_message_ms, facts.last_message_ms) == (1767225600000, 1767398400000)


def test_quick_check_names_a_damaged_page(tmp_path):
    path = tmp_path / "a.sqlite3"
    with ActorStorage.open(path) as storage:
        for i in range(50):
            storage.put(f"k{i}", "v" * 1000)
        assert quick_check(storage) is None
        page = storage.scalar("SELECT pageno FROM dbstat WHERE name = '_cf_KV' AND pagetype = 'leaf' LIMIT 1")
    with path.open("r+b") as file:  # a leaf page of _cf_KV given a page type that does not exist
        file.seek((page - 1) * PAGE)
        file.write(b"\x00")
    with ActorStorage.open(path) as storage:
        assert re.fullmatch(rf"Tree \d+ page {page}: btreeInitPage\(\) returns error code 11", quick_check(storage))
