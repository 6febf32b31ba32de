"""Writes ``v8_actor.sqlite3`` and ``v8_empty.sqlite3``: actor files at schema version 8, for the migration tests.

The committed files were made by the release before schema version 9 (commit e154fbb, the
``main`` branch before the message, compaction and block tables were made on first use) with
this script, run from an export of that commit::

    mkdir /tmp/v8 && git archive e154fbb | tar -x -C /tmp/v8
    PYTHONPATH=/tmp/v8 python <this folder>/make_v8_files.py <this folder>

``v8_actor.sqlite3`` holds a session with messages (text, a tool call, CJK text), a
compaction, a loaded-skill config value, a context block and its cached prompt;
``v8_empty.sqlite3`` a session that only kept its name (its message, compaction and block
tables are empty: version 9 drops them).
"""

import sys
from pathlib import Path

import trio

from actors.session import Session
from storage import SqlStorage
from storage.context import write_block


def msg(mid, text, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}]}


def tool(mid, name):
    return {"id": mid, "role": "assistant",
            "parts": [{"type": "tool-call", "toolCallId": f"call-{mid}", "toolName": name,
                       "input": {"city": "Lisbon"}}]}


async def write(folder: Path) -> None:
    storage = SqlStorage.open(folder / "v8_actor.sqlite3")
    session = Session.create(storage)
    await session.append_message(msg("a", "flights to lisbon"))
    await session.append_message(tool("b", "book_flight"))
    await session.append_message(msg("c", "東京への便"))
    await session.add_compaction("the user asked for flights", "a", "b")
    await session.append_message(msg("d", "after the summary"))
    storage.exec("INSERT INTO assistant_config (session_id, key, value) VALUES ('', 'actor_name', 'actor')")
    write_block(storage, "memory", "likes window seats")
    write_block(storage, "_system_prompt_", "You are helpful.")
    storage.exec("VACUUM")
    storage.close()
    storage = SqlStorage.open(folder / "v8_empty.sqlite3")
    storage.exec("INSERT INTO assistant_config (session_id, key, value) VALUES ('', 'actor_name', 'empty')")
    storage.exec("VACUUM")
    storage.close()


if __name__ == "__main__":
    trio.run(write, Path(sys.argv[1]))
