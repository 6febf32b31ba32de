"""Errors of the Session API and the Agent base class.

Hierarchy (the HTTP status a server client sees is in brackets; the client
raises the same type again)::

    SessionError                      base class                          [500]
    ├── InvalidInputError (ValueError)   bad argument; ``.field`` names it  [400]
    │   ├── InvalidMessageError          message lacks id/role/parts        [400]
    │   └── ContextBlockError            a block write was refused          [400]
    ├── NotFoundError (LookupError)      unknown thing; ``.kind``, ``.key``  [404]
    │   └── MessageNotFoundError         unknown message id                 [404]
    ├── ConflictError                    state forbids it (e.g. duplicate)  [409]
    └── CompactionError                  compaction could not run           [409]

A retry of the same call cannot succeed for 400/404/409; only fixing the
input (or the state) helps. Messages are part of the API where the original
fixed them (e.g. ``Block "soul" is readonly``) and tests pin them.
"""

from __future__ import annotations


class SessionError(Exception):
    """Base class of every error the ``actors`` package raises on purpose."""

    #: HTTP status a server reports for this error (see the module docstring).
    status = 500


class InvalidInputError(SessionError, ValueError):
    """An argument is malformed. ``field`` names it (e.g. ``"message.parts"``)."""

    status = 400

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidMessageError(InvalidInputError):
    """A message is not ``{"id": str, "role": str, "parts": list, ...}``; nothing was written."""


class ContextBlockError(InvalidInputError):
    """A context-block write was refused: readonly, unknown, keyed, or over ``max_tokens``."""


class NotFoundError(SessionError, LookupError):
    """Something named by the caller does not exist. ``kind`` and ``key`` say what."""

    status = 404

    def __init__(self, message: str, *, kind: str = "object", key: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.key = key


class MessageNotFoundError(NotFoundError):
    """No message with that id in this session."""

    def __init__(self, message_id: str) -> None:
        super().__init__(f"message {message_id!r} not found", kind="message", key=message_id)


class ConflictError(SessionError):
    """The current state forbids the call (e.g. a label that already exists)."""

    status = 409


class CompactionError(SessionError):
    """``compact()`` cannot run, e.g. no compaction function is registered."""

    status = 409
