"""Hibernation is invisible: closing and reopening the storage changes no read (docs/deviations.md #3).

Closing the :class:`SqlStorage` and opening the same file again (on
Postgres: a new ``PostgresStorage`` on the same database) stands in for an
actor that hibernated (or whose process restarted) between calls.
"""

import pytest

from actors.session import Session
from tests.support.backends import reopen

pytestmark = pytest.mark.both_storages


def msg(mid, text=None, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text or f"note about {mid} flights"}]}


async def build(session):
    """A tree with a branch, a deletion, an update, a root restart and a compaction."""
    for mid in ("m1", "m2", "m3", "m4", "m5"):
        await session.append_message(msg(mid))
    await session.append_message(msg("b3", "branch reply about refunds"), "m2")
    await session.append_message(msg("b4"))
    await session.delete_messages(["m3"])
    await session.update_message(msg("m2", "edited question about refunds", role="assistant"))
    await session.add_compaction("summary of m1..m2", "m1", "m2")
    await session.add_compaction("summary of m4..m5", "m4", "m5")
    await session.append_message(msg("b5"))


async def every_read(session):
    return {
        "history": await session.get_history(),
        "history_m5": await session.get_history("m5"),
        "history_unknown": await session.get_history("nope"),
        "leaf": await session.get_latest_leaf(),
        "path_length": await session.get_path_length(),
        "path_length_m5": await session.get_path_length("m5"),
        "branches_m2": await session.get_branches("m2"),
        "message_m2": await session.get_message("m2"),
        "compactions": await session.get_compactions(),
        "search_refunds": await session.search("refunds"),
        "search_flights": await session.search("flights"),
        "row_stats": await session.get_history_row_stats(),
        "recent": await session.get_recent_history(120, 2),
    }


@pytest.mark.parametrize("session_id", ["", "s-42"])
async def test_every_read_is_identical_after_reopening_the_file(storage, session_id):
    await build(Session.create(storage).for_session(session_id))
    before = await every_read(Session.create(storage).for_session(session_id))

    reopened = reopen(storage)
    after = await every_read(Session.create(reopened).for_session(session_id))
    assert after == before
    assert [m["id"] for m in after["history"]][-2:] == ["b4", "b5"]
    await Session.create(reopened).for_session(session_id).append_message(msg("b6"))
    assert (await Session.create(reopened).for_session(session_id).get_history("b6"))[-2]["id"] == "b5"
    reopened.close()


async def test_the_active_leaf_survives_reopening_even_when_timestamps_disagree(storage):
    # A clock that stepped backwards makes the last append look older than a
    # sibling leaf. Only the persisted active leaf still names the last append.
    session = Session.create(storage)
    for mid in ("m1", "m2", "m3"):
        await session.append_message(msg(mid))
    await session.append_message(msg("b3"), "m2")
    storage.exec("UPDATE assistant_messages SET created_at = '2999-01-01 00:00:00.000' WHERE id = 'm3'")
    assert (await session.get_latest_leaf())["id"] == "b3"

    reopened = reopen(storage)
    session = Session.create(reopened)
    assert (await session.get_latest_leaf())["id"] == "b3"
    assert [m["id"] for m in await session.get_history()] == ["m1", "m2", "b3"]
    await session.delete_messages(["b3"])  # now the newest childless message decides
    assert (await session.get_latest_leaf())["id"] == "m3"
    reopened.close()


@pytest.mark.sqlite_only("the file orders by insertion; Postgres still falls back to created_at (docs/deviations.md #3)")
async def test_once_the_last_append_is_deleted_insertion_order_decides_not_the_clock(storage):
    # The clock stepped backwards after m3: b3 and c4 were appended later but look older.
    session = Session.create(storage)
    for mid in ("m1", "m2", "m3"):
        await session.append_message(msg(mid))
    await session.append_message(msg("b3"), "m2")
    await session.append_message(msg("c4"))
    storage.exec("UPDATE assistant_messages SET created_at = '2999-01-01 00:00:00.000' WHERE id = 'm3'")
    await session.delete_messages(["c4"])
    assert (await session.get_latest_leaf())["id"] == "b3"  # the newest message left, whatever its stamp
    reopened = reopen(storage)
    session = Session.create(reopened)
    assert (await session.get_latest_leaf())["id"] == "b3"
    assert [m["id"] for m in await session.get_history()] == ["m1", "m2", "b3"]
    await session.append_message(msg("c5"))
    assert [m["id"] for m in await session.get_history()] == ["m1", "m2", "b3", "c5"]
    reopened.close()
