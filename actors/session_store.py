"""The message store a Session runs on (:class:`HistoryStore`) and the reads built on it.

:class:`HistoryStore` is everything :class:`actors.session.Session` and
:class:`actors.session_compaction.SessionCompaction` ask of the store of
one session's message tree -- nothing more. It comes in two colours:

* synchronous (:class:`HistoryStore`): :class:`storage.messages.MessageStore`,
  the SQLite store, answers on the actor's thread and no call can
  interleave mid-write (docs/performance.md);
* ``async`` (:class:`AsyncHistoryStore`, the same methods awaited):
  :class:`storage.postgres.PostgresSessionProvider`, which waits on the
  network; each of its writes is one transaction of its own.

The Session and its compaction always ``await`` the async colour:
:func:`as_async_store` hands a synchronous store over wrapped in
:class:`SyncStore`, whose methods call the synchronous ones and return
without ever suspending (one coroutine per call, a fraction of a
microsecond: ``benchmarks/bench_session.py``). So a SQLite write still runs
inside one synchronous call -- no ``await`` inside a SQLite transaction --
and nothing else of the actor can run between a write and its commit.

:mod:`storage.tree` gives the exact rules (chains, overlay ids, the
latest leaf, running totals); both real stores run those same operations,
so they offer the same methods with the same results. The reads also rely
on what each stored row knows of its place (path length, path bytes,
running token total, jump pointers: :mod:`storage.tree.places`): another
store must keep the same per-row totals or compute them, or
``estimate_tokens`` and the windowed reads stop being flat in the history
length.

The reads here (:func:`path_messages`, :func:`read_history`,
:func:`compaction_records`) turn stored text into the Session's results;
the Session and its compaction both use them.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .session_messages import apply_overlays, compaction_record, parse_all, parse_path

if TYPE_CHECKING:
    from storage.fts import ParsedQuery
    from typing_extensions import TypeIs

    from storage.tree.rows import CompactionRow, NewMessage, PathTokens, SearchRow

__all__ = [
    "AsyncHistoryStore",
    "HistoryStore",
    "SyncStore",
    "as_async_store",
    "compaction_records",
    "path_messages",
    "read_history",
    "sync_store",
]

Message = dict[str, Any]


class HistoryStore(Protocol):
    """The rows of one session: its message tree, compaction rows, latest leaf and search index.

    Message ids are unique per session; ``parent_id`` of the appends is a
    message id, ``None`` (a new root) or :data:`common.shapes.LATEST_LEAF`.
    """

    # -- reads --------------------------------------------------------------------

    def get(self, message_id: str) -> str | None:
        """The stored JSON of ``message_id``, or ``None``."""

    def latest_leaf(self) -> str | None:
        """The last message appended, else (deleted) the newest childless one; ``None`` when empty."""

    def path_json(self, leaf_id: str) -> tuple[str, int] | None:
        """The path root <- ``leaf_id`` as one JSON array text, leaf first, and its length;
        ``("[]", 0)`` for an unknown leaf; ``None`` when too big (then :meth:`path_contents`)."""

    def path_contents(self, leaf_id: str) -> list[str]:
        """Stored JSON root -> ``leaf_id`` (``[]`` if unknown)."""

    def path_chunks(self, leaf_id: str, *, max_bytes: int = ..., max_rows: int = ...) -> Iterator[list[Any]]:
        """Stored JSON ``leaf_id`` -> root in chunks of at most ``max_rows`` rows and ``max_bytes``
        bytes (a larger row alone), leaf first (rows as stored); each chunk read completely
        before it is yielded."""

    def path_stats(self, leaf_id: str) -> list[tuple[str, str, int]]:
        """Root -> ``leaf_id`` as ``(id, role, UTF-8 bytes of the JSON)``."""

    def path_ids(self, leaf_id: str) -> list[str]:
        """Ids root -> ``leaf_id`` (``[]`` if unknown)."""

    def place(self, message_id: str) -> tuple[int, int] | None:
        """``(rows on the path root -> it, their JSON bytes)``, or ``None`` if not stored."""

    def path_tokens(self, leaf_id: str) -> PathTokens | None:
        """The stored token total root -> ``leaf_id`` and the overlays that apply on that path."""

    def latest_path_tokens(self) -> PathTokens | None:
        """:meth:`path_tokens` of the latest leaf (``None`` when empty), in one call."""

    def depth_on_path(self, message_id: str, leaf_id: str) -> int | None:
        """The depth of ``message_id`` (the root's is 1) when it lies on the path root -> ``leaf_id``, else ``None``."""

    def window(self, leaf_id: str, max_bytes: int, min_rows: int) -> tuple[list[str], bool]:
        """The newest rows of the path that fit ``max_bytes`` (at least ``min_rows``), root-side
        first, and whether older rows were left out."""

    def children(self, message_id: str) -> list[str]:
        """Stored JSON of the children of ``message_id``, oldest first."""

    def compactions(self) -> list[CompactionRow]:
        """Every compaction row, oldest first."""

    def search(self, query: ParsedQuery, limit: int) -> list[SearchRow]:
        """The best ``limit`` matches of ``query``, best first."""

    # -- writes (each atomic) ----------------------------------------------------------

    def append(
        self,
        message_id: str,
        role: str,
        content: str,
        text: str,
        parent_id: Any,
        *,
        tokens: int = 0,
        tools: str = "",
    ) -> tuple[bool, str | None]:
        """Store one message and make it the latest leaf: ``(True, parent used)``, or
        ``(False, None)`` when the id is already stored."""

    def append_chain(self, messages: Sequence[NewMessage], parent_id: Any) -> list[tuple[bool, str | None]]:
        """Store ``messages`` as one chain, all or none; one ``(inserted, parent)`` per message."""

    def update(
        self, message_id: str, role: str, content: str, text: str, *, tokens: int = 0, tools: str = ""
    ) -> bool:
        """Replace a stored message (its place in the tree kept); ``False`` if not stored."""

    def delete(self, message_ids: Iterable[str]) -> list[str]:
        """Delete messages (children move up to the parent); the ids really deleted, in order."""

    def clear(self) -> None:
        """Delete every message, compaction and search row of the session (and, on Postgres, its active-leaf row)."""

    def add_compaction(self, compaction_id: str, summary: str, from_id: str, to_id: str) -> CompactionRow:
        """Store a compaction row; returns it as stored."""


class AsyncHistoryStore(Protocol):
    """:class:`HistoryStore` with every method ``async`` (same arguments, same results)."""

    async def get(self, message_id: str) -> str | None: ...
    async def latest_leaf(self) -> str | None: ...
    async def path_json(self, leaf_id: str) -> tuple[str, int] | None: ...
    async def path_contents(self, leaf_id: str) -> list[str]: ...
    def path_chunks(self, leaf_id: str, *, max_bytes: int = ..., max_rows: int = ...) -> AsyncGenerator[list[Any], None]: ...
    async def path_stats(self, leaf_id: str) -> list[tuple[str, str, int]]: ...
    async def path_ids(self, leaf_id: str) -> list[str]: ...
    async def place(self, message_id: str) -> tuple[int, int] | None: ...
    async def path_tokens(self, leaf_id: str) -> PathTokens | None: ...
    async def latest_path_tokens(self) -> PathTokens | None: ...
    async def depth_on_path(self, message_id: str, leaf_id: str) -> int | None: ...
    async def window(self, leaf_id: str, max_bytes: int, min_rows: int) -> tuple[list[str], bool]: ...
    async def children(self, message_id: str) -> list[str]: ...
    async def compactions(self) -> list[CompactionRow]: ...
    async def search(self, query: ParsedQuery, limit: int) -> list[SearchRow]: ...
    async def append(
        self, message_id: str, role: str, content: str, text: str, parent_id: Any, *, tokens: int = 0, tools: str = ""
    ) -> tuple[bool, str | None]: ...
    async def append_chain(self, messages: Sequence[NewMessage], parent_id: Any) -> list[tuple[bool, str | None]]: ...
    async def update(
        self, message_id: str, role: str, content: str, text: str, *, tokens: int = 0, tools: str = ""
    ) -> bool: ...
    async def delete(self, message_ids: Iterable[str]) -> list[str]: ...
    async def clear(self) -> None: ...
    async def add_compaction(self, compaction_id: str, summary: str, from_id: str, to_id: str) -> CompactionRow: ...


class SyncStore:
    """A synchronous :class:`HistoryStore` seen as an :class:`AsyncHistoryStore`.

    Each method calls the store's method and returns its result; none ever
    suspends, so awaiting one is a plain call (no checkpoint: no other task
    runs in between). :attr:`sync` is the wrapped store.
    """

    __slots__ = ("sync",)

    def __init__(self, store: HistoryStore) -> None:
        self.sync = store

    def __repr__(self) -> str:
        return f"SyncStore({self.sync!r})"

    async def get(self, message_id: str) -> str | None:
        return self.sync.get(message_id)

    async def latest_leaf(self) -> str | None:
        return self.sync.latest_leaf()

    async def path_json(self, leaf_id: str) -> tuple[str, int] | None:
        return self.sync.path_json(leaf_id)

    async def path_contents(self, leaf_id: str) -> list[str]:
        return self.sync.path_contents(leaf_id)

    async def path_chunks(self, leaf_id: str, **limits: int) -> AsyncGenerator[list[Any], None]:
        for chunk in self.sync.path_chunks(leaf_id, **limits):
            yield chunk

    async def path_stats(self, leaf_id: str) -> list[tuple[str, str, int]]:
        return self.sync.path_stats(leaf_id)

    async def path_ids(self, leaf_id: str) -> list[str]:
        return self.sync.path_ids(leaf_id)

    async def place(self, message_id: str) -> tuple[int, int] | None:
        return self.sync.place(message_id)

    async def path_tokens(self, leaf_id: str) -> PathTokens | None:
        return self.sync.path_tokens(leaf_id)

    async def latest_path_tokens(self) -> PathTokens | None:
        return self.sync.latest_path_tokens()

    async def depth_on_path(self, message_id: str, leaf_id: str) -> int | None:
        return self.sync.depth_on_path(message_id, leaf_id)

    async def window(self, leaf_id: str, max_bytes: int, min_rows: int) -> tuple[list[str], bool]:
        return self.sync.window(leaf_id, max_bytes, min_rows)

    async def children(self, message_id: str) -> list[str]:
        return self.sync.children(message_id)

    async def compactions(self) -> list[CompactionRow]:
        return self.sync.compactions()

    async def search(self, query: ParsedQuery, limit: int) -> list[SearchRow]:
        return self.sync.search(query, limit)

    async def append(
        self, message_id: str, role: str, content: str, text: str, parent_id: Any, *, tokens: int = 0, tools: str = ""
    ) -> tuple[bool, str | None]:
        return self.sync.append(message_id, role, content, text, parent_id, tokens=tokens, tools=tools)

    async def append_chain(self, messages: Sequence[NewMessage], parent_id: Any) -> list[tuple[bool, str | None]]:
        return self.sync.append_chain(messages, parent_id)

    async def update(
        self, message_id: str, role: str, content: str, text: str, *, tokens: int = 0, tools: str = ""
    ) -> bool:
        return self.sync.update(message_id, role, content, text, tokens=tokens, tools=tools)

    async def delete(self, message_ids: Iterable[str]) -> list[str]:
        return self.sync.delete(message_ids)

    async def clear(self) -> None:
        self.sync.clear()

    async def add_compaction(self, compaction_id: str, summary: str, from_id: str, to_id: str) -> CompactionRow:
        return self.sync.add_compaction(compaction_id, summary, from_id, to_id)


def as_async_store(store: HistoryStore | AsyncHistoryStore) -> AsyncHistoryStore:
    """``store`` itself when its methods are ``async``, else ``store`` wrapped in :class:`SyncStore`."""
    if _is_async(store):
        return store
    return SyncStore(store)


def _is_async(store: HistoryStore | AsyncHistoryStore) -> TypeIs[AsyncHistoryStore]:
    """Whether ``store``'s methods are ``async`` (a :class:`SyncStore`, or ``get`` is a coroutine function)."""
    return isinstance(store, SyncStore) or inspect.iscoroutinefunction(getattr(store, "get", None))


def sync_store(store: AsyncHistoryStore) -> HistoryStore | None:
    """The synchronous store behind ``store`` (a :class:`SyncStore`), else ``None``."""
    return store.sync if isinstance(store, SyncStore) else None


# -- reads built on the store ---------------------------------------------------------------


async def path_messages(store: AsyncHistoryStore, leaf: str) -> list[Message]:
    """The stored messages root -> ``leaf``, parsed (rows that are not messages skipped, docs/behaviours.md §2).

    The path comes as one JSON array parsed once; only when that fails (too
    big for one SQLite string, or text SQLite and Python read differently)
    is it read and parsed row by row.
    """
    found = await store.path_json(leaf)
    messages = None if found is None else parse_path(*found)
    return parse_all(await store.path_contents(leaf)) if messages is None else messages


async def read_history(store: AsyncHistoryStore, leaf: str | None) -> list[Message]:
    """The path root -> ``leaf`` with compaction overlays applied; ``[]`` for ``None`` or an unknown leaf."""
    if leaf is None:
        return []
    messages = await path_messages(store, leaf)
    return apply_overlays(messages, await store.compactions()) if messages else messages


async def compaction_records(store: AsyncHistoryStore) -> list[dict[str, str]]:
    """Every compaction record ``{id, summary, fromMessageId, toMessageId, createdAt}``, oldest first."""
    return [compaction_record(row) for row in await store.compactions()]
