"""OpenTelemetry traces of a host and its server: off, and free, unless configured.

With the ``otel`` extra installed (``pip install 'durable-sessions[otel]'``)
and tracing configured by the standard environment variables -- an
``OTEL_TRACES_EXPORTER`` other than ``none``, or an
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` --
the first actor host of the process (:func:`from_environment`) turns
tracing on, and these become spans (docs/ecosystem.md lists their
attributes):

* every HTTP request and WebSocket connection of the server
  (:class:`TraceRequests`, kind ``SERVER``; it continues the trace of an
  incoming ``traceparent``);
* each actor turn (:func:`turn`), activation (:func:`activation`) and
  hibernation (:func:`hibernation`);
* each call a cluster host forwards to the session's owner
  (:func:`forward`, kind ``CLIENT``; the ``traceparent`` it sends makes
  the owner's spans part of the same trace);
* each group-commit append of a cluster host to Postgres (installed into
  :mod:`storage.cluster.log` as its ``append_span`` hook).

A process that already set a global ``TracerProvider`` (the
``opentelemetry-instrument`` launcher, or the application) keeps it; else
one of the SDK is made with the exporter ``OTEL_TRACES_EXPORTER`` names
(``otlp``, the default, over HTTP; ``console``) behind a batch processor,
and the resource of ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``.
:func:`configure` turns tracing on with a given provider (tests) or off.

Not configured, nothing of OpenTelemetry is imported and every hook returns
one shared do-nothing context manager (:data:`OFF`). No attribute carries
message text, a query string or a token.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

__all__ = ["OFF", "TraceRequests", "activation", "configure", "configured_by_environment", "enabled", "forward",
           "from_environment", "hibernation", "outgoing_headers", "turn"]

logger = logging.getLogger(__name__)

#: The instrumentation scope of every span.
SCOPE = "durable-sessions"

_tracer: Any = None  # an opentelemetry Tracer while tracing is on
_environment_read = False


class _Off:
    """The do-nothing span: a reusable context manager; ``headers`` to send, none."""

    __slots__ = ()
    headers: tuple[tuple[bytes, bytes], ...] = ()

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def status(self, code: int) -> None:
        """Record the answer's HTTP status (nothing, here)."""


#: What every hook returns while tracing is off.
OFF = _Off()


def enabled() -> bool:
    """``True`` while tracing is on."""
    return _tracer is not None


def configured_by_environment(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the ``OTEL_*`` variables of ``environ`` (default ``os.environ``) ask for traces."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER")
    if exporter is not None and exporter.strip():
        return exporter.strip().lower() != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure(provider: Any | None) -> None:
    """Trace with ``provider`` (an OpenTelemetry ``TracerProvider``), or stop tracing (``None``).

    Also installs (or removes) the Postgres append hook of :mod:`storage.cluster.log`.
    """
    global _tracer
    _tracer = None if provider is None else provider.get_tracer(SCOPE)
    try:
        from storage.cluster import log
    except ImportError:  # pragma: no cover - psycopg is a dependency; nothing to hook without it
        return
    log.append_span = _append_span if provider is not None else log.no_append_span


def from_environment() -> bool:
    """Turn tracing on once per process if the ``OTEL_*`` variables ask for it; ``True`` if on.

    Called by every actor host as it starts; only the first call reads the environment. The
    extra missing gives one warning naming it, and tracing stays off.
    """
    global _environment_read
    if _environment_read:
        return _tracer is not None
    _environment_read = True
    if not configured_by_environment():
        return False
    try:
        from opentelemetry import trace
    except ImportError:
        logger.warning("OTEL_* asks for traces but OpenTelemetry is not installed: "
                       "pip install 'durable-sessions[otel]'; tracing stays off")
        return False
    provider: Any = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):  # nobody set one up yet
        provider = _sdk_provider()
        if provider is None:
            return False
        trace.set_tracer_provider(provider)
    configure(provider)
    return True


