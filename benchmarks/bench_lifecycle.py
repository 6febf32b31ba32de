"""Data lifecycle costs: export, import and delete of a long session; a backup while appends are served.

A real host and server on loopback, driven by :class:`runtime.client.SessionsClient`:

1. One session of ``--messages`` messages (default 100,000; a main line with
   a branch every 1,000), hibernated. Times, each as the median of
   ``--repeats``: reading its whole history (``get_history()``, the
   reference), ``export_session``, ``import_session`` of that archive into a
   new id (then deleted again), and ``delete_session`` of a copy. Reports
   export/history and import/history (goal <= 5x) and the delete (goal <= 1 s).
2. ``--sessions`` sessions (default 1,000) of a few messages each; ``--writers``
   tasks append one message per request to random sessions for the time a
   backup of all of them takes (``backup_host``), then again as long with no
   backup. Reports both append rates and their ratio (goal >= 0.8).

With ``--postgres`` the sessions are in Postgres (``serve --postgres``: a throwaway server started
as the tests start it, ``tests/support/postgres.py``) and only part 1 runs (``backup`` refuses there).

Run: ``.venv/bin/python benchmarks/bench_lifecycle.py [--messages 100000] [--sessions 1000] [--repeats 3]
[--postgres]``

Each goal's line ends ``met`` or ``NOT MET``; a ratio's two times come from the same run.

Measured with ``--messages 10000 --repeats 3`` (2026-12-02, same machine and load): single host -- history
474 ms, export 293 ms (0.62x), import 1.64 s (3.45x); ``--postgres`` -- history 421 ms, export 262 ms
(0.62x), import 5.25 s (12.5x; 116 s, 147x, before the stored times went back in one statement and a
chain's rows in one INSERT), delete 121 ms.

``--postgres`` with the messages in one COPY, each chain prepared while the ones before stream
(2026-12-02, 2 shared cores at load ~8, medians of 3; "before": main's code, run in turn with it):
10,000 messages -- history 404 / 582 ms, import 2.46 / 3.56 s: 6.08x / 6.13x (before: 13.37x / 13.43x);
100,000 messages -- history 4.54 s, export 3.65 s (0.80x), import 20.7 s: 4.56x, met (before, one round:
history 3.06 s, import 30.5 s, 9.95x); delete 1.62 s (the 1 s goal is a single host's). A later run
(load ~5): 100,000 -- history 6.64 s, import 27.5 s, 4.14x, met; 10,000 -- 413 ms, 2.08 s, 5.04x, NOT MET
(single host in the same run: 4.41x). Python prepares each message (~1/3 of the import, overlapped);
the rest is Postgres computing two tsvectors per row and filling the indexes.

Measured (2026-12-02, 2 shared cores under other load; medians of 3): history read of 100,000
messages 6.86 s over HTTP; export 4.56 s (0.66x); import 21.7 s (3.16x; 100,099 messages with the
branches, a 34 MB archive); delete 93 ms. Backup of 1,001 actor files (252 MB) in 99.7 s with 8 writers
appending: 103 appends/s during it, 58/s in as long a run without it (ratio 1.78; a 100-session run
gave 0.78 -- the machine's other load dominates these rates).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime import open_host  # noqa: E402
from runtime.client import SessionsClient  # noqa: E402
from runtime.server.app import bind_sessions, serve  # noqa: E402
from runtime.server.config import ServerSettings  # noqa: E402

TEXT = ("I need to change my flight to Friday morning and keep the same seat if possible, "
        "the booking reference is in my email from last week")


def message(mid: str) -> dict:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": f"{TEXT} ({mid})"}]}


async def timed(fn, *args):
    started = time.perf_counter()
    result = await fn(*args)
    return time.perf_counter() - started, result


async def fill_long(client: SessionsClient, name: str, count: int) -> None:
    """A main line ``m0..m<count-1>`` in batches of 1,000, with a one-message side branch at each batch."""
    handle = client.session(name)
    batch = 1000
    for start in range(0, count, batch):
        if start:
            await handle.append_message(message(f"branch-{start}"), f"m{start - 10}")
        parent = f"m{start - 1}" if start else None
        await handle.append_messages([message(f"m{i}") for i in range(start, min(count, start + batch))], parent)


def verdict(met: bool) -> str:
    """The goal's state, as every benchmark here prints it."""
    return "met" if met else "NOT MET"


