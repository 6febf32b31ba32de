"""The session registry (``assistant_sessions``) and the cross-session search in an actor's file.

Synchronous functions (no trio) behind ``actors.SessionManager``: the
operations of :mod:`storage.tree.registry` (the registry's rules, written
once for both databases: rows, ordering, what a delete removes) driven on
apsw, in the statements of :class:`SqliteRegistryDialect`. A registry row is a
plain ``dict`` with the spec's column names, in the order of
:data:`SESSION_COLUMNS`; times are stored UTC text with milliseconds
(``YYYY-MM-DD HH:MM:SS.SSS``).

Search. :func:`search_messages` looks only at stored messages of sessions
that have a registry row (docs/deviations.md #11), using the query rules of
:mod:`storage.fts` (docs/deviations.md #9, #10).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import apsw

from . import fts
from .errors import SearchQueryError
from .schema import BLOCKS_TABLE, COMPACTIONS_TABLE, MESSAGES_TABLE, NOW_MS, create_on_first_use, table_exists
from .sqlite import SqlStorage
from .tree import registry as rules
from .messages import tree_dialect
from .tree.registry import SESSION_COLUMNS
from .tree.rows import NewMessage
from .tree.sqlite import FTS_TABLE, TEXT_OF_CONTENT
from .tree.steps import Operation, drive

__all__ = [
    "SESSION_COLUMNS", "SqliteRegistryDialect", "add_usage", "count_sessions", "delete_session", "end_session",
    "get_session", "insert_session", "list_sessions", "rename_session", "search_messages", "session_exists",
    "touch_session",
]

T = TypeVar("T")
Row = dict[str, Any]

_COLUMNS = ", ".join(SESSION_COLUMNS)
_NEXT_UPDATE = "(SELECT coalesce(max(updated_seq), 0) + 1 FROM assistant_sessions)"
_TOUCH = f"updated_at = {NOW_MS}, updated_seq = {_NEXT_UPDATE}"

#: The registry's table (made by the first session registered: ``storage.schema.ON_FIRST_USE``).
REGISTRY_TABLE = "assistant_sessions"
_EMBEDDINGS = "assistant_embeddings"  # with assistant_embeddings_pending and _through (made together, on first use)

# Everything keyed by the session id; search rows first (their rowid is the message's seq). Each
# statement with the tables of storage.schema.ON_FIRST_USE it needs (none: always there): one made
# on first use that does not exist holds no row of the session.
_DELETE_SESSION_ROWS: tuple[tuple[tuple[str, ...], str], ...] = (
    ((FTS_TABLE, MESSAGES_TABLE),
     f"DELETE FROM {FTS_TABLE} WHERE rowid IN (SELECT seq FROM assistant_messages WHERE session_id = ?)"),
    ((FTS_TABLE, MESSAGES_TABLE),
     f"DELETE FROM {FTS_TABLE}_cjk WHERE rowid IN (SELECT seq FROM assistant_messages WHERE session_id = ?)"),
    ((FTS_TABLE, MESSAGES_TABLE), f"DELETE FROM {FTS_TABLE}{fts.TOOLS_SUFFIX} WHERE rowid IN "
                                  "(SELECT seq FROM assistant_messages WHERE session_id = ?)"),
    ((_EMBEDDINGS,), "DELETE FROM assistant_embeddings WHERE session_id = ?"),
    ((_EMBEDDINGS,), "DELETE FROM assistant_embeddings_pending WHERE session_id = ?"),
    ((_EMBEDDINGS,), "DELETE FROM assistant_embeddings_through WHERE session_id = ?"),
    ((MESSAGES_TABLE,), "DELETE FROM assistant_messages WHERE session_id = ?"),
    ((COMPACTIONS_TABLE,), "DELETE FROM assistant_compactions WHERE session_id = ?"),
    ((), "DELETE FROM assistant_config WHERE session_id = ?"),
    ((), "DELETE FROM assistant_sessions WHERE id = ?"),
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


class SqliteRegistryDialect:
    """The SQLite :class:`~storage.tree.registry.RegistryDialect`.

    Args:
        con: the file's connection, when it deletes a session (it asks which tables made on
            first use exist); ``None`` otherwise.
    """

    def __init__(self, con: apsw.Connection | None = None) -> None:
        self._con = con

    GET = f"SELECT {_COLUMNS} FROM assistant_sessions WHERE id = ?1"
    GET_FOR_UPDATE = GET  # the actor's transaction holds the file
    EXISTS = "SELECT 1 FROM assistant_sessions WHERE id = ?1"
    LIST = f"""
