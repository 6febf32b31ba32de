"""One client cannot stall or starve the host: bounded work per body, idle sockets hold no place.

Against real ``durable-sessions serve`` processes on loopback:

* a message of 349,525 empty parts (1 MiB of JSON; it held the event loop
  for seconds) is refused with 413 naming ``server.max_body_items`` while
  health keeps answering; a message of more parts than the parts limit is a
  400 naming ``message.parts``; nothing is stored;
* a 3.8 MiB msgpack WebSocket frame of empty arrays is refused with an
  error frame, and the socket goes on answering;
* connections that send nothing, or half a request head, are closed after
  ``head_timeout_s``; while they are open a legitimate request is served;
  past ``max_connections_per_peer`` an address is refused 503 with
  ``Retry-After``.

No assertion depends on speed: deadlines are generous, and "health answers
while a body is handled" means it answered at all.
"""

from __future__ import annotations

import json
import time

import msgpack
import pytest
import trio

from actors.session_messages import MAX_MESSAGE_PARTS
from runtime.client import SessionsClient
from runtime.client.websocket import WebSocketConnection
from tests.runtime.server.test_faults_floods import address, read_answer
from tests.support.processes import server_process

pytestmark = pytest.mark.slow

DEADLINE_S = 60


async def connect(host, port, source=None):
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    if source is not None:
        await sock.bind((source, 0))
    await sock.connect((host, port))
    return trio.SocketStream(sock)


