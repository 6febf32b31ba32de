"""Each message's place on its path, in Postgres: depth, running totals and a jump pointer.

The SQLite store's invariants (:mod:`storage.messages`), kept the same way:
every row knows ``depth`` (rows from the root, the root being 1),
``path_bytes`` and ``path_tokens`` (its JSON bytes and token estimate
summed from the root) and ``jump_seq``, a skew-binary jump pointer (Myers,
1983) to an ancestor (``NULL`` on a root). An insert derives its own from
its parent's row (:data:`storage.postgres.message_sql.INSERT`); an update
shifts the totals below the message; a delete recomputes the subtrees it
re-attached (:func:`place_subtrees`). So a path's length, size and token
total are one row read, and "which message at depth d is on the path to
X" (:func:`ancestor_at_depth`) takes O(log depth) steps -- the token
estimate of a session with compactions no longer walks its path.

The functions here are steps of a provider's operation (generators that
yield :class:`~storage.postgres.connection.Query` steps): they run inside
the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..messages import CompactionRow, TokenPlace
from .connection import Many, Operation, Query

#: What a child needs from its parent: the parent's place, its jump target's depth, that target's jump.
LINK = """
SELECT p.seq, p.depth, p.path_bytes, p.path_tokens, j.depth AS j_depth,
       coalesce(j.jump_seq, j.seq) AS jj_seq, jj.depth AS jj_depth
FROM assistant_messages AS p
JOIN assistant_messages AS j ON j.seq = coalesce(p.jump_seq, p.seq)
JOIN assistant_messages AS jj ON jj.seq = coalesce(j.jump_seq, j.seq)
WHERE p.session_id = %(s)s AND p.id = %(id)s
"""
DEPTH_JUMP = "SELECT depth, coalesce(jump_seq, seq) AS jump FROM assistant_messages WHERE seq = %(seq)s"
# Every row under the ids %(tops)s (and those rows), parents before children.
SUBTREES = """
WITH RECURSIVE sub (seq, id, parent_id, bytes, tokens) AS (
    SELECT seq, id, parent_id, octet_length(content)::bigint, tokens FROM assistant_messages
    WHERE session_id = %(s)s AND id = ANY(%(tops)s::text[])
    UNION
    SELECT c.seq, c.id, c.parent_id, octet_length(c.content)::bigint, c.tokens FROM sub
    JOIN assistant_messages AS c ON c.session_id = %(s)s AND c.parent_id = sub.id AND c.seq > sub.seq
)
SELECT seq, id, parent_id, bytes, tokens FROM sub ORDER BY seq
"""
SET_PLACE = """
UPDATE assistant_messages SET depth = %(depth)s, path_bytes = %(path_bytes)s, path_tokens = %(path_tokens)s,
    jump_seq = %(jump)s
WHERE seq = %(seq)s
"""
TOKEN_PLACES = """
SELECT id, seq, depth, tokens, path_tokens FROM assistant_messages
WHERE session_id = %(s)s AND id = ANY(%(ids)s::text[])
"""
# Climb from %(seq)s toward the root until depth %(depth)s, taking the jump pointer whenever it
# does not overshoot (O(log depth) steps); the ancestor at depth %(depth)s, if any.
CLIMB = """
WITH RECURSIVE climb (seq, depth) AS (
    SELECT seq, depth FROM assistant_messages WHERE seq = %(seq)s
    UNION ALL
    SELECT CASE WHEN j.depth >= %(depth)s THEN j.seq ELSE p.seq END,
           CASE WHEN j.depth >= %(depth)s THEN j.depth ELSE p.depth END
    FROM climb AS c
    JOIN assistant_messages AS m ON m.seq = c.seq
    JOIN assistant_messages AS j ON j.seq = coalesce(m.jump_seq, m.seq)
    JOIN assistant_messages AS p ON p.session_id = m.session_id AND p.id = m.parent_id
    WHERE c.depth > %(depth)s AND p.depth < c.depth AND j.depth < c.depth
)
SELECT seq FROM climb WHERE depth = %(depth)s
"""


def child_place(link: dict[str, Any] | None, size: int, tokens: int) -> tuple[int, int, int, int | None]:
    """``(depth, path_bytes, path_tokens, jump_seq)`` of a new row under ``link`` (``None``: a root).

    Myers' rule, as the SQLite store: when the parent's jump and its jump's
    jump span equal depths, jump over both, else point at the parent.
    """
    if link is None:
        return 1, size, tokens, None
    p = link
    jump = p["jj_seq"] if p["depth"] - p["j_depth"] == p["j_depth"] - p["jj_depth"] else p["seq"]
    return p["depth"] + 1, p["path_bytes"] + size, p["path_tokens"] + tokens, jump


class _Places:
    """Places of rows being (re)computed in one transaction, parents first (see ``storage.messages._Places``)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.links: dict[str, dict[str, Any]] = {}
        self.depth_jump: dict[int, tuple[int, int]] = {}

    def link(self, parent_id: str | None) -> Operation[dict[str, Any] | None]:
        if parent_id is None:
            return None
        if parent_id not in self.links:
            rows = yield Query(LINK, {"s": self.session_id, "id": parent_id})
            return rows[0] if rows else None
        return self.links[parent_id]

    def _depth_and_jump(self, seq: int) -> Operation[tuple[int, int]]:
        if seq not in self.depth_jump:
            [row] = yield Query(DEPTH_JUMP, {"seq": seq})
            self.depth_jump[seq] = (row["depth"], row["jump"])
        return self.depth_jump[seq]

    def place(self, seq: int, message_id: str, parent_id: str | None, size: int, tokens: int) -> Operation[dict]:
        link = yield from self.link(parent_id)
        depth, path_bytes, path_tokens, jump = child_place(link, size, tokens)
        target = seq if jump is None else jump
        self.depth_jump[seq] = (depth, target)
        j_depth, jj_seq = yield from self._depth_and_jump(target)
        jj_depth, _ = yield from self._depth_and_jump(jj_seq)
        self.links[message_id] = {
            "seq": seq, "depth": depth, "path_bytes": path_bytes, "path_tokens": path_tokens,
            "j_depth": j_depth, "jj_seq": jj_seq, "jj_depth": jj_depth,
        }
        return {"seq": seq, "depth": depth, "path_bytes": path_bytes, "path_tokens": path_tokens, "jump": jump}


