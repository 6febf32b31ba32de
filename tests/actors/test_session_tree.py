"""Session message tree: appends, branches, updates, deletes, validation, concurrency.

docs/behaviours.md §2 and §5 with docs/deviations.md #1-#6 and #18.
"""

import datetime as dt

import pytest
import trio

from actors import InvalidInputError, InvalidMessageError, MessageNotFoundError
from actors.session import LATEST_LEAF, MessagesChange, Session
from tests.support.backends import index_rows, kind_of
from tests.support.backends import row_count as rows_of

pytestmark = pytest.mark.both_storages


def msg(mid, text=None, role="user", **extra):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text or f"text of {mid}"}], **extra}


def ids(messages):
    return [m["id"] for m in messages]


@pytest.fixture
def session(storage):
    return Session.create(storage)


async def chain(session, *mids, parent_id=LATEST_LEAF):
    for i, mid in enumerate(mids):
        await session.append_message(msg(mid), parent_id if i == 0 else LATEST_LEAF)


def row_count(storage, table="assistant_messages"):
    return rows_of(storage, table)  # a table made on first use that does not exist holds none


# -- create / builders ---------------------------------------------------------


def test_create_accepts_storage_or_object_with_storage(storage, recording_agent):
    from_agent = Session.create(recording_agent)
    assert from_agent.storage is storage
    assert from_agent.broadcaster == recording_agent.broadcast
    plain = Session.create(storage)
    assert plain.storage is storage and plain.broadcaster is None
    assert plain.session_id == ""


def test_create_refuses_a_target_without_storage():
    with pytest.raises(TypeError, match="needs a SqlStorage"):
        Session.create(object())


def test_builders_touch_no_sql(storage):
    storage.close()
    session = Session.create(storage)
    assert session.for_session("s1") is session
    assert session.session_id == "s1"


def test_for_session_refuses_a_non_string(session):
    with pytest.raises(InvalidInputError) as info:
        session.for_session(7)
    assert info.value.field == "session_id"


# -- append --------------------------------------------------------------------


async def test_append_without_parent_chains_from_the_latest_leaf(session):
    await chain(session, "m1", "m2", "m3")
    assert ids(await session.get_history()) == ["m1", "m2", "m3"]
    assert (await session.get_latest_leaf())["id"] == "m3"
    assert await session.get_path_length() == 3


async def test_append_with_none_parent_starts_a_root_that_becomes_the_leaf(session):
    await chain(session, "m1", "m2")
    assert await session.append_message(msg("r2"), None) is True
    assert ids(await session.get_history()) == ["r2"]
    assert ids(await session.get_history("m2")) == ["m1", "m2"]


async def test_append_with_unknown_parent_stores_a_root(session):
    await chain(session, "m1")
    await session.append_message(msg("m2"), "nope")
    assert ids(await session.get_history()) == ["m2"]
    assert session.storage.scalar("SELECT parent_id FROM assistant_messages WHERE id = 'm2'") is None


async def test_parent_from_another_session_counts_as_unknown(storage):
    a = Session.create(storage).for_session("a")
    b = Session.create(storage).for_session("b")
    await a.append_message(msg("a1"))
    await b.append_message(msg("b1"), "a1")
    assert storage.scalar("SELECT parent_id FROM assistant_messages WHERE id = 'b1'") is None


async def test_duplicate_id_keeps_the_first_content_and_the_leaf(session):
    await chain(session, "m1", "m2")
    assert await session.append_message(msg("m1", "changed")) is False
    assert (await session.get_message("m1"))["parts"][0]["text"] == "text of m1"
    assert (await session.get_latest_leaf())["id"] == "m2"
    assert row_count(session.storage) == 2
    assert len(index_rows(session.storage)) == 2


async def test_message_is_stored_as_compact_js_json(session):
    message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "héllo ✓"}], "n": 1.0, "f": 0.5}
    await session.append_message(message)
    stored = session.storage.scalar("SELECT content FROM assistant_messages WHERE id = 'm1'")
    assert stored == '{"id":"m1","role":"user","parts":[{"type":"text","text":"héllo ✓"}],"n":1,"f":0.5}'


async def test_text_that_mentions_nan_is_still_json(session):
    await session.append_message(msg("m1", "NaN and Infinity are words here"))
    assert (await session.get_message("m1"))["parts"][0]["text"] == "NaN and Infinity are words here"


async def test_datetime_created_at_is_stored_like_a_js_date(session):
    when = dt.datetime(2026, 11, 29, 19, 30, 0, 123456, tzinfo=dt.timezone.utc)
    await session.append_message(msg("m1", createdAt=when))
    assert (await session.get_message("m1"))["createdAt"] == "2026-11-29T19:30:00.123Z"


