"""Micro-compaction: shrink tool outputs and long texts, keep rows under the size limit.

Three tools, all pure (inputs are never mutated; what is unchanged keeps its
identity):

* :func:`truncate_tool_output` shortens any JSON value to a character budget
  while keeping its shape: a string stays a string, a list a list, an object
  an object with its keys (docs/behaviours.md §9).
* :func:`truncate_older_messages` applies it, plus a text cap, to every
  message but the most recent ones, for what is sent to a model (docs/behaviours.md §9).
* :func:`enforce_row_size_limit` shrinks one message before it is stored so
  its JSON row stays under the SQLite row limit (docs/behaviours.md §10, docs/deviations.md #8).

Lengths are measured the way the TypeScript original measures them: JavaScript
string lengths (UTF-16 code units) of the value itself for strings and of its
compact JSON (:func:`actors.tokens.js_stringify`) for everything else. Row
sizes are UTF-8 bytes of the message's compact JSON. One difference: where a
JavaScript slice would cut a surrogate pair in half, the cut moves one unit
earlier, because half a pair cannot be stored as UTF-8.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from common.errors import InvalidInputError, InvalidMessageError

from .tokens import MAX_SAFE_INTEGER, js_stringify

logger = logging.getLogger(__name__)

#: Nesting depth at which a list or object is replaced by a marker string.
MAX_DEPTH = 8
#: Key added to an object that could not be shrunk below its budget.
TRUNCATED_FLAG = "__truncated"
#: Key holding the object's length (chars) before its string fields were shrunk.
TRUNCATED_CHARS = "__truncatedChars"
#: Default row-size limit: UTF-8 bytes of a stored message's JSON (docs/behaviours.md §10).
ROW_MAX_BYTES = 1_800_000
#: Budget (chars) for one tool output, or one other part field, of an oversized row.
ROW_TOOL_OUTPUT_CHARS = 1000
#: Text parts longer than this (chars) are replaced in an oversized row.
ROW_TEXT_PART_CHARS = 1000
#: How much of a replaced text part is kept as a preview (chars).
ROW_TEXT_PREVIEW_CHARS = 500

_OBJECT_NOTE = "Tool output omitted because it was too large to preserve structurally."
_ARRAY_NOTE = "Array output omitted because it was too large to preserve structurally"
# Part fields that name a part rather than carry its payload; never shortened.
_PART_IDENTITY_KEYS = frozenset({"type", "toolCallId", "toolName", "state", "id"})


class TruncatedOutput(TypedDict):
    """Result of :func:`truncate_tool_output`."""

    output: Any
    truncated: bool
    originalLength: int


# ── JavaScript string measures ───────────────────────────────────────────


def js_length(s: str) -> int:
    """``s.length`` in JavaScript: UTF-16 code units (fast for ASCII)."""
    if s.isascii():
        return len(s)
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def js_prefix(s: str, units: int) -> str:
    """``s.slice(0, units)`` in JavaScript, never splitting a surrogate pair.

    ``units`` counts UTF-16 code units; ``units <= 0`` gives ``""``.
    """
    if units <= 0:
        return ""
    head = s[:units]
    if head.isascii() or js_length(head) == len(head):
        return head
    used = 0
    for index, char in enumerate(head):
        used += 2 if ord(char) > 0xFFFF else 1
        if used > units:
            return head[:index]
    return head


def truncated_suffix(original_length: int) -> str:
    """The marker ending every shortened string: ``"... [truncated N chars]"``."""
    return f"... [truncated {original_length} chars]"


def _measure(value: Any) -> str:
    """The text whose length is compared with a budget (a string, else its JSON).

    Raises:
        InvalidInputError: ``value`` is not JSON data (bytes, sets, dates,
            objects, cycles, or nesting too deep to encode).
    """
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool) or (type(value) is int and abs(value) <= MAX_SAFE_INTEGER):
        return "null" if value is None else "true" if value is True else "false" if value is False else str(value)
    try:
        return _compact_json(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInputError(f"value is not JSON data: {_json_problem(exc)}", field="value") from None


def _json_problem(exc: BaseException) -> str:
    return "nested too deeply" if isinstance(exc, RecursionError) else str(exc)


# A number JSON writes differently from JavaScript ("1.0", "1e+16", "1e-07", an
# integer beyond 2**53, which has 16 digits or more) may be in the text. The digit
# the three forms begin with is matched once (not once per form): a search through
# megabytes of text, which an oversized message's row check runs, is 3-7 times faster.
_PYTHON_FLOAT = re.compile(r"[0-9](?:\.0(?![0-9])|e[+-]?[0-9]|[0-9]{15})")


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _compact_json(value: Any) -> str:
    """:func:`js_stringify`, faster: plain ``json.dumps`` unless a float may need JS formatting."""
    try:
        text = _ENCODER.encode(value)
    except TypeError:
        return js_stringify(value)  # e.g. a Mapping that is not a dict
    return js_stringify(value) if _PYTHON_FLOAT.search(text) else text


def _measured_length(value: Any) -> int:
    return js_length(_measure(value))


def _json_length(value: Any) -> int:
    """Length of ``value`` as it appears inside its parent's JSON (strings quoted)."""
    if isinstance(value, str):
        return js_length(_ENCODER.encode(value))
    return _measured_length(value)


