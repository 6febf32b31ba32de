"""Alarms: the host clock, the scheduler over the host's alarm index, the handler run, the deliveries.

Each actor has at most one alarm, stored in its own file (``_cf_alarm``,
see :class:`storage.kv.ActorStorage`). So the host need not open every
file at start, it also keeps an index, ``<data_dir>/_alarms.sqlite3``
(:class:`storage.alarm_index.AlarmIndex`, re-exported here): one row
``(namespace, actor_id, scheduled_ms)`` per actor with an alarm.
The actor's row is the truth; the index may hold more (a stale row costs
one wake and is then removed) but never less:

* ``set_alarm`` writes the index *before* the actor's row;
* after every turn that touched the alarm, the host copies the committed
  actor row to the index (:meth:`AlarmIndex.sync`);
* while an alarm is being delivered its index row is pushed
  :data:`LEASE_MS` ahead, so a crash mid-delivery makes it fire again
  after a restart (at-least-once, as a Durable Object).

:class:`AlarmScheduler` sleeps until the earliest indexed alarm of a bound
namespace and asks the host to deliver it. :class:`HostAlarms` is the host's
part: it keeps the index in step with the actors' rows and delivers each due
alarm as a turn of its actor, one delivery at a time per actor.
:func:`run_alarm_handler` runs inside the actor's turn: it calls
``alarm(info)``, removes the alarm on success, and on failure reschedules it
``2 s * 2**retry_count`` later, dropping it after :data:`MAX_ALARM_RETRIES`
retries.

All waiting goes through trio's clock; :class:`HostClock` maps epoch
milliseconds to trio time, so ``trio.testing.MockClock`` drives alarms.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import trio

from actors.agent import Agent, AlarmInfo
from common.errors import HostClosedError, NotOwnerError
from runtime.host.ids import ActorId
from runtime.host.slots import ActorSlot, describe
from storage.alarm_index import INDEX_FILE, AlarmIndex
from storage.kv import ActorStorage

if TYPE_CHECKING:
    from runtime.host.actor_host import ActorHost
    from runtime.host.table import SlotTable

__all__ = [
    "INDEX_FILE", "LEASE_MS", "MAX_ALARM_RETRIES", "RETRY_BASE_MS",
    "AlarmIndex", "AlarmScheduler", "HostAlarms", "HostClock", "run_alarm_handler",
]

logger = logging.getLogger(__name__)

#: Retries after the first failed run; the alarm is dropped when the last one fails.
MAX_ALARM_RETRIES = 6
#: Delay before the first retry; each further retry doubles it.
RETRY_BASE_MS = 2_000
#: How far an alarm's index row moves ahead while it is being delivered.
LEASE_MS = 60_000


class HostClock:
    """Epoch milliseconds read through trio's clock.

    Anchored on first use inside ``trio.run``: ``now_ms()`` is the wall
    clock at that moment (or ``start_epoch_ms``) plus the trio time elapsed
    since. Under ``MockClock`` epoch time therefore jumps with trio time.
    Share one instance between hosts opened in turn in the same trio run to
    keep their epochs continuous.
    """

    def __init__(self, start_epoch_ms: float | None = None) -> None:
        self._start_epoch_ms = start_epoch_ms
        self._offset_ms: float | None = None

    def _offset(self) -> float:
        if self._offset_ms is None:
            start = time.time() * 1000 if self._start_epoch_ms is None else self._start_epoch_ms
            self._offset_ms = start - trio.current_time() * 1000
        return self._offset_ms

    def now_ms(self) -> int:
        """The current time in epoch milliseconds (whole ms, rounded down)."""
        return int(trio.current_time() * 1000 + self._offset())

    def trio_time(self, epoch_ms: float) -> float:
        """The trio clock reading (seconds) at which ``epoch_ms`` arrives."""
        return (epoch_ms - self._offset()) / 1000

    def is_due(self, epoch_ms: float) -> bool:
        """``True`` once trio time has reached ``epoch_ms``."""
        return trio.current_time() >= self.trio_time(epoch_ms)


class AlarmScheduler:
    """Sleeps until the next indexed alarm and hands it to ``deliver``.

    Args:
        index: the host's :class:`AlarmIndex`.
        clock: the host's :class:`HostClock`.
        deliver: ``deliver(namespace, actor_id)``, called when an alarm is due;
            it must start the delivery in the background and return at once.
    """

    def __init__(self, index: AlarmIndex, clock: HostClock, deliver: Callable[[str, str], None]) -> None:
        self._index = index
        self._clock = clock
        self._deliver = deliver
        self._namespaces: set[str] = set()
        self._changed = trio.Event()

    def add_namespace(self, name: str) -> None:
        """Start serving the alarms of namespace ``name`` (after ``bind``)."""
        self._namespaces.add(name)
        self.wake()

    def wake(self) -> None:
        """Make the scheduler look at the index again (an alarm was set)."""
        self._changed.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve alarms until cancelled."""
        task_status.started()
        while True:
            self._changed = trio.Event()
            entry = self._index.earliest(self._namespaces)
            if entry is None:
                await self._changed.wait()
                continue
            namespace, actor_id, scheduled_ms = entry
            deadline = self._clock.trio_time(scheduled_ms)
            if trio.current_time() < deadline:
                with trio.move_on_at(deadline):
                    await self._changed.wait()
                continue
            self._index.upsert(namespace, actor_id, self._clock.now_ms() + LEASE_MS)
            self._deliver(namespace, actor_id)
            await trio.lowlevel.checkpoint()


