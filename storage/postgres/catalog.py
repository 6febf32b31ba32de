"""The session catalog in Postgres: one row per session, kept by triggers, read by listings.

``durable_sessions_catalog`` (schema version 3) holds what a listing shows
of a session -- the name it is addressed by, its message and compaction
counts, the last message its newest compaction covers, when it was
created and last written -- so that a listing reads one row per session
and never counts messages:

==================  ==========================================================================
column              what
==================  ==========================================================================
session_id          the session's key (``PostgresSessionAgent``: the actor's 64-hex id)
name                ``assistant_config (session_id, 'actor_name')``: the id it is addressed by
messages            rows of ``assistant_messages`` (every branch)
compactions         rows of ``assistant_compactions``
compacted_through   ``to_message_id`` of the newest compaction (highest ``seq``), or ``NULL``
created_ms          epoch milliseconds the row was made (a backfilled row: its oldest message)
updated_ms          epoch milliseconds of the last write a caller made (see below)
==================  ==========================================================================

**Kept in the same transaction as each write.** ``AFTER`` triggers update
the row inside the writing statement: statement-level ones with transition
tables (a multi-row statement costs one catalog update; ``append_chain``
inserts row by row, so a batch costs one small update per message) on
``assistant_messages`` (insert, update, delete), ``assistant_compactions``
(insert, delete) and the block and search-entry tables; row-level ones on
``assistant_config`` whose ``WHEN`` skips the active leaf (written by every
append) without running any function: no extra round trip, no window where a listing sees a message
without its count, and writes of any client of the tables (the original's
providers included) keep it right.

**What moves ``updated_ms``.** Message and compaction writes, the
session's ``assistant_config`` values other than ``actor_name`` and
``active_leaf`` (metadata, loaded skills), and the rows of its writable
blocks and search entries (``<label>_<session_id>``, for a 64-hex session
id). Not: recording the name (a read on a new host does it), and not the
cached prompt (``_system_prompt_<session_id>``, frozen by the first read).
It never goes back.

**Which writes make a row.** Storing a message or the name; every other
write only updates an existing row (a compaction needs messages). A
session a manager deletes (``PostgresRegistry.delete_session``) loses its
row with the rest.

Reads here (:func:`written`, :func:`page`, :func:`entry`) are one indexed
statement each: the primary key, or ``(updated_ms DESC, session_id DESC)``
for keyset pages.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from ..tree.postgres import ACTIVE_LEAF_KEY
from .connection import Operation, Query

__all__ = ["CATALOG_BACKFILL", "CATALOG_SCHEMA", "CatalogRow", "entry", "page", "written"]

#: ``assistant_config`` key of the name a session is addressed by (``actors.session_agent_postgres``).
NAME_KEY = "actor_name"
#: Prefix of the cached prompt's block row (frozen by a read: does not move ``updated_ms``).
PROMPT_PREFIX = "_system_prompt"

_NOW_MS = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
# A block or search-entry label <label>_<64 hex>: the session it belongs to.
_OWNER = "CASE WHEN label ~ '_[0-9a-f]{64}$' AND left(label, 14) <> '" + PROMPT_PREFIX + "' THEN right(label, 64) END"

# The statement-level triggers: (name, event, table, function), each with its transition table ``changed``.
_STATEMENT_TRIGGERS = (
    *((f"msg_{e.lower()}", e, "assistant_messages", f) for e, f in
      (("INSERT", "added"), ("DELETE", "removed"), ("UPDATE", "rewritten"))),
    *((f"cmp_{e.lower()}", e, "assistant_compactions", "compacted") for e in ("INSERT", "DELETE")),
    *((f"{short}_{e.lower()}", e, table, "blocks")
      for short, table in (("blk", "cf_agents_context_blocks"), ("ent", "cf_agents_search_entries"))
      for e in ("INSERT", "UPDATE", "DELETE")),
)

#: The table, its keyset index, and the triggers that keep it (idempotent).
CATALOG_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS durable_sessions_catalog (
  session_id TEXT PRIMARY KEY,
  name TEXT,
  messages BIGINT NOT NULL DEFAULT 0,
  compactions BIGINT NOT NULL DEFAULT 0,
  compacted_through TEXT,
  created_ms BIGINT NOT NULL,
  updated_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_durable_sessions_catalog_updated
  ON durable_sessions_catalog (updated_ms DESC, session_id DESC) WHERE name IS NOT NULL;

CREATE OR REPLACE FUNCTION durable_sessions_catalog_touch(ids TEXT[]) RETURNS void LANGUAGE sql AS $$
  UPDATE durable_sessions_catalog SET updated_ms = greatest(updated_ms, {_NOW_MS}) WHERE session_id = ANY(ids)
$$;

CREATE OR REPLACE FUNCTION durable_sessions_catalog_added() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE now_ms BIGINT := {_NOW_MS};
BEGIN
  INSERT INTO durable_sessions_catalog AS c (session_id, messages, created_ms, updated_ms)
  SELECT session_id, count(*), now_ms, now_ms FROM changed GROUP BY session_id
  ON CONFLICT (session_id) DO UPDATE SET messages = c.messages + excluded.messages,
    updated_ms = greatest(c.updated_ms, excluded.updated_ms);
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION durable_sessions_catalog_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE durable_sessions_catalog AS c SET messages = greatest(c.messages - d.n, 0),
    updated_ms = greatest(c.updated_ms, {_NOW_MS})
  FROM (SELECT session_id, count(*) AS n FROM changed GROUP BY session_id) AS d
  WHERE c.session_id = d.session_id;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION durable_sessions_catalog_rewritten() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM durable_sessions_catalog_touch(ARRAY(SELECT DISTINCT session_id FROM changed));
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION durable_sessions_catalog_compacted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE durable_sessions_catalog AS c SET
    compactions = (SELECT count(*) FROM assistant_compactions AS x WHERE x.session_id = c.session_id),
    compacted_through = (SELECT x.to_message_id FROM assistant_compactions AS x WHERE x.session_id = c.session_id
                         ORDER BY x.seq DESC LIMIT 1),
    updated_ms = greatest(c.updated_ms, {_NOW_MS})
  WHERE c.session_id IN (SELECT session_id FROM changed);
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION durable_sessions_catalog_named() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE now_ms BIGINT := {_NOW_MS};
BEGIN
  INSERT INTO durable_sessions_catalog AS c (session_id, name, created_ms, updated_ms)
  VALUES (NEW.session_id, NEW.value, now_ms, now_ms)
  ON CONFLICT (session_id) DO UPDATE SET name = excluded.name;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION durable_sessions_catalog_configured() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM durable_sessions_catalog_touch(ARRAY[CASE WHEN TG_OP = 'DELETE' THEN OLD.session_id
                                                   ELSE NEW.session_id END]);
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION durable_sessions_catalog_blocks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM durable_sessions_catalog_touch(ARRAY(SELECT DISTINCT {_OWNER} FROM changed));
  RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER durable_sessions_catalog_cfg_name AFTER INSERT OR UPDATE ON assistant_config
  FOR EACH ROW WHEN (NEW.key = '{NAME_KEY}') EXECUTE FUNCTION durable_sessions_catalog_named();
CREATE OR REPLACE TRIGGER durable_sessions_catalog_cfg_write AFTER INSERT OR UPDATE ON assistant_config
  FOR EACH ROW WHEN (NEW.key NOT IN ('{NAME_KEY}', '{ACTIVE_LEAF_KEY}'))
  EXECUTE FUNCTION durable_sessions_catalog_configured();
CREATE OR REPLACE TRIGGER durable_sessions_catalog_cfg_delete AFTER DELETE ON assistant_config
  FOR EACH ROW WHEN (OLD.key NOT IN ('{NAME_KEY}', '{ACTIVE_LEAF_KEY}'))
  EXECUTE FUNCTION durable_sessions_catalog_configured();
""" + "".join(
    f"CREATE OR REPLACE TRIGGER durable_sessions_catalog_{name} AFTER {event} ON {table}\n"
    f"  REFERENCING {'OLD' if event == 'DELETE' else 'NEW'} TABLE AS changed FOR EACH STATEMENT "
    f"EXECUTE FUNCTION durable_sessions_catalog_{function}();\n"
    for name, event, table, function in _STATEMENT_TRIGGERS
)

