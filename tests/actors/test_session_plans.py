"""No Session call walks a whole session's rows to append, read a path or list children.

docs/performance.md: the original's latest-leaf self-join and its appends scan
the session. Here every statement the Session runs is captured with apsw's
exec tracer and explained: each touch of ``assistant_messages`` must be a
seek on more than ``session_id`` (or a rowid lookup).
"""

import re

import pytest

from actors.session import Session
from storage import SqlStorage

pytestmark = pytest.mark.both_storages

# A plan line that walks a whole session: a table scan of the messages, or a seek
# on session_id alone (assistant_compactions excepted: a session has few).
WHOLE_SESSION = re.compile(
    r"^(SCAN (m|k|c|assistant_messages)\b"
    r"|SEARCH (?!assistant_compactions )\w+ USING (COVERING )?INDEX \w+ \(session_id=\?\)$)"
)


def msg(mid):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": f"flight {mid}"}]}


@pytest.fixture
async def traced(tmp_path):
    storage = SqlStorage.open(tmp_path / "actor.sqlite3")
    session = Session.create(storage)
    other = Session.create(storage).for_session("other")
    with storage.transaction():
        for i in range(300):
            await session.append_message(msg(f"m{i}"))
            await other.append_message(msg(f"m{i}"))
    statements = []

    def trace(cursor, sql, bindings):
        statements.append((sql, bindings))
        return True

    storage.connection.exec_trace = trace
    yield storage, session, statements
    storage.connection.exec_trace = None
    storage.close()


def plans(storage, statements):
    storage.connection.exec_trace = None
    found = {}
    for sql, bindings in statements:
        if sql.lstrip().upper().startswith(("SAVEPOINT", "RELEASE", "BEGIN", "COMMIT", "ROLLBACK")):
            continue
        found[sql] = [row[3] for row in storage.connection.execute("EXPLAIN QUERY PLAN " + sql, bindings)]
    return found


# The one seek on session_id alone that reads a single entry: the session's newest row
# (``ORDER BY seq DESC LIMIT 1`` on idx_assistant_msg_seq), i.e. the latest leaf.
NEWEST_ROW = "SEARCH assistant_messages USING COVERING INDEX idx_assistant_msg_seq (session_id=?)"
NEWEST_ROW_SQL = "WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1"


def walks(sql, plan):
    """The lines of ``plan`` that walk a whole session."""
    return [p for p in plan if WHOLE_SESSION.match(p) and not (p == NEWEST_ROW and NEWEST_ROW_SQL in sql)]


@pytest.mark.parametrize("analyzed", [False, True])
async def test_hot_calls_seek_instead_of_walking_the_session(traced, analyzed):
    storage, session, statements = traced
    if analyzed:
        storage.exec("ANALYZE")
    await session.append_message(msg("new"))
    await session.append_message(msg("branch"), "m150")
    await session.append_message(msg("m3"))
    await session.get_branches("m150")
    await session.get_message("m7")
    await session.get_latest_leaf()
    await session.get_history()
    await session.get_path_length("m20")
    await session.get_recent_history(500)
    await session.update_message(msg("m9"))
    await session.delete_messages(["m10", "new"])
    await session.search("flight m42")
    explained = plans(storage, statements)
    assert len(explained) >= 10
    offenders = {sql: plan for sql, plan in explained.items() if walks(sql, plan)}
    assert offenders == {}


@pytest.mark.parametrize("analyzed", [False, True])
async def test_the_latest_leaf_is_one_seek_for_the_sessions_newest_row(traced, analyzed):
    storage, session, statements = traced
    if analyzed:
        storage.exec("ANALYZE")
    assert (await session.get_latest_leaf())["id"] == "m299"
    await session.delete_messages(["m299"])  # the newest message left takes over
    assert (await session.get_latest_leaf())["id"] == "m298"
    [lookup] = {sql for sql, _ in statements if NEWEST_ROW_SQL in sql and sql.lstrip().startswith("SELECT m.id")}
    plan = [row[3] for row in storage.connection.execute("EXPLAIN QUERY PLAN " + lookup, ("",))]
    assert plan == [
        "CO-ROUTINE l",
        NEWEST_ROW,
        "SCAN l",
        "SEARCH m USING INTEGER PRIMARY KEY (rowid=?)",
    ]
