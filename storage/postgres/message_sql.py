"""The SQL of :mod:`storage.postgres.messages` (one session's message tree).

Every statement is scoped to one session by ``%(s)s``. Paths are walked
from the leaf up with a recursive CTE whose step is a ``LATERAL`` primary-key
lookup (see ``WALK``); the active leaf is the ``assistant_config`` row
``(session, 'active_leaf')``; timestamps are written with millisecond
precision and read as ``YYYY-MM-DD HH:MM:SS.SSS`` (UTC).
"""

from __future__ import annotations

#: ``assistant_config.key`` of the persisted active leaf (as in the SQLite file).
ACTIVE_LEAF_KEY = "active_leaf"
#: Paths whose JSON exceeds this many bytes are not read as one array (see ``path_json``).
PATH_JSON_MAX_BYTES = 500_000_000

#: Millisecond "now" of an insert; ``created_at`` as the SQLite store's text.
NOW_MS = "date_trunc('milliseconds', clock_timestamp())"


def _stamp(column: str) -> str:
    return f"to_char(coalesce({column}, 'epoch') AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS')"


# -- SQL ---------------------------------------------------------------------------------

LOCK = "SELECT pg_advisory_xact_lock(hashtext('durable_sessions.messages'), hashtext(%(s)s))"
GET = "SELECT content FROM assistant_messages WHERE session_id = %(s)s AND id = %(id)s"
COUNT = "SELECT count(*) AS n FROM assistant_messages WHERE session_id = %(s)s"
ANALYZE = "ANALYZE assistant_messages"

# A scalar subquery, not NOT EXISTS: the planner cannot turn it into a hash anti-join over
# the whole session (which it picks when statistics are missing); it probes the child index.
CHILDLESS = """(SELECT 1 FROM assistant_messages AS k
                 WHERE k.session_id = %(s)s AND k.parent_id = m.id LIMIT 1) IS NULL"""
ACTIVE_LEAF = f"""
SELECT m.id FROM assistant_config AS c
JOIN assistant_messages AS m ON m.session_id = c.session_id AND m.id = c.value
WHERE c.session_id = %(s)s AND c.key = '{ACTIVE_LEAF_KEY}' AND {CHILDLESS}
"""
NEWEST_LEAF = f"""
SELECT m.id FROM assistant_messages AS m WHERE m.session_id = %(s)s AND {CHILDLESS}
ORDER BY m.created_at DESC, m.seq DESC LIMIT 1
"""
LATEST_LEAF = f"SELECT coalesce(({ACTIVE_LEAF}), ({NEWEST_LEAF})) AS id"
SET_ACTIVE_LEAF = f"""
INSERT INTO assistant_config (session_id, key, value) VALUES (%(s)s, '{ACTIVE_LEAF_KEY}', %(leaf)s)
ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value
"""
DROP_ACTIVE_LEAF = f"DELETE FROM assistant_config WHERE session_id = %(s)s AND key = '{ACTIVE_LEAF_KEY}'"

GET_CONFIG = "SELECT value FROM assistant_config WHERE session_id = %(s)s AND key = %(key)s"
SET_CONFIG = """
INSERT INTO assistant_config (session_id, key, value) VALUES (%(s)s, %(key)s, %(value)s)
ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value
"""
DELETE_CONFIG = "DELETE FROM assistant_config WHERE session_id = %(s)s AND key = %(key)s"

# The path from %(leaf)s up to its root; depth 0 is the leaf. Each step needs an older parent.
# Each step is a LATERAL primary-key lookup (LIMIT 1 keeps it from being flattened into a
# join): a plain join lets the planner hash the whole session at every step when
# statistics are missing or stale (O(n^2): 14 s for a 10,000-message path). The walk
# carries the columns a read needs (``{columns}``), so no second lookup per row.
WALK = """
WITH RECURSIVE path (seq, parent_id, depth, {names}) AS (
    SELECT seq, parent_id, 0, {columns} FROM assistant_messages WHERE session_id = %(s)s AND id = %(leaf)s
    UNION ALL
    SELECT m.seq, m.parent_id, p.depth + 1, {m_names} FROM path AS p
    CROSS JOIN LATERAL (SELECT seq, parent_id, {columns} FROM assistant_messages
                        WHERE session_id = %(s)s AND id = p.parent_id AND seq < p.seq LIMIT 1) AS m
)
"""
COLUMNS = {"id": "id", "role": "role", "content": "content", "tokens": "tokens", "bytes": "octet_length(content)"}


def _walk(*names: str) -> str:
    return WALK.format(
        names=", ".join(names),
        columns=", ".join(f"{COLUMNS[n]} AS {n}" for n in names),
        m_names=", ".join(f"m.{n}" for n in names),
    )


