"""SessionManager: registry rows, list order, messages, usage, unknown ids (docs/behaviours.md §13).

With docs/deviations.md #1 (ids per session), #2 (ties by write order), #7 (append_all
continues the conversation).
"""

import re
import uuid

import pytest

from actors import InvalidInputError, InvalidMessageError, NotFoundError, Session, SessionManager
from storage import SqlStorage
from storage.registry import SESSION_COLUMNS
from tests.support.backends import row_count

pytestmark = pytest.mark.both_storages

STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$")


def msg(mid, text=None, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text or f"text of {mid}"}]}


def ids(messages):
    return [m["id"] for m in messages]


@pytest.fixture
def manager(storage):
    return SessionManager.create(storage)


def names(rows):
    return [row["name"] for row in rows]


def set_updated_at(storage, session_id, stamp):
    storage.exec("UPDATE assistant_sessions SET updated_at = ? WHERE id = ?", stamp, session_id)


# -- creating the manager -----------------------------------------------------------


async def test_create_accepts_storage_or_an_object_with_storage(storage, recording_agent):
    manager = SessionManager.create(recording_agent)
    assert manager.storage is storage
    row = await manager.create("chat")
    session = await manager.get_session(row["id"])
    assert session.broadcaster == recording_agent.broadcast
    assert session.storage is storage


def test_create_refuses_a_target_without_storage():
    expected = (r"SessionManager.create\(\) needs a SqlStorage or a PostgresStorage, "
                r"or an object whose .storage is one, not int")
    with pytest.raises(TypeError, match=expected):
        SessionManager.create(3)


# -- lifecycle -------------------------------------------------------------------------


async def test_create_returns_the_full_row(manager):
    row = await manager.create("My Chat")
    assert list(row) == list(SESSION_COLUMNS)
    assert uuid.UUID(row["id"]).version == 4
    assert {k: v for k, v in row.items() if k not in ("id", "created_at", "updated_at")} == {
        "name": "My Chat",
        "parent_session_id": None,
        "model": None,
        "source": None,
        "input_tokens": 0,
        "output_tokens": 0,
        "estimated_cost": 0.0,
        "end_reason": None,
    }
    assert STAMP.match(row["created_at"])
    assert row["updated_at"] == row["created_at"]
    assert await manager.get(row["id"]) == row


async def test_create_records_parent_model_and_source(manager):
    row = await manager.create("x", parent_session_id="p-1", model="claude-sonnet-4-20250514", source="web")
    assert (row["parent_session_id"], row["model"], row["source"]) == ("p-1", "claude-sonnet-4-20250514", "web")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"name": 1}, "name"), ({"name": "x", "model": 2}, "model"), ({"name": "x", "source": b"w"}, "source"),
     ({"name": "x", "parent_session_id": 5}, "parent_session_id")],
)
async def test_create_refuses_non_string_fields(manager, kwargs, field):
    kwargs = dict(kwargs)  # the parameter dict is shared by the runs on each storage
    name = kwargs.pop("name")
    with pytest.raises(InvalidInputError) as info:
        await manager.create(name, **kwargs)
    assert info.value.field == field
    assert await manager.list() == []


async def test_get_of_an_unknown_id_is_none(manager):
    assert await manager.get("nope") is None


async def test_list_is_newest_first_and_follows_renames_and_appends(manager):
    a = await manager.create("A")
    b = await manager.create("B")
    c = await manager.create("C")
    assert names(await manager.list()) == ["C", "B", "A"]
    await manager.rename(a["id"], "A2")
    assert names(await manager.list()) == ["A2", "C", "B"]
    await manager.append(b["id"], msg("m1"))
    assert names(await manager.list()) == ["B", "A2", "C"]
    await manager.add_usage(c["id"], 1, 1, 0.1)
    assert names(await manager.list()) == ["C", "B", "A2"]


async def test_reads_and_duplicate_appends_do_not_touch(manager):
    a = await manager.create("A")
    await manager.append(a["id"], msg("m1"))
    b = await manager.create("B")
    await manager.append(a["id"], msg("m1", "other text"))  # duplicate: nothing stored
    await manager.get_history(a["id"])
    await manager.get_message_count(a["id"])
    await manager.get_branches(a["id"], "m1")
    await manager.get_compactions(a["id"])
    await manager.get_session(a["id"])
    assert names(await manager.list()) == ["B", "A"]
    assert (await manager.get(b["id"]))["updated_at"] >= (await manager.get(a["id"]))["updated_at"]


