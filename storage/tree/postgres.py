"""The Postgres dialect of the message tree: its statements and the steps only Postgres takes.

The rules are in :mod:`storage.tree` (written once for both databases);
:class:`storage.postgres.PostgresSessionProvider` runs them on psycopg's
worker thread. Each statement is a :class:`PgStatement`: ``%(name)s``
placeholders and the names of the positional arguments the rules pass
(the contract of :class:`storage.tree.steps.Dialect`). Loads no database
driver.

What differs from SQLite (:mod:`storage.tree.sqlite`):

* every write first takes a per-session advisory lock
  (``pg_advisory_xact_lock``, :data:`LOCK`), so two writers of one session
  -- two hosts during a hand-over, two tasks -- append one after the
  other instead of both choosing the same parent;
* the latest leaf is the persisted active leaf (``assistant_config``, key
  :data:`ACTIVE_LEAF_KEY`, set by every insert) while it is stored and
  childless, else the newest childless message (``created_at``, then
  ``seq``); deleting it drops that row;
* a message's searched text lives in its own row (``text_content``,
  ``tools_content``: :mod:`storage.postgres.search`);
* ``seq`` is an identity column: a chain draws its values from its sequence;
* a walk's parent ``ref`` is the parent's id: each step of a walk is a
  ``LATERAL`` primary-key lookup (see :data:`WALK`);
* timestamps are written with millisecond precision and read as
  ``YYYY-MM-DD HH:MM:SS.SSS`` (UTC), the SQLite file's text.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .rows import NewMessage
from .steps import Operation, Place


@dataclass(frozen=True, slots=True)
class PgStatement:
    """One Postgres statement: ``sql`` with ``%(name)s`` placeholders, ``names`` the
    placeholder of each positional argument, in order."""

    sql: str
    names: tuple[str, ...]


def pg(sql: str, *names: str) -> PgStatement:
    """A :class:`PgStatement` taking the arguments ``names``."""
    return PgStatement(sql, names)


#: ``assistant_config.key`` of the persisted active leaf.
ACTIVE_LEAF_KEY = "active_leaf"
#: Paths whose JSON exceeds this many bytes are not read as one array (see ``path_json``).
PATH_JSON_MAX_BYTES = 500_000_000
#: Millisecond "now" of an insert; ``created_at`` as the SQLite store's text.
NOW_MS = "date_trunc('milliseconds', clock_timestamp())"
#: Session depths from which a write checks the table's planner statistics (64, 128, 256, ...).
CHECK_STATISTICS_FROM = 64


def stamp(column: str) -> str:
    """SQL of a ``timestamptz`` column as the SQLite file's text (UTC ``YYYY-MM-DD HH:MM:SS.SSS``)."""
    return f"to_char(coalesce({column}, 'epoch') AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS')"


# -- the latest leaf -------------------------------------------------------------------

# A scalar subquery, not NOT EXISTS: the planner cannot turn it into a hash anti-join over
# the whole session (which it picks when statistics are missing); it probes the child index.
_CHILDLESS = """(SELECT 1 FROM assistant_messages AS k
                 WHERE k.session_id = %(s)s AND k.parent_id = m.id LIMIT 1) IS NULL"""
_ACTIVE_LEAF = f"""
SELECT m.id FROM assistant_config AS c
JOIN assistant_messages AS m ON m.session_id = c.session_id AND m.id = c.value
WHERE c.session_id = %(s)s AND c.key = '{ACTIVE_LEAF_KEY}' AND {_CHILDLESS}
"""
_NEWEST_LEAF = f"""
SELECT m.id FROM assistant_messages AS m WHERE m.session_id = %(s)s AND {_CHILDLESS}
ORDER BY m.created_at DESC, m.seq DESC LIMIT 1
"""
_LATEST_LEAF = f"coalesce(({_ACTIVE_LEAF}), ({_NEWEST_LEAF}))"
ACTIVE_LEAF = pg(_ACTIVE_LEAF, "s")
SET_ACTIVE_LEAF = pg(f"""
INSERT INTO assistant_config (session_id, key, value) VALUES (%(s)s, '{ACTIVE_LEAF_KEY}', %(leaf)s)
ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value
""", "s", "leaf")
DROP_ACTIVE_LEAF_SQL = f"DELETE FROM assistant_config WHERE session_id = %(s)s AND key = '{ACTIVE_LEAF_KEY}'"
DROP_ACTIVE_LEAF = pg(DROP_ACTIVE_LEAF_SQL, "s")

