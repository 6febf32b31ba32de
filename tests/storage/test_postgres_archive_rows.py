"""The SQL of import with the sessions in Postgres (storage/postgres/archive_rows.py) on a real Postgres: an
import of many messages writes them in a few statements, whatever their number.

Each statement writing messages fires the catalog's statement-level triggers, which update the session's
``durable_sessions_catalog`` row; in one transaction each update of that row walks every earlier version of
it, so one statement per message made a large import quadratic. The catalog row's ``cmin`` -- the command
number, inside the import's transaction, of the statement that left its final version -- counts the writing
statements before it without timing anything."""

from __future__ import annotations

import json

from storage.postgres.archive_rows import export_rows, import_rows
from storage.tree.rows import NewMessage

KEY = "a" * 64
COUNT = 300


def row(i: int) -> NewMessage:
    return NewMessage(f"m{i}", "user", json.dumps({"id": f"m{i}", "role": "user", "parts": []}), f"text {i}", "", 3)


async def test_an_import_of_many_messages_writes_them_in_a_few_statements(pg_storage):
    times = [(f"m{i}", f"2026-12-01 09:{i // 60:02d}:{i % 60:02d}.120") for i in range(COUNT)]
    await pg_storage.runner.run(import_rows(KEY, [([row(i) for i in range(COUNT)], None)], times, []), write=True)
    statements = int(pg_storage.scalar("SELECT cmin::text::int FROM durable_sessions_catalog WHERE session_id = ?",
                                       KEY))
    assert statements < 20  # one per message would be >= COUNT
    assert pg_storage.scalar("SELECT messages FROM durable_sessions_catalog WHERE session_id = ?", KEY) == COUNT
    records = await pg_storage.runner.run(export_rows(KEY), write=True)
    messages = [record for record in records if record["type"] == "message"]
    assert [(m["id"], m["createdAt"]) for m in messages] == times
    assert [m["parentId"] for m in messages] == [None] + [f"m{i}" for i in range(COUNT - 1)]
