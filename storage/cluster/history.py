"""Point-in-time restore: the cluster log and snapshots kept as a restorable history.

Every log entry is stamped with the server's time of its append
(``ds_log.written_at``), and the log and snapshots are trimmed only behind
the *point-in-time window* (``[cluster] pitr_days``): the newest snapshot
stored at least the window ago stays, with every entry and snapshot after
it (:data:`~storage.cluster.statements.STORE_SNAPSHOT`,
:data:`~storage.cluster.statements.PRUNE_WINDOW`). So the state an actor had
at any moment of the window can be rebuilt: the newest snapshot at or
before the entry that was newest at that moment, plus the entries between
(:func:`~storage.cluster.restore.rebuild_as_of`, the same code that rebuilds
a file on failover).

**Bookmarks.** A moment is named by a *bookmark*, an opaque string a client
keeps and gives back (``bm1.`` + base64url of ``seq.entry_ms.at_ms.check``):

* ``seq`` -- the entry the state is as of (0: before the first write);
* ``entry_ms`` -- when entry ``max(seq, 1)`` was written: a session deleted
  and written again reuses sequence numbers, never this time, so a bookmark
  of a deleted session's history is refused;
* ``at_ms`` -- the moment it names (epoch milliseconds): it must still be in
  the window when the bookmark is used;
* ``check`` -- 16 hex of ``sha256(cluster_id/actor/seq/entry_ms/at_ms)``: a
  bookmark of another session, another cluster or a mistyped one is refused.
  It is a checksum, not a secret: a client who forges one can only name
  another moment of its own session's history.

**The restore** (:meth:`History.restored_image`, then :meth:`History.append_restore`)
builds the file as of the bookmark on a worker thread and writes it as one
fenced whole-file entry (:data:`~storage.cluster.statements.APPEND_SNAPSHOT`),
so the restore itself is in the log (and in the history: it can be undone by
restoring the bookmark of the moment before it). The entry carries the
restored file's alarm and catalog row.

Errors (all :class:`~common.errors.InvalidInputError`, 400, nothing changed):
a malformed bookmark or one of another session (``field="bookmark"``), a
moment outside the window (the message names the window), a bookmark of a
history that is gone (the session was deleted since).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import anyio

from common.errors import InvalidInputError
from storage.integrity import actor_facts
from storage.kv import ActorStorage
from storage.sqlite import Durability

from . import statements as sql
from .capture import Marker
from .catalog import KIND_SESSION
from .driver import PgPool
from .ownership import Lease
from .restore import compress_image, rebuild_as_of

__all__ = ["Bookmark", "History", "OutsideWindowError", "RestoredImage", "iso_ms"]

_PREFIX = "bm1."
_DAY_MS = 86_400_000


def iso_ms(epoch_ms: int) -> str:
    """``epoch_ms`` as an ISO 8601 UTC time with milliseconds (``2026-12-02T07:13:18.250Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_ms // 1000)) + f".{epoch_ms % 1000:03d}Z"


class OutsideWindowError(InvalidInputError):
    """A moment (or a bookmark's moment) is outside the point-in-time window (400; the message names it)."""


@dataclass(frozen=True, slots=True)
class Bookmark:
    """A moment of one actor's history (see the module docstring): the state after entry ``seq``,
    ``entry_ms`` the time entry ``max(seq, 1)`` was written, ``at_ms`` the moment named (epoch ms)."""

    seq: int
    entry_ms: int
    at_ms: int

    def encode(self, cluster_id: str, actor: str) -> str:
        """The opaque string a client keeps."""
        body = f"{self.seq}.{self.entry_ms}.{self.at_ms}.{_check(cluster_id, actor, self)}"
        return _PREFIX + base64.urlsafe_b64encode(body.encode("ascii")).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, token: object, cluster_id: str, actor: str) -> Bookmark:
        """The bookmark ``token`` names, checked against this actor.

        Raises:
            InvalidInputError: (``field="bookmark"``) not a bookmark string, or one of another session.
        """
        if not isinstance(token, str) or not token.startswith(_PREFIX) or len(token) > 200:
            raise InvalidInputError("bookmark must be a bookmark string (from GET .../bookmark?at=...)",
                                    field="bookmark")
        try:
            padded = token[len(_PREFIX):] + "=" * (-len(token[len(_PREFIX):]) % 4)
            seq, entry_ms, at_ms, check = base64.urlsafe_b64decode(padded).decode("ascii").split(".")
            found = cls(int(seq), int(entry_ms), int(at_ms))
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise InvalidInputError("bookmark is not a bookmark string (damaged or cut short?)",
                                    field="bookmark") from None
        if found.seq < 0 or check != _check(cluster_id, actor, found):
            raise InvalidInputError("bookmark names a moment of another session (or is damaged): a bookmark "
                                    "restores only the session it was made for", field="bookmark")
        return found