async def test_returned_messages_are_fresh_objects(session):
    original = msg("m1")
    await session.append_message(original)
    original["parts"][0]["text"] = "mutated by caller"
    first = await session.get_message("m1")
    first["parts"][0]["text"] = "mutated by reader"
    (await session.get_history())[0]["role"] = "system"
    assert await session.get_message("m1") == msg("m1")


async def test_same_ids_in_two_sessions_of_one_file_coexist(storage):
    a = Session.create(storage).for_session("a")
    b = Session.create(storage).for_session("b")
    await chain(a, "m1", "m2")
    await chain(b, "m1", "m2")
    await b.update_message(msg("m2", "b's version"))
    assert (await a.get_message("m2"))["parts"][0]["text"] == "text of m2"
    assert (await b.get_message("m2"))["parts"][0]["text"] == "b's version"
    assert ids(await a.get_history()) == ["m1", "m2"]
    assert await Session.create(storage).get_history() == []
    assert row_count(storage) == 4


# -- validation ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "field", "text"),
    [
        ({"role": "user", "parts": []}, "message.id", "message.id is missing"),
        ({"id": 5, "role": "user", "parts": []}, "message.id", "message.id must be a string, not int"),
        ({"id": "m", "parts": []}, "message.role", "message.role is missing"),
        ({"id": "m", "role": None, "parts": []}, "message.role", "message.role must be a string, not NoneType"),
        ({"id": "m", "role": "user"}, "message.parts", "message.parts is missing"),
        ({"id": "m", "role": "user", "parts": "hi"}, "message.parts", "message.parts must be a list, not str"),
        ("m1", "message", "message must be a dict with id, role and parts, not str"),
        ({"id": "m", "role": "user", "parts": [{"x": {1, 2}}]}, "message", "message is not JSON data"),
        ({"id": "m", "role": "user", "parts": [], "score": float("nan")}, "message", "message is not JSON data"),
    ],
)
async def test_invalid_message_names_the_field_and_writes_nothing(session, bad, field, text):
    with pytest.raises(InvalidMessageError) as info:
        await session.append_message(bad)
    assert info.value.field == field
    assert str(info.value).startswith(text)
    assert isinstance(info.value, ValueError)
    with pytest.raises(InvalidMessageError):
        await session.update_message(bad)
    assert row_count(session.storage) == 0
    assert row_count(session.storage, "assistant_config") == 0


async def test_parent_id_must_be_a_string_or_none(session):
    with pytest.raises(InvalidInputError) as info:
        await session.append_message(msg("m1"), 3)
    assert info.value.field == "parent_id"
    assert row_count(session.storage) == 0


# -- branches ------------------------------------------------------------------


async def test_branching_then_history_follows_the_newest_branch(session):
    await chain(session, "m1", "m2", "m3")
    await session.append_message(msg("m3b"), "m2")
    assert ids(await session.get_history()) == ["m1", "m2", "m3b"]
    assert ids(await session.get_history("m3")) == ["m1", "m2", "m3"]
    assert (await session.get_latest_leaf())["id"] == "m3b"
    await session.append_message(msg("m4"))
    assert ids(await session.get_history()) == ["m1", "m2", "m3b", "m4"]


async def test_get_branches_lists_every_child_in_insertion_order(session):
    await chain(session, "m1", "m2")
    for child in ("c3", "c1", "c2"):
        await session.append_message(msg(child), "m2")
    assert ids(await session.get_branches("m2")) == ["c3", "c1", "c2"]
    assert await session.get_branches("c1") == []
    assert await session.get_branches("unknown") == []


async def test_history_to_a_non_leaf_and_to_an_unknown_id(session):
    await chain(session, "m1", "m2", "m3")
    assert ids(await session.get_history("m2")) == ["m1", "m2"]
    assert await session.get_history("unknown") == []
    assert await session.get_path_length("m2") == 2
    assert await session.get_path_length("unknown") == 0


async def test_empty_session_reads(session):
    assert await session.get_history() == []
    assert await session.get_latest_leaf() is None
    assert await session.get_path_length() == 0
    assert await session.get_message("m1") is None
    assert await session.get_history_row_stats() == []
    assert await session.get_recent_history(100) == {"messages": [], "truncated": False, "totalContentBytes": 0}


