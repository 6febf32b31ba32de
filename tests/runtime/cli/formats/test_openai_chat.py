"""OpenAI chat messages and tau-bench trajectories -> Session messages."""

import json

import pytest

from runtime.cli.formats import FormatError, ImportedMessage, iter_tool_parts
from runtime.cli.formats.openai_chat import (
    DATA_PART,
    convert_openai_chat,
    convert_openai_conversation,
    load_openai_chat,
)


@pytest.fixture
def tau_sample(test_data):
    return test_data / "openai_chat" / "tau-bench-airline-3.json"


def test_tau_bench_trajectories_become_one_session_each(tau_sample):
    sessions = load_openai_chat(tau_sample)
    assert [s.session_id for s in sessions] == ["task-38-trial-2", "task-48-trial-1", "task-44-trial-3"]
    assert [len(s.messages) for s in sessions] == [9, 8, 6]
    assert [s.source for s in sessions] == ["openai-chat"] * 3
    assert sessions[0].metadata["tauBench"]["reward"] == 1.0
    assert sessions[0].metadata["tauBench"]["task_id"] == 38
    assert sessions[0].metadata["tauBench"]["trial"] == 2
    assert sessions[2].metadata["tauBench"]["info"]["task"]["user_id"] == json.loads(tau_sample.read_text())[2][
        "info"
    ]["task"]["user_id"]


def test_tool_messages_fold_into_their_call_parts(tau_sample):
    session = load_openai_chat(tau_sample)[1]
    ids = [m.message["id"] for m in session.messages]
    assert ids == ["msg-0", "msg-1", "msg-2", "msg-3", "msg-4", "msg-6", "msg-7", "msg-8"]
    assert [m.parent_id for m in session.messages] == [None] + ids[:-1]
    call = session.messages[4].message
    assert call["role"] == "assistant"
    assert call["parts"] == [
        {
            "type": "tool-get_reservation_details",
            "toolCallId": "call_Mxn2CmKacuvxn7cEyJA5chIF",
            "toolName": "get_reservation_details",
            "state": "output-available",
            "input": {"reservation_id": "EUJUY6"},
            "output": json.loads(tau_sample.read_text())[1]["traj"][5]["content"],
        }
    ]
    assert call["parts"][0]["output"].startswith('{"reservation_id": "EUJUY6", "user_id": "lucas_brown_4047"')
    last = session.messages[-1].message
    assert last["parts"][0]["input"] == {
        "summary": "User Lucas Brown needs to change the date of a basic economy flight due to the passing of his "
        "wife. Reservation ID: EUJUY6. Requires human agent assistance for further support."
    }
    assert last["parts"][0]["output"] == "Transfer successful"


def test_assistant_text_and_tool_call_share_one_message(tau_sample):
    message = load_openai_chat(tau_sample)[0].messages[-1].message
    assert message["id"] == "msg-8"
    assert [p["type"] for p in message["parts"]] == ["text", "tool-transfer_to_human_agents"]
    assert message["parts"][0]["text"] == (
        "I can transfer you to a human agent who may be able to assist you further with your request. "
        "Please hold on for a moment while I do that."
    )
    assert message["parts"][1]["output"] == "Transfer successful"


def test_system_messages_stay_system_messages(tau_sample):
    first = load_openai_chat(tau_sample)[2].messages[0]
    assert first.parent_id is None
    assert first.message["role"] == "system"
    assert first.message["parts"][0]["text"].startswith("# Airline Agent Policy\n\nThe current time is 2024-05-15")
    assert load_openai_chat(tau_sample)[2].messages[1].message == {
        "id": "msg-1",
        "role": "user",
        "parts": [
            {
                "type": "text",
                "text": "Hi! I'm trying to find out how many total suitcases I can take on my upcoming flight. "
                "I'm quite sure I'm a gold member, if that helps.",
            }
        ],
    }


def test_a_reused_call_id_is_matched_to_the_latest_open_call():
    messages = [
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "a", "{}")]},
        {"role": "tool", "tool_call_id": "c1", "content": "first"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "b", '{"x": 1}')]},
        {"role": "tool", "tool_call_id": "c1", "content": "second"},
    ]
    parts = list(iter_tool_parts(convert_openai_conversation(messages, session_id="s")))
    assert [(p["toolName"], p["output"]) for p in parts] == [("a", "first"), ("b", "second")]


def test_parallel_calls_and_an_unanswered_call():
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None,
         "tool_calls": [_call("c1", "a", '{"n": 1}'), _call("c2", "b", "not json"), _call("c3", "c", None)]},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "B"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
    ]
    session = convert_openai_conversation(messages, session_id="s", id_prefix="m")
    assert [m.message["id"] for m in session.messages] == ["m-0", "m-1"]
    assert session.messages[1].message["parts"] == [
        {"type": "tool-a", "toolCallId": "c1", "toolName": "a", "state": "output-available", "input": {"n": 1},
         "output": "A"},
        {"type": "tool-b", "toolCallId": "c2", "toolName": "b", "state": "output-available", "input": "not json",
         "output": [{"type": "text", "text": "B"}]},
        {"type": "tool-c", "toolCallId": "c3", "toolName": "c", "state": "input-available", "input": {}},
    ]


