"""The schema of an actor's SQLite file, as a ``PRAGMA user_version`` ladder.

``MIGRATIONS[i]`` takes a file from version ``i`` to ``i + 1``; a new file
starts at 0 and climbs the whole ladder inside one transaction
(:meth:`storage.SqlStorage.open`). Steps are only ever appended, never
edited once released.

Table names follow the TypeScript original (``assistant_messages``,
``assistant_compactions``, ``assistant_fts``, ``assistant_config``,
``assistant_sessions``, ``cf_agents_context_blocks``,
``cf_agents_search_entries``, ``cf_agents_search_fts``) with the columns of
docs/behaviours.md §1, except where docs/deviations.md says better:

* messages are keyed by ``(session_id, id)`` (docs/deviations.md #1) and carry an
  explicit ``seq`` (the rowid: insertion order, the tie-breaker of every
  ordering, docs/deviations.md #2);
* each message row also keeps its place on its path: ``depth`` (messages
  from the root to it, the root being 1) and ``path_bytes`` (UTF-8 bytes of
  ``content`` summed from the root to it), so a path's length and size are
  one row read (``storage/messages.py`` maintains them); likewise
  ``tokens`` (the message's estimated tokens, computed by the actor layer)
  and ``path_tokens`` (their sum from the root), so the token estimate of a
  history is one row read, and ``jump_seq`` (a skew-binary jump pointer to
  an ancestor; ``NULL`` on a root) so "is X on the path to Y" takes
  O(log depth) row reads; ``parent_seq`` is the parent's ``seq`` (kept
  with ``parent_id``), so a path is walked by rowid lookups;
* ``assistant_fts`` indexes a message's text parts (``content``), one row
  per message with text, as the original's does (so bm25 ranks text
  matches as it does); ``assistant_fts_tools`` holds, for each message with
  tool calls, its text (``content``) and the names and string inputs of its
  tool calls (``tools``), so tool calls are searchable without changing
  that ranking (version 2; version 1 kept ``tools`` as a second column of
  ``assistant_fts``). Both are contentless: a hit's text is read from the
  message row (version 3; before, ``assistant_fts`` kept a copy of the
  text and of the message's ``id``, ``session_id`` and ``role``);
* the latest leaf of a session is its newest message (the highest ``seq``,
  found through ``idx_assistant_msg_seq``): a message's children are always
  newer than it, so the newest message has none (version 3; before, the
  last appended message was also written to ``assistant_config`` as
  ``active_leaf``, and ``idx_assistant_msg_created`` ordered the fallback);
* porter indexes are given text split where CJK meets other letters or
  digits (``storage.fts.indexed_text``, version 2);
* every ``created_at``/``updated_at`` is UTC text with milliseconds,
  ``YYYY-MM-DD HH:MM:SS.SSS``;
* ``assistant_sessions.updated_seq`` numbers the writes that set
  ``updated_at`` (creation included), so two sessions touched within the
  same millisecond still list in the order they were touched;
* full-text rows use the message's ``seq`` as their rowid, so indexing and
  de-indexing a message are rowid lookups, never scans;
* ``assistant_fts_cjk`` / ``cf_agents_search_fts_cjk`` are trigram indexes
  holding only text that contains CJK characters (docs/deviations.md #10);
* ``transcript_entries`` holds Claude Agent SDK transcript entries (opaque
  JSON, append order, de-duplicated by ``uuid`` per ``subpath``);
* ``assistant_embeddings`` holds one vector per message with text (semantic
  search, version 4), ``assistant_embeddings_through`` each session's
  embedded-through ``seq`` (version 8: the messages above it are pending) and
  ``assistant_embeddings_pending`` the messages at or below it to embed again
  (:mod:`storage.embeddings`);
* ``_cf_KV`` is the Durable Object key-value store (msgpack values) and
  ``_cf_alarm`` the actor's single alarm;
* children are found through ``idx_assistant_msg_parent`` on ``parent_seq``
  (version 5; before, on ``(session_id, parent_id, seq)``);
* the tables of :data:`ON_FIRST_USE` (key-value, alarm, transcripts,
  searchable-block entries and their indexes, embeddings; since version 7
  the message text indexes ``assistant_fts``, ``assistant_fts_tools`` and
  ``assistant_fts_cjk``, made by the first write to the messages, and the
  session registry ``assistant_sessions``, made by the first session a
  SessionManager registers; since version 9 the message table
  ``assistant_messages``, made by the first message written,
  ``assistant_compactions``, made by the first compaction, and
  ``cf_agents_context_blocks``, made by the first block or cached prompt
  written, so a session only read or holding only its prompt costs a few
  pages) exist only once written (versions 6, 7 and 9 drop them while
  empty): readers ask
  :func:`table_exists`, writers call :func:`create_on_first_use` inside
  their transaction; a cluster restore makes them all
  (:func:`create_for_restore`); a cluster's capture makes them all before
  it attaches (:func:`create_every_table`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Union

import apsw

from .fts import indexed_text

#: One step of the ladder: SQL text, or a function given the connection
#: (inside the migration's transaction) when SQL alone cannot do the step.
Migration = Union[str, Callable[[apsw.Connection], None]]

NOW_MS = "(strftime('%Y-%m-%d %H:%M:%f', 'now'))"

_V1 = f"""
CREATE TABLE assistant_messages (
    seq        INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL DEFAULT '',
    id         TEXT NOT NULL,
    parent_id  TEXT,
    parent_seq INTEGER,
    role       TEXT NOT NULL,
    content    TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT {NOW_MS},
    depth      INTEGER NOT NULL DEFAULT 1,
    path_bytes INTEGER NOT NULL DEFAULT 0,
    tokens      INTEGER NOT NULL DEFAULT 0,
    path_tokens INTEGER NOT NULL DEFAULT 0,
    jump_seq    INTEGER,
    UNIQUE (session_id, id)
);
CREATE INDEX idx_assistant_msg_parent ON assistant_messages (session_id, parent_id, seq);
CREATE INDEX idx_assistant_msg_created ON assistant_messages (session_id, created_at, seq);

