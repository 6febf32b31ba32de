"""Micro-compaction: structure-preserving truncation (docs/behaviours.md §9) and older-message truncation."""

import copy

import pytest

from actors.truncation import (
    js_length,
    js_prefix,
    truncate_older_messages,
    truncate_tool_output,
    truncated_suffix,
)
from common.errors import InvalidInputError

OBJECT_NOTE = "Tool output omitted because it was too large to preserve structurally."


def test_js_length_counts_utf16_units_and_prefix_never_splits_a_pair():
    assert js_length("a😀é") == 4
    assert js_prefix("ab😀cd", 3) == "ab"  # JS would keep half of the pair
    assert js_prefix("ab😀cd", 4) == "ab😀"
    assert js_prefix("abc", 0) == ""
    assert js_prefix("abc", 10) == "abc"


def test_value_within_budget_is_returned_unchanged_and_same_object():
    value = {"a": [1, 2, 3]}
    result = truncate_tool_output(value, 100)
    assert result == {"output": value, "truncated": False, "originalLength": 13}
    assert result["output"] is value


def test_string_keeps_head_and_ends_with_marker_of_original_length():
    result = truncate_tool_output("x" * 100, 40)
    # "... [truncated 100 chars]" is 25 chars, so 15 of the original remain.
    assert result == {"output": "x" * 15 + "... [truncated 100 chars]", "truncated": True, "originalLength": 100}
    assert len(result["output"]) == 40


def test_string_budget_smaller_than_marker_gives_marker_prefix():
    assert truncate_tool_output("x" * 100, 10)["output"] == "... [trunc"


def test_string_length_is_measured_in_utf16_units():
    result = truncate_tool_output("😀" * 30, 40)  # 60 units
    assert result["originalLength"] == 60
    assert result["output"] == "😀" * 8 + "... [truncated 60 chars]"


def test_array_drops_trailing_items_and_notes_it():
    value = ["a" * 98] * 5  # JSON: 5 * 100 + 4 commas + 2 brackets = 506
    result = truncate_tool_output(value, 301)
    kept = "a" * 56 + "... [truncated 98 chars]"  # each child gets max(80, 301 // 5) = 80
    assert result == {
        "output": [kept, kept, kept, "Array output truncated ... [truncated 506 chars]"],
        "truncated": True,
        "originalLength": 506,
    }


def test_array_that_cannot_fit_with_its_note_becomes_a_structured_marker():
    result = truncate_tool_output(["a" * 300, "b" * 300, "c" * 300], 200)
    assert result["originalLength"] == 910
    assert result["output"] == [{"__truncated": True, "__truncatedChars": 910, "note": OBJECT_NOTE}]


def test_array_marker_falls_back_to_strings_for_tiny_budgets():
    assert truncate_tool_output(["a" * 300, "b" * 300], 60)["output"] == [
        {"__truncated": True, "__truncatedChars": 607}
    ]
    assert truncate_tool_output(["a" * 300, "b" * 300], 20)["output"] == ["... [truncated 607 c"]


def test_object_children_share_the_budget_and_keep_their_keys():
    value = {"title": "t" * 400, "id": 7, "body": "b" * 2000}
    result = truncate_tool_output(value, 200)
    assert result["output"] == {
        "title": "t" * 55 + "... [truncated 400 chars]",
        "id": 7,
        "body": "b" * 54 + "... [truncated 2000 chars]",
    }
    assert list(result["output"]) == ["title", "id", "body"]
    assert value["title"] == "t" * 400  # input untouched


def test_object_shrinks_longest_string_fields_to_a_quarter_budget_until_it_fits():
    result = truncate_tool_output({"a": "x" * 500, "b": "y" * 500}, 150)
    # Children first get 80 chars each (175 chars in all); then "a" is cut to
    # 150 // 4 = 37 chars (its length before that, 80, goes in the marker) and it fits.
    assert result["output"] == {
        "a": "x" * 13 + "... [truncated 80 chars]",
        "b": "y" * 55 + "... [truncated 500 chars]",
    }


