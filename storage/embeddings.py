"""A session's message vectors in its SQLite file (semantic search, docs/semantic-search.md).

Two tables (schema version 4, :mod:`storage.schema`), both keyed by the
message's ``seq``:

* ``assistant_embeddings``: one vector per message with text, a plain row
  (``vector`` is ``dimension * 4`` bytes, little-endian float32) with the
  embedder's ``model`` and ``dimension`` beside it. A cluster changeset
  carries it like any row (about 1.1 KB for 256 dimensions).
* ``assistant_embeddings_pending``: one marker per message still to embed.
  :class:`EmbeddingMessageStore` writes it in the append's (or update's)
  transaction, so a message committed is a message that will be embedded,
  even if the process dies before the model ran: the next activation finds
  the markers (:func:`pending_batch`).

The vectors are bytes here; this module never imports numpy nor calls a
model (the actor layer does both, off the write path:
``actors.session_embeddings``). Deleting messages deletes their vectors and
markers in the same transaction; clearing a session deletes all of its.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from .messages import MessageStore
from .schema import create_on_first_use, table_exists
from .shapes import LATEST_LEAF, _LatestLeaf
from .sqlite import SqlStorage
from .tree.rows import NewMessage, SearchRow
from .tree.sqlite import HIT_ROWS, TEXT_OF_CONTENT

__all__ = [
    "EmbeddingMessageStore",
    "clear_vectors",
    "entry_vectors",
    "has_messages",
    "hit_rows",
    "mark_missing",
    "pending_batch",
    "pending_count",
    "reset",
    "store_vectors",
    "store_entry_vectors",
    "stored_dimensions",
    "vectors",
]

# Made by the first write that needs them (storage.schema.ON_FIRST_USE); a read finds nothing before.
_VECTORS = "assistant_embeddings"
_PENDING_TABLE = "assistant_embeddings_pending"
_ENTRIES = "cf_agents_search_entries"
_ENTRY_VECTORS = "cf_agents_search_embeddings"
_MESSAGES = "assistant_messages"  # made by the first message written (a file without it holds none)


def _has(storage: SqlStorage, table: str) -> bool:
    return table_exists(storage.connection, table)


def _make_vector_tables(storage: SqlStorage) -> None:
    """Inside the caller's transaction: the message vector tables (both), unless they exist."""
    create_on_first_use(storage.connection, _VECTORS)


_MARK = """
INSERT INTO assistant_embeddings_pending (seq, session_id) VALUES (?1, ?2)
ON CONFLICT (seq) DO UPDATE SET mark = mark + 1
"""
_SEQ_OF = "SELECT seq FROM assistant_messages WHERE session_id = ?1 AND id = ?2"
_DELETE_VECTOR = "DELETE FROM assistant_embeddings WHERE seq = ?1"
_DELETE_PENDING = "DELETE FROM assistant_embeddings_pending WHERE seq = ?1"
_PENDING = f"""
SELECT p.seq, p.mark, m.seq IS NOT NULL, coalesce((SELECT {TEXT_OF_CONTENT}), '')
FROM assistant_embeddings_pending AS p LEFT JOIN assistant_messages AS m ON m.seq = p.seq
WHERE p.session_id = ?1 ORDER BY p.seq LIMIT ?2
"""
_MISSING = f"""
INSERT OR IGNORE INTO assistant_embeddings_pending (seq, session_id)
SELECT m.seq, m.session_id FROM assistant_messages AS m INDEXED BY idx_assistant_msg_seq
WHERE m.session_id = ?1
  AND NOT EXISTS (SELECT 1 FROM assistant_embeddings AS e WHERE e.seq = m.seq AND e.model = ?2)
  AND {TEXT_OF_CONTENT} != ''
"""


