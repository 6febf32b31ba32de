"""The SQLite dialect of the message tree: its statements and the steps only SQLite takes.

The rules are in :mod:`storage.tree` (written once for both databases);
:class:`storage.messages.MessageStore` runs them on apsw with
:func:`storage.tree.steps.drive`, passing this module as the
:class:`~storage.tree.steps.Dialect`. Everything here is statement text and
the few steps that differ from Postgres: the search rows of a message live
in FTS5 tables of their own (``storage/fts.py``; :func:`search` ranks them),
the chain's ``seq`` values are the file's next rowids, and a session's
writes are serialised by the actor (no lock).

Tables (``storage/schema.py``): ``assistant_messages`` keyed
``(session_id, id)`` with the integer ``seq`` as insertion order;
``assistant_compactions``; ``assistant_fts`` (+ ``assistant_fts_cjk``,
``assistant_fts_tools``, see ``storage/fts.py``), contentless, whose rowid is
the message's ``seq`` (a hit's text is read from the message row,
:data:`TEXT_OF_CONTENT`).

What the statements rely on:

* **A parent is older than its children** (``parent.seq < child.seq``), so a
  path walk requires ``seq`` to fall at every step, which bounds it by the
  path length even in a damaged file (no depth cap, docs/deviations.md
  #18), and rows sorted by ``seq`` list every parent before its children.
* **Each row knows its place** (``depth``, ``path_bytes``, ``path_tokens``,
  ``jump_seq``: :mod:`storage.tree.places`).
* **A row points at its parent twice**: ``parent_id`` (the spec's column,
  and the key children are listed by) and ``parent_seq``, the parent's
  rowid, written and re-attached together; walking up a path is then a
  rowid lookup per step (a walk's ``ref`` is ``parent_seq``).
* **The latest leaf is the session's newest message** (the highest ``seq``,
  one seek on ``idx_assistant_msg_seq``), which survives hibernation with
  the rows themselves (docs/deviations.md #3). It is always a leaf:
  children are newer than their parent. It is the message inserted last (a
  chain ends with its last new message), and once that is deleted, the
  newest message left, which has no children either: the newest childless
  message, in insertion order.

Every lookup is an index seek; nothing here scans a session to append,
find the leaf or list children (docs/performance.md). Recursive steps and
joins use ``CROSS JOIN`` to pin the loop order: with ``ANALYZE`` statistics
the planner would otherwise sometimes put the whole table in the outer loop.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from storage import fts

from .rows import NewMessage, SearchRow
from .steps import Many, Operation, Place

#: The porter FTS5 table holding message text (its trigram twin is ``<name>_cjk``).
FTS_TABLE = "assistant_fts"


GET = "SELECT content FROM assistant_messages WHERE session_id = ?1 AND id = ?2"
EXISTS = "SELECT 1 FROM assistant_messages WHERE session_id = ?1 AND id = ?2"

# The session's newest message: the latest leaf (see the module docstring).
LATEST = "SELECT seq FROM assistant_messages INDEXED BY idx_assistant_msg_seq WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1"
LATEST_LEAF = f"SELECT m.id FROM ({LATEST}) AS l CROSS JOIN assistant_messages AS m ON m.seq = l.seq"

# The path from ?2 up to its root: (seq, depth), depth 0 = the leaf, one rowid lookup per
# step (``parent_seq``). ``m.seq < p.seq`` holds on every real edge (see the module
# docstring) and makes any cycle impossible; ``+m.session_id`` keeps a damaged pointer
# inside the session without steering the planner to an index.
PATH_CTE = """
WITH RECURSIVE path(seq, parent_seq, depth) AS (
    SELECT seq, parent_seq, 0 FROM assistant_messages WHERE session_id = ?1 AND id = ?2
    UNION ALL
    SELECT m.seq, m.parent_seq, p.depth + 1
    FROM path AS p CROSS JOIN assistant_messages AS m ON m.seq = p.parent_seq
    WHERE m.seq < p.seq AND +m.session_id = ?1
)
"""
PATH_CONTENT = PATH_CTE + """
SELECT m.content FROM path CROSS JOIN assistant_messages AS m ON m.seq = path.seq ORDER BY path.depth DESC
"""
# The same walk carrying each row's content: one JSON array of the rows that are JSON text,
# *leaf first* (the walk's order: a recursive CTE's queue is FIFO, and the aggregate reads
# it in that order; sorting would copy every row once more), and how many it holds.
PATH_JSON = """
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
CHUNK_STEPS = """
    UNION ALL
    SELECT m.seq, m.parent_seq, w.used + octet_length(m.content), w.n + 1
    FROM w CROSS JOIN assistant_messages AS m ON m.seq = w.parent_seq
    WHERE m.seq < w.seq AND +m.session_id = ?1 AND w.n < ?3 AND w.used + octet_length(m.content) <= ?4
)
SELECT w.seq, w.parent_seq, m.content FROM w CROSS JOIN assistant_messages AS m ON m.seq = w.seq ORDER BY w.n
"""
CHUNK_FROM_LEAF = """
WITH RECURSIVE w(seq, parent_seq, used, n) AS (
    SELECT seq, parent_seq, octet_length(content), 1 FROM assistant_messages WHERE session_id = ?1 AND id = ?2
""" + CHUNK_STEPS
CHUNK_FROM_ROW = """
WITH RECURSIVE w(seq, parent_seq, used, n) AS (
    SELECT seq, parent_seq, octet_length(content), 1 FROM assistant_messages
    WHERE seq = ?2 AND seq < ?5 AND +session_id = ?1
""" + CHUNK_STEPS
PATH_STATS = PATH_CTE + """
SELECT m.id, m.role, octet_length(m.content)
FROM path CROSS JOIN assistant_messages AS m ON m.seq = path.seq ORDER BY path.depth DESC
"""
# The newest rows of the path to ?2 that fit: the leaf, then each parent while the
# window has fewer than ?3 rows or the parent's bytes still fit the budget ?4.
WINDOW = """
WITH RECURSIVE w(seq, parent_seq, used, n) AS (
    SELECT seq, parent_seq, octet_length(content), 1 FROM assistant_messages WHERE session_id = ?1 AND id = ?2
    UNION ALL
    SELECT m.seq, m.parent_seq, w.used + octet_length(m.content), w.n + 1
    FROM w CROSS JOIN assistant_messages AS m ON m.seq = w.parent_seq
    WHERE m.seq < w.seq AND +m.session_id = ?1 AND (w.n < ?3 OR w.used + octet_length(m.content) <= ?4)
)
SELECT w.parent_seq, m.content FROM w CROSS JOIN assistant_messages AS m ON m.seq = w.seq ORDER BY w.n DESC
"""
# Children are found by their ``parent_seq`` (``idx_assistant_msg_parent``, schema version 5);
# ``parent_id`` is checked too, so a row is listed exactly when both pointers name the parent.
CHILDREN = """
SELECT c.content FROM assistant_messages AS p
CROSS JOIN assistant_messages AS c INDEXED BY idx_assistant_msg_parent ON c.parent_seq = p.seq
WHERE p.session_id = ?1 AND p.id = ?2 AND +c.session_id = ?1 AND +c.parent_id = ?2 ORDER BY c.created_at, c.seq
"""

