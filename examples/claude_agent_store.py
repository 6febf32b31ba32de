#!/usr/bin/env python3
"""The Claude Agent SDK keeping its transcripts on a durable-sessions host, and Claude Code
transcripts imported as searchable sessions.

Start a host in one terminal, then run this from the repository root in another::

    .venv/bin/durable-sessions serve
    .venv/bin/python examples/claude_agent_store.py [FOLDER] [--query WORDS] [--check]

The client finds the host at ``$DURABLE_SESSIONS_URL`` (default
``http://127.0.0.1:8787``) with ``$DURABLE_SESSIONS_TOKEN`` when set.

Two halves:

1. ``ClaudeAgentOptions(session_store=DurableSessionStore(...))``: the SDK
   mirrors every transcript entry the agent writes to the host, and
   ``resume=`` reads a session back from it -- so any machine that reaches
   the host can continue the conversation. Without ``ANTHROPIC_API_KEY``
   the example stops right before the model call; everything up to it runs.
2. A folder of Claude Code transcripts (by default the fixtures in
   ``tests/data/claude_code/projects``; pass another, e.g.
   ``~/.claude/projects``, as ``FOLDER``) imported as sessions: each file
   becomes a message tree you can read and search by its session ID.
   ``--query`` picks what to search for (default ``renderer.py``: a file a
   tool call read).

``--check`` first runs the SDK's own ``SessionStore`` conformance suite
against the host (:func:`runtime.client.conformance.check_session_store_conformance`:
a fresh, isolated store per contract, its transcripts deleted afterwards).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import trio
from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ResultMessage,
    TextBlock,
    get_session_messages_from_store,
    list_sessions_from_store,
    project_key_for_directory,
    query,
)

from runtime import DurableSessionStore
from runtime.cli.claude_import import import_claude_code_sessions
from runtime.cli.formats.claude_code import find_claude_code_files, read_claude_code_session
from runtime.client import SessionsClient
from runtime.client.conformance import check_session_store_conformance

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "data" / "claude_code" / "projects"
#: A short Claude Code session shipped with the tests: one question, one answer.
SAMPLE = FIXTURES / "-src-experiments-claude_p" / "94604a7b-062f-4369-bdf0-da948381c3e5.jsonl"


async def agent_with_durable_store() -> None:
    ### store: One store object, pointed at the host
    # DurableSessionStore implements the SDK's SessionStore protocol
    # (append, load, list_sessions, list_session_summaries, delete,
    # list_subkeys) over HTTP; it reads the URL and token like the client.
    store = DurableSessionStore()
    cwd = str(REPO)
    print("== transcript store")
    print("store:", store)
    print("project key:", project_key_for_directory(cwd))

    ### mirror: What the SDK does while an agent runs
    # The SDK calls store.append(key, entries) with batches of transcript
    # lines. We replay the conversation of a recorded session the same
    # way, so there is something to resume. An entry's uuid is its
    # idempotency key: a retried batch (or a second run) stores nothing new.
    session_id = SAMPLE.stem
    lines = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    entries = [entry for entry in lines if "uuid" in entry]
    key = {"project_key": project_key_for_directory(cwd), "session_id": session_id}
    await store.append(key, entries)
    await store.append(key, entries)  # a retried batch
    print(f"appended {len(entries)} entries twice, stored: {len(await store.load(key))}")

    ### read: The SDK's own helpers read through the store
    # list_sessions_from_store / get_session_messages_from_store are what
    # a UI or a resume uses; they see the mirrored session as if it were a
    # local transcript.
    for info in await list_sessions_from_store(store, directory=cwd):
        print(f"session {info.session_id}: {info.summary[:60]!r}")
    for message in await get_session_messages_from_store(store, session_id, directory=cwd):
        content = message.message["content"]
        text = content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)
        print(f"  {message.type}: {' '.join(text.split())[:70]}")

    ### agent: Wire the store into the agent
    # session_store= mirrors the new turns; resume= continues the stored
    # session (it is loaded from the host, not from ~/.claude).
    options = ClaudeAgentOptions(session_store=store, resume=session_id, cwd=cwd, max_turns=1)
    print("options: session_store =", type(options.session_store).__name__, "| resume =", options.resume)
    if not os.environ.get("ANTHROPIC_API_KEY"):
        print("ANTHROPIC_API_KEY is not set: stopping before the model call.")
        await store.aclose()
        return
    async for message in query(prompt="In one sentence: which of those tools edit files?", options=options):
        if isinstance(message, AssistantMessage):
            print("  assistant:", " ".join(b.text for b in message.content if isinstance(b, TextBlock)))
        elif isinstance(message, ResultMessage):
            print(f"  result: {message.subtype} after {message.num_turns} turn(s)")
    print(f"entries now stored: {len(await store.load(key))}")
    await store.aclose()


async def import_and_search(folder: Path, words: str) -> None:
    ### import: Claude Code transcripts as sessions
    # Each .jsonl file becomes one session named by its session id: a
    # message tree (text, reasoning, tool calls with their results folded
    # in, branches kept) plus metadata -- the source, a title, and for a
    # sub-agent ("<parent>:agent-<id>") the session that spawned it.
    # Importing again stores nothing new.
    print("\n== import Claude Code transcripts")
    files = find_claude_code_files(folder)
    async with SessionsClient() as client:
        report = await import_claude_code_sessions(files, client.session)
        print(f"imported {report.files} of {len(files)} files from {folder}: "
              f"{report.stored} messages stored, {report.sent - report.stored} already there")
        session_ids = [read_claude_code_session(file).session_id for file in files]
        for session_id in session_ids:
            session = client.session(session_id)
            metadata = await session.call("get_metadata")
            facts = [f"{await session.get_path_length()} messages on the latest path"]
            if "name" in metadata:
                facts.append(repr(metadata["name"]))
            if "parentSessionId" in metadata:
                facts.append(f"sub-agent of {metadata['parentSessionId']}")
            print(f"  {session_id}: {', '.join(facts)}")

        ### search: Find the conversations that mention something
        # Search covers message text and the tool calls' names and inputs,
        # so a file name a tool read finds the session that read it.
        print(f"\n== search for {words!r}")
        for session_id in session_ids:
            hits = await client.session(session_id).search(words, limit=3)
            if hits:
                print(f"{session_id}:")
            for hit in hits:
                text = " ".join(hit["content"].split())[:60] or "(found in a tool call)"
                print(f"  {hit['id'][:8]} [{hit['role']}] {text}")


async def check_contracts() -> None:
    ### check: The SDK's own contracts, against this host
    # run_session_store_conformance wants an empty store per contract; on a
    # shared host each IsolatedSessionStore sees only project keys under its
    # own prefix, and what the suite wrote is deleted when it ends.
    print("== SessionStore conformance")
    stores = await check_session_store_conformance()
    print(f"{stores - 1} contracts passed (one fresh store each, plus one probe)")


async def main(folder: Path, words: str, check: bool) -> None:
    if check:
        await check_contracts()
    await agent_with_durable_store()
    await import_and_search(folder, words)


def parse_args() -> tuple[Path, str, bool]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=FIXTURES,
                        help="Claude Code transcripts: a folder (searched recursively) or one .jsonl file")
    parser.add_argument("--query", default="renderer.py", help="what to search for in the imported sessions")
    parser.add_argument("--check", action="store_true", help="run the SDK's SessionStore conformance suite first")
    args = parser.parse_args()
    return args.folder.expanduser(), args.query, args.check


if __name__ == "__main__":
    trio.run(main, *parse_args())