def place_subtrees(session_id: str, tops: list[str]) -> Operation[None]:
    """Recompute the place of every row under ``tops`` (and of ``tops``), parents first."""
    if not tops:
        return
    rows = yield Query(SUBTREES, {"s": session_id, "tops": tops})
    places = _Places(session_id)
    updates = []
    for row in rows:
        parent = row["parent_id"]
        link = yield from places.link(parent)
        if link is not None and link["seq"] > row["seq"]:  # a parent younger than its child: a root
            parent = None
        updates.append((yield from places.place(row["seq"], row["id"], parent, row["bytes"], row["tokens"])))
    if updates:
        yield Many(SET_PLACE, updates)


def token_places(session_id: str, ids: Iterable[str]) -> Operation[dict[str, TokenPlace]]:
    """:class:`~storage.messages.TokenPlace` of each stored id among ``ids``."""
    rows = yield Query(TOKEN_PLACES, {"s": session_id, "ids": sorted(set(ids))})
    return {r["id"]: TokenPlace(r["id"], r["seq"], r["depth"], r["tokens"], r["path_tokens"]) for r in rows}


def ancestor_at_depth(seq: int, depth: int) -> Operation[int | None]:
    """``seq`` of the message at ``depth`` on the path to row ``seq``; ``None`` if there is none."""
    if depth < 1:
        return None
    rows = yield Query(CLIMB, {"seq": seq, "depth": depth})
    return rows[0]["seq"] if rows else None


def applied(
    leaf: TokenPlace, rows: list[CompactionRow], ends: dict[str, TokenPlace]
) -> Operation[list[tuple[CompactionRow, int]]]:
    """The overlays ``get_history`` applies on the path to ``leaf``, with the tokens each hides.

    Per start message, the newest row whose end is on the path at or after
    it; walking root -> leaf, a start inside an overlay already taken is
    skipped (``storage.messages.MessageStore._applied``, step for step).
    """
    ancestors: dict[int, int | None] = {}

    def on_path(place: TokenPlace) -> Operation[bool]:
        if place.depth > leaf.depth:
            return False
        if place.depth not in ancestors:
            ancestors[place.depth] = yield from ancestor_at_depth(leaf.seq, place.depth)
        return ancestors[place.depth] == place.seq

    chosen: dict[str, tuple[CompactionRow, TokenPlace, TokenPlace]] = {}
    off_path: set[str] = set()
    for row in reversed(rows):  # newest first
        start, end = ends.get(row.from_message_id), ends.get(row.to_message_id)
        if start is None or end is None or row.from_message_id in chosen or row.from_message_id in off_path:
            continue
        if end.depth < start.depth or not (yield from on_path(end)):
            continue
        if not (yield from on_path(start)):
            off_path.add(row.from_message_id)
            continue
        chosen[row.from_message_id] = (row, start, end)
    result, reached = [], 0
    for row, start, end in sorted(chosen.values(), key=lambda c: c[1].depth):
        if start.depth > reached:
            result.append((row, end.path_tokens - start.path_tokens + start.tokens))
            reached = end.depth
    return result
