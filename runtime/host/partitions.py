"""A cluster on several Postgres databases: actors spread over them by a fixed hash of their id.

``serve --cluster URL_A --cluster URL_B`` (or ``[cluster] databases = [...]``)
makes a host a member of a cluster whose actors live in several databases.
Each actor id hashes into one of :data:`PARTITIONS` partitions (the first
four bytes of ``sha256("<namespace>/<hex>")``, big-endian, modulo
:data:`PARTITIONS`: never Python's ``hash()``, which differs per process);
partition ``p`` lives in database ``p % N`` of the ordered list of ``N``
databases. Everything of an actor -- its lease, log, snapshots, alarm (and
catalog row) -- is in that one database, so no statement spans two, and
every host serves actors of every database.

:class:`PartitionedCluster` is the host's placement (the hooks of
:mod:`runtime.host.placement`) and its ``host.cluster``: it holds one
:class:`~runtime.host.cluster.HostCluster` per database and hands each
actor's hooks to the one of its partition. Each member sees only the live
actors of its own database (:class:`_PartitionView`), so it renews, counts
and drops only those. With one database, :func:`cluster_placement` returns
a plain :class:`~runtime.host.cluster.HostCluster` (its start also checks
the partition map; nothing else differs).

**One partition map per cluster.** Every database records the map it
belongs to in ``ds_cluster_meta`` (:func:`storage.cluster.schema.record_partition_map`):
the number of partitions and the ordered list of the databases' own
``cluster_id`` (a UUID each database gets with its tables) with their
``host:port/dbname``. The first host to start records it; a host whose
list differs from a database's record -- another order, a database
missing, one more, the same database twice -- is refused before it
registers anywhere (:class:`PartitionMapError`: one line naming the
difference). docs/cluster.md ("Several databases") says how to add a
database.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, TypeVar

import trio

from actors.agent import ConnectionLike
from common.errors import DatabaseError, StorageUnavailableError
from runtime.host.cluster import CatalogRow, ClusterOptions, ClusterStatistics, HostCluster, PitrRestore, ReleaseListener
from runtime.host.ids import ActorId
from runtime.host.namespace import Namespace
from runtime.host.placement import PlacementHost, WorkingCopy
from runtime.host.slots import ActorSlot
from storage.cluster import Owner, create_cluster_schema
from storage.cluster.driver import describe_dsn
from storage.cluster.catalog import CatalogTracker
from storage.cluster.history import Bookmark
from storage.cluster.schema import PartitionMap, record_partition_map
from storage.kv import ActorStorage
from storage.sqlite import Durability

__all__ = [
    "PARTITIONS",
    "PartitionMapError",
    "PartitionedCluster",
    "cluster_placement",
    "database_index",
    "map_difference",
    "partition_of",
]

logger = logging.getLogger(__name__)

#: The fixed number of partitions actor ids hash into. Changing it moves almost every actor: never do
#: it on a cluster with data (a database records it, and a host with another number is refused).
PARTITIONS = 256

T = TypeVar("T")


class PartitionMapError(Exception):
    """This host's list of databases differs from the partition map the databases record (one line)."""


def partition_of(actor_id: ActorId) -> int:
    """The partition of an actor: the first 4 bytes of ``sha256("<namespace>/<hex>")``, big-endian,
    modulo :data:`PARTITIONS`."""
    return _partition(actor_id.namespace, actor_id.hex)


