"""Where an actor lives: the seam between the host and its cluster mode.

The host always holds one :class:`Placement` and calls its hooks at fixed
points of an actor's life, the way workerd's gates take a ``Hooks``
interface; it never asks which placement it has. The hooks, in the order an
actor meets them (the cluster's side is :mod:`runtime.host.cluster`):

==================  ===================================================  =========================================
hook                when                                                 in a cluster
==================  ===================================================  =========================================
``acquire``         a sleeping actor wakes, before any file is touched   take the lease (``NotOwnerError`` if held)
``make_current``    its file is reserved, before it opens                keep a clean copy, else rebuild it
``attach``          the file is open, before the agent exists            capture every write from here on
``before_call``     a call's turn starts                                 check (renew) the lease
``barrier``         before a reply leaves (and after ``on_start``)       wait until the writes before it are durable
``release``         the instance is dropped (hibernated, evicted, ...)   mark the file clean, release the lease
``peers_gone``      the host's last WebSocket peer of the actor left     release a lease kept for the peers
``gate_peers``      the actor asks for its WebSocket peers               wrap them: frames wait for durability
``erase``           (optional) the actor's local files were erased       delete its rows under the fence
==================  ===================================================  =========================================

:class:`LocalPlacement` -- a single host whose files are the truth -- does
nothing at any of them. A placement keeps what it needs of a live actor in
``slot.placed`` (:class:`~runtime.host.slots.ActorSlot`).

In turn the host offers its placement a few services, and nothing else
(:class:`PlacementHost`, which :class:`~runtime.host.actor_host.ActorHost`
implements): spawn a task in the host's nursery, list the live actors, drop
one, start an alarm delivery, and read its peers and namespaces. Every hook
takes the actor's slot or id, so a placement may decide per actor (e.g.
which database holds it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import trio

from actors.agent import ConnectionLike
from runtime.host.ids import ActorId
from runtime.host.slots import ActorSlot
from storage.kv import ActorStorage
from storage.sqlite import Durability

if TYPE_CHECKING:
    from runtime.host.cluster import ClusterOptions, HostCluster
    from runtime.host.partitions import PartitionedCluster
    from runtime.host.namespace import Namespace

__all__ = ["RELEASE_REASONS", "LocalPlacement", "Placement", "PlacementHost", "WorkingCopy", "placement_for"]

#: Why an instance is dropped (the ``reason`` of :meth:`Placement.release`).
RELEASE_REASONS = ("hibernated", "evicted", "deposed", "failed", "closed")


@dataclass(frozen=True, slots=True)
class WorkingCopy:
    """An actor's file as the host hands it to :meth:`Placement.make_current`, before it opens.

    Attributes:
        path: the actor's file (it may not exist yet).
        template: the empty file of the current schema new files are copied from.
        durability: ``"normal"`` or ``"full"`` (see ``SqlStorage.open``).
        set_aside_if_damaged: checks the file's headers (and a small file's
            integrity) and moves a damaged copy aside; returns the problem
            found, ``None`` for an intact or absent file.
    """

    path: Path
    template: Path
    durability: Durability
    set_aside_if_damaged: Callable[[], str | None]


class PlacementHost(Protocol):
    """What the host offers its placement (:class:`~runtime.host.actor_host.ActorHost` implements it)."""

    @property
    def closed(self) -> bool:
        """``True`` once the host began closing (no new task may start in its nursery)."""
        ...

    @property
    def namespaces(self) -> dict[str, Namespace]:
        """Bound namespaces by name."""
        ...

    def spawn(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Run ``await fn(*args)`` in the host's nursery (until the host closes)."""
        ...

    def live_slots(self) -> list[ActorSlot]:
        """The slots of every actor activating or active now."""
        ...

    def drop(self, slot: ActorSlot, reason: str) -> None:
        """Drop the actor's instance at once and close its file as it is (no checkpoint).

        Calls not started yet get ``slot.error`` when the placement set one.
        """
        ...

    def connections_of(self, actor_id: ActorId) -> Sequence[ConnectionLike]:
        """The WebSocket peers the host holds for the actor (also while it sleeps)."""
        ...

    def deliver_alarm_soon(self, actor_id: ActorId) -> None:
        """Start delivering the actor's alarm in the background (once at a time per actor)."""
        ...


