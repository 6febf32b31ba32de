"""Cluster capacity model: Postgres CPU per durable append and per lease renewal, host CPU per append.

One run measures, against real processes on this machine (a throwaway
Postgres started as the tests start it, ``tests/support/postgres.py``, with
``fsync`` switched back on unless ``--no-fsync``; ``durable-sessions serve``
hosts on loopback, started as ``benchmarks/bench_cluster.py`` starts them):

1. **Appends.** A ``single`` host (no ``--cluster``) and a ``cluster`` host
   (``--cluster``, one host) get the same workload: ``--appends`` appends
   ``POST /v1/sessions/<s>/messages`` (a fresh message id each, the text of
   ``bench_cluster.TEXT``) over ``--sessions`` sessions already awake, from
   ``C`` concurrent HTTP connections (each ``C`` of ``--concurrency``;
   ``1``: one append at a time, no group commit; ``16``: appends of
   different actors share Postgres statements). Rounds are interleaved
   (``--rounds``) and medians kept. Measured per append: the host
   process's CPU (all its threads, ``/proc/<pid>/task/*/schedstat``,
   nanoseconds), Postgres' CPU (every process of *this* server: the
   postmaster, its live children -- backends, WAL writer, checkpointer,
   autovacuum -- and the children it reaped, from ``/proc``), the log
   entries and statements the host sent (``GET /v1/actors``). The load
   generator runs in this process; its CPU is not counted. Postgres'
   background CPU, measured for ``--window`` seconds with the hosts idle,
   is subtracted; "its backends" is the CPU of the backends
   connected to the appending host's database alone. ``--compare-ref main``
   adds a cluster host running another git revision's code to the same
   rounds (a before/after in one run).
2. **Lease renewals.** A third host (``--cluster``, its own database) holds
   ``--idle-actors`` awake, idle actors (``--idle-timeout 600``); every
   ``lease_s / 3`` one ``RENEW`` statement renews all their leases. The CPU
   of the backends serving that database over ``--window`` seconds is
   measured with those leases held and, before, with none (the host's own
   registration renewal and alarm polls); the difference divided by the
   renewals made is the Postgres CPU of one actor's renewal.
3. **Projection.** Appends/s one database core can take (1 / Postgres CPU
   per append), appends/s one host core can serve (1 / host CPU per append),
   and idle leased actors one database core can keep (renewals of one actor:
   ``3 / lease_s`` per second).

Run: ``.venv/bin/python benchmarks/bench_cluster_capacity.py [--appends 3000] [--rounds 3] [--compare-ref main]``
(5-15 minutes on 2 cores, depending on their load). Absolute figures move with the machine's
load (printed); the ratios of one run are what to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(Path(__file__).resolve().parent))

from bench_cluster import TEXT, machine_busy, start_host, stop_all  # noqa: E402

from tests.support.cluster_hosts import ClusterHost  # noqa: E402
from tests.support.postgres import PostgresServer  # noqa: E402
from tests.support.processes import cli_env  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


# -- CPU of one Postgres server ------------------------------------------------------------------------


def postmaster_pid(server: PostgresServer) -> int:
    """The pid of ``server``'s postmaster (first line of ``postmaster.pid``)."""
    return int((server.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])


