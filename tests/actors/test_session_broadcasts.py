"""Status broadcasts: payloads, key order and when they are sent (docs/behaviours.md §12, docs/deviations.md #16).

Every message here is 8 estimated tokens (4 per message + 4 for "text of mN").
"""

import json

import pytest
import trio

from actors.session import Session

pytestmark = pytest.mark.both_storages


def msg(mid):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": f"text of {mid}"}]}


def idle(estimate, threshold="null", sid="s1", before=None):
    compacted = "" if before is None else f',"compacted":{{"tokensBefore":{before}}}'
    return (f'{{"type":"cf_agent_session","phase":"idle","tokenEstimate":{estimate},'
            f'"tokenThreshold":{threshold}{compacted},"sessionId":"{sid}"}}')


def compacting(estimate, threshold="null", sid="s1"):
    return (f'{{"type":"cf_agent_session","phase":"compacting","tokenEstimate":{estimate},'
            f'"tokenThreshold":{threshold},"sessionId":"{sid}"}}')


def error(text, sid="s1"):
    return f'{{"type":"cf_agent_session_error","error":"{text}","sessionId":"{sid}"}}'


async def test_writes_broadcast_idle_with_the_estimate_and_the_session_id(recording_agent):
    session = Session.create(recording_agent).for_session("s1")
    await session.append_message(msg("m1"))
    assert recording_agent.take() == [idle(8)]
    await session.append_message(msg("m2"))
    assert recording_agent.take() == [idle(16)]
    assert await session.append_message(msg("m2")) is False  # duplicate: idle only
    assert recording_agent.take() == [idle(16)]
    await session.update_message({**msg("m2"), "parts": [{"type": "text", "text": "a b c d e f g h i j"}]})
    assert recording_agent.take() == [idle(8 + 4 + 13)]
    await session.delete_messages(["m1"])
    assert recording_agent.take() == [idle(17)]
    await session.clear_messages()
    assert recording_agent.take() == [idle(0)]


async def test_the_payload_keys_come_in_the_original_order_plus_session_id(recording_agent):
    session = Session.create(recording_agent).on_compaction(lambda m: None).compact_after(1000)
    await session.append_message(msg("m1"))
    [payload] = recording_agent.take()
    assert list(json.loads(payload)) == ["type", "phase", "tokenEstimate", "tokenThreshold", "sessionId"]
    assert payload == idle(8, threshold=1000, sid="")


async def test_manual_compaction_broadcasts_compacting_then_idle_with_tokens_before(recording_agent):
    session = Session.create(recording_agent).for_session("s1").on_compaction(
        lambda m: {"fromMessageId": "m1", "toMessageId": "m2", "summary": "x"}
    )
    for mid in ("m1", "m2", "m3"):
        await session.append_message(msg(mid))
    recording_agent.take()
    await session.compact()
    assert recording_agent.take() == [compacting(24), idle(8 + 4 + 2, before=24)]


async def test_manual_compaction_with_nothing_to_do_broadcasts_plain_idle(recording_agent):
    session = Session.create(recording_agent).for_session("s1").on_compaction(lambda m: None)
    await session.append_message(msg("m1"))
    recording_agent.take()
    assert await session.compact() is None
    assert recording_agent.take() == [compacting(8), idle(8)]


async def test_manual_compaction_error_broadcasts_the_error_and_no_idle(recording_agent):
    def broken(messages):
        raise RuntimeError("model unavailable")

    session = Session.create(recording_agent).for_session("s1").on_compaction(broken)
    await session.append_message(msg("m1"))
    recording_agent.take()
    assert await session.compact() is None
    assert recording_agent.take() == [compacting(8), error("model unavailable")]


async def test_auto_compaction_broadcasts_idle_compacting_then_idle_compacted(recording_agent):
    session = Session.create(recording_agent).for_session("s1").compact_after(20).on_compaction(
        lambda m: {"fromMessageId": "m1", "toMessageId": "m2", "summary": "x"}
    )
    await session.append_message(msg("m1"))
    await session.append_message(msg("m2"))
    assert recording_agent.take() == [idle(8, 20), idle(16, 20)]
    await session.append_message(msg("m3"))
    assert recording_agent.take() == [idle(24, 20), compacting(24, 20), idle(14, 20, before=24)]


