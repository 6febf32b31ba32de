"""Messages as a Session stores and reads them: validation, JSON, search text, overlays.

Pure functions (no storage, no I/O) used by :class:`actors.session.Session`:

* :func:`check_message` -- a message must be ``{"id": str, "role": str,
  "parts": list, ...}``; a ``datetime`` ``createdAt`` becomes JavaScript's
  ISO text. :func:`in_batch` re-addresses an error to ``messages[<i>]``.
* :func:`serialise` -- compact JSON written as JavaScript's ``JSON.stringify``
  writes it; :func:`parse` / :func:`parse_all` read stored rows back,
  skipping rows that are not valid messages (docs/behaviours.md §2);
  :func:`parse_path` reads a whole path fetched as one JSON array.
* :func:`search_text` -- what ``assistant_fts.content`` indexes: the ``text``
  parts joined by one space (docs/behaviours.md §2). :func:`tool_search_text` -- what
  ``assistant_fts_tools.tools`` indexes: each tool part's name and every string inside
  its ``input`` (our addition, so a search for a file a tool read finds the
  message; search results still show only :func:`search_text`).
* :func:`apply_overlays` -- compaction overlays on read (docs/behaviours.md §8, branch-local:
  docs/deviations.md #13).
"""

from __future__ import annotations

import datetime as _dt
import gc
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from common.errors import InvalidInputError, InvalidMessageError
from common.shapes import OVERLAY_PREFIX
from storage.tree.rows import CompactionRow, to_iso8601

from .tokens import js_stringify

Message = dict[str, Any]

#: Most parts one message may have (more: :class:`InvalidMessageError`, ``field="message.parts"``): every
#: part costs work on each read, token estimate and compaction of the session.
MAX_MESSAGE_PARTS = 10_000

_REQUIRED = (("id", str, "a string"), ("role", str, "a string"), ("parts", list, "a list"))


def check_message(message: Any) -> Message:
    """``message`` as a new dict, or :class:`InvalidMessageError` naming the bad field.

    A top-level ``createdAt`` given as a ``datetime`` is replaced by its
    JavaScript ``Date.toISOString()`` text (naive means UTC).
    """
    if type(message) is not dict and not isinstance(message, Mapping):  # a dict: no ABC check
        raise InvalidMessageError(
            f"message must be a dict with id, role and parts, not {type(message).__name__}", field="message"
        )
    for name, kind, wanted in _REQUIRED:
        if name not in message:
            raise InvalidMessageError(f"message.{name} is missing", field=f"message.{name}")
        if not isinstance(message[name], kind):
            got = type(message[name]).__name__
            raise InvalidMessageError(f"message.{name} must be {wanted}, not {got}", field=f"message.{name}")
    if len(message["parts"]) > MAX_MESSAGE_PARTS:
        raise InvalidMessageError(f"message.parts has {len(message['parts'])} parts; the limit is {MAX_MESSAGE_PARTS}",
                                  field="message.parts")
    message = dict(message)
    if isinstance(message.get("createdAt"), _dt.datetime):
        try:
            message["createdAt"] = _js_date(message["createdAt"])
        except (OverflowError, ValueError) as exc:
            raise InvalidMessageError(
                f"message.createdAt is outside the dates UTC can hold: {message['createdAt']!r}",
                field="message.createdAt",
            ) from exc
    return message


def in_batch(error: InvalidMessageError, index: int) -> InvalidMessageError:
    """``error`` about one message, re-addressed to ``messages[<index>]`` of a batch.

    ``message.role must be a string`` becomes ``messages[2].role must be a
    string`` (``field="messages[2].role"``); a text that does not start with
    its field gets the new field as a prefix.
    """
    where = f"messages[{index}]"
    old_field = error.field or "message"
    field = where + old_field[len("message"):] if old_field.startswith("message") else f"{where}.{old_field}"
    text = str(error)
    if text.startswith(old_field + " ") and not text.startswith(old_field + " '"):
        text = field + text[len(old_field):]
    else:
        text = f"{where}: {text}"
    return InvalidMessageError(text, field=field)