def task_cpu_s(pid: int) -> float:
    """CPU seconds of every thread of process ``pid`` so far (``/proc/<pid>/task/*/schedstat``: nanoseconds)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
        except (OSError, IndexError):
            continue
    return total / 1e9


def server_cpu_s(postmaster: int) -> float:
    """CPU seconds used so far by the Postgres server whose postmaster is ``postmaster``.

    The postmaster's and each live child's (``ppid == postmaster``: backends, WAL writer,
    checkpointer, autovacuum; nanoseconds from ``schedstat``), plus what its reaped children used
    (``cutime``/``cstime``, clock ticks: backends that exited). Other Postgres servers on the
    machine are not counted.
    """
    fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    total = (int(fields[13]) + int(fields[14])) / TICK + task_cpu_s(postmaster)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == postmaster:
                total += task_cpu_s(int(name))
        except (OSError, ValueError):
            continue
    return total


class Backends:
    """CPU of the backends serving one database (``pg_stat_activity``): the statements' own work, no
    background processes. ``start()`` then ``seconds()``: CPU seconds those backends (and any that
    connected since) used in between; a backend that exited meanwhile is not counted."""

    def __init__(self, server: PostgresServer, database: str) -> None:
        self.dsn = server.dsn("postgres")
        self.database = database
        self.before: dict[int, float] = {}

    def _pids(self) -> list[int]:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                                (self.database,)).fetchall()
        return [row[0] for row in rows]

    def _cpu(self, pids: list[int]) -> dict[int, float]:
        found = {}
        for pid in pids:
            try:
                found[pid] = task_cpu_s(pid)
            except OSError:
                continue
        return found

    def start(self) -> None:
        self.before = self._cpu(self._pids())

    def seconds(self) -> float:
        after = self._cpu(self._pids())
        return sum(cpu - self.before.get(pid, 0.0) for pid, cpu in after.items())


# -- load ---------------------------------------------------------------------------------------------


async def append_load(url: str, prefix: str, sessions: int, appends: int, concurrency: int) -> float:
    """``appends`` appends over ``sessions`` sessions from ``concurrency`` connections; the wall seconds.

    Raises:
        RuntimeError: an append was not acknowledged (the benchmark counts acknowledged writes only).
    """
    run = uuid.uuid4().hex[:10]
    counter = iter(range(appends))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:

        async def worker(w: int) -> None:
            for n in counter:
                session = f"{prefix}{n % sessions}"
                body = {"message": {"id": f"{run}-{n}", "role": "user", "parts": [{"type": "text", "text": TEXT}]}}
                response = await http.post(f"/v1/sessions/{session}/messages", json=body)
                if response.status_code != 201:
                    raise RuntimeError(f"append answered {response.status_code}: {response.text[:200]}")

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for w in range(concurrency):
                nursery.start_soon(worker, w)
        return time.perf_counter() - started


async def wake(url: str, prefix: str, sessions: int, concurrency: int = 8) -> None:
    """One append to each of ``sessions`` sessions (activates them at ``url``)."""
    await append_load(url, prefix, sessions, sessions, min(concurrency, sessions))


def cluster_counters(url: str) -> dict:
    """The host's cluster counters (``GET /v1/actors``: ``statements``, ``entries``, ``leases``...)."""
    return httpx.get(f"{url}/v1/actors", timeout=30).json().get("cluster") or {}


# -- the parts ----------------------------------------------------------------------------------------


