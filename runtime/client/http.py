"""The Python client: ``async with SessionsClient(url, token=...) as client:``.

Works under trio and asyncio (httpx and anyio pick up the running loop)::

    async with SessionsClient("http://127.0.0.1:8787", token=token) as client:
        s = client.session("chat-42")
        await s.append_message({"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]})
        history = await s.get_history()
        async with s.events() as events:        # broadcasts, over a WebSocket
            async for event in events:
                ...

Several hosts of one cluster (``serve --cluster``) are given as a list of
URLs, or one comma-separated string (``$DURABLE_SESSIONS_URL`` too)::

    SessionsClient(["http://10.0.0.1:8801", "http://10.0.0.2:8801", "http://10.0.0.3:8801"])

A request goes to the session's owner when a host has named it (the
``X-Durable-Sessions-Owner`` header), else to the first URL that answers;
when a host stops answering, the call moves to another one within bounds
(:mod:`runtime.client.failover` says which calls may be repeated).

A :class:`SessionHandle` has the Session's method names and returns what
the in-process :class:`actors.session_agent.SessionAgent` returns (lists,
dicts, strings, booleans; ``None`` where the Session gives ``None``).
Server errors are raised again as the same exception classes
(:class:`common.errors.MessageNotFoundError`,
:class:`common.errors.ActorOverloadedError`, ...; HTTP-level ones from
:mod:`common.wire`).

A request the server refused before doing anything for it (503
``ServerBusyError``: admission control, see ``runtime.server.admission``) is
sent again after its ``Retry-After`` (with jitter), up to
:data:`BUSY_RETRIES` times; nothing of it ran, so repeating is safe. Other
refusals (429 for one busy session, 507 for a full disk) are raised.

The Claude Agent SDK ``SessionStore`` adapter, ``DurableSessionStore``, lives
in :mod:`runtime.client.transcripts` (importable from here too) and uses this
client's HTTP layer (:meth:`SessionsClient.request`).
"""

from __future__ import annotations

import json
import os
import random
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import msgpack

from common.errors import InvalidInputError, ServerUnreachableError
from common.shapes import LATEST_LEAF
from common.wire import (
    CLOSE_RECONNECT,
    JSON,
    MSGPACK,
    OWNER_HEADER,
    RESTORE_SUFFIX,
    SESSIONS_PREFIX,
    encode_body,
    error_from_payload,
    quote_segment,
)
from runtime.api import METHODS, ApiMethod, request_for
from runtime.client.failover import (
    IDEMPOTENT_HTTP,
    NOT_RUN_ERRORS,
    RETRY_SAFE,
    SHUTTING_DOWN_ERRORS,
    Endpoints,
    parse_retry_after,
    parse_urls,
)
from runtime.manager_api import MANAGERS_PREFIX
from runtime.telemetry import outgoing_headers
from runtime.wsclient import ConnectionClosed, WebSocketConnection

if TYPE_CHECKING:
    from runtime.client.managers import ManagerHandle

__all__ = ["DEFAULT_URL", "LATEST_LEAF", "SessionHandle", "SessionSocket", "SessionsClient"]

#: Where ``durable-sessions serve`` listens by default.
DEFAULT_URL = "http://127.0.0.1:8787"


def server_url(url: str | Sequence[str] | None = None) -> str | Sequence[str]:
    """The server(s) a client talks to: ``url`` when given, else ``$DURABLE_SESSIONS_URL``, else :data:`DEFAULT_URL`."""
    return url or os.environ.get("DURABLE_SESSIONS_URL") or DEFAULT_URL

#: Seconds an idle pooled connection is kept; shorter than the server's keep-alive
#: timeout (``ServerSettings.keep_alive_timeout_s``), so the client always closes first.
KEEPALIVE_EXPIRY_S = 5.0
#: Longest single wait a client with several URLs honours from a ``Retry-After`` header (seconds).
MAX_RETRY_WAIT_S = 5.0
#: Times a request refused unrun with 503 ``ServerBusyError`` is sent again (whatever ``retries`` says).
BUSY_RETRIES = 5
#: Longest wait between those attempts, whatever ``Retry-After`` says (seconds).
BUSY_RETRY_MAX_S = 5.0
Message = dict[str, Any]

#: Transport errors raised before the request left: the call certainly did not run.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
#: Transport errors that mean no server answered at a URL (raised as :class:`ServerUnreachableError`).
_NO_ANSWER = (httpx.ConnectError, httpx.ConnectTimeout)
#: What :class:`ServerUnreachableError` suggests to a program using this client.
UNREACHABLE_HINT = ("is a server running there? Start one with `durable-sessions serve`, or pass its URL "
                    "(SessionsClient(url), $DURABLE_SESSIONS_URL)")
#: Transport errors after which the call may or may not have run.
_MAYBE_SENT = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadTimeout, httpx.WriteTimeout)


