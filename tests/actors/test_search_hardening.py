"""Adversarial search queries: no user text is an error, huge queries work (docs/deviations.md #9, #10).

Every search surface (``Session.search``, the ``search_context`` tool over
:class:`AgentSearchProvider`) goes through :mod:`storage.fts`; these tests
throw at it what a client can type: NUL, lone surrogates, every FTS5
operator, thousands of CJK words. A real storage failure must still surface
as an error, never as "no results".
"""

import time

import pytest

from actors.context import search_provider_for
from actors.session import Session
from common.errors import SearchQueryError
from storage import SqlStorage
from storage.fts import parse_query

pytestmark = pytest.mark.both_storages

HAN = "".join(chr(0x4E00 + i) for i in range(1600))  # 1600 distinct ideographs


def text_message(mid, text):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


@pytest.fixture
async def session(tmp_path):
    storage = SqlStorage.open(tmp_path / "search.sqlite3")
    session = Session.create(storage).with_context("kb", provider=search_provider_for(storage))
    for mid, text in [
        ("deploy", "The deploy happens on Friday"),
        ("tokyo", "私は東京タワーに行きました"),
        ("han", HAN),
        ("ops", "a-b c:d e*f (g) ^h NEAR/2 x OR y"),
    ]:
        await session.append_message(text_message(mid, text))
    yield session
    storage.close()


async def ids(session, query):
    return [hit["id"] for hit in await session.search(query)]


@pytest.mark.parametrize("query, expected", [
    ("deploy\x00", ["deploy"]),
    ("\x00deploy\x00friday", ["deploy"]),
    ("deploy\ud800", ["deploy"]),
    ("\udfffdeploy", ["deploy"]),
    ("\ud83d", []),
    ("\x00", []),
    ('"deploy\x00happens"', ["deploy"]),
])
async def test_nul_and_lone_surrogates_separate_words_instead_of_failing(session, query, expected):
    assert await ids(session, query) == expected


@pytest.mark.parametrize("query, expected", [
    ("deploy OR nothing", []), ("deploy AND friday", []), ("deploy NOT friday", []),
    ("NEAR(deploy friday)", []), ("NEAR/2", ["ops"]), ("fri*", []), ("^deploy", ["deploy"]),
    ("-deploy", ["deploy"]), ("+deploy", ["deploy"]), ("content:deploy", []), ("{deploy}: friday", ["deploy"]),
    ("(deploy)", ["deploy"]), ('deploy"', ["deploy"]), ('"deploy', ["deploy"]), ('"""', []),
    ("a-b", ["ops"]), ("c:d", ["ops"]), ("e*f", ["ops"]), ("(g)", ["ops"]), ("^h", ["ops"]),
    ("x OR y", ["ops"]), ("'deploy'", ["deploy"]), ("deploy;DROP TABLE x", []),
])
async def test_every_fts5_operator_is_plain_text(session, query, expected):
    assert await ids(session, query) == expected


async def test_thousands_of_distinct_short_cjk_words_are_one_query(session):
    bigrams = " ".join(HAN[i : i + 2] for i in range(0, 1598, 1))  # 1598 two-character words
    assert len(parse_query(bigrams).terms) == 1598
    assert await ids(session, bigrams) == ["han"]
    assert await ids(session, bigrams + " 東京") == []


async def test_thousands_of_distinct_long_cjk_words_are_one_query(session):
    trigrams = " ".join(HAN[i : i + 3] for i in range(1597))
    assert await ids(session, trigrams) == ["han"]
    assert await ids(session, trigrams + " 東京タ") == []
    mixed = trigrams + " " + " ".join(HAN[i : i + 2] for i in range(0, 1000, 7)) + " 一丁"
    assert await ids(session, mixed) == ["han"]


