"""PostgresSessionProvider: the message tree of the SQLite MessageStore, on a real Postgres."""

from __future__ import annotations

import json
import random
import re

import psycopg
import pytest
import trio

from actors.session_messages import apply_overlays, parse_all
from common.errors import InvalidInputError
from storage.fts import parse_query
from storage.messages import LATEST_LEAF, MessageStore, NewMessage, to_iso8601
from storage.postgres import PostgresSessionProvider

MS_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$")


def doc(message_id: str, text: str = "", role: str = "user") -> str:
    return json.dumps({"id": message_id, "role": role, "parts": [{"type": "text", "text": text}]})


def new(message_id: str, text: str = "", *, tokens: int = 0) -> NewMessage:
    return NewMessage(message_id, "user", doc(message_id, text), text, tokens=tokens)


@pytest.fixture
def store(pg_conn):
    return PostgresSessionProvider(pg_conn, "s")


async def add(store, message_id, parent=LATEST_LEAF, text="", tokens=0):
    return await store.append(message_id, "user", doc(message_id, text), text, parent, tokens=tokens)


# -- appending and the latest leaf ---------------------------------------------------------


async def test_append_chains_under_the_latest_leaf(store):
    assert await store.latest_leaf() is None
    assert await add(store, "a") == (True, None)
    assert await add(store, "b") == (True, "a")
    assert await add(store, "c") == (True, "b")
    assert await store.latest_leaf() == "c"
    assert await store.path_ids("c") == ["a", "b", "c"]
    assert await store.path_contents("c") == [doc("a"), doc("b"), doc("c")]
    assert await store.count() == 3


async def test_a_duplicate_id_changes_nothing(store):
    await add(store, "a", text="first")
    await add(store, "b")
    assert await store.append("a", "assistant", doc("a", "second"), "second") == (False, None)
    assert await store.get("a") == doc("a", "first")
    assert await store.latest_leaf() == "b"
    assert await store.search(parse_query("second"), 5) == []


async def test_ids_are_unique_per_session_not_per_database(pg_conn):
    one, two = PostgresSessionProvider(pg_conn, "one"), PostgresSessionProvider(pg_conn, "two")
    assert await add(one, "m1", text="in one") == (True, None)
    assert await add(two, "m1", text="in two") == (True, None)
    assert await one.get("m1") == doc("m1", "in one")
    assert await two.get("m1") == doc("m1", "in two")
    await one.delete(["m1"])
    assert await two.get("m1") == doc("m1", "in two")


async def test_parents_explicit_none_and_unknown(store):
    await add(store, "a")
    await add(store, "b")
    assert await add(store, "c", parent="a") == (True, "a")  # a branch
    assert await store.latest_leaf() == "c"
    assert await add(store, "r", parent=None) == (True, None)  # a new root
    assert await add(store, "x", parent="nowhere") == (True, None)  # unknown parent -> root
    assert await store.latest_leaf() == "x"
    assert await store.children("a") == [doc("b"), doc("c")]
    assert await store.path_ids("c") == ["a", "c"]


async def test_latest_leaf_is_persisted_not_guessed_from_the_clock(pg_conn, store):
    """The last append stays the leaf even when another host's clock stamped it earlier."""
    await add(store, "a")
    await add(store, "b")
    await add(store, "c", parent="a")
    pg_conn.execute("UPDATE assistant_messages SET created_at = created_at - interval '1 hour' WHERE id = 'c'")
    assert await PostgresSessionProvider(pg_conn, "s").latest_leaf() == "c"


async def test_ties_in_time_are_broken_by_insertion_order(pg_conn, store):
    for name in ("a", "b", "c", "d"):
        await add(store, name, parent=None if name == "a" else "a")
    pg_conn.execute("UPDATE assistant_messages SET created_at = '2025-01-01 00:00:00+00'")
    assert await store.children("a") == [doc("b"), doc("c"), doc("d")]
    await store.delete(["d"])  # the active leaf is gone: fall back to the newest childless, by seq
    assert await store.latest_leaf() == "c"
    await store.add_compaction("k2", "second", "a", "b")
    await store.add_compaction("k1", "first", "a", "c")
    pg_conn.execute("UPDATE assistant_compactions SET created_at = '2025-01-01 00:00:00+00'")
    assert [r.id for r in await store.compactions()] == ["k2", "k1"]


