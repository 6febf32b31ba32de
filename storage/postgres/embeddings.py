"""A session's message vectors in Postgres (semantic search, docs/semantic-search.md).

The Postgres twin of :mod:`storage.embeddings` (schema version 4,
:mod:`storage.postgres.schema`):

* ``assistant_embeddings``: one vector per message with text, a plain
  ``bytea`` row (``dimension * 4`` bytes, little-endian float32) keyed by
  the message's ``seq``, with the embedder's ``model`` and ``dimension``
  beside it, and a ``stamp`` (the sequence ``assistant_embeddings_stamp``)
  taken anew at each store: an active session asks only for the vectors
  stamped after the last ones it read (:meth:`PostgresVectorRows.vectors`).
* ``assistant_embeddings_pending``: one marker per message still to embed.
  :class:`PostgresEmbeddingProvider` writes it in the append's (or update's)
  transaction, so a committed message is one that will be embedded, even if
  the process dies before the model ran.
* ``cf_agents_search_embeddings``: the vectors of a searchable block's
  entries, with the text each was made from (a replaced entry is embedded again).

All three reference their message's (entry's) ``seq`` ``ON DELETE CASCADE``:
deleting, clearing or erasing messages deletes their vectors and markers in
the same transaction, on every write path. Vectors are bytes here; this module
never imports numpy nor calls a model (``actors.session_embeddings`` does both).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from common.shapes import LATEST_LEAF, _LatestLeaf

from ..fts import parse_query
from ..tree import context as rules
from ..tree import writes
from ..tree import steps as tree
from ..tree import postgres as POSTGRES
from ..tree.postgres import stamp
from ..tree.rows import NewMessage, SearchRow
from .context import POSTGRES_CONTEXT
from .connection import Many, Operation, Query, on_postgres, runner_for
from .messages import PostgresSessionProvider, check_message, check_messages
from .values import check_text, lookup_key

__all__ = ["PostgresEmbeddingProvider", "PostgresEntryVectors", "PostgresManagerVectors", "PostgresVectorRows"]

T = TypeVar("T")

# Mark the named messages that have text and no vector yet (a duplicate append marks nothing).
_MARK_NEW = """
INSERT INTO assistant_embeddings_pending (seq, session_id)
SELECT m.seq, m.session_id FROM assistant_messages AS m
WHERE m.session_id = %(s)s AND m.id = ANY(%(ids)s) AND m.text_content <> ''
  AND NOT EXISTS (SELECT 1 FROM assistant_embeddings AS e WHERE e.seq = m.seq)
ON CONFLICT (seq) DO NOTHING
"""
# An updated message: its old vector no longer describes it; a marker (re-marked if one is held by a batch).
_DROP_VECTOR = """
DELETE FROM assistant_embeddings WHERE seq = (SELECT seq FROM assistant_messages WHERE session_id = %(s)s AND id = %(id)s)
"""
_REMARK = """
INSERT INTO assistant_embeddings_pending (seq, session_id)
SELECT seq, session_id FROM assistant_messages WHERE session_id = %(s)s AND id = %(id)s AND text_content <> ''
ON CONFLICT (seq) DO UPDATE SET mark = assistant_embeddings_pending.mark + 1
"""
_UNMARK_TEXTLESS = """
DELETE FROM assistant_embeddings_pending WHERE seq = (
    SELECT seq FROM assistant_messages WHERE session_id = %(s)s AND id = %(id)s AND text_content = '')
"""
_MISSING = """
WITH marked AS (
    INSERT INTO assistant_embeddings_pending (seq, session_id)
    SELECT m.seq, m.session_id FROM assistant_messages AS m
    WHERE m.session_id = %(s)s AND m.text_content <> ''
      AND NOT EXISTS (SELECT 1 FROM assistant_embeddings AS e WHERE e.seq = m.seq AND e.model = %(model)s)
    ON CONFLICT (seq) DO NOTHING RETURNING 1)
