"""The Session API declared once: one table of methods, their parameters, results, errors and HTTP routes.

:data:`SESSION_API` lists every method a session actor serves, in route
order. For each (:class:`ApiMethod`): its name, a one-line summary, its
parameters (:class:`Param`: Python name, JSON-schema type, default), its
result type, the errors it raises on purpose, the default it answers for a
session that was never written (:attr:`ApiMethod.empty`), and its HTTP
routes (:class:`HttpRoute`: verb, path after ``/v1/sessions/{id}/``, where
each argument travels -- :class:`Field` in the path, the query or the body
--, the response key, status 201 for stored messages, 404 for an unknown
message or block).

What is built from it and what is checked against it:

* the server's session routes (:mod:`runtime.server.routes`) are built from
  it: one generic handler reads each route's fields and writes its reply;
* the client's :class:`~runtime.client.http.SessionHandle` methods are one
  line each over :func:`request_for` (the same fields, the other way round);
  their names and signatures are checked by ``tests/runtime/test_api_table.py``;
* the actor class :class:`~actors.session_agent.SessionAgent` is checked by
  that test: the same methods, the same parameters, ``EMPTY_READS`` equal to
  :data:`EMPTY_READS` (``actors`` cannot import ``runtime``);
* the Session (:class:`actors.session.Session`): every public method is in
  the table or in :data:`SESSION_EXCLUDED` with its reason (checked);
* the WebSocket RPC and ``POST /rpc`` call any callable actor method by
  name; the test calls every table method over them and validates each
  result against the table's result schema.

Types are JSON Schema fragments (draft 2020-12, as OpenAPI 3.1 uses them);
named shapes carry a ``title`` so a generator can lift them into
``components/schemas``. This module imports neither the server nor the host
(nor quart, hypercorn, apsw or trio): the client uses it.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

from common.errors import (
    CompactionError,
    ContextBlockError,
    DurableSessionsError,
    InvalidInputError,
    InvalidMessageError,
    MessageNotFoundError,
    NotFoundError,
    NotSupportedError,
    SearchQueryError,
)
from common.shapes import LATEST_LEAF
from common.wire import quote_segment

__all__ = [
    "DEFAULT", "EMPTY_READS", "LIST_DEFAULT_LIMIT", "LIST_LIMIT", "METHODS", "NO_EMPTY", "OMIT", "REQUIRED",
    "SESSION_API", "SESSION_EXCLUDED", "SESSION_PAGE", "SESSION_SUMMARY",
    "ApiMethod", "Field", "HttpRequest", "HttpRoute", "NotFound", "Param", "body", "body_schema",
    "describe_routes", "path", "query", "request_for", "response_schema", "whole_body",
]


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __copy__(self) -> _Marker:
        return self

    def __deepcopy__(self, memo: Any) -> _Marker:
        return self


#: A parameter without a default; a field the request must carry (else 400).
REQUIRED: Any = _Marker("REQUIRED")
#: A field that, when absent, is not passed at all (the method's own default applies).
OMIT: Any = _Marker("OMIT")
#: A field that, when absent, passes its parameter's default (resolved when the table is built).
DEFAULT: Any = _Marker("DEFAULT")
#: :attr:`ApiMethod.empty` of a method that always wakes (and so creates) the actor.
NO_EMPTY: Any = _Marker("NO_EMPTY")

# -- JSON Schema fragments ----------------------------------------------------------------------------

NULL = {"type": "null"}
STRING = {"type": "string"}
BOOLEAN = {"type": "boolean"}
INTEGER = {"type": "integer"}
ANY: Mapping[str, Any] = {}


def _or_null(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, NULL]}


def _array(items: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


def _object(title: str, properties: Mapping[str, Any], *, closed: bool = True) -> dict[str, Any]:
    schema = {"title": title, "type": "object", "required": list(properties), "properties": dict(properties)}
    return {**schema, "additionalProperties": False} if closed else schema


#: A message in the spec's JSON shape (an AI SDK ``UIMessage`` fits); other keys are kept as sent.
MESSAGE = _object("Message", {"id": STRING, "role": STRING, "parts": _array(ANY)}, closed=False)
#: A search hit: the text parts joined by one space (``""`` when found through tool calls only).
SEARCH_HIT = _object("SearchHit", {"id": STRING, "role": STRING, "content": STRING, "createdAt": STRING})
#: The modes of a message search (``actors.session_embeddings.SEARCH_MODES``).
SEARCH_MODE = {"enum": ["text", "semantic", "hybrid"]}
#: How far semantic search has got (``embedder`` null: none configured).
SEARCH_STATUS = _object("SearchStatus", {
    "embedder": {"type": ["string", "null"]}, "dimension": {"type": ["integer", "null"]},
    "embedded": INTEGER, "pending": INTEGER,
})
#: A context block as read (``description`` and ``maxTokens`` null when unset).
CONTEXT_BLOCK = _object("ContextBlock", {
    "label": STRING, "description": {"type": ["string", "null"]}, "content": STRING, "tokens": INTEGER,
    "maxTokens": {"type": ["integer", "null"]}, "writable": BOOLEAN, "isSkill": BOOLEAN, "isSearchable": BOOLEAN,
})
#: A stored compaction overlay (``createdAt`` ISO-8601 UTC with milliseconds).
COMPACTION = _object("Compaction", {
    "id": STRING, "summary": STRING, "fromMessageId": STRING, "toMessageId": STRING, "createdAt": STRING,
})
#: What a manual compaction stored.
COMPACT_RESULT = _object("CompactResult", {"fromMessageId": STRING, "toMessageId": STRING, "summary": STRING})
#: The newest messages that fit a byte budget.
RECENT_HISTORY = _object("RecentHistory", {
    "messages": _array(MESSAGE), "truncated": BOOLEAN, "totalContentBytes": INTEGER,
})
#: ``raw``: ``{name: {description, inputSchema}}``; ``openai`` / ``anthropic``: those APIs' ``tools`` lists.
TOOLS = {"title": "Tools", "anyOf": [
    {"type": "object", "additionalProperties": _object("RawTool", {"description": STRING, "inputSchema": ANY})},
    _array({"type": "object"}),
]}
#: The free-form metadata object of a session (at most 64 KiB of JSON).
METADATA = {"title": "Metadata", "type": "object"}
#: The parent of an append: a message id, or null for a new root.
PARENT_ID = {"type": ["string", "null"]}
#: The formats of ``tools`` (``actors.session_agent.TOOL_FORMATS``).
TOOL_FORMAT = {"enum": ["raw", "openai", "anthropic"]}
#: The search limit a query string may ask for (over RPC any integer >= 0).
QUERY_LIMIT = {"type": "integer", "minimum": 0, "maximum": 10_000}
#: The page size a query string may ask for (over RPC any integer >= 1).
PAGE_LIMIT = {"type": "integer", "minimum": 1, "maximum": 10_000}

# -- finding sessions: GET /v1/sessions and GET /v1/sessions/{id} (runtime.server.listing) -------------------

#: Epoch-millisecond times as ISO-8601 UTC text with milliseconds (``2026-01-05T10:00:00.000Z``).
TIMESTAMP = {"type": "string", "format": "date-time"}
#: One session as the host knows it (``GET /v1/sessions``, ``GET /v1/sessions/{id}``).
SESSION_SUMMARY = _object("SessionSummary", {
    "id": STRING, "messages": INTEGER, "compactions": INTEGER, "compactedThrough": {"type": ["string", "null"]},
    "createdAt": TIMESTAMP, "updatedAt": TIMESTAMP, "state": {"enum": ["ok", "quarantined"]},
    "problem": {"type": ["string", "null"]}, "active": BOOLEAN,
})
#: A page of the session listing; ``cursor`` reads the next page (``null``: this was the last).
SESSION_PAGE = _object("SessionPage", {"sessions": _array(SESSION_SUMMARY), "cursor": {"type": ["string", "null"]}})
#: ``limit`` of the session listing (default :data:`LIST_DEFAULT_LIMIT`).
LIST_LIMIT: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": 1000}
LIST_DEFAULT_LIMIT = 50

# -- the shapes of the table -------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """One parameter of a method, as the actor and the client take it.

    ``keyword_only`` marks what the Session and the client take by keyword
    only; the actor takes every parameter positionally or by keyword (an
    RPC ``params`` list fills them in order). ``actor_only``: the actor's own
    parameter, which the Session method of that name does not take.
    """

    name: str
    schema: Mapping[str, Any]
    default: Any = REQUIRED
    keyword_only: bool = False
    actor_only: bool = False


@dataclass(frozen=True)
class Field:
    """Where one argument travels in an HTTP request, and what its absence means.

    Attributes:
        source: ``"path"`` (a ``{wire}`` segment of the route), ``"query"``,
            ``"body"`` (a key of the body object) or ``"whole-body"`` (the
            body itself, any JSON value).
        wire: the name on the wire (``parentId``, ``ids``, ``q``).
        param: the :class:`Param` it fills.
        absent: when the request lacks it (a query value ``""`` counts as
            absent, except for a required one, which passes ``""``):
            :data:`REQUIRED` -> 400 ``error``, :data:`OMIT` -> not passed,
            :data:`DEFAULT` -> the parameter's default, else this value.
        error: the class of the 400 for a missing or mismatched value.
        check: the server refuses a value whose JSON type is not the schema's
            (``parentId must be a string or null, not int``).
        key: path fields: the value is ``param[key]`` (``PUT messages/{message_id}``
            fills the body message's ``id``, and refuses another).
        item: path fields: the value is the one item of the list ``param``.
        fallback: the client sends a value no path segment can carry (not a
            non-empty string) through ``POST /rpc`` instead.
        schema: the value's schema on the wire when narrower than the parameter's.
    """

    source: Literal["path", "query", "body", "whole-body"]
    wire: str
    param: str
    absent: Any = DEFAULT
    error: type[InvalidInputError] = InvalidInputError
    check: bool = False
    key: str | None = None
    item: bool = False
    fallback: bool = False
    schema: Mapping[str, Any] | None = None

    def missing(self) -> InvalidInputError:
        """The error for a request without this field."""
        if self.source == "query":
            return self.error(f"query parameter {self.wire!r} is required", field=self.wire)
        return self.error(f"{self.wire} is missing", field=self.wire)


def path(wire: str, param: str | None = None, **options: Any) -> Field:
    """A ``{wire}`` segment of the route's path."""
    return Field("path", wire, param or wire, **options)


def query(wire: str, param: str | None = None, **options: Any) -> Field:
    """A query-string value (``?wire=``)."""
    return Field("query", wire, param or wire, **options)


def body(wire: str, param: str | None = None, **options: Any) -> Field:
    """A key of the body object."""
    return Field("body", wire, param or wire, **options)


def whole_body(param: str, **options: Any) -> Field:
    """The whole body, any JSON value."""
    return Field("whole-body", param, param, **options)


@dataclass(frozen=True)
class NotFound:
    """A result that the route answers with a 404 instead: ``when`` (``None``, ``0``) -> ``make(path value)``.

    The client catches ``catch`` (the class ``make`` raises) and returns ``when`` again.
    """

    when: Any
    wire: str
    make: Callable[[str], NotFoundError]
    catch: type[NotFoundError]

    def matches(self, result: Any) -> bool:
        return result is None if self.when is None else result == self.when


def _block_not_found(label: str) -> NotFoundError:
    return NotFoundError(f'Block "{label}" not found', kind="context_block", key=label)


@dataclass(frozen=True)
class HttpRoute:
    """One HTTP route of a method: ``verb`` and ``path`` after its table's prefix
    (``/v1/sessions/{id}/`` here, ``/v1/managers/{id}/`` in :mod:`runtime.manager_api`).

    The reply is an object: the ``echo`` keys (each a wire value, ``message.id``
    reaching into one), then ``result_key`` holding the result, then the
    ``constant`` pairs. ``created``: status 201 when the result reports a
    stored message (``True``, or a list holding ``True``), else 200.
    """

    verb: Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
    path: str
    fields: tuple[Field, ...] = ()
    result_key: str | None = None
    echo: tuple[tuple[str, str], ...] = ()
    constant: tuple[tuple[str, Any], ...] = ()
    created: bool = False
    not_found: NotFound | None = None

    @property
    def pattern(self) -> tuple[str, ...]:
        return tuple(self.path.split("/"))

    @property
    def has_body(self) -> bool:
        return self.verb in ("POST", "PUT", "PATCH")

    def field(self, wire: str) -> Field:
        return next(f for f in self.fields if f.wire == wire)


@dataclass(frozen=True)
class ApiMethod:
    """One method of the Session API (see the module docstring).

    ``actor_only``: the actor implements it itself (no Session method of
    that name). ``empty``: what it answers for a session never written,
    without creating it, or :data:`NO_EMPTY` when it must wake the actor.
    ``empty_missing``: a parameter naming a message that must be an entry
    (``get_history``'s ``before``): given, a session never written answers
    :class:`MessageNotFoundError` for it instead of ``empty``, as the empty
    actor would.
    The client uses the first route; a method without routes is called
    through ``POST /rpc``.
    """

    name: str
    summary: str
    params: tuple[Param, ...]
    result: Mapping[str, Any]
    errors: tuple[type[DurableSessionsError], ...] = ()
    http: tuple[HttpRoute, ...] = ()
    empty: Any = NO_EMPTY
    actor_only: bool = False
    empty_missing: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "http", tuple(self._resolved(route) for route in self.http))

    def _resolved(self, route: HttpRoute) -> HttpRoute:
        """``route`` with each :data:`DEFAULT` made the parameter's default (or :data:`REQUIRED`), checked."""
        params = {p.name: p for p in self.params}
        fields = []
        for field in route.fields:
            if field.param not in params:
                raise ValueError(f"{self.name} {route.path}: {field.wire} fills no parameter")
            if field.absent is DEFAULT:
                field = dataclasses.replace(field, absent=params[field.param].default)
            fields.append(field)
        filled = [f.param for f in fields if f.key is None]
        if sorted(filled) != sorted(params):
            raise ValueError(f"{self.name} {route.path}: fills {filled}, not each of {list(params)} once")
        return dataclasses.replace(route, fields=tuple(fields))

    @property
    def client_route(self) -> HttpRoute | None:
        return self.http[0] if self.http else None

    def signature(self, *, client: bool = False) -> inspect.Signature:
        """The Python signature without ``self``: the actor's, or (``client``) the client handle's."""
        def kind(param: Param) -> inspect._ParameterKind:
            keyword = client and param.keyword_only
            return inspect.Parameter.KEYWORD_ONLY if keyword else inspect.Parameter.POSITIONAL_OR_KEYWORD
        return inspect.Signature([
            inspect.Parameter(p.name, kind(p), default=inspect.Parameter.empty if p.default is REQUIRED else p.default)
            for p in self.params
        ])


