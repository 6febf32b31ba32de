"""AI tools: exact descriptions, schemas, results and errors (docs/behaviours.md §6)."""

import pytest

from actors.context import ContextBlocks, search_provider_for
from actors.skills import DirectorySkillProvider
from actors.tools import (
    Tool,
    ai_sdk_schema,
    anthropic_tools,
    context_entry_key,
    openai_tools,
    slugify,
    stable_hash,
)

pytestmark = pytest.mark.both_storages

SEP = "═" * 46


class Static:
    def __init__(self, value):
        self.value = value

    async def get(self):
        return self.value


class BrokenSkills:
    async def get(self):
        return "- x: broken"

    async def load(self, key):
        raise OSError("bucket unreachable")


@pytest.fixture
async def skills(tmp_path):
    provider = DirectorySkillProvider(tmp_path / "skills")
    await provider.set("code-review", "Look at the diff first.", "How to review code")
    await provider.set("pirate", "Say arr.", "Talk like a pirate")
    return provider


@pytest.fixture
def session(storage, skills):
    return (
        ContextBlocks(storage)
        .with_context("soul", provider=Static("You are a helpful assistant."))
        .with_context("memory", description="Learned facts", max_tokens=1100)
        .with_context("notes")
        .with_context("skills", description="Loadable skills", provider=skills)
        .with_context("knowledge", description="Searchable knowledge base", provider=search_provider_for(storage))
    )


@pytest.fixture
async def tools(session):
    return await session.tools()


# -- contextEntryKey --------------------------------------------------------------


@pytest.mark.parametrize("title, content, key", [
    ("Be Concise!", "anything", "be-concise"),
    (None, "Some content without a title here.", "some-content-without-a-title-here-10fq54t"),
    (None, "日本語のスキル", "entry-1me8p8r"),
    ("日本語", "whatever", "entry-nbamha"),
    (None, "x", "x-1y7mkjr"),
    (None, "", "entry-ztntfp"),
    (None, "Coffee machine is on floor 3.", "coffee-machine-is-on-floor-3-wcta18"),
    ("   ", "x", "x-1y7mkjr"),
    ("", "x", "x-1y7mkjr"),
])
def test_context_entry_key_reproduces_the_original(title, content, key):
    assert context_entry_key(title, content) == key


def test_slug_keeps_60_utf16_units_and_trims_one_dash_each_side():
    assert slugify("-" + "a" * 70) == "a" * 59
    assert slugify("😀" * 31) == ""
    assert slugify("--Hello,  World!!") == "hello-world"


def test_hash_counts_utf16_code_units():
    assert stable_hash("") == "ztntfp" and stable_hash("x") == "1y7mkjr"
    assert stable_hash("😀") != stable_hash("\ud83d")


# -- which tools exist -------------------------------------------------------------


async def test_tools_come_in_fixed_order_for_capable_blocks(tools):
    assert list(tools) == ["set_context", "load_context", "unload_context", "search_context"]
    assert all(isinstance(t, Tool) and t.name == name for name, t in tools.items())


async def test_no_capable_blocks_give_no_tools(storage):
    assert await ContextBlocks(storage).with_context("soul", provider=Static("x")).tools() == {}


async def test_only_search_block_gives_set_and_search(storage):
    tools = await ContextBlocks(storage).with_context("knowledge", provider=search_provider_for(storage)).tools()
    assert list(tools) == ["set_context", "search_context"]


# -- descriptions -------------------------------------------------------------------


async def test_set_context_description_lists_writable_blocks_with_metadata_hint(tools):
    assert tools["set_context"].description == (
        "Write to a context block. Available blocks:\n"
        '- "memory" (writable): Learned facts\n'
        '- "notes" (writable): no description\n'
        '- "skills" (skill collection, keyed entries): Loadable skills\n'
        '- "knowledge" (searchable, keyed entries): Searchable knowledge base\n\n'
        "Writes are durable and persist across sessions.\n\n"
        "For keyed blocks (skill collections / searchable), pass `metadata: { title, description }` — title "
        "stabilises updates, description helps the model pick entries. Metadata is optional; short content "
        "rarely needs it, long loadable entries benefit most."
    )


