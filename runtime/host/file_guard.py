"""Damage is never silent: the host's checks around opening and closing an actor file, and quarantine.

The host calls a :class:`FileGuard` at four points (see :mod:`storage.integrity`
for the checks themselves):

* **before opening** a file: an actor already quarantined is refused; the
  file headers are checked; a file the host catalog lists that is gone
  *vanished*. Nothing is created for a refused actor.
* **before opening**, too, a small file gets ``PRAGMA quick_check`` on a
  short-lived connection of its own.
* **after opening** it: the file's generation must not be below the
  catalog's (else it *went back in time*: its WAL was deleted or cut
  short).
* **a clean close vouches for the next wake**: a file this host closed
  once the clock that stamps modification times had passed its last write
  (a tick, 1-10 ms on Linux: :func:`_settled`), and that nobody touched
  since, skips every check above: the headers and the quick
  check were done when it was opened, and the catalog's row can hold no news
  for it (only this host writes it, and only after raising the file's own
  generation first). "Nobody touched it" is one ``lstat`` of each folder on
  its way from the data folder, of the file and of each companion
  (``-wal``, ``-shm``, ``-journal``): the same inodes (so no symbolic link
  has taken a place, and no file was replaced), the files the same size and
  modification time, no companion come or gone. Anything else gets every check.
* **when a call fails** with SQLite reporting damage (:func:`storage.faults.classify`).
* **when the actor hibernates or closes** after writing: its generation is
  raised and the catalog row updated (never per call: an append pays no
  second fsync for the catalog). The row gets the times of the actor's
  first and last commit since it was opened (noted in memory by a commit
  hook), not the time of the hibernation; writes of the host itself (the
  cluster's markers, the generation) do not count, so a wake that only
  reads leaves the row as it was. When the host checkpoints a hibernating
  actor's WAL (:meth:`FileGuard.checkpoint`, in a worker thread) the
  generation is raised once more after it, which starts the next WAL there.

In cluster mode (``rebuildable``) Postgres holds the truth and the file is
a working copy: a damaged copy is moved aside (logged, never silent) and
rebuilt from Postgres instead of refusing the actor, and generations are
not kept (a copy rebuilt from the log starts again at 0, and nothing may be
written to the file outside a captured turn).

A damaged actor is **quarantined**: its files move to
``<data_dir>/_quarantine/<namespace>/<hex>-<UTC time>/``, the catalog
marks it (so it stays refused after a restart) and every call to it gets
:class:`~common.errors.ActorStorageCorruptError` naming the session.
Other actors are not affected. ``durable-sessions doctor`` lists
quarantined actors and releases them.
"""

from __future__ import annotations

import datetime
import logging
import os
import struct
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from stat import S_ISLNK

import trio

from common.errors import ActorStorageCorruptError
from runtime.host.ids import ActorId
from storage.catalog import CatalogEntry, HostCatalog
from storage.integrity import (
    QUICK_CHECK_MAX_BYTES,
    ActorFacts,
    actor_facts,
    bump_generation,
    check_files,
    companion_files,
    quick_check_file,
    read_generation,
)
from storage.kv import ActorStorage
from storage.private_files import make_private_dirs

__all__ = ["QUARANTINE_DIR", "FileGuard"]

logger = logging.getLogger(__name__)

#: Folder (inside the data folder) damaged actors' files are moved to.
QUARANTINE_DIR = "_quarantine"
#: Where the kernel's coarse clock cannot be read (not Linux): how long ago a closed file must have been
#: last modified for its stats to vouch for it (ns). A file system keeps coarse modification times, so a
#: change within the same tick as our last write would not show (see :func:`_settled`).
TRUSTED_AGE_NS = 100_000_000
#: The clock Linux stamps modification times with, ``CLOCK_REALTIME_COARSE`` (which :mod:`time` does not
#: name); ``None`` elsewhere.
_STAMP_CLOCK: int | None = 5 if sys.platform == "linux" else None
#: How :func:`_identity` packs what it saw: the inode of each folder on the way, then (inode, size,
#: modification time in ns) of the database, ``-wal``, ``-shm`` and ``-journal`` (a missing file: 0, -1, -1).
_FILE_SUFFIXES = ("", "-wal", "-shm", "-journal")
_HOOK_ID = "runtime.catalog"

