"""Session.compact() and auto-compaction: iterative single overlay, branch-local, faults.

docs/behaviours.md §8 and §9 through the Session, with docs/deviations.md #6, #13 and #14.
"""

import json
import logging

import pytest
import trio
import trio.testing

from actors import CompactionError
from actors.session import LATEST_LEAF, Session
from actors.tokens import estimate_message_tokens, estimate_string_tokens

pytestmark = pytest.mark.both_storages


def msg(mid, text=None, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text or f"text of {mid}"}]}


def ids(messages):
    return [m["id"] for m in messages]


class Planned:
    """A compaction function returning prepared results in turn (and recording its inputs)."""

    def __init__(self, *results):
        self.results = list(results)
        self.seen = []

    def __call__(self, messages):
        self.seen.append(ids(messages))
        result = self.results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result


async def chain(session, *mids, parent_id=LATEST_LEAF):
    for i, mid in enumerate(mids):
        await session.append_message(msg(mid), parent_id if i == 0 else LATEST_LEAF)


def stored_ranges(storage):
    return [(r["summary"], r["from_message_id"], r["to_message_id"])
            for r in storage.sql("SELECT * FROM assistant_compactions ORDER BY seq")]


# -- compact() ---------------------------------------------------------------------


async def test_two_successive_compactions_leave_one_growing_overlay(storage):
    fn = Planned({"fromMessageId": "m2", "toMessageId": "m4", "summary": "S1"},
                 {"fromMessageId": "m5", "toMessageId": "m6", "summary": "S2"})
    session = Session.create(storage).on_compaction(fn)
    await chain(session, *[f"m{i}" for i in range(1, 8)])
    assert await session.compact() == {"fromMessageId": "m2", "toMessageId": "m4", "summary": "S1"}
    assert await session.compact() == {"fromMessageId": "m2", "toMessageId": "m6", "summary": "S2"}
    first, second = await session.get_compactions()
    history = await session.get_history()
    assert ids(history) == ["m1", f"compaction_{second['id']}", "m7"]
    assert history[1]["parts"] == [{"type": "text", "text": "S2"}]
    assert stored_ranges(storage) == [("S1", "m2", "m4"), ("S2", "m2", "m6")]
    assert fn.seen[1] == ["m1", f"compaction_{first['id']}", "m5", "m6", "m7"]
    assert await session.get_path_length() == 7  # originals are never deleted
    assert [hit["id"] for hit in await session.search("text of m3")] == ["m3"]


async def test_a_result_may_name_the_overlay_as_its_start(storage):
    fn = Planned({"fromMessageId": "m2", "toMessageId": "m3", "summary": "S1"}, None)
    session = Session.create(storage).on_compaction(fn)
    await chain(session, "m1", "m2", "m3", "m4", "m5")
    await session.compact()
    [row] = await session.get_compactions()
    fn.results[0] = {"fromMessageId": f"compaction_{row['id']}", "toMessageId": "m4", "summary": "S2"}
    assert await session.compact() == {"fromMessageId": "m2", "toMessageId": "m4", "summary": "S2"}
    assert ids(await session.get_history())[2:] == ["m5"]


async def test_a_compaction_on_branch_a_never_hides_branch_b(storage):
    session = Session.create(storage)
    await chain(session, "m1", "m2", "m3", "a4", "a5")
    await chain(session, "b4", "b5", "b6", parent_id="m3")
    assert ids(await session.get_history()) == ["m1", "m2", "m3", "b4", "b5", "b6"]
    await session.append_message(msg("a6"), "a5")  # branch A is the latest again
    session.on_compaction(Planned({"fromMessageId": "m2", "toMessageId": "a4", "summary": "A"}))
    assert await session.compact() == {"fromMessageId": "m2", "toMessageId": "a4", "summary": "A"}
    assert ids(await session.get_history())[2:] == ["a5", "a6"]
    assert ids(await session.get_history("b6")) == ["m1", "m2", "m3", "b4", "b5", "b6"]

    await session.append_message(msg("b7"), "b6")  # now compact branch B
    session.on_compaction(Planned({"fromMessageId": "m3", "toMessageId": "b5", "summary": "B"}))
    # A's overlay is not on this path, so B's compaction does not extend it from m2
    assert await session.compact() == {"fromMessageId": "m3", "toMessageId": "b5", "summary": "B"}
    history = ids(await session.get_history())
    assert history[:2] == ["m1", "m2"] and history[2].startswith("compaction_") and history[3:] == ["b6", "b7"]
    assert ids(await session.get_history("a6"))[2:] == ["a5", "a6"]
    assert stored_ranges(storage) == [("A", "m2", "a4"), ("B", "m3", "b5")]


