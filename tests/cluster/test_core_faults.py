"""Faults of the local working copy in cluster mode: each is named (and retryable), never an anonymous 500.

In a cluster an actor's file is a working copy the log in Postgres can always
rebuild, so a fault of that copy (a folder in the way, a write the capture
cannot turn into a changeset) costs the caller a retry, not the actor.
"""

from __future__ import annotations

import pytest
import trio

from actors import Agent, SessionAgent, SessionConfig
from common.errors import StorageUnavailableError
from tests.support.cluster import file_digest


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


async def test_a_folder_in_the_way_of_a_restore_is_answered_retryable_503(hosts, pg):
    async with hosts(2) as (a, b):
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        nb = b.bind("sessions", SessionAgent, env=SessionConfig())
        stub = na.get_by_name("blocked")
        await stub.append_message(text(1))
        await a.hibernate(na, stub.id)
        await released(pg, 1)
        in_the_way = b.path_for(stub.id).with_name(b.path_for(stub.id).name + ".restore.tmp")
        (in_the_way / "stray").mkdir(parents=True)  # the restore's temporary file cannot be written
        with pytest.raises(StorageUnavailableError, match="could not be rebuilt from the cluster log") as caught:
            await nb.get(stub.id).get_history()
        assert caught.value.status == 503 and caught.value.retryable
        assert isinstance(caught.value.__cause__, OSError)
        await released(pg, 1)  # the lease goes back at once (in the background)
        (in_the_way / "stray").rmdir()
        in_the_way.rmdir()
        assert [m["id"] for m in await nb.get(stub.id).get_history()] == ["m1"]  # the retry succeeds


class Scratch(Agent):
    """Uses a table for the length of one call: created, written, dropped (or renamed) before the reply."""

    async def on_start(self) -> None:
        self.sql("CREATE TABLE IF NOT EXISTS kept (body TEXT PRIMARY KEY)")

    async def work(self, body: str, drop: str) -> int:
        self.sql("INSERT INTO kept (body) VALUES (?)", body)
        self.sql("CREATE TABLE scratch (n INTEGER PRIMARY KEY, body TEXT)")
        self.sql("INSERT INTO scratch (body) VALUES (?)", body)
        if drop == "drop":
            self.sql("DROP TABLE scratch")
        else:
            self.sql("ALTER TABLE scratch RENAME TO scratch_done")
            self.sql("DROP TABLE scratch_done")
        return len(self.sql("SELECT body FROM kept"))

    async def kept(self) -> list[str]:
        return [row["body"] for row in self.sql("SELECT body FROM kept ORDER BY body")]


async def test_a_table_dropped_after_its_rows_were_captured_ships_the_file_and_moves_intact(hosts, pg):
    """SQLite cannot make a changeset of a table dropped (or renamed) after changes to it were recorded;
    the schema changed anyway, so the entry is a snapshot of the whole file."""
    async with hosts(2) as (a, b):
        na, nb = a.bind("scratch", Scratch), b.bind("scratch", Scratch)
        stub = na.get_by_name("s")
        assert await stub.work("one", "drop") == 1
        assert await stub.work("two", "rename") == 2
        assert await stub.kept() == ["one", "two"]
        assert a.cluster.statistics().poisoned == 0
        await a.hibernate(na, stub.id)
        await released(pg, 1)
        assert await nb.get(stub.id).kept() == ["one", "two"]
        assert await nb.get(stub.id).work("three", "drop") == 3
        await b.hibernate(nb, stub.id)
    digest = file_digest(b.path_for(stub.id))
    assert digest["integrity_check"] == "ok" and digest["kept"].startswith("3 rows")
    assert "scratch" not in digest and "scratch_done" not in digest
