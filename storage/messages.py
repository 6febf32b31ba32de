"""SQL for one session's message tree: messages, compaction rows, the latest leaf, search.

:class:`MessageStore` is the synchronous storage half of ``actors.Session``.
It speaks in stored text (message JSON, indexed text) and never parses or
validates messages; the actor layer does that. Every write method runs in
one ``storage.transaction()`` (a savepoint when the caller already holds a
transaction), so a failed write leaves nothing behind.

Tables (``storage/schema.py``): ``assistant_messages`` keyed
``(session_id, id)`` with the integer ``seq`` as insertion order;
``assistant_compactions``; ``assistant_fts`` (+ ``assistant_fts_cjk``,
``assistant_fts_tools``, see ``storage/fts.py``), contentless, whose rowid is
the message's ``seq`` (a hit's text is read from the message row,
:data:`TEXT_OF_CONTENT`).

Invariants the queries rely on:

* **A parent is older than its children** (``parent.seq < child.seq``). A
  parent must exist when a child is inserted, and deleting a message hands
  its children to its own parent, an older row still. So a path walk can
  require ``seq`` to fall at every step, which bounds it by the path length
  even in a damaged file (no depth cap, docs/deviations.md #18), and rows sorted by
  ``seq`` list every parent before its children.
* **Each row knows its place**: ``depth`` (rows from the root to it),
  ``path_bytes`` (UTF-8 bytes of ``content`` from the root to it),
  ``path_tokens`` (the sum of the ``tokens`` the actor layer estimated for
  each message from the root to it) and ``jump_seq``, a skew-binary jump
  pointer (Myers, 1983) to an ancestor. An insert derives its own from its
  parent's; an update shifts ``path_bytes``/``path_tokens`` below the
  message; a delete recomputes the subtrees it re-attached, once. Path
  length, a path's total size and token estimate, and the byte-budgeted
  window therefore never walk the whole path, and :meth:`MessageStore.ancestor_at_depth`
  ("which message at depth d is on the path to X") takes O(log depth)
  row reads.
* **A row points at its parent twice**: ``parent_id`` (the spec's column,
  and the key children are listed by) and ``parent_seq``, the parent's
  rowid, written and re-attached together; walking up a path is then a
  rowid lookup per step.
* **The latest leaf is the session's newest message** (the highest ``seq``,
  one seek on ``idx_assistant_msg_seq``), which survives hibernation with
  the rows themselves (docs/deviations.md #3). It is always a leaf: children
  are newer than their parent. It is the message inserted last (a chain
  written by :meth:`MessageStore.append_chain` ends with its last new
  message), and once that is deleted, the newest message left, which has
  no children either: the newest childless message, in insertion order.

Every lookup is an index seek; nothing here scans a session to append,
find the leaf or list children (docs/performance.md). Recursive steps and joins
use ``CROSS JOIN`` to pin the loop order: with ``ANALYZE`` statistics the
planner would otherwise sometimes put the whole table in the outer loop.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import apsw

from . import fts
from .errors import InvalidInputError, SearchQueryError
from .shapes import LATEST_LEAF, OVERLAY_PREFIX, _LatestLeaf
from .sqlite import SqlStorage

#: The porter FTS5 table holding message text (its trigram twin is ``<name>_cjk``).
FTS_TABLE = "assistant_fts"
#: :meth:`MessageStore.path_chunks`: most UTF-8 bytes of stored JSON in one chunk
#: (a larger row comes alone) ...
PATH_CHUNK_BYTES = 1 << 20
#: ... and most rows in one chunk.
PATH_CHUNK_ROWS = 1024


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


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message ready to store, as :meth:`MessageStore.append_chain` takes it.

    ``content`` is the stored JSON, ``text`` the text indexed in
    ``assistant_fts`` (``""``: no row there), ``tools`` the tool calls
    indexed with the text in ``assistant_fts_tools`` (``""``: no row there),
    ``tokens`` the message's estimated tokens (summed into ``path_tokens``).
    """

    id: str
    role: str
    content: str
    text: str = ""
    tools: str = ""
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class TokenPlace:
    """Where a stored message sits, for token sums: ``tokens`` its own, ``path_tokens`` root -> it."""

    id: str
    seq: int
    depth: int
    tokens: int
    path_tokens: int


@dataclass(frozen=True, slots=True)
class PathTokens:
    """The stored token total of a path and the overlays that apply on it.

    ``total`` is ``path_tokens`` of the leaf (every stored message root ->
    leaf); ``hidden`` pairs each compaction that applies on this path (as
    ``get_history`` applies them) with the tokens of the messages it hides.
    The visible estimate is ``total - sum(hidden) + <the overlays' own tokens>``.
    """

    total: int
    hidden: tuple[tuple[CompactionRow, int], ...]


def to_iso8601(created_at: str) -> str:
    """Stored ``YYYY-MM-DD HH:MM:SS.SSS`` (UTC) -> ``YYYY-MM-DDTHH:MM:SS.SSSZ``."""
    return f"{created_at[:10]}T{created_at[11:]}Z"


