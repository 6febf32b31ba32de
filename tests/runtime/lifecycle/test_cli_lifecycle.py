"""``durable-sessions delete | export | import (archive) | gc | backup | restore`` against real server processes
(runtime/cli/lifecycle.py)."""

import json
import subprocess
import uuid

import httpx
import pytest

from tests.support.processes import cli_command, cli_env, server_process

TOKEN = "cli-lifecycle-token"


def msg(mid, text=None):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text or f"words of {mid}"}]}


def cli(server, *args, url=True):
    extra = ["--url", server.url] if url else []
    return subprocess.run([*cli_command(), *args, *extra], env=cli_env(TOKEN), capture_output=True, text=True,
                          timeout=120)


def append(server, name, messages, parent=None):
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        body = {"messages": messages} if parent is None else {"messages": messages, "parentId": parent}
        answer = http.post(f"/v1/sessions/{name}/messages:batch", json=body)
        assert answer.status_code == 201, answer.text


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("cli-lifecycle") / "data"
    with server_process(data, token=TOKEN) as server:
        yield server


def test_export_to_a_file_and_import_it_as_a_copy(server, tmp_path):
    append(server, "source", [msg(f"s{i}") for i in range(4)])
    append(server, "source", [msg("fork", "a branch off s1")], parent="s1")
    archive = tmp_path / "source.jsonl"
    done = cli(server, "export", "source", "-o", str(archive))
    assert done.returncode == 0, done.stderr
    lines = archive.read_text().splitlines()
    assert json.loads(lines[0])["format"] == "durable-sessions/session-archive"
    assert json.loads(lines[-1]) == {"type": "end", "records": len(lines) - 2}
    done = cli(server, "import", str(archive), "--prefix", "copy-of-")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "imported session copy-of-source: 5 messages stored"
    again = cli(server, "export", "copy-of-source")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[1:] == lines[1:]  # all but the header (its session id and time)
    assert json.loads(again.stdout.splitlines()[0])["sessionId"] == "copy-of-source"


def test_a_bad_archive_fails_with_one_line_naming_the_line(server, tmp_path):
    append(server, "to-break", [msg("b1"), msg("b2")])
    archive = tmp_path / "broken.jsonl"
    good = cli(server, "export", "to-break").stdout.splitlines()
    archive.write_text("\n".join([good[0], good[1], "{not json", *good[2:]]) + "\n")
    done = cli(server, "import", str(archive), "--prefix", "broken-")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "durable-sessions import: ArchiveError: line 3: not JSON (Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1))"]
    archive.write_text("\n".join(good[:-1]) + "\n")  # cut short: no end record
    done = cli(server, "import", str(archive), "--prefix", "broken-")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"durable-sessions import: ArchiveError: line {len(good)}: the archive "
                                        "ends before its end record: the file was cut short"]
    assert cli(server, "history", "broken-to-break").returncode == 1  # nothing stored: unknown session


def test_history_json_output_is_refused_not_imported_without_its_parts(server, tmp_path):
    append(server, "printed", [msg("p1"), msg("p2"), msg("p3")])
    printed = tmp_path / "printed.json"
    printed.write_text(cli(server, "history", "printed", "--raw", "--json").stdout)
    done = cli(server, "import", str(printed), "--no-progress")
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert "holds stored session messages" in done.stderr and "durable-sessions export" in done.stderr
    assert cli(server, "history", "printed-0").returncode == 1


def test_delete_then_the_session_is_unknown(server):
    marker = uuid.uuid4().hex
    append(server, "doomed", [msg("d1", marker)])
    done = cli(server, "delete", "doomed")
    assert (done.returncode, done.stdout.strip()) == (0, "deleted session doomed")
    again = cli(server, "delete", "doomed")
    assert again.returncode == 1
    assert again.stderr.splitlines()[0] == "durable-sessions delete: SessionNotFoundError: no session 'doomed' on this host"
    assert "doomed" not in cli(server, "list").stdout
    assert not [p for p in server.data_dir.rglob("*") if p.is_file() and marker.encode() in p.read_bytes()]


def test_export_of_an_unknown_session_exits_1(server):
    done = cli(server, "export", "never-was")
    assert done.returncode == 1
    assert done.stderr.splitlines()[0] == "durable-sessions export: SessionNotFoundError: no session 'never-was' on this host"


def test_gc_without_retention_deletes_nothing(server):
    append(server, "old-or-not", [msg("o1")])
    for args in (("gc", "--dry-run"), ("gc",)):
        done = cli(server, *args)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "retention is off ([retention] delete_idle_after_days is not set): nothing deleted"
    assert "old-or-not" in cli(server, "list").stdout
