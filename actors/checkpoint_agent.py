"""The LangGraph thread actor: one LangGraph thread's checkpoints per actor.

:class:`CheckpointAgent` hosts a :class:`storage.checkpoints.CheckpointFile`
on its actor file. The runtime routes each ``thread_id`` to its own actor
(``namespace.get_by_name(thread_id)``), so a thread gets what every actor
gets: one activation at a time, hibernation when idle, failover in a
cluster, the inspector. Its savers -- :class:`runtime.checkpointer.EmbeddedCheckpointer`
in process, :class:`runtime.client.DurableCheckpointer` over HTTP -- serialize
checkpoints and writes with LangGraph's serde before they reach it: to the
actor they are ``(type, bytes)`` pairs, and metadata is JSON text it filters on.

Methods are plain functions (storage is synchronous): each call is one turn,
all or nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from common.errors import InvalidInputError
from storage.checkpoints import CheckpointFile

from .agent import Agent, AgentContext

__all__ = ["CheckpointAgent", "PRUNE_STRATEGIES"]

#: What :meth:`CheckpointAgent.prune` accepts (LangGraph's ``prune`` strategies).
PRUNE_STRATEGIES = ("keep_latest", "delete")


class CheckpointAgent(Agent):
    """The checkpoints and pending writes of one LangGraph thread (contract: :mod:`storage.checkpoints`).

    Every method raises :class:`~common.errors.InvalidInputError` (HTTP 400) for an argument of the
    wrong type, naming it in ``field``.
    """

    def __init__(self, ctx: AgentContext, env: Any = None) -> None:
        super().__init__(ctx, env)
        self.file = CheckpointFile(self.storage)

    def put(self, checkpoint_ns: str, checkpoint_id: str, parent_checkpoint_id: str | None, type: str | None,
            checkpoint: bytes, metadata: str) -> None:
        """Store checkpoint ``checkpoint_id`` of namespace ``checkpoint_ns`` (replacing one with that id)."""
        _text(checkpoint_ns, "checkpoint_ns")
        _text(checkpoint_id, "checkpoint_id", empty=False)
        _text(parent_checkpoint_id, "parent_checkpoint_id", none=True)
        _text(type, "type", none=True)
        _text(metadata, "metadata")
        if not isinstance(checkpoint, bytes):
            raise InvalidInputError("checkpoint must be bytes (send msgpack)", field="checkpoint")
        self.file.put(checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata)

    def put_writes(self, checkpoint_ns: str, checkpoint_id: str, task_id: str, task_path: str,
                   writes: Sequence[Sequence[Any]], replace: bool = False) -> None:
        """Store the pending ``writes`` (``[idx, channel, type, value bytes]`` each) of task ``task_id``."""
        _text(checkpoint_ns, "checkpoint_ns")
        _text(checkpoint_id, "checkpoint_id", empty=False)
        _text(task_id, "task_id")
        _text(task_path, "task_path")
        if not isinstance(writes, (list, tuple)) or not all(
                isinstance(w, (list, tuple)) and len(w) == 4 and isinstance(w[0], int) and isinstance(w[1], str)
                for w in writes):
            raise InvalidInputError("writes must be a list of [idx, channel, type, value]", field="writes")
        self.file.put_writes(checkpoint_ns, checkpoint_id, task_id, task_path, writes, replace=bool(replace))

    def get_tuple(self, checkpoint_ns: str, checkpoint_id: str | None = None) -> dict[str, Any] | None:
        """Checkpoint ``checkpoint_id`` (``None``: the newest of ``checkpoint_ns``) with its writes, or ``None``."""
        _text(checkpoint_ns, "checkpoint_ns")
        _text(checkpoint_id, "checkpoint_id", none=True)
        return self.file.get(checkpoint_ns, checkpoint_id)

    def list_checkpoints(self, checkpoint_ns: str | None = None, filter: Mapping[str, Any] | None = None,
                         before: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Checkpoints newest first (see :meth:`storage.checkpoints.CheckpointFile.list`)."""
        _text(checkpoint_ns, "checkpoint_ns", none=True)
        _text(before, "before", none=True)
        if filter is not None and not isinstance(filter, Mapping):
            raise InvalidInputError("filter must be an object", field="filter")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
            raise InvalidInputError("limit must be an integer", field="limit")
        return self.file.list_checkpoints(checkpoint_ns, filter, before, limit)

    def delete_thread(self) -> int:
        """Delete every checkpoint and write of the thread; how many checkpoints there were."""
        return self.file.delete_all()

    def export(self) -> dict[str, list[list[Any]]]:
        """Every row of the thread (for ``copy_thread``)."""
        return self.file.export()

    def load(self, rows: Mapping[str, Sequence[Sequence[Any]]]) -> None:
        """Store rows another thread exported (its copy)."""
        if not isinstance(rows, Mapping):
            raise InvalidInputError("rows must be an object {checkpoints, writes}", field="rows")
        self.file.load(rows)

    def prune(self, strategy: str = "keep_latest") -> int:
        """``"keep_latest"``: keep only the newest checkpoint of each namespace; ``"delete"``: delete all.
        Returns how many checkpoints were deleted."""
        if strategy not in PRUNE_STRATEGIES:
            raise InvalidInputError(f"strategy must be one of {', '.join(PRUNE_STRATEGIES)}", field="strategy")
        return self.file.keep_latest() if strategy == "keep_latest" else self.file.delete_all()


def _text(value: Any, field: str, *, none: bool = False, empty: bool = True) -> None:
    if value is None and none:
        return
    if not isinstance(value, str) or (not empty and not value):
        raise InvalidInputError(f"{field} must be a {'non-empty ' if not empty else ''}string", field=field)
