"""The context-block engine: builder, block API, frozen prompt, cached prompt (docs/behaviours.md §3, §4; docs/deviations.md #3)."""

import pytest

from actors.context import ContextBlocks, row_provider
from common.errors import ConflictError, ContextBlockError, InvalidInputError
from storage import SqlStorage
from storage.context import read_config

pytestmark = pytest.mark.both_storages


def read_block(storage, label):
    """The stored content of the block row ``label`` on either storage (``None``: no row)."""
    return storage.scalar("SELECT content FROM cf_agents_context_blocks WHERE label = ?", label)

SEP = "═" * 46


class Static:
    def __init__(self, value):
        self.value = value

    async def get(self):
        return self.value


class Memory:
    """Writable in-memory provider that records the labels given to init()."""

    def __init__(self, value=None):
        self.value = value
        self.inits = []

    def init(self, label):
        self.inits.append(label)

    async def get(self):
        return self.value

    async def set(self, content):
        self.value = content


class Failing(Memory):
    async def set(self, content):
        raise OSError("disk full")


@pytest.fixture
def path(tmp_path):
    return tmp_path / "actor.db"


@pytest.fixture
def storage(path):
    s = SqlStorage.open(path)
    yield s
    s.close()


def memory_session(storage, **kw):
    return (ContextBlocks(storage, **kw)
            .with_context("soul", provider=Static("You are a helpful assistant."))
            .with_context("memory", description="Learned facts", max_tokens=1100))


# -- reading --------------------------------------------------------------------


async def test_block_records_carry_the_spec_keys(storage):
    session = memory_session(storage)
    await session.replace_context_block("memory", "User likes coffee.")
    assert await session.get_context_block("memory") == {
        "label": "memory", "description": "Learned facts", "content": "User likes coffee.", "tokens": 5,
        "maxTokens": 1100, "writable": True, "isSkill": False, "isSearchable": False,
    }
    assert await session.get_context_block("soul") == {
        "label": "soul", "description": None, "content": "You are a helpful assistant.", "tokens": 7,
        "maxTokens": None, "writable": False, "isSkill": False, "isSearchable": False,
    }
    assert [b["label"] for b in await session.get_context_blocks()] == ["soul", "memory"]
    assert await session.get_context_block("nope") is None


async def test_blocks_load_on_first_read_without_any_other_call(storage):
    assert (await memory_session(storage).get_context_block("soul"))["content"] == "You are a helpful assistant."


async def test_returned_records_are_copies(storage):
    session = memory_session(storage)
    (await session.get_context_block("soul"))["content"] = "changed"
    assert (await session.get_context_block("soul"))["content"] == "You are a helpful assistant."


async def test_block_without_provider_and_without_storage_is_empty_and_readonly():
    session = ContextBlocks().with_context("memory")
    assert (await session.get_context_block("memory"))["writable"] is False
    with pytest.raises(ContextBlockError, match='^Block "memory" is readonly$'):
        await session.replace_context_block("memory", "x")


# -- writing --------------------------------------------------------------------


async def test_replace_writes_the_auto_wired_row_at_once(storage):
    session = memory_session(storage)
    block = await session.replace_context_block("memory", "User likes coffee.")
    assert block["content"] == "User likes coffee." and block["tokens"] == 5
    assert read_block(storage, "memory") == "User likes coffee."


@pytest.mark.parametrize("label", ["soul", "nope"])
async def test_replace_of_readonly_or_unknown_block_says_readonly(storage, label):
    with pytest.raises(ContextBlockError, match=f'^Block "{label}" is readonly$'):
        await memory_session(storage).replace_context_block(label, "x")


async def test_replace_over_max_tokens_is_refused_and_nothing_written(storage):
    session = memory_session(storage)
    await session.replace_context_block("memory", "kept")
    with pytest.raises(ContextBlockError) as info:
        await session.replace_context_block("memory", "a" * 4404)
    assert str(info.value) == 'Block "memory" exceeds maxTokens: 1101 > 1100'
    assert read_block(storage, "memory") == "kept"
    assert (await session.get_context_block("memory"))["content"] == "kept"


