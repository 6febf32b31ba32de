"""SQL of the session registry (``assistant_sessions``) and the cross-session search.

Synchronous helpers (no trio) behind ``actors.SessionManager``. A registry
row is a plain ``dict`` with the spec's column names, in this order:
:data:`SESSION_COLUMNS` (``id``, ``name``, ``parent_session_id``,
``model``, ``source``, ``input_tokens``, ``output_tokens``,
``estimated_cost``, ``end_reason``, ``created_at``, ``updated_at``).
Times are stored UTC text with milliseconds (``YYYY-MM-DD HH:MM:SS.SSS``).
The internal columns ``seq`` and ``updated_seq`` are never returned.

Ordering. :func:`list_sessions` gives the most recently updated session
first. Every write that sets ``updated_at`` (creation included) also takes
the next ``updated_seq``, so two sessions updated within the same
millisecond are listed in the order of those writes, the later first
(docs/deviations.md #2: the same calls always give the same order).

Search. :func:`search_messages` looks only at stored messages of sessions
that have a registry row (docs/deviations.md #11), using the query rules of
:mod:`storage.fts` (docs/deviations.md #9, #10).
"""

from __future__ import annotations

import json
from typing import Any

import apsw

from . import fts
from .errors import SearchQueryError
from .messages import FTS_TABLE, TEXT_OF_CONTENT
from .schema import NOW_MS
from .sqlite import SqlStorage
from .tree.registry import SESSION_COLUMNS

_COLUMNS = ", ".join(SESSION_COLUMNS)
_NEXT_UPDATE = "(SELECT coalesce(max(updated_seq), 0) + 1 FROM assistant_sessions)"
_TOUCH = f"updated_at = {NOW_MS}, updated_seq = {_NEXT_UPDATE}"

_INSERT = f"""
INSERT INTO assistant_sessions (id, name, parent_session_id, model, source, updated_seq)
VALUES (?, ?, ?, ?, ?, {_NEXT_UPDATE}) RETURNING {_COLUMNS}
"""
_GET = f"SELECT {_COLUMNS} FROM assistant_sessions WHERE id = ?"
_LIST = f"""
SELECT {_COLUMNS} FROM assistant_sessions INDEXED BY idx_assistant_sessions_updated
ORDER BY updated_at DESC, updated_seq DESC
"""
_COUNT = "SELECT count(*) FROM assistant_sessions"
_TOUCH_ROW = f"UPDATE assistant_sessions SET {_TOUCH} WHERE id = ?"
_RENAME = f"UPDATE assistant_sessions SET name = ?, {_TOUCH} WHERE id = ? RETURNING {_COLUMNS}"
_END = f"UPDATE assistant_sessions SET end_reason = ?, {_TOUCH} WHERE id = ? RETURNING {_COLUMNS}"
_ADD_USAGE = f"""
UPDATE assistant_sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,
    estimated_cost = estimated_cost + ?, {_TOUCH}
WHERE id = ? RETURNING {_COLUMNS}
"""
# Everything keyed by the session id; search rows first (their rowid is the message's seq).
_DELETE_SESSION_ROWS = (
    f"DELETE FROM {FTS_TABLE} WHERE rowid IN (SELECT seq FROM assistant_messages WHERE session_id = ?)",
    f"DELETE FROM {FTS_TABLE}_cjk WHERE rowid IN (SELECT seq FROM assistant_messages WHERE session_id = ?)",
    f"DELETE FROM {FTS_TABLE}{fts.TOOLS_SUFFIX} WHERE rowid IN (SELECT seq FROM assistant_messages WHERE session_id = ?)",
    "DELETE FROM assistant_messages WHERE session_id = ?",
    "DELETE FROM assistant_compactions WHERE session_id = ?",
    "DELETE FROM assistant_config WHERE session_id = ?",
    "DELETE FROM assistant_sessions WHERE id = ?",
)
# Block rows of one session: labels "<something>_<session id>" (?1 = length of "_<id>", ?2 = "_<id>").
_DELETE_BLOCKS = "DELETE FROM cf_agents_context_blocks WHERE length(label) > ?1 AND substr(label, -?1) = ?2"

# ``{hits}`` is storage.fts.matching_rowids_sql(...): (rowid, rank) of every match.
# Best rank first, ties oldest first. _TOP_HITS ranks the whole file; _TOP_MANAGED_HITS
# only messages of registered sessions (needed when other rows are among the best).
_TOP_HITS = "SELECT h.rowid FROM ({hits}) AS h ORDER BY h.rank, h.rowid LIMIT ?"
_TOP_MANAGED_HITS = """
SELECT h.rowid FROM ({hits}) AS h CROSS JOIN assistant_messages AS m ON m.seq = h.rowid
WHERE EXISTS (SELECT 1 FROM assistant_sessions AS s WHERE s.id = m.session_id)
ORDER BY h.rank, h.rowid LIMIT ?
"""
# The hits among the seqs of the JSON list ?1 that are messages of registered sessions
# (content '' for a message found through its tool calls alone).
_HIT_ROWS = f"""
SELECT m.seq, m.id, m.role, {TEXT_OF_CONTENT}, m.created_at, m.session_id
FROM json_each(?1) AS j
CROSS JOIN assistant_messages AS m ON m.seq = j.value
WHERE EXISTS (SELECT 1 FROM assistant_sessions AS s WHERE s.id = m.session_id)
"""
_HIT_NAMES = ("id", "role", "content", "created_at", "session_id")


