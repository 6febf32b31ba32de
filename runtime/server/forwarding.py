"""Forwarding between the hosts of a cluster (``serve --cluster``): a call goes to the actor's owner.

Every host accepts every request. The host of the actor's owner runs it;
any other host sends it on to the owner over HTTP and hands back the
owner's answer unchanged (status, body, the headers that matter). A host
learns who owns an actor from :class:`~common.errors.NotOwnerError`, which
its actor host raises before touching anything (the owner's advertised URL
and the seconds its lease has left, exactly), and remembers that owner until the
lease would run out, so the next requests for the actor are forwarded at
once without asking Postgres.

The rules:

* **One hop.** A forwarded request carries :data:`~common.wire.HOP_HEADER`.
  A host that receives one and is not the owner (the actor moved meanwhile)
  answers ``NotOwnerError`` with 503 and ``Retry-After`` instead of
  forwarding again; requests never loop.
* **A dead owner.** When the owner cannot be reached (connection refused
  or timed out: nothing was sent), the host waits until that owner's lease
  has run out and asks its actor host again, which then takes the actor
  over -- all within :attr:`Forwarder.max_wait_s`; past that the answer is
  503 with ``Retry-After``.
* **An owner that stops mid-call** (the connection breaks after the request
  left, or the owner goes silent -- paused, cut off -- and its lease runs
  out without a renewal while the call is with it): whether the call ran
  is unknown, so it is not repeated here; the answer is
  :class:`~common.errors.OwnerUnreachableError` (503, ``Retry-After``) and
  the client repeats it when that is safe. An owner that is merely slow
  keeps renewing its lease, and the call waits for it.
* **Only hosts of the cluster may send the hop header.** Its value is this
  host's id and an HMAC-SHA256 of it keyed with the cluster's shared secret
  (:func:`hop_secret`: ``DURABLE_SESSIONS_CLUSTER_SECRET``, else the API token).
  :class:`HopGate` removes a hop header that does not verify before anything
  reads it, so such a request is an ordinary client request (``Origin`` and
  ``Host`` checked, forwarded if need be). A cluster with neither secret nor
  token (loopback only: a non-loopback bind needs a token) accepts the hop
  header from loopback peers only.
* **Where the owner is.** Every answer about a session in cluster mode
  carries :data:`~common.wire.OWNER_HEADER` with the owner's advertised URL
  (when known), so a client that lists that URL sends the session's next
  requests there directly and no host spends CPU on a hop.

Forwarded headers: ``Authorization`` (every host checks the same token),
``Content-Type``, ``Accept``; the method, the path as sent
(percent-encoding kept), the query string and the body bytes are passed on
as they are. Connections to other hosts are pooled (HTTP/1.1 keep-alive,
httpcore: the layer under httpx, without its request and response models,
which cost a forwarding host a third more CPU per call).

A request for a session whose owner is already known takes a shorter path
(:class:`ForwardingShortcut`, in front of the web framework): the host checks
the token and the body limit and passes the bytes on without building a
framework request or response. Everything else -- the first request for a
session, one whose owner does not answer, errors -- goes through the app.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import math
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpcore
import trio
from werkzeug.datastructures import MIMEAccept
from werkzeug.http import parse_accept_header

from common.errors import DurableSessionsError, NotOwnerError, OwnerUnreachableError, RequestTimeoutError
from common.wire import (
    HOP_HEADER,
    JSON,
    MSGPACK,
    OWNER_HEADER,
    SESSIONS_PREFIX,
    decode_body,
    encode_body,
    unquote_segment,
)
from runtime import telemetry
from runtime.host.ids import ActorId
from runtime.server.routes import describe_error, match

__all__ = ["CLUSTER_SECRET_ENV", "ForwardedAnswer", "Forwarder", "ForwardingShortcut", "HopGate", "OwnerGone",
           "OwnerMoved", "hop_secret", "hop_value", "retry_after", "verify_hop"]

logger = logging.getLogger(__name__)

#: What one answer is: a response here, a WebSocket upstream there (see :meth:`Forwarder.answer`).
A = TypeVar("A")

#: Request headers passed on to the owner (the rest are the hop's own: Host, Content-Length, ...).
FORWARDED_REQUEST_HEADERS = ("authorization", "content-type", "accept")
#: Response headers passed back from the owner.
FORWARDED_RESPONSE_HEADERS = ("content-type", "retry-after", "allow", "www-authenticate")
#: Seconds added to a lease's end before asking again. The lease left is Postgres' own figure when it
#: was asked (rounded up to the millisecond), and the wait starts after the answer arrived, so the
#: lease has run out by then; this covers clock-rate differences only.
LEASE_MARGIN_S = 0.02
#: Seconds to wait for a TCP connection to another host.
CONNECT_TIMEOUT_S = 2.0


#: Environment variable holding the secret every host of a cluster shares (signs the hop header).
CLUSTER_SECRET_ENV = "DURABLE_SESSIONS_CLUSTER_SECRET"
_HOP_CONTEXT = b"durable-sessions hop\0"
_HOP_NAME = HOP_HEADER.lower().encode("latin-1")


def hop_secret(token: str | None) -> str | None:
    """The cluster's shared secret: ``$DURABLE_SESSIONS_CLUSTER_SECRET``, else ``token`` (``None``: neither)."""
    return os.environ.get(CLUSTER_SECRET_ENV) or token or None


