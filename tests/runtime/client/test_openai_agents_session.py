"""DurableAgentsSession: the OpenAI Agents SDK's session memory on a real ``durable-sessions serve`` process.

The SDK's runner needs asyncio (``@pytest.mark.asyncio``); the session also
runs under trio (``@pytest.mark.anyio``: both backends). The SDK's own
session tests run against it in tests/vendor/openai_agents.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from agents import Runner
from agents.memory import Session as SdkSession

from common.errors import UnauthorizedError
from runtime import DurableAgentsSession as FromRuntime
from runtime.client import DurableAgentsSession, SessionsClient
from tests.support.agents_sdk import (
    catalogue_items,
    check_against_sqlite_session,
    check_model_input_matches_sqlite_session,
    check_recorded_run_round_trips,
    reference_run,
    run_conversation,
    same,
    scripted_model,
    travel_agent,
)
from tests.support.processes import kill_hard, run_fresh_python, server_process

TOKEN = "agents-token"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with server_process(tmp_path_factory.mktemp("agents-host") / "data", token=TOKEN) as server:
        yield server.url


@pytest.fixture
def memory(url: str) -> DurableAgentsSession:
    """A session of its own on the shared host."""
    return DurableAgentsSession(f"agents-{uuid.uuid4().hex[:8]}", url, token=TOKEN)


@pytest.mark.asyncio
async def test_a_recorded_run_comes_back_exactly(memory):
    await check_recorded_run_round_trips(memory)


@pytest.mark.asyncio
async def test_the_model_gets_the_same_input_as_with_the_sdks_sqlite_session(memory):
    await check_model_input_matches_sqlite_session(memory)


@pytest.mark.asyncio
async def test_other_clients_read_the_run_as_session_messages(memory, url):
    await run_conversation(memory)
    async with SessionsClient(url, token=TOKEN) as client:
        session = client.session(memory.session_id)
        history = await session.get_history()
        hits = await session.search("sunny")
    assert [hit["content"] for hit in hits] == ["Paris is sunny (21 °C); Oslo has rain (9 °C)."]
    weather = history[1]["parts"]
    assert [p["type"] for p in weather] == ["reasoning", "tool-get_weather", "tool-get_weather"]
    assert weather[1] == {"type": "tool-get_weather", "toolCallId": "call_paris", "toolName": "get_weather",
                          "state": "output-available", "input": {"city": "Paris"}, "output": "Sunny, 21 °C"}
    assert history[0]["parts"] == [{"type": "text", "text": "What's the weather in Paris and Oslo?"}]


@pytest.mark.anyio
async def test_every_item_type_round_trips_under_both_loops(anyio_backend, memory):
    items = catalogue_items()
    await memory.add_items(items[:20])
    await memory.add_items(items[20:])
    assert same(await memory.get_items(), items)
    assert same(await memory.get_items(5), items[-5:])
    assert same([await memory.pop_item() for _ in range(3)], items[:-4:-1])
    await memory.clear_session()
    assert await memory.get_items() == []
    await memory.aclose()


@pytest.mark.asyncio
@pytest.mark.parametrize("seed", range(2))
async def test_random_operations_answer_as_the_sdks_sqlite_session(seed, memory):
    await check_against_sqlite_session(memory, seed, steps=40)


@pytest.mark.asyncio
async def test_the_conversation_survives_host_restarts_between_turns(tmp_path: Path):
    """Turn 1, a clean restart (SIGTERM), turn 2, a kill -9 and restart, turn 3: the model sees everything."""
    _, expected_items, expected = await reference_run()
    data = tmp_path / "data"
    model = scripted_model()
    travel = travel_agent(model)
    with server_process(data, token=TOKEN) as first:
        memory = DurableAgentsSession("traveller", first.url, token=TOKEN)
        await Runner.run(travel, "What's the weather in Paris and Oslo?", session=memory)
    with server_process(data, token=TOKEN) as second:
        memory = DurableAgentsSession("traveller", second.url, token=TOKEN)
        result = await Runner.run(travel, "Book me a flight to the sunnier one on Friday.", session=memory)
        kill_hard(second)
    with server_process(data, token=TOKEN) as third:
        memory = DurableAgentsSession("traveller", third.url, token=TOKEN)
        streamed = Runner.run_streamed(result.last_agent, "Thanks!", session=memory)
        async for _ in streamed.stream_events():
            pass
        assert same(await memory.get_items(), expected_items)
    model.assert_complete()
    assert same([call.input for call in model.calls], [call.input for call in expected.calls])


def test_it_is_an_sdk_session_importable_from_the_client_and_from_runtime(url):
    memory = DurableAgentsSession("chat-42", url, TOKEN, session_settings={"limit": 3})
    assert FromRuntime is DurableAgentsSession
    assert isinstance(memory, SdkSession)
    assert (memory.session_id, memory.url, memory.token, memory.session_settings.limit) == ("chat-42", url, TOKEN, 3)
    assert repr(memory) == f"<DurableAgentsSession 'chat-42' at {url}>"
    with pytest.raises(ValueError, match="^session_id must be a non-empty string, not ''$"):
        DurableAgentsSession("", url)
    with pytest.raises(TypeError, match="Unknown session settings: limitt"):
        DurableAgentsSession("chat-42", url, session_settings={"limitt": 3})


@pytest.mark.asyncio
async def test_a_closed_session_refuses_calls(memory):
    await memory.add_items([{"role": "user", "content": "Keep me."}])
    await memory.aclose()
    with pytest.raises(RuntimeError, match="^DurableAgentsSession is closed$"):
        await memory.get_items()
    with pytest.raises(RuntimeError, match="^DurableAgentsSession is closed$"):
        await memory.add_items([])
    again = DurableAgentsSession(memory.session_id, memory.url, token=TOKEN)
    assert await again.get_items() == [{"role": "user", "content": "Keep me."}]


@pytest.mark.asyncio
async def test_server_errors_come_back_as_their_classes(url):
    with pytest.raises(UnauthorizedError):
        await DurableAgentsSession("chat-42", url, token="wrong").get_items()


def test_importing_the_client_does_not_load_the_sdk():
    code = "import sys, runtime.client\nprint('agents' in sys.modules, 'openai' in sys.modules)"
    assert run_fresh_python(code) == "False False\n"
