"""The WebSocket route: RPC frames, broadcasts, on_message, and sockets held across hibernation."""

import json
import socket

import msgpack
import pytest
import trio
from quart.testing.connections import WebsocketDisconnectError, WebsocketResponseError

from actors.session_agent import SessionAgent
from common.errors import ConflictError
from runtime import open_host
from runtime.server.app import bind_sessions, create_app
from runtime.server.listener import _ReleasingStream
from runtime.server.websocket import PEER_QUEUE_FRAMES, _Peer

TOKEN = "tok"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WS = "/v1/sessions/room-1/ws"


class Chatty(SessionAgent):
    """Broadcasts on request, echoes plain frames, refuses the session named 'closed', closes 'moved' at once."""

    async def on_connect(self, conn):
        if self.ctx.id.name == "closed":
            raise ConflictError("this session takes no connections")
        if self.ctx.id.name == "moved":  # the host asks for the socket's close before it is served
            conn.close(1012, "the owner moved")

    async def on_message(self, conn, message):
        conn.send(f"echo:{message}" if isinstance(message, str) else b"echo:" + message)

    async def shout(self, text):
        self.broadcast(text)
        return len(self.ctx.get_connections())


def msg(message_id, words):
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": words}]}


@pytest.fixture
async def host(tmp_path):
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host, agent_class=Chatty)
        yield host


@pytest.fixture
def app(host):
    return create_app(host, token=TOKEN, max_body_bytes=4096)


async def rpc(ws, call_id, method, params=None, *, pushed=None):
    """Send a call and return its reply; frames pushed before it go to ``pushed`` (a list)."""
    frame = {"id": call_id, "method": method}
    if params is not None:
        frame["params"] = params
    await ws.send(json.dumps(frame))
    while True:
        reply = json.loads(await ws.receive())
        if isinstance(reply, dict) and reply.get("id") == call_id and ("result" in reply or "error" in reply):
            return reply
        if pushed is None:
            raise AssertionError(f"unexpected frame {reply!r}")
        pushed.append(reply)


async def test_rpc_frames_get_results_and_errors(app):
    async with app.test_client().websocket(WS, headers=AUTH) as ws:
        assert await rpc(ws, 1, "append_message", {"message": msg("m1", "hi")}, pushed=[]) == {"id": 1, "result": True}
        assert await rpc(ws, "b", "get_history") == {"id": "b", "result": [msg("m1", "hi")]}
        assert await rpc(ws, 3, "get_message", ["nope"]) == {"id": 3, "result": None}
        assert await rpc(ws, 4, "update_message", [msg("zz", "x")]) == {
            "id": 4, "error": {"type": "MessageNotFoundError", "message": "message 'zz' not found"}}
        assert await rpc(ws, 5, "nope") == {
            "id": 5,
            "error": {"type": "UnknownMethodError", "message": "actor class Chatty has no callable method 'nope'"}}
        assert await rpc(ws, 6, "get_history", "m1") == {
            "id": 6, "error": {"type": "InvalidInputError", "message": "params must be an object or a list",
                               "field": "params"}}
    metrics = app.extensions["durable_sessions"].metrics.render().decode()
    assert 'durable_sessions_requests_total{route="WS append_message",status="200"} 1.0' in metrics
    assert 'durable_sessions_requests_total{route="WS ?",status="404"} 1.0' in metrics  # names never become labels


async def test_every_write_pushes_a_session_status_before_its_reply(app):
    client = app.test_client()
    async with client.websocket(WS, headers=AUTH) as writer, client.websocket(WS, headers=AUTH) as watcher:
        await rpc(watcher, 0, "get_path_length")
        pushed = []
        assert await rpc(writer, 1, "append_message", [msg("m1", "hi")], pushed=pushed) == {"id": 1, "result": True}
        # A batch is one write: one status, after the whole batch.
        assert await rpc(writer, 2, "append_messages", [[msg("m2", "there"), msg("m3", "again")]], pushed=pushed) == {
            "id": 2, "result": [True, True]}
        assert [list(p) for p in pushed] == [["type", "phase", "tokenEstimate", "tokenThreshold", "sessionId"]] * 2
        assert [(p["type"], p["phase"], p["tokenThreshold"], p["sessionId"]) for p in pushed] == [
            ("cf_agent_session", "idle", 100000, "room-1")] * 2
        assert pushed[1]["tokenEstimate"] > pushed[0]["tokenEstimate"] > 0
        assert [json.loads(await watcher.receive()) for _ in range(2)] == pushed
        seen = []
        assert await rpc(writer, 3, "delete_messages", [["m2", "m3"]], pushed=seen) == {"id": 3, "result": 2}
        assert seen == [pushed[0]]  # the estimate is back to that of m1 alone


