"""Compaction helpers with the original's semantics (docs/behaviours.md §8)."""

from actors.compaction import (
    COMPACTION_PREFIX,
    STUB_RESULT,
    align_boundary_backward,
    align_boundary_forward,
    build_summary_prompt,
    compute_summary_budget,
    find_tail_cut_by_tokens,
    is_compaction_message,
    sanitize_tool_pairs,
)
from actors.tokens import estimate_message_tokens


def text(message_id, body, role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": body}]}


def call(message_id, call_id, name="search", **extra):
    part = {"type": f"tool-{name}", "toolCallId": call_id, "toolName": name, "state": "input-available",
            "input": {"q": call_id}, **extra}
    return {"id": message_id, "role": "assistant", "parts": [part]}


def result(message_id, call_id, role="tool"):
    return {"id": message_id, "role": role,
            "parts": [{"type": "tool-result", "toolCallId": call_id, "output": f"result of {call_id}"}]}


def hundred_token_message(message_id):
    # 384 chars of one word: ceil(384 / 4) = 96 tokens + 4 per message = 100.
    return text(message_id, "a" * 384)


def test_compaction_messages_are_recognised_by_their_id_prefix():
    assert COMPACTION_PREFIX == "compaction_"
    assert is_compaction_message({"id": "compaction_1f3", "role": "assistant", "parts": []})
    assert not is_compaction_message(text("m1", "compaction_ in the text"))
    assert not is_compaction_message({"id": 7, "role": "user", "parts": []})


# ── sanitize_tool_pairs ─────────────────────────────────────────────────


def test_orphaned_results_are_dropped_and_missing_results_get_stubs():
    u1 = text("u1", "find flights")
    a1 = call("a1", "c1", name="search_flights")
    orphan = result("t0", "c0")
    merged = call("a2", "c2", state="output-available", output="2 flights")
    mixed = {"id": "u2", "role": "user", "parts": [
        {"type": "text", "text": "also this"},
        {"type": "tool-result", "toolCallId": "c9", "output": "stale"},
    ]}
    fixed = sanitize_tool_pairs([u1, a1, orphan, merged, mixed], created_at="2024-05-15T15:00:00.000Z")
    assert fixed == [
        u1,
        a1,
        {"id": "stub-c1", "role": "assistant", "parts": [{
            "type": "tool-result", "toolCallId": "c1", "toolName": "search_flights",
            "result": "[Result from earlier conversation — see context summary above]",
        }], "createdAt": "2024-05-15T15:00:00.000Z"},
        merged,
        {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "also this"}]},
    ]
    assert fixed[0] is u1 and fixed[3] is merged
    assert STUB_RESULT == "[Result from earlier conversation — see context summary above]"


def test_stub_names_unknown_tool_and_defaults_to_now():
    a1 = {"id": "a1", "role": "assistant", "parts": [{"type": "dynamic-tool", "toolCallId": "c1"}]}
    stub = sanitize_tool_pairs([a1])[1]
    assert stub["parts"][0]["toolName"] == "unknown"
    assert stub["createdAt"].endswith("Z") and len(stub["createdAt"]) == 24


def test_complete_pairs_and_empty_messages():
    pairs = [text("u", "hi"), call("a", "c1"), result("t", "c1"), {"id": "e", "role": "user", "parts": []}]
    assert sanitize_tool_pairs(pairs) == pairs[:3]


# ── boundaries ──────────────────────────────────────────────────────────


def test_align_forward_skips_results_of_the_calls_before_the_boundary():
    messages = [text("u0", "q"), call("a1", "c1"), result("t2", "c1"), result("t3", "c1"), text("u4", "ok")]
    assert align_boundary_forward(messages, 2) == 4
    assert align_boundary_forward(messages, 1) == 1
    assert align_boundary_forward(messages, 0) == 0
    assert align_boundary_forward(messages, 5) == 5
    assert align_boundary_forward(messages, 4) == 4


def test_align_backward_keeps_a_call_with_its_results():
    messages = [text("u0", "q"), call("a1", "c1"), result("t2", "c1"), text("u3", "ok")]
    assert align_boundary_backward(messages, 2) == 1
    assert align_boundary_backward(messages, 3) == 3
    assert align_boundary_backward(messages, 0) == 0
    # A result inside an assistant message counts as a call message: the walk stops there.
    as_assistant = [text("u0", "q"), call("a1", "c1"), result("t2", "c1", role="assistant"), text("u3", "ok")]
    assert align_boundary_backward(as_assistant, 2) == 2


def test_tail_cut_takes_messages_until_the_budget_is_spent():
    messages = [hundred_token_message(f"m{i}") for i in range(10)]
    assert estimate_message_tokens(messages[:1]) == 100
    assert find_tail_cut_by_tokens(messages, 3, 250) == 8
    assert find_tail_cut_by_tokens(messages, 3, 450) == 6
    assert find_tail_cut_by_tokens(messages, 3, 10_000) == 3


def test_tail_cut_always_keeps_min_tail_messages_when_the_head_allows():
    messages = [hundred_token_message(f"m{i}") for i in range(10)]
    assert find_tail_cut_by_tokens(messages, 3, 50) == 8
    assert find_tail_cut_by_tokens(messages, 3, 50, 4) == 6
    assert find_tail_cut_by_tokens(messages, 9, 50, 2) == 9  # n - minTail < head: token cut only


