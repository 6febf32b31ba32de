"""Rolling restart: three real ``serve --cluster`` hosts restarted one after another (SIGTERM) under writers.

Writers use the multi-URL Python client (``SessionsClient`` given the three
URLs, its default retries and deadline), one session each, one append at a
time; sessions start spread over the hosts. Each host in turn gets SIGTERM,
must exit 0, and is started again on its port; the next host goes once every
writer was acknowledged again. The driver is the test's
(``tests/cluster/test_rolling_restart.py``: it also checks the final
histories through every host). Reported:

* **failed calls**: calls the client raised (goal 0);
* **lost or duplicated acknowledged writes** (goal 0): an acknowledged
  message missing from, out of order in, or twice in the final history;
* **handover time**: for each session the stopped host owned, the seconds
  from the SIGTERM until another host acknowledged a write of it (p50, p99,
  max); the client meanwhile retries elsewhere.

Run: ``.venv/bin/python benchmarks/bench_rolling_restart.py [--writers 12] [--rounds 2] [--lease 10]``
(about a minute per round on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cluster.test_rolling_restart import rolling_restart  # noqa: E402
from tests.support.cluster_hosts import run_cluster  # noqa: E402
from tests.support.postgres import PostgresServer  # noqa: E402


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writers", type=int, default=12, help="writers (one session each)")
    parser.add_argument("--rounds", type=int, default=2, help="rolling restarts of all three hosts")
    parser.add_argument("--lease", type=float, default=10.0, help="lease seconds (a clean stop releases its leases)")
    args = parser.parse_args()
    print("load average:", " ".join(Path("/proc/loadavg").read_text().split()[:3]), flush=True)
    server = await trio.to_thread.run_sync(lambda: PostgresServer().start())
    handovers: list[float] = []
    failures: list[str] = []
    exits: list[float] = []
    lost = acknowledged = 0
    try:
        for round_ in range(args.rounds):
            database = f"rolling_{round_}"
            server.execute(f'CREATE DATABASE "{database}"')
            with tempfile.TemporaryDirectory(prefix="bench-rolling-") as tmp, \
                    run_cluster(Path(tmp), server.dsn(database), hosts=3, lease_s=args.lease, app=None) as cluster:
                try:
                    found = await rolling_restart(cluster, args.writers)
                except AssertionError as exc:  # a final history that lost or duplicated an acknowledged write
                    lost += 1
                    print(f"  round {round_ + 1}: {exc}", flush=True)
                    continue
            handovers += found["handover_s"]
            failures += found["failures"]
            acknowledged += found["acknowledged"]
            times = found["handover_s"]
            exits.extend(found["exit_s"])
            print(f"  round {round_ + 1}: exit statuses {found['statuses']} after "
                  f"{', '.join(f'{s:.1f}' for s in found['exit_s'])} s, {found['acknowledged']} writes "
                  f"acknowledged, {len(found['failures'])} failed calls, {len(times)} handovers "
                  f"(p50 {pct(times, 50):.3f} s, max {max(times):.3f} s)", flush=True)
    finally:
        server.close()
    print(f"\nfailed calls: {len(failures)}  (goal 0)")
    for failure in failures[:10]:
        print(f"  {failure}")
    print(f"rounds whose histories lost or duplicated an acknowledged write: {lost}  (goal 0)")
    print(f"acknowledged writes checked: {acknowledged}")
    if handovers:
        print(f"handover, SIGTERM -> acknowledged on another host ({len(handovers)} sessions): "
              f"p50 {pct(handovers, 50):.3f} s, p99 {pct(handovers, 99):.3f} s, max {max(handovers):.3f} s, "
              f"mean {statistics.fmean(handovers):.3f} s")
    if exits:
        print(f"SIGTERM -> exit: p50 {pct(exits, 50):.2f} s, max {max(exits):.2f} s")
    print(f"load average after: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    trio.run(main)
