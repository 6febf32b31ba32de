"""The session routes: ``/v1/sessions/{session_id}/...`` -> one stub call each, built from :mod:`runtime.api`.

Protocol logic only: no sockets, no Quart. :func:`match` finds the route of
a method and the path segments after the session id (still
percent-encoded, so an encoded ``:`` or ``/`` inside a label never reads as
syntax). Each route of :data:`runtime.api.SESSION_API` is answered by
:func:`answer`: it reads the route's fields from the path, the query and the
body (a missing required field is a 400 naming it), makes one call of the
session's actor, and returns ``(status, body)``. ``POST /rpc`` calls any
callable actor method by name, as WebSocket RPC frames do (:func:`call_method`).

The table below is :func:`runtime.api.describe_routes` (a test keeps it so).
``?`` marks an optional body key; ``*`` a read answered for a session that
was never written without creating it (the actor class's ``EMPTY_READS``).

======  ============================================  =========================  ======================================================
method  path (after ``/v1/sessions/{id}``)            body                       actor call -> reply
======  ============================================  =========================  ======================================================
POST    ``/messages``                                 ``{message, parentId?}``   ``append_message`` -> ``{id, inserted}`` 201 if stored
GET     ``/messages?leaf=&limit=&before=&overlays=``                             ``get_history`` -> ``{messages}`` *
DELETE  ``/messages``                                                            ``clear_messages`` -> ``{cleared: true}``
POST    ``/messages:batch``                           ``{messages, parentId?}``  ``append_messages`` -> ``{inserted}`` 201 if stored
GET     ``/messages:leaf``                                                       ``get_latest_leaf`` -> ``{message}`` *
GET     ``/messages:count?leaf=``                                                ``get_path_length`` -> ``{count}`` *
GET     ``/messages/{message_id}``                                               ``get_message`` -> ``{message}`` 404 if null *
PUT     ``/messages/{message_id}``                    ``{message}``              ``update_message`` -> ``{id}``
POST    ``/messages:delete``                          ``{ids}``                  ``delete_messages`` -> ``{deleted}``
DELETE  ``/messages/{message_id}``                                               ``delete_messages`` -> ``{deleted}`` 404 if 0
GET     ``/messages/{message_id}/branches``                                      ``get_branches`` -> ``{messages}`` *
GET     ``/search?q=&limit=&mode=``                                              ``search`` -> ``{results}`` *
GET     ``/search:status``                                                       ``search_status`` -> ``{status}``
POST    ``/search:reembed``                                                      ``reembed`` -> ``{status}``
GET     ``/context``                                                             ``get_context_blocks`` -> ``{blocks}``
GET     ``/context/{label}``                                                     ``get_context_block`` -> ``{block}`` 404 if null
PUT     ``/context/{label}``                          ``{content}``              ``replace_context_block`` -> ``{block}``
POST    ``/context/{label}:append``                   ``{content}``              ``append_context_block`` -> ``{block}``
GET     ``/system-prompt``                                                       ``freeze_system_prompt`` -> ``{prompt}``
POST    ``/system-prompt:refresh``                                               ``refresh_system_prompt`` -> ``{prompt}``
GET     ``/tools?format=``                                                       ``tools`` -> ``{tools}``
POST    ``/tools/{name}``                             the arguments              ``execute_tool`` -> ``{result}``
POST    ``/compact``                                                             ``compact`` -> ``{result}``
GET     ``/compactions``                                                         ``get_compactions`` -> ``{compactions}`` *
GET     ``/skills``                                                              ``get_loaded_skill_keys`` -> ``{loaded}`` *
DELETE  ``/skills/{label}/{key}``                                                ``unload_skill`` -> ``{unloaded}``
======  ============================================  =========================  ======================================================

``POST /rpc`` with ``{method, params?}`` -> ``{result}``: any callable actor method, ``params`` an
object of keyword arguments or a list of positional ones.
"""

from __future__ import annotations

