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
route (:mod:`runtime.wire`); errors are ``{"error": {"type", "message",
"field"?}}`` with the status of the error's class (400 for a bad key or
entry, 401 without the token, 413 for a body over the limit).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from quart import Response, request
from quart_trio import QuartTrio

from runtime.server.client_io import read_body
from runtime.server.routes import describe_error, retry_headers
from runtime.server.transcripts import HostTranscriptStore
from runtime.wire import JSON, MSGPACK, TRANSCRIPTS_PREFIX, decode_body, encode_body
from storage.errors import InvalidInputError

__all__ = ["TRANSCRIPTS_PREFIX", "TranscriptRoutes", "add_transcript_routes"]

logger = logging.getLogger(__name__)

#: Prefix of every transcript route.

View = Callable[[], Awaitable[tuple[int, Any]]]


def add_transcript_routes(app: QuartTrio, store: HostTranscriptStore) -> TranscriptRoutes:
    """Register the routes of the table above on ``app``, served by ``store``."""
    routes = TranscriptRoutes(store)
    routes.register(app)
    return routes


class TranscriptRoutes:
    """The views; each turns one request into one call of :attr:`store`."""

    def __init__(self, store: HostTranscriptStore) -> None:
        self.store = store

    def register(self, app: QuartTrio) -> None:
        """Add the URL rules (names ``transcripts_*``) to ``app``."""
        rules: tuple[tuple[str, str, View], ...] = (
            ("POST", "entries", self.append),
            ("GET", "entries", self.load),
            ("DELETE", "entries", self.delete),
            ("GET", "sessions", self.list_sessions),
            ("GET", "summaries", self.list_session_summaries),
            ("GET", "subkeys", self.list_subkeys),
        )
        for method, path, view in rules:
            app.add_url_rule(f"{TRANSCRIPTS_PREFIX}/{path}", f"transcripts_{method.lower()}_{path}",
                             _answering(view), methods=[method])

    # -- views ----------------------------------------------------------------------------

    async def append(self) -> tuple[int, Any]:
        body = await _read_object()
        if "key" not in body:
            raise InvalidInputError("key is missing", field="key")
        if "entries" not in body:
            raise InvalidInputError("entries is missing", field="entries")
        return 200, {"stored": await self.store.append(body["key"], body["entries"])}

    async def load(self) -> tuple[int, Any]:
        key = _query_key()
        if _response_type() == MSGPACK:
            return 200, {"entries": await self.store.load(key)}
        text = await self.store.load_json(key)
        return 200, _RawJson(b'{"entries":' + (text or "null").encode("utf-8") + b"}")

    async def delete(self) -> tuple[int, Any]:
        return 200, {"deleted": await self.store.delete(_query_key())}

    async def list_sessions(self) -> tuple[int, Any]:
        return 200, {"sessions": await self.store.list_sessions(request.args.get("project_key"))}

    async def list_session_summaries(self) -> tuple[int, Any]:
        return 200, {"summaries": await self.store.list_session_summaries(request.args.get("project_key"))}

    async def list_subkeys(self) -> tuple[int, Any]:
        return 200, {"subkeys": await self.store.list_subkeys(_query_key())}


class _RawJson:
    """A response body already encoded as JSON (sent as it is)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def _answering(view: View) -> Callable[[], Awaitable[Response]]:
    """Wrap a view: its ``(status, body)`` or its error, encoded as the client accepts."""

    async def answer() -> Response:
        try:
            status, body = await view()
        except Exception as exc:  # noqa: BLE001 - every error becomes an error response
            status, body = describe_error(exc)
        if isinstance(body, _RawJson):
            return Response(body.data, status=status, content_type=JSON)
        kind = _response_type()
        return Response(encode_body(body, kind), status=status, content_type=kind, headers=retry_headers(status))

    answer.__name__ = view.__name__
    return answer


def _response_type() -> str:
    return request.accept_mimetypes.best_match([JSON, MSGPACK], default=JSON)


async def _read_object() -> dict[str, Any]:
    body = decode_body(await read_body(), request.headers.get("Content-Type"))
    if not isinstance(body, dict):
        raise InvalidInputError("the body must be an object with key and entries", field="body")
    return body


def _query_key() -> dict[str, Any]:
    """The ``SessionKey`` of the query string (``subpath`` only when given)."""
    key: dict[str, Any] = {"project_key": request.args.get("project_key"),
                           "session_id": request.args.get("session_id")}
    if "subpath" in request.args:
        key["subpath"] = request.args["subpath"]
    return key
