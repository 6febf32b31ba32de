"""The manager API declared once: the SessionManager's methods over HTTP, in the shapes of :mod:`runtime.api`.

A manager is one actor (``ManagerAgent``, namespace ``"managers"``) holding
many named sessions, one per end user for instance. Its routes live under
``/v1/managers/{manager_id}/`` (:data:`MANAGERS_PREFIX`); :data:`MANAGER_API`
lists its methods as :class:`~runtime.api.ApiMethod` values, with the same
parameters, result schemas, errors and routes as the Session API table, and
is used the same way:

* the server's manager routes (:mod:`runtime.server.managers`) are built
  from it with the generic handler of :mod:`runtime.server.routes`;
* the client's :class:`~runtime.client.managers.ManagerHandle` methods are
  one line each over :func:`runtime.api.request_for`; methods without a
  route go through ``POST /v1/managers/{id}/rpc``;
* ``tests/runtime/test_manager_api_table.py`` checks it against
  :class:`actors.manager.SessionManager` (every public method in the table
  or in :data:`MANAGER_EXCLUDED` with its reason, same parameters), against
  ``ManagerAgent`` (same methods and signatures, ``EMPTY_READS``) and
  against the client handle.

Each managed session also answers the whole Session API under
``/v1/managers/{manager_id}/sessions/{session_id}/`` -- the routes of
:data:`runtime.api.SESSION_API`, unchanged -- plus ``POST .../rpc``.

Like :mod:`runtime.api`, this module imports neither the server nor the
host: the client uses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from common.errors import InvalidInputError, MessageNotFoundError, NotFoundError, SearchQueryError
from common.shapes import LATEST_LEAF
from runtime.api import (
    COMPACTION,
    INTEGER,
    MESSAGE,
    NO_EMPTY,
    NULL,
    PARENT_ID,
    QUERY_LIMIT,
    SEARCH_MODE,
    STRING,
    TOOL_FORMAT,
    TOOLS,
    ApiMethod,
    HttpRoute,
    NotFound,
    Param,
    _array,
    _object,
    _or_null,
    body,
    path,
    query,
    whole_body,
)

__all__ = [
    "MANAGERS_PREFIX", "MANAGER_API", "MANAGER_EMPTY_READS", "MANAGER_EXCLUDED", "MANAGER_HIT", "MANAGER_METHODS",
    "SESSION_ROW",
]

#: Prefix of every manager route (``/v1/managers/{manager_id}/...``).
MANAGERS_PREFIX = "/v1/managers/"

_NULLABLE_TEXT = {"type": ["string", "null"]}

#: A registry row: the spec's ``assistant_sessions`` columns (times UTC ``YYYY-MM-DD HH:MM:SS.SSS``).
SESSION_ROW = _object("SessionRow", {
    "id": STRING, "name": STRING, "parent_session_id": _NULLABLE_TEXT, "model": _NULLABLE_TEXT,
    "source": _NULLABLE_TEXT, "input_tokens": INTEGER, "output_tokens": INTEGER,
    "estimated_cost": {"type": "number"}, "end_reason": _NULLABLE_TEXT, "created_at": STRING, "updated_at": STRING,
})
#: A search hit across the manager's sessions: a Session search hit plus its ``sessionId``.
MANAGER_HIT = _object("ManagerSearchHit", {
    "id": STRING, "role": STRING, "content": STRING, "createdAt": STRING, "sessionId": STRING,
})


def _session_not_found(session_id: str) -> NotFoundError:
    return NotFoundError(f"session {session_id!r} not found", kind="session", key=session_id)


_SESSION_ID = Param("session_id", STRING)
_SESSION_PATH = path("session_id")
_NAME = Param("name", STRING)
_PARENT = Param("parent_id", PARENT_ID, default=LATEST_LEAF)
_OPTIONAL_TEXT = _or_null(STRING)
_MESSAGES = _array(MESSAGE)
_ROW_ERRORS = (NotFoundError, InvalidInputError)


def _method(name: str, summary: str, params: tuple[Param, ...], result: Mapping[str, Any],
            errors: tuple[type, ...] = (), *routes: HttpRoute, **options: Any) -> ApiMethod:
    return ApiMethod(name, summary, params, result, errors, routes, **options)


#: Every method of a manager, in route order (the order answers ``Allow`` on a 405).
MANAGER_API: tuple[ApiMethod, ...] = (
    # -- the registry
    _method("create", "Register a new session (a random UUID id); its row.",
            (_NAME, Param("parent_session_id", _OPTIONAL_TEXT, default=None, keyword_only=True),
             Param("model", _OPTIONAL_TEXT, default=None, keyword_only=True),
             Param("source", _OPTIONAL_TEXT, default=None, keyword_only=True)),
            SESSION_ROW, (InvalidInputError,),
            HttpRoute("POST", "sessions", (body("name"), body("parentSessionId", "parent_session_id"),
                                           body("model"), body("source")),
                      result_key="session", created=True)),
    _method("list", "Every session row, most recently updated first.",
            (), _array(SESSION_ROW), (),
            HttpRoute("GET", "sessions", result_key="sessions"), empty=[]),
    _method("get", "The session's row, or null when it is not registered.",
            (_SESSION_ID,), _or_null(SESSION_ROW), (InvalidInputError,),
            HttpRoute("GET", "sessions/{session_id}", (_SESSION_PATH,), result_key="session",
                      not_found=NotFound(None, "session_id", _session_not_found, NotFoundError)),
            empty=None),
    _method("rename", "Set the session's name; its new row.",
            (_SESSION_ID, _NAME), SESSION_ROW, _ROW_ERRORS,
            HttpRoute("PATCH", "sessions/{session_id}", (_SESSION_PATH, body("name")), result_key="session")),
    _method("delete", "Delete the session and every row it owns (messages, compactions, blocks, metadata).",
            (_SESSION_ID,), NULL, _ROW_ERRORS,
            HttpRoute("DELETE", "sessions/{session_id}", (_SESSION_PATH,), constant=(("deleted", True),))),
    _method("fork", "A new session holding the history up to at_message_id (new message ids); its row.",
            (_SESSION_ID, Param("at_message_id", STRING), _NAME), SESSION_ROW,
            (NotFoundError, MessageNotFoundError, InvalidInputError),
            HttpRoute("POST", "sessions/{session_id}:fork",
                      (_SESSION_PATH, body("atMessageId", "at_message_id"), body("name")),
                      result_key="session", created=True)),
    _method("compact_and_split", "End the session and continue in a new one that starts from summary; its row.",
            (_SESSION_ID, Param("summary", STRING), Param("name", _OPTIONAL_TEXT, default=None)), SESSION_ROW,
            _ROW_ERRORS,
            HttpRoute("POST", "sessions/{session_id}:compact-and-split",
                      (_SESSION_PATH, body("summary"), body("name")), result_key="session", created=True)),
    _method("add_usage", "Add tokens and cost to the session's row; its new row.",
            (_SESSION_ID, Param("input_tokens", {"type": "integer", "minimum": 0}),
             Param("output_tokens", {"type": "integer", "minimum": 0}), Param("cost", {"type": "number", "minimum": 0})),
            SESSION_ROW, _ROW_ERRORS,
            HttpRoute("POST", "sessions/{session_id}:add-usage",
                      (_SESSION_PATH, body("inputTokens", "input_tokens"), body("outputTokens", "output_tokens"),
                       body("cost")), result_key="session")),
    # -- search and tools
    _method("search", "Search every session's stored messages by words (mode text, the default), meaning "
            "(semantic) or both (hybrid: reciprocal rank fusion), best first.",
            (Param("query", STRING), Param("limit", {"type": "integer", "minimum": 0}, default=20,
                                           keyword_only=True),
             Param("mode", SEARCH_MODE, default="text", keyword_only=True)),
            _array(MANAGER_HIT), (InvalidInputError, SearchQueryError),
            HttpRoute("GET", "search", (query("q", "query"), query("limit", schema=QUERY_LIMIT), query("mode")),
                      result_key="results"), empty=[]),
    _method("tools", "The manager's tools (session_search), raw or as OpenAI / Anthropic tool lists.",
            (Param("format", TOOL_FORMAT, default="raw", actor_only=True),), TOOLS, (InvalidInputError,),
            HttpRoute("GET", "tools", (query("format"),), result_key="tools")),
    _method("execute_tool", "Run a manager tool with its arguments; its result text (tool errors are 'Error: ...').",
            (Param("name", STRING), Param("args", {})), STRING, (InvalidInputError, NotFoundError),
            HttpRoute("POST", "tools/{name}", (path("name"), whole_body("args", absent={})), result_key="result"),
            actor_only=True),
    # -- messages of one session (over HTTP, the session's own routes serve the same)
    _method("append", "Append a message to the session (omitted parent: its latest leaf); the message id.",
            (_SESSION_ID, Param("message", MESSAGE), _PARENT), STRING, _ROW_ERRORS),
    _method("upsert", "Update the message if the session holds its id, else append it; its id.",
            (_SESSION_ID, Param("message", MESSAGE), _PARENT), STRING, (*_ROW_ERRORS, MessageNotFoundError)),
    _method("append_all", "Append messages as one chain in one transaction; the last id (null: none given).",
            (_SESSION_ID, Param("messages", _MESSAGES), _PARENT), _or_null(STRING), _ROW_ERRORS),
    _method("get_history", "The session's path root -> leaf, compaction overlays applied.",
            (_SESSION_ID, Param("leaf_id", _OPTIONAL_TEXT, default=None)), _MESSAGES, _ROW_ERRORS),
    _method("get_message_count", "Stored messages on the path to the session's latest leaf.",
            (_SESSION_ID,), INTEGER, _ROW_ERRORS),
    _method("get_branches", "The children of a message of the session, oldest first.",
            (_SESSION_ID, Param("message_id", STRING)), _MESSAGES, _ROW_ERRORS),
    _method("clear_messages", "Delete the session's messages and compactions (its row stays).",
            (_SESSION_ID,), NULL, _ROW_ERRORS),
    _method("delete_messages", "Delete these messages of the session; how many existed.",
            (_SESSION_ID, Param("message_ids", _array(STRING))), INTEGER, _ROW_ERRORS),
    _method("add_compaction", "Store an overlay from_id..to_id -> summary in the session; the record.",
            (_SESSION_ID, Param("summary", STRING), Param("from_id", STRING), Param("to_id", STRING)), COMPACTION,
            _ROW_ERRORS),
    _method("get_compactions", "The session's compaction records, oldest first.",
            (_SESSION_ID,), _array(COMPACTION), _ROW_ERRORS),
)

#: :data:`MANAGER_API` by name.
MANAGER_METHODS: Mapping[str, ApiMethod] = MappingProxyType({method.name: method for method in MANAGER_API})

#: What each read answers for a manager never written (``ManagerAgent.EMPTY_READS`` must equal it).
MANAGER_EMPTY_READS: Mapping[str, Any] = MappingProxyType(
    {m.name: m.empty for m in MANAGER_API if m.empty is not NO_EMPTY}
)

#: Public methods of :class:`actors.manager.SessionManager` deliberately not in the API, and why.
MANAGER_EXCLUDED: Mapping[str, str] = MappingProxyType({
    **dict.fromkeys(
        ("with_context", "with_cached_prompt", "on_compaction", "compact_after", "on_compaction_error",
         "with_searchable_history", "with_embedder"),
        "a builder: the actor's SessionConfig sets every managed session up",
    ),
    **dict.fromkeys(
        ("embed_pending", "has_pending"),
        "the manager actor's own upkeep (its alarm embeds what is pending); each session's "
        "search:status and search:reembed routes say and redo it",
    ),
    "get_session": "gives a live Session; over HTTP a managed session is a SessionHandle on the Session API "
                   "routes under /v1/managers/{id}/sessions/{session_id}/ (ManagerHandle.get_session)",
})
