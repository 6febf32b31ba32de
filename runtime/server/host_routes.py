"""The host's own routes: liveness, readiness, metrics, actor statistics and hibernation.

* ``GET /v1/health`` -- ``{"status": "ok"}`` whenever the process answers;
* ``GET /v1/ready`` -- ``{"status": "ready"}`` while the host takes calls, 503
  ``ServiceUnavailableError`` once shutdown began (``server.draining``);
* ``GET /metrics`` -- Prometheus text (:mod:`runtime.server.metrics`);
* ``GET /v1/actors`` -- ``host.statistics()`` as an object with the bound
  ``"namespaces"`` (in a cluster, with ``"cluster"``: host id, advertised URL,
  requests forwarded, the host cluster's counters);
* ``POST /v1/actors:hibernate`` -- ``{"sessionIds"?: [...]}``: hibernate those
  sessions' actors, or every active actor; answers ``{"hibernated": n}``.

Every answer goes through the server's :class:`~runtime.server.responder.Responder`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from quart import Response
from quart_trio import QuartTrio

from common.errors import InvalidInputError, ServiceUnavailableError
from runtime.server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE

if TYPE_CHECKING:
    from runtime.host.ids import ActorId
    from runtime.server.app import SessionsServer

__all__ = ["install"]


def install(app: QuartTrio, server: SessionsServer) -> None:
    """Add the routes of the list above to ``app``, served by ``server``."""
    routes = _HostRoutes(server)
    app.add_url_rule("/v1/health", "health", routes.health, methods=["GET"])
    app.add_url_rule("/v1/ready", "ready", routes.ready, methods=["GET"])
    app.add_url_rule("/metrics", "metrics", routes.metrics, methods=["GET"])
    app.add_url_rule("/v1/actors", "actors", routes.actors, methods=["GET"])
    app.add_url_rule("/v1/actors:hibernate", "hibernate", routes.hibernate, methods=["POST"])


class _HostRoutes:
    def __init__(self, server: SessionsServer) -> None:
        self.server = server
        self.responder = server.responder

    async def health(self) -> Response:
        return self.responder.respond(200, {"status": "ok"})

    async def ready(self) -> Response:
        """Readiness (not liveness): 200 while the host takes calls, 503 once shutdown began."""
        if self.server.draining.is_set() or self.server.closing.is_set():
            return self.responder.error(ServiceUnavailableError("the server is shutting down"))
        return self.responder.respond(200, {"status": "ready"})

    async def metrics(self) -> Response:
        return Response(self.server.metrics.render(), status=200, content_type=METRICS_CONTENT_TYPE)

    async def actors(self) -> Response:
        host = self.server.host
        stats = host.statistics()
        body: dict[str, Any] = {name: getattr(stats, name) for name in stats.__dataclass_fields__}
        body["namespaces"] = sorted(host.namespaces)
        if self.server.forwarder is not None:
            body["cluster"] = self._cluster_statistics()
        return self.responder.respond(200, body)

    def _cluster_statistics(self) -> dict[str, Any]:
        """Cluster mode: this host's id and URL, what it forwarded, and its actor host's cluster counters."""
        forwarder = self.server.forwarder
        assert forwarder is not None  # only asked in a cluster
        found: dict[str, Any] = {"hostId": forwarder.host_id, "advertiseUrl": forwarder.advertise_url,
                                 "forwarded": forwarder.forwarded}
        cluster = getattr(self.server.host, "cluster", None)
        stats = cluster.statistics() if cluster is not None else None
        if stats is not None:
            found.update({name: getattr(stats, name) for name in stats.__dataclass_fields__})
        return found

    async def hibernate(self) -> Response:
        server = self.server
        try:
            body = await self.responder.read_body()
            if body is not None and not isinstance(body, dict):
                raise InvalidInputError("the body must be an object", field="body")
            ids = (body or {}).get("sessionIds")
            if ids is None:
                count = await server.host.hibernate_all()
            else:
                count = 0
                for actor_id in [self._listed_actor_id(ids, i) for i in range(len(_str_list(ids)))]:
                    count += await server.host.hibernate(server.namespace, actor_id)
        except Exception as exc:  # noqa: BLE001 - every error becomes an error response
            return self.responder.error(exc)
        return self.responder.respond(200, {"hibernated": count})

    def _listed_actor_id(self, ids: list[str], index: int) -> ActorId:
        try:
            return self.server.actor_id(ids[index])
        except InvalidInputError as exc:
            raise InvalidInputError(str(exc), field=f"sessionIds[{index}]") from None


def _str_list(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidInputError("sessionIds must be a list of strings", field="sessionIds")
    return value
