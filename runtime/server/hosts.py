"""The ``Host`` check: a server without a token answers only the host names it serves (DNS rebinding).

A web page on ``http://evil.example`` whose name its owner re-points at
``127.0.0.1`` (DNS rebinding) becomes, for the browser, a page of the same
origin as the loopback server: its script may call every route and open
WebSockets, and the ``Origin`` rule (:mod:`runtime.server.browsers`) sees
nothing wrong, because ``Origin`` and ``Host`` agree. What gives it away is
``Host``: it names the attacker's domain.

So a server without a token answers only requests whose ``Host`` is one it
serves (the port is not compared):

* the loopback names ``localhost``, ``127.0.0.1`` (any ``127.x.y.z``) and ``[::1]``;
* the address it is bound to, when that is a specific one (not ``0.0.0.0`` or ``::``);
* the names of ``[server] allowed_hosts`` (``"sessions.internal"``,
  ``"10.0.0.5"``; ``"*"``: any -- the check is off).

Any other ``Host`` gets 421 ``HostNotAllowedError`` before anything runs
(a WebSocket upgrade too). A request without ``Host`` (HTTP/1.0: no browser
sends one) passes. With a token, the token is what guards the routes and the
check applies only when ``allowed_hosts`` is set. In a cluster, the host of
this host's advertised URL is answered too (other hosts forward to it).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from common.wire import JSON, encode_body, error_payload

__all__ = ["LOOPBACK_NAMES", "HostGate", "HostPolicy", "host_name", "normalise_hosts"]

#: Host names always answered.
LOOPBACK_NAMES = frozenset(("localhost", "127.0.0.1", "::1"))
#: The status of a refusal: RFC 9110 421 Misdirected Request ("not able to produce a response for this host").
REFUSAL_STATUS = 421


def host_name(value: str) -> str:
    """The name of a ``Host`` value (``name[:port]``, ``[v6][:port]``): lower case, no port, brackets or final dot."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


def normalise_hosts(value: Any) -> tuple[str, ...]:
    """``[server] allowed_hosts`` as names (lower case, no port); ``"*"`` kept.

    Raises:
        ValueError: not a list of non-empty strings, or an entry with a scheme or a path.
    """
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(f"server.allowed_hosts must be a list of host names such as [\"sessions.internal\"], "
                         f"not {value!r}")
    names = []
    for entry in value:
        if not isinstance(entry, str) or not entry.strip() or "/" in entry or " " in entry.strip():
            raise ValueError(f"server.allowed_hosts: {entry!r} is not a host name (no scheme, no path)")
        names.append("*" if entry.strip() == "*" else host_name(entry))
    return tuple(names)


def _is_loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostPolicy:
    """Which ``Host`` names are answered (see the module docstring).

    Args:
        allowed: ``[server] allowed_hosts`` (normalised by :func:`normalise_hosts`).
        bind: the ``host:port`` the server listens on (its host is answered unless a wildcard).
        advertise: in a cluster, this host's advertised URL (its host is answered).
        token: whether the server has a token (then only a non-empty ``allowed`` turns the check on).
    """

    def __init__(self, allowed: Iterable[str] = (), *, bind: str = "", advertise: str | None = None,
                 token: bool = False) -> None:
        self.names = frozenset(allowed)
        self.advertised = host_name(urlsplit(advertise).netloc) if advertise else None
        self.active = "*" not in self.names and (not token or bool(self.names))
        bound = host_name(bind.rpartition(":")[0]) if ":" in bind else ""
        self.bound = bound if bound not in ("", "0.0.0.0", "::") else None

    def allows(self, host: str | None) -> bool:
        """``True`` when a request with this ``Host`` header value (``None``: none) is answered."""
        if not self.active or host is None:
            return True
        name = host_name(host)
        return _is_loopback(name) or name in self.names or name in (self.bound, self.advertised)


def refusal_message(host: str) -> str:
    """The message of the 421 for a request addressed to ``host``."""
    return (f"this server does not answer for host {host!r}; list it in [server] allowed_hosts "
            "(or give the server a token)")


class HostGate:
    """ASGI middleware: the ``Host`` check of the module docstring, for HTTP requests and WebSockets."""

    def __init__(self, app: Callable[..., Awaitable[None]], policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope.get("type")
        if kind not in ("http", "websocket") or not self.policy.active:
            await self.app(scope, receive, send)
            return
        host = None
        for key, value in scope.get("headers", ()):
            if key == b"host":
                host = value.decode("latin-1")
                break
        if self.policy.allows(host):
            await self.app(scope, receive, send)
            return
        await _refuse(scope, send, host or "")


async def _refuse(scope: dict[str, Any], send: Any, host: str) -> None:
    body = encode_body(error_payload("HostNotAllowedError", refusal_message(host)), JSON)
    headers = [(b"content-type", JSON.encode("latin-1")), (b"content-length", str(len(body)).encode())]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": REFUSAL_STATUS, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    elif "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": REFUSAL_STATUS, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:  # the server answers 403
        await send({"type": "websocket.close", "code": 1008})
