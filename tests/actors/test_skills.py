"""Skills: history parts, the persisted loaded set, restore on wake, unload rewrite,
and the folder skill provider (docs/behaviours.md §7; docs/deviations.md #3, #12)."""

import copy
import os

import pytest

from actors.context import ContextBlocks
from actors.skills import DirectorySkillProvider, rewrite_unloaded, skill_events, validate_skill_key
from common.errors import InvalidInputError
from storage import SqlStorage
from storage.context import read_config

pytestmark = pytest.mark.both_storages


class ListHost:
    """A session history kept in a list (one branch, root first): a real SkillHost.

    Like the Session, it tells the engine about every stored message. It
    records which history reads the engine made.
    """

    def __init__(self, messages):
        self.messages = messages
        self.engine = None
        self.reads = []

    async def append_message(self, message):
        self.messages.append(copy.deepcopy(message))
        await self.engine.note_appended(message)

    async def update_message(self, message):
        index = next(i for i, m in enumerate(self.messages) if m["id"] == message["id"])
        self.messages[index] = copy.deepcopy(message)
        await self.engine.note_updated(message)

    async def get_message(self, message_id):
        return next((copy.deepcopy(m) for m in self.messages if m["id"] == message_id), None)

    async def get_latest_leaf(self):
        return copy.deepcopy(self.messages[-1]) if self.messages else None

    async def get_history(self):
        self.reads.append("get_history")
        return copy.deepcopy(self.messages)

    def raw_path_messages(self):
        self.reads.append("raw_path_messages")
        return copy.deepcopy(self.messages)


def load_part(key, output, *, shape="toolName", state="output-available", call="c", label="skills", tool="load_context"):
    part = {"type": f"tool-{tool}", "toolName": tool, "toolCallId": f"{call}-{key}", "state": state,
            "input": {"label": label, "key": key}, "output": output}
    if shape == "type":
        del part["toolName"]
    elif shape == "dynamic":
        part["type"] = "dynamic-tool"
    return part


def assistant(mid, *parts):
    return {"id": mid, "role": "assistant", "parts": list(parts)}


@pytest.fixture
def path(tmp_path):
    return tmp_path / "actor.db"


@pytest.fixture
async def skill_dir(tmp_path):
    provider = DirectorySkillProvider(tmp_path / "skills")
    for key in ("deploy", "review", "pirate"):
        await provider.set(key, f"How to {key}.", f"The {key} skill")
    return provider


class Actor:
    """One life of an actor: its file open, a fresh engine and host on the shared history."""

    def __init__(self, path, history, skills, session_id="s1"):
        self.storage = SqlStorage.open(path)
        self.host = ListHost(history)
        self.engine = (ContextBlocks(self.storage, host=self.host).for_session(session_id)
                       .with_context("memory").with_context("skills", provider=skills).with_cached_prompt())
        self.host.engine = self.engine

    async def model_loads(self, mid, key):
        """The model calls load_context; the host stores the tool result in an assistant message."""
        tools = await self.engine.tools()
        output = await tools["load_context"].execute({"label": "skills", "key": key})
        await self.host.append_message(assistant(mid, load_part(key, output, call=mid)))

    async def model_unloads(self, mid, key):
        tools = await self.engine.tools()
        output = await tools["unload_context"].execute({"label": "skills", "key": key})
        await self.host.append_message(assistant(mid, load_part(key, output, call=mid, tool="unload_context")))

    def close(self):
        self.storage.close()


# -- the scenario of the issue ------------------------------------------------------------


async def test_unloaded_skill_stays_unloaded_after_reopen_and_its_output_is_rewritten(path, skill_dir):
    history = [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "deploy please"}]}]
    actor = Actor(path, history, skill_dir)
    await actor.model_loads("a1", "deploy")
    await actor.model_loads("a2", "review")
    await actor.model_unloads("a3", "review")
    assert list(await actor.engine.get_loaded_skill_keys()) == ["skills:deploy"]
    actor.close()

    actor = Actor(path, history, skill_dir)
    assert await actor.engine.get_loaded_skill_keys() == {"skills:deploy"}
    review = await actor.host.get_message("a2")
    assert review["parts"][0]["output"] == "[skill unloaded: review]"
    assert (await actor.host.get_message("a1"))["parts"][0]["output"] == "How to deploy."
    assert actor.host.reads == []  # the wake read one row, not the history
    actor.close()


