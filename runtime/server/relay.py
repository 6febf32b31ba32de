"""The WebSocket relay of a cluster: a socket opened on a host that does not own the session.

The host opens a WebSocket of its own to the owner (same path, the
client's ``Authorization``, :data:`~common.wire.HOP_HEADER`), then accepts
the client's socket and copies frames both ways, text as text and binary
as binary. The owner holds the relay as an ordinary peer of the actor, so
RPC answers, ``on_message`` replies and every broadcast reach the client
whichever host it connected to.

When the relay to the owner ends, the client's socket is closed with:

* the owner's own code for ``1000`` (normal), ``1008`` (the client did not
  read fast enough) and ``1009`` (a frame over the limit);
* :data:`~common.wire.CLOSE_RECONNECT` (1012) for anything else -- the
  owner went away, dropped, failed or moved the session -- which tells the
  client to connect again (to any host) and carry on;
* 1012 as well when this host shuts down (the session lives on
  elsewhere), and when the owner stops answering pings for a lease (a
  paused or cut-off owner: another host takes the session over then).

A client that closes its socket closes the relay (1000).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

import trio

from common.errors import NotOwnerError
from common.wire import CLOSE_RECONNECT, HOP_HEADER
from runtime.server.forwarding import FORWARDED_REQUEST_HEADERS, Forwarder, OwnerGone, OwnerMoved
from runtime.wsclient import ConnectionClosed, WebSocketConnection

__all__ = ["ClientSocket", "client_close_code", "open_upstream", "relay_frames"]

logger = logging.getLogger(__name__)

#: Close codes of the owner's side passed on to the client as they are.
PASSED_CODES = frozenset({1000, 1008, 1009})
#: Seconds a closed client socket waits for the client's goodbye before the handler returns.
CLOSE_DRAIN_TIMEOUT_S = 5.0


class ClientSocket(Protocol):
    """The client's accepted WebSocket as the relay uses it (:class:`runtime.server.websocket._Socket`)."""

    async def send(self, frame: str | bytes) -> None: ...

    async def receive(self) -> str | bytes: ...

    async def close(self, code: int, reason: str = "") -> None: ...


def client_close_code(code: int, reason: str) -> tuple[int, str]:
    """The ``(code, reason)`` the client's socket is closed with when the owner's side closed with ``code``."""
    if code in PASSED_CODES:
        return code, reason
    return CLOSE_RECONNECT, "the session's owner moved or stopped; connect again"


async def open_upstream(
    forwarder: Forwarder, url: str, path: str, query: bytes, headers: Mapping[str, str], max_message_bytes: int,
) -> WebSocketConnection:
    """Open the relay's WebSocket to the owner at ``url`` (``path``: as the client sent it).

    Raises:
        OwnerGone: no connection could be made.
        OwnerMoved: the host at ``url`` is not the owner (any more).
        Exception: the owner refused the socket with another error (401, 404, ...).
    """
    sent = [(name, headers[name]) for name in FORWARDED_REQUEST_HEADERS if name in headers]
    sent.append((HOP_HEADER, forwarder.hop))
    target = "ws" + url[4:] + path + (("?" + query.decode("latin-1")) if query else "")
    try:
        upstream = await WebSocketConnection.connect(target, headers=sent, max_message_bytes=max_message_bytes,
                                                     ssl_context=forwarder.ssl_context)
    except NotOwnerError:
        raise OwnerMoved(url) from None
    except OSError as exc:
        raise OwnerGone(f"{url}: {exc}") from None
    forwarder.forwarded += 1
    return upstream


async def relay_frames(client: ClientSocket, upstream: WebSocketConnection, closing: trio.Event,
                       lease_s: float) -> None:
    """Copy frames between the accepted ``client`` socket and ``upstream`` until either side ends.

    Closes the client's socket as the module docstring says, and always the
    relay to the owner. The owner is pinged every ``lease_s / 3`` seconds; no
    pong for ``lease_s`` ends the relay.
    """
    close: list[tuple[int, str]] = []
    try:
        async with trio.open_nursery() as nursery:

            async def owner_to_client() -> None:
                try:
                    while True:
                        await client.send(await upstream.receive())
                except ConnectionClosed as closed:
                    close.append(client_close_code(closed.code, closed.reason))
                nursery.cancel_scope.cancel()

            async def client_to_owner() -> None:
                try:
                    while True:
                        await upstream.send(await client.receive())
                except ConnectionClosed as closed:  # the owner's side closed while we were sending
                    close.append(client_close_code(closed.code, closed.reason))
                nursery.cancel_scope.cancel()

            async def shutdown() -> None:
                await closing.wait()
                close.append((CLOSE_RECONNECT, "this host is shutting down; connect again"))
                nursery.cancel_scope.cancel()

            async def watchdog() -> None:
                sent = trio.current_time()
                try:
                    while True:
                        await upstream.ping()
                        await trio.sleep(lease_s / 3)
                        if upstream.last_pong is None or upstream.last_pong < sent:
                            if trio.current_time() - sent > lease_s:
                                break
                        else:
                            sent = trio.current_time()
                except ConnectionClosed:
                    return  # owner_to_client sees the close
                logger.warning("the owner at the end of a WebSocket relay stopped answering pings")
                close.append((CLOSE_RECONNECT, "the session's owner stopped answering; connect again"))
                nursery.cancel_scope.cancel()

            nursery.start_soon(owner_to_client)
            nursery.start_soon(client_to_owner)
            nursery.start_soon(shutdown)
            nursery.start_soon(watchdog)
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(2):
            await upstream.aclose()
    if close:
        await client.close(*close[0])
        with trio.move_on_after(CLOSE_DRAIN_TIMEOUT_S):  # the client's frames until its goodbye
            while True:
                await client.receive()
