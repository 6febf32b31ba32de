"""The session routes' short way: a plain session request answered below the web framework.

Most of a served append or history read is spent outside the actor: in
hypercorn, h11 and trio, which every request needs, and in Quart's request
machinery (a request and a response object, contexts, signals, a nursery of
two tasks per request, hooks), which a session route does not need.
:class:`SessionShortcut` answers the requests of the session table
(:mod:`runtime.server.routes`) straight from the ASGI scope when everything
the app would check is settled by the request's head: a session route that exists for the method, a valid
session id, the right token, the server not closing, no chunked body, a
declared body within the limit (none at all for a route without one), an
ASCII query string. Everything else -- the listing, errors of routing,
authentication and size, other routes, WebSockets -- goes to the Quart app
untouched, so it is answered exactly as before.

On a cluster host (the server has a forwarder) it takes only the requests
of sessions active on this host, which it owns, and answers as the app's
cluster path does (:meth:`SessionsServer.in_cluster
<runtime.server.app.SessionsServer.in_cluster>`): a success names this host
in ``X-Durable-Sessions-Owner``; when the call finds the session owned
elsewhere after all (:class:`~common.errors.NotOwnerError`: it moved before
the call ran) the request, body included, goes to the app, which forwards
it. Requests of sessions not active here go to the app (and
:class:`~runtime.server.forwarding.ForwardingShortcut` before it).

What the short way does is what the app does for such a request: the same
:func:`~runtime.server.routes.match`, :class:`~runtime.server.routes.Call`
and route handler, the body read within the body timeout and the body limit
(408 or 413 otherwise, and the connection closed), decoded by :func:`~common.wire.decode_body`, the
answer in the encoding ``Accept`` prefers, errors through
:func:`~runtime.server.routes.describe_error` with the app's error headers,
the last piece of the answer sent shielded, one metrics observation under
the route's name. The middlewares outside it (admission, ``Origin`` and
CORS) see both ways alike. ``server.shortcut`` set to ``False`` sends every
request through the app.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import trio
from werkzeug.datastructures import ImmutableMultiDict, MIMEAccept
from werkzeug.http import parse_accept_header

from common.errors import DurableSessionsError, NotOwnerError, PayloadTooLargeError, RequestTimeoutError
from common.wire import JSON, MSGPACK, OWNER_HEADER, SESSIONS_PREFIX, decode_body, encode_body, unquote_segment
from runtime.server.client_io import quiet_send
from runtime.server.forwarding import _replay  # the body read, given again to the app
from runtime.server.routes import Call, Route, describe_error, match

if TYPE_CHECKING:
    from runtime.host.ids import ActorId
    from runtime.server.app import SessionsServer

__all__ = ["SessionShortcut", "read_body"]

_PREFIX = SESSIONS_PREFIX.encode("ascii")
_METHODS = frozenset(("GET", "POST", "PUT", "DELETE"))
_JSON_ACCEPTS = frozenset(("*/*", JSON))
_KIND_HEADER = {JSON: JSON.encode("ascii"), MSGPACK: MSGPACK.encode("ascii")}
_NO_QUERY: ImmutableMultiDict[str, str] = ImmutableMultiDict()
_OWNER = OWNER_HEADER.lower().encode("latin-1")


class _ToApp(Exception):
    """The request goes to the app after all (cluster: its session is owned elsewhere); ``body``: what was read."""

    def __init__(self, body: bytes | None) -> None:
        super().__init__("to the app")
        self.body = body


class _Taken:
    """A request the short way answers: its actor, route, path values and the headers it reads."""

    __slots__ = ("accept", "actor_id", "content_type", "route", "values")

    def __init__(self, actor_id: ActorId, route: Route, values: dict[str, str], content_type: str | None,
                 accept: str | None) -> None:
        self.actor_id = actor_id
        self.route = route
        self.values = values
        self.content_type = content_type
        self.accept = accept


class SessionShortcut:
    """ASGI middleware: the session requests described in the module docstring, answered without Quart."""

    def __init__(self, app: Callable[..., Awaitable[None]], server: SessionsServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        taken = self._take(scope) if scope.get("type") == "http" and self.server.shortcut else None
        if taken is None:
            await self.app(scope, receive, send)
            return
        try:
            await self._answer(scope, receive, quiet_send(send), taken)
        except _ToApp as back:  # nothing was sent yet
            await self.app(scope, receive if back.body is None else _replay(back.body, receive), send)

    def _take(self, scope: dict[str, Any]) -> _Taken | None:
        """The request's settled parts, or ``None`` when the app answers it (see the module docstring)."""
        raw = scope.get("raw_path") or b""
        method = scope.get("method")
        server = self.server
        if not raw.startswith(_PREFIX) or method not in _METHODS or server.closing.is_set():
            return None
        query = scope.get("query_string", b"")
        if not query.isascii():
            return None
        session_id, *segments = raw[len(_PREFIX):].decode("latin-1").split("/")
        if not segments:  # GET /v1/sessions/{id} is the listing's
            return None
        try:
            actor_id = server.actor_id(unquote_segment(session_id, "session_id"))
            found = match(method, segments)
        except DurableSessionsError:  # a bad id or path value: the app names it
            return None
        if found[0] is None:
            return None
        if server.forwarder is not None and not server.host.is_active(actor_id.namespace, actor_id):
            return None  # cluster: owned elsewhere, or not activated yet (the app finds the owner)
        route, values = found
        heads = scan_headers(scope)
        if heads is None or not server.authorized(heads.authorization):
            return None
        if not heads.body_fits(server.max_body_bytes if route.has_body else -1):
            return None
        return _Taken(actor_id, route, values, heads.content_type, heads.accept)

    async def _answer(self, scope: dict[str, Any], receive: Any, send: Any, taken: _Taken) -> None:
        server = self.server
        started = time.perf_counter()
        route = taken.route
        headers: dict[str, str] | None = None
        data = None
        try:
            body = None
            if route.has_body:
                data = await self._read_body(receive)
                if data is None:  # the client went away
                    return
                body = decode_body(data, taken.content_type, max_items=server.max_body_items)
            query = scope.get("query_string", b"")
            args = ImmutableMultiDict(parse_qsl(query.decode(), keep_blank_values=True,
                                                errors="werkzeug.url_quote")) if query else _NO_QUERY
            status, payload = await route.handler(Call(server.namespace.get(taken.actor_id), taken.values, args, body))
        except NotOwnerError:
            if server.forwarder is None:
                raise
            raise _ToApp(data) from None
        except Exception as exc:  # noqa: BLE001 - every error becomes an error response, as in the app
            status, payload = describe_error(exc)
            headers = server.error_headers(exc, status)
        kind = _kind(taken.accept)
        content = encode_body(payload, kind)
        out = [(b"content-type", _KIND_HEADER[kind]), (b"content-length", str(len(content)).encode("ascii"))]
        if headers:
            out += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
        forwarder = server.forwarder
        if forwarder is not None and status < 400 and server.host.is_active(taken.actor_id.namespace, taken.actor_id):
            out.append((_OWNER, forwarder.advertise_url.encode("latin-1")))
        timeout = server.app.config.get("RESPONSE_TIMEOUT")
        with trio.move_on_after(float("inf") if timeout is None else timeout):
            await send({"type": "http.response.start", "status": status, "headers": out})
            with trio.CancelScope(shield=True):  # see app._ShieldedResponseEnd
                await send({"type": "http.response.body", "body": content, "more_body": False})
        server.metrics.observe(route.name, status, time.perf_counter() - started)

    async def _read_body(self, receive: Any) -> bytes | None:
        """The whole body, ``None`` when the client went away (:func:`read_body`)."""
        return await read_body(receive, self.server.body_timeout_s, self.server.max_body_bytes)


