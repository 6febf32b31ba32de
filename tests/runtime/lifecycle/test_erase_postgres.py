"""``serve --postgres``: ``DELETE /v1/sessions/{id}`` deletes every row of the session in Postgres -- messages,
compactions, config (name, metadata), its context blocks, cached prompt and search entries, its catalog row --
and the actor's file, with a real ``durable-sessions serve --postgres`` process (issue 27, item 1)."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import psycopg

from tests.runtime.lifecycle.rich_session import CONFIG
from tests.support.processes import server_process

TOKEN = "erase-postgres-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TABLES = ("assistant_messages", "assistant_compactions", "assistant_config", "cf_agents_context_blocks",
          "cf_agents_search_entries", "durable_sessions_catalog", "assistant_sessions")


def message(message_id: str, text: str) -> dict:
    return {"message": {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}}


def rows_holding(dsn: str, marker: str) -> dict[str, int]:
    """Rows of each session table whose text holds ``marker`` (the whole row as text)."""
    with psycopg.connect(dsn) as conn:
        return {table: conn.execute(f"SELECT count(*) FROM {table} t WHERE t::text LIKE %s",
                                    (f"%{marker}%",)).fetchone()[0] for table in TABLES}


def files_holding(folder: Path, marker: str) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file() and marker.encode() in path.read_bytes()]


def test_delete_removes_every_row_of_the_session_and_its_file(tmp_path, pg_empty_dsn):
    doomed, kept = f"doomed-{uuid.uuid4().hex}", f"kept-{uuid.uuid4().hex}"
    marker, kept_marker = f"erase-me-{uuid.uuid4().hex}", f"keep-me-{uuid.uuid4().hex}"
    config = tmp_path / "sessions.toml"
    config.write_text(CONFIG, encoding="utf-8")
    data = tmp_path / "data"
    with server_process(data, token=TOKEN, extra=["--postgres", pg_empty_dsn, "--config", str(config)]) as server:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as http:
            for session, text in ((doomed, marker), (kept, kept_marker)):
                for i in range(2):
                    assert http.post(f"/v1/sessions/{session}/messages",
                                     json=message(f"m{i}", f"{text} #{i}")).status_code == 201
                assert http.put(f"/v1/sessions/{session}/context/memory",
                                json={"content": f"remember {text}"}).status_code == 200
                answer = http.post(f"/v1/sessions/{session}/tools/set_context", json={
                    "label": "kb", "content": f"fact {text}", "metadata": {"title": "a fact"}})
                assert answer.status_code == 200 and "Indexed" in answer.json()["result"], answer.text
                assert http.post(f"/v1/sessions/{session}/rpc", json={
                    "method": "add_compaction", "params": [f"summary {text}", "m0", "m1"]}).status_code == 200
                assert http.post(f"/v1/sessions/{session}/rpc", json={
                    "method": "set_metadata", "params": [{"title": text}]}).status_code == 200
                assert http.get(f"/v1/sessions/{session}/system-prompt").status_code == 200
            before = rows_holding(pg_empty_dsn, marker)
            for table in ("assistant_messages", "assistant_compactions", "assistant_config",
                          "cf_agents_context_blocks", "cf_agents_search_entries"):
                assert before[table] >= 1, (table, before)  # the searches below can find the marker
            assert rows_holding(pg_empty_dsn, doomed)["durable_sessions_catalog"] == 1

            deleted = http.delete(f"/v1/sessions/{doomed}")
            assert deleted.status_code == 204, deleted.text
            assert deleted.content == b""

            assert rows_holding(pg_empty_dsn, marker) == dict.fromkeys(TABLES, 0)
            assert rows_holding(pg_empty_dsn, doomed) == dict.fromkeys(TABLES, 0)
            assert files_holding(data, marker) == [] and files_holding(data, doomed) == []
            assert rows_holding(pg_empty_dsn, kept_marker) == before  # the other session is untouched
            listed = http.get("/v1/sessions").json()["sessions"]
            assert [entry["id"] for entry in listed] == [kept]
            assert http.get(f"/v1/sessions/{doomed}/messages").json()["messages"] == []
            assert kept_marker in str(http.get(f"/v1/sessions/{kept}/messages").json()["messages"])

            again = http.delete(f"/v1/sessions/{doomed}")
            assert again.status_code == 404 and again.json()["error"]["type"] == "SessionNotFoundError"
            never = http.delete("/v1/sessions/never-written")
            assert never.status_code == 404

            assert http.post(f"/v1/sessions/{doomed}/messages", json=message("new", "a fresh start")).status_code == 201
            assert [m["id"] for m in http.get(f"/v1/sessions/{doomed}/messages").json()["messages"]] == ["new"]
            assert rows_holding(pg_empty_dsn, marker) == dict.fromkeys(TABLES, 0)
