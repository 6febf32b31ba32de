"""SessionManager.fork and compact_and_split (docs/behaviours.md §13, spec: Forking, Compaction)."""

import uuid

import pytest

from actors import InvalidInputError, MessageNotFoundError, NotFoundError, SessionManager

pytestmark = pytest.mark.both_storages


def msg(mid, text=None, role="user", **extra):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text or f"text of {mid}"}], **extra}


def without_id(message):
    return {k: v for k, v in message.items() if k != "id"}


@pytest.fixture
def manager(storage):
    return SessionManager.create(storage)


def stored_rows(storage, session_id):
    """``[(id, parent_id, content)]`` of a session in insertion order."""
    return [
        tuple(row)
        for row in storage.exec(
            "SELECT id, parent_id, content FROM assistant_messages WHERE session_id = ? ORDER BY seq", session_id
        )
    ]


@pytest.fixture
async def branched(manager):
    """m1 -> m2 -> m3 -> m4 and a sibling branch m2 -> b3 -> b4 (the latest leaf)."""
    row = await manager.create("source", model="m-1", source="web")
    sid = row["id"]
    await manager.append_all(sid, [msg("m1"), msg("m2", role="assistant"), msg("m3"), msg("m4", role="assistant")])
    await manager.append_all(sid, [msg("b3", "sibling question"), msg("b4", "sibling answer", "assistant")], "m2")
    return sid


async def test_fork_in_the_middle_copies_exactly_the_path_to_the_fork_point(manager, storage, branched):
    source_before = stored_rows(storage, branched)
    source_row = await manager.get(branched)
    fork = await manager.fork(branched, "m3", "Forked Chat")

    assert fork["name"] == "Forked Chat"
    assert fork["parent_session_id"] == branched
    assert (fork["model"], fork["source"], fork["end_reason"]) == (None, None, None)
    rows = stored_rows(storage, fork["id"])
    assert len(rows) == 3
    new_ids = [r[0] for r in rows]
    assert all(uuid.UUID(i).version == 4 for i in new_ids)
    assert not set(new_ids) & {"m1", "m2", "m3", "m4", "b3", "b4"}
    assert [r[1] for r in rows] == [None, new_ids[0], new_ids[1]]
    history = await manager.get_history(fork["id"])
    assert [m["id"] for m in history] == new_ids
    assert [without_id(m) for m in history] == [
        without_id(msg("m1")), without_id(msg("m2", role="assistant")), without_id(msg("m3"))
    ]
    assert "sibling" not in "".join(r[2] for r in rows)
    # The source is untouched.
    assert stored_rows(storage, branched) == source_before
    assert await manager.get(branched) == source_row


async def test_fork_at_the_sibling_branch_copies_that_branch(manager, branched):
    fork = await manager.fork(branched, "b4", "other")
    history = await manager.get_history(fork["id"])
    texts = [m["parts"][0]["text"] for m in history]
    assert texts == ["text of m1", "text of m2", "sibling question", "sibling answer"]
    assert await manager.get_message_count(fork["id"]) == 4


async def test_fork_materialises_overlays_and_copies_no_compaction(manager, storage, branched):
    record = await manager.add_compaction(branched, "m1 and m2 in short", "m1", "m2")
    fork = await manager.fork(branched, "m4", "compacted fork")
    history = await manager.get_history(fork["id"])
    assert len(history) == 3
    assert history[0]["role"] == "assistant"
    assert history[0]["parts"] == [{"type": "text", "text": "m1 and m2 in short"}]
    assert history[0]["createdAt"] == record["createdAt"]
    assert history[0]["id"] != f"compaction_{record['id']}"
    assert [without_id(m) for m in history[1:]] == [without_id(msg("m3")), without_id(msg("m4", role="assistant"))]
    assert await manager.get_compactions(fork["id"]) == []
    assert storage.scalar("SELECT count(*) FROM assistant_compactions WHERE session_id = ?", fork["id"]) == 0