async def appends(folder: Path, server: PostgresServer, database: str, args: argparse.Namespace) -> dict:
    postmaster = postmaster_pid(server)
    backends = {"cluster": Backends(server, database)}
    single = start_host(folder, "single", None, args.lease)
    cluster = start_host(folder, "cluster", server.dsn(database), args.lease)
    hosts = {"single": single, "cluster": cluster}
    if args.compare_ref:
        backends[f"cluster@{args.compare_ref}"] = Backends(server, database + "_ref")
        hosts[f"cluster@{args.compare_ref}"] = start_ref_host(folder, args.compare_ref, server.dsn(database + "_ref"),
                                                               args.lease)
    samples: dict[tuple[str, int], list[dict]] = {}
    try:
        for host in hosts.values():
            await wake(host.url, "cap-", args.sessions)
        for label, host in hosts.items():  # warm-up: caches, connections, the first snapshots
            await append_load(host.url, "cap-", args.sessions, max(200, args.appends // 10), max(args.concurrency))
        base = await trio.to_thread.run_sync(idle_rate, postmaster, args.window)
        print(f"  Postgres with both hosts idle: {1000 * base:.2f} ms CPU/s (background; subtracted)", flush=True)
        for round_ in range(args.rounds):
            for concurrency in args.concurrency:
                for label, host in hosts.items():
                    counters = cluster_counters(host.url)
                    measured = backends.get(label, backends["cluster"])  # single: the idle cluster's (noise)
                    measured.start()
                    host0, pg0, busy0 = task_cpu_s(host.process.pid), server_cpu_s(postmaster), machine_busy()
                    wall = await append_load(host.url, "cap-", args.sessions, args.appends, concurrency)
                    host1, pg1, busy1 = task_cpu_s(host.process.pid), server_cpu_s(postmaster), machine_busy()
                    statements_s = measured.seconds()
                    after = cluster_counters(host.url)
                    n = args.appends
                    sample = {
                        "host_ms": 1000 * (host1 - host0) / n, "pg_ms": 1000 * (pg1 - pg0 - base * wall) / n,
                        "pg_backend_ms": 1000 * statements_s / n, "rate": n / wall,
                        "busy": 100 * (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]),
                        "statements": after.get("statements", 0) - counters.get("statements", 0),
                        "entries": after.get("entries", 0) - counters.get("entries", 0),
                    }
                    samples.setdefault((label, concurrency), []).append(sample)
                    per_statement = (f"  {n / sample['statements']:4.1f} appends/statement"
                                     if sample["statements"] else "")
                    print(f"  round {round_ + 1} c={concurrency:<3} {label:<8} {sample['rate']:6.0f} appends/s  "
                          f"host {sample['host_ms']:5.3f} ms/append  Postgres {sample['pg_ms']:5.3f} ms/append "
                          f"(its backends {sample['pg_backend_ms']:5.3f})"
                          f"{per_statement}  machine {sample['busy']:3.0f}% busy", flush=True)
    finally:
        stop_all(list(hosts.values()))
    results: dict = {}
    for (label, concurrency), runs in samples.items():
        results.setdefault(f"c={concurrency}", {})[label] = {
            key: round(statistics.median(r[key] for r in runs), 3)
            for key in ("host_ms", "pg_ms", "pg_backend_ms", "rate", "busy", "statements", "entries")}
    for shape in results.values():
        for label in [label for label in shape if label.startswith("cluster")]:
            shape[label]["host_ratio"] = round(shape[label]["host_ms"] / shape["single"]["host_ms"], 2)
    return results


def start_ref_host(folder: Path, ref: str, dsn: str, lease_s: float) -> ClusterHost:
    """A cluster host running the code of git ``ref`` (a ``git archive`` put first on its ``PYTHONPATH``)."""
    tree = folder / f"ref-{ref.replace('/', '_')}"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    env = {**cli_env(None), "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(tree)}
    host = ClusterHost(f"ref-{ref}", folder / f"ref-{ref.replace('/', '_')}-data",
                       ["--idle-timeout", "600", "--cluster", dsn, "--lease", str(lease_s)], env)
    host.start()
    return host


def idle_rate(postmaster: int, seconds: float) -> float:
    """Postgres' CPU seconds per second over ``seconds`` of this thread sleeping."""
    pg0, started = server_cpu_s(postmaster), time.monotonic()
    time.sleep(seconds)
    return (server_cpu_s(postmaster) - pg0) / (time.monotonic() - started)


async def renewals(folder: Path, server: PostgresServer, database: str, args: argparse.Namespace) -> dict:
    backends = Backends(server, database)
    host = start_host(folder, "idle", server.dsn(database), args.lease)
    try:
        await trio.sleep(args.lease)  # joined, first renewals made

        def window() -> tuple[float, float, float]:
            backends.start()
            host0, started = task_cpu_s(host.process.pid), time.monotonic()
            time.sleep(args.window)
            return backends.seconds(), task_cpu_s(host.process.pid) - host0, time.monotonic() - started

        base_pg, _, base_wall = await trio.to_thread.run_sync(window)
        started = time.perf_counter()
        await wake(host.url, "idle-", args.idle_actors)
        woke = time.perf_counter() - started
        held = cluster_counters(host.url).get("leases", 0)
        await trio.sleep(args.lease)  # the activations' own statements are done
        pg, host_s, wall = await trio.to_thread.run_sync(window)
    finally:
        stop_all([host])
    statements = wall / (args.lease / 3)
    count = held * statements
    extra_pg = pg - base_pg * wall / base_wall
    results = {
        "idle_actors": held, "window_s": round(wall, 1), "renew_statements": round(statements, 1),
        "renewals": round(count), "pg_baseline_ms_per_s": round(1000 * base_pg / base_wall, 3),
        "pg_ms_per_s": round(1000 * pg / wall, 3),
        "pg_us_per_renewal": round(1e6 * extra_pg / max(1, count), 3),
        "pg_ms_per_renew_statement": round(1000 * extra_pg / max(1, statements), 3),
        # An upper bound: all the idle host's CPU in the window (its alarm polls and timers too).
        "host_us_per_renewal_at_most": round(1e6 * host_s / max(1, count), 3),
        "wake_ms_per_actor": round(1000 * woke / max(1, args.idle_actors), 2),
    }
    print(f"  {held} idle leased actors, lease {args.lease:g} s: {statements:.0f} RENEW statements "
          f"({count:.0f} renewals) in {wall:.1f} s; the host's backends used {results['pg_ms_per_s']} ms CPU/s "
          f"against {results['pg_baseline_ms_per_s']} ms/s with no leases -> {results['pg_us_per_renewal']} us per "
          f"renewal ({results['pg_ms_per_renew_statement']} ms per RENEW statement); host "
          f"at most {results['host_us_per_renewal_at_most']} us per renewal", flush=True)
    return results


def projection(found: dict, lease_s: float) -> dict:
    """Appends/s per database core and per host core; idle leased actors per database core."""
    out: dict = {}
    for shape, rows in found["appends"].items():
        cluster = rows["cluster"]
        out[shape] = {
            "appends_per_db_core": round(1000 / cluster["pg_ms"]) if cluster["pg_ms"] > 0 else None,
            "appends_per_host_core_cluster": round(1000 / cluster["host_ms"]),
            "appends_per_host_core_single": round(1000 / rows["single"]["host_ms"]),
        }
    renew = found["renewals"]["pg_us_per_renewal"]
    if renew > 0:
        out["idle_actors_per_db_core"] = {}
        for lease in sorted({lease_s, 10.0}):
            out["idle_actors_per_db_core"][f"lease {lease:g} s"] = round(1e6 / renew / (3 / lease))
    return out


def print_table(found: dict) -> None:
    print("\n| shape | mode | appends/s | host CPU ms/append | Postgres CPU ms/append (its backends) | "
          "appends/statement |\n|---|---|---:|---:|---:|---:|")
    for shape, rows in found["appends"].items():
        for label in [label for label in rows if label != "host_ratio"]:
            r = rows[label]
            per = f"{found['args']['appends'] / r['statements']:.1f}" if r["statements"] else "-"
            pg = f"{r['pg_ms']:.3f} ({r['pg_backend_ms']:.3f})" if label != "single" else "-"
            print(f"| {shape} | {label} | {r['rate']:.0f} | {r['host_ms']:.3f} | {pg} | {per} |")
        for label in [label for label in rows if label.startswith("cluster")]:
            print(f"| {shape} | {label} / single host CPU | | **{rows[label]['host_ratio']:.2f}x** | | |")
    r = found["renewals"]
    print(f"\nlease renewal: {r['pg_us_per_renewal']} us Postgres CPU per actor renewed "
          f"({r['pg_ms_per_renew_statement']} ms per RENEW of {r['idle_actors']} leases), "
          f"host at most {r['host_us_per_renewal_at_most']} us")
    print("\nprojection:")
    for key, value in found["projection"].items():
        print(f"  {key}: {value}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--appends", type=int, default=3000, help="appends per measured run")
    parser.add_argument("--sessions", type=int, default=32, help="sessions the appends are spread over")
    parser.add_argument("--concurrency", default="1,16", help="concurrent connections of each shape")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repeats; medians kept")
    parser.add_argument("--lease", type=float, default=2.0, help="lease seconds of the cluster hosts")
    parser.add_argument("--idle-actors", type=int, default=1000, help="idle leased actors of the renewal part")
    parser.add_argument("--window", type=float, default=10.0, help="seconds of each renewal measurement")
    parser.add_argument("--no-fsync", action="store_true", help="keep the test server's fsync=off")
    parser.add_argument("--compare-ref", metavar="REF",
                        help="also measure a cluster host running git REF's code (e.g. main), in the same rounds")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c.strip()]
    found: dict = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0],
                   "args": {"appends": args.appends, "sessions": args.sessions, "lease_s": args.lease,
                            "fsync": not args.no_fsync}}
    print("load average:", " ".join(Path("/proc/loadavg").read_text().split()[:3]), flush=True)
    server = await trio.to_thread.run_sync(lambda: PostgresServer().start())
    try:
        for name in ("cap_appends", "cap_appends_ref", "cap_idle"):
            server.execute(f'CREATE DATABASE "{name}"')
        if not args.no_fsync:
            for setting in ("fsync = on", "full_page_writes = on"):
                server.execute(f"ALTER SYSTEM SET {setting}")
            server.execute("SELECT pg_reload_conf()")
            await trio.sleep(1.0)  # the reload is asynchronous
        with tempfile.TemporaryDirectory(prefix="bench-capacity-") as tmp:
            folder = Path(tmp)
            print(f"1. appends ({args.appends} per run over {args.sessions} sessions, {args.rounds} rounds):",
                  flush=True)
            found["appends"] = await appends(folder, server, "cap_appends", args)
            print("2. lease renewals:", flush=True)
            found["renewals"] = await renewals(folder, server, "cap_idle", args)
    finally:
        server.close()
    found["projection"] = projection(found, args.lease)
    found["load_after"] = os.getloadavg()[0]
    print_table(found)
    print(f"\nload average before {found['load_before']:.1f}, after {found['load_after']:.1f} "
          f"({found['cpus']} CPUs)")
    if args.json:
        args.json.write_text(json.dumps(found, indent=2))


if __name__ == "__main__":
    trio.run(main)