# ── truncate_tool_output (docs/behaviours.md §9) ────────────────────────


def truncate_tool_output(value: Any, max_chars: int) -> TruncatedOutput:
    """Shorten ``value`` to about ``max_chars`` characters, keeping its structure.

    Returns ``{"output", "truncated", "originalLength"}``. A value whose
    measure (the string itself, else its compact JSON) is within
    ``max_chars`` comes back unchanged (same object) with ``truncated``
    false. Otherwise (docs/behaviours.md §9):

    * strings keep their head and end in ``"... [truncated N chars]"``;
    * lists and objects split the budget among their children (at least 80
      each, or all of it for a single child) and shrink them recursively;
      lists then drop trailing items and note it, objects shrink their
      string fields and may gain ``__truncated``/``__truncatedChars``; what
      still does not fit becomes a marker of the same kind (an object, or a
      one-item list), never a bare string;
    * lists and objects nested 8 deep become a marker string.

    Raises:
        InvalidInputError: ``max_chars`` is not a non-negative integer, or
            ``value`` is not JSON data (e.g. ``bytes``, a ``set``, a
            ``datetime``, nesting deeper than JSON encoding allows).
    """
    _check_count(max_chars, "max_chars")
    original_length = _measured_length(value)
    if original_length <= max_chars:
        return {"output": value, "truncated": False, "originalLength": original_length}
    output = _truncate_value(value, max_chars, original_length, 0)
    return {"output": output, "truncated": True, "originalLength": original_length}


def _truncate_value(value: Any, max_chars: int, original_length: int, depth: int) -> Any:
    if isinstance(value, str):
        return _truncate_string(value, max_chars, js_length(value))
    is_list = isinstance(value, (list, tuple))
    if not is_list and not isinstance(value, Mapping):
        return value
    if depth >= MAX_DEPTH:
        return f"[Nested output omitted {truncated_suffix(original_length)}]"
    if is_list:
        return _truncate_array(value, max_chars, original_length, depth)
    return _truncate_object(value, max_chars, original_length, depth)


def _truncate_string(value: str, max_chars: int, original_length: int) -> str:
    if js_length(value) <= max_chars:
        return value
    suffix = truncated_suffix(original_length)
    if max_chars <= len(suffix):
        return suffix[:max_chars]
    return js_prefix(value, max_chars - len(suffix)) + suffix


