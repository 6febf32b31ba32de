"""The server's OpenAPI 3.1 document, generated from the API tables, and the ``/docs`` page that shows it.

``GET /openapi.json`` answers :func:`openapi_document` for this server:
every route of :data:`runtime.api.SESSION_API` under
``/v1/sessions/{session_id}/``, and when the ``"managers"`` namespace is
bound every route of :data:`runtime.manager_api.MANAGER_API` under
``/v1/managers/{manager_id}/`` plus the Session API again under
``/v1/managers/{manager_id}/sessions/{session_id}/``; the ``/rpc`` routes;
the routes of the host (``/v1/health``, ``/metrics``, ``/v1/actors``,
``/v1/actors:hibernate``), the session listing (``/v1/sessions``, ``/v1/sessions/{session_id}``), of the transcript store when it is bound, the
WebSocket route (a ``GET`` answered ``101``, marked ``x-websocket``) and
these two. Request and response bodies are the tables' JSON schemas (named
shapes lifted into ``components/schemas`` by their ``title``); every error
is the one shape ``{"error": {"type", "message", "field"?}}``, listed per
operation under the statuses of the :mod:`common.errors` classes it can
raise (the class names in each response's description).

``GET /docs`` is Swagger UI, served from the files of the ``swagger-ui-py``
package (``/docs/static/...``): no CDN, no request leaves the server (the
online validator badge is off). The page and its files need no token: on a
server with one, the page asks for it (kept in the tab's sessionStorage),
fetches ``/openapi.json`` with it and hands it to Swagger UI's *Authorize*
(``bearerAuth``), so *Try it out* sends it -- to this server only. The
document needs the token, like every other route but ``/v1/health``. The
page and its files carry :data:`DOCS_CONTENT_SECURITY_POLICY` (only this
server's scripts run -- the page's own is ``/docs/static/docs.js``, no inline
script -- and it may not be framed: ``frame-ancestors 'none'``,
``X-Frame-Options: DENY``).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.metadata
import importlib.util
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quart import Response, request
from quart_trio import QuartTrio

from common.errors import RouteNotFoundError
from common.wire import JSON, MAX_SESSION_ID_BYTES, MSGPACK, RESTORE_SUFFIX, SESSIONS_PREFIX, TRANSCRIPTS_PREFIX
from runtime.api import (
    ANY,
    LIST_LIMIT,
    REQUIRED,
    SESSION_API,
    SESSION_PAGE,
    SESSION_SUMMARY,
    ApiMethod,
    HttpRoute,
    body_schema,
    response_schema,
)
from runtime.host.actor_host import HostStatistics
from runtime.manager_api import MANAGER_API, MANAGERS_PREFIX
from runtime.server.inspector import not_this_path
from runtime.server.managers import MANAGERS_NAMESPACE
from runtime.server.transcripts import TRANSCRIPTS_NAMESPACE
from storage import errors

if TYPE_CHECKING:
    from runtime.server.app import SessionsServer

__all__ = ["DOCS_ASSETS", "DOCS_CONTENT_SECURITY_POLICY", "add_docs_routes", "openapi_document"]

OPENAPI_VERSION = "3.1.0"
#: An error class an operation documents (its ``status`` is the response's).
_ErrorClass = type[errors.DurableSessionsError]
#: The error body of every status >= 400.
ERROR = {
    "title": "Error", "type": "object", "required": ["error"], "additionalProperties": False,
    "properties": {"error": {
        "type": "object", "required": ["type", "message"], "additionalProperties": False,
        "properties": {
            "type": {"type": "string", "description": "the error's class name (common.errors)"},
            "message": {"type": "string"},
            "field": {"type": "string", "description": "the argument at fault (400s)"},
        },
    }},
}
#: Errors any actor call can meet, whatever the method: the mailbox is full, the host or its storage is going.
_CALL_ERRORS = (errors.ActorOverloadedError, errors.HostClosedError, errors.ServiceUnavailableError,
                errors.StorageUnavailableError)
#: Errors of a request body: not JSON/msgpack, too large, another media type.
_BODY_ERRORS = (errors.InvalidInputError, errors.PayloadTooLargeError, errors.UnsupportedMediaTypeError)
#: Errors of an RPC call: unknown method, arguments that do not fit, and whatever the method raises.
_RPC_ERRORS = (errors.InvalidInputError, errors.InvalidArgumentsError, errors.UnknownMethodError,
               errors.NotFoundError, errors.ConflictError, errors.CompactionError, errors.SearchQueryError)
_ID_LIMIT = f"1 to {MAX_SESSION_ID_BYTES} UTF-8 bytes, percent-encoded as one path segment"


# -- the document --------------------------------------------------------------------------------------


def openapi_document(*, token: bool, managers: bool, transcripts: bool, version: str | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 document of a server (a fresh dict, JSON data).

    Args:
        token: the server requires a bearer token (every operation but the health check says so).
        managers: the ``"managers"`` namespace is bound (its routes are described).
        transcripts: the transcript store is bound (its routes are described).
        version: ``info.version`` (default: the installed package's version).
    """
    builder = _Builder(token)
    builder.add_table(SESSION_API, SESSIONS_PREFIX + "{session_id}", "sessions", "session",
                      {"session_id": "The session id: any string of " + _ID_LIMIT + "."})
    builder.add_rpc(SESSIONS_PREFIX + "{session_id}", "sessions", "session", "session actor")
    builder.add_websocket()
    if managers:
        manager = {"manager_id": "The manager id (e.g. one per end user): any string of " + _ID_LIMIT + "."}
        managed = {**manager, "session_id": "A session id the manager registered (a UUID from create)."}
        base = MANAGERS_PREFIX + "{manager_id}"
        builder.add_table(MANAGER_API, base, "managers", "manager", manager, session_scoped=True)
        builder.add_rpc(base, "managers", "manager", "manager actor")
        builder.add_table(SESSION_API, base + "/sessions/{session_id}", "managed sessions", "managed_session",
                          managed, session_scoped=True)
        builder.add_rpc(base + "/sessions/{session_id}", "managed sessions", "managed_session", "managed session")
        session = {"manager_id": "$request.path.manager_id", "session_id": "$response.body#/session/id"}
        for source in ("manager.create", "manager.fork", "manager.compact_and_split"):
            builder.link(source, "201", session, lambda path: path.startswith(base + "/sessions/{session_id}"))
    message = {"manager_id": "$request.path.manager_id", "session_id": "$request.path.session_id",
               "message_id": "$response.body#/id"}
    for append in ("session.append_message", "managed_session.append_message"):
        if append in builder.operations:
            messages = builder.operations[append][0] + "/"  # ...{session_id}/messages/

            def under(path: str, messages: str = messages) -> bool:
                return path.startswith(messages)

            for status in ("200", "201"):
                builder.link(append, status, message, under)
    builder.add_host_routes()
    builder.add_listing_routes()
    builder.add_lifecycle_routes()
    builder.add_pitr_routes()
    if transcripts:
        builder.add_transcript_routes()
    builder.add_docs_routes()
    return builder.document(version or _package_version())


