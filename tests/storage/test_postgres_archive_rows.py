"""The SQL of import with the sessions in Postgres (storage/postgres/archive_rows.py) on a real Postgres: an
import of many messages writes them in a few statements, whatever their number.

Each statement writing messages fires the catalog's statement-level triggers, which update the session's
``durable_sessions_catalog`` row; in one transaction each update of that row walks every earlier version of
it, so one statement per message made a large import quadratic. The catalog row's ``cmin`` -- the command
number, inside the import's transaction, of the statement that left its final version -- counts the writing
statements before it without timing anything."""

from __future__ import annotations

import json

import pytest

from common.errors import InvalidInputError
from storage.fts import parse_query
from storage.postgres import PostgresSessionProvider
from storage.postgres.archive_rows import ArchivedChain, export_rows, import_rows
from storage.postgres.connection import runner_for
from storage.tree.rows import NewMessage

KEY = "a" * 64
COUNT = 300


def row(i: int) -> NewMessage:
    return NewMessage(f"m{i}", "user", json.dumps({"id": f"m{i}", "role": "user", "parts": []}), f"text {i}", "", 3)


async def test_an_import_of_many_messages_writes_them_in_a_few_statements(pg_storage):
    times = [(f"m{i}", f"2026-12-01 09:{i // 60:02d}:{i % 60:02d}.120") for i in range(COUNT)]
    rows = [row(i) for i in range(COUNT)]
    chain = ArchivedChain([m.id for m in rows], None, lambda: rows)
    await pg_storage.runner.run(import_rows(KEY, [chain], times, []), write=True)
    statements = int(pg_storage.scalar("SELECT cmin::text::int FROM durable_sessions_catalog WHERE session_id = ?",
                                       KEY))
    assert statements < 20  # one per message would be >= COUNT
    assert pg_storage.scalar("SELECT messages FROM durable_sessions_catalog WHERE session_id = ?", KEY) == COUNT
    records = await pg_storage.runner.run(export_rows(KEY), write=True)
    messages = [record for record in records if record["type"] == "message"]
    assert [(m["id"], m["createdAt"]) for m in messages] == times
    assert [m["parentId"] for m in messages] == [None] + [f"m{i}" for i in range(COUNT - 1)]


def tree() -> tuple[list[ArchivedChain], list[tuple[str, str]]]:
    """A main line with side branches, a run under a message that comes later (stored as a root) and one
    under an unknown id (a root too): every way ``append_chain`` places a chain."""
    runs: list[tuple[list[NewMessage], str | None]] = [
        ([row(i) for i in range(0, 40)], None),
        ([row(i) for i in range(100, 103)], "m10"),
        ([row(i) for i in range(200, 205)], "m250"),  # m250 comes later: a root when stored
        ([row(i) for i in range(40, 80)], "m39"),
        ([row(i) for i in range(250, 260)], "m102"),
        ([row(i) for i in range(300, 302)], "nowhere"),
    ]
    chains = [ArchivedChain([m.id for m in rows], parent, lambda rows=rows: rows) for rows, parent in runs]
    times = [(m.id, f"2026-12-01 10:00:{n % 60:02d}.{n:03d}") for n, m in
             enumerate(m for rows, _ in runs for m in rows)]
    return chains, times


_STORED = """
SELECT m.id, m.parent_id, m.role, m.content, m.text_content, m.tools_content, m.search_tsv::text AS tsv,
       to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS created, m.depth, m.path_bytes,
       m.tokens, m.path_tokens, j.id AS jump
FROM assistant_messages AS m LEFT JOIN assistant_messages AS j ON j.seq = m.jump_seq
WHERE m.session_id = ? ORDER BY m.seq
"""


