"""LangGraph checkpointers whose threads are actors of a host (extra ``langgraph``).

Each LangGraph ``thread_id`` is one :class:`actors.checkpoint_agent.CheckpointAgent`
of the host's ``"checkpoints"`` namespace: one activation at a time,
hibernation when idle, failover in a cluster, visible in the inspector. Two
savers implement LangGraph's ``BaseCheckpointSaver`` (sync and async methods)
on the same actor calls:

* :class:`EmbeddedCheckpointer` -- the host in this process
  (``EmbeddedCheckpointer(host)`` binds the namespace when missing; a
  :class:`runtime.testing_asyncio.ThreadedHost` works too);
* :class:`runtime.client.DurableCheckpointer` -- a running ``durable-sessions serve`` over HTTP.

:class:`ActorCheckpointer` holds what both share: the saver serializes with
its ``serde`` (checkpoint and write values become ``(type, bytes)``; metadata
is JSON text, which ``list(filter=...)`` matches key by key), and turns the
actor's rows back into ``CheckpointTuple``\\ s. Capabilities: put, put_writes,
get_tuple, list, delete_thread, copy_thread and prune. ``delete_for_runs`` is
not offered: finding a run's checkpoints means asking every thread (no
index spans actors), and ``list`` needs a ``thread_id`` for the same reason
(``ValueError`` without one).

Without LangGraph installed, importing this module raises :class:`ImportError`
with one line naming the extra: ``pip install 'durable-sessions[langgraph]'``.
"""

from __future__ import annotations

import concurrent.futures
import json
import random
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_serializable_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # pragma: no cover - exercised in a fresh interpreter by the tests
    raise ImportError("LangGraph checkpointers need the langgraph extra: "
                      "pip install 'durable-sessions[langgraph]'") from exc

if TYPE_CHECKING:
    from runtime.host.actor_host import ActorHost

__all__ = ["CHECKPOINTS_NAMESPACE", "ActorCheckpointer", "EmbeddedCheckpointer"]

#: The namespace of the thread actors.
CHECKPOINTS_NAMESPACE = "checkpoints"


class ActorCheckpointer(BaseCheckpointSaver[str]):
    """The LangGraph side of a thread actor; subclasses say how a call reaches it.

    Subclasses implement :meth:`_acall` (``await`` one actor method) and
    :meth:`_call` (the same, blocking the calling thread).
    """

    async def _acall(self, thread_id: str, method: str, /, *args: Any) -> Any:
        raise NotImplementedError

    def _call(self, thread_id: str, method: str, /, *args: Any) -> Any:
        raise NotImplementedError

    # -- what goes to the actor ------------------------------------------------------------

    def _put_args(self, config: RunnableConfig, checkpoint: Checkpoint,
                  metadata: CheckpointMetadata) -> tuple[str, tuple[Any, ...], RunnableConfig]:
        configurable = config["configurable"]
        thread_id = _thread_id(config)
        checkpoint_ns = configurable.get("checkpoint_ns", "")
        type_, blob = self.serde.dumps_typed(checkpoint)
        meta = json.dumps(get_serializable_checkpoint_metadata(config, metadata), ensure_ascii=False)
        args = (checkpoint_ns, checkpoint["id"], configurable.get("checkpoint_id"), type_, blob, meta)
        saved: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns,
                                                  "checkpoint_id": checkpoint["id"]}}
        return thread_id, args, saved

    def _writes_args(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                     task_path: str) -> tuple[str, tuple[Any, ...]]:
        configurable = config["configurable"]
        rows = [[WRITES_IDX_MAP.get(channel, idx), channel, *self.serde.dumps_typed(value)]
                for idx, (channel, value) in enumerate(writes)]
        replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        return _thread_id(config), (configurable.get("checkpoint_ns", ""), str(configurable["checkpoint_id"]),
                                    task_id, task_path, rows, replace)

    @staticmethod
    def _list_args(config: RunnableConfig | None, filter: dict[str, Any] | None, before: RunnableConfig | None,
                   limit: int | None) -> tuple[str, tuple[Any, ...]]:
        if config is None or not config.get("configurable", {}).get("thread_id"):
            raise ValueError("list needs a config with a thread_id: each thread is its own actor, "
                             "so there is no listing across threads")
        checkpoint_ns = config["configurable"].get("checkpoint_ns")
        before_id = get_checkpoint_id(before) if before else None
        return _thread_id(config), (checkpoint_ns, filter or None, before_id, limit)

    # -- what comes back --------------------------------------------------------------------

    def _tuple(self, thread_id: str, row: Mapping[str, Any] | None) -> CheckpointTuple | None:
        if row is None:
            return None
        checkpoint_ns = row["checkpoint_ns"]
        parent = row["parent_checkpoint_id"]
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns,
                                     "checkpoint_id": row["checkpoint_id"]}},
            checkpoint=self.serde.loads_typed((row["type"], row["checkpoint"])),
            metadata=json.loads(row["metadata"]),
            parent_config={"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns,
                                            "checkpoint_id": parent}} if parent else None,
            pending_writes=[(task_id, channel, self.serde.loads_typed((type_, value)))
                            for task_id, channel, type_, value in row["writes"]],
        )

    # -- BaseCheckpointSaver, async -------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id = _thread_id(config)
        row = await self._acall(thread_id, "get_tuple", config["configurable"].get("checkpoint_ns", ""),
                                get_checkpoint_id(config))
        return self._tuple(thread_id, row)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        thread_id, args = self._list_args(config, filter, before, limit)
        for row in await self._acall(thread_id, "list_checkpoints", *args):
            found = self._tuple(thread_id, row)
            assert found is not None
            yield found

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        thread_id, args, saved = self._put_args(config, checkpoint, metadata)
        await self._acall(thread_id, "put", *args)
        return saved

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        thread_id, args = self._writes_args(config, writes, task_id, task_path)
        await self._acall(thread_id, "put_writes", *args)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._acall(str(thread_id), "delete_thread")

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        rows = await self._acall(str(source_thread_id), "export")
        await self._acall(str(target_thread_id), "load", rows)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        for thread_id in thread_ids:
            await self._acall(str(thread_id), "prune", strategy)

    # -- BaseCheckpointSaver, sync ----------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id = _thread_id(config)
        row = self._call(thread_id, "get_tuple", config["configurable"].get("checkpoint_ns", ""),
                         get_checkpoint_id(config))
        return self._tuple(thread_id, row)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        thread_id, args = self._list_args(config, filter, before, limit)
        for row in self._call(thread_id, "list_checkpoints", *args):
            found = self._tuple(thread_id, row)
            assert found is not None
            yield found

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        thread_id, args, saved = self._put_args(config, checkpoint, metadata)
        self._call(thread_id, "put", *args)
        return saved

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        thread_id, args = self._writes_args(config, writes, task_id, task_path)
        self._call(thread_id, "put_writes", *args)

    def delete_thread(self, thread_id: str) -> None:
        self._call(str(thread_id), "delete_thread")

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._call(str(target_thread_id), "load", self._call(str(source_thread_id), "export"))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        for thread_id in thread_ids:
            self._call(str(thread_id), "prune", strategy)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Monotonic string versions, as ``langgraph-checkpoint-sqlite``'s (``<counter>.<random>``)."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"