#: Rows of a database written before version 3, from its tables (once, in the migration).
CATALOG_BACKFILL = f"""
WITH m AS (
  SELECT session_id, count(*) AS n,
    min(floor(extract(epoch FROM created_at) * 1000)::bigint) AS first_ms,
    max(floor(extract(epoch FROM created_at) * 1000)::bigint) AS last_ms
  FROM assistant_messages GROUP BY session_id
), k AS (
  SELECT session_id, count(*) AS n, max(floor(extract(epoch FROM created_at) * 1000)::bigint) AS last_ms,
    (array_agg(to_message_id ORDER BY seq DESC))[1] AS through
  FROM assistant_compactions GROUP BY session_id
), named AS (
  SELECT session_id, value AS name FROM assistant_config WHERE key = '{NAME_KEY}'
), ids AS (
  SELECT session_id FROM m UNION SELECT session_id FROM k UNION SELECT session_id FROM named
)
INSERT INTO durable_sessions_catalog (session_id, name, messages, compactions, compacted_through,
                                      created_ms, updated_ms)
SELECT ids.session_id, named.name, coalesce(m.n, 0), coalesce(k.n, 0), k.through,
  coalesce(m.first_ms, k.last_ms, {_NOW_MS}),
  coalesce(greatest(m.last_ms, k.last_ms), {_NOW_MS})
FROM ids LEFT JOIN m USING (session_id) LEFT JOIN k USING (session_id) LEFT JOIN named USING (session_id)
ON CONFLICT (session_id) DO NOTHING
"""

