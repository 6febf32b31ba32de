"""Hosting, one sub-package per audience; wires ``actors`` and ``storage``.

* :mod:`runtime.host` -- the actor host (activation, mailbox, gates,
  hibernation, eviction, alarms);
* :mod:`runtime.server` -- the HTTP/WebSocket server;
* :mod:`runtime.client` -- the Python clients (no server imports);
* :mod:`runtime.cli` -- the ``durable-sessions`` command and importers;
* :mod:`runtime.testing` -- pytest helpers for your own actors.

The bodies, errors and paths server and client share are :mod:`common.wire`
(with the errors of :mod:`common.errors`).

The names below are imported on first use, so ``import runtime.client``
loads no server code.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ActorHost": "runtime.host",
    "ActorId": "runtime.host",
    "ActorStub": "runtime.host",
    "HostClock": "runtime.host",
    "HostStatistics": "runtime.host",
    "Namespace": "runtime.host",
    "open_host": "runtime.host",
    "create_app": "runtime.server",
    "serve": "runtime.server",
    "DurableAgentsSession": "runtime.client",
    "DurableSessionStore": "runtime.client",
    "SessionsClient": "runtime.client",
    "ActorOverloadedError": "common.errors",
    "ActorRuntimeError": "common.errors",
    "HostClosedError": "common.errors",
    "InvalidActorIdError": "common.errors",
    "InvalidArgumentsError": "common.errors",
    "InvalidNamespaceError": "common.errors",
    "TransactionLeftOpenError": "common.errors",
    "UnknownMethodError": "common.errors",
    "UnknownNamespaceError": "common.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
