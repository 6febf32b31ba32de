"""Snapshots of actor files and rebuilding a file from Postgres.

A snapshot is ``zlib`` (level 1) of ``sqlite3_serialize`` of the file: the
bytes a copy on disk would hold. Compression runs on a worker thread
(:func:`compress_image`); 6 MB take 45-113 ms
(docs/cluster.md "Measured in the prototype", Q3).

:func:`restore_file` rebuilds an actor's file as the log says it is:

1. the base (the newest snapshot's image, else the actor-file template) is
   written to a temporary file next to the actor's;
2. the tail (every log entry after the snapshot) is combined into one
   changeset (``apsw.ChangesetBuilder``: 10k entries in ~30 ms instead of
   applying each, 2 s) and applied once, on a *fresh* connection -- FTS5
   caches its index structure per connection, and changes applied under a
   connection that already read an FTS table corrupt it
   (docs/cluster.md "Measured in the prototype", Q1).
   Any conflict aborts the restore with an error naming it: a log that does
   not fit its snapshot is damage, never patched over;
3. the marker (:data:`~storage.cluster.capture.MARKER_TABLE`) records the
   cluster and the entry the file now matches, in the same transaction;
4. the actor's old ``-wal`` and ``-shm`` are removed *before* the new file
   replaces the old one (a stale WAL would be replayed onto the new file),
   then ``os.replace`` puts it in place. A crash at any point leaves either
   the old file or the new one, and a file whose marker is not clean is
   restored again on the next activation.
"""

from __future__ import annotations

import os
import shutil
import zlib
from collections.abc import Sequence
from pathlib import Path

import anyio
import apsw

from common.errors import RestoreError, StorageUnavailableError
from storage.cipher import write_image
from storage.private_files import make_private, make_private_dirs
from storage.schema import MIGRATIONS, Migration, create_for_restore
from storage.sqlite import BUSY_TIMEOUT_MS, Durability, _fsync_path, ensure_template

from . import statements as sql
from .capture import MARKER_TABLE, Marker, ensure_marker, write_marker
from .driver import PgPool
from .ownership import Lease

__all__ = [
    "RestoreError", "combine", "compress_image", "decompress_image", "file_marker", "file_state", "rebuild_as_of",
    "restore_actor", "restore_file",
]

#: zlib level for snapshots (1: fastest; 6 saves ~12% more for 2-3x the time).
ZLIB_LEVEL = 1


async def compress_image(image: bytes) -> bytes:
    """``zlib`` of ``image`` on a worker thread."""
    return await anyio.to_thread.run_sync(zlib.compress, image, ZLIB_LEVEL)


def decompress_image(blob: bytes) -> bytes:
    """The serialized file inside a stored snapshot.

    Raises:
        RestoreError: the blob is not zlib data.
    """
    try:
        return zlib.decompress(blob)
    except zlib.error as exc:
        raise RestoreError(f"a stored snapshot is not zlib data ({exc})") from None


def combine(changesets: Sequence[bytes]) -> bytes:
    """One changeset with the effect of applying ``changesets`` in order."""
    parts = [cs for cs in changesets if cs]
    if len(parts) <= 1:
        return parts[0] if parts else b""
    builder = apsw.ChangesetBuilder()
    for part in parts:
        builder.add(part)
    return builder.output()