async def test_load_unload_load_again_is_loaded_after_reopen(path, skill_dir):
    history = []
    actor = Actor(path, history, skill_dir)
    await actor.model_loads("a1", "deploy")
    assert await actor.engine.unload_skill("skills", "deploy") is True
    await actor.model_loads("a2", "deploy")
    actor.close()

    actor = Actor(path, history, skill_dir)
    assert await actor.engine.get_loaded_skill_keys() == {"skills:deploy"}
    assert [m["parts"][0]["output"] for m in history] == ["[skill unloaded: deploy]", "How to deploy."]
    actor.close()


async def test_wake_reads_no_history_whatever_its_length(path, skill_dir):
    history = [{"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": "hi"}]} for i in range(500)]
    actor = Actor(path, history, skill_dir)
    for i, key in enumerate(("deploy", "review", "pirate")):
        await actor.model_loads(f"a{i}", key)
    frozen = await actor.engine.freeze_system_prompt()
    actor.close()

    actor = Actor(path, history, skill_dir)
    assert await actor.engine.freeze_system_prompt() == frozen
    assert list(await actor.engine.get_loaded_skill_keys()) == ["skills:deploy", "skills:review", "skills:pirate"]
    assert actor.host.reads == []
    actor.close()


# -- restore from a file written without the persisted set ------------------------------------


@pytest.mark.parametrize("shape", ["toolName", "type", "dynamic"])
async def test_first_wake_scans_history_once_for_every_part_shape(path, skill_dir, shape):
    history = [assistant("a1", load_part("deploy", "How to deploy.", shape=shape))]
    actor = Actor(path, history, skill_dir)
    assert await actor.engine.get_loaded_skill_keys() == {"skills:deploy"}
    assert actor.host.reads == ["raw_path_messages"]
    assert read_config(actor.storage, "s1", "loaded_skills") == '{"v":1,"loaded":[["skills:deploy","a1"]]}'
    actor.close()

    actor = Actor(path, history, skill_dir)
    assert await actor.engine.get_loaded_skill_keys() == {"skills:deploy"}
    assert actor.host.reads == []
    actor.close()


async def test_scan_follows_loads_unloads_and_markers_in_order(path, skill_dir):
    history = [
        assistant("a1", load_part("deploy", "x"), load_part("review", "y"), load_part("pirate", "z")),
        {"id": "u1", "role": "user", "parts": [load_part("extra", "user parts are ignored")]},
        assistant("a2", load_part("deploy", "", tool="unload_context")),
        assistant("a3", load_part("review", "[skill unloaded: review]")),
        assistant("a4", load_part("late", "still streaming", state="input-available")),
        assistant("a5", load_part("deploy", "again")),
    ]
    actor = Actor(path, history, skill_dir)
    assert list(await actor.engine.get_loaded_skill_keys()) == ["skills:pirate", "skills:deploy"]
    actor.close()


async def test_scan_uses_get_history_when_the_host_has_no_raw_path(path, skill_dir):
    class HistoryOnlyHost(ListHost):
        raw_path_messages = None

    storage = SqlStorage.open(path)
    host = HistoryOnlyHost([assistant("a1", load_part("deploy", "x"))])
    engine = ContextBlocks(storage, host=host).with_context("skills", provider=skill_dir)
    host.engine = engine
    assert await engine.get_loaded_skill_keys() == {"skills:deploy"}
    assert host.reads == ["get_history"]
    storage.close()


async def test_no_scan_without_a_skill_block_until_one_is_added(path, skill_dir):
    storage = SqlStorage.open(path)
    host = ListHost([assistant("a1", load_part("deploy", "x"))])
    engine = ContextBlocks(storage, host=host).with_context("memory")
    host.engine = engine
    assert list(await engine.get_loaded_skill_keys()) == []
    assert host.reads == []
    await engine.add_context("skills", provider=skill_dir)
    assert await engine.get_loaded_skill_keys() == {"skills:deploy"}
    assert host.reads == ["raw_path_messages"]
    storage.close()


# -- keeping the set up to date -----------------------------------------------------------------


async def test_appended_tool_parts_update_the_set_without_the_tool(path, skill_dir):
    actor = Actor(path, [], skill_dir)
    await actor.host.append_message(assistant("a1", load_part("deploy", "x", shape="type")))
    assert await actor.engine.get_loaded_skill_keys() == {"skills:deploy"}
    await actor.host.append_message(assistant("a2", load_part("deploy", "", shape="dynamic", tool="unload_context")))
    assert list(await actor.engine.get_loaded_skill_keys()) == []
    actor.close()


