"""End to end: 200 real airline-support messages through a Session that compacts itself.

The tau-bench sample (tests/data/tau-bench, MIT, see its README) converted by
:mod:`runtime.cli.formats.openai_chat`; ``compact_after(2000)`` with
:func:`actors.compaction.extractive_summarize` (deterministic, no model).
After every append the estimate stays within the threshold plus the message
just appended, and every original message is still found by search
(compaction is an overlay on read; stored rows stay).
"""

import json

import pytest

from actors.compaction import create_compact_function, extractive_summarize
from actors.session import Session
from actors.tokens import estimate_message_tokens
from runtime.cli.formats.openai_chat import convert_openai_chat
from tests.support.data import TEST_DATA

pytestmark = pytest.mark.both_storages

DATA = TEST_DATA / "tau-bench" / "airline-sample.json"
THRESHOLD = 2000


def airline_messages(count):
    """The first ``count`` messages of the sample's chats, ids made unique across chats."""
    sessions = convert_openai_chat(json.loads(DATA.read_text(encoding="utf-8")))
    messages = [{**m.message, "id": f"{s.session_id}/{m.message['id']}"} for s in sessions for m in s.messages]
    return messages[:count]


def query_for(message):
    """Words that find ``message``: its first words of text, else its tool name and inputs."""
    words = []
    for part in message["parts"]:
        if part.get("type") == "text":
            words += part["text"].replace('"', " ").split()
    if not words:
        part = next(p for p in message["parts"] if p["type"].startswith("tool-"))
        words = [part["toolName"], *(str(v) for v in part["input"].values() if isinstance(v, str))]
    return " ".join(words[:8])


async def test_two_hundred_real_messages_stay_under_the_threshold_and_searchable(recording_agent):
    messages = airline_messages(200)
    assert len(messages) == 200 and estimate_message_tokens(messages) == 22904
    heard = []
    session = (
        Session.create(recording_agent)
        .for_session("airline")
        .on_compaction(create_compact_function(summarize=extractive_summarize, tail_token_budget=500))
        .compact_after(THRESHOLD)
        .on_compaction_error(heard.append)
    )
    excess = []
    for message in messages:
        assert await session.append_message(message) is True
        estimate = await session.estimate_tokens()
        assert estimate == estimate_message_tokens(await session.get_history())
        excess.append(estimate - THRESHOLD - estimate_message_tokens([message]))
    assert max(excess) < 0 and heard == []

    compactions = await session.get_compactions()
    assert len(compactions) == 18
    assert {c["fromMessageId"] for c in compactions} == {messages[3]["id"]}  # one growing overlay after the head
    history = await session.get_history()
    assert [m["id"] for m in history[:3]] == [m["id"] for m in messages[:3]]
    assert history[3]["id"] == f"compaction_{compactions[-1]['id']}"
    assert history[4:] == messages[200 - len(history) + 4:]
    assert estimate_message_tokens(history) == 1514
    statuses = [p for p in recording_agent.payloads if p["type"] == "cf_agent_session"]
    assert sum("compacted" in p for p in statuses) == 18
    assert all(p["sessionId"] == "airline" for p in recording_agent.payloads)

    assert await session.get_path_length() == 200
    tool_only = [m for m in messages if not any(p["type"] == "text" for p in m["parts"])]
    assert len(tool_only) == 55  # found through their tool calls' names and inputs
    missing = [m["id"] for m in messages
               if m["id"] not in {hit["id"] for hit in await session.search(query_for(m), limit=10)}]
    assert missing == []