# -- the table ---------------------------------------------------------------------------------------

_MESSAGE_ID = Param("message_id", STRING)
_LEAF_ID = Param("leaf_id", _or_null(STRING), default=None)
_LABEL = Param("label", STRING)
_CONTENT = Param("content", STRING)
_PARENT = Param("parent_id", PARENT_ID, default=LATEST_LEAF)
_PARENT_FIELD = body("parentId", "parent_id", absent=OMIT, check=True)
_MESSAGES = _array(MESSAGE)
#: ``get_history``'s paging options (actors/history_pages.py): keyword-only in the Session and the client.
_PAGE_PARAMS = (
    Param("limit", {"type": ["integer", "null"], "minimum": 1}, default=None, keyword_only=True),
    Param("before", _or_null(STRING), default=None, keyword_only=True),
    Param("overlays", BOOLEAN, default=True, keyword_only=True),
)


def _method(name: str, summary: str, params: tuple[Param, ...], result: Mapping[str, Any],
            errors: tuple[type[DurableSessionsError], ...] = (), *routes: HttpRoute, **options: Any) -> ApiMethod:
    return ApiMethod(name, summary, params, result, errors, routes, **options)


#: Every method of the Session API, in route order (the order answers ``Allow`` on a 405).
SESSION_API: tuple[ApiMethod, ...] = (
    # -- messages
    _method("append_message", "Append a message under a parent (omitted: the latest leaf; null: a new root).",
            (Param("message", MESSAGE), _PARENT), BOOLEAN, (InvalidMessageError, InvalidInputError),
            HttpRoute("POST", "messages", (body("message", error=InvalidMessageError), _PARENT_FIELD),
                      result_key="inserted", echo=(("id", "message.id"),), created=True)),
    _method("get_history", "The path root -> leaf (default: the latest leaf), compaction overlays applied; "
            "or one page of it: the newest limit entries before the entry before, root-side first.",
            (_LEAF_ID, *_PAGE_PARAMS), _MESSAGES, (InvalidInputError, MessageNotFoundError),
            HttpRoute("GET", "messages", (query("leaf", "leaf_id"), query("limit", schema=PAGE_LIMIT),
                                          query("before"), query("overlays")), result_key="messages"), empty=[],
            empty_missing="before"),
    _method("clear_messages", "Delete every message and compaction; unload all skills; refresh the prompt.",
            (), NULL, (),
            HttpRoute("DELETE", "messages", constant=(("cleared", True),))),
    _method("append_messages", "Append messages as one chain in one transaction (all or nothing).",
            (Param("messages", _MESSAGES), _PARENT), _array(BOOLEAN), (InvalidMessageError, InvalidInputError),
            HttpRoute("POST", "messages:batch", (body("messages"), _PARENT_FIELD), result_key="inserted",
                      created=True)),
    _method("get_latest_leaf", "The latest leaf message, or null in an empty session.",
            (), _or_null(MESSAGE), (),
            HttpRoute("GET", "messages:leaf", result_key="message"), empty=None),
    _method("get_path_length", "Stored messages on the path to the leaf (no overlays).",
            (_LEAF_ID,), INTEGER, (InvalidInputError,),
            HttpRoute("GET", "messages:count", (query("leaf", "leaf_id"),), result_key="count"), empty=0),
    _method("get_message", "The stored message, or null.",
            (_MESSAGE_ID,), _or_null(MESSAGE), (InvalidInputError,),
            HttpRoute("GET", "messages/{message_id}", (path("message_id", fallback=True),), result_key="message",
                      not_found=NotFound(None, "message_id", MessageNotFoundError, MessageNotFoundError)),
            empty=None),
    _method("update_message", "Replace the stored message with the same id (its place in the tree is kept).",
            (Param("message", MESSAGE),), NULL, (InvalidMessageError, MessageNotFoundError),
            HttpRoute("PUT", "messages/{message_id}", (
                body("message", error=InvalidMessageError),
                path("message_id", "message", key="id", error=InvalidMessageError, fallback=True),
            ), echo=(("id", "message_id"),))),
    _method("delete_messages", "Delete these messages (children move up to the parent); how many existed.",
            (Param("message_ids", _array(STRING)),), INTEGER, (InvalidInputError,),
            HttpRoute("POST", "messages:delete", (body("ids", "message_ids"),), result_key="deleted"),
            HttpRoute("DELETE", "messages/{message_id}", (path("message_id", "message_ids", item=True),),
                      result_key="deleted",
                      not_found=NotFound(0, "message_id", MessageNotFoundError, MessageNotFoundError))),
    _method("get_branches", "The children of a message, oldest first.",
            (_MESSAGE_ID,), _MESSAGES, (InvalidInputError,),
            HttpRoute("GET", "messages/{message_id}/branches", (path("message_id", fallback=True),),
                      result_key="messages"), empty=[]),
    _method("search", "Search the stored messages by words (mode text, the default), meaning (semantic) "
            "or both (hybrid: reciprocal rank fusion), best first.",
            (Param("query", STRING), Param("limit", {"type": "integer", "minimum": 0}, default=20,
                                           keyword_only=True),
             Param("mode", SEARCH_MODE, default="text", keyword_only=True)),
            _array(SEARCH_HIT), (InvalidInputError, SearchQueryError, NotSupportedError),
            HttpRoute("GET", "search", (query("q", "query"), query("limit", schema=QUERY_LIMIT), query("mode")),
                      result_key="results"), empty=[]),
    _method("search_status", "Semantic search's progress: the embedder's model, the vectors' dimension, "
            "messages embedded and messages still pending (not yet found by semantic search).",
            (), SEARCH_STATUS, (),
            HttpRoute("GET", "search:status", result_key="status")),
    _method("reembed", "Drop the session's vectors and embed every message again with the configured embedder "
            "(after the reply); the search status, everything pending.",
            (), SEARCH_STATUS, (NotSupportedError,),
            HttpRoute("POST", "search:reembed", result_key="status")),
    # -- metadata
    _method("get_metadata", "The session's metadata object ({} until set).",
            (), METADATA, (), actor_only=True),
    _method("set_metadata", "Replace the session's metadata with a JSON object (at most 64 KiB); returns it.",
            (Param("metadata", METADATA),), METADATA, (InvalidInputError,), actor_only=True),
    # -- context blocks and the system prompt
    _method("get_context_blocks", "Every context block, in prompt order.",
            (), _array(CONTEXT_BLOCK), (),
            HttpRoute("GET", "context", result_key="blocks")),
    _method("get_context_block", "One context block, or null.",
            (_LABEL,), _or_null(CONTEXT_BLOCK), (InvalidInputError,),
            HttpRoute("GET", "context/{label}", (path("label"),), result_key="block",
                      not_found=NotFound(None, "label", _block_not_found, NotFoundError))),
    _method("replace_context_block", "Replace a writable block's content; the new block.",
            (_LABEL, _CONTENT), CONTEXT_BLOCK, (ContextBlockError, InvalidInputError),
            HttpRoute("PUT", "context/{label}", (path("label"), body("content", absent=None)), result_key="block")),
    _method("append_context_block", "Append to a writable block (a newline between when needed); the new block.",
            (_LABEL, _CONTENT), CONTEXT_BLOCK, (ContextBlockError, InvalidInputError),
            HttpRoute("POST", "context/{label}:append", (path("label"), body("content", absent=None)),
                      result_key="block")),
    _method("freeze_system_prompt", "The frozen system prompt (rendered and stored on first use).",
            (), STRING, (),
            HttpRoute("GET", "system-prompt", result_key="prompt")),
    _method("refresh_system_prompt", "Re-render the system prompt from the blocks now; store and return it.",
            (), STRING, (),
            HttpRoute("POST", "system-prompt:refresh", result_key="prompt")),
    # -- tools and compaction
    _method("tools", "The AI tools of the current blocks, raw or as OpenAI / Anthropic tool lists.",
            (Param("format", TOOL_FORMAT, default="raw", actor_only=True),), TOOLS, (InvalidInputError,),
            HttpRoute("GET", "tools", (query("format"),), result_key="tools")),
    _method("execute_tool", "Run a tool with its arguments; its result text (tool errors are 'Error: ...').",
            (Param("name", STRING), Param("args", ANY)), STRING, (InvalidInputError, NotFoundError),
            HttpRoute("POST", "tools/{name}", (path("name"), whole_body("args", absent={})), result_key="result"),
            actor_only=True),
    _method("compact", "Compact now; what was stored, or null when nothing was compacted.",
            (), _or_null(COMPACT_RESULT), (CompactionError,),
            HttpRoute("POST", "compact", result_key="result")),
    _method("get_compactions", "Every compaction record, oldest first.",
            (), _array(COMPACTION), (),
            HttpRoute("GET", "compactions", result_key="compactions"), empty=[]),
    _method("add_compaction", "Store an overlay from_id..to_id -> summary; the compaction record.",
            (Param("summary", STRING), Param("from_id", STRING), Param("to_id", STRING)), COMPACTION,
            (InvalidInputError,)),
    _method("estimate_tokens", "The estimated tokens of history plus system prompt (what auto-compaction compares).",
            (), INTEGER, ()),
    _method("get_recent_history", "The newest messages that fit max_bytes of stored JSON.",
            (Param("max_bytes", {"type": "number"}), Param("min_recent", {"type": "number"}, default=1)),
            RECENT_HISTORY, (InvalidInputError,)),
    # -- skills
    _method("get_loaded_skill_keys", "Loaded skills as 'label:key', in load order.",
            (), _array(STRING), (),
            HttpRoute("GET", "skills", result_key="loaded"), empty=[]),
    _method("unload_skill", "Unload a skill (its stored output becomes a marker); false if it was not loaded.",
            (_LABEL, Param("key", STRING)), BOOLEAN, (InvalidInputError,),
            HttpRoute("DELETE", "skills/{label}/{key}", (path("label"), path("key")), result_key="unloaded")),
)