INSERT = """
INSERT INTO assistant_messages
    (session_id, id, parent_id, parent_seq, role, content, depth, path_bytes, tokens, path_tokens, jump_seq)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
ON CONFLICT (session_id, id) DO NOTHING RETURNING seq
"""
# The bulk insert of a chain: every value, ``seq`` included, computed beforehand.
INSERT_ROW = """
INSERT INTO assistant_messages
    (seq, session_id, id, parent_id, parent_seq, role, content, depth, path_bytes, tokens, path_tokens, jump_seq)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
NEXT_SEQ = "SELECT coalesce(max(seq), 0) + 1 FROM assistant_messages"
COUNT = "SELECT count(*) FROM assistant_messages WHERE session_id = ?1"
STORED_IDS = """
SELECT id FROM assistant_messages WHERE session_id = ?1 AND id IN (SELECT value FROM json_each(?2))
"""
# What a child needs from its parent: the parent's place, and the depths along its jump
# chain (a root's jump is itself).
LINK_COLUMNS = """
SELECT p.seq, p.depth, p.path_bytes, p.path_tokens, j.depth, coalesce(j.jump_seq, j.seq), jj.depth
FROM assistant_messages AS p
CROSS JOIN assistant_messages AS j ON j.seq = coalesce(p.jump_seq, p.seq)
CROSS JOIN assistant_messages AS jj ON jj.seq = coalesce(j.jump_seq, j.seq)
"""
LINK = LINK_COLUMNS + "WHERE p.session_id = ?1 AND p.id = ?2"
# The same for the latest leaf, with its id first (``None`` rows: an empty session).
LATEST_LINK = f"""
SELECT p.id, p.seq, p.depth, p.path_bytes, p.path_tokens, j.depth, coalesce(j.jump_seq, j.seq), jj.depth
FROM ({LATEST}) AS l CROSS JOIN assistant_messages AS p ON p.seq = l.seq
CROSS JOIN assistant_messages AS j ON j.seq = coalesce(p.jump_seq, p.seq)
CROSS JOIN assistant_messages AS jj ON jj.seq = coalesce(j.jump_seq, j.seq)
"""
# The latest leaf's running token total, and whether the session has any compaction row.
LATEST_TOKENS = f"""
SELECT p.id, p.path_tokens, EXISTS (SELECT 1 FROM assistant_compactions WHERE session_id = ?1)
FROM ({LATEST}) AS l CROSS JOIN assistant_messages AS p ON p.seq = l.seq
"""
DEPTH_JUMP = "SELECT depth, coalesce(jump_seq, seq) FROM assistant_messages WHERE seq = ?"
OLD_SIZE = "SELECT seq, octet_length(content), tokens FROM assistant_messages WHERE session_id = ?1 AND id = ?2"
UPDATE = "UPDATE assistant_messages SET role = ?3, content = ?4, tokens = ?5 WHERE session_id = ?1 AND id = ?2"
# Every message below ?2 (and ?2 itself), walking down the parent index. In every
# recursive step below, CROSS JOIN pins the order (the queue outside, the table
# inside): left to itself the planner may walk a whole session per step.
SUBTREE_CTE = """
WITH RECURSIVE sub(seq, id) AS (
    SELECT seq, id FROM assistant_messages WHERE session_id = ?1 AND id = ?2
    UNION ALL
    SELECT c.seq, c.id FROM sub CROSS JOIN assistant_messages AS c INDEXED BY idx_assistant_msg_parent
    ON c.parent_seq = sub.seq WHERE c.seq > sub.seq AND +c.session_id = ?1 AND +c.parent_id = sub.id
)
"""
# ?3 (the row's seq) is for dialects that start the walk by it.
SHIFT = SUBTREE_CTE + """
UPDATE assistant_messages SET path_bytes = path_bytes + ?4, path_tokens = path_tokens + ?5
WHERE seq IN (SELECT seq FROM sub)
"""
# The subtrees under the ids of the JSON list ?2, each message once, parents first.
SUBTREES = """
WITH RECURSIVE sub(seq, id, parent_id, bytes, tokens) AS (
    SELECT seq, id, parent_id, octet_length(content), tokens FROM assistant_messages
    WHERE session_id = ?1 AND id IN (SELECT value FROM json_each(?2))
    UNION
    SELECT c.seq, c.id, c.parent_id, octet_length(c.content), c.tokens
    FROM sub CROSS JOIN assistant_messages AS c INDEXED BY idx_assistant_msg_parent
    ON c.parent_seq = sub.seq WHERE c.seq > sub.seq AND +c.session_id = ?1 AND +c.parent_id = sub.id
)
SELECT seq, id, parent_id, bytes, tokens FROM sub ORDER BY seq
"""
PLACE = "SELECT depth, path_bytes FROM assistant_messages WHERE session_id = ?1 AND id = ?2"
SET_PLACE = "UPDATE assistant_messages SET depth = ?, path_bytes = ?, path_tokens = ?, jump_seq = ? WHERE seq = ?"
TOKEN_PLACES = """
SELECT id, seq, depth, tokens, path_tokens FROM assistant_messages
WHERE session_id = ?1 AND id IN (SELECT value FROM json_each(?2))
"""
# Climb from ?2 toward the root until depth ?3, taking the jump pointer whenever it does
# not overshoot (O(log depth) steps); yields the ancestor at depth ?3, if any.
CLIMB = """
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
ROW_FOR_DELETE = "SELECT seq, parent_id, parent_seq FROM assistant_messages WHERE session_id = ?1 AND id = ?2"
# The children of row ?3 (whose id is ?2), and handing them to ?4 (id) / ?5 (seq).
CHILD_IDS = """
SELECT id FROM assistant_messages INDEXED BY idx_assistant_msg_parent
WHERE parent_seq = ?3 AND +session_id = ?1 AND +parent_id = ?2
"""
REPARENT = """
UPDATE assistant_messages INDEXED BY idx_assistant_msg_parent SET parent_id = ?4, parent_seq = ?5
WHERE parent_seq = ?3 AND +session_id = ?1 AND +parent_id = ?2
"""
DELETE = "DELETE FROM assistant_messages WHERE seq = ?1"
SESSION_SEQS = "SELECT seq FROM assistant_messages WHERE session_id = ?1"
CLEAR_MESSAGES = "DELETE FROM assistant_messages WHERE session_id = ?1"
CLEAR_COMPACTIONS = "DELETE FROM assistant_compactions WHERE session_id = ?1"

