"""A session's memory as a Model Context Protocol server (the official ``mcp`` SDK; extra ``mcp``).

:func:`build_server` makes an MCP server over one session -- anything with the
Session's method names: a :class:`runtime.client.SessionHandle` (over HTTP),
or an actor stub of the host (``namespace.get_by_name(id)``, in process).
It is served two ways:

* over stdio, for desktop clients (Claude Desktop, Claude Code, Cursor):
  ``durable-sessions mcp --session ID [--url URL] [--token T]``, a client of
  a running host (:func:`serve_stdio`);
* over streamable HTTP, by the server itself at ``/mcp/{session_id}``
  (or ``/mcp?session=ID``), token-guarded and Origin-checked like every route
  (:mod:`runtime.mcp_http`).

Tools (``tools/list``), in this order:

* the session's own AI tools, with the names, descriptions and JSON Schemas
  ``tools()`` returns for its current blocks (``set_context``,
  ``load_context``, ``unload_context``, ``search_context``; see
  :mod:`actors.tools`), run by ``execute_tool``;
* ``get_history`` -- the messages root -> latest leaf (``limit``: newest N;
  ``before``: older than that id; ``leaf_id``: another branch);
* ``search_history`` -- full-text search of the stored messages (FTS5, best first);
* ``append_message`` -- append a text message (``role``, ``text``, optional
  ``id`` and ``parent_id``) under the latest leaf.

A result is one text content: the tool's string, or the answer as JSON. A tool
that fails -- bad arguments, an ``Error: ...`` string of a session tool, an
unknown tool, an error the session raised -- comes back as a tool result with
``isError: true`` and the message as its text, never as a transport or
protocol error (a model can read it and try again).

Resources (``resources/list``): ``memory://system-prompt`` (the frozen system
prompt) and ``memory://blocks/{label}`` (each context block's content), all
``text/plain``.

Without the ``mcp`` package, :func:`require_mcp` raises :class:`ImportError`
with one line naming the extra: ``pip install 'durable-sessions[mcp]'``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from jsonschema import Draft7Validator

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

__all__ = [
    "MCP_MISSING", "MEMORY_TOOLS", "PROMPT_URI", "BLOCK_URI_PREFIX", "SessionLike", "build_server", "require_mcp",
    "serve_stdio",
]

#: The line an import of the missing SDK gives.
MCP_MISSING = "the MCP server needs the mcp extra: pip install 'durable-sessions[mcp]'"
#: URI of the frozen system prompt resource; a block's is this prefix + its label.
PROMPT_URI = "memory://system-prompt"
BLOCK_URI_PREFIX = "memory://blocks/"
#: Name the server gives in its ``initialize`` answer.
SERVER_NAME = "durable-sessions"

#: The memory tools served beside the session's own: name -> (description, input JSON Schema).
MEMORY_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "get_history": (
        "Read the conversation stored in this session, oldest first: the path from the first message to the "
        "latest one (or to leaf_id), with compaction summaries in place of compacted ranges. Use limit for the "
        "newest messages only, and before (a message id) to page back.",
        {
            "type": "object",
            "properties": {
                "limit": {"type": "integer", "minimum": 1, "description": "only the newest N messages"},
                "before": {"type": "string", "description": "only messages older than the one with this id"},
                "leaf_id": {"type": "string", "description": "read the branch ending at this message"},
            },
            "additionalProperties": False,
        },
    ),
    "search_history": (
        "Full-text search of the messages stored in this session, best match first. Each hit is "
        "{id, role, content, createdAt}.",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "words to find"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "most hits (default 20)"},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    ),
    "append_message": (
        "Append a text message to this session's conversation, under the latest message (or parent_id). "
        "Returns {id, stored}: stored is false when a message with this id already exists.",
        {
            "type": "object",
            "properties": {
                "role": {"type": "string", "enum": ["user", "assistant", "system"]},
                "text": {"type": "string"},
                "id": {"type": "string", "minLength": 1, "description": "message id (default: a new random one)"},
                "parent_id": {"type": "string", "description": "append under this message instead"},
            },
            "required": ["role", "text"],
            "additionalProperties": False,
        },
    ),
}


class SessionLike(Protocol):
    """What the server calls: the Session's methods (a client ``SessionHandle`` or a host's actor stub)."""

    async def tools(self, format: str = "raw") -> Any: ...
    async def execute_tool(self, name: str, args: Any) -> str: ...
    async def get_history(self, leaf_id: str | None = None, *, limit: int | None = None,
                          before: str | None = None) -> list[dict[str, Any]]: ...
    async def search(self, query: str, *, limit: int = 20) -> list[dict[str, str]]: ...
    async def append_message(self, message: dict[str, Any], parent_id: Any = ...) -> bool: ...
    async def freeze_system_prompt(self) -> str: ...
    async def get_context_blocks(self) -> list[dict[str, Any]]: ...


def require_mcp() -> None:
    """Raise :class:`ImportError` with :data:`MCP_MISSING` when the ``mcp`` SDK is not installed."""
    try:
        import mcp.server.lowlevel  # noqa: F401
    except ImportError as exc:
        raise ImportError(MCP_MISSING) from exc


class _ToolFailed(Exception):
    """A tool call that ends as an ``isError`` result with this message."""


def build_server(session: SessionLike, *, name: str = SERVER_NAME) -> Server[Any]:
    """An MCP server (``mcp.server.lowlevel.Server``) whose tools and resources are ``session``'s.

    The tool list is read from the session at every ``tools/list`` (it follows the blocks).

    Raises:
        ImportError: the ``mcp`` extra is not installed (:data:`MCP_MISSING`).
    """
    require_mcp()
    import mcp_types as types
    from mcp.server.lowlevel import Server

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        own = await session.tools("raw")
        tools = [types.Tool(name=tool_name, description=spec["description"], input_schema=spec["inputSchema"])
                 for tool_name, spec in own.items()]
        tools += [types.Tool(name=tool_name, description=description, input_schema=schema)
                  for tool_name, (description, schema) in MEMORY_TOOLS.items() if tool_name not in own]
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            text = await _run_tool(session, params.name, dict(params.arguments or {}))
        except _ToolFailed as failed:
            return types.CallToolResult(content=[types.TextContent(text=str(failed))], is_error=True)
        except Exception as exc:  # noqa: BLE001 - an error the session raised is the tool's error
            return types.CallToolResult(content=[types.TextContent(text=f"{type(exc).__name__}: {exc}")],
                                        is_error=True)
        return types.CallToolResult(content=[types.TextContent(text=text)])

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        resources = [types.Resource(uri=PROMPT_URI, name="system-prompt", mime_type="text/plain",
                                    description="The session's frozen system prompt (rendered from its blocks).")]
        for block in await session.get_context_blocks():
            resources.append(types.Resource(
                uri=BLOCK_URI_PREFIX + block["label"], name=f"block:{block['label']}", mime_type="text/plain",
                description=block.get("description") or f"context block {block['label']!r}"))
        return types.ListResourcesResult(resources=resources)

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri == PROMPT_URI:
            text = await session.freeze_system_prompt()
        elif uri.startswith(BLOCK_URI_PREFIX):
            label = uri[len(BLOCK_URI_PREFIX):]
            found = [b for b in await session.get_context_blocks() if b["label"] == label]
            if not found:
                raise ValueError(f"no context block {label!r} in this session")
            text = found[0]["content"] or ""
        else:
            raise ValueError(f"no resource {uri!r}: use {PROMPT_URI} or {BLOCK_URI_PREFIX}<label>")
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, text=text,
                                                                             mime_type="text/plain")])

    return Server(name, on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
                  on_read_resource=read_resource)


async def _run_tool(session: SessionLike, name: str, args: dict[str, Any]) -> str:
    """The text result of tool ``name``; raises :class:`_ToolFailed` for a tool error."""
    own = await session.tools("raw")
    if name in own:
        result = await session.execute_tool(name, args)
        if result.startswith("Error:"):
            raise _ToolFailed(result)
        return result
    if name not in MEMORY_TOOLS:
        raise _ToolFailed(f"Error: no tool named {name!r}; tools: {', '.join([*own, *MEMORY_TOOLS])}")
    problems = sorted(Draft7Validator(MEMORY_TOOLS[name][1]).iter_errors(args), key=lambda e: list(e.path))
    if problems:
        detail = "; ".join(f"{'.'.join(map(str, p.path)) or 'arguments'}: {p.message}" for p in problems)
        raise _ToolFailed(f"Error: invalid arguments for {name}: {detail}")
    answer: Any
    if name == "get_history":
        answer = await session.get_history(args.get("leaf_id"), limit=args.get("limit"), before=args.get("before"))
    elif name == "search_history":
        answer = await session.search(args["query"], limit=args.get("limit", 20))
    else:
        answer = await _append(session, args)
    return json.dumps(answer, ensure_ascii=False)


async def _append(session: SessionLike, args: Mapping[str, Any]) -> dict[str, Any]:
    message_id = args.get("id") or f"mcp-{uuid.uuid4().hex}"
    message = {"id": message_id, "role": args["role"], "parts": [{"type": "text", "text": args["text"]}]}
    if "parent_id" in args:
        stored = await session.append_message(message, args["parent_id"])
    else:
        stored = await session.append_message(message)
    return {"id": message_id, "stored": stored}


async def serve_stdio(session: SessionLike) -> None:
    """Serve ``session`` over this process's stdin and stdout until the client closes stdin.

    Raises:
        ImportError: the ``mcp`` extra is not installed (:data:`MCP_MISSING`).
    """
    server = build_server(session)
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
