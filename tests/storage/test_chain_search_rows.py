"""A chain's search rows are written in groups (storage/tree/sqlite.py ``insert_chain``).

Each group of ``CHAIN_FLUSH_ROWS`` search rows is a savepoint of its own, so
FTS5 writes it as its own segment (what that saves the appends after a
long chain is measured in benchmarks/bench_goals.py). What is stored and
found must not change: the same index rows, the same hits, all or nothing.
"""

import json

import pytest

from storage import SqlStorage
from storage.messages import LATEST_LEAF, MessageStore, NewMessage
from storage.tree import sqlite as SQLITE

WORDS = ("flight booking seat window aisle refund voucher gate boarding luggage delay crew meal "
         "upgrade lounge passport visa transfer terminal runway").split()


def text_of(i):
    return " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(12)) + f" n{i}"


def new(i):
    text = text_of(i)
    tools = f"lookup_booking ref{i}" if i % 5 == 0 else ""
    if i % 9 == 0:
        text += " 重跑gen-itgc后"  # CJK: a row in the trigram index too
    content = json.dumps({"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": text}]})
    return NewMessage(f"m{i}", "user", content, text, tools, tokens=10)


@pytest.fixture
def storages(tmp_path):
    opened = [SqlStorage.open(tmp_path / "chain.sqlite3"), SqlStorage.open(tmp_path / "single.sqlite3")]
    yield opened
    for storage in opened:
        storage.close()


def index_rowids(storage):
    return {table: storage.exec(f"SELECT rowid FROM {table} ORDER BY rowid").fetchall()
            for table in ("assistant_fts", "assistant_fts_tools", "assistant_fts_cjk")}


def test_a_long_chain_is_stored_and_found_as_appends_one_by_one_are(storages):
    chained, single = storages
    messages = [new(i) for i in range(10 * SQLITE.CHAIN_FLUSH_ROWS + 3)]
    assert all(inserted for inserted, _ in MessageStore(chained).append_chain(messages, LATEST_LEAF))
    store = MessageStore(single)
    for m in messages:
        assert store.append(m.id, m.role, m.content, m.text, LATEST_LEAF, tokens=m.tokens, tools=m.tools)[0]
    assert index_rowids(chained) == index_rowids(single)
    assert len(index_rowids(chained)["assistant_fts_tools"]) == len([m for m in messages if m.tools])
    for query in ("flight", "n0", "n162", "lookup_booking ref80", "itgc", "重跑", "aisle refund"):
        found = MessageStore(chained).search_messages(query, limit=50)
        assert found, query
        assert [(hit["id"], hit["content"]) for hit in found] == [
            (hit["id"], hit["content"]) for hit in MessageStore(single).search_messages(query, limit=50)]


def test_a_rolled_back_chain_leaves_no_search_row(storages):
    storage = storages[0]
    store = MessageStore(storage)
    store.append("first", "user", new(0).content, "first words", LATEST_LEAF)
    with pytest.raises(RuntimeError), storage.transaction():
        store.append_chain([new(i) for i in range(1, 5 * SQLITE.CHAIN_FLUSH_ROWS)], LATEST_LEAF)
        raise RuntimeError("the caller's transaction fails after the chain")
    assert index_rowids(storage) == {"assistant_fts": [(1,)], "assistant_fts_tools": [], "assistant_fts_cjk": []}
    assert store.search_messages("flight") == []
    assert store.count() == 1
