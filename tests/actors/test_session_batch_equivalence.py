"""A batch stores exactly what appending its messages one by one stores; the manager's batch paths.

Two files built from the same calls, one with ``append_message`` per
message (chained by hand, as clients did before batches), one with
``append_messages``, must hold the same rows (ids, parents, content, the
place columns, search rows) and answer reads identically. Then
SessionManager.append_all and fork, which now write through batches.
"""

import datetime as dt
import json

import pytest

from actors import InvalidMessageError, SessionManager
from actors.session import LATEST_LEAF, Session
from actors.skills import DirectorySkillProvider
from actors.tokens import estimate_message_tokens
from storage import SqlStorage

pytestmark = pytest.mark.both_storages

ROW_LIMIT = 3000


def text(mid, words, role="user", **extra):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": words}], **extra}


def tool_call(mid, path, output):
    return {"id": mid, "role": "assistant", "parts": [
        {"type": "text", "text": f"Reading {path}."},
        {"type": "tool-read_file", "toolCallId": f"call-{mid}", "toolName": "read_file",
         "state": "output-available", "input": {"path": path}, "output": output},
    ]}


def batches():
    """``[(messages, parent_id)]``: varied messages, a duplicate, an echoed overlay id, a branch, a new root."""
    chain = [text(f"c{i}", f"turn {i} about flight {i % 7} and the gold member fare", "user" if i % 2 else "assistant")
             for i in range(150)]
    chain[20] = text("c20", "東京で会議があります。会議室は三階です。")
    chain[30] = tool_call("c30", "/srv/app/big.json", {"rows": ["x" * 50] * 100})
    chain[40] = text("c40", "long " * 1500)  # over ROW_LIMIT: its text part is truncated
    chain[50] = text("c50", "dated", createdAt=dt.datetime(2025, 5, 1, 10, 0, 0, 123456))
    chain[60] = text("c60", "with metadata", metadata={"model": "m-1", "n": [1, 2.5]})
    chain[70] = text("c10", "an echoed duplicate: the chain goes on from c10")
    chain[72] = text("compaction_unknown", "an echoed overlay of no compaction: passed over")
    branch = [text(f"b{i}", f"branch turn {i}") for i in range(30)]
    root = [text("r0", "a new root"), tool_call("r1", "/etc/hosts", "127.0.0.1 localhost")]
    return [(chain, LATEST_LEAF), (branch, "c45"), (root, None), ([text("c149", "dup"), text("tail", "end")], "c149")]


async def build(path, *, batched):
    storage = SqlStorage.open(path)
    session = Session.create(storage).with_row_limit(ROW_LIMIT)
    flags = []
    for messages, parent_id in batches():
        if batched:
            flags.append(await session.append_messages(messages, parent_id))
            continue
        parent, got = parent_id, []
        for message in messages:
            got.append(await session.append_message(message, parent))
            parent = message["id"]
        flags.append(got)
    return storage, session, flags


def dump(storage):
    """Every row a message write produces, without the clock."""
    return {
        "messages": storage.sql(
            "SELECT seq, session_id, id, parent_id, role, content, depth, path_bytes, tokens, path_tokens, jump_seq "
            "FROM assistant_messages ORDER BY seq"),
        "fts": storage.sql("SELECT rowid FROM assistant_fts ORDER BY rowid"),
        "tools": storage.sql("SELECT rowid, content, tools FROM assistant_fts_tools ORDER BY rowid"),
        "cjk": storage.sql("SELECT rowid, content FROM assistant_fts_cjk ORDER BY rowid"),
        "config": storage.sql("SELECT session_id, key, value FROM assistant_config ORDER BY key"),
    }


def same_overlays(messages):
    """Overlay messages with their random id and their clock left out."""
    return [{"id": "compaction_*", "parts": m["parts"]} if m["id"].startswith("compaction_") else m
            for m in messages]


async def reads(session, leaf_id=None):
    searches = {q: [(h["id"], h["role"], h["content"]) for h in await session.search(q)]
                for q in ("flight gold", "会議", "big.json", '"gold member"', "hosts")}
    recent = await session.get_recent_history(4000, 3, leaf_id=leaf_id)
    return {
        "history": same_overlays(await session.get_history(leaf_id)),
        "length": await session.get_path_length(leaf_id),
        "stats": await session.get_history_row_stats(leaf_id),
        "recent": {**recent, "messages": same_overlays(recent["messages"])},
        "estimate": await session.estimate_tokens(),
        "leaf": await session.get_latest_leaf(),
        "branches": [await session.get_branches(i) for i in ("c10", "c45", "c149")],
        "search": searches,
    }


@pytest.fixture
async def pair(tmp_path):
    single = await build(tmp_path / "single.db", batched=False)
    batch = await build(tmp_path / "batch.db", batched=True)
    yield single, batch
    single[0].close()
    batch[0].close()


