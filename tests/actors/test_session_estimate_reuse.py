"""The status estimate held between broadcasts equals a freshly computed one after every kind of write.

A Session holds the history part of its estimate (actors/session_compaction.py,
``KnownPath``: extended by an append under the latest leaf, forgotten by any
other write or commit) and its context engine holds the stored prompt and
the rendered one (actors/context.py). Here every broadcast estimate is
compared with what a new Session on the same file computes from scratch,
and with the heuristic over ``get_history()`` plus that prompt (docs/behaviours.md §9).
"""

import json

import pytest

from actors.session import Session
from actors.tokens import estimate_message_tokens, estimate_string_tokens

pytestmark = pytest.mark.both_storages


def msg(mid, text=None):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text or f"text of message {mid}"}]}


class Soul:
    def __init__(self, text):
        self.text = text

    async def get(self):
        return self.text


def build(target, sid="s1"):
    return (Session.create(target).for_session(sid).with_context("soul", provider=Soul("You are terse."))
            .with_context("memory", description="facts").with_cached_prompt())


async def fresh_estimate(agent, session):
    """The estimate of a new Session (nothing held) over the same rows, checked against the heuristic."""
    other = build(agent.storage, session.session_id)
    estimate = await other.estimate_tokens()
    prompt = await other._context.prompt_for_estimate()
    assert estimate == estimate_message_tokens(await other.get_history()) + estimate_string_tokens(prompt)
    return estimate


def estimates(agent):
    return [json.loads(frame)["tokenEstimate"] for frame in agent.take()]


async def check(agent, session, broadcasts=1):
    """The last ``broadcasts`` frames each carried the fresh estimate; so does ``estimate_tokens()``."""
    fresh = await fresh_estimate(agent, session)
    assert estimates(agent) == [fresh] * broadcasts
    assert await session.estimate_tokens() == fresh
    return fresh


async def test_every_kind_of_write_leaves_the_broadcast_estimate_equal_to_a_fresh_one(recording_agent):
    agent = recording_agent
    session = build(agent).on_compaction(lambda messages: None)
    for i in range(1, 6):
        await session.append_message(msg(f"m{i}"))
        await check(agent, session)
    grown = await check(agent, session, broadcasts=0)
    await session.append_message(msg("m6", "a much longer message " * 9))
    assert await check(agent, session) > grown
    # a branch switch: an append under an earlier message
    await session.append_message(msg("b1"), "m2")
    await check(agent, session)
    await session.append_message(msg("b2"))
    await check(agent, session)
    # back to the first branch, then a new root
    await session.append_message(msg("m7"), "m6")
    await check(agent, session)
    await session.append_message(msg("r1"), None)
    await check(agent, session)
    await session.append_message(msg("r2"))
    await check(agent, session)
    # a duplicate and an overlay id store nothing and broadcast the same estimate
    assert await session.append_message(msg("r2")) is False
    await check(agent, session)
    await session.append_message(msg("m8"), "m7")
    await check(agent, session)
    # an update on the path, an update off it, a delete
    await session.update_message(msg("m3", "rewritten " * 30))
    await check(agent, session)
    await session.update_message(msg("b1", "rewritten off the path " * 5))
    await check(agent, session)
    await session.delete_messages(["m4"])
    await check(agent, session)
    await session.append_message(msg("m9"))
    await check(agent, session)
    # a compaction (no broadcast), then appends over it
    await session.add_compaction("short summary", "m2", "m5")
    await check(agent, session, broadcasts=0)
    await session.append_message(msg("m10"))
    await check(agent, session)
    # an overlay naming a message not stored yet applies once that message is appended
    await session.add_compaction("tail summary", "m10", "m11")
    before = await check(agent, session, broadcasts=0)
    await session.append_message(msg("m11", "long words " * 40))
    after = await check(agent, session)
    assert after < before + 4 + estimate_string_tokens("long words " * 40)  # hidden by the overlay
    await session.append_message(msg("m12"))
    await check(agent, session)
    # a batch, and a batch of duplicates
    await session.append_messages([msg("n1"), msg("n2"), msg("n3")])
    await check(agent, session)
    await session.append_messages([msg("n2"), msg("n3")])
    await check(agent, session)
    await session.append_message(msg("n4"))
    await check(agent, session)