class HostAlarms:
    """The host's part of alarms: the index kept in step with the actors' rows, and deliveries as turns.

    Args:
        host: the :class:`~runtime.host.actor_host.ActorHost` (deliveries run through ``host.run_turn``).
        index: its :class:`AlarmIndex` (also the attribute ``index``).
        clock: its :class:`HostClock`.
        table: its :class:`~runtime.host.table.SlotTable` (for the alarm counters).
        spawn: starts a task in the host's nursery.
    """

    def __init__(self, host: ActorHost, index: AlarmIndex, clock: HostClock, table: SlotTable,
                 spawn: Callable[..., object]) -> None:
        self._host = host
        self.index = index
        self._clock = clock
        self._table = table
        self._spawn = spawn
        self._scheduler = AlarmScheduler(index, clock, self.start_delivery)
        self._deliveries: set[tuple[str, str]] = set()
        # Actors whose alarm came due again while a delivery of it was still finishing (the handler
        # re-armed it, or a later turn set it): delivered again as soon as that delivery ends.
        self._again: set[tuple[str, str]] = set()

    def add_namespace(self, name: str) -> None:
        """Serve the alarms of namespace ``name`` (bound just now)."""
        self._scheduler.add_namespace(name)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the scheduler until cancelled (``nursery.start(alarms.run)``)."""
        await self._scheduler.run(task_status=task_status)

    def listen(self, slot: ActorSlot, storage: ActorStorage) -> None:
        """Follow the alarm changes of the actor's just opened file."""
        storage.alarm_listener = partial(self._changed, slot)

    def _changed(self, slot: ActorSlot, scheduled_ms: int | None) -> None:
        """``set_alarm`` indexes before writing the row; every change syncs at turn end."""
        if scheduled_ms is not None:
            self.index.upsert(slot.id.namespace, slot.id.hex, scheduled_ms)
            self._scheduler.wake()
        slot.alarm_dirty = True

    def after_turn(self, slot: ActorSlot) -> None:
        """At the end of a turn (or of ``on_start``): copy a changed alarm row to the index."""
        storage = slot.storage
        if storage is None:
            return
        if slot.alarm_dirty:
            slot.alarm_dirty = False
            self.index.sync(slot.id.namespace, slot.id.hex, storage)
            self._scheduler.wake()

    def start_delivery(self, namespace: str, hex_id: str) -> None:
        """Deliver the actor's alarm in the background (nothing once the host closed); while a delivery of
        it is still running, deliver it again once that one ends."""
        key = (namespace, hex_id)
        if self._host.closed:
            return
        if key in self._deliveries:
            # The scheduler already moved the index row a lease ahead: without this the alarm would
            # wait for that lease (60 s) instead of running once the current delivery ends.
            self._again.add(key)
        else:
            self._deliveries.add(key)
            self._spawn(self._deliver_in_background, ActorId(namespace, hex_id))

    async def _deliver_in_background(self, actor_id: ActorId) -> None:
        try:
            await self.deliver(actor_id)
        except HostClosedError:
            pass
        except NotOwnerError:  # another host owns the actor and runs it; this host's index entry is stale
            self.index.remove(actor_id.namespace, actor_id.hex)
        except Exception:
            logger.warning("alarm of %s failed", describe(actor_id), exc_info=True)
        finally:
            key = (actor_id.namespace, actor_id.hex)
            self._deliveries.discard(key)
            if key in self._again:
                # A delivery that finds the alarm not due yet runs nothing, and its turn copies the
                # actor's row back over the index's lease.
                self._again.discard(key)
                self.start_delivery(*key)

    async def deliver(self, actor_id: ActorId, *, force: bool = False) -> bool:
        """Run the actor's alarm as a turn if it is due (or at once with ``force``); whether it ran.

        Raises:
            whatever ``alarm()`` raised (after its retry was scheduled), or what
            ``host.run_turn`` raises.
        """
        counts = self._table.counts

        async def invoke(agent: Agent) -> bool:
            try:
                ran = await run_alarm_handler(agent, self._clock, force=force)
            except Exception:
                counts["alarms_run"] += 1
                counts["alarm_failures"] += 1
                raise
            counts["alarms_run"] += ran
            return ran

        return await self._host.run_turn(actor_id, invoke, touches_alarm=True)


async def run_alarm_handler(agent: Agent, clock: HostClock, *, force: bool = False) -> bool:
    """Run ``agent.alarm(info)`` for its stored alarm (inside the actor's turn).

    Returns ``False`` without running anything when there is no alarm, it
    is already being delivered, or it is not due yet (unless ``force``).
    On success the alarm is removed unless the handler scheduled another.
    When the handler raises, the alarm is rescheduled with backoff (or
    dropped after :data:`MAX_ALARM_RETRIES` retries) and the error propagates.
    """
    storage = agent.ctx.storage
    row = storage.read_alarm_row()
    if row is None or storage.delivering_alarm is not None:
        return False
    if not force and not clock.is_due(row.scheduled_ms):
        return False
    generation = storage.delivering_alarm = storage.alarm_generation
    try:
        await agent.alarm(AlarmInfo(retry_count=row.retry_count, scheduled_ms=row.scheduled_ms))
    except Exception:
        if storage.alarm_generation == generation:
            _reschedule_failed(storage, row.retry_count, clock, agent)
        raise
    else:
        if storage.alarm_generation == generation:
            storage.clear_alarm_row()
    finally:
        storage.delivering_alarm = None
    return True


def _reschedule_failed(storage: ActorStorage, retry_count: int, clock: HostClock, agent: Agent) -> None:
    if retry_count >= MAX_ALARM_RETRIES:
        storage.clear_alarm_row()
        logger.error("alarm of actor %s dropped after %d retries", agent.ctx.id, retry_count)
        return
    storage.write_alarm_row(clock.now_ms() + RETRY_BASE_MS * 2**retry_count, retry_count + 1)