def _check(cluster_id: str, actor: str, bookmark: Bookmark) -> str:
    text = f"{cluster_id}/{actor}/{bookmark.seq}/{bookmark.entry_ms}/{bookmark.at_ms}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class RestoredImage:
    """An actor's file as of a bookmark, ready to be shipped as a whole-file entry.

    ``image``: zlib of the serialized file; ``schema_version``: its ``user_version``;
    ``alarm_ms``: its alarm (``None``: none); ``catalog``: its catalog row (JSON text);
    ``messages``: how many messages it holds; ``base_seq``, ``replayed``: the snapshot it was
    built from (0: none) and the log entries applied on it.
    """

    image: bytes
    schema_version: int
    alarm_ms: int | None
    catalog: str
    messages: int
    base_seq: int
    replayed: int


class History:
    """One database's point-in-time history (a host's :class:`~runtime.host.cluster.HostCluster` holds one).

    Args:
        pool: connections to the database.
        cluster_id: the database's cluster id (bookmarks are checked against it).
        window_ms: the point-in-time window in milliseconds (0: point-in-time restore is off).
    """

    def __init__(self, pool: PgPool, cluster_id: str, window_ms: int) -> None:
        self.pool = pool
        self.cluster_id = cluster_id
        self.window_ms = window_ms

    def describe_window(self, now_ms: int) -> str:
        """``the point-in-time window of 7 days (from <ISO time>)``."""
        return f"the point-in-time window of {self.window_ms / _DAY_MS:g} days (from {iso_ms(now_ms - self.window_ms)})"

    def _require_window(self) -> None:
        if self.window_ms <= 0:
            raise OutsideWindowError("point-in-time restore is off in this cluster ([cluster] pitr_days = 0): "
                                     "no history is kept", field="at")

    async def bookmark(self, actor: str, at_ms: int) -> tuple[Bookmark, int] | None:
        """The bookmark of ``actor``'s state at ``at_ms`` (epoch ms; a moment after the newest write
        names the current state, and a moment still to come is taken as now), with the server's time;
        ``None`` when the actor was never written.

        Raises:
            OutsideWindowError: ``at_ms`` is before the window (or its history is no longer kept).
            StorageUnavailableError: Postgres cannot be reached.
        """
        self._require_window()
        rows = await self.pool.execute(sql.POINT_AT, {"actor": actor, "at_ms": at_ms})
        seq_at, oldest, last_seq, now_ms = rows[0]
        if not last_seq:
            return None
        if at_ms < now_ms - self.window_ms:
            raise OutsideWindowError(f"at {iso_ms(at_ms)} is outside {self.describe_window(now_ms)}", field="at")
        seq = int(seq_at or 0)
        if seq == 0 and oldest != 1:  # before every entry kept, and the first ones are gone
            raise OutsideWindowError(f"at {iso_ms(at_ms)} is before the history kept of this session, "
                                     f"outside {self.describe_window(now_ms)}", field="at")
        entry_ms = await self._entry_ms(actor, max(seq, 1))
        if entry_ms is None:
            raise OutsideWindowError(f"at {iso_ms(at_ms)}: the history of that moment is no longer kept, "
                                     f"outside {self.describe_window(now_ms)}", field="at")
        return Bookmark(seq, entry_ms, min(at_ms, int(now_ms))), int(now_ms)  # never a moment still to come

    async def _entry_ms(self, actor: str, seq: int) -> int | None:
        rows = await self.pool.execute(sql.ENTRY_TIME, {"actor": actor, "seq": seq})
        return int(rows[0][0]) if rows else None

    async def check(self, actor: str, bookmark: Bookmark, last_seq: int) -> None:
        """Refuse a bookmark that cannot be restored now: its moment left the window, its history
        is gone (the session was deleted and written again since), or it is newer than ``last_seq``.

        Raises:
            OutsideWindowError, InvalidInputError: (nothing changed).
        """
        self._require_window()
        now_ms = int((await self.pool.execute(sql.NOW_MS))[0][0])
        if bookmark.at_ms < now_ms - self.window_ms:
            raise OutsideWindowError(f"the bookmark names {iso_ms(bookmark.at_ms)}, outside "
                                     f"{self.describe_window(now_ms)}", field="bookmark")
        entry_ms = await self._entry_ms(actor, max(bookmark.seq, 1))
        if bookmark.seq > last_seq or (entry_ms is not None and entry_ms != bookmark.entry_ms):
            raise InvalidInputError("the bookmark is not of this session's history any more (the session was "
                                    "deleted and written again since it was made)", field="bookmark")
        if entry_ms is None:
            raise OutsideWindowError(f"the history of the bookmark's moment ({iso_ms(bookmark.at_ms)}) is no "
                                     f"longer kept, outside {self.describe_window(now_ms)}", field="bookmark")

    async def undo_bookmark(self, lease: Lease) -> Bookmark:
        """The bookmark of the state ``lease`` found (every entry up to ``lease.last_seq``), now."""
        now_ms = int((await self.pool.execute(sql.NOW_MS))[0][0])
        entry_ms = await self._entry_ms(lease.actor, max(lease.last_seq, 1))
        return Bookmark(lease.last_seq, entry_ms or 0, now_ms)

    async def restored_image(self, actor: str, bookmark: Bookmark, *, namespace: str, work_path: Path,
                             base_version: int, template: Path, durability: Durability,
                             current_version: int) -> RestoredImage:
        """Build ``actor``'s file as of ``bookmark`` at ``work_path`` (a scratch file, removed after),
        opened once (migrated to ``current_version`` if older), and read what its entry carries.

        Raises:
            RestoreError, StorageUnavailableError: see :func:`~storage.cluster.restore.rebuild_as_of`.
        """
        base, replayed = await rebuild_as_of(
            self.pool, actor, bookmark.seq, work_path, base_version=base_version, template=template,
            marker=Marker(self.cluster_id, bookmark.seq, clean=False), durability=durability,
            current_version=current_version)

        def read() -> tuple[bytes, int, int | None, str, int]:
            storage = ActorStorage.open(work_path, durability=durability, template=template)
            try:
                facts = actor_facts(storage)
                alarm = storage.read_alarm_row()
                now_ms = time.time_ns() // 1_000_000
                row = {"namespace": namespace, "kind": KIND_SESSION, "name": facts.name, "messages": facts.messages,
                       "compactions": facts.compactions, "compacted_through": facts.compacted_through,
                       "created_ms": facts.first_message_ms or now_ms, "updated_ms": now_ms}
                image = storage.connection.serialize("main")
                return image, storage.user_version, None if alarm is None else alarm.scheduled_ms, json.dumps(row), \
                    facts.messages
            finally:
                storage.close()
                for suffix in ("", "-wal", "-shm"):
                    try:
                        os.unlink(f"{work_path}{suffix}")
                    except FileNotFoundError:
                        pass

        image, version, alarm_ms, catalog, messages = await anyio.to_thread.run_sync(read)
        return RestoredImage(await compress_image(image), version, alarm_ms, catalog, messages, base, replayed)

    async def append_restore(self, lease: Lease, restored: RestoredImage, *, host_id: str, lease_ms: int) -> bool:
        """Append ``restored`` as the actor's next entry (``lease.last_seq + 1``), one fenced whole-file
        entry with its alarm and catalog row; ``False`` when the fence refused it (the lease was lost).

        Raises:
            StorageUnavailableError, DatabaseError: see :class:`~storage.cluster.driver.PgConnection`
                (the outcome of a statement cut off is unknown: the caller answers retry).
        """
        rows = await self.pool.execute(sql.APPEND_SNAPSHOT, {
            "actor": lease.actor, "seq": lease.last_seq + 1, "epoch": lease.epoch, "me": host_id,
            "lease_ms": lease_ms, "schema_version": restored.schema_version, "image": restored.image,
            "alarm_op": 2 if restored.alarm_ms is None else 1, "alarm_ms": restored.alarm_ms,
            "catalog": restored.catalog, "window_ms": self.window_ms})
        return bool(rows)

    async def prune(self, *, limit: int = 200) -> tuple[int, int, int, int]:
        """Remove the history older than the window that no moment of it needs, of at most ``limit``
        actors (:data:`~storage.cluster.statements.PRUNE_WINDOW`); ``(actors, log rows, log bytes,
        snapshots)`` pruned (fewer actors than ``limit``: nothing more to prune now)."""
        if self.window_ms <= 0:
            return 0, 0, 0, 0
        rows = await self.pool.execute(sql.PRUNE_WINDOW, {"window_ms": self.window_ms, "limit": limit})
        actors, log_rows, log_bytes, snapshots = rows[0]
        return int(actors), int(log_rows), int(log_bytes), int(snapshots)
