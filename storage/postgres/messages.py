"""One session's message tree in Postgres: :class:`PostgresSessionProvider`.

The async twin of the SQLite :class:`storage.messages.MessageStore`, method
for method and shape for shape (stored JSON text in and out, the same
:class:`~storage.messages.CompactionRow`, :class:`~storage.messages.SearchRow`,
:class:`~storage.messages.PathTokens` records), so the actor layer can run a
Session on either store. Like ``MessageStore`` it never parses messages:
the caller hands it the stored JSON, the text to search by, the tool text
and the token estimate.

Tree rules (the same as the SQLite store, DEVIATIONS 1-6, 13, 18):

* ids are unique per session (``PRIMARY KEY (session_id, id)``); a
  duplicate append changes nothing and returns ``(False, None)``;
* the parent defaults to the latest leaf: the persisted active leaf
  (``assistant_config``, key ``active_leaf``, set by every insert) while it
  is stored and childless, else the newest childless message
  (``created_at``, then insertion order ``seq``);
* a parent id not stored in the session makes a root; an overlay id
  (``compaction_<id>``) stands for the last message that compaction covers;
  overlay ids are never stored;
* deleting a message hands its children to its parent;
* paths are walked with a recursive CTE without a depth cap; each step
  requires the parent to be older (``seq`` falls), so a damaged table can
  never loop;
* compactions are rows; overlays are applied on read by the actor layer
  (branch-local: only on a path holding both ends), and
  :meth:`PostgresSessionProvider.path_tokens` applies the same rule.

Writes: each public write is one transaction (a lost connection leaves
nothing half-written) that first takes a per-session advisory lock
(``pg_advisory_xact_lock``), so two writers of one session -- two hosts
during a hand-over, two tasks -- append one after the other instead of
both choosing the same parent. Reads take no lock. Calls made through one
provider object run one at a time, in the order they were made (an
``anyio.Lock``, FIFO): appends of concurrent tasks land in the order they
arrive, as with the SQLite store.

Timestamps are stored with millisecond precision and returned as
``YYYY-MM-DD HH:MM:SS.SSS`` (UTC), the SQLite store's text form, so
:func:`storage.messages.to_iso8601` applies to both.

What it does not mirror from ``MessageStore``: ``storage`` (a shared SQLite
transaction other writes can join; here each call is its own transaction),
``token_places`` and ``ancestor_at_depth`` (the SQLite file's jump
pointers; :meth:`~PostgresSessionProvider.path_tokens` walks the path
instead). Added: :meth:`~PostgresSessionProvider.for_session` (the same
connection, another session), the session's ``assistant_config`` values
(:meth:`~PostgresSessionProvider.get_config`, ``set_config``,
``delete_config``: the loaded-skill set lives there),
:meth:`~PostgresSessionProvider.count` and the spec's
:meth:`~PostgresSessionProvider.search_messages` (user text in, hits
``{id, role, content, createdAt}`` out).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import anyio

from storage.errors import InvalidInputError

from ..fts import ParsedQuery, parse_query
from ..messages import (
    LATEST_LEAF,
    OVERLAY_PREFIX,
    PATH_CHUNK_BYTES,
    PATH_CHUNK_ROWS,
    CompactionRow,
    NewMessage,
    PathTokens,
    SearchRow,
    _LatestLeaf,
    to_iso8601,
)
from . import message_sql as sql
from .connection import Many, Operation, Query, runner_for
from .places import applied, place_subtrees, token_places
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
    utf8_size,
)


def _compaction(row: dict[str, Any]) -> CompactionRow:
    return CompactionRow(
        row["seq"], row["id"], row["summary"], row["from_message_id"], row["to_message_id"], row["created_text"]
    )


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
        provider = PostgresSessionProvider.__new__(PostgresSessionProvider)
        provider.session_id = check_text(session_id, "session_id")
        provider.max_value_bytes = self.max_value_bytes
        provider.conn = self.conn
        provider._runner = self._runner
        provider._order = anyio.Lock()
        return provider

    # -- running -------------------------------------------------------------------------

    def _q(self, sql: str, **params: Any) -> Query:
        return Query(sql, {"s": self.session_id, **params})

    async def _read(self, op: Operation[Any]) -> Any:
        async with self._order:
            return await self._runner.run(op, write=False)

    async def _write(self, op: Operation[Any]) -> Any:
        async with self._order:
            return await self._runner.run(op, write=True)

    def _rows(self, sql: str, **params: Any) -> Operation[list[dict[str, Any]]]:
        return (yield self._q(sql, **params))

    def _one(self, sql: str, **params: Any) -> Operation[Any]:
        rows = yield self._q(sql, **params)
        return next(iter(rows[0].values())) if rows else None

    # -- reads ---------------------------------------------------------------------------

    async def get(self, message_id: str) -> str | None:
        """The stored JSON of ``message_id``, or ``None``."""
        key = lookup_key(message_id, "message_id")
        return None if key is None else await self._read(self._one(sql.GET, id=key))

    async def exists(self, message_id: str) -> bool:
        """``True`` when ``message_id`` is stored in this session."""
        return await self.get(message_id) is not None

    async def count(self) -> int:
        """Number of messages stored in this session."""
        return int(await self._read(self._one(sql.COUNT)))

    async def latest_leaf(self) -> str | None:
        """Id of the latest leaf: the active leaf, else the newest childless message; ``None`` if empty."""
        return await self._read(self._one(sql.LATEST_LEAF))

    async def path_contents(self, leaf_id: str) -> list[str]:
        """Stored JSON of every message from the root down to ``leaf_id`` (``[]`` if unknown)."""
        key = lookup_key(leaf_id, "leaf_id")
        rows = [] if key is None else await self._read(self._rows(sql.PATH_ROWS, leaf=key))
        return [row["content"] for row in rows]

    async def path_json(self, leaf_id: str) -> tuple[str, int] | None:
        """The path root <- ``leaf_id`` as one JSON array text, **leaf first**, and its length.

        The rows are joined as they are stored (not validated: a row that is
        not one JSON value makes the text fail to parse into ``count``
        values, and the caller reads :meth:`path_contents` instead).
        ``("[]", 0)`` for an unknown leaf; ``None`` when the path's JSON
        exceeds :data:`~storage.postgres.message_sql.PATH_JSON_MAX_BYTES`.
        """
        key = lookup_key(leaf_id, "leaf_id")
        if key is None:
            return "[]", 0
        [row] = await self._read(self._rows(sql.PATH_JSON, leaf=key))
        return None if row["text"] is None else (row["text"], row["n"])

    async def path_chunks(
        self, leaf_id: str, *, max_bytes: int = PATH_CHUNK_BYTES, max_rows: int = PATH_CHUNK_ROWS
    ) -> AsyncIterator[list[Any]]:
        """The stored JSON of the path ``leaf_id`` -> root in chunks, **leaf first**, as
        :meth:`storage.messages.MessageStore.path_chunks` gives them: at most
        ``max_rows`` rows and ``max_bytes`` UTF-8 bytes each (a larger row alone), one
        statement per chunk run to its end before the chunk is yielded. An unknown
        leaf yields nothing.

        Raises:
            InvalidInputError: ``max_bytes`` or ``max_rows`` is not an int >= 1.
            StorageUnavailableError, DatabaseError: as every read; chunks yielded before stay valid.
        """
        for name, value in (("max_bytes", max_bytes), ("max_rows", max_rows)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"{name} must be an int >= 1, not {value!r}", field=name)
        key = lookup_key(leaf_id, "leaf_id")
        if key is None:
            return
        limits = {"max_rows": max_rows, "max_bytes": max_bytes}
        rows = await self._read(self._rows(sql.CHUNK_FROM_LEAF, leaf=key, **limits))
        while rows:
            yield [row["content"] for row in rows]
            last = rows[-1]
            if last["parent_id"] is None:
                return
            rows = await self._read(self._rows(sql.CHUNK_FROM_PARENT, leaf=last["parent_id"], below=last["seq"],
                                               **limits))

    async def path_stats(self, leaf_id: str) -> list[tuple[str, str, int]]:
        """Root -> ``leaf_id`` as ``(id, role, bytes)``; ``bytes`` is the UTF-8 size of the JSON."""
        key = lookup_key(leaf_id, "leaf_id")
        rows = [] if key is None else await self._read(self._rows(sql.PATH_STATS, leaf=key))
        return [(row["id"], row["role"], row["bytes"]) for row in rows]

    async def path_ids(self, leaf_id: str) -> list[str]:
        """Ids of the messages root -> ``leaf_id`` (``[]`` if unknown); no content is read."""
        return [message_id for message_id, _, _ in await self.path_stats(leaf_id)]

    async def place(self, message_id: str) -> tuple[int, int] | None:
        """``(depth, path_bytes)``: its path's row count and JSON bytes; ``None`` if not stored."""
        key = lookup_key(message_id, "message_id")
        rows = [] if key is None else await self._read(self._rows(sql.PLACE, leaf=key))
        return (int(rows[0]["depth"]), int(rows[0]["bytes"])) if rows else None

    async def window(self, leaf_id: str, max_bytes: int, min_rows: int) -> tuple[list[str], bool]:
        """The newest messages of the path to ``leaf_id`` that fit ``max_bytes`` of JSON.

        The window holds the leaf, then grows toward the root while it has
        fewer than ``min_rows`` rows or the next row still fits. Reads only
        the window's rows.

        Returns:
            ``(contents, truncated)``: stored JSON root-side first (``[]`` for
            an unknown leaf) and whether older rows were left out.
        """
        params = {
            "leaf": lookup_key(leaf_id, "leaf_id"),
            "max_bytes": check_number(max_bytes, "max_bytes"),
            "min_rows": check_int(min_rows, "min_rows"),
        }
        rows = [] if params["leaf"] is None else await self._read(self._rows(sql.WINDOW, **params))
        return [row["content"] for row in rows], bool(rows) and rows[0]["parent_id"] is not None

    async def children(self, message_id: str) -> list[str]:
        """Stored JSON of the children of ``message_id``, oldest first (``created_at``, then ``seq``)."""
        key = lookup_key(message_id, "message_id")
        rows = [] if key is None else await self._read(self._rows(sql.CHILDREN, id=key))
        return [row["content"] for row in rows]

    async def compactions(self) -> list[CompactionRow]:
        """Every compaction row of the session, oldest first (``created_at``, then ``seq``)."""
        return [_compaction(row) for row in await self._read(self._rows(sql.COMPACTIONS))]

    async def path_tokens(self, leaf_id: str) -> PathTokens | None:
        """Token total of the path root -> ``leaf_id`` and the overlays that apply on it.

        The overlays are the ones ``get_history`` applies: per start message
        on the path, the newest compaction whose end is on the path at or
        after it; walking root -> leaf, a start inside an overlay already
        taken is skipped. Each is paired with the tokens of the messages it
        hides. The total is the leaf's stored ``path_tokens`` (one row);
        which compaction ends lie on the path is found by climbing jump
        pointers (:mod:`storage.postgres.places`): O(compactions x log
        depth), whatever the history length. ``None`` for an unknown leaf.
        """
        leaf_id = lookup_key(leaf_id, "leaf_id")
        if leaf_id is None:
            return None

        def op() -> Operation[PathTokens | None]:
            leaf = (yield from token_places(self.session_id, [leaf_id])).get(leaf_id)
            if leaf is None:
                return None
            rows = [_compaction(row) for row in (yield self._q(sql.COMPACTIONS))]
            if not rows:
                return PathTokens(leaf.path_tokens, ())
            named = {i for r in rows for i in (r.from_message_id, r.to_message_id)}
            ends = yield from token_places(self.session_id, named)
            return PathTokens(leaf.path_tokens, tuple((yield from applied(leaf, rows, ends))))

        return await self._read(op())

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
        found = match(query)
        statement = sql.SEARCH.format(where=found.where, rank=found.rank)
        rows = await self._read(self._rows(statement, limit=check_int(limit, "limit"), **found.params))
        return [SearchRow(row["id"], row["role"], row["text_content"], row["created_text"]) for row in rows]

    async def search_messages(self, query: str, limit: int = 20) -> list[dict[str, str]]:
        """The spec's ``searchMessages``: :meth:`search` of the user text ``query``.

        Returns:
            Up to ``limit`` hits, best first, as ``{"id", "role", "content",
            "createdAt"}`` (ISO-8601 UTC with milliseconds); ``[]`` for a
            query with no searchable term (nothing is sent).

        Raises:
            InvalidInputError: ``query`` is not a string or ``limit`` not an int >= 0.
        """
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, not {type(query).__name__}", field="query")
        if check_int(limit, "limit") < 0:
            raise InvalidInputError("limit must be >= 0", field="limit")
        parsed = parse_query(query)
        if parsed is None or limit == 0:
            return []
        return [
            {"id": r.id, "role": r.role, "content": r.content, "createdAt": to_iso8601(r.created_at)}
            for r in await self.search(parsed, limit)
        ]

    # -- writes --------------------------------------------------------------------------

    def _resolve_parent(self, parent_id: str | None | _LatestLeaf) -> Operation[str | None]:
        """The parent an append under ``parent_id`` uses (see :meth:`append`)."""
        if parent_id is LATEST_LEAF:
            return (yield from self._one(sql.LATEST_LEAF))
        if parent_id is None:
            return None
        if parent_id.startswith(OVERLAY_PREFIX) and (yield from self._one(sql.GET, id=parent_id)) is None:
            end = yield from self._one(sql.COMPACTION_END, id=parent_id[len(OVERLAY_PREFIX) :])
            if end is None:
                return (yield from self._one(sql.LATEST_LEAF))
            parent_id = end
        return parent_id if (yield from self._one(sql.GET, id=parent_id)) is not None else None

    def _row(self, message_id: Any, role: Any, content: Any, text: Any, tools: Any, tokens: Any) -> dict[str, Any]:
        """The checked column values of one message row (raises before anything is sent)."""
        return {
            "s": self.session_id,
            "id": check_text(message_id, "message_id"),
            "role": check_text(role, "role"),
            "content": check_text(content, "content", max_bytes=self.max_value_bytes),
            "text": search_text(text, "text", SEARCH_TEXT_MAX_BYTES),
            "tools": search_text(tools, "tools", SEARCH_TOOLS_MAX_BYTES),
            "tokens": check_int(tokens, "tokens"),
        }

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
            parent_id: :data:`~storage.messages.LATEST_LEAF` -> the latest
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
        row = self._row(message_id, role, content, text, tools, tokens)
        parent_id = self._check_parent(parent_id)

        def op() -> Operation[tuple[bool, str | None]]:
            yield self._q(sql.LOCK)
            parent = yield from self._resolve_parent(parent_id)
            inserted = yield Query(sql.APPEND, {**row, "parent": parent})
            if not inserted:
                return False, None
            yield from _keep_statistics(1, inserted[0]["depth"])
            return True, parent

        return await self._write(op())

    async def append_chain(
        self, messages: Sequence[NewMessage], parent_id: str | None | _LatestLeaf = LATEST_LEAF
    ) -> list[tuple[bool, str | None]]:
        """Insert ``messages`` as a chain, in one transaction: all of them or none.

        The first goes under ``parent_id`` (resolved as in :meth:`append`),
        each next one under the one before. An id already stored -- or met
        earlier in the chain -- is skipped (the first content stays) and the
        next message goes under it; an overlay id is never stored and the
        next message goes under the last message its compaction covers (or,
        without one, where it would have gone). The last new message becomes
        the active leaf; a chain storing nothing leaves the leaf alone.
        Every message is checked before anything is sent.

        Returns:
            One ``(inserted, parent)`` per message, as :meth:`append` returns them.

        Raises:
            InvalidInputError: a message holds a value Postgres cannot
                store; ``.field`` is ``messages[<i>].<column>``.
        """
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise InvalidInputError("messages must be a sequence of NewMessage", field="messages")
        rows = [self._chain_row(i, m) for i, m in enumerate(messages)]
        parent_id = self._check_parent(parent_id)
        if not rows:
            return []
        return await self._write(self._chain(rows, parent_id))

    def _chain_row(self, index: int, message: Any) -> dict[str, Any]:
        if not isinstance(message, NewMessage):
            raise InvalidInputError(f"messages[{index}] must be a NewMessage", field=f"messages[{index}]")
        m = message
        try:
            return self._row(m.id, m.role, m.content, m.text, m.tools, m.tokens)
        except InvalidInputError as exc:
            field = f"messages[{index}].{exc.field}"
            raise InvalidInputError(f"messages[{index}]: {exc}", field=field) from None

    def _chain(self, rows: list[dict[str, Any]], parent_id: str | None | _LatestLeaf) -> Operation[list[tuple[bool, str | None]]]:
        yield self._q(sql.LOCK)
        parent = yield from self._resolve_parent(parent_id)
        ids = [r["id"] for r in rows if not r["id"].startswith(OVERLAY_PREFIX)]
        taken = {r["id"] for r in (yield self._q(sql.STORED_IDS, ids=ids))} if ids else set()
        results: list[tuple[bool, str | None]] = []
        new: list[dict[str, Any]] = []
        for row in rows:
            message_id = row["id"]
            if message_id.startswith(OVERLAY_PREFIX):
                results.append((False, None))
                parent = yield from self._overlay_end(message_id, parent)
            elif message_id in taken:
                results.append((False, None))
                parent = message_id
            else:
                new.append({**row, "parent": parent})
                results.append((True, parent))
                taken.add(message_id)
                parent = message_id
        if new:
            yield Many(sql.INSERT, new)
            yield self._q(sql.SET_ACTIVE_LEAF, leaf=new[-1]["id"])
            depth = yield from self._one(sql.DEPTH, id=new[-1]["id"])
            yield from _keep_statistics(len(new), depth)
        return results

    def _overlay_end(self, overlay_id: str, current: str | None) -> Operation[str | None]:
        """Where a chain goes on after ``overlay_id``: the last message its compaction covers, else ``current``."""
        end = yield from self._one(sql.COMPACTION_END, id=overlay_id[len(OVERLAY_PREFIX) :])
        if end is not None and (yield from self._one(sql.GET, id=end)) is not None:
            return end
        return current

    async def update(
        self, message_id: str, role: str, content: str, text: str, *, tokens: int = 0, tools: str = ""
    ) -> bool:
        """Replace a stored message's role, content, searched text and token count.

        Returns ``False`` (and writes nothing) when ``message_id`` is not stored.
        """
        if lookup_key(message_id, "message_id") is None:
            return False
        row = self._row(message_id, role, content, text, tools, tokens)
        size = utf8_size(row["content"], "content")

        def op() -> Operation[bool]:
            yield self._q(sql.LOCK)
            own = yield self._q(sql.OWN, id=row["id"])
            if not own:
                return False
            yield Query(sql.UPDATE, row)
            moved = {"bytes": size - own[0]["bytes"], "tokens": row["tokens"] - own[0]["tokens"]}
            if moved["bytes"] or moved["tokens"]:
                yield self._q(sql.SHIFT_SUBTREE, id=row["id"], seq=own[0]["seq"], depth=0, **moved)
            return True

        return await self._write(op())

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

        def op() -> Operation[list[str]]:
            yield self._q(sql.LOCK)
            deleted, moved = [], []
            for message_id in ids:
                if not (yield self._q(sql.OWN, id=message_id)):
                    continue
                moved.extend(row["id"] for row in (yield self._q(sql.DELETE, id=message_id)))
                deleted.append(message_id)
            # the re-attached subtrees get their places again, once (depths, totals, jumps)
            gone = set(deleted)
            yield from place_subtrees(self.session_id, [i for i in dict.fromkeys(moved) if i not in gone])
            if deleted and (yield from self._one(sql.ACTIVE_LEAF)) is None:
                yield self._q(sql.DROP_ACTIVE_LEAF)
            return deleted

        return await self._write(op()) if ids else []

    async def clear(self) -> None:
        """Delete every message and compaction of the session and its active leaf, in one statement."""

        def op() -> Operation[None]:
            yield self._q(sql.LOCK)
            yield self._q(sql.CLEAR)

        await self._write(op())

    async def add_compaction(self, compaction_id: str, summary: str, from_id: str, to_id: str) -> CompactionRow:
        """Store a compaction row; returns it with its ``seq`` and ``created_at``.

        The ends are not checked: an overlay whose ends are not both on a
        path is ignored when that path is read.
        """
        params = {
            "id": check_text(compaction_id, "compaction_id"),
            "summary": check_text(summary, "summary", max_bytes=self.max_value_bytes),
            "from": check_text(from_id, "from_id"),
            "to": check_text(to_id, "to_id"),
        }
        [row] = await self._write(self._rows(sql.ADD_COMPACTION, **params))
        return _compaction(row)


    # -- per-session values (assistant_config) ----------------------------------------------

    async def get_config(self, key: str) -> str | None:
        """The session's ``assistant_config`` value ``key`` (e.g. ``loaded_skills``), or ``None``."""
        return await self._read(self._one(sql.GET_CONFIG, key=check_text(key, "key")))

    async def set_config(self, key: str, value: str) -> None:
        """Insert or replace the session's value ``key``."""
        params = {"key": check_text(key, "key"), "value": check_text(value, "value", max_bytes=self.max_value_bytes)}
        await self._write(self._rows(sql.SET_CONFIG, **params))

    async def delete_config(self, key: str) -> None:
        """Delete the session's value ``key`` (nothing when there is none)."""
        await self._write(self._rows(sql.DELETE_CONFIG, key=check_text(key, "key")))