async def test_broadcasts_name_the_session_even_when_woken_by_hex_id(app, host):
    """docs/deviations.md #16: the client's session id is in every status, also after an activation
    that did not come through the name (an alarm after a restart reaches the actor by hex id)."""
    client = app.test_client()
    async with client.websocket("/v1/sessions/caf%C3%A9-1/ws", headers=AUTH) as watcher:
        await rpc(watcher, 0, "get_path_length")
        await host.hibernate_all()
        ns = host.namespace("sessions")
        by_hex = ns.get(ns.id_from_name("café-1").hex)
        assert await by_hex.append_message(msg("m1", "hi")) is True
        status = json.loads(await watcher.receive())
        assert (status["type"], status["sessionId"]) == ("cf_agent_session", "café-1")


async def test_binary_frames_are_msgpack_both_ways(app):
    async with app.test_client().websocket(WS, headers=AUTH) as ws:
        await ws.send(msgpack.packb({"id": 7, "method": "get_path_length"}))
        assert msgpack.unpackb(await ws.receive()) == {"id": 7, "result": 0}


async def test_frames_that_are_not_calls_go_to_on_message(app):
    async with app.test_client().websocket(WS, headers=AUTH) as ws:
        await ws.send("hello")
        assert await ws.receive() == "echo:hello"
        await ws.send(json.dumps({"type": "ping"}))
        assert await ws.receive() == 'echo:{"type": "ping"}'
        await ws.send(b"\x01\x02")
        assert await ws.receive() == b"echo:\x01\x02"


async def test_a_frame_over_the_limit_gets_an_error_frame(app):
    async with app.test_client().websocket(WS, headers=AUTH) as ws:
        await ws.send("x" * 5000)
        assert json.loads(await ws.receive()) == {"id": None, "error": {
            "type": "PayloadTooLargeError", "message": "the frame is larger than 4096 bytes"}}
        assert await rpc(ws, 1, "get_path_length") == {"id": 1, "result": 0}


async def test_broadcasts_reach_every_peer_as_they_happen(app):
    client = app.test_client()
    async with client.websocket(WS, headers=AUTH) as first, client.websocket(WS, headers=AUTH) as second:
        await rpc(first, 0, "get_path_length")
        await rpc(second, 0, "get_path_length")  # both peers are connected now
        # the broadcast is queued before the reply, so the caller sees it first
        await first.send(json.dumps({"id": 1, "method": "shout", "params": ["flight delayed"]}))
        assert [await first.receive(), await first.receive()] == ["flight delayed", '{"id":1,"result":2}']
        assert await second.receive() == "flight delayed"
        async with client.websocket("/v1/sessions/room-2/ws", headers=AUTH) as other:  # another session
            await other.send(json.dumps({"id": 1, "method": "shout", "params": ["elsewhere"]}))
            assert [await other.receive(), await other.receive()] == ["elsewhere", '{"id":1,"result":1}']
        assert await rpc(second, 2, "get_path_length") == {"id": 2, "result": 0}  # nothing else was queued


