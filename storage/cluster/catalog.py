"""Each actor's row of the cluster catalog (``ds_catalog``), kept exact at every cut.

A listing in a cluster must not replay logs or open files on other hosts,
so every log entry of an actor carries the actor's catalog row, written in
the entry's own fenced statement (:mod:`storage.cluster.statements`): the
row moves with the actor, is fenced by the epoch like its data, and costs
no extra round trip.

:class:`CatalogTracker` keeps the row's values in memory. It counts once at
activation (:func:`storage.integrity.actor_facts`, a few index reads) into a
one-row TEMP table of the actor's connection, which TEMP triggers on
``assistant_messages`` and ``assistant_compactions`` keep exact as rows come
and go (in C, in the writing transaction, rolled back with it; a TEMP
object is neither in the file, nor in its schema version, nor in any
changeset or snapshot). A cut that changed the file reads that row (one
read, outside any transaction, so it matches the changeset exactly); the
name is read until the file holds one. Nothing here is O(history) per
append, and nothing iterates the changeset (that cost about 30 us of host
CPU per append: benchmarks/bench_cluster_catalog.py).

``updated_ms`` is the wall-clock time of the newest cut that changed the
file (a write a caller made, as the single host's ``updatedAt``: the time of
its last commit); a cut without changes leaves the row alone.

A transcript actor publishes its own row (``project_key``, ``session_id``,
``mtime`` and the folded summary) through :meth:`CatalogTracker.publish`;
:meth:`CatalogTracker.forget` makes the next entry delete the row.
"""

from __future__ import annotations

import json
import time
from typing import Any

from storage.context import read_config
from storage.integrity import actor_facts
from storage.sqlite import SqlStorage

__all__ = ["KIND_SESSION", "KIND_TRANSCRIPT", "CatalogTracker"]

KIND_SESSION = "session"
KIND_TRANSCRIPT = "transcript"

#: Where a session agent keeps the name its actor is addressed by (see :mod:`storage.integrity`).
_NAME_KEY = "actor_name"
_COUNTS = "_ds_catalog_counts"
_NEWEST = "(SELECT to_message_id FROM main.assistant_compactions ORDER BY seq DESC LIMIT 1)"
_COUNTING = (
    f"CREATE TEMP TABLE IF NOT EXISTS {_COUNTS} (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "messages INTEGER NOT NULL, compactions INTEGER NOT NULL, through TEXT)",
    f"CREATE TEMP TRIGGER IF NOT EXISTS _ds_catalog_message_in AFTER INSERT ON main.assistant_messages "
    f"BEGIN UPDATE {_COUNTS} SET messages = messages + 1; END",
    f"CREATE TEMP TRIGGER IF NOT EXISTS _ds_catalog_message_out AFTER DELETE ON main.assistant_messages "
    f"BEGIN UPDATE {_COUNTS} SET messages = messages - 1; END",
    f"CREATE TEMP TRIGGER IF NOT EXISTS _ds_catalog_compaction_in AFTER INSERT ON main.assistant_compactions "
    f"BEGIN UPDATE {_COUNTS} SET compactions = compactions + 1, through = {_NEWEST}; END",
    f"CREATE TEMP TRIGGER IF NOT EXISTS _ds_catalog_compaction_out AFTER DELETE ON main.assistant_compactions "
    f"BEGIN UPDATE {_COUNTS} SET compactions = compactions - 1, through = {_NEWEST}; END",
)
_SEED = f"INSERT OR REPLACE INTO {_COUNTS} (id, messages, compactions, through) VALUES (1, ?, ?, ?)"
_READ = f"SELECT messages, compactions, through FROM {_COUNTS} WHERE id = 1"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class CatalogTracker:
    """The catalog row of one live actor (see the module docstring).

    Args:
        storage: the actor's open file (read at construction: counts and name; the TEMP
            counting table and triggers are made on its connection). Outside a transaction.
        namespace: the actor's namespace (a column of the row).
        clock_ms: wall clock in epoch milliseconds.

    Attributes:
        messages, compactions, compacted_through, name, created_ms, updated_ms:
            the row's values as of the newest cut.
    """

    def __init__(self, storage: SqlStorage, namespace: str, *, clock_ms: Any = _now_ms) -> None:
        self._storage = storage
        self.namespace = namespace
        self._clock_ms = clock_ms
        facts = actor_facts(storage)
        con = storage.connection
        for statement in _COUNTING:
            con.execute(statement)
        con.execute(_SEED, (facts.messages, facts.compactions, facts.compacted_through))
        self.name = facts.name
        self.messages = facts.messages
        self.compactions = facts.compactions
        self.compacted_through = facts.compacted_through
        self.created_ms = facts.first_message_ms
        self.last_message_ms = facts.last_message_ms
        self.updated_ms: int | None = None
        self._transcript: dict[str, Any] | None = None
        self._deleted = False
        self._dirty = False
        self._uncut = False  # published or forgotten since the last cut (a cut must carry it)

    def cut(self, changeset: bytes) -> None:
        """Follow one cut of the file's changes (``b""``: none, nothing moves)."""
        self._uncut = False
        if not changeset:
            return
        for messages, compactions, through in self._storage.connection.execute(_READ):
            self.messages, self.compactions, self.compacted_through = messages, compactions, through
        if self.name is None:
            self.name = read_config(self._storage, "", _NAME_KEY)
        now = self._clock_ms()
        self.updated_ms = max(now, self.updated_ms or 0)
        if self.created_ms is None:
            self.created_ms = now
        self._dirty = True

    def backfill(self) -> None:
        """The actor has writes but no row yet (written before the catalog existed): the next entry
        writes the row, dated by the newest message (it never moves an ``updated_ms`` back)."""
        self.updated_ms = self.last_message_ms or self.created_ms or self._clock_ms()
        self._dirty = self._uncut = True

    def publish(self, project_key: str, session_id: str, mtime_ms: int, summary: Any) -> None:
        """A transcript actor's row: its pair, its ``mtime`` (epoch ms) and folded summary (JSON-able)."""
        self._transcript = {"project_key": project_key, "session_id": session_id, "mtime_ms": mtime_ms,
                            "summary": json.dumps(summary, ensure_ascii=False, separators=(",", ":"))}
        self._deleted = False
        self._dirty = self._uncut = True

    def forget(self) -> None:
        """The next entry deletes the actor's row (a deleted transcript session)."""
        self._transcript = None
        self._deleted = True
        self._dirty = self._uncut = True

    @property
    def transcript(self) -> dict[str, Any] | None:
        """What :meth:`publish` stored last (``None``: nothing since activation, or forgotten)."""
        return self._transcript

    def take(self) -> str | None:
        """The row to write with the next entry, as JSON text (``{"delete": true}`` to delete it),
        or ``None`` when nothing changed since the last one taken."""
        if not self._dirty:
            return None
        self._dirty = False
        if self._deleted:
            return '{"delete": true}'
        row: dict[str, Any] = {
            "namespace": self.namespace, "kind": KIND_SESSION if self._transcript is None else KIND_TRANSCRIPT,
            "name": self.name, "messages": self.messages, "compactions": self.compactions,
            "compacted_through": self.compacted_through, "created_ms": self.created_ms or self.updated_ms or 0,
            "updated_ms": self.updated_ms or self._clock_ms(),
        }
        if self._transcript is not None:
            row.update(self._transcript)
        return json.dumps(row)  # the default encoder: the fast path of json

    @property
    def uncut(self) -> bool:
        """``True`` when :meth:`publish` or :meth:`forget` changed the row since the last :meth:`cut`:
        the log must cut (and ship an entry) even without changes to the file."""
        return self._uncut

