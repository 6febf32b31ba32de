"""Cluster benchmarks: HTTP appends/s on 1 host vs 2 hosts, what the Postgres append adds, and failover time.

Everything runs in one go on this machine, against real processes: a
throwaway Postgres (as the tests start it: ``tests/support/postgres.py``,
loopback TCP, ``fsync=off`` but ``synchronous_commit`` on; pass ``--dsn``
for a real one) and ``durable-sessions serve`` hosts on loopback ports.

**1. Throughput** (``appends/s``). The load generator is ``wrk`` (Debian
package ``wrk``; C, one thread per instance, a Lua script making each
request a ``POST /v1/sessions/<prefix><n>/messages`` with a fresh message
id over ``--sessions`` sessions), so the client is not the bottleneck.
Configurations, each for ``--seconds`` after a warm-up that wakes every
session where it is measured:

* ``single``: one host without ``--cluster`` (the single-host default);
* ``1 host``: one cluster host;
* ``2 hosts, direct``: two cluster hosts, one wrk each, each sending only
  the sessions its host owns -- what a client that follows
  ``X-Durable-Sessions-Owner`` does; the issue's goal is >= 1.7x ``1 host``;
* ``2 hosts, spread``: both wrk instances send all sessions, so half the
  requests are forwarded once (what a client that ignores the owner pays).

**2. Latency of the durable write** (``p50`` / ``p99``): one wrk
connection appending in a closed loop, ``single`` against ``1 host`` (every
acknowledged write is durable in Postgres first); the difference is what
the Postgres append adds per write.

**3. Failover time** as a function of the log tail since the last
snapshot: a session on host A gets ``N`` appends (snapshots disabled with a
huge ``snapshot_bytes``, so the tail is all of them), ``--settle`` seconds
later (a moment of A's renewal cycle) A is killed with ``kill -9``, and host B is polled with a read until it answers. Reported:
the time from the kill to B's first answer (lease wait included), and B's
restore time (``restore_s`` of ``GET /v1/actors``).

Run: ``.venv/bin/python benchmarks/bench_cluster.py [--seconds 10] [--lease 2] [--tails 0,1000,10000]``
(about 3-5 minutes on 2 cores). Without ``wrk`` on ``PATH`` parts 1 and 2
are skipped with a note (``apt-get install wrk``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.cluster_hosts import ClusterHost, wait_until  # noqa: E402
from tests.support.postgres import PostgresServer  # noqa: E402
from tests.support.processes import cli_env  # noqa: E402

TEXT = ("I need to change my flight to Friday morning and keep the same seat if possible, "
        "the booking reference is in my email from last week")

WRK_SCRIPT = r"""
-- One POST /v1/sessions/<prefix><n>/messages per request, a fresh message id each time.
local counter = 0
local prefix = os.getenv("BENCH_PREFIX")
local sessions = tonumber(os.getenv("BENCH_SESSIONS"))
local run = os.getenv("BENCH_RUN")
local text = os.getenv("BENCH_TEXT")
local headers = {["Content-Type"] = "application/json"}

request = function()
  counter = counter + 1
  local session = prefix .. (counter % sessions)
  local body = '{"message":{"id":"' .. run .. '-' .. counter .. '","role":"user","parts":[{"type":"text","text":"'
    .. text .. '"}]}}'
  return wrk.format("POST", "/v1/sessions/" .. session .. "/messages", headers, body)
