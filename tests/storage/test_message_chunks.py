"""MessageStore.path_chunks: a path read leaf first in chunks bounded by rows and bytes."""

import json

import pytest

from common.errors import InvalidInputError
from storage import SqlStorage
from storage.messages import LATEST_LEAF, MessageStore


def content(mid, text="x"):
    return json.dumps({"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}, separators=(",", ":"))


@pytest.fixture
def store(tmp_path):
    storage = SqlStorage.open(tmp_path / "actor.sqlite3")
    yield MessageStore(storage, "s1")
    storage.close()


def append(store, mid, parent=LATEST_LEAF, text="x"):
    store.append(mid, "user", content(mid, text), "", parent)


def ids(chunks):
    return [[json.loads(c)["id"] for c in chunk] for chunk in chunks]


def test_chunks_walk_the_path_leaf_first_by_rows(store):
    for i in range(1, 11):
        append(store, f"m{i}")
    chunks = list(store.path_chunks("m10", max_rows=3))
    assert ids(chunks) == [["m10", "m9", "m8"], ["m7", "m6", "m5"], ["m4", "m3", "m2"], ["m1"]]
    assert [c for chunk in chunks for c in chunk] == store.path_contents("m10")[::-1]
    assert ids(store.path_chunks("m4", max_rows=3)) == [["m4", "m3", "m2"], ["m1"]]
    assert ids(store.path_chunks("m3")) == [["m3", "m2", "m1"]]  # the defaults: one chunk


def test_chunks_are_bounded_by_bytes_and_a_larger_row_comes_alone(store):
    append(store, "a", text="1" * 50)
    append(store, "b", text="2" * 50)
    append(store, "c", text="3" * 500)
    append(store, "d", text="4" * 50)
    append(store, "e", text="5" * 50)
    size = len(content("a", "1" * 50))  # 110 bytes
    assert size == 110
    assert ids(store.path_chunks("e", max_bytes=2 * size)) == [["e", "d"], ["c"], ["b", "a"]]
    assert ids(store.path_chunks("e", max_bytes=2 * size - 1)) == [["e"], ["d"], ["c"], ["b"], ["a"]]


def test_chunks_follow_one_branch_and_an_unknown_leaf_gives_nothing(store):
    append(store, "m1")
    append(store, "m2")
    append(store, "m3")
    append(store, "b3", parent="m2")
    append(store, "b4")
    assert ids(store.path_chunks("b4", max_rows=2)) == [["b4", "b3"], ["m2", "m1"]]
    assert list(store.path_chunks("nope")) == []
    assert list(MessageStore(store.storage, "other").path_chunks("m3")) == []


def test_chunks_give_damaged_rows_as_stored_and_stop_at_a_pointer_that_does_not_fall(store):
    for i in range(1, 7):
        append(store, f"m{i}")
    seq = {r["id"]: r["seq"] for r in store.storage.sql("SELECT id, seq FROM assistant_messages")}
    store.storage.exec("UPDATE assistant_messages SET content = ? WHERE id = 'm5'", b"\x00blob")
    store.storage.exec("UPDATE assistant_messages SET content = 'not json' WHERE id = 'm4'")
    chunks = list(store.path_chunks("m6", max_rows=2))
    assert [len(chunk) for chunk in chunks] == [2, 2, 2]
    assert chunks[0][1] == b"\x00blob" and chunks[1][0] == "not json"
    # m3 points at the newer m6: the walk stops there, at a chunk boundary or inside one.
    store.storage.exec("UPDATE assistant_messages SET parent_seq = ? WHERE id = 'm3'", seq["m6"])
    assert [len(chunk) for chunk in store.path_chunks("m6", max_rows=2)] == [2, 2]
    assert [len(chunk) for chunk in store.path_chunks("m6", max_rows=4)] == [4]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "8"])
def test_chunk_bounds_must_be_positive_ints(store, bad):
    append(store, "m1")
    with pytest.raises(InvalidInputError) as info:
        list(store.path_chunks("m1", max_rows=bad))
    assert info.value.field == "max_rows"
    with pytest.raises(InvalidInputError) as info:
        list(store.path_chunks("m1", max_bytes=bad))
    assert info.value.field == "max_bytes"
