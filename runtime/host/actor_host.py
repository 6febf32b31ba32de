"""The actor host: Durable Objects in one trio process.

``async with open_host(data_dir) as host:`` gives an :class:`ActorHost`.
``host.bind(name, AgentClass)`` makes a :class:`~runtime.host.namespace.Namespace`;
its stubs route calls to actors by id. The host guarantees:

* **One live instance per id.** The first call for a sleeping actor
  registers its slot synchronously before anything awaits, so racing callers
  all wait for that one activation: open the file, construct the class,
  ``await on_start()``. When ``on_start`` raises, every call waiting for it
  gets the error, the file is closed and the next call starts afresh.
* **Turns.** Each admitted call runs in its own task in the host's nursery
  (a caller that stops waiting does not cancel the actor's work). Storage is
  synchronous, so calls interleave only where actor code awaits; the gate of
  ``ctx.block_concurrency_while`` holds new calls back. A call that ends
  with a transaction still open is rolled back and answered with
  :class:`~common.errors.TransactionLeftOpenError`; any other reply leaves
  only after its writes committed.
* **Bounded mailboxes.** At most ``max_pending_calls`` unanswered calls per
  actor; the next one gets :class:`~common.errors.ActorOverloadedError` at once.
  With ``max_queue_s``, a call that cannot start within that many seconds of
  reaching a ready actor (of its request's arrival, when the server tells it:
  :data:`runtime.host.turns.ARRIVED`) gets :class:`~common.errors.ActorBusyError`
  and never runs.
* **Hibernation.** An actor with no pending call for ``idle_timeout_s`` (trio
  time) is dropped and its file closed, without a goodbye hook. Idle actors
  sit in one least-recently-idle queue served by one reaper task; touching
  an actor takes it out, so its timer restarts on every turn. A WAL file
  larger than :data:`WAL_KEEP_BYTES` is first checkpointed into the
  database in a worker thread; a call arriving meanwhile waits for the
  close, then wakes the actor. When ``max_active`` files are open, waking
  another actor first evicts the least recently idle one, closing it at
  once without a checkpoint (or waits until one is idle).
* **Alarms** (:mod:`runtime.host.alarms`) run as turns and wake sleeping actors.
* **Faults** (:mod:`runtime.host.file_guard`): one process per data folder
  (:mod:`runtime.host.folder_lock`); a full disk is answered
  :class:`~common.errors.StorageFullError`; a damaged file is quarantined and
  every call to it answered :class:`~common.errors.ActorStorageCorruptError`.

Files: ``<data_dir>/<namespace>/<hex[:2]>/<hex>.sqlite3``; new ones are copied
from ``<data_dir>/_template/v<schema version>.sqlite3``; ``_alarms.sqlite3``,
``_catalog.sqlite3`` and ``_host.lock`` belong to the host.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from actors.agent import Agent, ConnectionLike
from common.errors import ActorOverloadedError, InvalidNamespaceError, UnknownNamespaceError
from runtime.host.alarms import AlarmIndex, HostAlarms, HostClock
from runtime.host.file_guard import FileGuard
from runtime.host.folder_lock import DataFolderLock
from runtime.host.ids import ActorId, check_namespace_name
from runtime.host.lifecycle import WAL_KEEP_BYTES, Lifecycle
from runtime.host.limits import default_max_active, raise_open_file_limit
from runtime.host.namespace import Namespace
from runtime.host.placement import LocalPlacement, Placement, placement_for
from runtime.host.slots import ActorSlot, SlotState
from runtime.host.table import ActorKey, SlotTable
from runtime.host.turns import Turns
from storage.catalog import HostCatalog, actor_files
from storage.kv import ActorStorage
from storage.private_files import make_private_dirs
from storage.sqlite import Durability

if TYPE_CHECKING:
    from runtime.host.cluster import ClusterOptions, HostCluster
    from runtime.host.partitions import PartitionedCluster

__all__ = ["DEFAULT_MAX_PENDING_CALLS", "WAL_KEEP_BYTES", "ActorHost", "HostStatistics", "open_host"]

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: Default bound on unanswered calls per actor.
DEFAULT_MAX_PENDING_CALLS = 1000


@dataclass(frozen=True, slots=True)
class HostStatistics:
    """A snapshot of the host (``host.statistics()``).

    Gauges: ``active`` actors with an open file (at most ``max_active``), of
    which ``idle`` have no pending call; ``activating`` actors being woken
    (opening, in ``on_start`` or waiting for a free file); ``hibernated``:
    actors of bound namespaces with a file on disk and no live instance (counted
    by one folder scan per namespace on the first call, then kept up to date),
    including any whose WAL is still being checkpointed (that file counts
    towards ``max_active`` until it closes); ``running``
    calls executing actor code; ``queued`` calls waiting to start;
    ``connections`` WebSocket peers held. Counters since the host opened:
    ``calls`` answered, ``activations`` (successful), ``failed_activations``,
    ``hibernations`` (idle timeout or ``hibernate()``), ``evictions`` (over
    ``max_active``), ``overloads`` (calls refused), ``alarms_run``,
    ``alarm_failures``. ``max_active`` is the configured bound.
    """

    active: int
    activating: int
    idle: int
    hibernated: int
    running: int
    queued: int
    connections: int
    calls: int
    activations: int
    failed_activations: int
    hibernations: int
    evictions: int
    overloads: int
    alarms_run: int
    alarm_failures: int
    max_active: int


class ActorHost:
    """Routes calls to actors; owns their lifecycle. Made by :func:`open_host`.

    The registry that ties the host's parts: bound namespaces, the table of
    live actors (:mod:`runtime.host.table`), the WebSocket peers, and the
    parts that act on them -- turns (:mod:`runtime.host.turns`), lifecycle
    (:mod:`runtime.host.lifecycle`), alarms (:class:`~runtime.host.alarms.HostAlarms`),
    the file guard (:mod:`runtime.host.file_guard`) -- and the placement
    (:mod:`runtime.host.placement`) whose hooks they call. It implements
    :class:`~runtime.host.placement.PlacementHost` for that placement.

    Attributes:
        data_dir: the folder holding every actor file and the alarm index.
        idle_timeout_s: seconds without pending calls before an actor hibernates
            (``None``: never).
        max_active: most actor files open at once.
        max_pending_calls: most unanswered calls per actor.
        max_queue_s: seconds a call may wait for its turn (``None``: no bound).
        durability: ``"normal"`` or ``"full"`` (see ``SqlStorage.open``).
        clock: the :class:`~runtime.host.alarms.HostClock` alarms follow.
        placement: where actors live (:class:`~runtime.host.placement.LocalPlacement`
            unless the host is a cluster member).
    """

    def __init__(
        self,
        data_dir: Path,
        nursery: trio.Nursery,
        index: AlarmIndex,
        *,
        idle_timeout_s: float | None,
        max_active: int,
        max_pending_calls: int,
        durability: Durability,
        clock: HostClock,
        catalog: HostCatalog,
        max_queue_s: float | None = None,
        placement: Placement | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.idle_timeout_s = idle_timeout_s
        self.max_queue_s = max_queue_s
        self.max_active = max_active
        self.max_pending_calls = max_pending_calls
        self.durability = durability
        self.clock = clock
        self.placement: Placement = placement if placement is not None else LocalPlacement()
        self._nursery = nursery
        self._closed = False
        self._draining = False
        self._namespaces: dict[str, Namespace] = {}
        self._connections: dict[ActorKey, dict[str, ConnectionLike]] = {}
        self._table = SlotTable()
        self._guard = FileGuard(data_dir, catalog, self.path_for, rebuildable=self.placement.rebuildable)
        self._alarms = HostAlarms(self, index, clock, self._table, nursery.start_soon)
        self._lifecycle = Lifecycle(self, self._table, self._guard, self._alarms, nursery)
        self._turns = Turns(self, self._table, self._guard, self._lifecycle, self._alarms, nursery)

    @property
    def cluster(self) -> HostCluster | PartitionedCluster | None:
        """The host's :class:`~runtime.host.cluster.HostCluster` in cluster mode
        (``open_host(..., cluster=...)``; on several databases a
        :class:`~runtime.host.partitions.PartitionedCluster`), else ``None``."""
        return self.placement.cluster

    @property
    def closed(self) -> bool:
        """``True`` once the host began closing: calls get ``HostClosedError``."""
        return self._closed

    @property
    def draining(self) -> bool:
        """``True`` once :meth:`drain` began: new calls get ``HostClosedError`` (they did not run)."""
        return self._draining

    async def drain(self) -> int:
        """Hand every actor back before the host closes: admit no new call (``HostClosedError``, which
        says the call did not run, so a client or another host sends it elsewhere), let the calls
        already admitted finish, hibernate every actor (in a cluster: its writes durable, its lease
        released) and wait until the placement has given them up (:meth:`Placement.settle`).

        Returns how many actors were hibernated. Idempotent; the host stays open (alarms of other
        hosts' actors are still delivered there, and refused here) until ``open_host`` exits.
        """
        self._draining = True
        count = await self.hibernate_all()
        await self.placement.settle()
        return count

    # -- namespaces ----------------------------------------------------------

    def bind(self, name: str, agent_class: type[Agent], *, env: Any = None) -> Namespace:
        """Register ``agent_class`` as namespace ``name`` and return the namespace.

        Args:
            name: 1-64 letters, digits, ``_``, ``-`` (a folder name under ``data_dir``).
            agent_class: an :class:`actors.Agent` subclass, constructed as
                ``agent_class(ctx, env)`` on each activation.
            env: passed to every instance (e.g. a configuration object).

        Raises:
            InvalidNamespaceError: bad name, not an ``Agent`` subclass, or ``name`` already bound.
        """
        check_namespace_name(name)
        if not (isinstance(agent_class, type) and issubclass(agent_class, Agent)):
            raise InvalidNamespaceError(f"namespace {name!r}: {agent_class!r} is not a subclass of actors.Agent")
        if name in self._namespaces:
            raise InvalidNamespaceError(f"namespace {name!r} is already bound")
        namespace = self._namespaces[name] = Namespace(self, name, agent_class, env)
        self._alarms.add_namespace(name)
        self._note_class(name, agent_class)
        return namespace

    def _note_class(self, name: str, agent_class: type[Agent]) -> None:
        """Record which class serves namespace ``name``; warn (one line) when the folder holds actors
        that another class wrote. Their files stay as they are: the new class opens them as its own
        storage, as a Durable Object class deployed over an old one inherits its storage."""
        current = f"{agent_class.__module__}.{agent_class.__qualname__}"
        catalog = self.catalog
        recorded = catalog.bound_class(name)
        if recorded == current:
            return
        if recorded is not None:
            count = sum(1 for _ in actor_files(self.data_dir, name))
            if count:
                logger.warning(
                    "namespace %r of %s holds %d actor%s written by %s; %s serves them now (their files stay "
                    "readable by either class)", name, self.data_dir, count, "" if count == 1 else "s",
                    recorded, current)
        catalog.record_class(name, current)

    def namespace(self, name: str) -> Namespace:
        """The namespace bound as ``name``.

        Raises:
            UnknownNamespaceError: nothing is bound under ``name``.
        """
        try:
            return self._namespaces[name]
        except (KeyError, TypeError):
            raise UnknownNamespaceError(name) from None

    @property
    def namespaces(self) -> dict[str, Namespace]:
        """Bound namespaces by name (a copy)."""
        return dict(self._namespaces)

    def path_for(self, actor_id: ActorId) -> Path:
        """The actor's file: ``<data_dir>/<namespace>/<hex[:2]>/<hex>.sqlite3``."""
        return self.data_dir / actor_id.namespace / actor_id.shard / f"{actor_id.hex}.sqlite3"

    # -- introspection and test controls -------------------------------------

    def statistics(self) -> HostStatistics:
        """A frozen snapshot of gauges and counters (see :class:`HostStatistics`)."""
        slots = self._table.slots.values()
        running = sum(slot.running for slot in slots)
        pending = sum(slot.pending for slot in slots)
        active = self._lifecycle.active_files
        return HostStatistics(
            active=active,
            activating=sum(slot.state is SlotState.ACTIVATING for slot in slots),
            idle=len(self._table.idle),
            hibernated=max(0, sum(self._lifecycle.count_files(name) for name in self._namespaces) - active),
            running=running,
            queued=pending - running,
            connections=sum(len(c) for c in self._connections.values()),
            max_active=self.max_active,
            **self._table.counts,
        )

    def is_active(self, namespace: str | Namespace, actor_id: ActorId | str) -> bool:
        """``True`` while the actor has a live instance (activated, not hibernated)."""
        slot = self._table.slots.get(self._key(namespace, actor_id))
        return slot is not None and slot.state is SlotState.ACTIVE

    @property
    def catalog(self) -> HostCatalog:
        """The data folder's host catalog (:mod:`storage.catalog`): read it; the host writes it."""
        return self._guard.catalog

    @property
    def alarm_index(self) -> AlarmIndex:
        """The data folder's alarm index (:mod:`storage.alarm_index`): read it; the host writes it."""
        return self._alarms.index

    def awake(self, namespace: str) -> list[tuple[ActorId, ActorStorage | None]]:
        """The actors of ``namespace`` with a live instance, each with its open file while no
        transaction is open on it (else ``None``).

        For reads that must not wait for a turn (the session listing): use the
        file at once, synchronously (never across an ``await``), and only to read.
        """
        found = []
        for slot in self._table.slots.values():
            if slot.id.namespace == namespace and slot.state is SlotState.ACTIVE:
                storage = slot.storage
                found.append((slot.id, None if storage is None or storage.in_transaction else storage))
        return found

    def last_write_ms(self, actor_id: ActorId) -> int | None:
        """Epoch milliseconds at which the awake actor's last write committed (``None``: it wrote
        nothing since it woke). Kept in memory; the catalog gets it when the actor hibernates or closes."""
        return self._guard.last_write_ms(actor_id)

    def quiet_writes(self, actor_id: ActorId) -> AbstractContextManager[None]:
        """Commits the current task makes to the actor's file inside the block do not move its write
        times (:meth:`runtime.host.file_guard.FileGuard.quiet_writes`)."""
        return self._guard.quiet_writes(actor_id)

    def knows(self, actor_id: ActorId) -> bool:
        """``True`` when the actor is awake, has a file, or the host catalog lists it (even quarantined)."""
        return self.is_active(actor_id.namespace, actor_id) or self.path_for(actor_id).exists() \
            or self._guard.known(actor_id)

    async def hibernate(self, namespace: str | Namespace, actor_id: ActorId | str) -> bool:
        """Hibernate one actor now, after its pending calls are answered; return once its file is closed
        (a large WAL checkpointed first, see :meth:`Lifecycle.hibernate_slot
        <runtime.host.lifecycle.Lifecycle.hibernate_slot>`).

        Returns ``True`` if it was active, ``False`` if it was not.
        """
        return await self._lifecycle.hibernate(self._key(namespace, actor_id))

    async def hibernate_all(self) -> int:
        """Hibernate every active actor (waiting for pending calls); how many were. Returns once their
        files (and those still being checkpointed) are closed."""
        count = 0
        for key in list(self._table.slots):
            count += await self._lifecycle.hibernate(key)
        await self._lifecycle.wait_checkpoints()
        return count

    async def erase(self, namespace: str | Namespace, actor_id: ActorId | str, *,
                    working_copy_only: bool = False) -> bool:
        """Erase the actor: close it, remove its files (database, WAL, ``-shm``, quarantined copies) and
        forget its catalog and alarm-index rows, leaving none of its bytes in the data folder.

        Its pending calls are answered first; then, with no ``await`` in between, the files go, so no
        activation can race the removal. A call after this returns starts a new, empty actor.
        The placement must offer ``erase(actor_id)`` (:class:`~runtime.host.placement.LocalPlacement`
        does, doing nothing); see :mod:`runtime.host.eraser`.

        Returns ``True`` if the actor existed (a file, a catalog row or a live instance).
        ``working_copy_only``: skip the placement's hook (a cluster member dropping its copy of an
        actor erased in Postgres by another host).

        Raises:
            NotSupportedError: the placement has no ``erase`` hook (nothing was changed).
            NotOwnerError: (cluster) another live host owns the actor: the call belongs there.
        """
        from runtime.host.eraser import erase_actor

        key = self._key(namespace, actor_id)
        parsed = actor_id if isinstance(actor_id, ActorId) else self.namespace(key[0]).id_from_string(actor_id)
        return await erase_actor(self, self._lifecycle, self._guard, self._alarms.index, parsed,
                                 working_copy_only=working_copy_only)

    async def backup_actor(self, actor_id: ActorId, target: Path) -> int | None:
        """Copy the actor's file, consistent as of now, into the new file ``target`` (see
        :mod:`runtime.host.eraser`); ``None`` when it has no file. Returns the bytes copied."""
        from runtime.host.eraser import backup_actor

        return await backup_actor(self, self._lifecycle, actor_id, target)

    # -- calls -----------------------------------------------------------------

    async def run_turn(
        self, actor_id: ActorId, invoke: Callable[[Agent], Awaitable[T]], *, touches_alarm: bool = False,
        exempt: bool = False,
    ) -> T:
        """Run ``await invoke(agent)`` as one turn of the actor (waking it if needed).

        ``exempt``: not refused for load (no mailbox or queue-time bound), e.g. a WebSocket's
        ``on_connect`` and ``on_close``.

        This is what stub calls, alarms and WebSocket events go through
        (:mod:`runtime.host.turns`); tests use it via ``runtime.testing.run_in_actor``.

        Raises:
            HostClosedError: the host is closed (or closed during the turn).
            ActorOverloadedError: the actor's mailbox is full.
            Whatever ``on_start`` or ``invoke`` raised.
        """
        return await self._turns.run_turn(actor_id, invoke, touches_alarm=touches_alarm, exempt=exempt)

    def admission_refusal(self, actor_id: ActorId) -> ActorOverloadedError | None:
        """The error a new call to the actor would get at once for want of room, else ``None``.

        Nothing is admitted or counted: the server asks before it does any
        work for a request (see :mod:`runtime.server.admission`).
        """
        return self._turns.admission_refusal(actor_id)

    # -- alarms and connections ------------------------------------------------

    async def deliver_alarm(self, actor_id: ActorId, *, force: bool = False) -> bool:
        """Run the actor's alarm as a turn if it is due (or at once with ``force``).

        Returns whether ``alarm()`` ran. Its exception propagates after the
        retry was scheduled. Tests use ``runtime.testing.run_alarm``.
        """
        return await self._alarms.deliver(actor_id, force=force)

    def deliver_alarm_soon(self, actor_id: ActorId) -> None:
        """Start delivering the actor's alarm in the background, unless a delivery of it runs already
        (for the placement: a cluster's poll of due alarms of actors nobody owns)."""
        self._alarms.start_delivery(actor_id.namespace, actor_id.hex)

    def register_connection(self, actor_id: ActorId, conn: ConnectionLike) -> None:
        """Hold ``conn`` as a peer of the actor (used by ``Namespace.connect``)."""
        self._connections.setdefault((actor_id.namespace, actor_id.hex), {})[conn.id] = conn

    def unregister_connection(self, actor_id: ActorId, conn: ConnectionLike) -> bool:
        """Forget ``conn``; ``True`` if it was held."""
        key = (actor_id.namespace, actor_id.hex)
        peers = self._connections.get(key, {})
        found = peers.pop(conn.id, None) is not None
        if not peers:
            self._connections.pop(key, None)
            if found:
                self.placement.peers_gone(actor_id)  # e.g. a lease kept for the peers of a sleeping actor goes
        return found

    def connections_of(self, actor_id: ActorId) -> Sequence[ConnectionLike]:
        """The WebSocket peers the host holds for ``actor_id`` (also while it sleeps)."""
        return tuple(self._connections.get((actor_id.namespace, actor_id.hex), {}).values())

    # -- for the placement (runtime.host.placement.PlacementHost) ---------------------

    def spawn(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Run ``await fn(*args)`` in the host's nursery (cancelled when the host closes)."""
        self._nursery.start_soon(fn, *args)

    def live_slots(self) -> list[ActorSlot]:
        """The slots of every actor activating or active now."""
        return list(self._table.slots.values())

    def drop(self, slot: ActorSlot, reason: str) -> None:
        """Drop the actor's instance at once and close its file as it is (the placement lost it);
        calls not started yet get ``slot.error`` when one is set."""
        self._lifecycle.close_slot(slot, None, reason=reason)

    # -- helpers -----------------------------------------------------------------

    def _key(self, namespace: str | Namespace, actor_id: ActorId | str) -> ActorKey:
        ns = namespace if isinstance(namespace, Namespace) else self.namespace(namespace)
        parsed = actor_id if isinstance(actor_id, ActorId) else ns.id_from_string(actor_id)
        return (ns.name, parsed.hex)

    async def _run_background(self, nursery: trio.Nursery) -> None:
        """Start the host's own tasks in ``nursery``: the idle reaper (with an idle timeout) and alarms."""
        if self.idle_timeout_s is not None:
            nursery.start_soon(self._lifecycle.reap_idle)
        await nursery.start(self._alarms.run)

    def _close(self) -> None:
        """The host closes: no new call is admitted; every live actor is dropped and its file closed."""
        self._closed = True
        self._lifecycle.close_all()


@asynccontextmanager
async def open_host(
    data_dir: str | os.PathLike[str],
    *,
    idle_timeout_s: float | None = 30.0,
    max_active: int | None = None,
    durability: str = "normal",
    max_pending_calls: int = DEFAULT_MAX_PENDING_CALLS,
    clock: HostClock | None = None,
    cluster: ClusterOptions | None = None,
    max_queue_s: float | None = None,
    placement: Placement | None = None,
) -> AsyncIterator[ActorHost]:
    """``async with open_host(data_dir) as host:`` -- run an actor host.

    Args:
        data_dir: folder for actor files and the alarm index (created if missing).
        idle_timeout_s: seconds (trio time) an actor may sit with no pending
            call before it hibernates; ``None`` never hibernates on idleness.
        max_active: most actor files open at once; default derived from the
            open-files limit (raised to its hard limit here; see
            :func:`runtime.host.limits.default_max_active`).
        durability: ``"normal"`` (survives a killed process) or ``"full"``
            (also power loss) for every actor file.
        max_pending_calls: unanswered calls one actor may hold before
            callers get ``ActorOverloadedError``.
        clock: the clock alarms follow (default: a new :class:`HostClock`).
        cluster: join a cluster of hosts sharing one Postgres
            (:class:`~runtime.host.cluster.ClusterOptions`; docs/cluster.md):
            ownership, the durable log and failover. ``None`` (default): a
            single host whose files are the truth; nothing of the cluster
            is imported or run.
        max_queue_s: seconds (trio time) a call may wait for its turn once its
            actor is ready (counted from its request's arrival where the server
            set :data:`runtime.host.turns.ARRIVED`); past that it gets
            ``ActorBusyError`` (429) and never runs. ``None`` (default): calls
            wait as long as it takes.
        placement: where actors live, instead of what ``cluster`` decides
            (:class:`~runtime.host.placement.Placement`; e.g. a test's own). It is
            joined, started and closed with the host.

    On exit, running calls are cancelled (their callers get
    ``HostClosedError``) and every file is closed; alarms persist. In
    cluster mode the actors' leases are released too.

    The host holds ``data_dir``'s lock (:mod:`runtime.host.folder_lock`) until it closes.

    Raises:
        ValueError: a bad argument (or both ``cluster`` and ``placement``).
        StorageUnavailableError: cluster mode, and Postgres cannot be reached.
        DataFolderLockedError: another process (or host) holds ``data_dir``.
    """
    if durability not in ("normal", "full"):
        raise ValueError(f"durability must be 'normal' or 'full', not {durability!r}")
    if idle_timeout_s is not None and not idle_timeout_s > 0:
        raise ValueError(f"idle_timeout_s must be positive or None, not {idle_timeout_s!r}")
    if max_active is not None and (isinstance(max_active, bool) or not isinstance(max_active, int) or max_active < 1):
        raise ValueError(f"max_active must be an int of at least 1, not {max_active!r}")
    if isinstance(max_pending_calls, bool) or not isinstance(max_pending_calls, int) or max_pending_calls < 1:
        raise ValueError(f"max_pending_calls must be an int of at least 1, not {max_pending_calls!r}")
    level: Durability = "full" if durability == "full" else "normal"
    placement = placement_for(cluster, placement)  # bad cluster options fail before anything starts
    if max_queue_s is not None and not max_queue_s > 0:
        raise ValueError(f"max_queue_s must be positive or None, not {max_queue_s!r}")
    root = Path(data_dir)
    make_private_dirs(root)  # 0700 when it is new (storage.private_files)
    limit = raise_open_file_limit()
    folder_lock = DataFolderLock.acquire(root)
    try:
        index = AlarmIndex.open(root, durability=level)
    except BaseException:
        folder_lock.release()
        raise
    catalog: HostCatalog | None = None
    host: ActorHost | None = None
    joined: Placement | None = None
    try:
        catalog = HostCatalog.open(root, durability=level)
        await placement.join()  # outside the nursery: a failure is itself, not a group around it
        joined = placement
        async with trio.open_nursery() as nursery:
            host = ActorHost(
                root, nursery, index,
                idle_timeout_s=idle_timeout_s,
                max_active=max_active or default_max_active(limit),
                max_pending_calls=max_pending_calls,
                durability=level,
                clock=clock or HostClock(),
                catalog=catalog,
                max_queue_s=max_queue_s,
                placement=placement,
            )
            await placement.start(host, nursery)
            await host._run_background(nursery)
            try:
                yield host
            finally:
                host._closed = True
                nursery.cancel_scope.cancel()
    finally:
        try:
            if host is not None:
                host._close()
            if joined is not None:
                await joined.aclose()
        finally:
            if catalog is not None:
                catalog.close()
            index.close()
            folder_lock.release()
