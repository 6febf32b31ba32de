"""Browsers: which web pages may call the server (CORS, ``Origin``), and a WebSocket token a browser can send.

A browser marks every request a page's script makes to another origin with
``Origin`` (and every WebSocket upgrade, from any page). Other clients
(curl, the Python client) send none, and nothing here touches their
requests beyond looking for the header.

* **Same origin** (the page came from this server, like ``/docs``): allowed.
* **Listed origins** (``[server] cors_origins``; ``"*"``: any): allowed, with
  CORS headers on every answer (``Access-Control-Allow-Origin``: the page's
  origin, ``Vary: Origin``, the headers a script may read) and preflights
  (``OPTIONS`` with ``Access-Control-Request-Method``) answered 204 with the
  methods and request headers the API takes. No cookies are used, so no
  answer carries ``Access-Control-Allow-Credentials``: a page sends the
  token itself, ``Authorization: Bearer ...`` (a listed origin, or ``*``,
  may send that header; a fetch needs no ``credentials: "include"``).
* **Any other origin**: refused 403 ``OriginNotAllowedError`` before
  anything runs -- WebSocket upgrades included (before, any page could open
  a socket to a token-less loopback server), and requests a browser sends
  without asking first (a form's POST). A preflight from it gets no CORS
  headers, so the browser sends nothing.

A request forwarded by another host of a cluster (``X-Durable-Sessions-Hop``)
was checked by the host the browser reached.

**WebSocket auth from a browser.** A page cannot set ``Authorization`` on a
WebSocket, and a token in the URL would land in access logs. It offers two
subprotocols instead::

    new WebSocket(url, ["durable-sessions", "bearer." + base64url(token)])

(``base64url`` without ``=`` padding: a subprotocol allows no other
characters). The server checks the token and selects ``durable-sessions``;
the token is never echoed back.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from common.wire import HOP_HEADER, JSON, OWNER_HEADER, encode_body, error_payload

__all__ = ["BEARER_PROTOCOL_PREFIX", "WS_PROTOCOL", "BrowserGate", "OriginPolicy", "bearer_protocol",
           "token_from_protocols"]

#: The subprotocol a browser offers with its token (and the server selects).
WS_PROTOCOL = "durable-sessions"
#: Prefix of the subprotocol carrying the token: ``bearer.<base64url(token), no padding>``.
BEARER_PROTOCOL_PREFIX = "bearer."
#: Methods and request headers a preflight may ask for; response headers a script may read.
ALLOW_METHODS = "GET, POST, PUT, DELETE"
ALLOW_HEADERS = frozenset({"authorization", "content-type", "accept"})
EXPOSE_HEADERS = f"Retry-After, Allow, WWW-Authenticate, {OWNER_HEADER}"
#: Seconds a browser may cache a preflight's answer.
PREFLIGHT_MAX_AGE_S = 600

_HOP = HOP_HEADER.lower().encode("latin-1")


def bearer_protocol(token: str) -> str:
    """The subprotocol carrying ``token`` (what a browser offers beside :data:`WS_PROTOCOL`)."""
    return BEARER_PROTOCOL_PREFIX + base64.urlsafe_b64encode(token.encode("utf-8")).decode("ascii").rstrip("=")


def token_from_protocols(offered: Iterable[str]) -> str | None:
    """The token of the first ``bearer.`` subprotocol among ``offered`` (``None``: none, or not base64url)."""
    for protocol in offered:
        if protocol.startswith(BEARER_PROTOCOL_PREFIX):
            encoded = protocol[len(BEARER_PROTOCOL_PREFIX):]
            try:
                return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                return None
    return None


class OriginPolicy:
    """Which origins may call: the server's own, and ``origins`` (normalised, as ``ServerSettings`` keeps them)."""

    def __init__(self, origins: Iterable[str] = ()) -> None:
        self.origins = frozenset(origins)
        self.any = "*" in self.origins

    def listed(self, origin: str) -> bool:
        """``True`` when ``origin`` is allowed by the list (cross-origin calls get CORS headers)."""
        return self.any or origin.lower() in self.origins

    def allows(self, origin: str, host: str | None, scheme: str) -> bool:
        """``True`` for the server's own origin (``scheme://host``, as the request addressed it) or a listed one."""
        if host is not None and origin.lower() == f"{_web_scheme(scheme)}://{host.lower()}":
            return True
        return self.listed(origin)