class EmbeddingMessageStore(MessageStore):
    """:class:`~storage.messages.MessageStore` that also keeps the embedding tables in step.

    Each write is the store's write plus, in the same transaction: a pending
    marker for every message stored or updated with text (an updated
    message's old vector is deleted: it no longer describes the text), and
    the deletion of the vectors and markers of deleted messages.
    """

    def for_session(self, session_id: str) -> EmbeddingMessageStore:
        return EmbeddingMessageStore(self.storage, session_id)

    def append(self, message_id: str, role: str, content: str, text: str,
               parent_id: str | None | _LatestLeaf = LATEST_LEAF, *, tokens: int = 0,
               tools: str = "") -> tuple[bool, str | None]:
        with self.storage.transaction():
            result = super().append(message_id, role, content, text, parent_id, tokens=tokens, tools=tools)
            if result[0] and text:
                self._mark([message_id])
            return result

    def append_chain(self, messages: Sequence[NewMessage],
                     parent_id: str | None | _LatestLeaf = LATEST_LEAF) -> list[tuple[bool, str | None]]:
        with self.storage.transaction():
            results = super().append_chain(messages, parent_id)
            self._mark([m.id for m, (inserted, _) in zip(messages, results) if inserted and m.text])
            return results

    def update(self, message_id: str, role: str, content: str, text: str, *, tokens: int = 0,
               tools: str = "") -> bool:
        with self.storage.transaction():
            if not super().update(message_id, role, content, text, tokens=tokens, tools=tools):
                return False
            seq = self.storage.scalar(_SEQ_OF, self.session_id, message_id)
            _make_vector_tables(self.storage)
            self.storage.exec(_DELETE_VECTOR, seq)
            if text:
                self.storage.exec(_MARK, seq, self.session_id)
            else:
                self.storage.exec(_DELETE_PENDING, seq)
            return True

    def delete(self, message_ids: Iterable[str]) -> list[str]:
        ids = list(message_ids)
        if not _has(self.storage, _MESSAGES):
            return []  # no message was ever written (the table is made by the first one)
        with self.storage.transaction():
            seqs = [self.storage.scalar(_SEQ_OF, self.session_id, i) for i in ids]
            deleted = super().delete(ids)
            for seq in seqs if _has(self.storage, _VECTORS) else ():
                if seq is not None:
                    self.storage.exec(_DELETE_VECTOR, seq)
                    self.storage.exec(_DELETE_PENDING, seq)
            return deleted

    def clear(self) -> None:
        with self.storage.transaction():
            super().clear()
            clear_vectors(self.storage, self.session_id)

    def _mark(self, message_ids: list[str]) -> None:
        if message_ids:
            _make_vector_tables(self.storage)
        for message_id in message_ids:
            seq = self.storage.scalar(_SEQ_OF, self.session_id, message_id)
            if seq is not None:
                self.storage.exec(_MARK, seq, self.session_id)


def clear_vectors(storage: SqlStorage, session_id: str) -> None:
    """Delete every vector and marker of ``session_id`` (one transaction)."""
    if not _has(storage, _VECTORS):
        return
    with storage.transaction():
        storage.exec("DELETE FROM assistant_embeddings WHERE session_id = ?1", session_id)
        storage.exec("DELETE FROM assistant_embeddings_pending WHERE session_id = ?1", session_id)


def reset(storage: SqlStorage, session_id: str, model: str) -> int:
    """Delete every vector of ``session_id`` and mark each message with text again, in one transaction
    (``durable-sessions reembed``); returns how many messages are marked."""
    with storage.transaction():
        _make_vector_tables(storage)
        storage.exec("DELETE FROM assistant_embeddings WHERE session_id = ?1", session_id)
        if _has(storage, _MESSAGES):
            storage.exec(_MISSING, session_id, model)
        return pending_count(storage, session_id)


def has_messages(storage: SqlStorage, session_id: str) -> bool:
    """Whether ``session_id`` holds any message."""
    if not _has(storage, _MESSAGES):
        return False
    return storage.scalar("SELECT 1 FROM assistant_messages WHERE session_id = ?1 LIMIT 1", session_id) is not None


def pending_count(storage: SqlStorage, session_id: str) -> int:
    """How many messages of ``session_id`` wait to be embedded."""
    if not _has(storage, _PENDING_TABLE):
        return 0
    return int(storage.scalar("SELECT count(*) FROM assistant_embeddings_pending WHERE session_id = ?1", session_id))


