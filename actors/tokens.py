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


# The ASCII characters str.split() takes for whitespace and JavaScript's \s does not.
_ASCII_NOT_JS_WHITESPACE = re.compile("[\x1c-\x1f]")


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
    if s.isascii() and _ASCII_NOT_JS_WHITESPACE.search(s) is None:
        # The usual text: str.split() cuts exactly where JavaScript's \s does (C speed, no pieces kept empty).
        return math.ceil(max(len(s) / CHARS_PER_TOKEN, len(s.split()) * TOKENS_PER_WORD))
    pieces = _JS_WHITESPACE.split(s)  # only the first and the last piece can be empty
    words = len(pieces) - (pieces[0] == "") - (len(pieces) > 1 and pieces[-1] == "")
    return math.ceil(max(utf16_length(s) / CHARS_PER_TOKEN, words * TOKENS_PER_WORD))


#: Integers up to this magnitude are exact in a JavaScript number (2**53).
MAX_SAFE_INTEGER = 2**53


def js_number(value: int | float) -> str:
    """ECMAScript ``Number::toString(value)``: what ``String(x)`` and ``JSON.stringify`` write.

    Shortest round-trip digits (Python's ``repr`` finds the same ones), plain
    notation from 1e-7 up to below 1e21 and exponent notation outside it
    (``1e+21``, ``-3e-7``, ``1.5e-7``); ``-0`` is ``"0"``. An ``int`` is
    first rounded to the double JavaScript would hold (``2**53 + 1`` ->
    ``"9007199254740992"``); one beyond the double range is ``"Infinity"``.
    NaN and infinities give ``"NaN"``, ``"Infinity"``, ``"-Infinity"``.
    """
    try:
        x = float(value)
    except OverflowError:
        x = math.inf if value > 0 else -math.inf
    if not math.isfinite(x):
        return "NaN" if x != x else "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0"
    if x < 0:
        return "-" + js_number(-x)
    mantissa, _, exponent = repr(x).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)  # digits before the decimal point
    significant = digits.lstrip("0")
    point -= len(digits) - len(significant)
    digits = significant.rstrip("0")
    k, n = len(digits), point
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return f"{digits[:n]}.{digits[n:]}"
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    e = f"e{'+' if n >= 1 else '-'}{abs(n - 1)}"
    return digits + e if k == 1 else f"{digits[0]}.{digits[1:]}{e}"


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


class _NeedsJsText(Exception):
    """A number whose JavaScript text Python's encoder cannot write (``1e+21``, ``1e-7``)."""


def js_stringify(value: Any) -> str:
    """``JSON.stringify(value)`` for JSON data: compact, non-ASCII kept, numbers as
    :func:`js_number` writes them (``1.0`` -> ``1``, ``1e21`` -> ``1e+21``).

    NaN and infinities are written as Python's ``json`` writes them
    (``NaN``, ``Infinity``) so that callers can refuse them.

    Raises:
        TypeError: ``value`` holds something that is not JSON data.
        ValueError: ``value`` holds an integer beyond the range of a double
            (JavaScript would read it as ``Infinity``), or a cycle.
    """
    try:
        return _ENCODER.encode(_js_numbers(value))
    except _NeedsJsText:
        return _js_json(value)


def _js_numbers(value: Any) -> Any:
    """``value`` with every number made one Python's encoder writes as JavaScript does.

    Raises:
        _NeedsJsText: a number needs exponent text Python does not write.
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return value
        return _js_float(_double(value))
    if kind is float:
        return _js_float(value)
    if kind is dict:  # the usual containers first: no ABC check
        return {k: _js_numbers(v) for k, v in value.items()}
    if kind is list:
        return [_js_numbers(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _js_numbers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_js_numbers(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):  # int/float subclasses
        return _js_numbers(float(value) if isinstance(value, float) else int(value))
    return value


def _double(value: int) -> float:
    try:
        return float(value)
    except OverflowError:
        raise ValueError(
            f"an integer of {value.bit_length()} bits is out of the range of a JavaScript number"
        ) from None


def _js_float(x: float) -> Any:
    if not math.isfinite(x):
        return x  # written NaN/Infinity; serialise() refuses them
    if x.is_integer():
        if abs(x) < 1e21:
            return int(js_number(x))  # the digits JavaScript writes (123456789012345680000)
        raise _NeedsJsText
    if abs(x) >= 1e-4:
        return x  # repr() writes plain digits here, exactly as JavaScript does
    raise _NeedsJsText


def _js_json(value: Any) -> str:
    """:func:`js_stringify` in Python, for values holding numbers only JavaScript's text fits."""
    if isinstance(value, str):
        return _ENCODER.encode(value)
    if value is None or isinstance(value, bool):
        return "null" if value is None else "true" if value else "false"
    if isinstance(value, (int, float)):
        if isinstance(value, int) and not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            _double(value)  # raises beyond the double range
        return _ENCODER.encode(value) if isinstance(value, float) and not math.isfinite(value) else js_number(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{_js_key(k)}:{_js_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_js_json(v) for v in value) + "]"
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _js_key(key: Any) -> str:
    if isinstance(key, str):
        return _ENCODER.encode(key)
    if key is None or isinstance(key, (bool, int, float)):
        return _ENCODER.encode(_js_json(key))  # JavaScript keys are strings: {"1e+21": ...}
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


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
            if type(part) is dict or isinstance(part, Mapping):
                total += _part_tokens(part)
    return total