async def test_echoing_the_history_back_stores_no_overlay_and_keeps_ids_unique(storage):
    session = Session.create(storage).on_compaction(Planned({"fromMessageId": "m2", "toMessageId": "m4",
                                                             "summary": "The summary."}))
    await chain(session, "m1", "m2", "m3", "m4", "m5")
    await session.compact()
    for message in await session.get_history():
        assert await session.append_message(message) is False
    assert await session.append_message(msg("m6")) is True
    history = await session.get_history()
    assert ids(history)[0] == "m1" and ids(history)[2:] == ["m5", "m6"]
    assert len(set(ids(history))) == len(history) == 4
    assert sum(m["id"].startswith("compaction_") for m in history) == 1
    assert json.dumps(history).count("The summary.") == 1
    assert storage.scalar("SELECT parent_id FROM assistant_messages WHERE id = 'm6'") == "m5"
    assert storage.scalar("SELECT count(*) FROM assistant_messages") == 6


async def test_compact_without_a_function_is_an_error(storage):
    with pytest.raises(CompactionError, match=r"^No compaction function registered\. Call on_compaction\(\) first\.$"):
        await Session.create(storage).compact()


async def test_compaction_refreshes_the_frozen_prompt(storage):
    session = (Session.create(storage).with_context("memory", max_tokens=100)
               .on_compaction(Planned({"fromMessageId": "m1", "toMessageId": "m2", "summary": "S"}, None)))
    await chain(session, "m1", "m2", "m3")
    frozen = await session.freeze_system_prompt()
    await session.replace_context_block("memory", "Tea.")
    assert await session.freeze_system_prompt() == frozen
    assert await session.compact() is not None
    expected_tail = "MEMORY [2% — 2/100 tokens] [writable]\n" + "═" * 46 + "\nTea."
    assert (await session.freeze_system_prompt()).endswith(expected_tail)
    await session.replace_context_block("memory", "Coffee.")
    assert await session.compact() is None  # nothing to compact: the prompt stays as it was
    assert (await session.freeze_system_prompt()).endswith("\nTea.")


async def test_manual_compact_with_a_failing_function_returns_none_and_skips_the_handler(recording_agent):
    heard = []
    session = (Session.create(recording_agent).on_compaction(Planned(RuntimeError("model down")))
               .on_compaction_error(heard.append))
    await chain(session, "m1", "m2")
    recording_agent.clear()
    assert await session.compact() is None
    assert heard == []
    assert recording_agent.payloads[-1] == {"type": "cf_agent_session_error", "error": "model down", "sessionId": ""}
    assert await session.get_compactions() == []


# -- auto-compaction --------------------------------------------------------------


async def test_auto_compaction_runs_after_a_new_message_over_the_threshold(storage):
    fn = Planned({"fromMessageId": "m1", "toMessageId": "m2", "summary": "S"})
    session = Session.create(storage).on_compaction(fn).compact_after(20)
    await chain(session, "m1", "m2")  # 2 * (4 + 4) = 16 tokens: under
    assert fn.seen == []
    await session.append_message(msg("m3"))  # 24 > 20
    assert fn.seen == [["m1", "m2", "m3"]]
    assert ids(await session.get_history())[1:] == ["m3"]
    await session.append_message(msg("m3"))  # a duplicate is not a new message
    assert len(fn.seen) == 1


async def test_auto_compaction_is_strictly_greater_than_the_threshold(storage):
    fn = Planned(None)
    session = Session.create(storage).on_compaction(fn).compact_after(16)
    await chain(session, "m1", "m2")
    assert await session.estimate_tokens() == 16 and fn.seen == []


