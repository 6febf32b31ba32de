"""Moved to :mod:`common.shapes`; this module re-exports it so ``storage.shapes`` imports keep working.

The shared vocabulary (errors, shapes, the wire format, the SDK adapters)
lives in :mod:`common`, below storage, actors and the runtime. Every name
listed here is the same object as in :mod:`common.shapes`
(``tests/common/test_old_paths.py``). New code imports :mod:`common.shapes`.
"""

from __future__ import annotations

# A re-export module: the star import brings exactly the __all__ below (F403/F405 are its point).
# ruff: noqa: F403, F405
from common.shapes import *
from common.shapes import _LatestLeaf  # noqa: F401  (imported from here by storage/messages.py)

__all__ = ["LATEST_LEAF", "MAIN_SUBPATH", "OVERLAY_PREFIX", "encode_entry", "parse_session_key"]
