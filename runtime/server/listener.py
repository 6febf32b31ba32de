"""Admission at the socket: idle connections hold nothing, and the rest wait for a bounded number of places.

hypercorn runs every accepted connection as its own task, all at once: let
2,000 connections in together and they advance in lockstep, each answered
only when nearly all are (the last after seconds), while health checks wait
behind them. :class:`AdmittingListener` keeps that bounded:

* a new connection must send its whole **request head** (request line and
  headers) within ``head_timeout_s`` (``server.head_timeout_s``); until it
  has, it holds no place and is read by a small task of its own; one that
  has not by then (it sent nothing, or half a head) is closed. At most
  :data:`MAX_HEADS_WAITING` wait so; past that the one waiting longest is
  closed. A flood of idle sockets therefore never keeps requests out. A
  head that has already arrived is read at once and never counts as
  waiting, and one that arrived before its connection was accepted is
  judged (answered at once when refused) by the accept loop itself: a burst
  of refused calls costs no task each, and refusals do not count against
  the :data:`ACCEPT_BATCH` connections a turn of the loop keeps (up to
  :data:`ACCEPT_MOST` are taken per turn).
* one client address may hold at most ``max_per_peer`` connections at once
  (``server.max_connections_per_peer``); the next is answered ``503``
  ``ServerBusyError`` with ``Retry-After`` at once, nothing read.
* at most ``max_waiting`` connections whose head arrived may be **waiting
  for that request to reach the app** (the app wrapper of
  :func:`serve_admitting` frees the place when it does; so does the
  connection closing). One that finds no place within ``max_wait_s``, or
  finds as many connections already waiting for one as there are places
  (then at once), is answered ``503`` ``ServerBusyError`` with
  ``Retry-After``. Idle keep-alive
  connections and WebSockets hold no place once their first request was
  dispatched.
* a connection whose request is for a session the host would refuse at
  once (its actor's mailbox is full, or its queue would not reach the call
  within the queue bound: ``early_refusal``) is answered ``429`` from its
  head, before hypercorn parses anything.
* a **WebSocket upgrade** (a ``GET`` with ``Upgrade: websocket``) is admitted
  apart from calls: it is not asked about its actor's queue (an upgrade costs
  the actor nothing until a frame arrives, and each frame's call is bounded
  like any call) and waits for one of its own :data:`MAX_UPGRADING` places,
  not the ``max_waiting`` places of calls, so a burst of calls does not
  refuse it.
* the moment the request head arrived (from the kernel's record of the
  connection's last data, so time in the accept queue counts) is handed to
  the app with the request (:data:`runtime.host.turns.ARRIVED`): the host's
  queue bound counts from it, so a refusal comes within the bound of the
  request's arrival, however long the flood kept it on its way in.

Refusals are written straight to the socket (no parsing); the request is
read and dropped first so the close is clean (no reset). Health and metrics
probes are never refused and take no place (their request line is looked at).

:func:`serve_admitting` runs hypercorn's worker over such listeners; it is
hypercorn's own ``worker_serve`` (0.17+) with the listener swapped.
"""

from __future__ import annotations

import errno
import logging
import socket as stdlib_socket
import struct
from collections.abc import Awaitable, Callable
from functools import partial
from http import HTTPStatus
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, ConnectionState, Scope
from hypercorn.utils import ShutdownError, raise_shutdown, repr_socket_addr, wrap_app

from common.errors import ServerBusyError
from common.wire import JSON, encode_body, payload_for, status_of
from runtime.host.turns import ARRIVED
from runtime.server.client_io import client_gone
from runtime.server.routes import retry_headers

__all__ = ["WRITES_SCOPE_KEY", "AdmittingListener", "serve_admitting"]

logger = logging.getLogger(__name__)

