"""``serve --postgres``: export and import of a session whose rows are in Postgres, with a real
``durable-sessions serve --postgres`` process (issue 27, item 2): a session deleted and imported again
exports the same archive, byte for byte apart from ``exportedAt``, and so does a copy imported beside it (an
automatically compacted one too: compaction ids are unique per session); a bad archive or a clash stores nothing."""

from __future__ import annotations

import json
import subprocess
import uuid

import httpx
import psycopg

from tests.runtime.lifecycle.rich_session import CONFIG, same_apart_from_header, write_rich_session
from tests.support.processes import cli_command, cli_env, server_process

TOKEN = "archive-postgres-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NDJSON = {"Content-Type": "application/x-ndjson"}


def session_rows(dsn: str, session_id: str) -> int:
    """Rows of the session's messages and config in Postgres (by the catalog's name for it)."""
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT session_id FROM durable_sessions_catalog WHERE name = %s", (session_id,)).fetchall()
        if not found:
            return 0
        return conn.execute("SELECT (SELECT count(*) FROM assistant_messages WHERE session_id = %(s)s) + "
                            "(SELECT count(*) FROM cf_agents_context_blocks WHERE label LIKE '%%' || %(s)s)",
                            {"s": found[0][0]}).fetchone()[0]


async def test_a_session_deleted_and_imported_again_exports_the_same_archive(tmp_path, pg_empty_dsn):
    marker = f"archive-{uuid.uuid4().hex}"
    session, copy = f"orig-{marker}", f"copy-{marker}"
    config = tmp_path / "sessions.toml"
    config.write_text(CONFIG, encoding="utf-8")
    with server_process(tmp_path / "data", token=TOKEN,
                        extra=["--postgres", pg_empty_dsn, "--config", str(config)]) as server:
        async with httpx.AsyncClient(headers=AUTH, timeout=60) as http:
            base = f"{server.url}/v1/sessions"
            assert (await http.get(f"{base}/{session}/export")).status_code == 404
            await write_rich_session(http, server.url, session, marker)
            exported = await http.get(f"{base}/{session}/export")
            assert exported.status_code == 200, exported.text
            archive = exported.text
            records = [json.loads(line) for line in archive.splitlines()]
            assert [r["type"] for r in records].count("message") == 6
            assert {(r["type"], r.get("label") or r.get("key")) for r in records if r["type"] in (
                "contextBlock", "searchEntry", "config")} == {
                ("contextBlock", "memory"), ("contextBlock", "_system_prompt"), ("searchEntry", "kb"),
                ("config", "metadata"), ("config", "active_leaf")}  # no session-id suffix, no actor_name
            second = await http.get(f"{base}/{session}/export")
            same_apart_from_header(archive, second.text, session)
            history = (await http.get(f"{base}/{session}/messages")).json()["messages"]
            prompt = (await http.get(f"{base}/{session}/system-prompt")).json()

            # Beside the original, compaction included (its id is unique per session): exports as it came.
            answer = await http.post(f"{base}/{copy}/import", content=archive.encode(), headers=NDJSON)
            assert (answer.status_code, answer.json()) == (201, {"imported": 6}), answer.text
            same_apart_from_header(archive, (await http.get(f"{base}/{copy}/export")).text, copy)
            assert (await http.get(f"{base}/{copy}/messages")).json()["messages"] == history

            assert (await http.delete(f"{base}/{session}")).status_code == 204
            assert (await http.get(f"{base}/{session}/export")).status_code == 404
            answer = await http.post(f"{base}/{session}/import", content=archive.encode(), headers=NDJSON)
            assert (answer.status_code, answer.json()) == (201, {"imported": 6}), answer.text
            again = await http.get(f"{base}/{session}/export")
            same_apart_from_header(archive, again.text, session)
            assert (await http.get(f"{base}/{session}/messages")).json()["messages"] == history
            assert (await http.get(f"{base}/{session}/system-prompt")).json() == prompt
            listed = {entry["id"] for entry in (await http.get(f"{base}")).json()["sessions"]}
            assert listed == {session, copy}

            refused = await http.post(f"{base}/{session}/import", content=archive.encode(), headers=NDJSON)
            assert refused.status_code == 409 and refused.json()["error"]["type"] == "ConflictError"
            assert (await http.get(f"{base}/{session}/export")).text.split("\n")[1:] == archive.split("\n")[1:]


#: Automatic compaction (the extractive summarizer, the default) after a few hundred estimated tokens.
COMPACTING = """
[session.compaction]
threshold = 300
protect_head = 1
tail_token_budget = 60
"""


