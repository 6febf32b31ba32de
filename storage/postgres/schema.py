"""The Postgres schema: the spec's migration plus what the providers add, applied idempotently.

:func:`create_schema` runs, in one transaction under an advisory lock (two
processes may run it at once):

1. the spec's tables as the original's migration creates them --
   ``assistant_messages`` keyed ``(session_id, id)`` with ``text_content``
   and the generated ``content_tsv``, ``assistant_compactions``,
   ``cf_agents_context_blocks``, ``cf_agents_search_entries`` with its
   ``content_tsv``, and their indexes. A database already migrated by the
   original keeps its rows;
2. our additions, each ``IF NOT EXISTS``:

   * ``seq`` (a ``BIGINT`` identity) on messages, compactions and search
     entries: insertion order, the tie-breaker of every ordering
     (docs/deviations.md #2); existing rows are numbered when the column is added;
   * ``assistant_messages.tools_content`` (tool names and string inputs,
     the second searched text, as the SQLite ``assistant_fts.tools``) and
     ``tokens`` (the actor layer's estimate, summed for the token count);
   * each message's place on its path (version 2): ``depth`` (rows from
     the root, the root being 1), ``path_bytes`` and ``path_tokens`` (its
     content bytes and tokens summed from the root) and ``jump_seq`` (a
     skew-binary jump pointer), kept by every write
     (:mod:`storage.tree.places`), so a path's length, size and token
     total are one row read; rows stored before (or by the original) are
     placed once by the migration;
   * ``assistant_config (session_id, key, value)``, as in the SQLite file:
     the persisted active leaf (docs/deviations.md #3) and other per-session values;
   * the text search configuration ``durable_sessions_english``: English
     snowball stemming *without* a stop-word list, so ``the`` or ``it`` are
     searchable as they are with SQLite's ``porter unicode61``;
   * ``search_tsv``, generated from the searched text with every ASCII
     punctuation character and every CJK character (:mod:`storage.fts`'s
     ranges) turned into a space, then parsed and stemmed. Tokens are thus
     runs of letters and digits, as SQLite's ``unicode61`` cuts them
     (``docs/setup.md`` is ``docs setup md``, not one "file" token of
     Postgres' parser), and Latin words glued to CJK text
     (``重跑gen-itgc后``) are found by ``gen`` and ``itgc``; a GIN index on it;
   * ``cjk_content``, generated: the searched text when it holds CJK
     characters, else ``''``; a ``pg_trgm`` GIN index on the non-empty
     ones serves ``ILIKE`` substring searches of CJK terms (docs/deviations.md #10);
   * indexes for children (``session_id, parent_id, seq``), the newest
     leaf (``session_id, created_at, seq``) and compactions;
   * ``assistant_sessions``, the SessionManager's registry (the SQLite
     file's columns; ``updated_seq`` from the sequence
     ``assistant_sessions_updated_seq`` orders writes within one
     millisecond), added in version 2; its ``owner`` (version 3, ``''``
     for rows before) scopes a registry to one manager actor
     (:class:`~storage.postgres.registry.OwnedRegistryDialect`);
   * ``durable_sessions_catalog`` (version 3): one row per session with its
     name, counts and times, kept by triggers in the same transaction as
     every write (:mod:`storage.postgres.catalog`); a database written by
     version 2 or the original gets its rows from its tables once;
   * semantic search (version 4, docs/semantic-search.md; :mod:`storage.postgres.embeddings`):
     ``assistant_embeddings`` (one vector per message with text, a plain
     ``bytea`` row: ``dimension * 4`` bytes, little-endian float32, with the
     embedder's ``model`` and ``dimension`` beside it and a ``stamp`` from the
     sequence ``assistant_embeddings_stamp``, new at each store, so an active
     session reads only the vectors stored since its last search),
     ``assistant_embeddings_pending`` (a marker per message still to embed,
     written in the message's transaction) and ``cf_agents_search_embeddings``
     (a searchable block's entry vectors, with the text they were made from).
     Each references its message's (entry's) ``seq`` ``ON DELETE CASCADE``:
     deleting, clearing or erasing messages deletes their vectors and markers
     in the same transaction, whoever deletes them;
   * compaction ids unique per session (version 5): ``assistant_compactions``
     keyed ``(session_id, id)`` as messages are, instead of the original's
     ``id`` alone, so a copy of a session imports beside it (docs/deviations.md,
     "On Postgres"); the key is swapped in place, every row kept;
   * ``durable_sessions_meta``: ``schema_version``. A database of a newer
     version is refused (:class:`~common.errors.SchemaTooNewError`).

Needs a UTF-8 database (``server_encoding``) and ``pg_trgm`` (a trusted
extension since Postgres 13: the database owner may create it). The
original's own ``content_tsv`` columns stay as the spec defines them, so
its readers keep working; this package searches ``search_tsv`` instead.

Timestamps are ``TIMESTAMPTZ`` written with millisecond precision (the
providers insert ``date_trunc('milliseconds', clock_timestamp())``).
"""