class Heads:
    """The request headers a short way reads: the first of each, as the app reads them."""

    __slots__ = ("accept", "authorization", "content_type", "length")

    def __init__(self) -> None:
        self.authorization: str | None = None
        self.content_type: str | None = None
        self.accept: str | None = None
        self.length: bytes | None = None  # Content-Length as sent

    def body_fits(self, limit: int) -> bool:
        """``True`` when the declared body is absent, empty or at most ``limit`` bytes (``-1``: none allowed)."""
        length = self.length
        return length is None or length == b"0" or (length.isdigit() and int(length) <= limit)


def scan_headers(scope: dict[str, Any]) -> Heads | None:
    """The :class:`Heads` of an ASGI request; ``None`` for a chunked body (the app reads those)."""
    heads = Heads()
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            if heads.authorization is None:
                heads.authorization = value.decode("latin-1")
        elif name == b"content-length":
            if heads.length is None:
                heads.length = value
        elif name == b"transfer-encoding":
            return None
        elif name == b"content-type":
            if heads.content_type is None:
                heads.content_type = value.decode("latin-1")
        elif name == b"accept":
            if heads.accept is None:
                heads.accept = value.decode("latin-1")
    return heads


async def read_body(receive: Any, timeout: float, limit: int) -> bytes | None:
    """The whole body of an ASGI request, ``None`` when the client went away.

    Raises:
        PayloadTooLargeError: it is larger than ``limit`` bytes (the rest is not read).
        RequestTimeoutError: it did not all arrive within ``timeout`` seconds.
    """
    parts = []
    size = 0
    with trio.move_on_after(timeout):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            part = message.get("body", b"")
            size += len(part)
            if size > limit:
                raise PayloadTooLargeError(f"the body is larger than {limit} bytes")
            parts.append(part)
            if not message.get("more_body", False):
                return b"".join(parts)
    raise RequestTimeoutError(f"the request body did not arrive within {timeout:g} s")


def _kind(accept: str | None) -> str:
    """The answer's encoding: msgpack when ``Accept`` prefers it, else JSON (as the app negotiates)."""
    if not accept or accept in _JSON_ACCEPTS:
        return JSON
    return parse_accept_header(accept, MIMEAccept).best_match([JSON, MSGPACK], default=JSON)