@functools.lru_cache(maxsize=1 << 16)  # every hook of every call asks: 0.3 us cached against 2 us hashed
def _partition(namespace: str, hex_id: str) -> int:
    digest = hashlib.sha256(f"{namespace}/{hex_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % PARTITIONS


def database_index(actor_id: ActorId, databases: int) -> int:
    """Which of ``databases`` (in map order, 0-based) holds the actor: its partition modulo their number."""
    return partition_of(actor_id) % databases


def map_difference(wanted: PartitionMap, recorded: PartitionMap, where: str) -> str | None:
    """One line naming how ``wanted`` (this host's) differs from ``recorded`` (read in database ``where``),
    or ``None`` when they are the same map."""
    if wanted.partitions != recorded.partitions:
        return (f"the partition map recorded in {where} has {recorded.partitions} partitions, this code "
                f"uses {wanted.partitions}: run the release the cluster was created with")
    if wanted.ids == recorded.ids:
        return None
    names = dict(recorded.databases) | dict(wanted.databases)
    shown = ", ".join(names[cluster_id] for cluster_id in recorded.ids)
    count = len(recorded.ids)
    missing = [names[cluster_id] for cluster_id in recorded.ids if cluster_id not in wanted.ids]
    extra = [names[cluster_id] for cluster_id in wanted.ids if cluster_id not in recorded.ids]
    if missing:
        return (f"database {missing[0]} of the cluster's partition map ({count} database{'s' * (count > 1)}: "
                f"{shown}, recorded in {where}) is not given to this host: give every database, in that order")
    if extra:
        return (f"database {extra[0]} is not in the cluster's partition map ({count} database{'s' * (count > 1)}: "
                f"{shown}, recorded in {where}); adding a database needs the procedure in docs/cluster.md")
    given = ", ".join(names[cluster_id] for cluster_id in wanted.ids)
    return (f"the databases are given in another order ({given}) than the cluster's partition map records "
            f"({shown}, in {where}): give them in the map's order")


async def agree_on_map(members: Sequence[HostCluster], names: Sequence[str],
                       joining: Callable[[str], None]) -> list[str]:
    """Create the cluster tables in every database, then check (or record) the partition map in each.

    ``joining(name)`` is called before each database is asked (so a failure can name it).

    Returns the databases' cluster ids in the given order. Every database's
    map is read before any is written, so a refused host records nothing.
    Databases are visited in the order of their ids, so two hosts starting
    together with different lists meet at the same first database and only
    one of them records there (the other is refused).

    Raises:
        PartitionMapError: the list differs from what a database records (nothing registered).
        StorageUnavailableError, DatabaseError, SchemaTooNewError: a database could not be set up.
    """
    ids = []
    for member, name in zip(members, names, strict=True):
        joining(name)
        async with member.pool.connection() as conn:
            ids.append(await create_cluster_schema(conn))
    for i, cluster_id in enumerate(ids):
        if cluster_id in ids[:i]:
            raise PartitionMapError(f"{names[ids.index(cluster_id)]} and {names[i]} are the same database "
                                    f"(cluster id {cluster_id}): give each database once")
    wanted = PartitionMap(PARTITIONS, tuple(zip(ids, names, strict=True)))
    for write in (False, True):  # first look at every database, so a refused host writes nothing
        for i in sorted(range(len(ids)), key=ids.__getitem__):
            joining(names[i])
            async with members[i].pool.connection() as conn:
                recorded = await record_partition_map(conn, wanted, ids[i], write=write)
            difference = None if recorded is None else map_difference(wanted, recorded, names[i])
            if difference is not None:
                raise PartitionMapError(difference)
    return ids


class _MappedHostCluster(HostCluster):
    """A one-database cluster: a :class:`HostCluster` whose start also checks the partition map."""

    def __init__(self, options: ClusterOptions) -> None:
        super().__init__(options)
        self.names = [describe_dsn(self.options.dsn)]
        self.joining: str | None = None  # the database being joined (names a start-up failure)

    async def join(self) -> None:
        self.joining = self.names[0]
        try:
            await agree_on_map([self], self.names, lambda _name: None)
        except BaseException:
            self.pool.close()
            raise
        await super().join()
        self.joining = None


def cluster_placement(options: ClusterOptions, dsns: Sequence[str]) -> HostCluster | PartitionedCluster:
    """The placement of a cluster host on the databases ``dsns`` (in map order; ``options.dsn`` is ignored).

    One database: a :class:`~runtime.host.cluster.HostCluster`; several: a :class:`PartitionedCluster`.
    Either has ``joining``: the database being joined while ``join()`` runs (``host:port/dbname``).

    Raises:
        ValueError: no database, or a bad option (the message names it).
    """
    if not dsns:
        raise ValueError("a cluster needs at least one Postgres database")
    if len(dsns) == 1:
        return _MappedHostCluster(replace(options, dsn=dsns[0]))
    return PartitionedCluster(options, dsns)


class _PartitionView:
    """The host as one member of a :class:`PartitionedCluster` sees it: only its database's live actors."""

    def __init__(self, host: PlacementHost, cluster: PartitionedCluster, member: HostCluster) -> None:
        self._host = host
        self._cluster = cluster
        self._member = member

    @property
    def closed(self) -> bool:
        return self._host.closed

    @property
    def namespaces(self) -> dict[str, Namespace]:
        return self._host.namespaces

    def spawn(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        self._host.spawn(fn, *args)

    def live_slots(self) -> list[ActorSlot]:
        return [slot for slot in self._host.live_slots() if self._cluster.member(slot.id) is self._member]

    def drop(self, slot: ActorSlot, reason: str) -> None:
        self._host.drop(slot, reason)

    def connections_of(self, actor_id: ActorId) -> Sequence[ConnectionLike]:
        return self._host.connections_of(actor_id)

    def deliver_alarm_soon(self, actor_id: ActorId) -> None:
        self._host.deliver_alarm_soon(actor_id)


class PartitionedCluster:
    """A host's membership in a cluster on several databases, and its placement (``host.cluster``).

    Offers what :class:`~runtime.host.cluster.HostCluster` offers the server
    (``host_id``, ``advertise_url``, ``cluster_id``, ``owner_of``,
    ``written``, ``live_hosts``, ``add_release_listener``, ``statistics``,
    ``may_live_elsewhere``), each answered by the database of the actor
    asked about, or by all of them.

    Attributes:
        members: one :class:`~runtime.host.cluster.HostCluster` per database, in map order.
        names: ``host:port/dbname`` of each database, in map order.
        cluster_id: the cluster id of the map's first database (set by :meth:`join`).
        joining: the database being joined while :meth:`join` runs, else ``None``.
    """

    rebuildable = True

    def __init__(self, options: ClusterOptions, dsns: Sequence[str]) -> None:
        self.options = options = replace(options, dsn=dsns[0]).checked()
        self.host_id: str = options.host_id or ""
        self.advertise_url = options.advertise_url
        self.cluster_id = ""
        self.names = [describe_dsn(dsn) for dsn in dsns]
        self.members = [HostCluster(replace(options, dsn=dsn)) for dsn in dsns]
        self.joining: str | None = None

    @property
    def cluster(self) -> PartitionedCluster:
        """This membership (``host.cluster``)."""
        return self

    def member(self, actor_id: ActorId) -> HostCluster:
        """The member (database) that holds ``actor_id``."""
        return self.members[database_index(actor_id, len(self.members))]

    # -- lifecycle ---------------------------------------------------------------

    async def join(self) -> None:
        """Check the partition map in every database, then join each (tables, host registration).

        Raises:
            PartitionMapError: this host's list differs from the recorded map (nothing registered).
            StorageUnavailableError, DatabaseError, SchemaTooNewError: a database (``joining``) failed;
                every connection is closed and every registration made is withdrawn.
        """
        joined: list[HostCluster] = []
        try:
            self.joining = self.names[0]
            ids = await agree_on_map(self.members, self.names, self._joining)
            self.cluster_id = ids[0]
            for member, name in zip(self.members, self.names, strict=True):
                self.joining = name
                await member.join()
                joined.append(member)
        except BaseException:
            with trio.CancelScope(shield=True):
                for member in self.members:
                    if member in joined:
                        await member.aclose()
                    else:
                        member.pool.close()
            raise
        self.joining = None

    def _joining(self, name: str) -> None:
        self.joining = name

    async def start(self, host: PlacementHost, nursery: trio.Nursery) -> None:
        """Start every member on the host, each seeing only the live actors of its database."""
        for member in self.members:
            await member.start(_PartitionView(host, self, member), nursery)

    async def aclose(self) -> None:
        """Close every member at once (each bounded by twice the statement timeout)."""
        async with trio.open_nursery() as nursery:
            for member in self.members:
                nursery.start_soon(member.aclose)

    async def settle(self) -> None:
        """Return once every member has finished the lease releases it started."""
        async with trio.open_nursery() as nursery:
            for member in self.members:
                nursery.start_soon(member.settle)

    # -- what the server asks ---------------------------------------------------------

    def add_release_listener(self, listener: ReleaseListener) -> None:
        """Call ``listener(actor_id, reason)`` whenever this host stops owning an actor (of any database)."""
        for member in self.members:
            member.add_release_listener(listener)

    def statistics(self) -> ClusterStatistics:
        """The members' counters, added up."""
        each = [member.statistics() for member in self.members]
        return ClusterStatistics(**{f.name: sum(getattr(stats, f.name) for stats in each)
                                    for f in fields(ClusterStatistics)})

    async def owner_of(self, actor_id: ActorId) -> Owner | None:
        """As :meth:`HostCluster.owner_of`, asked of the actor's database."""
        return await self.member(actor_id).owner_of(actor_id)

    async def written(self, actor_id: ActorId) -> bool:
        """As :meth:`HostCluster.written`, asked of the actor's database."""
        return await self.member(actor_id).written(actor_id)

    # -- the catalog (listings merge every database) -----------------------------------

    async def catalog_page(self, namespace: str, limit: int, below: tuple[int, str] | None = None,
                           prefix: str | None = None) -> list[CatalogRow]:
        """As :meth:`HostCluster.catalog_page`, over every database: each gives its best ``limit``
        rows below ``below``, and the merge keeps the best ``limit`` of them (the same order).

        Raises:
            StorageUnavailableError: a database did not answer (never a partial list).
        """
        pages = await self.each_database(lambda member: member.catalog_page(namespace, limit, below, prefix))
        return merged(pages, key=lambda row: (row.updated_ms, row.actor_hex))[:limit]

    def catalog_tracker(self, actor_id: ActorId) -> CatalogTracker:
        """As :meth:`HostCluster.catalog_tracker`, of the actor's database."""
        return self.member(actor_id).catalog_tracker(actor_id)

    async def catalog_get(self, actor_id: ActorId) -> CatalogRow | None:
        """As :meth:`HostCluster.catalog_get`, asked of the actor's database."""
        return await self.member(actor_id).catalog_get(actor_id)

    async def transcript_rows(self, project_key: str) -> list[tuple[str, int, str]]:
        """As :meth:`HostCluster.transcript_rows`, over every database (by session id).

        Raises:
            StorageUnavailableError: a database did not answer (never a partial list).
        """
        rows = await self.each_database(lambda member: member.transcript_rows(project_key))
        return sorted((row for answer in rows for row in answer), key=lambda row: row[0])

    async def live_hosts(self) -> list[tuple[str, str]]:
        """``(host_id, advertise_url)`` of every live host: each registers in every database, so the
        first database that answers tells (a host seen in any is listed).

        Raises:
            StorageUnavailableError: no database answered.
        """
        answers = await self.each_database(lambda member: member.live_hosts(), tolerate=True)
        if not answers:
            raise StorageUnavailableError("no database of the cluster answered")
        return sorted(set().union(*answers))

    def may_live_elsewhere(self, actor_id: ActorId) -> bool:
        """Always ``True`` (another host may have written the actor)."""
        return True

    async def each_database(self, ask: Callable[[HostCluster], Awaitable[T]], *, tolerate: bool = False) -> list[T]:
        """``await ask(member)`` for every database at once; the answers in map order.

        With ``tolerate``, a database that fails with ``StorageUnavailableError`` or
        ``DatabaseError`` is left out (logged); otherwise its error is raised.
        """
        answers: list[tuple[int, T]] = []

        async def one(index: int, member: HostCluster) -> None:
            try:
                answers.append((index, await ask(member)))
            except (StorageUnavailableError, DatabaseError) as exc:
                if not tolerate:
                    raise
                logger.info("cluster: database %s did not answer (%s)", self.names[index], exc)

        async with trio.open_nursery() as nursery:
            for index, member in enumerate(self.members):
                nursery.start_soon(one, index, member)
        return [answer for _index, answer in sorted(answers, key=lambda pair: pair[0])]

    # -- point-in-time restore: each actor's history is in its database ------------------

    @property
    def pitr_window_s(self) -> float:
        """The point-in-time window in seconds (the same for every database)."""
        return self.options.pitr_window_s

    async def bookmark(self, actor_id: ActorId, at_ms: int) -> tuple[str, Bookmark, int] | None:
        """As :meth:`HostCluster.bookmark`, asked of the actor's database."""
        return await self.member(actor_id).bookmark(actor_id, at_ms)

    async def restore(self, actor_id: ActorId, token: object, *, path: os.PathLike[str] | str, template: Path,
                      durability: Durability) -> PitrRestore:
        """As :meth:`HostCluster.restore`, in the actor's database."""
        return await self.member(actor_id).restore(actor_id, token, path=path, template=template,
                                                   durability=durability)

    async def prune_history(self) -> tuple[int, int, int]:
        """As :meth:`HostCluster.prune_history`, in every database: the totals."""
        each = await self.each_database(lambda member: member.prune_history())
        return (sum(one[0] for one in each), sum(one[1] for one in each), sum(one[2] for one in each))

    # -- the placement's hooks: each goes to the actor's database ------------------------

    async def acquire(self, slot: ActorSlot) -> None:
        await self.member(slot.id).acquire(slot)

    async def make_current(self, slot: ActorSlot, copy: WorkingCopy) -> None:
        await self.member(slot.id).make_current(slot, copy)

    def attach(self, slot: ActorSlot, storage: ActorStorage) -> None:
        self.member(slot.id).attach(slot, storage)

    async def before_call(self, slot: ActorSlot) -> None:
        await self.member(slot.id).before_call(slot)

    async def barrier(self, slot: ActorSlot) -> None:
        await self.member(slot.id).barrier(slot)

    def release(self, slot: ActorSlot, reason: str) -> None:
        self.member(slot.id).release(slot, reason)

    def peers_gone(self, actor_id: ActorId) -> None:
        self.member(actor_id).peers_gone(actor_id)

    async def erase(self, actor_id: ActorId) -> None:
        """Erase the actor's rows in its database (:meth:`HostCluster.erase`)."""
        await self.member(actor_id).erase(actor_id)

    def gate_peers(self, slot: ActorSlot, conns: Sequence[ConnectionLike]) -> Sequence[ConnectionLike]:
        return self.member(slot.id).gate_peers(slot, conns)


def merged(answers: Iterable[Sequence[T]], key: Callable[[T], Any], *, newest_first: bool = True) -> list[T]:
    """Merge lists each already sorted by ``key`` (descending with ``newest_first``) into one such list
    (for listings asked of every database with :meth:`PartitionedCluster.each_database`)."""
    return list(heapq.merge(*answers, key=key, reverse=newest_first))

