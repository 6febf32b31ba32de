"""Refusals counted from a request's arrival, and WebSocket upgrades admitted apart from calls (issue 32).

* The host's queue bound counts from when the request arrived
  (:data:`runtime.host.turns.ARRIVED`, set by the server's listener), not from
  when the host saw the call: a call that arrived long ago and would have to
  wait is refused at once and never runs; one that is waiting is refused the
  bound after its arrival. (Host-level, on trio's MockClock.)
* The listener tells an upgrade from a call by its head; a head that has
  already arrived never counts as waiting (so is never crowded out by
  connections still sending theirs); a connection that finds as many others
  waiting for a place as there are places is refused at once (503 with
  ``Retry-After``) rather than after waiting for nothing. (Real sockets on
  loopback, the listener driven directly.)
* Against a real ``serve`` process: during a flood of calls on one session
  whose mailbox is full, WebSocket upgrades to that session are all accepted
  and their frames are answered; every refused call carries ``Retry-After``.
  (Latencies are measured by ``benchmarks/drill_flood.py``, not asserted here.)
"""

from __future__ import annotations

import json
import socket

import pytest
import trio
import trio.testing

from actors import Agent
from common.errors import ActorBusyError
from runtime import open_host
from runtime.client import SessionsClient
from runtime.client.websocket import WebSocketConnection
from runtime.host.turns import ARRIVED, LATE_GRACE
from runtime.server import listener as listener_module
from runtime.server.listener import AdmittingListener, _is_upgrade
from runtime.testing import actor_data_dir  # noqa: F401 (fixture)
from tests.runtime.server.test_faults_floods import connect, many_files, read_answer  # noqa: F401 (fixture)
from tests.support.processes import server_process


class Worker(Agent):
    async def work(self, label, seconds):
        await self.ctx.block_concurrency_while(lambda: trio.sleep(seconds))
        self.env.setdefault("ran", []).append(label)
        return label


async def call(stub, results, label, seconds, arrived=None):
    if arrived is not None:
        ARRIVED.set(arrived)  # as the server's listener does for a request's task
    try:
        results[label] = (await stub.work(label, seconds), trio.current_time())
    except ActorBusyError as exc:
        results[label] = (exc, trio.current_time())


async def test_a_call_that_must_wait_is_refused_the_bound_after_its_arrival_or_after_the_grace(autojump_clock, actor_data_dir):
    env = {}
    async with open_host(actor_data_dir, max_queue_s=1.0) as host:
        stub = host.bind("w", Worker, env=env).get_by_name("a")
        await stub.work("warm", 0)
        results = {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, stub, results, "slow", 3.0)
            await trio.sleep(0.1)
            now = trio.current_time()
            nursery.start_soon(call, stub, results, "old", 0, now - 1.2)  # arrived 1.2 s ago: only the grace left
            nursery.start_soon(call, stub, results, "aged", 0, now - 0.3)  # 0.7 s left (more than the grace)
            nursery.start_soon(call, stub, results, "fresh", 0)  # arrival unknown: timed from now
        refusal, refused_at = results["old"]
        assert isinstance(refusal, ActorBusyError) and refused_at == pytest.approx(now + LATE_GRACE * 1.0)
        refusal, refused_at = results["aged"]
        assert isinstance(refusal, ActorBusyError) and refused_at == pytest.approx(now + 0.7)
        refusal, refused_at = results["fresh"]
        assert isinstance(refusal, ActorBusyError) and refused_at == pytest.approx(now + 1.0)
        assert env["ran"] == ["warm", "slow"]  # no refused call ran
        assert ARRIVED.get() is None


async def test_a_queue_that_cannot_reach_a_call_in_what_is_left_since_its_arrival_refuses_it_at_once(
        autojump_clock, actor_data_dir):
    env = {}
    async with open_host(actor_data_dir, max_queue_s=1.0) as host:
        stub = host.bind("w", Worker, env=env).get_by_name("a")
        await stub.work("warm", 0)
        results = {}
        async with trio.open_nursery() as nursery:
            for i in range(3):  # each holds the gate 0.3 s: the queue moves one call per 0.3 s
                nursery.start_soon(call, stub, results, f"q{i}", 0.3)
            await trio.sleep(0.65)  # q0, q1 done, q2 running: the pace is known, nothing waits
            nursery.start_soon(call, stub, results, "q3", 0.3)
            await trio.sleep(0.01)  # q3 waits: a new call would start in about 0.6 s
            now = trio.current_time()
            ARRIVED.set(now - 0.2)  # 0.8 s left: room
            assert host.admission_refusal(stub.id) is None
            ARRIVED.set(now - 0.5)  # 0.5 s left: none (asked, not counted)
            assert isinstance(host.admission_refusal(stub.id), ActorBusyError)
            await call(stub, results, "late", 0, now - 0.5)
            assert trio.current_time() == now  # refused at once
            ARRIVED.set(None)
        assert isinstance(results["late"][0], ActorBusyError)
        assert [results[f"q{i}"][0] for i in range(4)] == ["q0", "q1", "q2", "q3"]
        assert "late" not in env["ran"]