def restore_file(
    path: str | os.PathLike[str],
    *,
    template: str | os.PathLike[str],
    image: bytes | None,
    tail: Sequence[bytes],
    marker: Marker,
    durability: Durability = "normal",
    migrations: Sequence[Migration] = MIGRATIONS,
) -> None:
    """Rebuild the file at ``path`` from ``image`` (or ``template``) plus ``tail``.

    Args:
        path: the actor's file; no connection may have it open.
        template: the empty actor file (built first when missing).
        image: the newest snapshot, decompressed, or ``None`` to start from ``template``.
        tail: the changesets after the snapshot, in log order.
        marker: what the rebuilt file records about itself.
        durability: ``"full"`` syncs the new file and its folder.
        migrations: the ladder ``template`` is built with when missing
            (a log begun at an older schema version: its first steps).

    Raises:
        RestoreError: the tail conflicts with the base (the file is left as it was).
        apsw.Error: the image is not a database.
    """
    path = os.fspath(path)
    make_private_dirs(Path(path).parent)
    partial = f"{path}.restore.tmp"
    _remove(partial, f"{partial}-wal", f"{partial}-shm")
    try:
        if image is None:
            shutil.copyfile(ensure_template(template, migrations), partial)
        else:
            write_image(partial, image)  # encrypted on its way when the host has a key (storage.cipher)
        make_private(partial)  # before SQLite opens it: its -wal follows its mode
        _apply_on_fresh_connection(partial, combine(tail), marker, path)
        if durability == "full":
            _fsync_path(partial)
    except BaseException:
        _remove(partial, f"{partial}-wal", f"{partial}-shm")
        raise
    _remove(f"{path}-wal", f"{path}-shm")
    os.replace(partial, path)
    if durability == "full":
        _fsync_path(os.path.dirname(path) or ".")


def _apply_on_fresh_connection(file: str, changeset: bytes, marker: Marker, actor_path: str) -> None:
    con = apsw.Connection(file)
    try:
        con.set_busy_timeout(BUSY_TIMEOUT_MS)
        conflicts: list[str] = []

        def conflict(reason: int, change: apsw.TableChange) -> int:
            conflicts.append(f"{apsw.mapping_session_conflict.get(reason, reason)} on {change.name}: "
                             f"{change.op} {change.new or change.old}"[:300])
            return apsw.SQLITE_CHANGESET_ABORT

        with con:
            ensure_marker(con)
            if changeset:
                create_for_restore(con)  # tables made on first use: the log holds rows, never tables
                try:
                    apsw.Changeset.apply(changeset, con, conflict=conflict)
                except apsw.Error as exc:
                    detail = conflicts[0] if conflicts else f"{type(exc).__name__}: {exc}"
                    raise RestoreError(
                        f"{actor_path}: the cluster log does not apply to its snapshot ({detail}); "
                        "nothing was changed") from None
            write_marker(con, marker)
        con.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
    finally:
        con.close()


def _remove(*paths: str) -> None:
    for item in paths:
        try:
            os.unlink(item)
        except FileNotFoundError:
            pass


def file_marker(path: str | os.PathLike[str]) -> Marker | None:
    """The marker of the actor file at ``path``; ``None`` when the file or its marker is missing.

    Opens its own short-lived connection (no checkpoint on close); call it
    while the host has no connection open to the file.
    """
    return file_state(path)[0]


