"""The server process under stress: a client that stops reading, kill -9, SIGTERM mid-call,
idle connections, and addresses it must refuse.

Each test runs its own ``durable-sessions serve`` process (some kill it on
purpose, some need a configuration of their own).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

import httpx
import pytest
import trio

from common.errors import ActorBusyError, ServerUnreachableError
from runtime.client import SessionsClient
from runtime.client.http import KEEPALIVE_EXPIRY_S
from runtime.client.websocket import ConnectionClosed, WebSocketConnection
from runtime.server.app import SessionsServer
from runtime.server.config import ServerSettings
from tests.support.processes import cli_command, cli_env, kill_hard, server_process


def msg(message_id, text):
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) / 1024


def config_file(tmp_path, **server):
    path = tmp_path / "sessions.toml"
    path.write_text("[server]\n" + "".join(f"{key} = {value}\n" for key, value in server.items()))
    return path


# -- a WebSocket client that stops reading ---------------------------------------------------------


async def test_a_websocket_peer_that_stops_reading_is_closed_with_1008_and_memory_stays_bounded(tmp_path):
    config = config_file(tmp_path, max_body_bytes=65536)  # queue limit: 4 x 64 KiB
    with server_process(tmp_path / "data", extra=["--config", str(config)]) as server:
        async with SessionsClient(server.url) as client:
            big = client.session("big")
            for batch in range(8):  # ~200 KB of history
                await big.append_messages([msg(f"m{batch}-{i}", f"word{i} " * 100) for i in range(40)])
            before = rss_mb(server.process.pid)
            ws = await WebSocketConnection.connect(client.websocket_url("/v1/sessions/big/ws"))
            for call in range(600):  # ~120 MB of answers, not read for now
                await ws.send(json.dumps({"id": call, "method": "get_history"}))
            await trio.sleep(1.5)
            with trio.fail_after(10), pytest.raises(ConnectionClosed) as closed:
                while True:  # what the socket buffers held, then the server's close frame
                    await ws.receive()
            assert closed.value.code == 1008
            assert ws._closed.reason == "too slow: outgoing queue full"
            assert rss_mb(server.process.pid) - before < 60
            assert await big.get_path_length() == 320  # the server goes on serving
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)  # nothing of that socket is left to wait for
        assert await trio.to_thread.run_sync(server.process.wait, 20) == 0
        assert time.monotonic() - started < 5


async def test_a_websocket_call_whose_answer_is_larger_than_a_request_body_is_answered(tmp_path):
    config = tmp_path / "sessions.toml"
    config.write_text("[session]\ncompaction = false\n")
    with server_process(tmp_path / "data", extra=["--config", str(config)]) as server:
        async with SessionsClient(server.url) as client:
            session = client.session("long")
            for i in range(10):  # 17.5 MB of history, each append well under the body limit
                await session.append_message(msg(f"m{i}", "x" * 1_750_000))
            async with session.websocket() as ws:
                history = await ws.call("get_history")
                assert [m["id"] for m in history] == [f"m{i}" for i in range(10)]
                assert await ws.call("get_path_length") == 10  # the socket is still open


# -- kill -9 and restart ------------------------------------------------------------------------------


async def test_every_acknowledged_append_survives_kill_9(tmp_path):
    acknowledged: dict[str, list[str]] = {}
    with server_process(tmp_path / "data") as server:
        async with SessionsClient(server.url) as client:

            async def writer(session_id):
                session = client.session(session_id)
                done = acknowledged.setdefault(session_id, [])
                for i in range(1000):
                    try:
                        assert await session.append_message(msg(f"{session_id}-{i}", f"fact number {i}"))
                    except (httpx.TransportError, OSError):
                        return
                    done.append(f"{session_id}-{i}")

            async with trio.open_nursery() as nursery:
                for w in range(10):
                    nursery.start_soon(writer, f"w{w}")
                with trio.fail_after(120):  # the writers are well under way, however slow the machine
                    while sum(map(len, acknowledged.values())) <= 50:
                        await trio.sleep(0.01)
                kill_hard(server)
    assert sum(map(len, acknowledged.values())) > 50
    with server_process(tmp_path / "data") as server:
        async with SessionsClient(server.url) as client:
            for session_id, ids in acknowledged.items():
                history = [m["id"] for m in await client.session(session_id).get_history()]
                assert history[: len(ids)] == ids  # at most the one unacknowledged append is extra
                assert len(history) - len(ids) <= 1


# -- SIGTERM while calls run ---------------------------------------------------------------------------


async def test_sigterm_during_inflight_calls_answers_them_and_exits_0(tmp_path):
    outcomes: list[object] = []
    with server_process(tmp_path / "data") as server:
        async with SessionsClient(server.url) as client:
            session = client.session("busy")
            await session.append_messages([msg(f"h{i}", "lorem ipsum " * 8) for i in range(2000)])

            async def reader():
                try:
                    outcomes.append(len(await session.get_history()))
                except Exception as exc:  # noqa: BLE001 - refused or cut off: judged below
                    outcomes.append(exc)

            async with trio.open_nursery() as nursery:
                for _ in range(30):
                    nursery.start_soon(reader)
                await trio.sleep(0.2)
                server.process.send_signal(signal.SIGTERM)
            assert await trio.to_thread.run_sync(server.process.wait, 20) == 0
    answered = [o for o in outcomes if isinstance(o, int)]
    assert answered and set(answered) == {2000}
    # Calls that came after the listener stopped were never admitted; on a loaded machine some of the 30
    # reads wait in the session's mailbox longer than max_queue_s and are refused unrun (429), as always.
    for other in outcomes:
        assert isinstance(other, int | httpx.TransportError | ServerUnreachableError | ActorBusyError) or (
            type(other).__name__ == "ServiceUnavailableError"), other
    with server_process(tmp_path / "data") as server:
        async with SessionsClient(server.url) as client:
            assert await client.session("busy").get_path_length() == 2000


# -- idle connections -------------------------------------------------------------------------------------


def test_the_server_keeps_idle_connections_longer_than_the_client_pool_does():
    assert ServerSettings().keep_alive_timeout_s == 30.0
    assert KEEPALIVE_EXPIRY_S == 5.0


def test_an_idle_keep_alive_connection_is_closed_after_the_timeout(tmp_path):
    config = config_file(tmp_path, keep_alive_timeout_s=1)
    with server_process(tmp_path / "data", extra=["--config", str(config)]) as server:
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.settimeout(5)
            for _ in range(2):  # idle after a request as much as after connecting
                sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
                answer = b""
                while not answer.endswith(b'{"status":"ok"}'):
                    answer += sock.recv(1000)
                assert answer.startswith(b"HTTP/1.1 200")
            started = time.monotonic()
            assert sock.recv(100) == b""
            assert 0.8 < time.monotonic() - started < 3


# -- addresses ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bind", ["0.0.0.0:0", "[::]:0", ":0", "127.0.0.1.nip.io:0"])
def test_a_non_loopback_bind_without_a_token_is_refused_before_listening(tmp_path, bind):
    done = subprocess.run([*cli_command(), "serve", "--bind", bind, "--data", str(tmp_path / "data")],
                          env=cli_env(None), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.startswith(f"durable-sessions serve: refusing to serve {bind} without a token")
    assert not (tmp_path / "data").exists()


def test_an_empty_token_does_not_count_as_a_token(tmp_path):
    env = {**cli_env(None), "DURABLE_SESSIONS_TOKEN": ""}
    done = subprocess.run([*cli_command(), "serve", "--bind", "0.0.0.0:0", "--data", str(tmp_path / "data")],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert os.path.exists(tmp_path / "data") is False


@pytest.mark.parametrize("token", ["pässwörd", "trailing ", "tab\tinside"])
def test_a_token_no_client_could_send_is_refused_at_start(tmp_path, token):
    env = {**cli_env(None), "DURABLE_SESSIONS_TOKEN": token}
    done = subprocess.run([*cli_command(), "serve", "--bind", "127.0.0.1:0", "--data", str(tmp_path / "data")],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr == ("durable-sessions serve: the token must be printable ASCII without leading or trailing "
                           "spaces (it travels in an HTTP header)\n")
    assert not (tmp_path / "data").exists()


def test_create_app_refuses_such_a_token_too():
    with pytest.raises(ValueError, match="the token must be printable ASCII"):
        SessionsServer.check_token("pässwörd")
