"""SQL for one session's message tree: messages, compaction rows, the active leaf, search.

:class:`MessageStore` is the synchronous storage half of ``actors.Session``.
It speaks in stored text (message JSON, indexed text) and never parses or
validates messages; the actor layer does that. Every write method runs in
one ``storage.transaction()`` (a savepoint when the caller already holds a
transaction), so a failed write leaves nothing behind.

Tables (``storage/schema.py``): ``assistant_messages`` keyed
``(session_id, id)`` with the integer ``seq`` as insertion order;
``assistant_compactions``; ``assistant_fts`` (+ ``assistant_fts_cjk``) whose
rowid is the message's ``seq``; ``assistant_config`` holding the row
``(session_id, 'active_leaf', <message id>)``.

Invariants the queries rely on:

* **A parent is older than its children** (``parent.seq < child.seq``). A
  parent must exist when a child is inserted, and deleting a message hands
  its children to its own parent, an older row still. So the path walk can
  require ``seq`` to fall at every step, which bounds it by the path length
  even in a damaged file (no depth cap, DEVIATIONS 18), and the newest
  message of a session is always a leaf.
* **The active leaf is persisted** (DEVIATIONS 3): every insert makes the new
  message the active leaf; deleting it drops the row; reads fall back to the
  newest childless message (``created_at DESC, seq DESC``), found by walking
  ``idx_assistant_msg_created`` backwards until the first message without
  children -- normally the first row it looks at.

Every lookup is an index seek; nothing here scans a session to append,
find the leaf or list children (PERFORMANCE.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import apsw

from . import fts
from .errors import SearchQueryError
from .sqlite import SqlStorage

#: Ids of compaction overlays are this prefix + the compaction's id; never stored.
OVERLAY_PREFIX = "compaction_"
#: ``assistant_config.key`` of the persisted active leaf.
ACTIVE_LEAF_KEY = "active_leaf"
#: The porter FTS5 table holding message text (its trigram twin is ``<name>_cjk``).
FTS_TABLE = "assistant_fts"


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


@dataclass(frozen=True, slots=True)
class PathRow:
    """One message on a path, without its content. ``bytes`` is the UTF-8 size of the JSON."""

    seq: int
    id: str
    role: str
    bytes: int


@dataclass(frozen=True, slots=True)
class CompactionRow:
    """One ``assistant_compactions`` row; ``created_at`` as stored (UTC, ms)."""

    seq: int
    id: str
    summary: str
    from_message_id: str
    to_message_id: str
    created_at: str


@dataclass(frozen=True, slots=True)
class SearchRow:
    """One search hit: the message's id and role, its indexed text, when it was stored."""

    id: str
    role: str
    content: str
    created_at: str


def to_iso8601(created_at: str) -> str:
    """Stored ``YYYY-MM-DD HH:MM:SS.SSS`` (UTC) -> ``YYYY-MM-DDTHH:MM:SS.SSSZ``."""
    return f"{created_at[:10]}T{created_at[11:]}Z"


# -- SQL -------------------------------------------------------------------

_GET = "SELECT content FROM assistant_messages WHERE session_id = ?1 AND id = ?2"
_EXISTS = "SELECT 1 FROM assistant_messages WHERE session_id = ?1 AND id = ?2"

_ACTIVE_LEAF = """
SELECT m.id FROM assistant_config AS c
JOIN assistant_messages AS m ON m.session_id = c.session_id AND m.id = c.value
WHERE c.session_id = ?1 AND c.key = 'active_leaf'
  AND NOT EXISTS (SELECT 1 FROM assistant_messages AS k INDEXED BY idx_assistant_msg_parent
                  WHERE k.session_id = ?1 AND k.parent_id = m.id)
"""
_NEWEST_LEAF = """
SELECT m.id FROM assistant_messages AS m INDEXED BY idx_assistant_msg_created
WHERE m.session_id = ?1
  AND NOT EXISTS (SELECT 1 FROM assistant_messages AS k INDEXED BY idx_assistant_msg_parent
                  WHERE k.session_id = ?1 AND k.parent_id = m.id)
ORDER BY m.created_at DESC, m.seq DESC LIMIT 1
"""
_SET_ACTIVE_LEAF = """
INSERT INTO assistant_config (session_id, key, value) VALUES (?1, 'active_leaf', ?2)
ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value
"""
_DROP_ACTIVE_LEAF = "DELETE FROM assistant_config WHERE session_id = ?1 AND key = 'active_leaf'"

