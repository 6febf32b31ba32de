"""A small WebSocket client (RFC 6455) on wsproto over an anyio byte stream.

It runs under trio and asyncio alike (anyio picks the running loop), which
is what :class:`runtime.client.SessionsClient` needs; the server's relay
between hosts of a cluster (:mod:`runtime.server.relay`) uses it too, which
is why it sits in :mod:`runtime` itself rather than in the client
package. No third-party WebSocket package is required. It speaks what the server needs: text and
binary messages (fragmented ones reassembled), answering pings, the close
handshake, and the HTTP error a server sends instead of accepting.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import anyio
import msgpack
from anyio.abc import ByteStream
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError

from common.wire import error_from_payload

__all__ = ["ConnectionClosed", "WebSocketConnection"]

_READ_BYTES = 65536
#: Largest message :meth:`WebSocketConnection.connect` accepts by default. Replies are not bounded
#: by the server's request limit (a long history can be tens of MB), so this only stops a runaway peer.
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 * 1024


class ConnectionClosed(Exception):
    """The WebSocket is closed; ``code`` and ``reason`` as the peer sent them (1006: dropped)."""

    def __init__(self, code: int, reason: str = "") -> None:
        super().__init__(f"WebSocket closed ({code}{': ' + reason if reason else ''})")
        self.code = code
        self.reason = reason


class WebSocketConnection:
    """An open client WebSocket. Make one with :meth:`connect`.

    One task may :meth:`receive` at a time; any number may :meth:`send`.
    """

    def __init__(self, stream: ByteStream, ws: WSConnection, max_message_bytes: int) -> None:
        self._stream = stream
        self._ws = ws
        self._max = max_message_bytes
        self._send_lock = anyio.Lock()
        self._pending: list[str | bytes] = []
        self._parts: list[Any] = []  # the message being received: all str (text) or all bytes-like (binary)
        self._closed: ConnectionClosed | None = None
        #: ``anyio.current_time()`` of the last pong received (``None``: none yet); see :meth:`ping`.
        self.last_pong: float | None = None
        #: The subprotocol the server selected (``None``: none).
        self.subprotocol: str | None = None

    @classmethod
    async def connect(
        cls, url: str, *, headers: Sequence[tuple[str, str]] = (), max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        subprotocols: Sequence[str] = (), ssl_context: ssl.SSLContext | None = None,
    ) -> WebSocketConnection:
        """Open ``url`` (``ws://``, ``wss://``, or ``http(s)://`` meaning the same), offering
        ``subprotocols`` (the one the server selected: :attr:`subprotocol`); ``ssl_context``:
        for ``wss://`` (``None``: the system's CAs).

        Raises:
            ValueError: an unsupported scheme.
            OSError: the connection failed.
            Exception: the server refused with an HTTP error: the error its body
                describes (see :func:`common.wire.error_from_payload`).
        """
        parts = urlsplit(url)
        secure = {"ws": False, "http": False, "wss": True, "https": True}.get(parts.scheme)
        if secure is None:
            raise ValueError(f"not a WebSocket URL: {url}")
        host = parts.hostname or "localhost"
        port = parts.port or (443 if secure else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        stream: ByteStream
        if secure:
            stream = await anyio.connect_tcp(host, port, tls=True, ssl_context=ssl_context, tls_hostname=host)
        else:
            stream = await anyio.connect_tcp(host, port)
        try:
            connection = cls(stream, WSConnection(ConnectionType.CLIENT), max_message_bytes)
            await connection._handshake(parts.netloc, target, headers, subprotocols)
        except BaseException:
            await anyio.aclose_forcefully(stream)
            raise
        return connection

    async def _handshake(self, netloc: str, target: str, headers: Sequence[tuple[str, str]],
                         subprotocols: Sequence[str] = ()) -> None:
        extra = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        await self._stream.send(self._ws.send(Request(host=netloc, target=target, extra_headers=extra,
                                                      subprotocols=list(subprotocols))))
        status, body = None, b""
        while True:
            for event in await self._read_events():
                if isinstance(event, AcceptConnection):
                    self.subprotocol = event.subprotocol
                    return
                if isinstance(event, RejectConnection):
                    status = event.status_code
                    if not event.has_body:
                        raise _refused(status, body)
                elif isinstance(event, RejectData):
                    body += event.data
                    if event.body_finished:
                        raise _refused(status or 400, body)

    async def _read_events(self) -> list[Any]:
        try:
            data = await self._stream.receive(_READ_BYTES)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            data = None
        self._ws.receive_data(data)
        return list(self._ws.events())

    async def send(self, message: str | bytes) -> None:
        """Send a text (``str``) or binary (``bytes``) message.

        Raises:
            ConnectionClosed: the socket is closed.
        """
        if self._closed is not None:
            raise self._closed
        event = TextMessage(data=message) if isinstance(message, str) else BytesMessage(data=message)
        await self._send_event(event)

    async def _send_event(self, event: Any) -> None:
        async with self._send_lock:
            try:
                await self._stream.send(self._ws.send(event))
            except (LocalProtocolError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                raise ConnectionClosed(1006, str(exc)) from None

    async def ping(self, payload: bytes = b"") -> None:
        """Send a ping; the peer's pong sets :attr:`last_pong` while another task is in :meth:`receive`.

        Raises:
            ConnectionClosed: the socket is closed.
        """
        if self._closed is not None:
            raise self._closed
        await self._send_event(Ping(payload=payload))

    async def receive(self) -> str | bytes:
        """The next whole message.

        Raises:
            ConnectionClosed: the peer closed (or dropped) the connection.
        """
        while not self._pending:
            if self._closed is not None:
                raise self._closed
            for event in await self._read_events():
                await self._handle(event)
        return self._pending.pop(0)

    async def _handle(self, event: Any) -> None:
        if isinstance(event, (TextMessage, BytesMessage)):
            self._parts.append(event.data)
            if sum(len(p) for p in self._parts) > self._max:
                await self.aclose(1009, "message too big")
            elif event.message_finished:
                joined = ("" if isinstance(event, TextMessage) else b"").join(self._parts)
                self._parts = []
                self._pending.append(joined)
        elif isinstance(event, Ping):
            await self._send_event(event.response())
        elif isinstance(event, Pong):
            self.last_pong = anyio.current_time()
        elif isinstance(event, CloseConnection):
            self._closed = ConnectionClosed(event.code, event.reason or "")
            try:
                await self._send_event(event.response())
            except ConnectionClosed:
                pass
            await anyio.aclose_forcefully(self._stream)

    async def aclose(self, code: int = 1000, reason: str = "") -> None:
        """Close the connection (idempotent)."""
        if self._closed is None:
            self._closed = ConnectionClosed(code, reason)
            try:
                await self._send_event(CloseConnection(code=code, reason=reason))
            except ConnectionClosed:
                pass
        await anyio.aclose_forcefully(self._stream)


def _refused(status: int, body: bytes) -> Exception:
    try:
        payload = json.loads(body) if body[:1] in (b"{", b"[") else msgpack.unpackb(body, raw=False)
    except (ValueError, msgpack.UnpackException, TypeError):
        payload = body.decode("utf-8", "replace")
    return error_from_payload(status, payload)
