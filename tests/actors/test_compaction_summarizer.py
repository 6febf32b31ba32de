"""The built-in extractive summarizer, on real airline chats (tau-bench, MIT, see tests/data/tau-bench)."""

import json
import re

import pytest

from actors.compaction import (
    build_summary_prompt,
    compute_summary_budget,
    create_compact_function,
    extractive_summarize,
)
from actors.tokens import estimate_string_tokens
from tests.support.data import TEST_DATA

DATA = TEST_DATA / "tau-bench" / "airline-sample.json"
HEADINGS = ["## Topic", "## Key Points", "## Current State", "## Open Items"]


def tau_messages(record):
    """Session messages of one tau-bench trajectory (see tests/data/tau-bench/README.md)."""
    messages, pending = [], {}
    for index, entry in enumerate(record["traj"]):
        message_id = f"t{record['task_id']}-m{index}"
        if entry["role"] == "tool":
            part = pending.pop(entry["tool_call_id"], None)
            if part is not None:
                try:
                    output = json.loads(entry["content"])
                except ValueError:
                    output = entry["content"]
                part.update(state="output-available", output=output)
            continue
        message = {"id": message_id, "role": entry["role"], "parts": []}
        if entry.get("content"):
            message["parts"].append({"type": "text", "text": entry["content"]})
        messages.append(message)
        for number, tool_call in enumerate(entry.get("tool_calls") or []):
            function = tool_call["function"]
            part = {"type": f"tool-{function['name']}", "toolCallId": tool_call["id"],
                    "toolName": function["name"], "state": "input-available",
                    "input": json.loads(function["arguments"])}
            pending[tool_call["id"]] = part
            if number == 0:
                message["parts"].append(part)
            else:  # one message per call, so each keeps its own result
                messages.append({"id": f"{message_id}-{number}", "role": "assistant", "parts": [part]})
    return messages


@pytest.fixture(scope="module")
def chats():
    return {record["task_id"]: tau_messages(record) for record in json.loads(DATA.read_text())}


def sections(summary):
    found = re.split(r"^(## .+)$", summary, flags=re.MULTILINE)
    return {found[i]: found[i + 1].strip() for i in range(1, len(found), 2)}


def summarize(messages, previous=None):
    budget = compute_summary_budget(messages)
    return extractive_summarize(build_summary_prompt(messages, previous, budget)), budget


def test_fixture_holds_two_hundred_real_messages(chats):
    assert sum(len(messages) for messages in chats.values()) >= 200
    first = chats[0]
    assert first[0] == {"id": "t0-m0", "role": "user", "parts": [
        {"type": "text", "text": "Hi! I'm looking to book a flight from New York to Seattle on May 20th."}]}
    assert first[5]["parts"][0]["output"]["name"] == {"first_name": "Mia", "last_name": "Li"}


def test_first_summary_keeps_the_structure_the_facts_and_the_budget(chats):
    summary, budget = summarize(chats[6])
    assert list(sections(summary)) == HEADINGS
    assert estimate_string_tokens(summary) <= budget
    parts = sections(summary)
    assert parts["## Topic"] == "User: I'd like to change my flight reservation."
    assert "M05KNL" in parts["## Key Points"]
    assert "HAT110" in parts["## Key Points"]
    assert "HAT172" in summary
    assert "successfully updated" in parts["## Key Points"]
    assert "Last user turn: Thank you so much for your help!" in parts["## Current State"]


def test_identical_prompts_give_identical_summaries(chats):
    prompt = build_summary_prompt(chats[3], None, 300)
    assert extractive_summarize(prompt) == extractive_summarize(prompt)
    assert extractive_summarize(prompt) == extractive_summarize(str(prompt))


def test_iterative_summary_keeps_earlier_facts_and_adds_new_ones(chats):
    messages = chats[6]
    first, _ = summarize(messages[:8])
    assert "M05KNL" in first
    second, budget = summarize(messages[8:], previous=first)
    assert estimate_string_tokens(second) <= budget
    parts = sections(second)
    assert parts["## Topic"] == sections(first)["## Topic"]
    assert "M05KNL" in parts["## Key Points"]
    assert "HAT172" in parts["## Key Points"]
    assert "update_reservation_flights" in parts["## Current State"]


def test_unanswered_question_is_an_open_item(chats):
    messages = chats[6][:13]  # ends on the agent asking the user to confirm the new flights
    summary, _ = summarize(messages)
    assert sections(summary)["## Open Items"].startswith("- Assistant asked: Would you like to proceed with this change?")


def test_every_text_key_point_is_a_sentence_of_the_conversation(chats):
    messages = chats[0]
    prompt = build_summary_prompt(messages, None, compute_summary_budget(messages))
    flat = " ".join(prompt.replace("**", "").split())
    points = [line[2:] for line in sections(extractive_summarize(prompt))["## Key Points"].splitlines()]
    spoken = [p.split(": ", 1)[1].removesuffix(" …") for p in points if p.startswith(("User: ", "Assistant: "))]
    assert spoken
    for sentence in spoken:
        assert sentence in flat
    assert "New York to Seattle" in sections(extractive_summarize(prompt))["## Topic"]


@pytest.mark.parametrize("task_id", range(8))
def test_summary_fits_its_budget_on_every_chat(chats, task_id):
    for budget in (100, compute_summary_budget(chats[task_id]), 2000):
        summary = extractive_summarize(build_summary_prompt(chats[task_id], None, budget))
        assert estimate_string_tokens(summary) <= budget
        assert list(sections(summary)) == HEADINGS


def test_text_that_is_not_a_summary_prompt_is_summarized_as_one_turn():
    summary = extractive_summarize("We decided to ship version 2.4 on Friday. Who signs off on the release?")
    assert sections(summary) == {
        "## Topic": "User: We decided to ship version 2.4 on Friday. Who signs off on the release?",
        "## Key Points": "- User: We decided to ship version 2.4 on Friday.",
        "## Current State": "- Last user turn: We decided to ship version 2.4 on Friday. Who signs off on the release?",
        "## Open Items": "- User asked: Who signs off on the release?",
    }


async def test_compacting_two_hundred_real_messages_with_the_extractive_summarizer(chats):
    messages = [m for task_id in sorted(chats) for m in chats[task_id]]
    compact = create_compact_function(summarize=extractive_summarize, tail_token_budget=2000)
    result = await compact(messages)
    ids = [m["id"] for m in messages]
    start, end = ids.index(result["fromMessageId"]), ids.index(result["toMessageId"])
    assert start == 3 and end < len(messages) - 2
    middle_text = json.dumps(messages[start:end + 1])
    codes = set(re.findall(r"\b[A-Z0-9]{6}\b", result["summary"]))
    assert codes and all(code in middle_text for code in codes)
    assert estimate_string_tokens(result["summary"]) <= compute_summary_budget(messages[start:end + 1])