end
"""


# -- hosts ------------------------------------------------------------------------------------------


def start_host(folder: Path, name: str, dsn: str | None, lease_s: float, extra: list[str] = ()) -> ClusterHost:
    argv = ["--idle-timeout", "600", *extra]
    if dsn is not None:
        argv += ["--cluster", dsn, "--lease", str(lease_s)]
    host = ClusterHost(name, folder / name, argv, {**cli_env(None), "PYTHONUNBUFFERED": "1"})
    host.start()
    return host


def stop_all(hosts: list[ClusterHost]) -> None:
    for host in hosts:
        host.stop()


def warm(url: str, prefix: str, sessions: int) -> None:
    """One append per session through ``url`` (wakes it there; in a cluster the first host to ask owns it)."""
    with httpx.Client(timeout=60) as http:
        for n in range(sessions):
            response = http.post(f"{url}/v1/sessions/{prefix}{n}/messages",
                                 json={"message": {"id": f"warm-{uuid.uuid4().hex}", "role": "user", "parts": []}})
            response.raise_for_status()


# -- wrk ---------------------------------------------------------------------------------------------


def run_wrk(targets: list[tuple[str, str]], sessions: int, seconds: float, connections: list[int],
            script: Path, latency: bool = False) -> list[dict]:
    """Run one wrk per ``(url, prefix)`` at once (with ``connections[i]`` connections); their parsed reports."""
    procs = []
    for (url, prefix), count in zip(targets, connections, strict=True):
        env = {**os.environ, "BENCH_PREFIX": prefix, "BENCH_SESSIONS": str(sessions),
               "BENCH_RUN": uuid.uuid4().hex[:12], "BENCH_TEXT": TEXT}
        argv = ["wrk", "-t1", f"-c{count}", f"-d{seconds:g}s", "-s", str(script), *(["--latency"] if latency
                                                                                         else []), url]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return [parse_wrk(proc.communicate()[0]) for proc in procs]


def parse_wrk(text: str) -> dict:
    found = {"raw": text}
    match = re.search(r"Requests/sec:\s+([\d.]+)", text)
    found["rps"] = float(match.group(1)) if match else 0.0
    match = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    found["errors"] = int(match.group(1)) if match else 0
    match = re.search(r"(\d+) requests in", text)
    found["requests"] = int(match.group(1)) if match else 0
    for label, key in (("50%", "p50"), ("99%", "p99")):
        match = re.search(rf"^\s+{re.escape(label)}\s+([\d.]+)(us|ms|s)\s*$", text, re.MULTILINE)
        if match:
            value, unit = float(match.group(1)), match.group(2)
            found[key] = value / 1000 if unit == "us" else value * 1000 if unit == "s" else value
    return found


def machine_busy() -> tuple[float, float]:
    """``(busy, total)`` CPU jiffies of the whole machine so far (``/proc/stat``)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the parts ----------------------------------------------------------------------------------------


