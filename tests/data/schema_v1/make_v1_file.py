"""Writes ``v1_actor.sqlite3``: an actor file at schema version 1, for the migration tests.

The committed file was made by the release before schema version 2
(commit 9716f25) with this script, run from that checkout::

    git worktree add /tmp/v1 9716f25 && cd /tmp/v1
    python tests/data/schema_v1/make_v1_file.py <this folder>/v1_actor.sqlite3

It holds a plain session (session id ``''``), a managed session and search
entries, with text, tool calls, text glued to CJK and a U+2063 character.
"""

import sys

import trio

from actors import SessionManager
from actors.context import AgentSearchProvider
from actors.session import Session
from storage import SqlStorage

BIG_INPUT = {"path": "docs/setup.md", "notes": " ".join(f"word{i}" for i in range(60))}
GLUED = "重跑gen-itgc后再看看"


def msg(mid, text, *tools, role="user"):
    parts = [{"type": "text", "text": text}] if text else []
    for i, tool_input in enumerate(tools):
        parts.append({"type": "tool-read_file", "toolName": "read_file", "toolCallId": f"{mid}-{i}",
                      "state": "output-available", "input": tool_input, "output": "ok"})
    return {"id": mid, "role": role, "parts": parts}


MESSAGES = [
    msg("short", "Deploy on Friday", BIG_INPUT),
    msg("long", "We could maybe think about doing the release on Friday after lunch", role="assistant"),
    msg("tool", "", {"path": "docs/friday.md"}, role="assistant"),
    msg("glued", GLUED),
    msg("marker", "a\u2063b 東\u2063x"),
    msg("jp", "Pythonで書いたスクリプトをv2に更新", {"command": "重跑gen-itgc后"}, role="assistant"),
]


async def main(path):
    storage = SqlStorage.open(path)
    session = Session.create(storage)
    for m in MESSAGES:
        await session.append_message(m)
    await session.add_compaction("summary", "long", "tool")
    manager = SessionManager.create(storage)
    sid = (await manager.create("chat"))["id"]
    await manager.append_all(sid, [msg("c1", "Friday standup notes"), msg("c2", GLUED, {"path": "friday.md"})])
    provider = AgentSearchProvider(storage)
    provider.init("knowledge")
    await provider.set("rerun", GLUED)
    await provider.set("deploy", "Deploy on Friday")
    await provider.set("mark", "a\u2063b")
    storage.exec("VACUUM")
    storage.close()


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
