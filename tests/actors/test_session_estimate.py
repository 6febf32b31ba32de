"""The token estimate from stored running totals equals the heuristic over get_history().

docs/behaviours.md §9 (the Session estimate: history with overlays applied
plus the prompt) computed without reading the history: ``path_tokens`` per
row, jump pointers to test which overlays lie on the path (docs/deviations.md #13).
"""

import random

import pytest

from actors.session import LATEST_LEAF, Session
from actors.session_store import sync_store
from actors.tokens import estimate_message_tokens, estimate_string_tokens
from storage.messages import MessageStore

pytestmark = pytest.mark.both_storages


def msg(mid, text, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}]}


def seqs(storage, sid):
    return dict(storage.exec("SELECT id, seq FROM assistant_messages WHERE session_id = ?", sid))


async def assert_totals_match_history(session):
    store = session._messages  # the session's own store, SQLite or Postgres
    for mid in seqs(session.storage, session.session_id):
        totals = await store.path_tokens(mid)
        visible = totals.total - sum(hidden for _, hidden in totals.hidden)
        visible += sum(4 + estimate_string_tokens(row.summary) for row, _ in totals.hidden)
        assert visible == estimate_message_tokens(await session.get_history(mid)), mid


async def assert_jumps_find_every_ancestor(session):
    store = session._messages  # the session's own store: the same jump pointers on SQLite and Postgres
    sync = sync_store(store)  # SQLite: the MessageStore behind the Session's awaitable view

    async def climb(seq, depth):
        return sync.ancestor_at_depth(seq, depth) if sync is not None else await store.ancestor_at_depth(seq, depth)

    seq_of = seqs(session.storage, session.session_id)
    for mid, seq in seq_of.items():
        path = [row["id"] for row in await session.get_history_row_stats(mid)]
        assert [await climb(seq, d) for d in range(1, len(path) + 1)] == [seq_of[i] for i in path]
        assert await climb(seq, len(path) + 1) is None
        assert await climb(seq, 0) is None


async def test_estimate_of_a_plain_chain_is_the_heuristic_plus_the_prompt(storage):
    session = Session.create(storage).with_context("soul", provider=Soul("You are terse."))
    for i in range(30):
        await session.append_message(msg(f"m{i}", "word " * i))
    history = await session.get_history()
    prompt = await session.freeze_system_prompt()
    assert await session.estimate_tokens() == estimate_message_tokens(history) + estimate_string_tokens(prompt)
    # 30 messages: 4 each + ceil(1.3 * i) for "word " * i; the prompt is 124 chars -> 31
    assert await session.estimate_tokens() == 120 + 579 + 31


async def test_estimate_subtracts_what_overlays_hide_and_adds_their_summaries(storage):
    session = Session.create(storage)
    for i in range(1, 8):
        await session.append_message(msg(f"m{i}", f"message number {i} " * 5))
    before = await session.estimate_tokens()
    await session.add_compaction("short summary", "m2", "m6")
    history = await session.get_history()
    assert len(history) == 3
    # each message: 4 + 22 ("message number N " * 5, 15 words); the overlay: 4 + 4 ("short summary")
    assert before == 7 * 26
    assert await session.estimate_tokens() == estimate_message_tokens(history) == before - 5 * 26 + 4 + 4


async def test_estimate_is_zero_for_an_empty_session_without_blocks(storage):
    assert await Session.create(storage).estimate_tokens() == 0


class Soul:
    def __init__(self, text):
        self.text = text

    async def get(self):
        return self.text


async def test_running_totals_and_jumps_stay_exact_through_random_edits_and_compactions(storage):
    rng = random.Random(7)
    session = Session.create(storage).for_session("fuzz")
    live: list[str] = []
    for step in range(500):
        action = rng.random()
        if action < 0.55 or len(live) < 3:
            parent = rng.choice([LATEST_LEAF, LATEST_LEAF, None, *(live[-8:] or [None])])
            mid = f"m{step}"
            role = rng.choice(["user", "assistant"])
            await session.append_message(msg(mid, "tok " * rng.randint(0, 30), role), parent)
            live.append(mid)
        elif action < 0.7:
            await session.update_message(msg(rng.choice(live), "upd " * rng.randint(0, 60)))
        elif action < 0.8:
            doomed = rng.sample(live, rng.randint(1, 2))
            await session.delete_messages(doomed)
            live = [m for m in live if m not in doomed]
        else:
            start, end = rng.choice(live), rng.choice(live)
            await session.add_compaction("summary " * rng.randint(1, 9), start, end)
    assert len(live) > 150
    assert len(await session.get_compactions()) > 60
    await assert_totals_match_history(session)
    await assert_jumps_find_every_ancestor(session)
    history = await session.get_history()
    assert await session.estimate_tokens() == estimate_message_tokens(history)


@pytest.mark.sqlite_only("the climb is counted with SQLite SQL")
async def test_a_long_chain_climbs_in_logarithmic_steps(storage):
    session = Session.create(storage)
    for i in range(1, 1025):
        await session.append_message(msg(f"m{i}", "x"))
    store = MessageStore(storage)
    leaf = seqs(storage, "")["m1024"]
    steps = storage.scalar(
        "WITH RECURSIVE climb(seq, depth, n) AS ("
        " SELECT seq, depth, 0 FROM assistant_messages WHERE seq = ?1"
        " UNION ALL SELECT CASE WHEN j.depth >= ?2 THEN j.seq ELSE p.seq END,"
        "  CASE WHEN j.depth >= ?2 THEN j.depth ELSE p.depth END, c.n + 1"
        " FROM climb c JOIN assistant_messages m ON m.seq = c.seq"
        " JOIN assistant_messages j ON j.seq = coalesce(m.jump_seq, m.seq)"
        " JOIN assistant_messages p ON p.session_id = '' AND p.id = m.parent_id WHERE c.depth > ?2)"
        " SELECT max(n) FROM climb",
        leaf,
        2,
    )
    assert store.ancestor_at_depth(leaf, 2) == seqs(storage, "")["m2"]
    assert steps <= 2 * 10 + 2  # O(log2 1024), not 1022 parent steps