FAULTS = {
    "raises": (RuntimeError("summarizer crashed"), "summarizer crashed"),
    "none": (None, None),
    "off-path": ({"fromMessageId": "m1", "toMessageId": "elsewhere", "summary": "S"},
                 "compaction toMessageId 'elsewhere' is not a message of the current history"),
    "other-branch": ({"fromMessageId": "m1", "toMessageId": "x2", "summary": "S"},
                     "compaction toMessageId 'x2' is not a message of the current history"),
    "blank": ({"fromMessageId": "m1", "toMessageId": "m2", "summary": "  \n"}, None),
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_faulty_compaction_function_never_fails_the_append(recording_agent, fault, caplog):
    result, heard_text = FAULTS[fault]
    heard = []
    session = Session.create(recording_agent).for_session("s")
    await chain(session, "x1", "x2")
    await chain(session, "m1", "m2", parent_id=None)
    session.on_compaction(Planned(result)).compact_after(0).on_compaction_error(heard.append)
    before = await session.get_history()
    recording_agent.clear()
    with caplog.at_level(logging.WARNING, logger="actors.session"):
        assert await session.append_message(msg("m3")) is True
    assert await session.get_history() == [*before, msg("m3")]
    assert await session.get_compactions() == []
    assert [str(e) for e in heard] == ([heard_text] if heard_text else [])
    errors = [p for p in recording_agent.payloads if p["type"] == "cf_agent_session_error"]
    assert errors == ([{"type": "cf_agent_session_error", "error": heard_text, "sessionId": "s"}] if heard_text else [])
    if heard_text is None:  # nothing to compact: the one-time warning instead
        assert "Auto-compaction fired (~" in caplog.text
        assert "0) but the compaction function returned null" in caplog.text


async def test_the_noop_warning_is_logged_once_until_a_compaction_succeeds(storage, caplog):
    fn = Planned(None, None, {"fromMessageId": "m1", "toMessageId": "m2", "summary": "S"}, None)
    session = Session.create(storage).on_compaction(fn).compact_after(0)
    with caplog.at_level(logging.WARNING, logger="actors.session"):
        await chain(session, "m1", "m2", "m3", "m4")
    assert len(fn.seen) == 4
    assert caplog.text.count("returned null") == 2


async def test_a_failing_error_handler_is_swallowed(storage, caplog):
    def handler(error):
        raise ValueError("handler broke")

    session = Session.create(storage).on_compaction(Planned(RuntimeError("x"))).compact_after(0)
    session.on_compaction_error(handler)
    with caplog.at_level(logging.WARNING, logger="actors.session"):
        assert await session.append_message(msg("m1")) is True
    assert "compaction error handler failed" in caplog.text


async def test_an_async_handler_and_an_async_function_are_awaited(storage):
    heard = []

    async def handler(error):
        await trio.lowlevel.checkpoint()
        heard.append(type(error).__name__)

    async def fn(messages):
        await trio.lowlevel.checkpoint()
        return {"fromMessageId": "m1", "toMessageId": "nowhere", "summary": "S"}

    session = Session.create(storage).on_compaction(fn).compact_after(0).on_compaction_error(handler)
    await session.append_message(msg("m1"))
    assert heard == ["CompactionError"]


async def test_a_custom_counter_drives_the_trigger_and_reaches_the_function(storage):
    requests, given = [], []

    def counter(request):
        requests.append(request)
        return 10.2 * len(request["messages"])

    def fn(messages, *, token_counter=None):
        given.append(token_counter)
        return None

    session = (Session.create(storage).with_context("soul", provider=Soul("Be kind."))
               .on_compaction(fn).compact_after(25, token_counter=counter))
    await chain(session, "m1", "m2")
    assert given == []
    assert await session.estimate_tokens() == 21  # ceil(20.4)
    await session.append_message(msg("m3"))
    assert given == [counter]
    assert list(requests[0]) == ["messages", "systemPrompt", "contextBlocks"]
    assert requests[-1]["systemPrompt"].endswith("SOUL [readonly]\n" + "═" * 46 + "\nBe kind.")
    assert [b["label"] for b in requests[-1]["contextBlocks"]] == ["soul"]


async def test_a_failing_counter_reaches_the_handler_and_the_append_succeeds(recording_agent):
    heard = []

    def counter(request):
        raise ArithmeticError("tokenizer unavailable")

    session = (Session.create(recording_agent).on_compaction(Planned()).compact_after(1, token_counter=counter)
               .on_compaction_error(heard.append))
    assert await session.append_message(msg("m1")) is True
    assert [str(e) for e in heard] == ["tokenizer unavailable"]
    assert recording_agent.payloads == [
        {"type": "cf_agent_session_error", "error": "tokenizer unavailable", "sessionId": ""},
        {"type": "cf_agent_session", "phase": "idle", "tokenEstimate": 0, "tokenThreshold": 1, "sessionId": ""},
    ]


async def test_appends_during_a_running_compaction_do_not_start_another(storage):
    release, started = trio.Event(), trio.Event()
    calls = []

    async def slow(messages):
        calls.append(ids(messages))
        started.set()
        await release.wait()
        return {"fromMessageId": "m1", "toMessageId": "m1", "summary": "S"}

    session = Session.create(storage).on_compaction(slow).compact_after(0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.append_message, msg("m1"))
        await started.wait()  # the compaction of m1 runs (a task waiting on Postgres also looks blocked)
        await session.append_message(msg("m2"))
        await session.append_message(msg("m3"))
        release.set()
    assert calls == [["m1"]]
    history = await session.get_history()
    assert history[0]["id"].startswith("compaction_") and ids(history)[1:] == ["m2", "m3"]


class Soul:
    def __init__(self, text):
        self.text = text

    async def get(self):
        return self.text


def test_builder_arguments_are_checked(storage):
    from actors import InvalidInputError

    session = Session.create(storage)
    for call, field in (
        (lambda: session.on_compaction("nope"), "fn"),
        (lambda: session.compact_after(float("nan")), "threshold"),
        (lambda: session.compact_after(-1), "threshold"),
        (lambda: session.compact_after(True), "threshold"),
        (lambda: session.compact_after(10, token_counter=3), "token_counter"),
        (lambda: session.on_compaction_error(None), "handler"),
        (lambda: session.with_row_limit(0), "max_bytes"),
    ):
        with pytest.raises(InvalidInputError) as info:
            call()
        assert info.value.field == field


async def test_estimate_counts_the_summary_not_the_hidden_messages(storage):
    session = Session.create(storage).on_compaction(Planned({"fromMessageId": "m2", "toMessageId": "m4",
                                                             "summary": "short"}))
    await chain(session, "m1", "m2", "m3", "m4", "m5")
    assert await session.estimate_tokens() == 5 * 8
    await session.compact()
    assert await session.estimate_tokens() == estimate_message_tokens(await session.get_history()) == 3 * 8 - 4 + 2
    assert estimate_string_tokens("short") == 2
