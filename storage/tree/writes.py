"""The writes of one session's message tree, written once for both databases.

Each function is an :data:`~storage.tree.steps.Operation` that the store
runs as one transaction (SQLite: inside ``storage.transaction()``, a
savepoint when the caller holds one; Postgres: a transaction of its own,
after the dialect's ``LOCK``). The rules:

* ids are unique per session; a duplicate append changes nothing;
* the parent of an append is resolved by :func:`resolve_parent`:
  :data:`~common.shapes.LATEST_LEAF` -> the latest leaf (``None`` in an
  empty session); ``None`` -> a new root; an overlay id
  (``compaction_<id>``) -> the last message that compaction covers, or the
  latest leaf when there is no such compaction; any other id not stored in
  the session -> a root;
* overlay ids are never stored (an echoed overlay, docs/deviations.md #6);
* a parent is older than its children (``parent.seq < child.seq``), so
  every walk can require ``seq`` to fall;
* each row knows its place (:mod:`storage.tree.places`), derived from its
  parent's on insert, shifted on update, recomputed below a delete;
* deleting a message hands its children to its parent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from common.shapes import LATEST_LEAF, OVERLAY_PREFIX, _LatestLeaf

from .places import Link, Places, child_place, place_subtrees
from .rows import CompactionRow, NewMessage, utf8_length
from .steps import Dialect, Operation, Place

__all__ = ["Appended", "add_compaction", "append", "append_chain", "append_row", "clear", "delete", "resolve_parent",
           "update"]

#: What :func:`append_row` stored: ``(parent used, the parent's link row, the new row's seq, its place)``.
Appended = tuple[str | None, Link | None, int, Place]


def _link(d: Dialect, s: str, message_id: str) -> Operation[Link | None]:
    rows = yield d.LINK, (s, message_id)
    return tuple(rows[0]) if rows else None


def _latest_link(d: Dialect, s: str) -> Operation[tuple[str | None, Link | None]]:
    rows = yield d.LATEST_LINK, (s,)
    if not rows:
        return None, None
    row = rows[0]
    return row[0], row[1:]


def _compaction_end(d: Dialect, s: str, overlay_id: str) -> Operation[str | None]:
    rows = yield d.COMPACTION_END, (s, overlay_id[len(OVERLAY_PREFIX) :])
    return rows[0][0] if rows else None


def resolve_parent(d: Dialect, s: str, parent_id: str | None | _LatestLeaf) -> Operation[tuple[str | None, Link | None]]:
    """The parent an append under ``parent_id`` uses (see the module docstring) and its link row."""
    if parent_id is LATEST_LEAF:
        return (yield from _latest_link(d, s))
    if parent_id is None or isinstance(parent_id, _LatestLeaf):
        return None, None
    link = yield from _link(d, s, parent_id)
    if link is not None or not parent_id.startswith(OVERLAY_PREFIX):
        return (parent_id, link) if link is not None else (None, None)
    end = yield from _compaction_end(d, s, parent_id)
    if end is None:
        return (yield from _latest_link(d, s))
    link = yield from _link(d, s, end)
    return (end, link) if link is not None else (None, None)


def append(
    d: Dialect, s: str, message_id: str, role: str, content: str, text: str, tools: str, tokens: int,
    parent_id: str | None | _LatestLeaf,
) -> Operation[tuple[bool, str | None]]:
    """Insert one message; being the newest, it is the latest leaf.

    Returns ``(True, <the parent used>)``, or ``(False, None)`` when the id
    is already stored (nothing changes, the first content stays).
    """
    row = yield from append_row(d, s, message_id, role, content, text, tools, tokens, parent_id)
    return (False, None) if row is None else (True, row[0])


def append_row(
    d: Dialect, s: str, message_id: str, role: str, content: str, text: str, tools: str, tokens: int,
    parent_id: str | None | _LatestLeaf, latest: tuple[str, Link] | None = None,
) -> Operation[Appended | None]:
    """:func:`append`, returning what was stored (:data:`Appended`), or ``None`` for a duplicate id.

    ``latest``: the latest leaf's id and link row when the caller already
    knows them (SQLite's store carries them from its own last append while
    nothing else wrote the file); a :data:`~common.shapes.LATEST_LEAF`
    parent then costs no read. It must be exactly what
    :func:`resolve_parent` would read.
    """
    if d.LOCK is not None:
        yield d.LOCK, (s,)
    parent: str | None
    link: Link | None
    if latest is not None and parent_id is LATEST_LEAF:
        parent, link = latest
    else:
        parent, link = yield from resolve_parent(d, s, parent_id)
    place = child_place(link, utf8_length(content), tokens)
    seq = yield from d.insert(s, message_id, role, content, text, tools, parent,
                              None if link is None else link[0], place)
    return None if seq is None else (parent, link, seq, place)


def _overlay_end(d: Dialect, s: str, overlay_id: str, current: str | None) -> Operation[str | None]:
    """Where a chain goes on after ``overlay_id``: the last message its compaction covers, else ``current``."""
    end = yield from _compaction_end(d, s, overlay_id)
    return end if end is not None and (yield d.EXISTS, (s, end)) else current


def append_chain(
    d: Dialect, s: str, messages: Sequence[NewMessage], parent_id: str | None | _LatestLeaf
) -> Operation[list[tuple[bool, str | None]]]:
    """Insert ``messages`` as a chain: the first under ``parent_id`` (as :func:`append`), each
    next one under the one before.

    * an id already stored -- or met earlier in the chain -- is a duplicate:
      not stored (the first content stays), and the next message goes
      under it, since it exists;
    * an overlay id is never stored: the next message goes under the last
      message its compaction covers; when the session has no such
      compaction (or its end is gone) the chain goes on from where it was.

    The rows' ``seq`` and places are computed here, from the first
    parent's row, and stored in one batch (:meth:`Dialect.insert_chain`):
    one insert per message, whatever the history length. The last new
    message is the latest leaf; a chain storing nothing leaves it alone.

    Returns one ``(inserted, parent)`` per message, as :func:`append`.
    """
    if d.LOCK is not None:
        yield d.LOCK, (s,)
    parent, _ = yield from resolve_parent(d, s, parent_id)
    ids = [m.id for m in messages if not m.id.startswith(OVERLAY_PREFIX)]
    taken = {row[0] for row in (yield d.STORED_IDS, (s, d.id_list(ids)))} if ids else set()
    results: list[tuple[bool, str | None]] = []
    new: list[tuple[NewMessage, str | None]] = []
    for m in messages:
        if m.id.startswith(OVERLAY_PREFIX):
            results.append((False, None))
            parent = yield from _overlay_end(d, s, m.id, parent)
            continue
        if m.id not in taken:
            new.append((m, parent))
            results.append((True, parent))
            taken.add(m.id)
        else:
            results.append((False, None))
        parent = m.id
    if new:
        yield from d.insert_chain(s, (yield from _placed(d, s, new)))
    return results


def _placed(
    d: Dialect, s: str, new: list[tuple[NewMessage, str | None]]
) -> Operation[list[tuple[int, NewMessage, str | None, int | None, Place]]]:
    """``(seq, message, parent, parent seq, place)`` of each new row of a chain, parents first."""
    places = Places(d, s)
    rows: list[tuple[int, NewMessage, str | None, int | None, Place]] = []
    for seq, (m, parent) in zip((yield from d.new_seqs(len(new))), new):
        link = yield from places.link(parent)
        place = yield from places.place(seq, m.id, parent, utf8_length(m.content), m.tokens)
        rows.append((seq, m, parent, None if link is None else link[0], place))
    return rows


def update(
    d: Dialect, s: str, message_id: str, role: str, content: str, text: str, tools: str, tokens: int
) -> Operation[bool]:
    """Replace a stored message's role, content, token count and search text (its place kept).

    The path totals of the message and everything below it shift by the
    change. ``False`` (and nothing written) when ``message_id`` is not stored.
    """
    if d.LOCK is not None:
        yield d.LOCK, (s,)
    rows = yield d.OLD_SIZE, (s, message_id)
    if not rows:
        return False
    seq, old_bytes, old_tokens = rows[0]
    yield from d.rewrite(s, seq, message_id, role, content, text, tools, tokens)
    byte_delta, token_delta = utf8_length(content) - old_bytes, tokens - old_tokens
    if byte_delta or token_delta:
        yield d.SHIFT, (s, message_id, seq, byte_delta, token_delta)
    return True


def delete(d: Dialect, s: str, message_ids: Iterable[str]) -> Operation[list[str]]:
    """Delete messages; each one's children move up to its parent.

    Ids not stored are skipped. The places of everything below a deleted
    message are recomputed once, at the end: deleting a leaf costs O(1),
    deleting an inner message O(size of its subtree). Returns the ids
    deleted, in the order given, without repeats.
    """
    if d.LOCK is not None:
        yield d.LOCK, (s,)
    deleted: list[str] = []
    moved: list[str] = []
    for message_id in message_ids:
        rows = yield d.ROW_FOR_DELETE, (s, message_id)
        if not rows:
            continue
        seq, parent, parent_ref = rows[0]
        moved.extend((yield from d.remove(s, seq, message_id, parent, parent_ref)))
        deleted.append(message_id)
    gone = set(deleted)
    yield from place_subtrees(d, s, [child for child in dict.fromkeys(moved) if child not in gone])
    if deleted:
        yield from d.after_delete(s, deleted)
    return deleted


def clear(d: Dialect, s: str) -> Operation[None]:
    """Delete every message, compaction and search row of the session."""
    if d.LOCK is not None:
        yield d.LOCK, (s,)
    yield from d.clear(s)


def add_compaction(d: Dialect, s: str, compaction_id: str, summary: str, from_id: str,
                   to_id: str) -> Operation[CompactionRow]:
    """Store a compaction row (its ends are not checked); returns it with its ``seq`` and ``created_at``."""
    [(seq, created_at)] = yield d.ADD_COMPACTION, (s, compaction_id, summary, from_id, to_id)
    return CompactionRow(seq, compaction_id, summary, from_id, to_id, created_at)


