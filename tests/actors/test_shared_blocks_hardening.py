"""Blocks whose provider is shared read the same whether or not the reader woke up (docs/deviations.md #3).

A SessionManager gives every session the same provider object for an
explicit block (docs/behaviours.md §13), and sessions on one file share
search entries by block label (§3). When one session writes through such a
provider, another session that loaded its blocks earlier must not keep
showing the old content: a session woken after the write would show the
new one, and hibernation must be invisible.
"""


import pytest

from actors.context import search_provider_for
from actors.manager import SessionManager
from actors.session import Session
from actors.skills import DirectorySkillProvider
from storage import SqlStorage

pytestmark = pytest.mark.both_storages


def contents(blocks):
    return {b["label"]: b["content"] for b in blocks}


async def manager_with_two_sessions(storage, skills_dir):
    manager = (SessionManager.create(storage)
               .with_context("memory")
               .with_context("skills", provider=DirectorySkillProvider(skills_dir))
               .with_context("kb", provider=search_provider_for(storage)))
    first = (await manager.create("first"))["id"]
    second = (await manager.create("second"))["id"]
    return manager, await manager.get_session(first), await manager.get_session(second)


async def woken_view(storage, skills_dir, session_id):
    """What the session shows when it is rebuilt from the file (as after a wake)."""
    manager = (SessionManager.create(storage)
               .with_context("memory")
               .with_context("skills", provider=DirectorySkillProvider(skills_dir))
               .with_context("kb", provider=search_provider_for(storage)))
    session = await manager.get_session(session_id)
    return contents(await session.get_context_blocks()), await session.estimate_tokens()


async def test_a_write_by_one_managed_session_is_seen_by_the_others(storage, tmp_path):
    manager, first, second = await manager_with_two_sessions(storage, tmp_path / "skills")
    assert contents(await first.get_context_blocks())["kb"] == ""
    tools = await second.tools()
    await tools["set_context"].execute({"label": "kb", "content": "Coffee machine is on floor 3."})
    await tools["set_context"].execute({"label": "skills", "content": "Arr.", "metadata": {"title": "pirate"}})
    await second.replace_context_block("memory", "second's own memory")

    seen = contents(await first.get_context_blocks())
    assert seen == {"memory": "", "skills": "- pirate: pirate", "kb": "1 entries indexed."}
    assert (seen, await first.estimate_tokens()) == await woken_view(storage, tmp_path / "skills", first.session_id)
    assert "KB [searchable]" in await first.freeze_system_prompt()
    assert (await first.get_context_block("kb"))["tokens"] == 5


async def test_two_sessions_on_one_file_sharing_a_search_label_stay_in_step(storage):
    provider = search_provider_for(storage)
    one = Session.create(storage).for_session("one").with_context("kb", provider=provider)
    two = Session.create(storage).for_session("two").with_context("kb", provider=provider)
    assert (await one.get_context_block("kb"))["content"] == ""
    await two._context.set_search_entry("kb", "k1", "first entry")
    await two._context.set_search_entry("kb", "k2", "second entry")
    assert (await one.get_context_block("kb"))["content"] == "2 entries indexed."


async def test_a_skill_folder_shared_by_two_actors_is_seen_by_both(tmp_path):
    shared = DirectorySkillProvider(tmp_path / "skills")
    a_storage, b_storage = SqlStorage.open(tmp_path / "a.sqlite3"), SqlStorage.open(tmp_path / "b.sqlite3")
    a = Session.create(a_storage).with_context("skills", provider=shared)
    b = Session.create(b_storage).with_context("skills", provider=shared)
    assert (await a.get_context_block("skills"))["content"] == ""
    await b._context.set_skill("skills", "review", "Read twice.", "How to review")
    assert (await a.get_context_block("skills"))["content"] == "- review: How to review"
    a_storage.close()
    b_storage.close()


async def test_an_unshared_session_reads_its_blocks_once(storage):
    class Counting:
        def __init__(self):
            self.gets = 0
            self.value = "v"

        async def get(self):
            self.gets += 1
            return self.value

        async def set(self, content):
            self.value = content

    provider = Counting()
    session = Session.create(storage).with_context("notes", provider=provider)
    for _ in range(5):
        await session.get_context_blocks()
    await session.replace_context_block("notes", "new")
    for _ in range(5):
        await session.get_context_block("notes")
    assert provider.gets == 1


async def test_the_history_block_counts_sessions_created_after_it_was_loaded(storage):
    manager = SessionManager.create(storage).with_searchable_history("history")
    first = await manager.get_session((await manager.create("first"))["id"])
    assert (await first.get_context_block("history"))["content"] == "1 session available for search."
    await manager.create("second")
    assert (await first.get_context_block("history"))["content"] == "2 sessions available for search."
