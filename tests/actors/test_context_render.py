"""System prompt rendering, byte for byte (docs/behaviours.md §4)."""

import pytest

from actors.context import (
    SEPARATOR,
    ContextBlock,
    ContextBlocks,
    render_header,
    render_prompt,
    search_provider_for,
)
from actors.skills import DirectorySkillProvider

pytestmark = pytest.mark.both_storages

SEP = "═" * 46


class Static:
    """A read-only provider with fixed content."""

    def __init__(self, value):
        self.value = value

    async def get(self):
        return self.value


class Memory:
    """A writable in-memory provider."""

    def __init__(self, value=None):
        self.value = value

    async def get(self):
        return self.value

    async def set(self, content):
        self.value = content


def block(label="memory", description=None, content="", tokens=0, max_tokens=None, writable=True, skill=False, search=False):
    return ContextBlock(label=label, description=description, content=content, tokens=tokens, maxTokens=max_tokens,
                        writable=writable, isSkill=skill, isSearchable=search)


@pytest.fixture
async def skills_dir(tmp_path):
    provider = DirectorySkillProvider(tmp_path / "skills")
    await provider.set("code-review", "Look at the diff first.", "How to review code")
    await provider.set("pirate", "Say arr.", "Talk like a pirate")
    return provider


def default_session(storage, skills):
    return (
        ContextBlocks(storage)
        .with_context("soul", provider=Static("You are a helpful assistant."))
        .with_context("memory", description="Learned facts", max_tokens=1100)
        .with_context("skills", description="Loadable skills", provider=skills)
        .with_context("knowledge", description="Searchable knowledge base", provider=search_provider_for(storage))
    )


def test_separator_is_46_box_drawing_characters():
    assert SEPARATOR == SEP and len(SEPARATOR) == 46 and set(SEPARATOR) == {"\u2550"}


async def test_default_four_block_prompt_matches_the_original_byte_for_byte(storage, skills_dir):
    prompt = await default_session(storage, skills_dir).freeze_system_prompt()
    assert prompt == (
        f"{SEP}\nSOUL [readonly]\n{SEP}\nYou are a helpful assistant.\n\n"
        f"{SEP}\nMEMORY (Learned facts) [0% — 0/1100 tokens] [writable]\n{SEP}\n\n\n"
        f"{SEP}\nSKILLS (Loadable skills) [loadable]\n{SEP}\n- code-review: How to review code\n- pirate: Talk like a pirate\n\n"
        f"{SEP}\nKNOWLEDGE (Searchable knowledge base) [searchable]\n{SEP}\n"
    )


@pytest.mark.parametrize("tokens, max_tokens, header", [
    (495, 1100, "MEMORY (Learned facts) [45% — 495/1100 tokens] [writable]"),
    (5, 200, "MEMORY (Learned facts) [3% — 5/200 tokens] [writable]"),
    (9, 200, "MEMORY (Learned facts) [5% — 9/200 tokens] [writable]"),
    (0, 1100, "MEMORY (Learned facts) [0% — 0/1100 tokens] [writable]"),
])
def test_usage_percentage_rounds_half_up_like_javascript(tokens, max_tokens, header):
    assert render_header(block(description="Learned facts", tokens=tokens, max_tokens=max_tokens)) == header


async def test_percentages_come_from_the_token_estimate_of_the_content(storage):
    session = (ContextBlocks(storage)
               .with_context("memory", description="Learned facts", max_tokens=1100)
               .with_context("a", max_tokens=200).with_context("b", max_tokens=200))
    await session.replace_context_block("memory", "a" * 1980)
    await session.replace_context_block("a", "x" * 20)
    await session.replace_context_block("b", "y" * 36)
    prompt = await session.freeze_system_prompt()
    assert f"{SEP}\nMEMORY (Learned facts) [45% — 495/1100 tokens] [writable]\n{SEP}\n" in prompt
    assert f"{SEP}\nA [3% — 5/200 tokens] [writable]\n{SEP}\n" in prompt
    assert f"{SEP}\nB [5% — 9/200 tokens] [writable]\n{SEP}\n" in prompt


@pytest.mark.parametrize("kwargs, header", [
    (dict(label="soul", writable=False), "SOUL [readonly]"),
    (dict(label="soul", description="Identity", writable=False), "SOUL (Identity) [readonly]"),
    (dict(label="notes"), "NOTES [writable]"),
    (dict(label="notes", description=""), "NOTES [writable]"),
    (dict(label="zero_max", max_tokens=0), "ZERO_MAX [writable]"),
    (dict(label="skills", description="Loadable skills", skill=True), "SKILLS (Loadable skills) [loadable]"),
    (dict(label="knowledge", description="Searchable knowledge base", search=True), "KNOWLEDGE (Searchable knowledge base) [searchable]"),
    (dict(label="history", description="Cross-session conversation history", writable=False, search=True),
     "HISTORY (Cross-session conversation history) [searchable]"),
    (dict(label="both", skill=True, search=True), "BOTH [searchable]"),
    (dict(label="straße", writable=False), "STRASSE [readonly]"),
    (dict(label="straße-ünï"), "STRASSE-ÜNÏ [writable]"),
])
def test_header_parts_and_tag_priority(kwargs, header):
    assert render_header(block(**kwargs)) == header


async def test_non_ascii_label_is_upper_cased_with_unicode_rules(storage):
    session = ContextBlocks(storage).with_context("straße", provider=Static("Hallo"))
    assert await session.freeze_system_prompt() == f"{SEP}\nSTRASSE [readonly]\n{SEP}\nHallo"


def test_empty_readonly_blocks_are_skipped_and_empty_writable_ones_kept():
    blocks = [
        block("a", content="one", writable=False),
        block("empty", writable=False),
        block("w"),
        block("b", content="two", writable=False),
    ]
    assert render_prompt(blocks) == (
        f"{SEP}\nA [readonly]\n{SEP}\none\n\n{SEP}\nW [writable]\n{SEP}\n\n\n{SEP}\nB [readonly]\n{SEP}\ntwo"
    )


async def test_readonly_provider_returning_none_or_empty_is_not_rendered(storage):
    session = (ContextBlocks(storage).with_context("none", provider=Static(None))
               .with_context("empty", provider=Static("")).with_context("soul", provider=Static("Hi")))
    assert await session.freeze_system_prompt() == f"{SEP}\nSOUL [readonly]\n{SEP}\nHi"


async def test_no_blocks_give_an_empty_prompt(storage):
    assert await ContextBlocks(storage).freeze_system_prompt() == ""
    assert render_prompt([]) == ""


async def test_content_keeps_its_own_trailing_newline(storage):
    session = ContextBlocks(storage).with_context("soul", provider=Static("Line\n"))
    assert await session.freeze_system_prompt() == f"{SEP}\nSOUL [readonly]\n{SEP}\nLine\n"
