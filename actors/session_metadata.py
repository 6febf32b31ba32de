"""Free-form metadata of one session: a small JSON object in ``assistant_config``.

A session served as its own actor has no registry row (that is the
SessionManager's ``assistant_sessions``), yet some facts belong to the
conversation as a whole: where it was imported from, its title, the
session that spawned it. They live in one ``assistant_config`` row,
``(session_id, "metadata")``, as compact JSON, beside the persisted leaf
and loaded skills. :class:`~actors.session_agent.SessionAgent` exposes
them as ``get_metadata`` / ``set_metadata``.

Keys used by ``durable-sessions import`` (camelCase, like the rest of the
wire data): ``source`` (``"claude-code"``), ``name``, ``parentSessionId``
(a sub-agent's parent session), ``projectKey``, ``transcriptKey``,
``sessionId``, ``cwd``, ``agentId``, ``agentType``, ``description``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from common.errors import InvalidInputError
from storage import SqlStorage
from storage.context import delete_config, read_config, write_config

__all__ = ["MAX_METADATA_BYTES", "METADATA_KEY", "encode_metadata", "read_metadata", "write_metadata"]

#: ``assistant_config.key`` of the metadata row.
METADATA_KEY = "metadata"
#: Largest metadata object, in UTF-8 bytes of its compact JSON.
MAX_METADATA_BYTES = 64 * 1024


def read_metadata(storage: SqlStorage, session_id: str = "") -> dict[str, Any]:
    """The session's metadata (a fresh dict; ``{}`` when none was set)."""
    text = read_config(storage, session_id, METADATA_KEY)
    return {} if text is None else json.loads(text)


def encode_metadata(metadata: Any) -> str:
    """``metadata`` as the compact JSON text stored (``"{}"`` for an empty object).

    Raises:
        InvalidInputError: (``field="metadata"``) not a JSON object with
            string keys, not JSON data (NaN, infinities, other types), or
            larger than :data:`MAX_METADATA_BYTES`.
    """
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise InvalidInputError("metadata must be a JSON object with string keys", field="metadata")
    try:
        text = json.dumps(metadata, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"metadata is not JSON data: {exc}", field="metadata") from None
    if size > MAX_METADATA_BYTES:
        raise InvalidInputError(
            f"metadata is {size} bytes of JSON; the limit is {MAX_METADATA_BYTES}", field="metadata"
        )
    return text


def write_metadata(storage: SqlStorage, metadata: Any, session_id: str = "") -> dict[str, Any]:
    """Replace the session's metadata with ``metadata``; returns what a read now gives.

    ``{}`` removes the row.

    Raises:
        InvalidInputError: as :func:`encode_metadata`; nothing is written.
    """
    text = encode_metadata(metadata)
    if not metadata:
        delete_config(storage, session_id, METADATA_KEY)
        return {}
    write_config(storage, session_id, METADATA_KEY, text)
    return json.loads(text)
