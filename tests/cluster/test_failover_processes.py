"""Failover with real processes, seen from one host that does not forward: kill -9 of an owner, an owner
stopped (SIGSTOP) past its lease.

Two ``serve --cluster`` hosts (:func:`tests.support.cluster_hosts.run_cluster`) on one real Postgres.
The requests carry the hop header (:data:`common.wire.HOP_HEADER`), as a forwarded request does, so
a host answers only for itself: ``NotOwnerError`` (503) while another host owns the session, never a
forward. That shows exactly when the ownership moves and that a host past its lease answers nothing.
"""

from __future__ import annotations

import httpx
import pytest
import trio

from common.wire import HOP_HEADER
from tests.support.cluster_hosts import await_until, run_cluster

LEASE_S = 1.5
#: Each request says "already forwarded": the host asked answers for itself.
HOP = {HOP_HEADER: "test"}

pytestmark = pytest.mark.slow


def text(name: str) -> dict:
    return {"id": name, "role": "user", "parts": [{"type": "text", "text": f"note {name}"}]}


def error_type(response: httpx.Response) -> str | None:
    try:
        return response.json()["error"]["type"]
    except (ValueError, KeyError, TypeError):
        return None


async def history(client: httpx.AsyncClient, url: str) -> httpx.Response:
    return await client.get(f"{url}/v1/sessions/chat/messages", headers=HOP)


async def append(client: httpx.AsyncClient, url: str, name: str) -> httpx.Response:
    return await client.post(f"{url}/v1/sessions/chat/messages", json={"message": text(name)}, headers=HOP)


async def test_kill_9_of_the_owner_moves_the_actor_after_its_lease_with_every_acknowledged_write(
        tmp_path, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=2, lease_s=LEASE_S) as cluster:
        a, b = cluster.hosts
        async with httpx.AsyncClient(timeout=30) as client:
            acked = []
            for i in range(25):
                response = await append(client, a.url, f"a{i}")
                assert response.status_code == 201, response.text
                acked.append(f"a{i}")
            response = await history(client, b.url)
            assert (response.status_code, error_type(response)) == (503, "NotOwnerError")
            assert response.json()["error"]["message"].endswith(f" at {a.url}")

            a.kill()  # kill -9: no release, no goodbye
            killed = trio.current_time()
            answers = set()

            async def answered():
                response = await history(client, b.url)
                if response.status_code != 200:
                    answers.add((response.status_code, error_type(response)))
                    return None
                return response

            response = await await_until(answered, LEASE_S + 30, "b to take the session over", interval=0.05)
            failover_s = trio.current_time() - killed
            assert answers <= {(503, "NotOwnerError")}  # never a 500, never a wrong answer
            assert LEASE_S * 0.5 <= failover_s <= LEASE_S + 2  # not before a's lease ran out (renewed at most
            # a third of a lease before the kill), and soon after
            assert [m["id"] for m in response.json()["messages"]] == acked
            response = await append(client, b.url, "b0")
            assert response.status_code == 201
            assert [m["id"] for m in (await history(client, b.url)).json()["messages"]] == [*acked, "b0"]


async def test_an_owner_stopped_past_its_lease_cannot_make_a_write_stick_or_answer(tmp_path, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=2, lease_s=LEASE_S) as cluster:
        a, b = cluster.hosts
        outcomes: dict[str, int] = {}
        stopped = trio.Event()
        resumed = trio.Event()

        async def write_to_a(client: httpx.AsyncClient) -> None:
            i = 0
            while not resumed.is_set() or i < 200:
                name = f"a{i}"
                i += 1
                try:
                    response = await append(client, a.url, name)
                    outcomes[name] = response.status_code
                    if resumed.is_set() and response.status_code != 201:
                        break
                except httpx.HTTPError:
                    outcomes[name] = 0
                if len(outcomes) == 30:
                    stopped.set()
                await trio.lowlevel.checkpoint()

        async with httpx.AsyncClient(timeout=60) as client:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(write_to_a, client)
                await stopped.wait()
                a.pause()  # mid-stream: a request may be half-way through A
                try:

                    async def b_took_over():
                        return (await append(client, b.url, "b0")).status_code == 201

                    await await_until(b_took_over, LEASE_S + 30, "b to take the session over", interval=0.1)
                finally:
                    a.resume()
                resumed.set()
            after = await history(client, a.url)
            assert (after.status_code, error_type(after)) == (503, "NotOwnerError")  # A stopped answering
            final = [m["id"] for m in (await history(client, b.url)).json()["messages"]]
        acknowledged = [name for name, status in outcomes.items() if status == 201]
        assert len(acknowledged) >= 30
        assert set(acknowledged) | {"b0"} <= set(final)  # every acknowledged write survived
        # after the takeover A acknowledged nothing: its last answers were refusals
        refused = [name for name, status in outcomes.items() if status != 201]
        assert refused and all(outcomes[name] == 503 for name in refused)
        assert set(final) <= set(outcomes) | {"b0"}