def _row(cursor: apsw.Cursor) -> dict[str, Any] | None:
    # fetchall: a RETURNING statement must run to completion before COMMIT.
    rows = cursor.fetchall()
    return dict(zip(SESSION_COLUMNS, rows[0])) if rows else None


# -- reads ---------------------------------------------------------------------


def get_session(storage: SqlStorage, session_id: str) -> dict[str, Any] | None:
    """The registry row of ``session_id``, or ``None``."""
    return _row(storage.exec(_GET, session_id))


def session_exists(storage: SqlStorage, session_id: str) -> bool:
    """``True`` when ``session_id`` has a registry row."""
    return storage.scalar("SELECT 1 FROM assistant_sessions WHERE id = ?", session_id) is not None


def list_sessions(storage: SqlStorage) -> list[dict[str, Any]]:
    """Every registry row, most recently updated first (see the module docstring)."""
    return [dict(zip(SESSION_COLUMNS, row)) for row in storage.exec(_LIST)]


def count_sessions(storage: SqlStorage) -> int:
    """Number of registered sessions."""
    return int(storage.scalar(_COUNT))


# -- writes ----------------------------------------------------------------------


def insert_session(
    storage: SqlStorage,
    session_id: str,
    name: str,
    *,
    parent_session_id: str | None = None,
    model: str | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """Register ``session_id`` (zero usage, no end reason, both times now); returns the row.

    Raises:
        apsw.ConstraintError: ``session_id`` is already registered.
    """
    with storage.transaction():
        return _row(storage.exec(_INSERT, session_id, name, parent_session_id, model, source))


def touch_session(storage: SqlStorage, session_id: str) -> bool:
    """Set ``updated_at`` to now (and take the next ``updated_seq``); ``False`` if unknown."""
    with storage.transaction():
        storage.exec(_TOUCH_ROW, session_id)
        return storage.connection.changes() > 0


def rename_session(storage: SqlStorage, session_id: str, name: str) -> dict[str, Any] | None:
    """Set the name and touch the row; returns the new row, ``None`` if unknown."""
    with storage.transaction():
        return _row(storage.exec(_RENAME, name, session_id))


def end_session(storage: SqlStorage, session_id: str, reason: str) -> dict[str, Any] | None:
    """Set ``end_reason`` and touch the row; returns the new row, ``None`` if unknown."""
    with storage.transaction():
        return _row(storage.exec(_END, reason, session_id))


def add_usage(
    storage: SqlStorage, session_id: str, input_tokens: int, output_tokens: int, cost: float
) -> dict[str, Any] | None:
    """Add to the three usage counters and touch the row; returns the new row, ``None`` if unknown."""
    with storage.transaction():
        return _row(storage.exec(_ADD_USAGE, input_tokens, output_tokens, cost, session_id))


def delete_session(storage: SqlStorage, session_id: str) -> bool:
    """Delete everything a session owns, in one transaction.

    Gone: its messages and their search rows (both indexes), its
    compactions, its ``assistant_config`` rows (loaded skills;
    before schema version 3, the active leaf), its context-block rows -- every ``cf_agents_context_blocks``
    label ending in ``_<session_id>``, which is how per-session block rows
    and the cached prompt ``_system_prompt_<session_id>`` are named -- and
    its registry row. Returns ``False`` (and deletes nothing) when
    ``session_id`` is not registered.
    """
    with storage.transaction():
        if not session_exists(storage, session_id):
            return False
        for statement in _DELETE_SESSION_ROWS:
            storage.exec(statement, session_id)
        suffix = "_" + session_id
        storage.exec(_DELETE_BLOCKS, len(suffix), suffix)
        return True


# -- search ------------------------------------------------------------------------


def search_messages(storage: SqlStorage, query: fts.ParsedQuery, limit: int) -> list[dict[str, str]]:
    """Stored messages of registered sessions matching ``query``, best first.

    Ranks the whole file's matches and keeps the best ``limit``; only when
    some of those are not messages of registered sessions does it rank
    again, joined to the registry. In a manager's file (every message in a
    registered session) the join thus touches ``limit`` rows, not every match.

    Returns:
        Up to ``limit`` hits ``{"id", "role", "content", "created_at",
        "session_id"}``: ``content`` is the indexed text (the message's text
        parts joined by a space), ``created_at`` the stored time. Equal
        ranks keep insertion order.

    Raises:
        SearchQueryError: SQLite failed (never returned as an empty list).
    """
    hits, params = fts.matching_rowids_sql(query, FTS_TABLE, tools=True)
    try:
        best = [seq for (seq,) in storage.exec(_TOP_HITS.format(hits=hits), *params, limit)]
        rows = _hit_rows(storage, best)
        if len(rows) < len(best):
            managed = [seq for (seq,) in storage.exec(_TOP_MANAGED_HITS.format(hits=hits), *params, limit)]
            rows = _hit_rows(storage, managed)
    except apsw.Error as exc:
        raise SearchQueryError(f"cross-session message search failed: {exc}") from exc
    return rows


def _hit_rows(storage: SqlStorage, seqs: list[int]) -> list[dict[str, str]]:
    """The hits among ``seqs`` that belong to registered sessions, in the order of ``seqs``."""
    if not seqs:
        return []
    found = {row[0]: dict(zip(_HIT_NAMES, row[1:])) for row in storage.exec(_HIT_ROWS, json.dumps(seqs))}
    return [found[seq] for seq in seqs if seq in found]
