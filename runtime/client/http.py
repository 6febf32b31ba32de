"""The Python client: ``async with SessionsClient(url, token=...) as client:``.

Works under trio and asyncio (httpx and anyio pick up the running loop)::

    async with SessionsClient("http://127.0.0.1:8787", token=token) as client:
        s = client.session("chat-42")
        await s.append_message({"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]})
        history = await s.get_history()
        async with s.events() as events:        # broadcasts, over a WebSocket
            async for event in events:
                ...

A :class:`SessionHandle` has the Session's method names and returns what
the in-process :class:`actors.session_agent.SessionAgent` returns (lists,
dicts, strings, booleans; ``None`` where the Session gives ``None``).
Server errors are raised again as the same exception classes
(:class:`storage.errors.MessageNotFoundError`,
:class:`storage.errors.ActorOverloadedError`, ...; HTTP-level ones from
:mod:`runtime.wire`).

A request the server refused before doing anything for it (503
``ServerBusyError``: admission control, see ``runtime.server.admission``) is
sent again after its ``Retry-After`` (with jitter), up to
:data:`BUSY_RETRIES` times; nothing of it ran, so repeating is safe. Other
refusals (429 for one busy session, 507 for a full disk) are raised.

The Claude Agent SDK ``SessionStore`` adapter, ``DurableSessionStore``, lives
in :mod:`runtime.client.transcripts` (importable from here too) and uses this
client's HTTP layer (:meth:`SessionsClient.request`).
"""

from __future__ import annotations

import json
import os
import random
from collections import deque
from collections.abc import Sequence
from typing import Any

import anyio
import httpx
import msgpack

from runtime.api import METHODS, request_for
from runtime.client.websocket import ConnectionClosed, WebSocketConnection
from runtime.wire import JSON, MSGPACK, encode_body, error_from_payload, quote_segment
from storage.shapes import LATEST_LEAF

__all__ = ["DEFAULT_URL", "LATEST_LEAF", "SessionHandle", "SessionSocket", "SessionsClient"]

#: Where ``durable-sessions serve`` listens by default.
DEFAULT_URL = "http://127.0.0.1:8787"
#: Seconds an idle pooled connection is kept; shorter than the server's keep-alive
#: timeout (``ServerSettings.keep_alive_timeout_s``), so the client always closes first.
KEEPALIVE_EXPIRY_S = 5.0
#: Times a request refused unrun with 503 ``ServerBusyError`` is sent again.
BUSY_RETRIES = 5
#: Longest wait between those attempts, whatever ``Retry-After`` says (seconds).
BUSY_RETRY_MAX_S = 5.0
Message = dict[str, Any]


