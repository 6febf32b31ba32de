"""SQL of the context providers: block rows, search entries, per-session config.

Synchronous helpers (no trio) behind the async providers of
:mod:`actors.context`. The rules of the block rows and search entries are
the operations of :mod:`storage.tree.context`, written once for both
databases and driven here on apsw (:class:`SqliteContextDialect`):

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

import json
from collections.abc import Sequence
from typing import Any, TypeVar

import apsw

from .carried import exclusive
from .errors import SearchQueryError
from .fts import ParsedQuery, index_rows, matching_rowids_sql, parse_query, unindex_rows
from .schema import BLOCKS_TABLE, NOW_MS, create_on_first_use, table_exists
from .sqlite import SqlStorage
from .tree import context as rules
from .tree.context import SEARCH_LIMIT, entries_summary, entries_text
from .tree.steps import Operation, drive

__all__ = [
    "SEARCH_FTS", "SEARCH_LIMIT", "SqliteContextDialect", "count_search_entries", "delete_blocks", "delete_config",
    "entries_summary", "entries_text", "held_exclusively", "read_block", "read_config", "search_entries", "upsert_search_entry",
    "write_block", "write_config",
]

T = TypeVar("T")

#: The porter FTS5 table of search entries (its trigram twin is ``<name>_cjk``).
SEARCH_FTS = "cf_agents_search_fts"
# Made, with both its full-text indexes, by the first entry written (storage.schema.ON_FIRST_USE).
_ENTRIES = "cf_agents_search_entries"

_SEQ_OF_ENTRY = "SELECT seq FROM cf_agents_search_entries WHERE label = ?1 AND key = ?2"
_INSERT_ENTRY = "INSERT INTO cf_agents_search_entries (label, key, content) VALUES (?1, ?2, ?3) RETURNING seq"
_UPDATE_ENTRY = f"UPDATE cf_agents_search_entries SET content = ?2, updated_at = {NOW_MS} WHERE seq = ?1"
_SEARCH_ENTRIES = """
SELECT e.key, e.content FROM ({hits}) AS m JOIN cf_agents_search_entries AS e ON e.seq = m.rowid
WHERE e.label = ? ORDER BY m.rank, e.seq LIMIT ?
"""


class SqliteContextDialect:
    """The SQLite :class:`~storage.tree.context.ContextDialect`: entries are searched through
    ``cf_agents_search_fts`` (and its CJK twin), whose rowid is the entry's ``seq``."""

    READ_BLOCK = "SELECT content FROM cf_agents_context_blocks WHERE label = ?1"
    WRITE_BLOCK = (
        "INSERT INTO cf_agents_context_blocks (label, content) VALUES (?1, ?2) "
        f"ON CONFLICT (label) DO UPDATE SET content = excluded.content, updated_at = {NOW_MS}"
    )
    DELETE_BLOCKS = "DELETE FROM cf_agents_context_blocks WHERE label IN (SELECT value FROM json_each(?1)) RETURNING label"
    COUNT_ENTRIES = "SELECT count(*) FROM cf_agents_search_entries WHERE label = ?1"

    @staticmethod
    def label_list(labels: Sequence[str]) -> str:
        """A JSON array: what ``json_each`` reads."""
        return json.dumps(list(labels))

    @staticmethod
    def upsert_entry(label: str, key: str, content: str) -> Operation[None]:
        """The entry row, then its full-text rows replaced."""
        rows = yield _SEQ_OF_ENTRY, (label, key)
        if rows:
            seq: int = rows[0][0]
            yield _UPDATE_ENTRY, (seq, content)
            for step in unindex_rows(SEARCH_FTS, seq):
                yield step
        else:
            [(seq,)] = yield _INSERT_ENTRY, (label, key, content)
        for step in index_rows(SEARCH_FTS, seq, content, extra={"label": label, "key": key}):
            yield step

    @staticmethod
    def search_entries(label: str, query: ParsedQuery, limit: int) -> Operation[list[tuple[str, str]]]:
        """The FTS matches of the whole table, joined to ``label``'s entries."""
        hits, params = matching_rowids_sql(query, SEARCH_FTS)
        rows = yield _SEARCH_ENTRIES.format(hits=hits), (*params, label, limit)
        return [(key, content) for key, content in rows]


