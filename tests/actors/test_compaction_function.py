"""create_compact_function and the pieces Session.compact() is wired from (docs/behaviours.md §8, §12)."""

import json
import math

import pytest
import trio

from actors.compaction import (
    call_compaction_function,
    compactions_on_path,
    count_session_tokens,
    create_compact_function,
    error_broadcast,
    extractive_summarize,
    noop_compaction_warning,
    normalize_token_count,
    plan_compaction,
    status_broadcast,
)
from actors.tokens import estimate_message_tokens, js_stringify
from common.errors import CompactionError, InvalidInputError


def text(message_id, body, role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": body}]}


def history(count, prefix="m"):
    # Each message is 100 estimated tokens (a 384-char word + 4).
    return [text(f"{prefix}{i}", f"{i:03d}" + "a" * 381, "user" if i % 2 else "assistant") for i in range(count)]


def overlay(row_id, summary):
    return {"id": f"compaction_{row_id}", "role": "assistant", "parts": [{"type": "text", "text": summary}],
            "createdAt": "2024-05-15T15:00:00.000Z"}


class RecordingSummarizer:
    def __init__(self, answer="Summary: the middle turns."):
        self.prompts, self.answer = [], answer

    def __call__(self, prompt):
        self.prompts.append(prompt)
        return self.answer


# ── create_compact_function ─────────────────────────────────────────────


async def test_short_history_gives_none_without_calling_the_summarizer():
    summarize = RecordingSummarizer()
    compact = create_compact_function(summarize=summarize)
    assert await compact(history(5)) is None
    assert summarize.prompts == []


async def test_long_history_summarizes_the_middle_range():
    summarize = RecordingSummarizer()
    compact = create_compact_function(summarize=summarize, tail_token_budget=250)
    messages = history(12)
    assert await compact(messages) == {
        "fromMessageId": "m3", "toMessageId": "m9", "summary": "Summary: the middle turns.",
    }
    (prompt,) = summarize.prompts
    assert prompt.startswith("Create a concise summary")
    assert "[user]\n003" in prompt and "[user]\n009" in prompt
    assert "\n002" not in prompt and "\n010" not in prompt
    assert prompt.endswith("Target ~140 tokens. Be factual — only include information that was explicitly "
                           "discussed in the conversation. Do NOT invent file paths, commands, or details "
                           "that were not mentioned. Write only the summary body.")


async def test_async_summarizer_is_awaited():
    async def summarize(prompt):
        await trio.sleep(0)
        return "async summary"

    compact = create_compact_function(summarize=summarize, tail_token_budget=250)
    assert (await compact(history(12)))["summary"] == "async summary"


async def test_with_default_budget_small_histories_never_compact():
    compact = create_compact_function(summarize=RecordingSummarizer())
    assert await compact(history(150)) is None  # 15,000 tokens: all of it fits in the 20K tail


async def test_overlay_gives_previous_summary_and_is_left_out_of_the_range():
    summarize = RecordingSummarizer()
    compact = create_compact_function(summarize=summarize, protect_head=1, tail_token_budget=250)
    messages = [history(1)[0], overlay("r1", "Earlier: seat 12A booked."), *history(8, "n")]
    result = await compact(messages)
    assert result == {"fromMessageId": "n0", "toMessageId": "n5", "summary": "Summary: the middle turns."}
    assert summarize.prompts[0].startswith(
        "You are updating a conversation summary. A previous summary exists below. New conversation "
        "turns have occurred since then and need to be incorporated.\n\nPREVIOUS SUMMARY:\n"
        "Earlier: seat 12A booked.\n\nNEW TURNS TO INCORPORATE:\n[assistant]\n000"
    )


async def test_blank_summary_means_nothing_to_compact_and_non_text_is_an_error():
    messages = history(12)
    assert await create_compact_function(summarize=lambda p: "  \n", tail_token_budget=250)(messages) is None
    with pytest.raises(CompactionError, match="summarize\\(\\) returned NoneType, expected str"):
        await create_compact_function(summarize=lambda p: None, tail_token_budget=250)(messages)


async def test_own_message_counter_decides_the_tail():
    seen = []

    def counter(messages):
        seen.append([m["id"] for m in messages])
        return 1000

    compact = create_compact_function(summarize=RecordingSummarizer(), tail_token_budget=2500,
                                      token_counter=counter)
    result = await compact(history(12), token_counter=lambda request: 1 / 0)
    assert (result["fromMessageId"], result["toMessageId"]) == ("m3", "m9")
    assert seen[:3] == [["m11"], ["m10"], ["m9"]]
    estimate_counter = create_compact_function(summarize=RecordingSummarizer(), tail_token_budget=250,
                                               token_counter=estimate_message_tokens)
    assert (await estimate_counter(history(12)))["toMessageId"] == "m9"


async def test_session_counter_flows_into_the_tail_walk_one_message_at_a_time():
    requests = []

    async def session_counter(request):
        requests.append(request)
        return 1000.5

    compact = create_compact_function(summarize=RecordingSummarizer(), tail_token_budget=2500)
    result = await compact(history(12), token_counter=session_counter)
    assert (result["fromMessageId"], result["toMessageId"]) == ("m3", "m9")
    assert requests[0] == {"messages": [history(12)[11]], "systemPrompt": "", "contextBlocks": []}
    assert list(requests[0]) == ["messages", "systemPrompt", "contextBlocks"]


def test_bad_options_are_rejected_when_building():
    with pytest.raises(InvalidInputError, match="summarize must be callable"):
        create_compact_function(summarize="model")
    with pytest.raises(InvalidInputError, match="protect_head must be an integer >= 0"):
        create_compact_function(summarize=str, protect_head=-1)
    with pytest.raises(InvalidInputError, match="tail_token_budget"):
        create_compact_function(summarize=str, tail_token_budget="lots")


async def test_extractive_summarizer_plugs_in_as_summarize():
    compact = create_compact_function(summarize=extractive_summarize, tail_token_budget=250)
    result = await compact(history(12))
    assert (result["fromMessageId"], result["toMessageId"]) == ("m3", "m9")
    assert result["summary"].startswith("## Topic\n")
    assert await compact(history(12)) == result


# ── Calling a registered function ───────────────────────────────────────


async def test_token_counter_is_passed_only_to_functions_that_accept_it():
    calls = []

    def plain(messages):
        calls.append(("plain", len(messages)))

    async def keyword(messages, *, token_counter=None):
        calls.append(("keyword", token_counter))
        return {"fromMessageId": "a", "toMessageId": "b", "summary": "s"}

    def anything(messages, **options):
        calls.append(("kwargs", sorted(options)))

    counter = object()
    assert await call_compaction_function(plain, history(3), token_counter=counter) is None
    assert await call_compaction_function(keyword, history(3), token_counter=counter) == {
        "fromMessageId": "a", "toMessageId": "b", "summary": "s"}
    await call_compaction_function(anything, history(3), token_counter=counter)
    await call_compaction_function(keyword, history(3))
    assert calls == [("plain", 3), ("keyword", counter), ("kwargs", ["token_counter"]), ("keyword", None)]


# ── plan_compaction: validation and the iterative, branch-local row ─────

PATH = [f"m{i}" for i in range(1, 8)]


def row(row_id, start, end):
    return {"id": row_id, "summary": f"summary {row_id}", "fromMessageId": start, "toMessageId": end,
            "createdAt": "2024-05-15 15:00:00.000"}


def test_nothing_to_store_for_none_or_blank_summary():
    messages = [text(i, i) for i in PATH]
    assert plan_compaction(None, history=messages, path_ids=PATH, compactions=[]) is None
    blank = {"fromMessageId": "m2", "toMessageId": "m4", "summary": " \n\t"}
    assert plan_compaction(blank, history=messages, path_ids=PATH, compactions=[]) is None


def test_first_compaction_is_stored_as_returned():
    messages = [text(i, i) for i in PATH]
    planned = plan_compaction({"summary": "S1", "toMessageId": "m4", "fromMessageId": "m2"},
                              history=messages, path_ids=PATH, compactions=[])
    assert list(planned.items()) == [("fromMessageId", "m2"), ("toMessageId", "m4"), ("summary", "S1")]


def test_two_successive_compactions_extend_the_oldest_range():
    first = plan_compaction({"fromMessageId": "m2", "toMessageId": "m4", "summary": "S1"},
                            history=[text(i, i) for i in PATH], path_ids=PATH, compactions=[])
    rows = [row("c1", first["fromMessageId"], first["toMessageId"])]
    shown = [text("m1", "m1"), overlay("c1", "S1"), text("m5", "m5"), text("m6", "m6"), text("m7", "m7")]
    second = plan_compaction({"fromMessageId": "m5", "toMessageId": "m6", "summary": "S2"},
                             history=shown, path_ids=PATH, compactions=rows)
    assert second == {"fromMessageId": "m2", "toMessageId": "m6", "summary": "S2"}
    via_overlay = plan_compaction({"fromMessageId": "compaction_c1", "toMessageId": "m6", "summary": "S2"},
                                  history=shown, path_ids=PATH, compactions=rows)
    assert via_overlay == second


def test_compactions_of_another_branch_are_ignored():
    # Branch B (m1 m2 m3 m4b m5b) was compacted first; branch A (m1..m7) later at m3..m4.
    rows = [row("b1", "m2", "m4b"), row("a1", "m3", "m4"), row("a0", "m9", "m2")]
    assert compactions_on_path(rows, PATH) == [rows[1]]
    shown = [text("m1", "m1"), text("m2", "m2"), overlay("a1", "S"), text("m5", "m5"), text("m6", "m6"),
             text("m7", "m7")]
    planned = plan_compaction({"fromMessageId": "m5", "toMessageId": "m6", "summary": "S3"},
                              history=shown, path_ids=PATH, compactions=rows)
    assert planned == {"fromMessageId": "m3", "toMessageId": "m6", "summary": "S3"}


@pytest.mark.parametrize("result, message", [
    ({"fromMessageId": "m5", "toMessageId": "x9", "summary": "S"},
     "compaction toMessageId 'x9' is not a message of the current history"),
    ({"fromMessageId": "m3", "toMessageId": "m6", "summary": "S"},  # m3 is hidden by the overlay
     "compaction fromMessageId 'm3' is not a message of the current history"),
    ({"fromMessageId": "m6", "toMessageId": "m5", "summary": "S"},
     "compaction range 'm6'..'m5' is not a range of the current path"),
    ({"fromMessageId": "m5", "toMessageId": None, "summary": "S"},
     "compaction toMessageId None is not a message of the current history"),
    ({"fromMessageId": "m5", "toMessageId": "m6", "summary": 42},
     "compaction summary must be a string, got int"),
    (["m5", "m6"], "compaction function returned list; expected None or"),
])
def test_results_off_the_current_path_are_errors_for_the_handler(result, message):
    rows = [row("c1", "m2", "m4")]
    shown = [text("m1", "m1"), overlay("c1", "S1"), text("m5", "m5"), text("m6", "m6"), text("m7", "m7")]
    with pytest.raises(CompactionError) as raised:
        plan_compaction(result, history=shown, path_ids=PATH, compactions=rows)
    assert str(raised.value).startswith(message)


# ── Token counts and broadcasts ─────────────────────────────────────────


@pytest.mark.parametrize("value, count", [
    (3.2, 4), (7, 7), (0, 0), (-5, 0), (-0.5, 0), (math.inf, 0), (math.nan, 0), (None, 0), ("12", 0), (True, 1),
])
def test_normalize_token_count(value, count):
    assert normalize_token_count(value) == count


async def test_session_estimate_defaults_to_the_heuristic_and_uses_a_counter_when_given():
    hello = [text("m1", "Hello world")]
    assert await count_session_tokens(hello, "Hello world") == 10  # 7 for the message + 3 for the prompt
    requests = []

    async def counter(request):
        requests.append(request)
        return 10.5

    assert await count_session_tokens(hello, "SOUL", [{"label": "soul"}], token_counter=counter) == 11
    assert requests == [{"messages": hello, "systemPrompt": "SOUL", "contextBlocks": [{"label": "soul"}]}]
    assert await count_session_tokens(hello, "", token_counter=lambda r: -3) == 0


def test_status_broadcasts_keep_the_original_key_order_plus_session_id():
    assert status_broadcast(phase="compacting", token_estimate=2100, token_threshold=2000, session_id="s1") == (
        '{"type":"cf_agent_session","phase":"compacting","tokenEstimate":2100,"tokenThreshold":2000,'
        '"sessionId":"s1"}'
    )
    assert status_broadcast(phase="idle", token_estimate=900, token_threshold=2000.0, session_id="s1",
                            tokens_before=2100) == (
        '{"type":"cf_agent_session","phase":"idle","tokenEstimate":900,"tokenThreshold":2000,'
        '"compacted":{"tokensBefore":2100},"sessionId":"s1"}'
    )
    assert json.loads(status_broadcast(phase="idle", token_estimate=0, token_threshold=None, session_id="")) == {
        "type": "cf_agent_session", "phase": "idle", "tokenEstimate": 0, "tokenThreshold": None, "sessionId": "",
    }
    with pytest.raises(InvalidInputError, match="phase must be"):
        status_broadcast(phase="done", token_estimate=0, token_threshold=None, session_id="")


@pytest.mark.parametrize("threshold", [None, 0, 2000, 2000.0, 1e12, 0.5, 1e21, 1.5e-7, 2**53 + 1, -3.25, True,
                                       float("inf"), float("nan")])
@pytest.mark.parametrize("estimate", [0, 7, -1, 2**53, 2**53 + 1, True, 12.0])
@pytest.mark.parametrize("session_id", ["", "s1", 'quo"te\\', "sessão 会话 \u2028"])
def test_status_broadcasts_after_appends_are_written_as_the_whole_payload_is(threshold, estimate, session_id):
    # The append path's status (no tokensBefore) is put together from its values; the same text as the dict's.
    payload = {"type": "cf_agent_session", "phase": "idle", "tokenEstimate": estimate, "tokenThreshold": threshold,
               "sessionId": session_id}
    for _ in range(2):  # the threshold's text is remembered after the first
        assert status_broadcast(phase="idle", token_estimate=estimate, token_threshold=threshold,
                                session_id=session_id) == js_stringify(payload)


def test_error_broadcast_carries_the_message_and_session_id():
    assert error_broadcast(RuntimeError("model unavailable"), session_id="s1") == (
        '{"type":"cf_agent_session_error","error":"model unavailable","sessionId":"s1"}'
    )
    assert error_broadcast(ValueError(), session_id="") == (
        '{"type":"cf_agent_session_error","error":"ValueError","sessionId":""}'
    )


def test_noop_warning_names_estimate_and_threshold():
    warning = noop_compaction_warning(2105, 2000.0, has_token_counter=False)
    assert warning.startswith("[Session] Auto-compaction fired (~2105 tokens > 2000) but the compaction "
                              "function returned null, so history was not shortened. ")
    assert "per-message" in noop_compaction_warning(2105, 2000, has_token_counter=True)
