"""Behaviour: the Session API (messages, context blocks, compaction, search,
tools), the SessionManager and the Agent base class. Uses ``storage`` only.
"""

from .errors import (
    CompactionError,
    ConflictError,
    ContextBlockError,
    InvalidInputError,
    InvalidMessageError,
    MessageNotFoundError,
    NotFoundError,
    SessionError,
)

__all__ = [
    "CompactionError",
    "ConflictError",
    "ContextBlockError",
    "InvalidInputError",
    "InvalidMessageError",
    "MessageNotFoundError",
    "NotFoundError",
    "SessionError",
]