def file_state(path: str | os.PathLike[str]) -> tuple[Marker | None, int | None]:
    """``(marker, user_version)`` of the actor file at ``path`` (``None`` for what is missing or unreadable).

    The schema version tells whether opening the file will migrate it (a
    change its log cannot carry: the host then ships a snapshot first).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        return None, None
    con = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READWRITE)
    try:
        con.set_busy_timeout(BUSY_TIMEOUT_MS)
        con.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        version = int(con.pragma("user_version"))
        if not any(con.execute("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", (MARKER_TABLE,))):
            return None, version
        for cluster_id, last_seq, clean in con.execute(
                f"SELECT cluster_id, last_seq, clean FROM {MARKER_TABLE} WHERE id = 1"):
            return Marker(cluster_id, last_seq, bool(clean)), version
        return None, version
    except apsw.Error:
        return None, None  # unreadable: rebuilt from Postgres
    finally:
        con.close()


async def restore_actor(
    pool: PgPool,
    lease: Lease,
    path: str | os.PathLike[str],
    *,
    template: str | os.PathLike[str],
    cluster_id: str,
    durability: Durability,
    current_version: int,
) -> tuple[int, int]:
    """Rebuild the actor's file from Postgres, as of ``lease.last_seq`` (read after the lease was taken).

    The snapshot and the tail are read in one ``REPEATABLE READ`` transaction,
    so a snapshot stored (and the log trimmed) meanwhile cannot split them;
    the file work runs on a worker thread. Returns ``(snapshot seq or 0,
    entries applied)``.

    A log without a snapshot that began at an older schema version (made
    by an older release) is applied to an empty file of that version: the
    template built with the first ``base_version`` steps of the ladder,
    ``v<base_version><suffix>`` beside ``template``. Opening the file then
    migrates it, and the host ships the migrated file as the log's new base.

    Raises:
        RestoreError: a gap in the log, a log without a snapshot that starts
            from a newer schema version than this code's, a snapshot that is
            not a database, or a conflict (nothing changed).
        StorageUnavailableError: Postgres cannot be reached, or the file could
            not be written here (a fault of the local disk or folder; the
            cause is chained; nothing changed).
    """
    return await rebuild_as_of(pool, lease.actor, lease.last_seq, path, base_version=lease.base_version,
                               template=template, marker=Marker(cluster_id, lease.last_seq, clean=False),
                               durability=durability, current_version=current_version)


async def rebuild_as_of(
    pool: PgPool,
    actor: str,
    seq: int,
    path: str | os.PathLike[str],
    *,
    base_version: int,
    template: str | os.PathLike[str],
    marker: Marker,
    durability: Durability,
    current_version: int,
) -> tuple[int, int]:
    """Write the file ``actor`` had after log entry ``seq`` at ``path``: the newest snapshot at or before
    ``seq`` plus the entries after it up to ``seq`` (see :func:`restore_actor`, which rebuilds the newest
    entry; point-in-time restore rebuilds older ones). Returns ``(snapshot seq or 0, entries applied)``.

    Raises:
        RestoreError, StorageUnavailableError: as :func:`restore_actor` (a missing part of the log is
            a gap: nothing changed).
    """
    params = {"actor": actor, "upto": seq}
    image_blob: bytes | None = None
    after = 0
    async with pool.connection() as conn, conn.transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"):
        rows = await conn.execute(sql.LATEST_SNAPSHOT, params)
        if rows:
            after, _schema_version, image_blob = rows[0]
        tail = await conn.execute(sql.TAIL, {**params, "after": after})
    seqs = [entry for entry, _cs in tail]
    if seqs != list(range(after + 1, seq + 1)):
        raise RestoreError(f"actor {actor}: the cluster log has a gap (snapshot at {after}, entries "
                           f"{_ranges(seqs)}, newest {seq}); nothing was changed")
    migrations: Sequence[Migration] = MIGRATIONS
    if image_blob is None and seq > 0 and base_version != current_version:
        if not 1 <= base_version < current_version:
            raise RestoreError(f"actor {actor}: its log starts from actor-file schema version "
                               f"{base_version} and has no snapshot; this host's is {current_version}")
        migrations = MIGRATIONS[:base_version]
        template = Path(template).with_name(f"v{base_version}{Path(template).suffix}")

    def rebuild() -> None:
        image = None if image_blob is None else decompress_image(bytes(image_blob))
        try:
            restore_file(path, template=template, image=image, tail=[bytes(cs) for _seq, cs in tail],
                         marker=marker, durability=durability, migrations=migrations)
        except (apsw.NotADBError, apsw.CorruptError) as exc:
            raise RestoreError(f"actor {actor}: its snapshot at {after} is not a sound database ({exc}); "
                               "nothing was changed") from exc
        except (apsw.Error, OSError) as exc:  # the local disk or folder: the next attempt may succeed
            raise StorageUnavailableError(
                f"actor {actor}: its file could not be rebuilt from the cluster log "
                f"({type(exc).__name__}: {exc}); retry") from exc

    await anyio.to_thread.run_sync(rebuild)
    return after, len(tail)


def _ranges(seqs: Sequence[int]) -> str:
    if not seqs:
        return "none"
    return f"{seqs[0]}..{seqs[-1]} ({len(seqs)})"