async def test_max_tokens_zero_refuses_any_non_empty_content(storage):
    session = ContextBlocks(storage).with_context("zero", max_tokens=0)
    with pytest.raises(ContextBlockError, match=r'^Block "zero" exceeds maxTokens: 2 > 0$'):
        await session.replace_context_block("zero", "a")
    assert (await session.replace_context_block("zero", ""))["content"] == ""


async def test_keyed_blocks_refuse_plain_writes(storage):
    class Skills:
        async def get(self): return None
        async def load(self, key): return None
        async def set(self, key, content, description=None): pass

    session = ContextBlocks(storage).with_context("skills", provider=Skills())
    with pytest.raises(ContextBlockError) as info:
        await session.replace_context_block("skills", "x")
    assert str(info.value) == 'Block "skills" is a keyed provider. Use setSkill() or setSearchEntry() instead.'


async def test_failed_provider_write_leaves_block_unchanged(storage):
    session = ContextBlocks(storage).with_context("notes", provider=Failing("old"))
    with pytest.raises(OSError, match="disk full"):
        await session.replace_context_block("notes", "new")
    assert (await session.get_context_block("notes"))["content"] == "old"


@pytest.mark.parametrize("existing, added, result", [
    ("", "first", "first"),
    ("User likes coffee.", "User prefers dark roast.", "User likes coffee.\nUser prefers dark roast."),
    ("User likes coffee.", "\nUser prefers dark roast.", "User likes coffee.\nUser prefers dark roast."),
])
async def test_append_inserts_a_newline_only_when_needed(storage, existing, added, result):
    session = memory_session(storage)
    await session.replace_context_block("memory", existing)
    assert (await session.append_context_block("memory", added))["content"] == result


async def test_append_to_unknown_block_says_not_found(storage):
    with pytest.raises(ContextBlockError, match='^Block "nope" not found$'):
        await memory_session(storage).append_context_block("nope", "x")


async def test_append_limit_applies_to_the_combined_text(storage):
    session = ContextBlocks(storage).with_context("m", max_tokens=3)
    await session.replace_context_block("m", "aaaa")
    with pytest.raises(ContextBlockError, match=r'^Block "m" exceeds maxTokens: 4 > 3$'):
        await session.append_context_block("m", "b" * 8)


async def test_content_must_be_a_string(storage):
    with pytest.raises(InvalidInputError) as info:
        await memory_session(storage).replace_context_block("memory", 5)
    assert info.value.field == "content"


# -- builder ---------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, field", [
    (dict(label=""), "label"), (dict(label="m", max_tokens=-1), "max_tokens"),
    (dict(label="m", max_tokens=True), "max_tokens"), (dict(label="m", description=3), "description"),
    (dict(label="m", provider=object()), "provider"),
])
def test_with_context_rejects_bad_options(kwargs, field):
    label = kwargs.pop("label")
    with pytest.raises(InvalidInputError) as info:
        ContextBlocks().with_context(label, **kwargs)
    assert info.value.field == field


def test_with_context_rejects_a_duplicate_label():
    with pytest.raises(ConflictError, match='^Block "m" already exists$'):
        ContextBlocks().with_context("m").with_context("m")


async def test_builder_after_first_use_is_a_conflict(storage):
    session = memory_session(storage)
    await session.get_context_blocks()
    with pytest.raises(ConflictError):
        session.with_context("late")
    with pytest.raises(ConflictError):
        session.for_session("s1")


def test_cached_prompt_without_storage_needs_a_provider():
    with pytest.raises(InvalidInputError) as info:
        ContextBlocks().with_cached_prompt()
    assert info.value.field == "provider"