from __future__ import annotations

from typing import Any

from common.errors import DatabaseError, SchemaTooNewError

from ..fts import _CJK_RANGES
from ..tree import postgres as POSTGRES
from ..tree.places import place_subtrees
from .catalog import CATALOG_BACKFILL, CATALOG_SCHEMA
from .connection import Operation, Query, on_postgres, runner_for

#: Version of the schema this code writes; stored in ``durable_sessions_meta``.
SCHEMA_VERSION = 5

#: Our text search configuration (English stemming, no stop words).
TS_CONFIG = "durable_sessions_english"

_CJK = "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _CJK_RANGES)
#: A Postgres regex bracket expression matching one CJK character (the ranges of storage.fts).
CJK_CLASS = f"[{_CJK}]"
#: ASCII punctuation, as ranges: ! to /, : to @, [ to `, { to ~.
ASCII_PUNCTUATION = "!-/:-@[-`{-~"
#: What ``search_tsv`` reads as a space: ASCII punctuation and CJK characters (see the module docstring).
SEPARATOR_CLASS = f"[{ASCII_PUNCTUATION}{_CJK}]"

#: The original's migration (its Postgres section), unchanged.
SPEC_MIGRATION = """
CREATE TABLE IF NOT EXISTS assistant_messages (
  id TEXT NOT NULL,
  session_id TEXT NOT NULL DEFAULT '',
  parent_id TEXT,
  role TEXT NOT NULL,
  content TEXT NOT NULL,
  text_content TEXT NOT NULL DEFAULT '',
  created_at TIMESTAMPTZ DEFAULT NOW(),
  content_tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('english', text_content)) STORED,
  PRIMARY KEY (session_id, id)
);
CREATE INDEX IF NOT EXISTS idx_assistant_msg_parent ON assistant_messages (parent_id);
CREATE INDEX IF NOT EXISTS idx_assistant_msg_session ON assistant_messages (session_id);
CREATE INDEX IF NOT EXISTS idx_assistant_msg_fts ON assistant_messages USING GIN (content_tsv);

CREATE TABLE IF NOT EXISTS assistant_compactions (
  id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL DEFAULT '',
  summary TEXT NOT NULL,
  from_message_id TEXT NOT NULL,
  to_message_id TEXT NOT NULL,
  created_at TIMESTAMPTZ DEFAULT NOW()
);

CREATE TABLE IF NOT EXISTS cf_agents_context_blocks (
  label TEXT PRIMARY KEY,
  content TEXT NOT NULL,
  updated_at TIMESTAMPTZ DEFAULT NOW()
);

CREATE TABLE IF NOT EXISTS cf_agents_search_entries (
  label TEXT NOT NULL,
  key TEXT NOT NULL,
  content TEXT NOT NULL,
  content_tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
  created_at TIMESTAMPTZ DEFAULT NOW(),
  updated_at TIMESTAMPTZ DEFAULT NOW(),
  PRIMARY KEY (label, key)
);
CREATE INDEX IF NOT EXISTS idx_search_entries_fts ON cf_agents_search_entries USING GIN (content_tsv);
"""


def _search_columns(table: str, text: str) -> str:
    """``search_tsv`` and ``cjk_content`` of ``table``, generated from the SQL expression ``text``."""
    return f"""
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS search_tsv TSVECTOR
  GENERATED ALWAYS AS (to_tsvector('{TS_CONFIG}'::regconfig, regexp_replace({text}, '{SEPARATOR_CLASS}', ' ', 'g'))) STORED;
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS cjk_content TEXT
  GENERATED ALWAYS AS (CASE WHEN {text} ~ '{CJK_CLASS}' THEN {text} ELSE '' END) STORED;
"""


# Version 5: compaction ids unique per session, as message ids (docs/deviations.md, "On Postgres"). The
# spec's key on ``id`` alone (whatever its name) becomes ``(session_id, id)``; rows unique by ``id`` are
# unique by the pair, so the swap keeps every row and cannot fail on them. Checked on every run (idempotent).
_COMPACTION_KEY = """
DO $$
DECLARE
  pk RECORD;
BEGIN
  FOR pk IN SELECT conname FROM pg_constraint
            WHERE conrelid = 'assistant_compactions'::regclass AND contype = 'p'
              AND pg_get_constraintdef(oid) <> 'PRIMARY KEY (session_id, id)' LOOP
    EXECUTE format('ALTER TABLE assistant_compactions DROP CONSTRAINT %I', pk.conname);
  END LOOP;
  IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'assistant_compactions'::regclass AND contype = 'p') THEN
    ALTER TABLE assistant_compactions ADD CONSTRAINT assistant_compactions_pkey PRIMARY KEY (session_id, id);
  END IF;
END $$;
"""

