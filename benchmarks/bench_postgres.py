"""Postgres message store against the SQLite one, in one run: medians in milliseconds and ratios.

Run: ``.venv/bin/python benchmarks/bench_postgres.py [--sizes 100,10000] [--dsn DSN]``

Without ``--dsn`` a throwaway server is started as the tests start it
(``tests/support/postgres.py``: loopback TCP, ``fsync=off``, ``synchronous_commit``
on). For each history size N, one session of N messages is loaded into
both stores (``append_chain``, one transaction), then it times, per store:

* ``append`` -- one message under the latest leaf (one transaction);
* ``history`` -- the whole path as one JSON array (``path_json``, what
  ``Session.get_history`` reads);
* ``last-50`` -- the newest 50 messages of the path (``window``, what
  ``get_recent_history`` reads);
* ``search`` -- each of a few queries, 20 hits.

The SQLite store is synchronous on the calling thread (as an actor runs
it); the Postgres provider runs each call on a worker thread
(``storage.postgres.connection``). A third column runs the Postgres
provider's very statements *blocking on the trio thread* (no thread hop)
to show what the hop costs. Last, a driver round trip (``SELECT 1``):
blocking, through ``anyio.to_thread``, and through psycopg's
``AsyncConnection`` with its waits replaced by ``trio.lowlevel`` ones
(the rejected alternative; it relies on psycopg internals).

Messages are ~20-word chunks of the tau-bench airline chats when present,
generated sentences otherwise (``bench_session.Messages``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import psycopg
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_session import Messages, corpus_words  # noqa: E402

from storage import SqlStorage  # noqa: E402
from storage.fts import parse_query  # noqa: E402
from storage.messages import LATEST_LEAF, MessageStore, NewMessage  # noqa: E402
from storage.postgres import PostgresSessionProvider, create_schema  # noqa: E402
from storage.postgres.connection import _in_transaction  # noqa: E402
from tests.support.postgres import PostgresServer  # noqa: E402

QUERIES = ("flight", "cancel reservation", '"gold member"')


class BlockingRunner:
    """The provider's statements run on the calling (trio) thread: no thread hop."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def run(self, op, *, write: bool):
        return _in_transaction(self.conn, op, write)