# -- reads -------------------------------------------------------------------------------

LOCK = pg("SELECT pg_advisory_xact_lock(hashtext('durable_sessions.messages'), hashtext(%(s)s))", "s")
GET = pg("SELECT content FROM assistant_messages WHERE session_id = %(s)s AND id = %(id)s", "s", "id")
EXISTS = pg("SELECT 1 AS found FROM assistant_messages WHERE session_id = %(s)s AND id = %(id)s", "s", "id")
COUNT = pg("SELECT count(*) AS n FROM assistant_messages WHERE session_id = %(s)s", "s")
LATEST_LEAF = pg(f"SELECT {_LATEST_LEAF} AS id", "s")

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
_COLUMNS = {"id": "id", "role": "role", "content": "content", "bytes": "octet_length(content)"}


def _walk(*names: str) -> str:
    return WALK.format(
        names=", ".join(names),
        columns=", ".join(f"{_COLUMNS[n]} AS {n}" for n in names),
        m_names=", ".join(f"m.{n}" for n in names),
    )


PATH_CONTENT = pg(_walk("content") + "SELECT content FROM path ORDER BY depth DESC", "s", "leaf")
PATH_STATS = pg(_walk("id", "role", "bytes") + "SELECT id, role, bytes FROM path ORDER BY depth DESC", "s", "leaf")
PATH_JSON = pg(_walk("content") + f"""
SELECT CASE WHEN (SELECT coalesce(sum(octet_length(content) + 1), 0) FROM path) <= {PATH_JSON_MAX_BYTES}
            THEN (SELECT '[' || coalesce(string_agg(content, ',' ORDER BY depth), '') || ']' FROM path)
       END AS text,
       (SELECT count(*) FROM path) AS n
""", "s", "leaf")
# A message's place is kept in its row (``depth``, ``path_bytes``, ``path_tokens``).
PLACE = pg("SELECT depth, path_bytes FROM assistant_messages WHERE session_id = %(s)s AND id = %(id)s", "s", "id")
# The newest rows of the path that fit: the leaf, then each parent while the window has
# fewer than %(min_rows)s rows or the parent still fits %(max_bytes)s.
WINDOW = pg("""
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
""", "s", "leaf", "min_rows", "max_bytes")
# A bounded chunk of the path, leaf first: from the message %(leaf)s, or its stored parent
# below %(below)s, then each parent while the chunk has fewer than %(max_rows)s rows and its
# content still fits %(max_bytes)s bytes (the first row always comes, however large).
_CHUNK_STEPS = """
    UNION ALL
    SELECT m.seq, m.parent_id, w.used + m.bytes, w.n + 1 FROM w
    CROSS JOIN LATERAL (SELECT seq, parent_id, octet_length(content) AS bytes FROM assistant_messages
                        WHERE session_id = %(s)s AND id = w.parent_id AND seq < w.seq LIMIT 1) AS m
    WHERE w.n < %(max_rows)s AND w.used + m.bytes <= %(max_bytes)s
)
SELECT w.seq, w.parent_id, m.content FROM w JOIN assistant_messages AS m ON m.seq = w.seq ORDER BY w.n
"""
CHUNK_FROM_LEAF = pg("""
WITH RECURSIVE w (seq, parent_id, used, n) AS (
    SELECT seq, parent_id, octet_length(content)::bigint, 1 FROM assistant_messages
    WHERE session_id = %(s)s AND id = %(leaf)s
""" + _CHUNK_STEPS, "s", "leaf", "max_rows", "max_bytes")
CHUNK_FROM_ROW = pg("""
WITH RECURSIVE w (seq, parent_id, used, n) AS (
    SELECT seq, parent_id, octet_length(content)::bigint, 1 FROM assistant_messages
    WHERE session_id = %(s)s AND id = %(leaf)s AND seq < %(below)s
""" + _CHUNK_STEPS, "s", "leaf", "max_rows", "max_bytes", "below")
CHILDREN = pg("""
SELECT content FROM assistant_messages WHERE session_id = %(s)s AND parent_id = %(id)s ORDER BY created_at, seq
""", "s", "id")

