"""Listing and Claude Agent SDK transcripts on every host of a real cluster (``serve --cluster`` processes).

Three real hosts on one throwaway Postgres: the session listing and the
transcript listings are read from the catalog in Postgres (``ds_catalog``),
written with each log entry; they answer the same from every host, stay
right after the owner is killed with ``kill -9`` and the actor moved, and
answer 503 with ``Retry-After`` while Postgres is down.
"""

from __future__ import annotations

import httpx
import pytest
import trio

from common.wire import OWNER_HEADER
from runtime.client import DurableSessionStore, SessionsClient
from runtime.client.conformance import check_session_store_conformance
from tests.cluster.test_http_forwarding import cluster, msg  # noqa: F401 - three hosts, lease 2 s
from tests.support.cluster_hosts import run_cluster

pytestmark = pytest.mark.slow


async def listing(url, **params):
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.get(f"{url}/v1/sessions", params=params)
    assert response.status_code == 200, response.text
    return response.json()


async def walk(url, limit, prefix=None):
    """Every id of the listing, page by page."""
    seen, cursor = [], None
    while True:
        params = {"limit": limit, **({"cursor": cursor} if cursor else {}), **({"prefix": prefix} if prefix else {})}
        page = await listing(url, **params)
        seen += [entry["id"] for entry in page["sessions"]]
        cursor = page["cursor"]
        if cursor is None:
            return seen


async def test_every_host_lists_every_session_the_same_with_paging_prefix_and_describe(cluster):
    h1, h2, h3 = cluster.hosts
    async with SessionsClient(h1.url) as c1, SessionsClient(h2.url) as c2, SessionsClient(h3.url) as c3:
        clients = [c1, c2, c3]
        for i in range(7):  # written through different hosts (forwarded to whichever owns each)
            await clients[i % 3].session(f"chat-{i}").append_messages([msg(f"m{j}") for j in range(i + 1)])
        await clients[0].session("other").append_messages([msg("m0")])
        pages = [await listing(host.url) for host in cluster.hosts]
        assert pages[0] == pages[1] == pages[2]
        entries = pages[0]["sessions"]
        assert [e["id"] for e in entries] == ["other", *(f"chat-{i}" for i in reversed(range(7)))]
        assert [e["messages"] for e in entries] == [1, 7, 6, 5, 4, 3, 2, 1]
        assert all(e["state"] == "ok" and e["compactions"] == 0 and e["active"] for e in entries)
        assert [e["updatedAt"] for e in entries] == sorted((e["updatedAt"] for e in entries), reverse=True)
        for host in cluster.hosts:
            assert await walk(host.url, 3) == [e["id"] for e in entries]
            assert await walk(host.url, 2, prefix="chat-") == [f"chat-{i}" for i in reversed(range(7))]
        async with httpx.AsyncClient(timeout=30) as http:
            one = (await http.get(f"{h3.url}/v1/sessions/chat-2")).json()
            missing = await http.get(f"{h2.url}/v1/sessions/never-written")
            bad = await http.get(f"{h1.url}/v1/sessions", params={"cursor": "nonsense"})
        assert one == {"session": entries[5]}
        assert (missing.status_code, missing.json()["error"]["type"]) == (404, "SessionNotFoundError")
        assert (bad.status_code, bad.json()["error"]["field"]) == (400, "cursor")
        # A write through another host shows at once everywhere, on top; a read moves nothing.
        await clients[2].session("chat-0").append_messages([msg("late")])
        await clients[1].session("chat-3").get_history()
        for host in cluster.hosts:
            top = (await listing(host.url, limit=1))["sessions"][0]
            assert (top["id"], top["messages"]) == ("chat-0", 2)
            assert (await listing(host.url, limit=8))["sessions"][5]["id"] == "chat-3"