#: :data:`SESSION_API` by name.
METHODS: Mapping[str, ApiMethod] = MappingProxyType({method.name: method for method in SESSION_API})

#: What each read answers for a session never written (``SessionAgent.EMPTY_READS`` must equal it).
EMPTY_READS: Mapping[str, Any] = MappingProxyType(
    {m.name: m.empty for m in SESSION_API if m.empty is not NO_EMPTY}
)

#: Public methods of :class:`actors.session.Session` deliberately not in the API, and why.
SESSION_EXCLUDED: Mapping[str, str] = MappingProxyType({
    **dict.fromkeys(
        ("create", "for_session", "with_context", "with_cached_prompt", "on_compaction", "compact_after",
         "on_compaction_error", "with_row_limit", "with_broadcast_id", "with_embedder"),
        "a builder: the actor's configuration sets it up",
    ),
    "seed_messages": "synchronous, for a SessionManager fork inside its own transaction",
    "broadcast_status": "for SessionManager after its own transactions (fork, split, delete)",
    "prepared_rows": "stored rows for a writer's own transaction (a SessionManager fork); writes nothing",
    "raw_path_messages": "the stored path without overlays, for the skill restore",
    "raw_path_chunks": "the stored path without overlays in bounded chunks, for the skill restore",
    "get_history_row_stats": "per-row sizes for in-process callers; not served",
    "add_context": "takes a provider object, which is no wire data",
    "embed_pending": "upkeep the session actor runs from its alarm after a write, not a call",
    "remove_context": "blocks are the actor's configuration, not a call",
})

