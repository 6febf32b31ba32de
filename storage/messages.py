"""One session's message tree in a SQLite file: :class:`MessageStore`.

:class:`MessageStore` is the synchronous storage half of ``actors.Session``.
It speaks in stored text (message JSON, indexed text) and never parses or
validates messages; the actor layer does that. The rules of the tree
(parents, overlay ids, places, path walks, windows, token totals) are the
operations of :mod:`storage.tree`, written once for both databases; this
store runs them on apsw with :func:`storage.tree.steps.drive`, in the
statements of :mod:`storage.tree.sqlite` (whose docstring gives the
invariants the SQL relies on). Every write runs in one
``storage.transaction()`` (a savepoint when the caller already holds a
transaction), with no ``await`` in it, so a failed write leaves nothing
behind and no other turn of the actor runs between a write and its commit.

:class:`storage.postgres.PostgresSessionProvider` offers the same methods,
``async``, over the same operations.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar, cast

import apsw

from . import fts
from .carried import CarriedLeaf, JumpNode, exclusive
from .context import delete_config, read_config, write_config
from .errors import SearchQueryError
from .schema import COMPACTIONS_TABLE, MESSAGES_TABLE, VECTORS_TABLE, create_on_first_use, table_exists
from .shapes import LATEST_LEAF, OVERLAY_PREFIX, _LatestLeaf
from .sqlite import SqlStorage
from .tree import reads, writes
from .tree import sqlite as SQLITE
from .tree.places import Link, ancestor_at_depth, token_places
from .tree.reads import check_chunk_limits
from .tree.rows import (
    PATH_CHUNK_BYTES,
    PATH_CHUNK_ROWS,
    CompactionRow,
    NewMessage,
    PathTokens,
    SearchRow,
    TokenPlace,
    to_iso8601,
)
from .tree.search import search_query, search_records
from .tree.sqlite import FTS_TABLE, TEXT_OF_CONTENT
from .tree.steps import Dialect, Operation, drive

__all__ = [
    "FTS_TABLE",
    "LATEST_LEAF",
    "OVERLAY_PREFIX",
    "PATH_CHUNK_BYTES",
    "PATH_CHUNK_ROWS",
    "TEXT_OF_CONTENT",
    "CompactionRow",
    "MessageStore",
    "NewMessage",
    "PathTokens",
    "SearchRow",
    "TokenPlace",
    "to_iso8601",
]

T = TypeVar("T")

_ANY_COMPACTION = "SELECT EXISTS (SELECT 1 FROM assistant_compactions WHERE session_id = ?1)"
#: What a message write makes when the file has none yet (storage.schema.ON_FIRST_USE).
_MESSAGE_TABLES = (MESSAGES_TABLE, FTS_TABLE)


class _Uncompacted:
    """:mod:`storage.tree.sqlite` for a file without ``assistant_compactions`` (made by the first
    compaction, ``storage.schema.ON_FIRST_USE``): its compaction reads name no table and find no
    row, and clearing a session deletes no compaction. Everything else is the module's."""

    # Each takes the parameters of the statement it stands for (apsw checks their number).
    COMPACTIONS = "SELECT NULL, NULL, NULL, NULL, NULL, NULL WHERE ?1 IS NULL AND 0"
    COMPACTION_END = "SELECT NULL WHERE ?1 IS NULL AND ?2 IS NULL AND 0"
    LATEST_TOKENS = SQLITE.LATEST_TOKENS.replace(
        "EXISTS (SELECT 1 FROM assistant_compactions WHERE session_id = ?1)", "0")

    def __getattr__(self, name: str) -> Any:
        return getattr(SQLITE, name)

    @staticmethod
    def clear(s: str) -> Operation[None]:
        """:func:`storage.tree.sqlite.clear` without its compaction step."""
        op = SQLITE.clear(s)
        rows: list[Any] = []
        try:
            step = next(op)
            while True:
                rows = [] if isinstance(step, tuple) and step[0] is SQLITE.CLEAR_COMPACTIONS else (yield step)
                step = op.send(rows)
        except StopIteration:
            return


if "assistant_compactions" in _Uncompacted.LATEST_TOKENS:  # storage/tree/sqlite.py changed it: follow it here
    raise ImportError("storage.messages: _Uncompacted.LATEST_TOKENS still reads assistant_compactions")
_UNCOMPACTED = cast(Dialect, _Uncompacted())


def tree_dialect(con: apsw.Connection) -> Dialect:
    """The dialect of the tree's statements on ``con``'s file: :mod:`storage.tree.sqlite`, or the
    same without compaction reads while the file has no compaction table (a read of it would fail)."""
    return SQLITE if table_exists(con, COMPACTIONS_TABLE) else _UNCOMPACTED


