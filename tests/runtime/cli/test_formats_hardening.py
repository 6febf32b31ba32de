"""Adversarial transcript files and batches: BOM, CRLF, U+2028, deep nesting, bad UTF-8, iterators.

Oracles: the SessionStore contract (``seeds/002``: ``load`` returns what was
appended, retried uuids are skipped) and the converters' promises
(:mod:`runtime.cli.formats`: Claude Code conversion never raises on content,
the raw and OpenAI readers raise :class:`FormatError` naming the place).
"""

import json

import pytest

from runtime.cli.formats import FormatError
from runtime.cli.formats.claude_code import (
    convert_claude_code_entries,
    read_claude_code_session,
    read_transcript_entries,
)
from runtime.cli.formats.openai_chat import convert_openai_chat, load_openai_chat
from storage.transcripts import LocalTranscriptStore

KEY = {"project_key": "proj", "session_id": "sess"}

USER = {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "sess",
        "message": {"role": "user", "content": "first\u2028second\u2029third\x85fourth"}}
ASSISTANT = {"type": "assistant", "uuid": "a1", "parentUuid": "u1",
             "message": {"id": "msg_1", "role": "assistant", "content": [{"type": "text", "text": "ok"}]}}


def jsonl(*entries, newline="\n", bom=False):
    text = newline.join(json.dumps(e, ensure_ascii=False) for e in entries) + newline
    return ("\ufeff" if bom else "").encode() + text.encode()


def deep_json(depth):
    return "[" * depth + "]" * depth


@pytest.fixture
async def store(tmp_path):
    async with LocalTranscriptStore(tmp_path / "data") as store:
        yield store


# -- the transcript store ---------------------------------------------------------------


async def test_an_iterator_of_entries_is_stored_not_silently_dropped(store):
    await store.append(KEY, (entry for entry in [USER, ASSISTANT]))
    await store.append(KEY, iter([USER, {"uuid": "x2"}]))  # the retried USER is skipped
    assert await store.load(KEY) == [USER, ASSISTANT, {"uuid": "x2"}]
    assert [s["session_id"] for s in await store.list_sessions("proj")] == ["sess"]


async def test_an_empty_iterator_lists_no_session(store):
    await store.append(KEY, iter([]))
    assert await store.load(KEY) is None
    assert await store.list_sessions("proj") == []


async def test_duplicate_uuids_within_one_batch_keep_the_first(store):
    await store.append(KEY, [{"uuid": "d", "n": 1}, {"n": 2}, {"uuid": "d", "n": 3}, {"n": 2}])
    assert await store.load(KEY) == [{"uuid": "d", "n": 1}, {"n": 2}, {"n": 2}]


def nested_entry(depth):
    value = 1
    for _ in range(depth):
        value = [value]
    return {"uuid": "deep", "value": value}


@pytest.mark.parametrize("bad, message", [
    ({"text": "a\ud800"}, r"entries\[1\] is not valid Unicode text \(lone surrogate at \d+\)"),
    (nested_entry(5000), r"entries\[1\] is not JSON: nested too deeply"),
    ({"n": float("nan")}, r"entries\[1\] is not JSON: Out of range float values are not JSON compliant"),
    (["not", "an", "object"], r"entries\[1\] must be a JSON object, not list"),
])
async def test_a_bad_entry_is_a_value_error_and_nothing_of_its_batch_is_stored(store, tmp_path, bad, message):
    await store.append(KEY, [{"uuid": "before"}])
    with pytest.raises(ValueError, match=message):
        await store.append(KEY, [{"uuid": "ok"}, bad])
    assert await store.load(KEY) == [{"uuid": "before"}]


# -- Claude Code files -------------------------------------------------------------------


@pytest.mark.parametrize("newline, bom", [("\n", False), ("\r\n", False), ("\n", True), ("\r\n", True)])
def test_claude_code_lines_holding_unicode_line_separators_stay_whole(tmp_path, newline, bom):
    path = tmp_path / "proj" / "sess.jsonl"
    path.parent.mkdir()
    path.write_bytes(jsonl(USER, ASSISTANT, newline=newline, bom=bom))
    session = read_claude_code_session(path)
    assert session.warnings == []
    assert [(m.message["id"], m.parent_id) for m in session.messages] == [("u1", None), ("a1", "u1")]
    assert session.messages[0].message["parts"] == [
        {"type": "text", "text": "first\u2028second\u2029third\x85fourth"}
    ]
    assert read_transcript_entries(path) == [USER, ASSISTANT]


