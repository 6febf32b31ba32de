"""The host catalog: one small SQLite file describing every actor file of a data folder.

``<data_dir>/_catalog.sqlite3`` (:data:`CATALOG_FILE`) holds one row per
actor: its name (the session id, when known), generation, message and
compaction counts, when it was created and last written, and whether it is
quarantined. Two uses:

* **Damage detection.** The row's ``generation`` is the value the actor's
  file held when the host last closed it (:mod:`storage.integrity`). A
  file whose generation is lower went back in time; a file the catalog
  lists that is gone vanished. A quarantined actor keeps its row (state
  ``quarantined``, the problem, where its files went), so it stays refused
  after a restart.
* **Listing sessions** without opening their files.

The catalog is written lazily -- when an actor hibernates or closes after
writing, never per call -- so an append pays no second fsync. The times it
records are the actor's own: ``updated_ms`` is when its last write
committed (the host notes each commit's time in memory), not when it went
to sleep; a wake that only reads changes nothing. It may lag
behind the files (never ahead of them): a file without a row, or with an
older row, is normal after a crash; :meth:`HostCatalog.unlisted` finds the
files without a row so a rescan can add them.

The file climbs its own ``user_version`` ladder (:data:`CATALOG_MIGRATIONS`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import apsw

from .integrity import ActorFacts, actor_facts, open_for_inspection
from .backup import copy_database
from .schema import MESSAGES_TABLE, table_exists
from .sqlite import Durability, SqlStorage

__all__ = ["CATALOG_FILE", "CATALOG_MIGRATIONS", "CatalogEntry", "HostCatalog", "last_write_ms", "read_facts"]

#: File name of the catalog inside the host's data folder.
CATALOG_FILE = "_catalog.sqlite3"

_CATALOG_V1 = """
CREATE TABLE actors (
    namespace         TEXT NOT NULL,
    actor_id          TEXT NOT NULL,
    name              TEXT,
    generation        INTEGER NOT NULL DEFAULT 0,
    messages          INTEGER NOT NULL DEFAULT 0,
    compactions       INTEGER NOT NULL DEFAULT 0,
    compacted_through TEXT,
    created_ms        INTEGER NOT NULL,
    updated_ms        INTEGER NOT NULL,
    state             TEXT NOT NULL DEFAULT 'ok' CHECK (state IN ('ok', 'quarantined')),
    problem           TEXT,
    quarantined_to    TEXT,
    PRIMARY KEY (namespace, actor_id)
) WITHOUT ROWID;
CREATE INDEX actors_by_update ON actors (namespace, updated_ms);
"""

# v2: which agent class served each namespace last (``module.QualName``), so a host bound to another
# class over the same folder can say so at start.
# ... and ``unclosed``: set by :meth:`HostCatalog.mark_written` at an actor's first write after it woke
# (and after each checkpoint of its WAL), cleared when its close is recorded. A row with ``unclosed = 1``
# after a restart means the host stopped without closing the actor (a crash): its counts are stale.
_CATALOG_V2 = """
CREATE TABLE namespaces (
    namespace   TEXT PRIMARY KEY,
    agent_class TEXT NOT NULL,
    bound_ms    INTEGER NOT NULL
) WITHOUT ROWID;
ALTER TABLE actors ADD COLUMN unclosed INTEGER NOT NULL DEFAULT 0;
"""

#: The catalog's schema ladder: ``CATALOG_MIGRATIONS[i]`` takes version ``i`` to ``i + 1``.
CATALOG_MIGRATIONS = (_CATALOG_V1, _CATALOG_V2)

_COLUMNS = ("namespace, actor_id, name, generation, messages, compactions, compacted_through, created_ms, "
            "updated_ms, state, problem, quarantined_to, unclosed")
_GET = f"SELECT {_COLUMNS} FROM actors WHERE namespace = ? AND actor_id = ?"
_LIST = f"SELECT {_COLUMNS} FROM actors WHERE namespace = ? ORDER BY updated_ms DESC, actor_id"
_ALL = f"SELECT {_COLUMNS} FROM actors ORDER BY namespace, actor_id"
# One page of named entries, newest update first, strictly below the key (?2, ?3), names starting with ?4.
_PAGE = f"""
SELECT {_COLUMNS} FROM actors
WHERE namespace = ?1 AND name IS NOT NULL AND (updated_ms, actor_id) < (?2, ?3)
  AND (?4 IS NULL OR substr(name, 1, length(?4)) = ?4)
