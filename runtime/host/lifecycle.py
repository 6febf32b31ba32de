"""An actor's lifecycle in the host: activation, hibernation (with its WAL checkpoint), eviction, faults.

:class:`Lifecycle` opens and closes actor files and counts them against
``max_active``:

* **Activation** (:meth:`Lifecycle.activate`, one task per waking actor):
  wait for a close still under way, ``placement.acquire``, reserve a place
  among ``max_active`` (evicting the least recently idle actor, or waiting
  for one to go idle), ``placement.make_current``, check and open the file
  (:mod:`runtime.host.file_guard`), ``placement.attach``, construct the
  agent, ``on_start`` holding the gate, then the output gate and
  ``placement.barrier``. Any failure reaches every call waiting for the
  activation, and the file is closed.
* **Hibernation** drops the instance at once; its file closes at once, or
  after its WAL is checkpointed in a worker thread when it is larger than
  :data:`WAL_KEEP_BYTES` or the file was made by this activation (one
  checkpoint at a time). A call arriving meanwhile waits for the close,
  then wakes the actor.
* **Eviction** closes the least recently idle actor's file at once, without
  a checkpoint, when a waking actor needs its place.
* **Faults**: a full disk is answered :class:`~common.errors.StorageFullError`;
  a damaged file quarantines the actor (at once, or once its running calls end).

Every drop tells the placement (``placement.release``) with its reason.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import trio

from common.errors import HostClosedError, NotOwnerError, StorageFullError
from runtime import telemetry
from runtime.host.alarms import HostAlarms
from runtime.host.file_guard import FileGuard
from runtime.host.ids import ActorId
from runtime.host.offload import run_sync_off_loop
from runtime.host.placement import WorkingCopy
from runtime.host.slots import ActorContext, ActorSlot, CallNotStarted, SlotState, describe
from runtime.host.table import ActorKey, SlotTable
from storage.faults import classify, fault_detail
from storage.kv import ActorStorage
from storage.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from runtime.host.actor_host import ActorHost

__all__ = ["WAL_KEEP_BYTES", "Lifecycle"]

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: A hibernating actor's WAL file above this size (bytes) is checkpointed and cut back before its file
#: closes (off the trio thread); a smaller one is left as it is.
WAL_KEEP_BYTES = 64 * 1024
#: The reason the placement is given when a counter's closing drops an actor.
_COUNTED_REASONS = {"hibernations": "hibernated", "evictions": "evicted"}


class Lifecycle:
    """Opens, hibernates, evicts and closes the host's actors (internal to the host).

    Args:
        host: the :class:`~runtime.host.actor_host.ActorHost` (its settings, namespaces and placement).
        table: its :class:`~runtime.host.table.SlotTable`.
        guard: its :class:`~runtime.host.file_guard.FileGuard`.
        alarms: its :class:`~runtime.host.alarms.HostAlarms`.
        nursery: the host's nursery (checkpoints run there).
    """

    def __init__(self, host: ActorHost, table: SlotTable, guard: FileGuard, alarms: HostAlarms,
                 nursery: trio.Nursery) -> None:
        self._host = host
        self._table = table
        self._guard = guard
        self._alarms = alarms
        self._nursery = nursery
        self._template = host.data_dir / "_template" / f"v{SCHEMA_VERSION}.sqlite3"
        self._open_files = 0  # actor files open, including those being checkpointed after hibernation
        self._closing: dict[ActorKey, trio.Event] = {}  # hibernated, file being checkpointed; set once closed
        self._checkpoints = trio.CapacityLimiter(1)  # one checkpoint at a time: they are disk-bound
        self._files: dict[str, int] = {}  # namespace -> actor files on disk, once scanned
        self._made: set[ActorKey] = set()  # actors whose file their current activation made (see hibernate_slot)

    # -- what the host reads ---------------------------------------------------------------------

    @property
    def active_files(self) -> int:
        """Actor files open, less those of hibernated actors still being checkpointed."""
        return self._open_files - len(self._closing)

    def count_files(self, namespace: str) -> int:
        """Actor files of ``namespace`` on disk (scanned once, then counted as they are created)."""
        if namespace not in self._files:
            folder = self._host.data_dir / namespace
            count = 0
            if folder.is_dir():
                for shard in os.scandir(folder):
                    if shard.is_dir():
                        count += sum(entry.name.endswith(".sqlite3") for entry in os.scandir(shard.path))
            self._files[namespace] = count
        return self._files[namespace]

    # -- activation ----------------------------------------------------------------------------------

    async def activate(self, slot: ActorSlot) -> None:
        """Wake the actor of a new ``slot`` (see the module docstring); never raises but for
        cancellation: a failure is left in ``slot.error`` for the calls waiting on it."""
        placement = self._host.placement
        try:
            closed = self._closing.get(slot.key)
            if closed is not None:  # hibernated a moment ago: its file is being checkpointed
                await closed.wait()
            await placement.acquire(slot)  # NotOwnerError before any file is touched
            await self._reserve_file()
            await self._make_current(slot)
            storage = self._open_storage(slot.id)
            slot.attach(storage)
            with self._guard.host_writes(slot.id):  # what the placement writes is not the actor's write
                placement.attach(slot, storage)
            self._alarms.listen(slot, storage)
            namespace = self._host.namespace(slot.id.namespace)
            slot.agent = namespace.agent_class(ActorContext(self._host, slot, storage), namespace.env)
            await slot.hold_gate(slot.agent.on_start)
            await slot.output_gate()
            self._alarms.after_turn(slot)
            self._guard.mark_after_turn(slot.id, storage)
            await placement.barrier(slot)
        except Exception as exc:
            self._fail_activation(slot, self.fault(slot, exc))
        except BaseException:
            self._fail_activation(slot, HostClosedError("the actor host closed while an actor was starting"))
            raise
        else:
            slot.state = SlotState.ACTIVE
            self._table.counts["activations"] += 1
            slot.gate_changed()

    async def _make_current(self, slot: ActorSlot) -> None:
        """Let the placement make the file current before it opens; give back the reservation on failure."""
        path = self._host.path_for(slot.id)
        existed = path.exists()
        copy = WorkingCopy(path, self._template, self._host.durability,
                           lambda: self._guard.set_aside_if_damaged(slot.id))
        try:
            await self._host.placement.make_current(slot, copy)
        except BaseException:
            self._open_files -= 1
            raise
        if not existed:  # made now (a cluster restore), or by the open that follows
            self._made.add(slot.key)
        if not existed and path.exists() and slot.id.namespace in self._files:
            self._files[slot.id.namespace] += 1

    def _open_storage(self, actor_id: ActorId) -> ActorStorage:
        """Check and open the actor's file (copying the template when new); give back the reservation on failure.

        Raises:
            ActorStorageCorruptError: the file is damaged (see :mod:`runtime.host.file_guard`).
        """
        path = self._host.path_for(actor_id)
        try:
            entry = self._guard.before_open(actor_id)
            existed = path.exists()
            storage = ActorStorage.open(path, durability=self._host.durability, template=self._template)
        except BaseException:
            self._open_files -= 1
            raise
        if not existed and actor_id.namespace in self._files:
            self._files[actor_id.namespace] += 1
        try:
            storage.skip_checkpoint_on_close()  # closing never waits for the disk (see hibernate_slot)
            self._guard.after_open(actor_id, storage, entry)
        except BaseException:
            storage.close()
            self._open_files -= 1
            raise
        return storage

    def _fail_activation(self, slot: ActorSlot, error: BaseException) -> None:
        level = logging.DEBUG if isinstance(error, NotOwnerError | CallNotStarted) else logging.WARNING
        logger.log(level, "activation of %s failed: %r", describe(slot.id), error)
        slot.error = error
        self._table.counts["failed_activations"] += 1
        self.close_slot(slot, None, reason="failed")
        if self._guard.refused(slot.id):  # damaged: quarantine its (now closed) files
            self._settle_damaged(slot.id)
        slot.state = SlotState.FAILED
        slot.gate_changed()

    async def _reserve_file(self) -> None:
        """Count one more open actor file, evicting the least recently idle actor if full."""
        while self._open_files >= self._host.max_active:
            if self._table.idle:
                self.close_slot(self._table.slots[next(iter(self._table.idle))], "evictions")
            else:
                await self._table.wait_settled()
        self._open_files += 1

    # -- faults ------------------------------------------------------------------------------------------

    def fault(self, slot: ActorSlot, error: Exception) -> Exception:
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
                self.retire_damaged(slot)
            return damaged
        return error

    def retire_damaged(self, slot: ActorSlot) -> None:
        """Close a refused actor's file and quarantine it; calls still waiting get the error."""
        slot.error = self._guard.refusal(slot.id)
        self.close_slot(slot, None)
        self._settle_damaged(slot.id)

    def _settle_damaged(self, actor_id: ActorId) -> None:
        """Quarantine a refused actor's closed files (:meth:`FileGuard.settle`)."""
        self._guard.settle(actor_id)
        self._files.pop(actor_id.namespace, None)  # recount: its file moved

    # -- hibernation, eviction, closing ----------------------------------------------------------------

    async def hibernate(self, key: ActorKey) -> bool:
        """Hibernate the actor of ``key`` once its pending calls are answered; return once its file is
        closed. ``True`` if it was active."""
        while (slot := self._table.slots.get(key)) is not None:
            if slot.state is SlotState.ACTIVE and slot.pending == 0:
                closed = self.hibernate_slot(slot)
                if closed is not None:
                    await closed.wait()
                return True
            await self._table.wait_settled()
        closed = self._closing.get(key)
        if closed is not None:  # asleep already, its WAL being checkpointed: return once the file is closed
            await closed.wait()
        return False

    async def close_now(self, key: ActorKey) -> None:
        """Return once the actor of ``key`` has no instance and no open file: its pending calls answered,
        its file closed at once (no checkpoint), a checkpoint under way finished.

        The caller must not await between this return and what it does with the closed files (a call
        arriving meanwhile would wake the actor again): trio runs nothing else until it awaits.
        """
        while True:
            slot = self._table.slots.get(key)
            closed = self._closing.get(key)
            if slot is None and closed is None:
                return
            if slot is None and closed is not None:
                await closed.wait()
            elif slot is not None and slot.state is SlotState.ACTIVE and slot.pending == 0:
                self.close_slot(slot, None)
            else:
                await self._table.wait_settled()

    async def while_asleep(self, key: ActorKey, fn: Callable[[], T]) -> tuple[bool, T | None]:
        """Run ``fn()`` in a worker thread while the actor of ``key`` sleeps with its file closed, holding
        its activation back meanwhile (a call for it waits, as for a hibernation's checkpoint).

        Returns ``(False, None)`` at once, ``fn`` not run, when the actor is awake, waking or closing;
        else ``(True, fn())``. The file counts among the open ones while ``fn`` runs.
        """
        if key in self._table.slots or key in self._closing:
            return False, None
        closed = self._closing[key] = trio.Event()
        self._open_files += 1
        try:
            return True, await run_sync_off_loop(fn, limiter=self._checkpoints)
        finally:
            del self._closing[key]
            self._open_files -= 1
            closed.set()
            self._table.settled()

    def forget_file(self, namespace: str) -> None:
        """An actor file of ``namespace`` was removed: count its files again at the next look."""
        self._files.pop(namespace, None)

    async def wait_checkpoints(self) -> None:
        """Return once every file still being checkpointed after hibernation is closed."""
        for closed in list(self._closing.values()):
            await closed.wait()

    def close_slot(self, slot: ActorSlot, counter: str | None, *, reason: str = "closed") -> None:
        """Drop the instance and close its file (synchronous: nothing can interleave; no disk sync).

        ``counter`` (``"hibernations"``, ``"evictions"`` or ``None``) is counted and decides the
        reason the placement is given; else ``reason``.
        """
        storage = self._drop_slot(slot, counter, reason)
        if storage is not None:
            self._close_file(slot.id, storage)

    def hibernate_slot(self, slot: ActorSlot) -> trio.Event | None:
        """Hibernate an idle actor: drop the instance now; close its file now, or after a checkpoint.

        A WAL file of more than :data:`WAL_KEEP_BYTES` is copied into the
        database and cut back in a worker thread (:meth:`FileGuard.checkpoint`)
        before the file closes, so a sleeping actor leaves no large WAL. So
        is the WAL of a file this activation made, whatever its size: a new
        file's WAL holds every commit of its first activation (the actor's
        name, the generation marks, its first writes), pages a sleeping
        session that is never woken again would keep twice; the checkpoint's
        disk syncs are paid once per actor. The
        actor counts as hibernated at once; its file counts towards
        ``max_active`` until it is closed, and a call for it meanwhile waits
        for the close, then wakes it (:meth:`activate`). A smaller WAL of an
        older file is left as it is: closing costs no disk sync.

        Returns:
            an event set once the file is closed, or ``None`` when it already is.
        """
        with telemetry.hibernation(slot.id):  # a span while tracing is on
            made = slot.key in self._made
            storage = self._drop_slot(slot, "hibernations", "hibernated")
            if storage is None:
                return None
            wal_bytes = storage.wal_file_bytes
            if wal_bytes == 0 or (wal_bytes <= WAL_KEEP_BYTES and not made):
                self._close_file(slot.id, storage)
                return None
            slot.detach(storage)  # the worker thread must not call back into trio objects
            closed = self._closing[slot.key] = trio.Event()
            self._nursery.start_soon(self._checkpoint_and_close, slot.id, storage, closed,
                                     wal_bytes > WAL_KEEP_BYTES)
            return closed

    async def _checkpoint_and_close(self, actor_id: ActorId, storage: ActorStorage, closed: trio.Event,
                                    large: bool = True) -> None:
        """Checkpoint a hibernated actor's WAL off the trio thread, then close its file.

        A ``large`` WAL goes through :meth:`FileGuard.checkpoint` (which starts the
        next WAL with one more generation raise). The small WAL of a file made by
        this activation is only cut to 0 bytes (:meth:`ActorStorage.checkpoint_wal`):
        the file then holds exactly what the catalog recorded at
        :meth:`FileGuard.before_close`, and the next wake that writes starts its
        WAL itself (one disk sync then), so an actor woken once and never
        again keeps no WAL at all.

        A failure loses nothing (the WAL keeps every frame) and is logged; a
        host shutting down waits for a checkpoint already running, and closes
        the files still queued for one without it.
        """
        error: Exception | None = None
        work = functools.partial(self._guard.checkpoint, storage) if large else storage.checkpoint_wal
        try:
            await run_sync_off_loop(work, limiter=self._checkpoints)
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
            self._settle_damaged(actor_id)
        else:
            logger.error("hibernating %s: the checkpoint of its WAL failed; the WAL stays in place",
                         describe(actor_id), exc_info=error)

    def _drop_slot(self, slot: ActorSlot, counter: str | None, reason: str) -> ActorStorage | None:
        """Drop the instance: forget the slot, tell the placement, raise the file's generation.

        Returns the still open file (``None`` if it had none), which the caller closes.
        """
        self._table.forget(slot)
        self._made.discard(slot.key)
        slot.state = SlotState.CLOSED
        slot.agent = None
        with self._guard.host_writes(slot.id):  # what the placement writes (a clean marker) is not the actor's
            self._host.placement.release(slot, _COUNTED_REASONS.get(counter or "", reason))
        storage, slot.storage = slot.storage, None
        if storage is not None:
            self._guard.before_close(slot.id, storage)
        if counter is not None:
            self._table.counts[counter] += 1
        self._table.settled()
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
        self._table.settled()

    async def reap_idle(self) -> None:
        """Hibernate each actor ``host.idle_timeout_s`` (trio seconds) after it went idle (one task for
        all; the host starts it only when that is not ``None``)."""
        idle = self._table.idle
        while True:
            if not idle:
                await self._table.wait_idle()
                continue
            key, since = next(iter(idle.items()))
            deadline = since + (self._host.idle_timeout_s or 0.0)
            if trio.current_time() >= deadline:
                self.hibernate_slot(self._table.slots[key])
            else:
                await trio.sleep_until(deadline)

    def close_all(self) -> None:
        """The host closes: drop every live actor and close its file (reason ``"closed"``)."""
        for slot in list(self._table.slots.values()):
            self.close_slot(slot, None)
