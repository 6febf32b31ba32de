"""Writes ``v2_actor.sqlite3``: an actor file at schema version 2, for the migration tests.

The committed file was made by the release before schema version 3
(commit c51b1a2) with this script, run from an export of that commit::

    mkdir /tmp/v2 && git archive c51b1a2 | tar -x -C /tmp/v2 && cd /tmp/v2
    python <this folder>/make_v2_file.py <this folder>/v2_actor.sqlite3

It holds a plain session (session id ``''``) with a branch and a compaction,
a managed session whose latest message was deleted (so it had no active-leaf
row), and search entries; text, tool calls, text glued to CJK and a U+2063
character. With ``--expect`` it prints what the v2 code answers on that file
(the values ``tests/storage/test_schema_migration_v2.py`` expects after the
migration).
"""

import sys

import trio

from actors import SessionManager
from actors.context import AgentSearchProvider
from actors.session import Session
from storage import SqlStorage

BIG_INPUT = {"path": "docs/setup.md", "notes": " ".join(f"word{i}" for i in range(60))}
GLUED = "重跑gen-itgc后再看看"
QUERIES = ("friday", "itgc", "x", "python", "docs/setup.md", "東京", "gen")


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


async def write(path):
    storage = SqlStorage.open(path)
    session = Session.create(storage)
    for m in MESSAGES:
        await session.append_message(m)
    await session.append_message(msg("branch", "東京 on Friday, a second thought"), "glued")  # the latest leaf
    await session.add_compaction("summary", "long", "tool")
    manager = SessionManager.create(storage)
    sid = (await manager.create("chat"))["id"]
    await manager.append_all(sid, [msg("c1", "Friday standup notes"), msg("c2", GLUED, {"path": "friday.md"}),
                                   msg("c3", "deleted later")])
    managed = await manager.get_session(sid)
    await managed.delete_messages(["c3"])  # its active-leaf row goes: the newest leaf answers
    provider = AgentSearchProvider(storage)
    provider.init("knowledge")
    await provider.set("rerun", GLUED)
    await provider.set("deploy", "Deploy on Friday")
    await provider.set("mark", "a\u2063b")
    storage.exec("VACUUM")
    storage.close()


async def expect(path):
    storage = SqlStorage.open(path)
    session = Session.create(storage)
    print("version", storage.user_version)
    print("leaf", (await session.get_latest_leaf())["id"])
    print("history", [m["id"] for m in await session.get_history()])
    for query in QUERIES:
        print("search", query, [(h["id"], h["role"], h["content"]) for h in await session.search(query)])
    manager = SessionManager.create(storage)
    [row] = await manager.list()
    managed = await manager.get_session(row["id"])
    print("managed leaf", (await managed.get_latest_leaf())["id"])
    for query in QUERIES:
        print("manager search", query, [(h["id"], h["content"]) for h in await manager.search(query)])
    storage.close()


if __name__ == "__main__":
    if sys.argv[1] == "--expect":
        trio.run(expect, sys.argv[2])
    else:
        trio.run(write, sys.argv[1])
