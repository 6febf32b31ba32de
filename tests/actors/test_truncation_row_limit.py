"""The row-size limit enforced before every write (docs/behaviours.md §10, docs/deviations.md #8)."""

import copy
import json
import logging

import pytest

from actors.truncation import ROW_MAX_BYTES, enforce_row_size_limit, js_length, js_prefix, row_bytes
from common.errors import InvalidInputError, InvalidMessageError

pytestmark = pytest.mark.both_storages

OBJECT_NOTE = "Tool output omitted because it was too large to preserve structurally."


def tool_message(call_id, output, message_id="big"):
    return {
        "id": message_id,
        "role": "assistant",
        "parts": [
            {"type": "text", "text": "Here is the export."},
            {"type": "tool-export", "toolCallId": call_id, "toolName": "export",
             "state": "output-available", "input": {"table": "orders"}, "output": output},
        ],
    }


def test_row_bytes_counts_utf8_bytes_of_compact_json():
    assert row_bytes({"id": "é", "n": 1.0}) == len('{"id":"é","n":1}'.encode())
    assert row_bytes({"big": 1e16, "small": 2.5, "text": "1.0 e-mail"}) == len(
        '{"big":10000000000000000,"small":2.5,"text":"1.0 e-mail"}')


def test_message_under_the_limit_is_returned_as_the_same_object():
    message = tool_message("c1", "x" * 1000)
    assert enforce_row_size_limit(message) is message


def test_three_million_char_tool_output_is_shortened_with_a_marker(caplog):
    message = tool_message("call-1", "x" * 3_000_000)
    before = copy.deepcopy(message)
    with caplog.at_level(logging.WARNING, logger="actors.truncation"):
        result = enforce_row_size_limit(message)
    assert message == before
    assert row_bytes(result) <= ROW_MAX_BYTES
    part = result["parts"][1]
    assert part["output"] == "x" * 971 + "... [truncated 3000000 chars]"
    assert part["input"] == {"table": "orders"}
    assert result["parts"][0] is message["parts"][0]
    assert result["metadata"] == {"compactedToolOutputs": ["call-1"]}
    assert caplog.messages == [
        f"Message big is {row_bytes(message)} bytes, compacting tool outputs to fit SQLite row limit"
    ]


def test_three_megabyte_structured_output_stays_a_json_object():
    output = {"rows": [{"v": "B" * 1000}] * 3000}
    message = tool_message("call-2", output)
    message["metadata"] = {"source": "bulk"}
    result = enforce_row_size_limit(message)
    assert row_bytes(result) <= ROW_MAX_BYTES
    stored = json.loads(json.dumps(result))
    rows_length = 2 + 3000 * len('{"v":"' + "B" * 1000 + '"}') + 2999
    assert stored["parts"][1]["output"] == {
        "rows": [{"__truncated": True, "__truncatedChars": rows_length, "note": OBJECT_NOTE}]
    }
    assert list(result["metadata"].items()) == [("source", "bulk"), ("compactedToolOutputs", ["call-2"])]


def test_several_tool_outputs_are_all_compacted_and_named():
    message = {
        "id": "multi", "role": "assistant",
        "parts": [
            {"type": "tool-a", "toolCallId": "c1", "state": "output-available", "output": "a" * 1_000_000},
            {"type": "tool-b", "toolCallId": "c2", "state": "input-available", "input": {"q": 1}},
            {"type": "tool-c", "toolCallId": "c3", "state": "output-available", "output": "c" * 1_000_000},
            {"type": "tool-d", "toolCallId": "c4", "state": "output-available", "output": "small"},
        ],
        "metadata": {"compactedToolOutputs": ["c0"]},
    }
    result = enforce_row_size_limit(message)
    assert result["metadata"]["compactedToolOutputs"] == ["c0", "c1", "c3"]
    assert result["parts"][3] is message["parts"][3]