class SessionsClient:
    """HTTP client of a durable-sessions server, or of several hosts of one cluster.

    Args:
        url: the server's base URL, or several (a sequence, or one string of
            comma-separated URLs); default ``$DURABLE_SESSIONS_URL`` or :data:`DEFAULT_URL`.
        token: bearer token (default ``$DURABLE_SESSIONS_TOKEN``; ``None`` for none).
        timeout: seconds per request (``None``: no limit).
        encoding: ``"json"`` or ``"msgpack"`` for request and response bodies.
        transport: an ``httpx`` transport (tests, custom networking).
        retries: how many times one call may be sent again to another host
            (see :mod:`runtime.client.failover`); default 0 with one URL (every
            failure is raised at once, as before) and ``3 * len(urls)`` with several.
        failover_s: the most seconds one call spends moving between hosts,
            waits included (default: ``timeout``, or 30 without one).
        verify: for ``https://`` URLs (and their ``wss://`` sockets): ``True`` (the
            default CAs; ``SSL_CERT_FILE`` is honoured), the path of a CA bundle
            (PEM) such as a self-signed certificate, an :class:`ssl.SSLContext`,
            or ``False`` (no check: testing only).

    Attributes:
        url: the first URL; ``urls``: all of them.

    Use it as an async context manager; calls outside it raise ``RuntimeError``.

    Raises:
        ValueError: a bad ``encoding``, ``retries``, or URL.
    """

    def __init__(
        self, url: str | Sequence[str] | None = None, *, token: str | None = None, timeout: float | None = 30.0,
        encoding: str = "json", transport: httpx.AsyncBaseTransport | None = None, retries: int | None = None,
        failover_s: float | None = None, verify: bool | str | ssl.SSLContext = True,
    ) -> None:
        if encoding not in ("json", "msgpack"):
            raise ValueError(f"encoding must be 'json' or 'msgpack', not {encoding!r}")
        self.urls = parse_urls(server_url(url))
        self.url = self.urls[0]
        if retries is None:
            retries = 0 if len(self.urls) == 1 else 3 * len(self.urls)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be a non-negative integer, not {retries!r}")
        self.retries = retries
        self.failover_s = failover_s if failover_s is not None else (timeout if timeout is not None else 30.0)
        self.endpoints = Endpoints(self.urls)
        self.token = token if token is not None else os.environ.get("DURABLE_SESSIONS_TOKEN") or None
        self._media = MSGPACK if encoding == "msgpack" else JSON
        self._timeout = timeout
        self._transport = transport
        secure = verify is not True or any(url.startswith("https:") for url in self.urls)
        #: the TLS context of HTTPS requests and WebSockets (``None``: plain HTTP only, the defaults).
        self.ssl_context = tls_context(verify) if secure else None
        self._http: httpx.AsyncClient | None = None
        self._closed = False

    async def __aenter__(self) -> SessionsClient:
        if self._http is not None or self._closed:
            raise RuntimeError("a SessionsClient can be entered once")
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64, keepalive_expiry=KEEPALIVE_EXPIRY_S)
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=self._headers(), timeout=self._timeout, transport=self._transport, limits=limits,
            verify=self.ssl_context if self.ssl_context is not None else True,
        )
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool (idempotent)."""
        self._closed = True
        if self._http is not None:
            await self._http.aclose()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": self._media}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def session(self, session_id: str) -> SessionHandle:
        """A handle on session ``session_id`` (any string of 1-512 UTF-8 bytes). Creates nothing."""
        return SessionHandle(self, session_id)

    def manager(self, manager_id: str) -> ManagerHandle:
        """A handle on manager ``manager_id`` (any string of 1-512 UTF-8 bytes; e.g. one per end user):
        the SessionManager's methods, and a session handle per managed session. Creates nothing."""
        from runtime.client.managers import ManagerHandle

        return ManagerHandle(self, manager_id)

    async def request(
        self, method: str, path: str, *, body: Any = None, params: dict[str, Any] | None = None,
        retry_safe: bool | None = None,
    ) -> Any:
        """Send one request to ``path`` (under a base URL) and return the decoded body.

        Args:
            retry_safe: whether the call may be sent again when it is unknown
                whether it ran (default: ``method`` is idempotent in HTTP:
                GET, HEAD, OPTIONS, PUT, DELETE). See :mod:`runtime.client.failover`.

        Raises:
            RuntimeError: the client is not open.
            Exception: the error the server answered with, as its own class.
            ServerUnreachableError: no host accepted the connection (refused, timed out, unknown
                name): the call did not run; the transport's error is its ``__context__``.
            httpx.TransportError: the connection broke after the request was sent (the call may
                have run), or no connection of the pool was free in time.
        """
        if self._http is None or self._closed:
            raise RuntimeError("use the client inside `async with SessionsClient(...) as client:`")
        content = None if body is None else encode_body(body, self._media)
        headers = {"Content-Type": self._media} if content is not None else None
        headers = outgoing_headers(headers)  # the caller's traceparent, when it traces (runtime.telemetry)
        query = {k: v for k, v in (params or {}).items() if v is not None}
        if retry_safe is None:
            retry_safe = method.upper() in IDEMPOTENT_HTTP
        key = _session_key(path)
        started = time.monotonic()
        attempt, busy, url = 0, 0, None
        while True:
            url = self.endpoints.pick(key, avoid=url)
            wait = 0.0
            try:
                response = await self._http.request(method, url + path, content=content, headers=headers,
                                                    params=query)
            except _NOT_SENT as exc:
                self.endpoints.failed(url)
                if not self._may_retry(attempt, started, 0.0):
                    if isinstance(exc, _NO_ANSWER):
                        raise self.unreachable(exc) from None  # one short traceback; the cause stays in __context__
                    raise
                wait = _backoff(attempt) if self._all_failed() else 0.0
            except _MAYBE_SENT:
                self.endpoints.failed(url)
                if not (retry_safe and self._may_retry(attempt, started, 0.0)):
                    raise
            else:
                self.endpoints.answered(url)
                if key is not None:
                    self.endpoints.learn_owner(key, response.headers.get(OWNER_HEADER))
                payload = _decode(response)
                if response.status_code < 400:
                    return payload
                error = error_from_payload(response.status_code, payload)
                if _refused_unrun(response, payload) and busy < BUSY_RETRIES:  # nothing ran: send it again
                    busy += 1
                    await anyio.sleep(_retry_delay_s(response))
                    continue
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
                if response.status_code != 503 or retry_after is None:
                    raise error
                if key is not None and response.headers.get(OWNER_HEADER) is None:
                    self.endpoints.forget_owner(key)
                wait = min(retry_after, MAX_RETRY_WAIT_S)
                not_run = type(error).__name__ in NOT_RUN_ERRORS
                if type(error).__name__ in SHUTTING_DOWN_ERRORS and len(self.endpoints.urls) > 1:
                    self.endpoints.failed(url)  # that host is stopping: another one takes its sessions now
                    if not self._all_failed():
                        wait = 0.0
                if not ((retry_safe or not_run) and self._may_retry(attempt, started, wait)):
                    raise error
            attempt += 1
            if wait:
                await anyio.sleep(wait)

    def unreachable(self, cause: BaseException) -> ServerUnreachableError:
        """The :class:`ServerUnreachableError` for this client's URLs after the transport failed with ``cause``."""
        reason = str(cause) or ("timed out" if isinstance(cause, (httpx.ConnectTimeout, TimeoutError))
                                else type(cause).__name__)
        return ServerUnreachableError(self.urls, UNREACHABLE_HINT, reason)

    def _may_retry(self, attempt: int, started: float, wait: float) -> bool:
        """Whether one more attempt fits the retry count and the failover time."""
        return attempt < self.retries and time.monotonic() - started + wait < self.failover_s

    def _all_failed(self) -> bool:
        return self.endpoints.all_failed()

    async def health(self) -> dict[str, Any]:
        """``{"status": "ok"}`` from ``GET /v1/health`` (no token needed)."""
        return await self.request("GET", "/v1/health")

    async def statistics(self) -> dict[str, Any]:
        """The host's statistics (``GET /v1/actors``): active, hibernated, activations, ..."""
        return await self.request("GET", "/v1/actors")

    async def metrics(self) -> str:
        """The Prometheus text of ``GET /metrics``."""
        if self._http is None or self._closed:
            raise RuntimeError("use the client inside `async with SessionsClient(...) as client:`")
        try:
            response = await self._http.get("/metrics")
        except _NO_ANSWER as exc:
            raise self.unreachable(exc) from None  # one short traceback; the cause stays in __context__
        if response.status_code >= 400:
            raise error_from_payload(response.status_code, _decode(response))
        return response.text

    async def list_sessions(self, *, limit: int | None = None, cursor: str | None = None,
                            prefix: str | None = None) -> dict[str, Any]:
        """One page of the sessions the host holds (``GET /v1/sessions``), most recently updated first:
        ``{"sessions": [{"id", "messages", "compactions", "compactedThrough", "createdAt", "updatedAt",
        "state", "problem", "active"}, ...], "cursor": str | None}``. Pass ``cursor`` for the next page
        (``None``: this was the last); ``prefix`` keeps ids starting with it; ``limit`` 1-1000 (default 50).

        Raises:
            NotSupportedError: the server runs in cluster mode or keeps its sessions in Postgres.
        """
        return await self.request("GET", SESSIONS_PREFIX.rstrip("/"),
                                  params={"limit": limit, "cursor": cursor, "prefix": prefix})

    async def iter_sessions(self, *, prefix: str | None = None, page_size: int = 200) -> AsyncIterator[dict[str, Any]]:
        """Every session of :meth:`list_sessions`, page after page."""
        cursor = None
        while True:
            page = await self.list_sessions(limit=page_size, cursor=cursor, prefix=prefix)
            for entry in page["sessions"]:
                yield entry
            cursor = page["cursor"]
            if cursor is None:
                return

    async def describe_session(self, session_id: str) -> dict[str, Any]:
        """One session's summary (``GET /v1/sessions/{id}``, the shape of a :meth:`list_sessions` entry).

        Raises:
            SessionNotFoundError: the host has no session with this id.
        """
        return (await self.request("GET", SESSIONS_PREFIX + quote_segment(session_id)))["session"]

    async def delete_session(self, session_id: str) -> None:
        """Delete the session and erase its data (``DELETE /v1/sessions/{id}``, docs/operations.md).

        Raises:
            SessionNotFoundError: the host has no session with this id.
        """
        await self.request("DELETE", SESSIONS_PREFIX + quote_segment(session_id))

    async def export_session(self, session_id: str) -> str:
        """The session's archive (``GET /v1/sessions/{id}/export``): JSON Lines text, docs/export-format.md.

        Raises:
            SessionNotFoundError: the host has no session with this id.
        """
        text = await self.request("GET", SESSIONS_PREFIX + quote_segment(session_id) + "/export")
        return text if isinstance(text, str) else json.dumps(text)

    async def import_session(self, session_id: str, archive: str | bytes) -> int:
        """Store an archive (of :meth:`export_session`) as the session ``session_id``; the messages stored.

        Raises:
            ArchiveError (an InvalidInputError): the archive's first bad line; nothing was stored.
            ConflictError: the session already holds data.
        """
        if self._http is None or self._closed:
            raise RuntimeError("use the client inside `async with SessionsClient(...) as client:`")
        content = archive.encode("utf-8") if isinstance(archive, str) else archive
        url = self.endpoints.pick(None)
        try:
            response = await self._http.post(url + SESSIONS_PREFIX + quote_segment(session_id) + "/import",
                                             content=content, headers={"Content-Type": "application/x-ndjson"})
        except _NO_ANSWER as exc:
            raise self.unreachable(exc) from None
        payload = _decode(response)
        if response.status_code >= 400:
            raise error_from_payload(response.status_code, payload)
        return int(payload["imported"])

    async def bookmark_session(self, session_id: str, at: str | datetime) -> dict[str, Any]:
        """A bookmark of the session's state at ``at`` (cluster mode; ``GET /v1/sessions/{id}/bookmark?at=``):
        ``{"bookmark", "at", "writtenAt", "window": {"days", "from"}}`` (docs/operations.md, point-in-time
        restore). ``at``: an aware ``datetime`` or ISO 8601 text with ``Z`` or an offset.

        Raises:
            InvalidInputError: ``at`` is not an aware time, or lies outside the window (the message names it).
            SessionNotFoundError: the session was never written.
            NotSupportedError: the server is not a cluster host.
        """
        if isinstance(at, datetime):
            if at.tzinfo is None:
                raise InvalidInputError("at must carry a time zone (an aware datetime)", field="at")
            at = at.isoformat()
        return await self.request("GET", SESSIONS_PREFIX + quote_segment(session_id) + "/bookmark",
                                  params={"at": at})

    async def restore_session(self, session_id: str, bookmark: str) -> dict[str, Any]:
        """Rewind the session to a bookmark (cluster mode; ``POST /v1/sessions/{id}:restore``):
        ``{"undo", "restoredTo", "messages"}``; restoring ``undo`` takes the rewind back.

        Raises:
            InvalidInputError: a bookmark of another session, malformed, or outside the window.
            SessionNotFoundError: the session was never written.
            ActorBusyError: the session's calls kept it busy (nothing changed; try again).
            NotSupportedError: the server is not a cluster host.
        """
        return await self.request("POST", SESSIONS_PREFIX + quote_segment(session_id) + RESTORE_SUFFIX,
                                  body={"bookmark": bookmark}, retry_safe=False)

    async def collect_garbage(self, *, dry_run: bool = False) -> dict[str, Any]:
        """Delete the sessions idle longer than the server's ``[retention] delete_idle_after_days``
        (``POST /v1/host:gc``); ``dry_run`` only lists them. ``{"idleDays", "sessions": [{id, updatedAt}],
        "deleted"}`` (``idleDays`` ``None``: retention is off, nothing listed or deleted)."""
        return await self.request("POST", "/v1/host:gc", body={"dryRun": dry_run}, retry_safe=dry_run)

    async def backup_host(self, to: str) -> dict[str, Any]:
        """Copy every session, consistent per file, into the server's folder ``to`` (absolute; new or empty)
        while it serves (``POST /v1/host:backup``): ``{"to", "sessions", "bytes"}``.

        Raises:
            NotSupportedError: the server runs in cluster mode or keeps its sessions in Postgres (back up
                the database with ``pg_dump`` or ``pg_basebackup``).
        """
        return await self.request("POST", "/v1/host:backup", body={"to": to}, retry_safe=False)

    async def hibernate(self, *session_ids: str) -> int:
        """Hibernate these sessions' actors (none given: every active actor); how many were active."""
        body = {"sessionIds": list(session_ids)} if session_ids else {}
        return (await self.request("POST", "/v1/actors:hibernate", body=body))["hibernated"]

    def websocket_url(self, path: str, base: str | None = None) -> str:
        """``path`` under ``base`` (default: the first URL) with a ``ws(s)://`` scheme."""
        base = base or self.url
        return ("ws" + base[4:] if base.startswith("http") else base) + path


