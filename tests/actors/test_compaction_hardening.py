"""Adversarial summarizers and token counters (docs/behaviours.md §8, §9; docs/deviations.md #14).

A summarizer or counter that misbehaves never half-writes: the SQLite file
holds either a whole compaction row or none, and the failure reaches the
caller (manual ``compact()``: an error broadcast) or ``on_compaction_error``
(automatic) with a message that names the problem.
"""

from fractions import Fraction

import pytest

from actors.compaction import create_compact_function, normalize_token_count
from actors.session import Session
from common.errors import CompactionError
from tests.support.backends import row_count

pytestmark = pytest.mark.both_storages


def msg(i):
    return {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
            "parts": [{"type": "text", "text": f"message number {i} about booking flight AB-{i}"}]}


def compactor(summarize, **options):
    return create_compact_function(
        summarize=summarize, protect_head=1, tail_token_budget=10, min_tail_messages=1, **options
    )


async def fill(session, count=8):
    for i in range(count):
        await session.append_message(msg(i))


def compaction_rows(storage):
    return row_count(storage, "assistant_compactions")  # made by the first compaction


def raising(prompt):
    raise RuntimeError("model unavailable")


@pytest.mark.parametrize("summarize, error", [
    (raising, "model unavailable"),
    (lambda prompt: 42, "summarize() returned int, expected str"),
    (lambda prompt: None, "summarize() returned NoneType, expected str"),
    (lambda prompt: b"bytes", "summarize() returned bytes, expected str"),
])
async def test_a_failing_summarizer_stores_nothing_and_says_why(storage, recording_agent, summarize, error):
    session = Session.create(recording_agent).on_compaction(compactor(summarize))
    await fill(session)
    history = await session.get_history()
    recording_agent.clear()
    assert await session.compact() is None
    assert compaction_rows(storage) == 0
    assert await session.get_history() == history
    assert recording_agent.payloads[-1] == {"type": "cf_agent_session_error", "error": error, "sessionId": ""}


@pytest.mark.parametrize("summarize", [raising, lambda prompt: 42])
async def test_a_failing_summarizer_in_auto_compaction_reaches_the_handler_and_the_append_stands(
    storage, summarize
):
    errors = []
    session = (Session.create(storage).on_compaction(compactor(summarize))
               .compact_after(1).on_compaction_error(errors.append))
    await fill(session, 6)
    assert [m["id"] for m in await session.get_history()] == [f"m{i}" for i in range(6)]
    assert compaction_rows(storage) == 0
    assert errors and all(isinstance(e, (RuntimeError, CompactionError)) for e in errors)


async def test_blank_summaries_store_nothing(storage):
    session = Session.create(storage).on_compaction(compactor(lambda prompt: " \n\t "))
    await fill(session)
    assert await session.compact() is None
    assert compaction_rows(storage) == 0


async def test_a_huge_summary_is_stored_whole_and_counted(storage):
    summary = "Key fact. " * 200_000  # 2 MB of text
    session = Session.create(storage).on_compaction(compactor(lambda prompt: summary))
    await fill(session)
    result = await session.compact()
    assert result == {"fromMessageId": "m1", "toMessageId": "m6", "summary": summary}
    history = await session.get_history()
    assert [m["id"] for m in history][0::2] == ["m0", "m7"]
    assert history[1]["parts"] == [{"type": "text", "text": summary}]
    assert await session.estimate_tokens() >= 520_000  # 400k words * 1.3


@pytest.mark.parametrize("value, count", [
    (10**400, 10**400), (-(10**400), 0), (2**1024, 2**1024), (Fraction(10**400 + 1, 2), 10**400 // 2 + 1),
], ids=["10**400", "-10**400", "2**1024", "fraction"])
def test_counts_beyond_float_range_are_still_counts(value, count):
    assert normalize_token_count(value) == count


async def test_a_counter_answering_beyond_float_range_drives_auto_compaction(storage):
    errors = []
    summaries = []

    def summarize(prompt):
        summaries.append(prompt)
        return "short summary"

    session = (Session.create(storage)
               .on_compaction(compactor(summarize))
               .compact_after(100, token_counter=lambda request: 10**400)
               .on_compaction_error(errors.append))
    await fill(session, 6)
    assert errors == []
    assert await session.estimate_tokens() == 10**400
    assert compaction_rows(storage) >= 1


async def test_a_per_message_counter_beyond_float_range_keeps_only_the_last_message_in_the_tail():
    compact = create_compact_function(
        summarize=lambda prompt: "S", protect_head=1, tail_token_budget=10, min_tail_messages=0,
        token_counter=lambda messages: 10**400,
    )
    result = await compact([msg(i) for i in range(6)])
    assert result == {"fromMessageId": "m1", "toMessageId": "m4", "summary": "S"}


@pytest.mark.parametrize("answer", [float("nan"), float("inf"), -5, None, "123"])
async def test_counters_answering_non_finite_or_non_numbers_count_zero_without_error(storage, answer):
    errors = []
    session = (Session.create(storage).on_compaction(compactor(lambda p: "S"))
               .compact_after(0, token_counter=lambda request: answer).on_compaction_error(errors.append))
    await fill(session, 3)
    assert await session.estimate_tokens() == 0
    assert errors == [] and compaction_rows(storage) == 0


def tool_message(mid, call_id, **extra):
    return {"id": mid, "role": "assistant", "parts": [
        {"type": "tool-lookup", "toolCallId": call_id, "state": "output-available", "input": {"q": "x"}, **extra}]}


@pytest.mark.parametrize("call_id, start", [({"weird": 1}, "t1"), (["list"], "t1"), (None, "m2")])
async def test_a_malformed_tool_call_id_in_history_does_not_block_compaction(storage, call_id, start):
    session = Session.create(storage).on_compaction(compactor(lambda prompt: "summary"))
    # t0 calls a tool just before the range: its results are aligned past. An object or
    # array id pairs with nothing (so t1 starts the range); null pairs with null, as in JS.
    await session.append_message(tool_message("t0", call_id))
    await session.append_message(tool_message("t1", call_id, output="result"))
    for i in range(2, 8):
        await session.append_message(msg(i))
    result = await session.compact()
    assert result == {"fromMessageId": start, "toMessageId": "m6", "summary": "summary"}
    assert compaction_rows(storage) == 1


def test_sanitize_and_align_pair_malformed_ids_with_nothing():
    from actors.compaction import align_boundary_backward, align_boundary_forward, sanitize_tool_pairs

    history = [msg(0), tool_message("t1", {"weird": 1}, output="r"), tool_message("t2", ["l"]), msg(3)]
    assert align_boundary_forward(history, 2) == 2
    assert align_boundary_backward(history, 3) == 3
    assert sanitize_tool_pairs(history) == history


async def test_messages_without_ids_are_a_compaction_error_not_a_key_error():
    compact = compactor(lambda prompt: "S")
    with pytest.raises(CompactionError, match="every message to compact needs a string id"):
        await compact([{"role": "user", "parts": [{"type": "text", "text": "x " * 50}]}] * 8)
