"""Ranking of text matches does not depend on tool calls (session-behaviours §11).

The original indexes only a message's text parts, in
``fts5(id UNINDEXED, session_id UNINDEXED, role UNINDEXED, content,
tokenize='porter unicode61')``, one row per message with text, and orders
hits by that table's bm25 ``rank``. Tool calls are searchable here too
(docs/deviations.md), but FTS5's bm25 counts a row's length over all its
columns, so they must not share a row with the text. Expected orders are
computed on a table made with the original's DDL.
"""

import random

import apsw
import pytest

from actors import SessionManager
from actors.context import AgentSearchProvider
from actors.session import Session

ORIGINAL_DDL = ("CREATE VIRTUAL TABLE assistant_fts USING fts5(id UNINDEXED, session_id UNINDEXED, "
                "role UNINDEXED, content, tokenize='porter unicode61')")


def text_msg(mid, text, *tools, role="user"):
    parts = [{"type": "text", "text": text}] if text else []
    for i, tool_input in enumerate(tools):
        parts.append({"type": "tool-read_file", "toolName": "read_file", "toolCallId": f"{mid}-{i}",
                      "state": "output-available", "input": tool_input, "output": "ok"})
    return {"id": mid, "role": role, "parts": parts}


BIG_INPUT = {"path": "docs/setup.md", "notes": " ".join(f"word{i}" for i in range(60))}


def original_order(rows, query):
    """Ids in the original's order: its table, its bm25 ``ORDER BY rank`` (rowid on ties)."""
    con = apsw.Connection(":memory:")
    con.execute(ORIGINAL_DDL)
    for rowid, (mid, text) in enumerate(rows, 1):
        if text:
            con.execute("INSERT INTO assistant_fts (rowid, id, session_id, role, content) VALUES (?, ?, '', 'user', ?)",
                        (rowid, mid, text))
    return [mid for (mid,) in con.execute(
        "SELECT id FROM assistant_fts WHERE assistant_fts MATCH ? ORDER BY rank, rowid", (query,))]


async def test_a_tool_call_does_not_lower_the_rank_of_its_messages_text(storage):
    session = Session.create(storage)
    await session.append_message(text_msg("short", "Deploy on Friday", BIG_INPUT))
    await session.append_message(text_msg("long", "We could maybe think about doing the release on Friday after lunch"))
    assert original_order([("short", "Deploy on Friday"),
                           ("long", "We could maybe think about doing the release on Friday after lunch")],
                          '"friday"') == ["short", "long"]
    assert [hit["id"] for hit in await session.search("friday")] == ["short", "long"]


async def test_messages_found_only_through_tool_calls_come_after_text_matches(storage):
    session = Session.create(storage)
    await session.append_message(text_msg("t1", "", {"path": "docs/friday.md"}))
    await session.append_message(text_msg("t2", "Notes for friday", {"path": "plan.md"}))
    await session.append_message(text_msg("t3", "Read it", {"path": "friday/notes.md"}))
    await session.append_message(text_msg("t4", "friday friday"))
    hits = await session.search("friday")
    assert [(h["id"], h["content"]) for h in hits] == [
        ("t4", "friday friday"), ("t2", "Notes for friday"), ("t1", ""), ("t3", "Read it")]
    # A query whose words are split between text and tool input still finds the message.
    assert [h["id"] for h in await session.search("read notes.md")] == ["t3"]
    assert [h["id"] for h in await session.search("read_file plan")] == ["t2"]


def corpus(seed):
    rng = random.Random(seed)
    words = "friday deploy release flight cancel refund the a on for we ship notes plan baggage".split()
    rows = []
    for i in range(120):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 14)))
        tools = [{"path": f"{rng.choice(words)}/{rng.choice(words)}.md",
                  "body": " ".join(rng.choice(words) for _ in range(rng.randint(1, 40)))}
                 for _ in range(rng.choice([0, 0, 1, 2]))]
        rows.append((f"m{i}", text, tools))
    return rows


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("query, original_query", [
    ("friday", '"friday"'),
    ("deploy release", '"deploy" "release"'),
    ("cancel refund flight", '"cancel" "refund" "flight"'),
    ('"on friday"', '"on friday"'),
])
async def test_text_matches_rank_exactly_as_in_the_original(storage, seed, query, original_query):
    rows = corpus(seed)
    session = Session.create(storage)
    for mid, text, tools in rows:
        await session.append_message(text_msg(mid, text, *tools))
    expected = original_order([(mid, text) for mid, text, _ in rows], original_query)
    assert expected  # the corpus has text matches for every query
    hits = [h["id"] for h in await session.search(query, limit=500)]
    assert hits[: len(expected)] == expected
    # After them come messages found with the help of their tool calls.
    with_tools = {mid for mid, _, tools in rows if tools}
    assert set(hits[len(expected):]) <= with_tools - set(expected)


async def test_manager_search_ranks_text_matches_as_the_original(storage):
    manager = SessionManager.create(storage)
    sid = (await manager.create("chat"))["id"]
    await manager.append_all(sid, [text_msg("short", "Deploy on Friday", BIG_INPUT),
                                   text_msg("long", "We could maybe think about doing the release on Friday after lunch"),
                                   text_msg("tool", "", {"path": "friday.md"})])
    assert [h["id"] for h in await manager.search("friday")] == ["short", "long", "tool"]
    tool = manager.tools()["session_search"]
    assert await tool.execute({"query": "friday"}) == (
        "[user] Deploy on Friday\n---\n[user] We could maybe think about doing the release on Friday after lunch"
        "\n---\n[user] ")


async def test_search_entries_rank_as_the_original(storage):
    provider = AgentSearchProvider(storage)
    provider.init("kb")
    await provider.set("long", "We could maybe think about doing the release on Friday after lunch")
    await provider.set("short", "Deploy on Friday")
    assert await provider.search("friday") == (
        "[short]\nDeploy on Friday\n\n[long]\nWe could maybe think about doing the release on Friday after lunch")


async def test_long_queries_split_between_text_and_tool_calls_match_once(storage):
    words = [f"w{i}x" for i in range(600)]  # more terms than one FTS5 MATCH gets (storage.fts)
    session = Session.create(storage)
    await session.append_message(text_msg("text", " ".join(words)))
    await session.append_message(text_msg("split", " ".join(words[:-1]), {"arg": words[-1]}))
    await session.append_message(text_msg("short", " ".join(words[:-2]), {"arg": words[-1]}))
    assert [h["id"] for h in await session.search(" ".join(words))] == ["text", "split"]
    assert [h["id"] for h in await session.search(" ".join(words[:-1]))] == ["split", "text"]


async def test_every_way_of_removing_messages_removes_their_tool_index_rows(storage):
    manager = SessionManager.create(storage)
    a, b = (await manager.create("a"))["id"], (await manager.create("b"))["id"]
    for sid in (a, b):
        await manager.append_all(sid, [text_msg("m1", "x", {"path": "one.md"}), text_msg("m2", "", {"path": "two.md"}),
                                       text_msg("m3", "y", {"path": "three.md"})])

    def tool_rows():
        return storage.scalar("SELECT count(*) FROM assistant_fts_tools")

    assert tool_rows() == 6
    await manager.delete(a)
    assert tool_rows() == 3
    session = await manager.get_session(b)
    await session.delete_messages(["m1"])
    assert tool_rows() == 2
    await session.update_message(text_msg("m2", "now text", {"path": "moved.md"}))
    assert [h["id"] for h in await session.search("moved.md")] == ["m2"]
    assert await session.search("two.md") == []
    assert tool_rows() == 2
    await session.clear_messages()
    assert tool_rows() == 0
