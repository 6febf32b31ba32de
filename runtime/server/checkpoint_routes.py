"""HTTP routes of the LangGraph thread actors: ``/v1/checkpoints/{thread_id}/...`` (:mod:`runtime.checkpoint_api`).

:func:`bind_checkpoints` binds :class:`actors.checkpoint_agent.CheckpointAgent`
as the host's ``"checkpoints"`` namespace (``durable-sessions serve`` does);
:func:`install` serves the routes when it is bound. Each request is one call
of the thread's actor; in a cluster the owner answers (forwarded like every
actor request, :mod:`runtime.server.forwarding`). The token and ``Origin``
are checked as on every route; bodies and answers are msgpack.

:class:`CheckpointShortcut` answers the plain ones below Quart, as
:mod:`runtime.server.shortcut` does for sessions (a host outside a cluster;
the right token; ``Accept: application/msgpack``; a route of the table; a
declared body within the limit): the same actor call and the same answers,
without the framework's per-request machinery. Everything else goes to the
app's route above.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import trio
from quart import Response, g, request
from quart_trio import QuartTrio

from actors.checkpoint_agent import CheckpointAgent
from common.errors import DurableSessionsError, InvalidInputError
from common.wire import MSGPACK, check_session_id, decode_body, encode_body, unquote_segment
from runtime.checkpoint_api import CHECKPOINTS_PREFIX, ROUTES, CheckpointRoute
from runtime.server.client_io import quiet_send
from runtime.server.routes import describe_error
from runtime.server.shortcut import read_body, scan_headers

if TYPE_CHECKING:
    from runtime.host.actor_host import ActorHost
    from runtime.host.namespace import Namespace
    from runtime.server.app import SessionsServer

__all__ = ["CHECKPOINTS_NAMESPACE", "CheckpointShortcut", "bind_checkpoints", "install"]

#: The namespace of the thread actors (the same name :mod:`runtime.checkpointer` binds).
CHECKPOINTS_NAMESPACE = "checkpoints"

_BY_PATH = {(route.verb, route.path): route for route in ROUTES}


def bind_checkpoints(host: ActorHost) -> Namespace:
    """Bind :class:`~actors.checkpoint_agent.CheckpointAgent` as ``"checkpoints"`` on ``host``."""
    return host.bind(CHECKPOINTS_NAMESPACE, CheckpointAgent)


def install(app: QuartTrio, server: SessionsServer) -> None:
    """Serve ``/v1/checkpoints/<rest>`` on ``app`` when ``server``'s host has ``"checkpoints"`` bound."""
    if CHECKPOINTS_NAMESPACE not in server.host.namespaces:
        return
    namespace = server.host.namespace(CHECKPOINTS_NAMESPACE)

    async def checkpoints(rest: str) -> Response:
        try:
            thread, _, path = rest.partition("/")
            route = _BY_PATH.get((request.method, path))
            if route is None:
                allowed = sorted(verb for verb, known in _BY_PATH if known == path)
                raise InvalidInputError(f"no route {request.method} {CHECKPOINTS_PREFIX}{{thread_id}}/{path}"
                                        + (f"; use {', '.join(allowed)}" if allowed else ""), field="path")
            g.route = f"{route.verb} {CHECKPOINTS_PREFIX}*/{route.path}"
            actor_id = namespace.id_from_name(_thread_id(thread))

            async def local() -> tuple[int, Any]:
                args = await _arguments(server, route)
                return 200, {"result": await namespace.get(actor_id).call(route.method, *args)}

            if server.forwarder is not None:
                return await server.in_cluster(actor_id, local)
            status, payload = await local()
        except Exception as exc:  # noqa: BLE001 - every error becomes an error response
            return server.responder.error(exc)
        return server.responder.respond(status, payload)

    app.add_url_rule(f"{CHECKPOINTS_PREFIX}<rest:rest>", "checkpoints", checkpoints,
                     methods=["GET", "POST", "PUT", "DELETE"])