#: Request lines never refused at the socket (probes must see a busy server as alive).
EXEMPT_REQUESTS = (b"GET /v1/health ", b"GET /v1/health?", b"GET /metrics ", b"GET /metrics?")
#: Most connections taken from the kernel queue per turn of the accept loop (one per turn would let a
#: burst of other work starve accepting; all at once would let a flood crowd out running requests).
ACCEPT_BATCH = 16
#: Most connections taken from the kernel queue per turn of the accept loop, counting those refused on the
#: way (answered at once, no task each): a flood's refusals do not wait for many busy turns.
ACCEPT_MOST = 128
#: Most bytes of a new connection's request head read before admitting it (hypercorn's own bound on a
#: head, h11's ``max_incomplete_event_size``, is 16 KiB: a longer head is its to refuse).
HEAD_BYTES = 16384
#: Default seconds a new connection may take to send its whole request head (``server.head_timeout_s``).
DEFAULT_HEAD_TIMEOUT_S = 3.0
#: Default most connections open at once from one client address (``server.max_connections_per_peer``).
DEFAULT_MAX_CONNECTIONS_PER_PEER = 512
#: Most connections waiting for their request head at once; past it the one waiting longest is closed.
MAX_HEADS_WAITING = 2048
#: Most WebSocket upgrades waiting at once for their request to reach the app (their own places, apart
#: from the ``max_waiting`` places of calls).
MAX_UPGRADING = 64
#: Key of a WebSocket's ASGI scope holding its connection's stream, which can send several writes in one
#: (``hold_writes(count)``, then ``await release_writes()``); absent when another server runs the app.
WRITES_SCOPE_KEY = "durable_sessions.writes"
#: Seconds a refused connection is given to finish sending its request before it is closed.
REFUSAL_DRAIN_S = 1.0
_TCP_INFO_LAST_DATA_RECV = 52  # offset of tcpi_last_data_recv (ms) in Linux's struct tcp_info
#: accept() errors that mean "out of descriptors or memory for now" (as trio.serve_listeners treats them).
_ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_ACCEPT_RETRY_S = 0.1


