"""The Session: one conversation's message tree, its compaction overlays and its search.

Spec sections followed (``seeds/004``): Messages, Reading History, Branching,
Search, Compaction (overlays, ``add_compaction``/``get_compactions``), Storage;
``session-behaviours.md`` §2, §5, §8 (how overlays are applied), §11; with the
improvements of ``DEVIATIONS.md`` 1-6, 9, 10, 13 and 18.

Shapes. A message is a plain ``dict`` in the spec's JSON shape: ``{"id":
str, "role": str, "parts": list, ...}`` (an AI SDK ``UIMessage`` fits).
Messages are stored as compact JSON written the way JavaScript's
``JSON.stringify`` writes it (:func:`actors.tokens.js_stringify`), and every
read parses them again, so a returned dict is always a fresh object.

Tree rules (§5). Each message has at most one parent; the *latest leaf* is
the last message appended (persisted, so it survives hibernation) or, when
that was deleted, the newest message without children. ``get_history()``
walks from the latest leaf up to its root.

Overlays (§8, DEVIATIONS 13). A compaction row ``(summary, from, to)``
replaces the stretch ``from..to`` of a path, on read only, by the message
``{"id": "compaction_<compaction id>", "role": "assistant", "parts":
[{"type": "text", "text": summary}], "createdAt": <the compaction's
created_at>}``. It applies only to a path holding both its ends. The
overlay's ``createdAt`` is the time the compaction was *stored* (the
original uses the time of the read): a deliberate choice so two reads of the
same history are identical.

Concurrency. Data methods are ``async`` for a uniform API, but their storage
work is synchronous and each write is one transaction with no ``await``
inside: calls from different trio tasks never interleave mid-write, and
concurrent appends land in the order they arrive.

Extension points (for the context-block, skill, broadcast and compaction
features built on this class): every write passes through
:meth:`Session._prepare_message` (validation, then the :meth:`_before_store`
hook: the place for the row-size limit) and, once committed, through the
:meth:`_after_write` hook with a :class:`MessagesChange` (the place for skill
state, status broadcasts and auto-compaction).
"""

from __future__ import annotations

import datetime as _dt
import json
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from storage import SqlStorage
from storage.fts import parse_query
from storage.messages import (
    LATEST_LEAF,
    OVERLAY_PREFIX,
    CompactionRow,
    MessageStore,
    to_iso8601,
)

from .errors import InvalidInputError, InvalidMessageError, MessageNotFoundError
from .tokens import js_stringify

__all__ = ["COMPACTION_PREFIX", "LATEST_LEAF", "MessagesChange", "Session"]

#: Overlay message ids are this prefix + the compaction's id. Such ids are never stored.
COMPACTION_PREFIX = OVERLAY_PREFIX

Message = dict[str, Any]

# Budgets are clamped to what SQLite can bind (an infinite budget means "everything").
_MAX_SQL_INT = 2**62


@dataclass(frozen=True, slots=True)
class MessagesChange:
    """What one committed write did; handed to :meth:`Session._after_write`.

    Mirrors the original's change events: ``kind`` is ``"append"``
    (``message``, ``parent_id`` and ``inserted``), ``"update"``
    (``message``), ``"delete"`` (``message_ids``: those really deleted) or
    ``"clear"``. ``message`` is the message as stored (after
    :meth:`Session._before_store`).
    """

    kind: Literal["append", "update", "delete", "clear"]
    message: Message | None = None
    parent_id: str | None = None
    inserted: bool = False
    message_ids: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class _Prepared:
    message: Message
    content: str
    text: str


