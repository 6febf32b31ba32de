"""The session registry's rules, written once for both databases.

A registry row (``assistant_sessions``) is a plain ``dict`` with the spec's
column names, in the order of :data:`SESSION_COLUMNS`; times are UTC text
with milliseconds (``YYYY-MM-DD HH:MM:SS.SSS``); the internal columns
``seq`` and ``updated_seq`` are never returned.

The functions here are operations (:mod:`storage.tree.steps`) on a
:class:`RegistryDialect`: :mod:`storage.registry` drives them on apsw (a
write inside ``storage.transaction()``), :class:`storage.postgres.PostgresRegistry`
on psycopg's worker thread (a write is one transaction). The rules:

* every write that sets ``updated_at`` (creation included) also takes the
  next ``updated_seq``, so :func:`list_sessions` lists sessions touched in
  the same millisecond in the order of those writes, the later first
  (docs/deviations.md #2);
* :func:`insert_session` can end another session and store the new
  session's first messages (one chain from a new root, the rules of
  :func:`storage.tree.writes.append_chain`) in the same transaction, which
  is how ``SessionManager.fork`` and ``compact_and_split`` stay
  all-or-nothing;
* :func:`delete_session` removes everything the session owns -- messages
  and their search rows, compactions, ``assistant_config`` rows, the
  context-block rows named ``<something>_<session id>`` (auto-wired blocks,
  the cached prompt) -- and its registry row (docs/deviations.md #15);
* the cross-session search looks only at messages of registered sessions
  (docs/deviations.md #11), with the one query syntax (#9, #10); how
  matches are found and ranked is each database's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from . import writes
from .rows import NewMessage
from .steps import Dialect, Operation, Rows

__all__ = [
    "SESSION_COLUMNS", "RegistryDialect", "add_usage", "count_sessions", "delete_session", "end_session",
    "get_session", "insert_session", "list_sessions", "rename_session", "session_exists", "touch_session",
]

#: Columns of a registry row, in the order rows are returned.
SESSION_COLUMNS = (
    "id",
    "name",
    "parent_session_id",
    "model",
    "source",
    "input_tokens",
    "output_tokens",
    "estimated_cost",
    "end_reason",
    "created_at",
    "updated_at",
)

Row = dict[str, Any]


class RegistryDialect(Protocol):
    """A database's registry statements and the steps that differ.

    Rows of ``GET``, ``GET_FOR_UPDATE`` (the row locked until the commit
    where the database locks rows), ``LIST`` (most recently updated first,
    ties: the later ``updated_seq`` first), ``INSERT``, ``RENAME``, ``END``
    and ``ADD_USAGE`` are the :data:`SESSION_COLUMNS`, in order. Arguments:
    ``GET``/``GET_FOR_UPDATE``/``EXISTS``/``TOUCH`` ``(id)``; ``LIST``,
    ``COUNT`` ``()``; ``INSERT (id, name, parent, model, source)``;
    ``RENAME (id, name)``; ``END (id, reason)``; ``ADD_USAGE (id, input,
    output, cost)``. ``TOUCH`` returns a row when the session exists.
    """

    GET: Any
    GET_FOR_UPDATE: Any
    EXISTS: Any
    LIST: Any
    COUNT: Any
    INSERT: Any
    TOUCH: Any
    RENAME: Any
    END: Any
    ADD_USAGE: Any

    def delete_rows(self, session_id: str) -> Operation[None]:
        """Delete everything ``session_id`` owns and its registry row (see the module docstring)."""
        ...


def block_suffix(session_id: str) -> str:
    """The end of the context-block labels a session owns (``<label>_<session id>``)."""
    return "_" + session_id


def _row(rows: Rows) -> Row | None:
    return dict(zip(SESSION_COLUMNS, rows[0])) if rows else None


def get_session(d: RegistryDialect, session_id: str) -> Operation[Row | None]:
    """The registry row of ``session_id``, or ``None``."""
    return _row((yield d.GET, (session_id,)))


def session_exists(d: RegistryDialect, session_id: str) -> Operation[bool]:
    """``True`` when ``session_id`` has a registry row."""
    return (yield d.EXISTS, (session_id,)) != []


def list_sessions(d: RegistryDialect) -> Operation[list[Row]]:
    """Every registry row, most recently updated first (see the module docstring)."""
    return [dict(zip(SESSION_COLUMNS, row)) for row in (yield d.LIST, ())]


def count_sessions(d: RegistryDialect) -> Operation[int]:
    """Number of registered sessions."""
    [(count,)] = yield d.COUNT, ()
    return int(count)


def insert_session(
    d: RegistryDialect,
    tree: Dialect,
    session_id: str,
    name: str,
    parent_session_id: str | None,
    model: str | None,
    source: str | None,
    messages: Sequence[NewMessage] = (),
    end: tuple[str, str] | None = None,
) -> Operation[Row]:
    """Register ``session_id`` (zero usage, no end reason, both times now) and return its row.

    ``end = (other session id, reason)`` first ends that session;
    ``messages`` are then stored as the new session's first chain (in
    ``tree``'s statements). The database refuses an id already registered.
    """
    if end is not None:
        yield d.END, end
    [inserted] = yield d.INSERT, (session_id, name, parent_session_id, model, source)
    if messages:
        yield from writes.append_chain(tree, session_id, messages, None)
    return dict(zip(SESSION_COLUMNS, inserted))


def touch_session(d: RegistryDialect, session_id: str) -> Operation[bool]:
    """Set ``updated_at`` to now (and take the next ``updated_seq``); ``False`` if unknown."""
    return (yield d.TOUCH, (session_id,)) != []


def rename_session(d: RegistryDialect, session_id: str, name: str) -> Operation[Row | None]:
    """Set the name and touch the row; the new row, ``None`` if unknown."""
    return _row((yield d.RENAME, (session_id, name)))


def end_session(d: RegistryDialect, session_id: str, reason: str) -> Operation[Row | None]:
    """Set ``end_reason`` and touch the row; the new row, ``None`` if unknown."""
    return _row((yield d.END, (session_id, reason)))


def add_usage(
    d: RegistryDialect, session_id: str, input_tokens: int, output_tokens: int, cost: float,
    check: Callable[[Row], None] | None = None,
) -> Operation[Row | None]:
    """Add to the three usage counters and touch the row; the new row, ``None`` if unknown.

    ``check(row)`` sees the current row first and may raise to write nothing
    (e.g. a counter that would overflow).
    """
    current = _row((yield d.GET_FOR_UPDATE, (session_id,)))
    if current is None:
        return None
    if check is not None:
        check(current)
    return _row((yield d.ADD_USAGE, (session_id, input_tokens, output_tokens, cost)))


def delete_session(d: RegistryDialect, session_id: str) -> Operation[bool]:
    """Delete everything the session owns and its row; ``False`` (nothing deleted) when it is not registered."""
    if not (yield from session_exists(d, session_id)):
        return False
    yield from d.delete_rows(session_id)
    return True