async def test_deleting_the_leaf_falls_back_to_the_newest_leaf(store):
    await add(store, "a")
    await add(store, "b")
    await add(store, "c", parent="a")
    assert await store.delete(["c"]) == ["c"]
    assert await store.latest_leaf() == "b"


async def test_created_at_has_milliseconds(store):
    await add(store, "a", text="stamped")
    row = await store.add_compaction("k", "sum", "a", "a")
    [hit] = await store.search(parse_query("stamped"), 1)
    assert MS_STAMP.match(row.created_at) and MS_STAMP.match(hit.created_at)
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", to_iso8601(hit.created_at))


# -- chains --------------------------------------------------------------------------------


async def test_chain_skips_duplicates_and_goes_on_under_them(store):
    await add(store, "a")
    results = await store.append_chain([new("b"), new("a"), new("c"), new("c"), new("d")], LATEST_LEAF)
    assert results == [(True, "a"), (False, None), (True, "a"), (False, None), (True, "c")]
    assert await store.path_ids("d") == ["a", "c", "d"]
    assert await store.children("a") == [doc("b"), doc("c")]
    assert await store.latest_leaf() == "d"


async def test_chain_of_nothing_new_leaves_the_leaf(store):
    await add(store, "a")
    await add(store, "b")
    await add(store, "c", parent="a")
    assert await store.append_chain([new("a"), new("b")], None) == [(False, None), (False, None)]
    assert await store.latest_leaf() == "c"
    assert await store.append_chain([], None) == []


async def test_overlay_ids_are_never_stored_and_stand_for_the_compaction_end(store):
    for name in "abcd":
        await add(store, name)
    await store.add_compaction("k", "summary of a..c", "a", "c")
    # Append under the overlay: goes under its last message.
    assert await add(store, "e", parent="compaction_k") == (True, "c")
    # An echoed overlay in a chain is skipped; the chain goes on from its end.
    results = await store.append_chain([new("compaction_k"), new("f")], None)
    assert results == [(False, None), (True, "c")]
    # An overlay of an unknown compaction is passed over.
    assert await store.append_chain([new("compaction_zz"), new("g")], "f") == [(False, None), (True, "f")]
    assert await add(store, "h", parent="compaction_zz") == (True, "g")  # unknown -> latest leaf
    assert await store.get("compaction_k") is None


# -- deleting, updating, clearing ------------------------------------------------------------


async def test_delete_hands_children_to_the_parent(store):
    for name in "abcd":
        await add(store, name)
    await add(store, "x", parent="b")
    assert await store.delete(["b", "nope", "b"]) == ["b"]
    assert await store.path_ids("d") == ["a", "c", "d"]
    assert await store.path_ids("x") == ["a", "x"]
    assert await store.children("a") == [doc("c"), doc("x")]


async def test_delete_of_a_chain_and_of_a_root(store):
    for name in "abcde":
        await add(store, name)
    assert await store.delete(["b", "c"]) == ["b", "c"]
    assert await store.path_ids("e") == ["a", "d", "e"]
    assert await store.delete(["a"]) == ["a"]
    assert await store.path_ids("e") == ["d", "e"]
    assert await store.latest_leaf() == "e"


async def test_update_replaces_content_role_and_search_text(store):
    await add(store, "a", text="old words")
    assert await store.update("a", "assistant", doc("a", "new words", "assistant"), "new words", tokens=7) is True
    assert await store.get("a") == doc("a", "new words", "assistant")
    assert await store.search(parse_query("old"), 5) == []
    [hit] = await store.search(parse_query("new"), 5)
    assert (hit.id, hit.role, hit.content) == ("a", "assistant", "new words")
    assert (await store.path_tokens("a")).total == 7
    assert await store.update("zz", "user", doc("zz"), "") is False
    assert await store.count() == 1