def _package_version() -> str:
    try:
        return importlib.metadata.version("durable-sessions")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0.0.0"


def _content(schema: Mapping[str, Any], *, msgpack: bool = True) -> dict[str, Any]:
    """The same schema as JSON and (unless ``msgpack`` is false) msgpack."""
    kinds = (JSON, MSGPACK) if msgpack else (JSON,)
    return {kind: {"schema": copy.deepcopy(dict(schema))} for kind in kinds}


def _path_parameter(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": description,
            "schema": {"type": "string", "minLength": 1}}


def _without_null(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """A query value's schema: a query string never carries null (absent means the default)."""
    if "anyOf" in schema:
        rest = [s for s in schema["anyOf"] if s != {"type": "null"}]
        return rest[0] if len(rest) == 1 else {"anyOf": rest}
    kinds = schema.get("type")
    if isinstance(kinds, list) and "null" in kinds:
        rest = [k for k in kinds if k != "null"]
        return {**schema, "type": rest[0] if len(rest) == 1 else rest}
    return schema


class _Builder:
    """Collects paths, operations and named schemas."""

    def __init__(self, token: bool) -> None:
        self.token = token
        self.paths: dict[str, dict[str, Any]] = {}
        self.schemas: dict[str, Any] = {}
        self.operations: dict[str, tuple[str, dict[str, Any]]] = {}

    # -- operations --------------------------------------------------------------------------

    def operation(self, path: str, verb: str, operation: dict[str, Any], *, errors_of: Iterable[_ErrorClass] = (),
                  public: bool = False) -> None:
        """Add ``operation`` (``responses`` holding its successes) at ``verb path`` with its error responses."""
        if operation["operationId"] in self.operations:
            raise ValueError(f"operationId {operation['operationId']} is used twice")
        self.operations[operation["operationId"]] = (path, operation)
        classes = list(errors_of)
        if not public:  # the token, and the 503 of a server shutting down, are checked before any route
            classes += [errors.UnauthorizedError] if self.token else []
            classes.append(errors.ServiceUnavailableError)
        operation["responses"].update(self._error_responses(classes))
        if public:
            operation["security"] = []
        self.paths.setdefault(path, {})[verb.lower()] = operation

    def _error_responses(self, classes: Iterable[_ErrorClass]) -> dict[str, Any]:
        by_status: dict[int, list[str]] = {}
        for cls in classes:
            names = by_status.setdefault(cls.status, [])
            if cls.__name__ not in names:
                names.append(cls.__name__)
        return {
            str(status): {"description": ", ".join(names), "content": _content({"$ref": "#/components/schemas/Error"})}
            for status, names in sorted(by_status.items())
        }

    # -- the tables ----------------------------------------------------------------------------------

    def add_table(self, table: tuple[ApiMethod, ...], base: str, tag: str, prefix: str,
                  parameters: Mapping[str, str], *, session_scoped: bool = False) -> None:
        """Every route of ``table`` under ``base`` (``parameters``: the base's path parameters, described)."""
        for method in table:
            for index, route in enumerate(method.http):
                suffix = "" if index == 0 else f"_{index + 1}"
                operation = self._route_operation(method, route, f"{prefix}.{method.name}{suffix}", tag, parameters)
                classes = self._route_errors(method, route, session_scoped)
                self.operation(f"{base}/{route.path}", route.verb, operation, errors_of=classes)

    def _route_operation(self, method: ApiMethod, route: HttpRoute, operation_id: str, tag: str,
                         parameters: Mapping[str, str]) -> dict[str, Any]:
        params = [_path_parameter(name, text) for name, text in parameters.items()]
        for field in route.fields:
            schema = field.schema or next(p.schema for p in method.params if p.name == field.param)
            if field.source == "path":
                source = f"{field.param}.{field.key}" if field.key else field.param
                params.append(_path_parameter(field.wire, f"``{source}`` of ``{method.name}``."))
            elif field.source == "query":
                params.append({"name": field.wire, "in": "query", "required": field.absent is REQUIRED,
                               "schema": self.lift(_without_null(schema))})
        operation: dict[str, Any] = {
            "operationId": operation_id, "tags": [tag], "summary": method.summary,
            "description": f"Calls ``{method.name}`` on the actor.", "parameters": params, "responses": {},
        }
        sent = body_schema(method, route)
        if sent is not None:
            operation["requestBody"] = {"required": bool(sent.get("required")), "content": _content(self.lift(sent))}
        reply = {"description": "the call's result", "content": _content(self.lift(response_schema(method, route)))}
        if route.created:
            operation["responses"]["201"] = {**reply, "description": "stored"}
            if method.result.get("type") != "object" and "$ref" not in method.result:
                operation["responses"]["200"] = {**reply, "description": "nothing new was stored (a duplicate id)"}
        else:
            operation["responses"]["200"] = reply
        return operation

    def _route_errors(self, method: ApiMethod, route: HttpRoute, session_scoped: bool) -> list[_ErrorClass]:
        classes: list[_ErrorClass] = [errors.InvalidInputError, *method.errors]
        if route.not_found is not None:
            classes.append(route.not_found.catch)
        if session_scoped:
            classes.append(errors.NotFoundError)
        if route.has_body:
            classes += _BODY_ERRORS
        classes += [RouteNotFoundError, *_CALL_ERRORS]
        return classes

    def add_rpc(self, base: str, tag: str, prefix: str, what: str) -> None:
        request = {"title": "RpcCall", "type": "object", "required": ["method"], "properties": {
            "method": {"type": "string"},
            "params": {"anyOf": [{"type": "array"}, {"type": "object"}, {"type": "null"}]},
        }}
        reply = {"type": "object", "required": ["result"], "properties": {"result": ANY},
                 "additionalProperties": False}
        operation: dict[str, Any] = {
            "operationId": f"{prefix}.rpc", "tags": [tag], "summary": f"Call any public method of the {what} by name.",
            "description": "``params``: an object of keyword arguments or a list of positional ones.",
            "parameters": [], "requestBody": {"required": True, "content": _content(self.lift(request))},
            "responses": {"200": {"description": "the method's result", "content": _content(reply)}},
        }
        operation["parameters"] = self._base_parameters(base)
        self.operation(f"{base}/rpc", "POST", operation,
                       errors_of=[*_RPC_ERRORS, *_BODY_ERRORS, RouteNotFoundError, *_CALL_ERRORS])

    @staticmethod
    def _base_parameters(base: str) -> list[dict[str, Any]]:
        names = [part[1:-1] for part in base.split("/") if part.startswith("{")]
        return [_path_parameter(name, f"The {name.replace('_', ' ')} ({_ID_LIMIT}).") for name in names]

    def add_websocket(self) -> None:
        operation = {
            "operationId": "session.websocket", "tags": ["sessions"], "x-websocket": True,
            "summary": "WebSocket: RPC frames and the session's broadcasts.",
            "description": (
                "Upgrade with ``Connection: Upgrade`` and ``Upgrade: websocket``. A frame that is an object with "
                "``method`` is a call ``{id, method, params}`` answered ``{id, result}`` or ``{id, error}`` in the "
                "frame's encoding (text: JSON, binary: msgpack); the session's broadcasts arrive as they happen. "
                "The host holds the socket while the actor hibernates."),
            "parameters": self._base_parameters(SESSIONS_PREFIX + "{session_id}"),
            "responses": {"101": {"description": "switching to the WebSocket protocol"}},
        }
        self.operation(SESSIONS_PREFIX + "{session_id}/ws", "GET", operation,
                       errors_of=[errors.InvalidInputError, RouteNotFoundError, errors.ServiceUnavailableError])

    def link(self, source: str, status: str, values: Mapping[str, str], targets: Callable[[str], bool]) -> None:
        """Links from ``source``'s ``status`` response to every operation whose path ``targets`` accepts,
        passing the ``values`` (runtime expressions) of the parameters each target has."""
        response = self.operations[source][1]["responses"][status]
        links = response.setdefault("links", {})
        for operation_id, (path, operation) in self.operations.items():
            if operation_id == source or not targets(path) or operation.get("x-websocket"):
                continue
            names = {p["name"] for p in operation.get("parameters", ()) if p["in"] == "path"}
            links[operation_id] = {"operationId": operation_id,
                                   "parameters": {k: v for k, v in values.items() if k in names}}

    # -- the host, the transcripts, the docs ----------------------------------------------------------------

    def add_host_routes(self) -> None:
        self.operation("/v1/health", "GET", {
            "operationId": "host.health", "tags": ["host"], "summary": "Liveness; needs no token.",
            "responses": {"200": {"description": "the server answers", "content": _content(
                {"type": "object", "required": ["status"], "properties": {"status": {"const": "ok"}},
                 "additionalProperties": False})}},
        }, public=True)
        self.operation("/v1/ready", "GET", {
            "operationId": "host.ready", "tags": ["host"],
            "summary": "Readiness; needs no token: 200 while the host takes calls, 503 once shutdown began.",
            "responses": {"200": {"description": "ready", "content": _content(
                {"type": "object", "required": ["status"], "properties": {"status": {"const": "ready"}},
                 "additionalProperties": False})}},
        }, public=True, errors_of=[errors.ServiceUnavailableError])
        self.operation("/metrics", "GET", {
            "operationId": "host.metrics", "tags": ["host"], "summary": "Prometheus metrics of the host and routes.",
            "responses": {"200": {"description": "Prometheus text format",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}}},
        })
        self.operation("/v1/actors", "GET", {
            "operationId": "host.statistics", "tags": ["host"], "summary": "The host's statistics and namespaces.",
            "responses": {"200": {"description": "HostStatistics", "content": _content(self.lift(_statistics()))}},
        })
        hibernate = {"title": "HibernateRequest", "type": "object",
                     "properties": {"sessionIds": {"type": "array", "items": {"type": "string"}}}}
        self.operation("/v1/actors:hibernate", "POST", {
            "operationId": "host.hibernate", "tags": ["host"],
            "summary": "Hibernate these sessions' actors (none listed: every active actor); how many were active.",
            "requestBody": {"required": False, "content": _content(self.lift(hibernate))},
            "responses": {"200": {"description": "hibernated", "content": _content(
                {"type": "object", "required": ["hibernated"], "properties": {"hibernated": {"type": "integer"}},
                 "additionalProperties": False})}},
        }, errors_of=[*_BODY_ERRORS, *_CALL_ERRORS])

    def add_listing_routes(self) -> None:
        """``GET /v1/sessions`` and ``GET /v1/sessions/{session_id}`` (:mod:`runtime.server.listing`)."""
        unsupported = [errors.NotSupportedError, errors.StorageUnavailableError]
        self.operation(SESSIONS_PREFIX.rstrip("/"), "GET", {
            "operationId": "sessions.list", "tags": ["sessions"],
            "summary": "The sessions this host holds, most recently updated first, a page at a time.",
            "description": ("From the host catalog (written when actors hibernate or close; awake sessions report "
                            "fresher numbers). ``updatedAt`` is when the session's last write committed (reads "
                            "do not change it). Pass the answer's ``cursor`` for the next page; ``null``: the last. "
                            "In cluster mode from the catalog in Postgres, the same on every host; with the "
                            "sessions in Postgres (serve --postgres), from the database's catalog."),
            "parameters": [
                {"name": "limit", "in": "query", "required": False, "schema": dict(LIST_LIMIT)},
                {"name": "cursor", "in": "query", "required": False, "schema": {"type": "string"}},
                {"name": "prefix", "in": "query", "required": False, "schema": {"type": "string"}},
            ],
            "responses": {"200": {"description": "a page", "content": _content(self.lift(SESSION_PAGE))}},
        }, errors_of=[errors.InvalidInputError, *unsupported])
        reply = {"type": "object", "required": ["session"], "properties": {"session": SESSION_SUMMARY},
                 "additionalProperties": False}
        self.operation(SESSIONS_PREFIX + "{session_id}", "GET", {
            "operationId": "sessions.describe", "tags": ["sessions"],
            "summary": "One session as the listing shows it; 404 when the host has none with this id.",
            "parameters": self._base_parameters(SESSIONS_PREFIX + "{session_id}"),
            "responses": {"200": {"description": "the session", "content": _content(self.lift(reply))}},
        }, errors_of=[errors.InvalidInputError, errors.SessionNotFoundError, *unsupported])

    def add_lifecycle_routes(self) -> None:
        """Delete, export, import, gc and backup (:mod:`runtime.server.lifecycle_routes`; backup answers 501 in
        cluster mode and with the sessions in Postgres)."""
        one = SESSIONS_PREFIX + "{session_id}"
        params = self._base_parameters(one)
        modes = [errors.NotSupportedError]
        ndjson = {"application/x-ndjson": {"schema": {"type": "string", "description": "docs/export-format.md"}}}

        def reply(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
            return _content({"type": "object", "required": required, "properties": properties})

        self.operation(one, "DELETE", {
            "operationId": "sessions.delete", "tags": ["sessions"], "parameters": params,
            "summary": "Delete the session and erase every byte of it from the data folder.",
            "responses": {"204": {"description": "erased"}},
        }, errors_of=[errors.InvalidInputError, errors.SessionNotFoundError, *modes, *_CALL_ERRORS])
        self.operation(one + "/export", "GET", {
            "operationId": "sessions.export", "tags": ["sessions"], "parameters": params,
            "summary": "The session's archive: JSON Lines, every branch, blocks, prompt, skills, metadata.",
            "responses": {"200": {"description": "the archive", "content": ndjson}},
        }, errors_of=[errors.InvalidInputError, errors.SessionNotFoundError, *modes, *_CALL_ERRORS])
        self.operation(one + "/import", "POST", {
            "operationId": "sessions.import", "tags": ["sessions"], "parameters": params,
            "summary": "Store an archive as this (never written) session, all or nothing.",
            "requestBody": {"required": True, "content": ndjson},
            "responses": {"201": {"description": "stored", "content": reply(
                ["imported"], {"imported": {"type": "integer"}})}},
        }, errors_of=[*_BODY_ERRORS, errors.ConflictError, *modes, *_CALL_ERRORS])
        self.operation("/v1/host:gc", "POST", {
            "operationId": "host.gc", "tags": ["host"],
            "summary": "Delete (dryRun: list) sessions idle past [retention] delete_idle_after_days.",
            "requestBody": {"required": False, "content": _content(
                {"type": "object", "properties": {"dryRun": {"type": "boolean"}}})},
            "responses": {"200": {"description": "the sessions", "content": reply(
                ["idleDays", "sessions", "deleted"],
                {"idleDays": {"type": ["integer", "null"]}, "deleted": {"type": "boolean"},
                 "sessions": {"type": "array", "items": {"type": "object", "properties": {
                     "id": {"type": "string"}, "updatedAt": {"type": "string"}}}}})}},
        }, errors_of=[*_BODY_ERRORS, *modes, *_CALL_ERRORS])
        self.operation("/v1/host:backup", "POST", {
            "operationId": "host.backup", "tags": ["host"],
            "summary": "Copy every actor file, the catalog and the alarm index into a new or empty folder.",
            "requestBody": {"required": True, "content": _content(
                {"type": "object", "required": ["to"], "properties": {"to": {"type": "string"}}})},
            "responses": {"200": {"description": "copied", "content": reply(
                ["to", "sessions", "bytes"], {"to": {"type": "string"}, "sessions": {"type": "integer"},
                                              "bytes": {"type": "integer"}})}},
        }, errors_of=[*_BODY_ERRORS, *modes, *_CALL_ERRORS])

    def add_pitr_routes(self) -> None:
        """Point-in-time restore (:mod:`runtime.server.pitr_routes`; 501 outside cluster mode)."""
        one = SESSIONS_PREFIX + "{session_id}"
        params = self._base_parameters(one)
        bookmark = {"type": "string", "description": "Opaque; names one moment of one session's history."}
        modes = [errors.NotSupportedError]
        self.operation(one + "/bookmark", "GET", {
            "operationId": "sessions.bookmark", "tags": ["sessions"],
            "parameters": [*params, {"name": "at", "in": "query", "required": True, "schema": {
                "type": "string", "format": "date-time"}, "description": "ISO 8601 time with Z or an offset."}],
            "summary": "A bookmark of the session's state at a moment of the point-in-time window (cluster mode).",
            "responses": {"200": {"description": "the bookmark", "content": _content({
                "type": "object", "required": ["bookmark", "at", "writtenAt", "window"], "properties": {
                    "bookmark": bookmark, "at": {"type": "string"}, "writtenAt": {"type": ["string", "null"]},
                    "window": {"type": "object", "properties": {"days": {"type": "number"},
                                                                "from": {"type": "string"}}}}})}},
        }, errors_of=[errors.InvalidInputError, errors.SessionNotFoundError, *modes, *_CALL_ERRORS])
        self.operation(one + RESTORE_SUFFIX, "POST", {
            "operationId": "sessions.restore", "tags": ["sessions"], "parameters": params,
            "summary": "Rewind the session to a bookmark (cluster mode); answers the bookmark that undoes it.",
            "requestBody": {"required": True, "content": _content(
                {"type": "object", "required": ["bookmark"], "properties": {"bookmark": bookmark}})},
            "responses": {"200": {"description": "restored", "content": _content({
                "type": "object", "required": ["undo", "restoredTo", "messages"], "properties": {
                    "undo": bookmark, "restoredTo": {"type": "string"}, "messages": {"type": "integer"}}})}},
        }, errors_of=[*_BODY_ERRORS, errors.SessionNotFoundError, errors.NotOwnerError, *modes, *_CALL_ERRORS])

    def add_transcript_routes(self) -> None:
        text = {"type": "string", "minLength": 1}
        key = {"title": "TranscriptKey", "type": "object", "required": ["project_key", "session_id"], "properties": {
            "project_key": text, "session_id": text, "subpath": text}}
        entries = {"type": "array", "items": {"type": "object"}}

        def query(*names: str, optional: Iterable[str] = ()) -> list[dict[str, Any]]:
            return [{"name": n, "in": "query", "required": True, "schema": text} for n in names] + [
                {"name": n, "in": "query", "required": False, "schema": text} for n in optional]

        def reply(name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
            return {"200": {"description": name, "content": _content(
                {"type": "object", "required": [name], "properties": {name: schema}, "additionalProperties": False})}}

        listed: dict[str, Any] = {"type": "object", "required": ["session_id", "mtime"],
                  "properties": {"session_id": {"type": "string"}, "mtime": {"type": "integer"}}}
        summary = {**listed, "required": ["session_id", "mtime", "data"],
                   "properties": {**listed["properties"], "data": {"type": "object"}}}
        faults = [errors.InvalidInputError, *_CALL_ERRORS]
        routes = [
            ("POST", "entries", "transcripts.append", "Append entries (a repeated uuid is skipped).", [],
             {"required": True, "content": _content(self.lift({
                 "title": "TranscriptAppend", "type": "object", "required": ["key", "entries"],
                 "properties": {"key": key, "entries": entries}}))},
             reply("stored", {"type": "integer"}), [*faults, *_BODY_ERRORS]),
            ("GET", "entries", "transcripts.load", "A transcript's entries in append order (null: unknown key).",
             query("project_key", "session_id", optional=["subpath"]), None,
             reply("entries", {"anyOf": [entries, {"type": "null"}]}), faults),
            ("DELETE", "entries", "transcripts.delete", "Delete a transcript (a main key: with its sub-transcripts).",
             query("project_key", "session_id", optional=["subpath"]), None,
             reply("deleted", {"type": "integer"}), faults),
            ("GET", "sessions", "transcripts.list_sessions", "The project's sessions with their mtime (epoch ms).",
             query("project_key"), None, reply("sessions", {"type": "array", "items": listed}), faults),
            ("GET", "summaries", "transcripts.list_session_summaries", "The project's session summaries.",
             query("project_key"), None, reply("summaries", {"type": "array", "items": summary}), faults),
            ("GET", "subkeys", "transcripts.list_subkeys", "A session's sub-transcript paths, sorted.",
             query("project_key", "session_id"), None,
             reply("subkeys", {"type": "array", "items": {"type": "string"}}), faults),
        ]
        for verb, path, operation_id, summary_text, params, request_body, responses, faults_of in routes:
            operation = {"operationId": operation_id, "tags": ["transcripts"], "summary": summary_text,
                         "parameters": params, "responses": responses}
            if request_body is not None:
                operation["requestBody"] = request_body
            self.operation(f"{TRANSCRIPTS_PREFIX}/{path}", verb, operation, errors_of=faults_of)

    def add_docs_routes(self) -> None:
        self.operation("/openapi.json", "GET", {
            "operationId": "docs.openapi", "tags": ["docs"], "summary": "This document.",
            "responses": {"200": {"description": "OpenAPI 3.1", "content": {JSON: {"schema": {"type": "object"}}}}},
        })
        self.operation("/docs", "GET", {
            "operationId": "docs.page", "tags": ["docs"],
            "summary": "Swagger UI showing this document; needs no token (the page asks for it when the server "
                       "has one).",
            "responses": {"200": {"description": "the page", "content": {"text/html": {"schema": {"type": "string"}}}}},
        }, public=True)

    # -- named schemas -----------------------------------------------------------------------------------------

    def lift(self, schema: Any) -> Any:
        """``schema`` with every titled sub-schema replaced by a ``$ref`` into ``components/schemas``.

        Raises:
            ValueError: two different schemas carry the same title.
        """
        if isinstance(schema, list):
            return [self.lift(item) for item in schema]
        if not isinstance(schema, Mapping):
            return schema
        lifted = {key: self.lift(value) for key, value in schema.items()}
        title = schema.get("title")
        if not isinstance(title, str):
            return lifted
        known = self.schemas.setdefault(title, lifted)
        if known != lifted:
            raise ValueError(f"two schemas are titled {title!r}")
        return {"$ref": f"#/components/schemas/{title}"}

    def document(self, version: str) -> dict[str, Any]:
        self.schemas.setdefault("Error", copy.deepcopy(ERROR))
        document: dict[str, Any] = {
            "openapi": OPENAPI_VERSION,
            "info": {
                "title": "durable-sessions", "version": version,
                "summary": "Durable per-session memory for LLM agents: the Session API of actors on SQLite.",
                "description": (
                    "Bodies are JSON, or msgpack with ``Content-Type: application/msgpack`` (send ``Accept: "
                    "application/msgpack`` for msgpack replies). Every error is ``{\"error\": {\"type\", \"message\", "
                    "\"field\"?}}`` with the status of its class. A ``405`` (``Allow`` lists the verbs) answers a verb "
                    "a path does not take; ``429`` carries ``Retry-After``; a ``500`` is a bug and names only a log "
                    "reference."),
                "license": {"name": "MIT", "identifier": "MIT"},
            },
            "paths": self.paths,
            "components": {
                "schemas": dict(sorted(self.schemas.items())),
                "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
            },
        }
        if self.token:
            document["security"] = [{"bearerAuth": []}]
        return json.loads(json.dumps(document))  # plain JSON data, no shared sub-objects


def _statistics() -> dict[str, Any]:
    kinds = {"int": {"type": "integer"}, "float": {"type": "number"}, "bool": {"type": "boolean"}}
    properties: dict[str, dict[str, Any]] = {
        f.name: kinds.get(str(f.type), {}) for f in dataclasses.fields(HostStatistics)}
    properties["namespaces"] = {"type": "array", "items": {"type": "string"}}
    return {"title": "HostStatistics", "type": "object", "required": list(properties), "properties": properties}


# -- serving ------------------------------------------------------------------------------------------------

#: The Swagger UI files ``/docs`` loads: name -> content type.
DOCS_ASSETS = {
    "swagger-ui.css": "text/css; charset=utf-8",
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "favicon-32x32.png": "image/png",
}

_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>durable-sessions API</title>
  <link rel="stylesheet" href="docs/static/swagger-ui.css">
  <link rel="stylesheet" href="docs/static/docs.css">
  <link rel="icon" type="image/png" href="docs/static/favicon-32x32.png">
</head>
<body data-needs-token="__NEEDS_TOKEN__">
  <form id="token-form" hidden>
    <p>This server needs its bearer token. It stays in this tab (sessionStorage) and is sent as
       <code>Authorization: Bearer ...</code> to this server only.</p>
    <label>Token <input id="token" type="password" autocomplete="off" required></label>
    <button type="submit">Open the API</button>
    <p id="token-problem"></p>
  </form>
  <div id="swagger-ui"></div>
  <script src="docs/static/swagger-ui-bundle.js"></script>
  <script src="docs/static/docs.js"></script>
</body>
</html>
"""

#: The page's own script (no inline script: the policy allows only files of this server).
_SCRIPT = """"use strict";
(() => {
  const NEEDS_TOKEN = document.body.dataset.needsToken === "true";
  const KEY = "durable-sessions-token";
  const form = document.getElementById("token-form");
  function ask(problem) {
    sessionStorage.removeItem(KEY);
    document.getElementById("swagger-ui").replaceChildren();
    document.getElementById("token-problem").textContent = problem || "";
    form.hidden = false;
  }
  function start(token) {
    form.hidden = true;
    const sameOrigin = (url) => new URL(url, location.href).origin === location.origin;
    window.ui = SwaggerUIBundle({
      url: "openapi.json", dom_id: "#swagger-ui", deepLinking: true, validatorUrl: null,
      requestInterceptor: (req) => {
        if (token && sameOrigin(req.url)) req.headers["Authorization"] = "Bearer " + token;
        return req;
      },
      responseInterceptor: (res) => {
        if (res.status === 401 && new URL(res.url, location.href).pathname.endsWith("/openapi.json")) {
          ask("The server refused that token.");
        }
        return res;
      },
      onComplete: () => { if (token) window.ui.preauthorizeApiKey("bearerAuth", token); },
    });
  }
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const token = document.getElementById("token").value.trim();
    sessionStorage.setItem(KEY, token);
    start(token);
  });
  if (!NEEDS_TOKEN) start(null);
  else if (sessionStorage.getItem(KEY)) start(sessionStorage.getItem(KEY));
  else ask();
})();
"""

_STYLE = """#token-form { font-family: sans-serif; margin: 2em auto; max-width: 40em; }
#token-form input { width: 28em; font-family: monospace; }
#token-problem { color: #b00; }
"""

#: The page's own files under ``/docs/static/``: name -> (content type, bytes).
_OWN_ASSETS = {
    "docs.js": ("text/javascript; charset=utf-8", _SCRIPT.encode("utf-8")),
    "docs.css": ("text/css; charset=utf-8", _STYLE.encode("utf-8")),
}
#: The policy of ``/docs``: the inspector's (:data:`runtime.server.inspector.CONTENT_SECURITY_POLICY`)
#: less what Swagger UI cannot do without: style attributes, ``data:`` images, markup from strings
#: (no Trusted Types). Only this server's scripts run; the page may not be framed.
DOCS_CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
#: Headers of the ``/docs`` page and its files.
DOCS_HEADERS = {
    "Content-Security-Policy": DOCS_CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def assets_folder() -> Path:
    """The folder of Swagger UI's files in the installed ``swagger-ui-py`` (found without importing it).

    Raises:
        RuntimeError: the package is not installed.
    """
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the swagger-ui-py package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def add_docs_routes(app: QuartTrio, server: SessionsServer) -> None:
    """Register ``GET /openapi.json``, ``GET /docs`` and ``GET /docs/static/<name>`` on ``app``."""
    cache: dict[str, bytes] = {}

    def document() -> bytes:
        if "document" not in cache:
            namespaces = server.host.namespaces
            cache["document"] = json.dumps(openapi_document(
                token=not server.authorized(None), managers=MANAGERS_NAMESPACE in namespaces,
                transcripts=TRANSCRIPTS_NAMESPACE in namespaces), ensure_ascii=False).encode("utf-8")
        return cache["document"]

    async def openapi_json() -> Response:
        return Response(document(), status=200, content_type=JSON)

    async def docs() -> Response:
        if not_this_path():
            return server.responder.error(RouteNotFoundError(f"no route for {request.path}"))
        page = _PAGE.replace("__NEEDS_TOKEN__", "false" if server.authorized(None) else "true")
        return Response(page, status=200, content_type="text/html; charset=utf-8",
                        headers={**DOCS_HEADERS, "Cache-Control": "no-store"})

    async def asset(name: str) -> Response:
        if name in _OWN_ASSETS:
            own, content = _OWN_ASSETS[name]
            return Response(content, status=200, content_type=own, headers={**DOCS_HEADERS, "Cache-Control": "no-cache"})
        kind = DOCS_ASSETS.get(name)
        if kind is None:
            return server.responder.error(RouteNotFoundError(f"no route for /docs/static/{name}"))
        if name not in cache:
            cache[name] = (assets_folder() / name).read_bytes()
        return Response(cache[name], status=200, content_type=kind,
                        headers={**DOCS_HEADERS, "Cache-Control": "private, max-age=3600"})

    app.add_url_rule("/openapi.json", "openapi", openapi_json, methods=["GET"])
    app.add_url_rule("/docs", "docs", docs, methods=["GET"])
    app.add_url_rule("/docs/static/<name>", "docs_static", asset, methods=["GET"])
