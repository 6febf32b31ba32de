"""``client.manager(id)`` against a real server: SessionManager's methods, managed session handles, errors."""

import pytest

from common.errors import InvalidInputError, MessageNotFoundError, NotFoundError
from runtime import open_host
from runtime.client import ManagedSessionHandle, ManagerHandle, SessionsClient
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ServerSettings
from runtime.server.managers import bind_managers

TOKEN = "manager-client-token"


def text(message_id, words, role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": words}]}


@pytest.fixture
async def url(tmp_path, nursery):
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host)
        bind_managers(host)
        urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                             task_status=task_status))
        yield urls[0]


@pytest.fixture(params=["json", "msgpack"])
async def client(url, request):
    async with SessionsClient(url, token=TOKEN, encoding=request.param) as client:
        yield client


async def test_manager_handles_are_made_without_a_request_and_refuse_an_empty_id(client):
    manager = client.manager("user-7")
    assert isinstance(manager, ManagerHandle)
    assert (repr(manager), manager.path) == ("<ManagerHandle 'user-7'>", "/v1/managers/user-7")
    with pytest.raises(ValueError, match="manager_id must be a non-empty string"):
        client.manager("")


async def test_a_conversation_through_the_manager_and_its_session_handle(client):
    manager = client.manager("user-7")
    row = await manager.create("Lisbon", model="gpt-x")
    chat = await manager.get_session(row["id"])
    assert isinstance(chat, ManagedSessionHandle)
    assert await chat.append_message(text("m1", "Book ZFA04Y")) is True
    assert await manager.append(row["id"], text("m2", "Done", "assistant")) == "m2"
    assert await manager.append_all(row["id"], [text("m3", "Thanks"), text("m4", "Bye", "assistant")]) == "m4"
    assert await manager.append_all(row["id"], []) is None
    assert [m["id"] for m in await chat.get_history()] == ["m1", "m2", "m3", "m4"]
    assert await manager.upsert(row["id"], text("m2", "Booked", "assistant")) == "m2"
    assert (await chat.get_message("m2"))["parts"][0]["text"] == "Booked"
    assert await manager.get_message_count(row["id"]) == 4
    assert [h["sessionId"] for h in await manager.search("zfa04y")] == [row["id"]]
    assert await manager.execute_tool("session_search", {"query": "zfa04y"}) == "[user] Book ZFA04Y"
    assert [t["name"] for t in await manager.tools("anthropic")] == ["session_search"]


async def test_get_answers_none_and_get_session_raises_for_an_unknown_session(client):
    manager = client.manager("user-8")
    assert await manager.get("nope") is None
    with pytest.raises(NotFoundError, match="session 'nope' not found"):
        await manager.get_session("nope")
    with pytest.raises(NotFoundError, match="session 'nope' not found"):
        await manager.session("nope").get_history()
    with pytest.raises(NotFoundError, match="session 'nope' not found"):
        await manager.rename("nope", "x")


async def test_errors_come_back_as_their_classes_with_the_field(client):
    manager = client.manager("user-9")
    row = await manager.create("a")
    with pytest.raises(InvalidInputError, match="cost must be a finite number >= 0, not -1") as raised:
        await manager.add_usage(row["id"], 1, 1, -1)
    assert raised.value.field == "cost"
    with pytest.raises(MessageNotFoundError, match="message 'm9' not found"):
        await manager.fork(row["id"], "m9", "b")
    with pytest.raises(InvalidInputError) as raised:
        await manager.create(7)
    assert raised.value.field == "name"


async def test_fork_split_usage_compactions_and_delete(client):
    manager = client.manager("user-10")
    row = await manager.create("a")
    await manager.append_all(row["id"], [text("m1", "one"), text("m2", "two", "assistant"), text("m3", "three")])
    fork = await manager.fork(row["id"], "m2", "b")
    assert [m["parts"][0]["text"] for m in await manager.get_history(fork["id"])] == ["one", "two"]
    assert (await manager.add_usage(row["id"], 3, 4, 0.5))["estimated_cost"] == 0.5
    record = await manager.add_compaction(row["id"], "first two", "m1", "m2")
    [stored] = await manager.get_compactions(row["id"])  # createdAt: SQLite text here, ISO-8601 in the record
    assert {**stored, "createdAt": None} == {**record, "createdAt": None}
    assert stored["createdAt"].replace(" ", "T") + "Z" == record["createdAt"]
    assert [b["id"] for b in await manager.get_branches(row["id"], "m1")] == ["m2"]
    assert await manager.delete_messages(row["id"], ["m3", "zz"]) == 1
    split = await manager.compact_and_split(row["id"], "all of it", "a, part 2")
    assert (split["name"], split["parent_session_id"]) == ("a, part 2", row["id"])
    await manager.clear_messages(row["id"])
    assert await manager.get_history(row["id"]) == []
    await manager.delete(row["id"])
    assert [r["name"] for r in await manager.list()] == ["a, part 2", "b"]
