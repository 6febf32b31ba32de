"""A session's message vectors in its SQLite file (semantic search, docs/semantic-search.md).

Three tables (:mod:`storage.schema`, made together by the first write that
needs them), keyed by the message's ``seq``, or by the session:

* ``assistant_embeddings``: one vector per message with text, a plain row
  (``vector`` is ``dimension * 4`` bytes, little-endian float32) with the
  embedder's ``model`` and ``dimension`` beside it. A cluster changeset
  carries it like any row (about 1.1 KB for 256 dimensions).
* ``assistant_embeddings_through``: per session, the embedded-through
  ``seq`` (0 without a row). Every message of the session with text and a
  ``seq`` above it is pending *by definition*, so an append writes nothing
  here: a message committed is a message that will be embedded, even if the
  process dies before the model ran. :func:`store_vectors` moves it up past
  the messages it stored vectors for.
* ``assistant_embeddings_pending``: one marker per message at or below the
  embedded-through ``seq`` that needs a vector again: updated (its old vector
  no longer describes its text) or stored without a vector of the current
  model (:func:`mark_missing`). :func:`update_keeping_vectors` writes it in
  the update's transaction.

So the pending messages of a session are those with text above its
embedded-through ``seq`` and those with a marker (:func:`pending_count`
counts exactly these; :func:`pending_batch` gives them, markers first).

``seq`` is the file's rowid, and SQLite gives a new row the largest rowid
plus one: after the newest rows of the file are deleted, their ``seq`` may
be given again. Deleting messages (:func:`delete_keeping_vectors`)
therefore lowers the embedded-through ``seq`` to the file's largest
(nothing of the session lies between), and so does :func:`store_vectors`,
so a message stored later is always above it.

The vectors are bytes here; this module never imports numpy nor calls a
model (the actor layer does both, off the write path:
``actors.session_embeddings``). A vector is stored only if the message still
has the text it was computed from. Deleting messages deletes their vectors
and markers in the same transaction; clearing a session deletes all of its.
:class:`~storage.messages.MessageStore` does this bookkeeping in every file
that holds message vectors, whether the session at hand has an embedder or
not: a session with semantic search switched off for a while keeps vectors
that describe its messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from .messages import MessageStore
from .schema import VECTORS_TABLE, create_on_first_use, table_exists
from .sqlite import SqlStorage
from .tree.rows import SearchRow
from .tree.sqlite import HIT_ROWS, TEXT_OF_CONTENT

__all__ = [
    "EmbeddingMessageStore",
    "clear_vectors",
    "delete_keeping_vectors",
    "update_keeping_vectors",
    "embedded_through",
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
_VECTORS = VECTORS_TABLE  # with assistant_embeddings_pending and assistant_embeddings_through
_ENTRIES = "cf_agents_search_entries"
_ENTRY_VECTORS = "cf_agents_search_embeddings"
_MESSAGES = "assistant_messages"  # made by the first message written: a file without it holds no message


def _has(storage: SqlStorage, table: str) -> bool:
    return table_exists(storage.connection, table)


def _make_vector_tables(storage: SqlStorage) -> None:
    """Inside the caller's transaction: the message vector tables (all three), unless they exist."""
    create_on_first_use(storage.connection, _VECTORS)


