"""Context blocks, the frozen prompt, tools and skills through the Session, with reopens.

docs/behaviours.md §3, §4, §6, §7 through ``Session`` itself (the engine
alone is tested in test_context_* and test_skills); docs/deviations.md #3 and #12.
"""

import json

import pytest

from actors import ConflictError, ContextBlockError
from actors.context import search_provider_for
from actors.session import Session
from actors.skills import DirectorySkillProvider
from storage import SqlStorage
from tests.support.agents import RecordingAgent

pytestmark = pytest.mark.both_storages

SEP = "═" * 46
SID = "chat-1"


class Static:
    def __init__(self, value):
        self.value = value

    async def get(self):
        return self.value


def text(mid, words, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": words}]}


def load_message(mid, key, output, *, shape="toolName"):
    part = {"type": "tool-load_context", "toolName": "load_context", "toolCallId": f"call-{mid}",
            "state": "output-available", "input": {"label": "skills", "key": key}, "output": output}
    if shape == "type":
        del part["toolName"]
    elif shape == "dynamic":
        part["type"] = "dynamic-tool"
    return {"id": mid, "role": "assistant", "parts": [part]}


@pytest.fixture
def path(tmp_path):
    return tmp_path / "actor.db"


@pytest.fixture
async def skills(tmp_path):
    provider = DirectorySkillProvider(tmp_path / "skills")
    for key, description in (("deploy", "How to deploy"), ("review", "How to review code")):
        await provider.set(key, f"Steps to {key}.", description)
    return provider


class Life:
    """One activation of an actor: the file open and a freshly built Session."""

    def __init__(self, path, skills, *, cached=True):
        self.storage = SqlStorage.open(path)
        self.agent = RecordingAgent(self.storage)
        self.session = (
            Session.create(self.agent)
            .for_session(SID)
            .with_context("soul", provider=Static("You are a helpful assistant."))
            .with_context("memory", description="Learned facts", max_tokens=1100)
            .with_context("skills", description="Loadable skills", provider=skills)
            .with_context("knowledge", description="Searchable knowledge base",
                          provider=search_provider_for(self.storage))
        )
        if cached:
            self.session.with_cached_prompt()

    async def load(self, mid, key):
        """What a host does for a load_context call: run the tool, store the call and its output."""
        output = await (await self.session.tools())["load_context"].execute({"label": "skills", "key": key})
        await self.session.append_message(load_message(mid, key, output))
        return output

    def close(self):
        self.storage.close()


async def test_default_four_blocks_render_byte_for_byte_through_the_session(path, skills):
    life = Life(path, skills)
    assert await life.session.freeze_system_prompt() == (
        f"{SEP}\nSOUL [readonly]\n{SEP}\nYou are a helpful assistant.\n\n"
        f"{SEP}\nMEMORY (Learned facts) [0% — 0/1100 tokens] [writable]\n{SEP}\n\n\n"
        f"{SEP}\nSKILLS (Loadable skills) [loadable]\n{SEP}\n- deploy: How to deploy\n- review: How to review code\n\n"
        f"{SEP}\nKNOWLEDGE (Searchable knowledge base) [searchable]\n{SEP}\n"
    )
    assert list(await life.session.tools()) == ["set_context", "load_context", "unload_context", "search_context"]
    life.close()


async def test_skill_scenario_survives_reopen_and_rewrites_the_unloaded_output(path, skills):
    life = Life(path, skills)
    assert await life.load("a1", "deploy") == "Steps to deploy."
    await life.load("a2", "review")
    tools = await life.session.tools()
    assert await tools["unload_context"].execute({"label": "skills", "key": "review"}) == (
        'Unloaded "review" from skills. Context reclaimed.'
    )
    life.close()

    life = Life(path, skills)
    assert set(await life.session.get_loaded_skill_keys()) == {"skills:deploy"}
    stored = await life.session.get_message("a2")
    assert stored["parts"][0]["output"] == "[skill unloaded: review]"
    assert (await life.session.get_message("a1"))["parts"][0]["output"] == "Steps to deploy."
    life.close()


async def test_load_unload_load_again_is_loaded_after_reopen(path, skills):
    life = Life(path, skills)
    await life.load("a1", "deploy")
    assert await life.session.unload_skill("skills", "deploy") is True
    await life.load("a2", "deploy")
    life.close()
    life = Life(path, skills)
    assert list(await life.session.get_loaded_skill_keys()) == ["skills:deploy"]
    assert (await life.session.get_message("a1"))["parts"][0]["output"] == "[skill unloaded: deploy]"
    assert (await life.session.get_message("a2"))["parts"][0]["output"] == "Steps to deploy."
    life.close()


async def test_unload_rewrite_is_an_update_so_it_broadcasts_idle(path, skills):
    life = Life(path, skills)
    await life.load("a1", "deploy")
    life.agent.clear()
    assert await life.session.unload_skill("skills", "deploy") is True
    assert [p["phase"] for p in life.agent.payloads] == ["idle"]
    assert await life.session.unload_skill("skills", "deploy") is False
    life.close()


@pytest.mark.parametrize("shape", ["toolName", "type", "dynamic"])
async def test_a_file_without_a_stored_skill_set_is_scanned_once_including_compacted_loads(path, skills, shape):
    storage = SqlStorage.open(path)
    plain = Session.create(storage).for_session(SID)  # no skill block: nothing tracked
    await plain.append_message(text("u1", "please deploy"))
    await plain.append_message(load_message("a1", "deploy", "Steps to deploy.", shape=shape))
    await plain.append_message(text("u2", "thanks"))
    await plain.append_message(text("u3", "bye"))
    await plain.add_compaction("they deployed", "a1", "u2")  # the load is hidden by an overlay
    assert storage.scalar("SELECT count(*) FROM assistant_config WHERE key = 'loaded_skills'") == 0
    storage.close()

    life = Life(path, skills)
    assert [m["id"] for m in await life.session.get_history()][0::2] == ["u1", "u3"]
    assert list(await life.session.get_loaded_skill_keys()) == ["skills:deploy"]
    life.close()
    assert json.loads(SqlStorage.open(path).scalar(
        "SELECT value FROM assistant_config WHERE session_id = ? AND key = 'loaded_skills'", SID
    )) == {"v": 1, "loaded": [["skills:deploy", "a1"]]}


async def test_raw_path_messages_ignores_overlays(path, skills):
    life = Life(path, skills)
    for mid in ("m1", "m2", "m3"):
        await life.session.append_message(text(mid, f"text {mid}"))
    await life.session.add_compaction("sum", "m1", "m2")
    assert [m["id"] for m in await life.session.raw_path_messages()] == ["m1", "m2", "m3"]
    assert len(await life.session.get_history()) == 2
    life.close()


async def test_a_streamed_load_that_finishes_by_update_loads_the_skill(path, skills):
    life = Life(path, skills)
    pending = load_message("a1", "deploy", None)
    pending["parts"][0]["state"] = "input-available"
    await life.session.append_message(pending)
    assert list(await life.session.get_loaded_skill_keys()) == []
    await life.session.update_message(load_message("a1", "deploy", "Steps to deploy."))
    assert list(await life.session.get_loaded_skill_keys()) == ["skills:deploy"]
    life.close()


async def test_clear_messages_unloads_every_skill_and_refreshes_the_prompt(path, skills):
    life = Life(path, skills)
    await life.load("a1", "deploy")
    frozen = await life.session.freeze_system_prompt()
    await life.session.replace_context_block("memory", "User likes tea.")
    assert await life.session.freeze_system_prompt() == frozen
    await life.session.clear_messages()
    assert list(await life.session.get_loaded_skill_keys()) == []
    refreshed = await life.session.freeze_system_prompt()
    assert f"MEMORY (Learned facts) [0% — 4/1100 tokens] [writable]\n{SEP}\nUser likes tea." in refreshed
    assert (await life.session.get_context_block("memory"))["content"] == "User likes tea."  # blocks are kept
    life.close()
    life = Life(path, skills)
    assert await life.session.freeze_system_prompt() == refreshed
    assert list(await life.session.get_loaded_skill_keys()) == []
    life.close()


async def test_frozen_prompt_ignores_set_context_until_refresh_and_survives_reopen(path, skills):
    life = Life(path, skills)
    frozen = await life.session.freeze_system_prompt()
    tools = await life.session.tools()
    assert await tools["set_context"].execute({"label": "memory", "content": "Gate B12 is closed."}) == (
        "Written to memory. Usage: 1% (6/1100 tokens)"
    )
    assert await life.session.freeze_system_prompt() == frozen
    refreshed = await life.session.refresh_system_prompt()
    assert refreshed != frozen
    assert f"MEMORY (Learned facts) [1% — 6/1100 tokens] [writable]\n{SEP}\nGate B12 is closed.\n\n" in refreshed
    life.close()

    life = Life(path, skills)
    assert await life.session.freeze_system_prompt() == refreshed
    assert await life.session.get_context_block("memory") == {
        "label": "memory", "description": "Learned facts", "content": "Gate B12 is closed.", "tokens": 6,
        "maxTokens": 1100, "writable": True, "isSkill": False, "isSearchable": False,
    }
    life.close()


async def test_without_cached_prompt_a_reopened_session_renders_from_the_blocks(path, skills):
    life = Life(path, skills, cached=False)
    await life.session.freeze_system_prompt()
    await life.session.replace_context_block("memory", "Tea.")
    life.close()
    life = Life(path, skills, cached=False)
    assert f"[0% — 2/1100 tokens] [writable]\n{SEP}\nTea.\n\n" in await life.session.freeze_system_prompt()
    life.close()


async def test_for_session_namespaces_block_prompt_and_skill_rows(path, skills):
    life = Life(path, skills)
    await life.session.replace_context_block("memory", "Tea.")
    await life.session.freeze_system_prompt()
    await life.load("a1", "deploy")
    rows = life.storage.sql("SELECT label FROM cf_agents_context_blocks ORDER BY label")
    assert rows == [{"label": "_system_prompt_chat-1"}, {"label": "memory_chat-1"}]
    assert life.storage.sql("SELECT session_id, key FROM assistant_config ORDER BY key") == [
        {"session_id": SID, "key": "loaded_skills"},
    ]
    life.close()


async def test_block_api_through_the_session(path, skills):
    life = Life(path, skills)
    session = life.session
    with pytest.raises(ContextBlockError, match='^Block "soul" is readonly$'):
        await session.replace_context_block("soul", "x")
    with pytest.raises(ContextBlockError, match='^Block "nope" not found$'):
        await session.append_context_block("nope", "x")
    await session.append_context_block("memory", "one")
    assert (await session.append_context_block("memory", "two"))["content"] == "one\ntwo"
    added = await session.add_context("notes", description="Scratch")
    assert (added["label"], added["writable"], added["content"]) == ("notes", True, "")
    with pytest.raises(ConflictError, match='^Block "notes" already exists$'):
        await session.add_context("notes")
    assert [b["label"] for b in await session.get_context_blocks()] == [
        "soul", "memory", "skills", "knowledge", "notes"
    ]
    assert await session.remove_context("notes") is True
    assert await session.remove_context("notes") is False
    assert await session.get_context_block("notes") is None
    life.close()


async def test_builders_after_first_use_are_a_conflict(path, skills):
    life = Life(path, skills)
    await life.session.get_context_blocks()
    with pytest.raises(ConflictError, match=r"^with_context\(\) configures the session"):
        life.session.with_context("late")
    with pytest.raises(ConflictError, match=r"^for_session\(\) configures the session"):
        life.session.for_session("other")
    assert life.session.session_id == SID
    life.close()


def test_builders_chain_and_touch_no_sql(path):
    storage = SqlStorage.open(path)
    storage.close()
    session = Session.create(storage)
    chained = (
        session.for_session("s").with_context("memory").with_cached_prompt().on_compaction(lambda m: None)
        .compact_after(1000).on_compaction_error(lambda e: None).with_row_limit(5000)
    )
    assert chained is session
    assert session.token_threshold == 1000
