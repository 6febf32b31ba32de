"""WebSocket sessions: RPC frames, ``on_message`` delivery and broadcasts for one peer.

``WS /v1/sessions/{session_id}/ws`` follows the Durable Object hibernation
model: the host holds the socket while its actor hibernates, and the next
frame wakes the actor. A text (JSON) or binary (msgpack) frame that is an
object with ``"method"`` is an RPC call ``{"id", "method", "params"}``
answered with ``{"id", "result"}`` or ``{"id", "error"}`` in the same
encoding (calls of one socket may run concurrently; match replies by
``id``). Any other frame goes to the actor's ``on_message``. Broadcasts
(``Agent.broadcast``) are pushed as they happen.

Frames for a peer wait in a queue. **Backpressure**: while the queue holds
:data:`PEER_READ_PAUSE_FRAMES` frames or more (or a body limit of bytes),
the server stops reading the peer's frames, so a client that pipelines
thousands of calls gets every answer at the pace it reads them, and the
work in flight per socket stays bounded (:data:`PEER_MAX_INFLIGHT` calls).
A peer that stops reading altogether is closed with code 1008 when a
broadcast finds :data:`PEER_QUEUE_FRAMES` frames queued or the queued frames
exceed :data:`PEER_QUEUE_BODIES` body limits in size (replies to its own
calls wait for room in the first case). A frame over the body limit is
answered with a ``PayloadTooLargeError`` frame (``"id": null``), and so is one holding more
than ``server.max_body_items`` values in arrays and objects (it is not parsed).

The route is answered below Quart (:class:`WebSocketEndpoint` is ASGI
middleware in front of the app): hypercorn's ``websocket.*`` messages are
read and sent as they are, with no framework object, context or task per
socket or frame; the checks and refusals before the handshake are the
app's (an HTTP error answer through ``websocket.http.response``).

In a cluster, a socket for a session another host owns is relayed to that
owner (:mod:`runtime.server.relay`); a peer the host drops because the
session moved away (:meth:`_Peer.close`), and every peer when the host
shuts down, is closed with 1012 (:data:`~common.wire.CLOSE_RECONNECT`):
connect again, to any host.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

import trio
from werkzeug.datastructures import Headers

from actors.agent import callable_method
from common.errors import (
    InvalidInputError,
    OriginNotAllowedError,
    PayloadTooLargeError,
    RouteNotFoundError,
    ServiceUnavailableError,
    UnauthorizedError,
)
from common.wire import (
    CLOSE_RECONNECT,
    DEFAULT_MAX_BODY_BYTES,
    HOP_HEADER,
    JSON,
    MSGPACK,
    SESSIONS_PREFIX,
    decode_body,
    encode_body,
    unquote_segment,
)
from runtime.host.ids import ActorId
from runtime.server.browsers import WS_PROTOCOL, OriginPolicy, refusal_message, token_from_protocols
from runtime.server.listener import WRITES_SCOPE_KEY
from runtime.server.relay import open_upstream, relay_frames
from runtime.server.routes import call_method, describe_error
from runtime.wsclient import WebSocketConnection

if TYPE_CHECKING:
    from runtime.server.app import SessionsServer
    from runtime.server.listener import _ReleasingStream
    from runtime.server.forwarding import Forwarder

logger = logging.getLogger(__name__)

#: Frames queued for one WebSocket peer before it counts as too slow.
PEER_QUEUE_FRAMES = 1024
#: RPC calls one WebSocket may have running or waiting to queue their reply (more frames wait to be read).
PEER_MAX_INFLIGHT = 64
#: Frames queued for a peer at which the server stops reading its frames until it has read some:
#: with :data:`PEER_MAX_INFLIGHT` calls each adding a reply and a few broadcasts, the queue stays well
#: below :data:`PEER_QUEUE_FRAMES` for a peer that reads, however many calls it pipelines.
PEER_READ_PAUSE_FRAMES = 128
#: Most frames sent to a peer in one socket write (those queued together, up to this many).
PEER_WRITE_FRAMES = 64
#: Size of the frames queued for one WebSocket peer, in request-body limits (``max_body_bytes``),
#: before it counts as too slow.
PEER_QUEUE_BODIES = 4
#: Seconds a WebSocket closed by the server waits for the client's close reply.
CLOSE_DRAIN_TIMEOUT_S = 5.0
#: WebSocket close codes.
CLOSE_GOING_AWAY, CLOSE_POLICY, CLOSE_TOO_BIG = 1001, 1008, 1009


class _Peer:
    """A WebSocket peer as the host sees it (:class:`actors.agent.ConnectionLike`).

    Its outgoing queue holds at most :data:`PEER_QUEUE_FRAMES` frames and
    ``max_queued`` characters or bytes (a single frame may be larger); a peer
    that lets it overflow is not reading and is closed (``overflowed``).
    """

    def __init__(self, max_queued: int = PEER_QUEUE_BODIES * DEFAULT_MAX_BODY_BYTES) -> None:
        self.id = uuid.uuid4().hex
        self.outbox, self.inbox = trio.open_memory_channel[str | bytes](PEER_QUEUE_FRAMES)
        self.overflowed = trio.Event()
        self.max_queued = max_queued
        self.queued = 0  # length of the frames in the queue
        self._drained: trio.Event | None = None
        self.close_requested = trio.Event()
        self.close_code: tuple[int, str] = (CLOSE_RECONNECT, "")
        #: Called with ``(code, reason)`` when the socket must close (set while the endpoint serves it).
        self.on_stop: Callable[[int, str], None] | None = None

    def close(self, code: int = CLOSE_RECONNECT, reason: str = "") -> None:
        """Close the socket soon with ``code`` (without blocking; the first request wins).

        The host calls it with 1012 when the actor's ownership moves to another
        host of a cluster: the client connects again and reaches the new owner.
        """
        if not self.close_requested.is_set():
            self.close_code = (code, reason)
            self.close_requested.set()
            if self.on_stop is not None:
                self.on_stop(code, reason)

    def _overflow(self) -> None:
        self.overflowed.set()
        if self.on_stop is not None:
            self.on_stop(CLOSE_POLICY, "too slow: outgoing queue full")

    def send(self, message: str | bytes) -> None:
        """Queue a frame without blocking; a full queue marks the peer too slow (it is then closed)."""
        self._account(message)
        try:
            self.outbox.send_nowait(message)
        except trio.WouldBlock:
            self.queued -= len(message)
            self._overflow()
            raise RuntimeError(f"WebSocket peer {self.id} is not reading; closing it") from None
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            self.queued -= len(message)
            raise RuntimeError(f"WebSocket peer {self.id} is closed") from None

    async def reply(self, message: str | bytes) -> None:
        """Queue the answer to one of the peer's frames, waiting while the queue holds too many frames.

        A peer whose queue is over its size limit is closed instead (the frame is dropped).
        """
        try:
            self._account(message)
        except RuntimeError:
            return
        try:
            await self.outbox.send(message)
        except BaseException:
            self.queued -= len(message)
            raise

    def sent(self, message: str | bytes) -> None:
        """``message`` left the queue."""
        self.queued -= len(message)
        if self._drained is not None and not self._crowded():
            self._drained.set()

    def _crowded(self) -> bool:
        frames = self.outbox.statistics().current_buffer_used
        return frames >= PEER_READ_PAUSE_FRAMES or self.queued > self.max_queued // PEER_QUEUE_BODIES

    async def wait_for_room(self) -> None:
        """Backpressure: return once the queue is below the read pause (at once when it is)."""
        while self._crowded():
            self._drained = trio.Event()
            await self._drained.wait()
        self._drained = None

    def _account(self, message: str | bytes) -> None:
        if self.queued and self.queued + len(message) > self.max_queued:
            self._overflow()
            raise RuntimeError(f"WebSocket peer {self.id} is not reading; closing it")
        self.queued += len(message)


class _Socket:
    """One WebSocket as the ASGI server hands it over: what the endpoint and the relay use of it.

    :meth:`receive` skips the server's ``websocket.connect``; when the client is gone
    (``websocket.disconnect``) it cancels ``gone``, the scope around the socket's handler, so
    whatever the handler was doing ends there and its ``finally`` clauses run (as Quart ends a
    WebSocket handler).
    """

    __slots__ = ("scope", "headers", "closed", "_receive", "_send", "_gone")

    def __init__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
                 send: Callable[[dict[str, Any]], Awaitable[None]], gone: trio.CancelScope) -> None:
        self.scope = scope
        self.headers = Headers([(name.decode("latin-1"), value.decode("latin-1"))
                                for name, value in scope.get("headers", ())])
        self.closed = False
        self._receive = receive
        self._send = send
        self._gone = gone

    @property
    def path(self) -> str:
        return cast(str, self.scope["path"])

    @property
    def query_string(self) -> bytes:
        return cast(bytes, self.scope.get("query_string", b""))

    @property
    def scheme(self) -> str:
        return cast(str, self.scope.get("scheme", "ws"))

    @property
    def requested_subprotocols(self) -> list[str]:
        return list(self.scope.get("subprotocols", ()))

    async def accept(self, subprotocol: str | None) -> None:
        await self._send({"type": "websocket.accept", "subprotocol": subprotocol, "headers": []})

    async def receive(self) -> str | bytes:
        """The next frame (text: ``str``, binary: ``bytes``); the handler is cancelled once the client is gone."""
        while True:
            event = await self._receive()
            kind = event["type"]
            if kind == "websocket.receive":
                data = event.get("bytes")
                if data is None:
                    data = event.get("text") or ""
                return cast("str | bytes", data)
            if kind == "websocket.disconnect":
                self.closed = True
                self._gone.cancel()
                await trio.lowlevel.checkpoint()  # raises Cancelled

    async def send(self, frame: str | bytes) -> None:
        if isinstance(frame, str):
            await self._send({"type": "websocket.send", "text": frame})
        else:
            await self._send({"type": "websocket.send", "bytes": frame})

    async def close(self, code: int, reason: str = "") -> None:
        if not self.closed:
            self.closed = True
            await self._send({"type": "websocket.close", "code": code, "reason": reason})

    async def refuse(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        """Answer the upgrade with an HTTP error (``websocket.http.response``; a server without it: close 1000)."""
        if "websocket.http.response" in (self.scope.get("extensions") or {}):
            sent = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
            sent += [(b"content-type", JSON.encode("ascii")), (b"content-length", str(len(body)).encode("ascii"))]
            await self._send({"type": "websocket.http.response.start", "status": status, "headers": sent})
            await self._send({"type": "websocket.http.response.body", "body": body, "more_body": False})
        else:
            await self.close(1000)


def check_browser(socket: _Socket, policy: OriginPolicy,
                  authorized: Callable[[str | None], bool]) -> tuple[str | None, str | None]:
    """Check a WebSocket upgrade's ``Origin`` and token (``Authorization``, or a browser's ``bearer.``
    subprotocol: :mod:`runtime.server.browsers`); ``(authorization, subprotocol to select)``.

    Raises:
        OriginNotAllowedError: a page of an origin neither this server's nor listed.
        UnauthorizedError: no valid token.
        InvalidInputError: a token subprotocol offered without ``durable-sessions`` beside it.
    """
    headers = socket.headers
    origin = headers.get("Origin")
    if origin is not None and HOP_HEADER not in headers and \
            not policy.allows(origin, headers.get("Host"), socket.scheme):
        raise OriginNotAllowedError(refusal_message(origin))
    offered = socket.requested_subprotocols
    authorization = headers.get("Authorization")
    if authorization is None and offered:
        token = token_from_protocols(offered)
        authorization = None if token is None else f"Bearer {token}"
        if token is not None and WS_PROTOCOL not in offered:
            raise InvalidInputError(f"offer the subprotocol {WS_PROTOCOL!r} beside the token's, which is never "
                                    "selected", field="Sec-WebSocket-Protocol")
    if not authorized(authorization):
        raise UnauthorizedError("missing or wrong bearer token")
    return authorization, WS_PROTOCOL if WS_PROTOCOL in offered else None


class WebSocketEndpoint:
    """ASGI middleware: the WebSocket route of one :class:`~runtime.server.app.SessionsServer`,
    ``WS /v1/sessions/{session_id}/ws``, answered on the raw ASGI messages (no Quart request
    context or per-frame framework work); every other scope goes to ``app``."""

    def __init__(self, app: Callable[..., Awaitable[None]], server: SessionsServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "websocket" or not scope.get("path", "").startswith(SESSIONS_PREFIX):
            await self.app(scope, receive, send)
            return
        with trio.CancelScope() as gone:
            socket = _Socket(scope, receive, send, gone)
            try:
                await self.handle(socket, scope["path"][len(SESSIONS_PREFIX):])
            except Exception:  # noqa: BLE001 - a bug: logged; the socket ends (as Quart ended it)
                logger.exception("the WebSocket %s failed", scope.get("path"))
                if not socket.closed:
                    await socket.close(1000)

    async def handle(self, socket: _Socket, rest: str) -> None:
        try:
            authorization, subprotocol = check_browser(socket, self.server.origins, self.server.authorized)
            if self.server.closing.is_set():
                raise ServiceUnavailableError("the server is shutting down")
            session_id, *segments = rest.split("/")
            actor_id = self.server.actor_id(unquote_segment(session_id, "session_id"))
            if segments != ["ws"]:
                raise RouteNotFoundError(f"no WebSocket route for {socket.path}")
            peer = _Peer(PEER_QUEUE_BODIES * self.server.max_body_bytes)
            forwarder = self.server.forwarder
            if forwarder is None:
                await self.server.namespace.connect(actor_id, peer)
                upstream = None
            else:
                upstream = await self._connect_in_cluster(socket, forwarder, actor_id, peer, authorization)
        except Exception as exc:  # noqa: BLE001 - refused before the handshake completes
            status, body = describe_error(exc)
            await socket.refuse(status, encode_body(body, JSON), self.server.error_headers(exc, status))
            return
        if upstream is not None and forwarder is not None:
            try:
                await socket.accept(subprotocol)
                await relay_frames(socket, upstream, self.server.closing, forwarder.lease_s)
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(2):
                    await upstream.aclose()
            return
        try:
            await socket.accept(subprotocol)
            await self._run_peer(socket, actor_id, peer)
        finally:
            with trio.CancelScope(shield=True):
                await self._disconnect(actor_id, peer)

    async def _connect_in_cluster(self, socket: _Socket, forwarder: Forwarder, actor_id: ActorId, peer: _Peer,
                                  authorization: str | None) -> WebSocketConnection | None:
        """Hold ``peer`` here when this host owns the session (``None``), else open the relay to the owner
        (with the token as ``Authorization``, however the browser sent it)."""
        headers = {name.lower(): value for name, value in socket.headers.items()}
        headers.pop("sec-websocket-protocol", None)
        if authorization is not None:
            headers["authorization"] = authorization

        async def local() -> WebSocketConnection | None:
            await self.server.namespace.connect(actor_id, peer)
            return None

        async def remote(url: str) -> WebSocketConnection | None:
            return await open_upstream(forwarder, url, socket.path, socket.query_string, headers,
                                       self.server.relay_max_message_bytes)

        return await forwarder.answer(actor_id, HOP_HEADER in socket.headers, local, remote)

    async def _run_peer(self, socket: _Socket, actor_id: ActorId, peer: _Peer) -> None:
        """Serve the socket until the client goes (the handler is cancelled), the host closes the peer
        (:meth:`_Peer.close`), the peer stops reading (1008) or the server stops (1001; a cluster host: 1012).
        The first reason to close wins; one task pumps frames out, one waits for the server to stop."""
        close: list[tuple[int, str]] = []
        async with trio.open_nursery() as nursery:
            def stop(code: int, reason: str) -> None:
                if not close:
                    close.append((code, reason))
                nursery.cancel_scope.cancel()

            peer.on_stop = stop
            if peer.close_requested.is_set():  # before it was served (e.g. while on_connect ran)
                stop(*peer.close_code)
            elif peer.overflowed.is_set():
                stop(CLOSE_POLICY, "too slow: outgoing queue full")
            nursery.start_soon(self._pump, socket, peer)
            nursery.start_soon(self._watch_server, stop)
            await self._read_frames(socket, actor_id, peer, nursery)
            nursery.cancel_scope.cancel()
        peer.on_stop = None
        if close:
            await socket.close(*close[0])
            await _drain_frames(socket)

    async def _watch_server(self, stop: Callable[[int, str], None]) -> None:
        await self.server.closing.wait()
        if self.server.forwarder is None:
            stop(CLOSE_GOING_AWAY, "server shutting down")
        else:  # the session lives on at another host of the cluster
            stop(CLOSE_RECONNECT, "host shutting down; connect again")

    async def _pump(self, socket: _Socket, peer: _Peer) -> None:
        """Send the peer's frames in order; those queued together leave in one socket write (when the
        server's listener serves the socket: :data:`~runtime.server.listener.WRITES_SCOPE_KEY`)."""
        writes = cast("_ReleasingStream | None", socket.scope.get(WRITES_SCOPE_KEY))
        send = socket.send
        async for frame in peer.inbox:
            if writes is None:
                peer.sent(frame)
                await send(frame)
                continue
            await trio.lowlevel.checkpoint()  # the frames due with it (a turn's broadcast, then its reply) join it
            frames = [frame]
            while len(frames) < PEER_WRITE_FRAMES:
                try:
                    frames.append(peer.inbox.receive_nowait())
                except trio.WouldBlock:
                    break
            writes.hold_writes(len(frames))
            try:
                for frame in frames:
                    peer.sent(frame)
                    await send(frame)
            finally:
                await writes.release_writes()

    async def _read_frames(self, socket: _Socket, actor_id: ActorId, peer: _Peer, nursery: trio.Nursery) -> None:
        limiter = trio.Semaphore(PEER_MAX_INFLIGHT)
        while True:
            await peer.wait_for_room()  # a peer that reads slowly is read slowly
            frame = await socket.receive()
            if len(frame) > self.server.max_body_bytes:
                too_big = PayloadTooLargeError(f"the frame is larger than {self.server.max_body_bytes} bytes")
                await peer.reply(_encode_frame({"id": None, **describe_error(too_big)[1]}, frame))
                continue
            parsed, error = _parse_frame(frame, self.server.max_body_items)
            if isinstance(error, PayloadTooLargeError):  # too many values to even look for the call's id
                await peer.reply(_encode_frame({"id": None, **describe_error(error)[1]}, frame))
            elif isinstance(parsed, dict) and "method" in parsed and error is not None:
                reply = {"id": _echo_id(parsed.get("id"), frame), **describe_error(error)[1]}
                await peer.reply(_encode_frame(reply, frame))
            elif isinstance(parsed, dict) and "method" in parsed:
                call_id, method, params = _echo_id(parsed.get("id"), frame), parsed["method"], parsed.get("params")
                del parsed  # a waiting call keeps its arguments only
                await limiter.acquire()
                nursery.start_soon(self._answer, actor_id, peer, isinstance(frame, bytes), call_id, method, params,
                                   limiter)
            else:
                await self._deliver(actor_id, peer, frame)

    async def _answer(self, actor_id: ActorId, peer: _Peer, binary: bool, call_id: Any, method: Any, params: Any,
                      limiter: trio.Semaphore) -> None:
        """Run one RPC call and queue its reply (msgpack if ``binary``, else JSON). The call holds
        its ``limiter`` slot until the reply is queued, and only the encoded reply while it waits,
        so a peer that does not read cannot pile up calls or answers in memory."""
        try:
            started = time.perf_counter()
            reply: dict[str, Any] = {"id": call_id}
            try:
                reply["result"] = await call_method(self.server.namespace.get(actor_id), method, params)
                status = 200
            except Exception as exc:  # noqa: BLE001 - every error becomes an error frame
                status, body = describe_error(exc)
                reply["error"] = body["error"]
            del params
            known = status == 200 or (isinstance(method, str)
                                      and callable_method(self.server.namespace.agent_class, method) is not None)
            self.server.metrics.observe(f"WS {method if known else '?'}", status, time.perf_counter() - started)
            encoded = _encode_frame(reply, b"" if binary else "")
            del reply
            await peer.reply(encoded)
        finally:
            limiter.release()

    async def _deliver(self, actor_id: ActorId, peer: _Peer, frame: str | bytes) -> None:
        try:
            await self.server.namespace.receive(actor_id, peer, frame)
        except Exception as exc:  # noqa: BLE001 - on_message failures are reported, the socket stays
            await peer.reply(_encode_frame({"id": None, **describe_error(exc)[1]}, frame))

    async def _disconnect(self, actor_id: ActorId, peer: _Peer) -> None:
        try:
            await self.server.namespace.disconnect(actor_id, peer, 1000, "")
        except Exception:  # noqa: BLE001 - the host may be closing; the peer is gone either way
            logger.debug("on_close of peer %s failed", peer.id, exc_info=True)
        peer.outbox.close()