_MARK = """
INSERT INTO assistant_embeddings_pending (seq, session_id) VALUES (?1, ?2)
ON CONFLICT (seq) DO UPDATE SET mark = mark + 1
"""
_SEQ_OF = "SELECT seq FROM assistant_messages WHERE session_id = ?1 AND id = ?2"
_DELETE_VECTOR = "DELETE FROM assistant_embeddings WHERE seq = ?1"
_DELETE_PENDING = "DELETE FROM assistant_embeddings_pending WHERE seq = ?1"
_THROUGH = "SELECT seq FROM assistant_embeddings_through WHERE session_id = ?1"
_SET_THROUGH = """
INSERT INTO assistant_embeddings_through (session_id, seq) VALUES (?1, ?2)
ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq
"""
# No message of the file lies above its largest seq: the next one stored gets a larger one.
_LOWER_THROUGH = """
UPDATE assistant_embeddings_through SET seq = (SELECT coalesce(max(seq), 0) FROM assistant_messages)
WHERE session_id = ?1 AND seq > (SELECT coalesce(max(seq), 0) FROM assistant_messages)
"""
_MARKED = f"""
SELECT p.seq, p.mark, m.seq IS NOT NULL, coalesce((SELECT {TEXT_OF_CONTENT}), '')
FROM assistant_embeddings_pending AS p LEFT JOIN assistant_messages AS m ON m.seq = p.seq AND m.session_id = ?1
WHERE p.session_id = ?1 ORDER BY p.seq LIMIT ?2
"""
# ?1 session, ?2 embedded-through seq, ?3 limit.
_ABOVE = f"""
SELECT seq, text FROM (
    SELECT m.seq AS seq, {TEXT_OF_CONTENT} AS text FROM assistant_messages AS m INDEXED BY idx_assistant_msg_seq
    WHERE m.session_id = ?1 AND m.seq > ?2 ORDER BY m.seq
) WHERE text != '' LIMIT ?3
"""
_COUNT_ABOVE = f"""
SELECT count(*) FROM assistant_messages AS m INDEXED BY idx_assistant_msg_seq
WHERE m.session_id = ?1 AND m.seq > ?2 AND {TEXT_OF_CONTENT} != ''
"""
_COUNT_MARKED = f"""
SELECT count(*) FROM assistant_embeddings_pending AS p CROSS JOIN assistant_messages AS m ON m.seq = p.seq
WHERE p.session_id = ?1 AND p.seq <= ?2 AND m.session_id = ?1 AND {TEXT_OF_CONTENT} != ''
"""
_TEXT_OF = f"SELECT {TEXT_OF_CONTENT} FROM assistant_messages AS m WHERE m.seq = ?1 AND m.session_id = ?2"
# Markers for the session's messages with text up to ?2 that have no vector of ?3 (?1 session).
_MISSING = f"""
INSERT OR IGNORE INTO assistant_embeddings_pending (seq, session_id)
SELECT m.seq, m.session_id FROM assistant_messages AS m INDEXED BY idx_assistant_msg_seq
WHERE m.session_id = ?1 AND m.seq <= ?2
  AND NOT EXISTS (SELECT 1 FROM assistant_embeddings AS e WHERE e.seq = m.seq AND e.model = ?3)
  AND {TEXT_OF_CONTENT} != ''
"""
# The session's messages with text in (?2, ?3], for the markers of those a batch did not store.
_RANGE = f"""
SELECT m.seq FROM assistant_messages AS m INDEXED BY idx_assistant_msg_seq
WHERE m.session_id = ?1 AND m.seq > ?2 AND m.seq <= ?3 AND {TEXT_OF_CONTENT} != ''
"""


class EmbeddingMessageStore(MessageStore):
    """:class:`~storage.messages.MessageStore` of a session with an embedder.

    An append is the store's append and nothing else (the message is above
    the session's embedded-through ``seq``: pending). Updates, deletes and
    clears keep the embedding tables in step in any store, with an embedder
    or without (:func:`update_keeping_vectors`, :func:`delete_keeping_vectors`):
    a session that had semantic search switched off for a while keeps true
    vectors.
    """

    def for_session(self, session_id: str) -> EmbeddingMessageStore:
        return EmbeddingMessageStore(self.storage, session_id)


def update_keeping_vectors(store: MessageStore, message_id: str, role: str, content: str, text: str, *,
                           tokens: int = 0, tools: str = "") -> bool:
    """:meth:`MessageStore.update` in a file with message vectors (called by it).

    In the update's transaction the message's vector is deleted (it no
    longer describes the text) and, when the message is at or below the
    embedded-through ``seq``, it is marked pending (or unmarked when it has
    no text left).
    """
    storage = store.storage
    with storage.transaction():
        if not store._update_rows(message_id, role, content, text, tokens=tokens, tools=tools):
            return False
        seq = storage.scalar(_SEQ_OF, store.session_id, message_id)
        storage.exec(_DELETE_VECTOR, seq)
        if text and seq <= embedded_through(storage, store.session_id):
            storage.exec(_MARK, seq, store.session_id)
        else:
            storage.exec(_DELETE_PENDING, seq)
        return True