def _js_date(value: _dt.datetime) -> str:
    """JavaScript's ``Date.toISOString()``: UTC, milliseconds, ``Z`` (naive means UTC)."""
    if value.tzinfo is not None:
        value = value.astimezone(_dt.timezone.utc)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def serialise(message: Message) -> str:
    """Compact JSON as JavaScript writes it.

    Raises:
        InvalidMessageError: ``message`` is not JSON data (NaN and infinities
            included: JSON has no such numbers), or a string in it holds a
            lone UTF-16 surrogate (not text UTF-8 can store); ``.field`` then
            names the first such string, e.g. ``message.parts[0].text``.
    """
    try:
        content = js_stringify(message)
        if "NaN" in content or "Infinity" in content:  # cheap filter; the strict pass decides
            json.dumps(message, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidMessageError(f"message is not JSON data: {exc}", field="message") from exc
    if not content.isascii():
        try:
            content.encode("utf-8")
        except UnicodeEncodeError as exc:
            field = _surrogate_field(message)
            raise InvalidMessageError(f"{field} holds a lone UTF-16 surrogate, which is not text", field=field) from exc
    return content


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _surrogate_field(message: Message) -> str:
    """Where the first string holding a lone surrogate is (a key or a value), e.g. ``message.parts[0].text``."""
    stack: list[tuple[str, Any]] = [("message", message)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if not _is_text(value):
                return where
        elif isinstance(value, Mapping):
            for key in value:
                if isinstance(key, str) and not _is_text(key):
                    return where
            stack.extend(reversed([(f"{where}.{k}", v) for k, v in value.items()]))
        elif isinstance(value, (list, tuple)):
            stack.extend(reversed([(f"{where}[{i}]", v) for i, v in enumerate(value)]))
    return "message"


#: Largest search limit bound to SQLite: no file holds more hits, and SQLite binds no bigger int.
MAX_SEARCH_LIMIT = 2**62


def search_limit(limit: Any) -> int:
    """``limit`` of a search, checked and clamped to :data:`MAX_SEARCH_LIMIT`.

    Raises:
        InvalidInputError: (``field="limit"``) not an ``int >= 0`` (``bool`` is refused).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidInputError(f"limit must be an int >= 0, not {limit!r}", field="limit")
    return min(limit, MAX_SEARCH_LIMIT)


def utf8_length(text: str) -> int:
    """UTF-8 bytes of ``text`` (what SQLite's row size counts)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def search_text(parts: list[Any]) -> str:
    """The text parts joined by one space (what search indexes, docs/behaviours.md §2)."""
    texts = [p.get("text") for p in parts if (type(p) is dict or isinstance(p, Mapping)) and p.get("type") == "text"]
    return " ".join(t if isinstance(t, str) else "" for t in texts)


def _tool_name(part: Mapping[str, Any]) -> str | None:
    kind = part.get("type")
    if not isinstance(kind, str) or not (kind.startswith("tool-") or kind == "dynamic-tool"):
        return None
    name = part.get("toolName")
    if isinstance(name, str):
        return name
    return kind[len("tool-") :] if kind.startswith("tool-") else ""


def tool_search_text(parts: list[Any]) -> str:
    """Tool names and the strings inside their inputs, joined by one space.

    For every tool part (``type`` ``tool-<name>`` or ``dynamic-tool``): its
    ``toolName`` (else the name in its type), then every string value found
    anywhere inside ``input`` (object keys are not included), in order.
    Outputs are left out. ``""`` when there is no tool part.
    """
    pieces: list[str] = []
    for part in parts:
        name = _tool_name(part) if type(part) is dict or isinstance(part, Mapping) else None
        if name is None:
            continue
        if name:
            pieces.append(name)
        pieces.extend(_strings(part.get("input")))
    return " ".join(pieces)


def _strings(value: Any) -> list[str]:
    """Every string inside a JSON value, depth first, without recursion."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, Mapping):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
    return found


_decode = json.JSONDecoder().raw_decode


def parse(content: str) -> Message | None:
    """A stored row as a fresh message, or ``None`` when it is not a valid message (skipped, docs/behaviours.md §2)."""
    try:
        # raw_decode skips json.loads' whitespace handling: stored JSON is compact.
        message, end = _decode(content)
        if end != len(content):
            message = json.loads(content)
    except (ValueError, TypeError):
        return None
    return message if _is_message(message) else None


def _is_message(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("id"), str)
        and isinstance(value.get("role"), str)
        and isinstance(value.get("parts"), list)
    )


def parse_all(contents: Iterable[str]) -> list[Message]:
    """:func:`parse` of each row, invalid rows left out."""
    return [m for m in map(parse, contents) if m is not None]


def parse_path(leaf_first: str, count: int) -> list[Message] | None:
    """A path read as one JSON array (``MessageStore.path_json``) -> its messages root first.

    ``leaf_first`` holds ``count`` stored rows, leaf first, each already a
    JSON value; one ``json.loads`` replaces one per row. Values that are not
    messages are left out, as :func:`parse_all` leaves them out (docs/behaviours.md §2).
    Returns ``None`` when the text does not parse, or not into ``count``
    values: the caller then parses row by row.
    """
    # Parsing builds a dict and a list or two per message: with the collector on, every
    # few hundred of them trigger a collection that walks the objects built so far.
    collecting = gc.isenabled()
    gc.disable()
    try:
        values = json.loads(leaf_first)
    except (ValueError, RecursionError):
        return None
    finally:
        if collecting:
            gc.enable()
    if not isinstance(values, list) or len(values) != count:
        return None
    values.reverse()
    return [m for m in values if _is_message(m)]


def overlay_message(row: CompactionRow) -> Message:
    """The message standing for a compacted range on read (docs/behaviours.md §8); ``createdAt`` is when it was stored."""
    return {
        "id": OVERLAY_PREFIX + row.id,
        "role": "assistant",
        "parts": [{"type": "text", "text": row.summary}],
        "createdAt": to_iso8601(row.created_at),
    }


def apply_overlays(messages: list[Message], compactions: list[CompactionRow]) -> list[Message]:
    """Replace compacted stretches of a path by overlay messages (docs/behaviours.md §8, branch-local: docs/deviations.md #13).

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
            result.append(overlay_message(chosen))
            i = end + 1
    return result


def compaction_record(row: CompactionRow, *, iso: bool = False) -> dict[str, str]:
    """A compaction row with the spec's keys: ``{id, summary, fromMessageId, toMessageId, createdAt}``.

    ``createdAt`` is the stored SQLite text, ``YYYY-MM-DD HH:MM:SS.SSS`` UTC
    (what the original's ``getCompactions()`` reads back, with milliseconds),
    or with ``iso`` JavaScript ``Date`` text, ``YYYY-MM-DDTHH:MM:SS.SSSZ``
    (what its ``addCompaction()`` returns).
    """
    return {
        "id": row.id,
        "summary": row.summary,
        "fromMessageId": row.from_message_id,
        "toMessageId": row.to_message_id,
        "createdAt": to_iso8601(row.created_at) if iso else row.created_at,
    }