def mark_missing(storage: SqlStorage, session_id: str, model: str) -> int:
    """Mark every message with text that has no vector of ``model`` (and no marker); returns how many.

    For a session written before an embedder was configured, or with another
    model (``durable-sessions reembed``). One pass over the session's messages.
    """
    if not _has(storage, _MESSAGES):
        return 0  # no message was ever written
    with storage.transaction():
        _make_vector_tables(storage)
        storage.exec(_MISSING, session_id, model)
        return int(storage.connection.changes())


def pending_batch(storage: SqlStorage, session_id: str, limit: int) -> list[tuple[int, int, str]]:
    """Up to ``limit`` pending messages, oldest first: ``(seq, mark, text)``.

    Markers of messages that no longer exist, or that have no text, are
    deleted on the way (nothing to embed) and not returned.
    """
    found: list[tuple[int, int, str]] = []
    gone: list[int] = []
    if not _has(storage, _PENDING_TABLE):
        return found
    if not _has(storage, _MESSAGES):  # no message table: every marker names a message that is gone
        with storage.transaction():
            storage.exec("DELETE FROM assistant_embeddings_pending WHERE session_id = ?1", session_id)
        return found
    for seq, mark, exists, text in storage.exec(_PENDING, session_id, limit):
        (found.append((seq, mark, text)) if exists and text else gone.append(seq))
    if gone:
        with storage.transaction():
            for seq in gone:
                storage.exec(_DELETE_PENDING, seq)
    return found


def store_vectors(storage: SqlStorage, session_id: str, model: str, dimension: int,
                  rows: Sequence[tuple[int, int, bytes]]) -> list[int]:
    """Store the vectors of a batch and clear their markers, in one transaction.

    ``rows`` are ``(seq, mark, vector bytes)`` as :func:`pending_batch` gave
    the ``seq`` and ``mark``. A row whose marker changed meanwhile (the
    message was updated while the model ran) or whose message is gone is
    skipped: its marker stays and the next batch embeds the new text.
    Returns the ``seq`` of the rows stored.
    """
    stored: list[int] = []
    with storage.transaction():
        _make_vector_tables(storage)
        for seq, mark, blob in rows:
            current = storage.scalar("SELECT mark FROM assistant_embeddings_pending WHERE seq = ?1", seq)
            if current != mark:
                continue
            storage.exec(
                "INSERT OR REPLACE INTO assistant_embeddings (seq, session_id, model, dimension, vector) "
                "VALUES (?1, ?2, ?3, ?4, ?5)", seq, session_id, model, dimension, blob)
            storage.exec(_DELETE_PENDING, seq)
            stored.append(seq)
    return stored


def vectors(storage: SqlStorage, session_id: str, model: str, *, after: int = 0) -> list[tuple[int, bytes]]:
    """``(seq, vector bytes)`` of ``session_id``'s vectors of ``model`` with ``seq > after``, in ``seq`` order."""
    if not _has(storage, _VECTORS):
        return []
    return list(storage.exec(
        "SELECT seq, vector FROM assistant_embeddings WHERE session_id = ?1 AND model = ?2 AND seq > ?3 ORDER BY seq",
        session_id, model, after))


def stored_dimensions(storage: SqlStorage, session_id: str) -> list[tuple[str, int, int]]:
    """``(model, dimension, rows)`` of every kind of vector ``session_id`` holds."""
    if not _has(storage, _VECTORS):
        return []
    return list(storage.exec(
        "SELECT model, dimension, count(*) FROM assistant_embeddings WHERE session_id = ?1 GROUP BY model, dimension",
        session_id))


