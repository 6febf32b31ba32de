"""One actor's place in the host: its lifecycle state, gate and context.

An :class:`ActorSlot` exists while an actor is activating or active; the
host drops it on hibernation. :class:`ActorContext` is the ``ctx`` the
runtime hands to an :class:`actors.Agent` (it satisfies
:class:`actors.agent.AgentContext`).

The *gate* is the Durable Object input gate made explicit. Storage calls
are synchronous, so they never interleave; a call may only yield to another
at an ``await``. The gate is closed -- no other call of the actor starts --
while :meth:`ActorContext.block_concurrency_while` runs, and while a storage
transaction is open (so code that awaits inside ``storage.transaction()``
cannot see another call join its transaction). The storage's commit and
rollback callbacks (:meth:`storage.sqlite.SqlStorage.on_commit`) reopen it.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, TypeVar

import trio

from actors.agent import Agent, ConnectionLike
from common.errors import HostClosedError, TransactionLeftOpenError
from runtime.host.ids import ActorId
from storage.kv import ActorStorage

if TYPE_CHECKING:
    from runtime.host.actor_host import ActorHost

T = TypeVar("T")

_HOOK_ID = "runtime.gate"


class CallNotStarted(Exception):
    """Internal: the placement dropped the actor before this call started (in a cluster: its lease or
    its log was lost); the call is admitted again.

    ``cause`` is the error the call gets if admitting it again is not possible.
    """

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class SlotState(enum.Enum):
    ACTIVATING = "activating"
    ACTIVE = "active"
    FAILED = "failed"
    CLOSED = "closed"


class ActorSlot:
    """Lifecycle record of one live actor (internal to the host).

    Attributes:
        pending: calls admitted and not yet answered (waiting or running).
        running: calls executing actor code now.
        placed: what the host's placement keeps for this actor (:mod:`runtime.host.placement`; in a
            cluster its lease, log and frame gate); ``None`` while it keeps nothing.
        pace: ``(trio time the last turn started, seconds between starts)`` of the actor's queue
            (``None`` until known; see ``Turns``).
    """

    __slots__ = (
        "id", "key", "state", "error", "agent", "storage", "pending", "running",
        "waiting", "gate_holder", "gate_lot", "alarm_dirty", "rollbacks", "placed", "pace",
    )

    def __init__(self, actor_id: ActorId) -> None:
        self.id = actor_id
        self.key = (actor_id.namespace, actor_id.hex)
        self.state = SlotState.ACTIVATING
        self.error: BaseException | None = None
        self.agent: Agent | None = None
        self.storage: ActorStorage | None = None
        self.pending = 0
        self.running = 0
        self.waiting: deque[list[trio.Event]] = deque()  # calls not started yet, in admission order
        self.gate_holder: trio.lowlevel.Task | None = None
        self.gate_lot = trio.lowlevel.ParkingLot()
        self.alarm_dirty = False
        self.rollbacks = 0
        self.placed: object | None = None
        self.pace: tuple[float | None, float | None] = (None, None)

    def attach(self, storage: ActorStorage) -> None:
        """Adopt the actor's opened file and hook its commits and rollbacks to the gate."""
        self.storage = storage
        storage.on_commit(self.gate_changed, key=_HOOK_ID)
        storage.on_rollback(self._on_rollback, key=_HOOK_ID)

    def detach(self, storage: ActorStorage) -> None:
        """Unhook a file this slot adopted, so its commits and rollbacks no longer reach the gate
        (before a worker thread uses it: the gate's trio objects belong to the trio thread)."""
        storage.on_commit(None, key=_HOOK_ID)
        storage.on_rollback(None, key=_HOOK_ID)

    def _on_rollback(self) -> None:
        self.rollbacks += 1
        self.gate_changed()

    def gate_changed(self) -> None:
        """Something a waiting call or reply may wait for happened: let them look again."""
        self.gate_lot.unpark_all()
        if self.waiting:
            self.waiting[0][0].set()

    def _may_start(self) -> bool:
        if self.state is not SlotState.ACTIVE:
            return self.state is not SlotState.ACTIVATING  # failed/closed: start, to raise
        holder = self.gate_holder
        if holder is not None and holder is not trio.lowlevel.current_task():
            return False
        return self.storage is None or not self.storage.in_transaction

    def ready(self) -> bool:
        """``True`` when a call entering now starts at once (:meth:`enter` returns without a checkpoint)."""
        return not self.waiting and self._may_start()

    async def enter(self) -> None:
        """Wait for this call's turn to start: in admission order, once the actor is
        active and its gate open (no checkpoint when nothing is ahead).

        Raises:
            BaseException: the activation error when the actor failed to start.
        """
        if self.ready():
            self._check_started()
            return
        ticket = [trio.Event()]
        self.waiting.append(ticket)
        try:
            while not (self.waiting[0] is ticket and self._may_start()):
                await ticket[0].wait()
                ticket[0] = trio.Event()
        except BaseException:
            self.waiting.remove(ticket)
            self.gate_changed()
            raise
        self.waiting.popleft()
        self.gate_changed()  # the next call looks once this one yields
        self._check_started()

    def _check_started(self) -> None:
        if self.error is not None:
            raise self.error
        if self.state is SlotState.CLOSED:
            raise HostClosedError(f"{describe(self.id)} was closed before the call started")

    async def hold_gate(self, fn: Callable[[], Awaitable[T]]) -> T:
        """``await fn()`` holding the gate (re-entrant for the holding task)."""
        task = trio.lowlevel.current_task()
        if self.gate_holder is task:
            return await fn()
        while self.gate_holder is not None:  # an open transaction does not matter here: it may be ours
            await self.gate_lot.park()
        self.gate_holder = task
        try:
            return await fn()
        finally:
            self.gate_holder = None
            self.gate_changed()

    async def output_gate(self) -> None:
        """Hold the reply while a transaction is open: it may contain this call's writes.

        With other calls running, one of them owns the transaction: wait for its
        commit (reply) or rollback (error). Otherwise the transaction was left
        open by this call: roll it back and raise.

        Raises:
            TransactionLeftOpenError: this call left a transaction open, or wrote inside another
                call's transaction that was rolled back.
        """
        storage = self.storage
        while storage is not None and storage.in_transaction:
            if self.running == 0:
                storage.rollback()
                raise TransactionLeftOpenError(
                    f"a call to {describe(self.id)} ended inside a storage transaction, which was rolled back "
                    "(end every transaction before the call returns)"
                )
            rollbacks = self.rollbacks
            await self.gate_lot.park()
            if self.rollbacks != rollbacks:
                raise TransactionLeftOpenError(
                    f"a call to {describe(self.id)} wrote inside another call's transaction, which was rolled back"
                )


