"""The HTTP + WebSocket server: a quart-trio app over an :class:`~runtime.host.actor_host.ActorHost`.

``create_app(host)`` builds the app for a host whose ``"sessions"``
namespace is bound (see :func:`bind_sessions`); ``serve(host, settings)``
runs it on hypercorn until its shutdown trigger fires and reports the bound
addresses through ``task_status`` (bind port 0 and ask).

Routes: the session routes of :mod:`runtime.server.routes` under
``/v1/sessions/{session_id}/``, plus

* ``GET /v1/health``, ``GET /v1/ready`` (liveness and readiness: with ``/docs`` and ``/inspect``,
  no token needed), ``GET /metrics``, ``GET /v1/actors`` and ``POST /v1/actors:hibernate`` --
  the host's own routes (:mod:`runtime.server.host_routes`);
* ``GET /v1/sessions?limit=&cursor=&prefix=`` and ``GET /v1/sessions/{session_id}`` -- the sessions
  this host holds, from its catalog (:mod:`runtime.server.listing`);
* ``WS /v1/sessions/{session_id}/ws`` -- RPC frames and broadcasts (below);
* ``/v1/transcripts/...`` -- the Claude Agent SDK transcript store
  (:mod:`runtime.server.transcript_routes`), when the host has the ``"transcripts"``
  namespace bound (:func:`runtime.server.transcripts.open_transcripts`);
* ``/v1/managers/{manager_id}/...`` -- SessionManagers, one actor per id, and the
  Session API of each managed session (:mod:`runtime.server.managers`), when the
  ``"managers"`` namespace is bound (:func:`runtime.server.managers.bind_managers`);
* ``/v1/checkpoints/{thread_id}/...`` -- LangGraph thread actors (:mod:`runtime.server.checkpoint_routes`),
  when the ``"checkpoints"`` namespace is bound;
* ``/mcp/{session_id}`` -- the session's memory over MCP, streamable HTTP (:mod:`runtime.mcp_http`;
  extra ``mcp``);
* ``GET /openapi.json`` and ``GET /docs`` -- the OpenAPI 3.1 document of these
  routes and Swagger UI (:mod:`runtime.server.openapi`).

Session ids are any UTF-8 string of 1 to 512 bytes, percent-encoded as one
path segment; ``id_from_name`` maps them to actor ids, so no client string
becomes a path on disk. Bodies are JSON or msgpack (:mod:`common.wire`).
Every error is ``{"error": {"type", "message"[, "field"]}}`` with the status
of the error's class (400 bad input, 401 token, 404 unknown, 408 body too
slow, 409 conflict, 413 too large, 429 overloaded or busy, 503 shutting down,
unavailable or too many requests, 507 disk full, all with ``Retry-After``
where a retry can help; 500 for a damaged session, named); anything else is
a bug: 500 with a reference to the logged traceback, never the traceback
itself. Admission control (:mod:`runtime.server.admission`) refuses work the
server cannot start soon, at once.

A session request whose head settles every check (route, id, token, body
size) -- in a cluster, of a session active on this host -- is answered below
Quart's request machinery by :mod:`runtime.server.shortcut`, with the same
answers; every other request goes through the app.

In a cluster (``serve --cluster``, a :class:`~runtime.server.forwarding.Forwarder`
given), a session request this host does not own is forwarded to the
owner and a WebSocket relayed to it (:mod:`runtime.server.forwarding`,
:mod:`runtime.server.relay`); answers about a session name the owner's URL
in ``X-Durable-Sessions-Owner``.

WebSockets follow the Durable Object hibernation model: the host holds the
socket while its actor hibernates, and the next frame wakes the actor. A
text (JSON) or binary (msgpack) frame that is an object with ``"method"``
is an RPC call ``{"id", "method", "params"}`` answered with ``{"id",
"result"}`` or ``{"id", "error"}`` in the same encoding (calls of one
socket may run concurrently; match replies by ``id``). Any other frame goes
to the actor's ``on_message``. Broadcasts (``Agent.broadcast``) are pushed
as they happen. Frames for a peer wait in a queue; while 128 are queued the
server stops reading the peer's frames (backpressure: a client that
pipelines thousands of calls gets every answer at its own pace); a peer
that stops reading is closed with code 1008 when a broadcast finds 1024
frames queued or the queued frames exceed four body limits in size
(replies to its own calls wait for room in the first case). A frame sent to the server over
the body limit closes the socket with 1009.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from quart import Response, g, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.routing import PathConverter

from actors.session_agent import SessionAgent, SessionConfig
from common.errors import (
    InvalidInputError,
    MethodNotAllowedError,
    NotOwnerError,
    PayloadTooLargeError,
    RequestTimeoutError,
    RouteNotFoundError,
    ServiceUnavailableError,
    UnauthorizedError,
)
from common.wire import (
    CLOSE_RECONNECT,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_BODY_ITEMS,
    HOP_HEADER,
    OWNER_HEADER,
    check_session_id,
    error_payload,
    unquote_segment,
)
from runtime.mcp_http import McpMount
from runtime.telemetry import TraceRequests
from runtime.server import (
    checkpoint_routes,
    host_routes,
    inspector,
    lifecycle_routes,
    managers,
    pitr_routes,
    transcript_routes,
)
from runtime.server.admission import RequestLimit
from runtime.server.browsers import BrowserGate, OriginPolicy
from runtime.server.client_io import body_read, body_timed_out, quiet_send
from runtime.server.config import ACCESS_FORMAT, ACCESS_LOGGER, ServerSettings
from runtime.server.forwarding import Forwarder, ForwardingShortcut, HopGate
from runtime.server.hosts import HostGate, HostPolicy
from runtime.server.listener import serve_admitting
from runtime.server.listing import add_listing_routes, respond_one
from runtime.server.metrics import ServerMetrics
from runtime.server.openapi import add_docs_routes
from runtime.server.responder import Responder
from runtime.server.routes import SESSIONS_PREFIX, Call, Route, match, not_found, path_methods
from runtime.server.shortcut import SessionShortcut
from runtime.server.websocket import WebSocketEndpoint

if TYPE_CHECKING:
    from actors.agent import Agent
    from runtime.host.actor_host import ActorHost
    from runtime.host.ids import ActorId
    from runtime.host.namespace import Namespace

__all__ = [
    "DEFAULT_NAMESPACE", "SessionsServer", "bind_sessions", "bind_socket", "create_app", "require_token_for", "serve",
]

logger = logging.getLogger(__name__)

#: Namespace the server routes ``/v1/sessions`` to.
DEFAULT_NAMESPACE = "sessions"
#: HTTP methods that get their own metrics label (any other is counted as ``OTHER``).
_KNOWN_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"))
#: Routes that need no token: the health and readiness checks, and the /docs and /inspect pages with their
#: static files (each page asks for the token itself; /openapi.json and every call still need it).
_PUBLIC_PATHS = frozenset(("/v1/health", "/v1/ready", "/docs", "/inspect"))
_PUBLIC_PREFIX = ("/docs/static/", "/inspect/static/")
#: Seconds an answer waits for the rest of a request body it did not need (see ``_drain_body``).
DRAIN_TIMEOUT_S = 2.0
#: Largest frame a WebSocket relay accepts from the owner (answers are not bounded by the body limit).
RELAY_MAX_MESSAGE_BYTES = 1024 * 1024 * 1024


def bind_sessions(
    host: ActorHost, config: SessionConfig | None = None, *,
    agent_class: type[Agent] = SessionAgent, namespace: str = DEFAULT_NAMESPACE,
) -> Namespace:
    """Bind ``agent_class`` (default :class:`SessionAgent`) as the server's namespace, ``env=config``."""
    return host.bind(namespace, agent_class, env=config if config is not None else SessionConfig())


