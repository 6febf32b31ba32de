"""Adversarial use of context blocks, skills and tools: wrong types, hostile providers, odd Unicode.

Oracle: docs/behaviours.md §4, §6, §7. A bad argument is an
:class:`InvalidInputError` raised before any provider or row is touched; a
provider that answers with the wrong type is named in the error; nothing
is half-written.
"""

import struct

import pytest

from actors.context import ContextBlocks, render_header, search_provider_for
from actors.session import Session
from actors.tools import context_entry_key, slugify, stable_hash
from common.errors import ConflictError, ContextBlockError, InvalidInputError
from storage.schema import create_on_first_use, table_exists
from tests.support.backends import kind_of, refusing_inserts

pytestmark = pytest.mark.both_storages


def read_block(storage, label):
    """The stored content of the block row ``label`` on either storage (``None``: no row)."""
    if kind_of(storage) == "sqlite" and not table_exists(storage.connection, "cf_agents_context_blocks"):
        return None  # made by the first block written (storage.schema.ON_FIRST_USE)
    return storage.scalar("SELECT content FROM cf_agents_context_blocks WHERE label = ?", label)


class Skills:
    """In-memory skill provider recording every call."""

    def __init__(self):
        self.skills = {"pirate": "Talk like a pirate"}
        self.calls = []

    async def get(self):
        return "\n".join(f"- {k}" for k in self.skills) or None

    async def load(self, key):
        self.calls.append(("load", key))
        return self.skills.get(key)

    async def set(self, key, content, description=None):
        self.calls.append(("set", key, content, description))
        self.skills[key] = content


class SyncNotes:
    """A provider with plain (non-async) methods."""

    def __init__(self):
        self.value = "start"

    def get(self):
        return self.value

    def set(self, content):
        self.value = content


@pytest.fixture
def skills():
    return Skills()


@pytest.fixture
def session(storage, skills):
    return (Session.create(storage)
            .with_context("memory", description="Learned facts", max_tokens=50)
            .with_context("skills", provider=skills)
            .with_context("kb", provider=search_provider_for(storage)))


def rows(storage, table):
    if kind_of(storage) == "sqlite" and not table_exists(storage.connection, table):
        return 0  # made by its first write (storage.schema.ON_FIRST_USE)
    return storage.scalar(f"SELECT count(*) FROM {table}")


# -- wrong types ---------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, field", [
    ({"label": 5}, "label"), ({"label": ""}, "label"), ({"label": None}, "label"),
    ({"label": "x", "max_tokens": -1}, "max_tokens"), ({"label": "x", "max_tokens": 1.5}, "max_tokens"),
    ({"label": "x", "max_tokens": True}, "max_tokens"), ({"label": "x", "max_tokens": "10"}, "max_tokens"),
    ({"label": "x", "description": 5}, "description"), ({"label": "x", "provider": object()}, "provider"),
])
async def test_bad_block_options_are_refused_by_builder_and_add_context(storage, kwargs, field):
    with pytest.raises(InvalidInputError) as raised:
        ContextBlocks(storage).with_context(**kwargs)
    assert raised.value.field == field
    engine = ContextBlocks(storage).with_context("memory")
    with pytest.raises(InvalidInputError):
        await engine.add_context(**kwargs)
    assert [b["label"] for b in await engine.get_context_blocks()] == ["memory"]


@pytest.mark.parametrize("content", [None, 5, b"bytes", ["list"], {"a": 1}])
async def test_block_writes_refuse_non_text_and_write_nothing(session, storage, content):
    for write in (session.replace_context_block, session.append_context_block):
        with pytest.raises(InvalidInputError, match="content must be a string, not "):
            await write("memory", content)
    assert read_block(storage, "memory") is None


@pytest.mark.parametrize("key, content, description, field", [
    (7, "body", None, "key"), (None, "body", None, "key"), ("k", None, None, "content"),
    ("k", 5, None, "content"), ("k", "body", 5, "description"), ("k\ud800", "body", None, "key"),
])
async def test_skill_writes_check_their_arguments_before_the_provider_sees_them(
    session, skills, key, content, description, field
):
    with pytest.raises(InvalidInputError) as raised:
        await session._context.set_skill("skills", key, content, description)
    assert raised.value.field == field
    assert skills.calls == []


