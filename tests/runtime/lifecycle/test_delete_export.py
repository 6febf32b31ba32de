"""Delete (erasure), export and import against a real server on loopback, with real files
(runtime/server/lifecycle_routes.py, runtime/host/eraser.py, common/archive.py)."""

import os
import uuid

import httpx
import pytest
import trio

from common.archive import parse_archive
from common.errors import ConflictError, InvalidInputError, SessionNotFoundError
from runtime import open_host
from runtime.client import SessionsClient
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ServerSettings
from storage.catalog import HostCatalog

TOKEN = "lifecycle-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def msg(mid, text=None):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text or f"text of {mid}"}]}


async def start(nursery, host):
    bind_sessions(host)
    urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                         task_status=task_status))
    return urls[0]


def files_holding(folder, marker):
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*")
                  if path.is_file() and marker.encode() in path.read_bytes())


async def test_delete_erases_every_byte_of_the_session_and_the_id_can_be_written_again(tmp_path, nursery):
    data = tmp_path / "data"
    marker = f"marker-{uuid.uuid4().hex}"
    session = f"erase-me-{marker}"
    async with open_host(data) as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            handle = client.session(session)
            await handle.append_messages([msg(f"m{i}", f"{marker} number {i}") for i in range(50)])
            await client.session("keeper").append_message(msg("k1", "nothing secret"))
            await client.hibernate()  # the catalog row (with the session's name) is written at hibernation
            await handle.append_message(msg("late", f"{marker} after waking"))  # awake again: WAL open
            assert files_holding(data, marker)  # the test can see the marker before
            await client.delete_session(session)
            assert files_holding(data, marker) == []
            listed = [entry["id"] async for entry in client.iter_sessions()]
            assert listed == ["keeper"]
            with pytest.raises(SessionNotFoundError):
                await client.describe_session(session)
            with pytest.raises(SessionNotFoundError):
                await client.delete_session(session)
            assert await handle.get_history() == []
            await handle.append_message(msg("again"))
            assert [m["id"] for m in await handle.get_history()] == ["again"]
            assert [m["id"] for m in await client.session("keeper").get_history()] == ["k1"]
    assert files_holding(data, f"{marker} number") == []  # the name is back (written again), the text is not
    catalog = HostCatalog.open(data)
    try:
        assert {entry.name for entry in catalog.entries()} == {"keeper", session}  # written again as new
    finally:
        catalog.close()


async def test_delete_of_an_unknown_session_is_404_and_creates_nothing(tmp_path, nursery):
    async with open_host(tmp_path / "data") as host:
        url = await start(nursery, host)
        async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
            response = await http.delete("/v1/sessions/never-written")
            assert response.status_code == 404
            assert response.json()["error"]["type"] == "SessionNotFoundError"
        assert not list((tmp_path / "data").rglob("*/*/*.sqlite3"))


async def test_delete_waits_for_running_calls_and_later_calls_start_afresh(tmp_path, nursery):
    async with open_host(tmp_path / "data") as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            handle = client.session("busy")
            await handle.append_message(msg("first"))
            async with trio.open_nursery() as inner:
                for i in range(20):
                    inner.start_soon(handle.append_message, msg(f"w{i}"))
                inner.start_soon(client.delete_session, "busy")
            history = [m["id"] for m in await handle.get_history()]
            assert "first" not in history  # erased; appends that came after the delete started afresh
            assert len(set(history)) == len(history)


async def build_rich_session(client, name):
    handle = client.session(name)
    await handle.append_messages([msg(f"a{i}") for i in range(5)])
    await handle.append_message(msg("branch-1", "another branch"), "a2")
    await handle.append_message(msg("branch-2", "deeper on the branch"), "branch-1")
    await handle.append_message(msg("root-2", "a second root"), None)
    await handle.append_message(msg("a5", "back on the main line"), "a4")
    await handle.add_compaction("summary of a1..a3", "a1", "a3")
    await handle.set_metadata({"title": "rich ünïcode", "n": 3})
    return handle


