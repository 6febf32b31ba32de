"""One session's message tree in Postgres: :class:`PostgresSessionProvider`.

The ``async`` twin of the SQLite :class:`storage.messages.MessageStore`:
the same methods, the same results (stored JSON text in and out, the
records of :mod:`storage.tree.rows`), because both run the same operations
(:mod:`storage.tree`: the tree rules written once, docs/deviations.md #1-6,
#13, #18) -- here in the statements of :mod:`storage.tree.postgres` (whose
docstring says what Postgres does its own way: the advisory lock, the
active leaf, searched text in the row), on psycopg's worker thread. Like
``MessageStore`` it never parses messages: the caller hands it the stored
JSON, the text to search by, the tool text and the token estimate.

Writes: each public write is one transaction (a lost connection leaves
nothing half-written) that first takes the per-session advisory lock. Reads
take no lock. Calls made through one provider object run one at a time, in
the order they were made (an ``anyio.Lock``, FIFO): appends of concurrent
tasks land in the order they arrive, as with the SQLite store.

Values are checked before anything is sent (:mod:`storage.postgres.values`):
Postgres text holds no NUL, so an id holding one names no stored message.

Besides ``MessageStore``'s methods: :meth:`~PostgresSessionProvider.for_session`
keeps the connection (and the value limit), and the session's
``assistant_config`` values (``get_config``, ``set_config``,
``delete_config``) hold the loaded-skill set.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Sequence
from typing import Any, TypeVar

import anyio

from common.errors import InvalidInputError
from common.shapes import LATEST_LEAF, _LatestLeaf

from ..fts import ParsedQuery
from ..tree import postgres as POSTGRES
from ..tree import reads, writes
from ..tree import steps as tree
from ..tree.places import ancestor_at_depth, token_places
from ..tree.postgres import stamp
from ..tree.reads import check_chunk_limits
from ..tree.rows import PATH_CHUNK_BYTES, PATH_CHUNK_ROWS, CompactionRow, NewMessage, PathTokens, SearchRow, TokenPlace
from ..tree.search import search_query, search_records
from .connection import Operation, Query, on_postgres, runner_for
from .search import match
from .values import (
    MAX_VALUE_BYTES,
    SEARCH_TEXT_MAX_BYTES,
    SEARCH_TOOLS_MAX_BYTES,
    check_int,
    check_number,
    check_text,
    lookup_key,
    search_text,
)

T = TypeVar("T")

_SEARCH = f"""
SELECT id, role, text_content, {stamp('created_at')} AS created_text
FROM assistant_messages WHERE session_id = %(s)s AND {{where}}
ORDER BY {{rank}} DESC, seq LIMIT %(limit)s
"""


def _search(session_id: str, query: ParsedQuery, limit: int) -> Operation[list[SearchRow]]:
    found = match(query)
    rows = yield Query(_SEARCH.format(where=found.where, rank=found.rank),
                       {"s": session_id, "limit": limit, **found.params})
    return [SearchRow(row["id"], row["role"], row["text_content"], row["created_text"]) for row in rows]


def check_message(
    message_id: Any, role: Any, content: Any, text: Any, tools: Any, tokens: Any, max_value_bytes: int
) -> NewMessage:
    """The checked values of one message row (raises before anything is sent).

    Raises:
        InvalidInputError: a value Postgres cannot store; ``.field`` names it.
    """
    return NewMessage(
        check_text(message_id, "message_id"),
        check_text(role, "role"),
        check_text(content, "content", max_bytes=max_value_bytes),
        search_text(text, "text", SEARCH_TEXT_MAX_BYTES),
        search_text(tools, "tools", SEARCH_TOOLS_MAX_BYTES),
        check_int(tokens, "tokens"),
    )


def check_messages(messages: Any, max_value_bytes: int) -> list[NewMessage]:
    """``messages`` (a sequence of :class:`~storage.tree.rows.NewMessage`) with every value checked.

    Raises:
        InvalidInputError: a value Postgres cannot store; ``.field`` is
            ``messages[<i>].<column>`` (``messages`` when it is no sequence).
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidInputError("messages must be a sequence of NewMessage", field="messages")
    return [_check_chain_message(i, m, max_value_bytes) for i, m in enumerate(messages)]


