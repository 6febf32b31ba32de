"""What the cluster catalog (``ds_catalog``, written with every log entry) costs the host per append.

Host CPU per durable append in cluster mode, measured in one run for two
versions of the code: *before* (the commit before ``storage/cluster/catalog.py``
was added, exported with ``git archive`` into a temporary folder) and
*after* (this checkout). Each measurement is a fresh Python process that
opens one cluster host in process (``open_host(..., cluster=...)``, a
:class:`~actors.SessionAgent` namespace; no HTTP, so the catalog's share is
not diluted by the server), wakes ``--sessions`` sessions, then appends
``--appends`` messages from ``--concurrency`` tasks, and reports its own
CPU time (``time.process_time``: every thread of the host process; Postgres
runs in its own processes and is not counted) divided by the appends.
Each version gets its own fresh database per round (the *before* code
refuses a version-2 schema). Rounds alternate the two versions; the
medians and their ratio are printed.

Part 2 takes out most of the noise of a shared machine: one process of
this checkout appends in ``2 * --phases`` phases, the live actors' catalog
trackers detached in every other phase (their entries then carry no row:
what the host does for the catalog is gone, the statement is the same), and
compares the medians of the two kinds of phase.

Run: ``.venv/bin/python benchmarks/bench_cluster_catalog.py [--rounds 5] [--appends 3000]``
(about a minute on 2 cores; needs ``git`` and the Postgres binaries the tests use).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.postgres import PostgresServer  # noqa: E402

CHILD = r"""
import json, sys, time
import trio
from actors import SessionAgent, SessionConfig
from runtime.host import open_host
from runtime.host.cluster import ClusterOptions

dsn, folder, sessions, appends, concurrency, phases = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
TEXT = "I need to change my flight to Friday morning and keep the same seat if possible"

def msg(i):
    return {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"{TEXT} ({i})"}]}

async def main():
    options = ClusterOptions(dsn, "http://bench", host_id="bench", lease_s=10.0)
    async with open_host(folder, idle_timeout_s=600, cluster=options) as host:
        ns = host.bind("sessions", SessionAgent, env=SessionConfig())
        stubs = [ns.get_by_name(f"s{i}") for i in range(sessions)]
        for i, stub in enumerate(stubs):
            await stub.append_message(msg(-1 - i))
        numbers = iter(range(appends))

        async def worker():
            for n in numbers:
                await stubs[n % sessions].append_message(msg(n))

        if phases:  # the same process, catalog rows on and off by turns: {"on": [...], "off": [...]}
            logs = [slot.placed.log for slot in host.live_slots()]
            trackers = [log.catalog for log in logs]
            found = {"on": [], "off": []}
            for phase in range(2 * phases):
                state = ("on", "off")[phase % 2]
                for log, tracker in zip(logs, trackers):
                    log.catalog = tracker if state == "on" else None
                numbers = iter(range(appends * (phase + 1), appends * (phase + 2)))
                cpu = time.process_time()
                async with trio.open_nursery() as nursery:
                    for _ in range(concurrency):
                        nursery.start_soon(worker)
                found[state].append((time.process_time() - cpu) / appends * 1e6)
            print(json.dumps(found))
            return
        cpu, wall = time.process_time(), time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(worker)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        stats = host.cluster.statistics()
        print(json.dumps({"cpu_us": cpu / appends * 1e6, "appends_per_s": appends / wall,
                          "entries_per_statement": stats.entries / max(1, stats.statements)}))

trio.run(main)
"""


def before_tree(folder: Path) -> Path:
    """The code before the catalog, exported from git into ``folder``."""
    added = subprocess.run(["git", "-C", str(ROOT), "log", "--diff-filter=A", "--format=%H", "--",
                            "storage/cluster/catalog.py"], capture_output=True, text=True, check=True).stdout.split()
    if not added:
        raise SystemExit("storage/cluster/catalog.py is not committed: nothing to compare against")
    target = folder / "before"
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", f"{added[-1]}^"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def measure(root: Path, dsn: str, folder: Path, args: argparse.Namespace, phases: int = 0) -> dict:
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", CHILD, dsn, str(folder), str(args.sessions), str(args.appends),
                           str(args.concurrency), str(phases)], env=env, cwd=str(root), capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"measurement in {root} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of each version")
    parser.add_argument("--sessions", type=int, default=16, help="sessions appended to")
    parser.add_argument("--appends", type=int, default=3000, help="appends per measurement")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent appending tasks")
    parser.add_argument("--phases", type=int, default=8, help="part 2: phases with the catalog on (and as many off)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-catalog-") as tmp:
        folder = Path(tmp)
        roots = {"before": before_tree(folder), "after": ROOT}
        server = PostgresServer().start()
        results: dict[str, list[dict]] = {name: [] for name in roots}
        try:
            for round_no in range(args.rounds):
                for name, root in roots.items():
                    database = server.create_database()
                    try:
                        results[name].append(measure(root, server.dsn(database), folder / f"{name}-{round_no}", args))
                    finally:
                        server.drop_database(database)
                    print(f"round {round_no + 1} {name:6}: {results[name][-1]}", flush=True)
            database = server.create_database()
            try:
                toggled = measure(ROOT, server.dsn(database), folder / "toggled", args, phases=args.phases)
            finally:
                server.drop_database(database)
        finally:
            server.close()
    medians = {name: statistics.median(r["cpu_us"] for r in runs) for name, runs in results.items()}
    rates = {name: statistics.median(r["appends_per_s"] for r in runs) for name, runs in results.items()}
    print(f"\n1. host CPU per append (median of {args.rounds}): before {medians['before']:.0f} us, "
          f"after {medians['after']:.0f} us, ratio {medians['after'] / medians['before']:.3f}")
    print(f"   appends/s (median): before {rates['before']:.0f}, after {rates['after']:.0f}")
    on, off = statistics.median(toggled["on"]), statistics.median(toggled["off"])
    print(f"2. one process, catalog rows on/off by turns ({args.phases} phases each): "
          f"on {on:.0f} us, off {off:.0f} us, ratio {on / off:.3f}")


if __name__ == "__main__":
    main()
