"""Each message's place on its path: depth, running totals and a skew-binary jump pointer.

Every row knows ``depth`` (rows from the root, the root being 1),
``path_bytes`` and ``path_tokens`` (its JSON bytes and token estimate summed
from the root) and ``jump_seq``, a skew-binary jump pointer (Myers, 1983) to
an ancestor (``NULL`` on a root). An insert derives its own from its
parent's (:func:`child_place`); an update shifts the totals below the
message; a delete recomputes the subtrees it re-attached, once
(:func:`place_subtrees`). So a path's length, size and token total are one
row read, and "which message at depth d is on the path to X"
(:func:`ancestor_at_depth`) takes O(log depth) steps.

The functions here are operations (:mod:`storage.tree.steps`): they run
inside the caller's transaction, on either database.
"""

from __future__ import annotations

from collections.abc import Iterable

from .rows import CompactionRow, TokenPlace
from .steps import Dialect, Many, Operation, Place

__all__ = ["Link", "Places", "ancestor_at_depth", "applied", "child_place", "place_subtrees", "token_places"]

#: What a child needs from its parent (a ``LINK`` row): ``(seq, depth, path_bytes,
#: path_tokens, jump depth, jump's jump seq, its depth)``.
Link = tuple[int, int, int, int, int, int, int]


def child_place(link: Link | None, size: int, tokens: int) -> Place:
    """``(depth, path_bytes, tokens, path_tokens, jump_seq)`` of a new row under ``link``.

    ``link`` is the parent's ``LINK`` row, ``None`` for a root; ``size`` the
    row's UTF-8 bytes of JSON, ``tokens`` its estimate. The jump pointer
    follows Myers' skew-binary rule: when the parent's jump and its jump's
    jump span equal depths, jump over both, else point at the parent.
    """
    if link is None:
        return 1, size, tokens, tokens, None
    p_seq, p_depth, p_bytes, p_tokens, j_depth, jj_seq, jj_depth = link
    jump = jj_seq if p_depth - j_depth == j_depth - jj_depth else p_seq
    return p_depth + 1, p_bytes + size, tokens, p_tokens + tokens, jump


class Places:
    """Places of rows being (re)computed in one transaction, parents first.

    Remembers, for every row placed, what a child needs from it (a
    :data:`Link`) and its ``(depth, jump seq or itself)``; a parent or jump
    target not placed here is read from its row, which is current (the rows
    placed here are all below it).
    """

    def __init__(self, d: Dialect, s: str) -> None:
        self._d = d
        self._s = s
        self._links: dict[str, Link] = {}
        self._depth_jump: dict[int, tuple[int, int]] = {}

    def link(self, parent_id: str | None) -> Operation[Link | None]:
        """What a child of ``parent_id`` needs from it; ``None`` for a root (or a parent not stored)."""
        if parent_id is None:
            return None
        link = self._links.get(parent_id)
        if link is None:
            rows = yield self._d.LINK, (self._s, parent_id)
            if not rows:
                return None
            link = self._links[parent_id] = tuple(rows[0])
        return link

    def place(self, seq: int, message_id: str, parent_id: str | None, size: int, tokens: int) -> Operation[Place]:
        """The place of row ``seq`` (``message_id``) under ``parent_id``; remembered for its children."""
        place = child_place((yield from self.link(parent_id)), size, tokens)
        depth, path_bytes, _, path_tokens, jump = place
        target = seq if jump is None else jump
        self._depth_jump[seq] = (depth, target)
        jump_depth, jump_jump = yield from self._depth_and_jump(target)
        jump_jump_depth, _ = yield from self._depth_and_jump(jump_jump)
        self._links[message_id] = (seq, depth, path_bytes, path_tokens, jump_depth, jump_jump, jump_jump_depth)
        return place

    def _depth_and_jump(self, seq: int) -> Operation[tuple[int, int]]:
        found = self._depth_jump.get(seq)
        if found is None:
            [(depth, jump)] = yield self._d.DEPTH_JUMP, (seq,)
            found = self._depth_jump[seq] = (depth, jump)
        return found


def place_subtrees(d: Dialect, s: str, tops: list[str]) -> Operation[None]:
    """Recompute the place of every row under ``tops`` (and of ``tops``), parents first.

    A parent younger than its child (only in a damaged table: every walk
    stops there) places the child as a root, as the walks read it.
    """
    if not tops:
        return
    places = Places(d, s)
    updates: list[tuple[int, int, int, int | None, int]] = []
    for seq, message_id, parent, size, tokens in (yield d.SUBTREES, (s, d.id_list(tops))):
        link = yield from places.link(parent)
        if link is not None and link[0] > seq:
            parent = None
        depth, path_bytes, _, path_tokens, jump = yield from places.place(seq, message_id, parent, size, tokens)
        updates.append((depth, path_bytes, path_tokens, jump, seq))
    if updates:
        yield Many(d.SET_PLACE, updates)


def token_places(d: Dialect, s: str, ids: Iterable[str]) -> Operation[dict[str, TokenPlace]]:
    """:class:`TokenPlace` of each stored id among ``ids`` (unknown ids are left out)."""
    rows = yield d.TOKEN_PLACES, (s, d.id_list(ids))
    return {row[0]: TokenPlace(*row) for row in rows}


def ancestor_at_depth(d: Dialect, s: str, seq: int, depth: int) -> Operation[int | None]:
    """``seq`` of the message at ``depth`` on the path root -> row ``seq`` (itself at its own
    depth); ``None`` when ``depth`` is deeper than the row or below 1. O(log depth) reads."""
    if depth < 1:
        return None
    rows = yield d.CLIMB, (s, seq, depth)
    return rows[0][0] if rows else None


def applied(
    d: Dialect, s: str, leaf: TokenPlace, rows: list[CompactionRow], ends: dict[str, TokenPlace]
) -> Operation[list[tuple[CompactionRow, int]]]:
    """The overlays ``get_history`` applies on the path to ``leaf``, with the tokens each hides.

    Per start message, the newest row whose end is on the path at or after
    it; walking root -> leaf, a start inside an overlay already taken is skipped.
    """
    ancestors: dict[int, int | None] = {}

    def on_path(place: TokenPlace) -> Operation[bool]:
        if place.depth > leaf.depth:
            return False
        if place.depth not in ancestors:
            ancestors[place.depth] = yield from ancestor_at_depth(d, s, leaf.seq, place.depth)
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
    result: list[tuple[CompactionRow, int]] = []
    reached = 0
    for row, start, end in sorted(chosen.values(), key=lambda c: c[1].depth):
        if start.depth > reached:
            result.append((row, end.path_tokens - start.path_tokens + start.tokens))
            reached = end.depth
    return result