import copy
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from common.errors import (
    ActorStorageCorruptError,
    InternalServerError,
    InvalidInputError,
    MessageNotFoundError,
    RestoreError,
    RouteNotFoundError,
    StorageFullError,
)
from common.wire import SESSIONS_PREFIX, payload_for, status_of, unquote_segment
from runtime.api import METHODS, NO_EMPTY, OMIT, REQUIRED, SESSION_API, ApiMethod, Field, HttpRoute
from runtime.host.namespace import ActorStub
from storage.faults import classify, fault_detail

logger = logging.getLogger(__name__)


class Stub(Protocol):
    """What a route calls: an actor's :class:`~runtime.host.namespace.ActorStub`, or a stub-like handle
    on a managed session (:class:`runtime.server.managers.ManagedSessionStub`)."""

    async def call(self, method: str, /, *args: Any, **kwargs: Any) -> Any: ...


@dataclass
class Call:
    """One matched request: the actor's stub, decoded path values, query and body.

    ``exists``: how :meth:`read` learns whether the session was ever written
    (default: ``namespace.exists``, a look at this host's files, or the agent
    class's ``session_written(env, actor_id)`` when it has one -- sessions in
    Postgres; in a cluster, a question to Postgres, since another host may hold it).
    """

    stub: ActorStub | Stub
    values: dict[str, str]
    query: Mapping[str, str]
    body: Any = None
    exists: Callable[[], Awaitable[bool]] | None = None

    def object(self) -> dict[str, Any]:
        """The body as an object (``{}`` when empty).

        Raises:
            InvalidInputError: (``field="body"``) any other JSON value.
        """
        if self.body is None:
            return {}
        if not isinstance(self.body, dict):
            raise InvalidInputError("the body must be an object", field="body")
        return self.body

    async def read(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``stub.call(method, ...)`` for a read that must not create the session.

        When the actor class lists ``method`` in ``EMPTY_READS`` and the
        session was never written (no file, not awake), that answer stands
        in and no file is created: a mistyped session id leaves nothing on disk.

        Raises:
            MessageNotFoundError: (never written) the method's ``empty_missing``
                argument names a message (``get_history(before=)``): the empty
                session holds none, and an empty page would say "the root".
        """
        if not isinstance(self.stub, ActorStub):  # a managed session's: every read goes to the manager
            return await self.stub.call(method, *args, **kwargs)
        namespace = self.stub.namespace
        empty = getattr(namespace.agent_class, "EMPTY_READS", None)
        if empty and method in empty:
            found = namespace.exists(self.stub.id) if self.exists is None else await self.exists()
            written = getattr(namespace.agent_class, "session_written", None)
            if self.exists is None and written is not None:  # its storage decides (serve --postgres), not the files
                found = namespace.host.is_active(namespace, self.stub.id) or await written(namespace.env, self.stub.id)
            if not found:
                _refuse_missing(method, args, kwargs)
                return copy.deepcopy(empty[method])
        return await self.stub.call(method, *args, **kwargs)

    def text_arg(self, name: str) -> str | None:
        """The query value ``name``, or ``None`` when absent or empty."""
        return self.query.get(name) or None

    def bool_arg(self, name: str) -> bool | None:
        """The query value ``name`` as a boolean (``true``/``false``, ``1``/``0``), or ``None`` when absent or empty.

        Raises:
            InvalidInputError: (``field=name``) any other value.
        """
        raw = self.query.get(name)
        if raw in (None, ""):
            return None
        if raw.lower() in ("true", "1"):
            return True
        if raw.lower() in ("false", "0"):
            return False
        raise InvalidInputError(f"{name} must be true or false, not {raw!r}", field=name)

    def int_arg(self, name: str, minimum: int, maximum: int) -> int | None:
        """The query value ``name`` as an integer, or ``None`` when absent or empty.

        Raises:
            InvalidInputError: (``field=name``) not an integer, or outside ``minimum..maximum``.
        """
        raw = self.query.get(name)
        if raw in (None, ""):
            return None
        try:
            value = int(raw)
        except ValueError:
            raise InvalidInputError(f"{name} must be an integer, not {raw!r}", field=name) from None
        if not minimum <= value <= maximum:
            raise InvalidInputError(f"{name} must be between {minimum} and {maximum}, not {value}", field=name)
        return value


Handler = Callable[[Call], Awaitable[tuple[int, Any]]]


@dataclass(frozen=True)
class Route:
    """``method`` + ``pattern`` (segments: literals, ``{name}``, ``{name}:suffix``) -> ``handler``."""

    method: str
    pattern: tuple[str, ...]
    handler: Handler
    has_body: bool

    @property
    def name(self) -> str:
        """The metrics label, e.g. ``POST /v1/sessions/{id}/messages``."""
        return f"{self.method} {SESSIONS_PREFIX}{{id}}/{'/'.join(self.pattern)}"

    def bind(self, segments: list[str]) -> dict[str, str] | None:
        """Decoded values captured from ``segments``, or ``None`` if the pattern does not fit."""
        if len(segments) != len(self.pattern):
            return None
        values = {}
        for segment, part in zip(segments, self.pattern):
            if not part.startswith("{"):
                if segment != part:
                    return None
                continue
            name, _, suffix = part[1:].partition("}")
            if suffix and not segment.endswith(suffix):
                return None
            raw = segment[: len(segment) - len(suffix)]
            if not raw:
                return None
            values[name] = unquote_segment(raw, name)
        return values


def match(
    method: str, segments: list[str], routes: tuple[Route, ...] | None = None,
) -> tuple[Route, dict[str, str]] | tuple[None, list[str]]:
    """``(route, values)`` for this request among ``routes`` (default :data:`ROUTES`), or
    ``(None, allowed_methods)`` when none fits.

    ``allowed_methods`` is empty when no route has this path at all.
    """
    allowed = []
    for route in ROUTES if routes is None else routes:
        values = route.bind(segments)
        if values is None:
            continue
        if route.method == method:
            return route, values
        allowed.append(route.method)
    return None, allowed


def path_methods(segments: list[str], routes: tuple[Route, ...] | None = None) -> list[str]:
    """The methods of the routes among ``routes`` (default :data:`ROUTES`) whose path is
    ``segments``, in table order; ``[]`` when no route has that path."""
    found = match("", segments, routes)  # no route takes the method ""
    return found[1] if found[0] is None else []


def _refuse_missing(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise :class:`MessageNotFoundError` when ``method``'s ``empty_missing`` argument names a message."""
    api = METHODS.get(method)
    if api is None or api.empty_missing is None:
        return
    try:
        value = api.signature().bind(*args, **kwargs).arguments.get(api.empty_missing)
    except TypeError:  # arguments that do not fit: the empty answer stands, as before
        return
    if isinstance(value, str) and value:
        raise MessageNotFoundError(value)


# -- the routes of the table -------------------------------------------------------------------------


async def answer(method: ApiMethod, route: HttpRoute, call: Call) -> tuple[int, Any]:
    """Answer one request of ``route``: read its fields, call ``method`` on the actor, build the reply.

    Raises:
        InvalidInputError: (or the field's ``error`` class) a required field is
            missing, a checked one has the wrong JSON type, a path id differs
            from the body's; an error of the actor naming a parameter is
            reported under the body key the caller sent (``message_ids`` -> ``ids``).
        NotFoundError: the route's ``not_found`` result (an unknown message or block).
        Exception: whatever the actor call raises.
    """
    args, sent = _arguments(method, route, call)
    result = await _invoke(method, route, call, args)
    missing = route.not_found
    if missing is not None and missing.matches(result):
        raise missing.make(sent[missing.wire])
    reply = {key: _pick(sent, source) for key, source in route.echo}
    if route.result_key is not None:
        reply[route.result_key] = result
    reply.update(route.constant)
    return (201 if route.created and _stored(result) else 200), reply


def _arguments(method: ApiMethod, route: HttpRoute, call: Call) -> tuple[dict[str, Any], dict[str, Any]]:
    """The actor call's arguments by parameter name, and the values as sent by wire name."""
    args: dict[str, Any] = {}
    sent: dict[str, Any] = {}
    for field in route.fields:
        value = _field_value(method, field, call)
        if value is OMIT:
            continue
        sent[field.wire] = value
        if field.key is not None:
            args[field.param] = _with_path_key(route, field, args[field.param], value)
        else:
            args[field.param] = [value] if field.item else value
    return args, sent


def _field_value(method: ApiMethod, field: Field, call: Call) -> Any:
    """The value of ``field`` in this request (``field.absent`` resolved), or :data:`OMIT`."""
    if field.source == "path":
        return call.values[field.wire]
    if field.source == "whole-body":
        value = call.body
    elif field.source == "query":
        schema = field.schema or _param(method, field).schema
        if schema.get("type") == "integer":
            value = call.int_arg(field.wire, schema.get("minimum", 0), schema.get("maximum", 10_000))
        elif schema.get("type") == "boolean":
            value = call.bool_arg(field.wire)
        else:
            value = call.text_arg(field.wire)
            if value is None and field.absent is REQUIRED and field.wire in call.query:
                value = ""  # present but blank (``?q=``): the actor judges it (a blank search finds nothing)
    else:
        found = call.object()
        if field.wire in found:  # null included: the actor judges it
            value = found[field.wire]
            if field.check:
                _check_type(field, _param(method, field).schema, value)
            return value
        value = None
    if value is not None:
        return value
    if field.absent is REQUIRED:
        raise field.missing()
    absent = field.absent
    return absent if absent is None or type(absent) in _IMMUTABLE else copy.deepcopy(absent)


_IMMUTABLE = frozenset((str, int, float, bool, bytes))


def _param(method: ApiMethod, field: Field) -> Any:
    return next(p for p in method.params if p.name == field.param)


_JSON_TYPES: dict[str, tuple[type | tuple[type, ...], str]] = {
    "string": (str, "a string"), "null": (type(None), "null"), "integer": (int, "an integer"),
    "number": ((int, float), "a number"), "boolean": (bool, "a boolean"), "object": (dict, "an object"),
    "array": (list, "a list"),
}


def _check_type(field: Field, schema: Mapping[str, Any], value: Any) -> None:
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    fits = any(isinstance(value, _JSON_TYPES[k][0]) and not (isinstance(value, bool) and k in ("integer", "number"))
               for k in kinds)
    if not fits:
        wanted = " or ".join(_JSON_TYPES[k][1] for k in kinds)
        raise InvalidInputError(f"{field.wire} must be {wanted}, not {type(value).__name__}", field=field.wire)


def _with_path_key(route: HttpRoute, field: Field, value: Any, key_value: str) -> Any:
    """A body object with the path's ``key_value`` as its ``field.key`` (refusing a different one)."""
    if not isinstance(value, dict):
        return value  # the actor says what is wrong with it
    value = {field.key: key_value, **value}
    if value[field.key] != key_value:
        name = f"{_body_wire(route, field.param)}.{field.key}"
        raise field.error(f"{name} differs from the {field.key} in the path", field=name)
    return value


def _body_wire(route: HttpRoute, param: str) -> str:
    return next(f.wire for f in route.fields if f.param == param and f.source == "body")


async def _invoke(method: ApiMethod, route: HttpRoute, call: Call, args: dict[str, Any]) -> Any:
    """Call the actor: positionally in parameter order, by keyword after an omitted one."""
    positional = []
    for param in method.params:
        if param.name not in args:
            break
        positional.append(args[param.name])
    keywords = {p.name: args[p.name] for p in method.params[len(positional):] if p.name in args}
    send = call.read if method.empty is not NO_EMPTY else call.stub.call
    try:
        return await send(method.name, *positional, **keywords)
    except InvalidInputError as error:
        renamed = {f.param: f.wire for f in route.fields if f.source == "body" and f.wire != f.param}
        if error.field not in renamed:
            raise
        wire = renamed[error.field]
        raise InvalidInputError(str(error).replace(error.field, wire, 1), field=wire) from None


def _pick(sent: dict[str, Any], source: str) -> Any:
    """The wire value ``source`` names: ``message_id``, or ``message.id`` (``None`` unless an object holds it)."""
    wire, _, inner = source.partition(".")
    value = sent.get(wire)
    if not inner:
        return value
    return value.get(inner) if isinstance(value, dict) else None


def _stored(result: Any) -> bool:
    """Whether an append stored anything: ``True``, or a list of flags holding ``True``."""
    return any(result) if isinstance(result, list) else bool(result)


# -- RPC -------------------------------------------------------------------------------------------


async def rpc(call: Call) -> tuple[int, Any]:
    body = call.object()
    if "method" not in body:
        raise InvalidInputError("method is missing", field="method")
    return 200, {"result": await call_method(call.stub, body["method"], body.get("params"))}


async def call_method(stub: ActorStub | Stub, method: Any, params: Any) -> Any:
    """Call ``method`` with ``params`` (an object of keyword arguments, a list of
    positional ones, or ``None``) -- the RPC of ``/rpc`` and WebSocket frames.

    Raises:
        InvalidInputError: ``method`` is not a string or ``params`` not an object/list.
        UnknownMethodError, InvalidArgumentsError: as any stub call.
    """
    if not isinstance(method, str):
        raise InvalidInputError("method must be a string", field="method")
    if params is None:
        return await stub.call(method)
    if isinstance(params, dict):
        return await stub.call(method, **params)
    if isinstance(params, list):
        return await stub.call(method, *params)
    raise InvalidInputError("params must be an object or a list", field="params")


def _route(method: ApiMethod, route: HttpRoute) -> Route:
    return Route(route.verb, route.pattern, functools.partial(answer, method, route), route.has_body)


#: The table's routes in its order (which answers ``Allow`` on a 405), then ``POST /rpc``.
ROUTES: tuple[Route, ...] = (
    *(_route(method, route) for method in SESSION_API for route in method.http),
    Route("POST", ("rpc",), rpc, True),
)


def not_found(path: str) -> RouteNotFoundError:
    return RouteNotFoundError(f"no route for {path}")


#: ``Retry-After`` (seconds) answered with each retryable status.
RETRY_AFTER_S = {429: 1, 503: 1, 507: 30}


def retry_headers(status: int) -> dict[str, str]:
    """``{"Retry-After": ...}`` for a status a retry can cure (429, 503, 507), else ``{}``."""
    return {"Retry-After": str(RETRY_AFTER_S[status])} if status in RETRY_AFTER_S else {}


#: Statuses of 500 and above that are answered with the error's own type and message.
_NAMED_STATUSES = frozenset({501, 503, 507})


def describe_error(error: BaseException) -> tuple[int, dict[str, Any]]:
    """``(status, body)`` for an error raised while answering a request or frame.

    Errors of :mod:`common.errors` below 500 (and 501, 503, 507, a damaged
    actor's :class:`~common.errors.ActorStorageCorruptError`, which names the
    session, and a cluster log's :class:`~common.errors.RestoreError`, which
    names the actor) are answered as they are; a full disk met outside an
    actor turn is answered as :class:`~common.errors.StorageFullError`.
    Anything else is a bug: logged with its traceback under a short
    reference, and answered ``500 InternalServerError`` naming only that
    reference.
    """
    if classify(error) == "full" and not isinstance(error, StorageFullError):
        error = StorageFullError(f"the disk holding the data folder is full ({fault_detail(error)}); "
                                 "nothing of the request was stored")
    status = status_of(error)
    if status < 500 or status in _NAMED_STATUSES or isinstance(error, (ActorStorageCorruptError, RestoreError)):
        if status >= 500:
            logger.warning("answered %d: %s", status, error)
        return status, payload_for(error)
    reference = uuid.uuid4().hex[:12]
    logger.error("internal error %s", reference, exc_info=error)
    return 500, payload_for(InternalServerError(f"internal server error (reference {reference})"))
