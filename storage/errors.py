"""Moved to :mod:`common.errors`; this module re-exports it so ``storage.errors`` imports keep working.

The shared vocabulary (errors, shapes, the wire format, the SDK adapters)
lives in :mod:`common`, below storage, actors and the runtime. Every name
listed here is the same object as in :mod:`common.errors`
(``tests/common/test_old_paths.py``). New code imports :mod:`common.errors`.
"""

from __future__ import annotations

# A re-export module: the star import brings exactly the __all__ below (F403/F405 are its point).
# ruff: noqa: F403, F405
from common.errors import *

__all__ = [
    "ActorBusyError", "ActorOverloadedError", "ActorRuntimeError", "ActorStorageCorruptError", "CompactionError",
    "ConflictError", "ContextBlockError", "DataFolderLockedError", "DatabaseError", "DurableSessionsError",
    "HostClosedError", "HttpError", "InternalServerError", "InvalidActorIdError", "InvalidArgumentsError",
    "InvalidInputError", "InvalidMessageError", "InvalidNamespaceError", "MessageNotFoundError",
    "MethodNotAllowedError", "NotFoundError", "NotOwnerError", "NotSupportedError", "OriginNotAllowedError",
    "OwnerUnreachableError", "OwnershipLostError", "PayloadTooLargeError", "RequestTimeoutError", "RestoreError",
    "RouteNotFoundError", "SchemaTooNewError", "SearchQueryError", "ServerBusyError", "ServiceUnavailableError",
    "SessionError", "SessionNotFoundError", "SkillRestoreError", "StorageClosedError", "StorageError",
    "StorageFullError", "StorageUnavailableError", "TransactionLeftOpenError", "UnauthorizedError",
    "UnknownMethodError", "UnknownNamespaceError", "UnsupportedMediaTypeError",
]
