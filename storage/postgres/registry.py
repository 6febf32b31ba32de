"""The session registry (``assistant_sessions``) and the cross-session search in Postgres.

:class:`PostgresRegistry` is the async twin of :mod:`storage.registry` (the
SQLite functions behind ``actors.SessionManager``): both run the operations
of :mod:`storage.tree.registry` (the registry's rules, written once), here
in the statements of :class:`PostgresRegistryDialect`. The same rows --
dicts with the spec's columns :data:`storage.tree.registry.SESSION_COLUMNS`,
times as UTC ``YYYY-MM-DD HH:MM:SS.SSS`` text -- and the same rules:

* :meth:`~PostgresRegistry.list_sessions` lists the most recently updated
  session first; every write that sets ``updated_at`` (creation included)
  takes the next ``updated_seq`` from a sequence, so sessions touched
  within one millisecond list in the order of those writes, the later
  first (docs/deviations.md #2);
* :meth:`~PostgresRegistry.delete_session` removes everything the session
  owns -- messages, compactions, ``assistant_config`` rows, its catalog row
  (:mod:`storage.postgres.catalog`), the block rows
  named ``<something>_<session id>`` (auto-wired blocks, the cached
  prompt) -- and its registry row, in one transaction (docs/deviations.md #15);
* :meth:`~PostgresRegistry.search_messages` looks only at messages of
  registered sessions, with the one query syntax (docs/deviations.md #9-#11; how
  terms match: :mod:`storage.postgres.search`).

:meth:`~PostgresRegistry.insert_session` can end another session and store
the new session's first messages in the same transaction, which is how
``SessionManager.fork`` and ``compact_and_split`` stay all-or-nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..fts import ParsedQuery
from ..tree import postgres as POSTGRES
from ..tree import registry as rules
from ..tree import steps as tree
from ..tree.postgres import NOW_MS, pg, stamp
from ..tree.registry import SESSION_COLUMNS
from ..tree.rows import NewMessage
from .connection import Operation, Query, on_postgres, runner_for
from .messages import check_messages
from .search import match
from .values import MAX_VALUE_BYTES, check_int, check_optional_text, check_text

T = TypeVar("T")

#: The sequence numbering registry writes (see the module docstring).
UPDATED_SEQ = "assistant_sessions_updated_seq"

_COLUMNS = ", ".join(
    stamp(name) + f" AS {name}" if name in ("created_at", "updated_at") else name for name in SESSION_COLUMNS
)
_TOUCH = f"updated_at = {NOW_MS}, updated_seq = nextval('{UPDATED_SEQ}')"
_GET = f"SELECT {_COLUMNS} FROM assistant_sessions WHERE id = %(id)s"
_DELETE_SESSION = pg("""
WITH messages AS (DELETE FROM assistant_messages WHERE session_id = %(id)s),
compactions AS (DELETE FROM assistant_compactions WHERE session_id = %(id)s),
config AS (DELETE FROM assistant_config WHERE session_id = %(id)s),
catalog AS (DELETE FROM durable_sessions_catalog WHERE session_id = %(id)s),
blocks AS (DELETE FROM cf_agents_context_blocks WHERE length(label) > %(n)s AND right(label, %(n)s) = %(suffix)s)
DELETE FROM assistant_sessions WHERE id = %(id)s RETURNING id
""", "id", "n", "suffix")
_SEARCH = f"""
SELECT m.id, m.role, m.text_content AS content, {stamp('m.created_at')} AS created_at, m.session_id
FROM assistant_messages AS m
WHERE EXISTS (SELECT 1 FROM assistant_sessions AS r WHERE r.id = m.session_id) AND {{where}}
ORDER BY {{rank}} DESC, m.seq LIMIT %(limit)s
"""

Row = dict[str, Any]


class PostgresRegistryDialect:
    """The Postgres :class:`~storage.tree.registry.RegistryDialect`."""

    #: The cross-session search (``{where}`` and ``{rank}`` from :func:`storage.postgres.search.match`).
    SEARCH = _SEARCH

    GET = pg(_GET, "id")
    GET_FOR_UPDATE = pg(_GET + " FOR UPDATE", "id")
    EXISTS = pg("SELECT 1 AS found FROM assistant_sessions WHERE id = %(id)s", "id")
    LIST = pg(f"SELECT {_COLUMNS} FROM assistant_sessions ORDER BY updated_at DESC, updated_seq DESC")
    COUNT = pg("SELECT count(*) AS n FROM assistant_sessions")
    INSERT = pg(f"""
INSERT INTO assistant_sessions (id, name, parent_session_id, model, source, created_at, updated_at, updated_seq)
VALUES (%(id)s, %(name)s, %(parent)s, %(model)s, %(source)s, {NOW_MS}, {NOW_MS}, nextval('{UPDATED_SEQ}'))
RETURNING {_COLUMNS}
""", "id", "name", "parent", "model", "source")
    TOUCH = pg(f"UPDATE assistant_sessions SET {_TOUCH} WHERE id = %(id)s RETURNING id", "id")
    RENAME = pg(f"UPDATE assistant_sessions SET name = %(name)s, {_TOUCH} WHERE id = %(id)s RETURNING {_COLUMNS}",
                "id", "name")
    END = pg(f"UPDATE assistant_sessions SET end_reason = %(reason)s, {_TOUCH} WHERE id = %(id)s RETURNING {_COLUMNS}",
             "id", "reason")
    ADD_USAGE = pg(f"""