def test_content_parts_reasoning_refusal_and_extra_keys():
    messages = [
        {"role": "developer", "content": "rules"},
        {"role": "user", "name": "ann", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
            {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"}},
            {"type": "file", "file": {"file_id": "file-1"}},
        ]},
        {"role": "assistant", "content": None, "refusal": "I can't.", "reasoning_content": "hmm"},
    ]
    out = [m.message for m in convert_openai_conversation(messages, session_id="s").messages]
    assert out[0] == {"id": "msg-0", "role": "system", "parts": [{"type": "text", "text": "rules"}]}
    assert out[1]["metadata"] == {"openai": {"name": "ann"}}
    assert out[1]["parts"] == [
        {"type": "text", "text": "look"},
        {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AAA"},
        {"type": "file", "mediaType": "image/*", "url": "https://example.com/a.jpg"},
        {"type": "file", "mediaType": "audio/wav", "url": "data:audio/wav;base64,UklG"},
        {"type": "file", "mediaType": "application/pdf", "url": "data:application/pdf;base64,JVBE",
         "filename": "a.pdf"},
        {"type": DATA_PART, "data": {"type": "file", "file": {"file_id": "file-1"}}},
    ]
    assert out[2]["parts"] == [{"type": "reasoning", "text": "hmm"}, {"type": "text", "text": "I can't."}]


def test_legacy_function_call_and_function_result():
    messages = [
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": '{"q": 2}'}},
        {"role": "function", "name": "f", "content": "42"},
    ]
    [item] = convert_openai_conversation(messages, session_id="s").messages
    assert item.message["parts"] == [
        {"type": "tool-f", "toolCallId": "msg-0-function_call", "toolName": "f", "state": "output-available",
         "input": {"q": 2}, "output": "42"}
    ]


def test_accepted_shapes_and_session_ids():
    convo = [{"role": "user", "content": "hi"}]
    assert [s.session_id for s in convert_openai_chat(convo)] == ["conversation-0"]
    assert [s.session_id for s in convert_openai_chat([convo, convo], session_prefix="x-")] == [
        "x-conversation-0", "x-conversation-1"]
    objects = [{"id": "a", "messages": convo}, {"id": "a", "messages": convo}, {"messages": convo}]
    assert [s.session_id for s in convert_openai_chat(objects)] == ["a", "a-2", "conversation-2"]
    assert [s.session_id for s in convert_openai_chat({"messages": convo})] == ["conversation-0"]
    assert convert_openai_chat([]) == []
    assert convert_openai_chat(convo)[0].messages == [
        ImportedMessage({"id": "msg-0", "role": "user", "parts": [{"type": "text", "text": "hi"}]}, None)
    ]


def test_tau_bench_ids_name_only_the_fields_a_trajectory_has():
    traj = [{"role": "user", "content": "hi"}]
    items = [{"task_id": 3, "trial": 0, "traj": traj}, {"task_id": 3, "traj": traj}, {"trial": 1, "traj": traj},
             {"traj": traj}, {"task_id": 3, "trial": None, "traj": traj}]
    assert [s.session_id for s in convert_openai_chat(items, session_prefix="t/")] == [
        "t/task-3-trial-0", "t/task-3", "t/conversation-2-trial-1", "t/conversation-3", "t/task-3-2"]


def test_jsonl_files_hold_one_conversation_per_line(tmp_path):
    path = tmp_path / "chats.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "a"}]}\n\n[{"role": "user", "content": "b"}]\n')
    sessions = load_openai_chat(path)
    assert [s.messages[0].message["parts"][0]["text"] for s in sessions] == ["a", "b"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("text", "expected a list or an object with 'messages', not str"),
        ([{"role": "user", "content": "a"}, 3], "conversation 0: message 1: a message must be an object, not int"),
        ([[{"role": "user", "content": "a"}], 3], "item 1: not a conversation"),
        ([[{"role": "wizard", "content": "a"}]], "conversation 0: message 0: unknown role 'wizard'"),
        ([[{"role": "tool", "tool_call_id": "x", "content": "a"}]],
         "conversation 0: message 0: tool message for tool_call_id 'x' answers no open call"),
        ([[{"role": "assistant", "tool_calls": [{"id": "c"}]}]],
         "conversation 0: message 0: each tool call needs an 'id' and a 'function'"),
        ([[{"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}]],
         "conversation 0: message 0: tool call 'c' has no function name"),
        ([[{"role": "user", "content": 5}]],
         "conversation 0: message 0: content must be a string, a list of parts or null, not int"),
        ([{"traj": "nope", "task_id": 1}], "conversation 0: a conversation must be a list of messages, not str"),
        ({"id": "x"}, "item 0: not a conversation"),
    ],
)
def test_malformed_input_raises_a_format_error_naming_the_place(data, message):
    with pytest.raises(FormatError, match=message):
        convert_openai_chat(data)


def test_a_file_that_is_not_json_raises_a_format_error(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{nope")
    with pytest.raises(FormatError, match="bad.json: not JSON"):
        load_openai_chat(path)


def test_the_whole_tau_bench_airline_file(shared_data):
    path = shared_data / "chat" / "tau-bench" / "gpt-4o-airline.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    sessions = load_openai_chat(path)
    input_messages = sum(len(t["traj"]) for t in raw)
    tool_messages = sum(1 for t in raw for m in t["traj"] if m["role"] == "tool")
    parts = [p for s in sessions for p in iter_tool_parts(s)]
    assert (input_messages, tool_messages) == (5308, 1164)
    assert len(sessions) == 200
    assert len({s.session_id for s in sessions}) == 200
    assert sum(len(s.messages) for s in sessions) == 5308 - 1164
    assert len(parts) == 1164
    assert all(p["state"] == "output-available" for p in parts)
    # every tool message's content landed, in order, on a call part
    assert [p["output"] for p in parts] == [m["content"] for t in raw for m in t["traj"] if m["role"] == "tool"]
    assert [p["toolName"] for p in parts] == [
        c["function"]["name"] for t in raw for m in t["traj"] for c in m.get("tool_calls") or []]


def _call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
