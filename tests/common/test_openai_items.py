"""OpenAI Agents SDK items as Session messages (common/openai_items.py): exact round trips, readable parts.

"Through storage" below means what a Session does to a message: JSON as
JavaScript writes it (``actors.tokens.js_stringify``), parsed again.
"""

from __future__ import annotations

import copy
import itertools
import json

import pytest

from actors.session_messages import search_text, tool_search_text
from actors.tokens import js_stringify
from common import openai_items
from common.openai_items import FORMAT_KEY, items_of, message_views, needs_leaf, plan_add, plan_pop
from tests.support.agents_sdk import CATALOGUE, catalogue_items, input_item_types


def stored(messages: list[dict]) -> list[dict]:
    """``messages`` as a Session gives them back."""
    return [json.loads(js_stringify(m)) for m in messages]


def same(left: list[dict], right: list[dict]) -> bool:
    """Equal and written the same by Python's json (so 1.0 is not 1, and key order counts)."""
    return json.dumps(left) == json.dumps(right)


def numbered_ids() -> object:
    counter = itertools.count(1)
    return lambda: f"m{next(counter)}"


def pop_all(messages: list[dict]) -> list[dict]:
    """Pop every item, newest first, as AgentsItemsSession.pop_item does on the latest message."""
    messages, popped = copy.deepcopy(messages), []
    while messages:
        result = plan_pop(messages[-1])
        if result is None:
            messages.pop()
            continue
        item, rest = result
        popped.append(item)
        if rest is None:
            messages.pop()
        else:
            messages[-1] = stored([rest])[0]
    return popped


def test_the_catalogue_holds_every_input_item_type_of_the_installed_sdk():
    assert input_item_types() <= {item.get("type", "message") for _, item in CATALOGUE}


@pytest.mark.parametrize("item", [item for _, item in CATALOGUE], ids=[name for name, _ in CATALOGUE])
def test_each_item_comes_back_exactly(item):
    messages = stored(plan_add([copy.deepcopy(item)]).append)
    assert same(items_of(messages), [item])
    assert same(pop_all(messages), [item])


def test_all_items_in_one_batch_come_back_in_order_and_pop_back_one_by_one():
    items = catalogue_items()
    plan = plan_add(items, new_id=numbered_ids())
    assert plan.update is None
    messages = stored(plan.append)
    assert same(items_of(messages), items)
    assert same(pop_all(messages), items[::-1])
    # Input-role messages stand alone; what lies between them shares one assistant message.
    assert [(m["role"], len(m["metadata"][FORMAT_KEY]["items"])) for m in messages] == [
        ("user", 1), ("assistant", 1), ("system", 1), ("system", 1), ("user", 1), ("assistant", 1), ("user", 1),
        ("assistant", len(CATALOGUE) - 7)]


WEATHER = [
    {"content": "Weather in Paris and Oslo?", "role": "user"},
    {"id": "rs_1", "summary": [{"text": "Look up both.", "type": "summary_text"}], "type": "reasoning"},
    {"arguments": '{"city":"Paris"}', "call_id": "call_paris", "name": "get_weather", "type": "function_call",
     "id": "call_paris"},
    {"arguments": '{"city":"Oslo"}', "call_id": "call_oslo", "name": "get_weather", "type": "function_call",
     "id": "call_oslo"},
    {"call_id": "call_paris", "output": "Sunny, 21 °C", "type": "function_call_output"},
    {"call_id": "call_oslo", "output": "Rain, 9 °C", "type": "function_call_output"},
    {"id": "msg_1", "content": [{"annotations": [], "text": "Paris is sunny.", "type": "output_text", "logprobs": []}],
     "role": "assistant", "status": "completed", "type": "message"},
]