ActorKey = tuple[str, str]


class FileGuard:
    """Checks, catalog updates and quarantine for the actor files of one host (internal to the host).

    Args:
        data_dir: the host's data folder.
        catalog: its :class:`~storage.catalog.HostCatalog`.
        path_for: the actor file of an id.
        quick_check_max_bytes: files up to this size (database plus WAL) get a
            quick check at every wake; 0 turns it off.
        rebuildable: cluster mode: a damaged file is set aside and rebuilt from
            Postgres (:meth:`set_aside_if_damaged`), never refused; no generations.
    """

    def __init__(self, data_dir: Path, catalog: HostCatalog, path_for: Callable[[ActorId], Path], *,
                 quick_check_max_bytes: int = QUICK_CHECK_MAX_BYTES, rebuildable: bool = False) -> None:
        self.rebuildable = rebuildable
        self.data_dir = data_dir
        self.catalog = catalog
        self._path_for = path_for
        self._quick_check_max_bytes = quick_check_max_bytes
        self._refused: dict[ActorKey, ActorStorageCorruptError] = {}
        self._settled: set[ActorKey] = set()
        self._written: dict[ActorKey, tuple[int, int]] = {}  # first and last commit (epoch ms) since opened
        self._quiet: set[tuple[ActorKey, trio.lowlevel.Task]] = set()  # (actor, task) whose commits are not writes
        # Crash-safe marks (see mark_after_turn): actors whose next write needs a mark, and those that wrote since.
        self._unmarked: set[ActorKey] = set()
        self._to_mark: set[ActorKey] = set()
        # What vouches for a file at its next wake (see after_close): (path, folders seen) of the files
        # this host opened, and (path, identity) of those it closed cleanly.
        self._opened: dict[ActorKey, tuple[str, list[os.stat_result | None]]] = {}  # folders and files seen
        self._closed_as: dict[ActorKey, tuple[str, bytes]] = {}
        self._folders_of: dict[str, list[str]] = {}  # see _folders

    # -- refusals ----------------------------------------------------------------------------

    def refusal(self, actor_id: ActorId) -> ActorStorageCorruptError | None:
        """A fresh error for an actor quarantined while this host runs, else ``None`` (no I/O;
        always ``None`` when :attr:`rebuildable`: a damaged copy is rebuilt, not refused)."""
        if self.rebuildable:
            return None
        error = self._refused.get((actor_id.namespace, actor_id.hex))
        return None if error is None else ActorStorageCorruptError(error.session, error.problem)

    def known(self, actor_id: ActorId) -> bool:
        """``True`` when the catalog lists the actor (whether or not its file is there)."""
        return (actor_id.namespace, actor_id.hex) in self._refused or \
            self.catalog.get(actor_id.namespace, actor_id.hex) is not None

    # -- opening -----------------------------------------------------------------------------

    def before_open(self, actor_id: ActorId) -> CatalogEntry | None:
        """Check an actor about to be opened (headers; a small file gets a quick check on a connection
        of its own); its catalog entry (``None``: unknown, or the file is as this host cleanly closed
        it, which leaves the entry nothing to check: see the module docstring).

        Raises:
            ActorStorageCorruptError: quarantined earlier, a damaged header, a
                failed quick check, or a file the catalog lists that is gone
                (it is quarantined now); or its file, a companion of it or a
                folder on its path inside the data folder is a symbolic link
                (refused, the target never opened).
        """
        key = (actor_id.namespace, actor_id.hex)
        closed = self._closed_as.pop(key, None)
        path = closed[0] if closed is not None else os.fspath(self._path_for(actor_id))
        folders = self._folders(path)
        seen = _lstats([*folders, *_files(path)])
        if not self.rebuildable:
            self._opened[key] = (path, seen)
        if closed is not None and not self.rebuildable and key not in self._refused \
                and _identity(seen, len(folders)) == closed[1]:
            return None  # untouched since this host closed it cleanly: checked when it was opened
        link = _first_link(folders, path, seen)
        if link is not None:
            logger.error("actor %s/%s refused: %s is a symbolic link (to %s); the host never follows links in "
                         "its data folder", actor_id.namespace, actor_id.hex, link, os.readlink(link))
            self._settled.add(key)  # nothing to move or mark: fixed, it serves again
            raise self.refuse(actor_id, f"{link.relative_to(self.data_dir)} in the data folder is a symbolic "
                                        "link; refused without opening it (put the file itself there)")
        entry = self.catalog.get(actor_id.namespace, actor_id.hex)
        if self.rebuildable:
            return entry  # checked by set_aside_if_damaged before the copy was made current
        if entry is not None and entry.quarantined:
            self._settled.add(key)
            raise self.refuse(actor_id, entry.problem or "quarantined earlier", name=entry.name)
        database, wal = seen[len(folders):len(folders) + 2]
        if database is None:
            if entry is not None:
                was = (f"the host marked generation {entry.generation} at a write before it stopped without "
                       "closing it" if entry.unclosed else
                       f"the catalog saw generation {entry.generation}, {entry.messages} messages")
                raise self.quarantine(actor_id, f"its file vanished ({was})", entry=entry)
            return None
        problem = check_files(path)
        if problem is None and database.st_size + (wal.st_size if wal is not None else 0) \
                <= self._quick_check_max_bytes:
            problem = quick_check_file(path)
            problem = None if problem is None else f"the integrity check failed: {problem}"
        if problem is not None:
            raise self.quarantine(actor_id, problem, entry=entry)
        return entry

    def _folders(self, path: str) -> list[str]:
        """The folders from the data folder (excluded) down to the one holding ``path`` (included);
        kept per holding folder (a namespace has at most 256 shard folders)."""
        holder = os.path.dirname(path)
        folders = self._folders_of.get(holder)
        if folders is None:
            base = os.fspath(self.data_dir)
            folders, folder = [], holder
            while len(folder) > len(base) and folder.startswith(base):
                folders.append(folder)
                folder = os.path.dirname(folder)
            folders = self._folders_of[holder] = folders[::-1]
        return folders

    def _symbolic_link(self, actor_id: ActorId) -> Path | None:
        """The first symbolic link on the way from the data folder to the actor's files, else ``None``.

        A link could point anywhere (another user's files, a file another
        host serves); SQLite would follow it, so the host never opens one.
        """
        path = os.fspath(self._path_for(actor_id))
        folders = self._folders(path)
        return _first_link(folders, path, _lstats([*folders, *_files(path)]))

    def after_open(self, actor_id: ActorId, storage: ActorStorage, entry: CatalogEntry | None) -> None:
        """Check the opened file against the catalog; then watch its commits.

        Raises:
            ActorStorageCorruptError: it went back in time; ``storage`` was
                closed and the actor quarantined.
            apsw.Error: SQLite could not read it (the caller classifies it).
        """
        problem = None
        if entry is not None and not self.rebuildable:
            generation = read_generation(storage)
            if generation < entry.generation:
                seen = (f"the host marked generation {entry.generation} at a write before it stopped without "
                        "closing it" if entry.unclosed else
                        f"the catalog saw {entry.generation} with {entry.messages} messages")
                problem = f"its file went back in time (generation {generation}, {seen}): its WAL was lost or cut short"
        if problem is not None:
            storage.close()
            raise self.quarantine(actor_id, problem, entry=entry)
        key = (actor_id.namespace, actor_id.hex)
        storage.on_commit(lambda: self._stamp(key), key=_HOOK_ID)
        if not self.rebuildable:  # a cluster copy is rebuilt from Postgres: its log is the record
            self._unmarked.add(key)
            storage.on_checkpoint(lambda: self._unmarked.add(key))

    def _stamp(self, key: ActorKey) -> None:
        # Inside SQLite's commit hook: one clock read and one dict store per commit.
        if self._quiet and (key, trio.lowlevel.current_task()) in self._quiet:
            return
        if key in self._unmarked:  # the first write since the actor woke, or since its WAL was checkpointed
            self._unmarked.discard(key)
            self._to_mark.add(key)
        now = time.time_ns() // 1_000_000
        span = self._written.get(key)
        self._written[key] = (now, now) if span is None else (span[0], now)

    def mark_after_turn(self, actor_id: ActorId, storage: ActorStorage) -> None:
        """After a turn, before its reply leaves: when the actor wrote for the first time since it
        woke (or since its WAL was last checkpointed), raise its file's generation and mark the
        catalog row with it (:meth:`~storage.catalog.HostCatalog.mark_written`).

        Two small commits per wake that writes (and per checkpoint, every ~4 MB of WAL), none per
        call. After a crash, a file whose WAL was lost falls below the marked generation, and a file
        that vanished has a row: both are quarantined at the next wake, as after a clean stop. A
        failure (a full disk) is logged and leaves the actor to be marked at its next turn.
        """
        key = (actor_id.namespace, actor_id.hex)
        if key not in self._to_mark or storage.in_transaction or key in self._refused:
            return
        span = self._written.get(key)
        try:
            with self.host_writes(actor_id):
                generation = bump_generation(storage)
            self.catalog.mark_written(actor_id.namespace, actor_id.hex, name=actor_id.name, generation=generation,
                                      first_written_ms=span[0] if span is not None else time.time_ns() // 1_000_000)
        except Exception:  # noqa: BLE001 - the next turn tries again; the close records it anyway
            logger.warning("could not mark %s/%s written in the host catalog", actor_id.namespace, actor_id.hex,
                           exc_info=True)
            return
        self._to_mark.discard(key)

    def last_write_ms(self, actor_id: ActorId) -> int | None:
        """Epoch milliseconds of the actor's last commit since its file was opened (``None``: none)."""
        span = self._written.get((actor_id.namespace, actor_id.hex))
        return None if span is None else span[1]

    @contextmanager
    def host_writes(self, actor_id: ActorId) -> Iterator[None]:
        """Commits inside the block are the host's own (cluster markers), not the actor's: they
        neither make it count as written nor move its write times."""
        key = (actor_id.namespace, actor_id.hex)
        span = self._written.get(key)
        try:
            yield
        finally:
            if span is None:
                self._written.pop(key, None)
            else:
                self._written[key] = span

    @contextmanager
    def quiet_writes(self, actor_id: ActorId) -> Iterator[None]:
        """Commits the CURRENT TASK makes to the actor's file inside the block are upkeep, not updates
        (a prompt rendered and stored on first read): they do not move its write times. Commits of the
        actor's other calls meanwhile still count. Must run in the host's trio thread."""
        entry = ((actor_id.namespace, actor_id.hex), trio.lowlevel.current_task())
        if entry in self._quiet:  # nested: the outer block ends it
            yield
            return
        self._quiet.add(entry)
        try:
            yield
        finally:
            self._quiet.discard(entry)

    def set_aside_if_damaged(self, actor_id: ActorId) -> str | None:
        """Cluster mode, before the working copy is made current: check its headers (and a small
        file's integrity); a damaged copy is moved aside, logged, and left to be rebuilt from
        Postgres. Returns the problem found (``None``: intact or absent)."""
        path = self._path_for(actor_id)
        if not path.exists():
            return None
        problem = check_files(path)
        if problem is None and self._small(path):
            problem = quick_check_file(path)
            problem = None if problem is None else f"the integrity check failed: {problem}"
        if problem is not None:
            moved = self._move_aside(actor_id)
            logger.error("actor %s/%s: its working copy is damaged (%s); moved to %s, rebuilding it from "
                         "Postgres", actor_id.namespace, actor_id.hex, problem, moved)
        return problem

    def _small(self, path: str | Path) -> bool:
        total = 0
        for file in companion_files(path)[:2]:
            try:
                total += os.stat(file).st_size
            except FileNotFoundError:
                pass
        return total <= self._quick_check_max_bytes

    # -- closing -----------------------------------------------------------------------------

    def before_close(self, actor_id: ActorId, storage: ActorStorage) -> None:
        """An actor that wrote since it opened: raise its file's generation and update its catalog row
        (with the times of its first and last commit since then).

        The raise is the last frame of the WAL, so a WAL cut short or damaged anywhere before its end
        (SQLite then drops every frame from the damage on) falls below the catalog's generation --
        which the mark made at the first write (:meth:`mark_after_turn`), early in the WAL, cannot show.

        Failures (a full disk) are logged and skipped: the catalog may lag
        behind a file, never run ahead of it.
        """
        key = (actor_id.namespace, actor_id.hex)
        # Closing: later commits (the generation, a checkpoint's thread) are not the actor's writes.
        storage.on_commit(None, key=_HOOK_ID)
        if not self.rebuildable:
            storage.on_checkpoint(None)
        self._unmarked.discard(key)
        self._to_mark.discard(key)
        span = self._written.pop(key, None)
        if span is None or key in self._refused:
            return
        try:
            if not self.rebuildable:  # a cluster copy is written only inside captured turns
                bump_generation(storage)
            facts = actor_facts(storage)
            self.catalog.record(actor_id.namespace, actor_id.hex, _named(facts, actor_id), written_ms=span[1],
                                first_written_ms=span[0])
        except Exception:  # noqa: BLE001 - closing must go on; the catalog only lags
            logger.warning("could not record %s/%s in the host catalog", actor_id.namespace, actor_id.hex,
                           exc_info=True)

    def checkpoint(self, storage: ActorStorage) -> None:
        """Copy a hibernating actor's WAL into its database and cut it to 0 bytes, after :meth:`before_close`.

        Runs in a worker thread; nothing else uses ``storage`` meanwhile (its
        hooks are detached). Outside cluster mode the generation is then
        raised once more: that small commit starts the next WAL (its header
        written and synced here), so the first write after the next wake
        appends to it without a disk sync. The catalog keeps the value
        :meth:`before_close` recorded: a file may run ahead of its catalog
        row, never behind it. Losing this WAL loses nothing of the actor's.

        Raises:
            apsw.Error: the checkpoint failed (``apsw.FullError`` on a full
                disk); the WAL keeps every frame.
        """
        storage.checkpoint_wal()
        if self.rebuildable:  # cluster mode: nothing is written outside a captured turn
            return
        try:
            bump_generation(storage)
        except Exception:  # noqa: BLE001 - the first write after the next wake starts the WAL instead
            logger.info("starting the next WAL of %s failed", storage.path, exc_info=True)

    def after_close(self, actor_id: ActorId) -> None:
        """Remember what the closed files and the folders on their way are (see the module docstring):
        unchanged at the next wake, they need no check (a file changed behind the host's back is
        checked again).

        Only files whose last modification time no later change could repeat are remembered
        (:func:`_settled`): a file system keeps coarse modification times, so a change within the
        same tick as our last write would not show. A file written within the last tick (the
        generation raised at the close itself) has its modification time set back by 1 ns
        (:func:`_set_back`): a time no later change can be stamped with, since stamps never go
        below one already given, so it is remembered too.
        """
        key = (actor_id.namespace, actor_id.hex)
        opened = self._opened.pop(key, None)
        if key in self._refused or self.rebuildable:
            return
        path, at_open = opened if opened is not None else (os.fspath(self._path_for(actor_id)), None)
        folders = self._folders(path)
        if at_open is None or any(stat is None for stat in at_open[:len(folders)]):
            at_open = _lstats([*folders, *_files(path)])  # new: its folders were made when it opened
        # The database and its WAL as they are now; -shm and -journal as they were at the open (with
        # exclusive locking SQLite makes neither: one that came since shows at the next wake).
        files = [*_lstats(_files(path)[:2]), *at_open[-2:]]
        seen = [*at_open[:len(folders)], *files]
        if files[0] is None or any(stat is not None and S_ISLNK(stat.st_mode) for stat in seen):
            return
        if not _settled(max(stat.st_mtime_ns for stat in files if stat is not None)):
            set_back = _set_back(_files(path)[:2], files[:2])
            if set_back is None:
                return
            seen = [*at_open[:len(folders)], *set_back, *at_open[-2:]]
        self._closed_as[key] = (path, _identity(seen, len(folders)))

    def forget(self, actor_id: ActorId) -> None:
        """The actor was erased (its files removed, catalog row dropped): forget what is kept of it in memory."""
        key = (actor_id.namespace, actor_id.hex)
        self._refused.pop(key, None)
        self._settled.discard(key)
        self._written.pop(key, None)
        self._opened.pop(key, None)
        self._closed_as.pop(key, None)

    # -- quarantine ----------------------------------------------------------------------------

    def quarantine(self, actor_id: ActorId, problem: str, *, entry: CatalogEntry | None = None,
                   name: str | None = None) -> ActorStorageCorruptError:
        """Refuse the actor from now on, move its (closed) files aside and mark it in the catalog.

        Returns the error to raise (it names the session).
        """
        error = self.refuse(actor_id, problem, name=name or (entry.name if entry is not None else None))
        self.settle(actor_id)
        return error

    def refuse(self, actor_id: ActorId, problem: str, *, name: str | None = None) -> ActorStorageCorruptError:
        """Refuse every call to the actor from now on (in memory; :meth:`settle` once its file is closed)."""
        key = (actor_id.namespace, actor_id.hex)
        known = self._refused.get(key)
        if known is not None:
            return ActorStorageCorruptError(known.session, known.problem)
        session = name or actor_id.name or f"{actor_id.namespace}/{actor_id.hex}"
        self._refused[key] = ActorStorageCorruptError(session, problem)
        self._written.pop(key, None)
        self._opened.pop(key, None)
        self._closed_as.pop(key, None)
        return ActorStorageCorruptError(session, problem)

    def refused(self, actor_id: ActorId) -> bool:
        """``True`` once :meth:`refuse` (or :meth:`quarantine`) ran for the actor."""
        return (actor_id.namespace, actor_id.hex) in self._refused

    def settle(self, actor_id: ActorId) -> None:
        """For a refused actor whose file is closed: move the files aside and mark the catalog (once).

        A failure (e.g. no room for the quarantine folder on a full disk) is
        logged; the actor stays refused while this host runs.
        """
        key = (actor_id.namespace, actor_id.hex)
        if self.rebuildable:  # cluster mode: set the copy aside; the next activation rebuilds it
            error = self._refused.pop(key, None)
            moved = self._move_aside(actor_id)
            logger.error("actor %s/%s: its working copy is damaged (%s); moved to %s, to be rebuilt from "
                         "Postgres", actor_id.namespace, actor_id.hex, error.problem if error else "?", moved)
            return
        if key in self._settled:
            return
        self._settled.add(key)
        error = self._refused[key]
        name = None if error.session == f"{actor_id.namespace}/{actor_id.hex}" else error.session
        moved = None
        try:
            moved = self._move_aside(actor_id)
            self.catalog.quarantine(actor_id.namespace, actor_id.hex, name=name, problem=error.problem,
                                    moved_to=moved)
        except Exception:  # noqa: BLE001 - still refused while this host runs
            logger.exception("could not quarantine %s/%s on disk", actor_id.namespace, actor_id.hex)
        logger.error("actor %s/%s (%s) quarantined: %s; files moved to %s", actor_id.namespace, actor_id.hex,
                     name or "no name", error.problem, moved or "(none)")

    def _move_aside(self, actor_id: ActorId) -> str | None:
        if self._symbolic_link(actor_id) is not None:
            return None  # never move (or follow) what a link points to
        files = [path for path in companion_files(self._path_for(actor_id)) if path.exists()]
        if not files:
            return None
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        target = self.data_dir / QUARANTINE_DIR / actor_id.namespace / f"{actor_id.hex}-{stamp}"
        make_private_dirs(target)
        for path in files:
            os.replace(path, target / path.name)
        return str(target.relative_to(self.data_dir))



def _settled(mtime_ns: int) -> bool:
    """Whether a change to a file from now on would give it a modification time other than ``mtime_ns``.

    Linux stamps a change with its coarse clock (one tick: 1-10 ms), or, since 6.13, with a value at
    least as late, cut to the file system's granularity ``g`` (1 ns on ext4, xfs, btrfs and tmpfs,
    100 ns on NTFS, 1 s on ext3, 2 s on FAT). Once that clock is ``g`` past ``mtime_ns`` (a multiple
    of ``g``), every later stamp is at least ``mtime_ns + g``. ``g`` is not known, but it divides
    ``mtime_ns``: twice the power of ten that ends it (``2e9`` for a time in whole seconds) is at least
    ``g``. So a file written a tick before its close is vouched for, where waiting a fixed age would
    still distrust it. Without that clock (not Linux): :data:`TRUSTED_AGE_NS` must have passed.
    (On a network file system the server stamps the files with its own clock; SQLite advises
    against keeping databases there.)
    """
    if _STAMP_CLOCK is None:
        return time.time_ns() - mtime_ns >= TRUSTED_AGE_NS
    grain = 2
    while grain < 2_000_000_000 and mtime_ns % (grain * 5) == 0:
        grain *= 10
    return time.clock_gettime_ns(_STAMP_CLOCK) - mtime_ns >= grain


def _set_back(names: list[str], seen: list[os.stat_result | None]) -> list[os.stat_result | None] | None:
    """Set the modification time of each file just written (not :func:`_settled`) 1 ns back, access time
    kept; what ``lstat`` sees then, or ``None`` when a file system did not take it (or it failed).

    A later change is stamped no earlier than the stamp our write got (stamps come from a clock that
    only moves on, or from a floor above every stamp given), so it cannot fall on the time set here:
    the file's times then tell a later change as they do once the clock moved on. The file system
    may cut the time to its grain: still below the stamp, so still told apart.
    """
    fresh = [i for i, stat in enumerate(seen) if stat is not None and not _settled(stat.st_mtime_ns)]
    try:
        for i in fresh:
            stat = seen[i]
            assert stat is not None
            os.utime(names[i], ns=(stat.st_atime_ns, stat.st_mtime_ns - 1), follow_symlinks=False)
        after = _lstats(names)
    except OSError:
        logger.debug("could not set back the modification time of %s", names[0], exc_info=True)
        return None
    for i in fresh:
        before, now = seen[i], after[i]
        if now is None or before is None or S_ISLNK(now.st_mode) or now.st_ino != before.st_ino \
                or now.st_size != before.st_size or not now.st_mtime_ns < before.st_mtime_ns:
            return None
    return after


def _files(path: str) -> list[str]:
    """The database and its companions (:data:`_FILE_SUFFIXES`)."""
    return [path + suffix for suffix in _FILE_SUFFIXES]


def _lstats(names: list[str]) -> list[os.stat_result | None]:
    """``os.lstat`` (links not followed) of each name; ``None`` for one that is missing."""
    found: list[os.stat_result | None] = []
    for name in names:
        try:
            found.append(os.lstat(name))
        except FileNotFoundError:
            found.append(None)
    return found


def _first_link(folders: list[str], path: str, seen: list[os.stat_result | None]) -> Path | None:
    """The first of the folders and files (``seen`` by :func:`_lstats`) that is a symbolic link, else ``None``."""
    for name, stat in zip([*folders, *_files(path)], seen, strict=True):
        if stat is not None and S_ISLNK(stat.st_mode):
            return Path(name)
    return None


def _identity(seen: list[os.stat_result | None], folders: int) -> bytes:
    """What :func:`_lstats` saw of ``folders`` folders and then the files, packed (about 150 bytes a
    closed actor): each folder's inode, then each file's inode, size and modification time (0, -1, -1
    when missing)."""
    values: list[int] = [stat.st_ino if stat is not None else 0 for stat in seen[:folders]]
    for stat in seen[folders:]:
        values += (stat.st_ino, stat.st_size, stat.st_mtime_ns) if stat is not None else (0, -1, -1)
    packer = _PACKERS.get(folders)
    if packer is None:
        packer = _PACKERS[folders] = struct.Struct("<" + "Q" * folders + "Qqq" * len(_FILE_SUFFIXES))
    return packer.pack(*values)


#: :func:`_identity`'s packing, by the number of folders on the way (inodes unsigned, sizes and times signed).
_PACKERS: dict[int, struct.Struct] = {}


def _named(facts: ActorFacts, actor_id: ActorId) -> ActorFacts:
    """Facts with the name the host knows when the file has none (actors other than sessions)."""
    if facts.name is not None or actor_id.name is None:
        return facts
    return replace(facts, name=actor_id.name)