async def test_clear_removes_this_session_only(pg_conn, store):
    other = PostgresSessionProvider(pg_conn, "other")
    await add(store, "a", text="mine")
    await add(other, "a", text="theirs")
    await store.add_compaction("k", "s", "a", "a")
    await store.clear()
    assert (await store.count(), await store.latest_leaf(), await store.compactions()) == (0, None, [])
    assert await store.search(parse_query("mine"), 5) == []
    assert await other.get("a") == doc("a", "theirs")
    assert await other.latest_leaf() == "a"


# -- reading paths -----------------------------------------------------------------------------


async def test_path_reads(store):
    await add(store, "a", text="x" * 10)
    await add(store, "b", text="é")
    await add(store, "c")
    sizes = [len(doc(i, t).encode()) for i, t in (("a", "x" * 10), ("b", "é"), ("c", ""))]
    assert await store.place("c") == (3, sum(sizes))
    assert await store.place("zz") is None
    assert await store.path_stats("c") == [("a", "user", sizes[0]), ("b", "user", sizes[1]), ("c", "user", sizes[2])]
    text, count = await store.path_json("c")
    assert count == 3  # leaf first, as MessageStore.path_json
    assert json.loads(text) == [json.loads(doc("c")), json.loads(doc("b", "é")), json.loads(doc("a", "x" * 10))]
    assert await store.path_json("zz") == ("[]", 0)
    assert await store.path_contents("zz") == [] and await store.path_ids("zz") == []


async def test_path_chunks_are_bounded_and_equal_to_sqlite_chunks(store, tmp_path):
    from storage import SqlStorage

    texts = ["x" * 10, "y" * 300, "", "z" * 5, "w" * 120, "v", "u" * 40]
    sqlite = SqlStorage.open(tmp_path / "actor.sqlite3")
    try:
        local = MessageStore(sqlite, "s")
        for i, text in enumerate(texts):
            await add(store, f"m{i}", text=text)
            local.append(f"m{i}", "user", doc(f"m{i}", text), text, LATEST_LEAF)
        await add(store, "side", parent="m3")  # another branch: never walked
        size = len(doc("m0", "x" * 10).encode())
        for max_rows, max_bytes in ((1, 10**6), (3, 10**6), (100, 2 * size), (2, 1)):
            got = [chunk async for chunk in store.path_chunks("m6", max_rows=max_rows, max_bytes=max_bytes)]
            assert got == list(local.path_chunks("m6", max_rows=max_rows, max_bytes=max_bytes))
            assert [json.loads(row)["id"] for chunk in got for row in chunk] == [f"m{i}" for i in range(6, -1, -1)]
            assert all(len(chunk) <= max_rows for chunk in got)
        assert [chunk async for chunk in store.path_chunks("nope")] == []
        with pytest.raises(InvalidInputError, match="max_rows must be an int >= 1"):
            [chunk async for chunk in store.path_chunks("m6", max_rows=0)]
    finally:
        sqlite.close()


async def test_window_takes_the_newest_rows_that_fit(store):
    for name in "abcd":
        await add(store, name)
    size = len(doc("a").encode())
    assert await store.window("d", 2 * size, 1) == ([doc("c"), doc("d")], True)
    assert await store.window("d", 0, 3) == ([doc("b"), doc("c"), doc("d")], True)
    assert await store.window("d", float("inf"), 1) == ([doc(n) for n in "abcd"], False)
    assert await store.window("zz", 100, 1) == ([], False)


async def test_no_depth_cap(store):
    """The original stops at depth 10,000; the whole path is read here."""
    n = 10_050
    results = await store.append_chain([new(f"m{i}", tokens=1) for i in range(n)], None)
    assert all(inserted for inserted, _ in results)
    ids = await store.path_ids(f"m{n - 1}")
    assert len(ids) == n and ids[0] == "m0" and ids[-1] == f"m{n - 1}"
    assert (await store.place(f"m{n - 1}"))[0] == n
    assert (await store.path_tokens(f"m{n - 1}")).total == n


