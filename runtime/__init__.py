"""Hosting: actor routing, lifecycle, hibernation, alarms, the HTTP/WebSocket
server, the Python client, the CLI and test helpers. Wires ``actors`` and ``storage``.
"""

from .alarms import HostClock
from .client import SessionsClient
from .errors import (
    ActorOverloadedError,
    ActorRuntimeError,
    HostClosedError,
    InvalidActorIdError,
    InvalidArgumentsError,
    InvalidNamespaceError,
    TransactionLeftOpenError,
    UnknownMethodError,
    UnknownNamespaceError,
)
from .host import ActorHost, HostStatistics, open_host
from .ids import ActorId
from .namespace import ActorStub, Namespace
from .server import create_app, serve
from .transcript_client import DurableSessionStore

__all__ = [
    "ActorHost",
    "ActorId",
    "ActorOverloadedError",
    "ActorRuntimeError",
    "ActorStub",
    "DurableSessionStore",
    "HostClock",
    "HostClosedError",
    "HostStatistics",
    "InvalidActorIdError",
    "InvalidArgumentsError",
    "InvalidNamespaceError",
    "Namespace",
    "SessionsClient",
    "TransactionLeftOpenError",
    "UnknownMethodError",
    "UnknownNamespaceError",
    "create_app",
    "open_host",
    "serve",
]
