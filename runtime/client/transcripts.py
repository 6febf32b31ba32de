"""``DurableSessionStore``: the Claude Agent SDK ``SessionStore`` over a durable-sessions server.

Pass it to the SDK and every transcript batch the agent writes is mirrored
to the server (the contract: :mod:`storage.transcripts`)::

    from claude_agent_sdk import ClaudeAgentOptions, query
    from runtime import DurableSessionStore

    store = DurableSessionStore("http://127.0.0.1:8787", token=token)
    options = ClaudeAgentOptions(session_store=store)
    async for message in query(prompt="Hello", options=options):
        ...
    # later, on any host that reaches the server:
    options = ClaudeAgentOptions(session_store=store, resume=session_id)

It implements the whole protocol: ``append`` and ``load``, and the optional
``list_sessions``, ``list_session_summaries``, ``delete`` and
``list_subkeys``, each one HTTP request to the routes of
:mod:`runtime.server.transcript_routes` (``append`` may be several, see below).
It works under asyncio and trio: the HTTP connection pool is made on first
use in the running event loop, and made again when a call comes from
another loop (e.g. a second ``asyncio.run``). ``aclose()`` (or ``async
with``) closes the pool of the current loop; without it the connections
close when the process ends.

Errors: a bad key or entry raises :class:`ValueError` before anything is
sent; the server's errors are raised again as their own classes
(:class:`~common.errors.InvalidInputError` is a ``ValueError``,
:class:`~common.errors.UnauthorizedError`, ...); an unreachable server
raises :class:`~common.errors.ServerUnreachableError` (a ``ConnectionError``
naming the URL; a connection that broke after the request was sent raises
``httpx.TransportError``). The SDK retries a failed ``append`` and
the server skips entries whose ``uuid`` it already stored, so a retried
batch is never stored twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import sniffio

from common.shapes import MAIN_SUBPATH, encode_entry, parse_session_key
from common.wire import TRANSCRIPTS_PREFIX
from runtime.client.http import SessionsClient

__all__ = ["DEFAULT_MAX_BATCH_BYTES", "DurableSessionStore"]

#: Largest request ``append`` sends (bytes of entry JSON): half the server's default body limit.
DEFAULT_MAX_BATCH_BYTES = 4 * 1024 * 1024

Entry = dict[str, Any]


class DurableSessionStore:
    """The SDK's ``SessionStore`` protocol over HTTP.

    Args:
        url: the server's base URL (default ``$DURABLE_SESSIONS_URL`` or ``http://127.0.0.1:8787``).
        token: bearer token (default ``$DURABLE_SESSIONS_TOKEN``; ``None`` for none).
        timeout: seconds per request (``None``: no limit). The SDK does not
            retry an append that timed out (it may still arrive).
        max_batch_bytes: an ``append`` whose entries' JSON is larger is sent
            as several requests of at most this size (an entry larger on its
            own goes alone). Each request is atomic on the server; all
            entries are checked before the first one is sent.
        transport: an ``httpx`` transport (tests, custom networking).

    Raises:
        ValueError: ``max_batch_bytes`` is not positive.
    """

    def __init__(
        self, url: str | None = None, *, token: str | None = None, timeout: float | None = 30.0,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES, transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if isinstance(max_batch_bytes, bool) or not isinstance(max_batch_bytes, int) or max_batch_bytes < 1:
            raise ValueError(f"max_batch_bytes must be a positive integer, not {max_batch_bytes!r}")
        probe = SessionsClient(url, token=token)
        self.url = probe.url
        self.token = probe.token
        self.max_batch_bytes = max_batch_bytes
        self._timeout = timeout
        self._transport = transport
        self._client: SessionsClient | None = None
        self._loop: object | None = None

    def __repr__(self) -> str:
        return f"<DurableSessionStore {self.url}>"

    # -- the SessionStore protocol -----------------------------------------------------

    async def append(self, key: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> int:
        """Mirror a batch of entries under ``key``, in order; ``[]`` sends nothing.

        Returns:
            How many entries the server stored (the rest were duplicates by
            ``uuid``); the SDK ignores it.

        Raises:
            ValueError: a bad key, or an entry that is not a JSON object.
        """
        wire_key = _wire_key(key)
        if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Sequence):
            raise ValueError("entries must be a list of JSON objects")
        stored = 0
        for chunk in _chunks(entries, self.max_batch_bytes):
            reply = await self._request("POST", "entries", body={"key": wire_key, "entries": chunk})
            stored += reply["stored"]
        return stored

    async def load(self, key: Mapping[str, Any]) -> list[Entry] | None:
        """The entries under ``key`` in append order, or ``None`` if it holds none."""
        return (await self._request("GET", "entries", params=_wire_key(key)))["entries"]

    async def list_sessions(self, project_key: str) -> list[dict[str, Any]]:
        """``[{"session_id", "mtime"}]``: main transcripts of the project, ``mtime`` in epoch ms."""
        return (await self._request("GET", "sessions", params={"project_key": _project(project_key)}))["sessions"]

    async def list_session_summaries(self, project_key: str) -> list[dict[str, Any]]:
        """``[{"session_id", "mtime", "data"}]``: the summaries the server folded at append time."""
        reply = await self._request("GET", "summaries", params={"project_key": _project(project_key)})
        return reply["summaries"]

    async def delete(self, key: Mapping[str, Any]) -> int:
        """Delete ``key``'s transcript (a main key: with its sub-transcripts and summary); entries removed."""
        return (await self._request("DELETE", "entries", params=_wire_key(key)))["deleted"]

    async def list_subkeys(self, key: Mapping[str, Any]) -> list[str]:
        """The session's sub-transcript subpaths (e.g. ``subagents/agent-<id>``), sorted."""
        main = _wire_key({**key, "subpath": None} if isinstance(key, Mapping) else key)
        return (await self._request("GET", "subkeys", params=main))["subkeys"]

    # -- lifecycle ------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the connection pool made in the current event loop (idempotent)."""
        client, self._client, self._loop = self._client, None, None
        if client is not None:
            await client.aclose()

    async def __aenter__(self) -> DurableSessionStore:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    # -- HTTP -------------------------------------------------------------------------------

    async def _request(self, method: str, route: str, *, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        client = await self._session_client()
        return await client.request(method, f"{TRANSCRIPTS_PREFIX}/{route}", body=body, params=params)

    async def _session_client(self) -> SessionsClient:
        """The client of the running loop (a pool bound to another loop cannot be used here)."""
        loop = _running_loop()
        if self._client is None or self._loop is not loop:
            client = SessionsClient(self.url, token=self.token, timeout=self._timeout, transport=self._transport)
            await client.__aenter__()
            self._client, self._loop = client, loop
        return self._client


def _running_loop() -> object:
    """An object identifying the running event loop (asyncio loop or trio run)."""
    if sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.current_root_task()
    return asyncio.get_running_loop()


def _wire_key(key: Any) -> dict[str, str]:
    """The key as sent: ``project_key``, ``session_id`` and ``subpath`` only when set."""
    project_key, session_id, subpath = parse_session_key(key)
    wire = {"project_key": project_key, "session_id": session_id}
    if subpath != MAIN_SUBPATH:
        wire["subpath"] = subpath
    return wire


def _project(project_key: Any) -> str:
    if not isinstance(project_key, str) or not project_key:
        raise ValueError(f"project_key must be a non-empty string, not {project_key!r}")
    return project_key


def _chunks(entries: Sequence[Mapping[str, Any]], max_bytes: int) -> list[list[Mapping[str, Any]]]:
    """``entries`` cut into runs whose JSON stays under ``max_bytes`` (all checked first).

    Raises:
        ValueError: an entry is not a JSON object (``entries[i] ...``).
    """
    chunks: list[list[Mapping[str, Any]]] = []
    size = max_bytes
    for index, entry in enumerate(entries):
        cost = len(encode_entry(entry, index).encode("utf-8")) + 1
        if size + cost > max_bytes:
            chunks.append([])
            size = 0
        chunks[-1].append(entry)
        size += cost
    return chunks
