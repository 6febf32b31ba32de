"""Persistence for durable-sessions: one SQLite file per actor (apsw, FTS5).

Synchronous code with no trio import; knows nothing of actors or the runtime.
The public surface is what this module re-exports.
"""

from .errors import SchemaTooNewError, SearchQueryError, StorageClosedError, StorageError
from .sqlite import SqlStorage

__all__ = [
    "SchemaTooNewError",
    "SearchQueryError",
    "SqlStorage",
    "StorageClosedError",
    "StorageError",
]