def new_message(m: dict) -> NewMessage:
    text = " ".join(p["text"] for p in m["parts"])
    return NewMessage(m["id"], m["role"], json.dumps(m, separators=(",", ":")), text, tokens=len(text) // 4)


async def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        if hasattr(result, "__await__"):
            await result
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def row(name: str, lite: float, pg: float, blocking: float) -> None:
    print(f"  {name:<28} {lite:9.3f} {pg:9.3f} {blocking:9.3f}   x{pg / lite:7.1f}   hop +{pg - blocking:6.3f}")


async def bench_size(dsn: str, folder: Path, make: Messages, n: int, repeat: int) -> None:
    sqlite = SqlStorage.open(folder / f"bench-{n}.sqlite3")
    conn = psycopg.connect(dsn, autocommit=True)
    try:
        lite = MessageStore(sqlite, f"s{n}")
        pg = PostgresSessionProvider(conn, f"s{n}")
        blocking = PostgresSessionProvider(conn, f"b{n}")  # its own copy of the session
        blocking._runner = BlockingRunner(conn)
        batch = [new_message(make(i)) for i in range(n)]
        start = time.perf_counter()
        lite.append_chain(batch, None)
        lite_load = time.perf_counter() - start
        start = time.perf_counter()
        await pg.append_chain(batch, None)
        pg_load = time.perf_counter() - start
        await blocking.append_chain(batch, None)
        conn.execute("ANALYZE assistant_messages")
        print(f"\nN = {n:,}: load {lite_load * 1000:.0f} ms sqlite, {pg_load * 1000:.0f} ms postgres (one transaction)")
        print(f"  {'median ms':<28} {'sqlite':>9} {'postgres':>9} {'pg-block':>9}   {'pg/sqlite':>8}")
        counter = iter(range(n, 10**9))

        def one() -> NewMessage:
            return new_message(make(next(counter)))

        def lite_append():
            m = one()
            lite.append(m.id, m.role, m.content, m.text, LATEST_LEAF, tokens=m.tokens)

        async def pg_append(store=pg):
            m = one()
            await store.append(m.id, m.role, m.content, m.text, LATEST_LEAF, tokens=m.tokens)

        row("append", await median_ms(lite_append, repeat), await median_ms(pg_append, repeat),
            await median_ms(lambda: pg_append(blocking), repeat))
        # Each session now holds N + repeat messages (ids differ); each reads its own leaf.
        leaf, pg_leaf, b_leaf = lite.latest_leaf(), await pg.latest_leaf(), await blocking.latest_leaf()
        assert len(lite.path_ids(leaf)) == len(await pg.path_ids(pg_leaf)) == len(await blocking.path_ids(b_leaf))
        reads = max(5, repeat // (10 if n > 1000 else 1))
        row("history (path_json)", await median_ms(lambda: lite.path_json(leaf), reads),
            await median_ms(lambda: pg.path_json(pg_leaf), reads),
            await median_ms(lambda: blocking.path_json(b_leaf), reads))
        row("last-50 (window)", await median_ms(lambda: lite.window(leaf, 0, 50), repeat),
            await median_ms(lambda: pg.window(pg_leaf, 0, 50), repeat),
            await median_ms(lambda: blocking.window(b_leaf, 0, 50), repeat))
        for query in QUERIES:
            parsed = parse_query(query)
            row(f"search {query}", await median_ms(lambda: lite.search(parsed, 20), repeat),
                await median_ms(lambda: pg.search(parsed, 20), repeat),
                await median_ms(lambda: blocking.search(parsed, 20), repeat))
    finally:
        conn.close()
        sqlite.close()


# -- Session level ----------------------------------------------------------------------------


class Quiet:
    """A broadcaster that drops payloads (a real agent has one: each append then broadcasts its estimate)."""

    def __call__(self, text: str) -> None:
        pass


def session_spec():
    """The host's default session: soul, memory (1100 tokens), cached prompt, compaction above 100k tokens."""
    from actors.session_agent import SessionConfig

    return SessionConfig().spec


async def bench_session_size(storage_pg: Any, folder: Path, make: Messages, n: int, repeat: int) -> None:
    """append / history / last-50 / search / wake through the Session, SQLite file vs Postgres pool."""
    from actors.session import Session

    spec = session_spec()
    path = folder / f"session-{n}.sqlite3"
    sqlite = SqlStorage.open(path)
    sid = f"session-{n}"
    lite = Session(sqlite, spec=spec, broadcaster=Quiet())
    pg = Session(storage_pg, spec=spec, session_id=sid, broadcaster=Quiet())
    batch = [make(i) for i in range(n)]
    for session in (lite, pg):
        await session.append_messages(batch)
        await session.freeze_system_prompt()
    counter = iter(range(n, 10**9))
    print(f"\nSession, N = {n:,} (the host's default spec, a broadcaster; pool of the host's settings)")
    print(f"  {'median ms':<28} {'sqlite':>9} {'postgres':>9}   {'pg/sqlite':>8}")
    results = {}

    async def both(name: str, lite_fn, pg_fn, times: int) -> None:
        for fn in (lite_fn, pg_fn):  # warm up: caches, pool connections, plans
            await median_ms(fn, max(3, times // 10))
        results[name] = (await median_ms(lite_fn, times), await median_ms(pg_fn, times))
        lite_ms, pg_ms = results[name]
        print(f"  {name:<28} {lite_ms:9.3f} {pg_ms:9.3f}   x{pg_ms / lite_ms:7.1f}")

    await both("append_message", lambda: lite.append_message(make(next(counter))),
               lambda: pg.append_message(make(next(counter))), repeat)
    reads = max(5, repeat // (10 if n > 1000 else 1))
    await both("get_history", lite.get_history, pg.get_history, reads)
    await both("last-50 (get_recent_history)", lambda: lite.get_recent_history(0, 50),
               lambda: pg.get_recent_history(0, 50), repeat)
    for query in QUERIES:
        await both(f"search {query}", lambda q=query: lite.search(q), lambda q=query: pg.search(q), repeat)

    async def lite_wake() -> None:
        nonlocal sqlite
        sqlite.close()
        sqlite = SqlStorage.open(path)
        woken = Session(sqlite, spec=spec, broadcaster=Quiet())
        await woken.freeze_system_prompt()
        await woken.get_latest_leaf()

    async def pg_wake() -> None:
        woken = Session(storage_pg, spec=spec, session_id=sid, broadcaster=Quiet())
        await woken.freeze_system_prompt()
        await woken.get_latest_leaf()

    await both("wake (+ prompt, leaf)", lite_wake, pg_wake, max(20, repeat // 5))
    sqlite.close()


async def bench_sessions(dsn: str, sizes: list[int], repeat: int) -> None:
    from storage.postgres import open_postgres_storage

    make = Messages(corpus_words())
    async with open_postgres_storage(dsn) as storage:
        with tempfile.TemporaryDirectory() as folder:
            for n in sizes:
                await bench_session_size(storage, Path(folder), make, n, repeat)


class TrioWaitConnection(psycopg.AsyncConnection):
    """psycopg's AsyncConnection with trio waits (the rejected alternative; internals)."""

    async def wait(self, gen, interval=None):
        from psycopg.waiting import Ready, Wait

        fd = self.pgconn.socket
        try:
            state = next(gen)
            while True:
                if state == Wait.W:
                    await trio.lowlevel.wait_writable(fd)
                    state = gen.send(Ready.W)
                else:
                    await trio.lowlevel.wait_readable(fd)
                    state = gen.send(Ready.R)
        except StopIteration as done:
            return done.value


async def bench_round_trip(dsn: str, repeat: int) -> None:
    conn = psycopg.connect(dsn, autocommit=True)
    try:
        def select() -> None:
            conn.execute("SELECT 1").fetchone()

        blocking = await median_ms(select, repeat)
        hop = await median_ms(lambda: anyio.to_thread.run_sync(select), repeat)
        trio_conn = TrioWaitConnection(psycopg.pq.PGconn.connect(conn.info.dsn.encode() + b" password=''"))
        trio_conn._autocommit = True
        cur = trio_conn.cursor()

        async def trio_select() -> None:
            await cur.execute("SELECT 1")
            await cur.fetchone()

        waits = await median_ms(trio_select, repeat)
        print(f"\nSELECT 1 round trip, median ms: blocking {blocking:.3f}, worker thread {hop:.3f}, "
              f"AsyncConnection+trio waits {waits:.3f}")
    finally:
        conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,10000")
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--dsn", help="an existing database (the schema is created in it)")
    parser.add_argument("--level", choices=("provider", "session", "both"), default="both",
                        help="the message stores alone, the Session over them, or both (default)")
    args = parser.parse_args()
    server = None
    dsn = args.dsn
    if dsn is None:
        server = await trio.to_thread.run_sync(lambda: PostgresServer().start())
        dsn = server.dsn()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            await create_schema(conn)
            conn.execute("DELETE FROM assistant_messages WHERE session_id ~ '^[sb][0-9]+$'")
        make = Messages(corpus_words())
        sizes = [int(s) for s in args.sizes.split(",")]
        if args.level in ("provider", "both"):
            with tempfile.TemporaryDirectory() as folder:
                for n in sizes:
                    await bench_size(dsn, Path(folder), make, n, args.repeat)
            await bench_round_trip(dsn, args.repeat * 5)
        if args.level in ("session", "both"):
            await bench_sessions(dsn, sizes, args.repeat)
    finally:
        if server is not None:
            server.close()


if __name__ == "__main__":
    trio.run(main)