@pytest.mark.parametrize("key, content, field", [(None, "c", "key"), (3, "c", "key"), ("k", 5, "content")])
async def test_search_entry_writes_check_their_arguments_and_store_nothing(session, storage, key, content, field):
    with pytest.raises(InvalidInputError) as raised:
        await session._context.set_search_entry("kb", key, content)
    assert raised.value.field == field
    assert rows(storage, "cf_agents_search_entries") == 0


async def test_skill_and_search_calls_refuse_non_string_keys_and_queries(session, skills, storage):
    with pytest.raises(InvalidInputError, match="key must be a string, not int"):
        await session._context.load_skill("skills", 5)
    with pytest.raises(InvalidInputError, match="key must be a string, not int"):
        await session.unload_skill("skills", 5)
    with pytest.raises(InvalidInputError, match="label must be a string, not NoneType"):
        await session.unload_skill(None, "pirate")
    with pytest.raises(InvalidInputError, match="query must be a string, not int"):
        await session._context.search_context("kb", 5)
    assert skills.calls == []
    assert list(await session.get_loaded_skill_keys()) == []
    assert rows(storage, "assistant_config") == 1  # the (empty) loaded-skill set only


# -- Unicode ------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["x\ud800", "\udfff", "ok 😀 then \udc00"])
async def test_lone_surrogates_in_block_content_are_invalid_input(session, storage, content):
    with pytest.raises(InvalidInputError, match=r"content is not valid Unicode text \(lone surrogate at index \d+\)"):
        await session.replace_context_block("memory", content)
    assert read_block(storage, "memory") is None
    tool = (await session.tools())["set_context"]
    answer = await tool.execute({"label": "memory", "content": content})
    assert answer.startswith("Error: content is not valid Unicode text")


@pytest.mark.parametrize("label, header", [
    ("straße-ünï", "STRASSE-ÜNÏ [writable]"),
    ("ﬁle", "FILE [writable]"),
    ("ŉ", "ʼN [writable]"),
    ("😀 notes", "😀 NOTES [writable]"),
    ("e\u0301tat", "E\u0301TAT [writable]"),
    ("\u05e9\u05dc\u05d5\u05dd", "\u05e9\u05dc\u05d5\u05dd [writable]"),
])
async def test_labels_upper_case_like_javascript_and_round_trip(storage, label, header):
    engine = ContextBlocks(storage).with_context(label)
    await engine.replace_context_block(label, "fact")
    assert render_header((await engine.get_context_block(label))) == header
    assert read_block(storage, label) == "fact"
    assert (await engine.freeze_system_prompt()).split("\n")[1] == header


