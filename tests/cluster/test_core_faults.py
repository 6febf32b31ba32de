"""Faults of the local working copy in cluster mode: each is named (and retryable), never an anonymous 500.

In a cluster an actor's file is a working copy the log in Postgres can always
rebuild, so a fault of that copy (a folder in the way, a write the capture
cannot turn into a changeset) costs the caller a retry, not the actor.
"""

from __future__ import annotations

import trio

from actors import SessionAgent, SessionConfig


def text(i: int) -> dict:
    return {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"seat {i} by the window"}]}


async def released(pg, count: int) -> None:
    with trio.fail_after(10):
        while pg("SELECT count(*) FROM ds_actors WHERE owner IS NULL")[0][0] < count:
            await trio.sleep(0.01)


async def test_many_first_activations_at_once_each_restoring_from_postgres_all_succeed(hosts, pg):
    """A host with a fresh data folder (no template yet) wakes many sessions at once, each rebuilt from
    a log without a snapshot on a worker thread: none of them fails (once: 'database is locked')."""
    sessions = 12
    async with hosts(2) as (a, b):
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        nb = b.bind("sessions", SessionAgent, env=SessionConfig())
        for i in range(sessions):
            await na.get_by_name(f"s{i}").append_message(text(i))
        await a.hibernate_all()
        await released(pg, sessions)
        assert not b.data_dir.joinpath("_template").exists()
        answers: dict[int, object] = {}

        async def first_call(i: int) -> None:
            try:
                answers[i] = [m["id"] for m in await nb.get_by_name(f"s{i}").get_history()]
            except Exception as exc:  # noqa: BLE001 - collected for the assertion
                answers[i] = exc

        async with trio.open_nursery() as nursery:
            for i in range(sessions):
                nursery.start_soon(first_call, i)
        assert answers == {i: [f"m{i}"] for i in range(sessions)}
        assert b.cluster.statistics().restores == sessions
