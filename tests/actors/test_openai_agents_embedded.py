"""EmbeddedAgentsSession: the OpenAI Agents SDK's session memory in an in-process Session.

The SDK's runner needs asyncio (``@pytest.mark.asyncio``); the session
itself also runs under trio (``@pytest.mark.anyio``: both backends). The
SDK's own session tests run against it in tests/vendor/openai_agents.
"""

from __future__ import annotations

import pytest
from agents.memory import Session as SdkSession

from actors import Session
from actors.openai_agents import EmbeddedAgentsSession
from tests.support.agents_sdk import (
    catalogue_items,
    check_against_sqlite_session,
    check_model_input_matches_sqlite_session,
    check_recorded_run_round_trips,
    same,
)


@pytest.fixture
def session(storage) -> Session:
    return Session.create(storage).for_session("chat-42")


@pytest.mark.asyncio
async def test_a_recorded_run_comes_back_exactly(session):
    await check_recorded_run_round_trips(EmbeddedAgentsSession(session))


@pytest.mark.asyncio
async def test_the_model_gets_the_same_input_as_with_the_sdks_sqlite_session(session):
    await check_model_input_matches_sqlite_session(EmbeddedAgentsSession(session))


@pytest.mark.asyncio
async def test_the_run_reads_as_session_messages(session):
    await check_model_input_matches_sqlite_session(EmbeddedAgentsSession(session))

    history = await session.get_history()
    # One message per user item, one per batch the runner wrote for the model's side.
    assert [[p["type"] for p in m["parts"]] for m in history] == [
        ["text"], ["reasoning", "tool-get_weather", "tool-get_weather"], ["text"],
        ["text"], ["tool-transfer_to_booking_agent"], ["tool-book_flight"], ["text"],
        ["text"], ["text"],
    ]
    assert [m["role"] for m in history] == ["user", "assistant", "assistant"] * 2 + ["assistant", "user", "assistant"]
    tools = [p for m in history for p in m["parts"] if p["type"].startswith("tool-")]
    assert [(p["toolName"], p["toolCallId"], p["state"], p["input"], p["output"]) for p in tools] == [
        ("get_weather", "call_paris", "output-available", {"city": "Paris"}, "Sunny, 21 °C"),
        ("get_weather", "call_oslo", "output-available", {"city": "Oslo"}, "Rain, 9 °C"),
        ("transfer_to_booking_agent", "call_handoff", "output-available", {}, '{"assistant": "booking_agent"}'),
        ("book_flight", "call_book", "output-available", {"city": "Paris", "day": "Friday"},
         "Booked Paris on Friday: ZFA04Y"),
    ]
    assert [hit["id"] for hit in await session.search("ZFA04Y")] == [history[6]["id"]]
    assert [hit["content"] for hit in await session.search("sunny")] == [
        "Paris is sunny (21 °C); Oslo has rain (9 °C)."]
    assert await session.search("sunnier") != []  # the user's words too


@pytest.mark.anyio
async def test_every_item_type_round_trips_through_a_real_session_under_both_loops(anyio_backend, session):
    memory = EmbeddedAgentsSession(session)
    items = catalogue_items()
    await memory.add_items(items)
    assert same(await memory.get_items(), items)
    assert same(await memory.get_items(3), items[-3:])
    assert same(await memory.pop_item(), items[-1])
    await memory.clear_session()
    assert await memory.get_items() == []
    assert await session.get_path_length() == 0


@pytest.mark.asyncio
@pytest.mark.parametrize("seed", range(4))
async def test_random_operations_answer_as_the_sdks_sqlite_session(seed, session):
    await check_against_sqlite_session(EmbeddedAgentsSession(session), seed)


@pytest.mark.asyncio
async def test_a_compaction_overlay_shows_as_an_assistant_message(session):
    memory = EmbeddedAgentsSession(session)
    await memory.add_items([{"role": "user", "content": f"Question {n}"} for n in range(4)])
    middle = [m["id"] for m in await session.get_history()][1:3]
    await session.add_compaction("The user asked two questions.", middle[0], middle[1])
    assert await memory.get_items() == [
        {"role": "user", "content": "Question 0"},
        {"role": "assistant", "content": "The user asked two questions."},
        {"role": "user", "content": "Question 3"},
    ]
    assert await memory.get_items(2) == [{"role": "assistant", "content": "The user asked two questions."},
                                         {"role": "user", "content": "Question 3"}]
    assert await memory.pop_item() == {"role": "user", "content": "Question 3"}
    assert (await session.get_latest_leaf())["id"] == middle[1]


def test_it_is_an_sdk_session_with_the_sdks_settings(session):
    memory = EmbeddedAgentsSession(session, session_settings={"limit": 5})
    assert isinstance(memory, SdkSession)
    assert memory.session_id == "chat-42"
    assert memory.session_settings.limit == 5
    with pytest.raises(TypeError, match="Unknown session settings: limitt"):
        EmbeddedAgentsSession(session, session_settings={"limitt": 5})
    with pytest.raises(TypeError, match=r"session must be an actors.Session \(no get_history, .* on str\)"):
        EmbeddedAgentsSession("chat-42")


@pytest.mark.asyncio
async def test_a_closed_session_refuses_calls_and_keeps_its_items(session):
    memory = EmbeddedAgentsSession(session)
    await memory.add_items([{"role": "user", "content": "Keep me."}])
    memory.close()
    for call in (memory.get_items(), memory.add_items([]), memory.pop_item(), memory.clear_session()):
        with pytest.raises(RuntimeError, match="^EmbeddedAgentsSession is closed$"):
            await call
    assert await EmbeddedAgentsSession(session).get_items() == [{"role": "user", "content": "Keep me."}]


@pytest.mark.asyncio
async def test_a_bad_item_stores_nothing(session):
    memory = EmbeddedAgentsSession(session)
    with pytest.raises(TypeError, match=r"^items\[1\] is not JSON data"):
        await memory.add_items([{"role": "user", "content": "fine"}, {"role": "user", "content": {1, 2}}])
    assert await session.get_path_length() == 0