# -- SQL -------------------------------------------------------------------

_GET = "SELECT content FROM assistant_messages WHERE session_id = ?1 AND id = ?2"
_EXISTS = "SELECT 1 FROM assistant_messages WHERE session_id = ?1 AND id = ?2"

# The session's newest message: the latest leaf (see the module docstring).
_LATEST = "SELECT seq FROM assistant_messages INDEXED BY idx_assistant_msg_seq WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1"
_LATEST_LEAF = f"SELECT m.id FROM ({_LATEST}) AS l CROSS JOIN assistant_messages AS m ON m.seq = l.seq"

# The path from ?2 up to its root: (seq, depth), depth 0 = the leaf, one rowid lookup per
# step (``parent_seq``). ``m.seq < p.seq`` holds on every real edge (see the module
# docstring) and makes any cycle impossible; ``+m.session_id`` keeps a damaged pointer
# inside the session without steering the planner to an index.
_PATH_CTE = """
WITH RECURSIVE path(seq, parent_seq, depth) AS (
    SELECT seq, parent_seq, 0 FROM assistant_messages WHERE session_id = ?1 AND id = ?2
    UNION ALL
    SELECT m.seq, m.parent_seq, p.depth + 1
    FROM path AS p CROSS JOIN assistant_messages AS m ON m.seq = p.parent_seq
    WHERE m.seq < p.seq AND +m.session_id = ?1
)
"""
_PATH_CONTENT = _PATH_CTE + """
SELECT m.content FROM path CROSS JOIN assistant_messages AS m ON m.seq = path.seq ORDER BY path.depth DESC
"""
# The same walk carrying each row's content: one JSON array of the rows that are JSON text,
# *leaf first* (the walk's order: a recursive CTE's queue is FIFO, and the aggregate reads
# it in that order; sorting would copy every row once more), and how many it holds.
_PATH_JSON = """
WITH RECURSIVE path(seq, parent_seq, content) AS (
    SELECT seq, parent_seq, content FROM assistant_messages WHERE session_id = ?1 AND id = ?2
    UNION ALL
    SELECT m.seq, m.parent_seq, m.content
    FROM path AS p CROSS JOIN assistant_messages AS m ON m.seq = p.parent_seq
    WHERE m.seq < p.seq AND +m.session_id = ?1
)
SELECT '[' || coalesce(group_concat(content, ','), '') || ']', count(*)
FROM path WHERE typeof(content) = 'text' AND json_valid(content)
"""
# One chunk of the walk up a path: from the anchor row up, while the chunk has fewer than
# ?3 rows and the next row's bytes still fit the budget ?4 (the anchor always comes).
# Leaf-side first. The anchor is the leaf (by id), or the parent where the last chunk
# stopped (by seq, which must fall below the last row's ?5, as every step of a walk must).
_CHUNK_STEPS = """
    UNION ALL
    SELECT m.seq, m.parent_seq, w.used + octet_length(m.content), w.n + 1
    FROM w CROSS JOIN assistant_messages AS m ON m.seq = w.parent_seq
    WHERE m.seq < w.seq AND +m.session_id = ?1 AND w.n < ?3 AND w.used + octet_length(m.content) <= ?4
)
SELECT w.seq, w.parent_seq, m.content FROM w CROSS JOIN assistant_messages AS m ON m.seq = w.seq ORDER BY w.n
"""
_CHUNK_FROM_LEAF = """
WITH RECURSIVE w(seq, parent_seq, used, n) AS (
    SELECT seq, parent_seq, octet_length(content), 1 FROM assistant_messages WHERE session_id = ?1 AND id = ?2
""" + _CHUNK_STEPS
_CHUNK_FROM_ROW = """
WITH RECURSIVE w(seq, parent_seq, used, n) AS (
    SELECT seq, parent_seq, octet_length(content), 1 FROM assistant_messages
    WHERE seq = ?2 AND seq < ?5 AND +session_id = ?1
""" + _CHUNK_STEPS
_PATH_STATS = _PATH_CTE + """
SELECT m.id, m.role, octet_length(m.content)
FROM path CROSS JOIN assistant_messages AS m ON m.seq = path.seq ORDER BY path.depth DESC
"""
# The newest rows of the path to ?2 that fit: the leaf, then each parent while the
# window has fewer than ?3 rows or the parent's bytes still fit the budget ?4.
_WINDOW = """
WITH RECURSIVE w(seq, parent_seq, used, n) AS (
    SELECT seq, parent_seq, octet_length(content), 1 FROM assistant_messages WHERE session_id = ?1 AND id = ?2
    UNION ALL
    SELECT m.seq, m.parent_seq, w.used + octet_length(m.content), w.n + 1
    FROM w CROSS JOIN assistant_messages AS m ON m.seq = w.parent_seq
    WHERE m.seq < w.seq AND +m.session_id = ?1 AND (w.n < ?3 OR w.used + octet_length(m.content) <= ?4)
)
SELECT w.parent_seq, m.content FROM w CROSS JOIN assistant_messages AS m ON m.seq = w.seq ORDER BY w.n DESC
"""
_CHILDREN = """
SELECT content FROM assistant_messages INDEXED BY idx_assistant_msg_parent
WHERE session_id = ?1 AND parent_id = ?2 ORDER BY created_at, seq
"""