class SessionsClient:
    """HTTP client of a durable-sessions server.

    Args:
        url: the server's base URL (default ``$DURABLE_SESSIONS_URL`` or :data:`DEFAULT_URL`).
        token: bearer token (default ``$DURABLE_SESSIONS_TOKEN``; ``None`` for none).
        timeout: seconds per request (``None``: no limit).
        encoding: ``"json"`` or ``"msgpack"`` for request and response bodies.
        transport: an ``httpx`` transport (tests, custom networking).

    Use it as an async context manager; calls outside it raise ``RuntimeError``.
    """

    def __init__(
        self, url: str | None = None, *, token: str | None = None, timeout: float | None = 30.0,
        encoding: str = "json", transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if encoding not in ("json", "msgpack"):
            raise ValueError(f"encoding must be 'json' or 'msgpack', not {encoding!r}")
        self.url = (url or os.environ.get("DURABLE_SESSIONS_URL") or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else os.environ.get("DURABLE_SESSIONS_TOKEN") or None
        self._media = MSGPACK if encoding == "msgpack" else JSON
        self._timeout = timeout
        self._transport = transport
        self._http: httpx.AsyncClient | None = None
        self._closed = False

    async def __aenter__(self) -> SessionsClient:
        if self._http is not None or self._closed:
            raise RuntimeError("a SessionsClient can be entered once")
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64, keepalive_expiry=KEEPALIVE_EXPIRY_S)
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=self._headers(), timeout=self._timeout, transport=self._transport, limits=limits
        )
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool (idempotent)."""
        self._closed = True
        if self._http is not None:
            await self._http.aclose()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": self._media}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def session(self, session_id: str) -> SessionHandle:
        """A handle on session ``session_id`` (any string of 1-512 UTF-8 bytes). Creates nothing."""
        return SessionHandle(self, session_id)

    async def request(self, method: str, path: str, *, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        """Send one request to ``path`` (under the base URL) and return the decoded body.

        Raises:
            RuntimeError: the client is not open.
            Exception: the error the server answered with, as its own class.
            httpx.TransportError: the server could not be reached.
        """
        if self._http is None or self._closed:
            raise RuntimeError("use the client inside `async with SessionsClient(...) as client:`")
        content = None if body is None else encode_body(body, self._media)
        headers = {"Content-Type": self._media} if content is not None else None
        query = {k: v for k, v in (params or {}).items() if v is not None}
        for attempt in range(BUSY_RETRIES + 1):
            response = await self._http.request(method, path, content=content, headers=headers, params=query)
            payload = _decode(response)
            if attempt == BUSY_RETRIES or not _refused_unrun(response, payload):
                break
            await anyio.sleep(_retry_delay_s(response))
        if response.status_code >= 400:
            raise error_from_payload(response.status_code, payload)
        return payload

    async def health(self) -> dict[str, Any]:
        """``{"status": "ok"}`` from ``GET /v1/health`` (no token needed)."""
        return await self.request("GET", "/v1/health")

    async def statistics(self) -> dict[str, Any]:
        """The host's statistics (``GET /v1/actors``): active, hibernated, activations, ..."""
        return await self.request("GET", "/v1/actors")

    async def metrics(self) -> str:
        """The Prometheus text of ``GET /metrics``."""
        if self._http is None or self._closed:
            raise RuntimeError("use the client inside `async with SessionsClient(...) as client:`")
        response = await self._http.get("/metrics")
        if response.status_code >= 400:
            raise error_from_payload(response.status_code, _decode(response))
        return response.text

    async def hibernate(self, *session_ids: str) -> int:
        """Hibernate these sessions' actors (none given: every active actor); how many were active."""
        body = {"sessionIds": list(session_ids)} if session_ids else {}
        return (await self.request("POST", "/v1/actors:hibernate", body=body))["hibernated"]

    def websocket_url(self, path: str) -> str:
        return ("ws" + self.url[4:] if self.url.startswith("http") else self.url) + path


def _refused_unrun(response: httpx.Response, payload: Any) -> bool:
    """503 ``ServerBusyError``: the server refused the request before running anything of it."""
    if response.status_code != 503 or not isinstance(payload, dict):
        return False
    error = payload.get("error")
    return isinstance(error, dict) and error.get("type") == "ServerBusyError"


def _retry_delay_s(response: httpx.Response) -> float:
    """``Retry-After`` seconds (1 when absent), times a random 0.5-1 so refused clients spread out."""
    try:
        after = float(response.headers.get("Retry-After", "1"))
    except ValueError:
        after = 1.0
    return min(BUSY_RETRY_MAX_S, max(0.0, after)) * random.uniform(0.5, 1.0)


def _decode(response: httpx.Response) -> Any:
    if not response.content:
        return None
    kind = response.headers.get("Content-Type", "").split(";")[0].strip()
    if kind == MSGPACK:
        return msgpack.unpackb(response.content, raw=False)
    try:
        return response.json()
    except ValueError:
        return response.text


