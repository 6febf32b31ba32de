"""Status broadcasts of SessionManager's own writes: compact_and_split, delete, fork
(docs/behaviours.md §12, §13; docs/deviations.md #15, #16, "Batches are atomic").

The original sends these through the Session calls it makes: ``compactAndSplit``
appends the summary (one ``idle``), ``delete`` runs ``clearMessages`` first (one
``idle`` after the prompt refresh), ``fork`` appends message by message (one
``idle`` each; here one for the whole copy, as every batch).

A message ``text of mN`` is 8 estimated tokens (4 per message + 4 for its text).
"""

import pytest

from actors import SessionManager

pytestmark = pytest.mark.both_storages


def msg(mid, text=None, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text or f"text of {mid}"}]}


def idle(estimate, sid, threshold="null", before=None):
    compacted = "" if before is None else f',"compacted":{{"tokensBefore":{before}}}'
    return (f'{{"type":"cf_agent_session","phase":"idle","tokenEstimate":{estimate},'
            f'"tokenThreshold":{threshold}{compacted},"sessionId":"{sid}"}}')


def compacting(estimate, sid, threshold="null"):
    return (f'{{"type":"cf_agent_session","phase":"compacting","tokenEstimate":{estimate},'
            f'"tokenThreshold":{threshold},"sessionId":"{sid}"}}')


@pytest.fixture
async def source(recording_agent):
    """A manager on the recording agent and a session holding m1 -> m2 -> m3 -> m4."""
    manager = SessionManager.create(recording_agent)
    sid = (await manager.create("source"))["id"]
    await manager.append_all(sid, [msg("m1"), msg("m2", role="assistant"), msg("m3"), msg("m4", role="assistant")])
    recording_agent.take()
    return manager, sid


async def test_compact_and_split_broadcasts_idle_for_the_new_session(recording_agent, source):
    manager, sid = source
    row = await manager.compact_and_split(sid, "We chose Friday.")
    # "[Context from previous session]\n\nWe chose Friday.": 49 characters, 7 words
    # -> ceil(max(49 / 4, 7 * 1.3)) = 13, plus 4 for the message; no blocks, so no prompt.
    assert recording_agent.take() == [idle(17, row["id"])]


async def test_fork_broadcasts_one_idle_with_the_estimate_of_the_whole_copy(recording_agent, source):
    manager, sid = source
    fork = await manager.fork(sid, "m3", "forked")
    assert recording_agent.take() == [idle(24, fork["id"])]  # three messages of 8, one payload


async def test_delete_broadcasts_idle_with_the_refreshed_prompt_and_leaves_nothing(recording_agent, storage):
    manager = SessionManager.create(recording_agent).with_context("memory").with_cached_prompt()
    sid = (await manager.create("A"))["id"]
    session = await manager.get_session(sid)
    await manager.append(sid, msg("m1"))
    stale = await session.freeze_system_prompt()
    await session.replace_context_block("memory", "Flight on Friday at 9")
    recording_agent.take()

    await manager.delete(sid)
    # As the original's clearMessages: history empty, the prompt rendered again with the
    # block as it is now: SEP\nMEMORY [writable]\nSEP\nFlight on Friday at 9 -- 133
    # characters, 9 words -> ceil(133 / 4) = 34. The stale frozen prompt (112
    # characters, ending in the empty block) would count 28.
    assert len(stale) == 112
    assert recording_agent.take() == [idle(34, sid)]
    # ... and the refresh wrote no row that outlives the delete (docs/deviations.md #15).
    labels = [r["label"] for r in storage.sql("SELECT label FROM cf_agents_context_blocks")]
    assert [label for label in labels if sid in label] == []
    assert storage.sql("SELECT key FROM assistant_config WHERE session_id = ?", sid) == []
    assert await manager.get(sid) is None


async def test_delete_without_a_broadcaster_renders_nothing(storage):
    class BrokenProvider:
        async def get(self):
            raise RuntimeError("provider down")

    manager = SessionManager.create(storage).with_context("soul", provider=BrokenProvider())
    sid = (await manager.create("A"))["id"]
    await manager.append(sid, msg("m1"))
    await manager.delete(sid)  # no broadcast to compute, so the providers are not read
    assert await manager.get(sid) is None
    assert storage.sql("SELECT id FROM assistant_messages WHERE session_id = ?", sid) == []


async def test_fork_runs_one_auto_compaction_check_after_the_copy(recording_agent):
    def compact(messages):
        if messages[0]["id"] == "m1":
            return None  # leave the source alone
        return {"fromMessageId": messages[0]["id"], "toMessageId": messages[1]["id"], "summary": "x"}

    manager = SessionManager.create(recording_agent).on_compaction(compact).compact_after(20)
    sid = (await manager.create("source"))["id"]
    await manager.append_all(sid, [msg("m1"), msg("m2"), msg("m3")])
    recording_agent.take()

    fork = await manager.fork(sid, "m3", "forked")
    fid = fork["id"]
    # 24 > 20: one check after the whole copy compacts the first two copies into "x"
    # (4 + 2 tokens), leaving 6 + 8 = 14.
    assert recording_agent.take() == [
        idle(24, fid, threshold=20), compacting(24, fid, threshold=20), idle(14, fid, threshold=20, before=24)
    ]
    [record] = await manager.get_compactions(fid)
    history = await manager.get_history(fid)
    assert [m["id"] for m in history] == [f"compaction_{record['id']}", history[1]["id"]]
    assert history[1]["parts"][0]["text"] == "text of m3"