class AdmittingListener(trio.abc.Listener[trio.abc.HalfCloseableStream]):
    """A listening socket that admits connections as described in the module docstring.

    Attributes:
        refused: connections answered 503 at the socket since the start.
        timed_out: connections closed because their request head did not arrive within ``head_timeout_s``.
        upgrades: WebSocket upgrades admitted (through their own places) since the start.
    """

    def __init__(self, sock: stdlib_socket.socket, *, max_waiting: int, max_wait_s: float,
                 early_refusal: Callable[[bytes], Exception | None] | None = None,
                 head_timeout_s: float = DEFAULT_HEAD_TIMEOUT_S,
                 max_per_peer: int = DEFAULT_MAX_CONNECTIONS_PER_PEER) -> None:
        sock.setblocking(False)
        self.socket = sock
        self.max_wait_s = max_wait_s
        self.early_refusal = early_refusal
        self.head_timeout_s = head_timeout_s
        self.max_per_peer = max_per_peer
        self._room = _Room(max_waiting)
        self._upgrade_room = _Room(MAX_UPGRADING)
        self.closer = _Closer()
        self._waiting: dict[tuple[str, int], _Admitted] = {}
        self._upgraded: dict[tuple[str, int], _ReleasingStream] = {}  # open WebSocket upgrades' streams
        self._heads: dict[tuple[str, int], trio.CancelScope] = {}  # connections reading their head, oldest first
        self._peers: dict[str, int] = {}
        self._closing = False
        self.refused = 0
        self.timed_out = 0
        self.upgrades = 0

    async def accept(self) -> trio.abc.HalfCloseableStream:
        """Not used: :meth:`accept_batch` and :meth:`admit` are what the server uses."""
        raise NotImplementedError("use accept_batch() and admit()")

    async def accept_batch(self, limit: int, most: int | None = None
                           ) -> list[tuple[stdlib_socket.socket, Any, _Screened | None]]:
        """The connections waiting in the kernel queue, up to ``limit`` kept (at least one taken), each with
        what :meth:`_screen` made of its request head when the whole head had already arrived (else ``None``).

        Taking them in one go keeps the accept loop from being starved by other work. A
        connection from a peer already holding ``max_per_peer`` connections is refused on the way
        (503 ``ServerBusyError`` with ``Retry-After``, nothing read) and not returned; so is one whose
        head has arrived and that :meth:`_screen` refuses. Refused connections cost no task and do not
        count against ``limit``: up to ``most`` connections (default :data:`ACCEPT_MOST`) are taken
        in all, so a flood's refusals are answered within a few turns of the accept loop, however
        busy each turn is.
        """
        most = ACCEPT_MOST if most is None else max(most, limit)
        kept: list[tuple[stdlib_socket.socket, Any, _Screened | None]] = []
        conn, address = await self._accept()
        taken = 1
        while True:
            peer = str(address[0])
            if self._peers.get(peer, 0) >= self.max_per_peer:
                self.refused += 1
                _refuse(conn, _answer(ServerBusyError(
                    f"this address has {self.max_per_peer} connections open, the server's limit per client "
                    "(server.max_connections_per_peer); retry shortly")), self.closer)
            else:
                head = _receive_nowait(conn, b"")
                screened, refused = None, False
                if head is not None and _head_complete(head):
                    screened = self._screen(conn, head)
                    refused = screened is None  # refused, from its head
                if not refused:
                    self._peers[peer] = self._peers.get(peer, 0) + 1
                    kept.append((conn, address, screened))
            if len(kept) >= limit or taken >= most:
                return kept
            try:
                conn, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return kept
            conn.setblocking(False)
            taken += 1

    async def admit(self, conn: stdlib_socket.socket, address: Any,
                    screened: _Screened | None = None) -> _ReleasingStream | None:
        """Wait for the connection's request head (unless ``screened`` already, by :meth:`accept_batch`),
        then for a place; the stream to serve, or ``None`` when the connection was closed (no head within
        ``head_timeout_s``, crowded out) or refused.

        The caller must call :meth:`gone` for ``address`` once the connection is closed.
        """
        client = _client(address)
        if screened is None:
            head = await self._read_head(conn, client)
            screened = None if head is None else self._screen(conn, head)
            if screened is None:
                if head is None:
                    conn.close()
                return None
        head, room = screened.head, screened.room
        if room is not None and not screened.placed:
            refusal = None
            try:
                placed = await self._take_place(room)
            finally:
                room.waiting -= 1
            if not placed:
                refusal = _answer(ServerBusyError("the server is too busy to take this connection now; retry shortly"))
            elif not screened.upgrade and (refusal := self._refusal(conn, head, screened.arrived)) is not None:
                room.release()  # its actor's queue grew while it waited for the place: refused all the same
            if refusal is not None:
                self.refused += 1
                _refuse(conn, refusal, self.closer)
                return None
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(conn))
        if screened.upgrade:
            self.upgrades += 1
        if room is not None:
            self._waiting[client] = _Admitted(room, trio.current_time(), screened.arrived)
        releasing = _ReleasingStream(stream, partial(self._closed, client), head)
        if screened.upgrade:
            self._upgraded[client] = releasing
        return releasing

    def _screen(self, conn: stdlib_socket.socket, head: bytes) -> _Screened | None:
        """What can be decided from the request head without waiting: ``None`` when the connection is
        refused (answered here), else its :class:`_Screened` (a place taken when one was free).

        A call the host would refuse is refused (see :meth:`_refusal`); so is a connection that finds
        no free place and as many connections already waiting for one as there are places
        (:meth:`_Room.crowded`): it is answered now rather than after waiting ``max_wait_s`` for nothing.
        """
        arrived = trio.current_time() - _waited_s(conn)
        if head.startswith(EXEMPT_REQUESTS):
            return _Screened(head, arrived, False, None, True)
        upgrade = _is_upgrade(head)
        room = self._upgrade_room if upgrade else self._room
        refusal = None if upgrade else self._refusal(conn, head, arrived)
        placed = False
        if refusal is None:
            placed = room.try_take()
            if not placed and room.crowded():
                refusal = _answer(ServerBusyError("the server is too busy to take this connection now; retry shortly"))
            elif not placed:
                room.waiting += 1  # counted from now: its task may start later (see admit)
        if refusal is not None:
            self.refused += 1
            _refuse(conn, refusal, self.closer)
            return None
        return _Screened(head, arrived, upgrade, room, placed)

    def gone(self, address: Any) -> None:
        """The connection from ``address`` (accepted by :meth:`accept_batch`) is closed."""
        peer = str(address[0])
        left = self._peers.get(peer, 0) - 1
        if left > 0:
            self._peers[peer] = left
        else:
            self._peers.pop(peer, None)

    async def _read_head(self, conn: stdlib_socket.socket, client: tuple[str, int]) -> bytes | None:
        """The request head (what arrived up to its blank line, at most :data:`HEAD_BYTES`), or ``None``:
        the client closed, did not finish it within ``head_timeout_s``, or was crowded out by
        :data:`MAX_HEADS_WAITING` newer connections."""
        if self._closing:
            return None
        head = _receive_nowait(conn, b"")  # usually the whole head is there already: it never waits
        if head is None or _head_complete(head):
            return head
        if len(self._heads) >= MAX_HEADS_WAITING:
            self._heads.pop(next(iter(self._heads))).cancel()  # the longest waiting: most likely idle
        with trio.move_on_after(self.head_timeout_s) as scope:
            self._heads[client] = scope
            try:
                while not _head_complete(head):
                    await trio.lowlevel.wait_readable(conn)
                    head = _receive_nowait(conn, head)
                    if head is None:
                        return None
                return head
            finally:
                self._heads.pop(client, None)
        self.timed_out += 1
        return None

    async def _take_place(self, room: _Room) -> bool:
        """A place in ``room`` (``max_waiting`` places, or :data:`MAX_UPGRADING`) within ``max_wait_s``
        (places held that long without a request reaching the app are taken back); ``False`` when none came."""
        with trio.move_on_after(self.max_wait_s):
            await room.acquire()
            return True
        stale = trio.current_time() - self.max_wait_s
        for admitted in list(self._waiting.values()):
            if admitted.since <= stale:
                admitted.release()
        return room.try_take()

    def _refusal(self, conn: stdlib_socket.socket, head: bytes, arrived: float) -> bytes | None:
        """The answer refusing the connection, or ``None`` to admit it (see the module docstring);
        ``arrived``: when its head arrived (the host's queue bound counts from it)."""
        if head.startswith(EXEMPT_REQUESTS):
            return None
        error = None
        if self.early_refusal is not None:
            token = ARRIVED.set(arrived)
            try:
                error = self.early_refusal(head)
            finally:
                ARRIVED.reset(token)
        if error is None and _waited_s(conn) > self.max_wait_s:
            error = ServerBusyError("the server is too busy to take this connection now; retry shortly")
        return None if error is None else _answer(error)

    async def _accept(self) -> tuple[stdlib_socket.socket, Any]:
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            try:
                conn, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                await trio.lowlevel.wait_readable(self.socket)
                continue
            conn.setblocking(False)
            return conn, address

    def dispatched(self, client: Any) -> float | None:
        """The first request of the connection from ``client`` (``scope["client"]``) reached the app: when
        it arrived (``trio.current_time()`` seconds), or ``None`` (not the first, or not this listener's)."""
        if isinstance(client, (list, tuple)) and len(client) == 2:
            admitted = self._waiting.pop((str(client[0]), int(client[1])), None)
            if admitted is not None:
                admitted.release()
                return admitted.arrived
        return None

    def stream_of(self, client: Any) -> _ReleasingStream | None:
        """The stream of the WebSocket upgrade from ``client`` (``scope["client"]``), while it is open."""
        if isinstance(client, (list, tuple)) and len(client) == 2:
            return self._upgraded.get((str(client[0]), int(client[1])))
        return None

    def _closed(self, client: tuple[str, int]) -> None:
        self._upgraded.pop(client, None)
        admitted = self._waiting.pop(client, None)
        if admitted is not None:
            admitted.release()

    async def aclose(self) -> None:
        """Stop accepting; connections still waiting for their request head are closed."""
        self._closing = True
        for scope in self._heads.values():
            scope.cancel()
        trio.lowlevel.notify_closing(self.socket)
        self.socket.close()
        await trio.lowlevel.checkpoint()


