"""Context-block rows and search entries: their rules, written once for both databases.

* ``cf_agents_context_blocks`` -- one row per context block or cached
  prompt, keyed by ``label`` (``"memory"``, ``"memory_<sid>"``,
  ``"_system_prompt_<sid>"``): :func:`read_block`, :func:`write_block`
  (``updated_at`` set to now, ms), :func:`delete_blocks`;
* ``cf_agents_search_entries`` -- keyed entries of a searchable block,
  filed under the block label and shared by every session that uses it:
  :func:`count_entries`, :func:`upsert_entry` (a new key is inserted; an
  existing one keeps its ``seq`` and ``created_at`` and gets the new
  content and ``updated_at``), :func:`search_entries` (best first, ties in
  insertion order, with the one query syntax of :func:`storage.fts.parse_query`;
  how matches are found and ranked is each database's own).

What a searchable block shows is the same on both databases:
:func:`entries_summary` and :func:`entries_text`.

The functions are operations (:mod:`storage.tree.steps`) on a
:class:`ContextDialect`: :mod:`storage.context` drives them on apsw,
:mod:`storage.postgres.context` on psycopg's worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from storage.fts import ParsedQuery

from .steps import Operation

__all__ = [
    "SEARCH_LIMIT", "ContextDialect", "count_entries", "delete_blocks", "entries_summary", "entries_text",
    "read_block", "search_entries", "upsert_entry", "write_block",
]

#: Most entries one search of a searchable block returns.
SEARCH_LIMIT = 10


class ContextDialect(Protocol):
    """A database's context statements and the steps that differ.

    ``READ_BLOCK (label) -> content``; ``WRITE_BLOCK (label, content)``;
    ``DELETE_BLOCKS (labels) -> label`` per row deleted (``labels`` passed
    through :meth:`label_list`); ``COUNT_ENTRIES (label) -> n``.
    """

    READ_BLOCK: Any
    WRITE_BLOCK: Any
    DELETE_BLOCKS: Any
    COUNT_ENTRIES: Any

    def label_list(self, labels: Sequence[str]) -> Any:
        """``labels`` as the one argument ``DELETE_BLOCKS`` takes."""
        ...

    def upsert_entry(self, label: str, key: str, content: str) -> Operation[None]:
        """Store ``content`` under ``(label, key)`` and make it searchable (see the module docstring)."""
        ...

    def search_entries(self, label: str, query: ParsedQuery, limit: int) -> Operation[list[tuple[str, str]]]:
        """``(key, content)`` of the best ``limit`` entries of ``label`` matching ``query``."""
        ...


def read_block(d: ContextDialect, label: str) -> Operation[str | None]:
    """Content of the block row ``label``, or ``None`` when there is no row."""
    rows = yield d.READ_BLOCK, (label,)
    return rows[0][0] if rows else None


def write_block(d: ContextDialect, label: str, content: str) -> Operation[None]:
    """Insert or replace the block row ``label`` (``updated_at`` set to now, ms)."""
    yield d.WRITE_BLOCK, (label, content)


def delete_blocks(d: ContextDialect, labels: Sequence[str]) -> Operation[int]:
    """Delete the block rows named in ``labels``; how many existed."""
    if not labels:
        return 0
    return len((yield d.DELETE_BLOCKS, (d.label_list(labels),)))


def count_entries(d: ContextDialect, label: str) -> Operation[int]:
    """Number of search entries under the block label ``label``."""
    [(count,)] = yield d.COUNT_ENTRIES, (label,)
    return int(count)


def upsert_entry(d: ContextDialect, label: str, key: str, content: str) -> Operation[None]:
    """Store ``content`` under ``(label, key)`` (see the module docstring)."""
    yield from d.upsert_entry(label, key, content)


def search_entries(d: ContextDialect, label: str, query: ParsedQuery, limit: int = SEARCH_LIMIT
                   ) -> Operation[list[tuple[str, str]]]:
    """``(key, content)`` of the entries of ``label`` matching ``query``, best first, ties in insertion order."""
    return (yield from d.search_entries(label, query, limit))


def entries_summary(count: int) -> str | None:
    """What a searchable block shows: ``"<n> entries indexed."`` (also for 1), ``None`` with no entries."""
    return f"{count} entries indexed." if count else None


def entries_text(rows: Sequence[tuple[str, str]]) -> str | None:
    """Search hits as a searchable block gives them: ``[<key>]\\n<content>`` joined by a blank line; ``None``
    for none."""
    return "\n\n".join(f"[{key}]\n{content}" for key, content in rows) if rows else None
