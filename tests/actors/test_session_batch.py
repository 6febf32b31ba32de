"""Session.append_messages: one chain, one transaction, one round of after-write effects.

Chaining rules (duplicates, echoed overlay ids), all-or-nothing on bad input
and on storage failures, broadcasts, skills and auto-compaction after a
batch; Session.seed_messages. Every message here is 8 estimated tokens
(4 per message + 4 for "text of mN").
"""

import json

import pytest

from actors import ConflictError, InvalidInputError, InvalidMessageError
from actors.session import MessagesChange, Session
from actors.skills import DirectorySkillProvider
from storage.schema import create_on_first_use
from tests.support.backends import kind_of, refusing_inserts, write_counts

pytestmark = pytest.mark.both_storages


def msg(mid, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": f"text of {mid}"}]}


def skill_part(tool, key):
    part = {"type": f"tool-{tool}", "toolName": tool, "toolCallId": f"call-{tool}-{key}",
            "state": "output-available", "input": {"label": "skills", "key": key}}
    return {**part, "output": f"Steps to {key}." if tool == "load_context" else f"Unloaded {key}"}


def skill_message(mid, *parts):
    return {"id": mid, "role": "assistant", "parts": [skill_part(tool, key) for tool, key in parts]}


def ids(messages):
    return [m["id"] for m in messages]


def idle(estimate, threshold="null", sid="", before=None):
    compacted = "" if before is None else f',"compacted":{{"tokensBefore":{before}}}'
    return (f'{{"type":"cf_agent_session","phase":"idle","tokenEstimate":{estimate},'
            f'"tokenThreshold":{threshold}{compacted},"sessionId":"{sid}"}}')


def compacting(estimate, threshold="null", sid=""):
    return (f'{{"type":"cf_agent_session","phase":"compacting","tokenEstimate":{estimate},'
            f'"tokenThreshold":{threshold},"sessionId":"{sid}"}}')


def table_counts(storage):
    """Rows of every table (or index) a message write touches."""
    return write_counts(storage)


def parents(storage):
    return dict(storage.exec("SELECT id, parent_id FROM assistant_messages ORDER BY seq"))


# -- chaining ---------------------------------------------------------------------------------


async def test_a_batch_continues_from_the_latest_leaf_and_chains_each_message(storage):
    session = Session.create(storage)
    await session.append_message(msg("m1"))
    assert await session.append_messages([msg("m2", "assistant"), msg("m3"), msg("m4", "assistant")]) == [True] * 3
    assert parents(storage) == {"m1": None, "m2": "m1", "m3": "m2", "m4": "m3"}
    assert ids(await session.get_history()) == ["m1", "m2", "m3", "m4"]
    assert (await session.get_latest_leaf())["id"] == "m4"
    assert await session.get_path_length() == 4


async def test_a_batch_takes_the_three_parent_cases_of_append_message(storage):
    session = Session.create(storage)
    await session.append_messages([msg("a1"), msg("a2")])
    assert await session.append_messages([msg("r1"), msg("r2")], None) == [True, True]
    assert ids(await session.get_history()) == ["r1", "r2"]
    await session.append_messages([msg("b2")], "a1")
    assert ids(await session.get_history()) == ["a1", "b2"]
    await session.append_messages([msg("u1"), msg("u2")], "not-stored")
    assert ids(await session.get_history()) == ["u1", "u2"]
    assert parents(storage)["u1"] is None
    assert ids(await session.get_branches("a1")) == ["a2", "b2"]


async def test_a_duplicate_in_the_middle_is_skipped_and_the_next_message_goes_under_it(storage):
    session = Session.create(storage)
    await session.append_message(msg("m1"))
    stored_m1 = await session.get_message("m1")
    assert await session.append_messages([msg("m2"), {**msg("m1"), "parts": []}, msg("m3")]) == [True, False, True]
    assert parents(storage) == {"m1": None, "m2": "m1", "m3": "m1"}
    assert await session.get_message("m1") == stored_m1  # the first content stays
    assert ids(await session.get_history()) == ["m1", "m3"]


async def test_an_id_repeated_inside_a_batch_is_stored_once_and_chains_on_from_it(storage):
    session = Session.create(storage)
    first = msg("a")
    assert await session.append_messages([first, msg("b"), {**msg("a"), "role": "assistant"}, msg("c")]) == [
        True, True, False, True]
    assert parents(storage) == {"a": None, "b": "a", "c": "a"}
    assert await session.get_message("a") == first
    assert ids(await session.get_history()) == ["a", "c"]


async def test_a_trailing_duplicate_leaves_the_last_new_message_as_the_latest_leaf(storage):
    session = Session.create(storage)
    await session.append_messages([msg("m1"), msg("m2")])
    assert await session.append_messages([msg("m3"), msg("m1")]) == [True, False]
    assert (await session.get_latest_leaf())["id"] == "m3"
    assert ids(await session.get_history()) == ["m1", "m2", "m3"]


async def test_an_echoed_transcript_with_an_overlay_stores_only_the_new_message(storage):
    session = Session.create(storage)
    await session.append_messages([msg(f"m{i}") for i in range(1, 5)])
    record = await session.add_compaction("m2 and m3 in short", "m2", "m3")
    history = await session.get_history()
    assert ids(history) == ["m1", f"compaction_{record['id']}", "m4"]
    assert await session.append_messages([*history, msg("m5")]) == [False, False, False, True]
    assert parents(storage)["m5"] == "m4"
    assert ids(await session.get_history()) == ["m1", f"compaction_{record['id']}", "m4", "m5"]
    assert storage.scalar("SELECT count(*) FROM assistant_messages WHERE id LIKE 'compaction_%'") == 0


async def test_after_an_echoed_overlay_the_chain_goes_on_from_the_last_compacted_message(storage):
    """The overlay stands for m2..m4 (the end of the path): the new message goes under m4, not m1."""
    session = Session.create(storage)
    await session.append_messages([msg(f"m{i}") for i in range(1, 5)])
    record = await session.add_compaction("m2 to m4 in short", "m2", "m4")
    overlay = (await session.get_history())[1]
    assert await session.append_messages([msg("m1"), overlay, msg("m5")]) == [False, False, True]
    assert parents(storage)["m5"] == "m4"
    assert ids(await session.get_history()) == ["m1", f"compaction_{record['id']}", "m5"]


async def test_an_unknown_overlay_id_in_a_batch_is_passed_over(storage):
    session = Session.create(storage)
    await session.append_message(msg("m1"))
    assert await session.append_messages([msg("n1"), msg("compaction_nothing"), msg("n2")], None) == [
        True, False, True]
    assert parents(storage) == {"m1": None, "n1": None, "n2": "n1"}


async def test_an_empty_batch_writes_and_broadcasts_nothing(recording_agent, storage):
    session = Session.create(recording_agent)
    before = table_counts(storage)
    assert await session.append_messages([]) == []
    assert await session.append_messages(iter([])) == []
    assert table_counts(storage) == before
    assert recording_agent.take() == []


# -- all or nothing ------------------------------------------------------------------------------


async def test_a_batch_whose_third_message_is_malformed_stores_nothing(recording_agent, storage):
    session = Session.create(recording_agent)
    await session.append_message(msg("m0"))
    recording_agent.take()
    before = table_counts(storage)
    with pytest.raises(InvalidMessageError) as caught:
        await session.append_messages([msg("m1"), msg("m2"), {"id": "m3", "role": "user"}])
    assert (caught.value.field, str(caught.value)) == ("messages[2].parts", "messages[2].parts is missing")
    assert table_counts(storage) == before
    assert ids(await session.get_history()) == ["m0"]
    assert recording_agent.take() == []


async def test_a_batch_whose_third_message_cannot_fit_the_row_limit_stores_nothing(storage):
    session = Session.create(storage).with_row_limit(500)
    huge_id = "x" * 600
    bad = {"id": huge_id, "role": "user", "parts": [{"type": "text", "text": "hi"}]}
    size = len(json.dumps(bad, separators=(",", ":")))
    with pytest.raises(InvalidMessageError) as caught:
        await session.append_messages([msg("m1"), msg("m2"), bad])
    assert caught.value.field == "messages[2]"
    assert str(caught.value) == (
        f"messages[2]: message {huge_id!r} is {size} bytes after compaction, over the row limit of 500 bytes "
        "(its id, metadata or number of parts is too large to shrink)"
    )
    assert table_counts(storage) == dict.fromkeys(table_counts(storage), 0)


async def test_batch_errors_name_the_message_and_its_field(storage):
    session = Session.create(storage)
    cases = [
        (["not a message"], "messages[0]", "messages[0] must be a dict with id, role and parts, not str"),
        ([msg("m1"), {"id": 7, "role": "user", "parts": []}], "messages[1].id",
         "messages[1].id must be a string, not int"),
        ([msg("m1"), {"id": "m2", "role": "user", "parts": [float("nan")]}], "messages[1]",
         "messages[1] is not JSON data: Out of range float values are not JSON compliant"),
    ]
    for batch, field, text in cases:
        with pytest.raises(InvalidMessageError) as caught:
            await session.append_messages(batch)
        assert (caught.value.field, str(caught.value)) == (field, text)
    for bad in ("m1", msg("m1"), None):
        with pytest.raises(InvalidInputError) as caught:
            await session.append_messages(bad)
        assert (caught.value.field, str(caught.value)) == ("messages", "messages must be a list of messages")
    with pytest.raises(InvalidInputError) as caught:
        await session.append_messages([msg("m1")], 42)
    assert (caught.value.field, str(caught.value)) == ("parent_id", "parent_id must be a string, not int")
    assert await session.get_path_length() == 0


async def test_a_storage_failure_on_the_third_row_rolls_the_whole_batch_back(recording_agent, storage):
    session = Session.create(recording_agent)
    await session.append_messages([msg("m0")])
    recording_agent.take()
    before = table_counts(storage)
    with refusing_inserts(storage, "assistant_messages", "m3 refused", when="NEW.id = 'm3'") as error:
        with pytest.raises(error, match="m3 refused"):
            await session.append_messages([msg("m1"), msg("m2"), msg("m3"), msg("m4")])
        assert table_counts(storage) == before
        assert (await session.get_latest_leaf())["id"] == "m0"
        assert await session.search("text") == [
            {"id": "m0", "role": "user", "content": "text of m0",
             "createdAt": (await session.search("m0"))[0]["createdAt"]}]
        assert recording_agent.take() == []
    assert await session.append_messages([msg("m1"), msg("m2"), msg("m3")]) == [True, True, True]
    assert ids(await session.get_history()) == ["m0", "m1", "m2", "m3"]
    if kind_of(storage) == "sqlite":  # Postgres identities may leave gaps after a rollback
        assert [row[0] for row in storage.exec("SELECT seq FROM assistant_messages ORDER BY seq")] == [1, 2, 3, 4]


async def test_a_storage_failure_after_the_search_rows_rolls_them_back_too(storage):
    """The last row of a batch refused (SQLite: the CJK index's, after the text index's; Postgres:
    the active-leaf row) must also undo every message and search row."""
    session = Session.create(storage)
    cjk = {"id": "m2", "role": "user", "parts": [{"type": "text", "text": "東京"}]}
    last = "assistant_fts_cjk_content" if kind_of(storage) == "sqlite" else "assistant_config"
    if kind_of(storage) == "sqlite":  # the trigger needs the index, made by a file's first message write
        create_on_first_use(storage.connection, "assistant_fts")
    with refusing_inserts(storage, last, "last row refused") as error:  # FTS5 reports it as "constraint failed"
        with pytest.raises(error, match="last row refused|constraint failed"):
            await session.append_messages([msg("m1"), cjk])
    assert table_counts(storage) == dict.fromkeys(table_counts(storage), 0)


# -- after-write effects -----------------------------------------------------------------------


async def test_a_batch_broadcasts_one_idle_status_with_the_final_estimate(recording_agent):
    session = Session.create(recording_agent).for_session("s1")
    await session.append_message(msg("m1"))
    assert recording_agent.take() == [idle(8, sid="s1")]
    await session.append_messages([msg("m2"), msg("m3"), msg("m4")])
    assert recording_agent.take() == [idle(32, sid="s1")]
    assert await session.append_messages([msg("m3"), msg("m4")]) == [False, False]  # duplicates: idle only
    assert recording_agent.take() == [idle(32, sid="s1")]
    await session.append_messages([msg("compaction_x")])
    assert recording_agent.take() == [idle(32, sid="s1")]


async def test_auto_compaction_runs_once_after_a_batch_that_crosses_the_threshold(recording_agent):
    calls = []

    def compact(messages):
        calls.append(ids(messages))
        return {"fromMessageId": "m1", "toMessageId": "m2", "summary": "x"}

    session = Session.create(recording_agent).compact_after(20).on_compaction(compact)
    await session.append_messages([msg(f"m{i}") for i in range(1, 6)])
    assert calls == [["m1", "m2", "m3", "m4", "m5"]]
    # 5 x 8 tokens; afterwards the overlay (4 + 2) and m3..m5: still over 20, but one check per write.
    assert recording_agent.take() == [idle(40, 20), compacting(40, 20), idle(30, 20, before=40)]
    record = (await session.get_compactions())[0]
    assert ids(await session.get_history()) == [f"compaction_{record['id']}", "m3", "m4", "m5"]


async def test_a_batch_under_the_threshold_does_not_compact(recording_agent):
    calls = []
    session = Session.create(recording_agent).compact_after(100).on_compaction(lambda m: calls.append(m))
    await session.append_messages([msg("m1"), msg("m2")])
    assert (calls, recording_agent.take()) == ([], [idle(16, 100)])


@pytest.fixture
async def skills(tmp_path):
    provider = DirectorySkillProvider(tmp_path / "skills")
    for key in ("deploy", "review", "pirate"):
        await provider.set(key, f"Steps to {key}.", f"How to {key}")
    return provider


async def test_skill_loads_and_unloads_inside_a_batch_are_tracked_in_order(storage, skills):
    session = Session.create(storage).with_context("skills", provider=skills)
    await session.append_messages([
        msg("m1"),
        skill_message("m2", ("load_context", "deploy")),
        skill_message("m3", ("load_context", "review"), ("load_context", "pirate")),
        skill_message("m4", ("unload_context", "deploy")),
    ])
    assert list(await session.get_loaded_skill_keys()) == ["skills:review", "skills:pirate"]
    reopened = Session.create(storage).with_context("skills", provider=skills)
    assert list(await reopened.get_loaded_skill_keys()) == ["skills:review", "skills:pirate"]
    assert await reopened.unload_skill("skills", "review") is True  # the batch message is rewritten
    assert (await reopened.get_message("m3"))["parts"][0]["output"] == "[skill unloaded: review]"


async def test_each_skill_event_of_a_batch_applies_exactly_once(storage, skills):
    """An unload then a re-load keeps 'deploy' after 'review', as appending one by one does."""
    batch = [
        skill_message("m1", ("load_context", "deploy")),
        skill_message("m2", ("unload_context", "deploy")),
        skill_message("m3", ("load_context", "deploy")),
        skill_message("m4", ("load_context", "review")),
    ]
    one_by_one = Session.create(storage).for_session("single").with_context("skills", provider=skills)
    for message in batch:
        await one_by_one.append_message(message)
    batched = Session.create(storage).for_session("batch").with_context("skills", provider=skills)
    await batched.append_messages(batch)
    assert list(await batched.get_loaded_skill_keys()) == ["skills:deploy", "skills:review"]
    assert list(await one_by_one.get_loaded_skill_keys()) == ["skills:deploy", "skills:review"]


class RecordingSession(Session):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.changes = []

    def _before_store(self, message):
        return {**message, "seen": True}

    async def _after_write(self, change):
        self.changes.append(change)


async def test_a_batch_passes_the_hooks_once_with_the_messages_as_stored(storage):
    session = RecordingSession(storage)
    await session.append_messages([msg("m1"), msg("m1"), msg("compaction_x"), msg("m2")])
    await session.append_messages([msg("m2")])
    assert session.changes == [
        MessagesChange("append_batch", inserted=True, messages=({**msg("m1"), "seen": True},
                                                                {**msg("m2"), "seen": True})),
        MessagesChange("append_batch", inserted=False, messages=()),
    ]
    assert await session.get_message("m2") == {**msg("m2"), "seen": True}


# -- seed_messages ------------------------------------------------------------------------------


@pytest.mark.sqlite_only("seed_messages is synchronous: SQLite only (Postgres writers use prepared_rows)")
async def test_seed_messages_fills_an_empty_session_without_effects(recording_agent, storage):
    session = Session.create(recording_agent).compact_after(0).on_compaction(lambda m: pytest.fail("no compaction"))
    assert session.seed_messages([msg("m1"), msg("m2"), msg("m1"), msg("m3")]) == [True, True, False, True]
    assert parents(storage) == {"m1": None, "m2": "m1", "m3": "m1"}
    assert recording_agent.take() == []
    assert await session.estimate_tokens() == 16  # the path m1 -> m3
    with pytest.raises(ConflictError, match="session '' already holds messages; only an empty one is seeded"):
        session.seed_messages([msg("m4")])
    with pytest.raises(InvalidMessageError) as caught:
        Session.create(storage).for_session("other").seed_messages([msg("a"), {"id": "b"}])
    assert caught.value.field == "messages[1].role"
    assert storage.scalar("SELECT count(*) FROM assistant_messages WHERE session_id = 'other'") == 0
