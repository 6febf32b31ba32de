"""Context blocks and searchable entries in Postgres: the spec's two context providers.

* :class:`PostgresContextProvider` -- a writable block stored as one
  ``cf_agents_context_blocks`` row keyed by ``label`` (a block's memory,
  a cached system prompt). The async twin of ``actors.AgentContextProvider``.
* :class:`PostgresSearchProvider` -- a searchable block over
  ``cf_agents_search_entries``: keyed entries filed under the block label,
  shared by every session using that label, searched with the one query
  syntax (:mod:`storage.postgres.search`). The async twin of
  ``actors.AgentSearchProvider``: the same ``get`` / ``search`` / ``set``
  results.

Both take ``init(label)`` from the context engine as the SQLite ones do.
Values are checked before anything is sent
(:mod:`storage.postgres.values`); an entry whose words overflow Postgres'
1 MB ``tsvector`` is refused with
:class:`~common.errors.InvalidInputError` (``field="content"``)
and nothing is stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from common.errors import InvalidInputError

from ..fts import ParsedQuery, parse_query
from ..tree import context as rules
from ..tree.context import SEARCH_LIMIT, entries_summary, entries_text
from ..tree.postgres import NOW_MS, pg
from ..tree.steps import Operation
from .connection import on_postgres, runner_for
from .search import match
from .values import MAX_VALUE_BYTES, check_text

__all__ = ["SEARCH_LIMIT", "PostgresContextDialect", "PostgresContextProvider", "PostgresSearchProvider"]

_UPSERT_ENTRY = pg(f"""
INSERT INTO cf_agents_search_entries (label, key, content, created_at, updated_at)
VALUES (%(label)s, %(key)s, %(content)s, {NOW_MS}, {NOW_MS})
ON CONFLICT (label, key) DO UPDATE SET content = excluded.content, updated_at = excluded.updated_at
""", "label", "key", "content")
_SEARCH_ENTRIES = """
SELECT key, content FROM cf_agents_search_entries WHERE label = %(label)s AND {where}
ORDER BY {rank} DESC, seq LIMIT %(limit)s
"""


class PostgresContextDialect:
    """The Postgres :class:`~storage.tree.context.ContextDialect`: an entry's words are searched
    in its own row (:mod:`storage.postgres.search`)."""

    READ_BLOCK = pg("SELECT content FROM cf_agents_context_blocks WHERE label = %(label)s", "label")
    WRITE_BLOCK = pg(f"""
INSERT INTO cf_agents_context_blocks (label, content, updated_at) VALUES (%(label)s, %(content)s, {NOW_MS})
ON CONFLICT (label) DO UPDATE SET content = excluded.content, updated_at = excluded.updated_at
""", "label", "content")
    DELETE_BLOCKS = pg(
        "DELETE FROM cf_agents_context_blocks WHERE label = ANY(%(labels)s::text[]) RETURNING label", "labels"
    )
    COUNT_ENTRIES = pg("SELECT count(*) AS n FROM cf_agents_search_entries WHERE label = %(label)s", "label")

    @staticmethod
    def label_list(labels: Sequence[str]) -> list[str]:
        """A ``text[]`` value."""
        return list(labels)

    @staticmethod
    def upsert_entry(label: str, key: str, content: str) -> Operation[None]:
        """One statement: the row carries its searched words."""
        yield _UPSERT_ENTRY, (label, key, content)

    @staticmethod
    def search_entries(label: str, query: ParsedQuery, limit: int) -> Operation[list[tuple[str, str]]]:
        """One statement over the entries' searched words (:func:`storage.postgres.search.match`)."""
        found = match(query)
        names = ("label", "limit", *found.params)
        statement = pg(_SEARCH_ENTRIES.format(where=found.where, rank=found.rank), *names)
        rows = yield statement, (label, limit, *found.params.values())
        return [(key, content) for key, content in rows]


#: The dialect the Postgres context providers run the rules with.
POSTGRES_CONTEXT = PostgresContextDialect()


