"""Ownership of actors: leases taken, renewed and released through Postgres.

An actor has at most one owner host at a time, recorded in its ``ds_actors``
row with an ``epoch`` (the fencing token, +1 on every acquisition) and a
lease expiry set by the server (``now() + lease``). The owner renews the
lease through its log appends (busy actors) or a bulk :data:`RENEW` every
third of a lease (idle ones).

**The local deadline.** A host may serve an actor only while
``time.monotonic() < lease.deadline``. The deadline is the monotonic time
read *before* the granting statement was sent, plus ``lease_s * (1 -
margin_fraction)``: the server's ``now()`` is later than that send, so the
host's deadline falls before the server's expiry even if the statement waited
on the way, and the margin absorbs clock-rate differences. Past it, the host
must renew before it answers anything.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from . import statements as sql
from .driver import PgPool

__all__ = ["Lease", "Owner", "Ownership"]


@dataclass(slots=True)
class Lease:
    """This host's ownership of one actor.

    Attributes:
        actor: ``<namespace>/<hex>``.
        epoch: the fencing token every write carries.
        last_seq: the newest log entry when the lease was granted.
        tail_bytes: log bytes after the newest snapshot when granted.
        base_version: actor-file schema version the actor's log starts from.
        deadline: ``time.monotonic()`` reading after which the host must
            renew before serving (see the module docstring).
        lost: set once the host learned another host took the actor.
        catalogued: ``False`` when the actor was written but has no ``ds_catalog`` row yet.
        incarnation: when the actor's ``ds_actors`` row was created (a new one after a delete):
            a working copy marked with another incarnation is never kept.
    """

    actor: str
    epoch: int
    last_seq: int
    tail_bytes: int
    base_version: int
    deadline: float
    lost: bool = False
    catalogued: bool = True
    incarnation: str = ""

    def live(self) -> bool:
        """``True`` while the local deadline has not passed (and the lease was not lost)."""
        return not self.lost and time.monotonic() < self.deadline

    def extend(self, sent_at: float, usable_s: float) -> None:
        """A statement sent at monotonic ``sent_at`` renewed the lease for ``usable_s`` more seconds."""
        self.deadline = max(self.deadline, sent_at + usable_s)


@dataclass(frozen=True, slots=True)
class Owner:
    """Another host's ownership of an actor, as Postgres records it.

    Attributes:
        host_id: the owner's host id, ``None`` when nobody owns it now.
        address: the URL calls are forwarded to (``None`` with no owner).
        epoch: its epoch.
        remaining_ms: milliseconds until its lease expires (server clock; 0 if expired).
    """

    host_id: str | None
    address: str | None
    epoch: int
    remaining_ms: int


class Ownership:
    """Acquire, renew and release leases for one host.

    Args:
        pool: connections to the cluster database.
        host_id: this host's id (unique per process start).
        address: the URL other hosts forward this host's actors' calls to.
        lease_s: lease length in seconds.
        margin_fraction: part of the lease the local deadline leaves unused.
    """

    def __init__(self, pool: PgPool, host_id: str, address: str, *, lease_s: float,
                 margin_fraction: float = 0.1) -> None:
        if not lease_s > 0:
            raise ValueError(f"lease_s must be positive, not {lease_s!r}")
        if not 0 <= margin_fraction < 1:
            raise ValueError(f"margin_fraction must be in [0, 1), not {margin_fraction!r}")
        self.pool = pool
        self.host_id = host_id
        self.address = address
        self.lease_s = lease_s
        self.usable_s = lease_s * (1 - margin_fraction)
        self._lease_ms = max(1, round(lease_s * 1000))

    def _params(self, **extra: object) -> dict[str, object]:
        return {"me": self.host_id, "address": self.address, "lease_ms": self._lease_ms, **extra}

    async def acquire(self, actor: str, *, base_version: int) -> Lease | Owner:
        """Take ``actor`` if it is free, expired or already ours; else say who owns it.

        ``base_version`` is recorded when the actor's row is created.

        Raises:
            StorageUnavailableError, DatabaseError: see :class:`~storage.cluster.driver.PgConnection`.
        """
        owner = None
        for _attempt in range(3):
            sent_at = time.monotonic()
            rows = await self.pool.execute(sql.ACQUIRE, self._params(actor=actor, base_version=base_version),
                                           prepare=True)
            if rows:
                epoch, last_seq, tail_bytes, base, catalogued, incarnation = rows[0]
                return Lease(actor, epoch, last_seq, tail_bytes, base, sent_at + self.usable_s,
                             catalogued=catalogued, incarnation=incarnation)
            owner = await self.owner(actor)
            if owner is not None and owner.host_id is not None:
                return owner
            # released or expired between the two statements: try again
        return owner or Owner(None, None, 0, 0)

    async def owner(self, actor: str) -> Owner | None:
        """The actor's current owner, or ``None`` when it has no row (never activated)."""
        rows = await self.pool.execute(sql.OWNER, {"actor": actor}, prepare=True)
        if not rows:
            return None
        host_id, address, epoch, _last_seq, remaining_ms = rows[0]
        if host_id is not None and remaining_ms <= 0:
            host_id = address = None
        return Owner(host_id, address, epoch, remaining_ms)

    async def renew(self, leases: Sequence[Lease]) -> list[Lease]:
        """Renew ``leases`` in one statement; returns those that were *not* renewed (lost).

        Renewed leases get a later deadline; lost ones are marked ``lost``.
        """
        if not leases:
            return []
        sent_at = time.monotonic()
        rows = await self.pool.execute(sql.RENEW, self._params(
            actors=[lease.actor for lease in leases], epochs=[lease.epoch for lease in leases]), prepare=True)
        renewed = {row[0] for row in rows}
        lost = []
        for lease in leases:
            if lease.actor in renewed:
                lease.extend(sent_at, self.usable_s)
            else:
                lease.lost = True
                lost.append(lease)
        return lost

    async def release(self, leases: Sequence[Lease]) -> None:
        """Give ``leases`` up; a lease already lost is left alone."""
        for lease in leases:
            lease.lost = True
        if leases:
            await self.pool.execute(sql.RELEASE, self._params(
                actors=[lease.actor for lease in leases], epochs=[lease.epoch for lease in leases]))

    async def erase(self, lease: Lease) -> tuple[int, int] | None:
        """Delete every row of the actor ``lease`` holds (:data:`~storage.cluster.statements.ERASE`, one
        transaction); ``(log rows, snapshots)`` removed, or ``None`` when the lease was lost (nothing removed).
        The lease is spent either way.

        Raises:
            StorageUnavailableError, DatabaseError: see :class:`~storage.cluster.driver.PgConnection`.
        """
        lease.lost = True
        rows = await self.pool.execute(sql.ERASE, self._params(actor=lease.actor, epoch=lease.epoch))
        return (int(rows[0][0]), int(rows[0][1])) if rows else None

    async def written(self, actor: str) -> bool:
        """``True`` when the actor has at least one durable log entry anywhere in the cluster."""
        rows = await self.pool.execute(sql.WRITTEN, {"actor": actor}, prepare=True)
        return bool(rows and rows[0][0])

    async def due_alarms(self, namespaces: Sequence[str], *, limit: int = 100) -> list[tuple[str, int]]:
        """``(actor, scheduled_ms)`` of due alarms of actors no live host owns, oldest first."""
        if not namespaces:
            return []
        rows = await self.pool.execute(sql.DUE_ALARMS, {"namespaces": list(namespaces), "limit": limit})
        return [(actor, scheduled_ms) for actor, scheduled_ms in rows]

    # -- hosts

    async def register_host(self) -> None:
        """Record this host (id, address, host lease) in ``ds_hosts``."""
        await self.pool.execute(sql.REGISTER_HOST, self._params())

    async def renew_host(self) -> None:
        """Extend this host's own lease (re-registering it if its row is gone)."""
        await self.pool.execute(sql.REGISTER_HOST, self._params(), prepare=True)

    async def live_hosts(self) -> list[tuple[str, str]]:
        """``(host_id, address)`` of every host whose host lease is live, by id."""
        return [(host_id, address) for host_id, address in await self.pool.execute(sql.LIVE_HOSTS)]

    async def unregister_host(self) -> None:
        """Remove this host's row (on a clean shutdown) and forget hosts gone for a day."""
        async with self.pool.connection() as conn:
            await conn.execute(sql.UNREGISTER_HOST, self._params())
            await conn.execute(sql.FORGET_HOSTS)
