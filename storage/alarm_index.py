"""The host's alarm index: one SQLite file saying which actor has an alarm, and when.

Each actor keeps its one alarm in its own file (``_cf_alarm``, see
:class:`storage.kv.ActorStorage`). So a host need not open every actor file
when it starts, it also keeps ``<data_dir>/_alarms.sqlite3`` (:data:`INDEX_FILE`):
one row ``(namespace, actor_id, scheduled_ms)`` per actor with an alarm,
``scheduled_ms`` in epoch milliseconds. The actor's row is the truth; the
index may hold more, never less (the rules that keep it so, and the
scheduling, live in :mod:`runtime.host.alarms`).

The file climbs its own ``user_version`` ladder (:data:`INDEX_MIGRATIONS`,
version 1 today); steps are only appended, so files written by any earlier
release still open.
"""

from __future__ import annotations

import os
from collections.abc import Collection

from .backup import copy_database
from .kv import ActorStorage
from .sqlite import Durability, SqlStorage

__all__ = ["INDEX_FILE", "INDEX_MIGRATIONS", "AlarmIndex"]

#: File name of the index inside the host's data folder.
INDEX_FILE = "_alarms.sqlite3"

_INDEX_V1 = """
CREATE TABLE alarms (
    namespace    TEXT NOT NULL,
    actor_id     TEXT NOT NULL,
    scheduled_ms INTEGER NOT NULL,
    PRIMARY KEY (namespace, actor_id)
) WITHOUT ROWID;
CREATE INDEX alarms_by_time ON alarms (scheduled_ms);
"""

#: The index file's schema ladder: ``INDEX_MIGRATIONS[i]`` takes version ``i`` to ``i + 1``.
INDEX_MIGRATIONS = (_INDEX_V1,)

_UPSERT = "INSERT OR REPLACE INTO alarms (namespace, actor_id, scheduled_ms) VALUES (?, ?, ?)"
_REMOVE = "DELETE FROM alarms WHERE namespace = ? AND actor_id = ?"
_GET = "SELECT scheduled_ms FROM alarms WHERE namespace = ? AND actor_id = ?"
# {marks}: one "?" per namespace.
_EARLIEST = (
    "SELECT namespace, actor_id, scheduled_ms FROM alarms WHERE namespace IN ({marks})"
    " ORDER BY scheduled_ms LIMIT 1"
)
_ALL = "SELECT namespace, actor_id, scheduled_ms FROM alarms ORDER BY namespace, actor_id"


class AlarmIndex:
    """The host's ``_alarms.sqlite3``: which actor has an alarm, and when.

    Open with :meth:`open`; every write commits at once (no transaction is
    held open).
    """

    def __init__(self, storage: SqlStorage) -> None:
        self._storage = storage

    @classmethod
    def open(cls, data_dir: str | os.PathLike[str], *, durability: Durability = "normal") -> AlarmIndex:
        """Open (creating if needed) the index file in ``data_dir``.

        Raises:
            ValueError: ``durability`` is not ``"normal"`` or ``"full"``.
            SchemaTooNewError: the file was written by a newer release.
            apsw.Error: the file cannot be opened or is not a database.
        """
        path = os.path.join(os.fspath(data_dir), INDEX_FILE)
        return cls(SqlStorage.open(path, durability=durability, migrations=INDEX_MIGRATIONS))

    def close(self) -> None:
        """Close the file. Idempotent."""
        self._storage.close()

    def upsert(self, namespace: str, actor_id: str, scheduled_ms: int) -> None:
        """Index (or move) the alarm of one actor at ``scheduled_ms`` (epoch ms)."""
        self._storage.exec(_UPSERT, namespace, actor_id, scheduled_ms)

    def remove(self, namespace: str, actor_id: str) -> None:
        """Drop the actor's row (no-op when it has none)."""
        self._storage.exec(_REMOVE, namespace, actor_id)

    def get(self, namespace: str, actor_id: str) -> int | None:
        """The indexed time (epoch ms) for one actor, or ``None``."""
        return self._storage.scalar(_GET, namespace, actor_id)

    def earliest(self, namespaces: Collection[str]) -> tuple[str, str, int] | None:
        """``(namespace, actor_id, scheduled_ms)`` of the next alarm among ``namespaces``, or ``None``."""
        if not namespaces:
            return None
        for row in self._storage.exec(_EARLIEST.format(marks=", ".join("?" * len(namespaces))), *namespaces):
            return row
        return None

    def entries(self) -> list[tuple[str, str, int]]:
        """Every row ``(namespace, actor_id, scheduled_ms)``, by namespace then actor id."""
        return list(self._storage.exec(_ALL))

    def backup_to(self, target: str | os.PathLike[str]) -> None:
        """Copy the index, consistent as of now, into the new file ``target`` (SQLite's online backup)."""
        copy_database(self._storage, target)

    def sync(self, namespace: str, actor_id: str, storage: ActorStorage) -> None:
        """Copy the actor's committed alarm row to the index.

        No alarm row: the index row goes. While the stored alarm is being
        delivered (``storage.delivering_alarm`` equals its generation) the
        index row is left alone, so the delivery's lease stays in place.
        """
        row = storage.read_alarm_row()
        if row is None:
            self.remove(namespace, actor_id)
        elif storage.delivering_alarm != storage.alarm_generation:
            self.upsert(namespace, actor_id, row.scheduled_ms)