async def test_a_call_that_arrived_long_ago_runs_when_it_need_not_wait(autojump_clock, actor_data_dir):
    env = {}
    async with open_host(actor_data_dir, max_queue_s=1.0) as host:
        stub = host.bind("w", Worker, env=env).get_by_name("a")
        await stub.work("warm", 0)
        results = {}
        await call(stub, results, "old", 0, trio.current_time() - 5)
        assert results["old"][0] == "old"


async def test_the_arrival_is_read_once_per_request(autojump_clock, actor_data_dir):
    async with open_host(actor_data_dir, max_queue_s=1.0) as host:
        stub = host.bind("w", Worker, env={}).get_by_name("a")
        ARRIVED.set(trio.current_time() - 5)
        assert await stub.work("first", 0) == "first"
        assert ARRIVED.get() is None  # the request's later calls are timed from when they reach the host


def test_the_listener_tells_an_upgrade_from_a_call():
    upgrade = b"GET /v1/sessions/s/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: WebSocket\r\n\r\n"
    assert _is_upgrade(upgrade)
    assert not _is_upgrade(b"GET /v1/sessions/s HTTP/1.1\r\nHost: x\r\n\r\n")
    assert not _is_upgrade(b"POST /v1/sessions/s/ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n")
    assert not _is_upgrade(b"GET /v1/sessions/s HTTP/1.1\r\nUpgrade: h2c\r\n\r\n")
    assert not _is_upgrade(b"GET /x HTTP/1.1\r\nX: 1\r\n\r\nUpgrade: websocket\r\n")  # in the body, not the head


def listening_socket():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def clients_sending_heads(sock, count, path="/v1/sessions/s/messages"):
    """``count`` connected client sockets, each having sent a whole request head (with no body)."""
    clients = []
    for _ in range(count):
        client = socket.create_connection(sock.getsockname())
        client.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        clients.append(client)
    return clients


def received(client):
    """What the server sent ``client`` so far (without waiting)."""
    try:
        return client.recv(65536, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return b""


async def test_connections_whose_heads_arrived_are_not_crowded_out_by_those_waiting_for_theirs(monkeypatch):
    monkeypatch.setattr(listener_module, "MAX_HEADS_WAITING", 4)
    sock = listening_socket()
    listener = AdmittingListener(sock, max_waiting=64, max_wait_s=60)
    clients = clients_sending_heads(sock, 12)
    accepted = []
    while len(accepted) < 12:
        conn, address = sock.accept()
        conn.setblocking(False)
        accepted.append((conn, address))
    streams = []

    async def admit(conn, address):
        streams.append(await listener.admit(conn, address))

    async with trio.open_nursery() as nursery:  # all at once, as the server starts a task per connection
        for conn, address in accepted:
            nursery.start_soon(admit, conn, address)
    assert len(streams) == 12 and None not in streams  # 8 were closed unread before
    assert listener.refused == 0 and listener.timed_out == 0
    for stream in streams:
        await stream.aclose()
    for client in clients:
        client.close()
    await listener.aclose()


async def test_a_connection_finding_as_many_waiting_as_places_is_refused_at_once():
    sock = listening_socket()
    listener = AdmittingListener(sock, max_waiting=2, max_wait_s=3600)  # a waiting connection waits "forever"
    clients = clients_sending_heads(sock, 8)
    streams = []

    async def admit(conn, address, screened):
        streams.append(await listener.admit(conn, address, screened))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.closer.run)  # closes the refused connections (when cancelled, at the end)
        kept = 0
        while kept + listener.refused < 8:
            batch = await listener.accept_batch(limit=16)
            kept += len(batch)
            for conn, address, screened in batch:
                nursery.start_soon(admit, conn, address, screened)
        await trio.testing.wait_all_tasks_blocked()
        answers = [received(client) for client in clients]
        refused = [answer for answer in answers if answer]
        assert len(streams) == 2 and None not in streams  # the two places
        assert listener.refused == 4 and len(refused) == 4  # two wait for a place; the other four: at once
        for answer in refused:
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503 ") and b"\r\nRetry-After: 1\r\n" in head + b"\r\n"
            assert json.loads(body)["error"]["type"] == "ServerBusyError"
        for stream in streams:
            await stream.aclose()  # two places free: the two waiting connections get them
        await trio.testing.wait_all_tasks_blocked()
        assert len(streams) == 4 and None not in streams
        nursery.cancel_scope.cancel()
    for stream in streams[2:]:
        await stream.aclose()
    for client in clients:
        client.close()
    await listener.aclose()