async def test_fork_keeps_message_fields_other_than_the_id(manager):
    sid = (await manager.create("s"))["id"]
    original = msg("m1", createdAt="2025-05-01T10:00:00.000Z", metadata={"k": [1, 2]})
    await manager.append(sid, original)
    fork = await manager.fork(sid, "m1", "f")
    [copy] = await manager.get_history(fork["id"])
    assert without_id(copy) == without_id(original)


async def test_forked_messages_are_searchable_in_the_fork(manager, branched):
    fork = await manager.fork(branched, "m2", "f")
    hits = await manager.search("text of m2")
    assert sorted(h["sessionId"] for h in hits) == sorted([branched, fork["id"]])


async def test_fork_continues_from_its_last_copied_message(manager):
    sid = (await manager.create("s"))["id"]
    await manager.append_all(sid, [msg("m1"), msg("m2"), msg("m3")])
    fork = await manager.fork(sid, "m2", "f")
    await manager.append(fork["id"], msg("next"))
    history = await manager.get_history(fork["id"])
    assert [m["parts"][0]["text"] for m in history] == ["text of m1", "text of m2", "text of next"]


async def test_fork_of_an_unknown_message_raises_and_creates_nothing(manager, branched):
    before = await manager.list()
    with pytest.raises(MessageNotFoundError, match="message 'nope' not found") as info:
        await manager.fork(branched, "nope", "f")
    assert isinstance(info.value, NotFoundError)
    assert await manager.list() == before


async def test_fork_of_an_overlay_id_raises(manager, branched):
    record = await manager.add_compaction(branched, "s", "m1", "m2")
    with pytest.raises(MessageNotFoundError):
        await manager.fork(branched, f"compaction_{record['id']}", "f")


async def test_fork_refuses_a_non_string_name(manager, branched):
    with pytest.raises(InvalidInputError) as info:
        await manager.fork(branched, "m1", None)
    assert info.value.field == "name"
    assert len(await manager.list()) == 1


# -- compact_and_split -------------------------------------------------------------------------


async def test_compact_and_split_ends_the_old_session_and_starts_from_the_summary(manager, storage, branched):
    storage.exec("UPDATE assistant_sessions SET updated_at = '2000-01-01 00:00:00.000' WHERE id = ?", branched)
    source_before = stored_rows(storage, branched)
    new = await manager.compact_and_split(branched, "We booked a flight.", "Continued Chat")

    assert new == await manager.get(new["id"])
    assert (new["name"], new["parent_session_id"], new["model"], new["source"]) == (
        "Continued Chat", branched, "m-1", "web"
    )
    assert (new["input_tokens"], new["output_tokens"], new["estimated_cost"], new["end_reason"]) == (0, 0, 0.0, None)
    [summary] = await manager.get_history(new["id"])
    assert uuid.UUID(summary["id"]).version == 4
    assert summary == {
        "id": summary["id"],
        "role": "assistant",
        "parts": [{"type": "text", "text": "[Context from previous session]\n\nWe booked a flight."}],
    }
    old = await manager.get(branched)
    assert old["end_reason"] == "compaction"
    assert old["updated_at"] > "2000-01-01 00:00:00.000"
    assert stored_rows(storage, branched) == source_before
    assert [r["name"] for r in await manager.list()] == ["Continued Chat", "source"]


async def test_compact_and_split_keeps_the_old_name_by_default(manager, branched):
    new = await manager.compact_and_split(branched, "s")
    assert new["name"] == "source"


async def test_compact_and_split_refuses_a_bad_summary_and_writes_nothing(manager, branched):
    with pytest.raises(InvalidInputError) as info:
        await manager.compact_and_split(branched, 42)
    assert info.value.field == "summary"
    assert len(await manager.list()) == 1
    assert (await manager.get(branched))["end_reason"] is None
