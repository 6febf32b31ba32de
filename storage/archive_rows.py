"""The rows of one session's actor file as archive records, and back (the SQL of export and import).

:func:`export_records` reads everything a session actor's file holds for
its session (``session_id`` ``''``): every message of the tree in insertion
order (all branches), compactions, the ``assistant_config`` values (metadata,
loaded skills; not ``actor_name``, the address the file is reached by),
context blocks (the cached prompt among them), search entries and the KV
rows -- as the records of :mod:`common.archive` (without header and end).

The import side writes those rows back inside the caller's transaction:
messages go through :meth:`storage.messages.MessageStore.append_chain` (the
tree engine computes places, token totals and the full-text rows), then
:func:`restore_times` puts back the stored times, so a second export of the
imported session equals the first. Nothing here commits on its own.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from typing import Any

from .context import upsert_search_entry
from .schema import BLOCKS_TABLE, COMPACTIONS_TABLE, MESSAGES_TABLE, create_on_first_use, table_exists
from .sqlite import SqlStorage

__all__ = ["ACTOR_NAME_KEY", "export_records", "holds_session_data", "restore_times", "write_records"]

#: ``assistant_config`` key of the actor's address; not exported (the archive's header names the session).
ACTOR_NAME_KEY = "actor_name"

_MESSAGES = "SELECT id, parent_id, created_at, content FROM assistant_messages WHERE session_id = ? ORDER BY seq"
_COMPACTIONS = ("SELECT id, summary, from_message_id, to_message_id, created_at FROM assistant_compactions "
                "WHERE session_id = ? ORDER BY seq")
_CONFIG = "SELECT key, value FROM assistant_config WHERE session_id = ? AND key != ? ORDER BY key"
_BLOCKS = "SELECT label, content, updated_at FROM cf_agents_context_blocks ORDER BY label"
_ENTRIES = "SELECT label, key, content, created_at, updated_at FROM cf_agents_search_entries ORDER BY seq"
_KV = "SELECT key, value FROM _cf_KV ORDER BY key"
# Tables made by their first write (storage.schema.ON_FIRST_USE): absent, they hold nothing.
_ENTRY_TABLE = "cf_agents_search_entries"
_KV_TABLE = "_cf_KV"


def export_records(storage: SqlStorage, session_id: str = "") -> Iterator[dict[str, Any]]:
    """The file's records for ``session_id`` in archive order (messages, compactions, config, blocks,
    entries, kv). Read inside one transaction by the caller for a consistent view."""
    con = storage.connection
    messages = storage.exec(_MESSAGES, session_id) if table_exists(con, MESSAGES_TABLE) else ()
    for message_id, parent_id, created_at, content in messages:
        yield {"type": "message", "id": message_id, "parentId": parent_id, "createdAt": created_at,
               "message": json.loads(content)}
    compactions = storage.exec(_COMPACTIONS, session_id) if table_exists(con, COMPACTIONS_TABLE) else ()
    for row in compactions:
        yield dict(zip(("type", "id", "summary", "fromMessageId", "toMessageId", "createdAt"), ("compaction", *row)))
    for key, value in storage.exec(_CONFIG, session_id, ACTOR_NAME_KEY):
        yield {"type": "config", "key": key, "value": value}
    blocks = storage.exec(_BLOCKS) if table_exists(con, BLOCKS_TABLE) else ()
    for label, content, updated_at in blocks:
        yield {"type": "contextBlock", "label": label, "content": content, "updatedAt": updated_at}
    entries = storage.exec(_ENTRIES) if table_exists(con, _ENTRY_TABLE) else ()
    for label, key, content, created_at, updated_at in entries:
        yield {"type": "searchEntry", "label": label, "key": key, "content": content, "createdAt": created_at,
               "updatedAt": updated_at}
    kv = storage.exec(_KV) if table_exists(con, _KV_TABLE) else ()
    for key, value in kv:
        yield {"type": "kv", "key": key, "value": base64.b64encode(bytes(value)).decode("ascii")}


def holds_session_data(storage: SqlStorage) -> bool:
    """``True`` when the file holds messages, compactions, search entries or KV rows (an import refuses it)."""
    return any(
        table_exists(storage.connection, table) and storage.scalar(f"SELECT EXISTS (SELECT 1 FROM {table})")
        for table in (MESSAGES_TABLE, COMPACTIONS_TABLE, _ENTRY_TABLE, _KV_TABLE))


def write_records(storage: SqlStorage, records: Sequence[dict[str, Any]], session_id: str = "") -> None:
    """Store the non-message records (compactions, config, blocks, entries, kv) as they were exported.

    Runs inside the caller's transaction. Raises:
        apsw.Error: SQLite refused a row (e.g. a duplicate compaction id).
        ValueError: a kv value that is not base64.
    """
    for record in records:
        kind = record["type"]
        if kind == "compaction":
            create_on_first_use(storage.connection, COMPACTIONS_TABLE)
            storage.exec("INSERT INTO assistant_compactions (id, session_id, summary, from_message_id, to_message_id, "
                         "created_at) VALUES (?, ?, ?, ?, ?, ?)", record["id"], session_id, record["summary"],
                         record["fromMessageId"], record["toMessageId"], record["createdAt"])
        elif kind == "config" and record["key"] != ACTOR_NAME_KEY:
            storage.exec("INSERT OR REPLACE INTO assistant_config (session_id, key, value) VALUES (?, ?, ?)",
                         session_id, record["key"], record["value"])
        elif kind == "contextBlock":
            create_on_first_use(storage.connection, BLOCKS_TABLE)
            storage.exec("INSERT OR REPLACE INTO cf_agents_context_blocks (label, content, updated_at) "
                         "VALUES (?, ?, ?)", record["label"], record["content"], record["updatedAt"])
        elif kind == "searchEntry":
            upsert_search_entry(storage, record["label"], record["key"], record["content"])
            storage.exec("UPDATE cf_agents_search_entries SET created_at = ?, updated_at = ? WHERE label = ? "
                         "AND key = ?", record["createdAt"], record["updatedAt"], record["label"], record["key"])
        elif kind == "kv":
            create_on_first_use(storage.connection, _KV_TABLE)
            storage.exec("INSERT OR REPLACE INTO _cf_KV (key, value) VALUES (?, ?)", record["key"],
                         base64.b64decode(record["value"], validate=True))


def restore_times(storage: SqlStorage, times: Sequence[tuple[str, str]], session_id: str = "") -> None:
    """Set each message's stored ``created_at`` back: ``times`` holds ``(message id, created_at)``."""
    if not times:
        return  # no message: the message table may not exist
    storage.connection.executemany(
        "UPDATE assistant_messages SET created_at = ? WHERE session_id = ? AND id = ?",
        [(created, session_id, message_id) for message_id, created in times])