# The path from ?2 up to its root: (seq, depth), depth 0 = the leaf. ``m.seq < p.seq``
# holds on every real edge (see the module docstring) and makes any cycle impossible.
_PATH_CTE = """
WITH RECURSIVE path(seq, parent_id, depth) AS (
    SELECT seq, parent_id, 0 FROM assistant_messages WHERE session_id = ?1 AND id = ?2
    UNION ALL
    SELECT m.seq, m.parent_id, p.depth + 1
    FROM path AS p JOIN assistant_messages AS m ON m.session_id = ?1 AND m.id = p.parent_id
    WHERE m.seq < p.seq
)
"""
_PATH_CONTENT = _PATH_CTE + """
SELECT m.content FROM path JOIN assistant_messages AS m ON m.seq = path.seq ORDER BY path.depth DESC
"""
_PATH_STATS = _PATH_CTE + """
SELECT m.seq, m.id, m.role, octet_length(m.content)
FROM path JOIN assistant_messages AS m ON m.seq = path.seq ORDER BY path.depth DESC
"""
_PATH_LENGTH = _PATH_CTE + "SELECT count(*) FROM path"
_CONTENTS = """
SELECT seq, content FROM assistant_messages WHERE seq IN (SELECT value FROM json_each(?1))
"""
_CHILDREN = """
SELECT content FROM assistant_messages INDEXED BY idx_assistant_msg_parent
WHERE session_id = ?1 AND parent_id = ?2 ORDER BY created_at, seq
"""

_INSERT = """
INSERT INTO assistant_messages (session_id, id, parent_id, role, content) VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (session_id, id) DO NOTHING RETURNING seq
"""
_UPDATE = """
UPDATE assistant_messages SET role = ?3, content = ?4 WHERE session_id = ?1 AND id = ?2 RETURNING seq
"""
_ROW_FOR_DELETE = "SELECT seq, parent_id FROM assistant_messages WHERE session_id = ?1 AND id = ?2"
_REPARENT = """
UPDATE assistant_messages INDEXED BY idx_assistant_msg_parent SET parent_id = ?3
WHERE session_id = ?1 AND parent_id = ?2
"""
_DELETE = "DELETE FROM assistant_messages WHERE seq = ?1"
_SESSION_SEQS = "SELECT seq FROM assistant_messages WHERE session_id = ?1"
_CLEAR_MESSAGES = "DELETE FROM assistant_messages WHERE session_id = ?1"
_CLEAR_COMPACTIONS = "DELETE FROM assistant_compactions WHERE session_id = ?1"

# Search: ``{hits}`` is storage.fts.matching_rowids_sql(...) -> (rowid, rank) of every match.
_TOP_HITS = "SELECT h.rowid, h.rank FROM ({hits}) AS h ORDER BY h.rank, h.rowid LIMIT ?"
_TOP_SESSION_HITS = """
SELECT h.rowid, h.rank FROM ({hits}) AS h JOIN assistant_messages AS m ON m.seq = h.rowid
WHERE m.session_id = ? ORDER BY h.rank, h.rowid LIMIT ?
"""
# ``+m.session_id``: a filter on the few rows named, never a reason to walk a session index.
_HIT_ROWS = """
SELECT m.seq, m.id, m.role, f.content, m.created_at
FROM json_each(?2) AS j
JOIN assistant_messages AS m ON m.seq = j.value
JOIN assistant_fts AS f ON f.rowid = m.seq
WHERE +m.session_id = ?1
"""

_ADD_COMPACTION = """
INSERT INTO assistant_compactions (id, session_id, summary, from_message_id, to_message_id)
VALUES (?2, ?1, ?3, ?4, ?5) RETURNING seq, created_at
"""
_COMPACTIONS = """
SELECT seq, id, summary, from_message_id, to_message_id, created_at FROM assistant_compactions
WHERE session_id = ?1 ORDER BY created_at, seq
"""
_COMPACTION_END = "SELECT to_message_id FROM assistant_compactions WHERE session_id = ?1 AND id = ?2"


