"""What encryption at rest costs (storage.cipher): the same cipher-capable apsw build, with and without a key.

Times, on actor files (:class:`storage.SqlStorage`, the schema's
``assistant_config`` table), each as a median over rounds that alternate
plaintext and encrypted so both see the same machine load:

* a commit of one 1 KB row (one transaction, ``synchronous=NORMAL``);
* a read of every row, 4 MB (each page read from the file, or from the
  WAL, is decrypted and authenticated; in these runs SQLite read the pages
  again at each statement, plaintext or not);
* an open of an existing file plus its first read (a wake's share).

Run with the cipher build on the path (the project's environment keeps plain apsw)::

    pip install --target /tmp/sqlite3mc --no-deps apsw-sqlite3mc
    PYTHONPATH=/tmp/sqlite3mc .venv/bin/python benchmarks/bench_encryption.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage import SqlStorage, cipher  # noqa: E402

ROWS = 4000  # of ROW_BYTES each: 4 MB
ROW_BYTES = 1000


def measure(folder: str, key: bytes | None, name: str) -> dict[str, float]:
    """One round in ``folder`` with ``key`` (``None``: plaintext); milliseconds per operation."""
    cipher.use_key(key)
    path = os.path.join(folder, f"{name}.sqlite3")
    storage = SqlStorage.open(path)
    start = time.perf_counter()
    for i in range(ROWS):
        with storage.transaction():
            storage.exec("INSERT INTO assistant_config (session_id, key, value) VALUES ('', ?, ?)", f"k{i}",
                         "x" * ROW_BYTES)
    commit = (time.perf_counter() - start) / ROWS
    read = timed(lambda: storage.scalar("SELECT sum(length(value)) FROM assistant_config"))
    storage.close()

    def wake() -> None:
        with SqlStorage.open(path) as again:
            again.scalar("SELECT value FROM assistant_config WHERE key = 'k7'")

    opened = timed(wake, repeat=50)
    cipher.use_key(None)
    return {"commit of one 1 KB row": commit * 1000, "read 4,000 rows (4 MB)": read, "open + first read": opened}


def timed(fn: Callable[[], object], repeat: int = 5) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    build = cipher.cipher_build()
    if build is None:
        print("this apsw has no cipher: put the apsw-sqlite3mc build on PYTHONPATH (see the module docs)")
        return 1
    results: dict[str, dict[str, list[float]]] = {"plain": {}, "encrypted": {}}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.rounds):
            for label, key in (("plain", None), ("encrypted", os.urandom(32))):
                for metric, value in measure(folder, key, f"{label}-{round_}").items():
                    results[label].setdefault(metric, []).append(value)
    print(f"{build}; {args.rounds} rounds, medians in ms")
    print(f"{'':26} {'plain':>9} {'encrypted':>10} {'ratio':>6}")
    for metric, plain in results["plain"].items():
        p, e = statistics.median(plain), statistics.median(results["encrypted"][metric])
        print(f"{metric:26} {p:9.3f} {e:10.3f} {e / p:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