async def test_a_streamed_message_that_finishes_by_update_loads_the_skill(path, skill_dir):
    actor = Actor(path, [], skill_dir)
    await actor.host.append_message(assistant("a1", load_part("deploy", None, state="input-available")))
    assert list(await actor.engine.get_loaded_skill_keys()) == []
    await actor.host.update_message(assistant("a1", load_part("deploy", "How to deploy.")))
    assert await actor.engine.get_loaded_skill_keys() == {"skills:deploy"}
    actor.close()


async def test_editing_an_old_message_does_not_revive_an_unloaded_skill(path, skill_dir):
    actor = Actor(path, [], skill_dir)
    await actor.model_loads("a1", "deploy")
    await actor.host.append_message(assistant("a2", load_part("deploy", "", tool="unload_context")))
    await actor.host.append_message({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "ok"}]})
    await actor.host.update_message(assistant("a1", load_part("deploy", "How to deploy (edited).")))
    assert list(await actor.engine.get_loaded_skill_keys()) == []
    actor.close()


async def test_unload_rewrites_only_the_newest_load(path, skill_dir):
    actor = Actor(path, [], skill_dir)
    await actor.model_loads("a1", "deploy")
    await actor.model_loads("a2", "deploy")
    assert await actor.engine.unload_skill("skills", "deploy") is True
    assert [m["parts"][0]["output"] for m in actor.host.messages] == ["How to deploy.", "[skill unloaded: deploy]"]
    actor.close()


async def test_unload_of_a_load_not_yet_in_history_rewrites_nothing(path, skill_dir):
    actor = Actor(path, [], skill_dir)
    assert await actor.engine.load_skill("skills", "deploy") == "How to deploy."
    assert await actor.engine.unload_skill("skills", "deploy") is True
    assert actor.host.messages == []
    assert await actor.engine.unload_skill("skills", "deploy") is False
    actor.close()


async def test_unload_falls_back_to_history_when_the_recorded_message_changed(path, skill_dir):
    actor = Actor(path, [], skill_dir)
    await actor.model_loads("a1", "deploy")
    actor.host.messages[0] = {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "edited away"}]}
    actor.host.messages.append(assistant("a2", load_part("deploy", "copied load", shape="type")))
    assert await actor.engine.unload_skill("skills", "deploy") is True
    assert actor.host.messages[1]["parts"][0]["output"] == "[skill unloaded: deploy]"
    actor.close()


async def test_remove_context_forgets_its_skills_without_rewriting(path, skill_dir):
    actor = Actor(path, [], skill_dir)
    await actor.model_loads("a1", "deploy")
    assert await actor.engine.remove_context("skills") is True
    assert list(await actor.engine.get_loaded_skill_keys()) == []
    assert actor.host.messages[0]["parts"][0]["output"] == "How to deploy."
    actor.close()
    actor = Actor(path, actor.host.messages, skill_dir)
    assert list(await actor.engine.get_loaded_skill_keys()) == []
    actor.close()


async def test_clear_empties_the_persisted_set(path, skill_dir):
    history = []
    actor = Actor(path, history, skill_dir)
    await actor.model_loads("a1", "deploy")
    history.clear()
    await actor.engine.note_cleared()
    actor.close()
    actor = Actor(path, history, skill_dir)
    assert list(await actor.engine.get_loaded_skill_keys()) == []
    actor.close()


async def test_sessions_sharing_a_file_keep_separate_sets(path, skill_dir):
    one = Actor(path, [], skill_dir, session_id="s1")
    await one.model_loads("a1", "deploy")
    two = ContextBlocks(one.storage, host=ListHost([])).for_session("s2").with_context("skills", provider=skill_dir)
    assert list(await two.get_loaded_skill_keys()) == []
    assert await one.engine.get_loaded_skill_keys() == {"skills:deploy"}
    one.close()


async def test_loaded_keys_are_a_snapshot(path, skill_dir):
    actor = Actor(path, [], skill_dir)
    keys = await actor.engine.get_loaded_skill_keys()
    await actor.model_loads("a1", "deploy")
    assert list(keys) == [] and list(await actor.engine.get_loaded_skill_keys()) == ["skills:deploy"]
    actor.close()


# -- parts ------------------------------------------------------------------------------------------


def test_skill_events_ignore_other_roles_states_and_inputs():
    assert skill_events({"id": "u", "role": "user", "parts": [load_part("a", "x")]}) == []
    bad_input = {**load_part("a", "x"), "input": {"label": "skills"}}
    other_tool = {**load_part("a", "x"), "toolName": "search_context"}
    message = assistant("m", load_part("a", "x", state="input-available"), bad_input, other_tool, load_part("b", "y"))
    assert skill_events(message) == [("skills:b", True)]


