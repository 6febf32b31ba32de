"""What point-in-time restore costs: Postgres bytes kept for the window, and the time of a restore.

One cluster host in process on the tests' throwaway Postgres (``open_host(..., cluster=...)``, a
:class:`~actors.SessionAgent` namespace, no HTTP), default snapshot threshold (1 MiB):

1. **Bytes kept per 1,000 appends.** One session gets ``--appends`` messages (one append each, a
   realistic 100-character text), once with the point-in-time window off (``pitr_window_s=0``: the
   log is trimmed behind each snapshot) and once with the default window (7 days: everything of the
   window is kept). Reported: log bytes (``ds_log.changeset``) and snapshot bytes (``ds_snapshots.image``,
   compressed) left in Postgres, per 1,000 appends.
2. **Restore time.** A session of ``--messages`` messages (one append each) is restored to the moment
   after half of them and then to its newest moment (the undo); reported: the restore call (read
   snapshot + log, rebuild on a worker thread, ship one whole-file entry) and the first read after it
   (the activation rebuilds the file from the restore's entry).

Run: ``.venv/bin/python benchmarks/bench_cluster_pitr.py [--appends 1000] [--messages 10000]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from actors import SessionAgent, SessionConfig  # noqa: E402
from runtime.host import open_host  # noqa: E402
from runtime.host.cluster import ClusterOptions  # noqa: E402
from storage.schema import SCHEMA_VERSION  # noqa: E402
from tests.support.postgres import PostgresServer  # noqa: E402

TEXT = "I need to change my flight to Friday morning and keep the same seat if possible, thanks a lot"


def msg(i: int) -> dict:
    return {"id": f"m{i}", "role": "user" if i % 2 else "assistant", "parts": [{"type": "text", "text": f"{TEXT} {i}"}]}


def kept(dsn: str) -> tuple[int, int, int, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        log = conn.execute("SELECT count(*), coalesce(sum(octet_length(changeset)), 0) FROM ds_log").fetchone()
        snaps = conn.execute("SELECT count(*), coalesce(sum(octet_length(image)), 0) FROM ds_snapshots").fetchone()
    return int(log[0]), int(log[1]), int(snaps[0]), int(snaps[1])


def server_ms(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return int(conn.execute("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint").fetchone()[0])


async def fill(dsn: str, folder: Path, appends: int, window_s: float) -> None:
    options = ClusterOptions(dsn, "http://bench", host_id="bench", lease_s=10.0, pitr_window_s=window_s)
    async with open_host(folder, idle_timeout_s=600, cluster=options) as host:
        stub = host.bind("sessions", SessionAgent, env=SessionConfig()).get_by_name("s")
        for i in range(appends):
            await stub.append_message(msg(i))
        await trio.sleep(1.0)  # a snapshot under way is stored


async def restore_times(dsn: str, folder: Path, messages: int) -> None:
    options = ClusterOptions(dsn, "http://bench", host_id="bench", lease_s=10.0)
    async with open_host(folder, idle_timeout_s=600, cluster=options) as host:
        namespace = host.bind("sessions", SessionAgent, env=SessionConfig())
        stub = namespace.get_by_name("big")
        half = None
        started = time.perf_counter()
        for i in range(messages):
            await stub.append_message(msg(i))
            if i + 1 == messages // 2:
                await trio.sleep(0.01)
                half = server_ms(dsn)
                await trio.sleep(0.01)
        print(f"  {messages} appends in {time.perf_counter() - started:.1f} s; Postgres keeps "
              "log %d rows / %d bytes, snapshots %d / %d bytes" % kept(dsn))
        assert half is not None
        token, _bookmark, _now = await host.cluster.bookmark(stub.id, half)
        template = host.data_dir / "_template" / f"v{SCHEMA_VERSION}.sqlite3"
        for label, target in (("to the middle", token), ("back (undo)", None)):
            await host.hibernate(namespace, stub.id)
            began = time.perf_counter()
            outcome = await host.cluster.restore(stub.id, target or undo, path=host.path_for(stub.id),
                                                 template=template, durability=host.durability)
            took = time.perf_counter() - began
            began = time.perf_counter()
            count = len(await stub.get_history())
            read = time.perf_counter() - began
            undo = outcome.undo
            print(f"  restore {label}: {took * 1000:.0f} ms (snapshot at entry {outcome.base_seq} + "
                  f"{outcome.replayed} entries replayed, {outcome.messages} messages); first read after it "
                  f"(activation from the restore entry, {count} messages): {read * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--appends", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=10_000)
    args = parser.parse_args()
    server = PostgresServer().start()
    try:
        print(f"1. Postgres bytes kept after {args.appends} appends to one session (per 1,000 appends):")
        for label, window_s in (("window off (pitr_days = 0)", 0.0), ("window 7 days (default)", 7 * 86_400.0)):
            dsn = server.dsn(server.create_database())
            with tempfile.TemporaryDirectory() as folder:
                trio.run(fill, dsn, Path(folder), args.appends, window_s)
            rows, log_bytes, snapshots, snapshot_bytes = kept(dsn)
            per = 1000 / args.appends
            print(f"  {label}: log {rows} rows, {log_bytes * per / 1024:.0f} KiB; snapshots {snapshots}, "
                  f"{snapshot_bytes * per / 1024:.0f} KiB; total {(log_bytes + snapshot_bytes) * per / 1024:.0f} KiB")
        print(f"2. Restore of a {args.messages}-message session:")
        dsn = server.dsn(server.create_database())
        with tempfile.TemporaryDirectory() as folder:
            trio.run(restore_times, dsn, Path(folder), args.messages)
    finally:
        server.close()


if __name__ == "__main__":
    main()