# Search: ``{hits}`` is storage.fts.matching_rowids_sql(...) -> (rowid, rank) of every match.
TOP_HITS = "SELECT h.rowid, h.rank FROM ({hits}) AS h ORDER BY h.rank, h.rowid LIMIT ?"
TOP_SESSION_HITS = """
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
HIT_ROWS = f"""
SELECT m.seq, m.id, m.role, {TEXT_OF_CONTENT}, m.created_at
FROM json_each(?2) AS j
CROSS JOIN assistant_messages AS m ON m.seq = j.value
WHERE +m.session_id = ?1
"""

ADD_COMPACTION = """
INSERT INTO assistant_compactions (id, session_id, summary, from_message_id, to_message_id)
VALUES (?2, ?1, ?3, ?4, ?5) RETURNING seq, created_at
"""
COMPACTIONS = """
SELECT seq, id, summary, from_message_id, to_message_id, created_at FROM assistant_compactions
WHERE session_id = ?1 ORDER BY created_at, seq
"""
COMPACTION_END = "SELECT to_message_id FROM assistant_compactions WHERE session_id = ?1 AND id = ?2"


#: Writes of one session are serialised by the actor: no lock.
LOCK = None


def id_list(ids: Iterable[str]) -> str:
    """A JSON array: what ``json_each`` reads."""
    return json.dumps(list(ids))

def insert(
    s: str, message_id: str, role: str, content: str, text: str, tools: str,
    parent: str | None, parent_seq: int | None, place: Place,
) -> Operation[int | None]:
    """The row, then its search rows (``text`` and ``tools`` both ``""``: none)."""
    rows = yield INSERT, (s, message_id, parent, parent_seq, role, content, *place)
    if not rows:
        return None
    seq: int = rows[0][0]
    for step in fts.index_rows(FTS_TABLE, seq, text, tools=tools):  # noqa: UP028 -- the hot path: no extra frame
        yield step
    return seq

def new_seqs(count: int) -> Operation[list[int]]:
    """The file's next rowids: a chain's rows are the newest of the file."""
    [(first,)] = yield NEXT_SEQ, ()
    return list(range(first, first + count))

def insert_chain(s: str, rows: list[tuple[int, NewMessage, str | None, int | None, Place]]) -> Operation[None]:
    """Every row in one ``executemany``, then the search rows, one ``executemany`` per statement."""
    search: defaultdict[str, list[Sequence[Any]]] = defaultdict(list)
    for seq, m, _, _, _ in rows:
        for sql, params in fts.index_rows(FTS_TABLE, seq, m.text, tools=m.tools):
            search[sql].append(params)
    yield Many(INSERT_ROW, [(seq, s, m.id, parent, parent_seq, m.role, m.content, *place)
                            for seq, m, parent, parent_seq, place in rows])
    for statement, args in search.items():
        yield Many(statement, args)

def rewrite(
    s: str, seq: int, message_id: str, role: str, content: str, text: str, tools: str, tokens: int
) -> Operation[None]:
    """The row's values, then its search rows anew."""
    yield UPDATE, (s, message_id, role, content, tokens)
    yield from _each(fts.unindex_rows(FTS_TABLE, seq, tools=True))
    yield from _each(fts.index_rows(FTS_TABLE, seq, text, tools=tools))