def hop_value(secret: str | None, host_id: str) -> str:
    """The hop header a host sends: ``<host_id>;<hex HMAC-SHA256 of the id, keyed with secret>``
    (just ``host_id`` without a secret)."""
    if not secret:
        return host_id
    mac = hmac.new(secret.encode("utf-8"), _HOP_CONTEXT + host_id.encode("utf-8"), hashlib.sha256).hexdigest()
    return f"{host_id};{mac}"


def verify_hop(secret: str | None, value: str, peer: str | None) -> bool:
    """``True`` when a hop header ``value`` came from a host of the cluster.

    With a secret: the value's HMAC verifies (constant-time compare). Without one: the peer
    (the connection's IP address, ``None``: unknown) is a loopback address.
    """
    if not secret:
        try:
            return peer is not None and ipaddress.ip_address(peer).is_loopback
        except ValueError:
            return False
    host_id, _, _ = value.partition(";")
    return hmac.compare_digest(hop_value(secret, host_id).encode("utf-8", "replace"),
                               value.encode("utf-8", "replace"))


class HopGate:
    """ASGI middleware: a hop header that does not verify (:func:`verify_hop`) is removed from the request.

    Every check downstream (the ``Origin`` and ``Host`` rules, "one hop") then
    treats the request as a client's. Requests without the header pass untouched.
    """

    def __init__(self, app: Callable[..., Awaitable[None]], secret: str | None, *, cluster: bool = True) -> None:
        """``cluster``: ``False`` for a host outside a cluster, where no hop header is ever valid."""
        self.app = app
        self.secret = secret
        self.cluster = cluster

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") in ("http", "websocket"):
            headers = scope.get("headers", ())
            values = [value for key, value in headers if key == _HOP_NAME]
            client = scope.get("client")
            if values and not (self.cluster and len(values) == 1 and verify_hop(self.secret, values[0].decode("latin-1"),
                                                                 client[0] if client else None)):
                logger.warning("a request carried a hop header that does not verify; served as a client request")
                scope = dict(scope, headers=[(key, value) for key, value in headers if key != _HOP_NAME])
        await self.app(scope, receive, send)


#: Times one request goes round "the owner moved" before the host gives up with a 503.
MAX_ROUNDS = 4
#: Seconds before asking again after the first "not the owner" answer (doubling each round: 0.35 s in all).
MOVED_PAUSE_S = 0.05


class OwnerRecord(Protocol):
    """What a lookup of the actor's owner gives (``HostCluster.owner_of``): its URL and lease left."""

    address: str | None
    remaining_ms: int


#: ``await lookup(actor_id)``: the actor's owner as Postgres records it now (``None``: never activated).
OwnerLookup = Callable[[ActorId], Awaitable["OwnerRecord | None"]]


