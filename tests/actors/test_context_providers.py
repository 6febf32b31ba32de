"""The SQLite providers and their SQL (storage/context.py): rows, search entries, config."""

import pytest

from actors.context import (
    AgentContextProvider,
    AgentSearchProvider,
    ContextProvider,
    SearchProvider,
    SkillProvider,
    WritableContextProvider,
    is_search_provider,
    is_skill_provider,
    is_writable_provider,
)
from actors.skills import DirectorySkillProvider
from storage.context import (
    count_search_entries,
    delete_blocks,
    delete_config,
    read_block,
    read_config,
    search_entries,
    upsert_search_entry,
    write_block,
    write_config,
)


@pytest.fixture
def knowledge(storage):
    provider = AgentSearchProvider(storage)
    provider.init("knowledge")
    return provider


def test_block_rows_round_trip_and_delete(storage):
    assert read_block(storage, "memory") is None
    write_block(storage, "memory", "one")
    write_block(storage, "memory", "two")
    assert read_block(storage, "memory") == "two"
    assert storage.scalar("SELECT count(*) FROM cf_agents_context_blocks") == 1
    assert delete_blocks(storage, ["memory", "absent"]) == 1
    assert read_block(storage, "memory") is None


def test_config_rows_are_per_session(storage):
    write_config(storage, "s1", "k", "a")
    write_config(storage, "s2", "k", "b")
    write_config(storage, "s1", "k", "c")
    assert (read_config(storage, "s1", "k"), read_config(storage, "s2", "k")) == ("c", "b")
    delete_config(storage, "s1", "k")
    assert read_config(storage, "s1", "k") is None and read_config(storage, "s2", "k") == "b"


async def test_agent_context_provider_reads_and_writes_its_row(storage):
    provider = AgentContextProvider(storage, "memory_s1")
    assert await provider.get() is None
    await provider.set("User likes coffee.")
    assert await provider.get() == "User likes coffee."
    provider.init("other")
    assert provider.key == "memory_s1"


async def test_search_provider_summary_counts_entries(knowledge):
    assert await knowledge.get() is None
    await knowledge.set("coffee", "Coffee machine is on floor 3.")
    assert await knowledge.get() == "1 entries indexed."
    await knowledge.set("tea", "Tea is in the kitchen.")
    assert await knowledge.get() == "2 entries indexed."


async def test_search_results_are_key_and_content_joined_by_blank_lines(knowledge):
    await knowledge.set("deploy", "The deploy happens on Friday")
    await knowledge.set("review", "Reviews happen before every deploy")
    assert await knowledge.search("friday deploy") == "[deploy]\nThe deploy happens on Friday"
    result = await knowledge.search("deploy")
    assert sorted(result.split("\n\n")) == ["[deploy]\nThe deploy happens on Friday", "[review]\nReviews happen before every deploy"]
    assert await knowledge.search("nothing here") is None


@pytest.mark.parametrize("query", ["", "   ", '"', "*", "hello OR", "NEAR(", "fri*", "key:value"])
async def test_search_never_lets_user_text_reach_fts_syntax(knowledge, query):
    await knowledge.set("deploy", "The deploy happens on Friday")
    assert await knowledge.search(query) is None


async def test_search_uses_the_shared_query_syntax(knowledge):
    await knowledge.set("deploy", "The deploy happens on Friday")
    assert await knowledge.search("deploying") == "[deploy]\nThe deploy happens on Friday"
    assert await knowledge.search('"happens on" deploy') == "[deploy]\nThe deploy happens on Friday"
    assert await knowledge.search('"deploy friday"') is None


async def test_search_finds_cjk_words_inside_sentences(knowledge):
    await knowledge.set("tokyo", "私は東京に行きました")
    assert await knowledge.search("東京") == "[tokyo]\n私は東京に行きました"


async def test_set_replaces_content_and_index_of_an_existing_key(storage, knowledge):
    await knowledge.set("k", "apples are red")
    await knowledge.set("k", "bananas are yellow")
    assert await knowledge.search("apples") is None
    assert await knowledge.search("bananas") == "[k]\nbananas are yellow"
    assert count_search_entries(storage, "knowledge") == 1
    assert storage.scalar("SELECT count(*) FROM cf_agents_search_fts") == 1


async def test_entries_are_filed_under_the_block_label(storage, knowledge):
    other = AgentSearchProvider(storage)
    other.init("faq")
    await knowledge.set("k", "shared word")
    await other.set("k", "shared word too")
    assert await knowledge.search("shared") == "[k]\nshared word"
    assert await other.search("shared") == "[k]\nshared word too"


async def test_search_returns_at_most_ten_entries(storage, knowledge):
    for i in range(12):
        await knowledge.set(f"k{i:02d}", f"common word {i}")
    assert len(search_entries(storage, "knowledge", "common", 100)) == 12
    assert (await knowledge.search("common")).count("[k") == 10


def test_upsert_is_atomic(storage):
    upsert_search_entry(storage, "knowledge", "k", "old text")
    with pytest.raises(RuntimeError, match="abort"):
        with storage.transaction():
            upsert_search_entry(storage, "knowledge", "k", "new text")
            raise RuntimeError("abort")
    assert search_entries(storage, "knowledge", "old") == [{"key": "k", "content": "old text"}]
    assert search_entries(storage, "knowledge", "new") == []


def test_capability_checks_follow_duck_typing(storage, tmp_path):
    class Get:
        async def get(self): return None

    assert [is_writable_provider(p) for p in (Get(), AgentContextProvider(storage), None)] == [False, True, False]
    assert is_skill_provider(DirectorySkillProvider(tmp_path)) and not is_skill_provider(Get())
    assert is_search_provider(AgentSearchProvider(storage)) and is_writable_provider(AgentSearchProvider(storage))
    assert isinstance(Get(), ContextProvider) and not isinstance(Get(), WritableContextProvider)
    assert isinstance(AgentSearchProvider(storage), SearchProvider)
    assert isinstance(DirectorySkillProvider(tmp_path), SkillProvider)
