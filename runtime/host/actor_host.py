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
  :class:`~storage.errors.TransactionLeftOpenError`; any other reply leaves
  only after its writes committed.
* **Bounded mailboxes.** At most ``max_pending_calls`` unanswered calls per
  actor; the next one gets :class:`~storage.errors.ActorOverloadedError` at once.
* **Hibernation.** An actor with no pending call for ``idle_timeout_s`` (trio
  time) is dropped and its file closed, without a goodbye hook. Idle actors
  sit in one least-recently-idle queue served by one reaper task; touching
  an actor takes it out, so its timer restarts on every turn. When
  ``max_active`` files are open, waking another actor first evicts the
  least recently idle one (or waits until one is idle).
* **Alarms** (:mod:`runtime.host.alarms`) run as turns and wake sleeping actors.

Files: ``<data_dir>/<namespace>/<hex[:2]>/<hex>.sqlite3``; new ones are copied
from ``<data_dir>/_template/v<schema version>.sqlite3``.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from actors.agent import Agent, ConnectionLike
from runtime.host.alarms import AlarmIndex, AlarmScheduler, HostClock, run_alarm_handler
from runtime.host.ids import ActorId, check_namespace_name
from runtime.host.limits import default_max_active, raise_open_file_limit
from runtime.host.namespace import Namespace
from runtime.host.slots import ActorContext, ActorSlot, CallNotStarted, SlotState, describe
from storage.errors import (
    ActorOverloadedError,
    HostClosedError,
    InvalidNamespaceError,
    NotOwnerError,
    TransactionLeftOpenError,
    UnknownNamespaceError,
)
from storage.kv import ActorStorage
from storage.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from runtime.host.cluster import ClusterOptions, HostCluster

logger = logging.getLogger(__name__)

T = TypeVar("T")
ActorKey = tuple[str, str]

#: Default bound on unanswered calls per actor.
DEFAULT_MAX_PENDING_CALLS = 1000
#: Times a call is admitted again when its actor was dropped (cluster mode) before it started.
_READMISSIONS = 3
#: Why a counter's closing releases an actor (cluster mode listeners).
_CLOSE_REASONS = {"hibernations": "hibernated", "evictions": "evicted"}


