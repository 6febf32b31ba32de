"""Semantic search in cluster mode: real ``serve --cluster`` hosts with ``[search] embedder = "local"``.

The vectors and pending markers are plain rows of the actor's file, so the
changesets carry them: after the owner is killed (``kill -9``) the host that
takes the session over answers semantic search from the replicated vectors.
"""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("wordllama")

from tests.support.cluster_hosts import run_cluster, wait_until  # noqa: E402

TEXTS = {
    "flight": "My flight to Lisbon was cancelled this morning",
    "pasta": "The pasta recipe needs garlic, olive oil and basil",
    "dog": "Our puppy keeps chewing the sofa cushions",
}


def test_vectors_replicate_and_the_next_owner_answers_semantic_search(tmp_path, pg_empty_dsn):
    settings = tmp_path / "sessions.toml"
    settings.write_text('[search]\nembedder = "local"\n', encoding="utf-8")
    with run_cluster(tmp_path, pg_empty_dsn, hosts=2, lease_s=2.0, app=None,
                     extra=("--config", str(settings))) as cluster:
        first = cluster.hosts[0]
        with httpx.Client(base_url=first.url, timeout=60) as http:
            for mid, text in TEXTS.items():
                reply = http.post("/v1/sessions/trip/messages", json={
                    "message": {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}})
                assert reply.status_code == 201, reply.text

            def embedded():
                status = http.get("/v1/sessions/trip/search:status").json()["status"]
                return status["pending"] == 0 and status["embedded"] == len(TEXTS)

            wait_until(embedded, timeout=120, message="the owner embedded the session", interval=0.1)
        owner = cluster.owner_of("trip")
        owner.kill()
        survivor = next(host for host in cluster.hosts if host is not owner)
        with httpx.Client(base_url=survivor.url, timeout=60) as http:
            def answered():
                reply = http.get("/v1/sessions/trip/search",
                                 params={"q": "the trip that got called off", "mode": "semantic", "limit": 1})
                return reply.json() if reply.status_code == 200 else None

            found = wait_until(answered, timeout=120, message="the next owner answers", interval=0.2)
            assert [hit["id"] for hit in found["results"]] == ["flight"]
            status = http.get("/v1/sessions/trip/search:status").json()["status"]
            assert status == {"embedder": "wordllama/l2_supercat-256", "dimension": 256, "embedded": 3, "pending": 0}
