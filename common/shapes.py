"""Plain values every layer and the client share; imports nothing heavier than ``json``.

* :data:`LATEST_LEAF` -- the default parent of an append ("the session's
  latest leaf"), the same object in-process and in the Python client.
* :data:`OVERLAY_PREFIX` -- compaction overlays are messages with the id
  ``compaction_<compaction id>``; such ids are never stored.
* Transcript keys of the Claude Agent SDK ``SessionStore`` contract:
  :func:`parse_session_key`, :func:`encode_entry`, :data:`MAIN_SUBPATH`.

The Python client imports this module without loading SQLite.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["LATEST_LEAF", "MAIN_SUBPATH", "OVERLAY_PREFIX", "encode_entry", "parse_session_key"]

#: Ids of compaction overlays are this prefix + the compaction's id; never stored.
OVERLAY_PREFIX = "compaction_"

#: The subpath of a session's main transcript.
MAIN_SUBPATH = ""


class _LatestLeaf:
    """Type of :data:`LATEST_LEAF`."""

    _instance: _LatestLeaf | None = None

    def __new__(cls) -> _LatestLeaf:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "LATEST_LEAF"


#: "Parent = the session's latest leaf": the default of an append's parent.
LATEST_LEAF = _LatestLeaf()

def encode_entry(entry: Any, index: int = 0) -> str:
    """Compact JSON text of one transcript entry (what the table stores).

    Raises:
        ValueError: ``entry`` is not a JSON object, or holds something JSON
            cannot carry (NaN, infinities, non-JSON types, nesting too deep
            to encode, lone surrogates that UTF-8 cannot store). ``index`` is
            only used in the message.
    """
    if not isinstance(entry, Mapping):
        raise ValueError(f"entries[{index}] must be a JSON object, not {type(entry).__name__}")
    try:
        text = json.dumps(entry, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"entries[{index}] is not JSON: {exc}") from None
    except RecursionError:
        raise ValueError(f"entries[{index}] is not JSON: nested too deeply") from None
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"entries[{index}] is not valid Unicode text (lone surrogate at {exc.start})") from None
    return text


def parse_session_key(key: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(project_key, session_id, subpath)`` of an SDK ``SessionKey``.

    A missing or ``None`` subpath gives :data:`MAIN_SUBPATH` (``""``).

    Raises:
        ValueError: ``key`` is not a mapping, ``project_key`` or
            ``session_id`` is not a non-empty string, or ``subpath`` is
            present but not a non-empty string (the SDK forbids ``""``).
    """
    if not isinstance(key, Mapping):
        raise ValueError(f"session key must be a mapping, not {type(key).__name__}")
    for field in ("project_key", "session_id"):
        if not isinstance(key.get(field), str) or not key[field]:
            raise ValueError(f"session key {field} must be a non-empty string, not {key.get(field)!r}")
    subpath = key.get("subpath")
    if subpath is None:
        return key["project_key"], key["session_id"], MAIN_SUBPATH
    if not isinstance(subpath, str) or not subpath:
        raise ValueError(f"session key subpath must be omitted or a non-empty string, not {subpath!r}")
    return key["project_key"], key["session_id"], subpath