def entry_vectors(storage: SqlStorage, label: str, model: str) -> list[tuple[int, str, str, bytes | None]]:
    """Every entry of the searchable block ``label``: ``(seq, key, content, vector bytes)``, the
    vector ``None`` when the entry has none of ``model`` for its current content."""
    if not _has(storage, _ENTRIES):
        return []
    if not _has(storage, _ENTRY_VECTORS):
        return [(seq, key, content, None) for seq, key, content in storage.exec(
            "SELECT seq, key, content FROM cf_agents_search_entries WHERE label = ?1 ORDER BY seq", label)]
    return list(storage.exec(
        "SELECT s.seq, s.key, s.content, CASE WHEN e.content = s.content THEN e.vector END "
        "FROM cf_agents_search_entries AS s "
        "LEFT JOIN cf_agents_search_embeddings AS e ON e.seq = s.seq AND e.model = ?2 "
        "WHERE s.label = ?1 ORDER BY s.seq", label, model))


def store_entry_vectors(storage: SqlStorage, model: str, dimension: int,
                        rows: Sequence[tuple[int, str, bytes]]) -> None:
    """Store ``(entry seq, the content embedded, vector bytes)`` rows, in one transaction."""
    with storage.transaction():
        create_on_first_use(storage.connection, _ENTRY_VECTORS)
        for seq, content, blob in rows:
            storage.exec(
                "INSERT OR REPLACE INTO cf_agents_search_embeddings (seq, model, dimension, content, vector) "
                "VALUES (?1, ?2, ?3, ?4, ?5)", seq, model, dimension, content, blob)


def hit_rows(storage: SqlStorage, session_id: str, seqs: list[int]) -> dict[int, SearchRow]:
    """The messages of ``session_id`` among ``seqs``, by ``seq`` (the rows text search answers with)."""
    if not seqs or not _has(storage, _MESSAGES):
        return {}
    return {
        seq: SearchRow(message_id, role, content, created_at)
        for seq, message_id, role, content, created_at in storage.exec(HIT_ROWS, session_id, json.dumps(seqs))
    }


# -- a SessionManager's sessions (one file, many session ids) ---------------------------------------

_REGISTRY = "assistant_sessions"  # made by the first session registered (storage.schema.ON_FIRST_USE)
_REGISTERED = "EXISTS (SELECT 1 FROM assistant_sessions AS r WHERE r.id = {alias}.session_id)"


def sessions_pending(storage: SqlStorage, limit: int) -> list[str]:
    """Up to ``limit`` registered sessions (a SessionManager's file) holding pending markers."""
    if not (_has(storage, _REGISTRY) and _has(storage, _PENDING_TABLE)):
        return []  # made on first use: no session registered, or nothing ever marked
    return [sid for (sid,) in storage.exec(
        "SELECT DISTINCT p.session_id FROM assistant_embeddings_pending AS p "
        f"WHERE {_REGISTERED.format(alias='p')} LIMIT ?1", limit)]


def registered_vectors(storage: SqlStorage, model: str) -> list[tuple[int, bytes]]:
    """``(seq, vector bytes)`` of every vector of ``model`` in a registered session, in ``seq`` order."""
    if not (_has(storage, _REGISTRY) and _has(storage, _VECTORS)):
        return []
    return list(storage.exec(
        f"SELECT e.seq, e.vector FROM assistant_embeddings AS e WHERE e.model = ?1 AND {_REGISTERED.format(alias='e')} "
        "ORDER BY e.seq", model))


def registered_hits(storage: SqlStorage, seqs: list[int]) -> dict[int, dict[str, str]]:
    """The messages of registered sessions among ``seqs``, by ``seq``: ``{"id", "role", "content",
    "created_at", "session_id"}`` (the rows the cross-session text search answers with)."""
    if not seqs or not _has(storage, _REGISTRY) or not _has(storage, _MESSAGES):
        return {}
    found: dict[str, list[int]] = {}
    for seq, session_id in storage.exec(
            "SELECT m.seq, m.session_id FROM json_each(?1) AS j CROSS JOIN assistant_messages AS m ON m.seq = j.value "
            f"WHERE {_REGISTERED.format(alias='m')}", json.dumps(seqs)):
        found.setdefault(session_id, []).append(seq)
    hits: dict[int, dict[str, str]] = {}
    for session_id, of_session in found.items():
        for seq, row in hit_rows(storage, session_id, of_session).items():
            hits[seq] = {"id": row.id, "role": row.role, "content": row.content, "created_at": row.created_at,
                         "session_id": session_id}
    return hits