async def test_history_has_no_depth_cap(session):
    n = 10_050
    if kind_of(session.storage) == "sqlite":
        with session.storage.transaction():
            for i in range(n):
                await session.append_message(msg(f"m{i}", "x"))
    else:  # 10,050 round trips would take seconds: one chain of the same messages
        await session.append_messages([msg(f"m{i}", "x") for i in range(n)])
    history = await session.get_history()
    assert len(history) == n
    assert history[0]["id"] == "m0" and history[-1]["id"] == f"m{n - 1}"
    assert await session.get_path_length() == n


# -- update --------------------------------------------------------------------


async def test_update_replaces_content_and_role_but_keeps_the_tree(session):
    await chain(session, "m1", "m2", "m3")
    await session.update_message(msg("m2", "edited", role="assistant", extra=[1, 2]))
    assert await session.get_message("m2") == msg("m2", "edited", role="assistant", extra=[1, 2])
    assert ids(await session.get_history()) == ["m1", "m2", "m3"]
    assert session.storage.scalar("SELECT role FROM assistant_messages WHERE id = 'm2'") == "assistant"


async def test_update_of_an_unknown_id_raises_and_writes_nothing(session):
    await chain(session, "m1")
    before = index_rows(session.storage)
    with pytest.raises(MessageNotFoundError) as info:
        await session.update_message(msg("ghost"))
    assert str(info.value) == "message 'ghost' not found"
    assert info.value.key == "ghost"
    assert index_rows(session.storage) == before
    assert row_count(session.storage) == 1


# -- delete --------------------------------------------------------------------


async def test_delete_reattaches_children_to_the_deleted_parent(session):
    await chain(session, "m1", "m2", "m3", "m5")
    assert await session.delete_messages(["m2"]) == 1
    assert ids(await session.get_history()) == ["m1", "m3", "m5"]
    assert ids(await session.get_branches("m1")) == ["m3"]
    assert await session.get_message("m2") is None


async def test_deleting_a_run_of_messages_keeps_the_chain_connected(session):
    await chain(session, "m1", "m2", "m3", "m4", "m5")
    assert await session.delete_messages(["m3", "m2", "missing", "m3"]) == 2
    assert ids(await session.get_history()) == ["m1", "m4", "m5"]


async def test_deleting_a_root_makes_its_children_roots(session):
    await chain(session, "m1", "m2", "m3")
    await session.delete_messages(["m1"])
    assert ids(await session.get_history()) == ["m2", "m3"]
    assert session.storage.scalar("SELECT parent_id FROM assistant_messages WHERE id = 'm2'") is None


async def test_deleting_the_leaf_falls_back_to_the_newest_leaf(session):
    await chain(session, "m1", "m2", "m3")
    await session.append_message(msg("b3"), "m2")
    await session.delete_messages(["b3"])
    assert (await session.get_latest_leaf())["id"] == "m3"
    assert ids(await session.get_history()) == ["m1", "m2", "m3"]
    await session.append_message(msg("m4"))
    assert ids(await session.get_history()) == ["m1", "m2", "m3", "m4"]


async def test_delete_messages_refuses_a_bare_string(session):
    await chain(session, "m1")
    with pytest.raises(InvalidInputError) as info:
        await session.delete_messages("m1")
    assert info.value.field == "message_ids"
    assert row_count(session.storage) == 1


# -- clear ---------------------------------------------------------------------


async def test_clear_removes_messages_compactions_search_rows_and_leaf(storage):
    keep = Session.create(storage).for_session("keep")
    await chain(keep, "k1")
    session = Session.create(storage).for_session("s")
    await chain(session, "m1", "m2")
    await session.add_compaction("sum", "m1", "m2")
    await session.clear_messages()
    assert await session.get_history() == []
    assert await session.get_compactions() == []
    assert storage.sql("SELECT session_id, id FROM assistant_messages") == [{"session_id": "keep", "id": "k1"}]
    assert [row["id"] for row in index_rows(storage)] == ["k1"]
    # the active leaf row is gone (Postgres keeps one; a SQLite file's latest leaf is its newest
    # message); clearing records an empty loaded-skill set (docs/behaviours.md §2)
    leaf_rows = [{"session_id": "keep", "key": "active_leaf", "value": "k1"}] if kind_of(storage) == "postgres" else []
    assert storage.sql("SELECT session_id, key, value FROM assistant_config ORDER BY session_id") == [
        *leaf_rows,
        {"session_id": "s", "key": "loaded_skills", "value": '{"v":1,"loaded":[]}'},
    ]
    await chain(session, "n1")
    assert ids(await session.get_history()) == ["n1"]


# -- overlay ids (docs/deviations.md #6) ----------------------------------------