PATH_ROWS = _walk("content") + "SELECT content FROM path ORDER BY depth DESC"
PATH_STATS = _walk("id", "role", "bytes", "tokens") + "SELECT id, role, bytes, tokens FROM path ORDER BY depth DESC"
# A message's place is kept in its row (``depth``, ``path_bytes``, ``path_tokens``: see INSERT).
PLACE = "SELECT depth, path_bytes AS bytes FROM assistant_messages WHERE session_id = %(s)s AND id = %(leaf)s"
PATH_JSON = _walk("content") + f"""
SELECT (SELECT count(*) FROM path) AS n,
       CASE WHEN (SELECT coalesce(sum(octet_length(content) + 1), 0) FROM path) <= {PATH_JSON_MAX_BYTES}
            THEN (SELECT '[' || coalesce(string_agg(content, ',' ORDER BY depth), '') || ']' FROM path)
       END AS text
"""
# The newest rows of the path that fit: the leaf, then each parent while the window has
# fewer than %(min_rows)s rows or the parent still fits %(max_bytes)s.
WINDOW = """
WITH RECURSIVE w (seq, parent_id, used, n) AS (
    SELECT seq, parent_id, octet_length(content)::bigint, 1 FROM assistant_messages
    WHERE session_id = %(s)s AND id = %(leaf)s
    UNION ALL
    SELECT m.seq, m.parent_id, w.used + m.bytes, w.n + 1 FROM w
    CROSS JOIN LATERAL (SELECT seq, parent_id, octet_length(content) AS bytes FROM assistant_messages
                        WHERE session_id = %(s)s AND id = w.parent_id AND seq < w.seq LIMIT 1) AS m
    WHERE w.n < %(min_rows)s OR w.used + m.bytes <= %(max_bytes)s
)
SELECT w.parent_id, m.content FROM w JOIN assistant_messages AS m ON m.seq = w.seq ORDER BY w.n DESC
"""
# A bounded chunk of the path, leaf first: from the message %(leaf)s (by id) or the row
# %(from_seq)s (by seq), then each parent while the chunk has fewer than %(max_rows)s rows and
# its content still fits %(max_bytes)s bytes (the first row always comes, however large).
_CHUNK_STEPS = """
    UNION ALL
    SELECT m.seq, m.parent_id, w.used + m.bytes, w.n + 1 FROM w
    CROSS JOIN LATERAL (SELECT seq, parent_id, octet_length(content) AS bytes FROM assistant_messages
                        WHERE session_id = %(s)s AND id = w.parent_id AND seq < w.seq LIMIT 1) AS m
    WHERE w.n < %(max_rows)s AND w.used + m.bytes <= %(max_bytes)s
)
SELECT w.seq, w.parent_id, m.content FROM w JOIN assistant_messages AS m ON m.seq = w.seq ORDER BY w.n
"""
CHUNK_FROM_LEAF = """
WITH RECURSIVE w (seq, parent_id, used, n) AS (
    SELECT seq, parent_id, octet_length(content)::bigint, 1 FROM assistant_messages
    WHERE session_id = %(s)s AND id = %(leaf)s
""" + _CHUNK_STEPS
CHUNK_FROM_PARENT = """
WITH RECURSIVE w (seq, parent_id, used, n) AS (
    SELECT seq, parent_id, octet_length(content)::bigint, 1 FROM assistant_messages
    WHERE session_id = %(s)s AND id = %(leaf)s AND seq < %(below)s
""" + _CHUNK_STEPS
CHILDREN = """
SELECT content FROM assistant_messages WHERE session_id = %(s)s AND parent_id = %(id)s ORDER BY created_at, seq
"""

