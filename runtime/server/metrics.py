"""Prometheus metrics of one server: its host's actors and its routes.

Each app gets its own :class:`prometheus_client.CollectorRegistry` (never the
global one), so two servers in one process -- or two tests -- never share
or clash on metrics. Exposed names (all prefixed ``durable_sessions_``):

* gauges read from ``host.statistics()`` at scrape time: ``actors_active``,
  ``actors_idle``, ``actors_hibernated``, ``calls_running``,
  ``calls_queued``, ``websocket_connections``;
* host counters: ``activations_total``, ``hibernations_total``,
  ``evictions_total``, ``overloads_total`` (calls refused with 429),
  ``actor_calls_total``, ``alarms_run_total``, ``alarm_failures_total``;
* per route: ``requests_total{route, status}`` and the latency histogram
  ``request_duration_seconds{route}`` (seconds). ``route`` is the route
  template, e.g. ``POST /v1/sessions/{id}/messages``, or ``WS <method>``
  for a WebSocket RPC frame -- never a session id.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from runtime.host.actor_host import ActorHost

PREFIX = "durable_sessions"
#: ``Content-Type`` of :meth:`ServerMetrics.render`.
CONTENT_TYPE = CONTENT_TYPE_LATEST

_GAUGES = (
    ("actors_active", "active", "Actors with a live instance and an open file."),
    ("actors_idle", "idle", "Active actors with no pending call."),
    ("actors_hibernated", "hibernated", "Actors put to sleep and not woken since."),
    ("calls_running", "running", "Calls executing actor code now."),
    ("calls_queued", "queued", "Calls waiting for their actor."),
    ("websocket_connections", "connections", "WebSocket peers held by the host."),
)
_COUNTERS = (
    ("activations", "activations", "Actor activations (wakes) since start."),
    ("hibernations", "hibernations", "Actors hibernated (idle timeout or on request) since start."),
    ("evictions", "evictions", "Actors evicted to stay under max_active since start."),
    ("overloads", "overloads", "Calls refused because an actor's mailbox was full (HTTP 429)."),
    ("actor_calls", "calls", "Calls answered by actors since start."),
    ("alarms_run", "alarms_run", "Alarms delivered since start."),
    ("alarm_failures", "alarm_failures", "Alarms that raised since start."),
)
#: Latency buckets, seconds.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class HostCollector(Collector):
    """Reads ``host.statistics()`` when scraped."""

    def __init__(self, host: ActorHost) -> None:
        self.host = host

    def collect(self) -> Iterator[Metric]:
        stats = self.host.statistics()
        for name, attribute, text in _GAUGES:
            yield GaugeMetricFamily(f"{PREFIX}_{name}", text, value=getattr(stats, attribute))
        for name, attribute, text in _COUNTERS:
            yield CounterMetricFamily(f"{PREFIX}_{name}", text, value=getattr(stats, attribute))


class ServerMetrics:
    """The metrics of one server app (see the module docstring).

    Attributes:
        registry: this app's own registry.
    """

    def __init__(self, host: ActorHost) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(HostCollector(host))
        self._requests = Counter(
            f"{PREFIX}_requests", "Requests and WebSocket RPC frames answered, by route and status.",
            ("route", "status"), registry=self.registry,
        )
        self._latency = Histogram(
            f"{PREFIX}_request_duration_seconds", "Time to answer, by route (seconds).",
            ("route",), buckets=LATENCY_BUCKETS, registry=self.registry,
        )

        # The labelled children, found once per label set (``labels()`` takes a lock and checks its
        # arguments on every call). Routes and statuses are few: templates, never session ids.
        self._children: dict[tuple[str, int], tuple[Any, Any]] = {}

    def observe(self, route: str, status: int, seconds: float) -> None:
        """Count one answered request of ``route`` with ``status`` that took ``seconds``."""
        children = self._children.get((route, status))
        if children is None:
            children = self._children[(route, status)] = (self._requests.labels(route, str(status)),
                                                          self._latency.labels(route))
        children[0].inc()
        children[1].observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