async def test_an_automatically_compacted_session_is_copied_beside_itself_with_the_cli(tmp_path, pg_empty_dsn):
    """The README's ``import --prefix copy-`` with the sessions in Postgres: the copy of a session that was
    compacted on its own lands in the same database as the original; both export the same records."""
    config = tmp_path / "sessions.toml"
    config.write_text(COMPACTING, encoding="utf-8")
    with server_process(tmp_path / "data", token=TOKEN,
                        extra=["--postgres", pg_empty_dsn, "--config", str(config)]) as server:
        with httpx.Client(headers=AUTH, timeout=60) as http:
            base = f"{server.url}/v1/sessions"
            for i in range(12):
                text = f"turn {i}: " + " ".join(f"word{i}x{j}" for j in range(40))
                stored = http.post(f"{base}/chat-42/messages", json={"message": {
                    "id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "parts": [{"type": "text",
                                                                                             "text": text}]}})
                assert stored.status_code == 201, stored.text
            compactions = http.get(f"{base}/chat-42/compactions").json()["compactions"]
            assert compactions, "the session was not compacted automatically"
            history = http.get(f"{base}/chat-42/messages").json()["messages"]
            assert history[1]["id"] == f"compaction_{compactions[-1]['id']}"

            archive = tmp_path / "chat-42.jsonl"
            exported = subprocess.run([*cli_command(), "export", "chat-42", "-o", str(archive), "--url", server.url],
                                      env=cli_env(TOKEN), capture_output=True, text=True, timeout=120)
            assert exported.returncode == 0, exported
            imported = subprocess.run([*cli_command(), "import", str(archive), "--prefix", "copy-", "--url",
                                       server.url], env=cli_env(TOKEN), capture_output=True, text=True, timeout=120)
            assert imported.returncode == 0, imported
            assert imported.stdout.strip() == "imported session copy-chat-42: 12 messages stored"

            original = archive.read_text(encoding="utf-8")
            same_apart_from_header(original, http.get(f"{base}/copy-chat-42/export").text, "copy-chat-42")
            same_apart_from_header(original, http.get(f"{base}/chat-42/export").text, "chat-42")  # untouched
            assert http.get(f"{base}/copy-chat-42/compactions").json()["compactions"] == compactions
            assert http.get(f"{base}/copy-chat-42/messages").json()["messages"] == history
        with psycopg.connect(pg_empty_dsn) as conn:
            ids = conn.execute("SELECT id, count(DISTINCT session_id) FROM assistant_compactions GROUP BY id").fetchall()
        assert sorted(ids) == sorted((c["id"], 2) for c in compactions)


async def test_a_bad_archive_names_its_line_and_stores_nothing_in_postgres(tmp_path, pg_empty_dsn):
    with server_process(tmp_path / "data", token=TOKEN, extra=["--postgres", pg_empty_dsn]) as server:
        async with httpx.AsyncClient(headers=AUTH, timeout=60) as http:
            base = f"{server.url}/v1/sessions"
            stored = await http.post(f"{base}/src/messages:batch", json={"messages": [
                {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"hi {i}"}]} for i in range(3)]})
            assert stored.status_code == 201, stored.text
            archive = (await http.get(f"{base}/src/export")).text
            lines = archive.split("\n")
            bad_time = "\n".join([*lines[:3], lines[3].replace('"createdAt":"', '"createdAt":"yesterday '), *lines[4:]])
            nul = "\n".join([*lines[:2], lines[2].replace('"parentId":"m0"', '"parentId":"m\\u00000"'), *lines[3:]])
            cut = "\n".join(lines[:-2]) + "\n"
            for body, expected in ((bad_time, "line 4: message.createdAt must be a UTC time"),
                                   (nul, "line 3: message.parentId holds a NUL character"),
                                   (cut, "line 6: the archive ends before its end record")):
                answer = await http.post(f"{base}/dst/import", content=body.encode(), headers=NDJSON)
                assert answer.status_code == 400, answer.text
                assert answer.json()["error"]["message"].startswith(expected), answer.text
                assert session_rows(pg_empty_dsn, "dst") == 0
                assert (await http.get(f"{base}/dst/export")).status_code == 404
            # Refused by the session while the messages stream into Postgres (its rows are made inside the
            # COPY): the actor woke, so the name is known, but no row of the archive is stored.
            refused = "\n".join([*lines[:3], lines[3].replace('"role":"user"', '"role":7'), *lines[4:]])
            answer = await http.post(f"{base}/dst/import", content=refused.encode(), headers=NDJSON)
            assert answer.status_code == 400, answer.text
            assert "messages[2].role must be a string" in answer.json()["error"]["message"], answer.text
            assert session_rows(pg_empty_dsn, "dst") == 0
            assert (await http.post(f"{base}/dst/import", content=archive.encode(), headers=NDJSON)).status_code == 201
            same_apart_from_header(archive, (await http.get(f"{base}/dst/export")).text, "dst")

        # The command line: one line naming the bad record, exit 1; a good archive is stored.
        bad = tmp_path / "bad.jsonl"
        bad.write_text(bad_time, encoding="utf-8")
        good = tmp_path / "good.jsonl"
        good.write_text(archive, encoding="utf-8")
        failed = subprocess.run([*cli_command(), "import", str(bad), "--prefix", "cli-", "--url", server.url],
                                env=cli_env(TOKEN), capture_output=True, text=True, timeout=120)
        assert failed.returncode == 1, failed
        assert failed.stderr.count("\n") == 1 and "line 4: message.createdAt must be a UTC time" in failed.stderr
        done = subprocess.run([*cli_command(), "import", str(good), "--prefix", "cli-", "--url", server.url],
                              env=cli_env(TOKEN), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done
        assert done.stdout.strip() == "imported session cli-src: 3 messages stored"
        with httpx.Client(headers=AUTH, timeout=60) as http:
            same_apart_from_header(archive, http.get(f"{server.url}/v1/sessions/cli-src/export").text, "cli-src")
