"""HTTP routes of the LangGraph thread actors: ``/v1/checkpoints/{thread_id}/...`` (:mod:`runtime.checkpoint_api`).

:func:`bind_checkpoints` binds :class:`actors.checkpoint_agent.CheckpointAgent`
as the host's ``"checkpoints"`` namespace (``durable-sessions serve`` does);
:func:`install` serves the routes when it is bound. Each request is one call
of the thread's actor; in a cluster the owner answers (forwarded like every
actor request, :mod:`runtime.server.forwarding`). The token and ``Origin``
are checked as on every route; bodies and answers are msgpack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from quart import Response, g, request
from quart_trio import QuartTrio

from actors.checkpoint_agent import CheckpointAgent
from common.errors import InvalidInputError
from common.wire import MSGPACK, check_session_id, unquote_segment
from runtime.checkpoint_api import CHECKPOINTS_PREFIX, ROUTES, CheckpointRoute

if TYPE_CHECKING:
    from runtime.host.actor_host import ActorHost
    from runtime.host.namespace import Namespace
    from runtime.server.app import SessionsServer

__all__ = ["CHECKPOINTS_NAMESPACE", "bind_checkpoints", "install"]

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
            thread_id = check_session_id(unquote_segment(thread, "thread_id"))
            actor_id = namespace.id_from_name(thread_id)

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
