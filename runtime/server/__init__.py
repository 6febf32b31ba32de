"""The HTTP/WebSocket server: a quart-trio app on hypercorn over an actor host.

:func:`serve` runs it; :func:`create_app` builds the app for tests;
:func:`bind_sessions` binds the session actor class the routes call,
:func:`bind_managers` the manager actor class of ``/v1/managers``.
Protocol logic (routes, bodies, errors) lives in :mod:`runtime.server.routes`
and :mod:`common.wire`, with no sockets.
"""

from runtime.server.app import DEFAULT_NAMESPACE, SessionsServer, bind_sessions, create_app, require_token_for, serve
from runtime.server.managers import bind_managers

__all__ = ["DEFAULT_NAMESPACE", "SessionsServer", "bind_managers", "bind_sessions", "create_app", "require_token_for",
           "serve"]