def test_oversized_user_text_is_replaced_by_a_preview(caplog):
    text = "".join(f"line {i}. " for i in range(400_000))
    message = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}
    size = row_bytes(message)
    with caplog.at_level(logging.WARNING, logger="actors.truncation"):
        result = enforce_row_size_limit(message)
    assert result["parts"][0]["text"] == (
        f"[Text truncated for storage ({len(text)} chars). First 500 chars: {text[:500]}...]"
    )
    assert result["metadata"] == {"compactedTextParts": [0]}
    assert caplog.messages == [
        f"Non-assistant message u1 is {size} bytes, exceeds row limit. Truncating text parts."
    ]


def test_text_truncation_stops_as_soon_as_the_row_fits():
    message = {"id": "u2", "role": "user", "parts": [
        {"type": "text", "text": "p" * 500},
        {"type": "text", "text": "q" * 5000},
        {"type": "text", "text": "r" * 5000},
    ]}
    result = enforce_row_size_limit(message, max_bytes=7000)
    assert result["metadata"] == {"compactedTextParts": [1]}
    assert result["parts"][2] is message["parts"][2]
    assert row_bytes(result) <= 7000


def test_assistant_text_is_truncated_after_tool_outputs_did_not_suffice(caplog):
    message = tool_message("c1", "o" * 5000)
    message["parts"][0] = {"type": "text", "text": "t" * 5000}
    with caplog.at_level(logging.WARNING, logger="actors.truncation"):
        result = enforce_row_size_limit(message, max_bytes=2500)
    assert result["metadata"] == {"compactedToolOutputs": ["c1"], "compactedTextParts": [0]}
    assert row_bytes(result) <= 2500
    assert caplog.messages[1].startswith("Message big still ")
    assert caplog.messages[1].endswith(" bytes after tool compaction, truncating text parts")


