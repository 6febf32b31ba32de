"""SessionManager benchmark: per-operation medians in milliseconds.

Run: ``.venv/bin/python benchmarks/bench_manager.py [--sizes 100,10000,100000] [--sessions 1000]``

For each history size N (one managed session holding N messages, plus 99
small sessions of 20 messages beside it) it times:

* ``manager.append`` (message + registry touch) against a plain
  ``Session.append_message`` on the same file -- the cost of keeping
  ``updated_at`` current;
* ``manager.get_message_count`` and ``manager.get`` (flat);
* ``manager.search`` for a few queries over every session's messages;
* first, ``manager.fork`` at the leaf (copies all N messages: linear in
  N, one transaction, one bulk insert) and ``manager.delete`` of that fork;
* ``manager.append_all`` of 1,000 messages (one transaction) against 1,000
  ``manager.append`` calls.

Then, with ``--sessions`` registered sessions: ``list()``, ``create`` and
``rename``.

Messages are ~20-word chunks of the tau-bench airline chats when
``/work/shared/data/chat/tau-bench/gpt-4o-airline.json`` exists, generated
sentences otherwise (see ``bench_session.py``). Sessions are loaded with
``append_all`` (one transaction each).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_session import Messages, corpus_words  # noqa: E402

from actors import Session, SessionManager  # noqa: E402
from storage import SqlStorage  # noqa: E402

QUERIES = ("flight", "cancel reservation", '"gold member"')
SMALL_SESSIONS = 99
SMALL_SIZE = 20


async def median_ms(fn: Callable[[], Awaitable[object]], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def load(manager: SessionManager, name: str, make: Messages, count: int) -> str:
    """A new managed session holding ``count`` chained messages; returns its id."""
    session_id = (await manager.create(name))["id"]
    await manager.append_all(session_id, [make(i) for i in range(count)])
    return session_id


async def bench_size(size: int, words: list[str], folder: Path) -> None:
    storage = SqlStorage.open(folder / f"manager-{size}.sqlite3")
    manager = SessionManager.create(storage)
    big = await load(manager, "big", Messages(words, "p"), size)
    for s in range(SMALL_SESSIONS):
        await load(manager, f"small-{s}", Messages(words[s * 50 :], "s"), SMALL_SIZE)
    forks: list[str] = []

    async def fork():
        forks.append((await manager.fork(big, f"p{size - 1}", "fork"))["id"])

    repeat = 3 if size <= 10_000 else 1
    rows = [
        ("manager.fork at the leaf (N messages)", await median_ms(fork, repeat)),
        ("manager.delete of that fork", await median_ms(lambda: manager.delete(forks.pop()), repeat)),
    ]
    plain = Session.create(storage).for_session("plain")
    counter = iter(range(10**9))

    def short():
        return {"id": f"x{next(counter)}", "role": "user", "parts": [{"type": "text", "text": "ok"}]}

    async def managed_append():
        await manager.append(big, short())

    async def plain_append():
        await plain.append_message(short())

    async def append_all_1k():
        await manager.append_all(big, [short() for _ in range(1000)])

    async def appends_1k():
        for _ in range(1000):
            await manager.append(big, short())

    rows += [
        ("manager.append_all of 1,000 messages", await median_ms(append_all_1k, 3)),
        ("1,000 x manager.append", await median_ms(appends_1k, 3)),
        ("manager.append", await median_ms(managed_append, 300)),
        ("Session.append_message (unmanaged)", await median_ms(plain_append, 300)),
        ("manager.get_message_count", await median_ms(lambda: manager.get_message_count(big), 300)),
        ("manager.get", await median_ms(lambda: manager.get(big), 300)),
    ]
    for query in QUERIES:
        rows.append((f"manager.search({query!r})", await median_ms(lambda q=query: manager.search(q), 50)))
    storage.close()
    print(f"\n{size:,} messages in the big session (+{SMALL_SESSIONS} x {SMALL_SIZE}):")
    for name, ms in rows:
        print(f"  {name:<42} {ms:10.3f} ms")


async def bench_registry(count: int, folder: Path) -> None:
    storage = SqlStorage.open(folder / "registry.sqlite3")
    manager = SessionManager.create(storage)
    ids = [(await manager.create(f"s{i}"))["id"] for i in range(count)]
    counter = iter(range(10**9))
    rows = [
        ("list()", await median_ms(manager.list, 50)),
        ("create", await median_ms(lambda: manager.create("new"), 200)),
        ("rename", await median_ms(lambda: manager.rename(ids[next(counter) % count], "renamed"), 200)),
    ]
    storage.close()
    print(f"\n{count:,} registered sessions:")
    for name, ms in rows:
        print(f"  {name:<42} {ms:10.3f} ms")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,10000,100000")
    parser.add_argument("--sessions", type=int, default=1000)
    args = parser.parse_args()
    words = corpus_words()
    with tempfile.TemporaryDirectory() as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            await bench_size(size, words, Path(tmp))
        await bench_registry(args.sessions, Path(tmp))


if __name__ == "__main__":
    trio.run(main)
