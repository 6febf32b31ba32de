"""History pages: a bounded slice of a session's history, newest first, read without the whole path.

:func:`history_page` answers ``Session.get_history(leaf_id, limit=, before=, overlays=)``:
the entries of ``get_history(leaf_id)`` (or, with ``overlays=False``, of the
stored path root -> leaf without compaction overlays) that come just before
the entry ``before`` (default: after the last one), at most ``limit`` of
them, root-side first. In list terms, with ``history`` the whole list::

    end = len(history) if before is None else history.index(entry with id before)
    page = history[max(0, end - limit):end]      # limit None: history[:end]

Paging back from the newest page: pass the first entry's ``id`` of a page as
``before`` for the next, older one; a page shorter than ``limit`` (``[]``
included) reached the root.

A ``before`` that is not an entry of that history is refused, never read as
an empty page (which would say "the root was reached"): an id no stored
message (and no compaction overlay) has is :class:`MessageNotFoundError`
(404), in an empty session or under an unknown leaf too; a stored one off
the path (another branch), hidden inside an overlay that applies, or an
overlay that does not apply on this path is :class:`InvalidInputError`
(``field="before"``, 400).

Cost: the rows of the page, walked up from ``before`` (or the leaf) in
bounded chunks (``path_chunks`` of :mod:`storage.tree.reads`: at most
``limit`` + 1 rows and 1 MiB per statement), plus, with overlays, the
session's compaction rows and the O(compactions x log depth) test of which
apply on this path (``path_tokens``); a ``before`` is placed on the path by
jump pointers (``depth_on_path``: O(log depth)). An applied overlay is jumped over
(the walk restarts above its first message), never read through, so a page
after a compaction of 100,000 messages costs what any page costs.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from common.errors import InvalidInputError, MessageNotFoundError
from common.shapes import OVERLAY_PREFIX
from storage.tree.rows import CompactionRow

from .session_messages import overlay_message, parse
from .session_store import AsyncHistoryStore

__all__ = ["check_page_options", "history_page"]

Message = dict[str, Any]

#: Most UTF-8 bytes of stored JSON one statement of a page walk reads (a larger row comes alone).
PAGE_CHUNK_BYTES = 1 << 20


def check_page_options(limit: Any, before: Any, overlays: Any) -> None:
    """Check the paging arguments of ``get_history``.

    Raises:
        InvalidInputError: ``limit`` is not ``None`` or an int >= 1; ``before``
            not ``None`` or a non-empty string; ``overlays`` not a bool.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidInputError(f"limit must be an integer >= 1 or null, not {limit!r}", field="limit")
    if before is not None and (not isinstance(before, str) or not before):
        raise InvalidInputError(f"before must be a message id or null, not {before!r}", field="before")
    if not isinstance(overlays, bool):
        raise InvalidInputError(f"overlays must be true or false, not {overlays!r}", field="overlays")


async def history_page(store: AsyncHistoryStore, leaf: str, limit: int | None, before: str | None,
                       overlays: bool) -> list[Message]:
    """The page of the history root -> ``leaf`` described in the module docstring (root-side first).

    ``[]`` for an unknown ``leaf`` (when ``before`` is ``None``).

    Raises:
        MessageNotFoundError: ``before`` is the id of no stored message and of
            no compaction overlay of this session.
        InvalidInputError: (``field="before"``) ``before`` is stored but not an
            entry of that history: not on the path (another branch, or an
            unknown ``leaf``), hidden inside an overlay that applies (read with
            ``overlays=False`` to page the stored messages), or an overlay that
            does not apply on this path.
    """
    applied: list[CompactionRow] = []
    if overlays:
        tokens = await store.path_tokens(leaf)
        if tokens is None:
            return await _no_page(store, before, leaf)
        applied = [row for row, _ in tokens.hidden]
    elif await store.place(leaf) is None:
        return await _no_page(store, before, leaf)
    by_end = {row.to_message_id: row for row in applied}
    anchor: str | None = leaf
    skip = False
    if before is not None:
        anchor, skip = await _anchor(store, leaf, before, applied)
    wanted = limit if limit is not None else -1
    newest_first: list[Message] = []
    while anchor is not None and len(newest_first) != wanted:
        jump = None
        room = None if limit is None else limit - len(newest_first) + (1 if skip else 0)
        async with aclosing(_walk(store, anchor, room)) as walk:
            async for message in walk:
                if skip:
                    skip = False
                    continue
                row = by_end.get(message["id"])
                if row is not None:
                    newest_first.append(overlay_message(row))
                    jump = row.from_message_id
                    break
                newest_first.append(message)
                if len(newest_first) == wanted:
                    break
        anchor, skip = jump, True
    newest_first.reverse()
    return newest_first


async def _no_page(store: AsyncHistoryStore, before: str | None, leaf: str) -> list[Message]:
    """The page of an unknown ``leaf``: ``[]``, or the error for a ``before`` that cannot be on its path."""
    if before is None:
        return []
    raise await _off_path(store, before, f"the leaf {leaf!r} is not stored")


async def _off_path(store: AsyncHistoryStore, before: str, why: str) -> Exception:
    """The error for a ``before`` not on the path: not found when nothing has that id, else ``why``."""
    if before.startswith(OVERLAY_PREFIX):
        prefix = len(OVERLAY_PREFIX)
        if not any(row.id == before[prefix:] for row in await store.compactions()):
            return MessageNotFoundError(before)
        return _not_in_history(before, "no compaction overlay with that id applies on this path")
    if await store.place(before) is None:
        return MessageNotFoundError(before)
    return _not_in_history(before, why)


async def _anchor(store: AsyncHistoryStore, leaf: str, before: str,
                  applied: list[CompactionRow]) -> tuple[str, bool]:
    """Where the walk of a page ``before`` starts, and whether that row itself is left out."""
    if before.startswith(OVERLAY_PREFIX):
        for row in applied:
            if OVERLAY_PREFIX + row.id == before:
                return row.from_message_id, True
        raise await _off_path(store, before, "no compaction overlay with that id applies on this path")
    depth = await store.depth_on_path(before, leaf)
    if depth is None:
        raise await _off_path(store, before, "it is not a stored message on the path to the leaf")
    for row in applied:
        start, end = await store.place(row.from_message_id), await store.place(row.to_message_id)
        if start is not None and end is not None and start[0] <= depth <= end[0]:
            raise _not_in_history(before, f"compaction {row.id} hides it (overlays=false reads stored messages)")
    return before, True


async def _walk(store: AsyncHistoryStore, anchor: str, rows: int | None) -> AsyncGenerator[Message, None]:
    """The messages ``anchor`` -> root, parsed, leaf-side first, read ``rows`` at a time (else 1,024)."""
    options = {"max_bytes": PAGE_CHUNK_BYTES} if rows is None else {"max_bytes": PAGE_CHUNK_BYTES, "max_rows": rows}
    async with aclosing(store.path_chunks(anchor, **options)) as chunks:
        async for chunk in chunks:
            for content in chunk:
                message = parse(content) if isinstance(content, str) else None
                if message is not None:
                    yield message


def _not_in_history(before: str, why: str) -> InvalidInputError:
    return InvalidInputError(f"before {before!r} is not an entry of this history: {why}", field="before")
