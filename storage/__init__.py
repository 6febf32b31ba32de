"""Persistence for durable-sessions: one SQLite file per actor (apsw, FTS5), and Postgres.

Synchronous SQLite code with no trio import; knows nothing of actors or the
runtime. The Postgres providers (:mod:`storage.postgres`, async, psycopg)
are loaded on first use, so ``import storage`` does not import psycopg.
The public surface is what this module re-exports.
"""

from typing import Any

from .errors import SchemaTooNewError, SearchQueryError, StorageClosedError, StorageError
from .sqlite import SqlStorage

#: Names served lazily from :mod:`storage.postgres`.
_POSTGRES_EXPORTS = (
    "PostgresContextProvider",
    "PostgresSearchProvider",
    "PostgresSessionProvider",
)

__all__ = [
    *_POSTGRES_EXPORTS,
    "SchemaTooNewError",
    "SearchQueryError",
    "SqlStorage",
    "StorageClosedError",
    "StorageError",
]


def __getattr__(name: str) -> Any:
    if name in _POSTGRES_EXPORTS:
        from . import postgres

        return getattr(postgres, name)
    raise AttributeError(f"module 'storage' has no attribute {name!r}")