class Placement(Protocol):
    """The hooks the host calls (see the module docstring for when).

    Attributes:
        rebuildable: ``True`` when the actor files are working copies the
            placement can rebuild: a damaged one is set aside, not quarantined,
            and no file generations are kept (:mod:`runtime.host.file_guard`).
    """

    rebuildable: bool

    @property
    def cluster(self) -> HostCluster | PartitionedCluster | None:
        """The host's cluster membership (``host.cluster``), ``None`` outside a cluster."""
        ...

    async def join(self) -> None:
        """Reach what the placement needs before the host opens (the cluster: Postgres).

        Raises:
            StorageUnavailableError: it cannot be reached (nothing is left open).
        """
        ...

    async def start(self, host: PlacementHost, nursery: trio.Nursery) -> None:
        """Serve ``host`` (after :meth:`join`); background tasks run in ``nursery``."""
        ...

    async def aclose(self) -> None:
        """After every actor was released with reason ``"closed"``: give up what the host held."""
        ...

    async def settle(self) -> None:
        """Return once what :meth:`release` started in the background has finished (a cluster: the
        leases released), bounded by the placement's own deadlines. The host drains with it."""
        ...

    def may_live_elsewhere(self, actor_id: ActorId) -> bool:
        """``True`` when another host may hold (or have written) the actor: only waking it tells
        whether it exists (``Namespace.exists``)."""
        ...

    async def acquire(self, slot: ActorSlot) -> None:
        """Take the actor for this host, before any file is touched.

        Raises:
            NotOwnerError: another live host owns it.
            StorageUnavailableError: ownership cannot be decided now.
        """
        ...

    async def make_current(self, slot: ActorSlot, copy: WorkingCopy) -> None:
        """Make the actor's file current before it opens (after :meth:`acquire`).

        Raises:
            StorageUnavailableError, RestoreError: the file could not be made current (nothing changed).
        """
        ...

    def attach(self, slot: ActorSlot, storage: ActorStorage) -> None:
        """The actor's file is open (the agent does not exist yet); its writes from here on are the actor's."""
        ...

    async def before_call(self, slot: ActorSlot) -> None:
        """A call's turn is about to run actor code.

        Raises:
            CallNotStarted: the actor was lost; the call is admitted again.
            StorageUnavailableError: whether the actor is still this host's cannot be told now.
        """
        ...

    async def barrier(self, slot: ActorSlot) -> None:
        """Before a reply leaves: return once the writes committed before it are kept.

        Raises:
            OwnershipLostError, StorageUnavailableError: they were not kept.
        """
        ...

    def release(self, slot: ActorSlot, reason: str) -> None:
        """The host drops the instance (``reason``: one of :data:`RELEASE_REASONS`), its file still
        open when it had one (``slot.storage``). Synchronous: it must not block."""
        ...

    def peers_gone(self, actor_id: ActorId) -> None:
        """The host holds no WebSocket peer of the actor any more."""
        ...

    def gate_peers(self, slot: ActorSlot, conns: Sequence[ConnectionLike]) -> Sequence[ConnectionLike]:
        """``conns`` as the live actor must use them (the same sequence when nothing gates them)."""
        ...


class LocalPlacement:
    """A single host: its files are the truth, every actor is its own; each hook does nothing."""

    rebuildable = False

    @property
    def cluster(self) -> None:
        return None

    async def join(self) -> None:
        return None

    async def start(self, host: PlacementHost, nursery: trio.Nursery) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def settle(self) -> None:
        return None

    def may_live_elsewhere(self, actor_id: ActorId) -> bool:
        return False

    async def acquire(self, slot: ActorSlot) -> None:
        return None

    async def make_current(self, slot: ActorSlot, copy: WorkingCopy) -> None:
        return None

    def attach(self, slot: ActorSlot, storage: ActorStorage) -> None:
        return None

    async def before_call(self, slot: ActorSlot) -> None:
        return None

    async def barrier(self, slot: ActorSlot) -> None:
        return None

    def release(self, slot: ActorSlot, reason: str) -> None:
        return None

    def peers_gone(self, actor_id: ActorId) -> None:
        return None

    def gate_peers(self, slot: ActorSlot, conns: Sequence[ConnectionLike]) -> Sequence[ConnectionLike]:
        return conns

    async def erase(self, actor_id: ActorId) -> None:
        """The actor's local files are gone (``host.erase``, :mod:`runtime.host.eraser`); a single host
        keeps nothing else of it. An optional hook: a placement without it cannot erase (501)."""
        return None


def placement_for(cluster: ClusterOptions | None, placement: Placement | None = None) -> Placement:
    """The placement ``open_host(cluster=..., placement=...)`` asks for: ``placement`` when given,
    a :class:`LocalPlacement` without ``cluster`` (nothing of the cluster is imported), else a
    cluster member (not joined yet).

    Raises:
        ValueError: both were given, or a bad cluster option (the message names it).
    """
    if placement is not None:
        if cluster is not None:
            raise ValueError("give open_host cluster= or placement=, not both")
        return placement
    if cluster is None:
        return LocalPlacement()
    from runtime.host.cluster import HostCluster

    return HostCluster(cluster)
