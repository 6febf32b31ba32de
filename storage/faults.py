"""Which failures of a file are faults of the disk or of the file, named for the caller.

SQLite reports a full disk as ``apsw.FullError`` (or the OS as ``ENOSPC``
when a file is created or copied) and damage as ``apsw.CorruptError`` /
``apsw.NotADBError``, possibly wrapped by the layer that called it (a
search wraps its SQLite error in :class:`~common.errors.SearchQueryError`).
:func:`classify` looks through the chain of causes and names the fault, so
the runtime can answer 507 or quarantine the actor without importing apsw.
"""

from __future__ import annotations

import errno
from typing import Literal

import apsw

__all__ = ["Fault", "classify", "fault_detail"]

Fault = Literal["full", "corrupt"]

_FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})
#: How many causes deep :func:`classify` looks.
_DEPTH = 8


def classify(error: BaseException) -> Fault | None:
    """``"full"`` for a full disk, ``"corrupt"`` for a damaged file, ``None`` for anything else.

    Looks at ``error`` and its ``__cause__`` / ``__context__`` chain.
    """
    found = _find(error)
    if found is None:
        return None
    return "full" if isinstance(found, (apsw.FullError, OSError)) else "corrupt"


def fault_detail(error: BaseException) -> str:
    """The message of the fault inside ``error`` (e.g. ``"database disk image is malformed"``)."""
    found = _find(error) or error
    return str(found) or type(found).__name__


def _find(error: BaseException) -> BaseException | None:
    seen: set[int] = set()
    current: BaseException | None = error
    for _ in range(_DEPTH):
        if current is None or id(current) in seen:
            return None
        seen.add(id(current))
        if isinstance(current, (apsw.FullError, apsw.CorruptError, apsw.NotADBError)):
            return current
        if isinstance(current, OSError) and current.errno in _FULL_ERRNOS:
            return current
        current = current.__cause__ or current.__context__
    return None
