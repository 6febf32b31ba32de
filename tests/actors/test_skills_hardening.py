"""Adversarial use of DirectorySkillProvider: what set() stores, load() gives back exactly.

The folder stands in for the original's R2 bucket (docs/behaviours.md §7);
its promise is that a skill body round-trips byte for byte and that no key
reaches outside the folder or fails with an OS error.
"""

import os

import pytest

from actors.skills import DirectorySkillProvider, validate_skill_key
from common.errors import InvalidInputError

pytestmark = pytest.mark.both_storages


@pytest.fixture
def provider(tmp_path):
    return DirectorySkillProvider(tmp_path / "skills")


@pytest.mark.parametrize("content", [
    "a\r\nb\r\n", "a\rb", "\r\n", "mixed\n\r\n\r", "line\u2028sep\u2029para\x85nel",
    "---\r\nlooks: like front matter\r\n---\r\nbody", "---\r", "---\u2028x", "\ufeffstarts with a BOM",
    "\ufeff---\nx", "", "\x00 nul and \x1f unit separator",
])
async def test_set_then_load_gives_back_exactly_the_content(provider, content):
    await provider.set("k", content)
    assert await provider.load("k") == content
    await provider.set("k", content, "with a description")
    assert await provider.load("k") == content
    assert await provider.get() == "- k: with a description"


@pytest.mark.parametrize("description", [
    "x\u2028---", "a\rb", "a\r", "line\u2029---\nmore", "tab\there", "\x85", '"quoted" \\ back',
    "日本語の説明", "😀 emoji", "\u202eright-to-left",
])
async def test_descriptions_with_line_breaks_cannot_break_the_front_matter(provider, description):
    await provider.set("k", "body", description)
    assert await provider.load("k") == "body"
    assert await provider.get() == f"- k: {description}"


@pytest.mark.parametrize("key", ["東" * 66, "😀" * 50, "é" * 100, "k" * 200])
async def test_keys_up_to_200_utf8_bytes_are_files(provider, tmp_path, key):
    await provider.set(key, "body")
    assert await provider.load(key) == "body"
    assert await provider.get() == f"- {key}"


@pytest.mark.parametrize("key", ["東" * 67, "😀" * 51, "é" * 101, "a\ud800", "\udfff", "..", "a/../b", "x\x00"])
async def test_keys_too_long_for_a_file_name_or_not_unicode_are_invalid_input(provider, tmp_path, key):
    with pytest.raises(InvalidInputError) as raised:
        await provider.set(key, "body")
    assert raised.value.field == "key"
    assert str(raised.value).startswith(f"invalid skill key {key!r}: use 1-200 characters (at most 200 UTF-8 bytes)")
    with pytest.raises(InvalidInputError):
        await provider.load(key)
    with pytest.raises(InvalidInputError):
        validate_skill_key(key)
    assert not (tmp_path / "skills").exists() or os.listdir(tmp_path / "skills") == []


@pytest.mark.parametrize("content, description, field, message", [
    (5, None, "content", "skill content must be a string, not int"),
    (None, "d", "content", "skill content must be a string, not NoneType"),
    (b"bytes", None, "content", "skill content must be a string, not bytes"),
    ("body", 5, "description", "skill description must be a string or None, not int"),
])
async def test_non_text_content_or_description_is_invalid_input_and_writes_nothing(
    provider, tmp_path, content, description, field, message
):
    with pytest.raises(InvalidInputError, match=message) as raised:
        await provider.set("k", content, description)
    assert raised.value.field == field
    assert not (tmp_path / "skills").exists()


async def test_a_damaged_file_does_not_hide_the_others(provider, tmp_path):
    await provider.set("good", "body", "fine")
    (tmp_path / "skills" / "bad.md").write_bytes(b"---\ndescription: caf\xe9\n---\n\xff\xfe")
    assert await provider.get() == "- bad: caf\ufffd\n- good: fine"
    assert await provider.load("bad") == "\ufffd\ufffd"


async def test_a_hand_written_file_with_a_bom_and_crlf_reads_its_front_matter(provider, tmp_path):
    folder = tmp_path / "skills"
    folder.mkdir()
    (folder / "win.md").write_bytes("\ufeff---\r\ndescription: Written on Windows\r\n---\r\nLine 1\r\nLine 2".encode())
    assert await provider.get() == "- win: Written on Windows"
    assert await provider.load("win") == "Line 1\r\nLine 2"


async def test_an_empty_extension_lists_every_file(tmp_path):
    provider = DirectorySkillProvider(tmp_path / "plain", extension="")
    await provider.set("alpha", "A", "first")
    await provider.set("beta", "B")
    assert sorted(os.listdir(tmp_path / "plain")) == ["alpha", "beta"]
    assert await provider.get() == "- alpha: first\n- beta"
    assert await provider.load("beta") == "B"