class _Room:
    """Places of one kind (calls' or upgrades'): a semaphore, and at most as many connections waiting for
    one as there are places (a connection finding that many waiting would wait for nothing: it is refused)."""

    __slots__ = ("_semaphore", "places", "waiting")

    def __init__(self, places: int) -> None:
        self.places = places
        self.waiting = 0  # connections admitted to wait for a place and not yet done waiting
        self._semaphore = trio.Semaphore(places)

    def try_take(self) -> bool:
        """Take a free place, if there is one (without waiting)."""
        try:
            self._semaphore.acquire_nowait()
        except trio.WouldBlock:
            return False
        return True

    async def acquire(self) -> None:
        await self._semaphore.acquire()

    def release(self) -> None:
        self._semaphore.release()

    def crowded(self) -> bool:
        """Whether as many connections wait for a place as there are places."""
        return self.waiting >= self.places


class _Screened:
    """A connection's request head and what was decided from it (:meth:`AdmittingListener._screen`)."""

    __slots__ = ("arrived", "head", "placed", "room", "upgrade")

    def __init__(self, head: bytes, arrived: float, upgrade: bool, room: _Room | None, placed: bool) -> None:
        self.head = head
        self.arrived = arrived  # when the head arrived (trio.current_time() seconds)
        self.upgrade = upgrade
        self.room = room  # None: exempt (a probe), needs no place
        self.placed = placed  # a place in room was taken already


