"""Message search on Postgres: the one query syntax of storage.fts, stemming, phrases, CJK."""

from __future__ import annotations

import json
import re

import pytest

from storage.fts import parse_query
from storage.postgres import InvalidInputError, PostgresSessionProvider
from storage.postgres.values import SEARCH_TEXT_MAX_BYTES


@pytest.fixture
def store(pg_conn):
    return PostgresSessionProvider(pg_conn, "s")


async def fill(store, texts: dict[str, str], *, tools: dict[str, str] | None = None) -> None:
    for message_id, text in texts.items():
        content = json.dumps({"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]})
        await store.append(message_id, "user", content, text, None, tools=(tools or {}).get(message_id, ""))


async def ids(store, query: str, limit: int = 20) -> list[str]:
    parsed = parse_query(query)
    return [] if parsed is None else [hit.id for hit in await store.search(parsed, limit)]


async def test_english_stemming_and_every_word_required(store):
    await fill(store, {"a": "The foxes were running home", "b": "a fox runs", "c": "nothing here"})
    assert await ids(store, "running") == ["b", "a"]  # the shorter text first, as bm25 ranks them
    assert set(await ids(store, "fox run")) == {"a", "b"}
    assert await ids(store, "fox home") == ["a"]
    assert await ids(store, "fox absent") == []


async def test_stop_words_are_searchable_like_sqlite(store):
    await fill(store, {"a": "to be or not to be", "b": "question"})
    assert await ids(store, "the") == []
    assert await ids(store, "not") == ["a"]
    assert await ids(store, '"to be or not"') == ["a"]


async def test_phrases_need_adjacent_words_in_order(store):
    await fill(store, {"a": "quick brown fox", "b": "brown quick fox", "c": "quick red brown fox"})
    assert await ids(store, '"quick brown"') == ["a"]
    assert set(await ids(store, "quick brown")) == {"a", "b", "c"}
    assert await ids(store, '"brown fox" quick') == ["a", "c"]


async def test_nothing_typed_is_query_syntax(store):
    await fill(
        store,
        {
            "a": "apples or pears",
            "b": "apples",
            "c": "near end: tokens* and (parens)",
            "d": "minus -sign ^caret",
        },
    )
    assert await ids(store, "apples OR pears") == ["a"]
    assert await ids(store, "apples OR") == ["a"]
    assert await ids(store, "NEAR(end tokens)") == ["c"]
    assert await ids(store, "tokens*") == ["c"]
    assert await ids(store, "(parens) end:") == ["c"]
    assert await ids(store, '-sign ^caret "unbalanced') == []
    assert await ids(store, "-sign ^caret") == ["d"]
    assert await ids(store, "'; DROP TABLE assistant_messages; --") == []
    assert await ids(store, "apples") == ["b", "a"]  # the shorter text ranks first


async def test_punctuation_splits_words_as_sqlite_does(store):
    await fill(store, {"a": "read docs/setup.md then ran gen-itgc", "b": "user@example.com wrote"})
    assert await ids(store, "setup.md") == ["a"]
    assert await ids(store, "setup") == ["a"]
    assert await ids(store, "gen-itgc") == ["a"]
    assert await ids(store, "itgc") == ["a"]
    assert await ids(store, "example") == ["b"]
    assert await ids(store, "md.setup") == []  # a term is a phrase: order counts


async def test_cjk_inside_sentences(store):
    await fill(
        store,
        {
            "zh": "我们今天讨论中文搜索测试的问题",
            "ja": "東京でラーメンを食べました",
            "ko": "한국어 검색이 잘 됩니다",
            "en": "plain english",
        },
    )
    assert await ids(store, "搜索") == ["zh"]
    assert await ids(store, "中文搜索测试") == ["zh"]
    assert await ids(store, "ラーメン") == ["ja"]
    assert await ids(store, "東京 食べ") == ["ja"]
    assert await ids(store, "검색") == ["ko"]
    assert await ids(store, "问") == ["zh"]  # one character
    assert await ids(store, "搜索 english") == []


async def test_mixed_script_words_are_found_by_each_part(store):
    await fill(store, {"m": "重跑gen-itgc后再看结果", "n": "general itgc notes"})
    assert await ids(store, "itgc") == ["m", "n"]
    assert await ids(store, "gen") == ["m"]  # "general" stems to "general", not "gen"
    assert await ids(store, "重跑") == ["m"]
    assert await ids(store, "重跑gen") == ["m"]
    assert await ids(store, "重跑GEN-ITGC后") == ["m"]  # case-insensitive, like SQLite's trigram


async def test_cjk_terms_are_substrings_not_patterns(store):
    await fill(store, {"a": "中X文 and 中_文", "b": "中%文"})
    assert await ids(store, "中%文") == ["b"]
    assert await ids(store, "中_文") == ["a"]
    assert await ids(store, "中\\文") == []


async def test_tool_text_is_searched_and_hits_carry_the_text_parts(store):
    await fill(store, {"t": "", "u": "I read it"}, tools={"t": "read_file docs/setup.md", "u": "grep"})
    [hit] = await store.search(parse_query("setup.md"), 5)
    assert (hit.id, hit.role, hit.content) == ("t", "user", "")
    [hit] = await store.search(parse_query("grep read"), 5)
    assert (hit.id, hit.content) == ("u", "I read it")


async def test_rank_then_insertion_order_and_limit(store):
    await fill(store, {"once": "apple pie", "thrice": "apple apple apple", "same1": "pear", "same2": "pear", "same3": "pear"})
    assert await ids(store, "apple") == ["thrice", "once"]
    assert await ids(store, "pear") == ["same1", "same2", "same3"]
    assert await ids(store, "pear", limit=2) == ["same1", "same2"]
    assert await ids(store, "pear", limit=0) == []


async def test_search_is_scoped_to_the_session(pg_conn, store):
    other = PostgresSessionProvider(pg_conn, "other")
    await fill(store, {"a": "shared word"})
    await fill(other, {"b": "shared word"})
    assert await ids(store, "shared") == ["a"]
    assert await ids(other, "shared") == ["b"]


async def test_separators_nul_and_surrogates_in_queries(store):
    await fill(store, {"a": "alpha beta"})
    assert await ids(store, "alpha\x00beta") == ["a"]
    assert await ids(store, "alpha\ud800beta") == ["a"]


async def test_queries_of_any_length(store):
    words = [f"w{i}x" for i in range(600)]
    await fill(store, {"all": " ".join(words), "some": " ".join(words[:300])})
    assert await ids(store, " ".join(words)) == ["all"]  # three chunks of terms
    assert set(await ids(store, " ".join(words[:300]))) == {"all", "some"}
    assert await ids(store, " ".join(f"absent{i}" for i in range(20_000))) == []
    assert await ids(store, " ".join(f"中文{i}" for i in range(40))) == []  # CJK beyond the indexed ones


async def test_compacted_messages_stay_searchable(store):
    await fill(store, {"a": "hidden under an overlay", "b": "kept"})
    await store.add_compaction("k", "summary", "a", "b")
    assert await ids(store, "overlay") == ["a"]


async def test_search_text_is_cut_to_fit_a_tsvector(store):
    """The indexed text stops at SEARCH_TEXT_MAX_BYTES; the message itself is stored whole."""
    words = [f"u{i:07d}" for i in range(120_000)]  # ~1.1 MB of distinct words: past Postgres' tsvector limit
    text = " ".join(words)
    content = json.dumps({"id": "big", "role": "user", "parts": [{"type": "text", "text": text}]})
    assert await store.append("big", "user", content, text, None) == (True, None)
    assert await store.get("big") == content
    [hit] = await store.search(parse_query(words[0]), 1)
    assert len(hit.content.encode()) <= SEARCH_TEXT_MAX_BYTES and text.startswith(hit.content)
    assert await ids(store, words[-1]) == []


async def test_search_messages_gives_the_spec_hits(store):
    await fill(store, {"a": "where is my flight", "b": "flights are late"})
    hits = await store.search_messages("flight", 10)
    assert [(h["id"], h["role"], h["content"]) for h in hits] == [
        ("b", "user", "flights are late"),  # the shorter text first
        ("a", "user", "where is my flight"),
    ]
    assert all(set(h) == {"id", "role", "content", "createdAt"} for h in hits)
    assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", h["createdAt"]) for h in hits)
    assert await store.search_messages("  ", 10) == [] and await store.search_messages("flight", 0) == []
    with pytest.raises(InvalidInputError, match="query must be a string"):
        await store.search_messages(None)
    with pytest.raises(InvalidInputError, match="limit must be >= 0"):
        await store.search_messages("x", -1)