async def test_refusals_answered_by_the_accept_loop_do_not_count_against_its_batch():
    """A turn of the accept loop keeps at most ``limit`` connections (each gets a task) but answers every
    refused one it meets on the way, up to ``most`` taken in all: a flood's refusals leave in few turns."""
    sock = listening_socket()
    listener = AdmittingListener(sock, max_waiting=64, max_wait_s=60,
                                 early_refusal=lambda head: ActorBusyError("s", 1.0) if b"/busy/" in head else None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.closer.run)  # closes the refused connections (when cancelled, at the end)
        refused = clients_sending_heads(sock, 10, "/v1/sessions/busy/messages")
        admitted = clients_sending_heads(sock, 3)
        batch = await listener.accept_batch(limit=1)  # one turn
        assert listener.refused == 10 and len(batch) == 1
        for client in refused:
            answer = received(client)
            assert answer.startswith(b"HTTP/1.1 429 ") and b"\r\nRetry-After: 1\r\n" in answer
        assert all(received(client) == b"" for client in admitted)  # kept: answered by the server later
        batch += await listener.accept_batch(limit=8)
        assert len(batch) == 3 and listener.refused == 10

        more = clients_sending_heads(sock, 6, "/v1/sessions/busy/messages")
        assert await listener.accept_batch(limit=1, most=4) == [] and listener.refused == 14  # at most 4 taken
        assert await listener.accept_batch(limit=1, most=4) == [] and listener.refused == 16
        nursery.cancel_scope.cancel()
    for conn, _, _ in batch:
        conn.close()
    for client in refused + admitted + more:
        client.close()
    await listener.aclose()


CALLS = 600
UPGRADES = 40


@pytest.mark.slow
async def test_websocket_upgrades_to_a_flooded_session_are_accepted_and_refusals_carry_retry_after(
        tmp_path, many_files):
    config = tmp_path / "sessions.toml"  # a small mailbox: the flood certainly fills it
    config.write_text("[server]\nmax_pending_calls = 4\nmax_connections_per_peer = 4096\n")
    with server_process(tmp_path / "data", extra=["--config", str(config)]) as server:
        host, port = server.url[len("http://"):].rsplit(":", 1)
        port = int(port)
        answers, sockets, failures = [], [], []
        start = trio.Event()

        async def one_call(i):
            message = {"id": f"f{i}", "role": "user", "parts": [{"type": "text", "text": f"flood {i}"}]}
            body = json.dumps({"message": message}).encode()
            head = (f"POST /v1/sessions/flood/messages HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
                    f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
            await start.wait()
            try:
                with trio.fail_after(60):
                    async with await connect(host, port) as stream:
                        await stream.send_all(head + body)
                        answers.append(await read_answer(stream))
            except (OSError, EOFError, trio.BrokenResourceError, trio.TooSlowError) as exc:
                failures.append(repr(exc))

        async def one_upgrade():
            await start.wait()
            try:
                with trio.fail_after(60):
                    sockets.append(await WebSocketConnection.connect(f"ws://{host}:{port}/v1/sessions/flood/ws"))
            except Exception as exc:  # noqa: BLE001 - the assertion below lists what went wrong
                failures.append(repr(exc))

        async with trio.open_nursery() as nursery:
            for i in range(CALLS):
                nursery.start_soon(one_call, i)
                if i % (CALLS // UPGRADES) == 0:
                    nursery.start_soon(one_upgrade)
            await trio.sleep(0.2)
            start.set()
        assert failures == []
        assert len(sockets) == UPGRADES  # every upgrade accepted, whatever the calls met
        refused = [(status, headers, body) for status, headers, body in answers if status != 201]
        assert refused, "the flood filled no mailbox: nothing was tested"
        for status, headers, body in refused:
            assert status in (429, 503) and headers["retry-after"] == "1"
            assert json.loads(body)["error"]["type"] in ("ActorBusyError", "ActorOverloadedError", "ServerBusyError")
        acknowledged = sum(status == 201 for status, _, _ in answers)
        for n, ws in enumerate(sockets):  # each socket's frames are calls like any other
            with trio.fail_after(60):
                await ws.send(json.dumps({"id": n, "method": "get_path_length"}))
                while (frame := json.loads(await ws.receive())).get("id") != n:
                    pass
            assert frame["result"] == acknowledged
            await ws.aclose()
        async with SessionsClient(server.url) as client:
            assert await client.session("flood").get_path_length() == acknowledged
    log = (tmp_path / "data-server.log").read_text()
    assert " ERROR " not in log and "Traceback" not in log