class _Admitted:
    __slots__ = ("_room", "arrived", "since")

    def __init__(self, room: _Room, since: float, arrived: float) -> None:
        self._room: _Room | None = room
        self.since = since
        self.arrived = arrived

    def release(self) -> None:
        room, self._room = self._room, None
        if room is not None:
            room.release()


class _ReleasingStream(trio.abc.HalfCloseableStream):
    """A :class:`trio.SocketStream` that gives its place back when it closes (delegates the rest), and can
    send several writes in one (:meth:`hold_writes`): a WebSocket's frames due together leave in one
    socket write (one system call, one TCP segment) though hypercorn writes each frame on its own."""

    def __init__(self, stream: trio.SocketStream, on_close: Callable[[], None], head: bytes = b"") -> None:
        self._stream = stream
        self._on_close: Callable[[], None] | None = on_close
        self._head = head  # what the listener already read: handed out first
        self._held: list[bytes] | None = None
        self._hold_left = 0
        self.socket = stream.socket

    def hold_writes(self, count: int) -> None:
        """Hold the next ``count - 1`` writes and send them with the ``count``-th, in one write.

        The holder calls :meth:`release_writes` afterwards (it sends what is still held, if fewer
        writes came). Holding does not reorder anything: every write still leaves in order.
        """
        if count > 1 and self._held is None:
            self._held, self._hold_left = [], count - 1

    async def release_writes(self) -> None:
        """Stop holding writes; send what is still held (a client gone meanwhile is no error)."""
        held, self._held = self._held, None
        if held:
            with trio.move_on_after(REFUSAL_DRAIN_S) as scope:
                scope.shield = True  # hypercorn was told these writes were made
                try:
                    await self._stream.send_all(b"".join(held))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass

    async def aclose(self) -> None:
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()
        await self._stream.aclose()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            held.append(bytes(data))
            if self._hold_left > 0:
                self._hold_left -= 1
                return
            self._held = None
            data = b"".join(held)
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._head:
            size = len(self._head) if max_bytes is None else max_bytes
            chunk, self._head = self._head[:size], self._head[size:]
            await trio.lowlevel.checkpoint()
            return chunk
        return await self._stream.receive_some(max_bytes)

    def __getattr__(self, name: str) -> Any:  # setsockopt, getsockopt, ...; no do_handshake
        return getattr(self._stream, name)


def _head_complete(head: bytes) -> bool:
    """Whether ``head`` holds a whole request head (up to its blank line), or :data:`HEAD_BYTES` of one."""
    return b"\n\r\n" in head or b"\n\n" in head or len(head) >= HEAD_BYTES


