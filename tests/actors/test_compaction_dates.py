"""Dates of compaction records (docs/behaviours.md §8, docs/deviations.md #2).

The original's ``getCompactions()`` gives ``createdAt`` as SQLite writes
``CURRENT_TIMESTAMP`` (``YYYY-MM-DD HH:MM:SS``, UTC); its ``addCompaction()``
and its overlay messages give JavaScript ``Date`` text (ISO-8601, ms, ``Z``).
Ours keep those two shapes, with the millisecond resolution of docs/deviations.md #2
in the SQLite one (``YYYY-MM-DD HH:MM:SS.SSS``, as session rows'
``created_at``), and all three name the one stored instant.
"""

import re

import pytest

from actors import SessionManager
from actors.session import Session

pytestmark = pytest.mark.both_storages

SQLITE_MS = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}$")
ISO_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def msg(mid):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": f"text of {mid}"}]}


def iso(sqlite_text):
    return sqlite_text.replace(" ", "T") + "Z"


async def test_compaction_records_carry_sqlite_time_and_overlays_iso_time(storage):
    session = Session.create(storage)
    for i in range(1, 5):
        await session.append_message(msg(f"m{i}"))
    added = await session.add_compaction("S", "m2", "m3")
    [record] = await session.get_compactions()
    assert ISO_MS.match(added["createdAt"])
    assert SQLITE_MS.match(record["createdAt"])
    assert {**record, "createdAt": iso(record["createdAt"])} == added
    stored = storage.scalar("SELECT created_at FROM assistant_compactions")
    assert record["createdAt"] == stored
    overlay = (await session.get_history())[1]
    assert (overlay["id"], overlay["createdAt"]) == (f"compaction_{record['id']}", added["createdAt"])


async def test_compaction_records_keep_their_order_within_one_millisecond(storage):
    session = Session.create(storage)
    for i in range(1, 5):
        await session.append_message(msg(f"m{i}"))
    added = [await session.add_compaction(f"S{i}", "m2", "m3") for i in range(3)]
    storage.exec("UPDATE assistant_compactions SET created_at = '2024-05-15 15:00:00.000'")
    records = await session.get_compactions()
    assert [r["id"] for r in records] == [a["id"] for a in added]
    assert {r["createdAt"] for r in records} == {"2024-05-15 15:00:00.000"}
    assert (await session.get_history())[1]["createdAt"] == "2024-05-15T15:00:00.000Z"


async def test_manager_compaction_records_carry_sqlite_time(storage):
    manager = SessionManager.create(storage)
    sid = (await manager.create("chat"))["id"]
    await manager.append_all(sid, [msg("m1"), msg("m2"), msg("m3")])
    added = await manager.add_compaction(sid, "S", "m1", "m2")
    [record] = await manager.get_compactions(sid)
    assert SQLITE_MS.match(record["createdAt"]) and ISO_MS.match(added["createdAt"])
    assert iso(record["createdAt"]) == added["createdAt"]
