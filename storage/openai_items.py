"""Moved to :mod:`common.openai_items`; this module re-exports it so ``storage.openai_items`` imports keep working.

The shared vocabulary (errors, shapes, the wire format, the SDK adapters)
lives in :mod:`common`, below storage, actors and the runtime. Every name
listed here is the same object as in :mod:`common.openai_items`
(``tests/common/test_old_paths.py``). New code imports :mod:`common.openai_items`.
"""

from __future__ import annotations

# A re-export module: the star import brings exactly the __all__ below (F403/F405 are its point).
# ruff: noqa: F403, F405
from common.openai_items import *

__all__ = [
    "CALLS", "CONTENT_PART", "FORMAT_KEY", "FORMAT_VERSION", "GROUP_MAX_BYTES", "ITEM_PART", "AddPlan", "CallShape",
    "View", "items_of", "message_views", "needs_leaf", "plan_add", "plan_pop",
]