# -- helpers for the server, the client and documents ----------------------------------------------------


class HttpRequest(NamedTuple):
    """One request of a route: ``path`` after ``/v1/sessions/{id}/``, ``body`` (``None``: none)
    and ``query`` (``None`` values are not sent)."""

    verb: str
    path: str
    body: Any
    query: dict[str, Any]


def _is_segment(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _path_value(field: Field, value: Any) -> Any:
    if field.key is not None:
        return value.get(field.key) if isinstance(value, dict) else None
    if field.item:
        return value[0]
    return value


def request_for(method: ApiMethod, route: HttpRoute, arguments: Mapping[str, Any]) -> HttpRequest | None:
    """The request of ``route`` for a call of ``method`` with ``arguments`` (by parameter name; missing
    ones take their defaults), or ``None`` when a ``fallback`` path value cannot be one path segment.

    Raises:
        TypeError: a path value that is not a string (from :func:`~common.wire.quote_segment`).
    """
    values = {p.name: p.default for p in method.params} | dict(arguments)
    segments = []
    for part in route.pattern:
        if not part.startswith("{"):
            segments.append(part)
            continue
        wire, _, suffix = part[1:].partition("}")
        field = route.field(wire)
        value = _path_value(field, values[field.param])
        if field.fallback and not _is_segment(value):
            return None
        segments.append(quote_segment(value) + suffix)
    sent = None
    for field in route.fields:
        value = values[field.param]
        if field.source == "whole-body":
            sent = value
        elif field.source == "body" and not (field.absent is OMIT and value is _default(method, field.param)):
            sent = {} if sent is None else sent
            sent[field.wire] = list(value) if _schema(method, field).get("type") == "array" else value
    queried = {f.wire: values[f.param] for f in route.fields if f.source == "query"}
    return HttpRequest(route.verb, "/".join(segments), sent, queried)


def _default(method: ApiMethod, name: str) -> Any:
    return next(p.default for p in method.params if p.name == name)


def _optional(method: ApiMethod, field: Field) -> bool:
    """Whether a call without ``field`` is complete (not: the server passes null and the actor refuses it)."""
    return field.absent is OMIT or _default(method, field.param) is not REQUIRED


def _schema(method: ApiMethod, field: Field) -> Mapping[str, Any]:
    """The field's schema on the wire (a ``key`` field: that key of the parameter's schema)."""
    if field.schema is not None:
        return field.schema
    schema = next(p.schema for p in method.params if p.name == field.param)
    if field.key is not None:
        keyed: Mapping[str, Any] = schema["properties"][field.key]
        return keyed
    if field.item:
        items: Mapping[str, Any] = schema["items"]
        return items
    return schema


def _without_null(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    options = schema.get("anyOf")
    if options is not None and NULL in options:
        rest = [s for s in options if s != NULL]
        return rest[0] if len(rest) == 1 else {"anyOf": rest}
    return schema


def response_schema(method: ApiMethod, route: HttpRoute) -> dict[str, Any]:
    """The JSON schema of the route's successful reply body."""
    properties: dict[str, Any] = {}
    for key, source in route.echo:
        wire, _, inner = source.partition(".")
        schema = _schema(method, route.field(wire))
        properties[key] = schema["properties"][inner] if inner else schema
    if route.result_key is not None:
        properties[route.result_key] = _without_null(method.result) if route.not_found else method.result
    for key, value in route.constant:
        properties[key] = {"const": value}
    return {"type": "object", "required": list(properties), "properties": properties, "additionalProperties": False}


def body_schema(method: ApiMethod, route: HttpRoute) -> Mapping[str, Any] | None:
    """The JSON schema of the route's request body, or ``None`` when it takes none."""
    keyed = {f.param: f.key for f in route.fields if f.key is not None}
    properties: dict[str, Any] = {}
    required = []
    for field in route.fields:
        if field.source == "whole-body":
            return _schema(method, field)
        if field.source != "body":
            continue
        schema = dict(_schema(method, field))
        if field.param in keyed:  # filled from the path when absent: no longer the named shape
            schema["required"] = [k for k in schema.get("required", ()) if k != keyed[field.param]]
            schema.pop("title", None)
        properties[field.wire] = schema
        if not _optional(method, field):
            required.append(field.wire)
    if not properties:
        return None
    return {"type": "object", "required": required, "properties": properties}


def http_routes(table: tuple[ApiMethod, ...] | None = None) -> Iterator[tuple[ApiMethod, HttpRoute]]:
    """Every ``(method, route)`` of ``table`` (default :data:`SESSION_API`), in table order."""
    for method in SESSION_API if table is None else table:
        for route in method.http:
            yield method, route


def _describe(method: ApiMethod, route: HttpRoute) -> tuple[str, str, str, str]:
    queried = [f.wire for f in route.fields if f.source == "query"]
    where = f"``/{route.path}{'?' + '&'.join(f'{q}=' for q in queried) if queried else ''}``"
    if any(f.source == "whole-body" for f in route.fields):
        sent = "the arguments"
    else:
        keys = [f.wire + ("?" if _optional(method, f) else "") for f in route.fields if f.source == "body"]
        sent = f"``{{{', '.join(keys)}}}``" if keys else ""
    keys = [key for key, _ in route.echo] + ([route.result_key] if route.result_key else [])
    keys += [f"{key}: {str(value).lower()}" for key, value in route.constant]
    answer = f"``{method.name}`` -> ``{{{', '.join(keys)}}}``"
    if route.created:
        answer += " 201 if stored"
    if route.not_found is not None:
        answer += f" 404 if {'null' if route.not_found.when is None else route.not_found.when}"
    if method.empty is not NO_EMPTY:
        answer += " *"
    return route.verb, where, sent, answer


def describe_routes(table: tuple[ApiMethod, ...] | None = None, prefix: str = "/v1/sessions/{id}") -> str:
    """The routes of ``table`` (default :data:`SESSION_API`) as a reStructuredText table
    (``runtime.server.routes`` and ``runtime.server.managers`` show theirs)."""
    rows = [("method", f"path (after ``{prefix}``)", "body", "actor call -> reply")]
    rows += [_describe(method, route) for method, route in http_routes(table)]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    rule = "  ".join("=" * w for w in widths)
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join([rule, lines[0], rule, *lines[1:], rule])
