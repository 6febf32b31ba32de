"""The session routes: ``/v1/sessions/{session_id}/...`` -> one stub call each.

Protocol logic only: no sockets, no Quart. :func:`match` finds the route of
a method and the path segments after the session id (still
percent-encoded, so an encoded ``:`` or ``/`` inside a label never reads as
syntax); each handler turns the query and body into one call of the
session's actor and returns ``(status, body)``.

=======  =====================================  ==============================================
method   path (after ``/v1/sessions/{id}``)     actor call -> response body
=======  =====================================  ==============================================
POST     ``/messages``                          ``append_message`` -> ``{id, inserted}`` (201/200)
POST     ``/messages:batch``                    ``append_messages`` -> ``{inserted: [bool]}``
POST     ``/messages:delete``                   ``delete_messages`` -> ``{deleted}``
GET      ``/messages?leaf=``                    ``get_history`` -> ``{messages}``
DELETE   ``/messages``                          ``clear_messages`` -> ``{cleared: true}``
GET      ``/messages/{id}``                     ``get_message`` -> ``{message}`` (404 unknown)
PUT      ``/messages/{id}``                     ``update_message`` -> ``{id}``
DELETE   ``/messages/{id}``                     ``delete_messages`` -> ``{deleted: 1}`` (404 unknown)
GET      ``/messages/{id}/branches``            ``get_branches`` -> ``{messages}``
GET      ``/messages:leaf``                     ``get_latest_leaf`` -> ``{message}`` (null if empty)
GET      ``/messages:count?leaf=``              ``get_path_length`` -> ``{count}``
GET      ``/search?q=&limit=``                  ``search`` -> ``{results}``
GET      ``/context``                           ``get_context_blocks`` -> ``{blocks}``
GET/PUT  ``/context/{label}``                   ``get_context_block`` / ``replace_context_block`` -> ``{block}``
POST     ``/context/{label}:append``            ``append_context_block`` -> ``{block}``
GET      ``/system-prompt``                     ``freeze_system_prompt`` -> ``{prompt}``
POST     ``/system-prompt:refresh``             ``refresh_system_prompt`` -> ``{prompt}``
GET      ``/tools?format=``                     ``tools`` -> ``{tools}``
POST     ``/tools/{name}``                      ``execute_tool`` (body: the arguments) -> ``{result}``
POST     ``/compact``                           ``compact`` -> ``{result}``
GET      ``/compactions``                       ``get_compactions`` -> ``{compactions}``
GET      ``/skills``                            ``get_loaded_skill_keys`` -> ``{loaded}``
DELETE   ``/skills/{label}/{key}``              ``unload_skill`` -> ``{unloaded}``
POST     ``/rpc``                               any actor method: ``{method, params}`` -> ``{result}``
=======  =====================================  ==============================================
"""

from __future__ import annotations

import copy

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from actors.errors import InvalidInputError, InvalidMessageError, MessageNotFoundError, NotFoundError

from .namespace import ActorStub
from .wire import RouteNotFoundError, unquote_segment

#: Prefix of every session route.
SESSIONS_PREFIX = "/v1/sessions/"


@dataclass
class Call:
    """One matched request: the actor's stub, decoded path values, query and body."""

    stub: ActorStub
    values: dict[str, str]
    query: Mapping[str, str]
    body: Any = None

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

    async def read(self, method: str, *args: Any) -> Any:
        """``stub.call(method, *args)`` for a read that must not create the session.

        When the actor class lists ``method`` in ``EMPTY_READS`` and the
        session was never written (no file, not awake), that answer stands
        in and no file is created: a mistyped session id leaves nothing on disk.
        """
        namespace = self.stub.namespace
        empty = getattr(namespace.agent_class, "EMPTY_READS", None)
        if empty and method in empty and not namespace.exists(self.stub.id):
            return copy.deepcopy(empty[method])
        return await self.stub.call(method, *args)

    def text_arg(self, name: str, *, required: bool = False) -> str | None:
        value = self.query.get(name)
        if value in (None, "") and required:
            raise InvalidInputError(f"query parameter {name!r} is required", field=name)
        return value or None

    def int_arg(self, name: str, default: int, *, maximum: int = 10_000) -> int:
        raw = self.query.get(name)
        if raw in (None, ""):
            return default
        try:
            value = int(raw)
        except ValueError:
            raise InvalidInputError(f"{name} must be an integer, not {raw!r}", field=name) from None
        if not 0 <= value <= maximum:
            raise InvalidInputError(f"{name} must be between 0 and {maximum}, not {value}", field=name)
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


