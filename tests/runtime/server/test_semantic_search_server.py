"""Semantic and hybrid search through a real ``durable-sessions serve`` process with ``[search] embedder``.

The append answers before the model runs; the actor's alarm embeds after
commit; ``search:status`` counts what is pending until it reaches 0; a
restart finishes what a killed process left pending; no embedder: 400
naming the setting.
"""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest

pytest.importorskip("wordllama")

from tests.support.processes import cli_command, cli_env, kill_hard, server_process  # noqa: E402

DEADLINE_S = 120.0
TEXTS = {
    "flight": "My flight to Lisbon was cancelled this morning",
    "pasta": "The pasta recipe needs garlic, olive oil and basil",
    "deploy": "The deploy of the billing service happens on Friday",
    "dog": "Our puppy keeps chewing the sofa cushions",
}


def config(tmp_path, body):
    path = tmp_path / "sessions.toml"
    path.write_text(body, encoding="utf-8")
    return str(path)


def append_all(http, session):
    for mid, text in TEXTS.items():
        reply = http.post(f"/v1/sessions/{session}/messages",
                          json={"message": {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}})
        assert reply.status_code == 201, reply.text


def wait_embedded(http, session, count):
    deadline = time.monotonic() + DEADLINE_S
    while True:
        status = http.get(f"/v1/sessions/{session}/search:status").json()["status"]
        if status["pending"] == 0 and status["embedded"] == count:
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.1)


def search(http, session, q, mode, limit=20):
    return http.get(f"/v1/sessions/{session}/search", params={"q": q, "mode": mode, "limit": limit})


def test_search_modes_over_http_with_the_local_embedder(tmp_path):
    settings = config(tmp_path, '[search]\nembedder = "local"\n')
    with server_process(tmp_path / "data", extra=("--config", settings)) as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:
        append_all(http, "s1")
        status = wait_embedded(http, "s1", len(TEXTS))
        assert status == {"embedder": "wordllama/l2_supercat-256", "dimension": 256, "embedded": 4, "pending": 0}
        text = search(http, "s1", "the trip that got called off", "text")
        assert text.status_code == 200 and text.json() == {"results": []}
        semantic = search(http, "s1", "the trip that got called off", "semantic", 1).json()["results"]
        assert [h["id"] for h in semantic] == ["flight"] and semantic[0]["content"] == TEXTS["flight"]
        hybrid = search(http, "s1", "billing deploy", "hybrid", 4).json()["results"]
        assert [h["id"] for h in hybrid][0] == "deploy" and len(hybrid) == 4
        default = http.get("/v1/sessions/s1/search", params={"q": "billing deploy"}).json()["results"]
        assert [h["id"] for h in default] == ["deploy"]  # text stays the default
        bad = search(http, "s1", "x", "fuzzy")
        assert bad.status_code == 400 and "mode" in bad.text
        deleted = http.delete("/v1/sessions/s1/messages/flight")
        assert deleted.status_code == 200
        after = search(http, "s1", "the trip that got called off", "semantic").json()["results"]
        assert "flight" not in [h["id"] for h in after]
        assert http.get("/v1/sessions/s1/search:status").json()["status"]["embedded"] == 3
        # The CLI: search --mode, and reembed --wait (every vector dropped, then made again).
        found = cli(server, "search", "s1", "a young dog damaging furniture", "--mode", "semantic", "--limit", "1")
        assert found.stdout.startswith("dog [user] Our puppy")
        again = cli(server, "reembed", "s1", "--wait")
        assert again.stdout.strip() == "s1: 0 pending, 3 embedded (wordllama/l2_supercat-256)"


def cli(server, *args):
    result = subprocess.run([*cli_command(), *args, "--url", server.url], env=cli_env(None),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result


def test_without_an_embedder_semantic_search_is_a_400_naming_the_setting(tmp_path):
    with server_process(tmp_path / "data") as server, httpx.Client(base_url=server.url, timeout=60) as http:
        append_all(http, "s1")
        for mode in ("semantic", "hybrid"):
            reply = search(http, "s1", "flight", mode)
            assert reply.status_code == 400, reply.text
            error = reply.json()["error"]
            assert "embedder" in error["message"] and "[search]" in error["message"]
        assert [h["id"] for h in search(http, "s1", "flight", "text").json()["results"]] == ["flight"]
        refused = subprocess.run([*cli_command(), "reembed", "s1", "--url", server.url], env=cli_env(None),
                                 capture_output=True, text=True, timeout=120)
        assert refused.returncode == 1 and "embedder" in refused.stderr and "[search]" in refused.stderr


def test_a_restart_finishes_what_was_pending(tmp_path):
    # First life: an embeddings endpoint nobody answers -- the appends commit with their
    # markers, the embedding fails (and would retry); the process is then killed hard.
    dead = config(tmp_path, '[search]\nembedder = "openai"\nurl = "http://127.0.0.1:9/v1"\n'
                            'model = "nowhere"\napi_key_env = ""\ndimension = 8\n')
    with server_process(tmp_path / "data", extra=("--config", dead)) as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:
        append_all(http, "s1")
        status = http.get("/v1/sessions/s1/search:status").json()["status"]
        assert status["pending"] == 4 and status["embedded"] == 0
        kill_hard(server)
    # Second life, the local model: waking the session finds what is pending and embeds it.
    local = config(tmp_path, '[search]\nembedder = "local"\n')
    with server_process(tmp_path / "data", extra=("--config", local)) as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:
        wait_embedded(http, "s1", len(TEXTS))
        semantic = search(http, "s1", "a young dog damaging furniture", "semantic", 1).json()["results"]
        assert [h["id"] for h in semantic] == ["dog"]


def test_sessions_written_before_the_embedder_was_configured_get_embedded_at_their_next_wake(tmp_path):
    with server_process(tmp_path / "data") as server, httpx.Client(base_url=server.url, timeout=60) as http:
        append_all(http, "old")
    settings = config(tmp_path, '[search]\nembedder = "local"\n')
    with server_process(tmp_path / "data", extra=("--config", settings)) as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:
        wait_embedded(http, "old", len(TEXTS))
        found = search(http, "old", "the trip that got called off", "semantic", 1).json()["results"]
        assert [h["id"] for h in found] == ["flight"]
