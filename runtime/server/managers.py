"""The manager routes: ``/v1/managers/{manager_id}/...`` -> one call of a manager actor, built from the tables.

A manager is one :class:`~actors.manager_agent.ManagerAgent` actor of the
``"managers"`` namespace (:func:`bind_managers`; the server registers these
routes when that namespace is bound). The manager id is any string of 1 to
512 UTF-8 bytes, percent-encoded as one path segment, like a session id.

Two families, both answered by the generic handler of
:mod:`runtime.server.routes` (:func:`~runtime.server.routes.answer`):

* the manager's own routes, built from :data:`runtime.manager_api.MANAGER_API`
  (the table below is :func:`runtime.api.describe_routes` of it; a test keeps
  it so), plus ``POST /v1/managers/{id}/rpc`` ``{method, params?}`` for
  any manager method;
* each managed session's Session API routes, the routes of
  :data:`runtime.api.SESSION_API` unchanged, under
  ``/v1/managers/{id}/sessions/{session_id}/`` (``.../messages``,
  ``.../search?q=``, ``.../context/{label}``, ...), plus ``POST .../rpc``.
  Each becomes one ``call_session`` turn of the manager actor.

A session id the manager has not registered is ``404 NotFoundError``
(``kind`` ``session``). Reads of a manager never written (``list``,
``get``, ``search``) are answered without creating its file, and a route
naming a session of such a manager answers 404 without creating it either.

======  ============================================  =============================================  ====================================================
method  path (after ``/v1/managers/{id}``)            body                                           actor call -> reply
======  ============================================  =============================================  ====================================================
POST    ``/sessions``                                 ``{name, parentSessionId?, model?, source?}``  ``create`` -> ``{session}`` 201 if stored
GET     ``/sessions``                                                                                ``list`` -> ``{sessions}`` *
GET     ``/sessions/{session_id}``                                                                   ``get`` -> ``{session}`` 404 if null *
PATCH   ``/sessions/{session_id}``                    ``{name}``                                     ``rename`` -> ``{session}``
DELETE  ``/sessions/{session_id}``                                                                   ``delete`` -> ``{deleted: true}``
POST    ``/sessions/{session_id}:fork``               ``{atMessageId, name}``                        ``fork`` -> ``{session}`` 201 if stored
POST    ``/sessions/{session_id}:compact-and-split``  ``{summary, name?}``                           ``compact_and_split`` -> ``{session}`` 201 if stored
POST    ``/sessions/{session_id}:add-usage``          ``{inputTokens, outputTokens, cost}``          ``add_usage`` -> ``{session}``
GET     ``/search?q=&limit=&mode=``                                                                  ``search`` -> ``{results}`` *
GET     ``/tools?format=``                                                                           ``tools`` -> ``{tools}``
POST    ``/tools/{name}``                             the arguments                                  ``execute_tool`` -> ``{result}``
======  ============================================  =============================================  ====================================================
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from quart import g, request
from quart_trio import QuartTrio

from actors.manager_agent import ManagerAgent, managed_method
from actors.manager_agent_postgres import PostgresManagerAgent
from actors.session_agent import SessionConfig
from actors.session_agent_postgres import PostgresSessionEnv
from common.errors import InvalidArgumentsError, InvalidInputError, MethodNotAllowedError, NotFoundError
from common.wire import check_session_id, unquote_segment
from runtime.api import http_routes
from runtime.host.actor_host import ActorHost
from runtime.host.ids import ActorId
from runtime.host.namespace import ActorStub, Namespace
from runtime.manager_api import MANAGER_API, MANAGERS_PREFIX
from runtime.server import routes
from runtime.server.routes import Call, Route, answer

if TYPE_CHECKING:
    from quart import Response

    from runtime.server.app import SessionsServer

__all__ = ["MANAGERS_NAMESPACE", "MANAGERS_PREFIX", "MANAGER_ROUTES", "ManagedSessionStub", "ManagerRoutes",
           "add_manager_routes", "bind_managers", "install"]

#: Namespace the server routes ``/v1/managers`` to.
MANAGERS_NAMESPACE = "managers"
#: HTTP methods of the manager routes (the Session API's and PATCH).
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def bind_managers(
    host: ActorHost, config: SessionConfig | PostgresSessionEnv | None = None, *, namespace: str = MANAGERS_NAMESPACE,
) -> Namespace:
    """Bind :class:`~actors.manager_agent.ManagerAgent` as ``namespace`` with ``env=config``
    (the same :class:`SessionConfig` as the sessions; ``None``: the default), or, given the
    sessions' :class:`~actors.session_agent_postgres.PostgresSessionEnv` (``serve --postgres``),
    :class:`~actors.manager_agent_postgres.PostgresManagerAgent`: registries and sessions in Postgres."""
    if isinstance(config, PostgresSessionEnv):
        return host.bind(namespace, PostgresManagerAgent, env=config)
    return host.bind(namespace, ManagerAgent, env=config if config is not None else SessionConfig())


def _route(method: Any, route: Any) -> Route:
    return Route(route.verb, route.pattern, functools.partial(answer, method, route), route.has_body)


#: The manager table's routes in its order, then ``POST /rpc``.
MANAGER_ROUTES: tuple[Route, ...] = (
    *(_route(method, route) for method, route in http_routes(MANAGER_API)),
    Route("POST", ("rpc",), routes.rpc, True),
)


def _session_not_found(session_id: str) -> NotFoundError:
    return NotFoundError(f"session {session_id!r} not found", kind="session", key=session_id)


class ManagedSessionStub:
    """A stub-like handle on one managed session: ``await stub.call(name, *args, **kwargs)``.

    Each call is one ``call_session(session_id, name, args, kwargs)`` turn of
    the manager actor. As with an actor stub, an unknown method or arguments
    that do not fit it are refused before the manager is woken.
    """

    def __init__(self, manager: ActorStub, session_id: str) -> None:
        self.manager = manager
        self.session_id = session_id

    async def call(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        """Run the Session API method ``method`` on the managed session.

        Raises:
            UnknownMethodError: no such Session API method.
            InvalidArgumentsError: the arguments do not fit it.
            NotFoundError: the session is not registered.
        """
        function = managed_method(method)
        try:
            inspect.signature(function).bind(None, *args, **kwargs)
        except TypeError as exc:
            raise InvalidArgumentsError(f"ManagedSession.{method}(): {exc}") from None
        return await self.manager.call("call_session", self.session_id, method, list(args), kwargs)


class ManagerRoutes:
    """Finds the route of a request under ``/v1/managers/`` and answers it with one call of the manager.

    Protocol logic only: ``answer`` takes the request's verb, the path after
    the prefix (still percent-encoded), the query and a body reader.
    """

    def __init__(self, namespace: Namespace) -> None:
        self.namespace = namespace

    def actor_id(self, segment: str) -> ActorId:
        """The actor id of a manager id path segment.

        Raises:
            InvalidInputError: (``field="manager_id"``) not 1-512 bytes of UTF-8.
        """
        try:
            manager_id = check_session_id(unquote_segment(segment, "manager_id"))
        except InvalidInputError as exc:
            raise InvalidInputError(str(exc).replace("session_id", "manager_id"), field="manager_id") from None
        return self.namespace.id_from_name(manager_id)

    async def exists(self, actor_id: ActorId) -> bool:
        """Whether the manager was ever written: its agent class's ``session_written`` when it has one
        (registries in Postgres: the database decides, not this host's files), else ``namespace.exists``."""
        written = getattr(self.namespace.agent_class, "session_written", None)
        if written is None:
            return self.namespace.exists(actor_id)
        return self.namespace.host.is_active(self.namespace, actor_id) or \
            bool(await written(self.namespace.env, actor_id))

    async def resolve(self, verb: str, rest: str, query: Mapping[str, str]) -> tuple[str, Route, Call]:
        """``(metrics label, route, call)`` of a request to ``MANAGERS_PREFIX + rest``, the body still unread.

        Raises:
            InvalidInputError: a bad manager or session id.
            NotFoundError: a route naming a session of a manager never written.
            RouteNotFoundError, MethodNotAllowedError: no route fits.
        """
        first, *segments = rest.split("/")
        actor_id = self.actor_id(first)
        stub = self.namespace.get(actor_id)
        if segments[:1] == ["sessions"] and len(segments) >= 3:
            session_id = check_session_id(unquote_segment(segments[1], "session_id"))
            route, values = _matched(verb, segments[2:], routes.ROUTES, rest)
            label = f"{verb} {MANAGERS_PREFIX}{{id}}/sessions/{{session_id}}/{'/'.join(route.pattern)}"
            if not await self.exists(actor_id):
                raise _session_not_found(session_id)
            return label, route, Call(ManagedSessionStub(stub, session_id), values, query)
        route, values = _matched(verb, segments, MANAGER_ROUTES, rest)
        if "session_id" in values and not await self.exists(actor_id):
            raise _session_not_found(values["session_id"])
        return f"{verb} {MANAGERS_PREFIX}{{id}}/{'/'.join(route.pattern)}", route, Call(stub, values, query)


def path_methods(rest: str) -> list[str]:
    """The methods of ``MANAGERS_PREFIX + rest`` (still percent-encoded); ``[]`` when no route has that path."""
    _, *segments = rest.split("/")
    if segments[:1] == ["sessions"] and len(segments) >= 3:
        return routes.path_methods(segments[2:], routes.ROUTES)
    return routes.path_methods(segments, MANAGER_ROUTES)


def _matched(verb: str, segments: list[str], table: tuple[Route, ...], rest: str) -> tuple[Route, dict[str, str]]:
    found = routes.match(verb, segments, table)
    if found[0] is not None:
        return found
    allowed = found[1]
    path = MANAGERS_PREFIX + rest
    if not allowed:
        raise routes.not_found(path)
    error = MethodNotAllowedError(f"{verb} is not allowed on {path}; use {', '.join(allowed)}")
    error.allowed = allowed
    raise error


def install(app: QuartTrio, server: SessionsServer) -> None:
    """Serve ``/v1/managers/...`` on ``app`` when ``server``'s host has the ``"managers"`` namespace bound."""
    if MANAGERS_NAMESPACE in server.host.namespaces:
        add_manager_routes(app, server)


def add_manager_routes(app: QuartTrio, server: SessionsServer) -> ManagerRoutes:
    """Register ``/v1/managers/<rest>`` on ``app``, served by ``server``'s host's ``"managers"`` namespace."""
    manager_routes = ManagerRoutes(server.host.namespace(MANAGERS_NAMESPACE))

    async def managers(rest: str) -> Response:
        try:
            label, route, call = await manager_routes.resolve(request.method, rest, request.args)
            g.route = label

            async def local() -> tuple[int, Any]:
                if route.has_body:
                    call.body = await server.responder.read_body()
                return await route.handler(call)

            if server.forwarder is not None:  # a cluster: the manager's owner answers (runtime.server.forwarding)
                return await server.in_cluster(manager_routes.actor_id(rest.split("/", 1)[0]), local)
            status, payload = await local()
        except Exception as exc:  # noqa: BLE001 - every error becomes an error response
            return server.responder.error(exc)
        return server.responder.respond(status, payload)

    app.add_url_rule(f"{MANAGERS_PREFIX}<rest:rest>", "managers", managers, methods=list(METHODS))
    server.path_methods["managers"] = path_methods  # an unknown verb's 405 lists the path's own methods
    return manager_routes
