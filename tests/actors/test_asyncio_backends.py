"""The Session API under asyncio and trio alike: every test here runs once per anyio backend.

The library needs no trio: Session, SessionManager, the SQLite and Postgres
providers, skills and compaction use anyio where they need a primitive (the
loaded-skill restore holds an ``anyio.Lock``), so an asyncio program -- the
OpenAI Agents SDK's world -- embeds them as they are.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
import sniffio

from actors import AgentSearchProvider, DirectorySkillProvider, Session, SessionManager
from actors.compaction import create_compact_function, extractive_summarize
from actors.skills import SkillTracker
from storage import SqlStorage
from storage.context import read_config
from storage.postgres import PostgresContextProvider, PostgresSearchProvider

pytestmark = pytest.mark.anyio

SKILLS = Path(__file__).resolve().parents[2] / "examples" / "skills"


def text(message_id: str, role: str, words: str) -> dict:
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": words}]}


class Soul:
    async def get(self) -> str:
        await anyio.lowlevel.checkpoint()  # a provider that awaits, in whichever loop runs
        return f"You run under {sniffio.current_async_library()}."


def build(storage: SqlStorage) -> Session:
    compact = create_compact_function(summarize=extractive_summarize, protect_head=1, tail_token_budget=40,
                                      min_tail_messages=2)
    return (
        Session.create(storage)
        .for_session("both-loops")
        .with_context("soul", provider=Soul())
        .with_context("memory", description="Learned facts", max_tokens=500)
        .with_context("skills", description="Loadable skills", provider=DirectorySkillProvider(SKILLS))
        .with_context("knowledge", description="Searchable", provider=AgentSearchProvider(storage))
        .with_cached_prompt()
        .on_compaction(compact)
    )


async def test_the_whole_session_api_runs_in_the_running_loop(anyio_backend, tmp_path):
    path = tmp_path / "s.sqlite3"
    storage = SqlStorage.open(path)
    session = build(storage)
    prompt = await session.freeze_system_prompt()
    assert f"You run under {anyio_backend}." in prompt

    await session.append_messages([text("u1", "user", "The export failed with E1042."),
                                   text("a1", "assistant", "E1042 is the export timeout.")])
    tools = await session.tools()
    assert list(tools) == ["set_context", "load_context", "unload_context", "search_context"]
    assert await tools["set_context"].execute({"label": "memory", "content": "Deploys on Tuesdays."}) == (
        "Written to memory. Usage: 1% (5/500 tokens)")
    assert await tools["set_context"].execute({"label": "knowledge", "content": "E1042: raise the timeout.",
                                               "metadata": {"title": "E1042"}}) == 'Indexed "e1042" in knowledge.'
    assert await tools["search_context"].execute({"label": "knowledge", "query": "timeout"}) == (
        "[e1042]\nE1042: raise the timeout.")
    body = await tools["load_context"].execute({"label": "skills", "key": "code-review"})
    await session.append_message({"id": "a2", "role": "assistant", "parts": [
        {"type": "tool-load_context", "toolCallId": "c1", "toolName": "load_context", "state": "output-available",
         "input": {"label": "skills", "key": "code-review"}, "output": body}]})
    assert list(await session.get_loaded_skill_keys()) == ["skills:code-review"]
    assert [hit["id"] for hit in await session.search("E1042")] == ["u1", "a1"]
    for number in range(3):
        await session.append_message(text(f"u{number + 2}", "user", f"Follow-up number {number} about the export."))
    compacted = await session.compact()
    assert (compacted["fromMessageId"], compacted["toMessageId"]) == ("a1", "a2")
    assert await session.unload_skill("skills", "code-review") is True
    prompt = await session.freeze_system_prompt()  # the compaction refreshed it
    assert "Deploys on Tuesdays." in prompt
    storage.close()

    storage = SqlStorage.open(path)  # a wake: the frozen prompt and the skill set come back
    session = build(storage)
    assert await session.freeze_system_prompt() == prompt
    assert list(await session.get_loaded_skill_keys()) == []
    [record] = await session.get_compactions()
    assert [m["id"] for m in await session.get_history()][:2] == ["u1", "compaction_" + record["id"]]
    storage.close()


class YieldingHost:
    """A SkillHost whose history read awaits, so two restores can overlap; counts the reads."""

    def __init__(self, messages: list[dict]) -> None:
        self.messages = messages
        self.reads = 0

    async def raw_path_messages(self) -> list[dict]:
        self.reads += 1
        await anyio.sleep(0.01)
        return self.messages

    async def get_history(self) -> list[dict]:
        return self.messages

    async def get_message(self, message_id: str) -> dict | None:
        return None

    async def update_message(self, message: dict) -> None:
        pass

    async def get_latest_leaf(self) -> dict | None:
        return self.messages[-1]


async def test_concurrent_skill_restores_scan_history_once_under_the_lock(anyio_backend, storage):
    load = {"type": "tool-load_context", "toolCallId": "c", "toolName": "load_context", "state": "output-available",
            "input": {"label": "skills", "key": "code-review"}, "output": "# Reviewing"}
    host = YieldingHost([{"id": "a1", "role": "assistant", "parts": [load]}])
    tracker = SkillTracker(storage, "s1", host)
    results = []

    async def restore() -> None:
        results.append(await tracker.ensure(may_scan=True))

    async with anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(restore)
    assert results == [True] * 5
    assert host.reads == 1
    assert list(tracker.keys()) == ["skills:code-review"]
    assert json.loads(read_config(storage, "s1", "loaded_skills")) is not None


async def test_session_manager_runs_in_the_running_loop(anyio_backend, storage):
    manager = SessionManager.create(storage).with_context("memory", max_tokens=200)
    first = await manager.create("first")
    await manager.append(first["id"], text("m1", "user", f"Written under {anyio_backend}: the invoice is late."))
    second = await manager.fork(first["id"], "m1", "second")
    await manager.append(second["id"], text("m2", "assistant", "The invoice was paid on Friday."))
    hits = await manager.search("invoice")
    assert sorted((hit["sessionId"] == first["id"], hit["content"]) for hit in hits) == [
        (False, "The invoice was paid on Friday."),
        (False, f"Written under {anyio_backend}: the invoice is late."),  # the fork's copy
        (True, f"Written under {anyio_backend}: the invoice is late."),
    ]
    assert [row["name"] for row in await manager.list()] == ["second", "first"]
    await manager.delete(first["id"])
    assert [row["name"] for row in await manager.list()] == ["second"]
    session = await manager.get_session(second["id"])
    assert [m["parts"][0]["text"] for m in await session.get_history()] == [
        f"Written under {anyio_backend}: the invoice is late.", "The invoice was paid on Friday."]


async def test_postgres_providers_run_in_the_running_loop(anyio_backend, pg_conn):
    block = PostgresContextProvider(pg_conn, "memory")
    await block.set(f"set under {anyio_backend}")
    assert await block.get() == f"set under {anyio_backend}"
    kb = PostgresSearchProvider(pg_conn)
    kb.init("knowledge")
    await kb.set("tea", "Green tea is brewed at 80 degrees.")
    assert await kb.search("green tea") == "[tea]\nGreen tea is brewed at 80 degrees."