_COLUMNS = "session_id, name, messages, compactions, compacted_through, created_ms, updated_ms"
_WRITTEN = "SELECT 1 AS found FROM durable_sessions_catalog WHERE session_id = %(s)s"
_ENTRY = f"SELECT {_COLUMNS} FROM durable_sessions_catalog WHERE session_id = %(s)s"
_PAGE = f"""
SELECT {_COLUMNS} FROM durable_sessions_catalog
WHERE name IS NOT NULL {{below}} {{prefix}}
ORDER BY updated_ms DESC, session_id DESC LIMIT %(limit)s
"""


@dataclass(frozen=True, slots=True)
class CatalogRow:
    """One ``durable_sessions_catalog`` row (see the module docstring; times in epoch milliseconds)."""

    session_id: str
    name: str | None
    messages: int
    compactions: int
    compacted_through: str | None
    created_ms: int
    updated_ms: int

    @property
    def key(self) -> tuple[int, str]:
        """The keyset sort key ``(updated_ms, session_id)`` (listings run it descending)."""
        return self.updated_ms, self.session_id


def _row(row: dict[str, Any]) -> CatalogRow:
    return CatalogRow(row["session_id"], row["name"], int(row["messages"]), int(row["compactions"]),
                      row["compacted_through"], int(row["created_ms"]), int(row["updated_ms"]))


def written(session_id: str) -> Operation[bool]:
    """Whether ``session_id`` was ever written or named (one primary-key read)."""
    rows = yield Query(_WRITTEN, {"s": session_id})
    return bool(rows)


def entry(session_id: str) -> Operation[CatalogRow | None]:
    """The row of ``session_id``, or ``None`` (one primary-key read)."""
    rows = yield Query(_ENTRY, {"s": session_id})
    return _row(rows[0]) if rows else None


def page(limit: int, below: tuple[int, str] | None = None,
         prefix: str | None = None) -> Generator[Query, Any, list[CatalogRow]]:
    """Up to ``limit`` named rows, newest ``updated_ms`` first (ties: ``session_id`` descending),
    after the key ``below`` and with names starting with ``prefix`` when given."""
    params: dict[str, Any] = {"limit": limit}
    below_sql = prefix_sql = ""
    if below is not None:
        below_sql = "AND (updated_ms, session_id) < (%(ms)s, %(id)s)"
        params.update(ms=below[0], id=below[1])
    if prefix is not None:
        prefix_sql = "AND starts_with(name, %(prefix)s)"
        params["prefix"] = prefix
    rows = yield Query(_PAGE.format(below=below_sql, prefix=prefix_sql), params)
    return [_row(row) for row in rows]
