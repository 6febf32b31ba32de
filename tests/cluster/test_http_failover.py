"""Failover of real ``serve --cluster`` hosts: kill -9, SIGSTOP past the lease, an alarm whose owner dies.

Writers are clients of every host (:class:`runtime.client.SessionsClient` with
the three URLs); each appends batches of two messages, each batch under the
last message of the batch before (so the history is one chain), and sends a
batch again -- same message ids -- until it is acknowledged. What an
acknowledgement promises is then checked on the final history, read through
every host: every acknowledged batch is there, in order, each message under
its parent; nothing is there twice; a batch never shows half.
"""

from __future__ import annotations

import httpx
import pytest
import trio

from common.wire import OWNER_HEADER, quote_segment
from runtime.client import SessionsClient
from tests.support.cluster_hosts import await_until, run_cluster

pytestmark = pytest.mark.slow

#: Kill -9 cycles of the failover test (the issue asks for at least 20).
KILL_CYCLES = 20


def msg(message_id, text="hello"):
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


class Writer:
    """Appends batches to one session until stopped; remembers what was acknowledged."""

    def __init__(self, client: SessionsClient, session_id: str) -> None:
        self.session = client.session(session_id)
        self.session_id = session_id
        self.acked: list[list[str]] = []  # batches of message ids, in order
        self.in_flight: list[str] | None = None  # the batch being sent when the writer was stopped
        self.failures = 0
        self.progress = trio.Event()

    async def run(self) -> None:
        parent = None
        while True:
            batch = [f"{self.session_id}-{len(self.acked)}-{part}" for part in "ab"]
            self.in_flight = batch
            try:
                await self.session.append_messages([msg(i) for i in batch], parent)
            except Exception:  # noqa: BLE001 - 503, connection errors: send the same batch again
                self.failures += 1
                await trio.sleep(0.05)
                continue
            self.in_flight = None
            self.acked.append(batch)
            parent = batch[-1]
            self.progress.set()
            self.progress = trio.Event()

    async def wait_for_acks(self, count: int, timeout: float) -> None:
        with trio.fail_after(timeout):
            while len(self.acked) < count:
                await self.progress.wait()

    def check(self, history: list[dict]) -> None:
        """Every acknowledged batch, in order, each message under its parent; at most the batch in flight more."""
        ids = [m["id"] for m in history]
        acked = [i for batch in self.acked for i in batch]
        assert len(ids) == len(set(ids)), f"{self.session_id}: a message is stored twice"
        assert ids[:len(acked)] == acked, f"{self.session_id}: acknowledged writes missing or out of order"
        rest = ids[len(acked):]
        assert rest in ([], self.in_flight or []), f"{self.session_id}: unexpected tail {rest} (half a batch?)"


async def final_histories(cluster, session_id):
    """The session's history as each running host answers it (they must agree)."""
    answers = []
    async with httpx.AsyncClient(timeout=30) as http:
        for host in cluster.hosts:
            if host.running and not host.paused:
                response = await http.get(f"{host.url}/v1/sessions/{quote_segment(session_id)}/messages")
                assert response.status_code == 200, response.text
                answers.append(response.json()["messages"])
    assert all(answer == answers[0] for answer in answers), "hosts disagree about the history"
    return answers[0]


async def test_every_acknowledged_write_survives_kill_9_of_the_owner(tmp_path, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=3, lease_s=1.0) as cluster:
        async with SessionsClient(cluster.urls, timeout=10, retries=50, failover_s=30) as client:
            writers = [Writer(client, f"w{i}") for i in range(3)]
            failovers = []
            async with trio.open_nursery() as nursery:
                for writer in writers:
                    nursery.start_soon(writer.run)
                await writers[0].wait_for_acks(3, 30)
                for _ in range(KILL_CYCLES):
                    owner = await trio.to_thread.run_sync(cluster.owner_of, "w0")
                    before = len(writers[0].acked)
                    killed_at = trio.current_time()
                    owner.kill()
                    await writers[0].wait_for_acks(before + 1, 30)  # acknowledged by another host
                    failovers.append(trio.current_time() - killed_at)
                    await trio.to_thread.run_sync(owner.start)
                    for writer in writers:
                        await writer.wait_for_acks(len(writer.acked) + 1, 30)
                nursery.cancel_scope.cancel()
        for writer in writers:
            writer.check(await final_histories(cluster, writer.session_id))
        assert len(writers[0].acked) > KILL_CYCLES
        assert max(failovers) < 15, failovers  # lease 1 s + detection + restore, with room for a loaded machine