class MessageStore:
    """The rows of one session (``session_id``) in one :class:`SqlStorage`.

    Cheap to create; holds no state besides its two arguments, so any number
    of stores (and processes reopening the file) see the same tree.
    """

    def __init__(self, storage: SqlStorage, session_id: str = "") -> None:
        self.storage = storage
        self.session_id = session_id

    # -- internals ---------------------------------------------------------

    def _rows(self, query: str, *params: Any) -> apsw.Cursor:
        return self.storage.connection.execute(query, (self.session_id, *params))

    def _one(self, query: str, *params: Any) -> Any:
        # fetchall: a RETURNING statement must run to completion before COMMIT.
        rows = self._rows(query, *params).fetchall()
        return rows[0][0] if rows else None

    def _run(self, statements: Iterable[tuple[str, tuple]]) -> None:
        con = self.storage.connection
        for sql, params in statements:
            con.execute(sql, params)

    # -- reads -------------------------------------------------------------

    def get(self, message_id: str) -> str | None:
        """The stored JSON of ``message_id``, or ``None``."""
        return self._one(_GET, message_id)

    def exists(self, message_id: str) -> bool:
        """``True`` when ``message_id`` is stored in this session."""
        return self._one(_EXISTS, message_id) is not None

    def latest_leaf(self) -> str | None:
        """Id of the latest leaf: the active leaf, else the newest childless message; ``None`` if empty."""
        leaf = self._one(_ACTIVE_LEAF)
        return leaf if leaf is not None else self._one(_NEWEST_LEAF)

    def resolve_leaf(self, leaf_id: str | None) -> str | None:
        """``leaf_id`` if stored, the latest leaf when ``leaf_id`` is ``None``, else ``None``."""
        if leaf_id is None:
            return self.latest_leaf()
        return leaf_id if self.exists(leaf_id) else None

    def path_contents(self, leaf_id: str) -> list[str]:
        """Stored JSON of every message from the root down to ``leaf_id`` (``[]`` if unknown)."""
        return [row[0] for row in self._rows(_PATH_CONTENT, leaf_id)]

    def path_stats(self, leaf_id: str) -> list[PathRow]:
        """Root -> ``leaf_id`` as :class:`PathRow` (no content is read)."""
        return [PathRow(*row) for row in self._rows(_PATH_STATS, leaf_id)]

    def path_length(self, leaf_id: str) -> int:
        """Number of rows from the root to ``leaf_id`` (0 if unknown)."""
        return int(self._one(_PATH_LENGTH, leaf_id))

    def contents(self, seqs: list[int]) -> list[str]:
        """Stored JSON of the messages ``seqs``, in the order given (unknown seqs are skipped)."""
        if not seqs:
            return []
        con = self.storage.connection
        by_seq = dict(con.execute(_CONTENTS, ("[" + ",".join(map(str, seqs)) + "]",)))
        return [by_seq[s] for s in seqs if s in by_seq]

    def children(self, message_id: str) -> list[str]:
        """Stored JSON of the children of ``message_id``, oldest first (``created_at``, then ``seq``)."""
        return [row[0] for row in self._rows(_CHILDREN, message_id)]

    def compactions(self) -> list[CompactionRow]:
        """Every compaction row of the session, oldest first (``created_at``, then ``seq``)."""
        return [CompactionRow(*row) for row in self._rows(_COMPACTIONS)]

    def search(self, query: fts.ParsedQuery, limit: int) -> list[SearchRow]:
        """Messages whose indexed text matches ``query``: best bm25 rank first, ties oldest first.

        Ranks the whole file's matches and keeps the best ``limit``; only when
        another session's messages are among them does it rank again, joined
        to this session's rows. A file holding one session (the usual actor)
        thus never looks up the messages table for every match.

        Raises:
            SearchQueryError: SQLite failed (never returned as an empty list).
        """
        hits, params = fts.matching_rowids_sql(query, FTS_TABLE)
        con = self.storage.connection
        try:
            best = con.execute(_TOP_HITS.format(hits=hits), (*params, limit)).fetchall()
            rows = self._hit_rows([seq for seq, _ in best])
            if len(rows) < len(best):
                scoped = con.execute(_TOP_SESSION_HITS.format(hits=hits), (*params, self.session_id, limit))
                rows = self._hit_rows([seq for seq, _ in scoped])
        except apsw.Error as exc:
            raise SearchQueryError(f"message search failed: {exc}") from exc
        return rows

    def _hit_rows(self, seqs: list[int]) -> list[SearchRow]:
        """The hits among ``seqs`` that are messages of this session, in the order of ``seqs``."""
        if not seqs:
            return []
        found = {
            row[0]: SearchRow(*row[1:])
            for row in self._rows(_HIT_ROWS, "[" + ",".join(map(str, seqs)) + "]")
        }
        return [found[s] for s in seqs if s in found]

    # -- writes ------------------------------------------------------------

    def append(
        self, message_id: str, role: str, content: str, text: str, parent_id: str | None | _LatestLeaf
    ) -> tuple[bool, str | None]:
        """Insert a message (and its search text) and make it the active leaf.

        Args:
            parent_id: :data:`LATEST_LEAF` -> the latest leaf (``None`` in an
                empty session); ``None`` -> a new root; an overlay id
                (``compaction_<id>``) -> the last message that compaction
                covers, or the latest leaf when there is no such compaction;
                any other id not stored in this session -> a root.
            text: the text to index; ``""`` indexes nothing.

        Returns:
            ``(inserted, parent)``: ``inserted`` is ``False`` when the id is
            already stored (nothing changes, the first content stays);
            ``parent`` is the parent actually used.
        """
        with self.storage.transaction():
            parent = self._resolve_parent(parent_id)
            seq = self._one(_INSERT, message_id, parent, role, content)
            if seq is None:
                return False, parent
            self._run(fts.index_rows(FTS_TABLE, seq, text, extra=self._fts_extra(message_id, role)))
            self._rows(_SET_ACTIVE_LEAF, message_id)
            return True, parent

    def _resolve_parent(self, parent_id: str | None | _LatestLeaf) -> str | None:
        if parent_id is LATEST_LEAF:
            return self.latest_leaf()
        if parent_id is None:
            return None
        if parent_id.startswith(OVERLAY_PREFIX) and not self.exists(parent_id):
            end = self._one(_COMPACTION_END, parent_id[len(OVERLAY_PREFIX) :])
            if end is None:
                return self.latest_leaf()
            parent_id = end
        return parent_id if self.exists(parent_id) else None

    def _fts_extra(self, message_id: str, role: str) -> dict[str, str]:
        return {"id": message_id, "session_id": self.session_id, "role": role}

    def update(self, message_id: str, role: str, content: str, text: str) -> bool:
        """Replace a stored message's role and content and re-index it.

        Returns ``False`` (and writes nothing) when ``message_id`` is not stored.
        """
        with self.storage.transaction():
            seq = self._one(_UPDATE, message_id, role, content)
            if seq is None:
                return False
            self._run(fts.unindex_rows(FTS_TABLE, seq))
            self._run(fts.index_rows(FTS_TABLE, seq, text, extra=self._fts_extra(message_id, role)))
            return True

    def delete(self, message_ids: Iterable[str]) -> list[str]:
        """Delete messages and their search rows; children move up to the deleted message's parent.

        Ids not stored are skipped. Deleting the active leaf drops it (the
        next read falls back to the newest leaf). Returns the ids deleted,
        in the order given, without repeats.
        """
        deleted: list[str] = []
        with self.storage.transaction():
            for message_id in message_ids:
                row = self._rows(_ROW_FOR_DELETE, message_id).fetchone()
                if row is None:
                    continue
                seq, parent = row
                self._rows(_REPARENT, message_id, parent)
                self.storage.connection.execute(_DELETE, (seq,))
                self._run(fts.unindex_rows(FTS_TABLE, seq))
                deleted.append(message_id)
            if deleted and self._one(_ACTIVE_LEAF) is None:
                self._rows(_DROP_ACTIVE_LEAF)
        return deleted

    def clear(self) -> None:
        """Delete every message, compaction and search row of the session and its active leaf."""
        with self.storage.transaction():
            seqs = [row[0] for row in self._rows(_SESSION_SEQS)]
            for seq in seqs:
                self._run(fts.unindex_rows(FTS_TABLE, seq))
            self._rows(_CLEAR_MESSAGES)
            self._rows(_CLEAR_COMPACTIONS)
            self._rows(_DROP_ACTIVE_LEAF)

    def add_compaction(self, compaction_id: str, summary: str, from_id: str, to_id: str) -> CompactionRow:
        """Store a compaction row; returns it with its ``seq`` and ``created_at``."""
        with self.storage.transaction():
            [(seq, created_at)] = self._rows(_ADD_COMPACTION, compaction_id, summary, from_id, to_id).fetchall()
        return CompactionRow(seq, compaction_id, summary, from_id, to_id, created_at)