def tls_context(verify: bool | str | ssl.SSLContext) -> ssl.SSLContext:
    """The TLS context for ``verify`` (see :class:`SessionsClient`).

    Raises:
        OSError: a CA bundle path that cannot be read.
        ssl.SSLError: a CA bundle that is not PEM certificates.
    """
    if isinstance(verify, ssl.SSLContext):
        return verify
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if isinstance(verify, str):
        return ssl.create_default_context(cafile=verify)
    return httpx.create_ssl_context()


def _session_key(path: str) -> str | None:
    """The key of owner hints for a request: the encoded session id of a session route, ``m/<manager id>``
    for a manager route (managed sessions live with their manager), else ``None``."""
    if path.startswith(SESSIONS_PREFIX):
        return path[len(SESSIONS_PREFIX):].split("/", 1)[0] or None
    if path.startswith(MANAGERS_PREFIX):
        segment = path[len(MANAGERS_PREFIX):].split("/", 1)[0]
        return f"m/{segment}" if segment else None
    return None


def _backoff(attempt: int) -> float:
    """Seconds to wait before another attempt when no host could be reached: 0.05 s doubling to 1 s."""
    return min(1.0, 0.05 * 2 ** min(attempt, 5))


def _refused_unrun(response: httpx.Response, payload: Any) -> bool:
    """503 ``ServerBusyError``: the server refused the request before running anything of it."""
    if response.status_code != 503 or not isinstance(payload, dict):
        return False
    error = payload.get("error")
    return isinstance(error, dict) and error.get("type") == "ServerBusyError"


