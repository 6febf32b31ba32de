"""The importer (runtime.cli.importer): recognising a file's format and planning append batches."""

import json

from runtime.cli.formats import ImportedMessage
from runtime.cli.importer import detect_format, plan_batches

TAU_3 = "openai_chat/tau-bench-airline-3.json"


def msg(message_id, words="x"):
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": words}]}


def test_detect_format(tmp_path, test_data):
    assert detect_format(test_data / TAU_3) == "openai-chat"
    assert detect_format(test_data / "claude_code" / "projects") == "claude-code"
    lines = tmp_path / "chat.jsonl"
    lines.write_text(json.dumps([{"role": "user", "content": "hi"}]) + "\n", encoding="utf-8")
    assert detect_format(lines) == "openai-chat"
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"type": "user", "uuid": "u1", "sessionId": "s"}) + "\n", encoding="utf-8")
    assert detect_format(transcript) == "claude-code"


def test_plan_batches_follows_chains_branches_and_the_size_limit():
    linear = [ImportedMessage(msg("a"), None), ImportedMessage(msg("b"), "a"), ImportedMessage(msg("c"), "b")]
    assert plan_batches(linear) == [(None, [msg("a"), msg("b"), msg("c")])]
    tree = linear + [ImportedMessage(msg("d"), "a"), ImportedMessage(msg("e"), "d"), ImportedMessage(msg("f"), None)]
    assert [(parent, [m["id"] for m in chain]) for parent, chain in plan_batches(tree)] == [
        (None, ["a", "b", "c"]), ("a", ["d", "e"]), (None, ["f"])]
    big = [ImportedMessage(msg(str(i), "y" * 100), str(i - 1) if i else None) for i in range(10)]
    batches = plan_batches(big, max_batch_bytes=500)  # 161 bytes a message
    assert [len(chain) for _, chain in batches] == [3, 3, 3, 1]
    assert [parent for parent, _ in batches] == [None, "2", "5", "8"]