@dataclass(frozen=True, slots=True)
class HostStatistics:
    """A snapshot of the host (``host.statistics()``).

    Gauges: ``active`` actors with an open file (at most ``max_active``), of
    which ``idle`` have no pending call; ``activating`` actors being woken
    (opening, in ``on_start`` or waiting for a free file); ``hibernated``:
    actors of bound namespaces with a file on disk and no open file (counted
    by one folder scan per namespace on the first call, then kept up to date); ``running``
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


class _Reply:
    __slots__ = ("done", "value", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class ActorHost:
    """Routes calls to actors; owns their lifecycle. Made by :func:`open_host`.

    Attributes:
        data_dir: the folder holding every actor file and the alarm index.
        idle_timeout_s: seconds without pending calls before an actor hibernates
            (``None``: never).
        max_active: most actor files open at once.
        max_pending_calls: most unanswered calls per actor.
        durability: ``"normal"`` or ``"full"`` (see ``SqlStorage.open``).
        clock: the :class:`~runtime.host.alarms.HostClock` alarms follow.
        cluster: the host's :class:`~runtime.host.cluster.HostCluster` in
            cluster mode (``open_host(..., cluster=...)``), else ``None``.
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
        durability: str,
        clock: HostClock,
    ) -> None:
        self.data_dir = data_dir
        self.idle_timeout_s = idle_timeout_s
        self.max_active = max_active
        self.max_pending_calls = max_pending_calls
        self.durability = durability
        self.clock = clock
        self._template = data_dir / "_template" / f"v{SCHEMA_VERSION}.sqlite3"
        self._nursery = nursery
        self._index = index
        self._scheduler = AlarmScheduler(index, clock, self._start_alarm_delivery)
        self._namespaces: dict[str, Namespace] = {}
        self._slots: dict[ActorKey, ActorSlot] = {}
        self._idle: OrderedDict[ActorKey, float] = OrderedDict()  # key -> trio time it went idle
        self._idle_wakeup = trio.Event()
        self._settled = trio.lowlevel.ParkingLot()  # unparked when a slot goes idle or closes
        self._open_files = 0
        self._files: dict[str, int] = {}  # namespace -> actor files on disk, once scanned
        self._connections: dict[ActorKey, dict[str, ConnectionLike]] = {}
        self._alarm_deliveries: set[ActorKey] = set()
        self._closed = False
        self.cluster: HostCluster | None = None
        self._counts = dict.fromkeys(
            ("calls", "activations", "failed_activations", "hibernations", "evictions", "overloads",
             "alarms_run", "alarm_failures"), 0)

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
        self._scheduler.add_namespace(name)
        return namespace

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
        running = sum(slot.running for slot in self._slots.values())
        pending = sum(slot.pending for slot in self._slots.values())
        return HostStatistics(
            active=self._open_files,
            activating=sum(slot.state is SlotState.ACTIVATING for slot in self._slots.values()),
            idle=len(self._idle),
            hibernated=max(0, sum(self._count_files(name) for name in self._namespaces) - self._open_files),
            running=running,
            queued=pending - running,
            connections=sum(len(c) for c in self._connections.values()),
            max_active=self.max_active,
            **self._counts,
        )

    def is_active(self, namespace: str | Namespace, actor_id: ActorId | str) -> bool:
        """``True`` while the actor has a live instance (activated, not hibernated)."""
        slot = self._slots.get(self._key(namespace, actor_id))
        return slot is not None and slot.state is SlotState.ACTIVE

    async def hibernate(self, namespace: str | Namespace, actor_id: ActorId | str) -> bool:
        """Hibernate one actor now, after its pending calls are answered.

        Returns ``True`` if it was active, ``False`` if it was not.
        """
        key = self._key(namespace, actor_id)
        while (slot := self._slots.get(key)) is not None:
            if slot.state is SlotState.ACTIVE and slot.pending == 0:
                self._close_slot(slot, "hibernations")
                return True
            await self._settled.park()
        return False

    async def hibernate_all(self) -> int:
        """Hibernate every active actor (waiting for pending calls); how many were."""
        count = 0
        for namespace, hex_id in list(self._slots):
            count += await self.hibernate(namespace, hex_id)
        return count

    def connections_of(self, actor_id: ActorId) -> Sequence[ConnectionLike]:
        """The WebSocket peers the host holds for ``actor_id`` (also while it sleeps)."""
        return tuple(self._connections.get((actor_id.namespace, actor_id.hex), {}).values())

    # -- calls -----------------------------------------------------------------

    async def run_turn(
        self, actor_id: ActorId, invoke: Callable[[Agent], Awaitable[T]], *, touches_alarm: bool = False
    ) -> T:
        """Run ``await invoke(agent)`` as one turn of the actor (waking it if needed).

        This is what stub calls, alarms and WebSocket events go through;
        tests use it via ``runtime.testing.run_in_actor``.

        Raises:
            HostClosedError: the host is closed (or closed during the turn).
            ActorOverloadedError: the actor's mailbox is full.
            Whatever ``on_start`` or ``invoke`` raised.
        """
        for admission in range(_READMISSIONS + 1):
            slot = self._admit(actor_id)
            reply = _Reply()
            self._nursery.start_soon(self._turn, slot, invoke, reply, touches_alarm)
            await reply.done.wait()
            if reply.error is not None:
                error, reply.error = reply.error, None
                if isinstance(error, CallNotStarted):  # cluster mode: the actor was dropped first
                    if admission < _READMISSIONS:
                        continue
                    raise error.cause from None
                raise error
            return reply.value
        raise AssertionError("unreachable")

    def _admit(self, actor_id: ActorId) -> ActorSlot:
        if self._closed:
            raise HostClosedError("the actor host is closed")
        key = (actor_id.namespace, actor_id.hex)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = ActorSlot(actor_id)
            self._nursery.start_soon(self._activate, slot)
        elif slot.pending >= self.max_pending_calls:
            self._counts["overloads"] += 1
            raise ActorOverloadedError(describe(actor_id), self.max_pending_calls)
        if slot.pending == 0:
            self._idle.pop(key, None)
        slot.pending += 1
        return slot

    async def _turn(
        self, slot: ActorSlot, invoke: Callable[[Agent], Awaitable[Any]], reply: _Reply, touches_alarm: bool
    ) -> None:
        try:
            reply.value = await self._run(slot, invoke, touches_alarm)
        except Exception as exc:
            reply.error = exc
        except BaseException:
            reply.error = HostClosedError(f"the actor host closed during a call to {describe(slot.id)}")
            raise
        finally:
            self._counts["calls"] += 1
            reply.done.set()
            self._release(slot)

    async def _run(self, slot: ActorSlot, invoke: Callable[[Agent], Awaitable[T]], touches_alarm: bool) -> T:
        await slot.enter()
        if self.cluster is not None:
            await self.cluster.before_call(slot)  # the lease is live (or the call is admitted again)
        slot.running += 1
        try:
            return await invoke(slot.agent)
        finally:
            slot.running -= 1
            slot.alarm_dirty |= touches_alarm
            await self._output_gate(slot)
            self._end_turn(slot)
            if self.cluster is not None:
                await self.cluster.before_reply(slot)  # the writes before the reply are durable

    async def _output_gate(self, slot: ActorSlot) -> None:
        """Hold the reply while a transaction is open: it may contain this call's writes.

        With other calls running, one of them owns the transaction: wait for its
        commit (reply) or rollback (error). Otherwise the transaction was left
        open by this call: roll it back and raise.
        """
        storage = slot.storage
        while storage is not None and storage.in_transaction:
            if slot.running == 0:
                storage.rollback()
                raise TransactionLeftOpenError(
                    f"a call to {describe(slot.id)} ended inside a storage transaction, which was rolled back "
                    "(end every transaction before the call returns)"
                )
            rollbacks = slot.rollbacks
            await slot.gate_lot.park()
            if slot.rollbacks != rollbacks:
                raise TransactionLeftOpenError(
                    f"a call to {describe(slot.id)} wrote inside another call's transaction, which was rolled back"
                )

    def _end_turn(self, slot: ActorSlot) -> None:
        """Copy a changed alarm to the index."""
        storage = slot.storage
        if storage is None:
            return
        if slot.alarm_dirty:
            slot.alarm_dirty = False
            self._index.sync(slot.id.namespace, slot.id.hex, storage)
            self._scheduler.wake()

    def _release(self, slot: ActorSlot) -> None:
        slot.pending -= 1
        if slot.pending == 0 and slot.state is SlotState.ACTIVE:
            self._idle[slot.key] = trio.current_time()
            self._idle_wakeup.set()
            self._settled.unpark_all()

    # -- activation, hibernation, eviction -------------------------------------

    async def _activate(self, slot: ActorSlot) -> None:
        lease = log_version = None
        try:
            if self.cluster is not None:
                lease = await self.cluster.acquire(slot.id)  # NotOwnerError before any file is touched
            await self._reserve_file()
            if lease is not None:
                log_version = await self._make_current(slot, lease)
            slot.attach(self._open_storage(slot.id))
            storage = slot.storage
            if lease is not None:
                self.cluster.attach(slot, storage, lease, log_version)  # capture every write from here on
                slot.alarm_dirty = True  # index the file's alarm here (it may come from another host)
            storage.alarm_listener = partial(self._on_alarm_change, slot)
            namespace = self._namespaces[slot.id.namespace]
            slot.agent = namespace.agent_class(ActorContext(self, slot, storage), namespace.env)
            await slot.hold_gate(slot.agent.on_start)
            await self._output_gate(slot)
            self._end_turn(slot)
            if self.cluster is not None:
                await self.cluster.before_reply(slot)
        except Exception as exc:
            self._fail_activation(slot, exc, lease)
        except BaseException:
            self._fail_activation(slot, HostClosedError("the actor host closed while an actor was starting"), lease)
            raise
        else:
            slot.state = SlotState.ACTIVE
            self._counts["activations"] += 1
            slot.gate_changed()

    async def _make_current(self, slot: ActorSlot, lease: Any) -> int:
        """Cluster mode: rebuild the file from Postgres unless it is current; give back the reservation on failure.

        Returns the file's schema version before it is opened."""
        path = self.path_for(slot.id)
        existed = path.exists()
        try:
            version = await self.cluster.make_current(slot.id, lease, path, self._template, self.durability)
        except BaseException:
            self._open_files -= 1
            raise
        if not existed and slot.id.namespace in self._files:
            self._files[slot.id.namespace] += 1
        return version

    def _open_storage(self, actor_id: ActorId) -> ActorStorage:
        """Open the actor's file (copying the template when new); give back the reservation on failure."""
        path = self.path_for(actor_id)
        existed = path.exists()
        try:
            storage = ActorStorage.open(path, durability=self.durability, template=self._template)
        except BaseException:
            self._open_files -= 1
            raise
        if not existed and actor_id.namespace in self._files:
            self._files[actor_id.namespace] += 1
        try:
            storage.skip_checkpoint_on_close()  # hibernating must not wait for the disk
        except BaseException:
            storage.close()
            self._open_files -= 1
            raise
        return storage

    def _count_files(self, namespace: str) -> int:
        """Actor files of ``namespace`` on disk (scanned once, then counted as they are created)."""
        if namespace not in self._files:
            folder = self.data_dir / namespace
            count = 0
            if folder.is_dir():
                for shard in os.scandir(folder):
                    if shard.is_dir():
                        count += sum(entry.name.endswith(".sqlite3") for entry in os.scandir(shard.path))
            self._files[namespace] = count
        return self._files[namespace]

    def _fail_activation(self, slot: ActorSlot, error: BaseException, lease: Any = None) -> None:
        level = logging.DEBUG if isinstance(error, NotOwnerError | CallNotStarted) else logging.WARNING
        logger.log(level, "activation of %s failed: %r", describe(slot.id), error)
        slot.error = error
        self._counts["failed_activations"] += 1
        if lease is not None and slot.cluster is None:
            self.cluster.release_soon(lease)  # taken, but the actor never went live here
        self._close_slot(slot, None, reason="failed")
        slot.state = SlotState.FAILED
        slot.gate_changed()

    async def _reserve_file(self) -> None:
        """Count one more open actor file, evicting the least recently idle actor if full."""
        while self._open_files >= self.max_active:
            if self._idle:
                self._close_slot(self._slots[next(iter(self._idle))], "evictions")
            else:
                await self._settled.park()
        self._open_files += 1

    def _close_slot(self, slot: ActorSlot, counter: str | None, *, reason: str = "closed") -> None:
        """Drop the instance and close its file (synchronous: nothing can interleave)."""
        if self._slots.get(slot.key) is slot:
            del self._slots[slot.key]
        self._idle.pop(slot.key, None)
        slot.state = SlotState.CLOSED
        slot.agent = None
        if slot.cluster is not None:
            self.cluster.on_close(slot, _CLOSE_REASONS.get(counter or "", reason))
        storage, slot.storage = slot.storage, None
        if storage is not None:
            self._open_files -= 1
            try:
                storage.close()
            except Exception:
                logger.exception("closing the file of %s failed", describe(slot.id))
        if counter is not None:
            self._counts[counter] += 1
        self._settled.unpark_all()

    async def _reap_idle(self) -> None:
        """Hibernate each actor ``idle_timeout_s`` after it went idle (one task for all)."""
        while True:
            if not self._idle:
                self._idle_wakeup = trio.Event()
                await self._idle_wakeup.wait()
                continue
            key, since = next(iter(self._idle.items()))
            deadline = since + self.idle_timeout_s
            if trio.current_time() >= deadline:
                self._close_slot(self._slots[key], "hibernations")
            else:
                await trio.sleep_until(deadline)

    # -- alarms and connections ------------------------------------------------

    def _on_alarm_change(self, slot: ActorSlot, scheduled_ms: int | None) -> None:
        """``set_alarm`` indexes before writing the row; every change syncs at turn end."""
        if scheduled_ms is not None:
            self._index.upsert(slot.id.namespace, slot.id.hex, scheduled_ms)
            self._scheduler.wake()
        slot.alarm_dirty = True

    def _start_alarm_delivery(self, namespace: str, hex_id: str) -> None:
        key = (namespace, hex_id)
        if key not in self._alarm_deliveries and not self._closed:
            self._alarm_deliveries.add(key)
            self._nursery.start_soon(self._deliver_in_background, ActorId(namespace, hex_id))

    async def _deliver_in_background(self, actor_id: ActorId) -> None:
        try:
            await self.deliver_alarm(actor_id)
        except HostClosedError:
            pass
        except NotOwnerError:  # cluster mode: its owner runs it; this host's index entry is stale
            self._index.remove(actor_id.namespace, actor_id.hex)
        except Exception:
            logger.warning("alarm of %s failed", describe(actor_id), exc_info=True)
        finally:
            self._alarm_deliveries.discard((actor_id.namespace, actor_id.hex))

    async def deliver_alarm(self, actor_id: ActorId, *, force: bool = False) -> bool:
        """Run the actor's alarm as a turn if it is due (or at once with ``force``).

        Returns whether ``alarm()`` ran. Its exception propagates after the
        retry was scheduled. Tests use ``runtime.testing.run_alarm``.
        """

        async def invoke(agent: Agent) -> bool:
            try:
                ran = await run_alarm_handler(agent, self.clock, force=force)
            except Exception:
                self._counts["alarms_run"] += 1
                self._counts["alarm_failures"] += 1
                raise
            self._counts["alarms_run"] += ran
            return ran

        return await self.run_turn(actor_id, invoke, touches_alarm=True)

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
            if found and self.cluster is not None:
                self.cluster.peers_gone(actor_id)  # a lease kept for the peers of a sleeping actor goes
        return found

    # -- helpers -----------------------------------------------------------------

    def _key(self, namespace: str | Namespace, actor_id: ActorId | str) -> ActorKey:
        ns = namespace if isinstance(namespace, Namespace) else self.namespace(namespace)
        parsed = actor_id if isinstance(actor_id, ActorId) else ns.id_from_string(actor_id)
        return (ns.name, parsed.hex)

    def _shutdown(self) -> None:
        self._closed = True
        for slot in list(self._slots.values()):
            self._close_slot(slot, None)


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

    On exit, running calls are cancelled (their callers get
    ``HostClosedError``) and every file is closed; alarms persist. In
    cluster mode the actors' leases are released too.

    Raises:
        ValueError: a bad argument.
        StorageUnavailableError: cluster mode, and Postgres cannot be reached.
    """
    if durability not in ("normal", "full"):
        raise ValueError(f"durability must be 'normal' or 'full', not {durability!r}")
    if idle_timeout_s is not None and not idle_timeout_s > 0:
        raise ValueError(f"idle_timeout_s must be positive or None, not {idle_timeout_s!r}")
    if max_active is not None and (isinstance(max_active, bool) or not isinstance(max_active, int) or max_active < 1):
        raise ValueError(f"max_active must be an int of at least 1, not {max_active!r}")
    if isinstance(max_pending_calls, bool) or not isinstance(max_pending_calls, int) or max_pending_calls < 1:
        raise ValueError(f"max_pending_calls must be an int of at least 1, not {max_pending_calls!r}")
    if cluster is not None:
        from runtime.host.cluster import HostCluster

        cluster.checked()  # bad options fail before anything starts
    root = Path(data_dir)
    root.mkdir(parents=True, exist_ok=True)
    limit = raise_open_file_limit()
    index = AlarmIndex.open(root, durability=durability)
    host: ActorHost | None = None
    member: HostCluster | None = None
    try:
        if cluster is not None:
            joining = HostCluster(cluster)
            await joining.join()  # outside the nursery: a failure is itself, not a group around it
            member = joining
        async with trio.open_nursery() as nursery:
            host = ActorHost(
                root, nursery, index,
                idle_timeout_s=idle_timeout_s,
                max_active=max_active or default_max_active(limit),
                max_pending_calls=max_pending_calls,
                durability=durability,
                clock=clock or HostClock(),
            )
            if member is not None:
                await member.start(host, nursery)
            if idle_timeout_s is not None:
                nursery.start_soon(host._reap_idle)
            await nursery.start(host._scheduler.run)
            try:
                yield host
            finally:
                host._closed = True
                nursery.cancel_scope.cancel()
    finally:
        if host is not None:
            host._shutdown()
        if member is not None:
            await member.aclose()
        index.close()
