"""Moved to :mod:`common.transcript_summary`; this module re-exports it so ``storage.transcript_summary`` imports keep working.

The shared vocabulary (errors, shapes, the wire format, the SDK adapters)
lives in :mod:`common`, below storage, actors and the runtime. Every name
listed here is the same object as in :mod:`common.transcript_summary`
(``tests/common/test_old_paths.py``). New code imports :mod:`common.transcript_summary`.
"""

from __future__ import annotations

# A re-export module: the star import brings exactly the __all__ below (F403/F405 are its point).
# ruff: noqa: F403, F405
from common.transcript_summary import *

__all__ = ["FIRST_PROMPT_MAX_CHARS", "fold_session_summary"]