def test_tail_cut_does_not_split_a_tool_pair():
    messages = [hundred_token_message(f"m{i}") for i in range(6)]
    messages[3] = call("a3", "c3")
    messages[4] = result("t4", "c3")
    # The budget takes m5 only; min_tail would cut at the result m4, which moves back to its call.
    assert find_tail_cut_by_tokens(messages, 1, 105) == 3


def test_summary_budget_is_a_fifth_of_the_content_with_a_floor_of_100():
    assert compute_summary_budget([]) == 100
    assert compute_summary_budget([hundred_token_message(f"m{i}") for i in range(5)]) == 100
    assert compute_summary_budget([hundred_token_message(f"m{i}") for i in range(10)]) == 200
    assert compute_summary_budget([hundred_token_message(f"m{i}") for i in range(13)]) == 260


# ── build_summary_prompt (text exactly as docs/behaviours.md §8) ────────

SECTIONS_AND_TAIL = (
    "## Topic\n[What the conversation is about]\n\n"
    "## Key Points\n[Important information, decisions, and conclusions from the conversation]\n\n"
    "## Current State\n[Where things stand now — what has been done, what is in progress]\n\n"
    "## Open Items\n[Unresolved questions, pending tasks, or next steps discussed]\n\n"
    "Target ~{budget} tokens. Be factual — only include information that was explicitly discussed "
    "in the conversation. Do NOT invent file paths, commands, or details that were not mentioned. "
    "Write only the summary body."
)

PROMPT_MESSAGES = [
    text("m1", "Book a flight to Paris."),
    {"id": "m2", "role": "assistant", "parts": [
        {"type": "text", "text": "Searching."},
        {"type": "tool-search_flights", "toolCallId": "c1", "toolName": "search_flights",
         "state": "output-available", "input": {"to": "CDG", "date": "2024-05-20"},
         "output": {"flights": ["AF1", "AF2"]}},
    ]},
    {"id": "m3", "role": "assistant", "parts": [
        {"type": "dynamic-tool", "toolCallId": "c2", "input": {}, "output": 0},
        {"type": "reasoning", "text": "not shown"},
    ]},
    {"id": "m4", "role": "user", "parts": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]},
]

PROMPT_CONTENT = (
    "[user]\nBook a flight to Paris."
    "\n\n---\n\n"
    "[assistant]\nSearching.\n[Tool: search_flights]\n"
    'Input: {"to":"CDG","date":"2024-05-20"}\nOutput: {"flights":["AF1","AF2"]}'
    "\n\n---\n\n"
    "[assistant]\n\n[Tool: unknown]\nInput: {}"
    "\n\n---\n\n"
    "[user]\nA\nB"
)


def test_first_summary_prompt_matches_the_original_text():
    prompt = build_summary_prompt(PROMPT_MESSAGES, None, 120)
    assert prompt == (
        "Create a concise summary of this conversation that preserves the important information for "
        "future context.\n\nCONVERSATION TO SUMMARIZE:\n" + PROMPT_CONTENT
        + "\n\nUse this structure:\n\n" + SECTIONS_AND_TAIL.format(budget=120)
    )
    assert build_summary_prompt(PROMPT_MESSAGES, "", 120) == prompt


def test_iterative_summary_prompt_matches_the_original_text():
    prompt = build_summary_prompt(PROMPT_MESSAGES, "## Topic\nParis trip", 300)
    assert prompt == (
        "You are updating a conversation summary. A previous summary exists below. New conversation "
        "turns have occurred since then and need to be incorporated.\n\nPREVIOUS SUMMARY:\n"
        "## Topic\nParis trip\n\nNEW TURNS TO INCORPORATE:\n" + PROMPT_CONTENT
        + "\n\nUpdate the summary. PRESERVE existing information that is still relevant. ADD new "
        "information. Remove information only if it is clearly obsolete.\n\n"
        + SECTIONS_AND_TAIL.format(budget=300)
    )


def test_tool_input_and_output_are_cut_to_500_chars():
    message = {"id": "m", "role": "assistant", "parts": [
        {"type": "tool-fetch", "toolName": "fetch", "toolCallId": "c", "input": {"url": "u" * 600},
         "output": "o" * 600},
        {"type": "tool-list", "toolName": "list", "toolCallId": "d", "output": ["x" * 300, "y" * 300]},
        {"type": "tool-count", "toolName": "count", "toolCallId": "e", "output": 2.0},
    ]}
    content = build_summary_prompt([message], None, 100).split("CONVERSATION TO SUMMARIZE:\n")[1]
    content = content.split("\n\nUse this structure:")[0]
    assert content == (
        "[assistant]\n\n[Tool: fetch]\n"
        + "Input: " + ('{"url":"' + "u" * 600)[:500] + "\n"
        + "Output: " + "o" * 500 + "\n"
        + "[Tool: list]\nOutput: " + ('["' + "x" * 300 + '","' + "y" * 300)[:500] + "\n"
        + "[Tool: count]\nOutput: 2"
    )