def delete_keeping_vectors(store: MessageStore, message_ids: Iterable[str]) -> list[str]:
    """:meth:`MessageStore.delete` in a file with message vectors (called by it).

    In the delete's transaction the vectors and markers of the messages
    deleted go too, and the embedded-through ``seq`` is kept below any
    ``seq`` SQLite may give again (the largest left plus one).
    """
    storage = store.storage
    ids = list(message_ids)
    with storage.transaction():
        seqs = [storage.scalar(_SEQ_OF, store.session_id, i) for i in ids]
        deleted = store._delete_rows(ids)
        for seq in seqs:
            if seq is not None:
                storage.exec(_DELETE_VECTOR, seq)
                storage.exec(_DELETE_PENDING, seq)
        if deleted:
            storage.exec(_LOWER_THROUGH, store.session_id)
        return deleted


def embedded_through(storage: SqlStorage, session_id: str) -> int:
    """The ``seq`` up to which ``session_id``'s messages are embedded (0: none); those above are pending."""
    if not _has(storage, _VECTORS):
        return 0
    seq = storage.scalar(_THROUGH, session_id)
    return 0 if seq is None else int(seq)


def clear_vectors(storage: SqlStorage, session_id: str) -> None:
    """Delete every vector and marker of ``session_id`` and its embedded-through ``seq`` (one transaction)."""
    if not _has(storage, _VECTORS):
        return
    with storage.transaction():
        storage.exec("DELETE FROM assistant_embeddings WHERE session_id = ?1", session_id)
        storage.exec("DELETE FROM assistant_embeddings_pending WHERE session_id = ?1", session_id)
        storage.exec("DELETE FROM assistant_embeddings_through WHERE session_id = ?1", session_id)


def reset(storage: SqlStorage, session_id: str, model: str) -> int:
    """Delete every vector and marker of ``session_id`` and its embedded-through ``seq``, so each
    message with text is pending again, in one transaction (``durable-sessions reembed``); returns
    how many messages are pending."""
    clear_vectors(storage, session_id)
    return pending_count(storage, session_id)


def has_messages(storage: SqlStorage, session_id: str) -> bool:
    """Whether ``session_id`` holds any message."""
    if not _has(storage, _MESSAGES):
        return False
    return storage.scalar("SELECT 1 FROM assistant_messages WHERE session_id = ?1 LIMIT 1", session_id) is not None


def pending_count(storage: SqlStorage, session_id: str) -> int:
    """How many messages of ``session_id`` wait to be embedded: those with text above its
    embedded-through ``seq`` (an index range from there: the messages stored since the last
    embedding run) and those marked."""
    if not _has(storage, _MESSAGES):
        return 0  # no message was ever written
    through = embedded_through(storage, session_id)
    above = int(storage.scalar(_COUNT_ABOVE, session_id, through))
    if not through:
        return above
    return above + int(storage.scalar(_COUNT_MARKED, session_id, through))


def mark_missing(storage: SqlStorage, session_id: str, model: str) -> int:
    """Mark every message with text at or below the embedded-through ``seq`` that has no vector of
    ``model`` (and no marker); returns how many. Those above are pending already.

    For a session embedded with another model (``durable-sessions reembed``,
    or a changed ``[search]`` section). One pass over the session's messages.
    """
    through = embedded_through(storage, session_id)
    if not through or not _has(storage, _MESSAGES):
        return 0
    with storage.transaction():
        storage.exec(_MISSING, session_id, through, model)
        return int(storage.connection.changes())