async def test_export_import_round_trips_byte_for_byte_but_the_export_time(tmp_path, nursery):
    async with open_host(tmp_path / "data") as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            source = await build_rich_session(client, "rich")
            first = await client.export_session("rich")
            records = parse_archive(first.splitlines())
            kinds = [r["type"] for r in records]
            assert kinds[0] == "header" and kinds[-1] == "end"
            assert kinds.count("message") == 9 and kinds.count("compaction") == 1
            assert {r["key"] for r in records if r["type"] == "config"} >= {"metadata"}
            copy = first.replace('"sessionId":"rich"', '"sessionId":"rich-copy"')
            assert await client.import_session("rich-copy", copy) == 9
            second = await client.export_session("rich-copy")
            target = client.session("rich-copy")
            assert await target.get_history() == await source.get_history()
            assert await target.get_branches("a2") == await source.get_branches("a2")
            assert await target.get_metadata() == await source.get_metadata()
            assert await target.search("branch") == await source.search("branch")
            with pytest.raises(ConflictError):
                await client.import_session("rich-copy", copy)
    strip = lambda text: [line for line in text.splitlines() if '"type":"header"' not in line]  # noqa: E731
    assert strip(second) == strip(first)
    assert parse_archive(second.splitlines())[0]["sessionId"] == "rich-copy"


async def test_a_truncated_or_malformed_archive_stores_nothing_and_names_the_line(tmp_path, nursery):
    async with open_host(tmp_path / "data") as host:
        url = await start(nursery, host)
        async with SessionsClient(url, token=TOKEN) as client:
            await build_rich_session(client, "rich")
            lines = (await client.export_session("rich")).splitlines()
            with pytest.raises(InvalidInputError, match=r"line 8: the archive ends before its end record"):
                await client.import_session("cut", "\n".join(lines[:7]))
            bad = [*lines[:3], '{"type":"message","id":"x"}', *lines[3:]]
            with pytest.raises(InvalidInputError, match=r"^line 4: a message record needs 'parentId'"):
                await client.import_session("cut", "\n".join(bad))
            for kind in ("compaction", "message"):  # the same thing twice: named, before anything is stored
                first = next(n for n, line in enumerate(lines, start=1) if f'"type":"{kind}"' in line)
                twice = [*lines[:-1], lines[first - 1], lines[-1]]
                with pytest.raises(InvalidInputError, match=rf"^line {len(lines)}: a second {kind} record with id "
                                                            rf"'[^']+' \(the first is on line {first}\)"):
                    await client.import_session("cut", "\n".join(twice))
            assert await client.session("cut").get_history() == []
            with pytest.raises(SessionNotFoundError):
                await client.export_session("cut")


async def test_blocks_search_entries_loaded_skills_and_the_frozen_prompt_round_trip(tmp_path, nursery):
    from actors.session_agent import BlockConfig, SessionConfig

    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "pirate.md").write_text("---\ndescription: Talk like a pirate\n---\nSay arr.\n", encoding="utf-8")
    config = SessionConfig(blocks=(
        BlockConfig("memory", "writable", description="Learned facts", max_tokens=200),
        BlockConfig("skills", "skills", description="Loadable skills", path=skills),
        BlockConfig("knowledge", "searchable", description="Searchable knowledge base"),
    ))
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host, config)
        urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                             task_status=task_status))
        async with SessionsClient(urls[0], token=TOKEN) as client:
            source = client.session("full")
            await source.append_message(msg("u1", "which gate?"))
            await source.execute_tool("set_context", {"label": "memory", "content": "Likes aisle seats"})
            await source.execute_tool("set_context", {"label": "knowledge", "content": "Gate B12 opens early",
                                                      "metadata": {"title": "Gates"}})
            await source.execute_tool("load_context", {"label": "skills", "key": "pirate"})
            prompt = await source.freeze_system_prompt()
            archive = await client.export_session("full")
            kinds = {json_type for json_type in (line.split('"type":"')[1].split('"')[0]
                                                 for line in archive.splitlines())}
            assert {"contextBlock", "searchEntry", "config"} <= kinds
            await client.import_session("full-copy", archive)
            copy = client.session("full-copy")
            assert await copy.freeze_system_prompt() == prompt
            assert await copy.get_loaded_skill_keys() == ["skills:pirate"]
            assert (await copy.get_context_block("memory"))["content"] == "Likes aisle seats"
            assert await copy.execute_tool("search_context", {"label": "knowledge", "query": "gate"}) == (
                "[gates]\nGate B12 opens early")
            again = await client.export_session("full-copy")
    assert again.splitlines()[1:] == archive.splitlines()[1:]