class OwnerGone(Exception):
    """The owner could not be reached and nothing was sent (connection refused or timed out)."""


class OwnerMoved(Exception):
    """The host asked as owner answered that it is not (any more): ``NotOwnerError``, nothing ran."""


@dataclass(frozen=True)
class ForwardedAnswer:
    """The owner's answer: status, body bytes, the headers passed back (owner header included)."""

    status: int
    content: bytes
    headers: dict[str, str]


class Forwarder:
    """This host's view of the cluster: who owns which actor, and the pooled connections to them.

    Args:
        host_id: this host's id (the value of the hop header it sends).
        advertise_url: this host's base URL as the other hosts reach it.
        lease_s: the cluster's lease length (bounds every wait for a lease to run out).
        max_wait_s: the longest a request waits for a dead owner's lease to
            run out before answering 503 (default: ``lease_s`` + 2 s).
        forward_timeout_s: the longest a forwarded call may take at the
            owner (``None``: no limit; a call may legitimately run long).
        max_connections: connections kept to all other hosts together.
        lookup: asks Postgres who owns an actor now (``HostCluster.owner_of``);
            with it, a call that an owner holds past a lease it did not renew
            is given up (see the module docstring). Settable later.
        secret: the cluster's shared secret (:func:`hop_secret`), which signs the hop header.
        verify: for ``https://`` owners, ``True`` (the system's CAs), ``False`` (no check), or the
            path of a CA bundle (PEM) the owners' certificates chain to.
    """

    def __init__(
        self, *, host_id: str, advertise_url: str, lease_s: float, max_wait_s: float | None = None,
        forward_timeout_s: float | None = None, max_connections: int = 512, lookup: OwnerLookup | None = None,
        secret: str | None = None, verify: bool | str = True,
    ) -> None:
        self.host_id = host_id
        self.secret = secret
        #: the value of the hop header this host sends (:func:`hop_value`).
        self.hop = hop_value(secret, host_id)
        self.ssl_context = _ssl_context(verify)
        self.lookup = lookup
        self.advertise_url = advertise_url.rstrip("/")
        self.lease_s = lease_s
        self.max_wait_s = max_wait_s if max_wait_s is not None else lease_s + 2.0
        self._timeouts = {"connect": CONNECT_TIMEOUT_S, "read": forward_timeout_s, "write": forward_timeout_s,
                          "pool": None}
        self._pool = httpcore.AsyncConnectionPool(ssl_context=self.ssl_context, max_connections=max_connections,
                                                  max_keepalive_connections=max_connections, keepalive_expiry=5.0)
        self._owners: dict[tuple[str, str], tuple[str, float]] = {}  # actor key -> (url, trio deadline)
        self._in_flight: dict[int, tuple[ActorId, str, float, trio.CancelScope]] = {}
        self.forwarded = 0  # requests and sockets sent on to an owner

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._pool.aclose()

    async def watch(self) -> None:
        """Run forever: give up forwarded calls whose owner stopped renewing its lease meanwhile.

        Every third of a lease, each call that has been with its owner for a
        lease or longer is checked with :attr:`lookup` (one question per
        actor); when Postgres says that owner no longer holds a live lease,
        the call is cancelled and answered :class:`OwnerUnreachableError`.
        """
        while True:
            await trio.sleep(self.lease_s / 3)
            if self.lookup is None:
                continue
            now = trio.current_time()
            by_actor: dict[ActorId, list[tuple[str, trio.CancelScope]]] = {}
            for actor_id, url, started, scope in list(self._in_flight.values()):
                if now - started >= self.lease_s:
                    by_actor.setdefault(actor_id, []).append((url, scope))
            for actor_id, calls in by_actor.items():
                try:
                    owner = await self.lookup(actor_id)
                except DurableSessionsError:  # Postgres unreachable: the owner cannot be judged now
                    continue
                address = (owner.address or "").rstrip("/") if owner is not None else ""
                live = owner is not None and owner.remaining_ms > 0
                for url, scope in calls:
                    if not live or address != url:
                        logger.warning("owner %s of %s holds a call past its lease; giving the call up",
                                       url, actor_id.hex)
                        scope.cancel()

    # -- who owns what ---------------------------------------------------------------------------

    @property
    def remembers_owners(self) -> bool:
        """``True`` while some other host's ownership is remembered (perhaps run out by now)."""
        return bool(self._owners)

    def owner_of(self, actor_id: ActorId) -> str | None:
        """The remembered owner URL of ``actor_id`` while its lease is live (never this host)."""
        key = (actor_id.namespace, actor_id.hex)
        found = self._owners.get(key)
        if found is None:
            return None
        if trio.current_time() >= found[1]:
            del self._owners[key]
            return None
        return found[0]

    def remember(self, actor_id: ActorId, error: NotOwnerError) -> str | None:
        """Note the owner ``error`` names; its URL, or ``None`` when it names none (or names this host)."""
        url = (error.owner_url or "").rstrip("/") or None
        if url is None or url == self.advertise_url:
            return None
        left = error.lease_left_s if error.lease_left_s is not None else self.lease_s
        self._owners[(actor_id.namespace, actor_id.hex)] = (url, trio.current_time() + min(left, self.lease_s))
        return url

    def lease_left(self, actor_id: ActorId, error: NotOwnerError | None) -> float:
        """Seconds until the owner's lease has surely run out (at most ``lease_s``), margin included.

        ``error.lease_left_s`` is exact (Postgres' clock when the owner was looked
        up), so a dead owner whose lease is nearly over is waited for only that long.
        """
        left = error.lease_left_s if error is not None else None
        if left is None:
            found = self._owners.get((actor_id.namespace, actor_id.hex))
            left = found[1] - trio.current_time() if found is not None else self.lease_s
        return min(max(0.0, left), self.lease_s) + LEASE_MARGIN_S

    def forget(self, actor_id: ActorId) -> None:
        """Drop what is remembered about ``actor_id``'s owner."""
        self._owners.pop((actor_id.namespace, actor_id.hex), None)

    # -- HTTP ----------------------------------------------------------------------------------------

    async def forward(
        self, url: str, method: str, path: str, query: bytes, headers: Mapping[str, str], body: bytes,
        actor_id: ActorId | None = None,
    ) -> ForwardedAnswer:
        """Send one request to the owner at ``url`` and return its answer.

        Args:
            actor_id: the actor the call is for: while the owner holds the call,
                its lease is watched (with :attr:`lookup`).
            path: the path as the client sent it (percent-encoded).
            query: the raw query string.
            headers: the client's request headers (only those in
                :data:`FORWARDED_REQUEST_HEADERS` are passed on).

        Raises:
            OwnerGone: no connection could be made; nothing was sent.
            OwnerMoved: the host at ``url`` is not the owner (any more); nothing ran.
            OwnerUnreachableError: the connection broke after the request left.
        """
        sent = [(name.encode("latin-1"), headers[name].encode("latin-1"))
                for name in FORWARDED_REQUEST_HEADERS if name in headers]
        sent.append((HOP_HEADER.encode("latin-1"), self.hop.encode("latin-1")))
        target = url + path + (("?" + query.decode("latin-1")) if query else "")
        with telemetry.forward(method, url) as span:  # a CLIENT span while tracing is on
            sent.extend(span.headers)  # its traceparent: the owner continues the trace
            with trio.CancelScope() as scope:
                key = id(scope)
                if actor_id is not None:
                    self._in_flight[key] = (actor_id, url, trio.current_time(), scope)
                try:
                    response = await self._pool.request(method, target, headers=sent, content=body,
                                                        extensions={"timeout": self._timeouts})
                    span.status(response.status)
                except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                    raise OwnerGone(f"{url}: {exc or type(exc).__name__}") from None
                except (httpcore.NetworkError, httpcore.TimeoutException, httpcore.ProtocolError) as exc:
                    raise OwnerUnreachableError(
                        f"the session's owner {url} stopped answering during the call ({type(exc).__name__}); "
                        "it may or may not have run"
                    ) from None
                finally:
                    self._in_flight.pop(key, None)
        if scope.cancelled_caught:
            if actor_id is not None:
                self.forget(actor_id)
            raise OwnerUnreachableError(
                f"the session's owner {url} stopped renewing its lease during the call; it may or may not have run")
        self.forwarded += 1
        received = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in response.headers}
        if response.status == 503 and error_type(response.content, received.get("content-type")) == (
                NotOwnerError.__name__):
            raise OwnerMoved(url)
        passed = {name: received[name] for name in FORWARDED_RESPONSE_HEADERS if name in received}
        passed[OWNER_HEADER] = received.get(OWNER_HEADER.lower(), url)
        return ForwardedAnswer(response.status, response.content, passed)

    async def answer(
        self, actor_id: ActorId, forwarded: bool,
        local: Callable[[], Awaitable[A]],
        remote: Callable[[str], Awaitable[A]],
    ) -> A:
        """Answer one call about ``actor_id``: here when this host owns it, else at its owner.

        ``local()`` asks this host's actors (raising :class:`NotOwnerError` when
        another host owns the actor); ``remote(url)`` sends the call to the
        owner at ``url`` (raising :class:`OwnerGone` when it cannot be
        reached, :class:`OwnerMoved` when it is not the owner any more).
        ``forwarded``: the request came from another host, so it is never
        sent on again.

        Raises:
            NotOwnerError: ``forwarded`` and not the owner; or the owner stayed
                unreachable for :attr:`max_wait_s` (the call did not run).
            OwnerUnreachableError: the owner stopped answering mid-call.
            Exception: whatever ``local()`` raises otherwise.
        """
        waited_until = trio.current_time() + self.max_wait_s
        owner = None if forwarded else self.owner_of(actor_id)
        error: NotOwnerError | None = None
        for attempt in range(MAX_ROUNDS):
            if owner is None:
                try:
                    return await local()
                except NotOwnerError as exc:
                    if forwarded:
                        raise
                    error = exc
                    owner = self.remember(actor_id, exc)
                    if owner is None:
                        raise
            try:
                return await remote(owner)
            except OwnerMoved:
                # The host asked is not the owner (any more): it moved, or that host is handing its
                # actors over as it stops. Ask again after a short pause, growing each round, so a
                # release under way has landed (a stopping host releases every lease at once).
                self.forget(actor_id)
                owner, error = None, None
                if attempt + 1 < MAX_ROUNDS:
                    await trio.sleep(MOVED_PAUSE_S * 2 ** attempt)
                continue
            except OwnerGone as gone:
                # Nothing was sent. The owner is down (or unreachable from here): once its lease has
                # run out, this host's actor host may take the actor over.
                wait = self.lease_left(actor_id, error)
                self.forget(actor_id)
                if trio.current_time() + wait > waited_until:
                    raise NotOwnerError(_describe(actor_id), owner, lease_left_s=wait) from gone
                logger.info("owner %s of %s does not answer; waiting %.2f s for its lease", owner, actor_id.hex, wait)
                await trio.sleep(wait)
                owner, error = None, None
        raise NotOwnerError(_describe(actor_id), None)