def match(method: str, segments: list[str]) -> tuple[Route, dict[str, str]] | tuple[None, list[str]]:
    """``(route, values)`` for this request, or ``(None, allowed_methods)`` when none fits.

    ``allowed_methods`` is empty when no route has this path at all.
    """
    allowed = []
    for route in ROUTES:
        values = route.bind(segments)
        if values is None:
            continue
        if route.method == method:
            return route, values
        allowed.append(route.method)
    return None, allowed


# -- helpers ---------------------------------------------------------------------------------


def _parent_args(body: dict[str, Any]) -> tuple[Any, ...]:
    """``()`` without ``parentId`` (latest leaf); ``(None,)`` / ``(id,)`` otherwise."""
    if "parentId" not in body:
        return ()
    parent = body["parentId"]
    if parent is not None and not isinstance(parent, str):
        raise InvalidInputError(f"parentId must be a string or null, not {type(parent).__name__}", field="parentId")
    return (parent,)


def _required(body: dict[str, Any], name: str, error: type[InvalidInputError] = InvalidInputError) -> Any:
    if name not in body:
        raise error(f"{name} is missing", field=name)
    return body[name]


# -- handlers --------------------------------------------------------------------------------


async def append_message(call: Call) -> tuple[int, Any]:
    body = call.object()
    message = _required(body, "message", InvalidMessageError)
    inserted = await call.stub.call("append_message", message, *_parent_args(body))
    message_id = message.get("id") if isinstance(message, dict) else None
    return (201 if inserted else 200), {"id": message_id, "inserted": inserted}


async def append_messages(call: Call) -> tuple[int, Any]:
    body = call.object()
    flags = await call.stub.call("append_messages", _required(body, "messages"), *_parent_args(body))
    return (201 if any(flags) else 200), {"inserted": flags}


async def delete_messages(call: Call) -> tuple[int, Any]:
    ids = _required(call.object(), "ids")
    try:
        return 200, {"deleted": await call.stub.call("delete_messages", ids)}
    except InvalidInputError as error:
        if error.field != "message_ids":
            raise
        raise InvalidInputError(str(error).replace("message_ids", "ids", 1), field="ids") from None


async def get_history(call: Call) -> tuple[int, Any]:
    return 200, {"messages": await call.read("get_history", call.text_arg("leaf"))}


async def clear_messages(call: Call) -> tuple[int, Any]:
    await call.stub.call("clear_messages")
    return 200, {"cleared": True}


async def get_message(call: Call) -> tuple[int, Any]:
    message = await call.read("get_message", call.values["message_id"])
    if message is None:
        raise MessageNotFoundError(call.values["message_id"])
    return 200, {"message": message}


async def update_message(call: Call) -> tuple[int, Any]:
    message_id = call.values["message_id"]
    message = _required(call.object(), "message", InvalidMessageError)
    if isinstance(message, dict):
        message = {"id": message_id, **message}
        if message["id"] != message_id:
            raise InvalidMessageError("message.id differs from the id in the path", field="message.id")
    await call.stub.call("update_message", message)
    return 200, {"id": message_id}


async def delete_message(call: Call) -> tuple[int, Any]:
    message_id = call.values["message_id"]
    if await call.stub.call("delete_messages", [message_id]) == 0:
        raise MessageNotFoundError(message_id)
    return 200, {"deleted": 1}


async def get_branches(call: Call) -> tuple[int, Any]:
    return 200, {"messages": await call.read("get_branches", call.values["message_id"])}


async def get_latest_leaf(call: Call) -> tuple[int, Any]:
    return 200, {"message": await call.read("get_latest_leaf")}


async def get_path_length(call: Call) -> tuple[int, Any]:
    return 200, {"count": await call.read("get_path_length", call.text_arg("leaf"))}


