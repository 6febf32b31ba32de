"""Session configuration as one frozen value (actors/session_spec.py).

The builders of Session and SessionManager and SessionConfig all produce a
SessionSpec; a spec configures any number of sessions without replaying
builder calls, and the builders keep their errors.
"""

import dataclasses
import json

import pytest

from actors import (
    BlockConfig,
    CompactionConfig,
    ConflictError,
    InvalidInputError,
    Session,
    SessionConfig,
    SessionManager,
)
from actors.context import ContextBlocks, search_provider_for
from actors.session_spec import BlockSpec, CompactionSpec, ContextSpec, PerSession, SessionSpec
from actors.truncation import ROW_MAX_BYTES
from storage import SqlStorage
from tests.support.backends import kind_of

pytestmark = pytest.mark.both_storages


def msg(mid, text=None, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text or f"text of {mid}"}]}


class Shared:
    """An explicit writable provider: one object for every session."""

    def __init__(self):
        self.value = "shared fact"

    async def get(self):
        return self.value

    async def set(self, content):
        self.value = content


def compact_all(messages):
    return {"fromMessageId": messages[0]["id"], "toMessageId": messages[-1]["id"], "summary": "the gist"}


def no_compaction(messages):
    return None


def counter(payload):
    return 1


def handler(error):
    return None


# -- the value -----------------------------------------------------------------------------------------


def test_the_default_spec_declares_nothing():
    spec = SessionSpec()
    nothing = SessionSpec(ContextSpec((), None, False, None), CompactionSpec(None, None, None, None), ROW_MAX_BYTES)
    assert spec == nothing
    assert spec.context.all_blocks == ()


def test_each_builder_step_returns_a_new_value_and_leaves_the_old_one_alone():
    empty = SessionSpec()
    spec = empty.with_context("memory", description="Facts", max_tokens=100).with_cached_prompt()
    spec = spec.on_compaction(compact_all).compact_after(500, token_counter=counter).on_compaction_error(handler)
    spec = spec.with_row_limit(4096)
    assert empty == SessionSpec()
    assert spec.context == ContextSpec((BlockSpec("memory", "Facts", 100, None),), None, True, None)
    assert spec.compaction == CompactionSpec(compact_all, 500, counter, handler)
    assert spec.row_max_bytes == 4096
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.row_max_bytes = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.context.blocks = ()


def test_compact_after_replaces_the_counter_too():
    spec = SessionSpec().compact_after(10, token_counter=counter).compact_after(20)
    assert (spec.compaction.threshold, spec.compaction.token_counter) == (20, None)


def test_the_history_block_stays_after_blocks_declared_later():
    spec = SessionSpec().with_history_block("history", description="H", provider=Shared()).with_context("memory")
    assert [b.label for b in spec.context.all_blocks] == ["memory", "history"]
    assert [b.label for b in spec.context.blocks] == ["memory"]


# -- the same errors everywhere -------------------------------------------------------------------------


BAD_CALLS = [
    ("with_context", ("",), {}),
    ("with_context", ("m",), {"max_tokens": -1}),
    ("with_context", ("m",), {"max_tokens": True}),
    ("with_context", ("m",), {"description": 3}),
    ("with_context", ("m",), {"provider": object()}),
    ("with_context", ("\ud800",), {}),
    ("with_context", ("m",), {"description": "bad \udfff"}),
    ("with_cached_prompt", (object(),), {}),
    ("on_compaction", ("not callable",), {}),
    ("compact_after", (float("nan"),), {}),
    ("compact_after", (-1,), {}),
    ("compact_after", (True,), {}),
    ("compact_after", (10,), {"token_counter": 3}),
    ("on_compaction_error", (None,), {}),
    ("with_row_limit", (0,), {}),
    ("with_row_limit", (True,), {}),
]


def raised(call):
    with pytest.raises(InvalidInputError) as info:
        call()
    return type(info.value), str(info.value), info.value.field


@pytest.mark.parametrize("method, args, kwargs", BAD_CALLS)
def test_spec_session_and_manager_builders_refuse_the_same_arguments_the_same_way(storage, method, args, kwargs):
    from_spec = raised(lambda: getattr(SessionSpec(), method)(*args, **kwargs))
    assert from_spec == raised(lambda: getattr(Session.create(storage), method)(*args, **kwargs))
    if hasattr(SessionManager, method):
        assert from_spec == raised(lambda: getattr(SessionManager.create(storage), method)(*args, **kwargs))