async def test_auto_compaction_error_broadcasts_after_compacting(recording_agent):
    session = Session.create(recording_agent).for_session("s1").compact_after(0).on_compaction(
        lambda m: {"fromMessageId": "gone", "toMessageId": "m1", "summary": "x"}
    )
    await session.append_message(msg("m1"))
    assert recording_agent.take() == [
        idle(8, 0), compacting(8, 0), error("compaction fromMessageId 'gone' is not a message of the current history")
    ]


async def test_an_async_broadcaster_is_awaited_and_a_failing_one_never_fails_a_write(storage):
    # Local targets, not RecordingAgent: Agent.broadcast is synchronous and swallows a failing
    # peer, so only these reach Session's handling of an awaitable or raising broadcaster.
    received = []

    class AsyncAgent:
        def __init__(self):
            self.storage = storage

        async def broadcast(self, text):
            await trio.lowlevel.checkpoint()
            received.append(text)

    await Session.create(AsyncAgent()).append_message(msg("m1"))
    assert received == [idle(8, sid="")]

    class BrokenAgent:
        def __init__(self):
            self.storage = storage

        def broadcast(self, text):
            raise ConnectionError("peer gone")

    assert await Session.create(BrokenAgent()).append_message(msg("m2")) is True
    assert await Session.create(storage).get_path_length() == 2


async def test_the_estimate_counts_the_prompt_once_it_exists(recording_agent):
    class Soul:
        async def get(self):
            return "Be brief."

    session = Session.create(recording_agent).for_session("s1").with_context("soul", provider=Soul())
    await session.append_message(msg("m1"))
    # the prompt "SEP\nSOUL [readonly]\nSEP\nBe brief." is 119 UTF-16 units -> 30 tokens
    assert recording_agent.take() == [idle(8 + 30)]


async def test_with_no_peer_connected_no_status_is_estimated_or_encoded(recording_agent, monkeypatch):
    """An actor's broadcast with no peer reaches no one: the append skips the estimate and the
    payload; once a peer is connected, it gets the very bytes it always got."""
    import actors.session_compaction as part

    made = {"estimates": 0, "payloads": 0}
    estimate, encode = part.SessionCompaction.estimate, part.status_broadcast

    async def counted_estimate(self):
        made["estimates"] += 1
        return await estimate(self)

    def counted_encode(**kwargs):
        made["payloads"] += 1
        return encode(**kwargs)

    monkeypatch.setattr(part.SessionCompaction, "estimate", counted_estimate)
    monkeypatch.setattr(part, "status_broadcast", counted_encode)
    peers = recording_agent.ctx.connections
    peer = peers.pop()
    session = Session.create(recording_agent).for_session("s1")
    await session.append_message(msg("m1"))
    await session.append_message(msg("m2"))
    await session.delete_messages(["m2"])
    assert made == {"estimates": 0, "payloads": 0}
    peers.append(peer)
    await session.append_message(msg("m3"))
    assert recording_agent.take() == [idle(16)]
    assert made == {"estimates": 1, "payloads": 1}


async def test_with_no_peer_connected_auto_compaction_still_fires_at_the_same_estimate(recording_agent):
    seen = []

    def summarize(messages):
        seen.append([m["id"] for m in messages])
        return {"fromMessageId": "m1", "toMessageId": "m2", "summary": "x"}

    recording_agent.ctx.connections.clear()
    session = Session.create(recording_agent).for_session("s1").on_compaction(summarize).compact_after(20)
    await session.append_message(msg("m1"))
    await session.append_message(msg("m2"))  # 16 tokens: not above 20
    assert seen == []
    await session.append_message(msg("m3"))  # 24 tokens: above 20
    assert seen == [["m1", "m2", "m3"]]
    assert [(c["fromMessageId"], c["toMessageId"]) for c in await session.get_compactions()] == [("m1", "m2")]


async def test_an_overridden_broadcast_always_counts_as_listening(storage):
    from tests.support.agents import RecordingAgent

    class Relay(RecordingAgent):
        def broadcast(self, message, exclude=()):
            self.relayed.append(message)

    agent = Relay(storage)
    agent.relayed = []
    agent.ctx.connections.clear()
    session = Session.create(agent).for_session("s1")
    await session.append_message(msg("m1"))
    assert agent.relayed == [idle(8)]
