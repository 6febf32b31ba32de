"""Errors of the Postgres providers.

Hierarchy (the HTTP status a client of the server would see is in brackets)::

    storage.StorageError
    └── PostgresError                 Postgres refused or failed a statement        [500]
        ├── PostgresUnavailableError  no usable connection: lost, server down, pool
        │                             exhausted, serialization failure; a retry can
        │                             succeed, and nothing of the call was written   [503]
        └── PostgresInputError (ValueError)
                                      a value Postgres cannot store (wrong type, NUL,
                                      lone surrogate, too big); ``.field`` names it;
                                      nothing was sent                              [400]

Every write runs in one transaction, so each of these leaves the database
as it was before the call. ``PostgresInputError`` plays the role the
``actors`` package's ``InvalidInputError`` plays for the SQLite path; it
becomes that class once the exception tree lives in ``storage.errors``.
"""

from __future__ import annotations

from ..errors import StorageError


class PostgresError(StorageError):
    """Postgres (or the driver) failed a statement; the call's transaction was rolled back."""

    #: HTTP status a server reports for this error.
    status = 500
    #: Whether the same call can succeed when retried unchanged.
    retryable = False


class PostgresUnavailableError(PostgresError):
    """No usable connection: it was lost mid-call, the server is down or restarting,
    the pool had none to give, or the transaction lost a serialization race.

    Nothing of the call was committed; a retry (after the server is back,
    with a new connection or through a pool) can succeed.
    """

    status = 503
    retryable = True


class PostgresInputError(PostgresError, ValueError):
    """A value Postgres cannot store: not a string, a NUL character, a lone UTF-16
    surrogate, or more bytes than the limit. ``field`` names it (e.g. ``"content"``).

    Raised before anything is sent: nothing was written.
    """

    status = 400

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