async def test_block_writes_prompt_freeze_and_refresh_move_the_held_prompt(recording_agent):
    agent = recording_agent
    session = build(agent)
    await session.append_message(msg("m1"))
    rendered = await check(agent, session)  # no prompt stored yet: rendered from the blocks
    await session.replace_context_block("memory", "the user likes tea " * 10)
    await session.append_message(msg("m2"))
    assert await check(agent, session) > rendered + estimate_message_tokens([msg("m2")])  # the render follows
    # a block written by another engine on the same file: re-read, and the render follows it too
    tea = await check(agent, session, broadcasts=0)
    await build(agent.storage).replace_context_block("memory", "no tea")
    assert await check(agent, session, broadcasts=0) < tea
    frozen = await session.freeze_system_prompt()
    await session.append_message(msg("m3"))
    with_frozen = await check(agent, session)
    await session.append_context_block("memory", "and coffee " * 20)
    await session.append_message(msg("m4"))
    assert await check(agent, session) == with_frozen + estimate_message_tokens([msg("m4")])  # the frozen prompt
    assert await session.freeze_system_prompt() == frozen
    refreshed = await session.refresh_system_prompt()
    assert refreshed != frozen
    await session.append_message(msg("m5"))
    await check(agent, session)
    # a session holding the stored prompt (it has no snapshot of its own) reads it again once
    # another engine on the same file stores a new one
    await session.replace_context_block("memory", "short")
    reader = build(agent)
    assert await reader.freeze_system_prompt() == refreshed
    await reader.append_message(msg("m6"))
    held = await check(agent, reader)
    assert await session.refresh_system_prompt() != refreshed  # no block write in between
    await reader.append_message(msg("m7"))
    assert await check(agent, reader) < held


async def test_compaction_and_clear_leave_the_estimate_fresh(recording_agent):
    agent = recording_agent

    def summarize(messages):
        return {"summary": "gist", "fromMessageId": messages[0]["id"], "toMessageId": messages[-2]["id"]}

    session = build(agent).on_compaction(summarize)
    for i in range(1, 9):
        await session.append_message(msg(f"m{i}", "words " * 20))
    agent.take()
    await session.compact()
    compacting, idle = [json.loads(frame) for frame in agent.take()]
    fresh = await fresh_estimate(agent, session)
    assert idle["tokenEstimate"] == fresh and idle["compacted"]["tokensBefore"] == compacting["tokenEstimate"]
    await session.append_message(msg("m9"))
    await check(agent, session)
    await session.clear_messages()
    assert await check(agent, session) == estimate_string_tokens(await session._context.prompt_for_estimate())
    await session.append_message(msg("c1"))
    await check(agent, session)


async def test_auto_compaction_fires_at_the_same_estimates_as_a_fresh_count(recording_agent):
    agent = recording_agent

    def summarize(messages):
        return {"summary": "gist", "fromMessageId": messages[0]["id"], "toMessageId": messages[-2]["id"]}

    session = build(agent).on_compaction(summarize).compact_after(300)
    for i in range(1, 30):
        await session.append_message(msg(f"m{i}", "words " * 12))
        frames = [json.loads(frame) for frame in agent.take()]
        assert frames[-1]["tokenEstimate"] == await fresh_estimate(agent, session)
        assert all(f["tokenEstimate"] <= 300 or f is frames[0] for f in frames if f["phase"] == "idle")
    assert len(await session.get_compactions()) >= 2