async def part_one(client: SessionsClient, count: int, repeats: int, mode: str = "single host") -> None:
    await fill_long(client, "long", count)
    await client.hibernate()
    reads, exports, imports, deletes = [], [], [], []
    archive = ""
    for r in range(repeats):
        seconds, history = await timed(lambda: client.session("long").get_history(overlays=False))
        reads.append(seconds)
        seconds, archive = await timed(client.export_session, "long")
        exports.append(seconds)
        await client.hibernate()
        seconds, stored = await timed(client.import_session, f"copy-{r}", archive)
        imports.append(seconds)
        await client.hibernate()
        seconds, _ = await timed(client.delete_session, f"copy-{r}")
        deletes.append(seconds)
    read, export, imported, delete = (statistics.median(x) for x in (reads, exports, imports, deletes))
    print(f"{mode}: session of {count} messages ({len(history)} on the active path, {stored} stored by import, "
          f"archive {len(archive) / 1e6:.1f} MB; medians of {repeats} rounds, each reading, exporting, importing)")
    print(f"  history read   {read * 1000:9.1f} ms")
    print(f"  export         {export * 1000:9.1f} ms   {export / read:5.2f}x history (goal <= 5x: "
          f"{verdict(export <= 5 * read)})")
    print(f"  import         {imported * 1000:9.1f} ms   {imported / read:5.2f}x history (goal <= 5x: "
          f"{verdict(imported <= 5 * read)})")
    goal = f"goal <= 1000 ms: {verdict(delete <= 1.0)}" if mode == "single host" else "the 1 s goal is a single host's"
    print(f"  delete         {delete * 1000:9.1f} ms   ({goal})")


async def appends_for(client: SessionsClient, names: list[str], writers: int, done: trio.Event) -> int:
    count = 0

    async def writer(seed: int) -> None:
        nonlocal count
        rng = random.Random(seed)
        while not done.is_set():
            name = rng.choice(names)
            await client.session(name).append_message(message(f"w{seed}-{count}-{rng.random()}"))
            count += 1

    async with trio.open_nursery() as nursery:
        for seed in range(writers):
            nursery.start_soon(writer, seed)
    return count


async def part_two(client: SessionsClient, sessions: int, writers: int, folder: Path) -> None:
    names = [f"s{i}" for i in range(sessions)]
    for name in names:
        await client.session(name).append_messages([message(f"{name}-{i}") for i in range(5)])
    await client.hibernate()
    done = trio.Event()
    report: dict = {}

    async def backup() -> None:
        started = time.perf_counter()
        report.update(await client.backup_host(str(folder / "backup")))
        report["seconds"] = time.perf_counter() - started
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(backup)
        started = time.perf_counter()
        with_backup = await appends_for(client, names, writers, done)
        window = time.perf_counter() - started
    await client.hibernate()
    done = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: trio.sleep(window))
        nursery.cancel_scope.deadline = trio.current_time() + window + 60

        async def stop_after() -> None:
            await trio.sleep(window)
            done.set()

        nursery.start_soon(stop_after)
        started = time.perf_counter()
        without = await appends_for(client, names, writers, done)
        plain_window = time.perf_counter() - started
    rate_with, rate_without = with_backup / window, without / plain_window
    print(f"backup of {report['sessions']} actor files ({report['bytes'] / 1e6:.1f} MB) in {report['seconds']:.2f} s "
          f"with {writers} writers appending")
    print(f"  appends/s during the backup {rate_with:8.0f}")
    print(f"  appends/s without a backup  {rate_without:8.0f}   ratio {rate_with / rate_without:.2f} (goal >= 0.8)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--postgres", action="store_true", help="the sessions in a throwaway Postgres (part 1 only)")
    args = parser.parse_args()
    if args.postgres:
        await in_postgres(args)
        return
    folder = Path(tempfile.mkdtemp(prefix="bench-lifecycle-"))
    try:
        async with open_host(folder / "data") as host, trio.open_nursery() as nursery:
            bind_sessions(host)
            settings = ServerSettings(bind="127.0.0.1:0", max_body_bytes=1 << 30)
            urls = await nursery.start(lambda task_status: serve(host, settings, task_status=task_status))
            async with SessionsClient(urls[0], timeout=600) as client:
                if args.messages:
                    await part_one(client, args.messages, args.repeats)
                if args.sessions:
                    await part_two(client, args.sessions, args.writers, folder)
            nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def in_postgres(args: argparse.Namespace) -> None:
    from actors.session_agent import SessionConfig
    from actors.session_agent_postgres import PostgresSessionAgent, PostgresSessionEnv
    from storage.postgres import open_postgres_storage
    from tests.support.postgres import PostgresServer

    server = PostgresServer().start()
    folder = Path(tempfile.mkdtemp(prefix="bench-lifecycle-pg-"))
    try:
        dsn = server.dsn(server.create_database("template0"))
        async with open_postgres_storage(dsn, timeout_s=600) as storage, open_host(folder / "data") as host, \
                trio.open_nursery() as nursery:
            # No compaction: a copy beside its original cannot hold the same compaction ids in one database.
            config = SessionConfig(compaction=None)
            bind_sessions(host, PostgresSessionEnv(storage, config), agent_class=PostgresSessionAgent)
            settings = ServerSettings(bind="127.0.0.1:0", max_body_bytes=1 << 30)
            urls = await nursery.start(lambda task_status: serve(host, settings, task_status=task_status))
            async with SessionsClient(urls[0], timeout=600) as client:
                await part_one(client, args.messages, args.repeats, "postgres (serve --postgres)")
            nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        server.close()


if __name__ == "__main__":
    trio.run(main)
