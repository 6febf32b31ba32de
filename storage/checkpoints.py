"""LangGraph checkpoints of one thread, in that thread's actor file.

:class:`CheckpointFile` keeps what LangGraph's ``BaseCheckpointSaver`` stores
for one thread (``thread_id`` is the actor; the file holds no thread id):

* ``langgraph_checkpoints`` -- one row per ``(checkpoint_ns, checkpoint_id)``:
  the parent's id, the serialized checkpoint (``type`` + bytes, from the
  saver's serde: opaque here) and the metadata as JSON text (filtered on);
* ``langgraph_writes`` -- the pending writes of a checkpoint, one row per
  ``(checkpoint_ns, checkpoint_id, task_id, idx)``: the task's path, the
  channel and the serialized value.

Checkpoint ids are LangGraph's (uuid6: they sort in time order), so "newest"
is the largest id, as in ``langgraph-checkpoint-sqlite``. The tables are
created on first use (``CREATE TABLE IF NOT EXISTS``): they live only in the
files of checkpoint actors, outside the session schema ladder
(:mod:`storage.schema`).

A checkpoint row, as every read returns it, is a dict ``{"checkpoint_ns",
"checkpoint_id", "parent_checkpoint_id", "type", "checkpoint" (bytes),
"metadata" (JSON text), "writes": [[task_id, channel, type, value bytes],
...]}`` (writes ordered by task path, task id, index).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .sqlite import SqlStorage

__all__ = ["CheckpointFile"]

_TABLES = """
CREATE TABLE IF NOT EXISTS langgraph_checkpoints (
    checkpoint_ns        TEXT NOT NULL,
    checkpoint_id        TEXT NOT NULL,
    parent_checkpoint_id TEXT,
    type                 TEXT,
    checkpoint           BLOB,
    metadata             TEXT NOT NULL,
    PRIMARY KEY (checkpoint_ns, checkpoint_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS langgraph_writes (
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    task_id       TEXT NOT NULL,
    idx           INTEGER NOT NULL,
    task_path     TEXT NOT NULL DEFAULT '',
    channel       TEXT NOT NULL,
    type          TEXT,
    value         BLOB,
    PRIMARY KEY (checkpoint_ns, checkpoint_id, task_id, idx)
) WITHOUT ROWID;
"""

_COLUMNS = "checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata"
_WRITE_COLUMNS = "checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, value"


class CheckpointFile:
    """The checkpoints and pending writes of one LangGraph thread.

    Args:
        storage: the thread actor's open file (tables created here when missing).
    """

    def __init__(self, storage: SqlStorage) -> None:
        self.storage = storage
        with storage.transaction():
            storage.connection.execute(_TABLES)

    def put(self, checkpoint_ns: str, checkpoint_id: str, parent_checkpoint_id: str | None, type_: str | None,
            checkpoint: bytes, metadata: str) -> None:
        """Store (or replace) checkpoint ``checkpoint_id`` of namespace ``checkpoint_ns``."""
        self.storage.exec(
            f"INSERT OR REPLACE INTO langgraph_checkpoints ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
            checkpoint_ns, checkpoint_id, parent_checkpoint_id, type_, checkpoint, metadata,
        )

    def put_writes(self, checkpoint_ns: str, checkpoint_id: str, task_id: str, task_path: str,
                   writes: Sequence[Sequence[Any]], *, replace: bool) -> None:
        """Store ``writes`` (``[idx, channel, type, value]`` each) of task ``task_id``, in one transaction.

        ``replace``: a write at an index already stored replaces it (LangGraph's special channels,
        whose index is fixed); otherwise the first one stored stays.
        """
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        con = self.storage.connection
        with self.storage.transaction():
            for idx, channel, type_, value in writes:
                con.execute(f"{verb} INTO langgraph_writes ({_WRITE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            (checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type_, value))

    def get(self, checkpoint_ns: str, checkpoint_id: str | None) -> dict[str, Any] | None:
        """Checkpoint ``checkpoint_id`` of ``checkpoint_ns`` (``None``: the newest), or ``None``."""
        if checkpoint_id is None:
            rows = self.storage.exec(
                f"SELECT {_COLUMNS} FROM langgraph_checkpoints WHERE checkpoint_ns = ? "
                "ORDER BY checkpoint_id DESC LIMIT 1", checkpoint_ns)
        else:
            rows = self.storage.exec(
                f"SELECT {_COLUMNS} FROM langgraph_checkpoints WHERE checkpoint_ns = ? AND checkpoint_id = ?",
                checkpoint_ns, checkpoint_id)
        found = [self._row(row) for row in rows]
        return found[0] if found else None

    def list_checkpoints(self, checkpoint_ns: str | None, filter: Mapping[str, Any] | None = None, before: str | None = None,
             limit: int | None = None) -> list[dict[str, Any]]:
        """Checkpoints newest first: of ``checkpoint_ns`` (``None``: every namespace), older than
        ``before`` (an id), whose metadata has every key of ``filter`` with an equal value, at most ``limit``."""
        query = f"SELECT {_COLUMNS} FROM langgraph_checkpoints"
        clauses: list[str] = []
        params: list[Any] = []
        if checkpoint_ns is not None:
            clauses.append("checkpoint_ns = ?")
            params.append(checkpoint_ns)
        if before is not None:
            clauses.append("checkpoint_id < ?")
            params.append(before)
        if clauses:
            query += " WHERE " + " AND ".join(clauses)
        query += " ORDER BY checkpoint_id DESC"
        found: list[dict[str, Any]] = []
        if limit is not None and limit <= 0:
            return found
        for row in list(self.storage.exec(query, *params)):
            if filter and not _matches(json.loads(row[5]), filter):
                continue
            found.append(self._row(row))
            if limit is not None and len(found) >= limit:
                break
        return found

    def delete_all(self) -> int:
        """Delete every checkpoint and write of the thread; how many checkpoints there were."""
        with self.storage.transaction():
            count = int(self.storage.scalar("SELECT count(*) FROM langgraph_checkpoints"))
            self.storage.exec("DELETE FROM langgraph_writes")
            self.storage.exec("DELETE FROM langgraph_checkpoints")
        return count

    def export(self) -> dict[str, list[list[Any]]]:
        """Every row, for a copy: ``{"checkpoints": [[columns...]], "writes": [[columns...]]}``."""
        return {
            "checkpoints": [list(row) for row in self.storage.exec(f"SELECT {_COLUMNS} FROM langgraph_checkpoints")],
            "writes": [list(row) for row in self.storage.exec(f"SELECT {_WRITE_COLUMNS} FROM langgraph_writes")],
        }

    def load(self, rows: Mapping[str, Sequence[Sequence[Any]]]) -> None:
        """Store rows of :meth:`export` (replacing rows with the same keys), in one transaction."""
        con = self.storage.connection
        with self.storage.transaction():
            for row in rows.get("checkpoints", ()):
                con.execute(f"INSERT OR REPLACE INTO langgraph_checkpoints ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                            tuple(row))
            for row in rows.get("writes", ()):
                con.execute(
                    f"INSERT OR REPLACE INTO langgraph_writes ({_WRITE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    tuple(row))

    def keep_latest(self) -> int:
        """Delete every checkpoint but the newest of each namespace (and the writes of those deleted);
        how many were deleted."""
        with self.storage.transaction():
            keep = ("SELECT checkpoint_ns, max(checkpoint_id) FROM langgraph_checkpoints GROUP BY checkpoint_ns")
            count = int(self.storage.scalar(
                f"SELECT count(*) FROM langgraph_checkpoints WHERE (checkpoint_ns, checkpoint_id) NOT IN ({keep})"))
            self.storage.exec(f"DELETE FROM langgraph_writes WHERE (checkpoint_ns, checkpoint_id) NOT IN ({keep})")
            self.storage.exec(
                f"DELETE FROM langgraph_checkpoints WHERE (checkpoint_ns, checkpoint_id) NOT IN ({keep})")
        return count

    def _row(self, row: Sequence[Any]) -> dict[str, Any]:
        checkpoint_ns, checkpoint_id, parent_id, type_, checkpoint, metadata = row
        writes = self.storage.exec(
            "SELECT task_id, channel, type, value FROM langgraph_writes WHERE checkpoint_ns = ? AND checkpoint_id = ? "
            "ORDER BY task_path, task_id, idx", checkpoint_ns, checkpoint_id)
        return {"checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id, "parent_checkpoint_id": parent_id,
                "type": type_, "checkpoint": bytes(checkpoint) if checkpoint is not None else None,
                "metadata": metadata, "writes": [[t, c, ty, bytes(v) if v is not None else None]
                                                 for t, c, ty, v in writes]}


def _matches(metadata: Any, filter: Mapping[str, Any]) -> bool:
    return isinstance(metadata, dict) and all(key in metadata and metadata[key] == value
                                              for key, value in filter.items())