@pytest.mark.sqlite_only("a caller's transaction and another Session's writes on one SQLite file")
async def test_writes_the_session_was_not_told_of_are_seen(recording_agent):
    agent, storage = recording_agent, recording_agent.storage
    session = build(agent)
    for i in range(1, 4):
        await session.append_message(msg(f"m{i}"))
    agent.take()
    await check(agent, session, broadcasts=0)
    # another Session on the same rows rewrites a message on the path, adds an overlay, appends
    other = build(storage)
    await other.update_message(msg("m2", "rewritten by another session " * 8))
    agent.take()
    await check(agent, session, broadcasts=0)
    await session.append_message(msg("m4"))
    await check(agent, session)
    await other.add_compaction("gist", "m1", "m2")
    await check(agent, session, broadcasts=0)
    await other.append_message(msg("m5", "from the other session " * 4))
    agent.take()
    await check(agent, session, broadcasts=0)
    # raw SQL behind every Session's back
    storage.exec("DELETE FROM assistant_compactions")
    await check(agent, session, broadcasts=0)
    # another Session's write, then an append of this one with no estimate in between
    await other.update_message(msg("m3", "again and again " * 9))
    agent.take()
    await session.append_message(msg("m6"))
    await check(agent, session)
    # an append inside a caller's transaction that is rolled back
    with pytest.raises(RuntimeError):
        with storage.transaction():
            await session.append_message(msg("gone", "rolled back " * 50))
            agent.take()
            raise RuntimeError("roll back")
    await session.append_message(msg("m7"))
    await check(agent, session)
    assert [m["id"] for m in await session.get_history()] == ["m1", "m2", "m3", "m4", "m5", "m6", "m7"]
    # a prompt stored (by an engine without blocks: "") inside a transaction that is rolled back
    rendered = await check(agent, session, broadcasts=0)
    with pytest.raises(RuntimeError):
        with storage.transaction():
            assert await Session.create(storage).for_session("s1").with_cached_prompt().freeze_system_prompt() == ""
            assert await session.estimate_tokens() < rendered  # the uncommitted "" counts here
            raise RuntimeError("roll back")
    assert await check(agent, session, broadcasts=0) == rendered


async def test_a_held_estimate_is_reused_until_something_changes(recording_agent, monkeypatch):
    """The point of holding it: appends under the latest leaf read no totals and no stored prompt."""
    import actors.context as context
    import actors.session_compaction as part

    agent = recording_agent
    session = build(agent).for_session("s1")
    await session.freeze_system_prompt()
    await session.append_message(msg("m1"))
    agent.take()
    fills, prompt_reads = [], []
    original_fill = part.SessionCompaction._history_tokens
    original_get = context.AgentContextProvider.get

    async def counted_fill(self):
        known = self._known
        tokens = await original_fill(self)
        if known is None or self._known is not known:
            fills.append(tokens)
        return tokens

    async def counted_get(self):
        prompt_reads.append(self.key)
        return await original_get(self)

    monkeypatch.setattr(part.SessionCompaction, "_history_tokens", counted_fill)
    monkeypatch.setattr(context.AgentContextProvider, "get", counted_get)
    for i in range(2, 12):
        await session.append_message(msg(f"m{i}"))
    if type(agent.storage).__name__ == "SqlStorage":  # the held path: no totals read, no stored prompt read
        assert fills == [] and [key for key in prompt_reads if key.startswith("_system_prompt")] == []
    else:  # Postgres: nothing held, every estimate reads the totals
        assert len(fills) == 10
    await session.update_message(msg("m3", "changed"))  # forgets: the next estimate reads the totals
    prompt = estimate_string_tokens(await session.freeze_system_prompt())
    assert fills[-1] + prompt == await session.estimate_tokens()
    held = estimates(agent)
    fresh = await fresh_estimate(agent, session)
    assert held[-1] == fresh
    own = [estimate_message_tokens([msg(f"m{i}")]) for i in range(2, 12)]
    changed = estimate_message_tokens([msg("m3", "changed")]) - estimate_message_tokens([msg("m3")])
    assert held[:-1] == [fresh - changed - sum(own[i - 1:]) for i in range(2, 12)]  # each adds its own tokens