async def test_a_ten_thousand_word_query_with_repeats_is_quick(session):
    start = time.perf_counter()
    assert await ids(session, "friday " * 10_000) == ["deploy"]
    assert await ids(session, "東京 " * 5_000) == ["tokyo"]
    assert time.perf_counter() - start < 10.0  # pathological (quadratic) cost only; speed: benchmarks/
    assert parse_query("a b a " * 1000).terms == parse_query("a b").terms


async def test_search_context_tool_treats_hostile_queries_as_text(session):
    await session._context.set_search_entry("kb", "k1", "Coffee machine is on floor 3")
    tool = (await session.tools())["search_context"]
    assert await tool.execute({"label": "kb", "query": "coffee\x00floor"}) == "[k1]\nCoffee machine is on floor 3"
    assert await tool.execute({"label": "kb", "query": "coffee OR tea"}) == "No results found."
    assert await tool.execute({"label": "kb", "query": "一丁 " * 3000}) == "No results found."


async def test_a_broken_index_is_an_error_not_an_empty_result(session):
    await session._context.set_search_entry("kb", "k1", "東京の情報")
    session.storage.exec("DROP TABLE cf_agents_search_fts_cjk")
    session.storage.exec("DROP TABLE assistant_fts_cjk")
    with pytest.raises(SearchQueryError, match="no such table"):
        await session.search("東京")
    tool = (await session.tools())["search_context"]
    answer = await tool.execute({"label": "kb", "query": "東京"})
    assert answer.startswith("Error: search of 'kb' entries failed: ") and "no such table" in answer


@pytest.mark.parametrize("text, query", [
    ("今日は𰀀𰀁𰀂を見た", "𰀁"),  # CJK extension G
    ("今日は𰀀𰀁𰀂を見た", "𰀀𰀁𰀂"),
    ("注音ㄅㄆㄇㄈ符號", "ㄆㄇ"),  # Bopomofo
    ("𛀁𛀂 hentaigana", "𛀂"),  # Kana supplement
    ("時々雨が降る", "々"),  # iteration mark
    ("ꥠꥡ test", "ꥡ"),  # Hangul Jamo extended-A
    ("ﾠﾡﾢ x", "ﾡ"),  # half-width Hangul
    ("abc\x00def 東京\x00タワー", "タワー"),  # NUL inside stored text
    ("abc\x00def 東京\x00タワー", "def"),
])
async def test_every_cjk_block_is_found_inside_a_sentence(tmp_path, text, query):
    storage = SqlStorage.open(tmp_path / "cjk.sqlite3")
    session = Session.create(storage)
    await session.append_message(text_message("hit", text))
    await session.append_message(text_message("other", "unrelated words 日本"))
    assert await ids(session, query) == ["hit"]
    storage.close()


async def test_twenty_thousand_distinct_words_are_answered_quickly(session):
    many = [f"w{i}" for i in range(20_000)]
    start = time.perf_counter()
    assert await ids(session, " ".join(many)) == []
    assert time.perf_counter() - start < 5.0  # pathological (quadratic) cost only; speed: benchmarks/
    await session.append_message(text_message("words", " ".join(many[:700])))
    assert await ids(session, " ".join(many[:700])) == ["words"]  # three MATCH chunks, all must hold
    assert await ids(session, " ".join(many[:699] + ["friday"])) == []
    assert await ids(session, " ".join(many[:300]) + " " + " ".join(HAN[i : i + 3] for i in range(600))) == []


def test_cjk_detection_is_exact_and_fast():
    from storage.fts import _CJK_RANGES, has_cjk, is_cjk_char

    for lo, hi in _CJK_RANGES:
        for cp in (lo - 1, lo, (lo + hi) // 2, hi, hi + 1):
            assert is_cjk_char(chr(cp)) == any(a <= cp <= b for a, b in _CJK_RANGES), hex(cp)
    big = "é" * 1_750_000
    start = time.perf_counter()
    assert has_cjk("x" * 1_750_000) is False and has_cjk(big) is False and has_cjk(big + "東") is True
    assert time.perf_counter() - start < 2.0  # pathological (quadratic) cost only; speed: benchmarks/
