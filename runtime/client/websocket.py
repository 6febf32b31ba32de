"""The client's WebSocket connection: :mod:`runtime.wsclient` (shared with the server's relay).

Kept under this name so ``from runtime.client.websocket import ConnectionClosed, WebSocketConnection``
goes on working.
"""

from runtime.wsclient import ConnectionClosed, WebSocketConnection

__all__ = ["ConnectionClosed", "WebSocketConnection"]