CREATE TABLE assistant_compactions (
    seq             INTEGER PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    session_id      TEXT NOT NULL DEFAULT '',
    summary         TEXT NOT NULL,
    from_message_id TEXT NOT NULL,
    to_message_id   TEXT NOT NULL,
    created_at      TEXT NOT NULL DEFAULT {NOW_MS}
);
CREATE INDEX idx_assistant_compactions_session ON assistant_compactions (session_id, seq);

CREATE VIRTUAL TABLE assistant_fts USING fts5(
    id UNINDEXED, session_id UNINDEXED, role UNINDEXED, content, tools,
    tokenize = 'porter unicode61'
);
CREATE VIRTUAL TABLE assistant_fts_cjk USING fts5(content, tokenize = 'trigram');

CREATE TABLE assistant_config (
    session_id TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    PRIMARY KEY (session_id, key)
) WITHOUT ROWID;

CREATE TABLE cf_agents_context_blocks (
    label      TEXT PRIMARY KEY,
    content    TEXT NOT NULL,
    updated_at TEXT NOT NULL DEFAULT {NOW_MS}
);

CREATE TABLE cf_agents_search_entries (
    seq        INTEGER PRIMARY KEY,
    label      TEXT NOT NULL,
    key        TEXT NOT NULL,
    content    TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT {NOW_MS},
    updated_at TEXT NOT NULL DEFAULT {NOW_MS},
    UNIQUE (label, key)
);
CREATE VIRTUAL TABLE cf_agents_search_fts USING fts5(
    label UNINDEXED, key UNINDEXED, content,
    tokenize = 'porter unicode61'
);
CREATE VIRTUAL TABLE cf_agents_search_fts_cjk USING fts5(content, tokenize = 'trigram');

CREATE TABLE assistant_sessions (
    seq               INTEGER PRIMARY KEY,
    id                TEXT NOT NULL UNIQUE,
    name              TEXT NOT NULL,
    parent_session_id TEXT,
    model             TEXT,
    source            TEXT,
    input_tokens      INTEGER NOT NULL DEFAULT 0,
    output_tokens     INTEGER NOT NULL DEFAULT 0,
    estimated_cost    REAL NOT NULL DEFAULT 0,
    end_reason        TEXT,
    created_at        TEXT NOT NULL DEFAULT {NOW_MS},
    updated_at        TEXT NOT NULL DEFAULT {NOW_MS},
    updated_seq       INTEGER NOT NULL UNIQUE
);
CREATE INDEX idx_assistant_sessions_updated ON assistant_sessions (updated_at, updated_seq);

