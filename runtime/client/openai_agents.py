"""``DurableAgentsSession``: the OpenAI Agents SDK's session memory on a durable-sessions host.

Pass it to the SDK's runner and the conversation lives in a session of a
running host (``durable-sessions serve``), where it survives restarts and
every other client reads it as Session messages (search finds its text,
tool calls are tool parts; layout: :mod:`common.openai_items`)::

    from agents import Agent, Runner
    from runtime.client import DurableAgentsSession

    memory = DurableAgentsSession("chat-42", "http://127.0.0.1:8787", token=token)
    result = await Runner.run(Agent(name="helper"), "Hello", session=memory)
    # later, in any process that reaches the host:
    result = await Runner.run(agent, "What did I say?", session=DurableAgentsSession("chat-42", url, token=token))

It implements the SDK's ``Session`` protocol (``get_items``,
``add_items``, ``pop_item``, ``clear_session``, ``session_id``,
``session_settings``) structurally; the SDK itself is imported only to
coerce ``session_settings``. Each operation is one or two HTTP requests
(:mod:`common.openai_session` lists them). It works under asyncio (the
SDK's loop) and trio, and from ``Runner.run_sync``'s loop in another
thread: each event loop gets its own connection pool, made on first use,
which keeps no idle connection (so a loop that ends leaves nothing open).

Errors: a bad item raises ``TypeError``/``ValueError`` before anything is
sent; the server's errors come back as their own classes
(:mod:`common.errors`); an unreachable host raises
:class:`~common.errors.ServerUnreachableError` (a ``ConnectionError``, naming
the URL); a connection that broke after the request was sent raises
``httpx.TransportError`` (the call may have run).
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import weakref
from typing import Any

import httpx
import sniffio

from common.openai_session import AgentsItemsSession
from runtime.client.http import SessionHandle, SessionsClient

__all__ = ["DurableAgentsSession"]

_ssl_context: ssl.SSLContext | None = None
_ssl_lock = threading.Lock()


def _shared_ssl_context() -> ssl.SSLContext:
    """One TLS context for every pool (making one costs ~35 ms; it is safe to share)."""
    global _ssl_context
    with _ssl_lock:
        if _ssl_context is None:
            _ssl_context = httpx.create_ssl_context()
        return _ssl_context


class DurableAgentsSession(AgentsItemsSession):
    """The SDK's ``Session`` protocol on session ``session_id`` of a host.

    Args:
        session_id: the host's session id (1-512 UTF-8 bytes); the same id
            names it for every other client.
        url: the host's base URL (default ``$DURABLE_SESSIONS_URL`` or ``http://127.0.0.1:8787``).
        token: bearer token (default ``$DURABLE_SESSIONS_TOKEN``; ``None`` for none).
        session_settings: the SDK's ``SessionSettings`` (or a dict of it);
            ``limit`` is the default of ``get_items``.
        timeout: seconds per request (``None``: no limit).
        transport: an ``httpx`` transport for every request (tests, custom
            networking); it must suit each event loop that uses it.

    Raises:
        ValueError: ``session_id`` is not a non-empty string.
        TypeError: ``session_settings`` has keys the SDK does not know.
    """

    def __init__(
        self, session_id: str, url: str | None = None, token: str | None = None, *, session_settings: Any = None,
        timeout: float | None = 30.0, transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"session_id must be a non-empty string, not {session_id!r}")
        super().__init__(session_id, session_settings)
        probe = SessionsClient(url, token=token)
        self.url = probe.url
        self.token = probe.token
        self._timeout = timeout
        self._transport = transport
        self._clients: weakref.WeakKeyDictionary[object, SessionsClient] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"<DurableAgentsSession {self.session_id!r} at {self.url}>"

    async def _target(self) -> SessionHandle:
        loop = _running_loop()
        client = self._clients.get(loop)
        if client is None:
            transport = self._transport or httpx.AsyncHTTPTransport(
                verify=_shared_ssl_context(), limits=httpx.Limits(max_keepalive_connections=0))
            client = SessionsClient(self.url, token=self.token, timeout=self._timeout, transport=transport)
            await client.__aenter__()
            self._clients[loop] = client
        return client.session(self.session_id)

    async def aclose(self) -> None:
        """Close the pool of the current event loop and refuse further calls (idempotent)."""
        self.close()
        client = self._clients.pop(_running_loop(), None)
        if client is not None:
            await client.aclose()

    async def __aenter__(self) -> DurableAgentsSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _running_loop() -> object:
    """An object standing for the running event loop (the asyncio loop, or trio's root task)."""
    if sniffio.current_async_library() == "trio":
        import trio  # only when trio runs: the client does not load trio itself

        return trio.lowlevel.current_root_task()
    return asyncio.get_running_loop()