UPDATE assistant_sessions SET input_tokens = input_tokens + %(input)s, output_tokens = output_tokens + %(output)s,
    estimated_cost = estimated_cost + %(cost)s, {_TOUCH}
WHERE id = %(id)s RETURNING {_COLUMNS}
""", "id", "input", "output", "cost")

    @staticmethod
    def delete_rows(session_id: str) -> tree.Operation[None]:
        """Everything the session owns and its row, in one statement."""
        suffix = rules.block_suffix(session_id)
        yield _DELETE_SESSION, (session_id, len(suffix), suffix)


_DIALECT = PostgresRegistryDialect()

#: What an owner may be: it is written into the statements as a literal (see :class:`OwnedRegistryDialect`).
_OWNER = re.compile(r"[0-9A-Za-z_.:-]{1,128}")


class OwnedRegistryDialect(PostgresRegistryDialect):
    """The rows of one owner (``assistant_sessions.owner``, schema version 3): a manager actor's registry.

    Every statement of :class:`PostgresRegistryDialect` restricted to the
    rows whose ``owner`` is ``owner``, and inserts setting it; the
    cross-session search looks only at that owner's sessions. Session ids
    stay unique in the whole table (random UUIDs).

    Raises:
        ValueError: ``owner`` is not 1-128 characters of ``[0-9A-Za-z_.:-]``.
    """

    def __init__(self, owner: str) -> None:
        if not isinstance(owner, str) or not _OWNER.fullmatch(owner):
            raise ValueError(f"a registry owner is 1-128 characters of [0-9A-Za-z_.:-], not {owner!r}")
        mine = f"owner = '{owner}'"
        self.owner = owner
        self.GET = pg(f"{_GET} AND {mine}", "id")
        self.GET_FOR_UPDATE = pg(f"{_GET} AND {mine} FOR UPDATE", "id")
        self.EXISTS = pg(f"SELECT 1 AS found FROM assistant_sessions WHERE id = %(id)s AND {mine}", "id")
        self.LIST = pg(f"SELECT {_COLUMNS} FROM assistant_sessions WHERE {mine} "
                       "ORDER BY updated_at DESC, updated_seq DESC")
        self.COUNT = pg(f"SELECT count(*) AS n FROM assistant_sessions WHERE {mine}")
        self.INSERT = pg(f"""
INSERT INTO assistant_sessions (id, name, parent_session_id, model, source, created_at, updated_at, updated_seq,
                                owner)
VALUES (%(id)s, %(name)s, %(parent)s, %(model)s, %(source)s, {NOW_MS}, {NOW_MS}, nextval('{UPDATED_SEQ}'),
        '{owner}')