def throughput(folder: Path, dsns: tuple[str, str], args: argparse.Namespace, script: Path) -> dict:
    """Appends/s of each configuration, ``--rounds`` times interleaved; medians.

    Every configuration gets the same total client concurrency: ``2 * --connections`` connections (one
    wrk of that many for one host, two of ``--connections`` for two hosts).
    """
    per = args.connections
    samples: dict[str, list[dict]] = {}
    single = start_host(folder / "single", "single", None, args.lease)
    one = start_host(folder / "one", "one", dsns[0], args.lease)
    a = start_host(folder / "two", "a", dsns[1], args.lease)
    b = start_host(folder / "two", "b", dsns[1], args.lease)
    configs = {
        "single": ([single], [(single.url, "s-", 2 * per)]),
        "1 host": ([one], [(one.url, "o-", 2 * per)]),
        "2 hosts, direct": ([a, b], [(a.url, "a-", per), (b.url, "b-", per)]),
        "2 hosts, spread": ([a, b], [(a.url, "x-", per), (b.url, "x-", per)]),
    }
    try:
        for url, prefix, _ in [t for _, targets in configs.values() for t in targets if t[1] != "x-"]:
            warm(url, prefix, args.sessions)
        with httpx.Client(timeout=60) as http:  # x- sessions: half owned by each host; both wrk send all
            for n in range(args.sessions):
                http.post(f"{(a if n % 2 else b).url}/v1/sessions/x-{n}/messages",
                          json={"message": {"id": f"w-{uuid.uuid4().hex}", "role": "user", "parts": []}})
        for round_ in range(args.rounds):
            for label, (hosts, targets) in configs.items():
                cpu = [cpu_seconds(h.process.pid) for h in hosts]
                busy = machine_busy()
                reports = run_wrk([(url, prefix) for url, prefix, _ in targets], args.sessions, args.seconds,
                                  [c for _, _, c in targets], script)
                after = machine_busy()
                cpu = [round(cpu_seconds(h.process.pid) - c, 1) for h, c in zip(hosts, cpu, strict=True)]
                sample = {"rps": sum(r["rps"] for r in reports), "errors": sum(r["errors"] for r in reports),
                          "cpu": cpu, "busy": round(100 * (after[0] - busy[0]) / max(1, after[1] - busy[1]))}
                samples.setdefault(label, []).append(sample)
                per_append = 1000 * sum(cpu) / max(1, sample["rps"] * args.seconds)
                print(f"  round {round_ + 1} {label:<16} {sample['rps']:7.0f} appends/s   non-2xx "
                      f"{sample['errors']:4d}   host CPU s {cpu} ({per_append:.2f} ms/append)   machine busy "
                      f"{sample['busy']}%", flush=True)
    finally:
        stop_all([single, one, a, b])
    results = {label: {"appends_per_s": round(statistics.median(s["rps"] for s in runs)),
                       "rounds": [round(s["rps"]) for s in runs], "non_2xx": sum(s["errors"] for s in runs),
                       "host_ms_per_append": round(statistics.median(
                           1000 * sum(s["cpu"]) / max(1, s["rps"] * args.seconds) for s in runs), 2),
                       "machine_busy_pct": round(statistics.median(s["busy"] for s in runs))}
               for label, runs in samples.items()}
    ratio = results["2 hosts, direct"]["appends_per_s"] / max(1, results["1 host"]["appends_per_s"])
    results["ratio_2_direct_over_1"] = round(ratio, 2)
    # What two hosts would give with a core each to themselves: twice the per-core rate of the 2-host run.
    per_core = 2 * results["1 host"]["host_ms_per_append"] / results["2 hosts, direct"]["host_ms_per_append"]
    results["ratio_per_host_cpu"] = round(per_core, 2)
    for label, found in results.items():
        if isinstance(found, dict):
            print(f"  median {label:<16} {found['appends_per_s']:7d} appends/s  (rounds {found['rounds']}; "
                  f"{found['host_ms_per_append']} ms host CPU per append, machine {found['machine_busy_pct']}% busy)")
    print(f"  2 hosts (direct) / 1 host = {ratio:.2f}x (goal >= 1.7x); by host CPU per append, two hosts with a core "
          f"each would give {per_core:.2f}x", flush=True)
    return results


def latency(folder: Path, dsn: str, args: argparse.Namespace, script: Path) -> dict:
    """p50/p99 of one connection appending in a closed loop, ``--rounds`` interleaved runs each; medians."""
    single = start_host(folder / "lat", "single", None, args.lease)
    one = start_host(folder / "lat", "one", dsn, args.lease)
    samples: dict[str, list[dict]] = {"single": [], "1 host": []}
    try:
        for host in (single, one):
            warm(host.url, "l-", 1)
        for _ in range(args.rounds):
            for label, host in (("single", single), ("1 host", one)):
                samples[label].append(run_wrk([(host.url, "l-")], 1, args.seconds, [1], script, latency=True)[0])
    finally:
        stop_all([single, one])
    results = {}
    for label, runs in samples.items():
        results[label] = {key: round(statistics.median(r.get(key, 0) for r in runs), 2) for key in ("p50", "p99")}
        results[label]["appends_per_s"] = round(statistics.median(r["rps"] for r in runs))
        print(f"  {label:<8} p50 {results[label]['p50']:6.2f} ms   p99 {results[label]['p99']:6.2f} ms   "
              f"({results[label]['appends_per_s']} appends/s, 1 connection; medians of {args.rounds})", flush=True)
    for key in ("p50", "p99"):
        results[f"added_{key}_ms"] = round(results["1 host"][key] - results["single"][key], 2)
    print(f"  the durable Postgres append adds p50 {results['added_p50_ms']} ms, p99 {results['added_p99_ms']} ms",
          flush=True)
    return results