# The searched text of a message: its text parts, a line break, its tool names and inputs.
_MESSAGE_TEXT = "(text_content || E'\\n' || tools_content)"

#: What this package adds on top of the spec's tables.
ADDITIONS = f"""
CREATE EXTENSION IF NOT EXISTS pg_trgm;

DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_ts_dict
                 WHERE dictname = '{TS_CONFIG}_stem' AND dictnamespace = current_schema()::regnamespace) THEN
    CREATE TEXT SEARCH DICTIONARY {TS_CONFIG}_stem (TEMPLATE = snowball, Language = english);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_ts_config
                 WHERE cfgname = '{TS_CONFIG}' AND cfgnamespace = current_schema()::regnamespace) THEN
    CREATE TEXT SEARCH CONFIGURATION {TS_CONFIG} (COPY = english);
    ALTER TEXT SEARCH CONFIGURATION {TS_CONFIG} ALTER MAPPING REPLACE english_stem WITH {TS_CONFIG}_stem;
  END IF;
END $$;

ALTER TABLE assistant_messages ADD COLUMN IF NOT EXISTS seq BIGINT GENERATED BY DEFAULT AS IDENTITY;
ALTER TABLE assistant_messages ADD COLUMN IF NOT EXISTS tools_content TEXT NOT NULL DEFAULT '';
ALTER TABLE assistant_messages ADD COLUMN IF NOT EXISTS tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE assistant_messages ADD COLUMN IF NOT EXISTS depth INTEGER;
ALTER TABLE assistant_messages ADD COLUMN IF NOT EXISTS path_bytes BIGINT;
ALTER TABLE assistant_messages ADD COLUMN IF NOT EXISTS path_tokens BIGINT;
ALTER TABLE assistant_messages ADD COLUMN IF NOT EXISTS jump_seq BIGINT;
{_search_columns("assistant_messages", _MESSAGE_TEXT)}
CREATE UNIQUE INDEX IF NOT EXISTS idx_assistant_msg_seq ON assistant_messages (seq);
CREATE INDEX IF NOT EXISTS idx_assistant_msg_children ON assistant_messages (session_id, parent_id, seq);
CREATE INDEX IF NOT EXISTS idx_assistant_msg_created ON assistant_messages (session_id, created_at, seq);
CREATE INDEX IF NOT EXISTS idx_assistant_msg_search ON assistant_messages USING GIN (search_tsv);
CREATE INDEX IF NOT EXISTS idx_assistant_msg_cjk ON assistant_messages
  USING GIN (cjk_content gin_trgm_ops) WHERE cjk_content <> '';

ALTER TABLE assistant_compactions ADD COLUMN IF NOT EXISTS seq BIGINT GENERATED BY DEFAULT AS IDENTITY;
CREATE INDEX IF NOT EXISTS idx_assistant_compactions_session ON assistant_compactions (session_id, created_at, seq);
{_COMPACTION_KEY}

CREATE TABLE IF NOT EXISTS assistant_config (
  session_id TEXT NOT NULL,
  key TEXT NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY (session_id, key)
);

ALTER TABLE cf_agents_search_entries ADD COLUMN IF NOT EXISTS seq BIGINT GENERATED BY DEFAULT AS IDENTITY;
{_search_columns("cf_agents_search_entries", "content")}
CREATE UNIQUE INDEX IF NOT EXISTS idx_search_entries_seq ON cf_agents_search_entries (seq);
CREATE INDEX IF NOT EXISTS idx_search_entries_search ON cf_agents_search_entries USING GIN (search_tsv);
CREATE INDEX IF NOT EXISTS idx_search_entries_cjk ON cf_agents_search_entries
  USING GIN (cjk_content gin_trgm_ops) WHERE cjk_content <> '';

CREATE TABLE IF NOT EXISTS assistant_sessions (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  parent_session_id TEXT,
  model TEXT,
  source TEXT,
  input_tokens BIGINT NOT NULL DEFAULT 0,
  output_tokens BIGINT NOT NULL DEFAULT 0,
  estimated_cost DOUBLE PRECISION NOT NULL DEFAULT 0,
  end_reason TEXT,
  created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
  updated_seq BIGINT NOT NULL
);
CREATE SEQUENCE IF NOT EXISTS assistant_sessions_updated_seq;
CREATE INDEX IF NOT EXISTS idx_assistant_sessions_updated ON assistant_sessions (updated_at, updated_seq);
ALTER TABLE assistant_sessions ADD COLUMN IF NOT EXISTS owner TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS idx_assistant_sessions_owner ON assistant_sessions (owner, updated_at, updated_seq);

CREATE SEQUENCE IF NOT EXISTS assistant_embeddings_stamp;
CREATE TABLE IF NOT EXISTS assistant_embeddings (
  seq BIGINT PRIMARY KEY REFERENCES assistant_messages (seq) ON DELETE CASCADE,
  session_id TEXT NOT NULL,
  model TEXT NOT NULL,
  dimension INTEGER NOT NULL,
  vector BYTEA NOT NULL,
  stamp BIGINT NOT NULL DEFAULT nextval('assistant_embeddings_stamp')
);
CREATE INDEX IF NOT EXISTS idx_assistant_embeddings_session ON assistant_embeddings (session_id, model, stamp);
CREATE TABLE IF NOT EXISTS assistant_embeddings_pending (
  seq BIGINT PRIMARY KEY REFERENCES assistant_messages (seq) ON DELETE CASCADE,
  session_id TEXT NOT NULL,
  mark INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS idx_assistant_embeddings_pending_session ON assistant_embeddings_pending (session_id, seq);
CREATE TABLE IF NOT EXISTS cf_agents_search_embeddings (
  seq BIGINT PRIMARY KEY REFERENCES cf_agents_search_entries (seq) ON DELETE CASCADE,
  model TEXT NOT NULL,
  dimension INTEGER NOT NULL,
  content TEXT NOT NULL,
  vector BYTEA NOT NULL
);

CREATE TABLE IF NOT EXISTS durable_sessions_meta (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
"""

