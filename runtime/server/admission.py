"""Admission control before the work: a bound on HTTP requests in flight, answered at once past it.

Three bounds keep a flood from queueing without end (and from delaying
everyone else):

* the **listen backlog** (``ServerSettings.backlog``, hypercorn's
  ``backlog``): connections the kernel queues before the server accepts
  them. Too small, and a burst is dropped or reset by the kernel, and
  clients retry their SYNs for up to a minute;
* :class:`RequestLimit` (``ServerSettings.max_requests``): at most that
  many HTTP requests run at once; the next is answered ``503``
  :class:`~common.errors.ServerBusyError` with ``Retry-After`` before any
  routing, body reading or decoding. Health and metrics are never refused;
* the host's **queue-time bound** (``ServerSettings.max_queue_s``, see
  ``open_host(max_queue_s=...)``): a call that cannot start its actor turn
  within that many seconds of its request's arrival (the listener's time,
  :data:`runtime.host.turns.ARRIVED`; activation not counted) is answered
  ``429`` :class:`~common.errors.ActorBusyError` and never runs; one that the
  actor's queue, at its recent pace, would not reach in what is left of that
  is refused at once, as is one past the mailbox bound (``max_pending_calls``,
  :class:`~common.errors.ActorOverloadedError`).

WebSocket upgrades are not counted here (:class:`RequestLimit` bounds HTTP
requests): the listener admits them through places of their own.

:class:`RequestLimit` asks the host about a session request's actor
(``early_refusal``) before anything else is done for it, so a flood on one
session costs little more than reading its requests, and other sessions
go on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from common.errors import ServerBusyError
from common.wire import JSON, encode_body, payload_for, status_of
from runtime.server.client_io import quiet_send
from runtime.server.routes import retry_headers

__all__ = ["EXEMPT_PATHS", "RequestLimit"]

#: Paths answered whatever the load (probes must see a busy server as alive).
EXEMPT_PATHS = frozenset({"/v1/health", "/metrics"})


class RequestLimit:
    """ASGI middleware: at most ``max_requests`` HTTP requests at once; the next one gets 503 at once.

    Attributes:
        in_flight: HTTP requests running now (exempt paths not counted).
        refused: requests answered 503 since the start.
    """

    def __init__(self, app: Callable[..., Awaitable[None]], max_requests: int,
                 early_refusal: Callable[[dict[str, Any]], Exception | None] | None = None) -> None:
        self.app = app
        self.max_requests = max_requests
        self.early_refusal = early_refusal
        self.in_flight = 0
        self.refused = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("path") in EXEMPT_PATHS:
            await self.app(scope, receive, send)
            return
        refusal = self.early_refusal(scope) if self.early_refusal is not None else None
        if refusal is None and self.in_flight >= self.max_requests:
            refusal = ServerBusyError(f"the server is running {self.max_requests} requests, its limit; retry shortly")
        if refusal is not None:
            self.refused += 1
            await _refuse(quiet_send(send), refusal)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


async def _refuse(send: Callable[[dict[str, Any]], Awaitable[None]], error: Exception) -> None:
    """Answer ``error`` (its class's status, ``Retry-After``) without reading the request."""
    body = encode_body(payload_for(error), JSON)
    headers = [(b"content-type", JSON.encode()), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in retry_headers(status_of(error)).items()]
    headers.append((b"connection", b"close"))  # the request body is never read
    await send({"type": "http.response.start", "status": status_of(error), "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