def failover(folder: Path, dsn: str, args: argparse.Namespace) -> dict:
    results = {}
    for tail in args.tails:
        extra = ["--config", str(_snapshot_config(folder, 1 << 40))]
        a = start_host(folder / f"fo-{tail}", "a", dsn, args.lease, extra)
        b = start_host(folder / f"fo-{tail}", "b", dsn, args.lease, extra)
        session = f"fo-{tail}-{uuid.uuid4().hex[:6]}"
        try:
            with httpx.Client(timeout=60) as http:
                base = f"{a.url}/v1/sessions/{session}"
                http.post(f"{base}/messages", json={"message": {"id": "root", "role": "user", "parts": []}})
                for start in range(0, tail, 50):
                    batch = [{"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": TEXT}]}
                             for i in range(start, min(tail, start + 50))]
                    http.post(f"{base}/messages:batch", json={"messages": batch}).raise_for_status()
                expected = 1 + tail
                time.sleep(args.settle)  # an owner dies at any moment of its renewal cycle, not right after a write
                a.kill()
                killed = time.monotonic()

                def answered():
                    try:
                        response = http.get(f"{b.url}/v1/sessions/{session}/messages:count", timeout=30)
                    except httpx.TransportError:
                        return None
                    return response.status_code == 200 and response.json()["count"] == expected

                wait_until(answered, 120, "the session to answer at b", interval=0.01)
                elapsed = time.monotonic() - killed
                stats = http.get(f"{b.url}/v1/actors").json()["cluster"]
        finally:
            stop_all([a, b])
        results[tail] = {"kill_to_answer_s": round(elapsed, 3), "restore_s": round(stats.get("restore_s", 0), 3)}
        print(f"  tail {tail:6d} appends: kill -> first answer {elapsed:6.2f} s "
              f"(lease {args.lease:g} s), restore {stats.get('restore_s', 0):.3f} s", flush=True)
    return results


def _snapshot_config(folder: Path, snapshot_bytes: int) -> Path:
    path = folder / f"snapshots-{snapshot_bytes}.toml"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[cluster]\npostgres = 'overridden by --cluster'\nsnapshot_bytes = {snapshot_bytes}\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of each wrk run")
    parser.add_argument("--sessions", type=int, default=32, help="sessions per wrk instance")
    parser.add_argument("--connections", type=int, default=8,
                        help="wrk connections per host of the 2-host runs (one host gets twice as many)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repeats of each measurement")
    parser.add_argument("--lease", type=float, default=2.0, help="lease seconds of the cluster hosts")
    parser.add_argument("--tails", default="0,1000,10000", help="failover: log tails (appends) to measure")
    parser.add_argument("--settle", type=float, default=0.0,
                        help="failover: seconds between the last write and the kill (0: at once, when the lease "
                             "was just renewed)")
    parser.add_argument("--dsn", help="Postgres to use (default: a throwaway server)")
    parser.add_argument("--only", choices=("throughput", "latency", "failover"), help="run one part")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    args.tails = [int(t) for t in args.tails.split(",") if t.strip()]
    server = None
    if args.dsn is None:
        server = PostgresServer().start()
        for name in ("bench_one", "bench_two", "bench_other"):
            server.execute(f'CREATE DATABASE "{name}"')
        dsns = (server.dsn("bench_one"), server.dsn("bench_two"), server.dsn("bench_other"))
    else:
        dsns = (args.dsn, args.dsn, args.dsn)
    results: dict = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
            folder = Path(tmp)
            script = folder / "append.lua"
            script.write_text(WRK_SCRIPT)
            have_wrk = shutil.which("wrk") is not None
            if not have_wrk:
                print("wrk not found on PATH: throughput and latency skipped (apt-get install wrk)")
            if have_wrk and args.only in (None, "throughput"):
                print(f"1. HTTP appends/s ({args.sessions} sessions per wrk, {2 * args.connections} connections in "
                      f"all, {args.seconds:g} s each, {args.rounds} rounds):", flush=True)
                results["throughput"] = throughput(folder, dsns[:2], args, script)
            if have_wrk and args.only in (None, "latency"):
                print("2. latency of one acknowledged append (1 connection, closed loop):", flush=True)
                results["latency"] = latency(folder, dsns[2], args, script)
            if args.only in (None, "failover"):
                print("3. failover time after kill -9 of the owner, by log tail since the last snapshot:",
                      flush=True)
                results["failover"] = failover(folder, dsns[2], args)
    finally:
        if server is not None:
            server.close()
    results["load_after"] = os.getloadavg()[0]
    print(f"load average before {results['load_before']:.1f}, after {results['load_after']:.1f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
