"""Actor runtime benchmark: call overhead, wakes, activations, memory, a 100k-actor run.

Run: ``.venv/bin/python benchmarks/bench_runtime.py [--actors 100000] [--skip-touch]``

Prints medians (and p50/p99 for wakes):

* **call overhead**: ``await stub.method()`` against awaiting the same
  method on the live instance (an empty method, a one-row insert, and
  ``Session.append_message`` when ``actors.session`` is importable);
* **wake latency**: hibernated -> first reply, for an actor whose file holds
  a table of 10,000 rows and whose first call reads the last 50;
* **activations per second**: waking existing actors one after another and
  from 32 concurrent callers, and creating new ones (template copy);
* **memory per active actor**: RSS growth over 1,000 active actors;
* **touching N actors** (``--actors``, default 100,000): N distinct new
  actors each get one write, from 8 concurrent callers, under the default
  ``max_active``; reports time, rate, peak RSS, most open descriptors, most
  active actors, evictions and disk use. It writes ~0.2 MB per actor (the
  schema, a WAL and its index), so 100,000 actors need ~21 GB free in
  ``--data-dir`` (default: a temporary folder, removed afterwards).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors import Agent  # noqa: E402
from runtime import open_host  # noqa: E402
from runtime.testing import run_in_actor  # noqa: E402

try:
    from actors.session import Session  # noqa: E402
except ImportError:  # the Session may be mid-change in a shared tree
    Session = None

ROWS = 10_000
BODY = "the passenger asked to move the flight to the next morning and keep the seat " * 2


class BenchAgent(Agent):
    """A small actor with one table; ``on_start`` reads its newest row, as a real actor would."""

    async def on_start(self):
        self.sql("CREATE TABLE IF NOT EXISTS bench_rows (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        self.newest = self.storage.scalar("SELECT max(id) FROM bench_rows")
        self.session = Session.create(self) if Session is not None else None

    async def ping(self):
        return None

    async def insert(self, body):
        self.sql("INSERT INTO bench_rows (body) VALUES (?)", body)

    async def last(self, count):
        return self.sql("SELECT id, body FROM bench_rows ORDER BY id DESC LIMIT ?", count)

    async def fill(self, rows):
        with self.storage.transaction():
            for _ in range(rows):
                self.sql("INSERT INTO bench_rows (body) VALUES (?)", BODY)

    async def append_message(self, message):
        return await self.session.append_message(message)


# -- helpers ---------------------------------------------------------------------------


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def disk_mb(path: Path) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total / 2**20


async def per_call_us(*fns: Callable[[int], Awaitable[object]], calls: int = 1_000, batches: int = 7) -> list[float]:
    """For each of ``fns``: the median over batches of the mean time of one ``await fn(i)``, in us.

    Batches of the different ``fns`` alternate, so slow drift (a growing
    table, a busy machine) weighs on all of them alike.
    """
    results: list[list[float]] = [[] for _ in fns]
    for _ in range(batches):
        for fn, times in zip(fns, results):
            start = time.perf_counter()
            for i in range(calls):
                await fn(i)
            times.append((time.perf_counter() - start) / calls * 1e6)
    return [statistics.median(times) for times in results]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# -- sections ----------------------------------------------------------------------------


async def bench_call_overhead(root: Path) -> None:
    async with open_host(root / "calls") as host:
        ns = host.bind("bench", BenchAgent)
        stub = ns.get_by_name("through-stub")
        agent = await run_in_actor(ns.get_by_name("direct"), lambda a: a)  # a twin actor, called directly
        print("call overhead (us per call, median of 7 x 1000, direct and stub batches alternating):")
        rows = [
            ("empty method", lambda i: agent.ping(), lambda i: stub.ping()),
            ("one-row insert", lambda i: agent.insert(BODY), lambda i: stub.insert(BODY)),
        ]
        if Session is not None:
            counter = iter(range(10**9))

            def message(_):
                return {"id": f"m{next(counter)}", "role": "user", "parts": [{"type": "text", "text": BODY}]}

            rows.append(("Session.append_message", lambda i: agent.session.append_message(message(i)),
                         lambda i: stub.append_message(message(i))))
        for label, direct, through_stub in rows:
            d, s = await per_call_us(direct, through_stub)
            print(f"  {label:<24} direct {d:8.1f}   stub.call {s:8.1f}   overhead {s - d:7.1f}")


async def bench_wake(root: Path, wakes: int = 200) -> None:
    async with open_host(root / "wake") as host:
        ns = host.bind("bench", BenchAgent)
        stub = ns.get_by_name("big")
        await stub.fill(ROWS)
        times = []
        for _ in range(wakes):
            await host.hibernate(ns, stub.id)
            start = time.perf_counter()
            rows = await stub.last(50)
            times.append((time.perf_counter() - start) * 1e3)
        assert len(rows) == 50
        print(f"wake latency, {ROWS:,} rows, first call reads the last 50 (ms, {wakes} wakes): "
              f"p50 {percentile(times, 0.5):.3f}  p99 {percentile(times, 0.99):.3f}")


async def bench_activations(root: Path, count: int = 2_000) -> None:
    async with open_host(root / "activations", max_active=count + 10) as host:
        ns = host.bind("bench", BenchAgent)
        stubs = [ns.get_by_name(f"a{i}") for i in range(count)]
        start = time.perf_counter()
        for stub in stubs:
            await stub.insert("x")
        created = count / (time.perf_counter() - start)
        await host.hibernate_all()
        start = time.perf_counter()
        for stub in stubs:
            await stub.ping()
        sequential = count / (time.perf_counter() - start)
        await host.hibernate_all()
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for part in range(32):
                nursery.start_soon(_ping_all, stubs[part::32])
        concurrent = count / (time.perf_counter() - start)
        print(f"activations per second ({count:,} actors): new {created:,.0f}  "
              f"wake sequential {sequential:,.0f}  wake 32 concurrent {concurrent:,.0f}")


async def _ping_all(stubs) -> None:
    for stub in stubs:
        await stub.ping()


async def bench_memory(root: Path, count: int = 1_000) -> None:
    data_dir = root / "memory"
    async with open_host(data_dir, max_active=16) as host:  # create the files, few open at a time
        ns = host.bind("bench", BenchAgent)
        for i in range(count):
            await ns.get_by_name(f"m{i}").insert("x")
    # Measure in a fresh process, so memory freed by earlier sections is not reused.
    probe = await trio.run_process(
        [sys.executable, __file__, "--memory-probe", str(count), "--data-dir", str(data_dir)], capture_stdout=True
    )
    before, after, woken = probe.stdout.decode().split()
    grown = float(after) - float(before)
    with_session = " (each with a Session)" if Session is not None else ""
    print(f"memory per active actor{with_session}: {grown * 1024 / int(woken):.0f} KiB "
          f"(RSS +{grown:.0f} MB for {int(woken):,} more active actors)")


async def memory_probe(data_dir: Path, count: int) -> None:
    """Child process of :func:`bench_memory`: print RSS before and after waking ``count`` actors."""
    async with open_host(data_dir, max_active=count + 10) as host:
        ns = host.bind("bench", BenchAgent)
        stubs = [ns.get_by_name(f"m{i}") for i in range(count)]
        await stubs[0].last(5)
        before = rss_mb()
        for stub in stubs[1:]:
            await stub.last(5)
        print(before, rss_mb(), count - 1)


async def bench_touch(root: Path, actors: int, concurrency: int = 8) -> None:
    data_dir = root / "touch"
    peaks = {"fds": open_fds(), "active": 0}
    async with open_host(data_dir) as host:
        ns = host.bind("bench", BenchAgent)
        next_index = iter(range(actors))
        start = time.perf_counter()

        async def worker():
            for i in next_index:
                await ns.get_by_name(f"user-{i}").insert("hello")
                if i % 1_000 == 0:
                    peaks["fds"] = max(peaks["fds"], open_fds())
                    peaks["active"] = max(peaks["active"], host.statistics().active)
                if i % 10_000 == 0 and i:
                    elapsed = time.perf_counter() - start
                    print(f"    {i:>7,} actors  {elapsed:6.1f} s  RSS {rss_mb():5.0f} MB  fds {open_fds()}",
                          flush=True)

        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(worker)
        elapsed = time.perf_counter() - start
        stats = host.statistics()
    print(f"touching {actors:,} new actors ({concurrency} callers, max_active {stats.max_active}): "
          f"{elapsed:.1f} s ({actors / elapsed:,.0f}/s)  peak RSS {peak_rss_mb():.0f} MB  "
          f"most open fds {peaks['fds']}  most active {peaks['active']}  evictions {stats.evictions:,}  "
          f"disk {disk_mb(data_dir):,.0f} MB")


async def main(args: argparse.Namespace) -> None:
    if args.memory_probe:
        await memory_probe(Path(args.data_dir), args.memory_probe)
        return
    root = Path(args.data_dir or tempfile.mkdtemp(prefix="bench_runtime_"))
    try:
        await bench_call_overhead(root)
        await bench_wake(root)
        await bench_activations(root)
        await bench_memory(root)
        if not args.skip_touch:
            await bench_touch(root, args.actors)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, default=100_000, help="actors the touch run creates (default 100000)")
    parser.add_argument("--skip-touch", action="store_true", help="skip the N-actor run")
    parser.add_argument("--data-dir", help="folder for the actor files (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the files afterwards")
    parser.add_argument("--memory-probe", type=int, default=0, help=argparse.SUPPRESS)
    trio.run(main, parser.parse_args())