class MessageStore:
    """The rows of one session (``session_id``) in one :class:`SqlStorage`.

    Cheap to create. Besides its two arguments it only carries the latest
    leaf's place from its own last append (:mod:`storage.carried`), trusted
    while nothing else wrote the file, so any number of stores (and
    processes reopening the file) see the same tree.
    """

    def __init__(self, storage: SqlStorage, session_id: str = "") -> None:
        self.storage = storage
        self.session_id = session_id
        self._carried: CarriedLeaf | None = None
        self._exclusive: bool | None = None
        self._made_on: apsw.Connection | None = None  # the connection whose file holds the message tables

    def __repr__(self) -> str:
        return f"MessageStore(session_id={self.session_id!r})"

    def for_session(self, session_id: str) -> MessageStore:
        """The store of session ``session_id`` in the same file."""
        return MessageStore(self.storage, session_id)

    def _run(self, op: Operation[T]) -> T:
        return drive(self.storage.connection, op)

    def _read(self, op: Operation[T], empty: T) -> T:
        """``op``'s answer; ``empty`` when the file has no message table (made by the first message
        written, ``storage.schema.ON_FIRST_USE``): no message, nothing read, nothing made."""
        con = self.storage.connection
        if table_exists(con, MESSAGES_TABLE):
            return drive(con, op)
        op.close()
        return empty

    def _has_messages(self) -> bool:
        return table_exists(self.storage.connection, MESSAGES_TABLE)

    def _dialect(self) -> Dialect:
        return tree_dialect(self.storage.connection)

    def _write(self, op: Operation[T], tables: tuple[str, ...] = _MESSAGE_TABLES) -> T:
        """Run ``op`` in one transaction, making first the ``tables`` of ``storage.schema.ON_FIRST_USE``
        it writes that the file lacks (by default the message table and its text indexes)."""
        con = self.storage.connection
        # Asked outside the transaction: once seen committed a table stays. The message tables, the
        # usual case (every append), are remembered per connection here: no schema-cache lookups.
        usual = tables is _MESSAGE_TABLES
        made = usual and con is self._made_on
        if not made:
            made = all(table_exists(con, table) for table in tables)
        with con:  # storage.transaction(), without a generator's frame on every write
            if not made:
                for table in tables:
                    create_on_first_use(con, table)
            result = drive(con, op)
        if made and usual and con.get_autocommit():
            self._made_on = con
        return result

    def _carried_leaf(self) -> CarriedLeaf | None:
        """The carried latest leaf while the file is as this store's last append left it, else ``None``."""
        carried = self._carried
        if carried is not None and carried.version == self.storage.connection.data_version():
            return carried
        self._carried = None
        return None

    def _depth_jump(self, seq: int) -> tuple[int, int]:
        rows: list[tuple[Any, ...]] = self.storage.connection.execute(SQLITE.DEPTH_JUMP, (seq,)).fetchall()
        [(depth, jump)] = rows
        return depth, jump

    def _can_carry(self) -> bool:
        """Only a connection holding its file exclusively sees every commit to it in its data version early."""
        if self._exclusive is None:
            self._exclusive = exclusive(self.storage.connection)
        return self._exclusive

    # -- reads -------------------------------------------------------------

    def get(self, message_id: str) -> str | None:
        """The stored JSON of ``message_id``, or ``None``."""
        return self._read(reads.get(SQLITE, self.session_id, message_id), None)

    def exists(self, message_id: str) -> bool:
        """``True`` when ``message_id`` is stored in this session."""
        return self._read(reads.exists(SQLITE, self.session_id, message_id), False)

    def count(self) -> int:
        """Number of messages stored in this session."""
        return self._read(reads.count(SQLITE, self.session_id), 0)

    def latest_leaf(self) -> str | None:
        """Id of the latest leaf (the session's newest message, :mod:`storage.tree.sqlite`); ``None`` if empty."""
        carried = self._carried_leaf()
        if carried is not None:
            return carried.leaf_id
        return self._read(reads.latest_leaf(SQLITE, self.session_id), None)

    def path_contents(self, leaf_id: str) -> list[str]:
        """Stored JSON of every message from the root down to ``leaf_id`` (``[]`` if unknown)."""
        return self._read(reads.path_contents(SQLITE, self.session_id, leaf_id), [])

    def path_json(self, leaf_id: str) -> tuple[str, int] | None:
        """The path root <- ``leaf_id`` as one JSON array text, **leaf first**, and its length.

        Holds every row of the path whose content is JSON text (SQLite's
        ``json_valid``); other rows are left out. ``("[]", 0)`` for an
        unknown leaf. ``None`` when the array would exceed SQLite's string
        limit (1e9 bytes): read :meth:`path_contents` instead. One
        statement: a rowid lookup per message, one string for all of them.
        """
        try:
            return self._read(reads.path_json(SQLITE, self.session_id, leaf_id), ("[]", 0))
        except apsw.TooBigError:
            return None

    def path_chunks(
        self, leaf_id: str, *, max_bytes: int = PATH_CHUNK_BYTES, max_rows: int = PATH_CHUNK_ROWS
    ) -> Iterator[list[Any]]:
        """The stored JSON of the path ``leaf_id`` -> root in chunks, **leaf first** (chunk
        after chunk, and within each), for reads whose memory must not grow with the path.

        A chunk holds at most ``max_rows`` rows and ``max_bytes`` UTF-8 bytes
        of ``content``, except that a row larger than ``max_bytes`` comes alone.
        Values are as stored (a damaged row may hold a BLOB or text that is
        not JSON). Each chunk is one statement run to its end before it is
        yielded, so no statement stays open between chunks; the walk follows
        the rules of every path read here (``seq`` falls at each step, no
        depth cap). An unknown leaf yields nothing.

        Raises:
            InvalidInputError: ``max_bytes`` or ``max_rows`` is not an int >= 1.
            apsw.Error: SQLite failed; the chunks yielded before stay valid.
        """
        check_chunk_limits(max_bytes, max_rows)
        if not self._has_messages():
            return
        after: tuple[int, Any] | None = None
        while True:
            rows, after = self._run(reads.chunk(SQLITE, self.session_id, leaf_id, after, max_rows, max_bytes))
            if rows:
                yield rows
            if after is None:
                return

    def path_stats(self, leaf_id: str) -> list[tuple[str, str, int]]:
        """Root -> ``leaf_id`` as ``(id, role, bytes)``; ``bytes`` is the UTF-8 size of the JSON."""
        return self._read(reads.path_stats(SQLITE, self.session_id, leaf_id), [])

    def path_ids(self, leaf_id: str) -> list[str]:
        """Ids of the messages root -> ``leaf_id`` (``[]`` if unknown); no content is read."""
        return [row[0] for row in self.path_stats(leaf_id)]

    def place(self, message_id: str) -> tuple[int, int] | None:
        """``(depth, path_bytes)`` of a stored message: its path's row count and JSON bytes; else ``None``."""
        return self._read(reads.place(SQLITE, self.session_id, message_id), None)

    def token_places(self, message_ids: Iterable[str]) -> dict[str, TokenPlace]:
        """:class:`TokenPlace` of each stored id among ``message_ids`` (unknown ids are left out)."""
        return self._read(token_places(SQLITE, self.session_id, message_ids), {})

    def ancestor_at_depth(self, seq: int, depth: int) -> int | None:
        """``seq`` of the message at ``depth`` on the path root -> row ``seq`` (itself at its own
        depth); ``None`` when ``depth`` is deeper than the row or below 1. O(log depth) reads."""
        return self._read(ancestor_at_depth(SQLITE, self.session_id, seq, depth), None)

    def depth_on_path(self, message_id: str, leaf_id: str) -> int | None:
        """The depth of ``message_id`` (the root's is 1) when it lies on the path root -> ``leaf_id``
        (``leaf_id`` itself included), else ``None``. Two row reads and O(log depth) climbs."""
        return self._read(reads.depth_on_path(SQLITE, self.session_id, message_id, leaf_id), None)

    def path_tokens(self, leaf_id: str) -> PathTokens | None:
        """Token total of the path root -> ``leaf_id`` and the overlays that apply on it
        (:func:`storage.tree.reads.path_tokens`); ``None`` for an unknown leaf."""
        return self._read(reads.path_tokens(self._dialect(), self.session_id, leaf_id), None)

    def latest_path_tokens(self) -> PathTokens | None:
        """:meth:`path_tokens` of the latest leaf; ``None`` in an empty session.

        One statement when the session has no compaction row (then no
        overlay applies): what the token estimate after each append reads.
        No statement after this store's own append when nothing else wrote since
        and the session is known to have no compaction row.
        """
        carried = self._carried_leaf()
        if carried is not None:
            if carried.compacted is None:
                carried.compacted = table_exists(self.storage.connection, COMPACTIONS_TABLE) and bool(
                    self.storage.scalar(_ANY_COMPACTION, self.session_id))
            if not carried.compacted:
                return PathTokens(carried.path_tokens, ())
        return self._read(reads.latest_path_tokens(self._dialect(), self.session_id), None)

    def window(self, leaf_id: str, max_bytes: int, min_rows: int) -> tuple[list[str], bool]:
        """The newest messages of the path to ``leaf_id`` that fit ``max_bytes`` of JSON.

        The window holds the leaf, then grows toward the root while it has
        fewer than ``min_rows`` rows or the next row still fits. Reads only
        the window's rows.

        Returns:
            ``(contents, truncated)``: stored JSON root-side first (``[]`` for
            an unknown leaf) and whether older rows were left out.
        """
        return self._read(reads.window(SQLITE, self.session_id, leaf_id, max_bytes, min_rows), ([], False))

    def children(self, message_id: str) -> list[str]:
        """Stored JSON of the children of ``message_id``, oldest first (``created_at``, then ``seq``)."""
        return self._read(reads.children(SQLITE, self.session_id, message_id), [])

    def compactions(self) -> list[CompactionRow]:
        """Every compaction row of the session, oldest first (``created_at``, then ``seq``)."""
        if not table_exists(self.storage.connection, COMPACTIONS_TABLE):
            return []  # no compaction was ever stored: no table
        return self._run(reads.compactions(SQLITE, self.session_id))

    def search(self, query: fts.ParsedQuery, limit: int) -> list[SearchRow]:
        """Messages whose indexed text matches ``query``: best bm25 rank first, ties oldest first.

        Ranks the whole file's matches and keeps the best ``limit``; only when
        another session's messages are among them does it rank again, joined
        to this session's rows. A hit's ``content`` is the message's text parts.

        Raises:
            SearchQueryError: SQLite failed (never returned as an empty list).
        """
        if not (table_exists(self.storage.connection, FTS_TABLE) and self._has_messages()):
            return []  # nothing was ever written: no index, no hit
        try:
            return self._run(SQLITE.search(self.session_id, query, limit))
        except apsw.Error as exc:
            raise SearchQueryError(f"message search failed: {exc}") from exc

    def search_messages(self, query: str, limit: int = 20) -> list[dict[str, str]]:
        """The spec's ``searchMessages``: :meth:`search` of the user text ``query``.

        Returns up to ``limit`` hits, best first, as ``{"id", "role",
        "content", "createdAt"}`` (ISO-8601 UTC with milliseconds); ``[]`` for
        a query with no searchable term (nothing is read) or ``limit`` 0.

        Raises:
            InvalidInputError: ``query`` is not a string or ``limit`` not an int >= 0.
            SearchQueryError: SQLite failed.
        """
        parsed = search_query(query, limit)
        return [] if parsed is None else search_records(self.search(parsed, limit))

    # -- writes ------------------------------------------------------------

    def append(
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
        """Insert a message (and its search text); being the newest, it is the latest leaf.

        Args:
            parent_id: :data:`LATEST_LEAF` -> the latest leaf (``None`` in an
                empty session); ``None`` -> a new root; an overlay id
                (``compaction_<id>``) -> the last message that compaction
                covers, or the latest leaf when there is no such compaction;
                any other id not stored in this session -> a root.
            text: the text to index (``content`` column).
            tokens: the message's estimated tokens (summed into ``path_tokens``).
            tools: tool names and inputs to index (``assistant_fts_tools``,
                with ``text``). With ``text`` and ``tools`` both ``""``
                nothing is indexed.

        Returns:
            ``(inserted, parent)``: ``(True, <the parent used>)``, or
            ``(False, None)`` when the id is already stored (nothing changes,
            the first content stays).
        """
        before = self._carried_leaf()
        latest: tuple[str, Link] | None = None
        above: tuple[JumpNode, ...] = ()
        if before is not None and parent_id is LATEST_LEAF:
            link, above = before.link(self._depth_jump)
            latest = (before.leaf_id, link)
        alone = self.storage.connection.get_autocommit()  # not inside a caller's transaction
        overlay = isinstance(parent_id, str) and parent_id.startswith(OVERLAY_PREFIX)  # may read a compaction
        row = self._write(writes.append_row(
            self._dialect() if overlay else SQLITE, self.session_id, message_id, role, content, text, tools, tokens, parent_id, latest
        ))
        if row is None:
            return False, None
        parent, _link, seq, place = row
        self._carried = None
        if alone and self._can_carry():  # committed: nothing can roll it back
            self._carried = CarriedLeaf.after_append(
                self.storage.connection.data_version(), message_id, seq, place, above,
                None if before is None else before.compacted,
            )
        return True, parent

    def append_chain(
        self, messages: Sequence[NewMessage], parent_id: str | None | _LatestLeaf = LATEST_LEAF
    ) -> list[tuple[bool, str | None]]:
        """Insert ``messages`` as a chain, in one transaction: all of them or none.

        The rules are :func:`storage.tree.writes.append_chain`'s (duplicates,
        overlay ids). Rows are written with ``executemany``; their ``seq`` and
        place columns are computed from the first parent's row, so the cost
        is one insert per message and per search row, whatever the history
        length. Any failure (e.g. a constraint) rolls the whole chain back.

        Returns:
            One ``(inserted, parent)`` per message, as :meth:`append` returns
            them: ``(True, <the parent used>)`` or ``(False, None)``.
        """
        if not messages:
            return []
        return self._write(writes.append_chain(self._dialect(), self.session_id, messages, parent_id))

    def update(
        self, message_id: str, role: str, content: str, text: str, *, tokens: int = 0, tools: str = ""
    ) -> bool:
        """Replace a stored message's role, content and token count and re-index it.

        ``text``, ``tokens`` and ``tools`` as in :meth:`append`. The path
        totals of the message and everything below it shift by the change.
        Returns ``False`` (and writes nothing) when ``message_id`` is not stored.
        """
        if not self._has_messages():
            return False  # no message was ever written: nothing to update, nothing made
        if table_exists(self.storage.connection, VECTORS_TABLE):
            from .embeddings import update_keeping_vectors  # (that module builds on this one)

            return update_keeping_vectors(self, message_id, role, content, text, tokens=tokens, tools=tools)
        return self._update_rows(message_id, role, content, text, tokens=tokens, tools=tools)

    def _update_rows(self, message_id: str, role: str, content: str, text: str, *, tokens: int = 0,
                    tools: str = "") -> bool:
        """:meth:`update` of the message's own rows only (no vector bookkeeping)."""
        return self._write(writes.update(SQLITE, self.session_id, message_id, role, content, text, tools, tokens))

    def delete(self, message_ids: Iterable[str]) -> list[str]:
        """Delete messages and their search rows; children move up to the deleted message's parent.

        Ids not stored are skipped. Deleting the latest leaf makes the newest
        message left the latest leaf. The places of everything below a
        deleted message are recomputed once, at the end: deleting a leaf
        costs O(1), deleting an inner message O(size of its subtree).
        Returns the ids deleted, in the order given, without repeats.
        """
        if not self._has_messages():
            return []  # no message was ever written: nothing to delete, nothing made
        if table_exists(self.storage.connection, VECTORS_TABLE):
            from .embeddings import delete_keeping_vectors  # (that module builds on this one)

            return delete_keeping_vectors(self, message_ids)
        return self._delete_rows(message_ids)

    def _delete_rows(self, message_ids: Iterable[str]) -> list[str]:
        """:meth:`delete` of the messages' own rows only (no vector bookkeeping)."""
        return self._write(writes.delete(SQLITE, self.session_id, message_ids))

    def clear(self) -> None:
        """Delete every message, compaction, search row and message vector of the session, in one
        transaction (the tables that do not exist hold none: nothing is made)."""
        with self.storage.transaction():
            if self._has_messages():
                self._write(writes.clear(self._dialect(), self.session_id))
            elif table_exists(self.storage.connection, COMPACTIONS_TABLE):
                self.storage.exec(SQLITE.CLEAR_COMPACTIONS, self.session_id)
            if table_exists(self.storage.connection, VECTORS_TABLE):
                from .embeddings import clear_vectors  # (that module builds on this one)

                clear_vectors(self.storage, self.session_id)

    def add_compaction(self, compaction_id: str, summary: str, from_id: str, to_id: str) -> CompactionRow:
        """Store a compaction row; returns it with its ``seq`` and ``created_at``."""
        return self._write(writes.add_compaction(SQLITE, self.session_id, compaction_id, summary, from_id, to_id),
                           (COMPACTIONS_TABLE,))

    # -- per-session values (assistant_config) -------------------------------

    def get_config(self, key: str) -> str | None:
        """The session's ``assistant_config`` value ``key`` (e.g. ``loaded_skills``), or ``None``."""
        return read_config(self.storage, self.session_id, key)

    def set_config(self, key: str, value: str) -> None:
        """Insert or replace the session's value ``key``."""
        write_config(self.storage, self.session_id, key, value)

    def delete_config(self, key: str) -> None:
        """Delete the session's value ``key`` (nothing when there is none)."""
        delete_config(self.storage, self.session_id, key)