SELECT count(*) AS n FROM marked
"""
_PENDING_COUNT = "SELECT count(*) AS n FROM assistant_embeddings_pending WHERE session_id = %(s)s"
_PENDING = """
SELECT p.seq, p.mark, m.text_content FROM assistant_embeddings_pending AS p
JOIN assistant_messages AS m ON m.seq = p.seq
WHERE p.session_id = %(s)s ORDER BY p.seq LIMIT %(limit)s
"""
_LOCK_MARKS = """
SELECT seq, mark FROM assistant_embeddings_pending WHERE seq = ANY(%(seqs)s) AND session_id = %(s)s FOR UPDATE
"""
_STORE = """
INSERT INTO assistant_embeddings (seq, session_id, model, dimension, vector) VALUES (%(seq)s, %(s)s, %(model)s, %(d)s, %(v)s)
ON CONFLICT (seq) DO UPDATE SET model = excluded.model, dimension = excluded.dimension, vector = excluded.vector,
    stamp = nextval('assistant_embeddings_stamp')
"""
_UNMARK = "DELETE FROM assistant_embeddings_pending WHERE seq = ANY(%(seqs)s)"
_VECTORS = """
SELECT seq, stamp, vector FROM assistant_embeddings
WHERE session_id = %(s)s AND model = %(model)s AND stamp > %(after)s ORDER BY stamp
"""
_DIMENSIONS = """
SELECT model, dimension, count(*) AS n FROM assistant_embeddings WHERE session_id = %(s)s GROUP BY model, dimension
ORDER BY model, dimension
"""
_HITS = f"""
SELECT seq, id, role, text_content, {stamp('created_at')} AS created_text
FROM assistant_messages WHERE session_id = %(s)s AND seq = ANY(%(seqs)s)
"""
_HAS_MESSAGES = "SELECT EXISTS (SELECT 1 FROM assistant_messages WHERE session_id = %(s)s) AS found"
_ENTRIES = """
SELECT s.seq, s.key, s.content, CASE WHEN e.content = s.content AND e.model = %(model)s THEN e.vector END AS vector
FROM cf_agents_search_entries AS s LEFT JOIN cf_agents_search_embeddings AS e ON e.seq = s.seq
WHERE s.label = %(label)s ORDER BY s.seq
"""
_STORE_ENTRY = """
INSERT INTO cf_agents_search_embeddings (seq, model, dimension, content, vector)
SELECT seq, %(model)s, %(d)s, %(content)s, %(v)s FROM cf_agents_search_entries WHERE seq = %(seq)s
ON CONFLICT (seq) DO UPDATE SET model = excluded.model, dimension = excluded.dimension,
    content = excluded.content, vector = excluded.vector
"""


def _then(op: tree.Operation[T], after: Callable[[T], Operation[None]]) -> Operation[T]:
    """The tree write ``op``, then ``after(result)``'s steps, in the same transaction."""
    result = yield from on_postgres(op)
    yield from after(result)
    return result


def _steps(*queries: Query) -> Operation[None]:
    for query in queries:
        yield query