_COMPACTION_COLUMNS = f"seq, id, summary, from_message_id, to_message_id, {stamp('created_at')} AS created_text"
COMPACTIONS = pg(f"""
SELECT {_COMPACTION_COLUMNS} FROM assistant_compactions WHERE session_id = %(s)s ORDER BY created_at, seq
""", "s")
COMPACTION_END = pg(
    "SELECT to_message_id FROM assistant_compactions WHERE session_id = %(s)s AND id = %(id)s", "s", "id"
)
ADD_COMPACTION = pg(f"""
INSERT INTO assistant_compactions (id, session_id, summary, from_message_id, to_message_id, created_at)
VALUES (%(id)s, %(s)s, %(summary)s, %(from)s, %(to)s, {NOW_MS})
RETURNING seq, {stamp('created_at')} AS created_text
""", "s", "id", "summary", "from", "to")

# -- places (storage.tree.places) ------------------------------------------------------------

TOKEN_PLACES = pg("""
SELECT id, seq, depth, tokens, path_tokens FROM assistant_messages
WHERE session_id = %(s)s AND id = ANY(%(ids)s::text[])
""", "s", "ids")
# Climb from %(seq)s toward the root until depth %(depth)s, taking the jump pointer whenever it
# does not overshoot (O(log depth) steps); the ancestor at depth %(depth)s, if any.
CLIMB = pg("""
WITH RECURSIVE climb (seq, depth) AS (
    SELECT seq, depth FROM assistant_messages WHERE seq = %(seq)s
    UNION ALL
    SELECT CASE WHEN j.depth >= %(depth)s THEN j.seq ELSE p.seq END,
           CASE WHEN j.depth >= %(depth)s THEN j.depth ELSE p.depth END
    FROM climb AS c
    JOIN assistant_messages AS m ON m.seq = c.seq
    JOIN assistant_messages AS j ON j.seq = coalesce(m.jump_seq, m.seq)
    JOIN assistant_messages AS p ON p.session_id = m.session_id AND p.id = m.parent_id
    WHERE c.depth > %(depth)s AND p.depth < c.depth AND j.depth < c.depth
)
SELECT seq FROM climb WHERE depth = %(depth)s
""", "s", "seq", "depth")
# The latest leaf's running token total, and whether the session has any compaction row.
LATEST_TOKENS = pg(f"""
SELECT p.id, p.path_tokens,
       EXISTS (SELECT 1 FROM assistant_compactions WHERE session_id = %(s)s) AS compacted
FROM assistant_messages AS p WHERE p.session_id = %(s)s AND p.id = {_LATEST_LEAF}
""", "s")
# What a child needs from its parent: the parent's place, its jump target's depth, that target's jump.
_LINK = """
SELECT {first}p.seq, p.depth, p.path_bytes, p.path_tokens, j.depth AS j_depth,
       coalesce(j.jump_seq, j.seq) AS jj_seq, jj.depth AS jj_depth
FROM assistant_messages AS p
JOIN assistant_messages AS j ON j.seq = coalesce(p.jump_seq, p.seq)
JOIN assistant_messages AS jj ON jj.seq = coalesce(j.jump_seq, j.seq)
WHERE p.session_id = %(s)s AND p.id = {id}
"""
LINK = pg(_LINK.format(first="", id="%(id)s"), "s", "id")
LATEST_LINK = pg(_LINK.format(first="p.id, ", id=_LATEST_LEAF), "s")
DEPTH_JUMP = pg("SELECT depth, coalesce(jump_seq, seq) AS jump FROM assistant_messages WHERE seq = %(seq)s", "seq")
# Every row under the ids %(tops)s (and those rows), parents before children.
SUBTREES = pg("""
WITH RECURSIVE sub (seq, id, parent_id, bytes, tokens) AS (
    SELECT seq, id, parent_id, octet_length(content)::bigint, tokens FROM assistant_messages
    WHERE session_id = %(s)s AND id = ANY(%(tops)s::text[])
    UNION
    SELECT c.seq, c.id, c.parent_id, octet_length(c.content)::bigint, c.tokens FROM sub
    JOIN assistant_messages AS c ON c.session_id = %(s)s AND c.parent_id = sub.id AND c.seq > sub.seq
)
SELECT seq, id, parent_id, bytes, tokens FROM sub ORDER BY seq
""", "s", "tops")
SET_PLACE = pg("""
UPDATE assistant_messages SET depth = %(depth)s, path_bytes = %(path_bytes)s, path_tokens = %(path_tokens)s,
    jump_seq = %(jump)s
WHERE seq = %(seq)s
""", "depth", "path_bytes", "path_tokens", "jump", "seq")

# -- writes -----------------------------------------------------------------------------------

