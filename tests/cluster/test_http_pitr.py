"""Point-in-time restore over HTTP on a real cluster (``serve --cluster`` processes, one throwaway Postgres).

``GET /v1/sessions/{id}/bookmark?at=`` from any host, ``POST /v1/sessions/{id}:restore`` through any
host (run at the owner), undone with the bookmark it answers; the restore survives ``kill -9`` of
the owner; bad bookmarks and moments outside the window (``[cluster] pitr_days`` from the
configuration file) are refused with 400 naming the window; outside cluster mode 501.
"""

from __future__ import annotations

import time
from datetime import datetime

import httpx
import psycopg
import pytest

from common.errors import InvalidInputError
from common.wire import OWNER_HEADER
from runtime.client import SessionsClient
from tests.cluster.test_http_forwarding import msg
from tests.support.cluster_hosts import run_cluster
from tests.support.processes import server_process

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path, pg_empty_dsn):
    config = tmp_path / "cluster.toml"
    config.write_text(f'[cluster]\npostgres = "{pg_empty_dsn}"\npitr_days = 2\n')
    with run_cluster(tmp_path, pg_empty_dsn, hosts=3, lease_s=2.0, extra=["--config", str(config)]) as cluster:
        yield cluster


def server_time(dsn: str, shift_s: float = 0.0) -> str:
    """Postgres' clock (the one the log is stamped with) plus ``shift_s``, as ISO 8601 with ``Z``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        (epoch,) = conn.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8").fetchone()
    moment = epoch + shift_s
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(moment)) + f".{int(moment * 1000) % 1000:03d}Z"


async def history(url: str, session: str) -> list[str]:
    async with SessionsClient(url) as client:
        return [message["id"] for message in await client.session(session).get_history()]


async def test_bookmark_on_any_host_restore_through_another_undo_and_survive_kill_9(cluster, pg_empty_dsn):
    h1, h2, h3 = cluster.hosts
    async with SessionsClient(h1.url) as client, httpx.AsyncClient(timeout=60) as http:
        await client.session("trip").append_messages([msg(f"m{i}") for i in range(3)])
        time.sleep(0.02)
        middle = server_time(pg_empty_dsn)
        time.sleep(0.02)
        await client.session("trip").append_messages([msg(f"m{i}") for i in range(3, 6)])
        await client.session("other").append_messages([msg("x")])

        answer = await http.get(f"{h2.url}/v1/sessions/trip/bookmark", params={"at": middle})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["at"] == middle and body["writtenAt"] <= middle and body["window"]["days"] == 2
        assert body["bookmark"].startswith("bm1.")

        restored = await http.post(f"{h3.url}/v1/sessions/trip:restore", json={"bookmark": body["bookmark"]})
        assert restored.status_code == 200, restored.text
        assert restored.json()["messages"] == 3 and restored.json()["restoredTo"] == middle
        for host in cluster.hosts:
            assert await history(host.url, "trip") == ["m0", "m1", "m2"]
        assert await history(h1.url, "other") == ["x"]  # only that session moved

        async with SessionsClient(h2.url) as via_h2:  # the Python client's two calls
            undone = await via_h2.restore_session("trip", restored.json()["undo"])
            assert undone["messages"] == 6
            again_at = datetime.fromisoformat(middle.replace("Z", "+00:00"))
            assert (await via_h2.bookmark_session("trip", again_at))["at"] == middle
            with pytest.raises(InvalidInputError, match="time zone"):
                await via_h2.bookmark_session("trip", again_at.replace(tzinfo=None))
        assert await history(h3.url, "trip") == [f"m{i}" for i in range(6)]

        # Restore again, then kill -9 the owner at once: the restore is a durable entry of the log.
        again = await http.post(f"{h1.url}/v1/sessions/trip:restore", json={"bookmark": body["bookmark"]})
        assert again.status_code == 200, again.text
        owner = cluster.owner_of("trip")
        owner.kill()
        others = [host.url for host in cluster.hosts if host is not owner]
        async with SessionsClient(others, retries=100, failover_s=60) as survivors:
            assert [m["id"] for m in await survivors.session("trip").get_history()] == ["m0", "m1", "m2"]


async def test_bad_requests_are_refused_with_the_window_named(cluster, pg_empty_dsn):
    h1, h2, _h3 = cluster.hosts
    async with SessionsClient(h1.url) as client, httpx.AsyncClient(timeout=60) as http:
        await client.session("one").append_messages([msg("a")])
        await client.session("two").append_messages([msg("b")])
        now = server_time(pg_empty_dsn)
        token = (await http.get(f"{h1.url}/v1/sessions/one/bookmark", params={"at": now})).json()["bookmark"]

        old = await http.get(f"{h2.url}/v1/sessions/one/bookmark", params={"at": server_time(pg_empty_dsn, -3 * 86400)})
        assert old.status_code == 400
        assert old.json()["error"]["field"] == "at"
        assert "outside the point-in-time window of 2 days (from " in old.json()["error"]["message"]

        foreign = await http.post(f"{h2.url}/v1/sessions/two:restore", json={"bookmark": token})
        assert (foreign.status_code, foreign.json()["error"]["field"]) == (400, "bookmark")
        assert "another session" in foreign.json()["error"]["message"]
        for params, field in (({}, "at"), ({"at": "yesterday"}, "at"), ({"at": "2026-01-01T00:00:00"}, "at")):
            bad = await http.get(f"{h1.url}/v1/sessions/one/bookmark", params=params)
            assert (bad.status_code, bad.json()["error"]["field"]) == (400, field), bad.text
        missing = await http.post(f"{h1.url}/v1/sessions/one:restore", json={"nothing": 1})
        assert (missing.status_code, missing.json()["error"]["field"]) == (400, "bookmark")
        never = await http.get(f"{h1.url}/v1/sessions/never/bookmark", params={"at": now})
        assert (never.status_code, never.json()["error"]["type"]) == (404, "SessionNotFoundError")
        never_restore = await http.post(f"{h2.url}/v1/sessions/never:restore", json={"bookmark": token})
        assert never_restore.status_code in (400, 404)  # another session's bookmark, or never written
        assert OWNER_HEADER not in never.headers
        assert await history(h2.url, "one") == ["a"] and await history(h1.url, "two") == ["b"]


def test_outside_cluster_mode_the_routes_answer_501(tmp_path):
    with server_process(tmp_path / "data") as server:
        bookmark = httpx.get(f"{server.url}/v1/sessions/s/bookmark", params={"at": "2026-01-01T00:00:00Z"}, timeout=60)
        restore = httpx.post(f"{server.url}/v1/sessions/s:restore", json={"bookmark": "bm1.x"}, timeout=60)
    for answer in (bookmark, restore):
        assert answer.status_code == 501
        assert answer.json()["error"] == {
            "type": "NotSupportedError",
            "message": "point-in-time restore needs cluster mode (serve --cluster): the cluster's log and "
                       "snapshots are the history it restores from"}


async def test_a_restore_under_a_steady_writer_keeps_exactly_the_prefix_and_what_came_after(cluster, pg_empty_dsn):
    import trio

    h1, h2, _h3 = cluster.hosts
    acked: list[tuple[str, float]] = []  # (message id, when its append was answered)
    stop = trio.Event()

    async def writer() -> None:
        async with SessionsClient([h1.url, h2.url], retries=50, failover_s=60) as client:
            i = 0
            while not stop.is_set():
                await client.session("busy").append_messages([msg(f"w{i}")])
                acked.append((f"w{i}", trio.current_time()))
                i += 1

    async with httpx.AsyncClient(timeout=120) as http, trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        while len(acked) < 20:
            await trio.sleep(0.01)
        moment = server_time(pg_empty_dsn)
        token = (await http.get(f"{h2.url}/v1/sessions/busy/bookmark", params={"at": moment})).json()["bookmark"]
        while len(acked) < 40:
            await trio.sleep(0.01)
        for _ in range(20):  # a writer's call that wakes the session mid-restore: 503, nothing changed, retry
            sent = trio.current_time()
            restored = await http.post(f"{h2.url}/v1/sessions/busy:restore", json={"bookmark": token})
            answered = trio.current_time()
            if restored.status_code != 503:
                break
            assert "nothing changed, retry" in restored.text
        assert restored.status_code == 200, restored.text
        kept = restored.json()["messages"]
        while len(acked) < len([a for a in acked if a[1] <= answered]) + 10:
            await trio.sleep(0.01)
        stop.set()
    final = await history(h1.url, "busy")
    assert 20 <= kept <= 40 and final[:kept] == [f"w{i}" for i in range(kept)]  # the state at the bookmark
    before = {message for message, when in acked if when < sent and int(message[1:]) >= kept}
    after = [message for message, when in acked if when > answered]
    assert not before & set(final)  # acknowledged after the moment and before the restore: rewound away
    assert [m for m in final if m in after] == after  # everything acknowledged after the restore, in order
    assert final[kept:][-len(after):] == after

