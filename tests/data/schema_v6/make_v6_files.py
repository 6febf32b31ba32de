"""Writes ``v6_actor.sqlite3`` and ``v6_empty.sqlite3``: actor files at schema version 6, for the migration tests.

The committed files were made by the release before schema version 7 (commit 5f3fbb2, the
``main`` branch before the message text indexes were made on first use) with this script, run
from an export of that commit::

    mkdir /tmp/v6 && git archive 5f3fbb2 | tar -x -C /tmp/v6
    PYTHONPATH=/tmp/v6 python <this folder>/make_v6_files.py <this folder>

``v6_actor.sqlite3`` holds a session with text, tool calls and CJK text (its three
full-text indexes hold rows) and a managed session; ``v6_empty.sqlite3`` a session
that only kept a config value (its indexes are empty: version 7 drops them).
"""

import sys
from pathlib import Path

import trio

from actors import SessionManager
from actors.session import Session
from storage import SqlStorage


def msg(mid, text, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}]}


def tool(mid, name):
    return {"id": mid, "role": "assistant",
            "parts": [{"type": "tool-call", "toolCallId": f"call-{mid}", "toolName": name,
                       "input": {"city": "Lisbon"}}]}


async def write(folder: Path) -> None:
    storage = SqlStorage.open(folder / "v6_actor.sqlite3")
    session = Session.create(storage)
    await session.append_message(msg("a", "flights to lisbon"))
    await session.append_message(tool("b", "book_flight"))
    await session.append_message(msg("c", "東京への便"))
    manager = SessionManager.create(storage)
    sid = (await manager.create("chat"))["id"]
    await manager.append_all(sid, [msg("m1", "managed flight"), msg("m2", "two")])
    storage.exec("VACUUM")
    storage.close()
    storage = SqlStorage.open(folder / "v6_empty.sqlite3")
    storage.exec("INSERT INTO assistant_config (session_id, key, value) VALUES ('', 'actor_name', 'empty')")
    storage.exec("VACUUM")
    storage.close()


if __name__ == "__main__":
    trio.run(write, Path(sys.argv[1]))
