"""A rolling restart of three real ``serve --cluster`` hosts under writers: no call fails, nothing is lost.

Writers use one :class:`runtime.client.SessionsClient` given the three URLs
(its default retries and deadline); each appends one message at a time to
its own session, and counts every call the client raised (a *failed call*;
it then sends the same message again, so nothing it was told is stored goes
missing). Sessions start spread over the hosts. Each host in turn is
stopped with SIGTERM (it must exit 0), then started again on its port, and
the next host waits until every writer was acknowledged again.

Checked: no failed call; the final history of every session, read through
every host, is the acknowledged messages in order, none twice (at most the
one being sent when the writers stopped after them); every session of a
stopped host was acknowledged by another host afterwards.
``benchmarks/bench_rolling_restart.py`` runs the same with more writers and
reports the time from each SIGTERM until a moved session is acknowledged
again elsewhere.
"""

from __future__ import annotations

import httpx
import pytest
import trio

from common.wire import quote_segment
from runtime.client import SessionsClient
from tests.support.cluster_hosts import Cluster, run_cluster

pytestmark = pytest.mark.slow

#: Seconds a writer may go without an acknowledgement around one restart (a loaded machine is slow).
PROGRESS_TIMEOUT_S = 60.0


def msg(message_id: str) -> dict:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": "rolling restart"}]}


class RollingWriter:
    """Appends to one session until cancelled; remembers each acknowledgement, its time and owner."""

    def __init__(self, client: SessionsClient, session_id: str, first: str) -> None:
        self.client = client
        self.session = client.session(session_id)
        self.session_id = session_id
        self.key = quote_segment(session_id)
        self.acked: list[str] = [first]
        self.acks: list[tuple[float, str | None]] = []  # (trio time, owner URL the answer named)
        self.in_flight: str | None = None
        self.failures: list[str] = []  # each call the client raised
        self.progress = trio.Event()

    async def run(self) -> None:
        while True:
            message_id = f"{self.session_id}-{len(self.acked)}"
            self.in_flight = message_id
            try:
                await self.session.append_message(msg(message_id))
            except Exception as exc:  # noqa: BLE001 - a failed call: counted, then sent again (same id)
                self.failures.append(f"{type(exc).__name__}: {exc}")
                await trio.sleep(0.05)
                continue
            self.in_flight = None
            self.acked.append(message_id)
            self.acks.append((trio.current_time(), self.client.endpoints.owner_of(self.key)))
            self.progress.set()
            self.progress = trio.Event()

    async def wait_for(self, condition, timeout: float = PROGRESS_TIMEOUT_S) -> None:
        with trio.fail_after(timeout):
            while not condition():
                await self.progress.wait()

    def acknowledged_elsewhere(self, since: float, host_url: str) -> float | None:
        """Seconds from ``since`` to the first acknowledgement after it named an owner other than ``host_url``."""
        for at, owner in self.acks:
            if at >= since and owner is not None and owner != host_url:
                return at - since
        return None

    def check(self, history: list[str]) -> None:
        assert len(history) == len(set(history)), f"{self.session_id}: a message is stored twice"
        assert history[:len(self.acked)] == self.acked, f"{self.session_id}: acknowledged writes missing or moved"
        rest = history[len(self.acked):]
        assert rest in ([], [self.in_flight]), f"{self.session_id}: unexpected tail {rest}"


async def rolling_restart(cluster: Cluster, writers: int) -> dict:
    """Restart every host of ``cluster`` in turn (SIGTERM) under ``writers`` writers.

    Returns ``{"failures": [...], "handover_s": [...], "acknowledged": n, "statuses": [...], "exit_s": [...],
    "writers": [...]}``: the failed calls, for each session a stopped host owned the seconds from its
    SIGTERM until another host acknowledged it, the writes acknowledged, each host's exit status and
    seconds from SIGTERM to exit; the final histories are checked (AssertionError).
    """
    hosts = cluster.hosts
    async with httpx.AsyncClient(timeout=60) as http:  # sessions start spread over the hosts
        for i in range(writers):
            response = await http.post(f"{hosts[i % len(hosts)].url}/v1/sessions/rr-{i}/messages",
                                       json={"message": msg(f"rr-{i}-0")})
            assert response.status_code == 201, response.text
    handovers: list[float] = []
    statuses: list[int] = []
    exits: list[float] = []  # seconds from each SIGTERM until the host exited
    async with SessionsClient(cluster.urls) as client:
        team = [RollingWriter(client, f"rr-{i}", f"rr-{i}-0") for i in range(writers)]
        async with trio.open_nursery() as nursery:
            for writer in team:
                nursery.start_soon(writer.run)
            for writer in team:
                await writer.wait_for(lambda w=writer: len(w.acks) >= 2)
            for host in hosts:
                url = host.url
                owned = [w for w in team if client.endpoints.owner_of(w.key) == url]
                stopped_at = trio.current_time()
                statuses.append(await trio.to_thread.run_sync(host.stop))
                exits.append(trio.current_time() - stopped_at)
                for writer in owned:
                    await writer.wait_for(lambda w=writer: w.acknowledged_elsewhere(stopped_at, url) is not None)
                    handovers.append(writer.acknowledged_elsewhere(stopped_at, url))
                await trio.to_thread.run_sync(host.start)
                for writer in team:
                    count = len(writer.acked)
                    await writer.wait_for(lambda w=writer, c=count: len(w.acked) > c)
            nursery.cancel_scope.cancel()
    async with httpx.AsyncClient(timeout=60) as http:
        for writer in team:
            for host in hosts:
                response = await http.get(f"{host.url}/v1/sessions/{writer.key}/messages")
                assert response.status_code == 200, response.text
                writer.check([m["id"] for m in response.json()["messages"]])
    return {"failures": [f for w in team for f in w.failures], "handover_s": handovers, "statuses": statuses, "exit_s": exits,
            "acknowledged": sum(len(w.acked) for w in team), "writers": team}


async def test_a_rolling_restart_fails_no_call_and_loses_nothing(tmp_path, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=3, lease_s=1.0) as cluster:
        found = await rolling_restart(cluster, writers=6)
    assert found["statuses"] == [0, 0, 0]
    assert found["failures"] == []
    assert len(found["handover_s"]) >= 3  # every stopped host owned sessions, and each moved
    assert found["acknowledged"] > 6 * 4