def remove(s: str, seq: int, message_id: str, parent: str | None, parent_ref: Any) -> Operation[list[str]]:
    """Re-attach the children (``parent_id`` and ``parent_seq``), delete the row and its search rows."""
    moved = [child for (child,) in (yield CHILD_IDS, (s, message_id, seq))]
    yield REPARENT, (s, message_id, seq, parent, parent_ref)
    yield DELETE, (seq,)
    yield from _each(fts.unindex_rows(FTS_TABLE, seq, tools=True))
    return moved

def after_delete(s: str, deleted: list[str]) -> Operation[None]:
    """Nothing: the latest leaf is the newest row left."""
    return
    yield

def clear(s: str) -> Operation[None]:
    """The search rows of every message, then the messages and compactions."""
    for (seq,) in (yield SESSION_SEQS, (s,)):
        yield from _each(fts.unindex_rows(FTS_TABLE, seq, tools=True))
    yield CLEAR_MESSAGES, (s,)
    yield CLEAR_COMPACTIONS, (s,)

def search(s: str, query: fts.ParsedQuery, limit: int) -> Operation[list[SearchRow]]:
    """Ranks the whole file's matches and keeps the best ``limit``; only when another
    session's messages are among them does it rank again, joined to this session's rows.
    A file holding one session (the usual actor) thus never looks up the messages table
    for every match. apsw errors pass through (the store turns them into
    :class:`~common.errors.SearchQueryError`)."""
    hits, params = fts.matching_rowids_sql(query, FTS_TABLE, tools=True)
    best = yield TOP_HITS.format(hits=hits), (*params, limit)
    rows = yield from _hit_rows(s, [seq for seq, _ in best])
    if len(rows) < len(best):
        scoped = yield TOP_SESSION_HITS.format(hits=hits), (*params, s, limit)
        rows = yield from _hit_rows(s, [seq for seq, _ in scoped])
    return rows


def _each(steps: list[tuple[str, tuple[Any, ...]]]) -> Operation[None]:
    """The steps of a list, one by one (``yield from`` a list would send their rows to it)."""
    for step in steps:  # noqa: UP028 -- a list iterator has no send()
        yield step


def _hit_rows(s: str, seqs: list[int]) -> Operation[list[SearchRow]]:
    """The hits among ``seqs`` that are messages of session ``s``, in the order of ``seqs``."""
    if not seqs:
        return []
    found = {
        seq: SearchRow(message_id, role, content, created_at)
        for seq, message_id, role, content, created_at in (yield HIT_ROWS, (s, json.dumps(seqs)))
    }
    return [found[seq] for seq in seqs if seq in found]