ORDER BY updated_ms DESC, actor_id DESC LIMIT ?5
"""
#: A key above every entry's ``(updated_ms, actor_id)`` (ids are lowercase hex).
_TOP = (1 << 62, "~")
_RECORD = """
INSERT INTO actors (namespace, actor_id, name, generation, messages, compactions, compacted_through,
                    created_ms, updated_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (namespace, actor_id) DO UPDATE SET
    name = coalesce(excluded.name, actors.name),
    generation = max(excluded.generation, actors.generation),
    messages = excluded.messages,
    compactions = excluded.compactions,
    compacted_through = excluded.compacted_through,
    updated_ms = max(excluded.updated_ms, actors.updated_ms),
    unclosed = 0
WHERE actors.state = 'ok'
"""
_MARK = """
INSERT INTO actors (namespace, actor_id, name, generation, created_ms, updated_ms, unclosed)
VALUES (?, ?, ?, ?, ?, ?, 1)
ON CONFLICT (namespace, actor_id) DO UPDATE SET
    name = coalesce(excluded.name, actors.name),
    generation = max(excluded.generation, actors.generation),
    unclosed = 1
WHERE actors.state = 'ok'
"""
_QUARANTINE = """
INSERT INTO actors (namespace, actor_id, name, created_ms, updated_ms, state, problem, quarantined_to)
VALUES (?, ?, ?, ?, ?, 'quarantined', ?, ?)
ON CONFLICT (namespace, actor_id) DO UPDATE SET
    name = coalesce(excluded.name, actors.name), updated_ms = excluded.updated_ms, state = 'quarantined',
    problem = excluded.problem, quarantined_to = excluded.quarantined_to
"""


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One actor as the catalog last saw it (times in epoch milliseconds).

    ``state`` is ``"ok"`` or ``"quarantined"``; a quarantined entry says
    the ``problem`` found and ``quarantined_to`` (the folder its files were
    moved to, relative to the data folder; ``None`` when nothing was left to move).
    ``unclosed``: the host marked the actor written and has not recorded its close since
    (after a restart: it crashed); the counts may be older than the file.
    """

    namespace: str
    actor_id: str
    name: str | None
    generation: int
    messages: int
    compactions: int
    compacted_through: str | None
    created_ms: int
    updated_ms: int
    state: str
    problem: str | None
    quarantined_to: str | None
    unclosed: bool = False

    @property
    def quarantined(self) -> bool:
        return self.state == "quarantined"


class HostCatalog:
    """The data folder's ``_catalog.sqlite3``. Open with :meth:`open`; each write commits at once."""

    def __init__(self, storage: SqlStorage, data_dir: Path) -> None:
        self._storage = storage
        self.data_dir = data_dir

    @classmethod
    def open(cls, data_dir: str | os.PathLike[str], *, durability: Durability = "normal") -> HostCatalog:
        """Open (creating if needed) the catalog of ``data_dir``.

        Raises:
            SchemaTooNewError: written by a newer release.
            apsw.Error: the file cannot be opened (held by another process, damaged).
        """
        path = Path(data_dir) / CATALOG_FILE
        storage = SqlStorage.open(path, durability=durability, migrations=CATALOG_MIGRATIONS)
        try:
            _scrub_once(storage)
        except BaseException:
            storage.close()
            raise
        return cls(storage, Path(data_dir))

    def close(self) -> None:
        """Close the file. Idempotent."""
        self._storage.close()

    def get(self, namespace: str, actor_id: str) -> CatalogEntry | None:
        """The actor's entry, or ``None`` when the catalog has never seen it."""
        for row in self._storage.exec(_GET, namespace, actor_id):
            return CatalogEntry(*row)
        return None

    def entries(self, namespace: str | None = None) -> list[CatalogEntry]:
        """Every entry (of one namespace: most recently updated first; else by namespace and id)."""
        rows = self._storage.exec(_LIST, namespace) if namespace is not None else self._storage.exec(_ALL)
        return [CatalogEntry(*row) for row in rows]

    def page(self, namespace: str, limit: int, *, below: tuple[int, str] | None = None,
             prefix: str | None = None) -> list[CatalogEntry]:
        """At most ``limit`` entries of ``namespace`` that have a name, most recently updated first
        (ties: actor id descending), whose key ``(updated_ms, actor_id)`` is below ``below`` (the
        last entry of the page before) and whose name starts with ``prefix``.

        One walk of the ``actors_by_update`` index from ``below`` on (a ``prefix``
        filters the entries it passes).
        """
        updated, actor = below if below is not None else _TOP
        return [CatalogEntry(*row) for row in self._storage.exec(_PAGE, namespace, updated, actor, prefix, limit)]

    def record(self, namespace: str, actor_id: str, facts: ActorFacts, *, written_ms: int | None = None,
               first_written_ms: int | None = None, wrote: bool = True) -> None:
        """Store what an actor file holds now (after it hibernated or closed, or a rescan read it).

        Args:
            written_ms: when the actor ``wrote``: the epoch milliseconds of its
                last commit (default: now); it becomes ``updated_ms``.
            first_written_ms: its first commit since it was opened; bounds
                ``created_ms`` of a new entry (with the oldest message's time).
            wrote: ``False`` for a rescan, which saw no commit: ``updated_ms``
                becomes the newest message's time.

        ``updated_ms`` never goes back; ``created_ms`` is set once, the
        earliest of the oldest message and the first commit known; the
        generation only ever rises. A quarantined entry is left as it is.
        """
        if wrote:
            updated = _now_ms() if written_ms is None else written_ms
            known: tuple[int | None, ...] = (facts.first_message_ms, first_written_ms, updated)
        else:
            updated = facts.last_message_ms or facts.first_message_ms or _now_ms()
            known = (facts.first_message_ms, updated)
        created = min(stamp for stamp in known if stamp is not None)
        self._storage.exec(
            _RECORD, namespace, actor_id, facts.name, facts.generation, facts.messages, facts.compactions,
            facts.compacted_through, created, updated,
        )

    def mark_written(self, namespace: str, actor_id: str, *, name: str | None, generation: int,
                     first_written_ms: int) -> None:
        """Note, before the actor's first write since it woke is acknowledged, that its file holds
        ``generation`` or more from now on (the file already does) and must exist.

        A crash then leaves a row whose generation a file that lost its WAL, or vanished, cannot
        match (:mod:`runtime.host.file_guard`). A new row gets no counts (``unclosed``: a rescan or
        the next close fills them in); an existing row keeps its counts and times.
        """
        self._storage.exec(_MARK, namespace, actor_id, name, generation, first_written_ms, first_written_ms)

    def quarantine(self, namespace: str, actor_id: str, *, name: str | None, problem: str,
                   moved_to: str | None, now_ms: int | None = None) -> None:
        """Mark the actor quarantined (creating its entry if needed)."""
        now = _now_ms() if now_ms is None else now_ms
        self._storage.exec(_QUARANTINE, namespace, actor_id, name, now, now, problem, moved_to)

    def forget(self, namespace: str, actor_id: str) -> bool:
        """Drop the actor's entry (an operator released it); ``True`` if it existed."""
        self._storage.exec("DELETE FROM actors WHERE namespace = ? AND actor_id = ?", namespace, actor_id)
        return self._storage.connection.changes() > 0

    def erase(self, namespace: str, actor_id: str) -> bool:
        """Drop the actor's entry so that none of its bytes remain in the catalog's files: the freed cell
        is zeroed (``secure_delete``, on since :meth:`open`) and the WAL, which held the old page, is checkpointed and cut to
        0 bytes. ``True`` if it existed."""
        found = self.forget(namespace, actor_id)
        self._storage.connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
        return found

    def backup_to(self, target: str | os.PathLike[str]) -> None:
        """Copy the catalog, consistent as of now, into the new file ``target`` (SQLite's online backup)."""
        copy_database(self._storage, target)

    def bound_class(self, namespace: str) -> str | None:
        """The agent class (``module.QualName``) that last served ``namespace`` from this folder, or ``None``."""
        value = self._storage.scalar("SELECT agent_class FROM namespaces WHERE namespace = ?", namespace)
        return None if value is None else str(value)

    def record_class(self, namespace: str, agent_class: str) -> None:
        """Note that ``agent_class`` (``module.QualName``) serves ``namespace`` from now on."""
        self._storage.exec(
            "INSERT INTO namespaces (namespace, agent_class, bound_ms) VALUES (?, ?, ?) "
            "ON CONFLICT (namespace) DO UPDATE SET agent_class = excluded.agent_class, bound_ms = excluded.bound_ms",
            namespace, agent_class, _now_ms())

    def unlisted(self, namespace: str) -> Iterator[str]:
        """Hex ids of the actor files of ``namespace`` on disk that have no entry, or an entry left
        ``unclosed`` by a crash (stale counts), in one folder scan."""
        known = {row[0] for row in self._storage.exec(
            "SELECT actor_id FROM actors WHERE namespace = ? AND unclosed = 0", namespace)}
        for hex_id in actor_files(self.data_dir, namespace):
            if hex_id not in known:
                yield hex_id


#: ``PRAGMA application_id`` of a catalog rebuilt once with ``secure_delete`` on (:func:`_scrub_once`).
SCRUBBED_ID = 0x44534331


def _scrub_once(storage: SqlStorage) -> None:
    """Turn ``secure_delete`` on (a deleted or rewritten row leaves no old bytes behind, for
    :meth:`HostCatalog.erase`), and rebuild a file written before that (``VACUUM``, once; marked
    by :data:`SCRUBBED_ID`) so old row versions left in free space go too."""
    storage.exec("PRAGMA secure_delete = ON")
    if storage.scalar("PRAGMA application_id") == SCRUBBED_ID:
        return
    storage.exec("VACUUM")
    storage.exec(f"PRAGMA application_id = {SCRUBBED_ID}")
    storage.connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)


