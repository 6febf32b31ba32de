"""The durable-sessions command (runtime.cli.main): argument handling, offline import, message display."""

import json

import pytest
import trio

from runtime import open_host
from runtime.cli.importer import read_conversations
from runtime.cli.main import build_parser, format_message, load_agent_class, main
from runtime.server.app import bind_sessions

TAU_3 = "openai_chat/tau-bench-airline-3.json"


def test_every_subcommand_parses_with_its_options():
    parser = build_parser()
    args = parser.parse_args(["serve", "--bind", "127.0.0.1:0", "--data", "d", "--idle-timeout", "2.5",
                              "--durability", "full", "--app", "m:C", "--token", "t", "--ready-file", "r.json"])
    assert (args.bind, str(args.data), args.idle_timeout, args.durability, args.app, args.token, str(args.ready_file)) \
        == ("127.0.0.1:0", "d", 2.5, "full", "m:C", "t", "r.json")
    args = parser.parse_args(["import", "f.json", "--prefix", "p-", "--url", "http://h:1", "--concurrency", "3"])
    assert (str(args.file), args.prefix, args.url, args.concurrency, args.format) == ("f.json", "p-", "http://h:1", 3,
                                                                                      "auto")
    assert parser.parse_args(["search", "s", "q", "--limit", "5"]).limit == 5
    assert parser.parse_args(["history", "s", "--json"]).json is True
    assert parser.parse_args(["hibernate", "a", "b"]).session_ids == ["a", "b"]
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--durability", "sometimes"])


def test_serve_refuses_a_public_bind_without_a_token(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("DURABLE_SESSIONS_TOKEN", raising=False)
    assert main(["serve", "--bind", "0.0.0.0:0", "--data", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err.startswith("durable-sessions serve: refusing to serve 0.0.0.0:0 without a token")
    assert not (tmp_path / "d").exists()


def test_serve_reports_bad_configuration_and_bad_app_classes(capsys, tmp_path):
    assert main(["serve", "--config", str(tmp_path / "nope.toml")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["serve", "--bind", "127.0.0.1:0", "--data", str(tmp_path / "d"), "--app", "json:JSONDecoder"]) == 2
    assert capsys.readouterr().err == (
        "durable-sessions serve: --app json:JSONDecoder is not a subclass of actors.Agent\n")


def test_load_agent_class():
    assert load_agent_class("actors.session_agent:SessionAgent").__name__ == "SessionAgent"
    for bad in ("nocolon", "no_such_module_zz:X", "actors:Nope"):
        with pytest.raises(Exception, match="--app"):
            load_agent_class(bad)


def test_offline_import_stores_every_message_once(capsys, test_data, tmp_path):
    source = test_data / TAU_3
    assert main(["import", str(source), "--data", str(tmp_path / "d"), "--no-progress"]) == 0
    assert capsys.readouterr().out == "imported 3 of 3 sessions: 23 messages stored, 0 already there\n"
    assert main(["import", str(source), "--data", str(tmp_path / "d"), "--no-progress"]) == 0
    assert capsys.readouterr().out == "imported 3 of 3 sessions: 0 messages stored, 23 already there\n"
    expected = {s.session_id: [m.message for m in s.messages] for s in read_conversations(source)}

    async def histories():
        async with open_host(tmp_path / "d") as host:
            namespace = bind_sessions(host)
            return {sid: await namespace.get_by_name(sid).get_history() for sid in expected}

    assert trio.run(histories) == expected


def test_import_of_a_file_that_is_not_a_conversation_is_a_usage_error(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hello": 1}), encoding="utf-8")
    assert main(["import", str(bad), "--data", str(tmp_path / "d"), "--no-progress"]) == 2
    assert capsys.readouterr().err.startswith("durable-sessions import: ")


def test_format_message_shows_text_and_tool_calls():
    message = {"id": "m7", "role": "assistant", "parts": [
        {"type": "text", "text": "Let me check.\nOne moment."},
        {"type": "tool-get_reservation_details", "toolName": "get_reservation_details", "toolCallId": "c1",
         "state": "output-available", "input": {"reservation_id": "ZFA04Y"}, "output": "{\"status\": \"ok\"}"},
    ]}
    assert format_message(message) == (
        'm7 [assistant] Let me check. One moment. | get_reservation_details({"reservation_id": "ZFA04Y"}) '
        '-> {"status": "ok"}')
