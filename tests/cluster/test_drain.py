"""A stopping cluster host hands its sessions over before it exits (SIGTERM).

The host stopping refuses new requests (503, the call did not run), lets the
calls it admitted finish, makes their writes durable and releases every
lease at once; only then does its HTTP server drain the connections still
open. So the next call on another host takes the session at once, even while
the stopping process is still waiting for a slow request -- not after the
process exits, nor after its lease (10 s here) expires.
"""

from __future__ import annotations

import signal
import socket

import httpx
import pytest
import trio

from tests.support.cluster_hosts import await_until, run_cluster

pytestmark = pytest.mark.slow

#: A lease far longer than a handover: a session that moved before it ran out was handed over.
LEASE_S = 10.0


def msg(message_id: str) -> dict:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": "drained"}]}


def hold_a_request_open(url: str) -> socket.socket:
    """A request whose body never finishes: the stopping host's HTTP server waits for it."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"POST /v1/sessions/slow/messages HTTP/1.1\r\nHost: localhost\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
    return sock


async def test_a_stopping_host_hands_its_sessions_over_before_it_exits(tmp_path, pg_empty_dsn):
    config = tmp_path / "server.toml"
    config.write_text("[server]\ngraceful_timeout_s = 120\n")
    with run_cluster(tmp_path, pg_empty_dsn, hosts=2, lease_s=LEASE_S, app=None,
                     extra=["--config", str(config)]) as cluster:
        stopping, staying = cluster.hosts
        async with httpx.AsyncClient(timeout=60) as http:
            for i in range(5):
                reply = await http.post(f"{stopping.url}/v1/sessions/s{i}/messages", json={"message": msg(f"a{i}")})
                assert reply.status_code == 201, reply.text
                assert reply.headers["x-durable-sessions-owner"] == stopping.url
            held = hold_a_request_open(stopping.url)
            try:
                stopping.process.send_signal(signal.SIGTERM)
                for i in range(5):  # through the other host, as a client given both URLs would go on
                    async def written(i=i):
                        reply = await http.post(f"{staying.url}/v1/sessions/s{i}/messages",
                                                json={"message": msg(f"b{i}")})
                        return reply if reply.status_code == 201 else None

                    reply = await await_until(written, timeout=60, message=f"s{i} acknowledged on the other host",
                                              interval=0.05)
                    assert reply.headers["x-durable-sessions-owner"] == staying.url
                assert stopping.running  # handed over while the stopping host still waits for the slow request
            finally:
                held.close()
            assert await trio.to_thread.run_sync(lambda: stopping.process.wait(timeout=120)) == 0
            for i in range(5):
                reply = await http.get(f"{staying.url}/v1/sessions/s{i}/messages")
                assert [m["id"] for m in reply.json()["messages"]] == [f"a{i}", f"b{i}"]