class SessionHandle:
    """One session on the server: the Session's methods over HTTP.

    Made by :meth:`SessionsClient.session`. Every method is one request
    (``append_messages`` is one request for the whole batch), built from the
    method's first route in :data:`runtime.api.SESSION_API`; a method without
    a route, or a message id that no path segment can carry, goes through
    ``POST /rpc`` with the same answer.
    """

    def __init__(self, client: SessionsClient, session_id: str) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string")
        self.client = client
        self.session_id = session_id
        self.path = f"/v1/sessions/{quote_segment(session_id)}"

    def __repr__(self) -> str:
        return f"<SessionHandle {self.session_id!r}>"

    async def _invoke(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Call the table's method ``name``: its route (the reply's result key), else ``POST /rpc``."""
        method = METHODS[name]
        bound = method.signature(client=True).bind(*args, **kwargs)
        route = method.client_route
        if route is None:
            return await self.call(name, **bound.arguments)
        request = request_for(method, route, bound.arguments)
        if request is None:  # an id no path segment can carry: the actor judges it
            return await self.call(name, *bound.args)
        catch = route.not_found.catch if route.not_found else ()
        try:
            reply = await self.client.request(request.verb, f"{self.path}/{request.path}", body=request.body,
                                              params=request.query)
        except catch:
            return route.not_found.when
        return None if route.result_key is None else reply[route.result_key]

    # -- messages -------------------------------------------------------------------------

    async def append_message(self, message: Message, parent_id: str | None | object = LATEST_LEAF) -> bool:
        """Append ``message`` (parent: omitted -> latest leaf, ``None`` -> new root); ``True`` if stored."""
        return await self._invoke("append_message", message, parent_id)

    async def append_messages(
        self, messages: Sequence[Message], parent_id: str | None | object = LATEST_LEAF
    ) -> list[bool]:
        """Append a chain of messages in one request; one ``inserted`` flag each."""
        return await self._invoke("append_messages", messages, parent_id)

    async def get_history(self, leaf_id: str | None = None) -> list[Message]:
        """The path root -> leaf (default: the latest leaf), overlays applied."""
        return await self._invoke("get_history", leaf_id)

    async def get_message(self, message_id: str) -> Message | None:
        """The stored message, or ``None``."""
        return await self._invoke("get_message", message_id)

    async def update_message(self, message: Message) -> None:
        """Replace the stored message with ``message["id"]`` (raises ``MessageNotFoundError`` if unknown)."""
        return await self._invoke("update_message", message)

    async def delete_messages(self, message_ids: Sequence[str]) -> int:
        """Delete these messages; how many existed."""
        return await self._invoke("delete_messages", message_ids)

    async def clear_messages(self) -> None:
        """Delete every message and compaction of the session."""
        return await self._invoke("clear_messages")

    async def get_branches(self, message_id: str) -> list[Message]:
        """The children of ``message_id``, oldest first."""
        return await self._invoke("get_branches", message_id)

    async def get_latest_leaf(self) -> Message | None:
        """The latest leaf, or ``None`` in an empty session."""
        return await self._invoke("get_latest_leaf")

    async def get_path_length(self, leaf_id: str | None = None) -> int:
        """Stored messages on the path to the leaf."""
        return await self._invoke("get_path_length", leaf_id)

    async def search(self, query: str, *, limit: int = 20) -> list[dict[str, str]]:
        """Full-text search: ``[{"id", "role", "content", "createdAt"}]``, best first."""
        return await self._invoke("search", query, limit=limit)

    # -- metadata -------------------------------------------------------------------------------

    async def get_metadata(self) -> dict[str, Any]:
        """The session's metadata object (``{}`` until set)."""
        return await self._invoke("get_metadata")

    async def set_metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """Replace the session's metadata with a JSON object (at most 64 KiB); returns it."""
        return await self._invoke("set_metadata", metadata)

    # -- context, prompt, tools, skills, compaction ---------------------------------------------------

    async def get_context_blocks(self) -> list[dict[str, Any]]:
        return await self._invoke("get_context_blocks")

    async def get_context_block(self, label: str) -> dict[str, Any] | None:
        return await self._invoke("get_context_block", label)

    async def replace_context_block(self, label: str, content: str) -> dict[str, Any]:
        return await self._invoke("replace_context_block", label, content)

    async def append_context_block(self, label: str, content: str) -> dict[str, Any]:
        return await self._invoke("append_context_block", label, content)

    async def freeze_system_prompt(self) -> str:
        return await self._invoke("freeze_system_prompt")

    async def refresh_system_prompt(self) -> str:
        return await self._invoke("refresh_system_prompt")

    async def tools(self, format: str = "raw") -> dict[str, Any] | list[dict[str, Any]]:
        """Tools as ``{name: {description, inputSchema}}`` (``raw``) or the ``openai``/``anthropic`` list."""
        return await self._invoke("tools", format)

    async def execute_tool(self, name: str, args: Any) -> str:
        """Run tool ``name`` with ``args``; its result string."""
        return await self._invoke("execute_tool", name, args)

    async def compact(self) -> dict[str, str] | None:
        return await self._invoke("compact")

    async def get_compactions(self) -> list[dict[str, str]]:
        return await self._invoke("get_compactions")

    async def add_compaction(self, summary: str, from_id: str, to_id: str) -> dict[str, str]:
        return await self._invoke("add_compaction", summary, from_id, to_id)

    async def estimate_tokens(self) -> int:
        """The estimated tokens of history plus system prompt (what auto-compaction compares)."""
        return await self._invoke("estimate_tokens")

    async def get_recent_history(self, max_bytes: int, min_recent: int = 1) -> dict[str, Any]:
        """The newest messages that fit ``max_bytes`` of stored JSON: ``{messages, truncated, totalContentBytes}``."""
        return await self._invoke("get_recent_history", max_bytes, min_recent)

    async def get_loaded_skill_keys(self) -> list[str]:
        return await self._invoke("get_loaded_skill_keys")

    async def unload_skill(self, label: str, key: str) -> bool:
        return await self._invoke("unload_skill", label, key)

    async def call(self, method: str, /, *args: Any, **params: Any) -> Any:
        """Call any public method of the session's actor (``POST /rpc``); keywords or positionals."""
        if args and params:
            raise TypeError("pass positional or keyword arguments, not both")
        body = {"method": method, "params": list(args) if args else params}
        return (await self.client.request("POST", f"{self.path}/rpc", body=body))["result"]

    # -- WebSocket ------------------------------------------------------------------------------------------

    def websocket(self) -> SessionSocket:
        """A WebSocket to this session: RPC calls (:meth:`SessionSocket.call`) and broadcasts."""
        return SessionSocket(self)

    def events(self) -> SessionSocket:
        """The session's broadcasts as they happen: ``async with s.events() as events: async for e in events``."""
        return SessionSocket(self)


