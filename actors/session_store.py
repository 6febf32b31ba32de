"""The message store a Session runs on (:class:`HistoryStore`) and the reads built on it.

:class:`HistoryStore` is everything :class:`actors.session.Session` and
:class:`actors.session_compaction.SessionCompaction` ask of the store of
one session's message tree -- nothing more: a second implementation (the
Postgres provider of a later issue) plugs in by providing these methods
(``Session(storage, store=...)``). :class:`storage.messages.MessageStore`
is the SQLite one; its docstrings give the exact rules (chains, overlay
ids, the active leaf, running totals), which every implementation keeps.

The store speaks stored text (message JSON, indexed text) and never parses
or validates; the Session does that. Each write is atomic: all of it or
nothing. Methods are synchronous: the SQLite store answers on the actor's
thread and no call can interleave mid-write (docs/performance.md). A store
that waits on the network cannot keep that promise; it needs an ``async``
twin of this protocol that the Session awaits, with each write one
transaction of its own. The reads also rely on what each stored row knows
of its place (path length, path bytes, running token total, see
:mod:`storage.messages`): another store must keep the same per-row totals
or compute them, or ``estimate_tokens`` and the windowed reads stop being
flat in the history length.

The reads here (:func:`path_messages`, :func:`read_history`,
:func:`compaction_records`) turn stored text into the Session's results;
the Session and its compaction both use them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .session_messages import apply_overlays, compaction_record, parse_all, parse_path

if TYPE_CHECKING:
    from storage.fts import ParsedQuery
    from storage.messages import CompactionRow, NewMessage, PathTokens, SearchRow

__all__ = ["HistoryStore", "compaction_records", "path_messages", "read_history"]

Message = dict[str, Any]


class HistoryStore(Protocol):
    """The rows of one session: its message tree, compaction rows, active leaf and search index.

    Message ids are unique per session; ``parent_id`` of the appends is a
    message id, ``None`` (a new root) or :data:`storage.shapes.LATEST_LEAF`.
    """

    # -- reads --------------------------------------------------------------------

    def get(self, message_id: str) -> str | None:
        """The stored JSON of ``message_id``, or ``None``."""

    def latest_leaf(self) -> str | None:
        """The active leaf, else the newest childless message; ``None`` when empty."""

    def path_json(self, leaf_id: str) -> tuple[str, int] | None:
        """The path root <- ``leaf_id`` as one JSON array text, leaf first, and its length;
        ``("[]", 0)`` for an unknown leaf; ``None`` when too big (then :meth:`path_contents`)."""

    def path_contents(self, leaf_id: str) -> list[str]:
        """Stored JSON root -> ``leaf_id`` (``[]`` if unknown)."""

    def path_chunks(self, leaf_id: str) -> Iterator[list[Any]]:
        """Stored JSON ``leaf_id`` -> root in chunks of bounded size, leaf first (rows as
        stored); each chunk read completely before it is yielded."""

    def path_stats(self, leaf_id: str) -> list[tuple[str, str, int]]:
        """Root -> ``leaf_id`` as ``(id, role, UTF-8 bytes of the JSON)``."""

    def path_ids(self, leaf_id: str) -> list[str]:
        """Ids root -> ``leaf_id`` (``[]`` if unknown)."""

    def place(self, message_id: str) -> tuple[int, int] | None:
        """``(rows on the path root -> it, their JSON bytes)``, or ``None`` if not stored."""

    def path_tokens(self, leaf_id: str) -> PathTokens | None:
        """The stored token total root -> ``leaf_id`` and the overlays that apply on that path."""

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
        """Store one message and make it the active leaf: ``(True, parent used)``, or
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
        """Delete every message, compaction and search row of the session and its active leaf."""

    def add_compaction(self, compaction_id: str, summary: str, from_id: str, to_id: str) -> CompactionRow:
        """Store a compaction row; returns it as stored."""


# -- reads built on the store ---------------------------------------------------------------


def path_messages(store: HistoryStore, leaf: str) -> list[Message]:
    """The stored messages root -> ``leaf``, parsed (rows that are not messages skipped, docs/behaviours.md §2).

    The path comes as one JSON array parsed once; only when that fails (too
    big for one SQLite string, or text SQLite and Python read differently)
    is it read and parsed row by row.
    """
    found = store.path_json(leaf)
    messages = None if found is None else parse_path(*found)
    return parse_all(store.path_contents(leaf)) if messages is None else messages


def read_history(store: HistoryStore, leaf: str | None) -> list[Message]:
    """The path root -> ``leaf`` with compaction overlays applied; ``[]`` for ``None`` or an unknown leaf."""
    if leaf is None:
        return []
    messages = path_messages(store, leaf)
    return apply_overlays(messages, store.compactions()) if messages else messages


def compaction_records(store: HistoryStore) -> list[dict[str, str]]:
    """Every compaction record ``{id, summary, fromMessageId, toMessageId, createdAt}``, oldest first."""
    return [compaction_record(row) for row in store.compactions()]