RETURNING {_COLUMNS}
""", "id", "name", "parent", "model", "source")
        where = f"WHERE id = %(id)s AND {mine} RETURNING"
        self.TOUCH = pg(_retarget(PostgresRegistryDialect.TOUCH.sql, where), "id")
        self.RENAME = pg(_retarget(PostgresRegistryDialect.RENAME.sql, where), "id", "name")
        self.END = pg(_retarget(PostgresRegistryDialect.END.sql, where), "id", "reason")
        self.ADD_USAGE = pg(_retarget(PostgresRegistryDialect.ADD_USAGE.sql, where), "id", "input", "output", "cost")
        self.SEARCH = _SEARCH.replace("WHERE r.id = m.session_id", f"WHERE r.id = m.session_id AND r.{mine}")


def _retarget(sql: str, where: str) -> str:
    """``sql`` with its ``WHERE id = %(id)s RETURNING`` replaced by ``where``."""
    old = "WHERE id = %(id)s RETURNING"
    if sql.count(old) != 1:
        raise AssertionError(f"cannot scope {sql!r}")
    return sql.replace(old, where)


class PostgresRegistry:
    """The ``assistant_sessions`` rows of one Postgres database.

    Args:
        conn: a ``psycopg.Connection``, a ``psycopg_pool.ConnectionPool``, a
            :class:`~storage.postgres.PostgresStorage`, or an object with
            ``execute(query, args)`` (see :mod:`storage.postgres.connection`).
        owner: ``None``: every row of the database; else only the rows of
            this owner (:class:`OwnedRegistryDialect`; e.g. a manager actor's hex id).

    Raises:
        ValueError: ``owner`` is not 1-128 characters of ``[0-9A-Za-z_.:-]``.

    Every method is ``async``; writes are one transaction each. Raises, besides
    what a method lists: :class:`~common.errors.InvalidInputError` (a value
    Postgres cannot store, nothing sent), :class:`~common.errors.StorageUnavailableError`
    (no connection; nothing committed), :class:`~common.errors.DatabaseError`.
    """

    def __init__(self, conn: Any, *, owner: str | None = None) -> None:
        self.conn = conn
        self.owner = owner
        self._runner = runner_for(conn)
        self._dialect = _DIALECT if owner is None else OwnedRegistryDialect(owner)

    async def _read(self, op: tree.Operation[T]) -> T:
        return await self._runner.run(on_postgres(op), write=False)

    async def _write(self, op: tree.Operation[T]) -> T:
        return await self._runner.run(on_postgres(op), write=True)

    # -- reads ----------------------------------------------------------------------

    async def get_session(self, session_id: str) -> Row | None:
        """The registry row of ``session_id``, or ``None``."""
        return await self._read(rules.get_session(self._dialect, check_text(session_id, "session_id")))

    async def session_exists(self, session_id: str) -> bool:
        """``True`` when ``session_id`` has a registry row."""
        return await self._read(rules.session_exists(self._dialect, check_text(session_id, "session_id")))

    async def list_sessions(self) -> list[Row]:
        """Every registry row, most recently updated first (ties: the later write first)."""
        return await self._read(rules.list_sessions(self._dialect))

    async def count_sessions(self) -> int:
        """Number of registered sessions."""
        return await self._read(rules.count_sessions(self._dialect))

    async def search_messages(self, query: ParsedQuery, limit: int) -> list[Row]:
        """Stored messages of registered sessions matching ``query``, best first (ties: oldest first).

        Returns:
            Up to ``limit`` hits ``{"id", "role", "content", "created_at",
            "session_id"}``: ``content`` the message's searched text parts
            (``""`` for a message found through its tool calls alone).
        """
        found = match(query)
        sql = self._dialect.SEARCH.format(where=found.where, rank=found.rank)
        params = {"limit": check_int(limit, "limit"), **found.params}
        return [dict(row) for row in await self._runner.run(_rows(sql, params), write=False)]

    # -- writes ---------------------------------------------------------------------

    async def insert_session(
        self,
        session_id: str,
        name: str,
        *,
        parent_session_id: str | None = None,
        model: str | None = None,
        source: str | None = None,
        messages: Sequence[NewMessage] = (),
        end: tuple[str, str] | None = None,
        max_value_bytes: int | None = None,
    ) -> Row:
        """Register ``session_id`` (zero usage, both times now) and return its row, in one transaction.

        Args:
            messages: stored in the new session as one chain from a new root
                (``PostgresSessionProvider.append_chain`` rules), in the same
                transaction.
            end: ``(other session id, reason)``: set that session's
                ``end_reason`` (and touch it) in the same transaction.
            max_value_bytes: the message value limit (default: the provider's).

        Raises:
            DatabaseError: ``session_id`` is already registered (nothing written).
        """
        checked = (
            check_text(session_id, "session_id"),
            check_text(name, "name"),
            check_optional_text(parent_session_id, "parent_session_id"),
            check_optional_text(model, "model"),
            check_optional_text(source, "source"),
        )
        rows = check_messages(messages, MAX_VALUE_BYTES if max_value_bytes is None else max_value_bytes)
        if end is not None:
            end = (check_text(end[0], "session_id"), check_text(end[1], "reason"))
        return await self._write(rules.insert_session(self._dialect, POSTGRES, *checked, rows, end))

    async def touch_session(self, session_id: str) -> bool:
        """Set ``updated_at`` to now (and take the next ``updated_seq``); ``False`` if unknown."""
        return await self._write(rules.touch_session(self._dialect, check_text(session_id, "session_id")))

    async def rename_session(self, session_id: str, name: str) -> Row | None:
        """Set the name and touch the row; the new row, ``None`` if unknown."""
        session_id, name = check_text(session_id, "session_id"), check_text(name, "name")
        return await self._write(rules.rename_session(self._dialect, session_id, name))

    async def end_session(self, session_id: str, reason: str) -> Row | None:
        """Set ``end_reason`` and touch the row; the new row, ``None`` if unknown."""
        session_id, reason = check_text(session_id, "session_id"), check_text(reason, "reason")
        return await self._write(rules.end_session(self._dialect, session_id, reason))

    async def add_usage(
        self,
        session_id: str,
        input_tokens: int,
        output_tokens: int,
        cost: float,
        *,
        check: Callable[[Row], None] | None = None,
    ) -> Row | None:
        """Add to the three usage counters and touch the row; the new row, ``None`` if unknown.

        ``check(row)`` sees the current row (locked until the commit) first
        and may raise to write nothing (e.g. a counter that would overflow).
        """
        op = rules.add_usage(
            self._dialect,
            check_text(session_id, "session_id"),
            check_int(input_tokens, "input_tokens"),
            check_int(output_tokens, "output_tokens"),
            float(cost),
            check,
        )
        return await self._write(op)

    async def delete_session(self, session_id: str) -> bool:
        """Delete everything the session owns and its row, in one transaction (see the module docstring).

        Returns ``False`` (and deletes nothing) when ``session_id`` is not registered.
        """
        return await self._write(rules.delete_session(self._dialect, check_text(session_id, "session_id")))


def _rows(sql: str, params: dict[str, Any]) -> Operation[list[Row]]:
    return (yield Query(sql, params))
