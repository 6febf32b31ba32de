"""Forwarding between the hosts of a cluster (``serve --cluster``): a call goes to the actor's owner.

Every host accepts every request. The host of the actor's owner runs it;
any other host sends it on to the owner over HTTP and hands back the
owner's answer unchanged (status, body, the headers that matter). A host
learns who owns an actor from :class:`~storage.errors.NotOwnerError`, which
its actor host raises before touching anything (the owner's advertised URL
and the seconds its lease has left, at least 1), and remembers that owner until the
lease would run out, so the next requests for the actor are forwarded at
once without asking Postgres.

The rules:

* **One hop.** A forwarded request carries :data:`~runtime.wire.HOP_HEADER`.
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
  :class:`~storage.errors.OwnerUnreachableError` (503, ``Retry-After``) and
  the client repeats it when that is safe. An owner that is merely slow
  keeps renewing its lease, and the call waits for it.
* **Where the owner is.** Every answer about a session in cluster mode
  carries :data:`~runtime.wire.OWNER_HEADER` with the owner's advertised URL
  (when known), so a client that lists that URL sends the session's next
  requests there directly and no host spends CPU on a hop.

Forwarded headers: ``Authorization`` (every host checks the same token),
``Content-Type``, ``Accept``; the method, the path as sent
(percent-encoding kept), the query string and the body bytes are passed on
as they are. Connections to other hosts are pooled (HTTP/1.1 keep-alive).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import trio

from runtime.host.ids import ActorId
from runtime.wire import HOP_HEADER, OWNER_HEADER, decode_body
from storage.errors import DurableSessionsError, NotOwnerError, OwnerUnreachableError

__all__ = ["ForwardedAnswer", "Forwarder", "OwnerGone", "OwnerMoved", "retry_after"]

logger = logging.getLogger(__name__)

#: Request headers passed on to the owner (the rest are the hop's own: Host, Content-Length, ...).
FORWARDED_REQUEST_HEADERS = ("authorization", "content-type", "accept")
#: Response headers passed back from the owner.
FORWARDED_RESPONSE_HEADERS = ("content-type", "retry-after", "allow", "www-authenticate")
#: Seconds added to a lease's end before asking again, so the owner's last renewal has surely lapsed.
LEASE_MARGIN_S = 0.1
#: Seconds to wait for a TCP connection to another host.
CONNECT_TIMEOUT_S = 2.0


#: Times one request goes round "the owner moved" before the host gives up with a 503.
MAX_ROUNDS = 4


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
    """

    def __init__(
        self, *, host_id: str, advertise_url: str, lease_s: float, max_wait_s: float | None = None,
        forward_timeout_s: float | None = None, max_connections: int = 512, lookup: OwnerLookup | None = None,
    ) -> None:
        self.host_id = host_id
        self.lookup = lookup
        self.advertise_url = advertise_url.rstrip("/")
        self.lease_s = lease_s
        self.max_wait_s = max_wait_s if max_wait_s is not None else lease_s + 2.0
        timeout = httpx.Timeout(forward_timeout_s, connect=CONNECT_TIMEOUT_S, pool=None)
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections,
                              keepalive_expiry=5.0)
        self._http = httpx.AsyncClient(timeout=timeout, limits=limits)
        self._owners: dict[tuple[str, str], tuple[str, float]] = {}  # actor key -> (url, trio deadline)
        self.forwarded = 0  # requests and sockets sent on to an owner

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._http.aclose()

    # -- who owns what ---------------------------------------------------------------------------

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
        left = error.retry_after_s if error.retry_after_s is not None else self.lease_s
        self._owners[(actor_id.namespace, actor_id.hex)] = (url, trio.current_time() + max(0.0, left))
        return url

    def lease_left(self, actor_id: ActorId, error: NotOwnerError | None) -> float:
        """Seconds until the owner's lease has surely run out (at most ``lease_s``), margin included."""
        left = error.retry_after_s if error is not None and error.retry_after_s is not None else None
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
        sent = {name: headers[name] for name in FORWARDED_REQUEST_HEADERS if name in headers}
        sent[HOP_HEADER] = self.host_id
        target = url + path + (("?" + query.decode("latin-1")) if query else "")
        try:
            if actor_id is None or self.lookup is None:
                response = await self._http.request(method, target, content=body, headers=sent)
            else:
                response = await self._watched(actor_id, url, self._http.request(
                    method, target, content=body, headers=sent))
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise OwnerGone(f"{url}: {exc or type(exc).__name__}") from None
        except httpx.TransportError as exc:
            raise OwnerUnreachableError(
                f"the session's owner {url} stopped answering during the call ({type(exc).__name__}); "
                "it may or may not have run"
            ) from None
        self.forwarded += 1
        if response.status_code == 503 and error_type(response.content, response.headers.get("content-type")) == (
                NotOwnerError.__name__):
            raise OwnerMoved(url)
        passed = {name: response.headers[name] for name in FORWARDED_RESPONSE_HEADERS if name in response.headers}
        passed.setdefault(OWNER_HEADER, response.headers.get(OWNER_HEADER, url))
        return ForwardedAnswer(response.status_code, response.content, passed)

    async def _watched(self, actor_id: ActorId, url: str, request: Awaitable[httpx.Response]) -> httpx.Response:
        """``await request``, given up when ``url`` stops holding the actor's lease meanwhile.

        Raises:
            OwnerUnreachableError: the owner's lease ran out (or moved) while the call was with it.
        """
        result: list[Any] = []
        async with trio.open_nursery() as nursery:

            async def send() -> None:
                result.append(await request)
                nursery.cancel_scope.cancel()

            async def watch() -> None:
                pause = self.lease_s
                while True:
                    await trio.sleep(pause)
                    try:
                        owner = await self.lookup(actor_id)
                    except DurableSessionsError:  # Postgres unreachable: the owner cannot be judged now
                        pause = self.lease_s / 3
                        continue
                    address = (owner.address or "").rstrip("/") if owner is not None else ""
                    if address != url or owner.remaining_ms <= 0:
                        break
                    pause = max(owner.remaining_ms / 1000, self.lease_s / 3) + LEASE_MARGIN_S
                logger.warning("owner %s of %s holds a call past its lease; giving the call up", url, actor_id.hex)
                nursery.cancel_scope.cancel()

            nursery.start_soon(send)
            nursery.start_soon(watch)
        if not result:
            raise OwnerUnreachableError(
                f"the session's owner {url} stopped renewing its lease during the call; it may or may not have run")
        return result[0]

    async def answer(
        self, actor_id: ActorId, forwarded: bool,
        local: Callable[[], Awaitable[object]],
        remote: Callable[[str], Awaitable[object]],
    ) -> object:
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
        for _ in range(MAX_ROUNDS):
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
                self.forget(actor_id)
                owner, error = None, None
                continue
            except OwnerGone as gone:
                # Nothing was sent. The owner is down (or unreachable from here): once its lease has
                # run out, this host's actor host may take the actor over.
                wait = self.lease_left(actor_id, error)
                self.forget(actor_id)
                if trio.current_time() + wait > waited_until:
                    raise NotOwnerError(_describe(actor_id), owner, retry_after_s=wait) from gone
                logger.info("owner %s of %s does not answer; waiting %.2f s for its lease", owner, actor_id.hex, wait)
                await trio.sleep(wait)
                owner, error = None, None
        raise NotOwnerError(_describe(actor_id), None)


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
