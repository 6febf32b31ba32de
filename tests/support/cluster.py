"""Helpers for cluster tests: comparing actor files row for row, and one host's storage side without a host.

:func:`file_digest` is what "the same file" means in failover tests: every
ordinary table (FTS5 shadow tables included, the cluster's own marker
excluded) hashed row by row in primary-key order, plus the schema, plus
FTS5 ``integrity-check`` and ``PRAGMA integrity_check``.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import apsw
import trio

from storage.cluster import GroupCommitAppender, Ownership, PgPool, create_cluster_schema
from storage.cluster.capture import MARKER_TABLE


def _tables(con: apsw.Connection) -> list[str]:
    return [name for (name,) in con.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%' "
        "AND name NOT LIKE 'sqlite_%' AND name != ? ORDER BY name", (MARKER_TABLE,))]


def _fts_tables(con: apsw.Connection) -> list[str]:
    return [name for (name,) in con.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%fts5%' "
        "ORDER BY name")]


def file_digest(path: str | Path) -> dict[str, str]:
    """``{table: "<rows> rows <hash>"}`` for every table of the file, plus its schema and integrity checks.

    Opens its own read connection (a fresh one: FTS5 caches are per connection).
    """
    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE)
    try:
        return connection_digest(con)
    finally:
        con.close()


def connection_digest(con: apsw.Connection) -> dict[str, str]:
    """:func:`file_digest` of an open connection."""
    out: dict[str, str] = {}
    for table in _tables(con):
        info = list(con.execute(f'PRAGMA table_info("{table}")'))
        columns = ", ".join(f'"{row[1]}"' for row in info)
        pk = [row[1] for row in sorted(info, key=lambda row: row[5]) if row[5]]
        order = ", ".join(f'"{c}"' for c in pk) if pk else "rowid"
        digest = hashlib.sha256()
        count = 0
        for row in con.execute(f'SELECT {columns} FROM "{table}" ORDER BY {order}'):
            digest.update(repr(row).encode())
            count += 1
        out[table] = f"{count} rows {digest.hexdigest()[:16]}"
    schema = list(con.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_schema WHERE name != ? ORDER BY name", (MARKER_TABLE,)))
    out["sqlite_schema"] = hashlib.sha256(repr(schema).encode()).hexdigest()[:16]
    for fts in _fts_tables(con):
        con.execute(f'INSERT INTO "{fts}"("{fts}") VALUES (\'integrity-check\')')  # raises when damaged
        out[f"{fts} integrity"] = "ok"
    out["integrity_check"] = ",".join(row[0] for row in con.execute("PRAGMA integrity_check"))
    return out


@dataclass
class StorageSide:
    """One host's cluster storage objects (no actor host): pool, ownership, appender."""

    pool: PgPool
    ownership: Ownership
    appender: GroupCommitAppender
    cluster_id: str


@asynccontextmanager
async def storage_side(dsn: str, host_id: str, *, lease_s: float = 5.0, statement_timeout_s: float = 1.0,
                       snapshot_min_bytes: int = 1 << 20) -> AsyncIterator[StorageSide]:
    """A running appender for host ``host_id`` on ``dsn`` (schema created)."""
    pool = PgPool(dsn, size=4, connect_timeout_s=statement_timeout_s, statement_timeout_s=statement_timeout_s)
    async with pool.connection() as conn:
        cluster_id = await create_cluster_schema(conn)
    ownership = Ownership(pool, host_id, f"http://{host_id}", lease_s=lease_s)
    appender = GroupCommitAppender(ownership, pool, snapshot_min_bytes=snapshot_min_bytes)
    async with trio.open_nursery() as nursery:
        await nursery.start(appender.run)
        try:
            yield StorageSide(pool, ownership, appender, cluster_id)
        finally:
            nursery.cancel_scope.cancel()
    pool.close()


class TcpProxy:
    """A loopback TCP proxy to Postgres that can be *partitioned*: a network cut without mocks.

    ``partition()`` stops forwarding on every connection (bytes are held, as
    dropped packets are) and leaves new connections hanging; ``heal()``
    resets the stalled connections (as TCP does after a long cut) and
    forwards again. Run :meth:`serve` in a nursery: ``port = await nursery.start(proxy.serve)``.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._open = trio.Event()
        self._open.set()
        self._streams: list[trio.SocketStream] = []

    def partition(self) -> None:
        self._open = trio.Event()

    def heal(self) -> None:
        for stream in self._streams:
            stream.socket.close()
        self._streams.clear()
        self._open.set()

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        server = None
        try:
            await self._open.wait()
            server = await trio.open_tcp_stream("127.0.0.1", self.target_port)
            self._streams += [client, server]
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, client, server, nursery.cancel_scope)
                nursery.start_soon(self._pump, server, client, nursery.cancel_scope)
        except OSError:
            pass
        finally:
            for stream in (client, server):
                if stream is not None:
                    stream.socket.close()

    async def _pump(self, source: trio.SocketStream, sink: trio.SocketStream, scope: trio.CancelScope) -> None:
        try:
            while data := await source.receive_some(65536):
                await self._open.wait()
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        scope.cancel()


def dsn_with_port(dsn: str, port: int) -> str:
    """``dsn`` (libpq key=value form) pointing at ``port`` instead."""
    return " ".join(f"port={port}" if part.startswith("port=") else part for part in dsn.split())
