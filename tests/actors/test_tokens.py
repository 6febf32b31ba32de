"""Token estimation matches the original number for number (docs/behaviours.md §9)."""

import pytest

from actors.tokens import estimate_message_tokens, estimate_string_tokens, js_stringify, utf16_length


@pytest.mark.parametrize("text, tokens", [
    ("", 0), (None, 0), ("a", 2), ("Hello world", 3), ("x" * 36, 9),
    ("a b c d e f g h i j", 13), ("日本語のテキスト", 2), ("😀😀", 2),
    ("  leading   and trailing  ", 7),
])
def test_estimate_string_tokens(text, tokens):
    assert estimate_string_tokens(text) == tokens


def test_utf16_length_counts_surrogate_pairs():
    assert utf16_length("😀a") == 3


def test_js_whitespace_is_not_python_whitespace():
    # \x1c is whitespace for Python's str.split but not for JS \s: one word, not two.
    assert estimate_string_tokens("a\x1cb") == 2  # ceil(max(3/4, 1*1.3))


def test_estimate_message_tokens():
    assert estimate_message_tokens([]) == 0
    assert estimate_message_tokens([{"id": "a", "role": "user", "parts": []}]) == 4
    hello = {"id": "a", "role": "user", "parts": [{"type": "text", "text": "Hello world"}]}
    assert estimate_message_tokens([hello]) == 7
    mixed = {"id": "b", "role": "assistant", "parts": [
        {"type": "reasoning", "text": "think"},
        {"type": "tool-search", "toolCallId": "c1", "input": {"q": "x"}, "output": "found it"},
        {"type": "file", "url": "data:..."},
        {"type": "source", "text": "hi"},
    ]}
    # 4 + est("think")=2 + est('{"q":"x"}')=3 + est("found it")=3 + 0 + est("hi")=2
    assert estimate_message_tokens([mixed]) == 14


def test_js_stringify_writes_integral_floats_like_js():
    assert js_stringify({"a": 1.0, "b": [2.5, "é"]}) == '{"a":1,"b":[2.5,"é"]}'


@pytest.mark.parametrize("text, words", [
    ("one", 1), (" one", 1), ("one ", 1), ("\t\n\v\f\r one  two\r\n", 2), ("a\x1db\x1ec\x1fd", 1),
    ("a \x1c b", 3), ("   ", 0), ("a\u00a0b", 2), ("a\x85b", 1), ("x y\u3000z", 3),
])
def test_words_are_cut_where_javascript_cuts_them(text, words):
    # ASCII text goes through str.split() unless it holds \x1c-\x1f; other text through the \s regex.
    assert estimate_string_tokens(text) == max(-(-len(text) // 4), -(-words * 13 // 10))