async def test_batches_store_exactly_the_rows_of_one_by_one_appends(pair):
    (single, _, single_flags), (batch, _, batch_flags) = pair
    assert batch_flags == single_flags
    assert [flags.count(False) for flags in batch_flags] == [2, 0, 0, 1]
    assert dump(batch) == dump(single)
    rows = {r["id"]: r for r in dump(batch)["messages"]}
    assert (rows["c71"]["parent_id"], rows["c73"]["parent_id"], rows["b0"]["parent_id"]) == ("c10", "c71", "c45")
    assert [rows[i]["depth"] for i in ("c71", "c149", "b29", "tail")] == [12, 89, 76, 90]
    assert json.loads(rows["c40"]["content"])["metadata"] == {"compactedTextParts": [0]}
    assert json.loads(rows["c50"]["content"])["createdAt"] == "2025-05-01T10:00:00.123Z"


async def test_batches_read_back_exactly_as_one_by_one_appends(pair):
    (_, single, _), (_, batch, _) = pair
    assert await reads(batch) == await reads(single)
    assert await reads(batch, "b29") == await reads(single, "b29")
    assert await reads(batch, "c149") == await reads(single, "c149")
    for session in (single, batch):
        await session.add_compaction("the first turns in short", "c1", "c8")
    compacted = await reads(batch, "tail")
    assert compacted == await reads(single, "tail")
    assert [m["id"] for m in compacted["history"][:3]] == ["c0", "compaction_*", "c9"]
    assert await batch.estimate_tokens() == estimate_message_tokens(await batch.get_history())


# -- SessionManager -------------------------------------------------------------------------------


def msg(mid, words=None, role="user"):
    return text(mid, words or f"text of {mid}", role)


def set_updated_at(storage, session_id, value):
    storage.exec("UPDATE assistant_sessions SET updated_at = ? WHERE id = ?", value, session_id)


async def test_append_all_is_one_write_one_touch_and_one_broadcast(storage, recording_agent):
    manager = SessionManager.create(recording_agent)
    sid = (await manager.create("chat"))["id"]
    set_updated_at(storage, sid, "2000-01-01 00:00:00.000")
    assert await manager.append_all(sid, [msg("m1"), msg("m2"), msg("m3")]) == "m3"
    assert [(p["phase"], p["tokenEstimate"], p["sessionId"]) for p in recording_agent.payloads] == [("idle", 24, sid)]
    assert (await manager.get(sid))["updated_at"] > "2000-01-01 00:00:00.000"
    set_updated_at(storage, sid, "2000-01-01 00:00:00.000")
    assert await manager.append_all(sid, [msg("m2"), msg("m3")]) == "m3"  # all duplicates: no touch
    assert (await manager.get(sid))["updated_at"] == "2000-01-01 00:00:00.000"


async def test_append_all_with_a_bad_third_message_stores_nothing_and_does_not_touch(storage):
    manager = SessionManager.create(storage)
    sid = (await manager.create("chat"))["id"]
    set_updated_at(storage, sid, "2000-01-01 00:00:00.000")
    with pytest.raises(InvalidMessageError) as caught:
        await manager.append_all(sid, [msg("m1"), msg("m2"), {"id": "m3", "role": None, "parts": []}])
    assert (caught.value.field, str(caught.value)) == (
        "messages[2].role", "messages[2].role must be a string, not NoneType")
    assert await manager.get_message_count(sid) == 0
    assert (await manager.get(sid))["updated_at"] == "2000-01-01 00:00:00.000"


async def test_a_fork_keeps_the_exact_token_and_byte_totals_of_the_copied_path(storage):
    manager = SessionManager.create(storage)
    sid = (await manager.create("source"))["id"]
    await manager.append_all(sid, [msg(f"m{i}", f"turn {i} " * (i + 1), "user" if i % 2 else "assistant")
                                   for i in range(300)])
    fork = await manager.fork(sid, "m199", "fork")
    forked = await manager.get_session(fork["id"])
    history = await forked.get_history()
    assert len(history) == await forked.get_path_length() == 200
    assert await forked.estimate_tokens() == estimate_message_tokens(await manager.get_history(sid, "m199"))
    stats = await forked.get_history_row_stats()
    assert (await forked.get_recent_history(10**9))["totalContentBytes"] == sum(r["bytes"] for r in stats)
    assert (await forked.get_recent_history(10**9))["messages"] == history
    assert [m["parts"] for m in history] == [m["parts"] for m in await manager.get_history(sid, "m199")]


async def test_a_forked_history_restores_its_loaded_skills_on_first_use(storage, tmp_path):
    skills = DirectorySkillProvider(tmp_path / "skills")
    await skills.set("deploy", "Steps to deploy.", "How to deploy")
    manager = SessionManager.create(storage).with_context("skills", provider=skills)
    sid = (await manager.create("source"))["id"]
    load = {"id": "m2", "role": "assistant", "parts": [
        {"type": "tool-load_context", "toolName": "load_context", "toolCallId": "c1", "state": "output-available",
         "input": {"label": "skills", "key": "deploy"}, "output": "Steps to deploy."}]}
    await manager.append_all(sid, [msg("m1"), load, msg("m3")])
    assert list(await (await manager.get_session(sid)).get_loaded_skill_keys()) == ["skills:deploy"]
    fork = await manager.fork(sid, "m3", "fork")
    assert list(await (await manager.get_session(fork["id"])).get_loaded_skill_keys()) == ["skills:deploy"]