# A new row's place follows from its parent's: depth + 1, the path's bytes and tokens plus its own,
# and a jump pointer by Myers' rule (storage.postgres.places: jump over the parent's jump and its
# jump when they span equal depths, else point at the parent; NULL on a root).
INSERT = f"""
INSERT INTO assistant_messages
    (session_id, id, parent_id, role, content, text_content, tools_content, tokens, created_at,
     depth, path_bytes, path_tokens, jump_seq)
SELECT %(s)s, %(id)s, %(parent)s, %(role)s, v.content, %(text)s, %(tools)s, %(tokens)s, {NOW_MS},
       coalesce(p.depth, 0) + 1, coalesce(p.path_bytes, 0) + octet_length(v.content),
       coalesce(p.path_tokens, 0) + %(tokens)s,
       CASE WHEN p.seq IS NULL THEN NULL
            WHEN p.depth - j.depth = j.depth - jj.depth THEN coalesce(j.jump_seq, j.seq)
            ELSE p.seq END
FROM (SELECT %(content)s::text AS content) AS v
LEFT JOIN assistant_messages AS p ON p.session_id = %(s)s AND p.id = %(parent)s
LEFT JOIN assistant_messages AS j ON j.seq = coalesce(p.jump_seq, p.seq)
LEFT JOIN assistant_messages AS jj ON jj.seq = coalesce(j.jump_seq, j.seq)
"""
APPEND = f"""
WITH new AS ({INSERT} ON CONFLICT (session_id, id) DO NOTHING RETURNING id, depth),
leaf AS (
    INSERT INTO assistant_config (session_id, key, value) SELECT %(s)s, '{ACTIVE_LEAF_KEY}', id FROM new
    ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value
)
SELECT id, depth FROM new
"""
DEPTH = "SELECT depth FROM assistant_messages WHERE session_id = %(s)s AND id = %(id)s"
RELTUPLES = "SELECT reltuples FROM pg_class WHERE oid = 'assistant_messages'::regclass"
STORED_IDS = "SELECT id FROM assistant_messages WHERE session_id = %(s)s AND id = ANY(%(ids)s::text[])"
# The row's own totals move by the change of its size and tokens (SET sees the old values);
# every descendant then moves by the same change (SHIFT_SUBTREE).
UPDATE = """
UPDATE assistant_messages SET role = %(role)s, content = v.content, text_content = %(text)s,
    tools_content = %(tools)s, tokens = %(tokens)s,
    path_bytes = path_bytes + octet_length(v.content) - octet_length(assistant_messages.content),
    path_tokens = path_tokens + %(tokens)s - assistant_messages.tokens
FROM (SELECT %(content)s::text AS content) AS v
WHERE session_id = %(s)s AND id = %(id)s
"""
OWN = """
SELECT seq, octet_length(content)::bigint AS bytes, tokens, parent_id FROM assistant_messages
WHERE session_id = %(s)s AND id = %(id)s FOR UPDATE
"""
# Every descendant of %(id)s (children found by parent_id, each younger than its parent) moves
# by %(depth)s rows, %(bytes)s bytes and %(tokens)s tokens.
SHIFT_SUBTREE = """
WITH RECURSIVE below (seq, id) AS (
    SELECT seq, id FROM assistant_messages WHERE session_id = %(s)s AND parent_id = %(id)s AND seq > %(seq)s
    UNION ALL
    SELECT m.seq, m.id FROM below AS b
    JOIN assistant_messages AS m ON m.session_id = %(s)s AND m.parent_id = b.id AND m.seq > b.seq
)
UPDATE assistant_messages AS a SET depth = a.depth + %(depth)s, path_bytes = a.path_bytes + %(bytes)s,
    path_tokens = a.path_tokens + %(tokens)s
FROM below WHERE a.seq = below.seq
"""
# Delete one message and hand its children to its parent, in one statement.
# Delete one message and hand its children to its parent, in one statement; the children moved.
DELETE = """
WITH gone AS (
    DELETE FROM assistant_messages WHERE session_id = %(s)s AND id = %(id)s RETURNING parent_id
), moved AS (
    UPDATE assistant_messages SET parent_id = (SELECT parent_id FROM gone)
    WHERE session_id = %(s)s AND parent_id = %(id)s AND EXISTS (SELECT 1 FROM gone)
    RETURNING id
)
SELECT id FROM moved
"""
CLEAR = f"""
WITH messages AS (DELETE FROM assistant_messages WHERE session_id = %(s)s),
compactions AS (DELETE FROM assistant_compactions WHERE session_id = %(s)s)
{DROP_ACTIVE_LEAF}
"""

COMPACTION_COLUMNS = f"seq, id, summary, from_message_id, to_message_id, {_stamp('created_at')} AS created_text"
ADD_COMPACTION = f"""
INSERT INTO assistant_compactions (id, session_id, summary, from_message_id, to_message_id, created_at)
VALUES (%(id)s, %(s)s, %(summary)s, %(from)s, %(to)s, {NOW_MS})
RETURNING {COMPACTION_COLUMNS}
"""
COMPACTIONS = f"""
SELECT {COMPACTION_COLUMNS} FROM assistant_compactions WHERE session_id = %(s)s ORDER BY created_at, seq
"""
COMPACTION_END = "SELECT to_message_id FROM assistant_compactions WHERE session_id = %(s)s AND id = %(id)s"

SEARCH = f"""
SELECT id, role, text_content, {_stamp('created_at')} AS created_text
FROM assistant_messages WHERE session_id = %(s)s AND {{where}}
ORDER BY {{rank}} DESC, seq LIMIT %(limit)s
"""
