"""Each actor's row of the cluster catalog (``ds_catalog``), kept exact at every cut.

A listing in a cluster must not replay logs or open files on other hosts,
so every log entry of an actor carries the actor's catalog row, written in
the entry's own fenced statement (:mod:`storage.cluster.statements`): the
row moves with the actor, is fenced by the epoch like its data, and costs
no extra round trip.

:class:`CatalogTracker` keeps the row's values in memory. It counts once at
activation (:func:`storage.integrity.actor_facts`, a few index reads), then
follows every cut's changeset (``apsw.Changeset.iter``: table, operation,
row): inserts and deletes of ``assistant_messages`` and
``assistant_compactions`` move the counts; a change to the compactions
re-reads the newest one's ``to_message_id`` (one index read); the name is
read until the file holds one. Nothing here is O(history) per append.

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

import apsw

from storage.context import read_config
from storage.integrity import actor_facts
from storage.sqlite import SqlStorage

__all__ = ["KIND_SESSION", "KIND_TRANSCRIPT", "CatalogTracker"]

KIND_SESSION = "session"
KIND_TRANSCRIPT = "transcript"

#: Where a session agent keeps the name its actor is addressed by (see :mod:`storage.integrity`).
_NAME_KEY = "actor_name"
_MESSAGES = "assistant_messages"
_COMPACTIONS = "assistant_compactions"
_NEWEST_COMPACTION = "SELECT to_message_id FROM assistant_compactions ORDER BY seq DESC LIMIT 1"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class CatalogTracker:
    """The catalog row of one live actor (see the module docstring).

    Args:
        storage: the actor's open file (read at construction: counts and name).
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
        self.name = facts.name
        self.messages = facts.messages
        self.compactions = facts.compactions
        self.compacted_through = facts.compacted_through
        self.created_ms = facts.first_message_ms
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
        compactions_changed = False
        for change in apsw.Changeset.iter(changeset):
            table = change.name
            if table == _MESSAGES:
                self.messages += _delta(change.opcode)
            elif table == _COMPACTIONS:
                self.compactions += _delta(change.opcode)
                compactions_changed = True
        if compactions_changed:
            self.compacted_through = self._storage.scalar(_NEWEST_COMPACTION) if self.compactions else None
        if self.name is None:
            self.name = read_config(self._storage, "", _NAME_KEY)
        now = self._clock_ms()
        self.updated_ms = max(now, self.updated_ms or 0)
        if self.created_ms is None:
            self.created_ms = now
        self._dirty = True

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
            return '{"delete":true}'
        row: dict[str, Any] = {
            "namespace": self.namespace, "kind": KIND_SESSION if self._transcript is None else KIND_TRANSCRIPT,
            "name": self.name, "messages": self.messages, "compactions": self.compactions,
            "compacted_through": self.compacted_through, "created_ms": self.created_ms or self.updated_ms or 0,
            "updated_ms": self.updated_ms or self._clock_ms(),
        }
        if self._transcript is not None:
            row.update(self._transcript)
        return json.dumps(row, ensure_ascii=False, separators=(",", ":"))

    @property
    def uncut(self) -> bool:
        """``True`` when :meth:`publish` or :meth:`forget` changed the row since the last :meth:`cut`:
        the log must cut (and ship an entry) even without changes to the file."""
        return self._uncut


def _delta(opcode: int) -> int:
    if opcode == apsw.SQLITE_INSERT:
        return 1
    if opcode == apsw.SQLITE_DELETE:
        return -1
    return 0