def request(method, path, body=b"", content_type="application/json"):
    head = (f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode() + body


async def ask(server, method, path, body=b"", content_type="application/json", source=None):
    async with await connect(*address(server), source=source) as stream:
        await stream.send_all(request(method, path, body, content_type))
        return await read_answer(stream)


async def closed_by_server(stream):
    """Wait until the server closes ``stream`` (EOF or reset)."""
    try:
        while await stream.receive_some(4096):
            pass
    except trio.BrokenResourceError:
        pass


def parts_message(count, part="{}"):
    return ('{"message":{"id":"big","role":"user","parts":[' + ",".join([part] * count) + "]}}").encode()


# -- bounded work per request -------------------------------------------------------------------------


async def test_a_message_of_349525_empty_parts_is_refused_naming_the_limit_while_health_answers(tmp_path):
    with server_process(tmp_path / "data") as server:
        answers, health = [], []

        async def big():
            answers.append(await ask(server, "POST", "/v1/sessions/big/messages", parts_message(349_525)))

        async def probe():
            while not answers:
                status, _, _ = await ask(server, "GET", "/v1/health")
                health.append(status)
                await trio.sleep(0.01)

        with trio.fail_after(DEADLINE_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(probe)
                nursery.start_soon(big)
            status, _, body = answers[0]
            assert status == 413, body
            assert json.loads(body)["error"] == {
                "type": "PayloadTooLargeError", "field": "body",
                "message": "the body holds more than 100000 values in arrays and objects, "
                           "the server's limit (server.max_body_items)"}
            assert health and set(health) == {200}
            packed = msgpack.packb({"message": {"id": "big", "role": "user", "parts": [[]] * 200_000}})
            status, _, body = await ask(server, "POST", "/v1/sessions/big/messages", packed, "application/msgpack")
            assert status == 413 and json.loads(body)["error"]["field"] == "body", body
            async with SessionsClient(server.url) as client:
                assert await client.session("big").get_path_length() == 0


async def test_a_message_over_the_parts_limit_is_a_400_naming_its_parts(tmp_path):
    with server_process(tmp_path / "data") as server:
        with trio.fail_after(DEADLINE_S):
            over = parts_message(MAX_MESSAGE_PARTS + 1, '{"type":"text","text":""}')
            status, _, body = await ask(server, "POST", "/v1/sessions/parts/messages", over)
            assert status == 400, body
            assert json.loads(body)["error"] == {
                "type": "InvalidMessageError", "field": "message.parts",
                "message": f"message.parts has {MAX_MESSAGE_PARTS + 1} parts; the limit is {MAX_MESSAGE_PARTS}"}
            at_limit = parts_message(MAX_MESSAGE_PARTS, '{"type":"text","text":""}')
            status, _, body = await ask(server, "POST", "/v1/sessions/parts/messages", at_limit)
            assert status == 201, body
            async with SessionsClient(server.url) as client:
                assert await client.session("parts").get_path_length() == 1


async def test_a_msgpack_websocket_frame_of_empty_arrays_is_refused_and_the_socket_keeps_answering(tmp_path):
    count = int(3.8 * 2**20)
    frame = (b"\x83\xa2id\x01\xa6method\xafappend_messages\xa6params\x81\xa8messages"
             + b"\xdd" + count.to_bytes(4, "big") + b"\x90" * count)
    with server_process(tmp_path / "data") as server:
        ws = await WebSocketConnection.connect("ws" + server.url[4:] + "/v1/sessions/frames/ws")
        try:
            with trio.fail_after(DEADLINE_S):
                await ws.send(frame)
                reply = msgpack.unpackb(await ws.receive())
                assert reply == {"id": None, "error": {
                    "type": "PayloadTooLargeError", "field": "body",
                    "message": "the body holds more than 100000 values in arrays and objects, "
                               "the server's limit (server.max_body_items)"}}
                await ws.send(msgpack.packb({"id": 2, "method": "get_path_length", "params": {}}))
                assert msgpack.unpackb(await ws.receive()) == {"id": 2, "result": 0}
        finally:
            await ws.aclose()


# -- connections --------------------------------------------------------------------------------------


async def test_connections_that_send_no_request_head_are_closed_after_the_head_timeout(tmp_path):
    config = tmp_path / "sessions.toml"
    config.write_text("[server]\nhead_timeout_s = 1\nkeep_alive_timeout_s = 600\n")
    with server_process(tmp_path / "data", extra=["--config", str(config)]) as server:
        host, port = address(server)
        silent = await connect(host, port)
        half = await connect(host, port)
        await half.send_all(b"POST /v1/sessions/x/messages HTTP/1.1\r\nHost: localhost\r\nContent-Le")
        started = time.monotonic()
        with trio.fail_after(DEADLINE_S):  # hypercorn alone keeps them for keep_alive_timeout_s
            await closed_by_server(silent)
            await closed_by_server(half)
        assert time.monotonic() - started >= 0.9
        await silent.aclose()
        await half.aclose()
        status, _, _ = await ask(server, "GET", "/v1/health")
        assert status == 200


async def test_a_legitimate_request_is_served_while_idle_sockets_flood_the_server(tmp_path):
    config = tmp_path / "sessions.toml"
    config.write_text("[server]\nmax_connecting = 4\nhead_timeout_s = 30\nmax_connections_per_peer = 60\n")
    with server_process(tmp_path / "data", extra=["--config", str(config)]) as server:
        host, port = address(server)
        idle = []
        try:
            for index in range(60):  # 15 times the places, each sending nothing or half a head
                stream = await connect(host, port, source="127.0.0.2")
                if index % 2:
                    await stream.send_all(b"GET /v1/sessions/x/messages HTTP/1.1\r\nHo")
                idle.append(stream)
            with trio.fail_after(DEADLINE_S):
                for attempt in range(3):
                    body = json.dumps({"message": {"id": f"m{attempt}", "role": "user",
                                                   "parts": [{"type": "text", "text": "hello"}]}}).encode()
                    status, _, answer = await ask(server, "POST", "/v1/sessions/legit/messages", body)
                    assert status == 201, answer
                # one more from the flooding address: past its cap, refused at once, typed, with Retry-After
                status, headers, answer = await ask(server, "GET", "/v1/sessions/legit/messages:count",
                                                    source="127.0.0.2")
            assert status == 503, answer
            assert json.loads(answer)["error"]["type"] == "ServerBusyError"
            assert "max_connections_per_peer" in json.loads(answer)["error"]["message"]
            assert int(headers["retry-after"]) >= 1
        finally:
            for stream in idle:
                await stream.aclose()
        async with SessionsClient(server.url) as client:
            assert await client.session("legit").get_path_length() == 3