def _ssl_context(verify: bool | str) -> ssl.SSLContext:
    """The TLS context for ``https://`` owners (see :class:`Forwarder`'s ``verify``)."""
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)


def _describe(actor_id: ActorId) -> str:
    return f"{actor_id.namespace}/{actor_id.hex}"


def error_type(content: bytes, content_type: str | None) -> str | None:
    """The ``error.type`` of an error body, or ``None`` when it is not one."""
    try:
        body = decode_body(content, content_type)
    except DurableSessionsError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("type") if isinstance(error, dict) else None


def retry_after(error: BaseException) -> str:
    """The ``Retry-After`` value (whole seconds, at least 1) for a retryable 503 ``error``."""
    seconds = getattr(error, "retry_after_s", None)
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return "1"
    return str(max(1, math.ceil(seconds)))


class ShortcutServer(Protocol):
    """What :class:`ForwardingShortcut` needs of the server (:class:`runtime.server.app.SessionsServer`)."""

    max_body_bytes: int
    body_timeout_s: float
    closing: trio.Event
    metrics: Any

    def authorized(self, header: str | None) -> bool: ...

    def actor_id(self, session_id: Any) -> ActorId: ...


class ForwardingShortcut:
    """ASGI middleware: a session request whose owner is known goes to it without the web framework.

    It takes a request only when everything the app would check is settled
    here: a session route that exists, the right token, a body of declared
    length within the limit, no hop header, the server not closing, and an
    owner remembered from an earlier ``NotOwnerError``. The owner's answer is
    sent back as it came. When the owner turns out to be gone or moved, the
    request (body included) goes to the app, which finds the owner again or
    takes the session over; any other failure is answered like the app would.
    """

    def __init__(self, app: Callable[..., Awaitable[None]], server: ShortcutServer, forwarder: Forwarder) -> None:
        """``forwarder``: the server's (a server in cluster mode has one)."""
        self.app = app
        self.server = server
        self.forwarder = forwarder

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        target = self._target(scope) if scope.get("type") == "http" else None
        if target is None:
            await self.app(scope, receive, send)
            return
        actor_id, owner, headers, label = target
        started = time.perf_counter()
        body: bytes | None = b""
        try:
            body = await _whole_body(receive, self.server.body_timeout_s)
            if body is None:  # the client went away
                return
            answer = await self.forwarder.forward(owner, scope["method"], scope["path"],
                                                         scope.get("query_string", b""), headers, body, actor_id)
        except (OwnerGone, OwnerMoved):
            self.forwarder.forget(actor_id)
            await self.app(scope, _replay(body or b"", receive), send)
            return
        except Exception as exc:  # noqa: BLE001 - answered as the app answers errors
            status, payload = describe_error(exc)
            kind = parse_accept_header(headers.get("accept"), MIMEAccept).best_match([JSON, MSGPACK], default=JSON)
            extra = {"retry-after": retry_after(exc)} if status == 503 else {}
            answer = ForwardedAnswer(status, encode_body(payload, kind), {"content-type": kind, **extra})
        out = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in answer.headers.items()]
        out.append((b"content-length", str(len(answer.content)).encode("ascii")))
        await send({"type": "http.response.start", "status": answer.status, "headers": out})
        await send({"type": "http.response.body", "body": answer.content})
        self.server.metrics.observe(label, answer.status, time.perf_counter() - started)

    def _target(self, scope: dict[str, Any]) -> tuple[ActorId, str, dict[str, str], str] | None:
        path = scope.get("path", "")
        server = self.server
        if not path.startswith(SESSIONS_PREFIX) or not self.forwarder.remembers_owners:
            return None  # (a host that forwards nothing parses nothing twice)
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        if HOP_HEADER.lower() in headers or "transfer-encoding" in headers:
            return None
        length = headers.get("content-length")
        if length is not None and not (length.isdigit() and int(length) <= server.max_body_bytes):
            return None
        segment, _, rest = path[len(SESSIONS_PREFIX):].partition("/")
        try:
            actor_id = server.actor_id(unquote_segment(segment, "session_id"))
        except DurableSessionsError:
            return None
        owner = self.forwarder.owner_of(actor_id)
        if owner is None or server.closing.is_set() or not server.authorized(headers.get("authorization")):
            return None
        route, _ = match(scope["method"], rest.split("/"))
        if route is None:
            return None
        return actor_id, owner, headers, route.name


async def _whole_body(receive: Any, timeout_s: float) -> bytes | None:
    """The request body (the caller checked its declared length), or ``None`` when the client disconnected.

    Raises:
        RequestTimeoutError: it did not all arrive within ``timeout_s`` seconds (as on the owner: 408).
    """
    parts = []
    with trio.move_on_after(timeout_s):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                return b"".join(parts)
    raise RequestTimeoutError(f"the request body did not arrive within {timeout_s:g} s")


def _replay(body: bytes, receive: Any) -> Callable[[], Awaitable[dict[str, Any]]]:
    """An ASGI ``receive`` that gives ``body`` again, then whatever ``receive`` gives."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