def reference_fnv1a_base36(text):
    """FNV-1a over UTF-16 code units, written independently of actors.tools."""
    data = text.encode("utf-16-le", "surrogatepass")
    h = 2166136261
    for (unit,) in struct.iter_unpack("<H", data):
        h = ((h ^ unit) * 16777619) % 2**32
    digits = ""
    while True:
        h, r = divmod(h, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + digits
        if not h:
            return digits


@pytest.mark.parametrize("title, content, key", [
    ("😀", "x", "entry-" + reference_fnv1a_base36("😀")),
    (None, "😀", "entry-" + reference_fnv1a_base36("😀")),
    (None, "𠀋𠀌", "entry-" + reference_fnv1a_base36("𠀋𠀌")),
    ("a" * 59 + "😀b", "x", "a" * 59),  # the 60-unit cut splits the pair: the half becomes a dash, trimmed
    ("a" * 58 + "😀b", "x", "a" * 58),
    ("Ünïcödé Title", "x", "n-c-d-title"),
    ("\u200b", "x", "entry-" + reference_fnv1a_base36("\u200b")),  # not blank for str.strip()? JS agrees
    (None, "\u202eevil", "evil-" + reference_fnv1a_base36("\u202eevil")),
])
def test_entry_keys_of_astral_and_odd_text(title, content, key):
    assert context_entry_key(title, content) == key


def test_hash_and_slug_accept_lone_surrogates_like_javascript():
    assert stable_hash("\ud800") == reference_fnv1a_base36("\ud800")
    assert slugify("ab\ud800cd") == "ab-cd"


# -- hostile providers ----------------------------------------------------------------


async def test_sync_providers_work_like_async_ones(storage):
    engine = ContextBlocks(storage).with_context("notes", provider=SyncNotes())
    assert (await engine.get_context_block("notes"))["content"] == "start"
    assert (await engine.replace_context_block("notes", "new"))["content"] == "new"
    assert (await engine.freeze_system_prompt()).endswith("NOTES [writable]\n" + "═" * 46 + "\nnew")


class WrongListing(Skills):
    async def get(self):
        return ["not", "text"]


async def test_a_provider_answering_the_wrong_type_is_named(storage):
    engine = ContextBlocks(storage).with_context("skills", provider=WrongListing())
    with pytest.raises(TypeError, match='provider of block "skills" returned list from get\\(\\), not str or None'):
        await engine.get_context_blocks()


class NumberStore:
    async def get(self):
        return 42

    async def set(self, content):
        raise AssertionError("never reached")


async def test_a_prompt_store_answering_the_wrong_type_is_an_error(storage):
    engine = ContextBlocks(storage).with_context("memory").with_cached_prompt(NumberStore())
    with pytest.raises(TypeError, match="prompt store returned int from get\\(\\), not str or None"):
        await engine.freeze_system_prompt()
    with pytest.raises(TypeError, match="prompt store returned int"):
        await engine.prompt_for_estimate()


class ExplodingSet(Skills):
    async def set(self, key, content, description=None):
        raise OSError("bucket unavailable")


async def test_a_provider_failing_mid_write_leaves_block_and_rows_as_they_were(storage):
    engine = (ContextBlocks(storage)
              .with_context("skills", provider=ExplodingSet())
              .with_context("kb", provider=search_provider_for(storage)))
    before = await engine.get_context_blocks()
    with pytest.raises(OSError, match="bucket unavailable"):
        await engine.set_skill("skills", "new", "body")
    if kind_of(storage) == "sqlite":
        create_on_first_use(storage.connection, "cf_agents_search_entries")  # the table and its two indexes
        storage.exec("DROP TABLE cf_agents_search_fts_cjk")  # the second statement of the upsert fails
        with pytest.raises(Exception, match="no such table"):
            await engine.set_search_entry("kb", "k", "東京の天気")
        assert rows(storage, "cf_agents_search_fts") == 0
    else:
        with refusing_inserts(storage, "cf_agents_search_entries", "entry refused") as error:
            with pytest.raises(error, match="entry refused"):
                await engine.set_search_entry("kb", "k", "東京の天気")
    assert rows(storage, "cf_agents_search_entries") == 0
    assert await engine.get_context_blocks() == before
    tool = (await engine.tools())["set_context"]
    assert await tool.execute({"label": "skills", "content": "x"}) == "Error: bucket unavailable"


async def test_a_skill_listing_that_becomes_empty_empties_the_block(storage):
    class Emptying(Skills):
        async def set(self, key, content, description=None):
            self.skills.clear()

    engine = ContextBlocks(storage).with_context("skills", provider=Emptying())
    await engine.set_skill("skills", "k", "body")
    assert (await engine.get_context_block("skills"))["content"] == ""


# -- tool arguments -----------------------------------------------------------------


BAD_ARGS = "Error: invalid arguments for set_context: "


@pytest.mark.parametrize("args, answer", [
    ({"label": "memory", "content": "a", "metadata": {"title": "t"}, "x": [1]},
     "Written to memory. Usage: 4% (2/50 tokens)"),
    ({"label": "memory", "content": 5}, BAD_ARGS + "content: Invalid input: expected string, received number"),
    ({"label": "memory", "content": None}, BAD_ARGS + "content: Invalid input: expected string, received null"),
    ({"label": 7, "content": "a"}, BAD_ARGS + 'label: Invalid option: expected one of "memory"|"skills"|"kb"'),
    ({"content": "a"}, BAD_ARGS + 'label: Invalid option: expected one of "memory"|"skills"|"kb"'),
    ({"label": "skills", "content": "a", "metadata": []},
     BAD_ARGS + "metadata: Invalid input: expected object, received array"),
    ({"label": "skills", "content": "a", "metadata": {"description": False}},
     BAD_ARGS + "metadata.description: Invalid input: expected string, received boolean"),
    ("memory", BAD_ARGS + "Invalid input: expected object, received string"),
    ({"label": "memory", "content": "x " * 100}, 'Error: Block "memory" exceeds maxTokens: 130 > 50'),
])
async def test_set_context_answers_every_bad_call_with_a_string(session, args, answer):
    tool = (await session.tools())["set_context"]
    assert await tool.execute(args) == answer


async def test_load_and_unload_context_with_hostile_keys(session, skills):
    tools = await session.tools()
    assert await tools["load_context"].execute({"label": "skills", "key": "../../etc/passwd"}) == (
        "Not found: ../../etc/passwd"
    )
    assert await tools["load_context"].execute({"label": "skills", "key": 5}) == (
        "Error: invalid arguments for load_context: key: Invalid input: expected string, received number"
    )
    assert await tools["load_context"].execute({"label": "skills", "key": "pirate", "extra": True}) == (
        "Talk like a pirate"
    )
    assert list(await session.get_loaded_skill_keys()) == ["skills:pirate"]
    assert await tools["unload_context"].execute({"label": "skills", "key": "pirate\x00"}) == (
        'Skill "pirate\x00" is not currently loaded in "skills".'
    )


async def test_duplicate_labels_and_reserved_looking_labels(storage):
    engine = ContextBlocks(storage).with_context("memory")
    with pytest.raises(ConflictError, match='Block "memory" already exists'):
        engine.with_context("memory")
    await engine.add_context("Memory")  # labels are case-sensitive, as in the original
    with pytest.raises(ConflictError, match='Block "Memory" already exists'):
        await engine.add_context("Memory")
    with pytest.raises(ContextBlockError, match='Block "nope" is readonly'):
        await engine.replace_context_block("nope", "x")


@pytest.mark.parametrize("label", [["memory"], {"l": 1}, 5, None, b"memory"])
async def test_every_block_call_refuses_a_label_that_is_not_a_string(session, skills, label):
    calls = [
        lambda: session.get_context_block(label),
        lambda: session.replace_context_block(label, "x"),
        lambda: session.append_context_block(label, "x"),
        lambda: session.remove_context(label),
        lambda: session.unload_skill(label, "pirate"),
        lambda: session._context.load_skill(label, "pirate"),
        lambda: session._context.set_skill(label, "k", "body"),
        lambda: session._context.set_search_entry(label, "k", "body"),
        lambda: session._context.search_context(label, "q"),
    ]
    for call in calls:
        with pytest.raises(InvalidInputError) as raised:
            await call()
        assert raised.value.field == "label"
    assert skills.calls == []


@pytest.mark.parametrize("options, field", [
    ({"label": "mem\ud800"}, "label"), ({"label": "memory", "description": "half \udc00"}, "description"),
])
async def test_block_options_must_be_valid_unicode(storage, options, field):
    with pytest.raises(InvalidInputError) as raised:
        ContextBlocks(storage).with_context(**options)
    assert raised.value.field == field
    engine = ContextBlocks(storage).with_context("soul")
    with pytest.raises(InvalidInputError):
        await engine.add_context(**options)
    with pytest.raises(InvalidInputError) as raised:
        ContextBlocks(storage).for_session("s\ud800")
    assert raised.value.field == "session_id"