class ActorContext:
    """The ``ctx`` of an actor instance (see :class:`actors.agent.AgentContext`).

    Attributes:
        id: the actor's :class:`~runtime.host.ids.ActorId`.
        storage: its :class:`storage.kv.ActorStorage`.
    """

    __slots__ = ("id", "storage", "_host", "_slot")

    def __init__(self, host: ActorHost, slot: ActorSlot, storage: ActorStorage) -> None:
        self.id = slot.id
        self.storage = storage
        self._host = host
        self._slot = slot

    async def block_concurrency_while(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``await fn()`` while no other call or alarm of this actor may start.

        Calls already running elsewhere in the actor are not paused. Nested
        use from the same call just runs ``fn``. Returns ``fn``'s result;
        its exception propagates and the gate reopens.
        """
        return await self._slot.hold_gate(fn)

    def get_connections(self) -> Sequence[ConnectionLike]:
        """The actor's WebSocket peers, in connection order.

        As the host's placement hands them over (:meth:`~runtime.host.placement.Placement.gate_peers`):
        in a cluster each is wrapped so its frames wait for the writes
        committed before them to be durable (the output gate).
        """
        return self._host.placement.gate_peers(self._slot, self._host.connections_of(self.id))

    def peer(self, conn: ConnectionLike) -> ConnectionLike:
        """``conn`` as this actor's hooks receive it (wrapped by the output gate in a cluster)."""
        return self._host.placement.gate_peers(self._slot, (conn,))[0]

    def now_ms(self) -> int:
        """The host clock in epoch milliseconds (follows trio's clock)."""
        return self._host.clock.now_ms()

    def quiet_writes(self) -> AbstractContextManager[None]:
        """A block whose commits by this call are upkeep, not updates: see
        :meth:`actors.agent.AgentContext.quiet_writes`."""
        return self._host.quiet_writes(self.id)

    def __repr__(self) -> str:
        return f"<ActorContext {self.id.namespace}/{self.id.hex}>"


def describe(actor_id: ActorId) -> str:
    """``namespace/hex`` for messages and logs."""
    return f"{actor_id.namespace}/{actor_id.hex}"

