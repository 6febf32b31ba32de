"""Adversarial inputs to micro-compaction and token estimates (docs/behaviours.md §9, §10).

Oracle: ``truncate_tool_output`` keeps JSON structure within a character
budget; what is not JSON is a clear :class:`InvalidInputError`, never a
value returned unchanged with ``truncated: true``; huge values cost what
is kept, not what is dropped.
"""

import datetime
import json
import time

import pytest

from actors.session import Session
from actors.tokens import estimate_message_tokens
from actors.truncation import enforce_row_size_limit, row_bytes, truncate_older_messages, truncate_tool_output
from common.errors import InvalidInputError, InvalidMessageError
from storage import SqlStorage

pytestmark = pytest.mark.both_storages


def nested(depth, leaf="x"):
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


class Loop(dict):
    pass


def cyclic():
    value = Loop()
    value["self"] = value
    return value


@pytest.mark.parametrize("value, problem", [
    (b"x" * 1000, "Object of type bytes is not JSON serializable"),
    ({1, 2, 3}, "Object of type set is not JSON serializable"),
    (datetime.datetime(2024, 1, 1), "Object of type datetime is not JSON serializable"),
    ({"ok": "y" * 500, "bad": {"deep": [b"z"]}}, "Object of type bytes is not JSON serializable"),
    ([object()], "Object of type object is not JSON serializable"),
    (cyclic(), "Circular reference detected"),
    (nested(5000), "nested too deeply"),
])
def test_values_that_are_not_json_are_invalid_input(value, problem):
    with pytest.raises(InvalidInputError) as raised:
        truncate_tool_output(value, 10)
    assert str(raised.value) == f"value is not JSON data: {problem}"
    assert raised.value.field == "value"


def test_a_short_non_json_value_is_refused_too():
    with pytest.raises(InvalidInputError, match="bytes is not JSON serializable"):
        truncate_tool_output(b"x", 1000)


@pytest.mark.parametrize("max_chars, string, obj, array", [
    (0, "", {"__truncated": True, "__truncatedChars": 1008}, [""]),
    (1, ".", {"__truncated": True, "__truncatedChars": 1008}, ["."]),
    (5, "... [", {"__truncated": True, "__truncatedChars": 1008}, ["... ["]),
    (30, "xxxx... [truncated 1000 chars]", {"a": "... [tr"}, ["... [truncated 1006 chars]"]),
])
def test_tiny_budgets_follow_the_original(max_chars, string, obj, array):
    assert truncate_tool_output("x" * 1000, max_chars)["output"] == string
    assert truncate_tool_output({"a": "x" * 1000}, max_chars)["output"] == obj
    assert truncate_tool_output(["x" * 1000, 1], max_chars)["output"] == array


def test_deep_but_encodable_nesting_becomes_a_marker_at_depth_eight():
    result = truncate_tool_output(nested(900, "y" * 1000), 100)
    inner = result["output"]
    for _ in range(8):
        (inner,) = inner
    assert inner.startswith("[Nested output omitted ... [truncated ")


def test_a_huge_list_costs_only_what_is_kept():
    items = [{"name": "n" * 100, "index": i} for i in range(100_000)]
    start = time.perf_counter()
    result = truncate_tool_output(items, 500)
    assert time.perf_counter() - start < 10.0  # pathological (quadratic) cost only; speed: benchmarks/
    assert result["truncated"] is True and result["originalLength"] == len(json.dumps(items, separators=(",", ":")))
    kept = truncate_tool_output(["x" * 100] * 1000, 2040)["output"]
    assert kept == ["x" * 100] * 19 + ["Array output truncated ... [truncated 103001 chars]"]


def test_older_message_truncation_passes_non_messages_through():
    messages = ["not a message", None, {"id": "a"}, {"id": "b", "parts": "x"}, {"id": "c", "parts": []}]
    assert truncate_older_messages(messages, keep_recent=0) == messages


@pytest.mark.parametrize("message", [None, ["x"] * 10, "text"])
def test_row_limit_of_something_that_is_not_a_message_is_an_invalid_message(message):
    with pytest.raises(InvalidMessageError, match=f"message must be a mapping, not {type(message).__name__}"):
        enforce_row_size_limit(message, max_bytes=5)


def test_row_bytes_of_a_too_deep_message_is_an_invalid_message():
    with pytest.raises(InvalidMessageError, match="message is not JSON-serializable: nested too deeply"):
        row_bytes({"id": "x", "role": "user", "parts": [nested(5000)]})


@pytest.mark.parametrize("part, tokens", [
    ({"type": "text", "text": 5}, 4 + 2),
    ({"type": "text", "text": ["a", "b"]}, 4 + 3),
    ({"type": "reasoning", "reasoning": {"k": "v"}}, 4 + 3),
    ({"type": "text", "text": "Hello world"}, 4 + 3),
    ("not a part", 4),
])
def test_malformed_text_parts_are_estimated_not_fatal(part, tokens):
    assert estimate_message_tokens([{"id": "m", "role": "user", "parts": [part]}]) == tokens


async def test_a_message_with_a_non_string_text_part_can_be_stored_and_searched(tmp_path):
    storage = SqlStorage.open(tmp_path / "odd.sqlite3")
    session = Session.create(storage)
    odd = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": 5}, {"type": "text", "text": "fine words"}]}
    assert await session.append_message(odd) is True
    assert await session.get_history() == [odd]
    assert [hit["id"] for hit in await session.search("fine")] == ["m1"]
    storage.close()


@pytest.mark.parametrize("parts", [True, 5, "text", {"type": "text", "text": "x"}, None])
def test_helpers_read_a_message_whose_parts_is_not_a_list_as_having_no_parts(parts):
    from actors.compaction import (
        align_boundary_backward,
        align_boundary_forward,
        compute_summary_budget,
        sanitize_tool_pairs,
    )
    from actors.summary import build_summary_prompt

    odd = {"id": "odd", "role": "assistant", "parts": parts}
    history = [{"id": "a", "role": "user", "parts": [{"type": "text", "text": "hi"}]}, odd]
    assert estimate_message_tokens([odd]) == 4
    assert compute_summary_budget(history) == 100
    assert align_boundary_forward(history, 1) == 1 and align_boundary_backward(history, 1) == 1
    assert sanitize_tool_pairs(history) == [m for m in history if m["parts"]]
    assert "[assistant]\n" in build_summary_prompt(history, None, 100)