def last_write_ms(storage: SqlStorage) -> int | None:
    """Epoch milliseconds at which the newest row of ``assistant_messages`` (by insertion) was stored,
    or ``None`` without messages: one row read, whatever the history length."""
    if not table_exists(storage.connection, MESSAGES_TABLE):
        return None  # made by the first message written (storage.schema.ON_FIRST_USE)
    stamp = storage.scalar("SELECT created_at FROM assistant_messages ORDER BY seq DESC LIMIT 1")
    if stamp is None:
        return None
    value = storage.scalar("SELECT CAST(round((julianday(?) - 2440587.5) * 86400000) AS INTEGER)", stamp)
    return None if value is None else int(value)


def read_facts(path: str | os.PathLike[str]) -> tuple[ActorFacts | None, str | None]:
    """The facts of an actor file no connection of this process holds: ``(facts, None)``;
    ``(None, None)`` when one holds it (its exclusive lock; its owner's close records it);
    ``(None, problem)`` when SQLite cannot read it. Reads only; changes nothing on disk."""
    try:
        storage = open_for_inspection(path)
    except apsw.BusyError:
        return None, None
    except apsw.Error as exc:
        return None, f"{type(exc).__name__}: {exc}"
    try:
        return actor_facts(storage), None
    except apsw.BusyError:
        return None, None
    except apsw.Error as exc:
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        storage.close()


def actor_files(data_dir: Path, namespace: str) -> Iterator[str]:
    """Hex ids of the actor files of ``namespace`` (``<data>/<namespace>/<hex[:2]>/<hex>.sqlite3``), sorted."""
    folder = Path(data_dir) / namespace
    if not folder.is_dir():
        return
    for shard in sorted(os.scandir(folder), key=lambda entry: entry.name):
        if not shard.is_dir():
            continue
        for entry in sorted(os.scandir(shard.path), key=lambda entry: entry.name):
            if entry.name.endswith(".sqlite3"):
                yield entry.name[: -len(".sqlite3")]


def _now_ms() -> int:
    return int(time.time() * 1000)