async def test_set_context_description_keeps_an_empty_description_empty(storage):
    tools = await ContextBlocks(storage).with_context("notes", description="").tools()
    assert tools["set_context"].description == (
        'Write to a context block. Available blocks:\n- "notes" (writable): \n\n'
        "Writes are durable and persist across sessions."
    )


async def test_skill_and_search_descriptions(tools):
    assert tools["load_context"].description == (
        'Load a document from a skill block by key. Available skill blocks: "skills". '
        "Check the system prompt for available keys."
    )
    assert tools["unload_context"].description == (
        "Unload a previously loaded skill to free context space. The skill remains available for re-loading. "
        "No skills currently loaded."
    )
    assert tools["search_context"].description == (
        'Search for information in a searchable context block. ONLY these blocks are searchable: "knowledge". '
        "Other blocks cannot be searched."
    )


async def test_unload_description_lists_loaded_skills_in_load_order(session, tools):
    await tools["load_context"].execute({"label": "skills", "key": "pirate"})
    await tools["load_context"].execute({"label": "skills", "key": "code-review"})
    assert tools["unload_context"].description.endswith("No skills currently loaded.")  # snapshot at build time
    rebuilt = await session.tools()
    assert rebuilt["unload_context"].description == (
        "Unload a previously loaded skill to free context space. The skill remains available for re-loading. "
        "Currently loaded: skills:pirate, skills:code-review."
    )


# -- schemas ------------------------------------------------------------------------

METADATA = {
    "type": "object",
    "description": (
        'Optional metadata for keyed entries (skill collections, searchable blocks: "skills", "knowledge"). '
        "Short content doesn't need metadata; longer loadable entries (skills) benefit from a title and "
        "description so the model can pick the right one without loading it."
    ),
    "properties": {
        "title": {"type": "string", "description": "Short title. Used as a stable identifier — entries with the "
                  "same title are updated in place, different titles create new entries."},
        "description": {"type": "string", "description": "One-line summary shown alongside the title in the "
                        "system prompt so the model can decide when to load the entry."},
    },
}


async def test_set_context_schema_snapshot(tools):
    assert tools["set_context"].input_schema == {
        "type": "object",
        "properties": {
            "label": {"type": "string", "enum": ["memory", "notes", "skills", "knowledge"], "description": "Block label to write to"},
            "content": {"type": "string", "description": "The main content to write to the block."},
            "action": {"type": "string", "enum": ["replace", "append"], "description": "replace (default) or append"},
            "metadata": METADATA,
        },
        "required": ["label", "content"],
    }


async def test_set_context_schema_has_no_metadata_without_keyed_blocks(storage):
    tools = await ContextBlocks(storage).with_context("memory").tools()
    assert list(tools["set_context"].input_schema["properties"]) == ["label", "content", "action"]


async def test_skill_and_search_schema_snapshots(tools):
    assert tools["load_context"].input_schema == {
        "type": "object",
        "properties": {
            "label": {"type": "string", "enum": ["skills"], "description": "Skill block label"},
            "key": {"type": "string", "description": "Skill key to load"},
        },
        "required": ["label", "key"],
    }
    assert tools["unload_context"].input_schema == {
        "type": "object",
        "properties": {
            "label": {"type": "string", "enum": ["skills"], "description": "Skill block label"},
            "key": {"type": "string", "description": "Skill key to unload"},
        },
        "required": ["label", "key"],
    }
    assert tools["search_context"].input_schema == {
        "type": "object",
        "properties": {
            "label": {"type": "string", "enum": ["knowledge"], "description": "Searchable block label"},
            "query": {"type": "string", "description": "Search query"},
        },
        "required": ["label", "query"],
    }


async def test_openai_and_anthropic_formats(tools):
    load = tools["load_context"]
    assert openai_tools(tools)[1] == {
        "type": "function",
        "function": {"name": "load_context", "description": load.description, "parameters": load.input_schema},
    }
    assert anthropic_tools(tools)[1] == {"name": "load_context", "description": load.description, "input_schema": load.input_schema}
    assert [t["function"]["name"] for t in openai_tools(tools)] == list(tools)
    openai_tools(tools)[0]["function"]["parameters"]["required"].append("x")
    assert tools["set_context"].input_schema["required"] == ["label", "content"]


