"""Transcript storage and Claude Code conversion: how cost grows with size.

Run: ``.venv/bin/python benchmarks/transcripts.py`` (about half a minute).

Prints medians in milliseconds for one transcript file holding 100, 10k and
100k entries before the timed appends (which add 600 more) (~600-byte Claude Code-like entries, 20 per batch as the SDK
sends them):

* ``append 20``: one batch appended (one transaction, uuid de-duplication);
* ``retry 20``: the same batch again (all skipped);
* ``load all``: the whole main transcript read back (decoded);
* ``load_json all``: the same as one JSON array text (not decoded);
* ``list_subkeys``: with 5 sub-transcripts beside the main one;
* ``catalog``: the per-append catalog update (fold + mtime);

then Claude Code conversion throughput on ``../shared/data`` when present.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime.cli.formats.claude_code import iter_claude_code_sessions  # noqa: E402
from storage import SqlStorage  # noqa: E402
from storage.transcripts import TranscriptCatalog, TranscriptFile  # noqa: E402

SIZES = (100, 10_000, 100_000)
BATCH = 20
ROUNDS = 30


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


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_size(folder: Path, size: int) -> dict[str, float]:
    storage = SqlStorage.open(folder / f"t{size}.sqlite3")
    file = TranscriptFile(storage)
    for start in range(0, size, 1000):
        file.append("", [entry(n) for n in range(start, min(size, start + 1000))])
    for agent in range(5):
        file.append(f"subagents/agent-{agent}", [entry(10**9 + agent)])
    catalog = TranscriptCatalog.open(folder / f"c{size}.sqlite3")
    next_n = size
    appends, retries, catalogs = [], [], []
    for _ in range(ROUNDS):
        batch = [entry(n) for n in range(next_n, next_n + BATCH)]
        next_n += BATCH
        appends.append(timed(lambda: file.append("", batch)))
        retries.append(timed(lambda: file.append("", batch)))
        catalogs.append(timed(lambda: catalog.record_append("p", "s", batch)))
    repeats = 3 if size >= 100_000 else 10
    loads = [timed(lambda: file.load("")) for _ in range(repeats)]
    texts = [timed(lambda: file.load_json("")) for _ in range(repeats)]
    subkeys = [timed(file.list_subkeys) for _ in range(ROUNDS)]
    storage.close()
    catalog.close()
    return {
        "append 20": median_ms(appends),
        "retry 20": median_ms(retries),
        "load all": median_ms(loads),
        "load_json all": median_ms(texts),
        "list_subkeys": median_ms(subkeys),
        "catalog": median_ms(catalogs),
    }


def bench_conversion() -> None:
    data = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "claude_code" / "claude-code-log"
    if not data.is_dir():
        print(f"(conversion skipped: {data} not found)")
        return
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        sessions = list(iter_claude_code_sessions(data))
        runs.append(time.perf_counter() - start)
    messages = sum(len(s.messages) for s in sessions)
    print(f"Claude Code conversion: {len(sessions)} files, {messages} messages in {median_ms(runs):.0f} ms (median of 5)")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = {size: bench_size(Path(tmp), size) for size in SIZES}
    names = list(next(iter(rows.values())))
    print(f"{'ms (median)':<14}" + "".join(f"{size:>12,}" for size in SIZES))
    for name in names:
        print(f"{name:<14}" + "".join(f"{rows[size][name]:>12.3f}" for size in SIZES))
    bench_conversion()


if __name__ == "__main__":
    main()