_INSERT = """
INSERT INTO assistant_messages
    (session_id, id, parent_id, parent_seq, role, content, depth, path_bytes, tokens, path_tokens, jump_seq)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
ON CONFLICT (session_id, id) DO NOTHING RETURNING seq
"""
# The bulk insert of a chain: every value, ``seq`` included, computed beforehand.
_INSERT_ROW = """
INSERT INTO assistant_messages
    (seq, session_id, id, parent_id, parent_seq, role, content, depth, path_bytes, tokens, path_tokens, jump_seq)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_NEXT_SEQ = "SELECT coalesce(max(seq), 0) + 1 FROM assistant_messages"
_STORED_IDS = """
SELECT id FROM assistant_messages WHERE session_id = ?1 AND id IN (SELECT value FROM json_each(?2))
"""
# What a child needs from its parent: the parent's place, and the depths along its jump
# chain (a root's jump is itself).
_LINK_COLUMNS = """
SELECT p.seq, p.depth, p.path_bytes, p.path_tokens, j.depth, coalesce(j.jump_seq, j.seq), jj.depth
FROM assistant_messages AS p
CROSS JOIN assistant_messages AS j ON j.seq = coalesce(p.jump_seq, p.seq)
CROSS JOIN assistant_messages AS jj ON jj.seq = coalesce(j.jump_seq, j.seq)
"""
_LINK = _LINK_COLUMNS + "WHERE p.session_id = ?1 AND p.id = ?2"
# The same for the latest leaf, with its id first (``None`` rows: an empty session).
_LATEST_LINK = f"""
SELECT p.id, p.seq, p.depth, p.path_bytes, p.path_tokens, j.depth, coalesce(j.jump_seq, j.seq), jj.depth
FROM ({_LATEST}) AS l CROSS JOIN assistant_messages AS p ON p.seq = l.seq
CROSS JOIN assistant_messages AS j ON j.seq = coalesce(p.jump_seq, p.seq)
CROSS JOIN assistant_messages AS jj ON jj.seq = coalesce(j.jump_seq, j.seq)
"""
# The latest leaf's running token total, and whether the session has any compaction row.
_LATEST_TOKENS = f"""
SELECT p.id, p.path_tokens, EXISTS (SELECT 1 FROM assistant_compactions WHERE session_id = ?1)
FROM ({_LATEST}) AS l CROSS JOIN assistant_messages AS p ON p.seq = l.seq
"""
_DEPTH_JUMP = "SELECT depth, coalesce(jump_seq, seq) FROM assistant_messages WHERE seq = ?"
_OLD_SIZE = "SELECT octet_length(content), tokens FROM assistant_messages WHERE session_id = ?1 AND id = ?2"
_UPDATE = """
UPDATE assistant_messages SET role = ?3, content = ?4, tokens = ?5 WHERE session_id = ?1 AND id = ?2 RETURNING seq
"""
# Every message below ?2 (and ?2 itself), walking down the parent index. In every
# recursive step below, CROSS JOIN pins the order (the queue outside, the table
# inside): left to itself the planner may walk a whole session per step.
_SUBTREE_CTE = """
WITH RECURSIVE sub(seq, id) AS (
    SELECT seq, id FROM assistant_messages WHERE session_id = ?1 AND id = ?2
    UNION ALL
    SELECT c.seq, c.id FROM sub CROSS JOIN assistant_messages AS c INDEXED BY idx_assistant_msg_parent
    ON c.session_id = ?1 AND c.parent_id = sub.id WHERE c.seq > sub.seq
)
"""
_SHIFT_PATH_TOTALS = _SUBTREE_CTE + """
UPDATE assistant_messages SET path_bytes = path_bytes + ?3, path_tokens = path_tokens + ?4
WHERE seq IN (SELECT seq FROM sub)
"""
# The subtrees under the ids of the JSON list ?2, each message once, parents first.
_SUBTREES = """
WITH RECURSIVE sub(seq, id, parent_id, bytes, tokens) AS (
    SELECT seq, id, parent_id, octet_length(content), tokens FROM assistant_messages
    WHERE session_id = ?1 AND id IN (SELECT value FROM json_each(?2))
    UNION
    SELECT c.seq, c.id, c.parent_id, octet_length(c.content), c.tokens
    FROM sub CROSS JOIN assistant_messages AS c INDEXED BY idx_assistant_msg_parent
    ON c.session_id = ?1 AND c.parent_id = sub.id WHERE c.seq > sub.seq
)
SELECT seq, id, parent_id, bytes, tokens FROM sub ORDER BY seq
"""
_PLACE = "SELECT depth, path_bytes FROM assistant_messages WHERE session_id = ?1 AND id = ?2"
_SET_PLACE = "UPDATE assistant_messages SET depth = ?, path_bytes = ?, path_tokens = ?, jump_seq = ? WHERE seq = ?"
_TOKEN_PLACE = """
SELECT id, seq, depth, tokens, path_tokens FROM assistant_messages
WHERE session_id = ?1 AND id IN (SELECT value FROM json_each(?2))
"""
# Climb from ?2 toward the root until depth ?3, taking the jump pointer whenever it does
# not overshoot (O(log depth) steps); yields the ancestor at depth ?3, if any.
_CLIMB = """
WITH RECURSIVE climb(seq, depth) AS (
    SELECT seq, depth FROM assistant_messages WHERE seq = ?2
    UNION ALL
    SELECT CASE WHEN j.depth >= ?3 THEN j.seq ELSE p.seq END,
           CASE WHEN j.depth >= ?3 THEN j.depth ELSE p.depth END
    FROM climb AS c
    CROSS JOIN assistant_messages AS m ON m.seq = c.seq
    CROSS JOIN assistant_messages AS j ON j.seq = coalesce(m.jump_seq, m.seq)
    CROSS JOIN assistant_messages AS p ON p.seq = m.parent_seq
    WHERE +p.session_id = ?1 AND c.depth > ?3 AND p.depth < c.depth AND j.depth < c.depth
)
SELECT seq FROM climb WHERE depth = ?3
"""
_ROW_FOR_DELETE = "SELECT seq, parent_id, parent_seq FROM assistant_messages WHERE session_id = ?1 AND id = ?2"
_CHILD_IDS = """
SELECT id FROM assistant_messages INDEXED BY idx_assistant_msg_parent WHERE session_id = ?1 AND parent_id = ?2
"""
_REPARENT = """
UPDATE assistant_messages INDEXED BY idx_assistant_msg_parent SET parent_id = ?3, parent_seq = ?4
WHERE session_id = ?1 AND parent_id = ?2
"""
_DELETE = "DELETE FROM assistant_messages WHERE seq = ?1"
_SESSION_SEQS = "SELECT seq FROM assistant_messages WHERE session_id = ?1"
_CLEAR_MESSAGES = "DELETE FROM assistant_messages WHERE session_id = ?1"
_CLEAR_COMPACTIONS = "DELETE FROM assistant_compactions WHERE session_id = ?1"

# Search: ``{hits}`` is storage.fts.matching_rowids_sql(...) -> (rowid, rank) of every match.
_TOP_HITS = "SELECT h.rowid, h.rank FROM ({hits}) AS h ORDER BY h.rank, h.rowid LIMIT ?"
_TOP_SESSION_HITS = """
SELECT h.rowid, h.rank FROM ({hits}) AS h CROSS JOIN assistant_messages AS m ON m.seq = h.rowid
WHERE m.session_id = ? ORDER BY h.rank, h.rowid LIMIT ?
"""
#: SQL of the searched text of the message row ``m``, read from its JSON: its text parts
#: (``type`` ``"text"``) joined by one space, a non-string ``text`` counting as ``""`` --
#: exactly what was indexed in ``assistant_fts`` (``actors.session_messages.search_text``);
#: ``''`` for a row that is not JSON.
TEXT_OF_CONTENT = """coalesce((
    SELECT group_concat(CASE WHEN json_type(p.value, '$.text') = 'text' THEN json_extract(p.value, '$.text')
                        ELSE '' END, ' ' ORDER BY p.key)
    FROM json_each(CASE WHEN json_valid(m.content) THEN m.content ELSE '{}' END, '$.parts') AS p
    WHERE p.type = 'object' AND json_extract(p.value, '$.type') = 'text'), '')"""
# ``+m.session_id``: a filter on the few rows named, never a reason to walk a session index.
# A message found through its tool calls alone has no text part: its content is ''.
_HIT_ROWS = f"""
SELECT m.seq, m.id, m.role, {TEXT_OF_CONTENT}, m.created_at
FROM json_each(?2) AS j
CROSS JOIN assistant_messages AS m ON m.seq = j.value
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


