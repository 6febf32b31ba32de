"""Python clients of a durable-sessions host: HTTP, WebSocket, transcripts, the OpenAI Agents SDK session
and the LangGraph checkpointer: ``runtime.client.DurableCheckpointer`` is loaded on first use, as it needs the
``langgraph`` extra (so it is not in ``__all__``: ``from runtime.client import *`` works without the extra).

Imports no server code (nor quart, hypercorn or apsw): httpx, wsproto,
msgpack and anyio, so it runs under trio and asyncio alike. Errors the
server answers are raised again as the classes of :mod:`common.errors`.
"""

from typing import Any

from common.wire import LATEST_LEAF
from runtime.client.http import DEFAULT_URL, SessionHandle, SessionsClient, SessionSocket
from runtime.client.managers import ManagedSessionHandle, ManagerHandle
from runtime.client.openai_agents import DurableAgentsSession
from runtime.client.transcripts import DurableSessionStore
from runtime.client.websocket import ConnectionClosed

__all__ = [
    "DEFAULT_URL", "LATEST_LEAF", "ConnectionClosed", "DurableAgentsSession", "DurableSessionStore",
    "ManagedSessionHandle", "ManagerHandle", "SessionHandle", "SessionSocket", "SessionsClient",
]


def __getattr__(name: str) -> Any:
    """``DurableCheckpointer`` is imported when first asked for: LangGraph is an extra, and a heavy import."""
    if name == "DurableCheckpointer":
        from runtime.client.langgraph import DurableCheckpointer

        return DurableCheckpointer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
