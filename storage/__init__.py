"""Persistence for durable-sessions: one SQLite file per actor (apsw, FTS5), and Postgres.

Synchronous SQLite code with no trio import; knows nothing of actors or the
runtime. The public surface is what this module re-exports. Its errors come
from :mod:`common.errors` (the project's one exception tree, which loads
without SQLite); the rest is imported on first use, so ``import storage``
loads neither apsw nor psycopg. The vocabulary every layer shares (errors,
shapes, the wire format, the SDK adapters) lives in :mod:`common`.
"""

from __future__ import annotations

import importlib
from typing import Any

from common.errors import SchemaTooNewError, SearchQueryError, StorageClosedError, StorageError

_LAZY = {
    "SqlStorage": "storage.sqlite",
    "PostgresContextProvider": "storage.postgres",
    "PostgresSearchProvider": "storage.postgres",
    "PostgresSessionProvider": "storage.postgres",
    "PostgresStorage": "storage.postgres",
}

__all__ = [
    "PostgresContextProvider",
    "PostgresSearchProvider",
    "PostgresSessionProvider",
    "PostgresStorage",
    "SchemaTooNewError",
    "SearchQueryError",
    "SqlStorage",
    "StorageClosedError",
    "StorageError",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'storage' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
