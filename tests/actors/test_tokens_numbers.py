"""Numbers are written as JavaScript writes them (ECMAScript Number::toString).

Every expected text below was produced by Node.js 20 (``JSON.stringify(v)``
and ``String(v)`` agree for numbers), e.g. ``node -e 'console.log(JSON.stringify(1e21))'``.
An integer beyond 2**53 is written as the double JavaScript's ``JSON.parse``
makes of it (``JSON.stringify(JSON.parse("18446744073709551616"))``).
"""

import json

import pytest

from actors.session_messages import serialise
from actors.summary import build_summary_prompt
from actors.tokens import estimate_message_tokens, estimate_string_tokens, js_number, js_stringify
from actors.truncation import truncate_tool_output
from common.errors import InvalidMessageError

NODE = [
    (0, "0"), (-0.0, "0"), (0.0, "0"), (1, "1"), (-1, "-1"), (1.0, "1"), (1.5, "1.5"),
    (0.1 + 0.2, "0.30000000000000004"), (-3e-7, "-3e-7"), (1e-7, "1e-7"), (1.5e-7, "1.5e-7"),
    (9.99e-8, "9.99e-8"), (1e-6, "0.000001"), (0.000001234, "0.000001234"), (1e-5, "0.00001"),
    (0.0001, "0.0001"), (0.001, "0.001"), (123.456, "123.456"),
    (1e21, "1e+21"), (-1e21, "-1e+21"), (999999999999999900000.0, "999999999999999900000"),
    (1e20, "100000000000000000000"), (1.5e21, "1.5e+21"),
    (123456789012345680000.0, "123456789012345680000"), (123456789012345680000, "123456789012345680000"),
    (2**53, "9007199254740992"), (2**53 + 1, "9007199254740992"), (2**53 + 2, "9007199254740994"),
    (2**64, "18446744073709552000"), (2**70, "1.1805916207174113e+21"), (float(2**70), "1.1805916207174113e+21"),
    (12345678901234567890123, "1.2345678901234568e+22"), (-(2**64), "-18446744073709552000"),
    (1e16, "10000000000000000"), (1.2345e16, "12345000000000000"),
    (5e-324, "5e-324"), (-5e-324, "-5e-324"), (1.7976931348623157e308, "1.7976931348623157e+308"),
    (2.2250738585072014e-308, "2.2250738585072014e-308"), (1e100, "1e+100"), (1.25e-100, "1.25e-100"),
    (1e301, "1e+301"), (100, "100"), (0.5, "0.5"), (4.35, "4.35"), (1 / 3, "0.3333333333333333"),
    (-2.5e-10, "-2.5e-10"), (12345678.9, "12345678.9"),
]


@pytest.mark.parametrize("value, text", NODE)
def test_numbers_are_written_as_javascript_writes_them(value, text):
    assert js_number(value) == text
    assert js_stringify(value) == text
    assert js_stringify([value]) == f"[{text}]"
    assert js_stringify({"n": value, "s": "x"}) == f'{{"n":{text},"s":"x"}}'


def test_an_object_mixing_numbers_is_written_as_json_stringify_writes_it():
    # node: JSON.stringify({a: 1e21, b: [-3e-7, 0.1+0.2, -0], c: "1e21"})
    assert js_stringify({"a": 1e21, "b": [-3e-7, 0.1 + 0.2, -0.0], "c": "1e21"}) == \
        '{"a":1e+21,"b":[-3e-7,0.30000000000000004,0],"c":"1e21"}'
    assert js_stringify({"k": ["é", None, True, False, {"x": 1.0}]}) == '{"k":["é",null,true,false,{"x":1}]}'


def test_javascript_number_text_parses_back_to_the_same_double():
    for value, text in NODE:
        assert float(json.loads(text)) == float(value)


def test_stored_bytes_and_token_estimates_follow_javascript_numbers():
    message = {"id": "m1", "role": "assistant", "parts": [
        {"type": "tool-calc", "toolCallId": "c1", "state": "output-available",
         "input": {"x": 1e21, "eps": -3e-7}, "output": 1e-5}]}
    assert serialise(message) == (
        '{"id":"m1","role":"assistant","parts":[{"type":"tool-calc","toolCallId":"c1",'
        '"state":"output-available","input":{"x":1e+21,"eps":-3e-7},"output":0.00001}]}')
    # est('{"x":1e+21,"eps":-3e-7}') = ceil(23/4) = 6; est("0.00001") = ceil(7/4) = 2; + 4
    assert estimate_string_tokens('{"x":1e+21,"eps":-3e-7}') == 6
    assert estimate_message_tokens([message]) == 4 + 6 + 2


def test_an_integer_beyond_the_range_of_a_double_is_refused():
    with pytest.raises(InvalidMessageError, match="message is not JSON data"):
        serialise({"id": "m1", "role": "user", "parts": [], "n": 10**400})


def test_tool_output_truncation_measures_javascript_text():
    # JSON.stringify([1e-7, 1e-7]) is "[1e-7,1e-7]", 11 characters: within a budget of 11.
    assert truncate_tool_output([1e-7, 1e-7], 11) == {"output": [1e-7, 1e-7], "truncated": False, "originalLength": 11}
    # JSON.stringify(1e21 + 1) (an integer from JSON.parse) is "1e+21".
    assert truncate_tool_output(10**21 + 1, 5) == {"output": 10**21 + 1, "truncated": False, "originalLength": 5}


def test_summary_prompt_writes_numbers_as_javascript_string_does():
    message = {"id": "m1", "role": "assistant", "parts": [
        {"type": "tool-calc", "toolName": "calc", "input": {"x": 1e-7}, "output": 1e21}]}
    prompt = build_summary_prompt([message], None, 100)
    assert '[Tool: calc]\nInput: {"x":1e-7}\nOutput: 1e+21' in prompt
