"""Finding sessions: ``GET /v1/sessions`` and ``GET /v1/sessions/{id}`` against a real server, from the host
catalog (runtime/server/listing.py)."""

import datetime
import os
import time

import httpx
import pytest
import trio

from common.errors import InvalidInputError, SessionNotFoundError
from runtime import open_host
from runtime.client import SessionsClient
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ServerSettings
from storage.catalog import CATALOG_FILE, HostCatalog

TOKEN = "listing-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def msg(mid):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": f"text of {mid}"}]}


async def start(nursery, host):
    bind_sessions(host)
    urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                         task_status=task_status))
    return urls[0]


async def write(client, counts):
    """Append ``counts[name]`` messages to each session, in order (later names are updated later)."""
    for name, count in counts.items():
        await client.session(name).append_messages([msg(f"{name}-{i}") for i in range(count)])


async def everything(client, **options):
    return [entry async for entry in client.iter_sessions(**options)]


async def test_sessions_are_listed_newest_first_with_counts_and_compaction_state(tmp_path, nursery):
    async with open_host(tmp_path / "data") as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            await write(client, {"alpha": 3, "beta/2": 1, "gamma": 2})
            record = await client.session("gamma").add_compaction("both", "gamma-0", "gamma-1")
            await client.hibernate()
            listed = await client.list_sessions()
    assert listed["cursor"] is None
    assert sorted(e["id"] for e in listed["sessions"]) == ["alpha", "beta/2", "gamma"]
    by_id = {e["id"]: e for e in listed["sessions"]}
    gamma, alpha = by_id["gamma"], by_id["alpha"]
    times = [e["updatedAt"] for e in listed["sessions"]]
    assert times == sorted(times, reverse=True)
    assert (alpha["messages"], alpha["compactions"], alpha["compactedThrough"]) == (3, 0, None)
    assert (gamma["messages"], gamma["compactions"], gamma["compactedThrough"]) == (2, 1, record["toMessageId"])
    assert (alpha["state"], alpha["problem"], alpha["active"]) == ("ok", None, False)
    assert alpha["createdAt"] <= alpha["updatedAt"]
    assert alpha["createdAt"].endswith("Z") and len(alpha["createdAt"]) == len("2026-01-05T10:00:00.000Z")


async def test_cursor_paging_walks_every_session_once_and_prefix_filters(tmp_path, nursery):
    async with open_host(tmp_path / "data", idle_timeout_s=0.01) as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            names = [f"user-{i:02d}" for i in range(23)] + [f"bot-{i}" for i in range(4)]
            await write(client, dict.fromkeys(names, 1))
            await client.hibernate()
            first = await client.list_sessions(limit=10)
            assert len(first["sessions"]) == 10 and first["cursor"]
            walked = await everything(client, page_size=10)
            whole = (await client.list_sessions(limit=1000))["sessions"]
            users = await everything(client, prefix="user-", page_size=7)
            bots = await client.list_sessions(prefix="bot-", limit=4)
    assert walked == whole
    assert sorted(e["id"] for e in walked) == sorted(names)  # each once
    times = [e["updatedAt"] for e in walked]
    assert times == sorted(times, reverse=True)
    assert [e["id"] for e in users] == [e["id"] for e in whole if e["id"].startswith("user-")]
    assert len(users) == 23
    assert sorted(e["id"] for e in bots["sessions"]) == ["bot-0", "bot-1", "bot-2", "bot-3"]
    assert bots["cursor"] is None


async def test_awake_sessions_report_fresh_numbers_without_hibernating(tmp_path, nursery):
    async with open_host(tmp_path / "data") as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            await write(client, {"old": 2, "busy": 1})
            await client.hibernate()
            catalog_before = (tmp_path / "data" / CATALOG_FILE).stat()
            await client.session("busy").append_messages([msg(f"more-{i}") for i in range(5)])
            await client.session("old").get_history()  # awake, nothing written
            listed = (await client.list_sessions())["sessions"]
            busy = await client.describe_session("busy")
            catalog_after = (tmp_path / "data" / CATALOG_FILE).stat()
    assert [(e["id"], e["messages"], e["active"]) for e in listed] == [("busy", 6, True), ("old", 2, True)]
    assert busy == listed[0]
    # appends wrote nothing to the catalog: it is written when actors hibernate or close
    assert (catalog_before.st_size, catalog_before.st_mtime_ns) == (catalog_after.st_size, catalog_after.st_mtime_ns)


