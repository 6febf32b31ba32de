"""Compaction overlays on read, byte-budgeted recent history and row stats.

docs/behaviours.md §5 (getRecentHistory, getHistoryRowStats) and §8 (how
overlays are applied), with docs/deviations.md #13 (branch-local overlays).
"""

import re
import uuid

import pytest

from actors import InvalidInputError
from actors.session import Session

pytestmark = pytest.mark.both_storages

ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def msg(mid, text=None):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text or f"text of {mid}"}]}


def ids(messages):
    return [m["id"] for m in messages]


@pytest.fixture
async def session(storage):
    session = Session.create(storage)
    for i in range(1, 8):
        await session.append_message(msg(f"m{i}"))
    return session


def overlay_id(record):
    return "compaction_" + record["id"]


async def test_add_compaction_returns_the_stored_record(session):
    record = await session.add_compaction("Summary of m2..m4", "m2", "m4")
    assert set(record) == {"id", "summary", "fromMessageId", "toMessageId", "createdAt"}
    assert uuid.UUID(record["id"]).version == 4
    assert (record["summary"], record["fromMessageId"], record["toMessageId"]) == ("Summary of m2..m4", "m2", "m4")
    assert ISO_MS.match(record["createdAt"])
    # Read back as SQLite text (session-behaviours §8), the same instant.
    assert await session.get_compactions() == [{**record, "createdAt": record["createdAt"][:-1].replace("T", " ")}]


async def test_overlay_replaces_the_range_with_one_assistant_message(session):
    record = await session.add_compaction("Summary of m2..m4", "m2", "m4")
    history = await session.get_history()
    assert ids(history) == ["m1", overlay_id(record), "m5", "m6", "m7"]
    assert history[1] == {
        "id": overlay_id(record),
        "role": "assistant",
        "parts": [{"type": "text", "text": "Summary of m2..m4"}],
        "createdAt": record["createdAt"],
    }
    assert await session.get_path_length() == 7
    assert await session.get_message(overlay_id(record)) is None


async def test_reads_of_a_compacted_history_are_identical(session):
    await session.add_compaction("S", "m2", "m4")
    assert await session.get_history() == await session.get_history()


async def test_iterative_compactions_the_newest_from_the_same_start_wins(session):
    first = await session.add_compaction("first", "m2", "m4")
    second = await session.add_compaction("second", "m2", "m6")
    assert ids(await session.get_history()) == ["m1", overlay_id(second), "m7"]
    assert ids(await session.get_compactions()) == [first["id"], second["id"]]
    narrower = await session.add_compaction("narrower", "m2", "m3")
    assert ids(await session.get_history()) == ["m1", overlay_id(narrower), "m4", "m5", "m6", "m7"]


async def test_overlay_needs_both_ends_on_the_path(session):
    await session.add_compaction("ends later", "m5", "m99")
    await session.add_compaction("backwards", "m4", "m2")
    await session.add_compaction("starts elsewhere", "zz", "m3")
    assert ids(await session.get_history()) == ["m1", "m2", "m3", "m4", "m5", "m6", "m7"]
    single = await session.add_compaction("one message", "m7", "m7")
    assert ids(await session.get_history()) == ["m1", "m2", "m3", "m4", "m5", "m6", overlay_id(single)]


async def test_overlays_are_branch_local(session):
    # Branch B forks at m3: m1 m2 m3 b4 b5.
    await session.append_message(msg("b4"), "m3")
    await session.append_message(msg("b5"))
    on_main = await session.add_compaction("main m2..m5", "m2", "m5")
    on_branch = await session.add_compaction("branch m2..b4", "m2", "b4")
    assert ids(await session.get_history("m7")) == ["m1", overlay_id(on_main), "m6", "m7"]
    assert ids(await session.get_history("b5")) == ["m1", overlay_id(on_branch), "b5"]
    assert ids(await session.get_history("m3")) == ["m1", "m2", "m3"]


async def test_overlays_of_other_sessions_never_apply(storage):
    a = Session.create(storage).for_session("a")
    b = Session.create(storage).for_session("b")
    for s in (a, b):
        for i in (1, 2, 3):
            await s.append_message(msg(f"m{i}"))
    await a.add_compaction("only in a", "m1", "m2")
    assert ids(await b.get_history()) == ["m1", "m2", "m3"]
    assert await b.get_compactions() == []


@pytest.mark.parametrize("bad", [("s", "m1", None), (None, "m1", "m2"), ("s", 1, "m2")])
async def test_add_compaction_refuses_non_strings(session, bad):
    with pytest.raises(InvalidInputError):
        await session.add_compaction(*bad)
    assert await session.get_compactions() == []


# -- row stats and recent history ---------------------------------------------


def size(message_id):
    """UTF-8 bytes of msg(message_id) as stored."""
    text = f"text of {message_id}"
    return len(f'{{"id":"{message_id}","role":"user","parts":[{{"type":"text","text":"{text}"}}]}}'.encode())


async def test_row_stats_give_utf8_json_bytes_root_to_leaf(storage):
    session = Session.create(storage)
    await session.append_message(msg("a", "héllo"))
    await session.append_message({"id": "b", "role": "assistant", "parts": []})
    first = '{"id":"a","role":"user","parts":[{"type":"text","text":"héllo"}]}'
    assert await session.get_history_row_stats() == [
        {"id": "a", "role": "user", "bytes": len(first.encode())},
        {"id": "b", "role": "assistant", "bytes": len(b'{"id":"b","role":"assistant","parts":[]}')},
    ]
    assert await session.get_history_row_stats("a") == (await session.get_history_row_stats())[:1]


async def test_recent_history_takes_the_newest_rows_that_fit(session):
    total = sum(size(f"m{i}") for i in range(1, 8))
    budget = size("m7") + size("m6") + size("m5")
    result = await session.get_recent_history(budget)
    assert ids(result["messages"]) == ["m5", "m6", "m7"]
    assert result["truncated"] is True
    assert result["totalContentBytes"] == total
    assert ids((await session.get_recent_history(budget - 1))["messages"]) == ["m6", "m7"]
    everything = await session.get_recent_history(total)
    assert ids(everything["messages"]) == [f"m{i}" for i in range(1, 8)] and everything["truncated"] is False


async def test_recent_history_always_holds_the_leaf_and_min_recent_rows(session):
    assert ids((await session.get_recent_history(0))["messages"]) == ["m7"]
    assert ids((await session.get_recent_history(0, 3))["messages"]) == ["m5", "m6", "m7"]
    budget = size("m7") + size("m6") + size("m5") + size("m4")
    assert ids((await session.get_recent_history(budget, 2))["messages"]) == ["m4", "m5", "m6", "m7"]
    assert ids((await session.get_recent_history(10_000, 1, leaf_id="m3"))["messages"]) == ["m1", "m2", "m3"]


async def test_recent_history_applies_overlays_inside_the_window_only(session):
    inside = await session.add_compaction("m5..m6", "m5", "m6")
    await session.add_compaction("m2..m6", "m2", "m6")
    window = await session.get_recent_history(size("m7") + size("m6") + size("m5") + size("m4"))
    assert ids(window["messages"]) == ["m4", overlay_id(inside), "m7"]


@pytest.mark.parametrize("bad", ["10", None, float("nan")])
async def test_recent_history_refuses_a_non_number_budget(session, bad):
    with pytest.raises(InvalidInputError) as info:
        await session.get_recent_history(bad)
    assert info.value.field == "max_bytes"