def test_a_deeply_nested_line_is_kept_as_a_line_part_not_an_exception(tmp_path):
    path = tmp_path / "proj" / "sess.jsonl"
    path.parent.mkdir()
    path.write_bytes(deep_json(100_000).encode() + b"\n" + jsonl(USER))
    session = read_claude_code_session(path)
    assert session.warnings == ["line 1: not a JSON object; kept as a data-claude-code-line part"]
    assert [m.message["id"] for m in session.messages] == ["u1"]
    with pytest.raises(FormatError, match=r"sess.jsonl:1: not JSON: nested too deeply"):
        read_transcript_entries(path)


def test_converting_lines_of_the_wrong_type_never_raises():
    session = convert_claude_code_entries([5, None, json.dumps(USER)], session_id="s")
    assert session.warnings == [
        "line 1: not a JSON object; kept as a data-claude-code-line part",
        "line 2: not a JSON object; kept as a data-claude-code-line part",
    ]
    assert [m.message["id"] for m in session.messages] == ["u1"]


@pytest.mark.parametrize("content, message", [
    (b'{"uuid": "x"}\n{"a": "\xff"}\n', r"bad.jsonl:2: not UTF-8: "),
    (b'{"uuid": "x"}\n{"a": NaN}\n', r"bad.jsonl:2: not JSON: NaN is not a JSON value"),
    (b'{"a": -Infinity}', r"bad.jsonl:1: not JSON: -Infinity is not a JSON value"),
    (b'[1]\n', r"bad.jsonl:1: a transcript entry must be a JSON object"),
])
def test_raw_transcript_lines_that_a_store_would_refuse_are_format_errors(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(FormatError, match=message):
        read_transcript_entries(path)


# -- OpenAI chat files -------------------------------------------------------------------


def test_openai_files_with_a_bom_or_line_separators_load(tmp_path):
    conversation = [{"role": "user", "content": "a\u2028b"}, {"role": "assistant", "content": "c\u2029d"}]
    as_json = tmp_path / "chat.json"
    as_json.write_bytes(b"\xef\xbb\xbf" + json.dumps(conversation).encode())
    as_jsonl = tmp_path / "chat.jsonl"
    as_jsonl.write_bytes(b"\xef\xbb\xbf" + json.dumps(conversation, ensure_ascii=False).encode() + b"\r\n")
    for path in (as_json, as_jsonl):
        (session,) = load_openai_chat(path)
        assert [m.message["parts"] for m in session.messages] == [
            [{"type": "text", "text": "a\u2028b"}], [{"type": "text", "text": "c\u2029d"}]
        ]


@pytest.mark.parametrize("content, message", [
    (deep_json(100_000).encode(), r"chat.json: not JSON: nested too deeply"),
    (b'[{"role": "user", "content": "\xff"}]', r"chat.json: not JSON: 'utf-8' codec can't decode byte 0xff"),
])
def test_openai_files_that_cannot_be_read_are_format_errors(tmp_path, content, message):
    path = tmp_path / "chat.json"
    path.write_bytes(content)
    with pytest.raises(FormatError, match=message):
        load_openai_chat(path)


# -- malformed-but-JSON entries (found by fuzzing) ---------------------------------------------------

@pytest.mark.parametrize("entry", [
    {"type": "user", "uuid": "u2", "message": {"role": "user", "content": ["plain string block", ["nested"]]}},
    {"type": "user", "uuid": "u3", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": ["unhashable"], "content": "r"}]}},
    {"type": "user", "uuid": "u4", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": {"id": 1}, "content": "r"}]}},
    {"type": "assistant", "uuid": "a2", "message": {"id": "m2", "role": "assistant", "content": [
        {"type": {"kind": "image"}, "source": {}}]}},
    {"type": "summary", "summary": "Title", "leafUuid": ["u1"]},
    {"type": "progress", "uuid": ["not", "a", "string"], "parentUuid": {"x": 1}},
])
def test_claude_code_entries_with_odd_json_types_never_raise(entry):
    session = convert_claude_code_entries([USER, entry, ASSISTANT], session_id="s")
    assert [m.message["id"] for m in session.messages][0] == "u1"
    assert session.warnings == []


@pytest.mark.parametrize("conversation, message", [
    ([{"role": ["user"], "content": "x"}], "message 0: unknown role ['user']"),
    ([{"role": {"r": 1}, "content": "x"}], "message 0: unknown role {'r': 1}"),
    ([{"role": "assistant", "content": None,
       "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": ["c1"], "content": "r"}],
     "message 1: tool message for tool_call_id ['c1'] answers no open call"),
    ([{"role": "function", "name": {"n": 1}, "content": "r"}],
     "message 0: function message for function {'n': 1} answers no open call"),
])
def test_openai_messages_with_odd_json_types_are_format_errors(conversation, message):
    with pytest.raises(FormatError) as raised:
        convert_openai_chat(conversation)
    assert str(raised.value) == f"conversation 0: {message}"