async def test_list_breaks_same_millisecond_ties_by_the_later_write(manager, storage):
    rows = [await manager.create(n) for n in ("A", "B", "C")]
    await manager.rename(rows[0]["id"], "A")  # A is written last
    for row in rows:
        set_updated_at(storage, row["id"], "2025-01-01 00:00:00.000")
    assert names(await manager.list()) == ["A", "C", "B"]


async def test_list_orders_by_updated_at_before_write_order(manager, storage):
    a = await manager.create("A")
    b = await manager.create("B")
    set_updated_at(storage, a["id"], "2999-01-01 00:00:00.000")
    set_updated_at(storage, b["id"], "2000-01-01 00:00:00.000")
    assert names(await manager.list()) == ["A", "B"]


async def test_rename_sets_the_name_and_touches(manager, storage):
    row = await manager.create("old")
    set_updated_at(storage, row["id"], "2000-01-01 00:00:00.000")
    renamed = await manager.rename(row["id"], "new")
    assert renamed["name"] == "new"
    assert renamed["updated_at"] > "2000-01-01 00:00:00.000"
    assert renamed["created_at"] == row["created_at"]
    assert await manager.get(row["id"]) == renamed


async def test_get_session_is_cached_and_scoped(manager):
    row = await manager.create("chat")
    session = await manager.get_session(row["id"])
    assert isinstance(session, Session)
    assert session.session_id == row["id"]
    assert await manager.get_session(row["id"]) is session


# -- messages ---------------------------------------------------------------------------------


async def test_two_sessions_may_hold_the_same_message_id(manager):
    a = await manager.create("A")
    b = await manager.create("B")
    assert await manager.append(a["id"], msg("m1", "alpha")) == "m1"
    assert await manager.append(b["id"], msg("m1", "beta")) == "m1"
    assert await manager.get_history(a["id"]) == [msg("m1", "alpha")]
    assert await manager.get_history(b["id"]) == [msg("m1", "beta")]


async def test_append_chains_from_the_latest_leaf_or_the_given_parent(manager):
    sid = (await manager.create("chat"))["id"]
    await manager.append(sid, msg("m1"))
    await manager.append(sid, msg("m2"))
    await manager.append(sid, msg("b2"), "m1")
    assert ids(await manager.get_history(sid)) == ["m1", "b2"]
    assert ids(await manager.get_history(sid, "m2")) == ["m1", "m2"]
    assert ids(await manager.get_branches(sid, "m1")) == ["m2", "b2"]
    assert await manager.get_message_count(sid) == 2


async def test_upsert_updates_a_stored_message_and_appends_a_new_one(manager):
    sid = (await manager.create("chat"))["id"]
    assert await manager.upsert(sid, msg("m1", "first")) == "m1"
    assert await manager.upsert(sid, msg("m2", "second")) == "m2"
    assert await manager.upsert(sid, msg("m1", "first, edited")) == "m1"
    assert await manager.get_history(sid) == [msg("m1", "first, edited"), msg("m2", "second")]
    assert await manager.upsert(sid, msg("r", "root"), None) == "r"
    assert await manager.get_history(sid) == [msg("r", "root")]


async def test_append_all_continues_the_conversation(manager):
    sid = (await manager.create("chat"))["id"]
    assert await manager.append_all(sid, [msg("m1"), msg("m2")]) == "m2"
    assert await manager.append_all(sid, [msg("m3"), msg("m4")]) == "m4"
    assert ids(await manager.get_history(sid)) == ["m1", "m2", "m3", "m4"]


async def test_append_all_skips_echoed_messages_and_chains_on(manager):
    sid = (await manager.create("chat"))["id"]
    await manager.append_all(sid, [msg("m1"), msg("m2")])
    assert await manager.append_all(sid, [msg("m1"), msg("m2"), msg("m3")]) == "m3"
    assert ids(await manager.get_history(sid)) == ["m1", "m2", "m3"]
    assert await manager.get_message_count(sid) == 3