class Session:
    """A conversation stored in one actor's SQLite file.

    Build with :meth:`create` (and optionally :meth:`for_session`); builders
    touch no SQL. All data methods are ``async``.

    Attributes:
        broadcaster: ``target.broadcast`` when the target passed to
            :meth:`create` has a callable ``broadcast``, else ``None``.
    """

    #: Default parent of :meth:`append_message`: the latest leaf.
    LATEST_LEAF = LATEST_LEAF

    def __init__(
        self,
        storage: SqlStorage,
        *,
        session_id: str = "",
        broadcaster: Callable[[str], Any] | None = None,
    ) -> None:
        self._storage = storage
        self.broadcaster = broadcaster
        self._session_id = _check_str(session_id, "session_id")
        self._messages = MessageStore(storage, self._session_id)

    # -- builders ------------------------------------------------------------

    @classmethod
    def create(cls, target: Any) -> Session:
        """A Session on ``target``'s storage, for session id ``''``.

        Args:
            target: a :class:`storage.SqlStorage`, or an object (an Agent)
                whose ``.storage`` is one. If ``target.broadcast`` is
                callable it becomes :attr:`broadcaster`.

        Raises:
            TypeError: no :class:`SqlStorage` can be found on ``target``.
        """
        storage = target if isinstance(target, SqlStorage) else getattr(target, "storage", None)
        if not isinstance(storage, SqlStorage):
            raise TypeError(
                "Session.create() needs a SqlStorage or an object whose .storage is one, "
                f"not {type(target).__name__}"
            )
        broadcast = getattr(target, "broadcast", None)
        return cls(storage, broadcaster=broadcast if callable(broadcast) else None)

    def for_session(self, session_id: str) -> Session:
        """Scope this Session to ``session_id`` (many sessions can share one file); returns ``self``.

        Raises:
            InvalidInputError: ``session_id`` is not a string.
        """
        self._session_id = _check_str(session_id, "session_id")
        self._messages = MessageStore(self._storage, self._session_id)
        return self

    @property
    def session_id(self) -> str:
        """The session id rows are stored under (``''`` unless :meth:`for_session` set one)."""
        return self._session_id

    @property
    def storage(self) -> SqlStorage:
        """The :class:`SqlStorage` holding this session."""
        return self._storage

    # -- writes ----------------------------------------------------------------

    async def append_message(self, message: Message, parent_id: str | None | object = LATEST_LEAF) -> bool:
        """Store ``message`` as a child of ``parent_id`` and make it the latest leaf.

        Args:
            message: ``{"id": str, "role": str, "parts": list, ...}``; a
                top-level ``createdAt`` given as a ``datetime`` is stored as
                its ISO-8601 text, as JavaScript stores a ``Date``.
            parent_id: omitted (:attr:`LATEST_LEAF`) -> the latest leaf
                (a root in an empty session); ``None`` -> a new root, which
                becomes the latest leaf; an id not stored in this session ->
                a root. An overlay id (``compaction_<id>``) stands for the last
                message that compaction covers.

        Returns:
            ``True`` if stored. ``False`` when nothing was written: the id is
            already stored in this session (the first content stays, the
            latest leaf does not move), or it is an overlay id (echoed back
            by a client; DEVIATIONS 6).

        Raises:
            InvalidMessageError: ``message`` lacks a string ``id``/``role``
                or a list ``parts``, or is not JSON data; ``.field`` names
                the culprit. Nothing is written.
            InvalidInputError: ``parent_id`` is not a string or ``None``.
        """
        if parent_id is not LATEST_LEAF and parent_id is not None:
            _check_str(parent_id, "parent_id")
        prepared = self._prepare_message(message)
        if prepared.message["id"].startswith(COMPACTION_PREFIX):
            inserted, parent = False, None
        else:
            inserted, parent = self._messages.append(
                prepared.message["id"], prepared.message["role"], prepared.content, prepared.text, parent_id
            )
        await self._after_write(MessagesChange("append", prepared.message, parent, inserted))
        return inserted

    async def update_message(self, message: Message) -> None:
        """Replace the stored message with ``message["id"]``; its place in the tree is kept.

        The role column and the search index follow the new content.

        Raises:
            InvalidMessageError: as :meth:`append_message`.
            MessageNotFoundError: no message with that id in this session
                (nothing is written; DEVIATIONS 4).
        """
        prepared = self._prepare_message(message)
        m = prepared.message
        if not self._messages.update(m["id"], m["role"], prepared.content, prepared.text):
            raise MessageNotFoundError(m["id"])
        await self._after_write(MessagesChange("update", m))

    async def delete_messages(self, message_ids: Iterable[str]) -> int:
        """Delete these messages; each one's children move up to its parent (DEVIATIONS 5).

        Unknown ids are skipped. Returns how many messages were deleted.

        Raises:
            InvalidInputError: ``message_ids`` is a string or holds a non-string.
        """
        if isinstance(message_ids, (str, bytes)) or not isinstance(message_ids, Iterable):
            raise InvalidInputError("message_ids must be a list of message ids", field="message_ids")
        ids = [_check_str(i, "message_ids") for i in message_ids]
        deleted = self._messages.delete(ids)
        await self._after_write(MessagesChange("delete", message_ids=tuple(deleted)))
        return len(deleted)

    async def clear_messages(self) -> None:
        """Delete every message, compaction and search row of this session."""
        self._messages.clear()
        await self._after_write(MessagesChange("clear"))

    # -- extension points ------------------------------------------------------

    def _prepare_message(self, message: Message) -> _Prepared:
        """Validate, apply :meth:`_before_store`, serialise: the one way into storage."""
        checked = self._before_store(_check_message(message))
        return _Prepared(checked, _serialise(checked), _search_text(checked["parts"]))

    def _before_store(self, message: Message) -> Message:
        """Hook run on every message about to be stored (append and update); returns what to store."""
        return message

    async def _after_write(self, change: MessagesChange) -> None:
        """Hook run after every committed write (append, also when nothing was inserted; update; delete; clear)."""

    # -- reads -----------------------------------------------------------------

    async def get_message(self, message_id: str) -> Message | None:
        """The stored message, or ``None`` (overlay ids are never stored)."""
        content = self._messages.get(_check_str(message_id, "message_id"))
        return None if content is None else _parse(content)

    async def get_latest_leaf(self) -> Message | None:
        """The latest leaf message (see the module docstring), or ``None`` in an empty session."""
        leaf = self._messages.latest_leaf()
        return None if leaf is None else await self.get_message(leaf)

    async def get_history(self, leaf_id: str | None = None) -> list[Message]:
        """The path root -> ``leaf_id`` (default: the latest leaf), overlays applied.

        The whole path, however long (DEVIATIONS 18). An unknown ``leaf_id``
        gives ``[]``; a ``leaf_id`` with children gives the path to it.
        """
        leaf = self._leaf(leaf_id)
        if leaf is None:
            return []
        messages = _parse_all(self._messages.path_contents(leaf))
        return _apply_overlays(messages, self._messages.compactions()) if messages else messages

    async def get_path_length(self, leaf_id: str | None = None) -> int:
        """Number of stored messages on the path root -> leaf (no overlays); 0 if unknown."""
        leaf = self._leaf(leaf_id)
        place = None if leaf is None else self._messages.place(leaf)
        return 0 if place is None else place[0]

    async def get_branches(self, message_id: str) -> list[Message]:
        """The children of ``message_id``, oldest first (ties in insertion order)."""
        return _parse_all(self._messages.children(_check_str(message_id, "message_id")))

    async def get_history_row_stats(self, leaf_id: str | None = None) -> list[dict[str, Any]]:
        """``[{"id", "role", "bytes"}]`` root -> leaf without reading content.

        ``bytes`` is the UTF-8 size of the stored JSON. No overlays.
        """
        leaf = self._leaf(leaf_id)
        if leaf is None:
            return []
        return [{"id": i, "role": role, "bytes": size} for i, role, size in self._messages.path_stats(leaf)]

    async def get_recent_history(
        self, max_bytes: int, min_recent: int = 1, *, leaf_id: str | None = None
    ) -> dict[str, Any]:
        """The newest messages of the path that fit ``max_bytes`` of stored JSON.

        The window always holds the leaf; it grows toward the root while it
        has fewer than ``min_recent`` rows or the next row still fits the
        budget. Only the window's rows are read, so the cost follows the
        window, not the history.

        Returns:
            ``{"messages": [...], "truncated": bool, "totalContentBytes": int}``:
            the window root-side first with overlays applied inside it;
            ``truncated`` when it does not start at the root;
            ``totalContentBytes`` the JSON bytes of the whole path.

        Raises:
            InvalidInputError: ``max_bytes`` or ``min_recent`` is not a number.
        """
        budget = min(_check_number(max_bytes, "max_bytes"), _MAX_SQL_INT)
        floor = max(1, int(min(_check_number(min_recent, "min_recent"), _MAX_SQL_INT)))
        leaf = self._leaf(leaf_id)
        place = None if leaf is None else self._messages.place(leaf)
        if place is None:
            return {"messages": [], "truncated": False, "totalContentBytes": 0}
        contents, truncated = self._messages.window(leaf, budget, floor)
        return {
            "messages": _apply_overlays(_parse_all(contents), self._messages.compactions()),
            "truncated": truncated,
            "totalContentBytes": place[1],
        }

    def _leaf(self, leaf_id: str | None) -> str | None:
        if leaf_id is None:
            return self._messages.latest_leaf()
        return _check_str(leaf_id, "leaf_id")

    # -- search ----------------------------------------------------------------

    async def search(self, query: str, *, limit: int = 20) -> list[dict[str, str]]:
        """Full-text search of this session's stored messages (text parts only).

        Every word must match, in any order; a ``"quoted part"`` must match as
        a phrase; nothing typed is read as FTS5 syntax; porter stemming;
        Chinese and Japanese text is found inside sentences (DEVIATIONS 9, 10).

        Returns:
            Up to ``limit`` hits, best first:
            ``[{"id", "role", "content", "createdAt"}]`` where ``content`` is
            the indexed text and ``createdAt`` the time the message was stored
            (ISO-8601 UTC with milliseconds). A blank query gives ``[]``.

        Raises:
            InvalidInputError: ``query`` is not a string or ``limit`` not an int >= 0.
            storage.SearchQueryError: SQLite failed (never hidden as ``[]``).
        """
        _check_str(query, "query")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidInputError(f"limit must be an int >= 0, not {limit!r}", field="limit")
        parsed = parse_query(query)
        if parsed is None or limit == 0:
            return []
        return [
            {"id": r.id, "role": r.role, "content": r.content, "createdAt": to_iso8601(r.created_at)}
            for r in self._messages.search(parsed, limit)
        ]

    # -- compaction overlays ---------------------------------------------------

    async def add_compaction(self, summary: str, from_id: str, to_id: str) -> dict[str, str]:
        """Store an overlay replacing ``from_id..to_id`` with ``summary`` on read.

        Returns ``{"id", "summary", "fromMessageId", "toMessageId",
        "createdAt"}`` (``id`` a random UUID; ``createdAt`` ISO-8601 UTC with
        ms, the stored time). The ids are not checked: an overlay whose ends
        are not both on a path is ignored when that path is read.

        Raises:
            InvalidInputError: an argument is not a string.
        """
        row = self._messages.add_compaction(
            str(uuid.uuid4()),
            _check_str(summary, "summary"),
            _check_str(from_id, "from_id"),
            _check_str(to_id, "to_id"),
        )
        return _compaction_record(row)

    async def get_compactions(self) -> list[dict[str, str]]:
        """Every compaction record of this session, oldest first (ties in insertion order)."""
        return [_compaction_record(row) for row in self._messages.compactions()]


