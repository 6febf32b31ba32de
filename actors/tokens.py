"""Token estimation, exactly as the original (docs/behaviours.md §9).

No tokenizer is loaded: the estimate is a heuristic that must match the
TypeScript original number for number, because thresholds, broadcasts and
compaction budgets are expressed in it. Lengths are UTF-16 code units (a
JS string's ``length``), words are split on JavaScript's ``\\s``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

#: Characters per token of the length estimate.
CHARS_PER_TOKEN = 4
#: Tokens per word of the word estimate.
TOKENS_PER_WORD = 1.3
#: Fixed cost of every message (role, framing).
TOKENS_PER_MESSAGE = 4

# JavaScript's \s (ECMAScript WhiteSpace + LineTerminator), which differs from
# Python's: no \x1c-\x1f or \x85, but U+FEFF.
_JS_WHITESPACE = re.compile(
    "[\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+"
)


def utf16_length(s: str) -> int:
    """Length of ``s`` in UTF-16 code units (JavaScript's ``s.length``)."""
    if s.isascii():
        return len(s)
    # surrogatepass: a lone surrogate is one code unit, as in JavaScript.
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def estimate_string_tokens(s: str | None) -> int:
    """Estimated tokens of ``s``: ``ceil(max(utf16_len / 4, words * 1.3))``; 0 for ``""``/``None``.

    Examples: ``"a"`` -> 2, ``"Hello world"`` -> 3, ``"😀😀"`` -> 2.
    """
    if not s:
        return 0
    words = sum(1 for w in _JS_WHITESPACE.split(s) if w)
    return math.ceil(max(utf16_length(s) / CHARS_PER_TOKEN, words * TOKENS_PER_WORD))


def js_stringify(value: Any) -> str:
    """``JSON.stringify(value)`` for JSON data: compact, non-ASCII kept, ``1.0`` -> ``1``."""
    return json.dumps(_js_numbers(value), separators=(",", ":"), ensure_ascii=False)


def _js_numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and math.isfinite(value):
        return int(value)
    if isinstance(value, Mapping):
        return {k: _js_numbers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_js_numbers(v) for v in value]
    return value


def _estimate_value(value: Any) -> int:
    if value is None:
        return 0
    return estimate_string_tokens(value if isinstance(value, str) else js_stringify(value))


def _part_tokens(part: Mapping[str, Any]) -> int:
    kind = part.get("type")
    if kind in ("text", "reasoning"):
        text = part.get("text")
        # A malformed (non-string) text is counted as its JSON rather than failing the write.
        return _estimate_value(text if text is not None else part.get("reasoning"))
    if isinstance(kind, str) and (kind.startswith("tool-") or kind == "dynamic-tool"):
        output = part.get("output")
        return _estimate_value(part.get("input")) + _estimate_value(
            output if output is not None else part.get("result")
        )
    if part.get("text") is not None:
        return _estimate_value(part["text"])
    if part.get("result") is not None:
        return _estimate_value(part["result"])
    return 0


def message_parts(message: Mapping[str, Any]) -> list[Any]:
    """``message["parts"]`` when it is a list, else ``[]`` (a malformed message has no parts)."""
    parts = message.get("parts")
    return parts if isinstance(parts, list) else []


def estimate_message_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """Estimated tokens of ``messages``: 4 per message plus its parts (docs/behaviours.md §9).

    ``text``/``reasoning`` parts count their text; tool parts (``tool-*``,
    ``dynamic-tool``) count ``input`` plus ``output`` (or ``result``); other
    parts count ``text`` or ``result`` when present. Non-string values are
    counted as their JSON (also a malformed non-string ``text``), parts that
    are not objects count nothing. ``[]`` -> 0; a message with no parts -> 4.
    """
    total = 0
    for message in messages:
        total += TOKENS_PER_MESSAGE
        for part in message_parts(message):
            if isinstance(part, Mapping):
                total += _part_tokens(part)
    return total
