"""Failover with real processes: an owner killed with kill -9, an owner stopped (SIGSTOP) past its lease.

Each host is its own process (tests/support/cluster_host.py) serving HTTP on
loopback, all on one real Postgres. Without forwarding (cluster-edge's part),
a host answers a call for an actor another host owns with 503
``NotOwnerError``; these tests send each call to the host they mean.
"""

from __future__ import annotations

import signal
import time

import httpx
import pytest
import trio

from tests.support.cluster_host import cluster_host_process
from tests.support.postgres import free_port

LEASE_S = 1.5

pytestmark = pytest.mark.slow


def text(name: str) -> dict:
    return {"id": name, "role": "user", "parts": [{"type": "text", "text": f"note {name}"}]}


def error_type(response: httpx.Response) -> str | None:
    try:
        return response.json()["error"]["type"]
    except (ValueError, KeyError, TypeError):
        return None


async def history(client: httpx.AsyncClient, url: str) -> httpx.Response:
    return await client.get(f"{url}/v1/sessions/chat/messages")


async def append(client: httpx.AsyncClient, url: str, name: str) -> httpx.Response:
    return await client.post(f"{url}/v1/sessions/chat/messages", json={"message": text(name)})


async def test_kill_9_of_the_owner_moves_the_actor_after_its_lease_with_every_acknowledged_write(
        pg_empty_dsn, tmp_path):
    with cluster_host_process(pg_empty_dsn, tmp_path / "a", free_port(), "A", lease_s=LEASE_S) as a, \
            cluster_host_process(pg_empty_dsn, tmp_path / "b", free_port(), "B", lease_s=LEASE_S) as b:
        async with httpx.AsyncClient(timeout=10) as client:
            acked = []
            for i in range(25):
                response = await append(client, a.url, f"a{i}")
                assert response.status_code == 201, response.text
                acked.append(f"a{i}")
            response = await history(client, b.url)
            assert (response.status_code, error_type(response)) == (503, "NotOwnerError")
            assert response.json()["error"]["message"].endswith(f"is owned by host A at {a.url}")

            a.process.kill()  # kill -9: no release, no goodbye
            a.process.wait()
            killed = time.monotonic()
            answers = set()
            while True:
                response = await history(client, b.url)
                if response.status_code == 200:
                    break
                answers.add((response.status_code, error_type(response)))
                assert time.monotonic() - killed < LEASE_S + 5, answers
                await trio.sleep(0.05)
            failover_s = time.monotonic() - killed
            assert answers <= {(503, "NotOwnerError")}  # never a 500, never a wrong answer
            assert failover_s <= LEASE_S + 2
            assert [m["id"] for m in response.json()["messages"]] == acked
            response = await append(client, b.url, "b0")
            assert response.status_code == 201
            assert [m["id"] for m in (await history(client, b.url)).json()["messages"]] == [*acked, "b0"]


async def test_an_owner_stopped_past_its_lease_cannot_make_a_write_stick_or_answer(pg_empty_dsn, tmp_path):
    with cluster_host_process(pg_empty_dsn, tmp_path / "a", free_port(), "A", lease_s=LEASE_S) as a, \
            cluster_host_process(pg_empty_dsn, tmp_path / "b", free_port(), "B", lease_s=LEASE_S) as b:
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

        async with httpx.AsyncClient(timeout=30) as client:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(write_to_a, client)
                await stopped.wait()
                a.process.send_signal(signal.SIGSTOP)  # mid-stream: a request may be half-way through A
                try:
                    await trio.sleep(LEASE_S + 0.5)
                    response = await append(client, b.url, "b0")  # B takes the actor over
                    assert response.status_code == 201, response.text
                finally:
                    a.process.send_signal(signal.SIGCONT)
                resumed.set()
            after = await history(client, a.url)
            assert (after.status_code, error_type(after)) == (503, "NotOwnerError")  # A stopped answering
            final = [m["id"] for m in (await history(client, b.url)).json()["messages"]]
        acknowledged = [name for name, status in outcomes.items() if status == 201]
        assert len(acknowledged) >= 30
        assert set(acknowledged) | {"b0"} <= set(final)  # every acknowledged write survived
        assert final[-1] == "b0" or "b0" in final
        # after the takeover A acknowledged nothing: its last answers were refusals
        refused = [name for name, status in outcomes.items() if status != 201]
        assert refused and all(outcomes[name] == 503 for name in refused)
        assert set(final) <= set(outcomes) | {"b0"}
