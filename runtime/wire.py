"""Moved to :mod:`common.wire`; this module re-exports it so ``runtime.wire`` imports keep working.

The shared vocabulary (errors, shapes, the wire format, the SDK adapters)
lives in :mod:`common`, below storage, actors and the runtime. Every name
listed here is the same object as in :mod:`common.wire`
(``tests/common/test_old_paths.py``). New code imports :mod:`common.wire`.
"""

from __future__ import annotations

# A re-export module: the star import brings exactly the __all__ below (F403/F405 are its point).
# ruff: noqa: F403, F405
from common.wire import *

__all__ = [
    "CLOSE_RECONNECT", "DEFAULT_MAX_BODY_BYTES", "HOP_HEADER", "JSON", "LATEST_LEAF", "MAIN_SUBPATH",
    "MAX_SESSION_ID_BYTES", "MSGPACK", "OWNER_HEADER", "SESSIONS_PREFIX", "TRANSCRIPTS_PREFIX", "check_session_id",
    "decode_body", "encode_body", "encode_entry", "error_from_payload", "error_payload", "media_type",
    "parse_session_key", "payload_for", "quote_segment", "status_of", "unquote_segment",
]
