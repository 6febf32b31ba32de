"""What the session catalog costs a Postgres-mode append, in one run: with its triggers and without.

Run: ``.venv/bin/python benchmarks/bench_postgres_catalog.py [--appends 2000] [--rounds 5]``

A throwaway server is started as the tests start it (``tests/support/postgres.py``:
loopback TCP, ``fsync=off``, ``synchronous_commit`` on) with two databases
of the current schema: "before" with the catalog's triggers disabled
(``ALTER TABLE ... DISABLE TRIGGER USER``: an append as before schema
version 3), "after" with them. Each round makes one session per database,
named as a ``serve --postgres`` host names it (``assistant_config``
``actor_name``), and appends to both *alternately, one append each*, so
both modes see the same machine load (a shared machine's load moves more
than the difference measured). Each append is ``PostgresSessionProvider.append``
under the latest leaf on a pool (one transaction: the host's path below
the Session). Printed: the median append in milliseconds per mode, and
the ratio after / before.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import psycopg
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from storage.postgres import PostgresStorage, create_schema  # noqa: E402
from tests.support.postgres import PostgresServer  # noqa: E402

TABLES = ("assistant_messages", "assistant_compactions", "assistant_config", "cf_agents_context_blocks",
          "cf_agents_search_entries")


def _triggers(dsn: str, on: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in TABLES:
            conn.execute(f"ALTER TABLE {table} {'ENABLE' if on else 'DISABLE'} TRIGGER USER")


def _content(index: int) -> str:
    return f'{{"id":"m{index}","role":"user","parts":[{{"type":"text","text":"message {index}"}}]}}'


async def run(dsns: dict[str, str], appends: int, rounds: int) -> dict[str, float]:
    """Median append (ms) per mode; the modes' appends alternate one by one, so both see the same load."""
    import psycopg_pool

    pools = {label: psycopg_pool.ConnectionPool(dsn, min_size=2, max_size=2, open=True)
             for label, dsn in dsns.items()}
    try:
        samples: dict[str, list[float]] = {label: [] for label in dsns}
        for round_no in range(rounds):
            stores = {}
            for label, pool in pools.items():
                stores[label] = PostgresStorage(pool).messages(f"{round_no:02}" + "0" * 62)
                await stores[label].set_config("actor_name", f"chat-{round_no}")
            for index in range(appends):
                for label, store in stores.items():
                    start = time.perf_counter()
                    await store.append(f"m{index}", "user", _content(index), f"message {index}", tokens=5)
                    samples[label].append((time.perf_counter() - start) * 1000)
    finally:
        for pool in pools.values():
            pool.close()
    return {label: statistics.median(values) for label, values in samples.items()}


async def _prepare(dsns: dict[str, str]) -> None:
    for label, dsn in dsns.items():
        with psycopg.connect(dsn, autocommit=True) as conn:
            await create_schema(conn)
        _triggers(dsn, label == AFTER)


BEFORE, AFTER = "before (no catalog)", "after (catalog)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=2000, help="appends per round and mode")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    server = PostgresServer().start()
    try:
        dsns = {label: server.dsn(server.create_database("template0")) for label in (BEFORE, AFTER)}
        trio.run(_prepare, dsns)
        medians = trio.run(run, dsns, args.appends, args.rounds)
    finally:
        server.close()
    before, after = medians[BEFORE], medians[AFTER]
    print(f"append, median of {args.rounds} x {args.appends} (ms): before {before:.3f}  after {after:.3f}  "
          f"ratio {after / before:.2f}x  (+{(after - before) * 1000:.0f} us)")


if __name__ == "__main__":
    main()