async def test_files_without_a_catalog_row_are_found_by_the_first_listing(tmp_path, nursery):
    data = tmp_path / "data"
    async with open_host(data) as host:
        bind_sessions(host)
        for name, count in (("kept", 2), ("lost-row", 4)):
            await host.namespace("sessions").get_by_name(name).call(
                "append_messages", [msg(f"{name}-{i}") for i in range(count)])
    catalog = HostCatalog.open(data)
    lost = host.namespace("sessions").id_from_name("lost-row")
    assert catalog.forget("sessions", lost.hex)
    catalog.close()
    async with open_host(data) as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            listed = (await client.list_sessions())["sessions"]
    assert sorted((e["id"], e["messages"]) for e in listed) == [("kept", 2), ("lost-row", 4)]
    catalog = HostCatalog.open(data)
    assert catalog.get("sessions", lost.hex).messages == 4
    catalog.close()


async def test_one_session_by_id_and_an_unknown_one(tmp_path, nursery):
    async with open_host(tmp_path / "data") as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            await write(client, {"a b/c": 2})
            await client.hibernate()
            found = await client.describe_session("a b/c")
            with pytest.raises(SessionNotFoundError, match="no session 'nobody' on this host"):
                await client.describe_session("nobody")
        async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
            missing = await http.get("/v1/sessions/nobody")
    assert (found["id"], found["messages"], found["active"]) == ("a b/c", 2, False)
    assert missing.status_code == 404
    assert missing.json() == {"error": {"type": "SessionNotFoundError", "message": "no session 'nobody' on this host"}}
    assert len(list((tmp_path / "data" / "sessions").glob("*/*.sqlite3"))) == 1  # asking created nothing


@pytest.mark.parametrize(("query", "field", "message"), [
    ({"limit": "0"}, "limit", "limit must be between 1 and 1000, not 0"),
    ({"limit": "x"}, "limit", "limit must be an integer, not 'x'"),
    ({"cursor": "bm9wZQ"}, "cursor", "cursor is not a cursor of this listing (pass the cursor of the page before)"),
    ({"cursor": "%%%"}, "cursor", "cursor is not a cursor of this listing (pass the cursor of the page before)"),
])
async def test_bad_listing_queries_get_a_400_naming_the_field(tmp_path, nursery, query, field, message):
    async with open_host(tmp_path / "data") as host:
        url = await start(nursery, host)
        async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
            answer = await http.get("/v1/sessions", params=query)
            unauthorized = await http.get("/v1/sessions", headers={"Authorization": "Bearer wrong"})
    assert answer.status_code == 400
    assert answer.json() == {"error": {"type": "InvalidInputError", "message": message, "field": field}}
    assert unauthorized.status_code == 401


async def test_the_client_raises_the_listing_errors(tmp_path, nursery):
    async with open_host(tmp_path / "data") as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            with pytest.raises(InvalidInputError) as caught:
                await client.list_sessions(cursor="garbage")
    assert caught.value.field == "cursor"


async def test_an_empty_host_lists_nothing(tmp_path, nursery):
    async with open_host(tmp_path / "data") as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            assert await client.list_sessions() == {"sessions": [], "cursor": None}
    assert os.path.exists(tmp_path / "data" / CATALOG_FILE)


def wall_ms():
    return time.time_ns() // 1_000_000


def epoch_ms(iso):
    """``YYYY-MM-DDTHH:MM:SS.mmmZ`` as epoch milliseconds."""
    moment = datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


async def timed_write(client, name, count=1, tag="m"):
    """Append to ``name``; the wall-clock window (ms) the commit happened in."""
    before = wall_ms()
    await client.session(name).append_messages([msg(f"{name}-{tag}{i}") for i in range(count)])
    return before, wall_ms()


GAP_S = 1.0  # between a write and a hibernation: far above the clock's and the test's own jitter


