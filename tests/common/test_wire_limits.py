"""``decode_body(..., max_items=N)``: the value count of a body, JSON and msgpack alike.

A body holding exactly ``N`` values in arrays and objects (each array,
object, element and member counts) decodes; one more is a 413
``PayloadTooLargeError`` with ``field="body"``. JSON text is counted
before parsing, brackets and commas inside strings (escapes included)
not counted; msgpack while parsing.
"""

from __future__ import annotations

import json
import random

import msgpack
import pytest

from common.errors import PayloadTooLargeError
from common.wire import JSON, MSGPACK, decode_body, json_items


def values(value):
    """The reference count: every list and dict, plus each of their elements and members."""
    if isinstance(value, list):
        return 1 + len(value) + sum(values(item) for item in value)
    if isinstance(value, dict):
        return 1 + len(value) + sum(values(item) for item in value.values())
    return 0


TRICKY_STRINGS = ["", ",", "[{,}]", 'a"b', "\\", '\\"', "\\\\", "x" * 50, "é,[", '"],{"']


def random_value(rng, depth=0):
    roll = rng.random()
    if depth > 4 or roll < 0.3:
        return rng.choice([0, 1.5, None, True, rng.choice(TRICKY_STRINGS)])
    if roll < 0.65:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(TRICKY_STRINGS) + str(i): random_value(rng, depth + 1) for i in range(rng.randint(0, 4))}


CASES = [[], {}, [[]], [1, [2, [3, {"k": []}]]], {"a": [1, 2, {}], "b": "x,[{"}, "just text", 7,
         {"message": {"id": "m", "role": "user", "parts": [{}, {"type": "text", "text": "a, b, [c]"}]}}]


@pytest.mark.parametrize("kind", [JSON, MSGPACK])
def test_exactly_the_limit_decodes_and_one_more_is_a_413(kind):
    rng = random.Random(26)
    cases = CASES + [random_value(rng) for _ in range(300)]
    for value in cases:
        count = values(value)
        for spacing in ((",", ":"), (", ", ": ")) if kind == JSON else ((",", ":"),):
            data = json.dumps(value, separators=spacing).encode() if kind == JSON else msgpack.packb(value)
            assert decode_body(data, kind, max_items=count) == value
            if count == 0:
                continue
            with pytest.raises(PayloadTooLargeError) as refused:
                decode_body(data, kind, max_items=count - 1)
            assert refused.value.field == "body"
            assert str(refused.value) == (f"the body holds more than {count - 1} values in arrays and objects, "
                                          "the server's limit (server.max_body_items)")


def test_commas_and_brackets_inside_strings_are_not_counted():
    text = "a, b, [c], {d}, \\\"e\\\", " * 20_000
    body = json.dumps({"message": {"id": "m", "role": "user", "parts": [{"type": "text", "text": text}]}}).encode()
    assert json_items(body, 100) == 11  # 4 containers, 7 members: the text's 100,000 commas do not count
    assert decode_body(body, JSON, max_items=11)["message"]["parts"][0]["text"] == text


def test_a_million_empty_arrays_are_refused_before_any_is_built():
    json_body = b"[" + b",".join([b"[]"] * 1_000_000) + b"]"
    packed = b"\xdd" + (1_000_000).to_bytes(4, "big") + b"\x90" * 1_000_000
    for data, kind in ((json_body, JSON), (packed, MSGPACK)):
        with pytest.raises(PayloadTooLargeError):
            decode_body(data, kind, max_items=100_000)


def test_without_a_bound_nothing_is_counted():
    packed = b"\xdd" + (200_000).to_bytes(4, "big") + b"\x90" * 200_000
    assert len(decode_body(packed, MSGPACK)) == 200_000
    assert len(decode_body(b"[" + b",".join([b"{}"] * 200_000) + b"]", JSON)) == 200_000
