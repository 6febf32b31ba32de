"""SessionManager.search and the session_search tool (docs/behaviours.md §6, §11, §13; docs/deviations.md #9, #10, #11).

The three sessions are real airline chats: tau-bench tasks 0-2 from
tests/data/tau-bench/airline-sample.json (MIT, see LICENSE.upstream there),
converted with runtime.cli.formats.openai_chat. Only task 1's customer says
she is "feeling a bit unwell".
"""

import json
import re

import pytest

from actors import InvalidInputError, Session, SessionManager
from runtime.cli.formats.openai_chat import convert_openai_chat

pytestmark = pytest.mark.both_storages

ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

UNWELL_USER = (
    "I must have left it somewhere else. If basic economy tickets can't be changed, would cancelling be an "
    "option since I'm feeling a bit unwell? I do have travel insurance."
)
UNWELL_AGENT = (
    "I can assist you with canceling your reservation since you have travel insurance and are feeling unwell. "
    "Please provide your user ID and the reservation ID, along with the reason for cancellation, so I can "
    "proceed with the cancellation process."
)


def msg(mid, text, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}]}


@pytest.fixture
def manager(storage):
    return SessionManager.create(storage)


@pytest.fixture
async def tau(manager, test_data):
    """Three managed sessions holding tau-bench tasks 0, 1, 2; returns their rows."""
    records = json.loads((test_data / "tau-bench" / "airline-sample.json").read_text(encoding="utf-8"))[:3]
    rows = []
    for imported in convert_openai_chat(records):
        row = await manager.create(imported.session_id, source=imported.source)
        for item in imported.messages:
            await manager.append(row["id"], item.message, item.parent_id)
        rows.append(row)
    return rows


async def test_tau_sessions_hold_what_the_data_holds(manager, tau):
    assert [r["name"] for r in tau] == ["task-0", "task-1", "task-2"]
    assert [await manager.get_message_count(r["id"]) for r in tau] == [23, 11, 16]


async def test_search_finds_a_phrase_only_the_second_session_holds(manager, tau):
    [hit] = await manager.search('"feeling a bit unwell"')
    assert hit == {
        "id": "msg-4",
        "role": "user",
        "content": UNWELL_USER,
        "createdAt": hit["createdAt"],
        "sessionId": tau[1]["id"],
    }
    assert ISO_MS.match(hit["createdAt"])
    stored = await manager.get_session(tau[1]["id"])
    assert [m["id"] for m in await stored.get_history()][4] == "msg-4"


async def test_search_words_match_in_any_order_across_sessions(manager, tau):
    hits = await manager.search("unwell feeling")
    assert [(h["sessionId"], h["id"], h["role"], h["content"]) for h in hits] == [
        (tau[1]["id"], "msg-4", "user", UNWELL_USER),
        (tau[1]["id"], "msg-5", "assistant", UNWELL_AGENT),
    ]


async def test_search_reports_the_session_of_each_hit(manager, tau):
    hits = await manager.search("Seattle")
    assert {h["sessionId"] for h in hits} == {tau[0]["id"]}
    assert len(hits) == 4
    assert all(h["id"].startswith("msg-") for h in hits)


async def test_search_respects_the_limit(manager, tau):
    everything = await manager.search("reservation")
    assert len(everything) == 18  # text mentions and tool calls with a reservation_id
    assert sum(h["content"] == "" for h in everything) == 7
    assert {h["sessionId"] for h in everything} == {r["id"] for r in tau}
    assert await manager.search("reservation", limit=3) == everything[:3]
    assert await manager.search("reservation", limit=0) == []


async def test_session_search_tool_returns_role_and_content(manager, tau):
    tool = manager.tools()["session_search"]
    assert await tool.execute({"query": '"feeling a bit unwell"'}) == f"[user] {UNWELL_USER}"
    assert await tool.execute({"query": "unwell feeling"}) == f"[user] {UNWELL_USER}\n---\n[assistant] {UNWELL_AGENT}"
    assert await tool.execute({"query": "zeppelin"}) == "No results found."