def require_token_for(bind: str, token: str | None, *, insecure_no_token: bool = False) -> None:
    """Refuse to serve a non-loopback address without a token (unless ``insecure_no_token``), or with a
    token no client can send.

    Raises:
        ValueError: ``bind`` is not ``localhost`` or a loopback IP, ``token``
            is empty and ``insecure_no_token`` false; or ``token`` fails
            :meth:`SessionsServer.check_token`.
    """
    if token:
        SessionsServer.check_token(token)
        return
    if insecure_no_token:
        return
    host = bind.rsplit(":", 1)[0].strip("[]") if ":" in bind else bind
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise ValueError(
        f"refusing to serve {bind} without a token: set DURABLE_SESSIONS_TOKEN (or --token), "
        "bind a loopback address such as 127.0.0.1, or pass --insecure-no-token"
    )


class SessionsServer:
    """The server state behind one app: host, namespace, token, limits, metrics.

    Attributes:
        app: the quart-trio app.
        metrics: the app's :class:`~runtime.server.metrics.ServerMetrics`.
        responder: how the app and its plug-ins answer (:class:`~runtime.server.responder.Responder`).
        draining: set when shutdown begins: ``/v1/ready`` answers 503 (``settings.drain_s`` before ``closing``).
        closing: set when the server stops serving (WebSockets close with 1001, new requests get 503).
        shortcut: whether plain session requests take the short way below Quart
            (:mod:`runtime.server.shortcut`; in a cluster, of sessions active here). ``False`` sends them
            through the app.
        forwarder: in a cluster, what sends calls on to the actors' owners (else ``None``).
    """

    def __init__(
        self, host: ActorHost, *, namespace: str, token: str | None, max_body_bytes: int,
        forwarder: Forwarder | None = None, body_timeout_s: float = 30.0, max_requests: int | None = None,
        cors_origins: tuple[str, ...] = (), max_body_items: int = DEFAULT_MAX_BODY_ITEMS,
        hosts: HostPolicy | None = None,
    ) -> None:
        if token:
            self.check_token(token)
        self.forwarder = forwarder
        self.relay_max_message_bytes = RELAY_MAX_MESSAGE_BYTES
        self.host = host
        cluster = getattr(host, "cluster", None)
        if forwarder is not None and cluster is not None:
            forwarder.lookup = forwarder.lookup or cluster.owner_of
            cluster.add_release_listener(self._released)
        self.namespace = host.namespace(namespace)
        self._token = token.encode("utf-8") if token else None
        self.max_body_bytes = max_body_bytes
        self.max_body_items = max_body_items
        self.body_timeout_s = body_timeout_s
        self.max_requests = max_requests
        self.metrics = ServerMetrics(host)
        self.responder = Responder(max_body_items)
        self.origins = OriginPolicy(cors_origins)
        self.hosts = hosts if hosts is not None else HostPolicy(token=bool(token))
        self.draining = trio.Event()
        self.closing = trio.Event()
        self.shortcut = True
        #: ``[retention] delete_idle_after_days`` (``None``: off), used by ``POST /v1/host:gc``.
        self.retention_days: int | None = None
        #: endpoint of a catch-all rule -> the methods of the path it matched (its ``view_args``), so a 405
        #: of the router for a verb the rule does not take lists that path's methods, not the rule's.
        self.path_methods: dict[str, Callable[..., list[str]]] = {"sessions": _session_path_methods}
        self.app = self._build_app()

    # -- the app -------------------------------------------------------------------------------

    def _build_app(self) -> QuartTrio:
        app = QuartTrio(__name__, static_folder=None)
        app.url_map.converters["rest"] = _RestConverter
        app.config["MAX_CONTENT_LENGTH"] = self.max_body_bytes
        app.config["BODY_TIMEOUT"] = self.body_timeout_s
        app.url_map.merge_slashes = False  # "/v1/sessions//x" is an empty session id, not a redirect
        app.extensions["durable_sessions"] = self
        asgi: Callable[..., Awaitable[None]] = _ShieldedResponseEnd(app.asgi_app)
        asgi = WebSocketEndpoint(asgi, self)  # WS /v1/sessions/{id}/ws, below Quart (runtime.server.websocket)
        asgi = SessionShortcut(asgi, self)  # the session table's plain requests, below Quart (runtime.server.shortcut)
        if self.forwarder is not None:
            asgi = ForwardingShortcut(asgi, self, self.forwarder)
        asgi = checkpoint_routes.CheckpointShortcut(asgi, self)  # LangGraph threads' plain requests, below Quart
        asgi = McpMount(asgi, self)  # /mcp/{session_id}: the session's memory over MCP (runtime.mcp_http)
        asgi = _EncodedPaths(asgi)
        asgi = BrowserGate(asgi, self.origins)  # Origin and CORS (runtime.server.browsers)
        asgi = HostGate(asgi, self.hosts)  # Host names served (runtime.server.hosts)
        secret = self.forwarder.secret if self.forwarder is not None else None
        asgi = HopGate(asgi, secret, cluster=self.forwarder is not None)  # hop headers of the cluster only
        if self.max_requests is not None:
            asgi = self.request_limit = RequestLimit(asgi, self.max_requests, self._early_refusal)
        asgi = TraceRequests(asgi, self.route_template)  # a span per request while tracing is on (runtime.telemetry)
        # Quart's way to add ASGI middleware is to replace the app's asgi_app method; the middlewares
        # take the scope as the plain dict it is (hypercorn's stubs describe it as TypedDicts).
        app.asgi_app = asgi  # type: ignore[method-assign, assignment]
        app.before_request(self._before_request)
        app.after_request(self._after_request)
        app.register_error_handler(HTTPException, self._http_exception)
        host_routes.install(app, self)  # health, ready, metrics, actors, hibernate
        lifecycle_routes.install(app, self)  # gc, backup (runtime.server.lifecycle_routes)
        app.add_url_rule(f"{SESSIONS_PREFIX}<rest:rest>", "sessions", self._sessions,
                         methods=["GET", "POST", "PUT", "DELETE"])
        transcript_routes.install(app, self)  # with the "transcripts" namespace (single host and cluster)
        managers.install(app, self)  # with the "managers" namespace
        checkpoint_routes.install(app, self)  # LangGraph threads, with the "checkpoints" namespace
        add_docs_routes(app, self)
        self.listing = add_listing_routes(app, self)
        return app

    @staticmethod
    def check_token(token: str) -> str:
        """Return ``token`` if clients can send it as ``Authorization: Bearer <token>``.

        Raises:
            ValueError: not printable ASCII, or with leading or trailing spaces
                (the header is ASCII, and the server strips what follows ``Bearer``).
        """
        if not (token.isascii() and token.isprintable() and token == token.strip()):
            raise ValueError("the token must be printable ASCII without leading or trailing spaces "
                             "(it travels in an HTTP header)")
        return token

    def authorized(self, header: str | None) -> bool:
        """``True`` when no token is set or ``header`` is ``Bearer <token>`` (constant-time compare)."""
        if self._token is None:
            return True
        scheme, _, given = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode("utf-8"), self._token)

    async def _before_request(self) -> Response | None:
        g.started = time.perf_counter()
        rule = request.url_rule.rule if request.url_rule else "unmatched"
        template = f"{SESSIONS_PREFIX}*" if rule.startswith(SESSIONS_PREFIX) else rule
        method = request.method if request.method in _KNOWN_METHODS else "OTHER"  # a client picks the method
        g.route = f"{method} {template}"
        if request.path in _PUBLIC_PATHS or request.path.startswith(_PUBLIC_PREFIX):
            return None
        if not self.authorized(request.headers.get("Authorization")):
            return self.responder.error(UnauthorizedError("missing or wrong bearer token"))
        if self.closing.is_set():
            if self.forwarder is not None and HOP_HEADER in request.headers:
                # Another host forwarded this as to the owner: say it is not (any more), so that host
                # asks Postgres again and takes the session once this host has handed it over.
                return self.responder.error(NotOwnerError(
                    request.path, None, lease_left_s=0.0,
                    reason="this host is shutting down and hands its sessions over; ask for the owner again"))
            return self.responder.error(ServiceUnavailableError("the server is shutting down"))
        return None

    async def _after_request(self, response: Response) -> Response:
        if not (body_read() or body_timed_out() or _bodiless()):
            await _drain_body()
        started = getattr(g, "started", None)
        if started is not None:
            self.metrics.observe(g.route, response.status_code, time.perf_counter() - started)
        return response

    async def _http_exception(self, error: HTTPException) -> Response:
        if isinstance(error, RequestEntityTooLarge):
            return self.responder.error(PayloadTooLargeError(f"the body is larger than {self.max_body_bytes} bytes"))
        if error.code == 408:
            return self.responder.error(
                RequestTimeoutError(f"the request body did not arrive within {self.body_timeout_s:g} s"))
        if error.code == 404:
            return self.responder.error(RouteNotFoundError(f"no route for {request.path}"))
        if error.code == 405:  # RFC 9110: a 405 lists the path's methods
            return self.responder.error(_no_route(request.path, self._allowed_methods(error)))
        payload = error_payload(type(error).__name__, error.description or "")
        return self.responder.respond(error.code or 500, payload)

    def _allowed_methods(self, error: HTTPException) -> list[str]:
        """The methods of the path of the router's 405 ``error`` (``[]``: no route has that path).

        The router knows only its rule's methods; a catch-all rule (``/v1/sessions/<rest>``, the
        managers') takes every verb of its table, so its path's own methods come from
        :attr:`path_methods` (else a ``PATCH`` of ``.../search`` would list them all).
        """
        valid = sorted(getattr(error, "valid_methods", None) or ())
        adapter = request.url_rule is None and valid and self.app.create_url_adapter(request)
        if not adapter:
            return valid
        try:
            rule, values = adapter.match(method=valid[0], return_rule=True)
        except HTTPException:
            return valid
        methods = self.path_methods.get(rule.endpoint or "")
        return valid if methods is None else methods(**values)

    #: The headers of an error answer (:meth:`~runtime.server.responder.Responder.error_headers`).
    error_headers = staticmethod(Responder.error_headers)

    def route_template(self, method: str, path: str) -> str | None:
        """The route template of a request to ``path`` (as sent), e.g. ``/v1/sessions/{id}/messages``;
        ``None`` when no route has the path."""
        if path.startswith(SESSIONS_PREFIX):
            segments = path[len(SESSIONS_PREFIX):].split("/")[1:]
            if segments == ["ws"]:
                return f"{SESSIONS_PREFIX}{{id}}/ws"
            route, _ = match(method, segments)
            if route is not None:
                return route.name.partition(" ")[2]
        try:
            rule, _ = self.app.url_map.bind("localhost").match(path, method, return_rule=True)
        except Exception:  # no route (404, 405) or a redirect: no template
            return None
        return _PLACEHOLDER.sub(r"{\1}", str(rule.rule))  # werkzeug's <converter:name> -> {name}

    def _released(self, actor_id: ActorId, reason: str) -> None:
        """Cluster mode: this host stopped owning ``actor_id`` (``reason``): its WebSockets go, with 1012.

        Broadcasts from the actor's next owner would not reach them; the
        clients connect again and reach it, wherever it is.
        """
        for conn in self.host.connections_of(actor_id):
            close = getattr(conn, "close", None)
            if close is not None:
                close(CLOSE_RECONNECT, f"the session moved ({reason}); connect again")

    def _early_refusal(self, scope: dict[str, Any]) -> Exception | None:
        """For a session request, the error its actor would refuse it with at once (before any other work)."""
        return self.refusal_for(scope.get("raw_path") or b"", _header(scope, b"authorization"))

    def refusal_for_head(self, head: bytes) -> Exception | None:
        """:meth:`refusal_for` the first bytes of a request on a new connection (request line, headers)."""
        line, _, rest = head.partition(b"\r\n")
        parts = line.split(b" ")
        if len(parts) != 3:
            return None
        authorization = None
        for header in rest.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
            name, _, value = header.partition(b":")
            if name.strip().lower() == b"authorization":
                authorization = value.strip().decode("latin-1")
        return self.refusal_for(parts[1].split(b"?", 1)[0], authorization)

    def refusal_for(self, raw_path: bytes, authorization: str | None) -> Exception | None:
        """The error the actor of a session path (still percent-encoded) would refuse a call with at
        once (``ActorOverloadedError`` or ``ActorBusyError``), or ``None``: any other path, a bad
        session id or token (the route answers those), or room for the call."""
        if not raw_path.startswith(_SESSIONS_PREFIX_BYTES) or not self.authorized(authorization):
            return None
        try:
            session_id = raw_path[len(_SESSIONS_PREFIX_BYTES):].split(b"/", 1)[0].decode("latin-1")
            actor_id = self.actor_id(unquote_segment(session_id, "session_id"))
        except InvalidInputError:
            return None
        return self.host.admission_refusal(actor_id)

    def actor_id(self, session_id: Any) -> ActorId:
        """The actor id of a decoded session id.

        Raises:
            InvalidInputError: (``field="session_id"``) not a string of 1-512 UTF-8 bytes.
        """
        if not isinstance(session_id, str):
            raise InvalidInputError("session_id must be a string", field="session_id")
        return self.namespace.id_from_name(check_session_id(session_id))

    # -- session routes -------------------------------------------------------------------------------------

    async def _sessions(self, rest: str) -> Response:
        try:
            session_id, *segments = rest.split("/")
            if pitr_routes.handles(request.method, session_id, segments):  # bookmark, :restore (cluster mode)
                return await pitr_routes.answer(self, session_id, segments)
            if lifecycle_routes.handles(request.method, segments):  # delete, export, import
                return await lifecycle_routes.answer_session(
                    self, unquote_segment(session_id, "session_id"), request.method, segments)
            if not segments and request.method == "GET":  # GET /v1/sessions/{id}: runtime.server.listing
                return await respond_one(self, self.listing, unquote_segment(session_id, "session_id"))
            actor_id = self.actor_id(unquote_segment(session_id, "session_id"))
            found = match(request.method, segments) if segments else (None, [])
            if found[0] is None:
                raise _no_route(request.path, _session_path_methods(rest))
            route, values = found
            g.route = route.name
            if self.forwarder is not None:
                return await self._session_in_cluster(actor_id, route, values)
            status, payload = await self._session_call(actor_id, route, values)
        except Exception as exc:  # noqa: BLE001 - every error becomes an error response
            return self.responder.error(exc)
        return self.responder.respond(status, payload)

    async def _session_call(self, actor_id: ActorId, route: Route, values: dict[str, str],
                            exists: Callable[[], Awaitable[bool]] | None = None) -> tuple[int, Any]:
        body = None
        if route.has_body:
            body = await self.responder.read_body()
        call = Call(self.namespace.get(actor_id), values, request.args, body, exists=exists)
        return await route.handler(call)

    async def _session_in_cluster(self, actor_id: ActorId, route: Route, values: dict[str, str]) -> Response:
        """Answer here when this host owns the actor, else forward to the owner (:mod:`runtime.server.forwarding`)."""

        async def exists() -> bool:  # a never-written session answers its empty reads without activating anywhere
            cluster = getattr(self.host, "cluster", None)
            if cluster is None or self.host.is_active(self.namespace, actor_id):
                return True
            return await cluster.written(actor_id)

        async def local() -> tuple[int, Any]:
            return await self._session_call(actor_id, route, values, exists)

        return await self.in_cluster(actor_id, local)

    async def in_cluster(self, actor_id: ActorId, local: Callable[[], Awaitable[tuple[int, Any]]]) -> Response:
        """Cluster mode: the answer of ``local()`` (``(status, body)``) when this host owns ``actor_id``,
        else the owner's answer to this very request (:meth:`Forwarder.answer`). The request's body is
        read by ``local`` or passed on as it came.

        Raises:
            RuntimeError: the server is not in cluster mode (it has no forwarder).
        """
        forwarder = self.forwarder
        if forwarder is None:
            raise RuntimeError("in_cluster needs a server in cluster mode (a forwarder)")

        async def here() -> Response:
            status, payload = await local()
            owner = status < 400 and self.host.is_active(actor_id.namespace, actor_id)  # not for an empty read
            return self.responder.respond(status, payload, {OWNER_HEADER: forwarder.advertise_url} if owner else None)

        async def remote(url: str) -> Response:
            try:
                body = await request.get_data(cache=True, as_text=False, parse_form_data=False)  # the bytes overload
            except RequestEntityTooLarge:
                raise PayloadTooLargeError(f"the body is larger than {self.max_body_bytes} bytes") from None
            headers = {name.lower(): value for name, value in request.headers.items()}
            answer = await forwarder.forward(url, request.method, _raw_path(), request.query_string, headers, body,
                                             actor_id)
            return Response(answer.content, status=answer.status, headers=answer.headers)

        return await forwarder.answer(actor_id, HOP_HEADER in request.headers, here, remote)