_SQLITE_CONTEXT = SqliteContextDialect()


def _run(storage: SqlStorage, op: Operation[T]) -> T:
    return drive(storage.connection, op)


# -- cf_agents_context_blocks ------------------------------------------------


def held_exclusively(storage: SqlStorage) -> bool:
    """Whether ``storage``'s connection holds its file exclusively (``locking_mode=EXCLUSIVE``: no other
    connection can write a row unseen), as :func:`storage.carried.exclusive`."""
    return exclusive(storage.connection)


# The block table is made by the first block or cached prompt written (storage.schema.ON_FIRST_USE):
# while it does not exist, no block has a row.


def read_block(storage: SqlStorage, label: str) -> str | None:
    """Content of the block row ``label``, or ``None`` when there is no row."""
    if not table_exists(storage.connection, BLOCKS_TABLE):
        return None
    return _run(storage, rules.read_block(_SQLITE_CONTEXT, label))


def write_block(storage: SqlStorage, label: str, content: str) -> None:
    """Insert or replace the block row ``label`` (``updated_at`` set to now, ms)."""
    if table_exists(storage.connection, BLOCKS_TABLE):
        _run(storage, rules.write_block(_SQLITE_CONTEXT, label, content))
        return
    with storage.transaction():  # the first block of the file: the table and its row, or neither
        create_on_first_use(storage.connection, BLOCKS_TABLE)
        _run(storage, rules.write_block(_SQLITE_CONTEXT, label, content))


def delete_blocks(storage: SqlStorage, labels: list[str]) -> int:
    """Delete the block rows named in ``labels``; returns how many existed."""
    if not table_exists(storage.connection, BLOCKS_TABLE):
        return 0
    with storage.transaction():
        return _run(storage, rules.delete_blocks(_SQLITE_CONTEXT, labels))


# -- cf_agents_search_entries + cf_agents_search_fts -------------------------


def count_search_entries(storage: SqlStorage, label: str) -> int:
    """Number of search entries under the block label ``label``."""
    if not table_exists(storage.connection, _ENTRIES):
        return 0
    return _run(storage, rules.count_entries(_SQLITE_CONTEXT, label))


def upsert_search_entry(storage: SqlStorage, label: str, key: str, content: str) -> None:
    """Store ``content`` under ``(label, key)`` and replace its full-text rows.

    A new key is inserted; an existing one keeps its ``seq`` and
    ``created_at``, gets the new content and ``updated_at``. All in one
    transaction: a failure leaves the old entry and index untouched.
    """
    with storage.transaction():
        create_on_first_use(storage.connection, _ENTRIES)
        _run(storage, rules.upsert_entry(_SQLITE_CONTEXT, label, key, content))


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
    if parsed is None or not table_exists(storage.connection, _ENTRIES):
        return []
    try:
        rows = _run(storage, rules.search_entries(_SQLITE_CONTEXT, label, parsed, limit))
    except apsw.Error as exc:
        raise SearchQueryError(f"search of {label!r} entries failed: {exc}") from exc
    return [{"key": key, "content": content} for key, content in rows]


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
    value: str | None = storage.scalar(_GET_CONFIG, session_id, key)
    return value


def write_config(storage: SqlStorage, session_id: str, key: str, value: str) -> None:
    """Insert or replace the value under ``(session_id, key)``."""
    storage.exec(_SET_CONFIG, session_id, key, value)


def delete_config(storage: SqlStorage, session_id: str, key: str) -> None:
    """Remove the value under ``(session_id, key)`` (no-op when absent)."""
    storage.exec(_DROP_CONFIG, session_id, key)