class PostgresEmbeddingProvider(PostgresSessionProvider):
    """:class:`~storage.postgres.PostgresSessionProvider` that also writes the pending markers.

    An append (or a chain) marks each new message with text, an update drops
    the message's vector and marks it again (or unmarks it when it has no
    text left), each in the write's own transaction. Deletes and clears need
    nothing more: the vectors and markers go with their rows (``ON DELETE CASCADE``).
    """

    def for_session(self, session_id: str) -> PostgresEmbeddingProvider:
        provider = PostgresEmbeddingProvider(self._runner, session_id, max_value_bytes=self.max_value_bytes)
        provider.conn = self.conn
        return provider

    async def _write_then(self, op: tree.Operation[T], after: Callable[[T], Operation[None]]) -> T:
        async with self._order:
            return await self._runner.run(_then(op, after), write=True)

    def _mark_new(self, ids: list[str]) -> Callable[[Any], Operation[None]]:
        return lambda _: _steps(Query(_MARK_NEW, {"s": self.session_id, "ids": ids})) if ids else _steps()

    async def append(
        self,
        message_id: str,
        role: str,
        content: str,
        text: str,
        parent_id: str | None | _LatestLeaf = LATEST_LEAF,
        *,
        tokens: int = 0,
        tools: str = "",
    ) -> tuple[bool, str | None]:
        m = check_message(message_id, role, content, text, tools, tokens, self.max_value_bytes)
        parent = self._check_parent(parent_id)
        op = writes.append(POSTGRES, self.session_id, m.id, m.role, m.content, m.text, m.tools, m.tokens, parent)
        return await self._write_then(op, self._mark_new([m.id] if m.text else []))

    async def append_chain(
        self, messages: Sequence[NewMessage], parent_id: str | None | _LatestLeaf = LATEST_LEAF
    ) -> list[tuple[bool, str | None]]:
        rows = check_messages(messages, self.max_value_bytes)
        parent = self._check_parent(parent_id)
        if not rows:
            return []
        op = writes.append_chain(POSTGRES, self.session_id, rows, parent)
        return await self._write_then(op, self._mark_new([m.id for m in rows if m.text]))

    async def update(
        self, message_id: str, role: str, content: str, text: str, *, tokens: int = 0, tools: str = ""
    ) -> bool:
        if lookup_key(message_id, "message_id") is None:
            return False
        m = check_message(message_id, role, content, text, tools, tokens, self.max_value_bytes)
        op = writes.update(POSTGRES, self.session_id, m.id, m.role, m.content, m.text, m.tools, m.tokens)
        params = {"s": self.session_id, "id": m.id}

        def after(updated: bool) -> Operation[None]:
            if updated:
                yield from _steps(Query(_DROP_VECTOR, params), Query(_REMARK, params), Query(_UNMARK_TEXTLESS, params))

        return await self._write_then(op, after)


def _one(sql: str, params: dict[str, Any]) -> Operation[list[dict[str, Any]]]:
    return (yield Query(sql, params))


def _reset(session_id: str, model: str) -> Operation[int]:
    yield Query("DELETE FROM assistant_embeddings WHERE session_id = %(s)s", {"s": session_id})
    yield Query(_MISSING, {"s": session_id, "model": model})
    [row] = yield Query(_PENDING_COUNT, {"s": session_id})
    return int(row["n"])


def _pending_batch(session_id: str, limit: int) -> Operation[list[tuple[int, int, str]]]:
    rows = yield Query(_PENDING, {"s": session_id, "limit": limit})
    found = [(r["seq"], r["mark"], r["text_content"]) for r in rows if r["text_content"]]
    gone = [r["seq"] for r in rows if not r["text_content"]]
    if gone:
        yield Query(_UNMARK, {"seqs": gone})
    return found


def _store(session_id: str, model: str, dimension: int, rows: Sequence[tuple[int, int, bytes]]) -> Operation[list[int]]:
    held = yield Query(_LOCK_MARKS, {"seqs": [seq for seq, _, _ in rows], "s": session_id})
    marks = {r["seq"]: r["mark"] for r in held}
    keep = [(seq, blob) for seq, mark, blob in rows if marks.get(seq) == mark]
    if keep:
        yield Many(_STORE, [{"seq": seq, "s": session_id, "model": model, "d": dimension, "v": blob}
                            for seq, blob in keep])
        yield Query(_UNMARK, {"seqs": [seq for seq, _ in keep]})
    return [seq for seq, _ in keep]


