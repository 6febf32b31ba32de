"""The reads of one session's message tree, written once for both databases.

Each function is an :data:`~storage.tree.steps.Operation` on a
:class:`~storage.tree.steps.Dialect` ``d`` and a session id ``s``; the
stores (:class:`storage.messages.MessageStore`,
:class:`storage.postgres.PostgresSessionProvider`) run them and give their
results unchanged. Paths are walked leaf -> root, each step requiring the
parent to be older (``seq`` falls), with no depth cap
(docs/deviations.md #18).
"""

from __future__ import annotations

from typing import Any

from common.errors import InvalidInputError

from .places import ancestor_at_depth, applied, token_places
from .rows import CompactionRow, PathTokens
from .steps import Dialect, Operation

__all__ = [
    "check_chunk_limits", "children", "chunk", "compactions", "count", "depth_on_path", "exists", "get", "latest_leaf",
    "latest_path_tokens", "path_contents", "path_json", "path_stats", "path_tokens", "place", "window",
]


def check_chunk_limits(max_bytes: Any, max_rows: Any) -> None:
    """Raise :class:`~common.errors.InvalidInputError` unless both are ints >= 1 (``path_chunks``)."""
    for name, value in (("max_bytes", max_bytes), ("max_rows", max_rows)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(f"{name} must be an int >= 1, not {value!r}", field=name)


def _one(d: Any, args: tuple[Any, ...]) -> Operation[Any]:
    rows = yield d, args
    return rows[0][0] if rows else None


def get(d: Dialect, s: str, message_id: str) -> Operation[str | None]:
    """The stored JSON of ``message_id``, or ``None``."""
    content: str | None = yield from _one(d.GET, (s, message_id))
    return content


def exists(d: Dialect, s: str, message_id: str) -> Operation[bool]:
    """``True`` when ``message_id`` is stored in session ``s``."""
    return (yield d.EXISTS, (s, message_id)) != []


def count(d: Dialect, s: str) -> Operation[int]:
    """How many messages session ``s`` stores."""
    return int((yield from _one(d.COUNT, (s,))))


def latest_leaf(d: Dialect, s: str) -> Operation[str | None]:
    """Id of the session's latest leaf (the dialect's rule); ``None`` when it is empty."""
    leaf: str | None = yield from _one(d.LATEST_LEAF, (s,))
    return leaf


def path_contents(d: Dialect, s: str, leaf_id: str) -> Operation[list[str]]:
    """Stored JSON of every message root -> ``leaf_id`` (``[]`` if unknown)."""
    return [row[0] for row in (yield d.PATH_CONTENT, (s, leaf_id))]


def path_json(d: Dialect, s: str, leaf_id: str) -> Operation[tuple[str, int] | None]:
    """The path root <- ``leaf_id`` as one JSON array text, leaf first, and its length;
    ``None`` when the database will not make one string that large."""
    [(text, n)] = yield d.PATH_JSON, (s, leaf_id)
    return None if text is None else (text, n)


def chunk(d: Dialect, s: str, leaf_id: str, after: tuple[int, Any] | None, max_rows: int,
          max_bytes: int) -> Operation[tuple[list[Any], tuple[int, Any] | None]]:
    """One chunk of the walk ``leaf_id`` -> root and where the next one starts.

    ``after`` is ``None`` for the first chunk (from the leaf), else what the
    chunk before returned. Returns ``(contents leaf-side first, next)``;
    ``next`` is ``None`` once the root (or an unknown leaf) is reached.
    """
    if after is None:
        rows = yield d.CHUNK_FROM_LEAF, (s, leaf_id, max_rows, max_bytes)
    else:
        below, ref = after
        rows = yield d.CHUNK_FROM_ROW, (s, ref, max_rows, max_bytes, below)
    if not rows:
        return [], None
    last_seq, parent_ref, _ = rows[-1]
    return [row[2] for row in rows], None if parent_ref is None else (last_seq, parent_ref)


def path_stats(d: Dialect, s: str, leaf_id: str) -> Operation[list[tuple[str, str, int]]]:
    """Root -> ``leaf_id`` as ``(id, role, bytes)``; ``bytes`` is the UTF-8 size of the JSON."""
    return [(row[0], row[1], row[2]) for row in (yield d.PATH_STATS, (s, leaf_id))]


def place(d: Dialect, s: str, message_id: str) -> Operation[tuple[int, int] | None]:
    """``(depth, path_bytes)`` of a stored message: its path's row count and JSON bytes; else ``None``."""
    rows = yield d.PLACE, (s, message_id)
    return (int(rows[0][0]), int(rows[0][1])) if rows else None


def window(d: Dialect, s: str, leaf_id: str, max_bytes: float, min_rows: int) -> Operation[tuple[list[str], bool]]:
    """The newest messages of the path to ``leaf_id`` that fit ``max_bytes`` of JSON (a number: only compared).

    The window holds the leaf, then grows toward the root while it has
    fewer than ``min_rows`` rows or the next row still fits. Returns
    ``(contents root-side first, truncated)``.
    """
    rows = yield d.WINDOW, (s, leaf_id, min_rows, max_bytes)
    return [row[1] for row in rows], bool(rows) and rows[0][0] is not None


def children(d: Dialect, s: str, message_id: str) -> Operation[list[str]]:
    """Stored JSON of the children of ``message_id``, oldest first (``created_at``, then ``seq``)."""
    return [row[0] for row in (yield d.CHILDREN, (s, message_id))]


def compactions(d: Dialect, s: str) -> Operation[list[CompactionRow]]:
    """Every compaction row of the session, oldest first (``created_at``, then ``seq``)."""
    return [CompactionRow(*row) for row in (yield d.COMPACTIONS, (s,))]


def depth_on_path(d: Dialect, s: str, message_id: str, leaf_id: str) -> Operation[int | None]:
    """The depth of ``message_id`` (the root's is 1) when it lies on the path root -> ``leaf_id``
    (``leaf_id`` itself included), else ``None``. Two row reads and O(log depth) climbs."""
    places = yield from token_places(d, s, [message_id, leaf_id])
    found, leaf = places.get(message_id), places.get(leaf_id)
    if found is None or leaf is None or found.depth > leaf.depth:
        return None
    return found.depth if (yield from ancestor_at_depth(d, s, leaf.seq, found.depth)) == found.seq else None


def path_tokens(d: Dialect, s: str, leaf_id: str) -> Operation[PathTokens | None]:
    """Token total of the path root -> ``leaf_id`` and the overlays that apply on it.

    The overlays are the ones ``get_history`` applies: per start message on
    the path, the newest compaction whose end is on the path at or after it;
    walking root -> leaf, a start inside an overlay already taken is
    skipped. Each is paired with the tokens of the messages it hides. Reads
    the leaf's row, the compaction rows and their end rows, and climbs jump
    pointers: O(compactions x log depth), whatever the history length.
    ``None`` for an unknown leaf.
    """
    leaf = (yield from token_places(d, s, [leaf_id])).get(leaf_id)
    if leaf is None:
        return None
    rows = yield from compactions(d, s)
    if not rows:
        return PathTokens(leaf.path_tokens, ())
    ends = yield from token_places(d, s, {i for r in rows for i in (r.from_message_id, r.to_message_id)})
    return PathTokens(leaf.path_tokens, tuple((yield from applied(d, s, leaf, rows, ends))))


def latest_path_tokens(d: Dialect, s: str) -> Operation[PathTokens | None]:
    """:func:`path_tokens` of the latest leaf; ``None`` in an empty session.

    One statement when the session has no compaction row (then no overlay
    applies): what the token estimate after each append reads.
    """
    rows = yield d.LATEST_TOKENS, (s,)
    if not rows:
        return None
    leaf_id, total, compacted = rows[0]
    return (yield from path_tokens(d, s, leaf_id)) if compacted else PathTokens(total, ())