class EmbeddedCheckpointer(ActorCheckpointer):
    """LangGraph threads as actors of a host in this process.

    Args:
        host: an :class:`~runtime.host.actor_host.ActorHost` (async methods from its trio loop;
            sync methods from any other thread of the process, e.g. ``trio.to_thread``), or a
            :class:`runtime.testing_asyncio.ThreadedHost` (asyncio, trio or plain threads).
            The ``"checkpoints"`` namespace is bound when missing.
        serde: LangGraph's serializer (default: its ``JsonPlusSerializer``).

    Raises:
        RuntimeError: a sync method called from the host's own trio thread (it would block the
            loop the call needs): use the async methods there.
    """

    def __init__(self, host: ActorHost | Any, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        from actors.checkpoint_agent import CheckpointAgent

        self.host = host
        self.namespace = (host.namespace(CHECKPOINTS_NAMESPACE) if CHECKPOINTS_NAMESPACE in _bound(host)
                          else host.bind(CHECKPOINTS_NAMESPACE, CheckpointAgent))
        import trio

        self._actor_host: Any = getattr(host, "host", host)  # a ThreadedHost runs one (its .host)
        if hasattr(host, "call_in_host"):  # a runtime.testing_asyncio.ThreadedHost: its loop runs in its thread
            with concurrent.futures.ThreadPoolExecutor(1) as helper:  # free of whatever loop the caller runs
                self._token = helper.submit(anyio.run, host.call_in_host, trio.lowlevel.current_trio_token).result()
            self._loop_thread: int | None = None
        else:
            self._token = trio.lowlevel.current_trio_token()
            self._loop_thread = threading.get_ident()

    async def _acall(self, thread_id: str, method: str, /, *args: Any) -> Any:
        return await self.namespace.get_by_name(thread_id).call(method, *args)

    def _call(self, thread_id: str, method: str, /, *args: Any) -> Any:
        if threading.get_ident() == self._loop_thread:
            raise RuntimeError("a sync checkpointer method was called on the host's own trio thread, which it "
                               "would block: use the async methods (graph.ainvoke), or call from another thread")
        import trio

        stub = self._actor_host.namespace(CHECKPOINTS_NAMESPACE).get_by_name(thread_id)
        return trio.from_thread.run(stub.call, method, *args, trio_token=self._token)


def _bound(host: Any) -> Any:
    namespaces = getattr(host, "namespaces", None)
    if namespaces is None:  # a ThreadedHost: ask its host
        namespaces = host.host.namespaces
    return namespaces


def _thread_id(config: RunnableConfig) -> str:
    try:
        thread_id = config["configurable"]["thread_id"]
    except (KeyError, TypeError):
        raise ValueError("the config has no configurable.thread_id") from None
    if thread_id is None or str(thread_id) == "":
        raise ValueError("thread_id must be a non-empty string")
    return str(thread_id)