# Sessions holding rows stored without their place (by version 1, or by the original).
_UNPLACED_SESSIONS = "SELECT DISTINCT session_id FROM assistant_messages WHERE depth IS NULL"
# Rows whose parent is missing, or not older: the tops from which a session is placed.
_TOPS = """
SELECT m.id FROM assistant_messages AS m WHERE m.session_id = %(s)s AND NOT EXISTS (
    SELECT 1 FROM assistant_messages AS p WHERE p.session_id = m.session_id AND p.id = m.parent_id AND p.seq < m.seq)
"""

_LOCK = "SELECT pg_advisory_xact_lock(hashtext('durable_sessions.schema'))"
_ENCODING = "SELECT current_setting('server_encoding') AS encoding, current_database() AS db"
_VERSION = """
SELECT value FROM durable_sessions_meta WHERE key = 'schema_version'
"""
_HAS_META = "SELECT to_regclass('durable_sessions_meta') IS NOT NULL AS present"
_SET_VERSION = """
INSERT INTO durable_sessions_meta (key, value) VALUES ('schema_version', %(v)s)
ON CONFLICT (key) DO UPDATE SET value = excluded.value
"""


def _migrate() -> Operation[None]:
    yield Query(_LOCK)
    [info] = yield Query(_ENCODING)
    if info["encoding"] != "UTF8":
        raise DatabaseError(
            f"database {info['db']!r} has encoding {info['encoding']}; durable-sessions needs UTF8"
        )
    [meta] = yield Query(_HAS_META)
    found = 0
    if meta["present"]:
        rows = yield Query(_VERSION)
        found = int(rows[0]["value"]) if rows else 0
        if found > SCHEMA_VERSION:
            raise SchemaTooNewError(f"postgres database {info['db']}", found, SCHEMA_VERSION)
    yield Query(SPEC_MIGRATION)
    yield Query(ADDITIONS)
    for session in (yield Query(_UNPLACED_SESSIONS)):
        tops = [row["id"] for row in (yield Query(_TOPS, {"s": session["session_id"]}))]
        yield from on_postgres(place_subtrees(POSTGRES, session["session_id"], tops))
    yield Query(CATALOG_SCHEMA)  # after the placing above: moving rows is no write a caller made
    if found < 3:
        yield Query(CATALOG_BACKFILL)
    yield Query(_SET_VERSION, {"v": str(SCHEMA_VERSION)})


async def create_schema(conn: Any) -> None:
    """Create or complete the tables, columns, indexes and search configuration, idempotently.

    Args:
        conn: a ``psycopg.Connection``, a ``psycopg_pool.ConnectionPool``, or
            an object with ``execute(query, args)`` (see
            :mod:`storage.postgres.connection`). The user needs the right to
            create tables and the ``pg_trgm`` extension in the database.

    One transaction: on any failure nothing of the migration remains.
    Running it again (or from two processes at once) changes nothing.

    Raises:
        SchemaTooNewError: the database was migrated by a newer version.
        DatabaseError: the database is not UTF-8, or a statement failed
            (e.g. missing privileges); ``StorageUnavailableError`` when the
            connection failed.
    """
    await runner_for(conn).run(_migrate(), write=True)
