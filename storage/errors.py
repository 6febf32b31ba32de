"""Errors raised by the storage layer.

Hierarchy (the HTTP status a client of the server sees is in brackets)::

    StorageError                    base class; never raised itself      [500]
    ├── SchemaTooNewError           file written by a newer version      [500]
    ├── StorageClosedError          use after ``SqlStorage.close()``      [500]
    └── SearchQueryError            storage failed while searching        [500]

Bad *input* is not a storage error: the actor layer validates before it
writes, so the storage layer only reports faults of the file or the code.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class of every error the ``storage`` package raises."""


class SchemaTooNewError(StorageError):
    """The file's ``PRAGMA user_version`` is newer than this code knows.

    Raised by :meth:`storage.SqlStorage.open`; the file is left untouched.
    Upgrade ``durable-sessions`` to open it.
    """

    def __init__(self, path: str, found: int, known: int) -> None:
        super().__init__(
            f"{path}: schema version {found} is newer than this code supports "
            f"({known}); upgrade durable-sessions to open this file"
        )
        self.path = path
        self.found = found
        self.known = known


class StorageClosedError(StorageError):
    """A :class:`storage.SqlStorage` was used after :meth:`close`."""


class SearchQueryError(StorageError):
    """SQLite failed while running a full-text query.

    User text never reaches FTS5 syntax (see :mod:`storage.fts`), so this
    signals a fault (a damaged index, a bug), never a malformed query; it is
    raised rather than turned into an empty result (DEVIATIONS 9).
    """
