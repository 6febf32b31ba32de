"""Turns: admission to an actor's mailbox, its bounds, and one call's way through the gates.

:meth:`Turns.run_turn` is what stub calls, alarms and WebSocket events go
through. A call is **admitted** synchronously (a sleeping actor's slot is
registered before anything awaits, so racing callers share one activation),
then runs in its own task in the host's nursery (a caller that stops
waiting does not cancel the actor's work):

1. **the mailbox bound**: past ``max_pending_calls`` unanswered calls the
   next one gets :class:`~common.errors.ActorOverloadedError` at once; with
   ``max_queue_s``, one whose expected wait (the calls queued times the
   recent pace of the queue) is longer gets :class:`~common.errors.ActorBusyError`;
2. **the input gate** (:meth:`ActorSlot.enter <runtime.host.slots.ActorSlot.enter>`,
   in admission order; with ``max_queue_s`` a call that cannot start in time
   of reaching a ready actor never runs);
3. ``placement.before_call``, the actor code, **the output gate**
   (:meth:`ActorSlot.output_gate <runtime.host.slots.ActorSlot.output_gate>`),
   the alarm index synced, ``placement.barrier``; then the reply.

A call whose actor the placement dropped before it started
(:class:`~runtime.host.slots.CallNotStarted`) is admitted again, up to
:data:`READMISSIONS` times.

**Arrival.** The queue bound counts from when the request *arrived* (the
server's listener read its head: :data:`ARRIVED`, set by the server around a
request), not from when the host saw it: a flood delays a request on its way
in (the event loop is busy), and that wait is part of what its client
waits. So a call whose queue, at its pace, would not reach it within what is
left of ``max_queue_s`` since its arrival is refused at once, and one that
is waiting is refused ``max_queue_s`` after it arrived. A call that reached
the host later than that still gets :data:`LATE_GRACE` of ``max_queue_s`` to
start: under a flood every call comes late, and refusing each that must wait
at all would leave the actor refusing everything and running nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from actors.agent import Agent
from common.errors import ActorBusyError, ActorOverloadedError, HostClosedError
from runtime import telemetry
from runtime.host.alarms import HostAlarms
from runtime.host.file_guard import FileGuard
from runtime.host.ids import ActorId
from runtime.host.lifecycle import Lifecycle
from runtime.host.slots import ActorSlot, CallNotStarted, SlotState, describe
from runtime.host.table import ActorKey, SlotTable

if TYPE_CHECKING:
    from runtime.host.actor_host import ActorHost

__all__ = ["ARRIVED", "LATE_GRACE", "READMISSIONS", "Turns"]

T = TypeVar("T")

#: Times a call is admitted again when the placement dropped its actor before it started.
READMISSIONS = 3
#: When the request being answered arrived (``trio.current_time()`` seconds), set by the server; ``None``:
#: unknown (the call is timed from when it reached the host). The first call of a request reads and clears it,
#: so calls its turn makes (and later calls of the request) are timed from when they reached the host.
ARRIVED: ContextVar[float | None] = ContextVar("durable_sessions_arrived", default=None)
#: Share of ``max_queue_s`` a call always has to start, counted from when it reached the host, however long
#: ago its request arrived (so the actor goes on running calls while a flood makes every call late).
LATE_GRACE = 0.5


class _Reply:
    __slots__ = ("done", "value", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class Turns:
    """Admits calls and runs each as one turn of its actor (internal to the host).

    Args:
        host: the :class:`~runtime.host.actor_host.ActorHost` (its bounds and placement).
        table: its :class:`~runtime.host.table.SlotTable`.
        guard: its :class:`~runtime.host.file_guard.FileGuard` (quarantined actors are refused).
        lifecycle: its :class:`~runtime.host.lifecycle.Lifecycle` (activation, faults).
        alarms: its :class:`~runtime.host.alarms.HostAlarms` (the index, synced after each turn).
        nursery: the host's nursery (turns and activations run there).
    """

    def __init__(self, host: ActorHost, table: SlotTable, guard: FileGuard, lifecycle: Lifecycle,
                 alarms: HostAlarms, nursery: trio.Nursery) -> None:
        self._host = host
        self._table = table
        self._guard = guard
        self._lifecycle = lifecycle
        self._alarms = alarms
        self._nursery = nursery
        self._waiting_for_ready: dict[ActorKey, list[trio.CancelScope]] = {}
        telemetry.from_environment()  # traces, if OTEL_* asks for them (runtime.telemetry)

    async def run_turn(
        self, actor_id: ActorId, invoke: Callable[[Agent], Awaitable[T]], *, touches_alarm: bool = False,
        exempt: bool = False,
    ) -> T:
        """:meth:`ActorHost.run_turn <runtime.host.actor_host.ActorHost.run_turn>`: admit the call
        (again, when its actor was dropped before it started), run it, return its reply.

        ``exempt``: no bound applies (neither the mailbox nor the queue time), e.g. a WebSocket's
        ``on_connect``, which costs the actor nothing worth refusing.
        """
        arrived = ARRIVED.get()
        if arrived is not None:
            ARRIVED.set(None)  # read once: the turn's own calls are timed from when they reach the host
        bounded = not touches_alarm and not exempt  # an alarm is never refused for load
        for admission in range(READMISSIONS + 1):
            slot = self._admit(actor_id, bounded=bounded, exempt=exempt, arrived=arrived)
            reply = _Reply()
            now = trio.current_time()
            self._nursery.start_soon(self._turn, slot, invoke, reply, touches_alarm,
                                     (now, min(now, arrived) if arrived is not None else now) if bounded else None)
            await reply.done.wait()
            if reply.error is not None:
                error, reply.error = reply.error, None
                if isinstance(error, CallNotStarted):  # the placement dropped the actor first
                    if admission < READMISSIONS:
                        continue
                    raise error.cause from None
                raise error
            return reply.value
        raise AssertionError("unreachable")

    def admission_refusal(self, actor_id: ActorId) -> ActorOverloadedError | None:
        """The error a new call to the actor would get at once for want of room, else ``None``
        (nothing is admitted or counted; the call's request arrived at :data:`ARRIVED`, when set)."""
        slot = self._table.slots.get((actor_id.namespace, actor_id.hex))
        return None if slot is None else self._overload(slot, True, ARRIVED.get())

    def _overload(self, slot: ActorSlot, bounded: bool, arrived: float | None = None) -> ActorOverloadedError | None:
        """A full mailbox; or, with ``max_queue_s``, a queue that will not move that far in time.

        The expected wait is the calls queued times the recent pace of the
        queue (an average of the gaps between turns starting while calls wait);
        "that far" is what is left of ``max_queue_s`` since ``arrived`` (the
        request's arrival, ``trio.current_time()`` seconds; ``None``: now), and
        at least :data:`LATE_GRACE` of it.
        """
        host = self._host
        if slot.pending >= host.max_pending_calls:
            return ActorOverloadedError(describe(slot.id), host.max_pending_calls)
        if not bounded or host.max_queue_s is None or slot.state is not SlotState.ACTIVE:
            return None
        now = trio.current_time()
        left = _deadline(host.max_queue_s, now, arrived) - now
        pace = slot.pace[1]
        queued = slot.pending - slot.running
        if pace is not None and queued > 0 and (queued + 1) * pace > left:
            return ActorBusyError(describe(slot.id), host.max_queue_s)
        return None

    def _admit(self, actor_id: ActorId, bounded: bool = True, exempt: bool = False,
               arrived: float | None = None) -> ActorSlot:
        if self._host.closed:
            raise HostClosedError("the actor host is closed")
        if self._host.draining:
            raise HostClosedError("the actor host is shutting down; the call did not run")
        refusal = self._guard.refusal(actor_id)
        if refusal is not None:
            raise refusal
        key = (actor_id.namespace, actor_id.hex)
        slot = self._table.slots.get(key)
        if slot is None:
            slot = self._table.slots[key] = ActorSlot(actor_id)
            self._nursery.start_soon(self._activate, slot)
        elif not exempt and (overloaded := self._overload(slot, bounded, arrived)) is not None:
            self._table.counts["overloads"] += 1
            raise overloaded
        if slot.pending == 0:
            self._table.idle.pop(key, None)
        slot.pending += 1
        return slot

    async def _activate(self, slot: ActorSlot) -> None:
        try:
            with telemetry.activation(slot.id):
                await self._lifecycle.activate(slot)
        finally:
            self._start_queue_clocks(slot)

    async def _turn(
        self, slot: ActorSlot, invoke: Callable[[Agent], Awaitable[Any]], reply: _Reply, touches_alarm: bool,
        admitted: tuple[float, float] | None,
    ) -> None:
        try:
            with telemetry.turn(slot.id):
                reply.value = await self._run(slot, invoke, touches_alarm, admitted)
        except Exception as exc:
            reply.error = self._lifecycle.fault(slot, exc)
        except BaseException:
            reply.error = HostClosedError(f"the actor host closed during a call to {describe(slot.id)}")
            raise
        finally:
            self._table.counts["calls"] += 1
            reply.done.set()
            self._release(slot)

    async def _run(
        self, slot: ActorSlot, invoke: Callable[[Agent], Awaitable[T]], touches_alarm: bool,
        admitted: tuple[float, float] | None,
    ) -> T:
        placement = self._host.placement
        await self._enter(slot, admitted)
        await placement.before_call(slot)  # e.g. the lease is live (or the call is admitted again)
        slot.running += 1
        try:
            return await invoke(slot.agent)  # type: ignore[arg-type]  # an entered slot has its agent
        finally:
            slot.running -= 1
            slot.alarm_dirty |= touches_alarm
            await slot.output_gate()
            self._alarms.after_turn(slot)
            if slot.storage is not None:
                self._guard.mark_after_turn(slot.id, slot.storage)  # a crash after the reply cannot hide damage
            await placement.barrier(slot)  # e.g. the writes before the reply are durable

    async def _enter(self, slot: ActorSlot, admitted: tuple[float, float] | None) -> None:
        """Wait for the call's turn; past ``max_queue_s`` of waiting for a ready actor, give up
        (``admitted``: when the call reached the host and when its request arrived, ``trio.current_time()``
        seconds; ``None``: wait as long as it takes).

        Time spent waiting for the actor to activate does not count: the bound
        is on queueing behind other calls, not on opening a big file.

        Raises:
            ActorBusyError: the turn did not come in time (the call never runs).
        """
        max_queue_s = self._host.max_queue_s
        if max_queue_s is None or admitted is None:
            await slot.enter()
            return
        reached, arrived = admitted
        if slot.ready():  # the turn starts at once (no checkpoint): there is no wait to bound
            await slot.enter()
            _note_start(slot, reached)
            return
        scope = trio.CancelScope(deadline=_deadline(max_queue_s, reached, arrived))
        if slot.state is SlotState.ACTIVATING:  # the clock starts once the actor is ready (_start_queue_clocks)
            scope.deadline = float("inf")
            self._waiting_for_ready.setdefault(slot.key, []).append(scope)
        with scope:
            await slot.enter()
            _note_start(slot, reached)
            return
        self._table.counts["overloads"] += 1
        raise ActorBusyError(describe(slot.id), max_queue_s)

    def _start_queue_clocks(self, slot: ActorSlot) -> None:
        """The actor finished activating: the calls that waited for it now have ``max_queue_s`` to start."""
        scopes = self._waiting_for_ready.pop(slot.key, ())
        if scopes:
            deadline = trio.current_time() + (self._host.max_queue_s or 0.0)
            for scope in scopes:
                scope.deadline = deadline

    def _release(self, slot: ActorSlot) -> None:
        slot.pending -= 1
        if slot.state is SlotState.ACTIVE and slot.running == 0 and self._guard.refused(slot.id):
            self._lifecycle.retire_damaged(slot)
        if slot.pending == 0 and slot.state is SlotState.ACTIVE:
            self._table.went_idle(slot)


def _deadline(max_queue_s: float, reached: float, arrived: float | None) -> float:
    """When a call that reached the host at ``reached`` must have started (``trio.current_time()`` seconds):
    ``max_queue_s`` after its request ``arrived`` (``None``: after ``reached``), but not before
    :data:`LATE_GRACE` of it after ``reached``."""
    if arrived is None:
        return reached + max_queue_s
    return max(arrived + max_queue_s, reached + LATE_GRACE * max_queue_s)


def _note_start(slot: ActorSlot, admitted: float) -> None:
    """Keep the pace of the actor's queue: the gap since the previous start, when this call waited
    for most of it (then the gap was the previous call's service, not idle time)."""
    now = trio.current_time()
    last, pace = slot.pace
    gap = None if last is None else now - last
    if gap is not None and gap > 0 and now - admitted >= gap / 2:
        pace = gap if pace is None else 0.8 * pace + 0.2 * gap
    slot.pace = (now, pace)