STORED_IDS = pg(
    "SELECT id FROM assistant_messages WHERE session_id = %(s)s AND id = ANY(%(ids)s::text[])", "s", "ids"
)
_ROW_COLUMNS = ("session_id, id, parent_id, role, content, text_content, tools_content, created_at, "
                "depth, path_bytes, tokens, path_tokens, jump_seq")
_ROW_VALUES = ("%(s)s, %(id)s, %(parent)s, %(role)s, %(content)s, %(text)s, %(tools)s, " + NOW_MS
               + ", %(depth)s, %(path_bytes)s, %(tokens)s, %(path_tokens)s, %(jump)s")
_ROW_NAMES = ("s", "id", "parent", "role", "content", "text", "tools", "depth", "path_bytes", "tokens",
              "path_tokens", "jump")
# One message and, when it is new, the active leaf (in one statement); its seq.
APPEND = pg(f"""
WITH new AS (
    INSERT INTO assistant_messages ({_ROW_COLUMNS}) VALUES ({_ROW_VALUES})
    ON CONFLICT (session_id, id) DO NOTHING RETURNING seq, id
), leaf AS (
    INSERT INTO assistant_config (session_id, key, value) SELECT %(s)s, '{ACTIVE_LEAF_KEY}', id FROM new
    ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value
)
SELECT seq FROM new
""", *_ROW_NAMES)
# A whole chain in one statement, its columns as arrays: the catalog's statement-level triggers run once
# per chain, not once per row (per-row statements update the session's catalog row once each, and in one
# transaction each update walks every earlier version of that row: 10,000 rows took 4.7-11.7 s, one
# statement 0.2 s).
INSERT_CHAIN = pg(f"""
INSERT INTO assistant_messages (seq, {_ROW_COLUMNS})
SELECT r.seq, %(s)s, r.id, r.parent, r.role, r.content, r.text, r.tools, {NOW_MS},
       r.depth, r.path_bytes, r.tokens, r.path_tokens, r.jump
FROM unnest(%(seqs)s::bigint[], %(ids)s::text[], %(parents)s::text[], %(roles)s::text[], %(contents)s::text[],
            %(texts)s::text[], %(tools)s::text[], %(depths)s::integer[], %(path_bytes)s::bigint[],
            %(tokens)s::bigint[], %(path_tokens)s::bigint[], %(jumps)s::bigint[])
     AS r(seq, id, parent, role, content, text, tools, depth, path_bytes, tokens, path_tokens, jump)
""", "s", "seqs", "ids", "parents", "roles", "contents", "texts", "tools", "depths", "path_bytes", "tokens",
    "path_tokens", "jumps")
NEW_SEQS = pg(
    "SELECT nextval(pg_get_serial_sequence('assistant_messages', 'seq')) AS seq FROM generate_series(1, %(n)s)", "n"
)
OLD_SIZE = pg("""
SELECT seq, octet_length(content)::bigint AS bytes, tokens FROM assistant_messages
WHERE session_id = %(s)s AND id = %(id)s FOR UPDATE
""", "s", "id")
REWRITE = pg("""
UPDATE assistant_messages SET role = %(role)s, content = %(content)s, text_content = %(text)s,
    tools_content = %(tools)s, tokens = %(tokens)s
WHERE seq = %(seq)s
""", "seq", "role", "content", "text", "tools", "tokens")
# The row %(seq)s and every row below it (children found by parent_id, each younger than its
# parent) move by %(bytes)s bytes and %(tokens)s tokens.
SHIFT = pg("""
WITH RECURSIVE below (seq, id) AS (
    SELECT seq, id FROM assistant_messages WHERE seq = %(seq)s
    UNION ALL
    SELECT m.seq, m.id FROM below AS b
    JOIN assistant_messages AS m ON m.session_id = %(s)s AND m.parent_id = b.id AND m.seq > b.seq
)
UPDATE assistant_messages AS a SET path_bytes = a.path_bytes + %(bytes)s, path_tokens = a.path_tokens + %(tokens)s
FROM below WHERE a.seq = below.seq
""", "s", "id", "seq", "bytes", "tokens")
ROW_FOR_DELETE = pg("""
SELECT seq, parent_id, parent_id AS ref FROM assistant_messages WHERE session_id = %(s)s AND id = %(id)s FOR UPDATE
""", "s", "id")
# Delete one message and hand its children to its parent, in one statement; the children moved.
REMOVE = pg("""
WITH gone AS (
    DELETE FROM assistant_messages WHERE seq = %(seq)s
), moved AS (
    UPDATE assistant_messages SET parent_id = %(parent)s WHERE session_id = %(s)s AND parent_id = %(id)s RETURNING id
)
SELECT id FROM moved
""", "s", "seq", "id", "parent")
CLEAR = pg(f"""
WITH messages AS (DELETE FROM assistant_messages WHERE session_id = %(s)s),
compactions AS (DELETE FROM assistant_compactions WHERE session_id = %(s)s)
{DROP_ACTIVE_LEAF_SQL}
""", "s")
RELTUPLES = pg("SELECT reltuples FROM pg_class WHERE oid = 'assistant_messages'::regclass")
ANALYZE = pg("ANALYZE assistant_messages")


