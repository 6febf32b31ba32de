"""``GET /v1/sessions/{id}/messages?limit=&before=&leaf=&overlays=`` and the client's ``get_history`` options,
against a real server on a loopback port."""

import httpx
import pytest

from common.errors import InvalidInputError, MessageNotFoundError
from runtime import open_host
from runtime.client import SessionsClient
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ServerSettings

TOKEN = "paging-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def msg(mid):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": f"text of {mid}"}]}


def ids(messages):
    return [m["id"] for m in messages]


@pytest.fixture
async def url(tmp_path, nursery):
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host)
        urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                             task_status=task_status))
        yield urls[0]


@pytest.fixture
async def session(url):
    async with SessionsClient(url, token=TOKEN) as client:
        handle = client.session("pages/1")
        await handle.append_messages([msg(f"m{i}") for i in range(1, 8)])
        yield handle


async def get(url, query):
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
        return await http.get("/v1/sessions/pages%2F1/messages", params=query)


async def test_pages_over_http_newest_first(url, session):
    first = await get(url, {"limit": "3"})
    assert first.status_code == 200
    assert ids(first.json()["messages"]) == ["m5", "m6", "m7"]
    second = await get(url, {"limit": "3", "before": "m5"})
    assert ids(second.json()["messages"]) == ["m2", "m3", "m4"]
    last = await get(url, {"limit": "3", "before": "m2"})
    assert ids(last.json()["messages"]) == ["m1"]
    pinned = await get(url, {"limit": "2", "leaf": "m4"})
    assert ids(pinned.json()["messages"]) == ["m3", "m4"]


async def test_overlays_false_over_http_and_in_the_client(url, session):
    record = await session.add_compaction("m2..m5", "m2", "m5")
    overlay = "compaction_" + record["id"]
    assert ids((await get(url, {"limit": "3"})).json()["messages"]) == [overlay, "m6", "m7"]
    assert ids((await get(url, {"limit": "3", "overlays": "false"})).json()["messages"]) == ["m5", "m6", "m7"]
    assert ids((await get(url, {"overlays": "0", "before": "m3"})).json()["messages"]) == ["m1", "m2"]
    assert ids(await session.get_history(limit=2, before=overlay)) == ["m1"]
    assert ids(await session.get_history(limit=3, overlays=False)) == ["m5", "m6", "m7"]
    assert ids(await session.get_history(overlays=False)) == [f"m{i}" for i in range(1, 8)]
    assert ids(await session.get_history()) == ["m1", overlay, "m6", "m7"]


async def test_the_client_pages_back_to_the_root(session):
    pages, before = [], None
    while True:
        page = await session.get_history(limit=2, before=before)
        pages.append(ids(page))
        if len(page) < 2:
            break
        before = page[0]["id"]
    assert pages == [["m6", "m7"], ["m4", "m5"], ["m2", "m3"], ["m1"]]


@pytest.mark.parametrize(("query", "field", "message"), [
    ({"limit": "0"}, "limit", "limit must be between 1 and 10000, not 0"),
    ({"limit": "10001"}, "limit", "limit must be between 1 and 10000, not 10001"),
    ({"limit": "many"}, "limit", "limit must be an integer, not 'many'"),
    ({"overlays": "perhaps"}, "overlays", "overlays must be true or false, not 'perhaps'"),
    ({"before": "m3", "leaf": "b1"}, "before", ("before 'm3' is not an entry of this history: it is not a stored "
                                                "message on the path to the leaf")),
])
async def test_bad_paging_queries_get_a_400_naming_the_field(url, session, query, field, message):
    await session.append_message(msg("b1"), None)  # another root: m3 is stored, not on b1's path
    answer = await get(url, query)
    assert answer.status_code == 400
    assert answer.json() == {"error": {"type": "InvalidInputError", "message": message, "field": field}}


@pytest.mark.parametrize("query", [{"limit": "1", "before": "zzz"}, {"before": "zzz"}, {"before": "zzz", "leaf": "m4"},
                                   {"before": "zzz", "overlays": "false"}, {"before": "zzz", "leaf": "nope"}])
async def test_a_before_no_message_has_is_a_404_naming_it_not_an_empty_page(url, session, query):
    answer = await get(url, query)
    assert (answer.status_code, answer.json()) == (
        404, {"error": {"type": "MessageNotFoundError", "message": "message 'zzz' not found"}})


async def test_the_client_raises_the_servers_error_for_a_bad_before(session):
    with pytest.raises(MessageNotFoundError, match="message 'nope' not found") as caught:
        await session.get_history(limit=2, before="nope")
    await session.append_message(msg("b1"), "m2")
    with pytest.raises(InvalidInputError, match="before 'm5' is not an entry of this history") as caught:
        await session.get_history(limit=2, before="m5")  # stored, on the other branch
    assert caught.value.field == "before"


async def test_a_never_written_session_pages_nothing_and_stays_unwritten(url, tmp_path):
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
        answer = await http.get("/v1/sessions/never/messages", params={"limit": "5", "overlays": "false"})
    assert answer.json() == {"messages": []}
    async with SessionsClient(url, token=TOKEN) as client:
        with pytest.raises(MessageNotFoundError, match="message 'm1' not found"):  # not an empty page
            await client.session("never").get_history(limit=5, before="m1")
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
        refused = await http.get("/v1/sessions/never/messages", params={"limit": "1", "before": "m1", "leaf": "x"})
    assert (refused.status_code, refused.json()["error"]["type"]) == (404, "MessageNotFoundError")
    assert not list((tmp_path / "data" / "sessions").glob("*/*.sqlite3"))