class PostgresVectorRows:
    """One session's vectors and markers in Postgres; every method ``async``, the SQLite
    functions of :mod:`storage.embeddings` as methods of a session.

    Args:
        conn: what :func:`~storage.postgres.connection.runner_for` accepts (a
            :class:`~storage.postgres.PostgresStorage` shares its runner).
        session_id: the session's key.

    Raises (every method): :class:`~common.errors.StorageUnavailableError` when
    Postgres cannot be reached, :class:`~common.errors.DatabaseError` when it refuses.
    """

    def __init__(self, conn: Any, session_id: str) -> None:
        self.session_id = check_text(session_id, "session_id")
        self._runner = runner_for(conn)

    async def _read(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        return await self._runner.run(_one(sql, {"s": self.session_id, **params}), write=False)

    async def pending_count(self) -> int:
        """How many messages of the session wait to be embedded."""
        return int((await self._read(_PENDING_COUNT))[0]["n"])

    async def has_messages(self) -> bool:
        """Whether the session holds any message."""
        return bool((await self._read(_HAS_MESSAGES))[0]["found"])

    async def stored_dimensions(self) -> list[tuple[str, int, int]]:
        """``(model, dimension, rows)`` of every kind of vector the session holds."""
        return [(r["model"], r["dimension"], int(r["n"])) for r in await self._read(_DIMENSIONS)]

    async def mark_missing(self, model: str) -> int:
        """Mark every message with text that has no vector of ``model`` (and no marker); returns how many."""
        rows = await self._runner.run(_one(_MISSING, {"s": self.session_id, "model": model}), write=True)
        return int(rows[0]["n"])

    async def reset(self, model: str) -> int:
        """Delete every vector of the session and mark each message with text again, in one
        transaction (``durable-sessions reembed``); returns how many messages are marked."""
        return await self._runner.run(_reset(self.session_id, model), write=True)

    async def pending_batch(self, limit: int) -> list[tuple[int, int, str]]:
        """Up to ``limit`` pending messages, oldest first: ``(seq, mark, text)`` (markers of
        messages left without text are deleted on the way)."""
        return await self._runner.run(_pending_batch(self.session_id, limit), write=True)

    async def store_vectors(self, model: str, dimension: int, rows: Sequence[tuple[int, int, bytes]]) -> list[int]:
        """Store ``(seq, mark, vector bytes)`` rows and clear their markers, in one transaction; a row
        whose marker changed or went meanwhile is skipped (its marker is locked first, so a concurrent
        update or delete of the message waits or wins). Returns the ``seq`` of the rows stored."""
        if not rows:
            return []
        return await self._runner.run(_store(self.session_id, model, dimension, rows), write=True)

    async def vectors(self, model: str, after: int = 0) -> list[tuple[int, int, bytes]]:
        """``(seq, stamp, vector bytes)`` of the session's vectors of ``model`` stamped after ``after``,
        in stamp order (``after=0``: all of them)."""
        return [(r["seq"], r["stamp"], bytes(r["vector"])) for r in await self._read(_VECTORS, model=model, after=after)]

    async def hit_rows(self, seqs: list[int]) -> dict[int, SearchRow]:
        """The messages of the session among ``seqs``, by ``seq`` (the rows text search answers with)."""
        if not seqs:
            return {}
        return {r["seq"]: SearchRow(r["id"], r["role"], r["text_content"], r["created_text"])
                for r in await self._read(_HITS, seqs=seqs)}


class PostgresEntryVectors:
    """The vectors of a searchable block's entries (``cf_agents_search_embeddings``).

    Args:
        conn: as for :class:`PostgresVectorRows`.
    """

    def __init__(self, conn: Any) -> None:
        self._runner = runner_for(conn)

    async def entries(self, label: str, model: str) -> list[tuple[int, str, str, bytes | None]]:
        """Every entry filed under ``label``: ``(seq, key, content, vector bytes)``, the vector
        ``None`` when the entry has none of ``model`` for its current content."""
        rows = await self._runner.run(_one(_ENTRIES, {"label": check_text(label, "label"), "model": model}),
                                      write=False)
        return [(r["seq"], r["key"], r["content"], None if r["vector"] is None else bytes(r["vector"]))
                for r in rows]

    async def text_ranking(self, label: str, query: str, limit: int) -> list[str]:
        """Keys of the best ``limit`` entries of ``label`` matching ``query`` by words, best first
        (the block's full-text search; ``[]`` for a query with no searchable term)."""
        parsed = parse_query(query)
        if parsed is None:
            return []
        op = rules.search_entries(POSTGRES_CONTEXT, check_text(label, "label"), parsed, limit)
        return [key for key, _ in await self._runner.run(on_postgres(op), write=False)]

    async def store(self, model: str, dimension: int, rows: Sequence[tuple[int, str, bytes]]) -> None:
        """Store ``(entry seq, the content embedded, vector bytes)`` rows, in one transaction
        (an entry deleted meanwhile gets none)."""
        if rows:
            op = _many(_STORE_ENTRY, [{"seq": seq, "model": model, "d": dimension, "content": content, "v": blob}
                                      for seq, content, blob in rows])
            await self._runner.run(op, write=True)


def _many(sql: str, params: list[dict[str, Any]]) -> Operation[None]:
    yield Many(sql, params)


_MINE = "EXISTS (SELECT 1 FROM assistant_sessions AS r WHERE r.id = {alias}.session_id{owner})"
_SESSIONS_PENDING = "SELECT DISTINCT p.session_id FROM assistant_embeddings_pending AS p WHERE {mine} LIMIT %(limit)s"
_REGISTERED_VECTORS = "SELECT e.seq, e.vector FROM assistant_embeddings AS e WHERE e.model = %(model)s AND {mine} ORDER BY e.seq"
_REGISTERED_HITS = f"""
SELECT m.seq, m.id, m.role, m.text_content AS content, {stamp('m.created_at')} AS created_at, m.session_id
FROM assistant_messages AS m WHERE m.seq = ANY(%(seqs)s) AND {{mine}}
"""


class PostgresManagerVectors:
    """The vectors of a SessionManager's sessions: those with a registry row (of ``owner``, when given).

    Args:
        conn: as for :class:`PostgresVectorRows`.
        owner: ``None``: every registered session of the database; else those of this registry owner
            (:class:`storage.postgres.registry.OwnedRegistryDialect`).
    """

    def __init__(self, conn: Any, owner: str | None = None) -> None:
        self._runner = runner_for(conn)
        self._params: dict[str, Any] = {} if owner is None else {"owner": owner}
        self._owner = "" if owner is None else " AND r.owner = %(owner)s"

    def _mine(self, alias: str) -> str:
        return _MINE.format(alias=alias, owner=self._owner)

    async def sessions_pending(self, limit: int) -> list[str]:
        """Up to ``limit`` of the manager's sessions holding pending markers."""
        sql = _SESSIONS_PENDING.format(mine=self._mine("p"))
        return [r["session_id"] for r in await self._runner.run(_one(sql, {"limit": limit, **self._params}),
                                                                  write=False)]

    async def vectors(self, model: str) -> list[tuple[int, bytes]]:
        """``(seq, vector bytes)`` of every vector of ``model`` in the manager's sessions, in ``seq`` order."""
        sql = _REGISTERED_VECTORS.format(mine=self._mine("e"))
        rows = await self._runner.run(_one(sql, {"model": model, **self._params}), write=False)
        return [(r["seq"], bytes(r["vector"])) for r in rows]

    async def hits(self, seqs: list[int]) -> dict[int, dict[str, str]]:
        """The messages of the manager's sessions among ``seqs``, by ``seq``: ``{"id", "role", "content",
        "created_at", "session_id"}``."""
        if not seqs:
            return {}
        sql = _REGISTERED_HITS.format(mine=self._mine("m"))
        rows = await self._runner.run(_one(sql, {"seqs": seqs, **self._params}), write=False)
        return {r.pop("seq"): r for r in (dict(row) for row in rows)}
