"""Cluster core: what the durable log costs per turn, and how long a failover takes.

Run: ``.venv/bin/python benchmarks/bench_cluster_core.py [--turns 1000] [--tails 0,100,1000,10000] [--dsn DSN]``

Without ``--dsn`` a throwaway server is started as the tests start it
(``tests/support/postgres.py``), then ``fsync`` is switched back **on**
(``ALTER SYSTEM``; ``--no-fsync`` keeps the tests' ``off``), so commits cost
what they cost on a real disk. Everything below runs in one process, in one
run, so ratios are reliable where absolute numbers move with the machine's load.

1. **Turns** -- ``SessionAgent.append_message`` (one new message per turn)
   and ``get_latest_leaf`` (a read) through stubs, single host (no cluster)
   against cluster mode (one host, lease 10 s), in three shapes: 1 actor x 1
   caller, 1 actor x 16 callers, 64 actors x 1 caller. Per shape: p50/p99
   latency, turns/s, host CPU per turn (``getrusage`` of this process: the
   host *and* the callers), Postgres CPU per turn (``/proc`` ticks of the
   server's processes; coarse), turns per log entry (an actor's concurrent
   turns share one entry) and entries per statement (group commit across actors).
2. **Failover** -- for each tail length N (log entries after the newest
   snapshot): host A writes N turns and releases the actor; host B's first
   call is timed (acquire, read snapshot and tail, rebuild the file on a
   worker thread, open, ``on_start``). A failover after a crash takes
   ``lease_s`` (the lease must expire) plus this. With ``snapshot_min_bytes``
   at its default (1 MB) the tail stays short; the rows "no snapshots" turn
   snapshots off to show the cost of a long tail.
3. ``--compare-main REF``: the single-host rows again, on a ``git archive``
   of ``REF`` (e.g. ``main``), in a child process -- cluster mode must add
   nothing to the single host.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if "--root" in sys.argv:
    ROOT = Path(sys.argv[sys.argv.index("--root") + 1]).resolve()
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(Path(__file__).resolve().parent))

import trio
from bench_session import Messages, corpus_words

from actors import SessionAgent, SessionConfig
from runtime.host import open_host

CONFIG = SessionConfig(compaction=None)


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def pg_cpu_s() -> float:
    """CPU seconds used so far by every process named ``postgres`` (coarse: clock ticks)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as comm:
                if comm.read().strip() != "postgres":
                    continue
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError):
            continue
    return total


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run_shape(ns, make: Messages, actors: int, callers: int, turns: int, *, read: bool) -> dict:
    """``turns`` calls spread over ``actors`` x ``callers``; latencies, CPU and log entries."""
    stubs = [ns.get_by_name(f"bench-{actors}-{callers}-{read}-{i}-{time.monotonic_ns()}") for i in range(actors)]
    for stub in stubs:  # activation is not what is measured
        await stub.append_message(make(0))
    cluster = ns.host.cluster
    stats0 = cluster.statistics() if cluster is not None else None
    latencies: list[float] = []
    per_caller = max(1, turns // (actors * callers))
    counter = iter(range(1, 10**9))

    async def caller(stub):
        for _ in range(per_caller):
            started = time.perf_counter()
            if read:
                await stub.get_latest_leaf()
            else:
                await stub.append_message(make(next(counter)))
            latencies.append(time.perf_counter() - started)

    cpu0, pg0, wall0 = cpu_s(), pg_cpu_s(), time.perf_counter()
    async with trio.open_nursery() as nursery:
        for stub in stubs:
            for _ in range(callers):
                nursery.start_soon(caller, stub)
    wall = time.perf_counter() - wall0
    n = len(latencies)
    entries = statements = 0
    if cluster is not None:
        stats = cluster.statistics()
        entries, statements = stats.entries - stats0.entries, stats.statements - stats0.statements
    return {"p50": pct(latencies, 50) * 1e3, "p99": pct(latencies, 99) * 1e3, "rate": n / wall,
            "cpu": (cpu_s() - cpu0) / n * 1e6, "pg": (pg_cpu_s() - pg0) / n * 1e6, "n": n, "entries": entries,
            "statements": statements}


SHAPES = [("1 actor x 1 caller", 1, 1), ("1 actor x 16 callers", 1, 16), ("64 actors x 1 caller", 64, 1)]


def row(label: str, r: dict, extra: str = "") -> str:
    return (f"  {label:<9} p50 {r['p50']:6.2f} ms  p99 {r['p99']:7.2f} ms  {r['rate']:7.0f} turns/s  "
            f"host CPU {r['cpu']:5.0f} us/turn  PG CPU {r['pg']:4.0f} us/turn{extra}")


async def bench_turns(dsn: str | None, folder: Path, turns: int, single_only: bool) -> None:
    make = Messages(corpus_words())
    cluster = None
    if not single_only:
        from runtime.host.cluster import ClusterOptions

        cluster = ClusterOptions(dsn, "http://bench", host_id="bench", lease_s=10.0)
    modes = [("single", None)] + ([] if single_only else [("cluster", cluster)])
    for read in (False, True):
        print(f"\n{'reads (get_latest_leaf)' if read else 'writes (append_message)'}:")
        for title, actors, callers in SHAPES:
            if read and callers > 1:
                continue
            print(f" {title}:")
            base = None
            for label, options in modes:
                data = folder / f"turns-{label}-{read}-{actors}-{callers}"
                async with open_host(data, idle_timeout_s=None, cluster=options) as host:
                    ns = host.bind("sessions", SessionAgent, env=CONFIG)
                    await run_shape(ns, make, actors, callers, min(200, turns // 5), read=read)  # warm-up
                    result = await run_shape(ns, make, actors, callers, turns, read=read)
                    extra = ""
                    if host.cluster is not None:
                        if result["entries"] and not read:
                            extra = (f"  {result['n'] / result['entries']:4.1f} turns/entry, "
                                     f"{result['entries'] / result['statements']:4.1f} entries/statement")
                        if base is not None:
                            extra += (f"  (+{result['p50'] - base['p50']:.2f} ms p50, "
                                      f"+{result['p99'] - base['p99']:.2f} ms p99, "
                                      f"+{result['cpu'] - base['cpu']:.0f} us CPU)")
                    base = base or result
                    print(row(label, result, extra), flush=True)


async def write_all(stub, make: Messages, counter) -> None:
    for i in counter:
        await stub.append_message(make(i))


async def bench_failover(dsn: str, folder: Path, tails: list[int]) -> None:
    from runtime.host.cluster import ClusterOptions

    make = Messages(corpus_words())
    print("\nfailover: host B's first call after host A released the actor (acquire + restore + open + on_start)")
    for snapshots, threshold in (("snapshots at 1 MB", 1 << 20), ("no snapshots", 1 << 40)):
        for tail in tails:
            name = f"failover-{tail}-{threshold}"
            a_opts = ClusterOptions(dsn, "http://a", host_id=f"a-{name}", lease_s=10.0, snapshot_min_bytes=threshold)
            b_opts = ClusterOptions(dsn, "http://b", host_id=f"b-{name}", lease_s=10.0, snapshot_min_bytes=threshold)
            async with open_host(folder / f"{name}-a", idle_timeout_s=None, cluster=a_opts) as a, \
                    open_host(folder / f"{name}-b", idle_timeout_s=None, cluster=b_opts) as b:
                na = a.bind("sessions", SessionAgent, env=CONFIG)
                nb = b.bind("sessions", SessionAgent, env=CONFIG)
                stub = na.get_by_name(name)
                await stub.get_path_length()
                counter = iter(range(tail))

                async with trio.open_nursery() as nursery:
                    for _ in range(8):
                        nursery.start_soon(write_all, stub, make, counter)
                await a.hibernate(na, stub.id)
                await trio.sleep(0.2)  # the release reaches Postgres
                entries = a.cluster.statistics().entries
                started = time.perf_counter()
                length = await nb.get(stub.id).get_path_length()
                took = time.perf_counter() - started
                assert length == tail, (length, tail)
                size = b.path_for(stub.id).stat().st_size
                print(f"  {snapshots:<17} {tail:6d} turns ({entries:5d} log entries, file {size / 1e6:5.1f} MB): "
                      f"{took * 1e3:7.1f} ms", flush=True)


def compare_main(ref: str, dsn: str | None, turns: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        print(f"\n--- single host on {ref} (git archive, child process) ---", flush=True)
        subprocess.run([sys.executable, "-B", __file__, "--root", tmp, "--single-only", "--turns", str(turns)],
                       check=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--tails", default="0,100,1000,10000")
    parser.add_argument("--dsn", help="an existing database (the cluster tables are created in it)")
    parser.add_argument("--no-fsync", action="store_true", help="keep the test server's fsync=off")
    parser.add_argument("--compare-main", metavar="REF", help="also run the single-host rows on git REF")
    parser.add_argument("--single-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    server = None
    dsn = args.dsn
    try:
        if args.single_only:
            await bench_turns(None, folder, args.turns, True)
            return
        import psycopg

        print("load average:", " ".join(Path("/proc/loadavg").read_text().split()[:3]))
        if dsn is None:
            from tests.support.postgres import PostgresServer

            server = await trio.to_thread.run_sync(lambda: PostgresServer().start())
            dsn = server.dsn()
            if not args.no_fsync:

                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("ALTER SYSTEM SET fsync = on")
                    conn.execute("ALTER SYSTEM SET full_page_writes = on")
                    conn.execute("SELECT pg_reload_conf()")
                await trio.sleep(1.0)  # the reload is asynchronous
            with psycopg.connect(dsn, autocommit=True) as conn:
                print("Postgres:", "fsync", conn.execute("SHOW fsync").fetchone()[0],
                      "synchronous_commit", conn.execute("SHOW synchronous_commit").fetchone()[0], flush=True)
        await bench_turns(dsn, folder, args.turns, False)
        await bench_failover(dsn, folder, [int(t) for t in args.tails.split(",") if t])
        if args.compare_main:
            compare_main(args.compare_main, dsn, args.turns)
            print("\n--- single host on this tree, again ---", flush=True)
            await bench_turns(None, folder / "again", args.turns, True)
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    trio.run(main)