async def _drain_frames(socket: _Socket) -> None:
    """After the server closed a WebSocket, drop the client's frames until its goodbye arrives.

    Frames the client sent before it saw the close wait in hypercorn's queue
    for the handler; a handler that returned without reading them would leave
    hypercorn unable to hand over the disconnect, and the connection (and
    shutdown) would hang. The goodbye ends the handler; a client that does
    not send one within :data:`CLOSE_DRAIN_TIMEOUT_S` is left to hypercorn.
    """
    with trio.move_on_after(CLOSE_DRAIN_TIMEOUT_S):
        while True:
            await socket.receive()


def _parse_frame(frame: str | bytes, max_items: int | None) -> tuple[Any, InvalidInputError | PayloadTooLargeError | None]:
    """``(value, None)`` for a valid frame; ``(loosely parsed value or None, error)`` otherwise.

    A JSON frame the wire rules refuse (a lone surrogate escape) may still be
    an RPC call: the loose parse finds its ``id`` so the error can be answered.
    One holding more than ``max_items`` values (``server.max_body_items``) is
    not parsed at all: ``(None, PayloadTooLargeError)``.
    """
    data = frame.encode("utf-8") if isinstance(frame, str) else frame
    try:
        return decode_body(data, JSON if isinstance(frame, str) else MSGPACK, max_items=max_items), None
    except PayloadTooLargeError as error:
        return None, error
    except InvalidInputError as error:
        if isinstance(frame, bytes):
            return None, error
        try:
            return json.loads(data), error
        except (ValueError, RecursionError):
            return None, error


def _echo_id(value: Any, frame: str | bytes) -> Any:
    """The call's ``id`` as the reply carries it: ``None`` in place of one a JSON reply
    cannot hold (``NaN``, a lone surrogate)."""
    if isinstance(frame, bytes) or value is None or type(value) is int or (type(value) is str and value.isascii()):
        return value  # (the usual ids: nothing a JSON reply cannot hold)
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (ValueError, TypeError, RecursionError):  # UnicodeEncodeError is a ValueError
        return None
    return value


def _encode_frame(value: dict[str, Any], like: str | bytes) -> str | bytes:
    """``value`` in the encoding of the frame it answers (text: JSON, binary: msgpack)."""
    if isinstance(like, bytes):
        return encode_body(value, MSGPACK)
    return encode_body(value, JSON).decode("utf-8")
