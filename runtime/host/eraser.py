"""Erasing an actor, and copying one for a backup: the host's side of the data lifecycle.

:func:`erase_actor` (``host.erase``) closes the actor through the host --
its pending calls answered, its file closed at once, a checkpoint under way
finished -- and then, with no ``await`` in between (trio runs nothing else
meanwhile, so no activation can race it), removes its database, WAL,
``-shm`` and any quarantined copies, drops its host-catalog row (the freed
space zeroed and the catalog's WAL cut, :meth:`storage.catalog.HostCatalog.erase`)
and its alarm-index row, and forgets what the host kept of it in memory.
Last it awaits the placement's ``erase(actor_id)`` hook: nothing on a single
host; in a cluster (:meth:`runtime.host.cluster.HostCluster.erase`) the
actor's ``ds_log``, ``ds_snapshots``, ``ds_actors``, ``ds_alarms`` and
``ds_catalog`` rows, in one transaction under its fence. A placement without
the hook is refused before anything changes with
:class:`~common.errors.NotSupportedError`.

:func:`backup_actor` copies one actor's file through SQLite's online backup
API. A sleeping actor's closed file is copied in a worker thread while its
activation is held back (a call for it waits, as for a hibernation's
checkpoint); an awake actor's file from its own connection (which holds the
file's exclusive lock), as one turn: the copy holds every write acknowledged
before the turn started. The copy and its fsync run in a worker thread with the actor's
gate closed (``block_concurrency_while``): the actor's other calls wait for
the copy of its file, other actors keep serving meanwhile.
"""

from __future__ import annotations

import functools
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from actors.agent import Agent
from common.errors import NotSupportedError
from runtime.host.file_guard import QUARANTINE_DIR, FileGuard
from runtime.host.ids import ActorId
from runtime.host.lifecycle import Lifecycle
from runtime.host.offload import run_sync_off_loop
from storage.alarm_index import AlarmIndex
from storage.backup import copy_closed_file, copy_database, remove_database

if TYPE_CHECKING:
    from runtime.host.actor_host import ActorHost

__all__ = ["backup_actor", "erase_actor"]

logger = logging.getLogger(__name__)


async def erase_actor(host: ActorHost, lifecycle: Lifecycle, guard: FileGuard, index: AlarmIndex,
                      actor_id: ActorId, *, working_copy_only: bool = False) -> bool:
    """Erase ``actor_id`` (see the module docstring); ``True`` if it existed.

    ``working_copy_only``: remove only what this host keeps of the actor, without the placement's hook
    (a cluster member dropping its copy of an actor another host erased in Postgres).

    Raises:
        NotSupportedError: the host's placement has no ``erase`` hook (nothing was changed).
    """
    hook = _keep_placement if working_copy_only else getattr(host.placement, "erase", None)
    if hook is None:
        raise NotSupportedError(
            f"deleting a session is not supported by this host's placement ({type(host.placement).__name__}): "
            "it needs an erase(actor_id) hook that removes the actor's log, snapshots, lease and alarm rows")
    existed = host.knows(actor_id)
    await lifecycle.close_now((actor_id.namespace, actor_id.hex))
    # From here to the hook nothing awaits: no call can wake the actor while its files go.
    removed = remove_database(host.path_for(actor_id))
    quarantined = sorted((host.data_dir / QUARANTINE_DIR / actor_id.namespace).glob(f"{actor_id.hex}-*"))
    for folder in quarantined:
        shutil.rmtree(folder)
    guard.catalog.erase(actor_id.namespace, actor_id.hex)
    index.remove(actor_id.namespace, actor_id.hex)
    guard.forget(actor_id)
    lifecycle.forget_file(actor_id.namespace)
    await hook(actor_id)
    if existed or removed or quarantined:
        logger.info("erased %s/%s (%s): %d files, %d quarantined copies", actor_id.namespace, actor_id.hex,
                    actor_id.name or "no name", len(removed), len(quarantined))
    return bool(existed or removed or quarantined)


async def _keep_placement(_actor_id: ActorId) -> None:
    """The hook of a working-copy-only erase: the placement keeps what it has."""


async def backup_actor(host: ActorHost, lifecycle: Lifecycle, actor_id: ActorId, target: Path) -> int | None:
    """Copy the actor's file into the new file ``target``; its bytes, or ``None`` when the actor has no file.

    A sleeping actor is copied from its closed file in a worker thread, its activation held back
    meanwhile (nothing is woken); an awake one as one turn, from its own connection.
    """
    path = host.path_for(actor_id)
    if not path.exists() and not host.is_active(actor_id.namespace, actor_id):
        return None
    asleep, copied = await lifecycle.while_asleep((actor_id.namespace, actor_id.hex),
                                                  functools.partial(copy_closed_file, path, target))
    if asleep:
        return copied

    async def copy(agent: Agent) -> int:
        # Off the trio thread (the copy and its fsync), the actor's gate closed meanwhile so no other call
        # of it uses the connection; other actors keep serving.
        return await agent.ctx.block_concurrency_while(
            lambda: run_sync_off_loop(functools.partial(copy_database, agent.storage, target)))

    return await host.run_turn(actor_id, copy)