CREATE TABLE _cf_KV (
    key   TEXT PRIMARY KEY,
    value BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE transcript_entries (
    seq     INTEGER PRIMARY KEY,
    subpath TEXT NOT NULL DEFAULT '',
    uuid    TEXT,
    entry   TEXT NOT NULL
);
CREATE UNIQUE INDEX idx_transcript_uuid ON transcript_entries (subpath, uuid) WHERE uuid IS NOT NULL;
CREATE INDEX idx_transcript_subpath ON transcript_entries (subpath, seq);

CREATE TABLE _cf_alarm (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    scheduled_ms INTEGER NOT NULL,
    retry_count  INTEGER NOT NULL DEFAULT 0
);
"""

_V2_TABLES = """
ALTER TABLE assistant_fts RENAME TO assistant_fts_v1;
CREATE VIRTUAL TABLE assistant_fts USING fts5(
    id UNINDEXED, session_id UNINDEXED, role UNINDEXED, content,
    tokenize = 'porter unicode61'
);
CREATE VIRTUAL TABLE assistant_fts_tools USING fts5(
    content, tools, content = '', contentless_delete = 1, tokenize = 'porter unicode61'
);
"""


def _v2(con: apsw.Connection) -> None:
    """Version 2: tool calls in their own index; porter text split at CJK boundaries.

    ``assistant_fts`` is rebuilt with the original's columns, holding only
    rows with text; rows with tool calls are copied (text and tools) into
    ``assistant_fts_tools``; every porter row, search entries included, is
    re-indexed through :func:`storage.fts.indexed_text`. Rowids are kept.
    Costs one pass over the full-text rows (a 100,000-message file: about
    a second, once).
    """
    con.execute(_V2_TABLES)
    reader = con.cursor()
    con.executemany(
        "INSERT INTO assistant_fts (rowid, id, session_id, role, content) VALUES (?, ?, ?, ?, ?)",
        (
            (rowid, message_id, session_id, role, indexed_text(text))
            for rowid, message_id, session_id, role, text in reader.execute(
                "SELECT rowid, id, session_id, role, content FROM assistant_fts_v1 WHERE content != ''"
            )
        ),
    )
    con.executemany(
        "INSERT INTO assistant_fts_tools (rowid, content, tools) VALUES (?, ?, ?)",
        (
            (rowid, indexed_text(text), indexed_text(tools))
            for rowid, text, tools in reader.execute(
                "SELECT rowid, content, tools FROM assistant_fts_v1 WHERE tools != ''"
            )
        ),
    )
    con.execute("DROP TABLE assistant_fts_v1")
    entries = [
        (rowid, label, key, indexed_text(text))
        for rowid, label, key, text in reader.execute("SELECT rowid, label, key, content FROM cf_agents_search_fts")
        if indexed_text(text) != text
    ]
    for rowid, label, key, text in entries:
        con.execute("DELETE FROM cf_agents_search_fts WHERE rowid = ?", (rowid,))
        con.execute(
            "INSERT INTO cf_agents_search_fts (rowid, label, key, content) VALUES (?, ?, ?, ?)",
            (rowid, label, key, text),
        )


# Version 3: a smaller file and fewer pages written per append (docs/performance.md).
#
# * ``assistant_fts`` becomes contentless: it kept a second copy of every
#   message's text (plus copies of its ``id``, ``session_id`` and ``role``),
#   which the message row already holds; a hit's text is read from the
#   message's JSON (``storage.messages.TEXT_OF_CONTENT``). Rowids and ranking
#   are unchanged (bm25 never counted the unindexed columns).
# * ``idx_assistant_msg_created`` goes and ``idx_assistant_msg_seq`` (the
#   session's rows in insertion order) comes: the latest leaf is the
#   session's newest message, one index seek, so the ``active_leaf`` rows of
#   ``assistant_config`` are no longer written (each append rewrote one).
_V3 = """
DROP INDEX idx_assistant_msg_created;
CREATE INDEX idx_assistant_msg_seq ON assistant_messages (session_id, seq);
ALTER TABLE assistant_fts RENAME TO assistant_fts_v2;
CREATE VIRTUAL TABLE assistant_fts USING fts5(
    content, content = '', contentless_delete = 1, tokenize = 'porter unicode61'
);
INSERT INTO assistant_fts (rowid, content) SELECT rowid, content FROM assistant_fts_v2;
DROP TABLE assistant_fts_v2;
DELETE FROM assistant_config WHERE key = 'active_leaf';
"""


# Version 4: semantic search (docs/semantic-search.md). One vector per message with text, a plain
# row (``dimension * 4`` bytes, little-endian float32) with the model's name and dimension beside
# it, so a cluster changeset carries it as it is; and one pending marker per message still to
# embed, written in the append's transaction (``mark`` counts re-marks: an update while the
# message is being embedded keeps its marker). Both keyed by the message's ``seq``. And one vector per
# searchable-block entry (``cf_agents_search_embeddings``, keyed by the entry's ``seq``, with the
# text it was made from, so a replaced entry is embedded again).
_V4 = """
CREATE TABLE assistant_embeddings (
    seq        INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL DEFAULT '',
    model      TEXT NOT NULL,
    dimension  INTEGER NOT NULL,
    vector     BLOB NOT NULL
);
CREATE INDEX idx_assistant_embeddings_session ON assistant_embeddings (session_id, model);
CREATE TABLE assistant_embeddings_pending (
    seq        INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL DEFAULT '',
    mark       INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE cf_agents_search_embeddings (
    seq        INTEGER PRIMARY KEY,
    model      TEXT NOT NULL,
    dimension  INTEGER NOT NULL,
    content    TEXT NOT NULL,
    vector     BLOB NOT NULL
);
"""


# Version 5: fewer pages written per append and a smaller file (docs/performance.md). Children are
# found by their parent's ``seq`` (an integer, growing with every append: each insert lands on the
# index's last page) instead of ``(session_id, parent_id, seq)`` (text keys scattered over the whole
# index: 1.7 pages written per append at 10k messages, and pages left two-thirds full). A child's
# ``parent_seq`` is always its parent's row (storage/tree/sqlite.py), so the session and the
# ``parent_id`` the old index held are read from the few rows found.
_V5 = """
DROP INDEX idx_assistant_msg_parent;
CREATE INDEX idx_assistant_msg_parent ON assistant_messages (parent_seq);
"""


# Version 6: tables most actors never use are made when first written (docs/performance.md).
# Each empty table costs a page (an FTS5 table five), so a new file held 44 pages of empty
# b-trees. These tables are dropped while empty, here, and made again, exactly as the ladder
# made them, by the first write that needs them (:func:`create_on_first_use`); a read finds
# none of their rows while they do not exist (:func:`table_exists`).
ON_FIRST_USE: dict[str, str] = {
    "_cf_KV": "CREATE TABLE IF NOT EXISTS _cf_KV (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;",
    "_cf_alarm": """
CREATE TABLE IF NOT EXISTS _cf_alarm (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    scheduled_ms INTEGER NOT NULL,
    retry_count  INTEGER NOT NULL DEFAULT 0
);""",
    "transcript_entries": """
CREATE TABLE IF NOT EXISTS transcript_entries (
    seq     INTEGER PRIMARY KEY,
    subpath TEXT NOT NULL DEFAULT '',
    uuid    TEXT,
    entry   TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_transcript_uuid ON transcript_entries (subpath, uuid) WHERE uuid IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_transcript_subpath ON transcript_entries (subpath, seq);""",
    # The entries of searchable blocks with their two full-text indexes: made (and dropped) together.
    "cf_agents_search_entries": f"""
CREATE TABLE IF NOT EXISTS cf_agents_search_entries (
    seq        INTEGER PRIMARY KEY,
    label      TEXT NOT NULL,
    key        TEXT NOT NULL,
    content    TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT {NOW_MS},
    updated_at TEXT NOT NULL DEFAULT {NOW_MS},
    UNIQUE (label, key)
);
CREATE VIRTUAL TABLE IF NOT EXISTS cf_agents_search_fts USING fts5(
    label UNINDEXED, key UNINDEXED, content,
    tokenize = 'porter unicode61'
);
CREATE VIRTUAL TABLE IF NOT EXISTS cf_agents_search_fts_cjk USING fts5(content, tokenize = 'trigram');""",
    "cf_agents_search_embeddings": """
CREATE TABLE IF NOT EXISTS cf_agents_search_embeddings (
    seq        INTEGER PRIMARY KEY,
    model      TEXT NOT NULL,
    dimension  INTEGER NOT NULL,
    content    TEXT NOT NULL,
    vector     BLOB NOT NULL
);""",
    "assistant_embeddings": """
CREATE TABLE IF NOT EXISTS assistant_embeddings (
    seq        INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL DEFAULT '',
    model      TEXT NOT NULL,
    dimension  INTEGER NOT NULL,
    vector     BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_assistant_embeddings_session ON assistant_embeddings (session_id, model);
CREATE TABLE IF NOT EXISTS assistant_embeddings_pending (
    seq        INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL DEFAULT '',
    mark       INTEGER NOT NULL DEFAULT 1
);""",
}

# Version 7: the full-text indexes of message text are made by the first write to the messages
# (docs/performance.md): their three FTS5 tables are 13 pages of an empty file. Made exactly as
# versions 1-3 made them; a file whose indexes hold no row has them dropped here.
ON_FIRST_USE["assistant_fts"] = """
CREATE VIRTUAL TABLE IF NOT EXISTS assistant_fts_cjk USING fts5(content, tokenize = 'trigram');
CREATE VIRTUAL TABLE IF NOT EXISTS assistant_fts_tools USING fts5(
    content, tools, content = '', contentless_delete = 1, tokenize = 'porter unicode61'
);
CREATE VIRTUAL TABLE IF NOT EXISTS assistant_fts USING fts5(
    content, content = '', contentless_delete = 1, tokenize = 'porter unicode61'
);"""

# Also version 7: the session registry (a SessionManager's sessions), made by the first session it
# registers; a plain session's file never has one. Made exactly as version 1 made it.
ON_FIRST_USE["assistant_sessions"] = f"""
CREATE TABLE IF NOT EXISTS assistant_sessions (
    seq               INTEGER PRIMARY KEY,
    id                TEXT NOT NULL UNIQUE,
    name              TEXT NOT NULL,
    parent_session_id TEXT,
    model             TEXT,
    source            TEXT,
    input_tokens      INTEGER NOT NULL DEFAULT 0,
    output_tokens     INTEGER NOT NULL DEFAULT 0,
    estimated_cost    REAL NOT NULL DEFAULT 0,
    end_reason        TEXT,
    created_at        TEXT NOT NULL DEFAULT {NOW_MS},
    updated_at        TEXT NOT NULL DEFAULT {NOW_MS},
    updated_seq       INTEGER NOT NULL UNIQUE
);
CREATE INDEX IF NOT EXISTS idx_assistant_sessions_updated ON assistant_sessions (updated_at, updated_seq);"""

#: Tables that go with each table of :data:`ON_FIRST_USE` (dropped only when all are empty).
_COMPANIONS: dict[str, tuple[str, ...]] = {
    "cf_agents_search_entries": ("cf_agents_search_fts", "cf_agents_search_fts_cjk"),
    "assistant_embeddings": ("assistant_embeddings_pending",),
    "assistant_fts": ("assistant_fts_tools", "assistant_fts_cjk"),
}


def _v6(con: apsw.Connection) -> None:
    """Version 6: drop the tables version 6 makes on first use that hold no row (nothing else changes)."""
    _drop_empty(con, ("_cf_KV", "_cf_alarm", "transcript_entries", "cf_agents_search_entries",
                      "cf_agents_search_embeddings", "assistant_embeddings"))


def _v7(con: apsw.Connection) -> None:
    """Version 7: drop the message text indexes, and the session registry, when they hold no row
    (nothing else changes)."""
    _drop_empty(con, ("assistant_fts", "assistant_sessions"))


def _drop_empty(con: apsw.Connection, tables: tuple[str, ...]) -> None:
    """Drop each of ``tables`` (of :data:`ON_FIRST_USE`) with its companions when none of them holds a row."""
    for table in tables:
        group = (table, *_COMPANIONS.get(table, ()))
        if all(_empty(con, name) for name in group):
            for name in group:
                con.execute(f"DROP TABLE IF EXISTS {name}")


def _empty(con: apsw.Connection, table: str) -> bool:
    if not _in_schema(con, table):
        return True
    return not con.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchall()[0][0]


# Version 8: an append writes nothing for semantic search (docs/semantic-search.md). Each session
# keeps the ``seq`` up to which its messages are embedded (``assistant_embeddings_through``, one row
# per session, storage/embeddings.py): a message above it is pending by definition, and a marker
# (``assistant_embeddings_pending``) is written only for a message at or below it that needs a
# vector again (updated, or embedded with another model). Made with the other embedding tables, on
# first use. A file that has them gets it here, each session holding embedding rows at its newest
# message: version 7 marked every message it stored, so its markers already say what is pending.
_THROUGH = """
CREATE TABLE IF NOT EXISTS assistant_embeddings_through (
    session_id TEXT PRIMARY KEY,
    seq        INTEGER NOT NULL
) WITHOUT ROWID;"""
ON_FIRST_USE["assistant_embeddings"] += _THROUGH
_COMPANIONS["assistant_embeddings"] += ("assistant_embeddings_through",)


def _v8(con: apsw.Connection) -> None:
    """Version 8: the embedded-through table, filled from the version-7 rows (see above)."""
    if not _in_schema(con, "assistant_embeddings"):
        return  # made on first use, with the new table
    con.execute(_THROUGH)
    con.execute(
        "INSERT INTO assistant_embeddings_through (session_id, seq) "
        "SELECT s.session_id, (SELECT coalesce(max(m.seq), 0) FROM assistant_messages AS m "
        "                      WHERE m.session_id = s.session_id) "
        "FROM (SELECT session_id FROM assistant_embeddings UNION SELECT session_id FROM assistant_embeddings_pending) AS s")


# Version 9: the tables every session's file had from the start are made on first use too
# (docs/performance.md): the message table with its key and two indexes (4 pages) by the first
# write of a message, the compaction table with its key and index (3) by the first compaction, the
# block table with its key (2) by the first block or cached prompt written. Made exactly as
# versions 1, 3 and 5 left them; a file where one holds no row has it dropped here.
ON_FIRST_USE["assistant_messages"] = f"""
CREATE TABLE IF NOT EXISTS assistant_messages (
    seq        INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL DEFAULT '',
    id         TEXT NOT NULL,
    parent_id  TEXT,
    parent_seq INTEGER,
    role       TEXT NOT NULL,
    content    TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT {NOW_MS},
    depth      INTEGER NOT NULL DEFAULT 1,
    path_bytes INTEGER NOT NULL DEFAULT 0,
    tokens      INTEGER NOT NULL DEFAULT 0,
    path_tokens INTEGER NOT NULL DEFAULT 0,
    jump_seq    INTEGER,
    UNIQUE (session_id, id)
);
CREATE INDEX IF NOT EXISTS idx_assistant_msg_parent ON assistant_messages (parent_seq);
CREATE INDEX IF NOT EXISTS idx_assistant_msg_seq ON assistant_messages (session_id, seq);"""
ON_FIRST_USE["assistant_compactions"] = f"""
CREATE TABLE IF NOT EXISTS assistant_compactions (
    seq             INTEGER PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    session_id      TEXT NOT NULL DEFAULT '',
    summary         TEXT NOT NULL,
    from_message_id TEXT NOT NULL,
    to_message_id   TEXT NOT NULL,
    created_at      TEXT NOT NULL DEFAULT {NOW_MS}
);
CREATE INDEX IF NOT EXISTS idx_assistant_compactions_session ON assistant_compactions (session_id, seq);"""
ON_FIRST_USE["cf_agents_context_blocks"] = f"""
CREATE TABLE IF NOT EXISTS cf_agents_context_blocks (
    label      TEXT PRIMARY KEY,
    content    TEXT NOT NULL,
    updated_at TEXT NOT NULL DEFAULT {NOW_MS}
);"""

#: The message table (made by the first message written: :data:`ON_FIRST_USE`).
MESSAGES_TABLE = "assistant_messages"
#: The compaction table (made by the first compaction stored).
COMPACTIONS_TABLE = "assistant_compactions"
#: The block table (made by the first block or cached prompt written).
BLOCKS_TABLE = "cf_agents_context_blocks"
#: The message vectors (made with the other embedding tables by the first vector or marker stored).
VECTORS_TABLE = "assistant_embeddings"


def _v9(con: apsw.Connection) -> None:
    """Version 9: drop the message, compaction and block tables when they hold no row (nothing
    else changes). The message table stays while its text indexes hold a row (a search hit is
    read from it)."""
    if all(_empty(con, name) for name in ("assistant_fts", "assistant_fts_tools", "assistant_fts_cjk")):
        _drop_empty(con, (MESSAGES_TABLE,))
    _drop_empty(con, (COMPACTIONS_TABLE, BLOCKS_TABLE))


#: The ladder. Index i holds the step that moves a file from version i to i+1.
MIGRATIONS: tuple[Migration, ...] = (_V1, _v2, _V3, _V4, _V5, _v6, _v7, _v8, _v9)

#: The version a file has once every migration ran.
SCHEMA_VERSION = len(MIGRATIONS)


#: Tables of :data:`ON_FIRST_USE` seen existing outside any transaction, per connection: only a
#: ``DROP`` could take such a table away, and nothing drops them once the ladder has run.
_SEEN: weakref.WeakKeyDictionary[apsw.Connection, set[str]] = weakref.WeakKeyDictionary()


def _in_schema(con: apsw.Connection, table: str) -> bool:
    return bool(con.execute("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,)).fetchall())


def table_exists(con: apsw.Connection, table: str) -> bool:
    """Whether ``table`` (one of :data:`ON_FIRST_USE`) exists in ``con``'s file: a read of a
    table that does not exist yet finds no row. One schema lookup until it is seen committed."""
    seen = _SEEN.get(con)
    if seen is not None and table in seen:
        return True
    if not _in_schema(con, table):
        return False
    if con.get_autocommit():  # committed: a rollback cannot take it away any more
        _SEEN.setdefault(con, set()).add(table)
    return True


def create_on_first_use(con: apsw.Connection, table: str) -> None:
    """Make ``table`` (one of :data:`ON_FIRST_USE`, with its indexes and companions) unless it exists.

    Call it inside the transaction of the write that needs the table, so a
    rollback takes both away. Cluster mode makes them all before its
    capture attaches (:func:`create_every_table`), and so does a restore
    (:func:`create_for_restore`).
    """
    if not table_exists(con, table):
        con.execute(ON_FIRST_USE[table])


def create_for_restore(con: apsw.Connection) -> None:
    """Before a cluster changeset is applied to a file at the top of the ladder: make every table
    of :data:`ON_FIRST_USE` it lacks, as the capture that recorded it had (:func:`create_every_table`;
    SQLite skips, silently, the changes of a missing table). A file at an older version is left
    alone: it still has every table its version made, and its migration runs when it is opened."""
    if int(con.pragma("user_version")) >= _FIRST_USE_VERSION:
        create_every_table(con)


def create_every_table(con: apsw.Connection) -> None:
    """Make every table of :data:`ON_FIRST_USE` the file lacks (cluster mode, before its change
    capture attaches: a table made inside a captured turn would be DDL the log cannot carry).

    An FTS5 table writes its first rows into its shadow tables when it is made, the same rows
    on every host, so a changeset recorded after that applies where :func:`create_for_restore`
    made the table again.
    """
    for table in ON_FIRST_USE:
        create_on_first_use(con, table)


#: The version from which the tables of :data:`ON_FIRST_USE` may be missing.
_FIRST_USE_VERSION = 6
