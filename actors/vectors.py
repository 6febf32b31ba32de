"""Vectors for semantic search: bytes on disk, cosine top-k, reciprocal rank fusion (issue 29).

Pure functions over numpy arrays; nothing here touches storage or the
network. numpy comes with the optional extra ``semantic``
(``pip install -e '.[semantic]'``): import this module only where semantic
search is switched on.

* A **vector** is a 1-D ``numpy.ndarray`` of ``float32``.
* On disk (an SQLite ``BLOB``, a Postgres ``bytea``) a vector is its
  ``dimension * 4`` bytes, little-endian IEEE-754 float32, nothing else: the
  same bytes on every machine, and a plain row that a cluster changeset
  carries as it is. The model name and the dimension live in columns beside
  it, never inside the bytes.
* Similarity is cosine: :func:`cosine_top_k` ranks a matrix of stored vectors
  (one per row) against a query, brute force (one matrix-vector product).
* :class:`VectorIndex` holds a session's vectors in memory by key and
  answers top-k, optionally over the eligible keys only.
* :func:`reciprocal_rank_fusion` merges rankings (full text and semantic)
  into one, by rank only, so scores of different kinds never meet.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from common.errors import InvalidInputError

__all__ = [
    "RRF_K",
    "Vector",
    "VectorFormatError",
    "VectorIndex",
    "cosine_top_k",
    "decode_matrix",
    "decode_vector",
    "encode_vector",
    "normalize",
    "reciprocal_rank_fusion",
]

#: A vector: 1-D ``float32`` array.
Vector = npt.NDArray[np.float32]

#: The on-disk element type: little-endian float32.
_DISK = np.dtype("<f4")

#: Reciprocal rank fusion's constant (Cormack, Clarke and Büttcher, SIGIR 2009):
#: an item at rank ``r`` (1-based) of a ranking adds ``1 / (RRF_K + r)``. 60 is
#: the paper's value and the usual default (Elasticsearch, OpenSearch, Vectorize);
#: it flattens the head so that one ranking's first hit cannot outvote an item
#: both rankings place near the top.
RRF_K = 60

K = TypeVar("K", bound=Hashable)


class VectorFormatError(InvalidInputError):
    """A vector or its stored bytes are malformed: wrong shape, length or dimension, or a non-finite value."""


def _as_vector(vector: object, what: str = "vector") -> Vector:
    try:
        arr = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise VectorFormatError(f"{what} is not a sequence of numbers: {exc}") from None
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise VectorFormatError(f"{what} must be one non-empty row of numbers, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise VectorFormatError(f"{what} holds a NaN or infinite value")
    return arr


def encode_vector(vector: object) -> bytes:
    """``vector`` as stored bytes: ``dimension * 4`` bytes, little-endian float32.

    Args:
        vector: a 1-D sequence of finite numbers (numpy array, list, ``array('f')``);
            values are rounded to float32.

    Raises:
        VectorFormatError: not 1-D, empty, or holds NaN/inf.
    """
    return _as_vector(vector).astype(_DISK, copy=False).tobytes()


def decode_vector(data: bytes, dimension: int | None = None) -> Vector:
    """Stored bytes back to a vector (a new, writable ``float32`` array in native byte order).

    Args:
        data: bytes written by :func:`encode_vector` (``bytes``, ``memoryview``).
        dimension: when given, the number of values the bytes must hold.

    Raises:
        VectorFormatError: the length is not a positive multiple of 4, or differs
            from ``dimension * 4``.
    """
    size = len(data)
    if size == 0 or size % 4:
        raise VectorFormatError(f"stored vector has {size} bytes, not a positive multiple of 4")
    if dimension is not None and size != dimension * 4:
        raise VectorFormatError(f"stored vector has {size // 4} dimensions, expected {dimension}")
    return np.frombuffer(data, dtype=_DISK).astype(np.float32)


def decode_matrix(blobs: Iterable[bytes], dimension: int) -> npt.NDArray[np.float32]:
    """Many stored vectors as one ``(n, dimension)`` float32 matrix, in the order given.

    One join and one copy whatever ``n`` (no Python loop over values): 100,000
    vectors of 384 dimensions decode in tens of milliseconds.

    Raises:
        VectorFormatError: ``dimension`` is not positive, or a blob's length is
            not ``dimension * 4`` (the first such blob is named by position).
    """
    if dimension <= 0:
        raise VectorFormatError(f"dimension must be positive, got {dimension}")
    blobs = list(blobs)
    width = dimension * 4
    for i, blob in enumerate(blobs):
        if len(blob) != width:
            raise VectorFormatError(
                f"stored vector {i} has {len(blob)} bytes, expected {width} ({dimension} dimensions)"
            )
    if not blobs:
        return np.zeros((0, dimension), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype=_DISK).reshape(len(blobs), dimension).astype(np.float32)


def normalize(matrix: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """Rows (or one vector) scaled to unit length, as float32; an all-zero row stays zero."""
    arr = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(arr, axis=-1, keepdims=True)
    return np.divide(arr, norms, out=np.zeros_like(arr), where=norms > 0)


def cosine_top_k(
    query: object, matrix: npt.ArrayLike, k: int, *, normalized: bool = False
) -> list[tuple[int, float]]:
    """The ``k`` rows of ``matrix`` most similar to ``query`` by cosine, best first.

    Args:
        query: a vector of the matrix's dimension.
        matrix: ``(n, dimension)`` stored vectors, one per row.
        k: how many to return (``k >= n`` returns all ``n``).
        normalized: the rows are already unit length (as :func:`normalize`
            leaves them); skips one pass over the matrix. The query is
            always normalised.

    Returns:
        ``[(row index, cosine similarity in [-1, 1])]``, highest similarity
        first; equal similarities keep the lower row index first. A zero
        vector (row or query) has similarity 0.

    Raises:
        VectorFormatError: the query is malformed or its dimension differs
            from the matrix's; ``k`` is negative.
    """
    q = _as_vector(query, "query vector")
    rows = np.asarray(matrix, dtype=np.float32)
    if rows.ndim != 2:
        raise VectorFormatError(f"stored vectors must form a 2-D matrix, got shape {rows.shape}")
    if rows.shape[1] != q.shape[0]:
        raise VectorFormatError(f"query has {q.shape[0]} dimensions, stored vectors have {rows.shape[1]}")
    if k < 0:
        raise VectorFormatError(f"k must be >= 0, got {k}")
    n = rows.shape[0]
    if n == 0 or k == 0:
        return []
    if not normalized:
        rows = normalize(rows)
    scores = rows @ normalize(q)
    k = min(k, n)
    if k < n:
        # Every row scoring at least the k-th best, then an exact stable order among them.
        kth = np.partition(scores, n - k)[n - k]
        candidates = np.flatnonzero(scores >= kth)
    else:
        candidates = np.arange(n)
    order = candidates[np.lexsort((candidates, -scores[candidates]))][:k]
    return [(int(i), float(scores[i])) for i in order]


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[K]], k: int = RRF_K, limit: int | None = None
) -> list[tuple[K, float]]:
    """Merge rankings by reciprocal rank fusion: ``score(d) = sum over rankings of 1 / (k + rank)``.

    ``rank`` is 1-based; an item absent from a ranking adds nothing for it.
    Only ranks count, never the rankings' own scores, so a bm25 rank and a
    cosine similarity merge without calibration.

    Args:
        rankings: each a sequence of item keys (message ids), best first; a
            key repeated within one ranking counts at its best rank only.
        k: the fusion constant (:data:`RRF_K`, 60, by default); must be >= 0.
        limit: keep only the best ``limit`` items (``None``: all).

    Returns:
        ``[(key, fused score)]``, highest score first; equal scores are ordered
        by the best rank the item reached in any ranking, then by the first
        ranking it appears in (so the first ranking wins exact ties).

    Raises:
        InvalidInputError: ``k`` or ``limit`` is negative.
    """
    if k < 0 or (isinstance(k, float) and not math.isfinite(k)):
        raise InvalidInputError(f"reciprocal rank fusion constant k must be >= 0, got {k}")
    if limit is not None and limit < 0:
        raise InvalidInputError(f"limit must be >= 0, got {limit}")
    scores: dict[K, float] = {}
    best: dict[K, tuple[int, int]] = {}
    for which, ranking in enumerate(rankings):
        seen: set[K] = set()
        for rank, key in enumerate(ranking, start=1):
            if key in seen:
                continue
            seen.add(key)
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
            if key not in best or (rank, which) < best[key]:
                best[key] = (rank, which)
    fused = sorted(scores.items(), key=lambda item: (-item[1], best[item[0]]))
    return fused if limit is None else fused[:limit]


class VectorIndex:
    """One model's vectors of a session, in memory, by key: brute-force cosine search over a growable matrix.

    A session keeps one while it is active (reading 100k vectors back from
    SQLite costs ~0.2 s, searching them in memory ~5 ms at 256 dimensions:
    ``docs/semantic-search.md``). Rows are stored unit length, so a search is
    one matrix-vector product. Memory: ``dimension * 4`` bytes per vector,
    plus up to the same again of spare capacity (it doubles as it grows).

    Args:
        model: the embedder's model name (:attr:`actors.embedding.Embedder.model`).
        dimension: every vector's length (> 0).

    Raises:
        VectorFormatError: ``dimension`` is not positive.
    """

    def __init__(self, model: str, dimension: int) -> None:
        if not isinstance(dimension, int) or dimension <= 0:
            raise VectorFormatError(f"dimension must be a positive integer, got {dimension!r}")
        self.model = model
        self.dimension = dimension
        self._rows = np.zeros((0, dimension), dtype=np.float32)
        self._keys: list[Hashable] = []
        self._where: dict[Hashable, int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._where

    @property
    def nbytes(self) -> int:
        """Bytes of the matrix held (capacity included)."""
        return int(self._rows.nbytes)

    def add(self, keys: Sequence[Hashable], vectors: npt.ArrayLike) -> None:
        """Store ``vectors[i]`` under ``keys[i]`` (normalised); a key already present gets the new vector.

        Raises:
            VectorFormatError: counts differ, a key repeats within ``keys``,
                or the vectors are not ``(len(keys), dimension)`` finite numbers.
        """
        keys = list(keys)
        rows = np.asarray(vectors, dtype=np.float32)
        if rows.ndim == 1 and len(keys) == 1:
            rows = rows.reshape(1, -1)
        if rows.ndim != 2 or rows.shape != (len(keys), self.dimension):
            raise VectorFormatError(
                f"expected {len(keys)} vectors of {self.dimension} dimensions, got shape {rows.shape}"
            )
        if len(set(keys)) != len(keys):
            raise VectorFormatError("a key appears twice in one add()")
        if not np.isfinite(rows).all():
            raise VectorFormatError("a vector holds a NaN or infinite value")
        rows = normalize(rows)
        new = [i for i, key in enumerate(keys) if key not in self._where]
        for i, key in enumerate(keys):
            if key in self._where:
                self._rows[self._where[key]] = rows[i]
        if not new:
            return
        n = len(self._keys)
        need = n + len(new)
        if need > self._rows.shape[0]:
            grown = np.zeros((max(need, 2 * self._rows.shape[0], 64), self.dimension), dtype=np.float32)
            grown[:n] = self._rows[:n]
            self._rows = grown
        # All new (the usual load): the rows as they are; else the new ones picked by an index array.
        self._rows[n:need] = rows if len(new) == len(keys) else rows[np.asarray(new, dtype=np.intp)]
        for offset, i in enumerate(new):
            self._where[keys[i]] = n + offset
            self._keys.append(keys[i])

    def discard(self, keys: Sequence[Hashable]) -> int:
        """Remove these keys (absent ones are ignored); returns how many were removed.

        The last row moves into each freed place, so removal is O(1) per key.
        """
        removed = 0
        for key in keys:
            row = self._where.pop(key, None)
            if row is None:
                continue
            last = len(self._keys) - 1
            if row != last:
                moved = self._keys[last]
                self._rows[row] = self._rows[last]
                self._keys[row] = moved
                self._where[moved] = row
            self._keys.pop()
            removed += 1
        return removed

    def top_k(
        self, query: object, k: int, *, eligible: Callable[[Hashable], bool] | None = None
    ) -> list[tuple[Hashable, float]]:
        """The ``k`` stored keys most similar to ``query`` by cosine, best first: ``[(key, similarity)]``.

        Args:
            query: a vector of this index's dimension (any length; it is normalised).
            k: how many (>= 0).
            eligible: when given, only keys for which it returns true count
                (a branch's messages, those not hidden by a compaction overlay).
                Candidates are checked best first, in windows that double, so
                a filter that keeps most keys costs about ``k`` calls.

        Equal similarities come in row order (insertion order until a
        :meth:`discard` moves rows).

        Raises:
            VectorFormatError: the query is malformed or of another dimension;
                ``k`` is negative.
        """
        q = _as_vector(query, "query vector")
        if q.shape[0] != self.dimension:
            raise VectorFormatError(f"query has {q.shape[0]} dimensions, the index has {self.dimension}")
        if k < 0:
            raise VectorFormatError(f"k must be >= 0, got {k}")
        n = len(self._keys)
        if n == 0 or k == 0:
            return []
        scores = self._rows[:n] @ normalize(q)
        window = min(n, k if eligible is None else 2 * k)
        while True:
            if window < n:
                kth = np.partition(scores, n - window)[n - window]
                candidates = np.flatnonzero(scores >= kth)
            else:
                candidates = np.arange(n)
            order = candidates[np.lexsort((candidates, -scores[candidates]))]
            hits = [
                (self._keys[i], float(scores[i]))
                for i in order
                if eligible is None or eligible(self._keys[i])
            ][:k]
            if len(hits) == k or window >= n:
                return hits
            window = min(n, window * 2)