async def test_ai_sdk_schema_is_draft_07_with_const_for_single_enums(tools):
    schema = ai_sdk_schema(tools["load_context"].input_schema)
    assert schema == {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "label": {"type": "string", "const": "skills", "description": "Skill block label"},
            "key": {"type": "string", "description": "Skill key to load"},
        },
        "required": ["label", "key"],
        "additionalProperties": {},
    }
    assert list(schema["properties"]["label"]) == ["type", "const", "description"]
    metadata = ai_sdk_schema(tools["set_context"].input_schema)["properties"]["metadata"]
    assert list(metadata) == ["type", "properties", "additionalProperties", "description"]
    assert metadata["additionalProperties"] == {}


# -- validation -----------------------------------------------------------------------


@pytest.mark.parametrize("args, error", [
    ({"label": "soul", "content": "x"},
     'Error: invalid arguments for set_context: label: Invalid option: expected one of "memory"|"notes"|"skills"|"knowledge"'),
    ({"label": "memory"}, "Error: invalid arguments for set_context: content: Invalid input: expected string, received undefined"),
    ({"label": "memory", "content": "x", "action": "merge"},
     'Error: invalid arguments for set_context: action: Invalid option: expected one of "replace"|"append"'),
    ({"label": 5, "content": None},
     'Error: invalid arguments for set_context: label: Invalid option: expected one of "memory"|"notes"|"skills"|"knowledge"; '
     "content: Invalid input: expected string, received null"),
    ({"label": "skills", "content": "x", "metadata": {"title": 7}},
     "Error: invalid arguments for set_context: metadata.title: Invalid input: expected string, received number"),
    ("memory", "Error: invalid arguments for set_context: Invalid input: expected object, received string"),
])
async def test_invalid_arguments_give_an_error_string_naming_the_field(tools, args, error):
    assert await tools["set_context"].execute(args) == error


async def test_extra_properties_are_allowed_and_metadata_on_a_plain_block_is_ignored(tools):
    result = await tools["set_context"].execute(
        {"label": "notes", "content": "Hello world", "metadata": {"title": "T"}, "extra": 1})
    assert result == "Written to notes. Usage: 3 tokens"


# -- set_context results ---------------------------------------------------------------


async def test_set_context_reports_usage_against_max_tokens(session, tools):
    assert await tools["set_context"].execute({"label": "memory", "content": "a" * 1980}) == \
        "Written to memory. Usage: 45% (495/1100 tokens)"
    assert (await session.get_context_block("memory"))["content"] == "a" * 1980


async def test_set_context_without_max_tokens_reports_tokens(tools):
    assert await tools["set_context"].execute({"label": "notes", "content": "Hello world"}) == \
        "Written to notes. Usage: 3 tokens"


async def test_set_context_append_and_default_replace(session, tools):
    await tools["set_context"].execute({"label": "notes", "content": "one"})
    await tools["set_context"].execute({"label": "notes", "content": "two", "action": "append"})
    assert (await session.get_context_block("notes"))["content"] == "one\ntwo"
    await tools["set_context"].execute({"label": "notes", "content": "three", "action": "replace"})
    assert (await session.get_context_block("notes"))["content"] == "three"


async def test_set_context_over_the_limit_is_an_error_string(tools):
    assert await tools["set_context"].execute({"label": "memory", "content": "a" * 4404}) == \
        'Error: Block "memory" exceeds maxTokens: 1101 > 1100'


async def test_set_context_on_a_block_removed_after_build_says_not_found(session, tools):
    await session.remove_context("notes")
    assert await tools["set_context"].execute({"label": "notes", "content": "x"}) == 'Error: block "notes" not found'


async def test_set_context_on_a_block_that_became_readonly_says_readonly(session, tools):
    await session.remove_context("notes")
    await session.add_context("notes", provider=Static("fixed"))
    assert await tools["set_context"].execute({"label": "notes", "content": "x"}) == 'Error: Block "notes" is readonly'


async def test_set_context_indexes_a_skill_under_its_title_slug(session, skills, tools):
    result = await tools["set_context"].execute(
        {"label": "skills", "content": "Keep answers short.", "metadata": {"title": "Be Concise!"}})
    assert result == 'Indexed "be-concise" in skills.'
    assert await skills.load("be-concise") == "Keep answers short."
    assert (await session.get_context_block("skills"))["content"] == (
        "- be-concise: Be Concise!\n- code-review: How to review code\n- pirate: Talk like a pirate")