async def test_listings_stay_right_after_the_owner_is_killed(cluster):
    async with httpx.AsyncClient(timeout=30) as http:
        # A session and a transcript, both owned by the host that took them first.
        answer = await http.post(f"{cluster.hosts[0].url}/v1/sessions/doomed/messages", json={"message": msg("m1")})
        assert answer.status_code == 201
        owner = cluster.host_at(answer.headers[OWNER_HEADER])
        key = {"project_key": "proj", "session_id": "s1"}
        stored = await http.post(f"{owner.url}/v1/transcripts/entries", json={"key": key, "entries": [
            {"type": "user", "uuid": "u1", "message": {"content": "first prompt"}}]})
        assert stored.json() == {"stored": 1} and stored.headers[OWNER_HEADER] == owner.url
        others = [host for host in cluster.hosts if host is not owner]
        before = (await listing(others[0].url))["sessions"]
        async with DurableSessionStore(others[0].url) as store:
            sessions_before = await store.list_sessions("proj")
            summaries_before = await store.list_session_summaries("proj")
        assert [s["session_id"] for s in sessions_before] == ["s1"]
        owner.kill()
        # Listings answer from Postgres at once, the owner's lease still running.
        for host in others:
            assert (await listing(host.url))["sessions"][0]["messages"] == 1
            async with DurableSessionStore(host.url) as store:
                assert await store.list_sessions("proj") == sessions_before
                assert await store.list_session_summaries("proj") == summaries_before
        # The session moves (a write after the lease lapsed); counts stay exact.
        async with SessionsClient([host.url for host in others], retries=100, failover_s=60) as client:
            await client.session("doomed").append_messages([msg("m2")])
        async with DurableSessionStore(others[1].url) as store:
            await store.append(key, [{"type": "assistant", "uuid": "u2"}])
            assert await store.load(key) == [{"type": "user", "uuid": "u1", "message": {"content": "first prompt"}},
                                             {"type": "assistant", "uuid": "u2"}]
            after = await store.list_session_summaries("proj")
            assert after[0]["mtime"] > summaries_before[0]["mtime"]
            assert after[0]["data"] == summaries_before[0]["data"] | {k: v for k, v in after[0]["data"].items()
                                                                      if k not in summaries_before[0]["data"]}
        for host in others:
            entries = (await listing(host.url))["sessions"]
            assert [(e["id"], e["messages"]) for e in entries] == [("doomed", 2)]
            assert entries[0]["createdAt"] == before[0]["createdAt"]
        # Deleting the main transcript removes its row, seen from every host.
        async with DurableSessionStore(others[0].url) as store:
            await store.delete(key)
        for host in others:
            async with DurableSessionStore(host.url) as store:
                assert await store.list_sessions("proj") == []


async def test_the_sdk_conformance_suite_passes_against_every_host(cluster):
    for host in cluster.hosts:
        assert await check_session_store_conformance(host.url) == 15


async def test_the_conformance_suite_passes_again_after_a_host_is_killed(cluster):
    h1, h2, h3 = cluster.hosts
    assert await check_session_store_conformance(h2.url, purge=False) == 15
    h1.kill()
    # h1 owned some of the pairs; they move to h2/h3 as the suite touches them again
    assert await check_session_store_conformance(h3.url) == 15


async def test_listings_answer_503_while_postgres_is_down(tmp_path, pg_server, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=3, lease_s=2.0) as cluster:
        async with SessionsClient(cluster.urls[0]) as client:
            await client.session("kept").append_messages([msg("m1")])
        await trio.to_thread.run_sync(pg_server.stop, "immediate")
        try:
            async with httpx.AsyncClient(timeout=30) as http:
                for host in cluster.hosts:
                    for path, params in (("/v1/sessions", {}), ("/v1/sessions/kept", {}),
                                         ("/v1/transcripts/sessions", {"project_key": "p"}),
                                         ("/v1/transcripts/summaries", {"project_key": "p"})):
                        started = trio.current_time()
                        response = await http.get(f"{host.url}{path}", params=params)
                        took = trio.current_time() - started
                        assert response.status_code == 503, (path, response.text)
                        assert int(response.headers["Retry-After"]) >= 1
                        assert response.json()["error"]["type"] == "StorageUnavailableError"
                        assert took < 10, (path, took)
        finally:
            await trio.to_thread.run_sync(pg_server.start)
        for _ in range(200):  # healed by itself once Postgres is back
            page = await listing(cluster.urls[1])
            if page["sessions"]:
                break
            await trio.sleep(0.1)
        assert [e["id"] for e in page["sessions"]] == ["kept"]
