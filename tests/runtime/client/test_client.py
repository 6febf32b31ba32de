"""The Python client against a real server on a loopback port (trio, and asyncio in a thread)."""

import asyncio
import json
import re

import pytest
import trio

from actors.session_agent import SessionAgent
from common.errors import (
    ActorOverloadedError,
    ContextBlockError,
    InvalidInputError,
    InvalidMessageError,
    MessageNotFoundError,
    UnauthorizedError,
    UnknownMethodError,
)
from runtime import ActorOverloadedError, UnknownMethodError, open_host
from runtime.client import SessionsClient
from runtime.client.websocket import ConnectionClosed
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ServerSettings

TOKEN = "client-token"


class Loud(SessionAgent):
    async def shout(self, text):
        self.broadcast(json.dumps({"type": "shout", "text": text}))
        return text

    async def slow(self, seconds):
        await trio.sleep(seconds)
        return seconds


def msg(message_id, words, role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": words}]}


@pytest.fixture
async def host(tmp_path):
    async with open_host(tmp_path / "data", max_pending_calls=4) as host:
        bind_sessions(host, agent_class=Loud)
        yield host


@pytest.fixture
async def url(host, nursery):
    urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                         task_status=task_status))
    return urls[0]


@pytest.fixture
async def client(url):
    async with SessionsClient(url, token=TOKEN) as client:
        yield client


def _random(key, value):
    """Times and compaction ids differ between two runs; everything else must not."""
    return key == "createdAt" or (key == "id" and isinstance(value, str) and (
        value.startswith("compaction_") or re.fullmatch(r"[0-9a-f]{8}-[0-9a-f-]{27}", value)))


def _no_times(value):
    if isinstance(value, dict):
        return {k: _no_times(v) for k, v in value.items() if not _random(k, v)}
    if isinstance(value, list):
        return [_no_times(v) for v in value]
    return value


async def _script(session):
    """The same calls on a client handle or an in-process stub; their results, in order."""
    out = [await session.append_message(msg("m1", "Booking ZFA04Y please")),
           await session.append_messages([msg("m2", "Sure", "assistant"), msg("m3", "Thanks")]),
           await session.append_message(msg("r1", "new root"), None),
           await session.append_message(msg("m4", "branch"), "m2"),
           await session.get_history(), await session.get_history("m3"), await session.get_message("m2"),
           await session.get_message("nope"), await session.get_message(""), await session.get_branches("m2"),
           await session.get_branches(""), await session.get_latest_leaf(),
           await session.get_path_length(), await session.get_path_length("m3"),
           await session.update_message(msg("m2", "Sure thing", "assistant")), await session.get_message("m2"),
           await session.search("zfa04y"), await session.search("sure", limit=1),
           await session.delete_messages(["m3", "zz"]),
           await session.get_context_blocks(), await session.get_context_block("memory"),
           await session.get_context_block("nope"), await session.replace_context_block("memory", "Likes tea"),
           await session.append_context_block("memory", "Window seat"), await session.freeze_system_prompt(),
           await session.refresh_system_prompt(), await session.tools(), await session.tools("openai"),
           await session.tools(format="anthropic"),
           await session.execute_tool("set_context", {"label": "memory", "content": "x", "action": "append"}),
           await session.compact(), await session.get_compactions(), await session.get_loaded_skill_keys(),
           await session.unload_skill("skills", "nope"),
           await session.add_compaction("summary", "m1", "m2"), await session.get_history()]
    await session.clear_messages()
    out.append(await session.get_history())
    return out


async def test_the_client_returns_what_the_actor_returns_in_process(client, host):
    over_http = await _script(client.session("remote"))
    in_process = await _script(host.namespace("sessions").get_by_name("local"))
    assert _no_times(over_http) == _no_times(in_process)
    assert over_http[4] == [msg("m1", "Booking ZFA04Y please"), msg("m2", "Sure", "assistant"), msg("m4", "branch")]


async def test_errors_come_back_as_the_same_exception_types(client, url):
    s = client.session("errors")
    with pytest.raises(ContextBlockError) as caught:
        await s.replace_context_block("soul", "x")
    assert (str(caught.value), caught.value.field) == ('Block "soul" is readonly', "label")
    with pytest.raises(MessageNotFoundError, match="message 'zz' not found"):
        await s.update_message(msg("zz", "x"))
    with pytest.raises(UnknownMethodError):
        await s.call("no_such_method")
    with pytest.raises(InvalidMessageError) as caught:
        await s.update_message({"role": "user", "parts": []})
    assert (str(caught.value), caught.value.field) == ("message.id is missing", "message.id")
    with pytest.raises(InvalidInputError) as caught:
        await client.session("x" * 513).get_history()
    assert caught.value.field == "session_id"
    async with SessionsClient(url, token="wrong") as stranger:
        with pytest.raises(UnauthorizedError) as caught:
            await stranger.session("errors").get_history()
        assert caught.value.status == 401
        assert await stranger.health() == {"status": "ok"}


