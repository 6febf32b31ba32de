"""Python clients of a durable-sessions host: HTTP, WebSocket, transcripts and the OpenAI Agents SDK session.

Imports no server code (nor quart, hypercorn or apsw): httpx, wsproto,
msgpack and anyio, so it runs under trio and asyncio alike. Errors the
server answers are raised again as the classes of :mod:`common.errors`.
"""

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
