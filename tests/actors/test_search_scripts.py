"""Words glued to Chinese or Japanese text are found (docs/deviations.md #10).

``unicode61`` makes ``重跑gen-itgc后`` the tokens ``重跑gen`` and ``itgc后``,
so neither ``gen`` nor ``itgc`` matched anywhere. Text is split where CJK and
other letters or digits meet before it reaches the porter index; the
message, and every hit's ``content``, stay exactly as written.
"""

import pytest

from actors import SessionManager
from actors.context import ContextBlocks, search_provider_for
from actors.session import Session
from storage.fts import INDEX_BOUNDARY, indexed_text, stored_text

pytestmark = pytest.mark.both_storages

GLUED = "重跑gen-itgc后再看看"
JAPANESE = "Pythonで書いたスクリプトをv2に更新"
WORDS = [("itgc", True), ("gen", True), ("gen-itgc", True), ("重跑gen", True), ("itgc后", True),
         ("重跑", True), ("python", False), ("genitgc", False)]


def msg(mid, text, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}]}


@pytest.mark.parametrize("query, hit", WORDS)
async def test_session_search_finds_words_glued_to_cjk(storage, query, hit):
    session = Session.create(storage)
    await session.append_message(msg("m1", GLUED))
    await session.append_message(msg("m2", "nothing to see"))
    hits = await session.search(query)
    assert [(h["id"], h["content"]) for h in hits] == ([("m1", GLUED)] if hit else [])
    assert await session.get_message("m1") == msg("m1", GLUED)


async def test_japanese_words_beside_latin_ones_are_found(storage):
    session = Session.create(storage)
    await session.append_message(msg("m1", JAPANESE))
    for query in ("python", "v2", "スクリプト", "Pythonで", "書いた"):
        assert [h["content"] for h in await session.search(query)] == [JAPANESE], query


async def test_manager_search_and_session_search_tool_find_words_glued_to_cjk(storage):
    manager = SessionManager.create(storage).with_searchable_history("history")
    sid = (await manager.create("chat"))["id"]
    await manager.append(sid, msg("m1", GLUED))
    for query in ("itgc", "gen"):
        assert [(h["id"], h["content"]) for h in await manager.search(query)] == [("m1", GLUED)]
        assert await manager.tools()["session_search"].execute({"query": query}) == f"[user] {GLUED}"
    session = await manager.get_session(sid)
    assert await (await session.tools())["search_context"].execute({"label": "history", "query": "itgc"}) == \
        f"[user] {GLUED}"


async def test_search_context_tool_finds_words_glued_to_cjk(storage):
    blocks = ContextBlocks(storage).with_context("knowledge", provider=search_provider_for(storage))
    tools = await blocks.tools()
    assert await tools["set_context"].execute({"label": "knowledge", "content": GLUED,
                                               "metadata": {"title": "rerun"}}) == 'Indexed "rerun" in knowledge.'
    for query in ("itgc", "gen", "重跑"):
        assert await tools["search_context"].execute({"label": "knowledge", "query": query}) == \
            f"[rerun]\n{GLUED}"


async def test_tool_inputs_glued_to_cjk_are_found(storage):
    session = Session.create(storage)
    call = {"type": "tool-run", "toolName": "run", "toolCallId": "c1", "state": "input-available",
            "input": {"command": "重跑gen-itgc后"}}
    await session.append_message({"id": "m1", "role": "assistant", "parts": [call]})
    assert [(h["id"], h["content"]) for h in await session.search("itgc")] == [("m1", "")]


@pytest.mark.parametrize("text", [
    GLUED, JAPANESE, "plain ascii", "", "東京", "a東b京c", f"x{INDEX_BOUNDARY}東", f"東{INDEX_BOUNDARY}{INDEX_BOUNDARY}x",
    f"{INDEX_BOUNDARY}", "é東ü", "東_x", "１２３東", "東 x", "Ａ東",
])
def test_indexed_text_reads_back_exactly(text):
    assert stored_text(indexed_text(text)) == text


def test_indexed_text_splits_only_where_cjk_meets_letters_or_digits():
    assert indexed_text(GLUED) == f"重跑{INDEX_BOUNDARY}gen-itgc{INDEX_BOUNDARY}后再看看"
    assert indexed_text("東 x_東-y") == "東 x_東-y"
    assert indexed_text("plain") == "plain"


async def test_a_stored_boundary_character_stays_in_messages_and_hits(storage):
    session = Session.create(storage)
    text = f"a{INDEX_BOUNDARY}b 東{INDEX_BOUNDARY}x"
    await session.append_message(msg("m1", text))
    assert [h["content"] for h in await session.search("a")] == [text]
    assert [h["content"] for h in await session.search("x")] == [text]


def test_indexed_text_reads_back_exactly_for_any_mix():
    import random

    rng = random.Random(10)
    alphabet = ["a", "Z", "1", "é", "東", "か", "한", INDEX_BOUNDARY, " ", "_", "-", "²", "\u0301"]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert stored_text(indexed_text(text)) == text, repr(text)