def id_list(ids: Iterable[str]) -> list[str]:
    """A ``text[]`` value, each id once."""
    return sorted(set(ids))

def insert(
    s: str, message_id: str, role: str, content: str, text: str, tools: str,
    parent: str | None, parent_seq: int | None, place: Place,
) -> Operation[int | None]:
    """The row with its searched text, and the active leaf; then the statistics check."""
    depth, path_bytes, tokens, path_tokens, jump = place
    rows = yield APPEND, (s, message_id, parent, role, content, text, tools, depth, path_bytes, tokens,
                          path_tokens, jump)
    if not rows:
        return None
    yield from keep_statistics(1, depth)
    seq: int = rows[0][0]
    return seq

def new_seqs(count: int) -> Operation[list[int]]:
    """``count`` values of the ``seq`` identity's sequence."""
    return sorted(row[0] for row in (yield NEW_SEQS, (count,)))

def insert_chain(s: str, rows: list[tuple[int, NewMessage, str | None, int | None, Place]]) -> Operation[None]:
    """Every row in one statement (:data:`INSERT_CHAIN`), then the active leaf and the statistics check."""
    columns = list(zip(*[(seq, m.id, parent, m.role, m.content, m.text, m.tools, *place)
                         for seq, m, parent, _, place in rows]))
    yield INSERT_CHAIN, (s, *(list(column) for column in columns))
    yield SET_ACTIVE_LEAF, (s, rows[-1][1].id)
    yield from keep_statistics(len(rows), rows[-1][4][0])

def rewrite(
    s: str, seq: int, message_id: str, role: str, content: str, text: str, tools: str, tokens: int
) -> Operation[None]:
    """The row's values and searched text."""
    yield REWRITE, (seq, role, content, text, tools, tokens)

def remove(s: str, seq: int, message_id: str, parent: str | None, parent_ref: object) -> Operation[list[str]]:
    """Delete the row and hand its children to ``parent`` (one statement)."""
    return [row[0] for row in (yield REMOVE, (s, seq, message_id, parent))]

def after_delete(s: str, deleted: list[str]) -> Operation[None]:
    """Drop the active-leaf row when the leaf it names is gone."""
    if not (yield ACTIVE_LEAF, (s,)):
        yield DROP_ACTIVE_LEAF, (s,)

def clear(s: str) -> Operation[None]:
    """Every message and compaction of the session and its active leaf, in one statement."""
    yield CLEAR, (s,)


def keep_statistics(inserted: int, depth: int) -> Operation[None]:
    """``ANALYZE assistant_messages`` when the statistics are far behind a session that grew.

    Statistics taken while the table was (nearly) empty -- or none at all --
    make every index led by ``session_id`` look as good as the primary key,
    and the planner may then find each message by scanning its whole
    session: a path walk becomes O(n^2) (9 s for a 10,000-message path
    instead of 40 ms; 3 ms instead of 0.4 ms at 100). So a write whose
    ``inserted`` rows brought the session past a power of two from
    :data:`CHECK_STATISTICS_FROM` on (``depth`` is its last row's) reads the
    table's row estimate -- one catalog row -- and, when it is under four
    times that depth, analyzes the table in the same transaction (ANALYZE
    counts the transaction's own rows; the new statistics appear with the
    commit; it samples a bounded number of rows, ~20 ms here). Autovacuum
    keeps them current otherwise.
    """
    if depth < CHECK_STATISTICS_FROM:
        return
    crossed = 1 << (depth.bit_length() - 1)  # the power of two at or below depth
    if crossed <= depth - inserted:
        return
    [(reltuples,)] = yield RELTUPLES, ()
    if reltuples < 4 * depth:
        yield ANALYZE, ()