def test_a_label_declared_twice_is_the_same_conflict_everywhere(storage):
    for builder in (SessionSpec(), Session.create(storage), SessionManager.create(storage), ContextBlocks(storage)):
        with pytest.raises(ConflictError, match='^Block "m" already exists$'):
            builder.with_context("m").with_context("m")


def test_a_second_history_block_names_the_first(storage):
    spec = SessionSpec().with_history_block("history", description=None, provider=Shared())
    with pytest.raises(ConflictError, match='^Block "history" already holds the searchable history$'):
        spec.with_history_block("other", description=None, provider=Shared())
    with pytest.raises(ConflictError, match='^Block "history" already exists$'):
        spec.with_context("history")


def test_a_cached_prompt_in_the_default_row_needs_storage():
    with pytest.raises(InvalidInputError, match="needs a provider when there is no storage") as info:
        ContextBlocks(spec=ContextSpec(cached_prompt=True))
    assert info.value.field == "provider"
    assert ContextBlocks(spec=ContextSpec().with_cached_prompt(Shared())).spec.prompt_store is not None


# -- one spec, many sessions ----------------------------------------------------------------------------------


def test_a_session_built_with_builders_shows_the_spec_they_declared(storage):
    session = (
        Session.create(storage).with_context("memory", description="Facts").with_cached_prompt()
        .on_compaction(compact_all).compact_after(10, token_counter=counter).on_compaction_error(handler)
        .with_row_limit(5000)
    )
    expected = (
        SessionSpec().with_context("memory", description="Facts").with_cached_prompt()
        .on_compaction(compact_all).compact_after(10, token_counter=counter).on_compaction_error(handler)
        .with_row_limit(5000)
    )
    assert session.spec == expected
    assert session.token_threshold == 10


async def test_one_spec_configures_many_sessions_with_their_own_rows_and_shared_providers(storage):
    shared = Shared()
    spec = SessionSpec().with_context("memory").with_context("team", provider=shared).with_cached_prompt()
    a = Session(storage, spec=spec, session_id="a")
    b = Session(storage, spec=spec, session_id="b")
    assert a.spec.context is spec.context and b.spec.context is spec.context
    await a.replace_context_block("memory", "a likes tea")
    await a.replace_context_block("team", "we ship on Fridays")
    assert (await b.get_context_block("memory"))["content"] == ""
    assert (await b.get_context_block("team"))["content"] == "we ship on Fridays"
    rows = storage.sql("SELECT label, content FROM cf_agents_context_blocks ORDER BY label")
    assert [(r["label"], r["content"]) for r in rows] == [("memory_a", "a likes tea")]
    assert "a likes tea" in await a.freeze_system_prompt()
    assert "a likes tea" not in await b.freeze_system_prompt()
    assert sorted(r["label"] for r in storage.sql("SELECT label FROM cf_agents_context_blocks")) == [
        "_system_prompt_a", "_system_prompt_b", "memory_a"]


async def test_a_builder_on_one_session_does_not_change_the_spec_it_came_from(storage):
    spec = SessionSpec().on_compaction(no_compaction)
    session = Session(storage, spec=spec).compact_after(5).with_row_limit(100)
    assert (spec.compaction.threshold, spec.row_max_bytes) == (None, ROW_MAX_BYTES)
    assert (session.spec.compaction.threshold, session.spec.row_max_bytes) == (5, 100)
    assert session.spec.compaction.function is no_compaction


async def test_a_per_session_provider_is_made_for_each_session_from_its_storage(tmp_path):
    made = []

    def make(storage):
        made.append(storage)
        return search_provider_for(storage)

    spec = SessionSpec().with_context("kb", provider=PerSession(make))
    one, two = SqlStorage.open(tmp_path / "one.sqlite3"), SqlStorage.open(tmp_path / "two.sqlite3")
    try:
        a, b = Session(one, spec=spec), Session(two, spec=spec)
        assert made == []  # made on first use, not when declared
        await a._context.set_search_entry("kb", "k1", "coffee is on floor 3")
        block = await b.get_context_block("kb")
        assert (block["isSearchable"], block["content"]) == (True, "")
        assert (await a.get_context_block("kb"))["content"] == "1 entries indexed."
        assert made == [one, two]
    finally:
        one.close()
        two.close()


def test_per_session_needs_a_callable():
    with pytest.raises(InvalidInputError) as info:
        PerSession(3)
    assert info.value.field == "provider"


# -- the manager -----------------------------------------------------------------------------------------------


