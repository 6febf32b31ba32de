"""The rule of a session's ``searchMessages``, the same on both databases.

Which rows match, and how they rank, is each database's own (FTS5 bm25 in
SQLite, ``tsvector`` ranks in Postgres: :mod:`storage.fts`,
:mod:`storage.postgres.search`); the query syntax (:func:`storage.fts.parse_query`)
and what the call takes and gives are shared: :func:`search_query`,
:func:`search_records`.
"""

from __future__ import annotations

from typing import Any

from common.errors import InvalidInputError
from storage.fts import ParsedQuery, parse_query

from .rows import SearchRow, to_iso8601

__all__ = ["search_query", "search_records"]


def search_query(query: Any, limit: Any, check_limit: Any = None) -> ParsedQuery | None:
    """The parsed ``query`` of a ``searchMessages`` call; ``None`` when nothing is to be read
    (no searchable term, or ``limit`` 0).

    ``check_limit(limit, "limit")`` (default: an ``int``, not a ``bool``)
    returns the checked limit or raises.

    Raises:
        InvalidInputError: ``query`` is not a string, or ``limit`` not an int >= 0.
    """
    if not isinstance(query, str):
        raise InvalidInputError(f"query must be a string, not {type(query).__name__}", field="query")
    limit = _check_int(limit, "limit") if check_limit is None else check_limit(limit, "limit")
    if limit < 0:
        raise InvalidInputError("limit must be >= 0", field="limit")
    parsed = parse_query(query)
    return None if parsed is None or limit == 0 else parsed


def search_records(rows: list[SearchRow]) -> list[dict[str, str]]:
    """Search hits as ``searchMessages`` gives them: ``{id, role, content, createdAt}`` (ISO-8601 UTC, ms)."""
    return [{"id": r.id, "role": r.role, "content": r.content, "createdAt": to_iso8601(r.created_at)} for r in rows]


def _check_int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{field} must be an integer, not {type(value).__name__}", field=field)
    return value