def test_stored_messages_read_as_any_session_message():
    user, model = stored(plan_add(WEATHER, new_id=numbered_ids()).append)
    assert user == {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Weather in Paris and Oslo?"}],
                    "metadata": {FORMAT_KEY: {"version": 1, "items": [
                        {"parts": [0], "item": {"content": None, "role": "user"}}]}}}
    assert model["role"] == "assistant"
    assert model["parts"] == [
        {"type": "reasoning", "text": "Look up both."},
        {"type": "tool-get_weather", "toolCallId": "call_paris", "toolName": "get_weather",
         "state": "output-available", "input": {"city": "Paris"}, "output": "Sunny, 21 °C"},
        {"type": "tool-get_weather", "toolCallId": "call_oslo", "toolName": "get_weather",
         "state": "output-available", "input": {"city": "Oslo"}, "output": "Rain, 9 °C"},
        {"type": "text", "text": "Paris is sunny."},
    ]
    # What the Session indexes for search: the text parts, and tool names with their inputs.
    assert search_text(model["parts"]) == "Paris is sunny."
    assert tool_search_text(model["parts"]) == "get_weather Paris get_weather Oslo"
    # Nothing is stored twice: the entries hold skeletons with the moved values as null.
    assert model["metadata"][FORMAT_KEY]["items"][1] == {"parts": [1], "item": {
        "arguments": None, "call_id": "call_paris", "name": "get_weather", "type": "function_call",
        "id": "call_paris"}}
    assert model["metadata"][FORMAT_KEY]["items"][4] == {"parts": [2], "item": {
        "call_id": "call_oslo", "output": None, "type": "function_call_output"}}


def test_other_content_and_other_items_are_kept_in_data_parts():
    items = [item for name, item in CATALOGUE if name in ("input message with image and file", "web_search_call")]
    message, model = stored(plan_add(items).append)
    assert [p["type"] for p in message["parts"]] == ["text", "data-openai-content", "data-openai-content"]
    assert message["parts"][1]["data"] == items[0]["content"][1]
    assert model["parts"] == [{"type": "data-openai-item", "data": items[1]}]


def test_an_edited_part_shows_in_the_items():
    model = stored(plan_add(WEATHER).append)[1]
    model["parts"][1]["output"] = "[skill unloaded: weather]"  # as unload_skill rewrites a load
    model["parts"][3]["text"] = "Paris is sunny; Oslo is not."
    model["parts"][2]["input"] = {"city": "Bergen"}
    items = items_of([model])
    assert items[3]["output"] == "[skill unloaded: weather]"
    assert items[5]["content"][0]["text"] == "Paris is sunny; Oslo is not."
    assert items[2]["arguments"] == '{"city":"Bergen"}'


def test_arguments_that_are_not_compact_json_are_kept_as_written_until_the_input_is_edited():
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": 1.0, "y": [1, 2]}'}
    [model] = stored(plan_add([call]).append)
    assert model["parts"][0]["input"] == {"x": 1, "y": [1, 2]}  # parsed for readers (JSON as JavaScript writes it)
    assert model["metadata"][FORMAT_KEY]["items"][0]["item"]["arguments"] == '{"x": 1.0, "y": [1, 2]}'
    assert items_of([model]) == [call]
    model["parts"][0]["input"] = {"x": 2}
    assert items_of([model])[0]["arguments"] == '{"x":2}'


def test_numbers_javascript_json_would_change_come_back_from_the_items_own_json():
    item = {"type": "custom", "scores": [1.0, -0.0, 2**60, 1e21, 0.25], "nested": {"big": -(2**55)}}
    [model] = stored(plan_add([item]).append)
    assert model["parts"][0]["data"]["scores"][:3] == [1, 0, 1152921504606847000]  # what readers see
    assert same(items_of([model]), [item])
    assert "exact" not in stored(plan_add([{"type": "custom", "scores": [0.25, 7]}]).append)[0][
        "metadata"][FORMAT_KEY]["items"][0]


def test_an_output_in_a_later_batch_continues_the_message_holding_its_call():
    first = stored(plan_add(WEATHER[:4], new_id=numbered_ids()).append)
    later = WEATHER[4:]
    assert needs_leaf(later) is True
    assert needs_leaf(WEATHER) is False
    plan = plan_add(later, first[-1], new_id=numbered_ids())
    assert plan.append == []
    assert plan.update["id"] == "m2"
    messages = [first[0], *stored([plan.update])]
    assert same(items_of(messages), WEATHER)
    assert [p.get("state") for p in messages[1]["parts"]] == [None, "output-available", "output-available", None]


def test_an_output_whose_call_is_not_in_its_message_is_kept_whole():
    orphan = {"type": "function_call_output", "call_id": "call_gone", "output": "late"}
    [message] = stored(plan_add([orphan]).append)
    assert message["parts"] == [{"type": "data-openai-item", "data": orphan}]
    # The leaf is a user message: nothing to continue.
    user = stored(plan_add([WEATHER[0]]).append)[0]
    plan = plan_add([orphan], user)
    assert plan.update is None and len(plan.append) == 1