async def test_managed_sessions_are_plain_sessions_built_from_the_managers_spec(storage):
    manager = (
        SessionManager.create(storage).with_searchable_history("history").with_context("memory")
        .on_compaction(no_compaction).compact_after(1000)
    )
    assert [b.label for b in manager.spec.context.all_blocks] == ["memory", "history"]
    sid = (await manager.create("chat"))["id"]
    session = await manager.get_session(sid)
    assert type(session) is Session
    assert session.spec == manager.spec and session.spec.context is manager.spec.context
    assert [b["label"] for b in await session.get_context_blocks()] == ["memory", "history"]
    assert session.session_id == sid and session.token_threshold == 1000


async def test_the_manager_spec_is_frozen_once_a_session_opens(storage):
    manager = SessionManager.create(storage).with_context("memory")
    before = manager.spec
    await manager.get_session((await manager.create("chat"))["id"])
    with pytest.raises(ConflictError, match=r"^on_compaction\(\) configures every managed session"):
        manager.on_compaction(no_compaction)
    assert manager.spec is before


# -- the history-changed observer ----------------------------------------------------------------------------------


async def test_on_history_changed_reports_each_write_that_changed_the_stored_history(storage):
    seen = []
    spec = SessionSpec().on_compaction(compact_all)
    session = Session(storage, session_id="s1", on_history_changed=seen.append, spec=spec)
    await session.append_message(msg("m1"))
    await session.append_message(msg("m1"))  # duplicate: nothing stored
    await session.append_message(msg("compaction_x"))  # an echoed overlay: nothing stored
    assert seen == ["s1"]
    await session.append_messages([msg("m2"), msg("m3")])
    await session.append_messages([msg("m2")])  # all duplicates
    await session.append_messages([])
    assert seen == ["s1"] * 2
    await session.update_message(msg("m1", "new text"))
    await session.delete_messages(["nope"])  # nothing deleted
    assert seen == ["s1"] * 3
    await session.delete_messages(["m3"])
    assert await session.compact() == {"fromMessageId": "m1", "toMessageId": "m2", "summary": "the gist"}
    await session.add_compaction("by hand", "m1", "m2")
    await session.clear_messages()
    assert seen == ["s1"] * 7
    if kind_of(storage) == "sqlite":  # seed_messages is synchronous: SQLite only
        session.seed_messages([msg("x")])  # seeding has no after-write effects
        assert seen == ["s1"] * 7


async def test_the_notice_comes_before_the_writes_broadcast_and_after_the_commit(storage):
    events = []
    session = Session(
        storage,
        session_id="s1",
        broadcaster=lambda text: events.append(("broadcast", json.loads(text)["phase"])),
        on_history_changed=lambda sid: events.append(("changed", storage.scalar(
            "SELECT count(*) FROM assistant_messages WHERE session_id = ?", sid))),
    )
    await session.append_message(msg("m1"))
    assert events == [("changed", 1), ("broadcast", "idle")]


async def test_automatic_compaction_reports_the_stored_row(storage):
    seen = []
    spec = SessionSpec().on_compaction(compact_all).compact_after(0)
    session = Session(storage, spec=spec, on_history_changed=seen.append)
    await session.append_message(msg("m1"))  # stored, then compacted (one message over 0 tokens)
    assert len(await session.get_compactions()) == 1
    assert seen == ["", ""]


# -- SessionConfig -------------------------------------------------------------------------------------------------


def test_a_session_config_makes_its_spec_once(tmp_path):
    config = SessionConfig(blocks=(
        BlockConfig("soul", "readonly", text="Be brief."),
        BlockConfig("kb", "searchable"),
        BlockConfig("skills", "skills", path=tmp_path),
        BlockConfig("memory", "writable", max_tokens=50),
    ))
    spec = config.spec
    assert config.spec is spec
    kinds = [type(b.provider).__name__ for b in spec.context.blocks]
    assert kinds == ["_TextProvider", "PerSession", "PerSession", "NoneType"]
    assert spec.context.cached_prompt and spec.context.prompt_store is None
    assert spec.compaction.threshold == 100_000 and callable(spec.compaction.function)
    assert SessionConfig(compaction=None).spec.compaction == CompactionSpec()


def test_a_config_whose_summarizer_cannot_load_fails_on_every_use():
    config = SessionConfig(compaction=CompactionConfig(summarizer="no_such_module_here:summarize"))
    for _ in range(2):
        with pytest.raises(InvalidInputError) as info:
            config.spec
        assert info.value.field == "summarizer"
