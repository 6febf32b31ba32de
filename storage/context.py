"""SQL of the context providers: block rows, search entries, per-session config.

Synchronous helpers (no trio) behind the async providers of
:mod:`actors.context`:

* ``cf_agents_context_blocks`` -- one row per context block or cached
  prompt, keyed by ``label`` (``"memory"``, ``"memory_<sid>"``,
  ``"_system_prompt_<sid>"``): :func:`read_block`, :func:`write_block`,
  :func:`delete_blocks`.
* ``cf_agents_search_entries`` + ``cf_agents_search_fts`` (and its CJK
  twin) -- keyed entries of a searchable block, shared by every session
  that uses the same block label: :func:`count_search_entries`,
  :func:`upsert_search_entry`, :func:`search_entries`. Queries go through
  :mod:`storage.fts` (one search syntax everywhere, docs/deviations.md #9, #10); the
  FTS rowid is the entry's ``seq``.
* ``assistant_config`` -- small per-session values (``(session_id, key)``
  -> text): :func:`read_config`, :func:`write_config`, :func:`delete_config`.

Every write that touches more than one row runs in one transaction.
"""

from __future__ import annotations

from typing import Any

import apsw

from .errors import SearchQueryError
from .fts import index_rows, matching_rowids_sql, parse_query, unindex_rows
from .schema import NOW_MS
from .sqlite import SqlStorage

#: The porter FTS5 table of search entries (its trigram twin is ``<name>_cjk``).
SEARCH_FTS = "cf_agents_search_fts"

#: Most results one :func:`search_entries` call returns by default.
SEARCH_LIMIT = 10


# -- cf_agents_context_blocks ------------------------------------------------


def read_block(storage: SqlStorage, label: str) -> str | None:
    """Content of the block row ``label``, or ``None`` when there is no row."""
    return storage.scalar("SELECT content FROM cf_agents_context_blocks WHERE label = ?", label)


def write_block(storage: SqlStorage, label: str, content: str) -> None:
    """Insert or replace the block row ``label`` (``updated_at`` set to now, ms)."""
    storage.exec(
        "INSERT INTO cf_agents_context_blocks (label, content) VALUES (?, ?) "
        f"ON CONFLICT (label) DO UPDATE SET content = excluded.content, updated_at = {NOW_MS}",
        label,
        content,
    )


def delete_blocks(storage: SqlStorage, labels: list[str]) -> int:
    """Delete the block rows named in ``labels``; returns how many existed."""
    with storage.transaction():
        before = storage.connection.total_changes()
        for label in labels:
            storage.exec("DELETE FROM cf_agents_context_blocks WHERE label = ?", label)
        return storage.connection.total_changes() - before


# -- cf_agents_search_entries + cf_agents_search_fts -------------------------


def count_search_entries(storage: SqlStorage, label: str) -> int:
    """Number of search entries under the block label ``label``."""
    return int(storage.scalar("SELECT COUNT(*) FROM cf_agents_search_entries WHERE label = ?", label))


def upsert_search_entry(storage: SqlStorage, label: str, key: str, content: str) -> None:
    """Store ``content`` under ``(label, key)`` and replace its full-text rows.

    A new key is inserted; an existing one keeps its ``seq`` and
    ``created_at``, gets the new content and ``updated_at``. All in one
    transaction: a failure leaves the old entry and index untouched.
    """
    with storage.transaction():
        seq = storage.scalar(
            "SELECT seq FROM cf_agents_search_entries WHERE label = ? AND key = ?", label, key
        )
        if seq is None:
            storage.exec(
                "INSERT INTO cf_agents_search_entries (label, key, content) VALUES (?, ?, ?)",
                label,
                key,
                content,
            )
            seq = storage.connection.last_insert_rowid()
        else:
            storage.exec(
                f"UPDATE cf_agents_search_entries SET content = ?, updated_at = {NOW_MS} WHERE seq = ?",
                content,
                seq,
            )
            _run(storage, unindex_rows(SEARCH_FTS, seq))
        _run(storage, index_rows(SEARCH_FTS, seq, content, extra={"label": label, "key": key}))


def search_entries(storage: SqlStorage, label: str, query: str, limit: int = SEARCH_LIMIT) -> list[dict[str, Any]]:
    """Entries of ``label`` matching ``query``, best first: ``[{key, content}]``.

    The query follows :func:`storage.fts.parse_query`: every word must match
    (any order), ``"quoted parts"`` match as phrases, nothing is FTS5 syntax.
    A query with no searchable term returns ``[]`` without querying. Ties in
    rank are broken by insertion order.

    Raises:
        SearchQueryError: SQLite failed while searching (never for user text).
    """
    parsed = parse_query(query)
    if parsed is None:
        return []
    match_sql, params = matching_rowids_sql(parsed, SEARCH_FTS)
    sql = (
        f"SELECT e.key AS key, e.content AS content FROM ({match_sql}) AS m "
        "JOIN cf_agents_search_entries AS e ON e.seq = m.rowid "
        "WHERE e.label = ? ORDER BY m.rank, e.seq LIMIT ?"
    )
    try:
        return storage.sql(sql, *params, label, limit)
    except apsw.Error as exc:
        raise SearchQueryError(f"search of {label!r} entries failed: {exc}") from exc


def _run(storage: SqlStorage, statements: list[tuple[str, tuple]]) -> None:
    for sql, params in statements:
        storage.exec(sql, *params)


# -- assistant_config ----------------------------------------------------------

# The one place these rows are written; parameters (session_id, key[, value]).
_GET_CONFIG = "SELECT value FROM assistant_config WHERE session_id = ? AND key = ?"
_SET_CONFIG = (
    "INSERT INTO assistant_config (session_id, key, value) VALUES (?, ?, ?) "
    "ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value"
)
_DROP_CONFIG = "DELETE FROM assistant_config WHERE session_id = ? AND key = ?"


def read_config(storage: SqlStorage, session_id: str, key: str) -> str | None:
    """The value stored under ``(session_id, key)``, or ``None``."""
    return storage.scalar(_GET_CONFIG, session_id, key)


def write_config(storage: SqlStorage, session_id: str, key: str, value: str) -> None:
    """Insert or replace the value under ``(session_id, key)``."""
    storage.exec(_SET_CONFIG, session_id, key, value)


def delete_config(storage: SqlStorage, session_id: str, key: str) -> None:
    """Remove the value under ``(session_id, key)`` (no-op when absent)."""
    storage.exec(_DROP_CONFIG, session_id, key)