def test_a_big_batch_is_cut_into_messages_and_an_output_then_joins_no_earlier_message(monkeypatch):
    monkeypatch.setattr(openai_items, "GROUP_MAX_BYTES", 200)
    items = WEATHER[1:]
    messages = stored(plan_add(items).append)
    assert len(messages) > 1
    assert same(items_of(messages), items)
    assert same(pop_all(messages), items[::-1])


def test_popping_an_output_leaves_its_call_waiting():
    model = stored(plan_add(WEATHER[1:6]).append)[0]
    item, rest = plan_pop(model)
    assert item == WEATHER[5]
    assert rest["parts"][2] == {"type": "tool-get_weather", "toolCallId": "call_oslo", "toolName": "get_weather",
                                "state": "input-available", "input": {"city": "Oslo"}}
    assert items_of([rest]) == WEATHER[1:5]


def test_messages_written_elsewhere_are_read_from_their_parts():
    foreign = [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Find my booking."}]},
        {"id": "a1", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "reasoning", "text": "Search first."},
            {"type": "tool-search_context", "toolCallId": "t1", "toolName": "search_context",
             "state": "output-available", "input": {"label": "kb", "query": "booking"}, "output": "[b1] ZFA04Y"},
            {"type": "dynamic-tool", "toolCallId": "t2", "toolName": "cancel", "state": "output-error",
             "input": {"code": "ZFA04Y"}, "errorText": "not allowed"},
            {"type": "tool-lookup", "toolCallId": "t3", "state": "input-available", "input": {"n": 1}},
            {"type": "text", "text": "Your booking is ZFA04Y."},
            {"type": "data-openai-item", "data": {"type": "compaction_trigger"}},
        ]},
        {"id": "compaction_c1", "role": "assistant", "parts": [{"type": "text", "text": "## Summary"}]},
    ]
    assert items_of(foreign) == [
        {"role": "user", "content": "Find my booking."},
        {"type": "function_call", "call_id": "t1", "name": "search_context",
         "arguments": '{"label":"kb","query":"booking"}'},
        {"type": "function_call_output", "call_id": "t1", "output": "[b1] ZFA04Y"},
        {"type": "function_call", "call_id": "t2", "name": "cancel", "arguments": '{"code":"ZFA04Y"}'},
        {"type": "function_call_output", "call_id": "t2", "output": "not allowed"},
        {"type": "function_call", "call_id": "t3", "name": "lookup", "arguments": '{"n":1}'},
        {"role": "assistant", "content": "Your booking is ZFA04Y."},
        {"type": "compaction_trigger"},
        {"role": "assistant", "content": "## Summary"},
    ]
    # Popping edits the parts: the data part goes, then the text, ...; a merged output reverts its part.
    item, rest = plan_pop(foreign[1])
    assert item == {"type": "compaction_trigger"} and len(rest["parts"]) == 6
    for _ in range(3):
        item, rest = plan_pop(rest)
    assert item == {"type": "function_call_output", "call_id": "t2", "output": "not allowed"}
    assert rest["parts"][3] == {"type": "dynamic-tool", "toolCallId": "t2", "toolName": "cancel",
                                "state": "input-available", "input": {"code": "ZFA04Y"}}


def test_a_message_whose_entries_no_longer_match_its_parts_is_read_from_its_parts():
    model = stored(plan_add(WEATHER[1:]).append)[0]
    model["parts"].append({"type": "text", "text": "Added by another client."})
    assert items_of([model])[-2:] == [{"role": "assistant", "content": "Paris is sunny."},
                                      {"role": "assistant", "content": "Added by another client."}]
    model["parts"] = model["parts"][:2]
    assert [v.item.get("type") for v in message_views(model)] == ["function_call", "function_call_output"]
    for bad in ([[0]], [True], [-1], "0", [0, 7]):
        broken = stored(plan_add(WEATHER[:1]).append)[0]
        broken["metadata"][FORMAT_KEY]["items"][0]["parts"] = bad
        assert items_of([broken]) == [WEATHER[0]], bad  # read from the part instead


@pytest.mark.parametrize(("items", "error", "text"), [
    ([{"role": "user", "content": "ok"}, "no"], TypeError, "items[1] must be a dict (a Responses input item), not str"),
    ([{"role": "user", "content": object()}], TypeError, "items[0] is not JSON data: Object of type object"),
    ([{"type": "x", "v": float("nan")}], ValueError, "items[0] is not JSON data: Out of range float values"),
])
def test_items_that_are_not_json_are_refused_before_anything_is_planned(items, error, text):
    with pytest.raises(error) as raised:
        plan_add(items)
    assert str(raised.value).startswith(text)
