"""CatalogTracker: the catalog row of one actor kept exact per cut (storage/cluster/catalog.py)."""

from __future__ import annotations

import json

import pytest

from storage.cluster.capture import ChangeCapture
from storage.cluster.catalog import CatalogTracker
from storage.context import write_config
from storage.kv import ActorStorage
from storage.schema import create_every_table

INSERT_MESSAGE = "INSERT INTO assistant_messages (id, role, content, created_at) VALUES (?, 'user', '[]', ?)"
INSERT_COMPACTION = ("INSERT INTO assistant_compactions (id, summary, from_message_id, to_message_id) "
                     "VALUES (?, 's', 'm0', ?)")


@pytest.fixture
def storage(tmp_path):
    s = ActorStorage.open(tmp_path / "actor.sqlite3")
    create_every_table(s.connection)  # as cluster mode, whose files the tracker follows, makes them
    yield s
    s.close()


def test_counts_follow_inserts_deletes_and_rollbacks_without_reading_the_history(storage):
    storage.exec(INSERT_MESSAGE, "m0", "2026-01-01 00:00:00.250")
    tracker = CatalogTracker(storage, "sessions", clock_ms=lambda: 5_000)
    assert (tracker.messages, tracker.created_ms, tracker.take()) == (1, 1_767_225_600_250, None)
    capture = ChangeCapture(storage)
    write_config(storage, "", "actor_name", "trip")
    for i in (1, 2, 3):
        storage.exec(INSERT_MESSAGE, f"m{i}", "2026-01-01 00:00:01")
    storage.exec("DELETE FROM assistant_messages WHERE id = 'm2'")
    with pytest.raises(RuntimeError), storage.transaction():  # rolled back: counts nothing
        storage.exec(INSERT_MESSAGE, "m9", "2026-01-01 00:00:02")
        raise RuntimeError
    storage.exec(INSERT_COMPACTION, "c1", "m1")
    storage.exec(INSERT_COMPACTION, "c2", "m3")
    tracker.cut(capture.cut())
    row = json.loads(tracker.take())
    assert row == {"namespace": "sessions", "kind": "session", "name": "trip", "messages": 3, "compactions": 2,
                   "compacted_through": "m3", "created_ms": 1_767_225_600_250, "updated_ms": 5_000}
    storage.exec("DELETE FROM assistant_compactions WHERE id = 'c2'")
    tracker.cut(capture.cut())
    assert (tracker.compactions, tracker.compacted_through) == (1, "m1")
    tracker.cut(b"")  # nothing changed: nothing to write
    assert tracker.take() is not None and tracker.take() is None


def test_a_transcript_row_is_published_and_forgotten(storage):
    tracker = CatalogTracker(storage, "transcripts", clock_ms=lambda: 7_000)
    tracker.publish("proj", "s1", 7_001, {"first_prompt": "héllo"})
    assert tracker.uncut
    tracker.cut(b"")
    assert not tracker.uncut
    row = json.loads(tracker.take())
    assert (row["kind"], row["project_key"], row["session_id"], row["mtime_ms"]) == ("transcript", "proj", "s1", 7_001)
    assert json.loads(row["summary"]) == {"first_prompt": "héllo"}
    tracker.forget()
    assert json.loads(tracker.take()) == {"delete": True} and tracker.transcript is None
