"""Retention: which sessions ``POST /v1/host:gc`` (``durable-sessions gc``) deletes, in every mode.

A session is idle when nothing wrote to it for more than ``[retention]
delete_idle_after_days`` days (unset: retention is off, nothing is listed
or deleted). Where the candidates come from, and how each goes:

==============================  =====================================  ==============================================
mode                            candidates (last write)                deleted through
==============================  =====================================  ==============================================
one host                        the host catalog (``updatedAt``, or    ``host.erase``
                                the newer write of an awake actor)
``serve --cluster``             the cluster catalog ``ds_catalog``     the ``DELETE`` path: the owner erases the
                                (``HostCluster.catalog_page``, by      actor under its fence, every other live host
                                ``updated_ms``), from any host         drops its working copy
``serve --postgres``            ``durable_sessions_catalog``           the session's rows in one transaction, then
                                (``updated_ms``)                       the actor's file on this host
==============================  =====================================  ==============================================

In cluster and Postgres modes each candidate's catalog row is read again
just before it is deleted: a session written since the listing is kept (and
left out of the answer). Each deletion is logged on :data:`RETENTION_LOGGER`,
one line per session. A ``dryRun`` lists the same sessions and deletes none.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from common.errors import SessionNotFoundError, StorageUnavailableError
from common.wire import SESSIONS_PREFIX, quote_segment

if TYPE_CHECKING:
    from runtime.host.ids import ActorId
    from runtime.server.app import SessionsServer

__all__ = ["RETENTION_LOGGER", "IdleSession", "collect"]

#: The logger every retention deletion is logged on (one line per session).
RETENTION_LOGGER = "durable_sessions.retention"
DAY_MS = 86_400_000
#: Catalog rows read per statement while looking for idle sessions.
PAGE_ROWS = 500


@dataclass(frozen=True)
class IdleSession:
    """A session idle since ``updated_ms`` (epoch milliseconds)."""

    name: str
    actor_id: ActorId
    updated_ms: int


async def collect(server: SessionsServer, days: int, *, dry_run: bool,
                  headers: dict[str, str] | None = None) -> list[IdleSession]:
    """The sessions idle for more than ``days`` days, oldest write last; deleted unless ``dry_run``.

    ``headers``: the gc request's headers (lower-case names; its ``Authorization``), sent with the
    ``DELETE`` a cluster host forwards to a session's owner. Returns what was deleted (or would be).

    Raises:
        StorageUnavailableError: (cluster, Postgres) the catalog did not answer; sessions deleted
            before that stay deleted (each deletion is logged).
    """
    from runtime.server.lifecycle_routes import in_postgres

    cutoff = int(time.time() * 1000) - days * DAY_MS
    candidates: AsyncIterator[IdleSession]
    erase: Callable[[IdleSession], Awaitable[bool]]
    if server.host.cluster is not None:
        candidates, erase = _idle_in_cluster(server, cutoff), _ClusterEraser(server, cutoff, headers or {})
    elif in_postgres(server):
        candidates, erase = _idle_in_postgres(server, cutoff), _PostgresEraser(server, cutoff)
    else:
        return await _collect_on_host(server, days, cutoff, dry_run)
    found = []
    async for idle in candidates:
        if dry_run or await erase(idle):
            found.append(idle)
            if not dry_run:
                _log_deleted(idle, days)
    return found


async def _collect_on_host(server: SessionsServer, days: int, cutoff: int, dry_run: bool) -> list[IdleSession]:
    host, namespace = server.host, server.namespace
    found = []
    for entry in host.catalog.entries(namespace.name):
        actor_id = namespace.id_from_string(entry.actor_id)
        updated = max(entry.updated_ms, host.last_write_ms(actor_id) or 0)
        if entry.name is not None and not entry.quarantined and updated < cutoff:
            found.append(IdleSession(entry.name, actor_id, updated))
    if not dry_run:
        for idle in found:
            await host.erase(namespace, idle.actor_id)
            _log_deleted(idle, days)
    return found


def _log_deleted(idle: IdleSession, days: int) -> None:
    logging.getLogger(RETENTION_LOGGER).info("deleted session %r: idle since %s (more than %d days)", idle.name,
                                             iso(idle.updated_ms), days)


async def _idle_in_cluster(server: SessionsServer, cutoff: int) -> AsyncIterator[IdleSession]:
    """Rows of ``ds_catalog`` last written before ``cutoff``, newest first, a page at a time."""
    cluster, namespace = server.host.cluster, server.namespace
    assert cluster is not None
    below = (cutoff, "")  # (updated_ms, actor hex) < (cutoff, ""): written before the cutoff
    while True:
        rows = await cluster.catalog_page(namespace.name, PAGE_ROWS, below)
        for row in rows:
            actor_id = namespace.id_from_name(row.name) if row.name is not None else None
            if actor_id is not None and actor_id.hex == row.actor_hex:
                yield IdleSession(row.name, actor_id, row.updated_ms)  # type: ignore[arg-type]  # named
        if len(rows) < PAGE_ROWS:
            return
        below = (rows[-1].updated_ms, rows[-1].actor_hex)


async def _idle_in_postgres(server: SessionsServer, cutoff: int) -> AsyncIterator[IdleSession]:
    """Rows of ``durable_sessions_catalog`` last written before ``cutoff`` whose key is the actor of their
    name in this namespace (rows of other writers of the tables are left alone)."""
    namespace = server.namespace
    storage = namespace.env.storage
    below = (cutoff, "")
    while True:
        rows = await storage.catalog_page(PAGE_ROWS, below)
        for row in rows:
            actor_id = namespace.id_from_name(row.name) if row.name is not None else None
            if actor_id is not None and actor_id.hex == row.session_id:
                yield IdleSession(row.name, actor_id, row.updated_ms)
        if len(rows) < PAGE_ROWS:
            return
        below = rows[-1].key


class _ClusterEraser:
    """Delete one idle session through the cluster's ``DELETE`` path, unless written since the listing."""

    def __init__(self, server: SessionsServer, cutoff: int, headers: dict[str, str]) -> None:
        self.server, self.cutoff = server, cutoff
        self.headers = {name: value for name, value in headers.items() if name == "authorization"}

    async def __call__(self, idle: IdleSession) -> bool:
        from runtime.server.lifecycle_routes import SessionCall, erase_in_cluster

        cluster = self.server.host.cluster
        assert cluster is not None
        row = await cluster.catalog_get(idle.actor_id)
        if row is None or row.updated_ms >= self.cutoff:
            return False  # deleted or written meanwhile
        call = SessionCall("DELETE", SESSIONS_PREFIX + quote_segment(idle.name), headers=self.headers)
        try:
            answer = await erase_in_cluster(self.server, idle.name, idle.actor_id, call)
        except SessionNotFoundError:  # erased meanwhile (here)
            return False
        if answer.status_code == 404:
            return False
        if answer.status_code != 204:
            raise _refused(idle, answer.status_code, await answer.get_data(as_text=True))
        return True


class _PostgresEraser:
    """Delete one idle session's rows and file, unless written since the listing."""

    def __init__(self, server: SessionsServer, cutoff: int) -> None:
        self.server, self.cutoff = server, cutoff

    async def __call__(self, idle: IdleSession) -> bool:
        from runtime.server.lifecycle_routes import erase_in_postgres

        row = await self.server.namespace.env.storage.catalog_entry(idle.actor_id.hex)
        if row is None or row.updated_ms >= self.cutoff:
            return False
        return await erase_in_postgres(self.server, idle.actor_id)


def _refused(idle: IdleSession, status: int, body: str) -> Exception:
    """The error a gc answers with when the owner refused a deletion (its own answer, as a client sees it)."""
    return StorageUnavailableError(f"deleting idle session {idle.name!r}: its owner answered {status} ({body[:200]}); "
                                   "sessions listed before it were deleted; run gc again")


def iso(epoch_ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC with milliseconds (``2026-12-02T04:15:11.000Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_ms / 1000)) + f".{epoch_ms % 1000:03d}Z"
