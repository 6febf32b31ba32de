"""Cluster mode of the actor host: several hosts, one Postgres, one live instance per actor.

``open_host(data_dir, cluster=ClusterOptions(dsn, advertise_url))`` runs the
host as a member of a cluster (docs/cluster.md has the whole design). What
changes against the single host, all of it here:

* **Activation** first takes the actor's lease in Postgres
  (:class:`storage.cluster.ownership.Ownership`). When a live host owns it,
  :class:`~storage.errors.NotOwnerError` (with the owner's URL) is raised
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
  :class:`~storage.errors.OwnershipLostError` or
  :class:`~storage.errors.StorageUnavailableError` (503), calls not started yet
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
* **Alarms** travel with the append (``ds_alarms``); only the owner runs an
  actor's alarm. Due alarms of actors nobody owns are found by a poll on
  every host; whichever host acquires the actor first delivers it.

Postgres down: activations and writes fail with
:class:`~storage.errors.StorageUnavailableError` (503, retryable) within the
statement timeout (below the lease), never a hang; every connection heals by
itself once the server is back.
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from actors.agent import ConnectionLike
from runtime.host.ids import ActorId
from runtime.host.slots import ActorSlot, CallNotStarted, SlotState, describe
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
from storage.errors import (
    DatabaseError,
    NotOwnerError,
    OwnershipLostError,
    StorageUnavailableError,
)
from storage.kv import ActorStorage
from storage.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from runtime.host.actor_host import ActorHost

__all__ = ["CallNotStarted", "ClusterOptions", "ClusterStatistics", "HostCluster"]

logger = logging.getLogger(__name__)

#: Listener of released actors: ``listener(actor_id, reason)``; reasons below.
ReleaseListener = Callable[[ActorId, str], None]
RELEASE_REASONS = ("hibernated", "evicted", "deposed", "failed", "closed")


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
        host_id = self.host_id or f"{socket.gethostname()}-{_pid()}-{uuid.uuid4().hex[:8]}"
        return ClusterOptions(
            dsn=self.dsn, advertise_url=self.advertise_url.rstrip("/"), host_id=host_id, lease_s=self.lease_s,
            margin_fraction=self.margin_fraction, statement_timeout_s=statement,
            connect_timeout_s=self.connect_timeout_s or statement, pool_size=self.pool_size, senders=self.senders,
            snapshot_min_bytes=self.snapshot_min_bytes, alarm_poll_s=self.alarm_poll_s or self.lease_s / 3,
        )


def _pid() -> int:
    import os

    return os.getpid()


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


class ActorCluster:
    """The cluster side of one live actor (``slot.cluster``; internal)."""

    __slots__ = ("closed", "frames", "lease", "log", "name", "renewing")

    def __init__(self, name: str, lease: Lease, log: ActorLog, frames: FrameGate) -> None:
        self.name = name
        self.lease = lease
        self.log = log
        self.frames = frames
        self.renewing = trio.Lock()
        self.closed = False  # the host dropped the instance (calls still running get the log's error)


class HostCluster:
    """A host's membership in the cluster (``host.cluster``; made by ``open_host``).

    Attributes:
        options: the checked :class:`ClusterOptions`.
        host_id: this host's id.
        advertise_url: where other hosts forward calls for actors this host owns.
        cluster_id: the cluster's id (from Postgres).
    """

    def __init__(self, options: ClusterOptions) -> None:
        self.options = options = options.checked()
        self.host: ActorHost = None  # type: ignore[assignment]  # set by start()
        self.host_id: str = options.host_id or ""
        self.advertise_url = options.advertise_url
        self.cluster_id = ""
        self.pool = PgPool(options.dsn, size=options.pool_size, connect_timeout_s=options.connect_timeout_s or 1.0,
                           statement_timeout_s=options.statement_timeout_s or 1.0)
        self.ownership = Ownership(self.pool, self.host_id, options.advertise_url, lease_s=options.lease_s,
                                   margin_fraction=options.margin_fraction)
        self.appender = GroupCommitAppender(self.ownership, self.pool, senders=options.senders,
                                            snapshot_min_bytes=options.snapshot_min_bytes)
        self._listeners: list[ReleaseListener] = []
        self._closing: list[Lease] = []  # leases of actors closed with the host, released in aclose()
        self._held: dict[tuple[str, str], tuple[ActorId, Lease]] = {}  # asleep, with peers: still ours
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
            await self.ownership.register_host()
        except BaseException:
            self.pool.close()
            raise

    async def start(self, host: ActorHost, nursery: trio.Nursery) -> None:
        """Serve ``host`` (after :meth:`join`): start the appender, renewals and alarm polls in ``nursery``."""
        self.host = host
        host.cluster = self
        await nursery.start(self.appender.run)
        nursery.start_soon(self._renew_leases)
        nursery.start_soon(self._poll_alarms)

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
            leases=len(self._held) + sum(slot.cluster is not None and not slot.cluster.closed
                                         for slot in self.host._slots.values()),
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

    # -- activation --------------------------------------------------------------------------------

    async def acquire(self, actor_id: ActorId) -> Lease:
        """Take the actor's lease.

        Raises:
            NotOwnerError: a live host owns it (nothing was touched here).
            StorageUnavailableError: Postgres cannot be reached.
        """
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

    async def make_current(self, actor_id: ActorId, lease: Lease, path: Any, template: Any, durability: str) -> int:
        """Rebuild the actor's file from Postgres unless it is clean at the log's newest entry.

        Returns the file's schema version (``PRAGMA user_version``) as the log has it:
        when opening the file migrates it, :meth:`attach` ships a snapshot first.

        Raises:
            StorageUnavailableError: Postgres cannot be reached.
            RestoreError: the log does not rebuild the file (damage; nothing changed).
        """
        marker, version = await trio.to_thread.run_sync(file_state, path)
        if (marker is not None and marker.clean and marker.cluster_id == self.cluster_id
                and marker.last_seq == lease.last_seq and version is not None):
            self._counts["kept"] += 1
            return version
        started = trio.current_time()
        await restore_actor(self.pool, lease, path, template=template, cluster_id=self.cluster_id,
                            durability=durability, current_version=SCHEMA_VERSION)
        self._counts["restores"] += 1
        self._restore_s += trio.current_time() - started
        _marker, version = await trio.to_thread.run_sync(file_state, path)
        return version or 0

    def attach(self, slot: ActorSlot, storage: ActorStorage, lease: Lease, log_version: int) -> None:
        """Start capturing the actor's writes (before the agent exists); mark its file unclean.

        ``log_version`` is the file's schema version before it was opened; when
        opening migrated it, the first entry is a snapshot of the migrated file.
        """
        capture = start_capture(storage, Marker(self.cluster_id, lease.last_seq, clean=False))
        row = storage.read_alarm_row()
        log = ActorLog(storage, capture, lease, self.appender, on_poison=lambda error: self._poisoned(slot, error),
                       alarm_ms=None if row is None else row.scheduled_ms)
        slot.cluster = ActorCluster(describe(slot.id), lease, log, FrameGate(log, self.host._nursery))
        if storage.user_version != log_version:
            log.ship_snapshot()

    # -- turns --------------------------------------------------------------------------------------

    async def before_call(self, slot: ActorSlot) -> None:
        """Check the lease before a call starts (renewing it when the local deadline passed).

        Raises:
            CallNotStarted: the actor was lost; the call is admitted again.
            StorageUnavailableError: the lease could not be renewed (Postgres unreachable).
        """
        state = slot.cluster
        if state is None:
            return
        if state.log.poisoned is not None:
            raise CallNotStarted(state.log.poisoned)
        if not state.lease.live():
            await self._renew(slot, state, started=False)

    async def before_reply(self, slot: ActorSlot) -> None:
        """Hold the reply until the writes before it are durable and the lease is live.

        Raises:
            OwnershipLostError, StorageUnavailableError: the actor's log failed
                (its writes were not kept), or the lease was lost meanwhile.
        """
        state = slot.cluster
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
        state = slot.cluster
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
            self.host._close_slot(slot, None, reason=reason)

    # -- closing an actor ------------------------------------------------------------------------

    def on_close(self, slot: ActorSlot, reason: str) -> None:
        """The host drops the instance: mark the file clean if every write is durable, release the lease
        (or keep it while the host holds peers of the actor, see the module docstring)."""
        state = slot.cluster
        if state is None or state.closed:
            return
        state.closed = True
        log, storage = state.log, slot.storage
        writable = storage is not None and not storage.closed and not storage.in_transaction
        clean = False
        if log.poisoned is None and writable and log.idle:
            try:
                write_marker(storage, Marker(self.cluster_id, log.durable_seq, clean=True))
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

    def _notify(self, actor_id: ActorId, reason: str) -> None:
        for listener in self._listeners:
            try:
                listener(actor_id, reason)
            except Exception:
                logger.exception("cluster: release listener failed")

    def release_soon(self, lease: Lease) -> None:
        """Release ``lease`` in the background (the next caller anywhere takes the actor at once)."""
        if self.host._closed:
            self._closing.append(lease)
        else:
            lease.lost = True
            self.host._nursery.start_soon(self._release, lease)

    async def _release(self, lease: Lease) -> None:
        try:
            await self.ownership.release([lease])
        except (StorageUnavailableError, DatabaseError) as exc:
            logger.info("cluster: lease on %s not released (%s); it expires by itself", lease.actor, exc)

    # -- background ------------------------------------------------------------------------------------

    async def _renew_leases(self) -> None:
        """Every third of a lease: renew every lease this host holds, and the host's own."""
        while True:
            await trio.sleep(self.options.lease_s / 3)
            live = [(slot, slot.cluster.lease) for slot in list(self.host._slots.values())
                    if slot.cluster is not None and not slot.cluster.closed and not slot.cluster.lease.lost]
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
                due = await self.ownership.due_alarms(sorted(self.host._namespaces))
            except (StorageUnavailableError, DatabaseError) as exc:
                logger.info("cluster: looking for due alarms failed (%s)", exc)
                continue
            for actor, _scheduled_ms in due:
                namespace, _, hex_id = actor.partition("/")
                self.host._start_alarm_delivery(namespace, hex_id)