def test_rewrite_replaces_every_matching_part_of_the_message():
    message = assistant("m", load_part("a", "x", call="1"), load_part("a", "x", shape="type", call="2"),
                        load_part("b", "y"), {"type": "text", "text": "t"})
    rewritten = rewrite_unloaded(message, "skills", "a")
    assert [p.get("output") for p in rewritten["parts"]] == ["[skill unloaded: a]", "[skill unloaded: a]", "y", None]
    assert message["parts"][0]["output"] == "x"
    assert rewrite_unloaded(message, "skills", "zzz") is None
    assert rewrite_unloaded({"id": "u", "role": "user", "parts": [load_part("a", "x")]}, "skills", "a") is None


# -- DirectorySkillProvider ------------------------------------------------------------------------


async def test_listing_is_sorted_with_descriptions_from_front_matter(tmp_path):
    folder = tmp_path / "skills"
    folder.mkdir()
    (folder / "pirate.md").write_text("---\ndescription: Talk like a pirate\n---\nArr.\n", encoding="utf-8")
    (folder / "code-review.md").write_text("---\r\ntitle: Review\r\ndescription: How to review code\r\n---\r\nBody", encoding="utf-8")
    (folder / "plain.md").write_text("No front matter.", encoding="utf-8")
    (folder / ".hidden.md").write_text("x", encoding="utf-8")
    (folder / "notes.txt").write_text("x", encoding="utf-8")
    provider = DirectorySkillProvider(folder)
    assert await provider.get() == "- code-review: How to review code\n- pirate: Talk like a pirate\n- plain"
    assert await provider.load("pirate") == "Arr.\n"
    assert await provider.load("code-review") == "Body"
    assert await provider.load("plain") == "No front matter."
    assert await provider.load("absent") is None


async def test_empty_or_missing_folder_lists_nothing(tmp_path):
    assert await DirectorySkillProvider(tmp_path / "none").get() is None
    (tmp_path / "empty").mkdir()
    assert await DirectorySkillProvider(tmp_path / "empty").get() is None


@pytest.mark.parametrize("content, description", [
    ("Body\n", "Plain words"),
    ("---\nlooks like front matter\n---\nbody", None),
    ("---\nbody", "desc"),
    ("", "   "),
    ("x", 'has "quotes": and # hash'),
    ("x", ""),
    ("日本語の本文", "説明"),
])
async def test_set_then_load_round_trips_content_and_description(tmp_path, content, description):
    provider = DirectorySkillProvider(tmp_path / "skills")
    await provider.set("k", content, description)
    assert await provider.load("k") == content
    expected = f"- k: {description}" if description else "- k"
    assert await provider.get() == expected


async def test_set_replaces_the_file_atomically_and_leaves_no_temporary_files(tmp_path):
    provider = DirectorySkillProvider(tmp_path / "skills")
    await provider.set("k", "one", "first")
    await provider.set("k", "two")
    assert await provider.load("k") == "two" and await provider.get() == "- k"
    assert os.listdir(tmp_path / "skills") == ["k.md"]
    assert (tmp_path / "skills" / "k.md").read_text(encoding="utf-8") == "two"


async def test_human_readable_front_matter_is_written_plain_when_safe(tmp_path):
    provider = DirectorySkillProvider(tmp_path / "skills")
    await provider.set("code-review", "Body", "How to review code")
    await provider.set("odd", "Body", " padded")
    assert (tmp_path / "skills" / "code-review.md").read_text(encoding="utf-8") == \
        "---\ndescription: How to review code\n---\nBody"
    assert (tmp_path / "skills" / "odd.md").read_text(encoding="utf-8") == '---\ndescription: " padded"\n---\nBody'


@pytest.mark.parametrize("key", ["", ".", "..", "../x", "a/b", "a\\b", ".hidden", "x\n", " x", "x\x00", "k" * 201, 5])
async def test_keys_that_could_leave_the_folder_are_refused(tmp_path, key):
    provider = DirectorySkillProvider(tmp_path / "skills")
    with pytest.raises(InvalidInputError) as info:
        await provider.set(key, "content")
    assert info.value.field == "key"
    with pytest.raises(InvalidInputError):
        await provider.load(key)
    assert not (tmp_path / "skills").exists() or os.listdir(tmp_path / "skills") == []


def test_ordinary_keys_are_accepted():
    assert [validate_skill_key(k) for k in ("code-review", "x-1y7mkjr", "日本語", "a.b", "a b")] == \
        ["code-review", "x-1y7mkjr", "日本語", "a.b", "a b"]