def _utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _child_place(link: tuple | None, size: int, tokens: int) -> tuple[int, int, int, int, int | None]:
    """``(depth, path_bytes, tokens, path_tokens, jump_seq)`` of a new row under ``link``.

    ``link`` is the parent's ``_LINK`` row, ``None`` for a root. The jump
    pointer follows Myers' skew-binary rule: when the parent's jump and its
    jump's jump span equal depths, jump over both, else point at the parent.
    """
    if link is None:
        return 1, size, tokens, tokens, None
    p_seq, p_depth, p_bytes, p_tokens, j_depth, jj_seq, jj_depth = link
    jump = jj_seq if p_depth - j_depth == j_depth - jj_depth else p_seq
    return p_depth + 1, p_bytes + size, tokens, p_tokens + tokens, jump


class _Places:
    """Place columns of rows being (re)computed in one transaction, parents first.

    Remembers, for every row placed, what a child needs from it (a ``_LINK``
    row) and its ``(depth, jump seq or itself)``; a parent or jump target not
    placed here is read from its row, which is current (the rows placed here
    are all below it).
    """

    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self._links: dict[str, tuple] = {}  # id -> what a child needs from it (see _LINK)
        self._depth_jump: dict[int, tuple[int, int]] = {}  # seq -> (depth, jump seq or itself)

    def link(self, parent_id: str | None) -> tuple | None:
        """What a child of ``parent_id`` needs from it; ``None`` for a root (or a parent not stored)."""
        if parent_id is None:
            return None
        link = self._links.get(parent_id)
        return link if link is not None else self._store._rows(_LINK, parent_id).fetchone()

    def seq_of(self, message_id: str | None) -> int | None:
        """``seq`` of ``message_id`` (placed here or stored), ``None`` for ``None`` or an id not stored."""
        link = self.link(message_id)
        return None if link is None else link[0]

    def place(self, seq: int, message_id: str, parent_id: str | None, size: int, tokens: int) -> tuple:
        """``(depth, path_bytes, tokens, path_tokens, jump_seq)`` of row ``seq`` under ``parent_id``."""
        place = _child_place(self.link(parent_id), size, tokens)
        depth, path_bytes, _, path_tokens, jump = place
        target = seq if jump is None else jump
        self._depth_jump[seq] = (depth, target)
        jump_depth, jump_jump = self._depth_and_jump(target)
        self._links[message_id] = (
            seq, depth, path_bytes, path_tokens, jump_depth, jump_jump, self._depth_and_jump(jump_jump)[0]
        )
        return place

    def _depth_and_jump(self, seq: int) -> tuple[int, int]:
        if seq not in self._depth_jump:
            self._depth_jump[seq] = self._store.storage.connection.execute(_DEPTH_JUMP, (seq,)).fetchone()
        return self._depth_jump[seq]


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
        """Id of the latest leaf (the session's newest message, see the module docstring); ``None`` if empty."""
        return self._one(_LATEST_LEAF)

    def path_contents(self, leaf_id: str) -> list[str]:
        """Stored JSON of every message from the root down to ``leaf_id`` (``[]`` if unknown)."""
        return [row[0] for row in self._rows(_PATH_CONTENT, leaf_id)]

    def path_json(self, leaf_id: str) -> tuple[str, int] | None:
        """The path root <- ``leaf_id`` as one JSON array text, **leaf first**, and its length.

        Holds every row of the path whose content is JSON text (SQLite's
        ``json_valid``); other rows are left out. ``("[]", 0)`` for an
        unknown leaf. ``None`` when the array would exceed SQLite's string
        limit (1e9 bytes): read :meth:`path_contents` instead. One
        statement: a rowid lookup per message, one string for all of them.
        """
        try:
            [(text, count)] = self._rows(_PATH_JSON, leaf_id).fetchall()
        except apsw.TooBigError:
            return None
        return text, count

    def path_chunks(
        self, leaf_id: str, *, max_bytes: int = PATH_CHUNK_BYTES, max_rows: int = PATH_CHUNK_ROWS
    ) -> Iterator[list[Any]]:
        """The stored JSON of the path ``leaf_id`` -> root in chunks, **leaf first** (chunk
        after chunk, and within each), for reads whose memory must not grow with the path.

        A chunk holds at most ``max_rows`` rows and ``max_bytes`` UTF-8 bytes
        of ``content``, except that a row larger than ``max_bytes`` comes alone.
        Values are as stored (a damaged row may hold a BLOB or text that is
        not JSON). Each chunk is one statement run to its end before it is
        yielded, so no statement stays open between chunks; the walk follows
        the rules of every path read here (``seq`` falls at each step, no
        depth cap). An unknown leaf yields nothing.

        Raises:
            InvalidInputError: ``max_bytes`` or ``max_rows`` is not an int >= 1.
            apsw.Error: SQLite failed; the chunks yielded before stay valid.
        """
        for name, value in (("max_bytes", max_bytes), ("max_rows", max_rows)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"{name} must be an int >= 1, not {value!r}", field=name)
        rows = self._rows(_CHUNK_FROM_LEAF, leaf_id, max_rows, max_bytes).fetchall()
        while rows:
            yield [content for _, _, content in rows]
            last_seq, parent_seq, _ = rows[-1]
            if parent_seq is None:
                return
            rows = self._rows(_CHUNK_FROM_ROW, parent_seq, max_rows, max_bytes, last_seq).fetchall()

    def path_stats(self, leaf_id: str) -> list[tuple[str, str, int]]:
        """Root -> ``leaf_id`` as ``(id, role, bytes)``; ``bytes`` is the UTF-8 size of the JSON."""
        return self._rows(_PATH_STATS, leaf_id).fetchall()

    def place(self, message_id: str) -> tuple[int, int] | None:
        """``(depth, path_bytes)`` of a stored message: its path's row count and JSON bytes; else ``None``."""
        rows = self._rows(_PLACE, message_id).fetchall()
        return rows[0] if rows else None

    def path_ids(self, leaf_id: str) -> list[str]:
        """Ids of the messages root -> ``leaf_id`` (``[]`` if unknown); no content is read."""
        return [row[0] for row in self.path_stats(leaf_id)]

    def token_places(self, message_ids: Iterable[str]) -> dict[str, TokenPlace]:
        """:class:`TokenPlace` of each stored id among ``message_ids`` (unknown ids are left out)."""
        rows = self._rows(_TOKEN_PLACE, json.dumps(list(message_ids))).fetchall()
        return {row[0]: TokenPlace(*row) for row in rows}

    def ancestor_at_depth(self, seq: int, depth: int) -> int | None:
        """``seq`` of the message at ``depth`` on the path root -> row ``seq`` (itself at its own
        depth); ``None`` when ``depth`` is deeper than the row or below 1. O(log depth) reads."""
        if depth < 1:
            return None
        return self._one(_CLIMB, seq, depth)

    def depth_on_path(self, message_id: str, leaf_id: str) -> int | None:
        """The depth of ``message_id`` (the root's is 1) when it lies on the path root -> ``leaf_id``
        (``leaf_id`` itself included), else ``None``. Two row reads and O(log depth) climbs."""
        places = self.token_places([message_id, leaf_id])
        found, leaf = places.get(message_id), places.get(leaf_id)
        if found is None or leaf is None or found.depth > leaf.depth:
            return None
        return found.depth if self.ancestor_at_depth(leaf.seq, found.depth) == found.seq else None

    def path_tokens(self, leaf_id: str) -> PathTokens | None:
        """Token total of the path root -> ``leaf_id`` and the overlays that apply on it.

        Reads the leaf's row, the session's compaction rows and their end
        rows, and climbs jump pointers to test which ends are on the path:
        O(compactions * log depth), whatever the history length. Returns
        ``None`` for an unknown leaf.
        """
        leaf = self.token_places([leaf_id]).get(leaf_id)
        if leaf is None:
            return None
        rows = self.compactions()
        if not rows:
            return PathTokens(leaf.path_tokens, ())
        ends = self.token_places({i for r in rows for i in (r.from_message_id, r.to_message_id)})
        return PathTokens(leaf.path_tokens, tuple(self._applied(leaf, rows, ends)))

    def latest_path_tokens(self) -> PathTokens | None:
        """:meth:`path_tokens` of the latest leaf; ``None`` in an empty session.

        One statement when the session has no compaction row (then no
        overlay applies): what the token estimate after each append reads.
        """
        rows = self._rows(_LATEST_TOKENS).fetchall()
        if not rows:
            return None
        leaf_id, total, compacted = rows[0]
        return self.path_tokens(leaf_id) if compacted else PathTokens(total, ())

    def _applied(
        self, leaf: TokenPlace, rows: list[CompactionRow], ends: dict[str, TokenPlace]
    ) -> list[tuple[CompactionRow, int]]:
        """The overlays ``get_history`` applies on the path to ``leaf``, with the tokens each hides.

        Per start message, the newest row whose end is on the path at or after
        it; walking root -> leaf, a start inside an overlay already taken is skipped.
        """
        ancestors: dict[int, int | None] = {}

        def on_path(place: TokenPlace) -> bool:
            if place.depth > leaf.depth:
                return False
            if place.depth not in ancestors:
                ancestors[place.depth] = self.ancestor_at_depth(leaf.seq, place.depth)
            return ancestors[place.depth] == place.seq

        chosen: dict[str, tuple[CompactionRow, TokenPlace, TokenPlace]] = {}
        off_path: set[str] = set()
        for row in reversed(rows):  # newest first
            start, end = ends.get(row.from_message_id), ends.get(row.to_message_id)
            if start is None or end is None or row.from_message_id in chosen or row.from_message_id in off_path:
                continue
            if end.depth < start.depth or not on_path(end):
                continue
            if not on_path(start):
                off_path.add(row.from_message_id)
                continue
            chosen[row.from_message_id] = (row, start, end)
        applied, reached = [], 0
        for row, start, end in sorted(chosen.values(), key=lambda c: c[1].depth):
            if start.depth > reached:
                applied.append((row, end.path_tokens - start.path_tokens + start.tokens))
                reached = end.depth
        return applied

    def window(self, leaf_id: str, max_bytes: int, min_rows: int) -> tuple[list[str], bool]:
        """The newest messages of the path to ``leaf_id`` that fit ``max_bytes`` of JSON.

        The window holds the leaf, then grows toward the root while it has
        fewer than ``min_rows`` rows or the next row still fits. Reads only
        the window's rows.

        Returns:
            ``(contents, truncated)``: stored JSON root-side first (``[]`` for
            an unknown leaf) and whether older rows were left out.
        """
        rows = self._rows(_WINDOW, leaf_id, min_rows, max_bytes).fetchall()
        return [content for _, content in rows], bool(rows) and rows[0][0] is not None

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
        hits, params = fts.matching_rowids_sql(query, FTS_TABLE, tools=True)
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
            seq: SearchRow(message_id, role, content, created_at)
            for seq, message_id, role, content, created_at in self._rows(
                _HIT_ROWS, "[" + ",".join(map(str, seqs)) + "]"
            )
        }
        return [found[s] for s in seqs if s in found]

    # -- writes ------------------------------------------------------------

    def append(
        self,
        message_id: str,
        role: str,
        content: str,
        text: str,
        parent_id: str | None | _LatestLeaf,
        *,
        tokens: int = 0,
        tools: str = "",
    ) -> tuple[bool, str | None]:
        """Insert a message (and its search text); being the newest, it is the latest leaf.

        Args:
            parent_id: :data:`LATEST_LEAF` -> the latest leaf (``None`` in an
                empty session); ``None`` -> a new root; an overlay id
                (``compaction_<id>``) -> the last message that compaction
                covers, or the latest leaf when there is no such compaction;
                any other id not stored in this session -> a root.
            text: the text to index (``content`` column).
            tokens: the message's estimated tokens (summed into ``path_tokens``).
            tools: tool names and inputs to index (``assistant_fts_tools``,
                with ``text``). With ``text`` and ``tools`` both ``""``
                nothing is indexed.

        Returns:
            ``(inserted, parent)``: ``(True, <the parent used>)``, or
            ``(False, None)`` when the id is already stored (nothing changes,
            the first content stays).
        """
        with self.storage.transaction():
            if parent_id is LATEST_LEAF:  # the leaf and what its child needs, in one statement
                row = self._rows(_LATEST_LINK).fetchone()
                parent, link = (None, None) if row is None else (row[0], row[1:])
            else:
                parent = self._resolve_parent(parent_id)
                link = None if parent is None else self._rows(_LINK, parent).fetchone()
            place = _child_place(link, _utf8_length(content), tokens)
            parent_seq = None if link is None else link[0]
            seq = self._one(_INSERT, message_id, parent, parent_seq, role, content, *place)
            if seq is None:
                return False, None
            self._index(seq, text, tools)
            return True, parent

    def _index(self, seq: int, text: str, tools: str) -> None:
        self._run(fts.index_rows(FTS_TABLE, seq, text, tools=tools))

    def append_chain(
        self, messages: Sequence[NewMessage], parent_id: str | None | _LatestLeaf
    ) -> list[tuple[bool, str | None]]:
        """Insert ``messages`` as a chain, in one transaction: all of them or none.

        The first goes under ``parent_id`` (resolved as in :meth:`append`),
        each next one under the one before, with these rules:

        * an id already stored in this session -- or met earlier in the
          chain -- is a duplicate: it is not stored (the first content
          stays) and the next message goes under it, since it exists;
        * an overlay id (``compaction_<id>``) is never stored (an echoed
          overlay, docs/deviations.md #6): the next message goes under the last
          message that compaction covers; when the session has no such
          compaction (or its end is gone) the overlay is passed over and the
          chain goes on from where it was.

        Rows are written with ``executemany``; their ``seq`` and place
        columns (``depth``, ``path_bytes``, ``path_tokens``, ``jump_seq``)
        are computed here from the first parent's row, so the cost is one
        insert per message and per search row, whatever the history length.
        The last new message is the newest, so the latest leaf; a chain storing
        nothing leaves the leaf alone. Any failure (e.g. a constraint) rolls the
        whole chain back.

        Returns:
            One ``(inserted, parent)`` per message, as :meth:`append` returns
            them: ``(True, <the parent used>)`` or ``(False, None)``.
        """
        if not messages:
            return []
        con = self.storage.connection
        with self.storage.transaction():
            results, rows, search_rows = self._plan_chain(messages, self._resolve_parent(parent_id))
            if rows:
                con.executemany(_INSERT_ROW, rows)
                for sql, params in search_rows.items():
                    con.executemany(sql, params)
        return results

    def _plan_chain(
        self, messages: Sequence[NewMessage], parent: str | None
    ) -> tuple[list[tuple[bool, str | None]], list[tuple], dict[str, list[tuple]]]:
        """``(results, message rows, search rows by statement)`` of :meth:`append_chain`, nothing written."""
        results: list[tuple[bool, str | None]] = []
        rows: list[tuple] = []
        search_rows: defaultdict[str, list[tuple]] = defaultdict(list)
        taken = self._stored_ids([m.id for m in messages if not m.id.startswith(OVERLAY_PREFIX)])
        places = _Places(self)
        seq = self._one_global(_NEXT_SEQ)
        for m in messages:
            if m.id.startswith(OVERLAY_PREFIX) or m.id in taken:
                results.append((False, None))
                parent = self._overlay_end(m.id, parent) if m.id.startswith(OVERLAY_PREFIX) else m.id
                continue
            parent_seq = places.seq_of(parent)
            place = places.place(seq, m.id, parent, _utf8_length(m.content), m.tokens)
            rows.append((seq, self.session_id, m.id, parent, parent_seq, m.role, m.content, *place))
            for sql, params in fts.index_rows(FTS_TABLE, seq, m.text, tools=m.tools):
                search_rows[sql].append(params)
            results.append((True, parent))
            taken.add(m.id)
            parent = m.id
            seq += 1
        return results, rows, search_rows

    def _one_global(self, query: str) -> Any:
        return self.storage.connection.execute(query).fetchall()[0][0]

    def _stored_ids(self, ids: list[str]) -> set[str]:
        """The ids among ``ids`` already stored in this session."""
        if not ids:
            return set()
        return {row[0] for row in self._rows(_STORED_IDS, json.dumps(ids))}

    def _overlay_end(self, overlay_id: str, current: str | None) -> str | None:
        """Where a chain goes on after the overlay id ``overlay_id``: the last message
        its compaction covers, else ``current``."""
        end = self._one(_COMPACTION_END, overlay_id[len(OVERLAY_PREFIX) :])
        return end if end is not None and self.exists(end) else current

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

    def update(
        self, message_id: str, role: str, content: str, text: str, *, tokens: int = 0, tools: str = ""
    ) -> bool:
        """Replace a stored message's role, content and token count and re-index it.

        ``text``, ``tokens`` and ``tools`` as in :meth:`append`. The path
        totals of the message and everything below it shift by the change.
        Returns ``False`` (and writes nothing) when ``message_id`` is not stored.
        """
        with self.storage.transaction():
            old = self._rows(_OLD_SIZE, message_id).fetchone()
            if old is None:
                return False
            seq = self._one(_UPDATE, message_id, role, content, tokens)
            byte_delta, token_delta = _utf8_length(content) - old[0], tokens - old[1]
            if byte_delta or token_delta:
                self._rows(_SHIFT_PATH_TOTALS, message_id, byte_delta, token_delta)
            self._run(fts.unindex_rows(FTS_TABLE, seq, tools=True))
            self._index(seq, text, tools)
            return True

    def delete(self, message_ids: Iterable[str]) -> list[str]:
        """Delete messages and their search rows; children move up to the deleted message's parent.

        Ids not stored are skipped. Deleting the latest leaf makes the newest
        message left the latest leaf. The ``depth`` and
        ``path_bytes`` of everything below a deleted message are recomputed
        once, at the end: deleting a leaf costs O(1), deleting an inner
        message O(size of its subtree). Returns the ids deleted, in the order
        given, without repeats.
        """
        deleted: list[str] = []
        moved: list[str] = []
        with self.storage.transaction():
            for message_id in message_ids:
                row = self._rows(_ROW_FOR_DELETE, message_id).fetchone()
                if row is None:
                    continue
                seq, parent, parent_seq = row
                moved.extend(child for (child,) in self._rows(_CHILD_IDS, message_id))
                self._rows(_REPARENT, message_id, parent, parent_seq)
                self.storage.connection.execute(_DELETE, (seq,))
                self._run(fts.unindex_rows(FTS_TABLE, seq, tools=True))
                deleted.append(message_id)
            gone = set(deleted)
            self._recompute_places([child for child in moved if child not in gone])
        return deleted

    def _recompute_places(self, tops: list[str]) -> None:
        """Recompute the place columns of the subtrees under ``tops`` (parents before children)."""
        if not tops:
            return
        places = _Places(self)
        updates: list[tuple[int, int, int, int | None, int]] = []
        for seq, message_id, parent, size, tokens in self._rows(_SUBTREES, json.dumps(tops)).fetchall():
            depth, path_bytes, _, path_tokens, jump = places.place(seq, message_id, parent, size, tokens)
            updates.append((depth, path_bytes, path_tokens, jump, seq))
        self.storage.connection.executemany(_SET_PLACE, updates)

    def clear(self) -> None:
        """Delete every message, compaction and search row of the session."""
        with self.storage.transaction():
            seqs = [row[0] for row in self._rows(_SESSION_SEQS)]
            for seq in seqs:
                self._run(fts.unindex_rows(FTS_TABLE, seq, tools=True))
            self._rows(_CLEAR_MESSAGES)
            self._rows(_CLEAR_COMPACTIONS)

    def add_compaction(self, compaction_id: str, summary: str, from_id: str, to_id: str) -> CompactionRow:
        """Store a compaction row; returns it with its ``seq`` and ``created_at``."""
        with self.storage.transaction():
            [(seq, created_at)] = self._rows(_ADD_COMPACTION, compaction_id, summary, from_id, to_id).fetchall()
        return CompactionRow(seq, compaction_id, summary, from_id, to_id, created_at)