async def test_echoed_overlay_message_is_not_stored(session):
    await chain(session, "m1", "m2", "m3", "m4")
    await session.add_compaction("summary of m2..m3", "m2", "m3")
    history = await session.get_history()
    assert ids(history)[0::2] == ["m1", "m4"] and history[1]["id"].startswith("compaction_")
    for message in history:  # a client sends the whole transcript back, plus one new message
        await session.append_message(message)
    assert await session.append_message(msg("m5")) is True
    assert row_count(session.storage) == 5
    assert await session.get_message(history[1]["id"]) is None
    assert ids(await session.get_history("m5"))[-2:] == ["m4", "m5"]
    assert session.storage.scalar("SELECT parent_id FROM assistant_messages WHERE id = 'm5'") == "m4"


async def test_overlay_id_as_parent_means_the_end_of_that_compaction(session):
    await chain(session, "m1", "m2", "m3")
    record = await session.add_compaction("sum", "m2", "m3")
    await session.append_message(msg("x"), "m1")
    await session.append_message(msg("after"), "compaction_" + record["id"])
    assert session.storage.scalar("SELECT parent_id FROM assistant_messages WHERE id = 'after'") == "m3"
    await session.append_message(msg("after2"), "compaction_unknown")
    assert session.storage.scalar("SELECT parent_id FROM assistant_messages WHERE id = 'after2'") == "after"


# -- concurrency ---------------------------------------------------------------


async def test_twenty_concurrent_first_appends_all_persist_in_arrival_order(session):
    arrivals = []
    go = trio.Event()

    async def writer(i):
        await go.wait()
        arrivals.append(f"m{i}")
        await session.append_message(msg(f"m{i}"))

    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(writer, i)
        await trio.sleep(0)
        go.set()
    assert len(arrivals) == 20
    assert ids(await session.get_history()) == arrivals
    assert await session.get_path_length() == 20


# -- the one write path (extension points) --------------------------------------


class RecordingSession(Session):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.changes = []

    def _before_store(self, message):
        return {**message, "seen": True}

    async def _after_write(self, change):
        self.changes.append(change)


async def test_every_write_passes_through_the_hooks(storage):
    session = RecordingSession(storage)
    await session.append_message(msg("m1"))
    await session.append_message(msg("m1"))
    await session.append_message(msg("compaction_x"))
    await session.update_message(msg("m1", "new"))
    assert await session.get_message("m1") == {**msg("m1", "new"), "seen": True}
    await session.delete_messages(["m1", "zz"])
    await session.clear_messages()
    assert [(c.kind, c.inserted, c.message_ids) for c in session.changes] == [
        ("append", True, ()),
        ("append", False, ()),
        ("append", False, ()),
        ("update", False, ()),
        ("delete", False, ("m1",)),
        ("clear", False, ()),
    ]
    assert session.changes[0] == MessagesChange("append", {**msg("m1"), "seen": True}, None, True)


# -- stored path length and size --------------------------------------------------


async def assert_places_match_walks(session):
    """get_path_length/totalContentBytes (stored per row) equal a fresh walk of each path."""
    for (mid,) in session.storage.exec("SELECT id FROM assistant_messages WHERE session_id = ?", session.session_id):
        walked = await session.get_history_row_stats(mid)
        assert await session.get_path_length(mid) == len(walked)
        recent = await session.get_recent_history(float("inf"), leaf_id=mid)
        assert recent["totalContentBytes"] == sum(r["bytes"] for r in walked)
        assert ids(recent["messages"]) == [r["id"] for r in walked]


async def test_path_length_and_size_stay_exact_through_random_edits(storage):
    import random

    rng = random.Random(2024)
    session = Session.create(storage).for_session("fuzz")
    live = []
    for step in range(400):
        action = rng.random()
        if action < 0.6 or not live:
            parent = rng.choice([LATEST_LEAF, None, "unknown", *(live[-5:] or [None])])
            mid = f"m{step}"
            await session.append_message(msg(mid, "é" * rng.randint(0, 40)), parent)
            live.append(mid)
        elif action < 0.8:
            await session.update_message(msg(rng.choice(live), "ü" * rng.randint(0, 80)))
        else:
            doomed = rng.sample(live, min(len(live), rng.randint(1, 3)))
            await session.delete_messages(doomed)
            live = [m for m in live if m not in doomed]
    assert len(live) > 60
    await assert_places_match_walks(session)


async def test_deleting_the_head_of_a_long_chain_updates_every_place_once(session):
    await chain(session, *[f"m{i}" for i in range(200)])
    assert await session.delete_messages([f"m{i}" for i in range(0, 100, 2)]) == 50
    assert await session.get_path_length() == 150
    await assert_places_match_walks(session)