class FrameGate:
    """Holds an actor's outgoing WebSocket frames until the writes before each are durable."""

    __slots__ = ("_frames", "_log", "_nursery", "_running")

    def __init__(self, log: ActorLog, nursery: trio.Nursery) -> None:
        self._log = log
        self._nursery = nursery
        self._frames: deque[tuple[int, ConnectionLike, str | bytes]] = deque()
        self._running = False

    def send(self, conn: ConnectionLike, message: str | bytes) -> None:
        """Send ``message`` to ``conn`` once the writes committed so far are durable.

        Raises:
            the log's poisoning error (the frame is dropped), or what ``conn.send`` raises.
        """
        target = self._log.barrier()
        if not self._frames and self._log.is_durable(target):
            conn.send(message)
            return
        self._frames.append((target, conn, message))
        if not self._running:
            self._running = True
            self._nursery.start_soon(self._release)

    def flush(self) -> None:
        """Send every held frame whose writes are durable (in order)."""
        frames = self._frames
        while frames and self._log.is_durable(frames[0][0]):
            _target, conn, message = frames.popleft()
            try:
                conn.send(message)
            except Exception:
                logger.warning("frame to connection %s failed", getattr(conn, "id", "?"), exc_info=True)

    def drop(self) -> None:
        """Forget held frames (their writes will never be durable)."""
        if self._frames:
            logger.warning("cluster: %d WebSocket frames dropped: their writes are not durable", len(self._frames))
        self._frames.clear()

    async def _release(self) -> None:
        try:
            while self._frames:
                try:
                    await self._log.wait(self._frames[0][0])
                except Exception:  # noqa: BLE001 - the log failed: these frames never become durable
                    self.drop()
                    return
                if self._log.closed and not self._log.is_durable(self._frames[0][0]):
                    self.drop()
                    return
                self.flush()
        finally:
            self._running = False