_PLACEHOLDER = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")


def _raw_path() -> str:
    """The request's path as the client sent it (percent-encoding kept)."""
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if raw else request.path


class _RestConverter(PathConverter):
    """The rest of the path, which may start with ``/`` (an empty session id gets a 400, not a 404)."""

    regex = ".*?"
    part_isolating = False


class _EncodedPaths:
    """ASGI middleware: route on the path as sent (still percent-encoded).

    Servers decode ``%2F`` to ``/`` in ``scope["path"]``, which would split
    a session id; ``raw_path`` keeps it, so routing uses that and the
    session routes decode each segment themselves.
    """

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        raw = scope.get("raw_path") if scope.get("type") in ("http", "websocket") else None
        if raw and b"%" in raw:  # without an escape, the server's decoded path is the raw one already
            scope = dict(scope, path=raw.decode("latin-1"))
        await self.app(scope, receive, send)


class _ShieldedResponseEnd:
    """ASGI middleware: the last piece of every HTTP response is sent shielded from cancellation.

    quart-trio cancels a request's tasks as soon as the response is out. When
    the request body has not all arrived yet (an answer given before reading
    it, such as a 413), hypercorn must close the connection after that last
    piece; cancelled half-way, it neither closes nor reads the next request,
    and the client hangs. Shielded, the connection is closed as it should be.
    """

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return

        send = quiet_send(send)  # a client that hung up is no error of ours

        async def send_shielded(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.body" and not message.get("more_body", False):
                with trio.CancelScope(shield=True):
                    await send(message)
            else:
                await send(message)

        await self.app(scope, receive, send_shielded)


def _bodiless() -> bool:
    """``True`` when the request's headers announce no body (no length or a length of 0, not chunked)."""
    headers = request.headers
    return headers.get("Content-Length") in (None, "0") and "Transfer-Encoding" not in headers


async def _drain_body() -> None:
    """Read what is left of the request body (up to the size limit) before answering.

    An answer given without reading the body (401, 404, 405, a bad session
    id) would otherwise leave the body unread, and the connection could not
    carry the next request. A body over the limit, or one still incomplete
    after :data:`DRAIN_TIMEOUT_S`, is not read: that connection is closed after
    the answer (see :class:`_ShieldedResponseEnd`).
    """
    with trio.move_on_after(DRAIN_TIMEOUT_S):
        try:
            await request.get_data()
        except HTTPException:  # over the limit, or the client stopped sending: the connection closes
            pass


_SESSIONS_PREFIX_BYTES = SESSIONS_PREFIX.encode("ascii")


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _session_path_methods(rest: str) -> list[str]:
    """The methods of ``/v1/sessions/`` + ``rest`` (still percent-encoded): the listing's ``GET`` of
    ``/v1/sessions/{id}``, else those of the session table's routes with that path (``[]``: none)."""
    _, *segments = rest.split("/")
    return path_methods(segments) if segments else ["GET"]


def _no_route(path: str, allowed: list[str]) -> Exception:
    if not allowed:
        return not_found(path)
    error = MethodNotAllowedError(f"{request.method} is not allowed on {path}; use {', '.join(allowed)}")
    error.allowed = allowed
    return error


def create_app(
    host: ActorHost, *, namespace: str = DEFAULT_NAMESPACE, token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> QuartTrio:
    """The quart-trio app serving ``host``'s ``namespace`` (which must be bound).

    Args:
        token: the bearer token every route but ``/v1/health`` requires; ``None`` for none.
        max_body_bytes: largest request body and WebSocket frame (bytes).

    Raises:
        UnknownNamespaceError: ``namespace`` is not bound on ``host``.
    """
    return SessionsServer(host, namespace=namespace, token=token, max_body_bytes=max_body_bytes).app


async def _hand_over(host: ActorHost, timeout_s: float) -> None:
    """A cluster host stopping: hand its sessions to the other hosts before the HTTP server drains.

    New requests already get 503 (``closing``); the host admits no new call, lets those running
    finish, makes their writes durable and releases every lease (``ActorHost.drain``), so the next
    call on another host takes each session at once instead of waiting for this process to exit
    (up to ``graceful_timeout_s``) or for its leases to expire.
    """
    started = trio.current_time()
    with trio.move_on_after(timeout_s) as scope:
        count = await host.drain()
    if scope.cancelled_caught:
        logger.warning("shutting down: handing the sessions over took longer than %g s; the rest move when "
                       "this host closes", timeout_s)
        return
    logger.info("shutting down: %d session(s) handed over in %.3f s", count, trio.current_time() - started)


async def serve(
    host: ActorHost,
    settings: ServerSettings | None = None,
    *,
    token: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    forwarder: Forwarder | None = None,
    listen_socket: socket.socket | None = None,
    insecure_no_token: bool = False,
    retention_days: int | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``host`` on ``settings.bind`` until ``shutdown_trigger()`` returns (default: forever).

    ``task_status.started(urls)`` reports the bound addresses, e.g.
    ``["http://127.0.0.1:41234"]``. On shutdown, WebSockets are closed with
    1001 (1012 in a cluster), the listener stops accepting, and requests
    already running finish (within ``settings.graceful_timeout_s``) before this returns.

    Args:
        forwarder: cluster mode: how calls reach the actors' owners (closed on return).
        listen_socket: a socket already bound to ``settings.bind`` (a cluster
            host binds first to learn its port before it joins); ``serve``
            takes it over and closes it. ``None``: bind here.
        insecure_no_token: serve a non-loopback bind without a token (``serve --insecure-no-token``).
        retention_days: ``[retention] delete_idle_after_days`` for ``POST /v1/host:gc`` (``None``: off).

    Raises:
        ValueError: a non-loopback bind without ``token`` (see :func:`require_token_for`).
    """
    settings = settings or ServerSettings()
    require_token_for(settings.bind, token, insecure_no_token=insecure_no_token)
    hosts = HostPolicy(settings.allowed_hosts, bind=settings.bind, token=bool(token),
                       advertise=forwarder.advertise_url if forwarder is not None else None)
    server = SessionsServer(host, namespace=namespace, token=token, max_body_bytes=settings.max_body_bytes,
                            forwarder=forwarder, body_timeout_s=settings.body_timeout_s,
                            max_requests=settings.max_requests, cors_origins=settings.cors_origins,
                            max_body_items=settings.max_body_items, hosts=hosts)
    server.retention_days = retention_days
    inspector.install(server, settings)  # GET /inspect unless [server] inspector = false
    config = HypercornConfig()
    if listen_socket is None:
        config.bind = [settings.bind]
    else:  # hypercorn wraps the descriptor in a socket of its own, which it closes: hand it a duplicate
        config.bind = [f"fd://{os.dup(listen_socket.fileno())}"]
        listen_socket.close()
    config.backlog = settings.backlog
    config.graceful_timeout = settings.graceful_timeout_s
    config.keep_alive_timeout = settings.keep_alive_timeout_s
    config.websocket_max_message_size = settings.max_body_bytes
    config.accesslog = logging.getLogger(ACCESS_LOGGER) if settings.access_log else None
    config.access_log_format = ACCESS_FORMAT
    config.errorlog = logging.getLogger("hypercorn.error")
    if settings.certfile is not None:  # TLS: https:// and wss:// (hypercorn's own)
        config.certfile, config.keyfile = str(settings.certfile), str(settings.keyfile)

    async def trigger() -> None:
        if shutdown_trigger is None:
            await trio.sleep_forever()
        await shutdown_trigger()
        server.draining.set()  # not ready from now on; still serving for settings.drain_s
        if settings.drain_s:
            logger.info("shutting down: draining for %g s (GET /v1/ready answers 503)", settings.drain_s)
            await trio.sleep(settings.drain_s)
        server.closing.set()
        if forwarder is not None:
            await _hand_over(host, settings.graceful_timeout_s)

    async def run() -> None:
        if settings.certfile is not None:  # TLS: hypercorn's own listener (socket admission needs plain bytes)
            await hypercorn_serve(server.app, config, shutdown_trigger=trigger, task_status=task_status)
            return
        await serve_admitting(server.app, config, max_waiting=settings.max_connecting,
                              max_wait_s=settings.max_connect_wait_s, early_refusal=server.refusal_for_head,
                              head_timeout_s=settings.head_timeout_s,
                              max_per_peer=settings.max_connections_per_peer,
                              shutdown_trigger=trigger, task_status=task_status)

    if forwarder is None:
        await run()
        return
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(forwarder.watch)
            await run()
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await forwarder.aclose()


def bind_socket(bind: str) -> tuple[socket.socket, str]:
    """A TCP socket bound to ``bind`` (``host:port``; port 0 picks one) and the ``host:port`` it got.

    Hand it to :func:`serve` as ``listen_socket``.

    Raises:
        OSError: the address cannot be bound (in use, not local, no permission).
    """
    host, _, port = bind.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, int(port)))
    except BaseException:
        sock.close()
        raise
    bound_host, bound_port = sock.getsockname()[:2]
    return sock, (f"[{bound_host}]" if family == socket.AF_INET6 else bound_host) + f":{bound_port}"