def _web_scheme(scheme: str) -> str:
    return {"ws": "http", "wss": "https"}.get(scheme, scheme)


def _headers(scope: dict[str, Any]) -> tuple[str | None, str | None, bool, str | None]:
    """``(origin, host, forwarded, access-control-request-method)`` of a request, in one pass."""
    origin = host = method = None
    forwarded = False
    for key, value in scope.get("headers", ()):
        if key == b"origin":
            origin = value.decode("latin-1")
        elif key == b"host":
            host = value.decode("latin-1")
        elif key == _HOP:
            forwarded = True
        elif key == b"access-control-request-method":
            method = value.decode("latin-1")
    return origin, host, forwarded, method


class BrowserGate:
    """ASGI middleware: the ``Origin`` rules and CORS of the module docstring for HTTP requests.

    A request without ``Origin`` passes untouched (one look through its headers).
    """

    def __init__(self, app: Callable[..., Awaitable[None]], policy: OriginPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or not any(key == b"origin" for key, _ in scope.get("headers", ())):
            await self.app(scope, receive, send)  # no browser page asked: nothing to do
            return
        origin, host, forwarded, preflight = _headers(scope)
        if origin is None or forwarded:
            await self.app(scope, receive, send)
            return
        listed = self.policy.listed(origin)
        if scope.get("method") == "OPTIONS" and preflight is not None:
            await self._preflight(scope, send, origin if listed else None)
            return
        if not self.policy.allows(origin, host, scope.get("scheme", "http")):
            await _refuse(send, origin)
            return
        if not listed:  # the server's own page: no CORS headers needed
            await self.app(scope, receive, send)
            return
        allow = origin if not self.policy.any else "*"

        async def send_with_cors(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != b"vary"]
                headers += [(b"access-control-allow-origin", allow.encode("latin-1")), (b"vary", b"Origin"),
                            (b"access-control-expose-headers", EXPOSE_HEADERS.encode("latin-1"))]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_cors)

    async def _preflight(self, scope: dict[str, Any], send: Any, origin: str | None) -> None:
        """Answer a CORS preflight: 204 with the allowances for a listed origin, else 403 without them."""
        if origin is None:
            await _refuse(send, _headers(scope)[0] or "")
            return
        asked = [h.strip().lower() for h in _header(scope, b"access-control-request-headers").split(",") if h.strip()]
        allowed = sorted(ALLOW_HEADERS.union(h for h in asked if h in ALLOW_HEADERS))
        headers = [
            (b"access-control-allow-origin", (origin if not self.policy.any else "*").encode("latin-1")),
            (b"access-control-allow-methods", ALLOW_METHODS.encode("latin-1")),
            (b"access-control-allow-headers", ", ".join(allowed).encode("latin-1")),
            (b"access-control-max-age", str(PREFLIGHT_MAX_AGE_S).encode("latin-1")),
            (b"vary", b"Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
            (b"content-length", b"0"),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


def _header(scope: dict[str, Any], name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return ""


def refusal_message(origin: str) -> str:
    """The message of the 403 for a page of ``origin``."""
    return (f"a web page of origin {origin!r} may not call this server; list it in [server] cors_origins "
            "to allow it")


async def _refuse(send: Any, origin: str) -> None:
    body = encode_body(error_payload("OriginNotAllowedError", refusal_message(origin)), JSON)
    await send({"type": "http.response.start", "status": 403,
                "headers": [(b"content-type", JSON.encode("latin-1")), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
