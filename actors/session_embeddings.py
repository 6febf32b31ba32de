"""Semantic and hybrid search of a session's messages (docs/semantic-search.md).

* :class:`EmbedderConfig` is the ``[search]`` section of the config file:
  which embedder (``"local"``, ``"openai"``) and its settings.
  :func:`embedder_for` makes the embedder once per process and config (the
  local model's ~75 MB are loaded once, shared by every actor).
* :class:`SessionVectors` is one session's side of it: it embeds the
  messages pending (:mod:`storage.embeddings`) off the actor's loop
  (``trio.to_thread.run_sync``; the model never runs inside a storage
  transaction), keeps the session's vectors in memory for the activation
  (:class:`actors.vectors.VectorIndex`, loaded at the first semantic search)
  and answers the semantic ranking, which :meth:`actors.session.Session.search`
  fuses with the text ranking for ``mode="hybrid"``.

Which messages are eligible is text search's rule: every stored message of
the session, on every branch, compacted or not (overlays apply on read
only). A deleted message's vector is deleted with it (and never answered:
hits are read back from the message rows).

numpy and the model are imported only when an embedder is configured.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from common.errors import InvalidInputError
from storage import embeddings as rows
from storage.sqlite import SqlStorage
from storage.fts import ParsedQuery
from storage.tree.rows import SearchRow

if TYPE_CHECKING:
    from .embedding import Embedder
    from .vectors import VectorIndex

__all__ = [
    "EMBEDDERS",
    "SEARCH_MODES",
    "EmbedderConfig",
    "EmbeddingMismatchError",
    "ManagerVectors",
    "SessionVectors",
    "VectorSearchProvider",
    "embedder_for",
    "ranked",
    "vectors_for_mode",
]

#: The ``mode`` values of a message search.
SEARCH_MODES = ("text", "semantic", "hybrid")
#: The ``[search] embedder`` values.
EMBEDDERS = ("local", "openai")
#: Messages embedded per model call (and per storage transaction).
BATCH = 64
#: Each ranking fused by hybrid search is cut at this many (or the limit, if larger).
FUSION_DEPTH = 50


class EmbeddingMismatchError(InvalidInputError):
    """The session's stored vectors have another dimension than the configured embedder's (400)."""


@dataclass(frozen=True)
class EmbedderConfig:
    """The ``[search]`` section: which embedder computes message vectors.

    Attributes:
        embedder: ``"local"`` (WordLlama, offline, :class:`actors.embedding.LocalEmbedder`)
            or ``"openai"`` (an OpenAI-compatible ``POST {url}/embeddings``).
        url: ``openai`` only: the endpoint's base URL (``http(s)://...``).
        model: ``openai`` only: the model name sent and stored beside each vector.
        api_key_env: ``openai`` only: the environment variable holding the key
            (default ``OPENAI_API_KEY``; ``""``: send no key).
        dimension: ``local``: 256 (default), 128 or 64; ``openai``: the
            vectors' dimension if known (else asked of the endpoint once).

    Raises:
        InvalidInputError: (``field`` names the key) an unknown embedder, or
            ``url`` / ``model`` missing or given where they do not apply.
    """

    embedder: str = "local"
    url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    dimension: int | None = None

    def __post_init__(self) -> None:
        if self.embedder not in EMBEDDERS:
            raise InvalidInputError(f"search.embedder must be one of {', '.join(EMBEDDERS)}, not {self.embedder!r}",
                                    field="embedder")
        if self.embedder == "openai":
            for name in ("url", "model"):
                if not isinstance(getattr(self, name), str) or not getattr(self, name):
                    raise InvalidInputError(f'search.{name} is required with embedder = "openai"', field=name)
        else:
            for name in ("url", "model"):
                if getattr(self, name) is not None:
                    raise InvalidInputError(f'search.{name} applies to embedder = "openai" only', field=name)
        if self.dimension is not None and (isinstance(self.dimension, bool) or not isinstance(self.dimension, int)
                                           or self.dimension <= 0):
            raise InvalidInputError("search.dimension must be a positive integer", field="dimension")
        if not isinstance(self.api_key_env, str):
            raise InvalidInputError("search.api_key_env must be a string", field="api_key_env")


_made: dict[EmbedderConfig, Embedder] = {}
_made_lock = threading.Lock()


def embedder_for(config: EmbedderConfig) -> Embedder:
    """The embedder ``config`` names, made on first use and shared by every caller in this process.

    Raises:
        actors.embedding.EmbedderUnavailableError: the ``semantic`` extra is not installed.
        actors.embedding.EmbedderConfigError: bad settings (e.g. the key variable is not set).
    """
    with _made_lock:
        found = _made.get(config)
        if found is None:
            from .embedding import LocalEmbedder, OpenAIEmbedder

            if config.embedder == "local":
                found = LocalEmbedder(config.dimension or 256)
            else:
                assert config.url is not None and config.model is not None
                found = OpenAIEmbedder(config.url, config.model, api_key_env=config.api_key_env or None,
                                       dimension=config.dimension)
            _made[config] = found
        return found


class _SqliteEntryVectors:
    """The entry vectors of a searchable block in the actor's SQLite file, as
    :class:`storage.postgres.embeddings.PostgresEntryVectors` gives them in Postgres."""

    def __init__(self, storage: SqlStorage) -> None:
        self.storage = storage

    async def entries(self, label: str, model: str) -> list[tuple[int, str, str, bytes | None]]:
        return rows.entry_vectors(self.storage, label, model)

    async def text_ranking(self, label: str, query: str, limit: int) -> list[str]:
        from storage.context import search_entries

        return [row["key"] for row in search_entries(self.storage, label, query, limit)]

    async def store(self, model: str, dimension: int, found: Sequence[tuple[int, str, bytes]]) -> None:
        rows.store_entry_vectors(self.storage, model, dimension, found)


class VectorSearchProvider:
    """A searchable block whose ``search_context`` ranks entries by words and meaning (hybrid).

    The entries are the block's full-text provider's (an
    :class:`actors.context.AgentSearchProvider` on a SQLite file,
    ``cf_agents_search_entries``; a :class:`storage.postgres.PostgresSearchProvider`
    filed under ``key`` in Postgres), with the same tool shapes: ``set_context`` stores an
    entry, ``search_context`` answers the best 10 as ``[<key>]\n<content>``
    joined by a blank line. Each entry also gets a
    vector (``cf_agents_search_embeddings``), computed on a worker thread
    after the entry is stored, and again when its content changes; entries
    without one (stored before the embedder was configured) are embedded at
    the next search. A search fuses the full-text ranking and the cosine
    ranking of the label's entries by reciprocal rank fusion (k = 60).
    Brute force over the label's vectors, read at each search: blocks hold
    tens to thousands of entries, not a session's history.

    Args:
        storage: the actor's SQLite file, or a :class:`storage.postgres.PostgresStorage`.
        embedder: makes the vectors.
        key: Postgres only: file the entries under this label (``<label>_<session id>``).
    """

    def __init__(self, storage: Any, embedder: Embedder, *, key: str | None = None) -> None:
        from .context import AgentSearchProvider

        self.storage = storage
        self.embedder = embedder
        if isinstance(storage, SqlStorage):
            self.text: Any = AgentSearchProvider(storage)
            self.vectors: Any = _SqliteEntryVectors(storage)
        else:
            self.text = storage.search(key=key)
            self.vectors = storage.entry_vectors()

    def init(self, label: str) -> None:
        self.text.init(label)

    async def get(self) -> str | None:
        return await self.text.get()

    async def set(self, key: str, content: str) -> None:
        """Store entry ``key`` (full text at once), then its vector (the model off the actor's loop)."""
        await self.text.set(key, content)
        await self._embed_missing()

    async def search(self, query: str) -> str | None:
        """The best 10 entries by hybrid ranking, as ``[<key>]\n<content>`` blocks, or ``None``."""
        import trio

        from storage.tree.context import SEARCH_LIMIT, entries_text

        from .vectors import cosine_top_k, decode_matrix, reciprocal_rank_fusion

        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, not {type(query).__name__}", field="query")
        entries = await self._embed_missing()
        text = await self.vectors.text_ranking(self.text.label, query, FUSION_DEPTH)
        meaning: list[str] = []
        if query.strip() and entries:
            q = (await trio.to_thread.run_sync(self.embedder.embed, [query]))[0]
            matrix = decode_matrix([blob for _, _, _, blob in entries], self.embedder.dimension)
            meaning = [entries[i][1] for i, _ in cosine_top_k(q, matrix, FUSION_DEPTH, normalized=True)]
        content = {key: text for _, key, text, _ in entries}
        fused = reciprocal_rank_fusion([text, meaning], limit=SEARCH_LIMIT)
        return entries_text([(key, content[key]) for key, _ in fused if key in content])

    async def _embed_missing(self) -> list[tuple[int, str, str, bytes]]:
        """Embed the label's entries that have no vector for their content; every entry with its vector."""
        import trio

        from .vectors import encode_vector

        entries = await self.vectors.entries(self.text.label, self.model)
        missing = [(seq, content) for seq, _, content, blob in entries if blob is None]
        if missing:
            vectors = await trio.to_thread.run_sync(self.embedder.embed, [content for _, content in missing])
            await self.vectors.store(self.model, self.embedder.dimension,
                                     [(seq, content, encode_vector(v)) for (seq, content), v in zip(missing, vectors)])
            entries = await self.vectors.entries(self.text.label, self.model)
        return [(seq, key, content, blob) for seq, key, content, blob in entries if blob is not None]

    @property
    def model(self) -> str:
        return self.embedder.model


class _SqliteVectorRows:
    """A session's vectors and markers in its SQLite file (:mod:`storage.embeddings`), with the
    methods of :class:`storage.postgres.embeddings.PostgresVectorRows`."""

    #: Only this actor writes the file: the vectors in memory stay current without re-reading.
    refresh = False

    def __init__(self, storage: SqlStorage, session_id: str) -> None:
        self.storage = storage
        self.session_id = session_id
        # The text of each row a pending batch gave, by the token given as its ``mark``: a vector is
        # stored only while its message still has the text it was computed from.
        self._texts: dict[int, str] = {}
        self._tokens = itertools.count(1)

    async def pending_count(self) -> int:
        return rows.pending_count(self.storage, self.session_id)

    async def has_messages(self) -> bool:
        return rows.has_messages(self.storage, self.session_id)

    async def stored_dimensions(self) -> list[tuple[str, int, int]]:
        return rows.stored_dimensions(self.storage, self.session_id)

    async def mark_missing(self, model: str) -> int:
        return rows.mark_missing(self.storage, self.session_id, model)

    async def reset(self, model: str) -> int:
        return rows.reset(self.storage, self.session_id, model)

    async def pending_batch(self, limit: int) -> list[tuple[int, int, str]]:
        if len(self._texts) > 4 * limit:
            self._texts.clear()  # batches whose vectors never came (the embedder failed)
        batch = []
        for seq, _, text in rows.pending_batch(self.storage, self.session_id, limit):
            token = next(self._tokens)
            self._texts[token] = text
            batch.append((seq, token, text))
        return batch

    async def store_vectors(self, model: str, dimension: int, found: Sequence[tuple[int, int, bytes]]) -> list[int]:
        return rows.store_vectors(self.storage, self.session_id, model, dimension,
                                  [(seq, self._texts.pop(token, ""), blob) for seq, token, blob in found])

    async def vectors(self, model: str, after: int = 0) -> list[tuple[int, int, bytes]]:
        return [(seq, seq, blob) for seq, blob in rows.vectors(self.storage, self.session_id, model, after=after)]

    async def hit_rows(self, seqs: list[int]) -> dict[int, SearchRow]:
        return rows.hit_rows(self.storage, self.session_id, seqs)


def _rows_for(storage: Any, session_id: str) -> Any:
    """The vector rows of ``session_id`` in ``storage`` (a SQLite file or a ``PostgresStorage``)."""
    if isinstance(storage, SqlStorage):
        return _SqliteVectorRows(storage, session_id)
    rows_of = storage.vectors(session_id)
    rows_of.refresh = True  # other hosts may write the session: each search reads what was stored since
    return rows_of


class SessionVectors:
    """One session's vectors: embedding what is pending, and the semantic ranking.

    Storage-neutral: the rows are in the session's SQLite file
    (:mod:`storage.embeddings`) or in Postgres (:mod:`storage.postgres.embeddings`);
    every method that reads them is ``async``.

    Args:
        storage: the session's SQLite file, or a :class:`storage.postgres.PostgresStorage`.
        session_id: the session in that storage.
        embedder: makes the vectors (called on a worker thread only).
    """

    def __init__(self, storage: Any, session_id: str, embedder: Embedder) -> None:
        self.storage = storage
        self.session_id = session_id
        self.embedder = embedder
        self.rows = _rows_for(storage, session_id)
        self._index: VectorIndex | None = None
        self._stamp = 0

    @property
    def model(self) -> str:
        return self.embedder.model

    async def pending(self) -> int:
        """Messages of the session not yet embedded."""
        return int(await self.rows.pending_count())

    async def status(self) -> dict[str, Any]:
        """``{"embedder", "dimension", "embedded", "pending"}`` (``dimension`` ``None`` until known)."""
        kinds = await self.rows.stored_dimensions()
        embedded = sum(n for model, _, n in kinds if model == self.model)
        dimension = next((d for model, d, _ in kinds if model == self.model), None)
        return {"embedder": self.model, "dimension": dimension, "embedded": embedded, "pending": await self.pending()}

    def forget(self) -> None:
        """Drop the in-memory vectors (after an update, delete or clear); the next search reloads them."""
        self._index = None

    async def reset(self) -> int:
        """Delete every vector of the session and mark each message with text again (re-embedding,
        e.g. after changing the embedder's model or dimension); returns how many are pending."""
        self._index = None
        return int(await self.rows.reset(self.model))

    async def mark_missing(self) -> int:
        """Mark every message with text that has no vector of this model; returns how many were marked."""
        return int(await self.rows.mark_missing(self.model))

    async def has_messages(self) -> bool:
        """Whether the session holds any message (a new one has nothing to mark)."""
        return bool(await self.rows.has_messages())

    async def embed_pending(self) -> int:
        """Embed every pending message, a batch at a time; returns how many vectors were stored.

        The model runs on a worker thread, outside any transaction; each
        batch's vectors and the removal of their markers (on SQLite, also
        the move of the embedded-through ``seq``) are one transaction. A
        message updated while its batch was embedded stays pending (the
        next batch embeds the new text).

        Raises:
            actors.embedding.EmbedderError: the model or the endpoint failed
                (nothing is lost: the messages stay pending; the caller retries later).
            EmbeddingMismatchError: the session stores vectors of this model with another dimension.
        """
        import trio

        from .vectors import encode_vector

        stored = 0
        while True:
            batch = await self.rows.pending_batch(BATCH)
            if not batch:
                return stored
            texts = [text for _, _, text in batch]
            vectors = await trio.to_thread.run_sync(self.embedder.embed, texts)
            dimension = self.embedder.dimension
            await self._check_dimension(dimension)
            blobs = [(seq, mark, encode_vector(v)) for (seq, mark, _), v in zip(batch, vectors)]
            done = set(await self.rows.store_vectors(self.model, dimension, blobs))
            if self._index is not None and done and not self.rows.refresh:
                keep = [(seq, v) for (seq, _, _), v in zip(batch, vectors) if seq in done]
                self._index.add([seq for seq, _ in keep], [v for _, v in keep])
            stored += len(done)

    async def ranking(self, query: str, limit: int) -> list[SearchRow]:
        """The ``limit`` messages most similar to ``query`` (cosine), best first.

        Raises:
            EmbeddingMismatchError: the stored vectors of this model have another dimension.
        """
        import trio

        query_vector = (await trio.to_thread.run_sync(self.embedder.embed, [query]))[0]
        index = await self._loaded()
        ranked: list[SearchRow] = []
        want = limit
        while True:
            top = index.top_k(query_vector, want)
            seqs = [seq for seq, _ in top if isinstance(seq, int)]  # the keys are message seqs
            found = await self.rows.hit_rows(seqs)
            ranked = [found[seq] for seq in seqs if seq in found]
            if len(ranked) >= limit or want >= len(index):
                return ranked[:limit]
            want *= 2  # some vectors belonged to messages deleted meanwhile

    async def _loaded(self) -> VectorIndex:
        """The session's vectors in memory: read from storage on first use; in Postgres, also
        those stored since the last read (by this host's alarm or by another host).

        A :meth:`forget` while this awaits storage leaves the index it was filling to this
        search alone (the next search reads everything again)."""
        from .vectors import VectorIndex, decode_matrix

        dimension = self.embedder.dimension  # known: the query was embedded
        index = self._index
        if index is None:
            await self._check_dimension(dimension)
            index = self._index = VectorIndex(self.model, dimension)
            self._stamp = 0
        elif not self.rows.refresh:
            return index
        after = self._stamp
        stored = await self.rows.vectors(self.model, after)
        if stored:
            await self._check_dimension(dimension)
            index.add([seq for seq, _, _ in stored], decode_matrix([blob for _, _, blob in stored], dimension))
            if self._index is index:
                self._stamp = max(self._stamp, max(stamp for _, stamp, _ in stored))
        return index

    async def _check_dimension(self, dimension: int) -> None:
        for model, stored, _ in await self.rows.stored_dimensions():
            if model == self.model and stored != dimension:
                raise EmbeddingMismatchError(
                    f"embedder {self.model} gives {dimension}-dimension vectors but this session stores "
                    f"{stored}-dimension ones: run `durable-sessions reembed` (vectors are never mixed)",
                    field="embedder")


class _SqliteManagerRows:
    """A SessionManager's vectors in its SQLite file (:mod:`storage.embeddings`), with the methods of
    :class:`storage.postgres.embeddings.PostgresManagerVectors`."""

    def __init__(self, storage: SqlStorage) -> None:
        self.storage = storage

    async def sessions_pending(self, limit: int) -> list[str]:
        return rows.sessions_pending(self.storage, limit)

    async def vectors(self, model: str) -> list[tuple[int, bytes]]:
        return rows.registered_vectors(self.storage, model)

    async def hits(self, seqs: list[int]) -> dict[int, dict[str, str]]:
        return rows.registered_hits(self.storage, seqs)


class ManagerVectors:
    """The semantic ranking across a :class:`~actors.manager.SessionManager`'s sessions.

    Brute force over the vectors of every registered session (read at each
    search: a manager's sessions change from call to call, and any of them
    may be written through its own :class:`~actors.session.Session`).

    Args:
        storage: the manager's SQLite file, or a :class:`storage.postgres.PostgresStorage`
            (whose registry's owner scopes the sessions).
        embedder: makes the query's vector (on a worker thread).
    """

    def __init__(self, storage: Any, embedder: Embedder) -> None:
        self.embedder = embedder
        self.rows = _SqliteManagerRows(storage) if isinstance(storage, SqlStorage) else storage.manager_vectors()

    async def sessions_pending(self, limit: int) -> list[str]:
        """Up to ``limit`` of the manager's sessions with messages waiting for a vector."""
        return list(await self.rows.sessions_pending(limit))

    async def ranking(self, query: str, limit: int) -> list[dict[str, str]]:
        """The ``limit`` messages of every session most similar to ``query`` (cosine), best first:
        ``{"id", "role", "content", "created_at", "session_id"}``.

        Raises:
            EmbeddingMismatchError: a session stores vectors of this model with another dimension.
        """
        import trio

        from .vectors import cosine_top_k, decode_matrix

        model = self.embedder.model
        query_vector = (await trio.to_thread.run_sync(self.embedder.embed, [query]))[0]
        dimension = self.embedder.dimension
        stored = await self.rows.vectors(model)
        for _, blob in stored:
            if len(blob) != dimension * 4:
                raise EmbeddingMismatchError(
                    f"embedder {model} gives {dimension}-dimension vectors but a session stores "
                    f"{len(blob) // 4}-dimension ones: run `durable-sessions reembed` on it (vectors are never mixed)",
                    field="embedder")
        if not stored or limit == 0:
            return []
        matrix = decode_matrix([blob for _, blob in stored], dimension)
        want = limit
        while True:
            top = cosine_top_k(query_vector, matrix, want)
            seqs = [stored[i][0] for i, _ in top]
            found = await self.rows.hits(seqs)
            ranked = [found[seq] for seq in seqs if seq in found]
            if len(ranked) >= limit or want >= len(stored):
                return ranked[:limit]
            want *= 2  # some vectors belonged to messages deleted meanwhile


R = TypeVar("R")
V = TypeVar("V")


def vectors_for_mode(mode: Any, vectors: V | None) -> V | None:
    """The vectors a search of ``mode`` needs (``None`` for ``"text"``), or the error saying why there are none.

    Raises:
        InvalidInputError: ``mode`` is not one of :data:`SEARCH_MODES` (``field="mode"``), or
            (``field="embedder"``) semantic/hybrid without an embedder, naming the ``[search]`` setting.
    """
    if mode not in SEARCH_MODES:
        raise InvalidInputError(f"mode must be one of {', '.join(SEARCH_MODES)}, not {mode!r}", field="mode")
    if mode == "text":
        return None
    if vectors is None:
        raise InvalidInputError(
            f'{mode} search needs an embedder: set embedder = "local" (or "openai") in the [search] section '
            "of the config file", field="embedder")
    return vectors


async def ranked(query: str, parsed: ParsedQuery | None, limit: int, mode: str, vectors: Any,
                 text: Callable[[ParsedQuery, int], Awaitable[Sequence[R]]],
                 key: Callable[[R], Hashable]) -> list[R]:
    """The hits of a ``mode`` search, best first: ``text(parsed, n)`` (the full-text ranking), the
    semantic ranking ``vectors.ranking(query, n)``, or both fused by reciprocal rank fusion (each cut
    at :data:`FUSION_DEPTH` or ``limit``; ``key`` names a hit in both rankings)."""
    if limit == 0 or (parsed is None and (vectors is None or not query.strip())):
        return []
    if vectors is None:
        return list(await text(parsed, limit)) if parsed is not None else []
    if mode == "semantic":
        return list(await vectors.ranking(query, limit))
    from .vectors import reciprocal_rank_fusion

    depth = max(limit, FUSION_DEPTH)
    words = list(await text(parsed, depth)) if parsed is not None else []
    meaning = list(await vectors.ranking(query, depth))
    by_key = {key(hit): hit for hit in (*meaning, *words)}
    fused = reciprocal_rank_fusion([[key(hit) for hit in words], [key(hit) for hit in meaning]], limit=limit)
    return [by_key[k] for k, _ in fused]