class PostgresContextProvider:
    """A writable context block stored as one ``cf_agents_context_blocks`` row.

    Args:
        conn: a ``psycopg.Connection``, a ``psycopg_pool.ConnectionPool``, or
            an object with ``execute(query, args)``.
        key: the row's ``label``; when ``None`` or ``""`` the block label
            given to :meth:`init` is used (an explicit key is never replaced).

    Raises (every method): ``InvalidInputError`` (a value Postgres cannot
    store), ``StorageUnavailableError`` (connection failed; nothing written).
    """

    def __init__(self, conn: Any, key: str | None = None) -> None:
        self.key = "" if key is None else check_text(key, "key")
        self.conn = conn
        self._runner = runner_for(conn)

    def init(self, label: str) -> None:
        """Use ``label`` as the row key unless a key was given."""
        if not self.key:
            self.key = check_text(label, "label")

    async def get(self) -> str | None:
        """The block's content, or ``None`` when no row exists."""
        return await self._runner.run(on_postgres(rules.read_block(POSTGRES_CONTEXT, self.key)), write=False)

    async def set(self, content: str) -> None:
        """Insert or replace the row (``updated_at`` = now, ms)."""
        op = rules.write_block(POSTGRES_CONTEXT, self.key, check_text(content, "content", max_bytes=MAX_VALUE_BYTES))
        await self._runner.run(on_postgres(op), write=True)


class PostgresSearchProvider:
    """A searchable block over ``cf_agents_search_entries``, filed under the block label.

    Args:
        conn: a ``psycopg.Connection``, a ``psycopg_pool.ConnectionPool``, or
            an object with ``execute(query, args)``.
        key: file the entries under this ``label`` instead of the block's
            label (e.g. one set of entries per session: ``knowledge_<id>``);
            ``None`` or ``""``: the label given to :meth:`init`.

    Raises (every method): as :class:`PostgresContextProvider`.
    """

    def __init__(self, conn: Any, *, key: str | None = None) -> None:
        self.key = "" if key is None else check_text(key, "key")
        self.label = self.key
        self.conn = conn
        self._runner = runner_for(conn)

    def init(self, label: str) -> None:
        """File entries under ``label`` (the block's label), unless a ``key`` was given."""
        checked = check_text(label, "label")
        if not self.key:
            self.label = checked

    async def get(self) -> str | None:
        """``"<n> entries indexed."`` (also for 1), or ``None`` with no entries."""
        return entries_summary(
            await self._runner.run(on_postgres(rules.count_entries(POSTGRES_CONTEXT, self.label)), write=False)
        )

    async def search(self, query: str) -> str | None:
        """Best :data:`SEARCH_LIMIT` matches as ``[<key>]\\n<content>`` joined by a blank line, or ``None``.

        ``query`` follows :func:`storage.fts.parse_query` (NUL characters and
        lone surrogates separate words); a query with no searchable term
        gives ``None`` without querying.
        """
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, not {type(query).__name__}", field="query")
        parsed = parse_query(query)
        if parsed is None:
            return None
        op = rules.search_entries(POSTGRES_CONTEXT, self.label, parsed, SEARCH_LIMIT)
        return entries_text(await self._runner.run(on_postgres(op), write=False))

    async def set(self, key: str, content: str) -> None:
        """Insert or replace entry ``key`` (a new key keeps nothing; an old one keeps ``created_at``).

        Raises:
            InvalidInputError: also when the content's words overflow the
                1 MB ``tsvector`` limit (``field="content"``); nothing is stored.
        """
        op = rules.upsert_entry(
            POSTGRES_CONTEXT, self.label, check_text(key, "key"), check_text(content, "content", max_bytes=MAX_VALUE_BYTES)
        )
        try:
            await self._runner.run(on_postgres(op), write=True)
        except InvalidInputError as exc:
            raise InvalidInputError(
                f"content of entry {key!r} cannot be indexed by Postgres: {exc}", field="content"
            ) from exc