async def test_one_copy_stores_what_the_chain_by_chain_path_stores(pg_storage, monkeypatch):
    import storage.postgres.archive_rows as archive_rows

    chains, times = tree()
    await pg_storage.runner.run(import_rows(KEY, chains, times, []), write=True)
    copied = int(pg_storage.scalar("SELECT cmin::text::int FROM durable_sessions_catalog WHERE session_id = ?", KEY))
    monkeypatch.setattr(archive_rows, "_plain", lambda chains, times: False)
    other = "b" * 64
    await pg_storage.runner.run(import_rows(other, chains, times, []), write=True)
    chained = int(pg_storage.scalar("SELECT cmin::text::int FROM durable_sessions_catalog WHERE session_id = ?",
                                    other))
    assert copied < chained  # the COPY path did take fewer statements
    stored = pg_storage.sql(_STORED, KEY)
    assert len(stored) == 100
    assert stored == pg_storage.sql(_STORED, other)
    roots = {row["id"] for row in stored if row["parent_id"] is None}
    assert roots == {"m0", "m200", "m300"}
    by_id = {row["id"]: row for row in stored}
    assert (by_id["m259"]["depth"], by_id["m259"]["parent_id"]) == (24, "m258")  # m0..m10, m100..m102, m250..m259
    assert [(row["id"], row["created"]) for row in stored] == times
    for key in (KEY, other):
        assert pg_storage.scalar("SELECT messages FROM durable_sessions_catalog WHERE session_id = ?", key) == 100
    hits = await PostgresSessionProvider(pg_storage, KEY).search(parse_query("text 251"), 5)
    assert [hit.id for hit in hits][:1] == ["m251"]


async def test_a_chain_refused_while_the_copy_streams_stores_nothing(pg_storage):
    chains, times = tree()

    def refused() -> list[NewMessage]:
        raise InvalidInputError("messages[0].role must be a string", field="messages[0].role")

    bad = [*chains[:4], ArchivedChain(chains[4].ids, chains[4].parent, refused), chains[5]]
    with pytest.raises(InvalidInputError, match="role must be a string"):
        await pg_storage.runner.run(import_rows(KEY, bad, times, []), write=True)
    assert pg_storage.scalar("SELECT count(*) FROM assistant_messages WHERE session_id = ?", KEY) == 0
    assert pg_storage.scalar("SELECT count(*) FROM durable_sessions_catalog WHERE session_id = ?", KEY) == 0
    wrong = [ArchivedChain(["x1", "x2"], None, lambda: [row(1), row(2)])]
    with pytest.raises(InvalidInputError, match="other ids than their records"):
        await pg_storage.runner.run(import_rows(KEY, wrong, [("x1", times[0][1]), ("x2", times[1][1])], []),
                                    write=True)
    await pg_storage.runner.run(import_rows(KEY, chains, times, []), write=True)  # the connection goes on
    assert pg_storage.scalar("SELECT count(*) FROM assistant_messages WHERE session_id = ?", KEY) == 100


async def test_repeated_ids_are_stored_once_as_append_chain_stores_them(pg_storage):
    first = [row(0), row(1)]
    again = [row(1), row(2)]  # m1 again: kept as stored first, m2 goes under it
    chains = [ArchivedChain(["m0", "m1"], None, lambda: first), ArchivedChain(["m1", "m2"], "m0", lambda: again)]
    times = [("m0", "2026-12-01 10:00:00.000"), ("m1", "2026-12-01 10:00:01.000"), ("m2", "2026-12-01 10:00:02.000")]
    await pg_storage.runner.run(import_rows(KEY, chains, times, []), write=True)
    stored = pg_storage.sql(_STORED, KEY)
    assert [(r["id"], r["parent_id"], r["depth"], r["created"]) for r in stored] == [
        ("m0", None, 1, "2026-12-01 10:00:00.000"), ("m1", "m0", 2, "2026-12-01 10:00:01.000"),
        ("m2", "m1", 3, "2026-12-01 10:00:02.000")]


async def test_an_execute_object_imports_row_by_row(pg_empty_dsn):
    from storage.postgres import create_schema
    from tests.storage.test_postgres_failures import QmarkConnection

    conn = QmarkConnection(pg_empty_dsn)
    try:
        await create_schema(conn)
        chains, times = tree()
        conn.statements.clear()
        await runner_for(conn).run(import_rows(KEY, chains, times, []), write=True)
        assert conn.statements.count("INSERT") >= 100  # no COPY through execute(): one INSERT per row
        rows = conn.conn.execute("SELECT id, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') "
                                 "FROM assistant_messages WHERE session_id = %s ORDER BY seq", [KEY]).fetchall()
        assert rows == times
    finally:
        conn.conn.close()
