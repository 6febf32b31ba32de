"""Writes ``v4_actor.sqlite3``: an actor file at schema version 4, for the migration tests.

The committed file was made by the release before schema version 5 (commit e39d045, the
``main`` branch before ``idx_assistant_msg_parent`` was keyed by ``parent_seq``) with this
script, run from an export of that commit::

    mkdir /tmp/v4 && git archive e39d045 | tar -x -C /tmp/v4
    PYTHONPATH=/tmp/v4 python <this folder>/make_v4_file.py <this folder>/v4_actor.sqlite3

It holds a plain session (session id ``''``) whose tree has branches, an inner message
deleted (its children moved up to its parent), an updated message (the totals below it
shifted) and a compaction; and a managed session. With ``--expect`` it prints what the v4
code answers on that file, and after a delete and two appends made on it (the values
``tests/storage/test_schema_migration_v4.py`` expects after the migration).
"""

import shutil
import sys
import tempfile

import trio

from actors import SessionManager
from actors.session import Session
from storage import SqlStorage

IDS = ("a", "b", "c", "d", "x", "y", "z")


def msg(mid, text, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}]}


async def write(path):
    storage = SqlStorage.open(path)
    session = Session.create(storage)
    for mid in ("a", "b", "c", "d"):
        await session.append_message(msg(mid, f"flight {mid}"))
    await session.append_message(msg("x", "branch at b"), "b")
    await session.append_message(msg("y", "under x"))
    await session.append_message(msg("z", "second child of c"), "c")
    await session.delete_messages(["c"])  # d and z move up to b
    await session.update_message(msg("b", "flight b, now with a much longer text than before"))
    await session.add_compaction("a and b", "a", "b")
    manager = SessionManager.create(storage)
    sid = (await manager.create("chat"))["id"]
    await manager.append_all(sid, [msg("m1", "one"), msg("m2", "two"), msg("m3", "three")])
    storage.exec("VACUUM")
    storage.close()


async def answers(session):
    print("leaf", (await session.get_latest_leaf())["id"])
    print("history", [m["id"] for m in await session.get_history()])
    for mid in IDS:
        print("branches", mid, [m["id"] for m in await session.get_branches(mid)],
              await session.get_path_length(mid) if await session.get_message(mid) else None)
    print("tokens", await session.estimate_tokens())


async def expect(path):
    with tempfile.TemporaryDirectory() as tmp:
        copy = f"{tmp}/copy.sqlite3"
        shutil.copyfile(path, copy)
        storage = SqlStorage.open(copy)
        session = Session.create(storage)
        print("version", storage.user_version)
        await answers(session)
        await session.delete_messages(["b"])  # d, z and x move up to a
        await session.append_message(msg("w", "under x again"), "x")
        await session.append_message(msg("v", "under d"), "d")
        await session.update_message(msg("x", "x grows: a longer text than it had"))
        print("after writes")
        await answers(session)
        manager = SessionManager.create(storage)
        [row] = await manager.list()
        managed = await manager.get_session(row["id"])
        print("managed", [m["id"] for m in await managed.get_history()],
              [m["id"] for m in await managed.get_branches("m1")])
        storage.close()


if __name__ == "__main__":
    if sys.argv[1] == "--expect":
        trio.run(expect, sys.argv[2])
    else:
        trio.run(write, sys.argv[1])