async def test_the_socket_stays_open_while_its_actor_hibernates_and_a_frame_wakes_it(app, host):
    async with app.test_client().websocket(WS, headers=AUTH) as ws:
        assert await rpc(ws, 1, "append_message", {"message": msg("m1", "before")}, pushed=[]) == {
            "id": 1, "result": True}
        assert await host.hibernate_all() == 1
        stats = host.statistics()
        assert (stats.active, stats.hibernated, stats.connections, stats.activations) == (0, 1, 1, 1)
        assert await rpc(ws, 2, "get_history") == {"id": 2, "result": [msg("m1", "before")]}
        assert host.statistics().activations == 2
        await host.hibernate_all()
        await ws.send("wake up")  # a plain frame wakes it too
        assert await ws.receive() == "echo:wake up"
        await ws.send(json.dumps({"id": 3, "method": "shout", "params": ["still here"]}))
        assert [await ws.receive(), await ws.receive()] == ["still here", '{"id":3,"result":1}']
    with trio.fail_after(30):
        while host.statistics().connections:
            await trio.sleep(0.01)


async def test_connections_without_the_token_or_refused_by_on_connect_get_an_http_error(app):
    client = app.test_client()
    for path, headers, status, error_type in [(WS, {}, 401, "UnauthorizedError"),
                                              ("/v1/sessions/closed/ws", AUTH, 409, "ConflictError"),
                                              ("/v1/sessions/room-1/nope", AUTH, 404, "RouteNotFoundError")]:
        with pytest.RaisesGroup(WebsocketResponseError, flatten_subgroups=True) as caught:
            async with client.websocket(path, headers=headers) as ws:
                await ws.receive()
        refused = caught.value.subgroup(WebsocketResponseError)
        while isinstance(refused, BaseExceptionGroup):
            refused = refused.exceptions[0]
        response = refused.response
        assert response.status_code == status
        assert json.loads(await response.get_data())["error"]["type"] == error_type


async def test_a_close_requested_while_the_socket_connects_closes_it_once_accepted(app):
    async with app.test_client().websocket("/v1/sessions/moved/ws", headers=AUTH) as ws:
        with pytest.raises(WebsocketDisconnectError) as caught:
            await ws.receive()
        assert caught.value.args == (1012,)


async def test_an_empty_frame_goes_to_on_message_as_it_was_sent(app):
    async with app.test_client().websocket(WS, headers=AUTH) as ws:
        await ws.send(b"")
        assert await ws.receive() == b"echo:"
        await ws.send("")
        assert await ws.receive() == "echo:"


async def test_shutdown_closes_sockets_with_going_away(app):
    server = app.extensions["durable_sessions"]
    async with app.test_client().websocket(WS, headers=AUTH) as ws:
        await rpc(ws, 1, "get_path_length")
        server.closing.set()
        with pytest.raises(WebsocketDisconnectError) as caught:
            await ws.receive()
        assert caught.value.args == (1001,)


def test_a_peer_that_stops_reading_is_marked_too_slow():
    peer = _Peer()
    for _ in range(PEER_QUEUE_FRAMES):
        peer.send("x")
    assert not peer.overflowed.is_set()
    with pytest.raises(RuntimeError, match="is not reading; closing it"):
        peer.send("one too many")
    assert peer.overflowed.is_set()


def _pending(sock):
    try:
        return sock.recv(65536, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return b""


async def test_writes_held_together_leave_in_one_write_in_order():
    # The served socket's stream (runtime.server.listener): a WebSocket's frames queued together (a turn's
    # status broadcast, then its reply) are held and sent with the last one, in one socket write.
    ours, theirs = socket.socketpair()
    stream = _ReleasingStream(trio.SocketStream(trio.socket.from_stdlib_socket(ours)), lambda: None)
    stream.hold_writes(3)
    await stream.send_all(b"broadcast;")
    await stream.send_all(b"reply;")
    assert _pending(theirs) == b""  # nothing written yet
    await stream.send_all(b"next;")
    assert _pending(theirs) == b"broadcast;reply;next;"
    await stream.release_writes()
    await stream.send_all(b"alone;")  # no longer held
    assert _pending(theirs) == b"alone;"
    stream.hold_writes(3)  # fewer writes came than announced: releasing sends what was held
    await stream.send_all(b"only;")
    assert _pending(theirs) == b""
    await stream.release_writes()
    assert _pending(theirs) == b"only;"
    await stream.aclose()
    theirs.close()