def _receive_nowait(conn: stdlib_socket.socket, head: bytes) -> bytes | None:
    """``head`` and what has arrived after it (up to :data:`HEAD_BYTES` in all), without waiting;
    ``None`` when the client closed or the connection broke."""
    try:
        chunk = conn.recv(HEAD_BYTES - len(head))
    except (BlockingIOError, InterruptedError):
        return head
    except OSError:
        return None
    return head + chunk if chunk else None


def _is_upgrade(head: bytes) -> bool:
    """Whether a request head asks for a WebSocket (``GET`` with an ``Upgrade: websocket`` header)."""
    if not head.startswith(b"GET "):
        return False
    for line in head.split(b"\r\n\r\n", 1)[0].split(b"\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"upgrade" and value.strip().lower() == b"websocket":
            return True
    return False


def _client(address: Any) -> tuple[str, int]:
    return (str(address[0]), int(address[1]))


def _waited_s(sock: stdlib_socket.socket) -> float:
    """Seconds since the connection's last data (its request, when some is queued) arrived; 0 where
    the OS does not say."""
    try:
        info = sock.getsockopt(stdlib_socket.IPPROTO_TCP, stdlib_socket.TCP_INFO, 104)
        return struct.unpack_from("<I", info, _TCP_INFO_LAST_DATA_RECV)[0] / 1000
    except (OSError, AttributeError, struct.error):
        return 0.0


def _answer(error: Exception) -> bytes:
    """A complete HTTP/1.1 answer for a refusal (the error's status, JSON body, ``Retry-After``, close)."""
    status = status_of(error)
    body = encode_body(payload_for(error), JSON)
    headers = {"Content-Type": JSON, "Content-Length": str(len(body)), "Connection": "close",
               **retry_headers(status)}
    head = f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    return head.encode("latin-1") + body


def _refuse(conn: stdlib_socket.socket, answer: bytes, closer: _Closer) -> None:
    """Answer at once (no task, no parsing): read what the client sent, answer, stop sending.

    The socket is closed by ``closer`` once the client closed its side (or after
    :data:`REFUSAL_DRAIN_S`): closing with the client's bytes unread would reset the connection.
    """
    try:
        _drain(conn)
        conn.send(answer)  # a few hundred bytes into an empty send buffer
        conn.shutdown(stdlib_socket.SHUT_WR)
    except OSError:
        conn.close()
        return
    closer.add(conn)


def _drain(conn: stdlib_socket.socket) -> bool:
    """Read and drop what has arrived; ``True`` once the client closed (or the connection broke)."""
    try:
        while True:
            if not conn.recv(65536, stdlib_socket.MSG_DONTWAIT):
                return True
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


class _Closer:
    """One task closing refused connections once their clients hung up (or after a grace period)."""

    def __init__(self) -> None:
        self._sockets: list[tuple[stdlib_socket.socket, float]] = []
        self._added = trio.Event()

    def add(self, conn: stdlib_socket.socket) -> None:
        self._sockets.append((conn, trio.current_time() + REFUSAL_DRAIN_S))
        self._added.set()

    async def run(self) -> None:
        try:
            while True:
                if not self._sockets:
                    self._added = trio.Event()
                    await self._added.wait()
                await trio.sleep(0.05)
                now, keep = trio.current_time(), []
                for conn, deadline in self._sockets:
                    if _drain(conn) or now >= deadline:
                        conn.close()
                    else:
                        keep.append((conn, deadline))
                self._sockets = keep
        finally:
            for conn, _ in self._sockets:
                conn.close()


async def _serve_connections(listener: AdmittingListener, handler: Callable[[Any], Awaitable[None]],
                             nursery: trio.Nursery) -> None:
    """``trio.serve_listeners`` taking connections in batches (see :meth:`AdmittingListener.accept_batch`),
    each in its own task from the start: it waits for its request head there, holding no place."""
    while True:
        try:
            batch = await listener.accept_batch(limit=ACCEPT_BATCH)
        except OSError as exc:
            if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                raise
            logger.error("accept failed for want of resources (%s); retrying in %.1f s", exc, _ACCEPT_RETRY_S)
            await trio.sleep(_ACCEPT_RETRY_S)
            continue
        for conn, address, screened in batch:
            nursery.start_soon(_run_connection, listener, conn, address, handler, screened)
        await trio.lowlevel.checkpoint()  # at most ``ACCEPT_BATCH`` per turn: admitted requests move meanwhile


async def _run_connection(listener: AdmittingListener, conn: stdlib_socket.socket, address: Any,
                          handler: Callable[[Any], Awaitable[None]], screened: _Screened | None = None) -> None:
    """Admit one connection and serve it; its failure never reaches the server (a client that hung up is no error)."""
    try:
        stream = await listener.admit(conn, address, screened)
        if stream is None:
            return
        try:
            await handler(stream)
        except Exception as exc:  # noqa: BLE001 - one connection must not take the server down
            if client_gone(exc):
                logger.debug("client gone: %r", exc)
            else:
                logger.exception("a connection failed")
        finally:
            await trio.aclose_forcefully(stream)
    except BaseException:
        conn.close()
        raise
    finally:
        listener.gone(address)


class _Dispatched:
    """ASGI wrapper: tell the listeners a connection's request reached the app (its place is free)."""

    def __init__(self, app: Any, listeners: list[AdmittingListener]) -> None:
        self.app = app
        self.listeners = listeners

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "http" or scope["type"] == "websocket":
            for listener in self.listeners:
                arrived = listener.dispatched(scope.get("client"))
                if arrived is not None:
                    ARRIVED.set(arrived)  # this request's task (and those it starts): the host times its call from it
                if scope["type"] == "websocket" and (stream := listener.stream_of(scope.get("client"))) is not None:
                    scope[WRITES_SCOPE_KEY] = stream  # type: ignore[literal-required]  # an extra key of ours
        await self.app(scope, receive, send)


async def serve_admitting(
    app: Any,
    config: Config,
    *,
    max_waiting: int,
    max_wait_s: float,
    early_refusal: Callable[[bytes], Exception | None] | None = None,
    head_timeout_s: float = DEFAULT_HEAD_TIMEOUT_S,
    max_per_peer: int = DEFAULT_MAX_CONNECTIONS_PER_PEER,
    shutdown_trigger: Callable[..., Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """hypercorn's ``serve`` for plain HTTP binds, over :class:`AdmittingListener` s.

    Args:
        max_waiting, max_wait_s, early_refusal, head_timeout_s, max_per_peer: see :class:`AdmittingListener`.

    Raises:
        ValueError: TLS or QUIC binds (not supported here).
    """
    listeners: list[AdmittingListener] = []
    app = wrap_app(_Dispatched(app, listeners), config.wsgi_max_body_size, "asgi")
    lifespan_state: dict[str, Any] = {}
    lifespan = Lifespan(app, config, lifespan_state)
    context = WorkerContext(None)
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as server_nursery:
            sockets = config.create_sockets()
            if sockets.secure_sockets or sockets.quic_sockets:
                raise ValueError("serve_admitting serves plain HTTP binds only")
            binds = []
            for sock in sockets.insecure_sockets:
                sock.listen(config.backlog)
                listeners.append(AdmittingListener(sock, max_waiting=max_waiting, max_wait_s=max_wait_s,
                                                   early_refusal=early_refusal, head_timeout_s=head_timeout_s,
                                                   max_per_peer=max_per_peer))
                binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
            task_status.started(binds)
            try:
                async with trio.open_nursery() as nursery:
                    if shutdown_trigger is not None:
                        nursery.start_soon(raise_shutdown, shutdown_trigger)
                    nursery.start_soon(raise_shutdown, context.terminate.wait)
                    handler = partial(TCPServer, app, config, context, ConnectionState(lifespan_state.copy()))
                    for listener in listeners:
                        nursery.start_soon(listener.closer.run)
                        nursery.start_soon(_serve_connections, listener, handler, server_nursery)
                    await trio.sleep_forever()
            except BaseExceptionGroup as error:
                _, other_errors = error.split((ShutdownError, KeyboardInterrupt))
                if other_errors is not None:
                    raise other_errors from None
            finally:
                for listener in listeners:
                    await listener.aclose()  # new connections are refused by the kernel from now on
                await context.terminated.set()
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()