# -- helpers -------------------------------------------------------------------


def _check_str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, not {type(value).__name__}", field=name)
    return value


def _check_number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise InvalidInputError(f"{name} must be a number, not {value!r}", field=name)
    return value


_REQUIRED = (("id", str, "a string"), ("role", str, "a string"), ("parts", list, "a list"))


def _check_message(message: Any) -> Message:
    """``message`` as a dict, or :class:`InvalidMessageError` naming the bad field."""
    if not isinstance(message, Mapping):
        raise InvalidMessageError(
            f"message must be a dict with id, role and parts, not {type(message).__name__}", field="message"
        )
    for name, kind, wanted in _REQUIRED:
        if name not in message:
            raise InvalidMessageError(f"message.{name} is missing", field=f"message.{name}")
        if not isinstance(message[name], kind):
            got = type(message[name]).__name__
            raise InvalidMessageError(f"message.{name} must be {wanted}, not {got}", field=f"message.{name}")
    message = dict(message)
    if isinstance(message.get("createdAt"), _dt.datetime):
        message["createdAt"] = _js_date(message["createdAt"])
    return message


def _js_date(value: _dt.datetime) -> str:
    """JavaScript's ``Date.toISOString()``: UTC, milliseconds, ``Z`` (naive means UTC)."""
    if value.tzinfo is not None:
        value = value.astimezone(_dt.timezone.utc)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def _serialise(message: Message) -> str:
    """Compact JSON as JavaScript writes it; NaN and infinities are refused (JSON has no such numbers)."""
    try:
        content = js_stringify(message)
        if "NaN" in content or "Infinity" in content:  # cheap filter; the strict pass decides
            json.dumps(message, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidMessageError(f"message is not JSON data: {exc}", field="message") from exc
    return content


def _search_text(parts: list[Any]) -> str:
    """The text parts joined by one space (what search indexes, §2)."""
    texts = [p.get("text") for p in parts if isinstance(p, Mapping) and p.get("type") == "text"]
    return " ".join(t if isinstance(t, str) else "" for t in texts)


_decode = json.JSONDecoder().raw_decode


def _parse(content: str) -> Message | None:
    """A stored row as a fresh message, or ``None`` when it is not a valid message (skipped, §2)."""
    try:
        # raw_decode skips json.loads' whitespace handling: stored JSON is compact.
        message, end = _decode(content)
        if end != len(content):
            message = json.loads(content)
    except (ValueError, TypeError):
        return None
    if (
        isinstance(message, dict)
        and isinstance(message.get("id"), str)
        and isinstance(message.get("role"), str)
        and isinstance(message.get("parts"), list)
    ):
        return message
    return None


def _parse_all(contents: Iterable[str]) -> list[Message]:
    return [m for m in map(_parse, contents) if m is not None]


def _overlay(row: CompactionRow) -> Message:
    return {
        "id": COMPACTION_PREFIX + row.id,
        "role": "assistant",
        "parts": [{"type": "text", "text": row.summary}],
        "createdAt": to_iso8601(row.created_at),
    }


def _apply_overlays(messages: list[Message], compactions: list[CompactionRow]) -> list[Message]:
    """Replace compacted stretches of a path by overlay messages (§8, branch-local: DEVIATIONS 13).

    At each position, among the compactions starting there whose end is on
    this path at or after it, the newest applies and the walk jumps past
    its end.
    """
    if not compactions:
        return messages
    starting: dict[str, list[CompactionRow]] = defaultdict(list)
    for row in compactions:
        starting[row.from_message_id].append(row)
    position = {m["id"]: i for i, m in enumerate(messages)}
    result: list[Message] = []
    i = 0
    while i < len(messages):
        chosen, end = None, -1
        for row in starting.get(messages[i]["id"], ()):
            stop = position.get(row.to_message_id, -1)
            if stop >= i:
                chosen, end = row, stop
        if chosen is None:
            result.append(messages[i])
            i += 1
        else:
            result.append(_overlay(chosen))
            i = end + 1
    return result


def _compaction_record(row: CompactionRow) -> dict[str, str]:
    return {
        "id": row.id,
        "summary": row.summary,
        "fromMessageId": row.from_message_id,
        "toMessageId": row.to_message_id,
        "createdAt": to_iso8601(row.created_at),
    }