async def test_session_id_namespaces_auto_wired_rows_and_the_cached_prompt(storage):
    session = memory_session(storage).for_session("s1").with_cached_prompt()
    await session.replace_context_block("memory", "one")
    prompt = await session.freeze_system_prompt()
    assert read_block(storage, "memory_s1") == "one"
    assert read_block(storage, "_system_prompt_s1") == prompt
    assert read_block(storage, "memory") is None and read_block(storage, "_system_prompt") is None


async def test_without_session_id_rows_use_the_plain_label(storage):
    session = memory_session(storage).with_cached_prompt()
    await session.replace_context_block("memory", "one")
    await session.freeze_system_prompt()
    assert read_block(storage, "memory") == "one" and read_block(storage, "_system_prompt") is not None


async def test_explicit_agent_context_provider_keeps_its_key(storage):
    provider = row_provider(storage, "custom")
    session = ContextBlocks(storage).for_session("s1").with_context("memory", provider=provider)
    await session.replace_context_block("memory", "x")
    assert read_block(storage, "custom") == "x" and provider.key == "custom"


async def test_agent_context_provider_without_key_takes_the_label_from_init(storage):
    provider = row_provider(storage, "")
    session = ContextBlocks(storage).with_context("notes", provider=provider)
    await session.replace_context_block("notes", "x")
    assert read_block(storage, "notes") == "x"


async def test_init_runs_with_the_plain_label_on_every_full_load(storage):
    provider = Memory("v")
    session = ContextBlocks(storage).for_session("s1").with_context("notes", provider=provider)
    await session.get_context_blocks()
    await session.refresh_system_prompt()
    assert provider.inits == ["notes", "notes"]


async def test_provider_returning_a_non_string_is_a_clear_error(storage):
    session = ContextBlocks(storage).with_context("bad", provider=Static(42))
    with pytest.raises(TypeError, match='provider of block "bad" returned int from get'):
        await session.get_context_blocks()


async def test_sync_provider_functions_work_too(storage):
    class SyncProvider:
        def get(self):
            return "plain"

    assert (await ContextBlocks(storage).with_context("s", provider=SyncProvider()).get_context_block("s"))["content"] == "plain"


# -- add / remove ------------------------------------------------------------------


async def test_add_context_appends_an_auto_wired_block_without_touching_the_prompt(storage):
    session = memory_session(storage).for_session("s1")
    before = await session.freeze_system_prompt()
    block = await session.add_context("extension-notes", description="From extension X", max_tokens=500)
    assert block == {"label": "extension-notes", "description": "From extension X", "content": "", "tokens": 0,
                     "maxTokens": 500, "writable": True, "isSkill": False, "isSearchable": False}
    await session.replace_context_block("extension-notes", "hi")
    assert read_block(storage, "extension-notes_s1") == "hi"
    assert await session.freeze_system_prompt() == before
    refreshed = await session.refresh_system_prompt()
    assert refreshed.endswith(f"{SEP}\nEXTENSION-NOTES (From extension X) [0% — 2/500 tokens] [writable]\n{SEP}\nhi")
    assert [b["label"] for b in await session.get_context_blocks()] == ["soul", "memory", "extension-notes"]


async def test_add_context_with_an_existing_label_is_a_conflict(storage):
    with pytest.raises(ConflictError, match='^Block "memory" already exists$'):
        await memory_session(storage).add_context("memory")


async def test_remove_context_reports_whether_the_block_existed(storage):
    session = memory_session(storage)
    assert await session.remove_context("memory") is True
    assert await session.remove_context("memory") is False
    assert await session.get_context_block("memory") is None
    assert "MEMORY" not in await session.refresh_system_prompt()


# -- the frozen prompt --------------------------------------------------------------