class SessionSocket:
    """A WebSocket to one session: concurrent RPC calls and an async iterator of broadcasts.

    ``async with`` connects (the peer is registered with the actor when it
    returns, so broadcasts from then on are received) and closes on exit.
    Iterating yields each broadcast, parsed from JSON when it is JSON, and
    stops when the server closes the socket. Broadcasts not consumed are
    kept, up to ``max_buffered`` (the oldest are dropped beyond).
    """

    def __init__(self, handle: SessionHandle, *, max_buffered: int = 10_000) -> None:
        self.handle = handle
        self._ws: WebSocketConnection | None = None
        self._group: Any = None
        self._next_id = 0
        self._waiting: dict[int, tuple[anyio.Event, list[Any]]] = {}
        self._events: deque[Any] = deque(maxlen=max_buffered)
        self._arrived = anyio.Event()
        self._closed: BaseException | None = None

    async def __aenter__(self) -> SessionSocket:
        client = self.handle.client
        headers = [("Authorization", f"Bearer {client.token}")] if client.token else []
        self._ws = await WebSocketConnection.connect(client.websocket_url(f"{self.handle.path}/ws"), headers=headers)
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._read)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()
        self._group.cancel_scope.cancel()
        await self._group.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """Close the socket (idempotent)."""
        if self._ws is not None:
            with anyio.CancelScope(shield=True):
                await self._ws.aclose()

    async def _read(self) -> None:
        try:
            while True:
                self._dispatch(await self._ws.receive())
        except ConnectionClosed as closed:
            self._closed = closed
        finally:
            self._closed = self._closed or ConnectionClosed(1006)
            for event, _ in self._waiting.values():
                event.set()
            self._arrived.set()

    def _dispatch(self, frame: str | bytes) -> None:
        value = _parse(frame)
        if isinstance(value, dict) and value.get("id") in self._waiting and ("result" in value or "error" in value):
            event, box = self._waiting[value["id"]]
            box.append(value)
            event.set()
            return
        self._events.append(value)
        self._arrived.set()

    async def call(self, method: str, /, *args: Any, **params: Any) -> Any:
        """Call ``method`` on the actor over the socket; its result, or its error raised.

        Raises:
            RuntimeError: the socket is not open (use ``async with``).
            ConnectionClosed: the socket closed before the answer came.
        """
        if self._ws is None or self._group is None:
            raise RuntimeError("use `async with handle.websocket() as socket:` before calling")
        self._next_id += 1
        call_id = self._next_id
        event, box = anyio.Event(), []
        self._waiting[call_id] = (event, box)
        try:
            await self._ws.send(encode_body({"id": call_id, "method": method, "params": list(args) if args else params},
                                            JSON).decode("utf-8"))
            await event.wait()
        finally:
            del self._waiting[call_id]
        if not box:
            raise self._closed or ConnectionClosed(1006)
        if "error" in box[0]:
            raise error_from_payload(400, {"error": box[0]["error"]})
        return box[0]["result"]

    def __aiter__(self) -> SessionSocket:
        return self

    async def __anext__(self) -> Any:
        if self._group is None:
            raise RuntimeError("use `async with handle.events() as events:` before iterating")
        while not self._events:
            if self._closed is not None:
                raise StopAsyncIteration
            self._arrived = anyio.Event()
            await self._arrived.wait()
        return self._events.popleft()


def _parse(frame: str | bytes) -> Any:
    try:
        if isinstance(frame, bytes):
            return msgpack.unpackb(frame, raw=False)
        return json.loads(frame)
    except (ValueError, msgpack.UnpackException):
        return frame
