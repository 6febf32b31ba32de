"""The row-size limit on every Session write (docs/behaviours.md §10, docs/deviations.md #8)."""

import pytest

from actors import InvalidMessageError
from actors.session import Session
from actors.truncation import ROW_MAX_BYTES, truncate_tool_output
from tests.support.backends import index_rows, row_count

pytestmark = pytest.mark.both_storages

BIG_STRING = "A" * 3_000_000
BIG_STRUCTURE = {"rows": [{"v": "B" * 1000}] * 3000}


def tool_message(mid, call_id, output):
    return {
        "id": mid,
        "role": "assistant",
        "parts": [
            {"type": "text", "text": "Here is the file."},
            {"type": "tool-read_file", "toolCallId": call_id, "toolName": "read_file", "state": "output-available",
             "input": {"path": "/srv/app/big.json"}, "output": output},
        ],
    }


def row_sizes(storage):
    if row_count(storage, "assistant_messages") == 0:
        return {}  # on SQLite the table may not exist yet (made by the first message)
    return dict(storage.exec("SELECT id, octet_length(content) FROM assistant_messages"))


async def test_huge_tool_outputs_are_shrunk_keeping_their_shape(storage):
    session = Session.create(storage)
    assert await session.append_message(tool_message("m1", "call-1", BIG_STRING)) is True
    assert await session.append_message(tool_message("m2", "call-2", BIG_STRUCTURE)) is True
    sizes = row_sizes(storage)
    assert set(sizes) == {"m1", "m2"} and max(sizes.values()) < 2000

    first = await session.get_message("m1")
    output = first["parts"][1]["output"]
    assert len(output) == 1000 and output.endswith("... [truncated 3000000 chars]")
    assert first["metadata"] == {"compactedToolOutputs": ["call-1"]}
    assert first["parts"][0] == {"type": "text", "text": "Here is the file."}
    assert first["parts"][1]["input"] == {"path": "/srv/app/big.json"}

    second = await session.get_message("m2")
    structured = second["parts"][1]["output"]
    assert isinstance(structured, dict) and list(structured) == ["rows"]
    assert structured == truncate_tool_output(BIG_STRUCTURE, 1000)["output"]
    assert second["metadata"] == {"compactedToolOutputs": ["call-2"]}
    assert [h["id"] for h in await session.search("big.json")] == ["m1", "m2"]


async def test_updates_are_limited_too_and_existing_metadata_is_kept(storage):
    session = Session.create(storage)
    await session.append_message(tool_message("m1", "call-1", "small"))
    message = tool_message("m1", "call-1", BIG_STRING)
    message["metadata"] = {"model": "m-1"}
    await session.update_message(message)
    stored = await session.get_message("m1")
    assert stored["metadata"] == {"model": "m-1", "compactedToolOutputs": ["call-1"]}
    assert row_sizes(storage)["m1"] < 2000
    assert await session.get_recent_history(10**9) == {
        "messages": [stored], "truncated": False, "totalContentBytes": row_sizes(storage)["m1"]
    }


async def test_a_message_at_the_limit_is_stored_unchanged(storage):
    session = Session.create(storage)
    message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": ""}]}
    overhead = len('{"id":"m1","role":"user","parts":[{"type":"text","text":""}]}')
    message["parts"][0]["text"] = "x" * (ROW_MAX_BYTES - overhead)
    await session.append_message(message)
    assert row_sizes(storage)["m1"] == ROW_MAX_BYTES
    assert await session.get_message("m1") == message


async def test_with_row_limit_sets_the_limit_and_user_text_is_truncated(storage):
    session = Session.create(storage).with_row_limit(5000)
    text = "word " * 2000
    await session.append_message({"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]})
    stored = await session.get_message("u1")
    assert stored["parts"][0]["text"] == f"[Text truncated for storage (10000 chars). First 500 chars: {text[:500]}...]"
    assert stored["metadata"] == {"compactedTextParts": [0]}
    assert row_sizes(storage)["u1"] <= 5000


async def test_a_message_that_cannot_shrink_is_refused_and_nothing_is_written(storage):
    session = Session.create(storage).with_row_limit(1000)
    with pytest.raises(InvalidMessageError, match="over the row limit of 1000 bytes"):
        await session.append_message({"id": "x" * 2000, "role": "user", "parts": []})
    assert row_count(storage, "assistant_messages") == 0
    assert index_rows(storage) == []