async def test_frozen_prompt_ignores_writes_until_refresh(storage):
    session = memory_session(storage)
    frozen = await session.freeze_system_prompt()
    tools = await session.tools()
    assert await tools["set_context"].execute({"label": "memory", "content": "User likes coffee."}) == \
        "Written to memory. Usage: 0% (5/1100 tokens)"
    await session.append_context_block("memory", "User prefers dark roast.")
    assert await session.freeze_system_prompt() == frozen
    refreshed = await session.refresh_system_prompt()
    assert refreshed == (
        f"{SEP}\nSOUL [readonly]\n{SEP}\nYou are a helpful assistant.\n\n"
        f"{SEP}\nMEMORY (Learned facts) [1% — 11/1100 tokens] [writable]\n{SEP}\nUser likes coffee.\nUser prefers dark roast."
    )
    assert await session.freeze_system_prompt() == refreshed


async def test_cached_prompt_survives_reopen_and_blocks_still_load(path):
    storage = SqlStorage.open(path)
    session = memory_session(storage).for_session("s1").with_cached_prompt()
    await session.replace_context_block("memory", "User likes coffee.")
    frozen = await session.freeze_system_prompt()
    await session.replace_context_block("memory", "User likes tea.")
    storage.close()

    storage = SqlStorage.open(path)
    reopened = memory_session(storage).for_session("s1").with_cached_prompt()
    assert await reopened.freeze_system_prompt() == frozen
    block = await reopened.get_context_block("memory")
    assert block["content"] == "User likes tea." and block["tokens"] == 4
    assert "User likes coffee." in await reopened.prompt_for_estimate()
    assert "User likes tea." in await reopened.refresh_system_prompt()
    storage.close()


async def test_without_cached_prompt_a_reopened_session_renders_afresh(path):
    storage = SqlStorage.open(path)
    session = memory_session(storage)
    await session.replace_context_block("memory", "one")
    await session.freeze_system_prompt()
    await session.replace_context_block("memory", "two")
    storage.close()
    storage = SqlStorage.open(path)
    assert (await memory_session(storage).freeze_system_prompt()).endswith("\ntwo")
    storage.close()


async def test_an_empty_stored_prompt_counts_as_stored(storage):
    store = Memory("")
    session = memory_session(storage).with_cached_prompt(store)
    assert await session.freeze_system_prompt() == ""


async def test_explicit_prompt_store_receives_the_rendered_prompt(storage):
    store = Memory(None)
    session = memory_session(storage).with_cached_prompt(store)
    prompt = await session.freeze_system_prompt()
    assert store.value == prompt and prompt.startswith(f"{SEP}\nSOUL [readonly]")


async def test_prompt_for_estimate_renders_without_freezing(storage):
    session = memory_session(storage).with_cached_prompt()
    await session.replace_context_block("memory", "one")
    estimate = await session.prompt_for_estimate()
    assert estimate.endswith("\none") and read_block(storage, "_system_prompt") is None
    await session.replace_context_block("memory", "two")
    assert (await session.freeze_system_prompt()).endswith("\ntwo")


async def test_note_cleared_empties_skills_and_refreshes_the_prompt(storage):
    session = memory_session(storage).for_session("s1").with_cached_prompt()
    await session.freeze_system_prompt()
    await session.replace_context_block("memory", "kept")
    prompt = await session.note_cleared()
    assert prompt.endswith("\nkept") and read_block(storage, "_system_prompt_s1") == prompt
    assert read_config(storage, "s1", "loaded_skills") == '{"v":1,"loaded":[]}'
    assert (await session.get_context_block("memory"))["content"] == "kept"


async def test_delete_stored_state_removes_only_this_sessions_rows(storage):
    one = memory_session(storage).for_session("s1").with_cached_prompt()
    two = memory_session(storage).for_session("s2").with_cached_prompt()
    for session in (one, two):
        await session.replace_context_block("memory", "x")
        await session.freeze_system_prompt()
        await session.clear_loaded_skills()
    await one.delete_stored_state()
    assert [read_block(storage, k) for k in ("memory_s1", "_system_prompt_s1")] == [None, None]
    assert read_config(storage, "s1", "loaded_skills") is None
    assert read_block(storage, "memory_s2") == "x" and read_config(storage, "s2", "loaded_skills") is not None