async def test_updated_at_is_the_last_writes_time_not_the_hibernations(tmp_path, nursery):
    async with open_host(tmp_path / "data", idle_timeout_s=None) as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            first = await timed_write(client, "p", 2, "a")
            await trio.sleep(GAP_S / 2)
            last = await timed_write(client, "p", 1, "b")
            await trio.sleep(GAP_S)
            slept_at = wall_ms()
            assert await client.hibernate("p") == 1
            hibernated = await client.describe_session("p")
            await client.session("p").get_history()  # a wake that only reads
            await trio.sleep(GAP_S)
            assert await client.hibernate("p") == 1
            after_read = await client.describe_session("p")
    assert last[0] <= epoch_ms(hibernated["updatedAt"]) <= last[1] < slept_at - 900
    assert first[0] <= epoch_ms(hibernated["createdAt"]) <= first[1]
    assert (hibernated["messages"], hibernated["active"]) == (3, False)
    assert after_read == hibernated  # reading changed nothing


async def test_the_list_orders_by_the_last_write_not_by_when_sessions_went_to_sleep(tmp_path, nursery):
    async with open_host(tmp_path / "data", idle_timeout_s=None) as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            written_a = await timed_write(client, "A")
            await trio.sleep(0.05)
            written_b = await timed_write(client, "B")
            await trio.sleep(GAP_S / 2)
            assert await client.hibernate("B") == 1
            await trio.sleep(GAP_S / 2)
            assert await client.hibernate("A") == 1
            listed = (await client.list_sessions())["sessions"]
    assert [e["id"] for e in listed] == ["B", "A"]
    assert written_b[0] <= epoch_ms(listed[0]["updatedAt"]) <= written_b[1]
    assert written_a[0] <= epoch_ms(listed[1]["updatedAt"]) <= written_a[1]


async def test_a_shutdown_records_each_sessions_own_write_time(tmp_path, nursery):
    data = tmp_path / "data"
    async with open_host(data, idle_timeout_s=None) as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            written_b = await timed_write(client, "B")
            await trio.sleep(0.05)
            written_a = await timed_write(client, "A")
            await client.session("B").get_history()  # B is used last, but not written
            await trio.sleep(GAP_S)
    catalog = HostCatalog.open(data)
    try:
        rows = {entry.name: entry for entry in catalog.entries("sessions")}
    finally:
        catalog.close()
    assert [entry.name for entry in sorted(rows.values(), key=lambda e: -e.updated_ms)] == ["A", "B"]
    assert written_a[0] <= rows["A"].updated_ms <= written_a[1]
    assert written_b[0] <= rows["B"].updated_ms <= written_b[1]


async def test_an_awake_session_moves_up_on_a_write_that_adds_no_message(tmp_path, nursery):
    async with open_host(tmp_path / "data", idle_timeout_s=None) as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            await write(client, {"quiet": 2, "other": 1})
            await client.hibernate()
            await trio.sleep(0.05)
            before = wall_ms()
            await client.session("quiet").add_compaction("both", "quiet-0", "quiet-1")
            after = wall_ms()
            listed = (await client.list_sessions())["sessions"]
    assert [e["id"] for e in listed] == ["quiet", "other"]
    assert before <= epoch_ms(listed[0]["updatedAt"]) <= after


async def test_reading_the_system_prompt_for_the_first_time_does_not_move_updated_at(tmp_path, nursery):
    """The first read of the prompt renders and stores it: upkeep of a read, not an update."""
    async with open_host(tmp_path / "data", idle_timeout_s=None) as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            await write(client, {"older": 1})
            await trio.sleep(0.05)
            await write(client, {"newer": 1})
            await trio.sleep(0.05)
            before = (await client.describe_session("older"))["updatedAt"]
            await client.session("older").freeze_system_prompt()
            awake = await client.list_sessions()
            await client.hibernate()
            asleep = await client.list_sessions()
            after = await client.describe_session("older")
    assert [e["id"] for e in awake["sessions"]] == ["newer", "older"]
    assert [e["id"] for e in asleep["sessions"]] == ["newer", "older"]
    assert after["updatedAt"] == before
