"""MessageStore carries the latest leaf's place from its own append (storage/carried.py).

Every row it writes that way must be the row a store reading the leaf writes;
and the carried place must never be used once anything else wrote the file.
"""

import json

import apsw
import pytest

from storage import SqlStorage
from storage.messages import LATEST_LEAF, MessageStore

PLACE = "SELECT id, parent_id, parent_seq, depth, path_bytes, tokens, path_tokens, jump_seq FROM assistant_messages"


def content(mid):
    return json.dumps({"id": mid, "role": "user", "parts": [{"type": "text", "text": f"flight {mid}"}]})


def append(store, mid, parent=LATEST_LEAF):
    return store.append(mid, "user", content(mid), f"flight {mid}", parent, tokens=len(mid))


def rows(storage):
    return storage.exec(PLACE + " ORDER BY seq").fetchall()


@pytest.fixture
def storages(tmp_path):
    opened = [SqlStorage.open(tmp_path / "carried.sqlite3"), SqlStorage.open(tmp_path / "read.sqlite3")]
    yield opened
    for storage in opened:
        storage.close()


def reads(store):
    """Statements the store runs for the call made inside the block."""
    seen = []

    def trace(cursor, sql, bindings):
        seen.append(sql)
        return True

    store.storage.connection.exec_trace = trace
    return seen


def test_appends_with_the_carried_place_write_the_rows_a_fresh_store_writes(storages):
    carried_storage, read_storage = storages
    carried = MessageStore(carried_storage)
    plan = [(f"m{i}", LATEST_LEAF) for i in range(300)]
    plan[120] = ("b120", "m40")  # a branch: the next appends go on under it (it is the newest)
    plan[200] = ("r200", None)  # a new root
    for mid, parent in plan:
        assert append(carried, mid, parent) == append(MessageStore(read_storage), mid, parent)
        assert carried.latest_leaf() == mid
    assert rows(carried_storage) == rows(read_storage)
    assert carried.latest_path_tokens() == MessageStore(read_storage).latest_path_tokens()


def test_an_append_under_the_carried_leaf_reads_nothing_from_the_file(storages):
    store = MessageStore(storages[0])
    for i in range(50):
        append(store, f"m{i}")
        assert store.latest_path_tokens().total == sum(len(f"m{k}") for k in range(i + 1))
    seen = reads(store)
    append(store, "next")
    assert store.latest_leaf() == "next"
    store.latest_path_tokens()
    store.storage.connection.exec_trace = None
    written = [sql for sql in seen if not sql.lstrip().upper().startswith(("SAVEPOINT", "RELEASE", "BEGIN", "COMMIT"))]
    assert [sql.split()[0:3] for sql in written] == [["INSERT", "INTO", "assistant_messages"],
                                                    ["INSERT", "INTO", "assistant_fts"]]


def test_a_write_by_another_store_makes_the_carried_leaf_stale(storages):
    storage = storages[0]
    store, other = MessageStore(storage), MessageStore(storage)
    for i in range(5):
        append(store, f"m{i}")
    append(other, "o1")  # the newest message: the latest leaf now
    assert append(store, "m5") == (True, "o1")
    other.delete(["m5"])
    assert store.latest_leaf() == "o1"
    assert append(store, "m6") == (True, "o1")
    storage.exec("UPDATE assistant_messages SET tokens = tokens WHERE id = 'm6'")  # any commit at all
    seen = reads(store)
    append(store, "m7")
    store.storage.connection.exec_trace = None
    assert any("ORDER BY seq DESC LIMIT 1" in sql for sql in seen)  # read, not carried
    assert [r[0:3] for r in rows(storage)][-1][1] == "m6"


def test_an_append_inside_a_transaction_rolled_back_is_not_carried(storages):
    storage = storages[0]
    store = MessageStore(storage)
    append(store, "m1")
    with pytest.raises(KeyError), storage.transaction():
        append(store, "gone")
        raise KeyError
    assert store.latest_leaf() == "m1"
    assert append(store, "m2") == (True, "m1")
    assert [r[0] for r in rows(storage)] == ["m1", "m2"]


def test_a_rolled_back_savepoint_leaves_the_carried_leaf_right(storages):
    storage = storages[0]
    store = MessageStore(storage)
    append(store, "m1")
    with storage.transaction():
        append(store, "m2")
        with pytest.raises(KeyError), storage.transaction():
            append(store, "gone")
            raise KeyError
    assert store.latest_leaf() == "m2"
    assert append(store, "m3") == (True, "m2")


def test_a_file_shared_with_another_connection_is_never_carried(tmp_path):
    path = tmp_path / "shared.sqlite3"
    storage = SqlStorage.open(path, locking="normal")
    try:
        store = MessageStore(storage)
        append(store, "m1")
        other = apsw.Connection(str(path))
        other.execute("INSERT INTO assistant_messages (id, role, content) VALUES ('elsewhere', 'user', '{}')")
        other.close()
        assert append(store, "m2") == (True, "elsewhere")
    finally:
        storage.close()


def test_a_compaction_added_after_the_carried_append_counts_in_the_token_estimate(storages):
    storage = storages[0]
    store = MessageStore(storage)
    for i in range(4):
        append(store, f"m{i}")
    assert store.latest_path_tokens().hidden == ()
    store.add_compaction("c1", "summary", "m0", "m1")
    tokens = store.latest_path_tokens()
    assert tokens.total == 8 and [(row.id, hidden) for row, hidden in tokens.hidden] == [("c1", 4)]
    append(store, "m4")
    assert [(row.id, hidden) for row, hidden in store.latest_path_tokens().hidden] == [("c1", 4)]