# -- compactions: rows here, overlays on read ------------------------------------------------------


async def test_overlays_are_branch_local(store):
    for name in "abcd":
        await add(store, name)
    await add(store, "x", parent="b")  # a sibling branch a-b-x
    await store.add_compaction("k", "summary", "b", "c")
    rows = await store.compactions()
    main = apply_overlays(parse_all(await store.path_contents("d")), rows)
    side = apply_overlays(parse_all(await store.path_contents("x")), rows)
    assert [m["id"] for m in main] == ["a", "compaction_k", "d"]
    assert main[1]["createdAt"] == to_iso8601(rows[0].created_at)
    assert [m["id"] for m in side] == ["a", "b", "x"]  # c is not on this branch


async def test_path_tokens_counts_what_the_overlays_hide(store):
    for i, name in enumerate("abcdef"):
        await add(store, name, tokens=10 * (i + 1))  # a=10 ... f=60
    await add(store, "y", parent="c", tokens=5)
    await store.add_compaction("old", "s1", "b", "c")
    await store.add_compaction("new", "s2", "b", "d")  # newer, same start: this one applies
    await store.add_compaction("inner", "s3", "c", "e")  # starts inside an applied overlay: skipped
    await store.add_compaction("off", "s4", "x", "f")  # start not on the path
    tokens = await store.path_tokens("f")
    assert tokens.total == 210
    assert [(row.id, hidden) for row, hidden in tokens.hidden] == [("new", 20 + 30 + 40)]
    branch = await store.path_tokens("y")  # a b c y: "new" ends off this branch, "old" applies
    assert branch.total == 65 and [(row.id, hidden) for row, hidden in branch.hidden] == [("old", 50)]
    assert await store.path_tokens("zz") is None


# -- concurrency ------------------------------------------------------------------------------------


async def test_concurrent_appends_to_one_session_form_one_chain(pg_dsn):
    """Writers on different connections take the session lock: none picks a stale parent."""
    conns = [psycopg.connect(pg_dsn, autocommit=True) for _ in range(4)]
    try:
        stores = [PostgresSessionProvider(c, "shared") for c in conns]
        await add(stores[0], "root")

        async def writer(k: int) -> None:
            for i in range(5):
                await add(stores[k], f"w{k}-{i}")

        async with trio.open_nursery() as nursery:
            for k in range(4):
                nursery.start_soon(writer, k)
        leaf = await stores[0].latest_leaf()
        assert len(await stores[0].path_ids(leaf)) == 21
        fanout = conns[0].execute(
            "SELECT max(n) FROM (SELECT count(*) AS n FROM assistant_messages WHERE session_id = 'shared' "
            "GROUP BY parent_id) AS c"
        ).fetchone()[0]
        assert fanout == 1
    finally:
        for c in conns:
            c.close()


# -- the same answers as the SQLite store ----------------------------------------------------------