def pending_batch(storage: SqlStorage, session_id: str, limit: int) -> list[tuple[int, int, str]]:
    """Up to ``limit`` pending messages, the marked ones first, then those above the
    embedded-through ``seq`` oldest first: ``(seq, mark, text)`` (``mark`` 0 for the latter).

    Markers of messages that no longer exist, or that have no text, are
    deleted on the way (nothing to embed) and not returned.
    """
    found: list[tuple[int, int, str]] = []
    if not _has(storage, _MESSAGES):
        return found  # no message was ever written: nothing pending (pending_count says 0)
    if not _has(storage, _VECTORS):
        return [(seq, 0, text) for seq, text in storage.exec(_ABOVE, session_id, 0, limit)]
    through = embedded_through(storage, session_id)
    gone: list[int] = []
    for seq, mark, exists, text in storage.exec(_MARKED, session_id, limit):
        (found.append((seq, mark, text)) if exists and text else gone.append(seq))
    if gone:
        with storage.transaction():
            for seq in gone:
                storage.exec(_DELETE_PENDING, seq)
    marked = {seq for seq, _, _ in found}
    if len(found) < limit:
        found += [(seq, 0, text) for seq, text in storage.exec(_ABOVE, session_id, through, limit - len(found))
                  if seq not in marked]
    return found


def store_vectors(storage: SqlStorage, session_id: str, model: str, dimension: int,
                  rows: Sequence[tuple[int, str, bytes]]) -> list[int]:
    """Store the vectors of a batch, clear their markers and move the embedded-through ``seq`` up
    past them, in one transaction.

    ``rows`` are ``(seq, text, vector bytes)``, ``seq`` and ``text`` as
    :func:`pending_batch` gave them. A row whose message no longer has that
    text (updated while the model ran) or is gone is skipped: one at or
    below the embedded-through ``seq`` was marked by its update. The
    embedded-through ``seq`` moves to the largest ``seq`` of the batch
    (never down, never above the file's largest ``seq``); every message with
    text between the old and the new one that was not stored here is marked
    (one changed or stored meanwhile). Returns the ``seq`` of the rows stored.
    """
    stored: list[int] = []
    if not _has(storage, _MESSAGES):
        return stored  # no message was ever written: none of the rows is one
    with storage.transaction():
        _make_vector_tables(storage)
        for seq, text, blob in rows:
            if storage.scalar(_TEXT_OF, seq, session_id) != text or not text:
                continue
            storage.exec(
                "INSERT OR REPLACE INTO assistant_embeddings (seq, session_id, model, dimension, vector) "
                "VALUES (?1, ?2, ?3, ?4, ?5)", seq, session_id, model, dimension, blob)
            storage.exec(_DELETE_PENDING, seq)
            stored.append(seq)
        through = embedded_through(storage, session_id)
        largest = storage.scalar("SELECT coalesce(max(seq), 0) FROM assistant_messages")
        up_to = min(max((seq for seq, _, _ in rows), default=0), int(largest))
        if up_to > through:
            done = set(stored)
            for (seq,) in list(storage.exec(_RANGE, session_id, through, up_to)):
                if seq not in done:
                    storage.exec("INSERT OR IGNORE INTO assistant_embeddings_pending (seq, session_id) "
                                 "VALUES (?1, ?2)", seq, session_id)
            storage.exec(_SET_THROUGH, session_id, up_to)
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
    """Up to ``limit`` registered sessions (a SessionManager's file) with messages waiting for a
    vector: marked, or with text above the session's embedded-through ``seq``."""
    if not (_has(storage, _REGISTRY) and _has(storage, _MESSAGES)):
        return []  # made on first use: no session registered, or no message written
    vectors = _has(storage, _VECTORS)
    sql = _SESSIONS_PENDING.replace("{through}", _THROUGH_OF_R if vectors else "0")
    return [sid for (sid,) in storage.exec(sql.replace("{marked}", _MARKED_R if vectors else ""), limit)]


# One index seek per registered session (each a row of assistant_sessions, alias r).
_THROUGH_OF_R = "coalesce((SELECT t.seq FROM assistant_embeddings_through AS t WHERE t.session_id = r.id), 0)"
_MARKED_R = "OR EXISTS (SELECT 1 FROM assistant_embeddings_pending AS p WHERE p.session_id = r.id)"
_SESSIONS_PENDING = f"""
SELECT r.id FROM assistant_sessions AS r WHERE EXISTS (
    SELECT 1 FROM assistant_messages AS m INDEXED BY idx_assistant_msg_seq
    WHERE m.session_id = r.id AND m.seq > {{through}} AND {TEXT_OF_CONTENT} != '') {{marked}}
LIMIT ?1"""


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
