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
  With ``max_queue_s``, a call that cannot start within that many seconds of
  reaching a ready actor gets :class:`~storage.errors.ActorBusyError` and never runs.
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
  :class:`~storage.errors.StorageFullError`; a damaged file is quarantined and
  every call to it answered :class:`~storage.errors.ActorStorageCorruptError`.

Files: ``<data_dir>/<namespace>/<hex[:2]>/<hex>.sqlite3``; new ones are copied
from ``<data_dir>/_template/v<schema version>.sqlite3``; ``_alarms.sqlite3``,
``_catalog.sqlite3`` and ``_host.lock`` belong to the host.
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
from runtime.host.file_guard import FileGuard
from runtime.host.folder_lock import DataFolderLock
from runtime.host.ids import ActorId, check_namespace_name
from runtime.host.limits import default_max_active, raise_open_file_limit
from runtime.host.namespace import Namespace
from runtime.host.slots import ActorContext, ActorSlot, CallNotStarted, SlotState, describe
from storage.catalog import HostCatalog
from storage.errors import (
    ActorBusyError,
    ActorOverloadedError,
    HostClosedError,
    InvalidNamespaceError,
    NotOwnerError,
    StorageFullError,
    TransactionLeftOpenError,
    UnknownNamespaceError,
)
from storage.faults import classify, fault_detail
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
#: A hibernating actor's WAL file above this size (bytes) is checkpointed and cut back before its file
#: closes (off the trio thread); a smaller one is left as it is.
WAL_KEEP_BYTES = 64 * 1024


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
        max_queue_s: seconds a call may wait for its turn (``None``: no bound).
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
        catalog: HostCatalog,
        max_queue_s: float | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.idle_timeout_s = idle_timeout_s
        self.max_queue_s = max_queue_s
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
        self._open_files = 0  # actor files open, including those being checkpointed after hibernation
        self._closing: dict[ActorKey, trio.Event] = {}  # hibernated, file being checkpointed; set once closed
        self._checkpoints = trio.CapacityLimiter(1)  # one checkpoint at a time: they are disk-bound
        self._files: dict[str, int] = {}  # namespace -> actor files on disk, once scanned
        self._connections: dict[ActorKey, dict[str, ConnectionLike]] = {}
        self._alarm_deliveries: set[ActorKey] = set()
        self._guard = FileGuard(data_dir, catalog, self.path_for)
        self._waiting_for_ready: dict[ActorKey, list[trio.CancelScope]] = {}
        self._pace: dict[ActorKey, tuple[float, float | None]] = {}  # last turn start, seconds between starts
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
        active = self._open_files - len(self._closing)
        return HostStatistics(
            active=active,
            activating=sum(slot.state is SlotState.ACTIVATING for slot in self._slots.values()),
            idle=len(self._idle),
            hibernated=max(0, sum(self._count_files(name) for name in self._namespaces) - active),
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

    @property
    def catalog(self) -> HostCatalog:
        """The data folder's host catalog (:mod:`storage.catalog`): read it; the host writes it."""
        return self._guard.catalog

    def awake(self, namespace: str) -> list[tuple[ActorId, ActorStorage | None]]:
        """The actors of ``namespace`` with a live instance, each with its open file while no
        transaction is open on it (else ``None``).

        For reads that must not wait for a turn (the session listing): use the
        file at once, synchronously (never across an ``await``), and only to read.
        """
        found = []
        for slot in self._slots.values():
            if slot.id.namespace == namespace and slot.state is SlotState.ACTIVE:
                storage = slot.storage
                found.append((slot.id, None if storage is None or storage.in_transaction else storage))
        return found

    def last_write_ms(self, actor_id: ActorId) -> int | None:
        """Epoch milliseconds at which the awake actor's last write committed (``None``: it wrote
        nothing since it woke). Kept in memory; the catalog gets it when the actor hibernates or closes."""
        return self._guard.last_write_ms(actor_id)

    async def hibernate(self, namespace: str | Namespace, actor_id: ActorId | str) -> bool:
        """Hibernate one actor now, after its pending calls are answered; return once its file is closed
        (a large WAL checkpointed first, see :meth:`_hibernate_slot`).

        Returns ``True`` if it was active, ``False`` if it was not.
        """
        key = self._key(namespace, actor_id)
        while (slot := self._slots.get(key)) is not None:
            if slot.state is SlotState.ACTIVE and slot.pending == 0:
                closed = self._hibernate_slot(slot)
                if closed is not None:
                    await closed.wait()
                return True
            await self._settled.park()
        closed = self._closing.get(key)
        if closed is not None:  # asleep already, its WAL being checkpointed: return once the file is closed
            await closed.wait()
        return False

    async def hibernate_all(self) -> int:
        """Hibernate every active actor (waiting for pending calls); how many were. Returns once their
        files (and those still being checkpointed) are closed."""
        count = 0
        for namespace, hex_id in list(self._slots):
            count += await self.hibernate(namespace, hex_id)
        for closed in list(self._closing.values()):
            await closed.wait()
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
        bounded = not touches_alarm  # an alarm is never refused for load
        for admission in range(_READMISSIONS + 1):
            slot = self._admit(actor_id, bounded=bounded)
            reply = _Reply()
            self._nursery.start_soon(self._turn, slot, invoke, reply, touches_alarm,
                                     trio.current_time() if bounded else None)
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

    def admission_refusal(self, actor_id: ActorId) -> ActorOverloadedError | None:
        """The error a new call to the actor would get at once for want of room, else ``None``.

        Nothing is admitted or counted: the server asks before it does any
        work for a request (see :mod:`runtime.server.admission`).
        """
        slot = self._slots.get((actor_id.namespace, actor_id.hex))
        return None if slot is None else self._overload(slot, True)

    def _overload(self, slot: ActorSlot, bounded: bool) -> ActorOverloadedError | None:
        """A full mailbox; or, with ``max_queue_s``, a queue that will not move that far in time.

        The expected wait is the calls queued times the recent pace of the
        queue (an average of the gaps between turns starting while calls wait).
        """
        if slot.pending >= self.max_pending_calls:
            return ActorOverloadedError(describe(slot.id), self.max_pending_calls)
        if not bounded or self.max_queue_s is None or slot.state is not SlotState.ACTIVE:
            return None
        pace = self._pace.get(slot.key, (None, None))[1]
        queued = slot.pending - slot.running
        if pace is not None and queued > 0 and (queued + 1) * pace > self.max_queue_s:
            return ActorBusyError(describe(slot.id), self.max_queue_s)
        return None

    def _admit(self, actor_id: ActorId, bounded: bool = True) -> ActorSlot:
        if self._closed:
            raise HostClosedError("the actor host is closed")
        refusal = self._guard.refusal(actor_id)
        if refusal is not None:
            raise refusal
        key = (actor_id.namespace, actor_id.hex)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = ActorSlot(actor_id)
            self._nursery.start_soon(self._activate, slot)
        elif (overloaded := self._overload(slot, bounded)) is not None:
            self._counts["overloads"] += 1
            raise overloaded
        if slot.pending == 0:
            self._idle.pop(key, None)
        slot.pending += 1
        return slot

    async def _turn(
        self, slot: ActorSlot, invoke: Callable[[Agent], Awaitable[Any]], reply: _Reply, touches_alarm: bool,
        admitted: float | None,
    ) -> None:
        try:
            reply.value = await self._run(slot, invoke, touches_alarm, admitted)
        except Exception as exc:
            reply.error = self._fault(slot, exc)
        except BaseException:
            reply.error = HostClosedError(f"the actor host closed during a call to {describe(slot.id)}")
            raise
        finally:
            self._counts["calls"] += 1
            reply.done.set()
            self._release(slot)

    async def _run(
        self, slot: ActorSlot, invoke: Callable[[Agent], Awaitable[T]], touches_alarm: bool, admitted: float | None
    ) -> T:
        await self._enter(slot, admitted)
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

    async def _enter(self, slot: ActorSlot, admitted: float | None) -> None:
        """Wait for the call's turn; past ``max_queue_s`` of waiting for a ready actor, give up
        (``admitted`` is when the call arrived; ``None``: wait as long as it takes).

        Time spent waiting for the actor to activate does not count: the bound
        is on queueing behind other calls, not on opening a big file.

        Raises:
            ActorBusyError: the turn did not come in time (the call never runs).
        """
        if self.max_queue_s is None or admitted is None:
            await slot.enter()
            return
        if slot.ready():  # the turn starts at once (no checkpoint): there is no wait to bound
            await slot.enter()
            self._note_start(slot, admitted)
            return
        scope = trio.CancelScope(deadline=admitted + self.max_queue_s)
        if slot.state is SlotState.ACTIVATING:  # the clock starts once the actor is ready (_start_queue_clocks)
            scope.deadline = float("inf")
            self._waiting_for_ready.setdefault(slot.key, []).append(scope)
        with scope:
            await slot.enter()
            self._note_start(slot, admitted)
            return
        self._counts["overloads"] += 1
        raise ActorBusyError(describe(slot.id), self.max_queue_s)

    def _note_start(self, slot: ActorSlot, admitted: float) -> None:
        """Keep the pace of the actor's queue: the gap since the previous start, when this call waited
        for most of it (then the gap was the previous call's service, not idle time)."""
        now = trio.current_time()
        last, pace = self._pace.get(slot.key, (None, None))
        gap = None if last is None else now - last
        if gap is not None and gap > 0 and now - admitted >= gap / 2:
            pace = gap if pace is None else 0.8 * pace + 0.2 * gap
        self._pace[slot.key] = (now, pace)

    def _start_queue_clocks(self, slot: ActorSlot) -> None:
        """The actor finished activating: the calls that waited for it now have ``max_queue_s`` to start."""
        scopes = self._waiting_for_ready.pop(slot.key, ())
        if scopes:
            deadline = trio.current_time() + self.max_queue_s
            for scope in scopes:
                scope.deadline = deadline

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
        if slot.state is SlotState.ACTIVE and slot.running == 0 and self._guard.refused(slot.id):
            self._retire_damaged(slot)
        if slot.pending == 0 and slot.state is SlotState.ACTIVE:
            self._idle[slot.key] = trio.current_time()
            self._idle_wakeup.set()
            self._settled.unpark_all()

    # -- activation, hibernation, eviction -------------------------------------

    async def _activate(self, slot: ActorSlot) -> None:
        lease = log_version = None
        try:
            closed = self._closing.get(slot.key)
            if closed is not None:  # hibernated a moment ago: its file is being checkpointed
                await closed.wait()
            if self.cluster is not None:
                lease = await self.cluster.acquire(slot.id)  # NotOwnerError before any file is touched
            await self._reserve_file()
            if lease is not None:
                self._guard.set_aside_if_damaged(slot.id)  # a damaged working copy is rebuilt, not refused
                log_version = await self._make_current(slot, lease)
            slot.attach(self._open_storage(slot.id))
            storage = slot.storage
            if lease is not None:
                with self._guard.host_writes(slot.id):  # its marker is not the actor's write
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
            self._fail_activation(slot, self._fault(slot, exc), lease)
        except BaseException:
            self._fail_activation(slot, HostClosedError("the actor host closed while an actor was starting"), lease)
            raise
        else:
            slot.state = SlotState.ACTIVE
            self._counts["activations"] += 1
            slot.gate_changed()
        finally:
            self._start_queue_clocks(slot)

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
        """Check and open the actor's file (copying the template when new); give back the reservation on failure.

        Raises:
            ActorStorageCorruptError: the file is damaged (see :mod:`runtime.host.file_guard`).
        """
        path = self.path_for(actor_id)
        try:
            entry = self._guard.before_open(actor_id)
            existed = path.exists()
            storage = ActorStorage.open(path, durability=self.durability, template=self._template)
        except BaseException:
            self._open_files -= 1
            raise
        if not existed and actor_id.namespace in self._files:
            self._files[actor_id.namespace] += 1
        try:
            storage.skip_checkpoint_on_close()  # closing never waits for the disk (see _hibernate_slot)
            self._guard.after_open(actor_id, storage, entry)
        except BaseException:
            storage.close()
            self._open_files -= 1
            raise
        return storage

    def _fault(self, slot: ActorSlot, error: Exception) -> Exception:
        """The error a caller gets for ``error``: a full disk or a damaged file named as such.

        A damaged file quarantines the actor (at once, or when its running calls end).
        """
        kind = classify(error)
        if kind == "full":
            full = StorageFullError(f"the disk holding the data folder is full ({fault_detail(error)}); "
                                    f"nothing of this call to {describe(slot.id)} was stored")
            full.__cause__ = error
            return full
        if kind == "corrupt":
            damaged = self._guard.refuse(slot.id, f"SQLite reported damage: {fault_detail(error)}")
            damaged.__cause__ = error
            if slot.state is SlotState.ACTIVE and slot.running == 0:
                self._retire_damaged(slot)
            return damaged
        return error

    def _retire_damaged(self, slot: ActorSlot) -> None:
        """Close a refused actor's file and quarantine it; calls still waiting get the error."""
        slot.error = self._guard.refusal(slot.id)
        self._close_slot(slot, None)
        self._guard.settle(slot.id)
        self._files.pop(slot.id.namespace, None)  # recount: its file moved

    def knows(self, actor_id: ActorId) -> bool:
        """``True`` when the actor is awake, has a file, or the host catalog lists it (even quarantined)."""
        return self.is_active(actor_id.namespace, actor_id) or self.path_for(actor_id).exists() \
            or self._guard.known(actor_id)

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
        if self._guard.refused(slot.id):  # damaged: quarantine its (now closed) files
            self._guard.settle(slot.id)
            self._files.pop(slot.id.namespace, None)  # recount: its file moved
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
        """Drop the instance and close its file (synchronous: nothing can interleave; no disk sync)."""
        storage = self._drop_slot(slot, counter, reason)
        if storage is not None:
            self._close_file(slot.id, storage)

    def _hibernate_slot(self, slot: ActorSlot) -> trio.Event | None:
        """Hibernate an idle actor: drop the instance now; close its file now, or after a checkpoint.

        A WAL file of more than :data:`WAL_KEEP_BYTES` is copied into the
        database and cut back in a worker thread (:meth:`FileGuard.checkpoint`)
        before the file closes, so a sleeping actor leaves no large WAL. The
        actor counts as hibernated at once; its file counts towards
        ``max_active`` until it is closed, and a call for it meanwhile waits
        for the close, then wakes it (:meth:`_activate`). A smaller WAL is
        left as it is: closing costs no disk sync.

        Returns:
            an event set once the file is closed, or ``None`` when it already is.
        """
        storage = self._drop_slot(slot, "hibernations", "hibernated")
        if storage is None:
            return None
        if storage.wal_file_bytes <= WAL_KEEP_BYTES:
            self._close_file(slot.id, storage)
            return None
        slot.detach(storage)  # the worker thread must not call back into trio objects
        closed = self._closing[slot.key] = trio.Event()
        self._nursery.start_soon(self._checkpoint_and_close, slot.id, storage, closed)
        return closed

    async def _checkpoint_and_close(self, actor_id: ActorId, storage: ActorStorage, closed: trio.Event) -> None:
        """Checkpoint a hibernated actor's WAL off the trio thread, then close its file.

        A failure loses nothing (the WAL keeps every frame) and is logged; a
        host shutting down waits for a checkpoint already running, and closes
        the files still queued for one without it.
        """
        error: Exception | None = None
        try:
            await trio.to_thread.run_sync(self._guard.checkpoint, storage, limiter=self._checkpoints)
        except Exception as exc:
            error = exc
        finally:
            del self._closing[(actor_id.namespace, actor_id.hex)]
            self._close_file(actor_id, storage)
            closed.set()
        if error is None:
            return
        kind = classify(error)
        if kind == "full":
            logger.warning("hibernating %s: the checkpoint of its WAL failed, the disk is full (%s); the WAL "
                           "stays in place and nothing is lost", describe(actor_id), fault_detail(error))
        elif kind == "corrupt":
            logger.error("hibernating %s: SQLite reported damage during the checkpoint of its WAL",
                         describe(actor_id), exc_info=error)
            self._guard.refuse(actor_id, f"SQLite reported damage during a checkpoint: {fault_detail(error)}")
            self._guard.settle(actor_id)
            self._files.pop(actor_id.namespace, None)  # recount: its file moved
        else:
            logger.error("hibernating %s: the checkpoint of its WAL failed; the WAL stays in place",
                         describe(actor_id), exc_info=error)

    def _drop_slot(self, slot: ActorSlot, counter: str | None, reason: str) -> ActorStorage | None:
        """Drop the instance: forget the slot, tell the cluster, raise the file's generation.

        Returns the still open file (``None`` if it had none), which the caller closes.
        """
        if self._slots.get(slot.key) is slot:
            del self._slots[slot.key]
        self._idle.pop(slot.key, None)
        self._pace.pop(slot.key, None)
        slot.state = SlotState.CLOSED
        slot.agent = None
        if slot.cluster is not None:
            with self._guard.host_writes(slot.id):  # its clean marker is not the actor's write
                self.cluster.on_close(slot, _CLOSE_REASONS.get(counter or "", reason))
        storage, slot.storage = slot.storage, None
        if storage is not None:
            self._guard.before_close(slot.id, storage)
        if counter is not None:
            self._counts[counter] += 1
        self._settled.unpark_all()
        return storage

    def _close_file(self, actor_id: ActorId, storage: ActorStorage) -> None:
        """Close an actor's file (no checkpoint) and give back its place among ``max_active``."""
        self._open_files -= 1
        try:
            storage.close()
        except Exception:
            logger.exception("closing the file of %s failed", describe(actor_id))
        else:
            self._guard.after_close(actor_id)
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
                self._hibernate_slot(self._slots[key])
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
    max_queue_s: float | None = None,
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
            actor is ready; past that it gets ``ActorBusyError`` (429) and never
            runs. ``None`` (default): calls wait as long as it takes.

    On exit, running calls are cancelled (their callers get
    ``HostClosedError``) and every file is closed; alarms persist. In
    cluster mode the actors' leases are released too.

    The host holds ``data_dir``'s lock (:mod:`runtime.host.folder_lock`) until it closes.

    Raises:
        ValueError: a bad argument.
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
    if cluster is not None:
        from runtime.host.cluster import HostCluster

        cluster.checked()  # bad options fail before anything starts
    if max_queue_s is not None and not max_queue_s > 0:
        raise ValueError(f"max_queue_s must be positive or None, not {max_queue_s!r}")
    root = Path(data_dir)
    root.mkdir(parents=True, exist_ok=True)
    limit = raise_open_file_limit()
    folder_lock = DataFolderLock.acquire(root)
    try:
        index = AlarmIndex.open(root, durability=durability)
    except BaseException:
        folder_lock.release()
        raise
    catalog: HostCatalog | None = None
    host: ActorHost | None = None
    member: HostCluster | None = None
    try:
        catalog = HostCatalog.open(root, durability=durability)
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
                catalog=catalog,
                max_queue_s=max_queue_s,
            )
            if member is not None:
                host._guard.rebuildable = True  # Postgres is the truth: damaged copies are rebuilt
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
        try:
            if host is not None:
                host._shutdown()
            if member is not None:
                await member.aclose()
        finally:
            if catalog is not None:
                catalog.close()
            index.close()
            folder_lock.release()