async def test_session_search_tool_returns_at_most_ten_hits(manager, tau):
    result = await manager.tools()["session_search"].execute({"query": "reservation"})
    assert result.count("\n---\n") == 9
    expected = "\n---\n".join(f"[{h['role']}] {h['content']}" for h in await manager.search("reservation", limit=10))
    assert result == expected


def test_tools_describe_session_search_exactly(manager):
    tools = manager.tools()
    assert list(tools) == ["session_search"]
    tool = tools["session_search"]
    assert tool.name == "session_search"
    assert tool.description == "Search past conversations for relevant context. Searches across all sessions."
    assert tool.input_schema == {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "Search query"}},
        "required": ["query"],
    }
    tool.input_schema["properties"]["query"]["description"] = "changed"
    assert manager.tools()["session_search"].input_schema["properties"]["query"]["description"] == "Search query"


async def test_session_search_tool_validates_its_arguments(manager):
    tool = manager.tools()["session_search"]
    assert await tool.execute({}) == (
        "Error: invalid arguments for session_search: query: Invalid input: expected string, received undefined"
    )


# -- scope and syntax ------------------------------------------------------------------------------


async def test_search_sees_only_stored_messages_of_managed_sessions(manager, storage):
    a = await manager.create("A")
    b = await manager.create("B")
    await manager.append(a["id"], msg("m1", "the deploy happens on Friday"))
    await manager.append(b["id"], msg("m1", "no deploy on Friday, says B"))
    loose = Session.create(storage).for_session("not-managed")
    await loose.append_message(msg("m1", "deploy Friday from an unmanaged session"))
    await Session.create(storage).append_message(msg("m1", "deploy Friday in the default session"))

    hits = await manager.search("friday deploy")
    assert sorted((h["sessionId"], h["id"]) for h in hits) == sorted([(a["id"], "m1"), (b["id"], "m1")])
    await manager.delete(b["id"])
    assert [(h["sessionId"], h["content"]) for h in await manager.search("friday deploy")] == [
        (a["id"], "the deploy happens on Friday")
    ]


async def test_search_fills_the_limit_when_unmanaged_rows_rank_best(manager, storage):
    sid = (await manager.create("A"))["id"]
    await manager.append(sid, msg("long", "refund " + "padding words " * 30))
    await manager.append(sid, msg("mid", "refund " + "padding words " * 10))
    await Session.create(storage).for_session("loose").append_message(msg("short", "refund"))
    assert [h["id"] for h in await manager.search("refund", limit=1)] == ["mid"]
    assert [h["id"] for h in await manager.search("refund")] == ["mid", "long"]


async def test_search_treats_typed_syntax_as_plain_text(manager):
    sid = (await manager.create("A"))["id"]
    await manager.append(sid, msg("m1", "hello OR maybe"))
    await manager.append(sid, msg("m2", "hello world"))
    assert [h["id"] for h in await manager.search("hello OR")] == ["m1"]
    assert await manager.search("NEAR(") == []
    assert await manager.search("   ") == []
    assert await manager.search('"unbalanced') == []


async def test_search_finds_japanese_inside_a_sentence(manager):
    sid = (await manager.create("A"))["id"]
    await manager.append(sid, msg("m1", "私は東京に行きました"))
    [hit] = await manager.search("東京")
    assert (hit["id"], hit["sessionId"], hit["content"]) == ("m1", sid, "私は東京に行きました")


async def test_search_follows_updates_and_deletes(manager):
    sid = (await manager.create("A"))["id"]
    await manager.append(sid, msg("m1", "original words"))
    await manager.upsert(sid, msg("m1", "replacement words"))
    assert await manager.search("original") == []
    assert [h["content"] for h in await manager.search("replacement")] == ["replacement words"]
    await manager.delete_messages(sid, ["m1"])
    assert await manager.search("replacement") == []


@pytest.mark.parametrize(("query", "limit", "field"), [(3, 20, "query"), ("x", -1, "limit"), ("x", True, "limit")])
async def test_search_refuses_bad_arguments(manager, query, limit, field):
    with pytest.raises(InvalidInputError) as info:
        await manager.search(query, limit=limit)
    assert info.value.field == field