SELECT {_COLUMNS} FROM assistant_sessions INDEXED BY idx_assistant_sessions_updated
ORDER BY updated_at DESC, updated_seq DESC
"""
    COUNT = "SELECT count(*) FROM assistant_sessions"
    INSERT = f"""
INSERT INTO assistant_sessions (id, name, parent_session_id, model, source, updated_seq)
VALUES (?1, ?2, ?3, ?4, ?5, {_NEXT_UPDATE}) RETURNING {_COLUMNS}
"""
    TOUCH = f"UPDATE assistant_sessions SET {_TOUCH} WHERE id = ?1 RETURNING id"
    RENAME = f"UPDATE assistant_sessions SET name = ?2, {_TOUCH} WHERE id = ?1 RETURNING {_COLUMNS}"
    END = f"UPDATE assistant_sessions SET end_reason = ?2, {_TOUCH} WHERE id = ?1 RETURNING {_COLUMNS}"
    ADD_USAGE = f"""
UPDATE assistant_sessions SET input_tokens = input_tokens + ?2, output_tokens = output_tokens + ?3,
    estimated_cost = estimated_cost + ?4, {_TOUCH}
WHERE id = ?1 RETURNING {_COLUMNS}
"""

    def delete_rows(self, session_id: str) -> Operation[None]:
        """The session's search rows first (their rowid is the message's seq), then its rows and blocks
        (skipping the tables made on first use that do not exist)."""
        con = self._con
        for tables, statement in _DELETE_SESSION_ROWS:
            if con is None or all(table_exists(con, table) for table in tables):
                yield statement, (session_id,)
        if con is None or table_exists(con, BLOCKS_TABLE):
            suffix = rules.block_suffix(session_id)
            yield _DELETE_BLOCKS, (len(suffix), suffix)



def _search(query: fts.ParsedQuery, limit: int) -> Operation[list[Row]]:
    """Ranks the whole file's matches and keeps the best ``limit``; only when some of those
    are not messages of registered sessions does it rank again, joined to the registry.
    In a manager's file (every message in a registered session) the join thus touches
    ``limit`` rows, not every match."""
    hits, params = fts.matching_rowids_sql(query, FTS_TABLE, tools=True)
    best = [seq for (seq,) in (yield _TOP_HITS.format(hits=hits), (*params, limit))]
    rows = yield from _hit_rows(best)
    if len(rows) < len(best):
        managed = [seq for (seq,) in (yield _TOP_MANAGED_HITS.format(hits=hits), (*params, limit))]
        rows = yield from _hit_rows(managed)
    return rows


def _hit_rows(seqs: list[int]) -> Operation[list[Row]]:
    """The hits among ``seqs`` that belong to registered sessions, in the order of ``seqs``."""
    if not seqs:
        return []
    found = {row[0]: dict(zip(_HIT_NAMES, row[1:])) for row in (yield _HIT_ROWS, (json.dumps(seqs),))}
    return [found[seq] for seq in seqs if seq in found]


_SQLITE_REGISTRY = SqliteRegistryDialect()


def _run(storage: SqlStorage, op: Operation[T]) -> T:
    return drive(storage.connection, op)


def _write(storage: SqlStorage, op: Operation[T], tables: tuple[str, ...] = ()) -> T:
    """Run a registry write in one transaction, making first the ``tables`` (of
    ``storage.schema.ON_FIRST_USE``) it writes that the file has none of yet."""
    con = storage.connection
    made = all(table_exists(con, table) for table in tables)  # outside: once seen, never asked again
    with storage.transaction():
        if not made:
            for table in tables:
                create_on_first_use(con, table)
        return _run(storage, op)


#: What registering a session writes: the registry, and its first messages with their text indexes
#: (a chain naming an overlay reads compactions through :func:`storage.messages.tree_dialect`).
_REGISTERING = (REGISTRY_TABLE, MESSAGES_TABLE, FTS_TABLE)


def _registered(storage: SqlStorage) -> bool:
    """Whether the file has a registry (a session was ever registered); without one every session is unknown."""
    return table_exists(storage.connection, REGISTRY_TABLE)


# -- reads ---------------------------------------------------------------------


def get_session(storage: SqlStorage, session_id: str) -> Row | None:
    """The registry row of ``session_id``, or ``None``."""
    if not _registered(storage):
        return None
    return _run(storage, rules.get_session(_SQLITE_REGISTRY, session_id))


def session_exists(storage: SqlStorage, session_id: str) -> bool:
    """``True`` when ``session_id`` has a registry row."""
    if not _registered(storage):
        return False
    return _run(storage, rules.session_exists(_SQLITE_REGISTRY, session_id))


def list_sessions(storage: SqlStorage) -> list[Row]:
    """Every registry row, most recently updated first (ties: the later write first)."""
    if not _registered(storage):
        return []
    return _run(storage, rules.list_sessions(_SQLITE_REGISTRY))


def count_sessions(storage: SqlStorage) -> int:
    """Number of registered sessions."""
    if not _registered(storage):
        return 0
    return _run(storage, rules.count_sessions(_SQLITE_REGISTRY))


# -- writes ----------------------------------------------------------------------


def insert_session(
    storage: SqlStorage,
    session_id: str,
    name: str,
    *,
    parent_session_id: str | None = None,
    model: str | None = None,
    source: str | None = None,
    messages: Sequence[NewMessage] = (),
    end: tuple[str, str] | None = None,
) -> Row:
    """Register ``session_id`` (zero usage, no end reason, both times now); returns the row.

    In the same transaction, ``end = (other session id, reason)`` first ends
    that session, and ``messages`` are stored as the new session's first
    chain (:func:`storage.tree.registry.insert_session`).

    Raises:
        apsw.ConstraintError: ``session_id`` is already registered (nothing written).
    """
    return _write(storage, rules.insert_session(
        _SQLITE_REGISTRY, tree_dialect(storage.connection), session_id, name, parent_session_id, model, source,
        messages, end,
    ), _REGISTERING)


def touch_session(storage: SqlStorage, session_id: str) -> bool:
    """Set ``updated_at`` to now (and take the next ``updated_seq``); ``False`` if unknown."""
    if not _registered(storage):
        return False
    return _write(storage, rules.touch_session(_SQLITE_REGISTRY, session_id))


def rename_session(storage: SqlStorage, session_id: str, name: str) -> Row | None:
    """Set the name and touch the row; returns the new row, ``None`` if unknown."""
    if not _registered(storage):
        return None
    return _write(storage, rules.rename_session(_SQLITE_REGISTRY, session_id, name))


def end_session(storage: SqlStorage, session_id: str, reason: str) -> Row | None:
    """Set ``end_reason`` and touch the row; returns the new row, ``None`` if unknown."""
    if not _registered(storage):
        return None
    return _write(storage, rules.end_session(_SQLITE_REGISTRY, session_id, reason))


def add_usage(
    storage: SqlStorage, session_id: str, input_tokens: int, output_tokens: int, cost: float,
    *, check: Callable[[Row], None] | None = None,
) -> Row | None:
    """Add to the three usage counters and touch the row; returns the new row, ``None`` if unknown.

    ``check(row)`` sees the current row first, in the same transaction, and
    may raise to write nothing.
    """
    if not _registered(storage):
        return None
    return _write(storage, rules.add_usage(_SQLITE_REGISTRY, session_id, input_tokens, output_tokens, cost, check))


def delete_session(storage: SqlStorage, session_id: str) -> bool:
    """Delete everything a session owns, in one transaction.

    Gone: its messages and their search rows (both indexes), its
    compactions, its ``assistant_config`` rows (loaded skills; before
    schema version 3, the active leaf), its context-block rows -- every
    ``cf_agents_context_blocks`` label ending in ``_<session_id>``, which is
    how per-session block rows and the cached prompt
    ``_system_prompt_<session_id>`` are named -- and its registry row.
    Returns ``False`` (and deletes nothing) when ``session_id`` is not registered.
    """
    if not _registered(storage):
        return False
    return _write(storage, rules.delete_session(SqliteRegistryDialect(storage.connection), session_id))


# -- search ------------------------------------------------------------------------


def search_messages(storage: SqlStorage, query: fts.ParsedQuery, limit: int) -> list[dict[str, str]]:
    """Stored messages of registered sessions matching ``query``, best first.

    Returns:
        Up to ``limit`` hits ``{"id", "role", "content", "created_at",
        "session_id"}``: ``content`` is the indexed text (the message's text
        parts joined by a space), ``created_at`` the stored time. Equal
        ranks keep insertion order.

    Raises:
        SearchQueryError: SQLite failed (never returned as an empty list).
    """
    con = storage.connection
    if not (_registered(storage) and table_exists(con, FTS_TABLE) and table_exists(con, MESSAGES_TABLE)):
        return []  # no session registered, or no message ever written: no hit
    try:
        return _run(storage, _search(query, limit))
    except apsw.Error as exc:
        raise SearchQueryError(f"cross-session message search failed: {exc}") from exc