async def test_a_paused_owner_past_its_lease_cannot_make_a_write_stick(tmp_path, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=3, lease_s=1.0) as cluster:
        h1, h2, h3 = cluster.hosts
        async with SessionsClient(h1.url) as direct:
            await direct.session("paused").append_message(msg("m0"))  # h1 owns it
        assert cluster.owner_of("paused", via=h2) is h1
        answers = {}
        async with httpx.AsyncClient(timeout=60) as http, trio.open_nursery() as nursery:

            async def send(name, path, body):
                response = await http.post(f"{h1.url}/v1/sessions/paused/{path}", json=body)
                answers[name] = (response.status_code, response.json())

            # A call already running at h1 whose write comes late: h1 is paused before it writes.
            nursery.start_soon(send, "late", "rpc", {"method": "slow_append", "params": [msg("late"), 1.0]})
            await await_until(lambda: cluster.events("started"), 10, "the late write to start at h1")
            h1.pause()
            # Calls that reach the paused owner: read only once it runs again.
            for i in range(3):
                nursery.start_soon(send, f"p{i}", "messages", {"message": msg(f"p{i}")})
            async with SessionsClient([h2.url, h3.url], timeout=10, retries=20, failover_s=30) as others:
                s = others.session("paused")
                await await_until(lambda: _appended(s, "t0"), 30, "another host to take over and write")
                for i in range(1, 5):
                    assert await s.append_message(msg(f"t{i}")) is True
            h1.resume()
            await await_until(lambda: len(answers) == 4, 30, "the paused owner to answer")
            # What the old owner acknowledges from now on goes through the new owner.
            async with SessionsClient(h1.url, timeout=10, retries=10, failover_s=30) as old:
                assert await old.session("paused").append_message(msg("after")) is True
        history = [m["id"] for m in await final_histories(cluster, "paused")]
        status, body = answers["late"]
        assert status == 503 and body["error"]["type"] == "OwnershipLostError", answers["late"]
        assert "late" not in history  # refused by the fence: nothing of it stuck
        written = ["m0", "t0", "t1", "t2", "t3", "t4", "after"]
        assert [i for i in history if i in written] == written  # in order, once each
        for name in ("p0", "p1", "p2"):
            status, _ = answers[name]
            assert status in (201, 503), answers[name]
            assert history.count(name) == 1 if status == 201 else history.count(name) <= 1


async def test_a_call_forwarded_to_a_paused_owner_is_given_up_after_its_lease(tmp_path, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=2, lease_s=1.0) as cluster:
        h1, h2 = cluster.hosts
        async with httpx.AsyncClient(timeout=60) as http:
            assert (await http.post(f"{h1.url}/v1/sessions/held/messages", json={"message": msg("m0")})).status_code \
                == 201
            assert (await http.get(f"{h2.url}/v1/sessions/held/messages:count")).json() == {"count": 1}  # h2 knows h1
            h1.pause()
            started = trio.current_time()
            held = await http.get(f"{h2.url}/v1/sessions/held/messages:count")
            waited = trio.current_time() - started
            assert (held.status_code, held.json()["error"]["type"]) == (503, "OwnerUnreachableError")
            assert int(held.headers["Retry-After"]) >= 1
            assert waited < 10 * cluster.lease_s  # given up once the paused owner's lease ran out, not at SIGCONT
            again = await http.get(f"{h2.url}/v1/sessions/held/messages:count")  # h2 takes the session over
            assert (again.status_code, again.json(), again.headers[OWNER_HEADER]) == (200, {"count": 1}, h2.url)
            h1.resume()


async def _appended(session, message_id):
    try:
        return await session.append_message(msg(message_id)) is not None
    except Exception:  # noqa: BLE001 - the takeover has not happened yet
        return False


async def test_an_alarm_fires_once_after_its_owner_is_killed(tmp_path, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=3, lease_s=1.0) as cluster:
        h1, h2, h3 = cluster.hosts
        async with SessionsClient(h1.url) as direct:
            s = direct.session("wake-me")
            await s.append_message(msg("m0"))  # h1 owns it
            await s.call("schedule", 2.0)
        h1.kill()
        fired = await await_until(lambda: cluster.events("alarms"), 30, "the alarm to fire on another host")
        await trio.sleep(3 * cluster.lease_s)  # time for a second delivery, if there were one
        fired = cluster.events("alarms")
        assert len(fired) == 1, fired
        assert int(fired[0][0]) in (h2.process.pid, h3.process.pid)