def _retry_delay_s(response: httpx.Response) -> float:
    """``Retry-After`` seconds (1 when absent), times a random 0.5-1 so refused clients spread out."""
    try:
        after = float(response.headers.get("Retry-After", "1"))
    except ValueError:
        after = 1.0
    return min(BUSY_RETRY_MAX_S, max(0.0, after)) * random.uniform(0.5, 1.0)


def _decode(response: httpx.Response) -> Any:
    if not response.content:
        return None
    kind = response.headers.get("Content-Type", "").split(";")[0].strip()
    if kind == MSGPACK:
        return msgpack.unpackb(response.content, raw=False)
    try:
        return response.json()
    except ValueError:
        return response.text


class TableHandle:
    """What :class:`SessionHandle` and :class:`~runtime.client.managers.ManagerHandle` share: one
    request per call of a method of their table (:attr:`api`), built from the method's first route
    (under :attr:`path`); a method without a route goes through ``POST {path}/rpc``."""

    #: The table the handle's methods come from, by name.
    api: Mapping[str, ApiMethod] = METHODS
    #: Methods that may be sent again when it is unknown whether the first attempt ran (a client of
    #: several hosts, :mod:`runtime.client.failover`); ``None``: judge by the HTTP method.
    retry_safe: frozenset[str] | None = None

    def __init__(self, client: SessionsClient, path: str) -> None:
        self.client = client
        self.path = path

    async def _invoke(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Call the table's method ``name``: its route (the reply's result key), else ``POST /rpc``."""
        method = self.api[name]
        bound = method.signature(client=True).bind(*args, **kwargs)
        route = method.client_route
        if route is None:  # the default parent stays unsent: the actor applies it
            return await self.call(name, **{k: v for k, v in bound.arguments.items() if v is not LATEST_LEAF})
        request = request_for(method, route, bound.arguments)
        if request is None:  # an id no path segment can carry: the actor judges it
            return await self.call(name, *bound.args)
        catch = route.not_found.catch if route.not_found else ()
        try:
            reply = await self.client.request(request.verb, f"{self.path}/{request.path}", body=request.body,
                                              params=request.query, retry_safe=self._retry_safe(name))
        except catch:
            assert route.not_found is not None  # only its errors are caught
            return route.not_found.when
        return None if route.result_key is None else reply[route.result_key]

    async def call(self, method: str, /, *args: Any, **params: Any) -> Any:
        """Call any public method of the actor (``POST {path}/rpc``); keywords or positionals."""
        if args and params:
            raise TypeError("pass positional or keyword arguments, not both")
        body = {"method": method, "params": list(args) if args else params}
        reply = await self.client.request("POST", f"{self.path}/rpc", body=body,
                                          retry_safe=self._retry_safe(method) or False)
        return reply["result"]

    def _retry_safe(self, name: str) -> bool | None:
        return None if self.retry_safe is None else name in self.retry_safe


class SessionHandle(TableHandle):
    """One session on the server: the Session's methods over HTTP.

    A client of several hosts repeats a call on another host only when it is
    in :data:`runtime.client.failover.RETRY_SAFE` (or did not run at all).

    Made by :meth:`SessionsClient.session`. Every method is one request
    (``append_messages`` is one request for the whole batch), built from the
    method's first route in :data:`runtime.api.SESSION_API`; a method without
    a route, or a message id that no path segment can carry, goes through
    ``POST /rpc`` with the same answer.
    """

    retry_safe = RETRY_SAFE

    def __init__(self, client: SessionsClient, session_id: str) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string")
        super().__init__(client, f"/v1/sessions/{quote_segment(session_id)}")
        self.session_id = session_id

    def __repr__(self) -> str:
        return f"<SessionHandle {self.session_id!r}>"

    # -- messages -------------------------------------------------------------------------

    async def append_message(self, message: Message, parent_id: str | None | object = LATEST_LEAF) -> bool:
        """Append ``message`` (parent: omitted -> latest leaf, ``None`` -> new root); ``True`` if stored."""
        return await self._invoke("append_message", message, parent_id)

    async def append_messages(
        self, messages: Sequence[Message], parent_id: str | None | object = LATEST_LEAF
    ) -> list[bool]:
        """Append a chain of messages in one request; one ``inserted`` flag each."""
        return await self._invoke("append_messages", messages, parent_id)

    async def get_history(
        self, leaf_id: str | None = None, *, limit: int | None = None, before: str | None = None,
        overlays: bool = True,
    ) -> list[Message]:
        """The path root -> leaf (default: the latest leaf), overlays applied.

        ``limit``: only the newest ``limit`` entries; ``before``: only entries older than
        the one with this id (an overlay's included): pass a page's first id to read the
        page before it; a page shorter than ``limit`` reached the root. ``overlays=False``:
        the stored messages, without compaction overlays.

        Raises:
            MessageNotFoundError: ``before`` is the id of no stored message or overlay
                (404; never an empty page, which would read as "the root was reached").
            InvalidInputError: a bad option; ``before`` stored but not an entry of this
                history (another branch, inside an applied overlay) has ``field="before"``.
        """
        return await self._invoke("get_history", leaf_id, limit=limit, before=before, overlays=overlays)

    async def get_message(self, message_id: str) -> Message | None:
        """The stored message, or ``None``."""
        return await self._invoke("get_message", message_id)

    async def update_message(self, message: Message) -> None:
        """Replace the stored message with ``message["id"]`` (raises ``MessageNotFoundError`` if unknown)."""
        return await self._invoke("update_message", message)

    async def delete_messages(self, message_ids: Sequence[str]) -> int:
        """Delete these messages; how many existed."""
        return await self._invoke("delete_messages", message_ids)

    async def clear_messages(self) -> None:
        """Delete every message and compaction of the session."""
        return await self._invoke("clear_messages")

    async def get_branches(self, message_id: str) -> list[Message]:
        """The children of ``message_id``, oldest first."""
        return await self._invoke("get_branches", message_id)

    async def get_latest_leaf(self) -> Message | None:
        """The latest leaf, or ``None`` in an empty session."""
        return await self._invoke("get_latest_leaf")

    async def get_path_length(self, leaf_id: str | None = None) -> int:
        """Stored messages on the path to the leaf."""
        return await self._invoke("get_path_length", leaf_id)

    async def search(self, query: str, *, limit: int = 20, mode: str = "text") -> list[dict[str, str]]:
        """Search by ``mode`` (``"text"``, ``"semantic"``, ``"hybrid"``):
        ``[{"id", "role", "content", "createdAt"}]``, best first."""
        return await self._invoke("search", query, limit=limit, mode=mode)

    async def reembed(self) -> dict[str, Any]:
        """Drop the session's vectors and embed every message again (``durable-sessions reembed``); the search status."""
        return await self._invoke("reembed")

    async def search_status(self) -> dict[str, Any]:
        """``{"embedder", "dimension", "embedded", "pending"}``: messages not yet embedded are ``pending``."""
        return await self._invoke("search_status")

    # -- metadata -------------------------------------------------------------------------------

    async def get_metadata(self) -> dict[str, Any]:
        """The session's metadata object (``{}`` until set)."""
        return await self._invoke("get_metadata")

    async def set_metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """Replace the session's metadata with a JSON object (at most 64 KiB); returns it."""
        return await self._invoke("set_metadata", metadata)

    # -- context, prompt, tools, skills, compaction ---------------------------------------------------

    async def get_context_blocks(self) -> list[dict[str, Any]]:
        return await self._invoke("get_context_blocks")

    async def get_context_block(self, label: str) -> dict[str, Any] | None:
        return await self._invoke("get_context_block", label)

    async def replace_context_block(self, label: str, content: str) -> dict[str, Any]:
        return await self._invoke("replace_context_block", label, content)

    async def append_context_block(self, label: str, content: str) -> dict[str, Any]:
        return await self._invoke("append_context_block", label, content)

    async def freeze_system_prompt(self) -> str:
        return await self._invoke("freeze_system_prompt")

    async def refresh_system_prompt(self) -> str:
        return await self._invoke("refresh_system_prompt")

    async def tools(self, format: str = "raw") -> dict[str, Any] | list[dict[str, Any]]:
        """Tools as ``{name: {description, inputSchema}}`` (``raw``) or the ``openai``/``anthropic`` list."""
        return await self._invoke("tools", format)

    async def execute_tool(self, name: str, args: Any) -> str:
        """Run tool ``name`` with ``args``; its result string."""
        return await self._invoke("execute_tool", name, args)

    async def compact(self) -> dict[str, str] | None:
        return await self._invoke("compact")

    async def get_compactions(self) -> list[dict[str, str]]:
        return await self._invoke("get_compactions")

    async def add_compaction(self, summary: str, from_id: str, to_id: str) -> dict[str, str]:
        return await self._invoke("add_compaction", summary, from_id, to_id)

    async def estimate_tokens(self) -> int:
        """The estimated tokens of history plus system prompt (what auto-compaction compares)."""
        return await self._invoke("estimate_tokens")

    async def get_recent_history(self, max_bytes: int, min_recent: int = 1) -> dict[str, Any]:
        """The newest messages that fit ``max_bytes`` of stored JSON: ``{messages, truncated, totalContentBytes}``."""
        return await self._invoke("get_recent_history", max_bytes, min_recent)

    async def get_loaded_skill_keys(self) -> list[str]:
        return await self._invoke("get_loaded_skill_keys")

    async def unload_skill(self, label: str, key: str) -> bool:
        return await self._invoke("unload_skill", label, key)

    # -- WebSocket ------------------------------------------------------------------------------------------

    def websocket(self, *, reconnect: bool = True) -> SessionSocket:
        """A WebSocket to this session: RPC calls (:meth:`SessionSocket.call`) and broadcasts."""
        return SessionSocket(self, reconnect=reconnect)

    def events(self, *, reconnect: bool = True) -> SessionSocket:
        """The session's broadcasts as they happen: ``async with s.events() as events: async for e in events``."""
        return SessionSocket(self, reconnect=reconnect)


class SessionSocket:
    """A WebSocket to one session: concurrent RPC calls and an async iterator of broadcasts.

    ``async with`` connects (the peer is registered with the actor when it
    returns, so broadcasts from then on are received) and closes on exit.
    Iterating yields each broadcast, parsed from JSON when it is JSON, and
    stops when the server closes the socket. Broadcasts not consumed are
    kept, up to ``max_buffered`` (the oldest are dropped beyond).

    Reconnection: a socket the server closes with 1012 (the session's owner
    moved or stopped; :data:`common.wire.CLOSE_RECONNECT`) connects again, to
    another host when the client has several URLs, and iteration goes on;
    with several URLs a socket that drops (1006), or whose host goes away
    (1001) or fails (1011), does too. Broadcasts sent while it was away are
    not replayed (read the history to catch up); calls that were waiting for
    an answer raise :class:`ConnectionClosed`. ``reconnect=False`` turns this
    off; ``reconnects`` counts the times it happened.
    """

    #: Close codes after which a socket connects again: always, and when the client has several URLs.
    RECONNECT_CODES = frozenset({CLOSE_RECONNECT})
    FAILOVER_CODES = frozenset({CLOSE_RECONNECT, 1001, 1006, 1011})

    def __init__(self, handle: SessionHandle, *, max_buffered: int = 10_000, reconnect: bool = True) -> None:
        self.handle = handle
        self.reconnect = reconnect
        self.reconnects = 0
        self.url: str | None = None  # the base URL of the host the socket is connected to
        self._ws: WebSocketConnection | None = None
        self._group: Any = None
        self._next_id = 0
        self._waiting: dict[int, tuple[anyio.Event, list[Any]]] = {}
        self._events: deque[Any] = deque(maxlen=max_buffered)
        self._arrived = anyio.Event()
        self._closed: BaseException | None = None
        self._closing = False

    async def __aenter__(self) -> SessionSocket:
        self._ws = await self._connect()
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._read, self._ws)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()
        self._group.cancel_scope.cancel()
        await self._group.__aexit__(None, None, None)

    async def _connect(self) -> WebSocketConnection:
        """Open the socket on the session's owner if known, else on the first URL that accepts it.

        Raises:
            ServerUnreachableError: no URL accepted a connection within the client's retries and failover
                time (an ``OSError`` too; the last socket error is its ``__context__``).
            Exception: a host refused the socket with an HTTP error (raised at once).
        """
        client = self.handle.client
        key = quote_segment(self.handle.session_id)
        headers = [("Authorization", f"Bearer {client.token}")] if client.token else []
        started = time.monotonic()
        attempt, url = 0, None
        while True:
            url = client.endpoints.pick(key, avoid=url)
            try:
                ws = await WebSocketConnection.connect(client.websocket_url(f"{self.handle.path}/ws", url),
                                                       headers=headers, ssl_context=client.ssl_context)
            except OSError as exc:
                client.endpoints.failed(url)
                if not client._may_retry(attempt, started, 0.0):
                    raise client.unreachable(exc) from None
                attempt += 1
                if client.endpoints.all_failed():
                    await anyio.sleep(_backoff(attempt))
                continue
            client.endpoints.answered(url)
            self.url = url
            return ws

    async def aclose(self) -> None:
        """Close the socket (idempotent)."""
        self._closing = True
        if self._ws is not None:
            with anyio.CancelScope(shield=True):
                await self._ws.aclose()

    def _should_reconnect(self, closed: ConnectionClosed) -> bool:
        if not self.reconnect or self._closing:
            return False
        codes = self.FAILOVER_CODES if len(self.handle.client.urls) > 1 else self.RECONNECT_CODES
        return closed.code in codes

    async def _read(self, ws: WebSocketConnection) -> None:
        try:
            while True:
                try:
                    while True:
                        self._dispatch(await ws.receive())
                except ConnectionClosed as closed:
                    if not self._should_reconnect(closed):
                        self._closed = closed
                        return
                    self._fail_waiting(closed)
                    if closed.code != CLOSE_RECONNECT and self.url is not None:
                        self.handle.client.endpoints.failed(self.url)
                    try:
                        ws = self._ws = await self._connect()
                    except Exception:  # noqa: BLE001 - no host took the socket: it stays closed
                        self._closed = closed
                        return
                    self.reconnects += 1
        finally:
            self._closed = self._closed or ConnectionClosed(1006)
            self._fail_waiting(self._closed)
            self._arrived.set()

    def _fail_waiting(self, error: BaseException) -> None:
        """Wake every call waiting for an answer on the socket that closed; they raise ``error``."""
        for event, box in self._waiting.values():
            if not box:
                box.append(error)
            event.set()

    def _dispatch(self, frame: str | bytes) -> None:
        value = _parse(frame)
        if isinstance(value, dict) and value.get("id") in self._waiting and ("result" in value or "error" in value):
            event, box = self._waiting[value["id"]]
            box.append(value)
            event.set()
            return
        self._events.append(value)
        self._arrived.set()

    async def call(self, method: str, /, *args: Any, **params: Any) -> Any:
        """Call ``method`` on the actor over the socket; its result, or its error raised.

        Raises:
            RuntimeError: the socket is not open (use ``async with``).
            ConnectionClosed: the socket closed before the answer came (the
                call may or may not have run).
        """
        if self._ws is None or self._group is None:
            raise RuntimeError("use `async with handle.websocket() as socket:` before calling")
        if self._closed is not None:
            raise self._closed
        self._next_id += 1
        call_id = self._next_id
        event = anyio.Event()
        box: list[Any] = []  # the answer, or the error that ended the wait
        self._waiting[call_id] = (event, box)
        try:
            await self._ws.send(encode_body({"id": call_id, "method": method, "params": list(args) if args else params},
                                            JSON).decode("utf-8"))
            await event.wait()
        finally:
            del self._waiting[call_id]
        if not box:
            raise self._closed or ConnectionClosed(1006)
        if isinstance(box[0], BaseException):
            raise box[0]
        if "error" in box[0]:
            raise error_from_payload(400, {"error": box[0]["error"]})
        return box[0]["result"]

    def __aiter__(self) -> SessionSocket:
        return self

    async def __anext__(self) -> Any:
        if self._group is None:
            raise RuntimeError("use `async with handle.events() as events:` before iterating")
        while not self._events:
            if self._closed is not None:
                raise StopAsyncIteration
            self._arrived = anyio.Event()
            await self._arrived.wait()
        return self._events.popleft()


def _parse(frame: str | bytes) -> Any:
    try:
        if isinstance(frame, bytes):
            return msgpack.unpackb(frame, raw=False)
        return json.loads(frame)
    except (ValueError, msgpack.UnpackException):
        return frame