def _sdk_provider() -> Any | None:
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        logger.warning("OTEL_* asks for traces but the OpenTelemetry SDK is not installed: "
                       "pip install 'durable-sessions[otel]'; tracing stays off")
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": os.environ.get(
        "OTEL_SERVICE_NAME", "durable-sessions")}))
    for name in (os.environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(","):
        name = name.strip().lower()
        if name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError:
                logger.warning("OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp-proto-http: "
                               "pip install 'durable-sessions[otel]'")
                continue
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif name and name != "none":
            logger.warning("OTEL_TRACES_EXPORTER names %r, which durable-sessions does not set up "
                           "(otlp, console); no spans are exported there", name)
    return provider


def outgoing_headers(headers: dict[str, str] | None) -> dict[str, str] | None:
    """``headers`` plus the ``traceparent`` (and ``tracestate``) of the current span, for a client request.

    Only when the application has OpenTelemetry's API loaded (it traces itself) and a span is
    current; else ``headers`` as given, at the cost of one dictionary look-up.
    """
    if "opentelemetry.trace" not in sys.modules:
        return headers
    from opentelemetry import propagate

    carrier = dict(headers or {})
    propagate.inject(carrier)
    return carrier if carrier else headers


# -- actors --------------------------------------------------------------------------------------


def _actor_span(name: str, actor_id: Any) -> Any:
    return _tracer.start_as_current_span(name, attributes={
        "durable_sessions.actor.namespace": actor_id.namespace, "durable_sessions.actor.id": actor_id.hex})


def turn(actor_id: Any) -> Any:
    """A context manager around one turn of the actor ``actor_id`` (an ``ActorId``): span ``actor turn``."""
    return OFF if _tracer is None else _actor_span("actor turn", actor_id)


def activation(actor_id: Any) -> Any:
    """A context manager around the activation of ``actor_id``: span ``actor activation``."""
    return OFF if _tracer is None else _actor_span("actor activation", actor_id)


def hibernation(actor_id: Any) -> Any:
    """A context manager around the hibernation of ``actor_id``: span ``actor hibernation``."""
    return OFF if _tracer is None else _actor_span("actor hibernation", actor_id)


# -- cluster forwards ------------------------------------------------------------------------------


class _ForwardSpan:
    """A current ``CLIENT`` span for one forwarded call; ``headers``: its ``traceparent`` (and ``tracestate``)."""

    __slots__ = ("_scope", "headers", "span")

    def __init__(self, method: str, url: str) -> None:
        from urllib.parse import urlsplit

        from opentelemetry import trace

        parts = urlsplit(url)
        attributes: dict[str, Any] = {"http.request.method": method, "server.address": parts.hostname or "",
                                      "url.scheme": parts.scheme}
        if parts.port is not None:
            attributes["server.port"] = parts.port
        self._scope = _tracer.start_as_current_span(method, kind=trace.SpanKind.CLIENT, attributes=attributes)
        self.span: Any = None
        self.headers: list[tuple[bytes, bytes]] = []

    def __enter__(self) -> _ForwardSpan:
        from opentelemetry import propagate

        self.span = self._scope.__enter__()
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        self.headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in carrier.items()]
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._scope.__exit__(*exc)

    def status(self, code: int) -> None:
        """Record the owner's HTTP status ``code`` (5xx marks the span an error)."""
        _set_status(self.span, code)


def forward(method: str, url: str) -> Any:
    """A context manager around one call forwarded to the owner at ``url`` (base URL); it gives
    ``headers`` to add to the request (``[(name, value)]`` bytes) and ``status(code)``."""
    return OFF if _tracer is None else _ForwardSpan(method, url)


def _set_status(span: Any, code: int) -> None:
    span.set_attribute("http.response.status_code", code)
    if code >= 500:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", str(code))
        span.set_status(Status(StatusCode.ERROR))


# -- Postgres appends -----------------------------------------------------------------------------


def _append_span(entries: int) -> Any:
    if _tracer is None:
        return OFF
    from opentelemetry import trace

    return _tracer.start_as_current_span("INSERT ds_log", kind=trace.SpanKind.CLIENT, attributes={
        "db.system": "postgresql", "db.system.name": "postgresql", "db.operation.name": "INSERT",
        "db.collection.name": "ds_log", "db.operation.batch.size": entries})


# -- HTTP requests ---------------------------------------------------------------------------------


class TraceRequests:
    """ASGI middleware: a ``SERVER`` span per HTTP request and WebSocket connection, while tracing is on.

    Args:
        app: the ASGI app it wraps.
        route_of: ``(method, raw path) -> route template`` (e.g. ``/v1/sessions/{id}/messages``), or
            ``None`` when no route has the path.

    The span is named ``METHOD route`` and carries ``http.request.method``, ``http.route``,
    ``http.response.status_code``, ``url.scheme``, ``url.path`` and ``network.protocol.version`` (never the query
    string, a header or a body). An incoming ``traceparent`` makes it a child of the caller's span.
    """

    def __init__(self, app: Callable[..., Awaitable[None]], route_of: Callable[[str, str], str | None]) -> None:
        self.app = app
        self.route_of = route_of

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if _tracer is None or kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        from opentelemetry import propagate, trace

        raw = scope.get("raw_path") or scope["path"].encode("utf-8")
        path = raw.decode("latin-1").partition("?")[0]
        method = scope.get("method", "GET") if kind == "http" else "GET"
        route = self.route_of(method, path)
        carrier = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", ())
                   if name in (b"traceparent", b"tracestate")}
        attributes: dict[str, Any] = {"http.request.method": method, "url.scheme": scope.get("scheme", kind),
                                      "url.path": path, "network.protocol.version": scope.get("http_version", "")}
        if route is not None:
            attributes["http.route"] = route
        name = f"{method} {route}" if route is not None else method
        with _tracer.start_as_current_span(name, context=propagate.extract(carrier), kind=trace.SpanKind.SERVER,
                                           attributes=attributes) as span:
            async def traced_send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    _set_status(span, int(message["status"]))
                await send(message)

            await self.app(scope, receive, traced_send)
