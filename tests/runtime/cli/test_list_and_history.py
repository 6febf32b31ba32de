"""``durable-sessions list`` and ``history`` (pages, raw, unknown sessions, a closed pipe) against a real server
process."""

import json
import subprocess

import httpx
import pytest

from tests.support.processes import cli_command, cli_env, server_process

TOKEN = "cli-list-token"


def msg(mid):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": f"words of {mid}"}]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("cli-list") / "data"
    with server_process(data, token=TOKEN) as server:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            for name, count in (("chat-1", 6), ("chat-2", 2), ("other", 1), ("long", 3000)):
                answer = http.post(f"/v1/sessions/{name}/messages:batch",
                                   json={"messages": [msg(f"{name}-m{i}") for i in range(count)]})
                assert answer.status_code == 201, answer.text
            answer = http.post("/v1/sessions/chat-1/rpc", json={"method": "add_compaction",
                                                               "params": ["m1..m3", "chat-1-m1", "chat-1-m3"]})
            assert answer.status_code == 200, answer.text
            http.post("/v1/actors:hibernate", json={})
        yield server


def cli(server, *args):
    return subprocess.run([*cli_command(), *args, "--url", server.url], env=cli_env(TOKEN), capture_output=True,
                          text=True, timeout=120)


def test_list_prints_every_session_newest_first(server):
    result = cli(server, "list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sorted(line.split()[-1] for line in lines) == ["chat-1", "chat-2", "long", "other"]
    chat = next(line for line in lines if line.endswith(" chat-1"))
    assert "      6 msgs    1 compactions" in chat
    times = [line.split()[0] for line in lines]
    assert times == sorted(times, reverse=True)


def test_list_with_a_prefix_a_limit_and_as_json(server):
    result = cli(server, "list", "--prefix", "chat-", "--json")
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    assert sorted((e["id"], e["messages"]) for e in listed) == [("chat-1", 6), ("chat-2", 2)]
    assert set(listed[0]) == {"id", "messages", "compactions", "compactedThrough", "createdAt", "updatedAt",
                              "state", "problem", "active"}
    result = cli(server, "list", "--limit", "1")
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 1


def test_history_pages_and_raw(server):
    newest = cli(server, "history", "chat-1", "--limit", "2")
    assert newest.returncode == 0, newest.stderr
    assert [line.split()[0] for line in newest.stdout.splitlines()] == ["chat-1-m4", "chat-1-m5"]
    older = cli(server, "history", "chat-1", "--limit", "2", "--before", "chat-1-m4", "--json")
    ids = [m["id"] for m in json.loads(older.stdout)]
    assert ids[0] == "chat-1-m0" and ids[1].startswith("compaction_")
    raw = cli(server, "history", "chat-1", "--raw", "--before", "chat-1-m3")
    assert [line.split()[0] for line in raw.stdout.splitlines()] == ["chat-1-m0", "chat-1-m1", "chat-1-m2"]
    whole = cli(server, "history", "chat-1")
    assert len(whole.stdout.splitlines()) == 4  # m0, the overlay, m4, m5


def test_history_of_an_unknown_session_says_so(server):
    result = cli(server, "history", "no-such-chat")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == "durable-sessions history: SessionNotFoundError: no session 'no-such-chat' on this host\n"


def test_bad_paging_options_are_usage_errors(server):
    result = cli(server, "history", "chat-1", "--limit", "0")
    assert result.returncode == 2
    assert "--limit: must be a whole number >= 1, not '0'" in result.stderr
    result = cli(server, "history", "chat-1", "--before", "chat-1-m2")  # inside the compaction m1..m3
    assert result.returncode == 1
    assert "before 'chat-1-m2' is not an entry of this history: compaction " in result.stderr


def test_a_before_no_message_has_is_an_error_not_an_empty_page(server):
    result = cli(server, "history", "chat-1", "--limit", "1", "--before", "nope")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == "durable-sessions history: MessageNotFoundError: message 'nope' not found\n"
    unknown = cli(server, "history", "no-such-chat", "--before", "nope")
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr == "durable-sessions history: SessionNotFoundError: no session 'no-such-chat' on this host\n"


def test_history_into_a_closed_pipe_exits_quietly(server):
    command = " ".join([*cli_command(), "history", "long", "--url", server.url])
    result = subprocess.run(["bash", "-c", f"set -o pipefail; {command} | head -n 2"], env=cli_env(TOKEN),
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.splitlines() == ["long-m0 [user] words of long-m0", "long-m1 [user] words of long-m1"]
    assert result.stderr == ""
    assert result.returncode == 0  # under pipefail too: a reader that has enough is no failure