def _check_chain_message(index: int, m: Any, max_value_bytes: int) -> NewMessage:
    if not isinstance(m, NewMessage):
        raise InvalidInputError(f"messages[{index}] must be a NewMessage", field=f"messages[{index}]")
    try:
        return check_message(m.id, m.role, m.content, m.text, m.tools, m.tokens, max_value_bytes)
    except InvalidInputError as exc:
        field = f"messages[{index}].{exc.field}"
        raise InvalidInputError(f"messages[{index}]: {exc}", field=field) from None


# -- the provider ------------------------------------------------------------------------


class PostgresSessionProvider:
    """The messages, compactions and active leaf of one session (``session_id``) in Postgres.

    Args:
        conn: a ``psycopg.Connection``, a ``psycopg_pool.ConnectionPool``, or
            an object with ``execute(query, args)`` (see
            :mod:`storage.postgres.connection`). The schema must exist
            (:func:`storage.postgres.create_schema`).
        session_id: the session's key (``""`` for a single-session store).
        max_value_bytes: most UTF-8 bytes of one message's JSON (default: SQLite's limit).

    Cheap to create and stateless besides its arguments: any number of
    providers (in any number of processes) see the same tree. Every method
    is ``async`` and raises, besides what it lists:

    Raises:
        InvalidInputError: an argument Postgres cannot store (wrong type,
            NUL, lone surrogate, too big); ``.field`` names it. Nothing sent.
        StorageUnavailableError: the connection failed (lost, server down);
            nothing of the call was committed.
        DatabaseError: Postgres failed otherwise (e.g. missing schema).
    """

    def __init__(self, conn: Any, session_id: str = "", *, max_value_bytes: int = MAX_VALUE_BYTES) -> None:
        self.session_id = check_text(session_id, "session_id")
        self.max_value_bytes = max_value_bytes
        self.conn = conn
        self._runner = runner_for(conn)
        self._order = anyio.Lock()

    def __repr__(self) -> str:
        return f"PostgresSessionProvider(session_id={self.session_id!r})"

    def for_session(self, session_id: str) -> PostgresSessionProvider:
        """A provider of session ``session_id`` on the same connection (and the same value limit).

        Raises:
            InvalidInputError: ``session_id`` is not text Postgres can store.
        """
        provider = PostgresSessionProvider(self._runner, session_id, max_value_bytes=self.max_value_bytes)
        provider.conn = self.conn
        return provider

    # -- running -------------------------------------------------------------------------

    async def _read(self, op: tree.Operation[T]) -> T:
        async with self._order:
            return await self._runner.run(on_postgres(op), write=False)

    async def _write(self, op: tree.Operation[T]) -> T:
        async with self._order:
            return await self._runner.run(on_postgres(op), write=True)

    # -- reads ---------------------------------------------------------------------------

    async def get(self, message_id: str) -> str | None:
        """The stored JSON of ``message_id``, or ``None``."""
        key = lookup_key(message_id, "message_id")
        return None if key is None else await self._read(reads.get(POSTGRES, self.session_id, key))

    async def exists(self, message_id: str) -> bool:
        """``True`` when ``message_id`` is stored in this session."""
        key = lookup_key(message_id, "message_id")
        return key is not None and await self._read(reads.exists(POSTGRES, self.session_id, key))

    async def count(self) -> int:
        """Number of messages stored in this session."""
        return await self._read(reads.count(POSTGRES, self.session_id))

    async def latest_leaf(self) -> str | None:
        """Id of the latest leaf: the active leaf, else the newest childless message; ``None`` if empty."""
        return await self._read(reads.latest_leaf(POSTGRES, self.session_id))

    async def path_contents(self, leaf_id: str) -> list[str]:
        """Stored JSON of every message from the root down to ``leaf_id`` (``[]`` if unknown)."""
        key = lookup_key(leaf_id, "leaf_id")
        return [] if key is None else await self._read(reads.path_contents(POSTGRES, self.session_id, key))

    async def path_json(self, leaf_id: str) -> tuple[str, int] | None:
        """The path root <- ``leaf_id`` as one JSON array text, **leaf first**, and its length.

        The rows are joined as they are stored (not validated: a row that is
        not one JSON value makes the text fail to parse into ``count``
        values, and the caller reads :meth:`path_contents` instead).
        ``("[]", 0)`` for an unknown leaf; ``None`` when the path's JSON
        exceeds :data:`~storage.tree.postgres.PATH_JSON_MAX_BYTES`.
        """
        key = lookup_key(leaf_id, "leaf_id")
        return ("[]", 0) if key is None else await self._read(reads.path_json(POSTGRES, self.session_id, key))

    async def path_chunks(
        self, leaf_id: str, *, max_bytes: int = PATH_CHUNK_BYTES, max_rows: int = PATH_CHUNK_ROWS
    ) -> AsyncGenerator[list[Any], None]:
        """The stored JSON of the path ``leaf_id`` -> root in chunks, **leaf first**, as
        :meth:`storage.messages.MessageStore.path_chunks` gives them: at most
        ``max_rows`` rows and ``max_bytes`` UTF-8 bytes each (a larger row alone), one
        statement per chunk run to its end before the chunk is yielded. An unknown
        leaf yields nothing.

        Raises:
            InvalidInputError: ``max_bytes`` or ``max_rows`` is not an int >= 1.
            StorageUnavailableError, DatabaseError: as every read; chunks yielded before stay valid.
        """
        check_chunk_limits(max_bytes, max_rows)
        key = lookup_key(leaf_id, "leaf_id")
        if key is None:
            return
        after: tuple[int, Any] | None = None
        while True:
            rows, after = await self._read(reads.chunk(POSTGRES, self.session_id, key, after, max_rows, max_bytes))
            if rows:
                yield rows
            if after is None:
                return

    async def path_stats(self, leaf_id: str) -> list[tuple[str, str, int]]:
        """Root -> ``leaf_id`` as ``(id, role, bytes)``; ``bytes`` is the UTF-8 size of the JSON."""
        key = lookup_key(leaf_id, "leaf_id")
        return [] if key is None else await self._read(reads.path_stats(POSTGRES, self.session_id, key))

    async def path_ids(self, leaf_id: str) -> list[str]:
        """Ids of the messages root -> ``leaf_id`` (``[]`` if unknown); no content is read."""
        return [message_id for message_id, _, _ in await self.path_stats(leaf_id)]

    async def place(self, message_id: str) -> tuple[int, int] | None:
        """``(depth, path_bytes)``: its path's row count and JSON bytes; ``None`` if not stored."""
        key = lookup_key(message_id, "message_id")
        return None if key is None else await self._read(reads.place(POSTGRES, self.session_id, key))

    async def token_places(self, message_ids: Iterable[str]) -> dict[str, TokenPlace]:
        """:class:`~storage.tree.rows.TokenPlace` of each stored id among ``message_ids``."""
        keys = [key for key in (lookup_key(i, "message_ids") for i in message_ids) if key is not None]
        return await self._read(token_places(POSTGRES, self.session_id, keys))

    async def ancestor_at_depth(self, seq: int, depth: int) -> int | None:
        """``seq`` of the message at ``depth`` on the path root -> row ``seq`` (itself at its own
        depth); ``None`` when ``depth`` is deeper than the row or below 1. O(log depth) reads."""
        seq, depth = check_int(seq, "seq"), check_int(depth, "depth")
        return await self._read(ancestor_at_depth(POSTGRES, self.session_id, seq, depth))

    async def depth_on_path(self, message_id: str, leaf_id: str) -> int | None:
        """The depth of ``message_id`` (the root's is 1) when it lies on the path root -> ``leaf_id``
        (``leaf_id`` itself included), else ``None``. Two row reads and O(log depth) climbs."""
        key, leaf = lookup_key(message_id, "message_id"), lookup_key(leaf_id, "leaf_id")
        if key is None or leaf is None:
            return None
        return await self._read(reads.depth_on_path(POSTGRES, self.session_id, key, leaf))

    async def window(self, leaf_id: str, max_bytes: float, min_rows: int) -> tuple[list[str], bool]:
        """The newest messages of the path to ``leaf_id`` that fit ``max_bytes`` of JSON.

        The window holds the leaf, then grows toward the root while it has
        fewer than ``min_rows`` rows or the next row still fits. Reads only
        the window's rows.

        Returns:
            ``(contents, truncated)``: stored JSON root-side first (``[]`` for
            an unknown leaf) and whether older rows were left out.
        """
        key = lookup_key(leaf_id, "leaf_id")
        budget, rows = check_number(max_bytes, "max_bytes"), check_int(min_rows, "min_rows")
        if key is None:
            return [], False
        return await self._read(reads.window(POSTGRES, self.session_id, key, budget, rows))

    async def children(self, message_id: str) -> list[str]:
        """Stored JSON of the children of ``message_id``, oldest first (``created_at``, then ``seq``)."""
        key = lookup_key(message_id, "message_id")
        return [] if key is None else await self._read(reads.children(POSTGRES, self.session_id, key))

    async def compactions(self) -> list[CompactionRow]:
        """Every compaction row of the session, oldest first (``created_at``, then ``seq``)."""
        return await self._read(reads.compactions(POSTGRES, self.session_id))

    async def path_tokens(self, leaf_id: str) -> PathTokens | None:
        """Token total of the path root -> ``leaf_id`` and the overlays that apply on it
        (:func:`storage.tree.reads.path_tokens`); ``None`` for an unknown leaf."""
        key = lookup_key(leaf_id, "leaf_id")
        return None if key is None else await self._read(reads.path_tokens(POSTGRES, self.session_id, key))

    async def latest_path_tokens(self) -> PathTokens | None:
        """:meth:`path_tokens` of the latest leaf; ``None`` in an empty session (one
        statement when the session has no compaction row)."""
        return await self._read(reads.latest_path_tokens(POSTGRES, self.session_id))

    async def search(self, query: ParsedQuery, limit: int) -> list[SearchRow]:
        """Messages whose searched text matches ``query``: best rank first, ties oldest first.

        ``query`` comes from :func:`storage.fts.parse_query` (the one search
        syntax; see :mod:`storage.postgres.search` for how terms match).
        A hit's ``content`` is the message's searched text.
        """
        if not isinstance(query, ParsedQuery):
            raise InvalidInputError(
                f"query must be a parsed query (storage.fts.parse_query), not {type(query).__name__}", field="query"
            )
        op = _search(self.session_id, query, check_int(limit, "limit"))
        async with self._order:
            return await self._runner.run(op, write=False)

    async def search_messages(self, query: str, limit: int = 20) -> list[dict[str, str]]:
        """The spec's ``searchMessages``: :meth:`search` of the user text ``query``.

        Returns:
            Up to ``limit`` hits, best first, as ``{"id", "role", "content",
            "createdAt"}`` (ISO-8601 UTC with milliseconds); ``[]`` for a
            query with no searchable term (nothing is sent).

        Raises:
            InvalidInputError: ``query`` is not a string or ``limit`` not an int >= 0.
        """
        parsed = search_query(query, limit, check_int)
        return [] if parsed is None else search_records(await self.search(parsed, limit))

    # -- writes --------------------------------------------------------------------------

    @staticmethod
    def _check_parent(parent_id: Any) -> str | None | _LatestLeaf:
        """The parent to resolve: an id holding NUL names no stored message, so it makes a root."""
        if parent_id is LATEST_LEAF or parent_id is None:
            return parent_id
        return lookup_key(parent_id, "parent_id")

    async def append(
        self,
        message_id: str,
        role: str,
        content: str,
        text: str,
        parent_id: str | None | _LatestLeaf = LATEST_LEAF,
        *,
        tokens: int = 0,
        tools: str = "",
    ) -> tuple[bool, str | None]:
        """Insert a message and make it the active leaf, in one transaction.

        Args:
            parent_id: :data:`~common.shapes.LATEST_LEAF` -> the latest
                leaf (``None`` in an empty session); ``None`` -> a new root;
                an overlay id (``compaction_<id>``) -> the last message that
                compaction covers, or the latest leaf without such a
                compaction; any other id not stored in this session -> a root.
            text: the text to search the message by (its text parts).
            tokens: the message's estimated tokens (see :meth:`path_tokens`).
            tools: tool names and inputs to search it by.

        Returns:
            ``(True, <the parent used>)``, or ``(False, None)`` when the id is
            already stored (nothing changes; the first content stays).
        """
        m = check_message(message_id, role, content, text, tools, tokens, self.max_value_bytes)
        parent = self._check_parent(parent_id)
        return await self._write(
            writes.append(POSTGRES, self.session_id, m.id, m.role, m.content, m.text, m.tools, m.tokens, parent)
        )

    async def append_chain(
        self, messages: Sequence[NewMessage], parent_id: str | None | _LatestLeaf = LATEST_LEAF
    ) -> list[tuple[bool, str | None]]:
        """Insert ``messages`` as a chain, in one transaction: all of them or none.

        The rules are :func:`storage.tree.writes.append_chain`'s: the first
        goes under ``parent_id`` (as in :meth:`append`), each next one under
        the one before; duplicates are skipped, overlay ids never stored. The
        last new message becomes the active leaf; a chain storing nothing
        leaves the leaf alone. Every message is checked before anything is sent.

        Returns:
            One ``(inserted, parent)`` per message, as :meth:`append` returns them.

        Raises:
            InvalidInputError: a message holds a value Postgres cannot
                store; ``.field`` is ``messages[<i>].<column>``.
        """
        rows = check_messages(messages, self.max_value_bytes)
        parent = self._check_parent(parent_id)
        if not rows:
            return []
        return await self._write(writes.append_chain(POSTGRES, self.session_id, rows, parent))

    async def update(
        self, message_id: str, role: str, content: str, text: str, *, tokens: int = 0, tools: str = ""
    ) -> bool:
        """Replace a stored message's role, content, searched text and token count.

        Returns ``False`` (and writes nothing) when ``message_id`` is not stored.
        """
        if lookup_key(message_id, "message_id") is None:
            return False
        m = check_message(message_id, role, content, text, tools, tokens, self.max_value_bytes)
        return await self._write(
            writes.update(POSTGRES, self.session_id, m.id, m.role, m.content, m.text, m.tools, m.tokens)
        )

    async def delete(self, message_ids: Iterable[str]) -> list[str]:
        """Delete messages in one transaction; each one's children move up to its parent.

        Ids not stored are skipped. Deleting the active leaf drops it (the
        next read falls back to the newest leaf). Returns the ids deleted,
        in the order given, without repeats.

        Raises:
            InvalidInputError: ``message_ids`` is a string or holds a non-string.
        """
        if isinstance(message_ids, (str, bytes)) or not isinstance(message_ids, Iterable):
            raise InvalidInputError("message_ids must be a list of message ids", field="message_ids")
        keys = (lookup_key(i, "message_ids") for i in message_ids)  # one holding NUL is not stored
        ids = list(dict.fromkeys(key for key in keys if key is not None))
        return await self._write(writes.delete(POSTGRES, self.session_id, ids)) if ids else []

    async def clear(self) -> None:
        """Delete every message and compaction of the session and its active leaf, in one statement."""
        await self._write(writes.clear(POSTGRES, self.session_id))

    async def add_compaction(self, compaction_id: str, summary: str, from_id: str, to_id: str) -> CompactionRow:
        """Store a compaction row; returns it with its ``seq`` and ``created_at``.

        The ends are not checked: an overlay whose ends are not both on a
        path is ignored when that path is read.
        """
        op = writes.add_compaction(
            POSTGRES,
            self.session_id,
            check_text(compaction_id, "compaction_id"),
            check_text(summary, "summary", max_bytes=self.max_value_bytes),
            check_text(from_id, "from_id"),
            check_text(to_id, "to_id"),
        )
        return await self._write(op)

    # -- per-session values (assistant_config) ----------------------------------------------

    async def get_config(self, key: str) -> str | None:
        """The session's ``assistant_config`` value ``key`` (e.g. ``loaded_skills``), or ``None``."""
        rows = await self._config(_GET_CONFIG, key=check_text(key, "key"))
        return rows[0]["value"] if rows else None

    async def set_config(self, key: str, value: str) -> None:
        """Insert or replace the session's value ``key``."""
        value = check_text(value, "value", max_bytes=self.max_value_bytes)
        await self._config(_SET_CONFIG, write=True, key=check_text(key, "key"), value=value)

    async def delete_config(self, key: str) -> None:
        """Delete the session's value ``key`` (nothing when there is none)."""
        await self._config(_DELETE_CONFIG, write=True, key=check_text(key, "key"))

    async def _config(self, sql: str, *, write: bool = False, **params: Any) -> list[dict[str, Any]]:
        async with self._order:
            return await self._runner.run(_rows(sql, {"s": self.session_id, **params}), write=write)


_GET_CONFIG = "SELECT value FROM assistant_config WHERE session_id = %(s)s AND key = %(key)s"
_SET_CONFIG = """
INSERT INTO assistant_config (session_id, key, value) VALUES (%(s)s, %(key)s, %(value)s)
ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value
"""
_DELETE_CONFIG = "DELETE FROM assistant_config WHERE session_id = %(s)s AND key = %(key)s"


def _rows(sql: str, params: dict[str, Any]) -> Operation[list[dict[str, Any]]]:
    return (yield Query(sql, params))
