"""actors.embedding: the local model (offline, from the wheel) and an OpenAI-compatible endpoint on loopback.

The endpoint is a real HTTP server (``http.server`` in a thread on 127.0.0.1)
answering OpenAI's embeddings shape with deterministic vectors; its model name
picks a behaviour (an error status, a wrong dimension, a shuffled answer...).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

from actors.embedding import (  # noqa: E402
    DEFAULT_LOCAL_MODEL,
    SEMANTIC_EXTRA,
    Embedder,
    EmbedderConfigError,
    EmbedderError,
    EmbedderUnavailableError,
    EmbeddingDimensionError,
    EmbeddingEndpointError,
    LocalEmbedder,
    OpenAIEmbedder,
)
from common.errors import InvalidInputError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


# -- the loopback endpoint ---------------------------------------------------------


def vector_for(text: str) -> list[float]:
    """The deterministic 3-d vector the test server returns for ``text``."""
    return [float(len(text)), 1.0, float(sum(map(ord, text)) % 7)]


def unit(v: list[float]) -> list[float]:
    a = np.asarray(v, dtype=np.float32)
    return (a / np.linalg.norm(a)).tolist()


class EmbeddingsServer:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                model, texts = body["model"], body["input"]
                if self.path != "/v1/embeddings":
                    return self.reply(404, b'{"error": "no such route"}')
                if model == "broken":
                    return self.reply(500, b'{"error": {"message": "upstream exploded"}}')
                if model == "slow":
                    server.release.wait(10)
                if model == "not-json":
                    return self.reply(200, b"<html>gateway</html>")
                data = [{"object": "embedding", "index": i, "embedding": vector_for(t)} for i, t in enumerate(texts)]
                if model == "shuffled":
                    data.reverse()
                if model == "short":
                    data = data[:-1]
                if model == "wrong-dim" and len(data) > 1:
                    data[1]["embedding"] = data[1]["embedding"] + [0.0]
                if model == "nan":
                    data[0]["embedding"][0] = float("nan")
                self.reply(200, json.dumps({"object": "list", "data": data, "model": model}).encode())

            def reply(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def server() -> Iterator[EmbeddingsServer]:
    s = EmbeddingsServer()
    yield s
    s.close()


# -- OpenAIEmbedder -------------------------------------------------------------------


def test_openai_embedder_batches_keeps_order_and_returns_unit_float32(server):
    texts = ["alpha", "be", "gamma ray", "d", "epsilon"]
    with OpenAIEmbedder(server.url, "m", api_key_env=None, batch_size=2) as e:
        vectors = e.embed(texts)
        typed: Embedder = e  # the protocol, checked statically
        assert typed.dimension == 3 and typed.model == "m"
    assert [r["body"]["input"] for r in server.requests] == [["alpha", "be"], ["gamma ray", "d"], ["epsilon"]]
    assert all(r["path"] == "/v1/embeddings" and r["body"]["model"] == "m" for r in server.requests)
    assert all(r["auth"] is None for r in server.requests)
    assert [v.dtype for v in vectors] == [np.float32] * 5
    assert [v.tolist() for v in vectors] == [pytest.approx(unit(vector_for(t))) for t in texts]
    assert e.embed([]) == []


def test_openai_embedder_puts_a_shuffled_answer_back_in_input_order(server):
    e = OpenAIEmbedder(server.url, "shuffled", api_key_env=None)
    vectors = e.embed(["one", "three", "fifteen"])
    assert [v.tolist() for v in vectors] == [pytest.approx(unit(vector_for(t))) for t in ["one", "three", "fifteen"]]
    e.close()


def test_openai_embedder_sends_the_key_from_the_named_variable(server, monkeypatch):
    monkeypatch.setenv("TEST_EMBEDDINGS_KEY", "sk-test-123")
    e = OpenAIEmbedder(server.url + "/embeddings", "m", api_key_env="TEST_EMBEDDINGS_KEY")  # full URL also works
    e.embed(["x"])
    assert server.requests[0]["auth"] == "Bearer sk-test-123"
    assert server.requests[0]["path"] == "/v1/embeddings"
    e.close()


def test_openai_embedder_refuses_a_missing_key_variable(monkeypatch):
    monkeypatch.delenv("TEST_EMBEDDINGS_ABSENT", raising=False)
    with pytest.raises(EmbedderConfigError, match="TEST_EMBEDDINGS_ABSENT is not set"):
        OpenAIEmbedder("http://127.0.0.1:1/v1", "m", api_key_env="TEST_EMBEDDINGS_ABSENT")


@pytest.mark.parametrize(("kwargs", "msg"), [
    ({"url": "ftp://x/v1"}, "must start with http"),
    ({"model": " "}, "model must be a non-empty string"),
    ({"batch_size": 0}, "batch_size must be an integer in 1..2048"),
    ({"batch_size": 4096}, "batch_size must be an integer in 1..2048"),
    ({"timeout": 0}, "timeout must be a positive number"),
    ({"dimension": -3}, "dimension must be a positive integer"),
])
def test_openai_embedder_bad_settings_are_400_config_errors(kwargs, msg):
    args = {"url": "http://127.0.0.1:1/v1", "model": "m", "api_key_env": None, **kwargs}
    with pytest.raises(EmbedderConfigError, match=msg) as info:
        OpenAIEmbedder(**args)
    assert info.value.status == 400


def test_openai_embedder_learns_its_dimension_with_one_probe(server):
    e = OpenAIEmbedder(server.url, "m", api_key_env=None)
    assert e.dimension == 3
    assert e.dimension == 3
    assert len(server.requests) == 1
    e.close()


def test_openai_embedder_http_error_names_status_and_body(server):
    e = OpenAIEmbedder(server.url, "broken", api_key_env=None)
    with pytest.raises(EmbeddingEndpointError, match="answered HTTP 500: .*upstream exploded") as info:
        e.embed(["x"])
    assert info.value.status_code == 500 and info.value.status == 503
    e.close()


def test_openai_embedder_wrong_route_is_an_endpoint_error(server):
    e = OpenAIEmbedder(server.url.removesuffix("/v1") + "/v2", "m", api_key_env=None)
    with pytest.raises(EmbeddingEndpointError, match="HTTP 404") as info:
        e.embed(["x"])
    assert info.value.status_code == 404
    e.close()


@pytest.mark.parametrize(("model", "msg"), [
    ("not-json", "unknown shape"),
    ("short", "returned 2 vectors for 3 texts"),
    ("nan", "non-finite value in vector 0"),
])
def test_openai_embedder_refuses_malformed_answers(server, model, msg):
    e = OpenAIEmbedder(server.url, model, api_key_env=None)
    with pytest.raises(EmbeddingEndpointError, match=msg):
        e.embed(["a", "b", "c"])
    e.close()


def test_openai_embedder_checks_the_dimension_within_and_across_answers(server):
    e = OpenAIEmbedder(server.url, "wrong-dim", api_key_env=None)
    with pytest.raises(EmbeddingDimensionError, match="returned a 4-dimension vector, expected 3"):
        e.embed(["a", "b"])
    e.close()
    fixed = OpenAIEmbedder(server.url, "m", api_key_env=None, dimension=8)
    with pytest.raises(EmbeddingDimensionError, match="model m returned a 3-dimension vector, expected 8"):
        fixed.embed(["a"])
    fixed.close()


def test_openai_embedder_sends_dimensions_only_when_asked(server):
    OpenAIEmbedder(server.url, "m", api_key_env=None, dimension=3, send_dimensions=True).embed(["a"])
    OpenAIEmbedder(server.url, "m", api_key_env=None, dimension=3).embed(["a"])
    assert server.requests[0]["body"]["dimensions"] == 3
    assert "dimensions" not in server.requests[1]["body"]


def test_openai_embedder_unreachable_endpoint(server):
    url = server.url
    server.close()  # nothing listens on that port any more
    e = OpenAIEmbedder(url, "m", api_key_env=None)
    with pytest.raises(EmbeddingEndpointError, match="unreachable") as info:
        e.embed(["x"])
    assert info.value.status_code is None
    e.close()


def test_openai_embedder_timeout(server):
    e = OpenAIEmbedder(server.url, "slow", api_key_env=None, timeout=0.2)
    with pytest.raises(EmbeddingEndpointError, match="timed out after 0.2 s"):
        e.embed(["x"])
    e.close()


@pytest.mark.parametrize("bad", ["one string", [b"bytes"], [None]])
def test_embed_refuses_what_is_not_a_list_of_str(server, bad):
    e = OpenAIEmbedder(server.url, "m", api_key_env=None)
    with pytest.raises(InvalidInputError):
        e.embed(bad)
    assert server.requests == []
    e.close()


# -- LocalEmbedder ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    pytest.importorskip("wordllama")
    return LocalEmbedder()


def test_local_embedder_shape_name_and_unit_vectors(local):
    typed: Embedder = local
    assert typed.model == DEFAULT_LOCAL_MODEL == "wordllama/l2_supercat-256"
    assert local.dimension == 256
    vectors = local.embed(["my flight was cancelled", "I would like a window seat", ""])
    assert [v.shape for v in vectors] == [(256,)] * 3
    assert [v.dtype for v in vectors] == [np.float32] * 3
    assert float(np.linalg.norm(vectors[0])) == pytest.approx(1.0, abs=1e-5)
    assert float(np.linalg.norm(vectors[2])) == 0.0  # no token: the zero vector, never NaN
    assert local.embed([]) == []


def test_local_embedder_is_deterministic_and_batch_independent(local):
    texts = ["the trip that got called off", "reserve an identical itinerary for a buddy"]
    together = local.embed(texts)
    alone = [local.embed([t])[0] for t in texts]
    for a, b in zip(together, alone):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_local_embedder_finds_meaning_not_words(local):
    q, near, far = local.embed(["my flight was cancelled", "the trip got called off", "a recipe for banana bread"])
    assert float(q @ near) > float(q @ far) + 0.1


def test_local_embedder_shorter_dimensions_are_prefixes(local):
    small = LocalEmbedder(dimension=64)
    assert small.dimension == 64 and small.model == "wordllama/l2_supercat-64"
    v = small.embed(["seat upgrade"])[0]
    assert v.shape == (64,)
    with pytest.raises(EmbedderConfigError, match="must be one of"):
        LocalEmbedder(dimension=100)


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)


def test_local_embedder_loads_and_embeds_with_every_route_to_a_hub_closed(tmp_path):
    pytest.importorskip("wordllama")
    # Any download attempt (requests, httpx, huggingface_hub) goes to a dead proxy and fails.
    dead = "http://127.0.0.1:9"
    env = {"HF_HUB_OFFLINE": "1", "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "http_proxy": dead,
           "https_proxy": dead, "NO_PROXY": "", "no_proxy": "", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)}
    code = ("from actors.embedding import LocalEmbedder\n"
            "e = LocalEmbedder()\n"
            "v = e.embed(['offline'])\n"
            "print(e.model, v[0].shape[0])\n")
    proc = run_python(code, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["wordllama/l2_supercat-256", "256"]
    assert list(tmp_path.iterdir()) == []  # nothing downloaded or cached under HOME


def test_local_embedder_without_its_package_names_the_extra():
    code = ("import sys\n"
            "sys.modules['wordllama'] = None  # as if not installed\n"
            "from actors.embedding import LocalEmbedder, EmbedderUnavailableError\n"
            "try:\n"
            "    LocalEmbedder()\n"
            "except EmbedderUnavailableError as exc:\n"
            "    print(exc)\n")
    proc = run_python(code, {})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"the local embedder needs the package 'wordllama': {SEMANTIC_EXTRA}"
    assert SEMANTIC_EXTRA == "pip install -e '.[semantic]'"
    assert issubclass(EmbedderUnavailableError, EmbedderError)


def test_embedding_module_imports_neither_apsw_nor_the_runtime():
    # Loaded by file, without the actors package's __init__ (which brings the Session and apsw):
    # what these two modules need on their own.
    code = ("import importlib.util, sys\n"
            "for name in ('embedding', 'vectors'):\n"
            "    spec = importlib.util.spec_from_file_location('semantic_' + name, f'actors/{name}.py')\n"
            "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "bad = sorted(m for m in sys.modules\n"
            "             if m == 'apsw' or m.split('.')[0] in ('runtime', 'trio', 'wordllama'))\n"
            "print(bad)\n")
    proc = run_python(code, {})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
