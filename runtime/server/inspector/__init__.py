"""The inspector: a web page for looking at sessions, served by the host at ``GET /inspect``.

A person debugging an agent opens ``http://<host>/inspect`` and sees, for
one session, the message tree (the active path marked, any branch
selectable, compaction overlays where they cut, tool calls folded), the
context blocks with their token usage, the frozen system prompt exactly as
the model gets it, the loaded skills, the tools, the ``cf_agent_session``
status broadcasts as they arrive, and full-text search. It is a few
static files (``static/``: HTML, one script, one style sheet, an icon; no
build step, no library, nothing loaded from another host) that read
everything through the public HTTP API and ``WS /v1/sessions/{id}/ws``,
so the page sees what any client sees, with the same token.

Routes (registered by :func:`install` when ``[server] inspector`` is true,
the default):

* ``GET /inspect`` -- the page;
* ``GET /inspect/static/<name>`` -- its script, style sheet and icon (:data:`ASSETS`).

Like ``/docs``, the page and its files need no token: they hold no data.
On a server with a token the page asks for it (kept in the tab's
sessionStorage, shared with ``/docs``; ``/inspect#token=...`` hands it over
in the fragment, which never reaches the server and is removed from the
address at once) and sends it with every call, as ``Authorization:
Bearer`` and, for the WebSocket, as the ``bearer.<base64url>`` subprotocol
(:mod:`runtime.server.browsers`). Every answer carries
:data:`CONTENT_SECURITY_POLICY`: only this server's own script runs (no
inline script, no ``eval``), Trusted Types are required, so an accidental
``innerHTML`` with a string throws instead of parsing markup, and the page
may not be framed (also ``X-Frame-Options: DENY``). ``//inspect`` (any path
starting with ``//``) is not the page: 404. The script renders every message text, id, tool input
and output, block content and session name through ``textContent`` and DOM
calls: stored data is never markup.

The page is read-only until its "Allow changes" switch is on; its writes
(unload a skill, compact now, replace a writable block, refresh the prompt)
are the API's own routes with the same token.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

from quart import Response, request
from quart_trio import QuartTrio

from common.errors import RouteNotFoundError

if TYPE_CHECKING:
    from runtime.server.app import SessionsServer
    from runtime.server.config import ServerSettings

__all__ = ["ASSETS", "CONTENT_SECURITY_POLICY", "PAGE", "add_inspector_routes", "install", "not_this_path",
           "read_asset"]

#: The page's own file (served at ``/inspect``).
PAGE = "index.html"
#: Files served under ``/inspect/static/``: name -> content type.
ASSETS = {
    "inspector.js": "text/javascript; charset=utf-8",
    "inspector.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
#: The page may run and load only this server's files and talk only to this server (HTTP and WebSocket).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
    "require-trusted-types-for 'script'; trusted-types 'none'"
)
#: Headers of every inspector answer.
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


@cache
def read_asset(name: str) -> bytes:
    """The bytes of the page (:data:`PAGE`) or one of :data:`ASSETS`, from the package's ``static`` folder.

    Raises:
        KeyError: ``name`` is neither (no other file is ever read).
    """
    if name != PAGE and name not in ASSETS:
        raise KeyError(name)
    return resources.files(__package__).joinpath("static", name).read_bytes()


def not_this_path() -> bool:
    """``True`` when the request's path as sent starts with ``//``: the router takes ``//inspect`` for
    ``/inspect``, but the page's relative URLs would then name another host (``//v1/...``)."""
    raw = request.scope.get("raw_path") or request.path.encode("latin-1")
    return raw.startswith(b"//")


def add_inspector_routes(app: QuartTrio, server: SessionsServer) -> None:
    """Register ``GET /inspect`` and ``GET /inspect/static/<name>`` on ``app``."""

    async def page() -> Response:
        if not_this_path():
            return server.responder.error(RouteNotFoundError(f"no route for {request.path}"))
        return Response(read_asset(PAGE), status=200, content_type="text/html; charset=utf-8", headers=HEADERS)

    async def asset(name: str) -> Response:
        kind = ASSETS.get(name)
        if kind is None or not_this_path():
            return server.responder.error(RouteNotFoundError(f"no route for /inspect/static/{name}"))
        return Response(read_asset(name), status=200, content_type=kind, headers=HEADERS)

    app.add_url_rule("/inspect", "inspect", page, methods=["GET"])
    app.add_url_rule("/inspect/static/<name>", "inspect_static", asset, methods=["GET"])


def install(server: SessionsServer, settings: ServerSettings) -> None:
    """Add the inspector's routes to ``server``'s app unless ``settings.inspector`` is false."""
    if settings.inspector:
        add_inspector_routes(server.app, server)