async def test_overload_is_raised_as_actor_overloaded_error(client):
    s = client.session("busy")
    failures = []

    async def slow():
        try:
            await s.call("slow", 0.3)
        except ActorOverloadedError as exc:
            failures.append(exc)

    async with trio.open_nursery() as nursery:
        for _ in range(6):
            nursery.start_soon(slow)
    assert len(failures) == 2


async def test_ids_with_slashes_and_unicode_and_msgpack_bodies(url, host):
    async with SessionsClient(url, token=TOKEN, encoding="msgpack") as client:
        s = client.session("team/αβγ ?#%")
        assert await s.append_message(msg("a/b", "x")) is True
        assert await s.get_message("a/b") == msg("a/b", "x")
        assert await s.get_branches("a/b") == []
    stub = host.namespace("sessions").get_by_name("team/αβγ ?#%")
    assert await stub.get_history() == [msg("a/b", "x")]


async def test_admin_calls(client, host):
    await client.session("a").append_message(msg("m1", "x"))
    await client.session("b").append_message(msg("m1", "x"))
    assert (await client.statistics())["active"] == 2
    assert await client.hibernate("a") == 1
    assert await client.hibernate() == 1
    assert host.statistics().active == 0
    assert "durable_sessions_hibernations_total 2.0" in await client.metrics()


async def test_the_client_must_be_entered_once(url):
    client = SessionsClient(url)
    with pytest.raises(RuntimeError, match="async with SessionsClient"):
        await client.session("x").get_history()
    async with client:
        pass
    with pytest.raises(RuntimeError, match="can be entered once"):
        async with client:
            pass
    with pytest.raises(ValueError, match="session_id must be a non-empty string"):
        client.session("")


async def test_events_arrive_as_they_happen_and_across_hibernation(client, host):
    s = client.session("live")
    async with s.events() as events:
        assert await s.call("shout", "one") == "one"
        assert await events.__anext__() == {"type": "shout", "text": "one"}
        assert await host.hibernate_all() == 1
        assert host.statistics().connections == 1
        await s.call("shout", "two")  # wakes the actor; the held socket still gets the broadcast
        await s.call("shout", "three")
        received = []
        async for event in events:
            received.append(event["text"])
            if len(received) == 2:
                break
        assert received == ["two", "three"]
    with trio.fail_after(30):
        while host.statistics().connections:
            await trio.sleep(0.01)


async def test_one_socket_carries_many_concurrent_calls(client):
    s = client.session("socket")
    async with s.websocket() as socket:
        results = {}

        async def append(i):
            results[i] = await socket.call("append_message", {"id": f"m{i}", "role": "user", "parts": []}, None)

        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(append, i)
        assert results == {i: True for i in range(50)}
        assert await socket.call("get_path_length") == 1
        with pytest.raises(MessageNotFoundError):
            await socket.call("update_message", message=msg("zz", "x"))
        assert await socket.call("shout", text="hey") == "hey"
        events = []
        async for event in socket:
            events.append(event)
            if event["type"] == "shout":
                break
        assert [e["type"] for e in events] == ["cf_agent_session"] * 50 + ["shout"]
        assert events[-1] == {"type": "shout", "text": "hey"}
    with pytest.raises(ConnectionClosed):
        await socket.call("get_path_length")


async def test_a_refused_websocket_raises_the_server_error(url):
    async with SessionsClient(url, token="wrong") as client:
        with pytest.raises(UnauthorizedError):
            async with client.session("x").events():
                pass


def _asyncio_round_trip(url):
    async def main():
        async with SessionsClient(url, token=TOKEN) as client:
            s = client.session("from-asyncio")
            await s.append_messages([msg("m1", "hello from asyncio"), msg("m2", "hi", "assistant")])
            async with s.events() as events:
                await s.call("shout", "asyncio")
                event = await events.__anext__()
            return await s.get_history(), await s.search("asyncio"), event

    return asyncio.run(main())


async def test_the_client_works_under_asyncio(url):
    history, hits, event = await trio.to_thread.run_sync(_asyncio_round_trip, url)
    assert [m["id"] for m in history] == ["m1", "m2"]
    assert [h["id"] for h in hits] == ["m1"]
    assert event == {"type": "shout", "text": "asyncio"}


def test_the_server_and_client_are_part_of_the_public_surface():
    import actors
    import runtime
    from runtime import client, server

    assert (runtime.SessionsClient, runtime.serve, runtime.create_app) == (
        client.SessionsClient, server.serve, server.create_app)
    assert {"SessionsClient", "serve", "create_app"} <= set(runtime.__all__)
    assert {"SessionAgent", "SessionConfig", "BlockConfig", "CompactionConfig"} <= set(actors.__all__)