#: Session depths from which a write checks the table's planner statistics (64, 128, 256, ...).
CHECK_STATISTICS_FROM = 64


def _keep_statistics(inserted: int, depth: int) -> Operation[None]:
    """``ANALYZE assistant_messages`` when the statistics are far behind a session that grew.

    Statistics taken while the table was (nearly) empty -- or none at all --
    make every index led by ``session_id`` look as good as the primary key,
    and the planner may then find each message by scanning its whole
    session: a path walk becomes O(n^2) (9 s for a 10,000-message path
    instead of 40 ms; 3 ms instead of 0.4 ms at 100). So a write whose
    ``inserted`` rows brought the session past a power of two from
    :data:`CHECK_STATISTICS_FROM` on (``depth`` is its last row's) reads the
    table's row estimate -- one catalog row -- and, when it is under four
    times that depth, analyzes the table in the same transaction (ANALYZE
    counts the transaction's own rows; the new statistics appear with the
    commit; it samples a bounded number of rows, ~20 ms here). Autovacuum
    keeps them current otherwise.
    """
    if depth is None or depth < CHECK_STATISTICS_FROM:
        return
    crossed = 1 << (depth.bit_length() - 1)  # the power of two at or below depth
    if crossed <= depth - inserted:
        return
    [row] = yield Query(sql.RELTUPLES)
    if row["reltuples"] < 4 * depth:
        yield Query(sql.ANALYZE)