def _child_budget(max_chars: int, count: int) -> int:
    if count <= 1:
        return max_chars
    return max(80, max_chars // min(count, 10))


def _truncate_child(item: Any, budget: int, depth: int) -> Any:
    """``_truncate_value`` for a list item or object field (its original length measured lazily)."""
    if isinstance(item, str):
        return _truncate_string(item, budget, js_length(item))
    if isinstance(item, (list, tuple, Mapping)):
        return _truncate_value(item, budget, _measured_length(item), depth)
    return item


def _truncate_array(items: Sequence[Any], max_chars: int, original_length: int, depth: int) -> list:
    budget = _child_budget(max_chars, len(items))
    # Keep the longest prefix of shortened items that fits (at least one item);
    # the JSON length of a k-item list is 2 brackets + k items + (k - 1) commas.
    # Items past the cut are never shortened: a huge list costs what is kept.
    result: list[Any] = []
    total = 1
    for item in items:
        item = _truncate_child(item, budget, depth + 1)
        grown = total + _json_length(item) + 1
        if result and grown > max_chars:
            break
        result.append(item)
        total = grown
    if len(result) < len(items):
        result.append(f"Array output truncated {truncated_suffix(original_length)}")
    if _measured_length(result) > max_chars:
        return _array_marker(max_chars, original_length)
    return result


def _truncate_object(value: Mapping[Any, Any], max_chars: int, original_length: int, depth: int) -> dict:
    budget = _child_budget(max_chars, len(value))
    result = {key: _truncate_child(item, budget, depth + 1) for key, item in value.items()}
    result_length = _measured_length(result)
    if result_length <= max_chars:
        return result
    if _shrink_string_fields(result, max_chars, result_length) > max_chars:
        result[TRUNCATED_FLAG] = True
        result[TRUNCATED_CHARS] = result_length
    if _measured_length(result) > max_chars:
        return _object_marker(max_chars, original_length)
    return result


def _shrink_string_fields(result: dict, max_chars: int, length: int) -> int:
    """Cut string fields, longest first, to a quarter of the budget until ``result`` fits.

    Mutates ``result`` (a fresh dict) and returns its new JSON length.
    """
    strings = sorted(
        ((key, item) for key, item in result.items() if isinstance(item, str)),
        key=lambda entry: -js_length(entry[1]),
    )
    for key, text in strings:
        if length <= max_chars:
            break
        shorter = _truncate_string(text, max(0, max_chars // 4), js_length(text))
        length += _json_length(shorter) - _json_length(text)
        result[key] = shorter
    return length


def _object_marker(max_chars: int, original_length: int) -> dict:
    marker = {TRUNCATED_FLAG: True, TRUNCATED_CHARS: original_length, "note": _OBJECT_NOTE}
    if _measured_length(marker) <= max_chars:
        return marker
    return {TRUNCATED_FLAG: True, TRUNCATED_CHARS: original_length}


def _array_marker(max_chars: int, original_length: int) -> list:
    structured = [_object_marker(max_chars, original_length)]
    if _measured_length(structured) <= max_chars:
        return structured
    noted = [f"{_ARRAY_NOTE} {truncated_suffix(original_length)}"]
    if _measured_length(noted) <= max_chars:
        return noted
    return [truncated_suffix(original_length)[:max_chars]]


# ── truncate_older_messages (docs/behaviours.md §9) ─────────────────────


def _is_tool_part(part: Mapping[str, Any]) -> bool:
    kind = part.get("type")
    return isinstance(kind, str) and (kind.startswith("tool-") or kind == "dynamic-tool")


def truncate_older_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    keep_recent: int = 4,
    max_tool_output_chars: int = 500,
    max_text_chars: int = 10000,
) -> Sequence[Mapping[str, Any]]:
    """Shorten tool outputs and long texts in all but the last ``keep_recent`` messages.

    For the context sent to a model, not for storage (docs/behaviours.md §9). In each older
    message, tool parts (``tool-*``, ``dynamic-tool``) holding an ``output``
    get :func:`truncate_tool_output` with ``max_tool_output_chars``, and text
    parts longer than ``max_text_chars`` keep their head plus
    ``"... [truncated N chars]"`` (N = the original length).

    Returns ``messages`` itself when it has at most ``keep_recent`` items,
    otherwise a new list in which unchanged messages are the same objects and
    changed ones are shallow copies. Nothing passed in is mutated.

    Raises:
        InvalidInputError: an option is not a non-negative integer.
    """
    _check_count(keep_recent, "keep_recent")
    _check_count(max_tool_output_chars, "max_tool_output_chars")
    _check_count(max_text_chars, "max_text_chars")
    if len(messages) <= keep_recent:
        return messages
    cutoff = len(messages) - keep_recent
    older = [
        _truncate_message(message, max_tool_output_chars, max_text_chars)
        for message in messages[:cutoff]
    ]
    return older + list(messages[cutoff:])


def _truncate_message(message: Any, max_tool: int, max_text: int) -> Any:
    if not isinstance(message, Mapping):
        return message  # not a message: passed through untouched
    parts = message.get("parts")
    if not isinstance(parts, list):
        return message
    new_parts = [_truncate_part(part, max_tool, max_text) for part in parts]
    if all(new is old for new, old in zip(new_parts, parts)):
        return message
    return {**message, "parts": new_parts}


def _truncate_part(part: Any, max_tool: int, max_text: int) -> Any:
    if not isinstance(part, Mapping):
        return part
    if _is_tool_part(part) and "output" in part:
        shortened = truncate_tool_output(part["output"], max_tool)
        if shortened["truncated"]:
            return {**part, "output": shortened["output"]}
    text = part.get("text")
    if part.get("type") == "text" and isinstance(text, str):
        length = js_length(text)
        if length > max_text:
            return {**part, "text": js_prefix(text, max_text) + truncated_suffix(length)}
    return part


# ── enforce_row_size_limit (docs/behaviours.md §10, docs/deviations.md #8) ───


def row_bytes(message: Any) -> int:
    """UTF-8 bytes of ``message`` stored as compact JSON (what the row size limit counts).

    Raises:
        InvalidMessageError: ``message`` is not JSON data (or nests too deeply to encode).
    """
    try:
        return _utf8_length(_compact_json(message))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidMessageError(
            f"message is not JSON-serializable: {_json_problem(exc)}", field="message"
        ) from None


def _utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def enforce_row_size_limit(
    message: Mapping[str, Any], *, max_bytes: int = ROW_MAX_BYTES, size: int | None = None
) -> Mapping[str, Any]:
    """Return ``message`` shrunk so its JSON row is at most ``max_bytes`` UTF-8 bytes.

    ``size`` is :func:`row_bytes` of ``message`` when the caller already knows it
    (it serialised the message to store it): the message is then not encoded
    again just to be measured, which for a text of megabytes is most of the
    work. ``None`` (the default): measured here.

    A message within the limit is returned as the same object. Otherwise a
    shrunk copy is returned (the input is not mutated), in passes that stop
    as soon as the row fits (docs/behaviours.md §10):

    1. assistant messages only: every part with ``toolCallId``, ``output``
       and ``state == "output-available"`` gets
       ``truncate_tool_output(output, 1000)`` (the output keeps its shape);
       the ids of shortened calls go to ``metadata.compactedToolOutputs``;
    2. text parts over 1000 chars, in order, become
       ``"[Text truncated for storage (N chars). First 500 chars: ...]"``;
       their indices go to ``metadata.compactedTextParts``;
    3. our addition, for rows still too big (huge reasoning, file data URLs,
       tool inputs, custom parts): parts whose JSON exceeds 1000 chars,
       largest first, have each payload field (all but ``type``, ``id``,
       ``toolCallId``, ``toolName``, ``state``) shortened with
       ``truncate_tool_output(value, 1000)``; their indices go to
       ``metadata.compactedParts``. Such a part keeps its keys, but a
       shortened data URL no longer decodes: the metadata says so.

    Metadata lists are merged into existing ``metadata`` (ids already listed
    stay). Each pass logs a warning on this module's logger.

    Raises:
        InvalidMessageError: ``message`` is not a mapping, the message still
            exceeds ``max_bytes`` after all passes (e.g. a huge ``id`` or
            ``metadata``, or thousands of small parts), its ``parts`` is not
            a list, or its ``metadata`` is not an object; nothing is
            returned, so nothing gets stored.
        InvalidInputError: ``max_bytes`` is not a positive integer, or ``size``
            is given and is not an integer >= 0.
    """
    _check_count(max_bytes, "max_bytes", minimum=1)
    if size is not None:
        _check_count(size, "size")
    if not isinstance(message, Mapping):
        raise InvalidMessageError(f"message must be a mapping, not {type(message).__name__}", field="message")
    if size is None:
        size = row_bytes(message)
    if size <= max_bytes:
        return message
    shrink = _RowShrink(message, size, max_bytes)
    if message.get("role") != "assistant":
        logger.warning(
            "Non-assistant message %s is %d bytes, exceeds row limit. Truncating text parts.",
            shrink.message_id, size,
        )
        shrink.truncate_text_parts()
    else:
        logger.warning(
            "Message %s is %d bytes, compacting tool outputs to fit SQLite row limit",
            shrink.message_id, size,
        )
        shrink.compact_tool_outputs()
        if not shrink.fits():
            logger.warning(
                "Message %s still %d bytes after tool compaction, truncating text parts",
                shrink.message_id, shrink.size,
            )
            shrink.truncate_text_parts()
    if not shrink.fits():
        logger.warning(
            "Message %s still %d bytes after text truncation, compacting its other parts",
            shrink.message_id, shrink.size,
        )
        shrink.compact_other_parts()
    return shrink.result()


class _RowShrink:
    """One oversized message being shrunk; tracks its exact JSON size incrementally."""

    def __init__(self, message: Mapping[str, Any], size: int, max_bytes: int) -> None:
        self.message = message
        self.message_id = message.get("id")
        self.size = size
        self.max_bytes = max_bytes
        parts = message.get("parts")
        if not isinstance(parts, list):
            raise InvalidMessageError(
                f"message {self.message_id!r} has no parts list", field="message.parts"
            )
        self.parts = list(parts)
        metadata = message.get("metadata")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidMessageError(
                f"message {self.message_id!r} is over the row limit and its metadata is not "
                "an object, so the compaction cannot be recorded",
                field="message.metadata",
            )
        self.metadata = dict(metadata or {})
        self._metadata_bytes = self._current_metadata_bytes()
        self._part_sizes: dict[int, int] = {}  # bytes of self.parts[i] as it now stands, once measured
        self._replaced = False

    def fits(self) -> bool:
        return self.size <= self.max_bytes

    def compact_tool_outputs(self) -> None:
        for index, part in enumerate(self.parts):
            if not (
                isinstance(part, Mapping)
                and "output" in part
                and "toolCallId" in part
                and part.get("state") == "output-available"
            ):
                continue
            shortened = truncate_tool_output(part["output"], ROW_TOOL_OUTPUT_CHARS)
            if shortened["truncated"]:
                self._replace(index, {**part, "output": shortened["output"]})
                self._record("compactedToolOutputs", part["toolCallId"])

    def truncate_text_parts(self) -> None:
        for index, part in enumerate(self.parts):
            text = part.get("text") if isinstance(part, Mapping) else None
            if part_type(part) != "text" or not isinstance(text, str):
                continue
            length = js_length(text)
            if length <= ROW_TEXT_PART_CHARS:
                continue
            preview = js_prefix(text, ROW_TEXT_PREVIEW_CHARS)
            replaced = f"[Text truncated for storage ({length} chars). First 500 chars: {preview}...]"
            self._replace(index, {**part, "text": replaced})
            self._record("compactedTextParts", index)
            if self.fits():
                return

    def compact_other_parts(self) -> None:
        sizes = [(index, _part_bytes(part)) for index, part in enumerate(self.parts)]
        for index, _ in sorted(sizes, key=lambda entry: (-entry[1], entry[0])):
            if self.fits():
                return
            part = self.parts[index]
            if not isinstance(part, Mapping):
                continue
            smaller = {
                key: (value if key in _PART_IDENTITY_KEYS
                      else truncate_tool_output(value, ROW_TOOL_OUTPUT_CHARS)["output"])
                for key, value in part.items()
            }
            if _part_bytes(smaller) < _part_bytes(part):
                self._replace(index, smaller)
                self._record("compactedParts", index)

    def result(self) -> Mapping[str, Any]:
        shrunk = {**self.message, "parts": self.parts}
        if self.metadata != (self.message.get("metadata") or {}):
            shrunk["metadata"] = self.metadata
        final = row_bytes(shrunk)
        if final > self.max_bytes:
            raise InvalidMessageError(
                f"message {self.message_id!r} is {final} bytes after compaction, over the "
                f"row limit of {self.max_bytes} bytes (its id, metadata or number of parts "
                "is too large to shrink)",
                field="message",
            )
        return shrunk

    def _replace(self, index: int, part: Mapping[str, Any]) -> None:
        new_bytes = _part_bytes(part)
        self.size += new_bytes - self._bytes_of(index)
        self.parts[index] = part
        self._part_sizes[index] = new_bytes
        self._replaced = True

    def _bytes_of(self, index: int) -> int:
        """Bytes of ``self.parts[index]`` in the row, measured once."""
        size = self._part_sizes.get(index)
        if size is None:
            size = self._most_of_the_row(index)
            if size is None:
                size = _part_bytes(self.parts[index])
            self._part_sizes[index] = size
        return size

    def _most_of_the_row(self, index: int) -> int | None:
        """Bytes of a text part holding most of the unchanged row (a text of megabytes beside a
        few small parts), by subtraction: the row's size less everything else in it (the message
        without its parts, the other parts, the commas between parts), each small, instead of
        encoding that text once more. ``None`` for any other part, or once the row has changed."""
        part = self.parts[index]
        text = part.get("text") if isinstance(part, Mapping) else None
        if self._replaced or not isinstance(text, str) or 2 * len(text) <= self.size:
            return None
        rest = row_bytes({**self.message, "parts": []}) + len(self.parts) - 1
        for other in range(len(self.parts)):
            if other != index:
                rest += self._bytes_of(other)
        return self.size - rest

    def _record(self, key: str, item: Any) -> None:
        listed = list(self.metadata.get(key) or [])
        if item not in listed:
            listed.append(item)
        self.metadata[key] = listed
        new_bytes = self._current_metadata_bytes()
        self.size += new_bytes - self._metadata_bytes
        self._metadata_bytes = new_bytes

    def _current_metadata_bytes(self) -> int:
        # Bytes the metadata contributes to the row: its JSON, plus the
        # ',"metadata":' key when the message did not have one before.
        if "metadata" in self.message:
            return row_bytes(self.metadata if self.metadata or self.message["metadata"] is not None else None)
        if not self.metadata:
            return 0
        return len(',"metadata":') + row_bytes(self.metadata)


def part_type(part: Any) -> Any:
    """The ``type`` of a part, or ``None`` when the part is not a mapping."""
    return part.get("type") if isinstance(part, Mapping) else None


def _part_bytes(part: Any) -> int:
    """:func:`row_bytes` of one part. A flat part (a dict of string keys whose values are strings,
    booleans, ``None`` or safe integers, as a text part is) holds no number JavaScript writes
    differently, so its plain JSON is its row text: no search of that text for such numbers,
    which for a text of megabytes costs more than encoding it."""
    if type(part) is dict and all(type(key) is str and _is_plain(value) for key, value in part.items()):
        return _utf8_length(_ENCODER.encode(part))
    return row_bytes(part)


def _is_plain(value: Any) -> bool:
    kind = type(value)
    if kind is int:
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    return kind is str or kind is bool or value is None


def _check_count(value: Any, name: str, *, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{name} must be an integer >= {minimum}, got {value!r}", field=name)