def test_object_that_cannot_shrink_becomes_an_object_marker():
    value = {f"n{i}": i for i in range(30)}
    length = len('{' + ",".join(f'"n{i}":{i}' for i in range(30)) + '}')
    assert truncate_tool_output(value, 100)["output"] == {"__truncated": True, "__truncatedChars": length}
    assert truncate_tool_output(value, 150)["output"] == {
        "__truncated": True, "__truncatedChars": length, "note": OBJECT_NOTE,
    }


def nest(levels):
    value = "x" * 1000
    for _ in range(levels):
        value = {"a": value}
    return value


def test_containers_nested_eight_deep_become_a_marker_string():
    result = truncate_tool_output(nest(10), 500)
    # The object at depth 8 is nest(2): 1002 + 2 * 6 = 1014 chars of JSON.
    expected = "[Nested output omitted ... [truncated 1014 chars]]"
    for _ in range(8):
        expected = {"a": expected}
    assert result == {"output": expected, "truncated": True, "originalLength": 1062}


def test_scalars_other_than_strings_are_left_as_they_are():
    assert truncate_tool_output(12345678901, 5) == {"output": 12345678901, "truncated": True, "originalLength": 11}
    assert truncate_tool_output(None, 5)["output"] is None


def test_bad_budget_is_rejected():
    with pytest.raises(InvalidInputError, match="max_chars must be an integer >= 0"):
        truncate_tool_output("x", -1)
    with pytest.raises(InvalidInputError):
        truncate_tool_output("x", 2.5)


# ── truncate_older_messages ─────────────────────────────────────────────


def text_message(message_id, text, role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": text}]}


def test_long_text_in_older_messages_is_cut_with_the_original_length():
    messages = [text_message("m1", "A" * 50), text_message("m2", "short")]
    result = truncate_older_messages(messages, keep_recent=1, max_text_chars=20)
    assert result[0]["parts"][0]["text"] == "AAAAAAAAAAAAAAAAAAAA... [truncated 50 chars]"
    assert result[1] is messages[1]


def test_short_input_is_returned_as_the_same_list():
    messages = [text_message(f"m{i}", "A" * 50_000) for i in range(4)]
    assert truncate_older_messages(messages) is messages


def test_recent_messages_and_unchanged_messages_keep_identity_and_inputs_are_not_mutated():
    tool = {
        "id": "a1", "role": "assistant",
        "parts": [
            {"type": "tool-search", "toolCallId": "c1", "state": "output-available",
             "input": {"q": "x"}, "output": {"rows": ["r" * 300] * 4}},
            {"type": "text", "text": "done"},
        ],
    }
    small = text_message("u1", "hello")
    recent = [text_message(f"r{i}", "B" * 20_000) for i in range(4)]
    messages = [small, tool, *recent]
    before = copy.deepcopy(messages)
    result = truncate_older_messages(messages)
    assert messages == before
    assert result[0] is small
    assert all(a is b for a, b in zip(result[2:], recent))
    shortened = result[1]
    assert shortened is not tool
    assert shortened["parts"][1] is tool["parts"][1]
    assert shortened["parts"][0]["output"] == truncate_tool_output(tool["parts"][0]["output"], 500)["output"]
    assert shortened["parts"][0]["input"] == {"q": "x"}


def test_tool_outputs_of_older_messages_use_their_own_budget():
    part = {"type": "dynamic-tool", "toolName": "fetch", "toolCallId": "c9", "output": "z" * 800}
    messages = [{"id": "a", "role": "assistant", "parts": [part]}, text_message("b", "x")]
    result = truncate_older_messages(messages, keep_recent=1, max_tool_output_chars=100)
    assert result[0]["parts"][0]["output"] == "z" * 75 + "... [truncated 800 chars]"


def test_keep_recent_zero_truncates_everything_and_negative_is_rejected():
    messages = [text_message("m1", "A" * 30)]
    assert truncate_older_messages(messages, keep_recent=0, max_text_chars=10)[0]["parts"][0]["text"] == (
        "A" * 10 + truncated_suffix(30)
    )
    with pytest.raises(InvalidInputError, match="keep_recent"):
        truncate_older_messages(messages, keep_recent=-1)