async def test_skill_description_prefers_metadata_description(skills, tools):
    await tools["set_context"].execute(
        {"label": "skills", "content": "Body", "metadata": {"title": "Deploy", "description": "How to deploy"}})
    assert "- deploy: How to deploy" in await skills.get()


async def test_blank_title_falls_back_to_content_key_and_becomes_the_description(session, tools):
    result = await tools["set_context"].execute({"label": "skills", "content": "x", "metadata": {"title": "   "}})
    assert result == 'Indexed "x-1y7mkjr" in skills.'
    prompt = await session.refresh_system_prompt()
    assert "\n- x-1y7mkjr:    \n" in prompt


async def test_set_context_indexes_a_search_entry_by_content_key(session, tools):
    result = await tools["set_context"].execute(
        {"label": "knowledge", "content": "Coffee machine is on floor 3.", "metadata": {"description": "ignored"}})
    assert result == 'Indexed "coffee-machine-is-on-floor-3-wcta18" in knowledge.'
    assert (await session.get_context_block("knowledge"))["content"] == "1 entries indexed."
    assert await tools["search_context"].execute({"label": "knowledge", "query": "coffee"}) == \
        "[coffee-machine-is-on-floor-3-wcta18]\nCoffee machine is on floor 3."


# -- load / unload / search results ---------------------------------------------------------


async def test_load_context_returns_the_skill_and_marks_it_loaded(session, tools):
    assert await tools["load_context"].execute({"label": "skills", "key": "pirate"}) == "Say arr."
    assert await session.get_loaded_skill_keys() == {"skills:pirate"}


async def test_load_context_of_a_missing_key_says_not_found(session, tools):
    assert await tools["load_context"].execute({"label": "skills", "key": "nope"}) == "Not found: nope"
    assert list(await session.get_loaded_skill_keys()) == []


async def test_load_context_of_an_empty_skill_counts_as_loaded(session, skills, tools):
    await skills.set("empty", "")
    assert await tools["load_context"].execute({"label": "skills", "key": "empty"}) == ""
    assert await session.get_loaded_skill_keys() == {"skills:empty"}


async def test_load_context_provider_failure_is_an_error_string(storage):
    tools = await ContextBlocks(storage).with_context("skills", provider=BrokenSkills()).tools()
    assert await tools["load_context"].execute({"label": "skills", "key": "x"}) == "Error: bucket unreachable"


async def test_load_context_with_an_unsafe_key_is_an_error_string(tools):
    result = await tools["load_context"].execute({"label": "skills", "key": "../secrets"})
    assert result.startswith("Error: invalid skill key '../secrets'")


async def test_non_skill_and_non_search_labels_are_refused_by_the_handlers(tools):
    # execute() rejects these labels already (enum); the handlers keep the original's own check.
    assert await tools["load_context"].handler({"label": "memory", "key": "x"}) == \
        'Error: "memory" is not a skill block. Skill blocks: skills'
    assert await tools["unload_context"].handler({"label": "memory", "key": "x"}) == \
        'Error: "memory" is not a skill block. Skill blocks: skills'
    assert await tools["search_context"].handler({"label": "memory", "query": "x"}) == \
        'Error: "memory" is not searchable. Searchable blocks: knowledge'
    assert await tools["load_context"].execute({"label": "memory", "key": "x"}) == \
        'Error: invalid arguments for load_context: label: Invalid input: expected "skills"'


async def test_unload_context_results(session, tools):
    assert await tools["unload_context"].execute({"label": "skills", "key": "pirate"}) == \
        'Skill "pirate" is not currently loaded in "skills".'
    await tools["load_context"].execute({"label": "skills", "key": "pirate"})
    assert await tools["unload_context"].execute({"label": "skills", "key": "pirate"}) == \
        'Unloaded "pirate" from skills. Context reclaimed.'
    assert list(await session.get_loaded_skill_keys()) == []


async def test_search_context_without_results_says_so(tools):
    assert await tools["search_context"].execute({"label": "knowledge", "query": "anything"}) == "No results found."
