"""The server's MCP endpoint: ``/mcp/{session_id}`` (or ``/mcp?session=ID``), streamable HTTP.

:class:`McpMount` is ASGI middleware in front of the Quart app
(:mod:`runtime.server.app`): a request whose path is ``/mcp`` or starts with
``/mcp/`` is answered by the ``mcp`` SDK's streamable-HTTP transport over
:func:`runtime.mcp.build_server` of that session's actor (in process, through
the host's ``"sessions"`` namespace); every other request goes on untouched.

Guards, the same as every API route:

* the bearer token (``Authorization: Bearer <token>``): 401 ``UnauthorizedError`` without it;
* ``Origin``: the server's browser gate (:mod:`runtime.server.browsers`)
  sits outside this middleware, so a page of an origin not in
  ``[server] cors_origins`` is refused 403 before anything runs;
* the body limit (``max_body_bytes``) and shutdown (503 while closing).

The transport runs **stateless** with JSON answers: each POST is one
complete exchange (no MCP session is kept in memory between requests, so a
restarted host answers the next call at once; the session's state is the
actor's). Only POST is served: a GET (the server-to-client event stream)
or DELETE (the end of an MCP session) is answered 405 with ``Allow: POST``,
as the specification allows for a server that keeps no MCP session and
sends no notifications.

Errors of the endpoint itself (bad session id, no token, no ``mcp`` extra:
501 naming the extra) are the server's JSON error bodies; errors of a tool
are MCP tool results with ``isError`` (:mod:`runtime.mcp`).

In a cluster (a host with a forwarder) the endpoint answers 501: use
``durable-sessions mcp --url ...`` (stdio), whose calls any host forwards
to the session's owner.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from common.errors import (
    InvalidInputError,
    MethodNotAllowedError,
    NotSupportedError,
    ServiceUnavailableError,
    UnauthorizedError,
)
from common.wire import JSON, unquote_segment

if TYPE_CHECKING:
    from runtime.server.app import SessionsServer

__all__ = ["MCP_PREFIX", "McpMount"]

#: The SDK's loggers that say INFO at every request (a stateless manager starts and stops each time);
#: quieted to WARNING unless the operator set a level for them.
_CHATTY_LOGGERS = ("mcp.server.streamable_http_manager", "mcp.server.streamable_http")

#: The endpoint's path; a session id follows as one percent-encoded segment.
MCP_PREFIX = "/mcp"
_PREFIX_BYTES = MCP_PREFIX.encode("ascii")

ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


class McpMount:
    """ASGI middleware: ``/mcp[/{session_id}]`` to the MCP transport, the rest to ``app``."""

    def __init__(self, app: ASGIApp, server: SessionsServer) -> None:
        self.app = app
        self.server = server
        for name in _CHATTY_LOGGERS:
            chatty = logging.getLogger(name)
            if chatty.level == logging.NOTSET:
                chatty.setLevel(logging.WARNING)

    def _ours(self, scope: dict[str, Any]) -> bool:
        if scope.get("type") != "http":
            return False
        raw = scope.get("raw_path") or scope.get("path", "").encode("latin-1")
        return raw == _PREFIX_BYTES or raw.startswith(_PREFIX_BYTES + b"/")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not self._ours(scope):
            await self.app(scope, receive, send)
            return
        try:
            session_id = self._session_id(scope)
            stub = self._session(scope, session_id)
        except Exception as exc:  # noqa: BLE001 - every refusal is an error body
            await self._refuse(exc, send)
            return
        await _serve_one(stub, scope, receive, send, self.server.max_body_bytes)

    def _session_id(self, scope: dict[str, Any]) -> str:
        raw = scope.get("raw_path") or scope.get("path", "").encode("latin-1")
        rest = raw[len(_PREFIX_BYTES) + 1:].decode("latin-1") if len(raw) > len(_PREFIX_BYTES) else ""
        if rest:
            if "/" in rest:
                raise InvalidInputError("the MCP endpoint is /mcp/{session_id}: one path segment",
                                        field="session_id")
            return unquote_segment(rest, "session_id")
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if not query.get("session"):
            raise InvalidInputError("name the session: /mcp/{session_id} or /mcp?session=ID", field="session_id")
        return query["session"][0]

    def _session(self, scope: dict[str, Any], session_id: str) -> Any:
        server = self.server
        if not server.authorized(_header(scope, b"authorization")):
            raise UnauthorizedError("missing or wrong bearer token")
        if server.closing.is_set():
            raise ServiceUnavailableError("the server is shutting down")
        if scope.get("method") != "POST":
            refusal = MethodNotAllowedError(f"{scope.get('method')} is not allowed on {MCP_PREFIX}: use POST (the "
                                            "endpoint keeps no MCP session and sends no server-initiated messages)")
            refusal.allowed = ["POST"]
            raise refusal
        if server.forwarder is not None:
            raise NotSupportedError("the /mcp endpoint is not served in cluster mode: run `durable-sessions mcp "
                                    "--session ID --url URL` (stdio), whose calls any host forwards to the owner")
        try:
            from runtime.mcp import require_mcp

            require_mcp()
        except ImportError as exc:
            raise NotSupportedError(str(exc)) from None
        return server.namespace.get(server.actor_id(session_id))

    async def _refuse(self, error: Exception, send: Any) -> None:
        from runtime.server.routes import describe_error

        status, body = describe_error(error)
        headers = [(b"content-type", JSON.encode("ascii"))]
        headers += [(k.lower().encode("latin-1"), v.encode("latin-1"))
                    for k, v in self.server.error_headers(error, status).items()]
        content = json.dumps(body).encode("utf-8")
        headers.append((b"content-length", str(len(content)).encode("ascii")))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})


async def _serve_one(session: Any, scope: dict[str, Any], receive: Any, send: Any, max_body_bytes: int) -> None:
    """One request through a stateless streamable-HTTP session manager over ``session``'s MCP server."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings

    from runtime.mcp import build_server

    manager = StreamableHTTPSessionManager(
        app=build_server(session), json_response=True, stateless=True, max_request_body_size=max_body_bytes,
        # Origin is checked by the server's browser gate (outside this middleware), with its own policy.
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    async with manager.run():
        await manager.handle_request(scope, receive, send)


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None
