"""One search syntax everywhere: parse_query and the SQL it builds (docs/deviations.md #9, #10)."""

import pytest

from storage import SqlStorage
from storage.fts import has_cjk, index_rows, matching_rowids_sql, parse_query, unindex_rows
from storage.schema import create_on_first_use

TEXTS = {
    1: "The user's guide is in docs/setup.md",
    2: "Policy POL-358 applies to refunds",
    3: "Error E-1042 raised by the booking service",
    4: "Write to ops@example.com today",
    5: "The deploy happens on Friday",
    6: "私は東京に行きました",
    7: "東京タワーは高い",
    8: "hello maybe later",
}


@pytest.fixture
def index():
    s = SqlStorage.open(":memory:")
    create_on_first_use(s.connection, "assistant_fts")  # made by a file's first message (schema version 7)
    for rowid, text in TEXTS.items():
        for sql, params in index_rows("assistant_fts", rowid, text):
            s.exec(sql, *params)
    yield s
    s.close()


def search(s, q):
    parsed = parse_query(q)
    if parsed is None:
        return None
    sql, params = matching_rowids_sql(parsed, "assistant_fts")
    return sorted(r["rowid"] for r in s.sql(sql, *params))


@pytest.mark.parametrize("query, expected", [
    ("user's", [1]), ("docs/setup.md", [1]), ("POL-358", [2]), ("E-1042", [3]),
    ("ops@example.com", [4]), ("deploy friday", [5]), ("friday deploy", [5]),
    ("deploying", [5]), ('"happens on" deploy', [5]), ('"deploy friday"', []),
    ("hello OR nothing", []), ("fri*", []), ("NEAR(hello maybe)", []), ("NEAR hello", []), ("-hello", [8]),
    ("^hello", [8]), ("key:value", []), ("東京", [6, 7]), ("東京タワー", [7]),
    ("東京 高い", [7]), ("タワー later", []),
])
def test_query_semantics(index, query, expected):
    assert search(index, query) == expected


@pytest.mark.parametrize("query", ["", "   ", '""', '"', "#", "?!", '" "'])
def test_queries_without_terms_match_nothing(query):
    assert parse_query(query) is None


def test_unbalanced_quote_is_plain_text():
    parsed = parse_query('say "hello')
    assert [(t.text, t.phrase) for t in parsed.terms] == [("say", False), ('"hello', False)]
    assert parsed.match_expression == '"say" """hello"'


def test_non_string_query_is_a_type_error():
    with pytest.raises(TypeError, match="search query must be a string, not int"):
        parse_query(5)


def test_only_cjk_text_enters_trigram_index(index):
    assert index.scalar("SELECT count(*) FROM assistant_fts_cjk") == 2
    assert has_cjk("abc") is False and has_cjk("한국어") is True


def test_unindex_removes_both_indexes(index):
    for sql, params in unindex_rows("assistant_fts", 6):
        index.exec(sql, *params)
    assert search(index, "東京") == [7]
