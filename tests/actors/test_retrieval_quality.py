"""Issue 29's quality bar on the retrieval set, with the local model: hybrid >= text + 20 points recall@5,
and never below text on the queries that share words with their target.

Runs ``benchmarks/bench_retrieval.py``'s evaluation in this process (no timing
is asserted; the figures are counts of queries). Full-text search is the
project's own (``storage.fts`` on the schema's tokenizer), so its figures are
pinned exactly; the model's are bounds, so that a better model passes too.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("numpy")
pytest.importorskip("wordllama")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def measured() -> dict:
    with pytest.MonkeyPatch.context() as mp:
        # The benchmark fills these in when absent; keep this process's environment as it was.
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "HF_HUB_OFFLINE"):
            mp.setenv(name, "1")
        spec = importlib.util.spec_from_file_location("bench_retrieval", ROOT / "benchmarks" / "bench_retrieval.py")
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
        return bench.evaluate("local")


def test_the_set_is_what_its_readme_says(measured):
    assert measured["corpus"] == 952
    assert measured["queries"] == 62
    assert measured["model"] == "wordllama/l2_supercat-256" and measured["dimension"] == 256


def test_text_search_figures_are_the_projects_own(measured):
    text = measured["modes"]["text"]
    assert round(text["recall@5"] * 62) == 15  # every word must match: no paraphrase is found
    assert text["recall@5 paraphrase"] == 0.0
    assert round(text["recall@5 shared"] * 18) == 15


def test_hybrid_beats_text_by_20_points_and_never_loses_a_shared_word_query(measured):
    text, hybrid, semantic = (measured["modes"][m] for m in ("text", "hybrid", "semantic"))
    assert hybrid["recall@5"] >= text["recall@5"] + 0.20
    assert hybrid["recall@5"] >= 0.65  # 43 of 62 when measured
    assert hybrid["recall@5 shared"] >= text["recall@5 shared"]
    assert measured["shared_below_text"] == 0
    assert hybrid["mrr@10"] >= semantic["mrr@10"] >= text["mrr@10"]