async def test_append_all_with_parent_none_starts_a_new_root(manager):
    sid = (await manager.create("chat"))["id"]
    await manager.append_all(sid, [msg("m1"), msg("m2")])
    await manager.append_all(sid, [msg("r1"), msg("r2")], None)
    assert ids(await manager.get_history(sid)) == ["r1", "r2"]
    await manager.append_all(sid, [msg("c3")], "m1")
    assert ids(await manager.get_history(sid)) == ["m1", "c3"]


async def test_append_all_of_nothing_returns_none(manager):
    sid = (await manager.create("chat"))["id"]
    assert await manager.append_all(sid, []) is None


async def test_append_all_checks_every_message_before_storing_any(manager):
    sid = (await manager.create("chat"))["id"]
    with pytest.raises(InvalidMessageError, match=r"^messages\[1\]\.parts is missing$") as caught:
        await manager.append_all(sid, [msg("m1"), {"id": "m2", "role": "user"}])
    assert caught.value.field == "messages[1].parts"
    assert await manager.get_history(sid) == []
    with pytest.raises(InvalidInputError, match="messages must be a list of messages"):
        await manager.append_all(sid, msg("m1"))


async def test_clear_messages_keeps_the_row_and_touches(manager, storage):
    sid = (await manager.create("chat"))["id"]
    await manager.append_all(sid, [msg("m1"), msg("m2")])
    await manager.add_compaction(sid, "sum", "m1", "m2")
    set_updated_at(storage, sid, "2000-01-01 00:00:00.000")
    await manager.clear_messages(sid)
    assert await manager.get_history(sid) == []
    assert await manager.get_compactions(sid) == []
    assert (await manager.get(sid))["updated_at"] > "2000-01-01 00:00:00.000"


async def test_delete_messages_reattaches_children_and_touches(manager, storage):
    sid = (await manager.create("chat"))["id"]
    await manager.append_all(sid, [msg("m1"), msg("m2"), msg("m3")])
    set_updated_at(storage, sid, "2000-01-01 00:00:00.000")
    assert await manager.delete_messages(sid, ["m2", "unknown"]) == 1
    assert ids(await manager.get_history(sid)) == ["m1", "m3"]
    assert (await manager.get(sid))["updated_at"] > "2000-01-01 00:00:00.000"
    set_updated_at(storage, sid, "2000-01-01 00:00:00.000")
    assert await manager.delete_messages(sid, ["unknown"]) == 0
    assert (await manager.get(sid))["updated_at"] == "2000-01-01 00:00:00.000"


async def test_writes_through_the_session_object_touch_the_row(manager, storage):
    sid = (await manager.create("chat"))["id"]
    session = await manager.get_session(sid)
    set_updated_at(storage, sid, "2000-01-01 00:00:00.000")
    await session.append_message(msg("m1"))
    assert (await manager.get(sid))["updated_at"] > "2000-01-01 00:00:00.000"


# -- compactions and usage ---------------------------------------------------------------------------


async def test_add_compaction_overlays_history_and_touches(manager, storage):
    sid = (await manager.create("chat"))["id"]
    await manager.append_all(sid, [msg("m1"), msg("m2"), msg("m3"), msg("m4")])
    set_updated_at(storage, sid, "2000-01-01 00:00:00.000")
    record = await manager.add_compaction(sid, "summary of m2..m3", "m2", "m3")
    assert (record["summary"], record["fromMessageId"], record["toMessageId"]) == ("summary of m2..m3", "m2", "m3")
    assert await manager.get_compactions(sid) == [{**record, "createdAt": record["createdAt"][:-1].replace("T", " ")}]
    history = await manager.get_history(sid)
    assert ids(history) == ["m1", f"compaction_{record['id']}", "m4"]
    assert history[1]["parts"] == [{"type": "text", "text": "summary of m2..m3"}]
    assert await manager.get_message_count(sid) == 4
    assert (await manager.get(sid))["updated_at"] > "2000-01-01 00:00:00.000"


