"""Finding sessions in a cluster (``serve --cluster``): the listing read from the catalog in Postgres.

``GET /v1/sessions?limit=&cursor=&prefix=`` and ``GET /v1/sessions/{id}``
answer the same from every host: one indexed statement on ``ds_catalog``
(:meth:`runtime.host.cluster.HostCluster.catalog_page`), whose rows every
owner writes in the fenced statement of each log entry
(:mod:`storage.cluster.catalog`). Nothing is replayed, no file is opened,
no other host is asked, and a host killed with ``kill -9`` leaves rows as
exact as its last durable write.

Same shape and order as on a single host (:mod:`runtime.server.listing`):
:data:`runtime.api.SESSION_SUMMARY` entries, newest ``updatedAt`` first,
ties by actor id, keyset ``cursor`` (the same opaque form), ``prefix`` on the
session id. ``active`` is ``true`` while a live host holds the session's
lease; ``state`` is always ``ok`` (a damaged working copy is rebuilt from
Postgres, never quarantined). ``updatedAt`` is the time of the newest write
made durable (reads do not move it).

Postgres unreachable: :class:`~common.errors.StorageUnavailableError` (503
with ``Retry-After``) within twice the statement deadline; never a partial page.
"""

from __future__ import annotations

from typing import Any

from common.errors import SessionNotFoundError
from runtime.api import LIST_DEFAULT_LIMIT
from runtime.host.cluster import CatalogRow, HostCluster
from runtime.host.partitions import PartitionedCluster
from runtime.host.ids import ActorId
from runtime.server.listing import encode_cursor, iso_ms

__all__ = ["ClusterListing"]


class ClusterListing:
    """The listing of one namespace from the cluster catalog.

    Args:
        cluster: the host's :class:`~runtime.host.cluster.HostCluster` (``host.cluster``).
        namespace: the session namespace listed.
    """

    def __init__(self, cluster: HostCluster | PartitionedCluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace

    async def page(self, limit: int = LIST_DEFAULT_LIMIT, below: tuple[int, str] | None = None,
                   prefix: str | None = None) -> dict[str, Any]:
        """``{"sessions": [...], "cursor": str | None}``: the page below the key ``below`` (a decoded cursor).

        Raises:
            StorageUnavailableError: Postgres did not answer in time (nothing partial is returned).
        """
        rows = await self.cluster.catalog_page(self.namespace, limit + 1, below, prefix)
        shown = rows[:limit]
        more = len(rows) > limit
        return {"sessions": [summary(row) for row in shown],
                "cursor": encode_cursor((shown[-1].updated_ms, shown[-1].actor_hex)) if more and shown else None}

    async def describe(self, actor: ActorId, session_id: str) -> dict[str, Any]:
        """The summary of one session.

        Raises:
            SessionNotFoundError: the cluster holds no write of it.
            StorageUnavailableError: Postgres did not answer in time.
        """
        row = await self.cluster.catalog_get(actor)
        if row is None or row.name is None:
            raise SessionNotFoundError(session_id)
        return summary(row, session_id)


def summary(row: CatalogRow, name: str | None = None) -> dict[str, Any]:
    """A catalog row as :data:`runtime.api.SESSION_SUMMARY`."""
    return {
        "id": name or row.name, "messages": row.messages, "compactions": row.compactions,
        "compactedThrough": row.compacted_through, "createdAt": iso_ms(row.created_ms),
        "updatedAt": iso_ms(row.updated_ms), "state": "ok", "problem": None, "active": row.active,
    }