async def test_same_tree_as_the_sqlite_store(store, tmp_path):
    """A seeded random mix of writes gives the same reads on both stores."""
    from storage import SqlStorage

    sqlite = SqlStorage.open(tmp_path / "mirror.sqlite3")
    mirror = MessageStore(sqlite, "s")
    rng = random.Random(7)
    ids: list[str] = []
    words = ["alpha", "beta", "gamma", "delta", "running", "runs", "中文", "测试"]
    try:
        for step in range(120):
            kind = rng.choice(["append", "append", "append", "chain", "delete", "update", "compact"])
            if kind in ("append", "chain") or not ids:
                parent = rng.choice([LATEST_LEAF, LATEST_LEAF, None, *(ids[-5:] or [None]), "ghost"])
                if ids and rng.random() < 0.1:
                    parent = f"compaction_c{rng.randrange(step + 1)}"
                batch = []
                for _ in range(1 if kind == "append" else rng.randint(1, 4)):
                    name = rng.choice(ids) if ids and rng.random() < 0.15 else f"m{step}-{len(batch)}"
                    batch.append(new(name, " ".join(rng.sample(words, 3)), tokens=rng.randint(1, 9)))
                got = await store.append_chain(batch, parent)
                assert got == mirror.append_chain(batch, parent)
                ids.extend(m.id for m, (ok, _) in zip(batch, got) if ok)
            elif kind == "delete":
                chosen = rng.sample(ids, min(len(ids), rng.randint(1, 2)))
                assert await store.delete(chosen) == mirror.delete(chosen)
                ids = [i for i in ids if i not in chosen]
            elif kind == "update":
                target = rng.choice(ids)
                text = " ".join(rng.sample(words, 2))
                args = (target, "assistant", doc(target, text, "assistant"), text)
                assert await store.update(*args, tokens=3) == mirror.update(*args, tokens=3)
            else:
                start, end = sorted(rng.sample(range(len(ids)), 2)) if len(ids) > 1 else (0, 0)
                await store.add_compaction(f"c{step}", "sum", ids[start], ids[end])
                mirror.add_compaction(f"c{step}", "sum", ids[start], ids[end])
            leaf = await store.latest_leaf()
            assert leaf == mirror.latest_leaf()
            if leaf is not None:
                assert await store.path_ids(leaf) == mirror.path_ids(leaf)
        for message_id in ids:
            assert await store.path_contents(message_id) == mirror.path_contents(message_id)
            assert await store.children(message_id) == mirror.children(message_id)
            assert await store.place(message_id) == mirror.place(message_id)
            assert await store.window(message_id, 300, 2) == mirror.window(message_id, 300, 2)
            mine, theirs = await store.path_tokens(message_id), mirror.path_tokens(message_id)
            assert mine.total == theirs.total
            assert [(r.id, n) for r, n in mine.hidden] == [(r.id, n) for r, n in theirs.hidden]
        assert [r.id for r in await store.compactions()] == [r.id for r in mirror.compactions()]
        for word in words:
            query = parse_query(word)
            assert {r.id for r in await store.search(query, 1000)} == {r.id for r in mirror.search(query, 1000)}
    finally:
        sqlite.close()


# -- planner statistics ----------------------------------------------------------------------


def _walk_plan(conn, leaf: str) -> str:
    from storage.tree import postgres as sql

    query = sql.PATH_STATS.sql.replace("%(s)s", "'s'").replace("%(leaf)s", f"'{leaf}'")
    return "\n".join(row[0] for row in conn.execute("EXPLAIN " + query))


async def test_a_growing_session_refreshes_stale_statistics_so_path_walks_use_the_primary_key(pg_conn, store):
    # Statistics taken on a (nearly) empty table make every index led by session_id look as good
    # as the primary key: a path walk then scans the session at every step (O(n^2), seconds at 10k).
    scans = ("idx_assistant_msg_session", "idx_assistant_msg_created", "idx_assistant_msg_children")
    pg_conn.execute("ANALYZE assistant_messages")  # of an empty table
    pg_conn.execute(  # 255 messages written behind the provider's back: no statistics follow
        "INSERT INTO assistant_messages (session_id, id, parent_id, role, content, depth, path_bytes, path_tokens) "
        "SELECT 's', 'r' || i, CASE WHEN i = 1 THEN NULL ELSE 'r' || (i - 1) END, 'user', '{}', i, 2 * i, 0 "
        "FROM generate_series(1, 255) AS i")
    stale = _walk_plan(pg_conn, "r255")
    assert "assistant_messages_pkey" not in stale  # each step scans: the table, or a whole session
    await add(store, "m256", "r255")  # the session reaches depth 256: the statistics are checked, then refreshed
    plan = _walk_plan(pg_conn, "m256")
    assert "assistant_messages_pkey" in plan and "Seq Scan" not in plan and not any(i in plan for i in scans)
    assert len(await store.path_ids("m256")) == 256
    assert pg_conn.execute("SELECT reltuples FROM pg_class WHERE relname = 'assistant_messages'").fetchone()[0] == 256
