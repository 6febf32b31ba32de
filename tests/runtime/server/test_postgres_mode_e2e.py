"""``serve --postgres`` with real processes: Postgres is the truth, whatever the data folder holds.

* sessions written through one host are served whole -- history, branches,
  blocks, the frozen prompt, search, loaded skills, metadata, compactions --
  by another host started on a new, empty data folder against the same
  database, and listed there (``GET /v1/sessions`` and ``durable-sessions list``),
  and so are a manager's registry and sessions;
* a data folder holding single-host sessions is refused by ``serve --postgres``
  (exit 2, one line naming the folder), and a folder a ``--postgres`` host used
  is refused by ``serve`` without it: neither silently shadows the other.
"""

from __future__ import annotations

import json

import pytest
import trio

from runtime.client import SessionsClient
from tests.runtime.server.test_e2e_server import TOKEN, _cli
from tests.support.processes import server_process

CONFIG = """
[[session.blocks]]
label = "memory"
kind = "writable"

[[session.blocks]]
label = "skills"
kind = "skills"
path = "{skills}"
"""


def msg(message_id, words, role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": words}]}


@pytest.fixture
def config(tmp_path):
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "pirate.md").write_text("Say arr.\n", encoding="utf-8")
    path = tmp_path / "sessions.toml"
    path.write_text(CONFIG.format(skills=skills), encoding="utf-8")
    return path


async def _write(url):
    async with SessionsClient(url, token=TOKEN) as client:
        chat = client.session("trip-1")
        await chat.append_message(msg("m1", "book flight HAT123 to Lisbon"))
        await chat.append_message(msg("m2", "which seat?", "assistant"))
        await chat.append_message(msg("m3", "aisle please"))
        await chat.append_message(msg("b3", "window please"), "m2")  # a second branch at m2
        await chat.append_message(msg("m4", "done", "assistant"), "m3")  # back on the first branch
        await chat.replace_context_block("memory", "likes aisle seats")
        await chat.execute_tool("load_context", {"label": "skills", "key": "pirate"})
        await chat.set_metadata({"customer": "ana"})
        await chat.add_compaction("the booking so far", "m1", "m2")
        prompt = await chat.freeze_system_prompt()
        await client.session("trip-2").append_message(msg("x1", "hello"))
        manager = client.manager("ana")
        row = await manager.create("planning")
        await manager.append(row["id"], msg("p1", "flights to Lisbon"))
        return prompt


async def _read(url):
    async with SessionsClient(url, token=TOKEN) as client:
        chat = client.session("trip-1")
        return {
            "raw": [m["id"] for m in await chat.get_history(overlays=False)],
            "branches": sorted(m["id"] for m in await chat.get_branches("m2")),
            "memory": (await chat.get_context_block("memory"))["content"],
            "prompt": await chat.freeze_system_prompt(),
            "search": [hit["id"] for hit in await chat.search("HAT123")],
            "skills": await chat.get_loaded_skill_keys(),
            "metadata": await chat.get_metadata(),
            "compactions": [c["summary"] for c in await chat.get_compactions()],
            "listed": (await client.list_sessions())["sessions"],
            "managed": [(r["name"], [m["id"] for m in await client.manager("ana").get_history(r["id"])])
                        for r in await client.manager("ana").list()],
        }


def test_a_new_host_on_an_empty_folder_serves_every_session_in_postgres(tmp_path, pg_dsn, config):
    extra = ("--postgres", pg_dsn, "--config", str(config))
    with server_process(tmp_path / "first", token=TOKEN, extra=extra) as first:
        prompt = trio.run(_write, first.url)
        before = trio.run(_read, first.url)
    with server_process(tmp_path / "second", token=TOKEN, extra=extra) as second:  # a new, empty folder
        after = trio.run(_read, second.url)
        listed = _cli("list", "--url", second.url, "--json")
    assert before["raw"] == ["m1", "m2", "m3", "m4"]
    assert after["raw"] == before["raw"]
    assert after["branches"] == before["branches"] == ["b3", "m3"]
    assert after["memory"] == "likes aisle seats"
    assert after["prompt"] == prompt and "likes aisle seats" in prompt
    assert after["search"] == ["m1"]
    assert after["skills"] == before["skills"] and after["skills"]
    assert after["metadata"] == {"customer": "ana"}
    assert after["compactions"] == ["the booking so far"]
    assert after["managed"] == before["managed"] == [("planning", ["p1"])]  # a manager's registry too
    # the listing is the database's: same counts and times on both hosts (reads moved nothing)
    strip = [{k: v for k, v in s.items() if k != "active"} for s in after["listed"]]
    assert strip == [{k: v for k, v in s.items() if k != "active"} for s in before["listed"]]
    assert [(s["id"], s["messages"], s["compactions"], s["compactedThrough"]) for s in after["listed"]] == \
        [("trip-2", 1, 0, None), ("trip-1", 5, 1, "m2")]
    assert listed.returncode == 0, listed.stderr
    assert [s["id"] for s in json.loads(listed.stdout)] == ["trip-2", "trip-1"]


async def _append_one(url):
    async with SessionsClient(url, token=TOKEN) as client:
        await client.session("local").append_message(msg("m1", "kept on this host"))


def test_neither_mode_silently_shadows_the_other(tmp_path, pg_dsn):
    single = tmp_path / "single"
    with server_process(single, token=TOKEN) as host:
        trio.run(_append_one, host.url)
    refused = _cli("serve", "--bind", "127.0.0.1:0", "--data", str(single), "--postgres", pg_dsn)
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and str(single) in lines[0] and "--postgres would hide them" in lines[0]
    assert "use a new --data folder" in lines[0]

    used = tmp_path / "pg"
    with server_process(used, token=TOKEN, extra=("--postgres", pg_dsn)) as host:
        trio.run(_append_one, host.url)
    refused = _cli("serve", "--bind", "127.0.0.1:0", "--data", str(used))
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and str(used) in lines[0] and "start with --postgres URL" in lines[0]
    with server_process(used, token=TOKEN, extra=("--postgres", pg_dsn)):  # and with --postgres it starts again
        pass