def _thread_id(segment: str) -> str:
    """The thread id of a path segment (still percent-encoded).

    Raises:
        InvalidInputError: (``field="thread_id"``) not UTF-8, empty, or over 512 bytes (as a session id).
    """
    thread_id = unquote_segment(segment, "thread_id")
    try:
        return check_session_id(thread_id)
    except InvalidInputError as exc:
        raise InvalidInputError(str(exc).replace("session_id", "thread_id"), field="thread_id") from None


async def _arguments(server: SessionsServer, route: CheckpointRoute) -> list[Any]:
    """The route's parameters in order: from the query string (``GET``) or the msgpack body object."""
    if server.responder.kind() != MSGPACK:
        raise InvalidInputError("the checkpoint routes speak msgpack (checkpoints are bytes): send "
                                f"Accept: {MSGPACK}", field="accept")
    if route.verb in ("GET", "DELETE"):
        return [request.args.get(name) for name in route.params]
    body = await server.responder.read_body()
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise InvalidInputError("the body must be a msgpack object", field="body")
    return [body.get(name) for name in route.params]


_PREFIX = CHECKPOINTS_PREFIX.encode("ascii")
_MSGPACK = MSGPACK.encode("ascii")


class CheckpointShortcut:
    """ASGI middleware: the plain checkpoint requests (module docstring) answered without Quart."""

    def __init__(self, app: Callable[..., Awaitable[None]], server: SessionsServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        taken = self._take(scope) if scope.get("type") == "http" else None
        if taken is None:
            await self.app(scope, receive, send)
            return
        await self._answer(scope, receive, quiet_send(send), *taken)

    def _take(self, scope: dict[str, Any]) -> tuple[Any, CheckpointRoute] | None:
        """``(the thread's stub, its route)``, or ``None`` when the app answers the request."""
        server = self.server
        raw = scope.get("raw_path") or b""
        if (not raw.startswith(_PREFIX) or server.forwarder is not None or not server.shortcut
                or server.closing.is_set() or CHECKPOINTS_NAMESPACE not in server.host.namespaces):
            return None
        thread, _, path = raw[len(_PREFIX):].decode("latin-1").partition("/")
        route = _BY_PATH.get((scope.get("method", ""), path))
        if route is None:
            return None
        heads = scan_headers(scope)
        if heads is None or heads.accept != MSGPACK or not server.authorized(heads.authorization):
            return None
        if not heads.body_fits(server.max_body_bytes):
            return None
        try:
            namespace = server.host.namespace(CHECKPOINTS_NAMESPACE)
            stub = namespace.get(namespace.id_from_name(_thread_id(thread)))
        except DurableSessionsError:  # a bad id: the app names it
            return None
        return stub, route

    async def _answer(self, scope: dict[str, Any], receive: Any, send: Any, stub: Any, route: CheckpointRoute) -> None:
        server = self.server
        started = time.perf_counter()
        headers: dict[str, str] = {}
        try:
            if route.verb in ("GET", "DELETE"):
                query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
                args = [query.get(name) for name in route.params]
            else:
                data = await read_body(receive, server.body_timeout_s, server.max_body_bytes)
                if data is None:  # the client went away
                    return
                body = decode_body(data, MSGPACK) if data else {}
                if not isinstance(body, dict):
                    raise InvalidInputError("the body must be a msgpack object", field="body")
                args = [body.get(name) for name in route.params]
            status, payload = 200, {"result": await stub.call(route.method, *args)}
        except Exception as exc:  # noqa: BLE001 - every error becomes an error response, as in the app
            status, payload = describe_error(exc)
            headers = server.error_headers(exc, status)
        content = encode_body(payload, MSGPACK)
        out = [(b"content-type", _MSGPACK), (b"content-length", str(len(content)).encode("ascii"))]
        out += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
        await send({"type": "http.response.start", "status": status, "headers": out})
        with trio.CancelScope(shield=True):  # see app._ShieldedResponseEnd
            await send({"type": "http.response.body", "body": content, "more_body": False})
        server.metrics.observe(f"{route.verb} {CHECKPOINTS_PREFIX}*/{route.path}", status, time.perf_counter() - started)
