"""get_history() reads a path as one JSON array walked by ``parent_seq``: same answers, fewer costs.

The path is walked by rowid (``parent_seq``, kept beside ``parent_id``) and
fetched as one JSON text parsed once. These tests pin that the pointer stays
in step with ``parent_id`` through every write, that the one-parse read gives
exactly what parsing row by row gives -- damaged rows included (docs/behaviours.md
§2) -- and that each walk step is a rowid lookup.
"""

import apsw
import pytest

from actors.manager import SessionManager
from actors.session import Session
from actors.session_messages import parse_all, parse_path
from storage.tree import sqlite as sql
from tests.support.backends import kind_of

pytestmark = pytest.mark.both_storages

# Every row whose parent_seq is not the seq of the row its parent_id names.
OUT_OF_STEP = """
SELECT m.session_id, m.id, m.parent_id, m.parent_seq, p.seq FROM assistant_messages AS m
LEFT JOIN assistant_messages AS p ON p.session_id = m.session_id AND p.id = m.parent_id
WHERE m.parent_seq IS NOT p.seq
"""


def msg(mid, text=None):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text or f"text of {mid}"}]}


def ids(messages):
    return [m["id"] for m in messages]


async def row_by_row(session, leaf):
    return parse_all(await session._messages.path_contents(leaf))  # the store behind the Session, row by row


async def test_parent_seq_follows_parent_id_through_appends_chains_deletes_and_forks(storage):
    manager = SessionManager.create(storage)
    sid = (await manager.create("trip"))["id"]
    session = await manager.get_session(sid)
    for i in range(6):
        await session.append_message(msg(f"a{i}"))
    await session.append_message(msg("b0"), "a2")
    await session.append_messages([msg("b1"), msg("a3"), msg("b2")], "b0")  # a3: a stored duplicate
    await session.append_message(msg("root2"), None)
    await session.append_message(msg("orphan"), "no-such-parent")
    compaction = await session.add_compaction("sum", "a1", "a4")
    await session.append_messages([msg("c0"), {**msg("x"), "id": f"compaction_{compaction['id']}"}, msg("c1")], "a5")
    assert await session.delete_messages(["a2", "b1", "a4"]) == 3
    forked = await manager.fork(sid, "c1", "copy")
    await manager.compact_and_split(sid, "so far")
    if kind_of(storage) == "sqlite":  # parent_seq is a column of the SQLite file
        assert storage.sql(OUT_OF_STEP) == []
        assert storage.scalar("SELECT count(*) FROM assistant_messages WHERE parent_seq IS NOT NULL") == 10
    assert ids(await session.get_history("b2")) == ["a0", "a1", "a3", "b2"]  # b2 went under the stored a3
    # c1 went under a4 (the overlay's end), then moved up to a3 when a4 was deleted.
    assert ids(await session.get_history("c1")) == ["a0", "a1", "a3", "c1"]
    assert await manager.get_message_count(forked["id"]) == 4


async def test_the_one_parse_read_equals_row_by_row_parsing_on_a_branchy_tree(storage):
    session = Session.create(storage)
    for i in range(40):
        await session.append_message(msg(f"m{i}", "ünïcode \u2028 \"quoted\" " * (i % 3)))
        if i % 7 == 3:
            await session.append_message(msg(f"side{i}"), f"m{i - 1}")  # later seqs on other branches
            await session.append_message(msg(f"m{i}-next"), f"m{i}")
    for leaf in ("m39", "side10", "m24", "m0", "m10-next"):
        history = await session.get_history(leaf)
        assert history == await row_by_row(session, leaf)
        assert history[-1]["id"] == leaf
    on_path = ["m0", "m1", "m2", "m3", "m3-next", "m4", "m5", "m6", "m7", "m8", "m9", "side10"]
    assert ids(await session.get_history("side10")) == on_path


async def test_damaged_rows_are_skipped_exactly_as_row_by_row_parsing_skips_them(storage):
    session = Session.create(storage)
    for i in range(8):
        await session.append_message(msg(f"m{i}"))
    damage = {
        "m1": "not json",
        "m2": "5",
        "m3": '{"id":7,"role":"user","parts":[]}',
        # Two halves that would join into one message if rows were simply concatenated:
        "m4": '{"id":"glued","role":"user","parts":[]',
        "m5": '"x":1}',
        "m6": '{"id":"two","role":"user","parts":[]},{"id":"three","role":"user","parts":[]}',
    }
    for mid, content in damage.items():
        storage.exec("UPDATE assistant_messages SET content = ? WHERE id = ?", content, mid)
    assert ids(await session.get_history()) == ["m0", "m7"]
    assert await session.get_history() == await row_by_row(session, "m7")
    assert ids(await session.raw_path_messages()) == ["m0", "m7"]


@pytest.mark.sqlite_only("SQLite's string length limit")
async def test_a_path_over_sqlites_string_limit_is_read_row_by_row(storage):
    session = Session.create(storage)
    await session.append_messages([msg(f"m{i}", "x" * 200) for i in range(30)])
    expected = await session.get_history()
    storage.connection.limit(apsw.SQLITE_LIMIT_LENGTH, 4000)  # one row fits, the whole array does not
    assert session._messages.sync.path_json("m29") is None
    assert await session.get_history() == expected
    assert len(expected) == 30


def test_parse_path_refuses_text_that_does_not_hold_count_values():
    assert parse_path('[{"id":"b","role":"r","parts":[]},{"id":"a","role":"r","parts":[]}]', 2) == [
        {"id": "a", "role": "r", "parts": []}, {"id": "b", "role": "r", "parts": []},
    ]
    assert parse_path("[1,2,3]", 2) is None
    assert parse_path("[1,", 1) is None
    assert parse_path("[]", 0) == []


@pytest.mark.parametrize("name, walk", [
    ("PATH_JSON", ["SCAN p", "SEARCH m USING INTEGER PRIMARY KEY (rowid=?)"]),
    ("PATH_CONTENT", ["SCAN p", "SEARCH m USING INTEGER PRIMARY KEY (rowid=?)"]),
    ("PATH_STATS", ["SCAN p", "SEARCH m USING INTEGER PRIMARY KEY (rowid=?)"]),
    ("WINDOW", ["SCAN w", "SEARCH m USING INTEGER PRIMARY KEY (rowid=?)"]),
])
@pytest.mark.parametrize("analyzed", [False, True])
@pytest.mark.sqlite_only("SQLite query plans (Postgres: tests/storage/test_postgres_messages.py)")
async def test_each_step_up_a_path_is_one_rowid_lookup(storage, name, walk, analyzed):
    session = Session.create(storage)
    await session.append_messages([msg(f"m{i}") for i in range(200)])
    await Session.create(storage).for_session("other").append_messages([msg(f"m{i}") for i in range(200)])
    if analyzed:
        storage.exec("ANALYZE")
    params = ("", "m199", 5, 1000) if name == "WINDOW" else ("", "m199")
    plan = [row[3] for row in storage.connection.execute("EXPLAIN QUERY PLAN " + getattr(sql, name), params)]
    step = plan.index("RECURSIVE STEP")
    assert plan[step + 1 : step + 3] == walk
    assert plan[step - 1] == (
        "SEARCH assistant_messages USING INDEX sqlite_autoindex_assistant_messages_1 (session_id=? AND id=?)"
    )