async def test_add_usage_sums_exactly(manager):
    sid = (await manager.create("chat"))["id"]
    first = await manager.add_usage(sid, 100, 50, 0.25)
    assert (first["input_tokens"], first["output_tokens"], first["estimated_cost"]) == (100, 50, 0.25)
    second = await manager.add_usage(sid, 1, 2, 0.5)
    assert (second["input_tokens"], second["output_tokens"], second["estimated_cost"]) == (101, 52, 0.75)
    assert await manager.get(sid) == second


@pytest.mark.parametrize(
    ("args", "field"),
    [((-1, 0, 0), "input_tokens"), ((0, 1.5, 0), "output_tokens"), ((True, 0, 0), "input_tokens"),
     ((0, 0, -0.1), "cost"), ((0, 0, float("nan")), "cost"), ((0, 0, "1"), "cost")],
)
async def test_add_usage_refuses_bad_numbers(manager, args, field):
    sid = (await manager.create("chat"))["id"]
    with pytest.raises(InvalidInputError) as info:
        await manager.add_usage(sid, *args)
    assert info.value.field == field
    row = await manager.get(sid)
    assert (row["input_tokens"], row["output_tokens"], row["estimated_cost"]) == (0, 0, 0.0)


# -- unknown sessions ----------------------------------------------------------------------------------

UNKNOWN_CALLS = {
    "get_session": lambda m: m.get_session("nope"),
    "rename": lambda m: m.rename("nope", "x"),
    "delete": lambda m: m.delete("nope"),
    "append": lambda m: m.append("nope", msg("m1")),
    "upsert": lambda m: m.upsert("nope", msg("m1")),
    "append_all": lambda m: m.append_all("nope", [msg("m1")]),
    "get_history": lambda m: m.get_history("nope"),
    "get_message_count": lambda m: m.get_message_count("nope"),
    "get_branches": lambda m: m.get_branches("nope", "m1"),
    "clear_messages": lambda m: m.clear_messages("nope"),
    "delete_messages": lambda m: m.delete_messages("nope", ["m1"]),
    "add_compaction": lambda m: m.add_compaction("nope", "s", "m1", "m1"),
    "get_compactions": lambda m: m.get_compactions("nope"),
    "compact_and_split": lambda m: m.compact_and_split("nope", "s"),
    "fork": lambda m: m.fork("nope", "m1", "f"),
    "add_usage": lambda m: m.add_usage("nope", 1, 1, 0.1),
}


@pytest.mark.parametrize("call", sorted(UNKNOWN_CALLS))
async def test_unknown_session_ids_raise_not_found_and_write_nothing(manager, storage, call):
    with pytest.raises(NotFoundError, match=r"^session 'nope' not found$") as info:
        await UNKNOWN_CALLS[call](manager)
    assert (info.value.kind, info.value.key, info.value.status) == ("session", "nope", 404)
    assert row_count(storage, "assistant_messages") == 0
    assert await manager.list() == []


async def test_a_deleted_session_is_unknown_even_to_its_cached_object(manager):
    sid = (await manager.create("chat"))["id"]
    await manager.get_session(sid)
    await manager.delete(sid)
    with pytest.raises(NotFoundError):
        await manager.get_session(sid)
    assert await manager.get(sid) is None


async def test_a_new_manager_on_the_reopened_file_sees_everything(tmp_path):
    path = tmp_path / "actor.sqlite3"
    storage = SqlStorage.open(path)
    manager = SessionManager.create(storage)
    a = (await manager.create("A", model="m"))["id"]
    b = (await manager.create("B"))["id"]
    await manager.append_all(a, [msg("m1", "first question"), msg("m2", "first answer", "assistant")])
    await manager.append_all(b, [msg("m1", "other question")])
    await manager.add_usage(a, 10, 20, 0.5)
    await manager.rename(b, "B2")
    before = (await manager.list(), await manager.get_history(a), await manager.get_history(b),
              await manager.search("question"))
    storage.close()

    reopened = SqlStorage.open(path)
    try:
        again = SessionManager.create(reopened)
        after = (await again.list(), await again.get_history(a), await again.get_history(b),
                 await again.search("question"))
        assert after == before
        await again.append(a, msg("m3", "next question"))
        assert ids(await again.get_history(a)) == ["m1", "m2", "m3"]
        assert names(await again.list()) == ["A", "B2"]
    finally:
        reopened.close()
