"""Cluster mode of the actor host: several hosts, one Postgres, one live instance per actor.

``open_host(data_dir, cluster=ClusterOptions(dsn, advertise_url))`` runs the
host as a member of a cluster (docs/cluster.md has the whole design).
:class:`HostCluster` is the host's placement (:mod:`runtime.host.placement`):
the host calls its hooks and never asks whether it is in a cluster; this
module uses only what :class:`~runtime.host.placement.PlacementHost` offers.
What changes against the single host, all of it here:

* **Activation** first takes the actor's lease in Postgres
  (:class:`storage.cluster.ownership.Ownership`). When a live host owns it,
  :class:`~common.errors.NotOwnerError` (with the owner's URL) is raised
  before any file is touched; the server forwards the call there. Then the
  local file is made current: it is kept when its marker says it is clean and
  matches the log's newest entry, else it is rebuilt from the newest snapshot
  and the log's tail (:func:`storage.cluster.restore.restore_file`, on a
  worker thread). Only then is the agent constructed.
* **The output gate.** Writes commit to the file as always; a capture records
  them and the host's group-commit appender ships them, fenced by the epoch
  (:mod:`storage.cluster.log`). No reply, broadcast or WebSocket frame leaves
  before the writes committed before it are durable in Postgres. When an
  append is refused (another host took over) or its outcome stays unknown
  (Postgres unreachable), the actor is *poisoned*: replies still held get
  :class:`~common.errors.OwnershipLostError` or
  :class:`~common.errors.StorageUnavailableError` (503), calls not started yet
  are admitted again (and so forwarded or re-activated), and the instance is
  dropped with its file left unclean, so the next activation rebuilds it from
  Postgres without the writes that never became durable.
* **Leases.** Busy actors renew through their appends; one statement renews
  every other lease each third of ``lease_s``. Before a call starts and
  before a reply leaves, the host checks its local deadline; past it, it
  renews first, and when that is refused it stops serving the actor at once.
* **Hibernation and eviction** write the clean marker (when every write is
  durable), close the file and release the lease, so the next call on any
  host takes the actor at once; a wake on the same host then skips the restore.
  While the host holds WebSocket peers of the actor, the lease is kept (and
  renewed with the others) instead: the peers stay open, the next frame or
  call wakes the actor here without asking Postgres, and broadcasts still
  reach them. The lease goes when the last peer leaves (or the host closes).
* **The catalog** (``ds_catalog``) travels with the append too: each live
  actor has a :class:`~storage.cluster.catalog.CatalogTracker` (counted once
  at attach, then kept exact per cut), and any host reads the rows
  (:meth:`HostCluster.catalog_page`, :meth:`~HostCluster.catalog_get`,
  :meth:`~HostCluster.transcript_rows`) for the listings.
* **Point-in-time restore.** The log and snapshots of the last
  ``pitr_window_s`` are kept (:mod:`storage.cluster.history`); any host answers
  a bookmark of a moment (:meth:`HostCluster.bookmark`), the owner restores
  one (:meth:`HostCluster.restore`: one fenced whole-file entry), and every
  host prunes the history older than the window now and then.
* **Alarms** travel with the append (``ds_alarms``); only the owner runs an
  actor's alarm. Due alarms of actors nobody owns are found by a poll on
  every host; whichever host acquires the actor first delivers it.

Postgres down: activations and writes fail with
:class:`~common.errors.StorageUnavailableError` (503, retryable) within the
statement timeout (below the lease), never a hang; every connection heals by
itself once the server is back.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from actors.agent import ConnectionLike
from common.errors import (
    DatabaseError,
    NotOwnerError,
    OwnershipLostError,
    StorageUnavailableError,
)
from runtime.host.frames import FrameGate, GatedConnection
from runtime.host.ids import ActorId
from runtime.host.placement import RELEASE_REASONS, PlacementHost, WorkingCopy
from runtime.host.slots import ActorSlot, CallNotStarted, SlotState, describe
from storage.cluster import statements as sql
from storage.cluster import (
    ActorLog,
    GroupCommitAppender,
    Lease,
    Marker,
    Owner,
    Ownership,
    PgPool,
    create_cluster_schema,
    file_state,
    restore_actor,
    start_capture,
    write_marker,
)
from storage.cluster.catalog import CatalogTracker
from storage.cluster.history import Bookmark, History
from storage.kv import ActorStorage
from storage.schema import SCHEMA_VERSION
from storage.sqlite import Durability

__all__ = ["RELEASE_REASONS", "CallNotStarted", "CatalogRow", "ClusterOptions", "ClusterStatistics", "HostCluster",
           "PitrRestore"]

logger = logging.getLogger(__name__)

#: Listener of released actors: ``listener(actor_id, reason)``; reasons in :data:`RELEASE_REASONS`.
ReleaseListener = Callable[[ActorId, str], None]


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """How a host joins a cluster (``open_host(..., cluster=ClusterOptions(...))``).

    Attributes:
        dsn: libpq connection string of the shared Postgres database.
        advertise_url: the URL other hosts forward this host's actors' calls to
            (e.g. ``"http://10.0.0.5:8787"``); stored with every lease.
        host_id: this process's id in the cluster; default: hostname, pid and a
            random suffix (a restarted process is a new host).
        lease_s: seconds a lease lasts unless renewed; a dead host's actors move
            this long after its last renewal.
        margin_fraction: part of the lease the host leaves unused locally
            (clock-rate differences).
        statement_timeout_s: deadline of each Postgres statement; default
            ``min(lease_s / 4, 5)``. Must be below ``lease_s / 3``.
        connect_timeout_s: deadline of a new connection; default the statement timeout.
        pool_size: connections for activations, renewals, snapshots and diagnoses.
        senders: group-commit sender tasks (each with its own connection).
        snapshot_min_bytes: log bytes after an actor's newest snapshot that make
            the host store a new one.
        alarm_poll_s: seconds between looks for due alarms of unowned actors;
            default ``lease_s / 3``.
        pitr_window_s: the point-in-time window in seconds (``[cluster] pitr_days``; 0: off):
            the log and snapshots of this long are kept, and any moment of it can be restored.
        pitr_prune_s: seconds between prunes of the history older than the window.
    """

    dsn: str
    advertise_url: str
    host_id: str | None = None
    lease_s: float = 10.0
    margin_fraction: float = 0.1
    statement_timeout_s: float | None = None
    connect_timeout_s: float | None = None
    pool_size: int = 4
    senders: int = 1
    snapshot_min_bytes: int = 1 << 20
    alarm_poll_s: float | None = None
    pitr_window_s: float = 7 * 86_400.0
    pitr_prune_s: float = 600.0

    def checked(self) -> ClusterOptions:
        """These options with defaults filled in.

        Raises:
            ValueError: a value out of range (the message names it).
        """
        if not isinstance(self.dsn, str) or not self.dsn:
            raise ValueError("cluster dsn must be a non-empty libpq connection string")
        if not isinstance(self.advertise_url, str) or not self.advertise_url:
            raise ValueError("cluster advertise_url must be the URL other hosts reach this one at")
        if not self.lease_s > 0:
            raise ValueError(f"lease_s must be positive, not {self.lease_s!r}")
        statement = self.statement_timeout_s or min(self.lease_s / 4, 5.0)
        if not 0 < statement < self.lease_s / 3:
            raise ValueError(f"statement_timeout_s must be positive and below lease_s / 3, not {statement!r}")
        for name in ("pool_size", "senders"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int of at least 1, not {value!r}")
        for name in ("pitr_window_s", "pitr_prune_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name} must be a number of seconds of at least 0, not {value!r}")
        host_id = self.host_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        return ClusterOptions(
            dsn=self.dsn, advertise_url=self.advertise_url.rstrip("/"), host_id=host_id, lease_s=self.lease_s,
            margin_fraction=self.margin_fraction, statement_timeout_s=statement,
            connect_timeout_s=self.connect_timeout_s or statement, pool_size=self.pool_size, senders=self.senders,
            snapshot_min_bytes=self.snapshot_min_bytes, alarm_poll_s=self.alarm_poll_s or self.lease_s / 3,
            pitr_window_s=float(self.pitr_window_s), pitr_prune_s=float(self.pitr_prune_s) or 600.0,
        )


@dataclass(frozen=True, slots=True)
class ClusterStatistics:
    """Counters of a host's cluster side (``host.cluster.statistics()``).

    ``leases``: actors this host owns now; ``acquisitions``; ``not_owner``:
    activations refused because a live host owns the actor; ``restores`` and
    ``restore_s`` (total seconds) of files rebuilt from Postgres; ``kept``:
    activations that kept a clean local file; ``poisoned``: actors dropped
    because the log refused or lost a write; ``deposed``: leases found taken
    by another host; plus the appender's ``statements``, ``entries``,
    ``refused``, ``unknown``, ``resent`` and ``snapshots``.
    """

    leases: int
    acquisitions: int
    not_owner: int
    restores: int
    restore_s: float
    kept: int
    poisoned: int
    deposed: int
    statements: int
    entries: int
    refused: int
    unknown: int
    resent: int
    snapshots: int


@dataclass(frozen=True, slots=True)
class CatalogRow:
    """One session's row of the cluster catalog (:meth:`HostCluster.catalog_page`).

    ``actor_hex``: the actor's 64 hex; ``name``: its session id; ``created_ms``/``updated_ms``:
    epoch milliseconds; ``active``: a live host holds its lease.
    """

    actor_hex: str
    name: str | None
    messages: int
    compactions: int
    compacted_through: str | None
    created_ms: int
    updated_ms: int
    active: bool

    @classmethod
    def of(cls, row: Sequence[Any]) -> CatalogRow:
        """A row of :data:`~storage.cluster.statements.CATALOG_PAGE`."""
        actor, name, messages, compactions, through, created, updated, active = row
        return cls(str(actor).partition("/")[2], name, int(messages), int(compactions), through,
                   int(created), int(updated), bool(active))


@dataclass(frozen=True, slots=True)
class PitrRestore:
    """What a point-in-time restore did (:meth:`HostCluster.restore`).

    ``undo``: the bookmark of the state just before the restore (restoring it undoes this one);
    ``seq``: the log entry the restore wrote; ``restored_seq``: the entry the session is as of now
    (its state after that entry, 0: empty); ``messages``: messages it holds now; ``base_seq`` and
    ``replayed``: the snapshot the file was built from (0: none) and the entries applied on it;
    ``restored_at_ms``: the moment restored (epoch ms).
    """

    undo: str
    seq: int
    restored_seq: int
    restored_at_ms: int
    messages: int
    base_seq: int
    replayed: int


class _Claim:
    """An actor whose lease this host took, its file not open yet (``slot.placed``; internal)."""

    __slots__ = ("lease", "version")

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.version: int | None = None  # the file's schema version as the log has it (make_current)


class ActorCluster:
    """The cluster side of one live actor (``slot.placed`` once its file is open; internal)."""

    __slots__ = ("closed", "frames", "lease", "log", "name", "renewing")

    def __init__(self, name: str, lease: Lease, log: ActorLog, frames: FrameGate) -> None:
        self.name = name
        self.lease = lease
        self.log = log
        self.frames = frames
        self.renewing = trio.Lock()
        self.closed = False  # the host dropped the instance (calls still running get the log's error)


def _live(slot: ActorSlot) -> ActorCluster | None:
    """The cluster side of the actor of ``slot`` once its file is open here, else ``None``."""
    placed = slot.placed
    return placed if isinstance(placed, ActorCluster) else None


class HostCluster:
    """A host's membership in the cluster and its placement (``host.cluster``; made by ``open_host``).

    Attributes:
        options: the checked :class:`ClusterOptions`.
        host_id: this host's id.
        advertise_url: where other hosts forward calls for actors this host owns.
        cluster_id: the cluster's id (from Postgres).
    """

    #: Actor files are working copies: a damaged one is rebuilt from Postgres, not quarantined.
    rebuildable = True

    def __init__(self, options: ClusterOptions) -> None:
        self.options = options = options.checked()
        self.host: PlacementHost = None  # type: ignore[assignment]  # set by start()
        self.host_id: str = options.host_id or ""
        self.advertise_url = options.advertise_url
        self.cluster_id = ""
        self.pool = PgPool(options.dsn, size=options.pool_size, connect_timeout_s=options.connect_timeout_s or 1.0,
                           statement_timeout_s=options.statement_timeout_s or 1.0)
        self.ownership = Ownership(self.pool, self.host_id, options.advertise_url, lease_s=options.lease_s,
                                   margin_fraction=options.margin_fraction)
        window_ms = round(options.pitr_window_s * 1000)
        self.appender = GroupCommitAppender(self.ownership, self.pool, senders=options.senders,
                                            snapshot_min_bytes=options.snapshot_min_bytes, window_ms=window_ms)
        self.history = History(self.pool, "", window_ms)  # its cluster id is set by join()
        self._restoring: dict[tuple[str, str], trio.Lock] = {}  # one point-in-time restore per actor at a time
        self._listeners: list[ReleaseListener] = []
        self._closing: list[Lease] = []  # leases of actors closed with the host, released in aclose()
        self._releasing: list[Lease] = []  # released soon: one statement for all of them (_release_pending)
        self._releases_done: trio.Event | None = None  # set when the statement in flight and the queue are done
        self._held: dict[tuple[str, str], tuple[ActorId, Lease]] = {}  # asleep, with peers: still ours
        self._trackers: dict[tuple[str, str], CatalogTracker] = {}  # catalog rows of the live actors
        self._counts = dict.fromkeys(
            ("acquisitions", "not_owner", "restores", "kept", "poisoned", "deposed"), 0)
        self._restore_s = 0.0

    # -- lifecycle ---------------------------------------------------------------

    async def join(self) -> None:
        """Reach Postgres: create the schema if needed and register the host (before the host opens).

        Raises:
            StorageUnavailableError: Postgres cannot be reached (the connections are closed).
            DatabaseError: Postgres refused (e.g. a newer cluster schema).
        """
        try:
            async with self.pool.connection() as conn:
                self.cluster_id = await create_cluster_schema(conn)
            self.history.cluster_id = self.cluster_id
            await self.ownership.register_host()
        except BaseException:
            self.pool.close()
            raise

    @property
    def cluster(self) -> HostCluster:
        """This membership (``host.cluster``)."""
        return self

    async def start(self, host: PlacementHost, nursery: trio.Nursery) -> None:
        """Serve ``host`` (after :meth:`join`): start the appender, renewals and alarm polls in ``nursery``."""
        self.host = host
        await nursery.start(self.appender.run)
        nursery.start_soon(self._renew_leases)
        nursery.start_soon(self._poll_alarms)
        nursery.start_soon(self._prune_history)

    async def aclose(self) -> None:
        """Release the leases of the actors closed with the host, unregister it, close connections.

        Best effort, bounded by twice the statement timeout: a lease not
        released expires by itself.
        """
        leases, self._closing = self._closing, []
        leases += [lease for _actor_id, lease in self._held.values()]
        self._held.clear()
        with trio.move_on_after(2 * (self.options.statement_timeout_s or 1.0)) as scope:
            scope.shield = True
            try:
                await self.ownership.release(leases)
                await self.ownership.unregister_host()
            except (StorageUnavailableError, DatabaseError) as exc:
                logger.warning("cluster: leases not released on shutdown (%s); they expire in %g s",
                               exc, self.options.lease_s)
        self.pool.close()

    def add_release_listener(self, listener: ReleaseListener) -> None:
        """Call ``listener(actor_id, reason)`` whenever this host stops owning an actor.

        ``reason`` is one of ``"hibernated"``, ``"evicted"``, ``"deposed"``
        (another host took it), ``"failed"`` (its log failed: Postgres) or
        ``"closed"`` (host shutdown). It runs synchronously; it must not block.
        The server uses it to move or close the actor's WebSockets.
        """
        self._listeners.append(listener)

    def statistics(self) -> ClusterStatistics:
        """A frozen snapshot of the counters (see :class:`ClusterStatistics`)."""
        stats = self.appender.stats
        return ClusterStatistics(
            leases=len(self._held) + sum((state := _live(slot)) is not None and not state.closed
                                         for slot in self.host.live_slots()),
            restore_s=self._restore_s, statements=stats.statements, entries=stats.entries, refused=stats.refused,
            unknown=stats.unknown, resent=stats.resent, snapshots=stats.snapshots, **self._counts)

    # -- questions other code may ask ------------------------------------------------------

    async def owner_of(self, actor_id: ActorId) -> Owner | None:
        """Who owns the actor now (``Owner.host_id`` is ``None`` when nobody does), or ``None``
        when it was never activated anywhere.

        Raises:
            StorageUnavailableError: Postgres cannot be reached.
        """
        return await self.ownership.owner(describe(actor_id))

    async def written(self, actor_id: ActorId) -> bool:
        """``True`` when the actor has durable writes anywhere in the cluster (for empty reads).

        Raises:
            StorageUnavailableError: Postgres cannot be reached.
        """
        return await self.ownership.written(describe(actor_id))

    async def live_hosts(self) -> list[tuple[str, str]]:
        """``(host_id, advertise_url)`` of every live host, this one included."""
        return await self.ownership.live_hosts()

    # -- the catalog (ds_catalog: listings from any host) ----------------------------------------

    async def catalog_page(self, namespace: str, limit: int, below: tuple[int, str] | None = None,
                           prefix: str | None = None) -> list[CatalogRow]:
        """At most ``limit`` named session rows of ``namespace``, newest ``updated_ms`` first (ties:
        actor hex descending), below the key ``below`` = ``(updated_ms, actor hex)``, names starting
        with ``prefix``. One indexed statement; never a partial answer.

        Raises:
            StorageUnavailableError: Postgres did not answer within the statement deadline.
        """
        rows = await self._catalog_query(sql.CATALOG_PAGE, {
            "namespace": namespace, "limit": limit, "prefix": prefix,
            "below_ms": None if below is None else below[0],
            "below_actor": None if below is None else f"{namespace}/{below[1]}"})
        return [CatalogRow.of(row) for row in rows]

    async def catalog_get(self, actor_id: ActorId) -> CatalogRow | None:
        """The session row of one actor, or ``None`` (never written, or not a session).

        Raises:
            StorageUnavailableError: Postgres did not answer within the statement deadline.
        """
        rows = await self._catalog_query(sql.CATALOG_GET, {"actor": describe(actor_id)})
        return CatalogRow.of(rows[0]) if rows else None

    async def transcript_rows(self, project_key: str) -> list[tuple[str, int, str]]:
        """``(session_id, mtime_ms, summary JSON text)`` of a project's transcript sessions, by session id.

        Raises:
            StorageUnavailableError: Postgres did not answer within the statement deadline.
        """
        rows = await self._catalog_query(sql.TRANSCRIPT_ROWS, {"project_key": project_key})
        return [(row[0], int(row[1]), row[2]) for row in rows]

    def catalog_tracker(self, actor_id: ActorId) -> CatalogTracker:
        """The catalog row of an actor live on this host (what its next log entry writes).

        Raises:
            LookupError: the actor is not live here.
        """
        tracker = self._trackers.get((actor_id.namespace, actor_id.hex))
        if tracker is None:
            raise LookupError(f"actor {describe(actor_id)} is not live on this host")
        return tracker

    async def _catalog_query(self, statement: str, params: dict[str, object]) -> list[tuple[Any, ...]]:
        """One read of the catalog, answered or refused within twice the statement deadline
        (a connection included), so a listing never hangs on Postgres."""
        deadline = 2 * (self.options.statement_timeout_s or 1.0)
        with trio.move_on_after(deadline):
            return await self.pool.execute(statement, params)
        raise StorageUnavailableError(f"the cluster catalog did not answer within {deadline:g} s; retry")

    def may_live_elsewhere(self, actor_id: ActorId) -> bool:
        """Always ``True``: another host may have written the actor (``await written(actor_id)`` asks)."""
        return True

    # -- point-in-time restore (storage.cluster.history) ------------------------------------------------

    @property
    def pitr_window_s(self) -> float:
        """The point-in-time window in seconds (0: point-in-time restore is off)."""
        return self.options.pitr_window_s

    async def bookmark(self, actor_id: ActorId, at_ms: int) -> tuple[str, Bookmark, int] | None:
        """``(bookmark string, bookmark, server time in epoch ms)`` of the actor's state at ``at_ms``
        (epoch ms), or ``None`` when it was never written. Any host answers (one or two reads).

        Raises:
            OutsideWindowError: ``at_ms`` is outside the window (400, the message names it).
            StorageUnavailableError: Postgres cannot be reached.
        """
        name = describe(actor_id)
        found = await self.history.bookmark(name, at_ms)
        if found is None:
            return None
        bookmark, now_ms = found
        return bookmark.encode(self.cluster_id, name), bookmark, now_ms

    async def restore(self, actor_id: ActorId, token: object, *, path: os.PathLike[str] | str, template: Path,
                      durability: Durability) -> PitrRestore:
        """Rewind the actor to the moment ``token`` (a bookmark string) names, as one fenced whole-file entry.

        The host must have closed the actor here first (``host.hibernate``; the file at ``path`` is
        not touched, the next activation rebuilds it from the new entry). The lease is taken (re-taken
        when this host owned it, which fences off any write of the closed instance), the file as of
        the bookmark is built beside ``path`` from the snapshot and log, appended as the actor's
        next entry, and the lease released.

        Raises:
            InvalidInputError: a malformed bookmark, one of another session, or of a history that is
                gone (400); ``OutsideWindowError`` when its moment left the window.
            NotOwnerError: a live host owns the actor (nothing changed): the call goes there.
            StorageUnavailableError: Postgres cannot be reached, or the actor was taken over meanwhile
                (nothing changed; retry).
            RestoreError: the history does not rebuild (damage; nothing changed).
        """
        name = describe(actor_id)
        bookmark = Bookmark.decode(token, self.cluster_id, name)
        key = (actor_id.namespace, actor_id.hex)
        lock = self._restoring.setdefault(key, trio.Lock())
        try:
            async with lock:
                lease = await self._take_lease(actor_id)
                try:
                    await self.history.check(name, bookmark, lease.last_seq)
                    undo = await self.history.undo_bookmark(lease)
                    restored = await self.history.restored_image(
                        name, bookmark, namespace=actor_id.namespace, work_path=Path(f"{os.fspath(path)}.pitr"),
                        base_version=lease.base_version, template=template, durability=durability,
                        current_version=SCHEMA_VERSION)
                    appended = await self.history.append_restore(
                        lease, restored, host_id=self.host_id, lease_ms=max(1, round(self.options.lease_s * 1000)))
                finally:
                    self.release_soon(lease)
                    self._notify(actor_id, "hibernated")  # sockets held for it here reconnect (to the restored state)
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting:
                self._restoring.pop(key, None)
        if not appended:
            raise StorageUnavailableError(f"actor {name} was taken over while it was being restored; "
                                          "nothing changed, retry")
        logger.info("cluster: restored %s to entry %d (snapshot %d + %d entries) as entry %d", name, bookmark.seq,
                    restored.base_seq, restored.replayed, lease.last_seq + 1)
        return PitrRestore(undo.encode(self.cluster_id, name), lease.last_seq + 1, bookmark.seq, bookmark.at_ms,
                           restored.messages, restored.base_seq, restored.replayed)

    async def prune_history(self) -> tuple[int, int, int]:
        """Prune the history older than the window now (what every host does every ``pitr_prune_s``):
        ``(log rows, log bytes, snapshots)`` removed.

        Raises:
            StorageUnavailableError, DatabaseError: Postgres failed (what was pruned so far stays pruned).
        """
        total = [0, 0, 0]
        for _round in range(50):  # bounded: each statement prunes at most 200 actors
            actors, rows, size, snapshots = await self.history.prune(limit=200)
            total = [total[0] + rows, total[1] + size, total[2] + snapshots]
            if actors < 200:
                break
        return total[0], total[1], total[2]

    async def _prune_history(self) -> None:
        if self.history.window_ms <= 0:
            return
        while True:
            await trio.sleep(self.options.pitr_prune_s)
            try:
                rows, size, snapshots = await self.prune_history()
            except (StorageUnavailableError, DatabaseError) as exc:
                logger.info("cluster: pruning the history older than the point-in-time window failed (%s)", exc)
                continue
            if rows or snapshots:
                logger.info("cluster: pruned %d log entries (%d bytes) and %d snapshots older than the "
                            "point-in-time window", rows, size, snapshots)

    # -- activation (the placement's hooks) ---------------------------------------------------------

    async def acquire(self, slot: ActorSlot) -> None:
        """Take the actor's lease (kept in ``slot.placed`` until its file opens).

        Raises:
            NotOwnerError: a live host owns it (nothing was touched here).
            StorageUnavailableError: Postgres cannot be reached.
        """
        slot.placed = _Claim(await self._take_lease(slot.id))

    async def _take_lease(self, actor_id: ActorId) -> Lease:
        name = describe(actor_id)
        held = self._held.pop((actor_id.namespace, actor_id.hex), None)
        if held is not None and held[1].live():  # asleep with peers: still ours, nobody else could write
            self._counts["acquisitions"] += 1
            return held[1]
        result = await self.ownership.acquire(name, base_version=SCHEMA_VERSION)
        if isinstance(result, Owner):
            if held is not None:  # the kept lease lapsed and another host took the actor: the peers go
                self._notify(actor_id, "deposed")
            if result.host_id is None:
                raise StorageUnavailableError(f"the ownership of actor {name} keeps changing hands; retry")
            self._counts["not_owner"] += 1
            raise NotOwnerError(name, result.address, owner_host=result.host_id,
                                lease_left_s=result.remaining_ms / 1000)
        self._counts["acquisitions"] += 1
        return result

    async def make_current(self, slot: ActorSlot, copy: WorkingCopy) -> None:
        """Set a damaged working copy aside, then rebuild the file from Postgres unless it is clean at
        the log's newest entry.

        Notes the file's schema version (``PRAGMA user_version``) as the log has it:
        when opening the file migrates it, :meth:`attach` ships a snapshot first.

        Raises:
            StorageUnavailableError: Postgres cannot be reached.
            RestoreError: the log does not rebuild the file (damage; nothing changed).
        """
        claim = _claim(slot)
        copy.set_aside_if_damaged()  # a damaged working copy is rebuilt, not refused
        claim.version = await self._current_version(claim.lease, copy)

    async def _current_version(self, lease: Lease, copy: WorkingCopy) -> int:
        path = copy.path
        marker, version = await trio.to_thread.run_sync(file_state, path)
        if (marker is not None and marker.clean and marker.cluster_id == self._file_identity(lease)
                and marker.last_seq == lease.last_seq and version is not None):
            self._counts["kept"] += 1
            return version
        started = trio.current_time()
        await restore_actor(self.pool, lease, path, template=copy.template, cluster_id=self._file_identity(lease),
                            durability=copy.durability, current_version=SCHEMA_VERSION)
        self._counts["restores"] += 1
        self._restore_s += trio.current_time() - started
        _marker, version = await trio.to_thread.run_sync(file_state, path)
        return version or 0

    def _file_identity(self, lease: Lease) -> str:
        """What an actor file's marker names as the log it matches: the cluster's id and the actor's
        incarnation (``<cluster_id>/<incarnation>``). A session deleted while this host was down and
        written again has a new incarnation, so the stale copy left here is rebuilt, never served,
        even at the same sequence number."""
        return f"{self.cluster_id}/{lease.incarnation}" if lease.incarnation else self.cluster_id

    def attach(self, slot: ActorSlot, storage: ActorStorage) -> None:
        """Start capturing the actor's writes (before the agent exists); mark its file unclean.

        When opening migrated the file (its schema version differs from the
        log's), the first entry is a snapshot of the migrated file. The file's
        alarm is indexed at the end of ``on_start`` (it may come from another host).
        """
        claim = _claim(slot)
        lease = claim.lease
        capture = start_capture(storage, Marker(self._file_identity(lease), lease.last_seq, clean=False))
        row = storage.read_alarm_row()
        catalog = CatalogTracker(storage, slot.id.namespace)
        log = ActorLog(storage, capture, lease, self.appender, on_poison=lambda error: self._poisoned(slot, error),
                       alarm_ms=None if row is None else row.scheduled_ms, catalog=catalog)
        slot.placed = ActorCluster(describe(slot.id), lease, log, FrameGate(log, self.host.spawn))
        self._trackers[slot.key] = catalog
        if not lease.catalogued:  # written before the catalog existed: its first entry here writes the row
            catalog.backfill()
            self.appender.mark_dirty(log)
        if storage.user_version != claim.version:
            log.ship_snapshot()
        slot.alarm_dirty = True

    # -- turns --------------------------------------------------------------------------------------

    async def before_call(self, slot: ActorSlot) -> None:
        """Check the lease before a call starts (renewing it when the local deadline passed).

        Raises:
            CallNotStarted: the actor was lost; the call is admitted again.
            StorageUnavailableError: the lease could not be renewed (Postgres unreachable).
        """
        state = _live(slot)
        if state is None:
            return
        if state.log.poisoned is not None:
            raise CallNotStarted(state.log.poisoned)
        if not state.lease.live():
            await self._renew(slot, state, started=False)

    async def barrier(self, slot: ActorSlot) -> None:
        """Hold the reply until the writes before it are durable and the lease is live.

        Raises:
            OwnershipLostError, StorageUnavailableError: the actor's log failed
                (its writes were not kept), or the lease was lost meanwhile.
        """
        state = _live(slot)
        if state is None:
            return
        log = state.log
        target = log.barrier()
        if not log.is_durable(target):
            await log.wait(target)
        state.frames.flush()
        if not state.lease.live():
            await self._renew(slot, state, started=True)

    async def _renew(self, slot: ActorSlot, state: ActorCluster, *, started: bool) -> None:
        async with state.renewing:
            if state.lease.live():
                return
            if state.lease.lost:
                lost = [state.lease]
            else:
                try:
                    lost = await self.ownership.renew([state.lease])
                except (StorageUnavailableError, DatabaseError) as exc:
                    raise StorageUnavailableError(
                        f"the lease on actor {state.name} could not be renewed ({exc})") from exc
        if lost:
            error = OwnershipLostError(f"another host took actor {state.name} over")
            self._deposed(slot, error)
            if started:
                raise error
            raise CallNotStarted(error)

    def _deposed(self, slot: ActorSlot, error: BaseException) -> None:
        state = _live(slot)
        if state is not None and state.log.poisoned is None:
            self._counts["deposed"] += 1
            state.lease.lost = True
            state.log.poison(error)

    def _poisoned(self, slot: ActorSlot, error: BaseException) -> None:
        """The actor's log failed: drop the instance now (its file stays unclean)."""
        self._counts["poisoned"] += 1
        logger.warning("cluster: dropping actor %s: %s", describe(slot.id), error)
        if slot.state in (SlotState.ACTIVE, SlotState.ACTIVATING):
            slot.error = CallNotStarted(error)
            reason = "deposed" if isinstance(error, OwnershipLostError) else "failed"
            self.host.drop(slot, reason)

    # -- closing an actor ------------------------------------------------------------------------

    def release(self, slot: ActorSlot, reason: str) -> None:
        """The host drops the instance: mark the file clean if every write is durable, release the lease
        (or keep it while the host holds peers of the actor, see the module docstring). A lease taken
        for an actor whose file never opened here is released without a word to the listeners."""
        placed = slot.placed
        if isinstance(placed, _Claim):  # taken, but the actor never went live here
            slot.placed = None
            self.release_soon(placed.lease)
            return
        state = _live(slot)
        if state is None or state.closed:
            return
        state.closed = True
        if self._trackers.get(slot.key) is state.log.catalog:
            del self._trackers[slot.key]
        log, storage = state.log, slot.storage
        clean = False
        if (log.poisoned is None and storage is not None and not storage.closed and not storage.in_transaction
                and log.idle):
            try:
                write_marker(storage, Marker(self._file_identity(state.lease), log.durable_seq, clean=True))
                clean = True
            except Exception:  # the file stays unclean: it is rebuilt on the next activation
                logger.exception("cluster: marking %s clean failed", state.name)
        log.close()
        state.frames.drop()
        lease = state.lease
        if not lease.lost:
            if reason == "closed":
                self._closing.append(lease)
            elif reason in ("hibernated", "evicted") and clean and self.host.connections_of(slot.id):
                lease.last_seq, lease.tail_bytes = log.durable_seq, log.tail_bytes  # what the file now matches
                self._held[slot.key] = (slot.id, lease)
                return  # still the owner: the peers stay
            else:
                self.release_soon(lease)
        self._notify(slot.id, reason)

    def peers_gone(self, actor_id: ActorId) -> None:
        """The host holds no peer of the actor any more: a lease kept for them while it sleeps goes."""
        held = self._held.pop((actor_id.namespace, actor_id.hex), None)
        if held is not None:
            self.release_soon(held[1])
            self._notify(actor_id, "hibernated")

    async def erase(self, actor_id: ActorId) -> None:
        """The actor's local files were erased (``host.erase``, :mod:`runtime.host.eraser`): delete its rows
        in Postgres -- ``ds_log``, ``ds_snapshots``, ``ds_actors``, ``ds_alarms``, ``ds_catalog`` -- in one
        transaction, under its fence: the lease is taken first (re-taken when this host owned it, which
        bumps the epoch, so a write of the closed instance still in flight is refused), and the delete
        matches only that epoch. Afterwards the actor reads as never written anywhere.

        Raises:
            NotOwnerError: a live host owns the actor (nothing in Postgres changed): the call goes there.
            StorageUnavailableError: Postgres cannot be reached, or the lease was lost to another host
                between taking it and the delete (nothing changed; retry).
        """
        self._trackers.pop((actor_id.namespace, actor_id.hex), None)
        lease = await self._take_lease(actor_id)
        removed = await self.ownership.erase(lease)
        if removed is None:
            raise StorageUnavailableError(f"actor {lease.actor} was taken over while it was being erased; retry")
        logger.info("cluster: erased %s: %d log entries, %d snapshots", lease.actor, *removed)

    def gate_peers(self, slot: ActorSlot, conns: Sequence[ConnectionLike]) -> Sequence[ConnectionLike]:
        """``conns`` as the live actor must use them: each frame waits until the writes committed
        before it are durable (:class:`~runtime.host.frames.GatedConnection`)."""
        state = _live(slot)
        if state is None:
            return conns
        return tuple(GatedConnection(conn, state.frames) for conn in conns)

    def _notify(self, actor_id: ActorId, reason: str) -> None:
        for listener in self._listeners:
            try:
                listener(actor_id, reason)
            except Exception:
                logger.exception("cluster: release listener failed")

    def release_soon(self, lease: Lease) -> None:
        """Release ``lease`` in the background (the next caller anywhere takes the actor at once).

        Releases asked for while one statement runs go together in the next: a host that
        hibernates every actor (a drain) gives them all up in one or two statements.
        """
        if self.host.closed:
            self._closing.append(lease)
            return
        lease.lost = True
        self._releasing.append(lease)
        if self._releases_done is None:
            self._releases_done = trio.Event()
            self.host.spawn(self._release_pending)

    async def _release_pending(self) -> None:
        done = self._releases_done
        try:
            while self._releasing:
                await trio.lowlevel.checkpoint()  # releases asked for in this same turn go together
                leases, self._releasing = self._releasing, []
                try:
                    await self.ownership.release(leases)
                except (StorageUnavailableError, DatabaseError) as exc:
                    logger.info("cluster: %d lease(s) not released (%s); they expire by themselves", len(leases),
                                exc)
        finally:
            self._releases_done = None
            if done is not None:
                done.set()

    async def settle(self) -> None:
        """Return once every lease given to :meth:`release_soon` so far is released (or failed to be:
        each statement is bounded by the statement timeout)."""
        while (done := self._releases_done) is not None:
            await done.wait()

    # -- background ------------------------------------------------------------------------------------

    async def _renew_leases(self) -> None:
        """Every third of a lease: renew every lease this host holds, and the host's own."""
        while True:
            await trio.sleep(self.options.lease_s / 3)
            live = [(slot, state.lease) for slot in self.host.live_slots()
                    if (state := _live(slot)) is not None and not state.closed and not state.lease.lost]
            asleep = list(self._held.items())
            try:
                lost = await self.ownership.renew([lease for _slot, lease in live]
                                                  + [lease for _key, (_id, lease) in asleep])
                await self.ownership.renew_host()
            except (StorageUnavailableError, DatabaseError) as exc:
                logger.warning("cluster: lease renewal failed (%s)", exc)
                continue
            for slot, lease in live:
                if lease in lost:
                    self._deposed(slot, OwnershipLostError(f"another host took actor {lease.actor} over"))
            for key, (actor_id, lease) in asleep:
                if lease in lost and self._held.get(key, (None, None))[1] is lease:
                    del self._held[key]
                    self._counts["deposed"] += 1
                    self._notify(actor_id, "deposed")

    async def _poll_alarms(self) -> None:
        """Deliver due alarms of actors no live host owns (whoever acquires the actor first runs it)."""
        while True:
            await trio.sleep(self.options.alarm_poll_s or 1.0)
            try:
                due = await self.ownership.due_alarms(sorted(self.host.namespaces))
            except (StorageUnavailableError, DatabaseError) as exc:
                logger.info("cluster: looking for due alarms failed (%s)", exc)
                continue
            for actor, _scheduled_ms in due:
                namespace, _, hex_id = actor.partition("/")
                self.host.deliver_alarm_soon(ActorId(namespace, hex_id))


def _claim(slot: ActorSlot) -> _Claim:
    placed = slot.placed
    if not isinstance(placed, _Claim):
        raise AssertionError(f"{describe(slot.id)}: no lease taken for it (acquire comes first)")
    return placed
