"""Alarms: the host clock, the scheduler over the host's alarm index, the handler run.

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
namespace and asks the host to deliver it. :func:`run_alarm_handler` runs inside
the actor's turn: it calls ``alarm(info)``, removes the alarm on success, and
on failure reschedules it ``2 s * 2**retry_count`` later, dropping it after
:data:`MAX_ALARM_RETRIES` retries.

All waiting goes through trio's clock; :class:`HostClock` maps epoch
milliseconds to trio time, so ``trio.testing.MockClock`` drives alarms.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import trio

from actors.agent import Agent, AlarmInfo
from storage.alarm_index import INDEX_FILE, AlarmIndex
from storage.kv import ActorStorage

__all__ = [
    "INDEX_FILE", "LEASE_MS", "MAX_ALARM_RETRIES", "RETRY_BASE_MS",
    "AlarmIndex", "AlarmScheduler", "HostClock", "run_alarm_handler",
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