def test_huge_reasoning_and_file_parts_are_compacted_and_recorded():
    message = {"id": "r1", "role": "assistant", "parts": [
        {"type": "reasoning", "text": "thinking " * 300_000},
        {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64," + "A" * 1_000_000},
        {"type": "text", "text": "Answer: 42"},
    ]}
    result = enforce_row_size_limit(message)
    assert row_bytes(result) <= ROW_MAX_BYTES
    assert result["metadata"] == {"compactedParts": [0]}
    assert result["parts"][0]["text"].endswith("... [truncated 2700000 chars]")
    assert len(result["parts"][0]["text"]) == 1000
    assert result["parts"][1] is message["parts"][1]  # the row fit once the largest part shrank
    assert result["parts"][2] is message["parts"][2]


def test_file_part_keeps_its_keys_when_its_data_url_is_cut():
    message = {"id": "f1", "role": "user", "parts": [
        {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64," + "A" * 3_000_000},
    ]}
    result = enforce_row_size_limit(message)
    part = result["parts"][0]
    assert list(part) == ["type", "mediaType", "url"]
    assert part["url"].startswith("data:image/png;base64,AAAA")
    assert part["url"].endswith("... [truncated 3000022 chars]")
    assert result["metadata"] == {"compactedParts": [0]}


def test_message_that_cannot_shrink_is_refused_with_a_clear_error():
    message = {"id": "meta", "role": "user", "parts": [{"type": "text", "text": "hi"}],
               "metadata": {"blob": "z" * 2_000_000}}
    with pytest.raises(InvalidMessageError, match=r"message 'meta' is \d+ bytes after compaction, over the row limit of 1800000 bytes"):
        enforce_row_size_limit(message)


def test_non_object_metadata_on_an_oversized_message_is_refused():
    message = {"id": "m", "role": "user", "parts": [{"type": "text", "text": "x" * 2_000_000}], "metadata": "note"}
    with pytest.raises(InvalidMessageError, match="metadata is not an object"):
        enforce_row_size_limit(message)


def test_null_metadata_is_replaced_by_the_compaction_record():
    message = {"id": "m", "role": "user", "parts": [{"type": "text", "text": "x" * 2_000_000}], "metadata": None}
    result = enforce_row_size_limit(message)
    assert result["metadata"] == {"compactedTextParts": [0]}
    assert row_bytes(result) <= ROW_MAX_BYTES


def test_limit_must_be_positive():
    with pytest.raises(InvalidInputError, match="max_bytes"):
        enforce_row_size_limit({"id": "m", "role": "user", "parts": []}, max_bytes=0)


# -- a size the caller already measured (the session serialised the message to store it) ----------------

ESCAPED_TEXT = 'say "hi"\n\ttab\\ \x01 é 😀 ' * 120_000  # escapes, control chars, 2- and 4-byte UTF-8


def oversized_messages():
    yield {"id": "t", "role": "user", "parts": [{"type": "text", "text": "hello world, " * 640_000}]}
    yield {"id": "e", "role": "user", "parts": [{"type": "text", "text": ESCAPED_TEXT}],
           "metadata": {"compactedTextParts": [3], "note": 1.5}}
    yield {"id": "mid", "role": "user", "createdAt": "2026-01-01T00:00:00.000Z", "parts": [
        {"type": "text", "text": "p" * 5000}, {"type": "text", "text": ESCAPED_TEXT, "state": "done"},
        {"type": "text", "text": "r" * 5000}]}
    yield tool_message("c9", {"rows": [{"v": 1.0, "w": "B" * 1000}] * 3000})
    yield {"id": "n", "role": "assistant", "parts": [
        {"type": "data-x", "n": 2**60, "f": 1e21, "blob": "z" * 2_000_000}, {"type": "text", "text": "ok"}]}


@pytest.mark.parametrize("message", list(oversized_messages()), ids=lambda m: m["id"])
def test_a_size_given_by_the_caller_shrinks_exactly_as_measuring_it(message, caplog):
    with caplog.at_level(logging.WARNING, logger="actors.truncation"):
        measured = enforce_row_size_limit(message)
    logged = list(caplog.messages)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="actors.truncation"):
        given = enforce_row_size_limit(message, size=row_bytes(message))
    assert json.dumps(given) == json.dumps(measured)
    assert caplog.messages == logged


@pytest.mark.parametrize("slack", [0, -1])
def test_text_truncation_stops_at_the_exact_byte_with_a_huge_escaped_text(slack):
    # The huge text's bytes are found by subtraction (the row less its other pieces): the stop after it
    # must fall on the exact byte, escapes and multi-byte characters included.
    message = {"id": "x", "role": "user", "parts": [
        {"type": "text", "text": ESCAPED_TEXT}, {"type": "text", "text": "q" * 5000}]}
    first_only = {**message, "parts": [
        {"type": "text", "text": f"[Text truncated for storage ({js_length(ESCAPED_TEXT)} chars). "
                                 f"First 500 chars: {js_prefix(ESCAPED_TEXT, 500)}...]"},
        message["parts"][1]], "metadata": {"compactedTextParts": [0]}}
    limit = row_bytes(first_only) + slack
    for size in (None, row_bytes(message)):
        result = enforce_row_size_limit(message, max_bytes=limit, size=size)
        assert result["metadata"] == ({"compactedTextParts": [0]} if slack == 0 else {"compactedTextParts": [0, 1]})
        assert row_bytes(result) <= limit


@pytest.mark.parametrize("part", [
    {"type": "text", "text": ESCAPED_TEXT[:5000]},
    {"type": "data-x", "n": 2**60, "ok": True, "none": None},
    {"type": "data-x", "n": 1.0},
    {"type": "data-x", "nested": {"n": 1e16}},
    {1: "int key"},
])
def test_a_part_is_measured_as_its_row_text(part):
    from actors.truncation import _part_bytes

    assert _part_bytes(part) == row_bytes(part)


@pytest.mark.parametrize("size", [-1, 1.5, True, "10"])
def test_a_given_size_must_be_a_count_of_bytes(size):
    with pytest.raises(InvalidInputError, match="size must be an integer >= 0") as caught:
        enforce_row_size_limit({"id": "m", "role": "user", "parts": []}, size=size)
    assert caught.value.field == "size"
