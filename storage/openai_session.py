"""Moved to :mod:`common.openai_session`; this module re-exports it so ``storage.openai_session`` imports keep working.

The shared vocabulary (errors, shapes, the wire format, the SDK adapters)
lives in :mod:`common`, below storage, actors and the runtime. Every name
listed here is the same object as in :mod:`common.openai_session`
(``tests/common/test_old_paths.py``). New code imports :mod:`common.openai_session`.
"""

from __future__ import annotations

# A re-export module: the star import brings exactly the __all__ below (F403/F405 are its point).
# ruff: noqa: F403, F405
from common.openai_session import *

__all__ = ["TARGET_METHODS", "AgentsItemsSession", "MessageTarget", "ThreadSafeLock"]
