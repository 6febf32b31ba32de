"""The host's table of live actors, shared by its parts (turns, lifecycle, alarms).

One :class:`SlotTable` per host holds every :class:`~runtime.host.slots.ActorSlot`
by key, the least-recently-idle queue the reaper and eviction serve, the
parking lot of tasks waiting for an actor to settle, and the host's counters.
It decides nothing: :mod:`runtime.host.turns` and :mod:`runtime.host.lifecycle`
change it, :meth:`~runtime.host.actor_host.ActorHost.statistics` reads it.
"""

from __future__ import annotations

from collections import OrderedDict

import trio

from runtime.host.slots import ActorSlot

__all__ = ["COUNTERS", "ActorKey", "SlotTable"]

#: ``(namespace, hex)``: an actor's key in the table.
ActorKey = tuple[str, str]
#: The host's counters (see :class:`~runtime.host.actor_host.HostStatistics`).
COUNTERS = ("calls", "activations", "failed_activations", "hibernations", "evictions", "overloads",
            "alarms_run", "alarm_failures")


class SlotTable:
    """Live actors by key, the idle queue and the counters (internal to the host).

    Attributes:
        slots: the slot of every actor activating or active, by key.
        idle: keys of active actors with no pending call, least recently idle
            first, each with the trio time (seconds) it went idle.
        counts: the counters of :data:`COUNTERS`, since the host opened.
    """

    __slots__ = ("counts", "idle", "slots", "_idle_wakeup", "_settled")

    def __init__(self) -> None:
        self.slots: dict[ActorKey, ActorSlot] = {}
        self.idle: OrderedDict[ActorKey, float] = OrderedDict()
        self.counts: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._idle_wakeup = trio.Event()
        self._settled = trio.lowlevel.ParkingLot()

    def went_idle(self, slot: ActorSlot) -> None:
        """``slot`` has no pending call now: queue it for hibernation and wake whoever waits."""
        self.idle[slot.key] = trio.current_time()
        self._idle_wakeup.set()
        self.settled()

    def forget(self, slot: ActorSlot) -> None:
        """Take ``slot`` out of the table and the idle queue (when it is still the actor's slot)."""
        if self.slots.get(slot.key) is slot:
            del self.slots[slot.key]
        self.idle.pop(slot.key, None)

    def settled(self) -> None:
        """An actor went idle or closed: tasks waiting in :meth:`wait_settled` look again."""
        self._settled.unpark_all()

    async def wait_settled(self) -> None:
        """Wait until an actor goes idle or closes."""
        await self._settled.park()

    async def wait_idle(self) -> None:
        """Wait until an actor joins the idle queue (returns at once when one did since the last wait)."""
        if not self.idle:
            self._idle_wakeup = trio.Event()
            await self._idle_wakeup.wait()