class GatedConnection:
    """A WebSocket peer as an actor sees it in cluster mode: its frames pass the output gate.

    Compares equal to (and hashes as) the peer it wraps, so ``broadcast(exclude=[conn])`` works.
    """

    __slots__ = ("_conn", "_gate", "id")

    def __init__(self, conn: ConnectionLike, gate: FrameGate) -> None:
        self.id = conn.id
        self._conn = conn
        self._gate = gate

    @property
    def peer(self) -> ConnectionLike:
        """The connection this one wraps."""
        return self._conn

    def send(self, message: str | bytes) -> None:
        self._gate.send(self._conn, message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GatedConnection):
            return other._conn is self._conn
        return other is self._conn

    def __hash__(self) -> int:
        return hash(id(self._conn))

    def __repr__(self) -> str:
        return f"<GatedConnection {self.id}>"


def gate_connections(slot: ActorSlot, conns: Sequence[ConnectionLike]) -> Sequence[ConnectionLike]:
    """``conns`` as the actor must use them: wrapped in cluster mode, as they are otherwise."""
    state = slot.cluster
    if state is None:
        return conns
    return tuple(GatedConnection(conn, state.frames) for conn in conns)


def gate_connection(slot: ActorSlot, conn: ConnectionLike) -> ConnectionLike:
    """One connection as the actor must use it (see :func:`gate_connections`)."""
    state = slot.cluster
    return conn if state is None else GatedConnection(conn, state.frames)

