#!/usr/bin/env python3
"""The Session API inside your own program, on one SQLite file.

Run it from the repository root::

    .venv/bin/python examples/embedded_session.py

It writes ``embedded.sqlite3`` into a fresh temporary folder (the path is
printed; open it with any SQLite tool afterwards), or into ``--data DIR``.
No server, no model, no network: everything runs in this process. The
Session API needs no particular event loop: the same program runs under
asyncio with ``--loop asyncio`` (trio is the default).

What it shows, top to bottom: a Session with context blocks of all four
kinds (a readonly soul, a writable memory, a folder of skills --
``examples/skills`` -- and a searchable knowledge base), the frozen system
prompt, messages and search, the AI tools in OpenAI and Anthropic formats
(and running them the way a model would), a compaction with the built-in
extractive summarizer, and what survives closing and reopening the file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

import trio

from actors import AgentSearchProvider, DirectorySkillProvider, Session
from actors.compaction import create_compact_function, extractive_summarize
from actors.tools import anthropic_tools, openai_tools
from storage import SqlStorage

SKILLS = Path(__file__).resolve().parent / "skills"


def text(message_id: str, role: str, words: str) -> dict:
    """A message in the Session's JSON shape (an AI SDK ``UIMessage`` fits too)."""
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": words}]}


### soul: A readonly block is any object with get()
# Providers are duck-typed: get() alone makes a readonly block; add set()
# for a writable one, load() for skills, search() for a searchable one.


class Soul:
    async def get(self) -> str:
        return "You are a concise assistant for a small software team."


def build_session(storage: SqlStorage) -> Session:
    ### build: Declare the blocks once, in prompt order
    # Builders touch no SQL; the blocks are read on first use. A block with
    # no provider (memory) is stored in this file, keyed by the session id.
    # Compaction keeps the first message and about 60 tokens of recent
    # turns verbatim, and summarizes what lies between without any model.
    compact = create_compact_function(
        summarize=extractive_summarize, protect_head=1, tail_token_budget=60, min_tail_messages=2
    )
    return (
        Session.create(storage)
        .for_session("embedded-demo")
        .with_context("soul", provider=Soul())
        .with_context("memory", description="Learned facts", max_tokens=1100)
        .with_context("skills", description="Loadable skills", provider=DirectorySkillProvider(SKILLS))
        .with_context("knowledge", description="Searchable knowledge base", provider=AgentSearchProvider(storage))
        .with_cached_prompt()
        .on_compaction(compact)
    )