async def search(call: Call) -> tuple[int, Any]:
    query = call.text_arg("q", required="q" not in call.query) or ""  # ?q= is a blank query: no results
    return 200, {"results": await call.read("search", query, call.int_arg("limit", 20))}


async def get_context_blocks(call: Call) -> tuple[int, Any]:
    return 200, {"blocks": await call.stub.call("get_context_blocks")}


async def get_context_block(call: Call) -> tuple[int, Any]:
    label = call.values["label"]
    block = await call.stub.call("get_context_block", label)
    if block is None:
        raise NotFoundError(f'Block "{label}" not found', kind="context_block", key=label)
    return 200, {"block": block}


async def replace_context_block(call: Call) -> tuple[int, Any]:
    content = call.object().get("content")
    return 200, {"block": await call.stub.call("replace_context_block", call.values["label"], content)}


async def append_context_block(call: Call) -> tuple[int, Any]:
    content = call.object().get("content")
    return 200, {"block": await call.stub.call("append_context_block", call.values["label"], content)}


async def freeze_system_prompt(call: Call) -> tuple[int, Any]:
    return 200, {"prompt": await call.stub.call("freeze_system_prompt")}


async def refresh_system_prompt(call: Call) -> tuple[int, Any]:
    return 200, {"prompt": await call.stub.call("refresh_system_prompt")}


async def tools(call: Call) -> tuple[int, Any]:
    return 200, {"tools": await call.stub.call("tools", call.text_arg("format") or "raw")}


async def execute_tool(call: Call) -> tuple[int, Any]:
    args = {} if call.body is None else call.body
    return 200, {"result": await call.stub.call("execute_tool", call.values["name"], args)}


async def compact(call: Call) -> tuple[int, Any]:
    return 200, {"result": await call.stub.call("compact")}


async def get_compactions(call: Call) -> tuple[int, Any]:
    return 200, {"compactions": await call.read("get_compactions")}


async def get_loaded_skills(call: Call) -> tuple[int, Any]:
    return 200, {"loaded": await call.read("get_loaded_skill_keys")}


async def unload_skill(call: Call) -> tuple[int, Any]:
    unloaded = await call.stub.call("unload_skill", call.values["label"], call.values["key"])
    return 200, {"unloaded": unloaded}


async def rpc(call: Call) -> tuple[int, Any]:
    body = call.object()
    method = _required(body, "method")
    return 200, {"result": await call_method(call.stub, method, body.get("params"))}


async def call_method(stub: ActorStub, method: Any, params: Any) -> Any:
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


def _route(method: str, path: str, handler: Handler) -> Route:
    return Route(method, tuple(path.split("/")), handler, method in ("POST", "PUT"))


ROUTES: tuple[Route, ...] = (
    _route("POST", "messages", append_message),
    _route("GET", "messages", get_history),
    _route("DELETE", "messages", clear_messages),
    _route("POST", "messages:batch", append_messages),
    _route("POST", "messages:delete", delete_messages),
    _route("GET", "messages:leaf", get_latest_leaf),
    _route("GET", "messages:count", get_path_length),
    _route("GET", "messages/{message_id}", get_message),
    _route("PUT", "messages/{message_id}", update_message),
    _route("DELETE", "messages/{message_id}", delete_message),
    _route("GET", "messages/{message_id}/branches", get_branches),
    _route("GET", "search", search),
    _route("GET", "context", get_context_blocks),
    _route("GET", "context/{label}", get_context_block),
    _route("PUT", "context/{label}", replace_context_block),
    _route("POST", "context/{label}:append", append_context_block),
    _route("GET", "system-prompt", freeze_system_prompt),
    _route("POST", "system-prompt:refresh", refresh_system_prompt),
    _route("GET", "tools", tools),
    _route("POST", "tools/{name}", execute_tool),
    _route("POST", "compact", compact),
    _route("GET", "compactions", get_compactions),
    _route("GET", "skills", get_loaded_skills),
    _route("DELETE", "skills/{label}/{key}", unload_skill),
    _route("POST", "rpc", rpc),
)


def not_found(path: str) -> RouteNotFoundError:
    return RouteNotFoundError(f"no route for {path}")
