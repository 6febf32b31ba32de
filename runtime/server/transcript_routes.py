"""HTTP routes of the transcript store: ``/v1/transcripts/...`` over a :class:`HostTranscriptStore`.

The Claude Agent SDK ``SessionStore`` operations, one request each. Keys
are free-form strings carried in the JSON body (``append``) or the query
string (everything else), never in the path, and never used as paths on
disk (see :mod:`runtime.server.transcripts`).

======  ===================================================  ==========================================
method  path and parameters                                  answer
======  ===================================================  ==========================================
POST    ``/v1/transcripts/entries``                          ``{"stored": n}``: entries actually stored
        body ``{"key": {project_key, session_id,             (duplicates by ``uuid`` skipped)
        subpath?}, "entries": [...]}``
GET     ``/v1/transcripts/entries?project_key=&session_id=   ``{"entries": [...]}`` in append order, or
        [&subpath=]``                                        ``{"entries": null}`` for an unknown key
DELETE  ``/v1/transcripts/entries?`` (same)                  ``{"deleted": n}``; a main key removes the
                                                             session, its sub-transcripts and summary
GET     ``/v1/transcripts/sessions?project_key=``            ``{"sessions": [{session_id, mtime}]}``
GET     ``/v1/transcripts/summaries?project_key=``           ``{"summaries": [{session_id, mtime, data}]}``
GET     ``/v1/transcripts/subkeys?project_key=&session_id=`` ``{"subkeys": [...]}`` sorted
======  ===================================================  ==========================================

``mtime`` is epoch milliseconds. Bodies are JSON or msgpack as on every
route (:mod:`common.wire`); errors are ``{"error": {"type", "message",
"field"?}}`` with the status of the error's class (400 for a bad key or
entry, 401 without the token, 413 for a body over the limit), answered by
the server's :class:`~runtime.server.responder.Responder`.

:func:`install` adds these routes to the server's app when its host has the
``"transcripts"`` namespace bound. A cluster host binds it itself
(:func:`~runtime.server.transcripts.bind_cluster_transcripts`): a key-addressed
call runs at the pair's owner (forwarded like a session call,
``SessionsServer.in_cluster``), the listings read the catalog in Postgres
from any host (:class:`~runtime.server.transcripts.ClusterTranscriptStore`),
and Postgres unreachable answers 503 with ``Retry-After``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from quart import Response, request
from quart_trio import QuartTrio

from common.errors import InvalidInputError
from common.wire import JSON, MSGPACK, TRANSCRIPTS_PREFIX
from runtime.host.ids import ActorId
from runtime.server.responder import Responder
from runtime.server.transcripts import (
    TRANSCRIPTS_NAMESPACE,
    ClusterTranscriptStore,
    HostTranscriptStore,
    _parse_key,
    bind_cluster_transcripts,
)

if TYPE_CHECKING:
    from runtime.server.app import SessionsServer

__all__ = ["TRANSCRIPTS_PREFIX", "TranscriptRoutes", "add_transcript_routes", "install"]

logger = logging.getLogger(__name__)

View = Callable[[], Awaitable[tuple[int, Any]]]


def install(app: QuartTrio, server: SessionsServer) -> None:
    """Serve the transcript routes on ``app`` when ``server``'s host has the ``"transcripts"``
    namespace bound; a cluster host (``server.forwarder`` and ``host.cluster`` set) binds it first."""
    host = server.host
    cluster = getattr(host, "cluster", None)
    if server.forwarder is not None and cluster is not None:
        if TRANSCRIPTS_NAMESPACE not in host.namespaces:
            bind_cluster_transcripts(host)
        namespace = host.namespace(TRANSCRIPTS_NAMESPACE)
        routes = TranscriptRoutes(ClusterTranscriptStore(namespace), server.responder, server=server)
        routes.register(app)
    elif TRANSCRIPTS_NAMESPACE in host.namespaces:
        add_transcript_routes(app, HostTranscriptStore(host.namespace(TRANSCRIPTS_NAMESPACE)), server.responder)


def add_transcript_routes(app: QuartTrio, store: HostTranscriptStore,
                          responder: Responder | None = None) -> TranscriptRoutes:
    """Register the routes of the table above on ``app``, served by ``store`` and answered by
    ``responder`` (default: a new :class:`~runtime.server.responder.Responder`)."""
    routes = TranscriptRoutes(store, responder or Responder())
    routes.register(app)
    return routes


class TranscriptRoutes:
    """The views; each turns one request into one call of :attr:`store`.

    With ``server`` (cluster mode) a key-addressed view runs where the pair's actor lives:
    here when this host owns it (or nobody wrote it), else at its owner.
    """

    def __init__(self, store: HostTranscriptStore, responder: Responder, *,
                 server: SessionsServer | None = None) -> None:
        self.store = store
        self.responder = responder
        self.server = server

    def register(self, app: QuartTrio) -> None:
        """Add the URL rules (names ``transcripts_*``) to ``app``."""
        rules: tuple[tuple[str, str, View, bool], ...] = (
            ("POST", "entries", self.append, True),
            ("GET", "entries", self.load, True),
            ("DELETE", "entries", self.delete, True),
            ("GET", "sessions", self.list_sessions, False),
            ("GET", "summaries", self.list_session_summaries, False),
            ("GET", "subkeys", self.list_subkeys, True),
        )
        for method, path, view, keyed in rules:
            answer = self._at_owner(view) if keyed and self.server is not None else self._answering(view)
            app.add_url_rule(f"{TRANSCRIPTS_PREFIX}/{path}", f"transcripts_{method.lower()}_{path}",
                             answer, methods=[method])

    # -- views ----------------------------------------------------------------------------

    async def append(self) -> tuple[int, Any]:
        body = await self._read_object()
        if "key" not in body:
            raise InvalidInputError("key is missing", field="key")
        if "entries" not in body:
            raise InvalidInputError("entries is missing", field="entries")
        return 200, {"stored": await self.store.append(body["key"], body["entries"])}

    async def load(self) -> tuple[int, Any]:
        key = _query_key()
        if self.responder.kind() == MSGPACK or self.server is not None:  # a cluster answers through respond()
            return 200, {"entries": await self.store.load(key)}
        text = await self.store.load_json(key)
        return 200, _RawJson(b'{"entries":' + (text or "null").encode("utf-8") + b"}")

    async def delete(self) -> tuple[int, Any]:
        return 200, {"deleted": await self.store.delete(_query_key())}

    async def list_sessions(self) -> tuple[int, Any]:
        project_key = request.args.get("project_key")  # none given: no project, no sessions
        return 200, {"sessions": [] if project_key is None else await self.store.list_sessions(project_key)}

    async def list_session_summaries(self) -> tuple[int, Any]:
        project_key = request.args.get("project_key")
        return 200, {"summaries": [] if project_key is None else await self.store.list_session_summaries(project_key)}

    async def list_subkeys(self) -> tuple[int, Any]:
        return 200, {"subkeys": await self.store.list_subkeys(_query_key())}


    # -- answering ------------------------------------------------------------------------

    def _answering(self, view: View) -> Callable[[], Awaitable[Response]]:
        """Wrap a view: its ``(status, body)`` or its error, encoded as the client accepts; a body
        already encoded as JSON (:class:`_RawJson`) is sent as it is."""
        responder = self.responder

        async def answer() -> Response:
            try:
                status, body = await view()
            except Exception as exc:  # noqa: BLE001 - every error becomes an error response
                return responder.error(exc)
            if isinstance(body, _RawJson):
                return Response(body.data, status=status, content_type=JSON)
            return responder.respond(status, body)

        answer.__name__ = view.__name__
        return answer

    def _at_owner(self, view: View) -> Callable[[], Awaitable[Response]]:
        """Cluster mode: wrap a key-addressed view so that it runs at the pair's owner."""
        server = self.server
        assert server is not None
        responder = self.responder

        async def answer() -> Response:
            try:
                actor = await self._actor_of_request()
                return await server.in_cluster(actor, view)
            except Exception as exc:  # noqa: BLE001 - every error becomes an error response
                return responder.error(exc)

        answer.__name__ = view.__name__
        return answer

    async def _actor_of_request(self) -> ActorId:
        """The actor of the request's key (the body's for an append; the body stays readable).

        Raises:
            InvalidInputError: no key, or a malformed one (400, nothing forwarded).
        """
        if request.method == "POST":
            key = (await self._read_object()).get("key")
            if key is None:
                raise InvalidInputError("key is missing", field="key")
        else:
            key = {**_query_key(), "subpath": None}
        project_key, session_id, _subpath = _parse_key(key)
        return self.store.actor_id(project_key, session_id)

    async def _read_object(self) -> dict[str, Any]:
        body = await self.responder.read_body()
        if not isinstance(body, dict):
            raise InvalidInputError("the body must be an object with key and entries", field="body")
        return body


class _RawJson:
    """A response body already encoded as JSON (sent as it is)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def _query_key() -> dict[str, Any]:
    """The ``SessionKey`` of the query string (``subpath`` only when given)."""
    key: dict[str, Any] = {"project_key": request.args.get("project_key"),
                           "session_id": request.args.get("session_id")}
    if "subpath" in request.args:
        key["subpath"] = request.args["subpath"]
    return key