async def main(data: Path) -> None:
    ### open: One SQLite file holds everything
    # SqlStorage.open creates the file and its tables on first use.
    path = data / "embedded.sqlite3"
    print("== open")
    print("database:", path)
    storage = SqlStorage.open(path)
    session = build_session(storage)
    if await session.get_path_length():
        await session.clear_messages()  # a rerun on the same --data starts over
        print("cleared the messages of an earlier run")

    ### prompt: The frozen system prompt
    # Rendered from the blocks on first use and stored (with_cached_prompt),
    # so the exact same text comes back after a restart: good for the
    # model provider's prefix cache.
    print("\n== frozen system prompt")
    prompt = await session.freeze_system_prompt()
    print(prompt)

    ### memory: Writable blocks, and why the prompt does not move
    # Writes land at once, but the frozen prompt only changes when you
    # refresh it -- at a moment you choose, e.g. between conversations.
    print("\n== memory")
    block = await session.replace_context_block("memory", "The team deploys on Tuesdays.")
    block = await session.append_context_block("memory", "Alice owns the billing service.")
    print(f"memory holds {block['tokens']} of {block['maxTokens']} tokens:")
    print(block["content"])
    print("frozen prompt unchanged:", await session.freeze_system_prompt() == prompt)
    prompt = await session.refresh_system_prompt()
    print("after refresh the prompt mentions Alice:", "Alice owns the billing service." in prompt)

    ### messages: A conversation is a tree of messages
    # Each append becomes the child of the latest message, unless you pass a
    # parent id (see quickstart_client.py for branches).
    print("\n== messages")
    await session.append_message(text("u1", "user", "Our invoice export failed last night with error E1042."))
    await session.append_message(text("a1", "assistant", "E1042 means the export job hit its 30 second timeout."))
    await session.append_message(text("u2", "user", "Can you review the fix in pull request 311?"))
    for message in await session.get_history():
        print(f"{message['id']} [{message['role']}] {message['parts'][0]['text']}")

    ### tools: The AI tools, in the formats model APIs want
    # Which tools exist follows from the blocks: set_context (writable
    # blocks), load_context / unload_context (skills), search_context
    # (searchable blocks). Pass the lists to your model's tools= parameter.
    print("\n== tools")
    tools = await session.tools()
    print("tools:", ", ".join(tools))
    openai = openai_tools(tools)
    anthropic = anthropic_tools(tools)
    print("OpenAI tools=:   ", [tool["function"]["name"] for tool in openai])
    print("Anthropic tools=:", [tool["name"] for tool in anthropic])
    print(json.dumps(anthropic[-1], ensure_ascii=False))

    ### run_tools: Running a tool the way a model would
    # Tool.execute validates the arguments against the schema and always
    # returns a string -- a result or an "Error: ..." the model can read.
    print("\n== running tools")
    add = {"label": "knowledge", "content": "E1042: raise export_timeout_s to 120.", "metadata": {"title": "E1042"}}
    print(await tools["set_context"].execute(add))
    print(await tools["search_context"].execute({"label": "knowledge", "query": "E1042 timeout"}))
    print(await tools["set_context"].execute({"label": "nowhere", "content": "x"}))

    ### skills: Loading a skill, and recording it in history
    # load_context returns the skill's text. Store the call as a tool part
    # of an assistant message: that record is what restores the loaded
    # skill after a restart.
    print("\n== skills")
    call = {"label": "skills", "key": "code-review"}
    body = await tools["load_context"].execute(call)
    print("loaded:", body.splitlines()[0])
    await session.append_message({
        "id": "a2", "role": "assistant", "parts": [
            {"type": "tool-load_context", "toolCallId": "call-1", "toolName": "load_context",
             "state": "output-available", "input": call, "output": body},
            {"type": "text", "text": "Reviewing pull request 311 with the code-review checklist."},
        ],
    })
    print("loaded skills:", list(await session.get_loaded_skill_keys()))

    ### search: Full-text search over the messages
    # Every word must match, in any order; "quoted words" match as a
    # phrase; stemming finds "deploys" for "deploy".
    print("\n== search")
    for hit in await session.search("export error"):
        print(f"{hit['id']} [{hit['role']}] {hit['content']}")

    ### compact: Summarize the middle of a long history
    # compact() asks the compaction function for a summary of a range and
    # stores it as an overlay: get_history() shows the summary in place of
    # the range, while the original messages stay stored and searchable.
    print("\n== compaction")
    await session.append_message(text("u3", "user", "The fix raises the timeout to 120 seconds. Is that safe?"))
    await session.append_message(text("a3", "assistant", "Yes: the export usually takes 40 seconds."))
    await session.append_message(text("u4", "user", "Thanks. Please remind me to check tomorrow's run."))
    result = await session.compact()
    print(f"compacted {result['fromMessageId']}..{result['toMessageId']}")
    history = await session.get_history()
    print("history now:", [m["id"] if not m["id"].startswith("compaction_") else "compaction_…" for m in history])
    print(history[1]["parts"][0]["text"])
    print("still searchable:", [hit["id"] for hit in await session.search("E1042")])
    # A compaction also refreshes the frozen prompt (a natural moment to do it).
    prompt = await session.freeze_system_prompt()
    print("knowledge block in the new prompt:", prompt.rsplit("\n", 1)[-1])

    ### reopen: Close the file, open it again
    # A new Session on the same file (a restart, or an actor waking from
    # hibernation) finds the same frozen prompt and the same loaded skills.
    print("\n== reopen")
    storage.close()
    storage = SqlStorage.open(path)
    session = build_session(storage)
    print("same frozen prompt:", await session.freeze_system_prompt() == prompt)
    print("loaded skills:", list(await session.get_loaded_skill_keys()))
    print("messages on the path:", await session.get_path_length())
    storage.close()


def parse_args() -> tuple[Path, str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="folder for embedded.sqlite3 (default: a new temporary folder)")
    parser.add_argument("--loop", choices=("trio", "asyncio"), default="trio", help="event loop to run on")
    args = parser.parse_args()
    if args.data is None:
        return Path(tempfile.mkdtemp(prefix="durable-sessions-embedded-")), args.loop
    args.data.mkdir(parents=True, exist_ok=True)
    return args.data, args.loop


if __name__ == "__main__":
    ### loops: The same code under trio or asyncio
    # Nothing above names an event loop: the Session awaits only what its
    # providers await, and uses anyio where it needs a lock.
    data, loop = parse_args()
    if loop == "asyncio":
        asyncio.run(main(data))
    else:
        trio.run(main, data)
