"""The client's listing (list_sessions, iter_sessions, describe_session) and history pages, in both encodings,
against a real server on a loopback port."""

import pytest

from common.errors import InvalidInputError, SessionNotFoundError
from runtime import open_host
from runtime.client import SessionsClient
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ServerSettings

TOKEN = "client-pages-token"


def msg(mid):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": f"text of {mid}"}]}


@pytest.fixture
async def url(tmp_path, nursery):
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host)
        urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                             task_status=task_status))
        yield urls[0]


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
async def test_listing_and_pages_through_the_client(url, encoding):
    async with SessionsClient(url, token=TOKEN, encoding=encoding) as client:
        for name in ("a/1", "a/2", "b"):
            await client.session(name).append_messages([msg(f"{name}-{i}") for i in range(5)])
        await client.hibernate("a/1")
        everything = [entry async for entry in client.iter_sessions(page_size=1)]
        only_a = [entry["id"] async for entry in client.iter_sessions(prefix="a/")]
        one = await client.describe_session("a/2")
        with pytest.raises(SessionNotFoundError):
            await client.describe_session("c")
        with pytest.raises(InvalidInputError) as bad:
            await client.list_sessions(limit=0)
        session = client.session("a/2")
        record = await session.add_compaction("two in short", "a/2-1", "a/2-2")
        newest = await session.get_history(limit=2)
        before = await session.get_history(limit=2, before=newest[0]["id"])
        raw = await session.get_history(limit=2, before="a/2-3", overlays=False)
        to_leaf = await session.get_history("a/2-2", limit=1, overlays=False)
    assert sorted(entry["id"] for entry in everything) == ["a/1", "a/2", "b"]
    assert {entry["id"]: entry["active"] for entry in everything} == {"a/1": False, "a/2": True, "b": True}
    assert all(entry["messages"] == 5 for entry in everything)
    assert sorted(only_a) == ["a/1", "a/2"]
    assert (one["id"], one["messages"], one["state"]) == ("a/2", 5, "ok")
    assert bad.value.field == "limit"
    assert [m["id"] for m in newest] == ["a/2-3", "a/2-4"]
    assert [m["id"] for m in before] == ["a/2-0", "compaction_" + record["id"]]
    assert [m["id"] for m in raw] == ["a/2-1", "a/2-2"]
    assert [m["id"] for m in to_leaf] == ["a/2-2"]


async def test_paging_arguments_the_server_refuses_come_back_as_the_same_errors(url):
    async with SessionsClient(url, token=TOKEN) as client:
        session = client.session("s")
        await session.append_message(msg("m1"))
        with pytest.raises(InvalidInputError) as too_big:
            await session.get_history(limit=20_000)  # over a query's bound; RPC takes any size
        assert too_big.value.field == "limit"
        assert [m["id"] for m in await session.call("get_history", limit=20_000)] == ["m1"]
