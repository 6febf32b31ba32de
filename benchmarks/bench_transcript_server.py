"""The transcript store over HTTP (``DurableSessionStore`` -> a real server) and in process.

Run: ``.venv/bin/python benchmarks/bench_transcript_server.py`` (about a minute).

Starts ``durable-sessions serve`` on a free loopback port with a temporary
data folder and prints medians in milliseconds for one session whose main
transcript holds 100, 10k and 100k entries (~600-byte Claude Code-like
entries) before the timed calls:

* ``append 20``: one SDK batch of 20 new entries (one request);
* ``retry 20``: the same batch again (all skipped as duplicates);
* ``load all``: the whole main transcript back (JSON sent without decoding
  on the server);
* ``list_sessions``: the project's listing (host catalog; 100 sessions);
* ``host append 20``: the same batch through the in-process
  :class:`~runtime.server.transcripts.HostTranscriptStore` (no HTTP);

then, when ``../shared/data`` is present, the wall time of
``durable-sessions import`` of the 99 Claude Code files as sessions and as
transcripts.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runtime import DurableSessionStore, open_host  # noqa: E402
from runtime.server.transcripts import open_transcripts  # noqa: E402

SIZES = (100, 10_000, 100_000)
BATCH = 20
ROUNDS = 30
FILL_BATCH = 1000
SHARED = ROOT.parent / "shared" / "data" / "claude_code" / "claude-code-log"


def entry(n: int) -> dict:
    return {
        "parentUuid": str(uuid.UUID(int=n)),
        "isSidechain": False,
        "type": "assistant" if n % 2 else "user",
        "uuid": str(uuid.UUID(int=n + 1)),
        "timestamp": "2025-07-19T23:55:36.313Z",
        "sessionId": "71c9afe9-d9cc-4583-86b3-e62ba682b83a",
        "message": {"role": "user", "content": [{"type": "text", "text": f"entry {n} " + "lorem ipsum " * 30}]},
    }


def cli() -> list[str]:
    script = Path(sys.executable).with_name("durable-sessions")
    return [str(script)] if script.exists() else [sys.executable, "-m", "runtime.cli.main"]


def start_server(data: Path) -> tuple[subprocess.Popen, str]:
    ready = data.with_name("ready.json")
    process = subprocess.Popen([*cli(), "--log-level", "WARNING", "serve", "--bind", "127.0.0.1:0", "--data", str(data),
                                "--ready-file", str(ready)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not ready.exists():
        if process.poll() is not None:
            raise SystemExit("the server did not start")
        time.sleep(0.05)
    return process, json.loads(ready.read_text())["url"]


async def timed(fn) -> float:
    start = time.perf_counter()
    await fn()
    return (time.perf_counter() - start) * 1000


async def fill(store, key: dict, size: int) -> None:
    for start in range(0, size, FILL_BATCH):
        await store.append(key, [entry(n) for n in range(start, min(size, start + FILL_BATCH))])


async def measure(store, key: dict, size: int, rounds: int) -> dict[str, float]:
    await fill(store, key, size)
    appends, retries, loads = [], [], []
    for r in range(rounds):
        batch = [entry(size + r * BATCH + i) for i in range(BATCH)]
        appends.append(await timed(lambda: store.append(key, batch)))
        retries.append(await timed(lambda: store.append(key, batch)))
    for _ in range(max(3, rounds // 6) if size < 100_000 else 3):
        loads.append(await timed(lambda: store.load(key)))
    return {"append 20": statistics.median(appends), "retry 20": statistics.median(retries),
            "load all": statistics.median(loads)}


async def over_http(url: str) -> None:
    async with DurableSessionStore(url) as store:
        for i in range(100):
            await store.append({"project_key": "listing", "session_id": f"s{i}"}, [entry(i)])
        listing = [await timed(lambda: store.list_sessions("listing")) for _ in range(ROUNDS)]
        print(f"{'':>16}" + "".join(f"{size:>12,}" for size in SIZES))
        results = [await measure(store, {"project_key": "p", "session_id": f"n{size}"}, size, ROUNDS) for size in SIZES]
        for name in results[0]:
            print(f"{name:>16}" + "".join(f"{r[name]:>12.2f}" for r in results))
        print(f"{'list_sessions':>16}{statistics.median(listing):>12.2f}")


async def in_process(data: Path) -> None:
    async with open_host(data) as host, open_transcripts(host) as store:
        results = []
        for size in SIZES:
            key = {"project_key": "p", "session_id": f"n{size}"}
            await fill(store, key, size)
            samples = []
            for r in range(ROUNDS):
                batch = [entry(size + r * BATCH + i) for i in range(BATCH)]
                samples.append(await timed(lambda: store.append(key, batch)))
            results.append(statistics.median(samples))
        print(f"{'host append 20':>16}" + "".join(f"{ms:>12.2f}" for ms in results))


def import_times(url: str) -> None:
    for target in ("sessions", "transcripts"):
        start = time.perf_counter()
        subprocess.run([*cli(), "import", str(SHARED), "--url", url, "--as", target, "--no-progress"], check=True,
                       stdout=subprocess.DEVNULL)
        print(f"import 99 Claude Code files as {target}: {time.perf_counter() - start:.1f} s")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        process, url = start_server(Path(tmp) / "data")
        try:
            print(f"median ms, main transcript size before the timed calls (server {url})")
            trio.run(over_http, url)
            trio.run(in_process, Path(tmp) / "in-process")
            if SHARED.is_dir():
                import_times(url)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)


if __name__ == "__main__":
    os.environ.pop("DURABLE_SESSIONS_TOKEN", None)
    main()
