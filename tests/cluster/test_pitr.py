"""Point-in-time restore in one process: hosts in cluster mode on a real Postgres, real actor files.

The history is the cluster log and its snapshots, kept for the window
(``pitr_window_s``); a bookmark names a moment of one session, the owner
rewinds the session to it with one fenced whole-file entry, and the restore
itself can be undone with the bookmark it answers.
"""

from __future__ import annotations

import pytest
import trio

from actors import SessionAgent, SessionConfig
from common.errors import InvalidInputError, NotOwnerError
from runtime.host.ids import ActorId
from storage.cluster.history import Bookmark, OutsideWindowError
from storage.schema import SCHEMA_VERSION


def text(i: int, words: str = "hello") -> dict:
    return {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "parts": [{"type": "text", "text": words}]}


def now_ms(pg) -> int:
    """Postgres' clock (the one ``written_at`` is stamped with), epoch ms."""
    return int(pg("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint")[0][0])


async def restore(host, namespace, actor_id: ActorId, token: str):
    """What ``POST ...:restore`` does at the owner."""
    await host.hibernate(namespace, actor_id)
    return await host.cluster.restore(actor_id, token, path=host.path_for(actor_id), durability=host.durability,
                                      template=host.data_dir / "_template" / f"v{SCHEMA_VERSION}.sqlite3")


async def ids(stub) -> list[str]:
    return [message["id"] for message in await stub.get_history()]


async def moment_after(pg) -> int:
    """A moment strictly after every write so far (Postgres' clock ticks in microseconds)."""
    await trio.sleep(0.01)
    moment = now_ms(pg)
    await trio.sleep(0.01)
    return moment


async def test_a_session_rewinds_to_a_bookmark_and_the_undo_bookmark_brings_it_back(hosts, pg):
    async with hosts(2) as (a, b):
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        nb = b.bind("sessions", SessionAgent, env=SessionConfig())
        stub = na.get_by_name("trip")
        for i in range(3):
            await stub.append_message(text(i))
        middle = await moment_after(pg)
        (then,) = pg("SELECT max(seq) FROM ds_log")[0]
        for i in range(3, 6):
            await stub.append_message(text(i))
        await stub.delete_messages(["m0"])
        (last,) = pg("SELECT max(seq) FROM ds_log")[0]
        token, bookmark, _now = await b.cluster.bookmark(stub.id, middle)  # any host answers a bookmark
        assert bookmark.seq == then and token.startswith("bm1.")

        outcome = await restore(a, na, stub.id, token)
        assert (outcome.restored_seq, outcome.messages, outcome.seq) == (then, 3, last + 1)
        assert await ids(stub) == ["m0", "m1", "m2"]  # the next call wakes it from the restore entry
        await stub.append_message(text(9))  # and it goes on from there
        assert await ids(stub) == ["m0", "m1", "m2", "m9"]
        assert pg("SELECT messages FROM ds_catalog") == [(4,)]
        # The restore is one whole-file entry of the log, fenced like any write.
        assert pg("SELECT length(changeset) FROM ds_log WHERE seq = %s", last + 1) == [(0,)]
        assert pg("SELECT seq FROM ds_snapshots ORDER BY seq")[-1] == (last + 1,)

        # Undo: the state just before the restore comes back (m9 was written after it: gone too).
        await restore(a, na, stub.id, outcome.undo)
        assert await ids(stub) == ["m1", "m2", "m3", "m4", "m5"]
        # Another host takes the session over from the log: the same state.
        await a.hibernate(na, stub.id)
        await a.cluster.settle()
        assert await ids(nb.get(stub.id)) == ["m1", "m2", "m3", "m4", "m5"]


async def test_a_moment_before_the_first_write_restores_an_empty_session(hosts, pg):
    async with hosts(1) as (a,):
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        before = now_ms(pg)
        await trio.sleep(0.01)
        stub = na.get_by_name("fresh")
        await stub.append_message(text(0))
        token, bookmark, _now = await a.cluster.bookmark(stub.id, before)
        assert bookmark.seq == 0
        outcome = await restore(a, na, stub.id, token)
        assert outcome.messages == 0 and await ids(stub) == []
        assert pg("SELECT messages FROM ds_catalog") == [(0,)]


async def test_bad_bookmarks_are_refused_and_change_nothing(hosts, pg):
    async with hosts(1, pitr_window_s=3600) as (a,):
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        one, other = na.get_by_name("one"), na.get_by_name("other")
        await one.append_message(text(0))
        await other.append_message(text(0))
        moment = await moment_after(pg)
        await one.append_message(text(1))
        token, _bookmark, server_ms = await a.cluster.bookmark(one.id, moment)
        logged = pg("SELECT actor_id, seq FROM ds_log ORDER BY actor_id, seq")

        with pytest.raises(InvalidInputError, match="another session") as caught:
            await restore(a, na, other.id, token)
        assert caught.value.field == "bookmark"
        with pytest.raises(InvalidInputError, match="not a bookmark string"):
            await restore(a, na, one.id, "bm1.garbage!")
        with pytest.raises(InvalidInputError, match="must be a bookmark string"):
            await restore(a, na, one.id, 42)
        # A moment before the window: 400 naming the window.
        with pytest.raises(OutsideWindowError, match=r"outside the point-in-time window of 0\.0416667 days \(from 20"):
            await a.cluster.bookmark(one.id, server_ms - 3_700_000)
        # A bookmark made while in the window, used once its moment left it (here: forged older).
        cluster_id, actor = a.cluster.cluster_id, f"sessions/{one.id.hex}"
        old = Bookmark.decode(token, cluster_id, actor)
        stale = Bookmark(old.seq, old.entry_ms, server_ms - 3_700_000).encode(cluster_id, actor)
        with pytest.raises(OutsideWindowError, match="outside the point-in-time window of 0.0416667 days"):
            await restore(a, na, one.id, stale)
        assert pg("SELECT actor_id, seq FROM ds_log ORDER BY actor_id, seq") == logged
        assert await ids(one) == ["m0", "m1"]


async def test_restore_runs_only_at_the_owner(hosts, pg):
    async with hosts(2) as (a, b):
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        nb = b.bind("sessions", SessionAgent, env=SessionConfig())
        stub = na.get_by_name("owned")
        await stub.append_message(text(0))
        moment = await moment_after(pg)
        await stub.append_message(text(1))
        token, _bookmark, _now = await b.cluster.bookmark(stub.id, moment)
        with pytest.raises(NotOwnerError):  # a is the owner: the server forwards the call there
            await restore(b, nb, stub.id, token)
        assert await ids(stub) == ["m0", "m1"]


async def test_a_delete_purges_the_history_and_its_bookmarks(hosts, pg):
    async with hosts(1) as (a,):
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        stub = na.get_by_name("gone")
        for i in range(3):
            await stub.append_message(text(i))
        moment = await moment_after(pg)
        await stub.append_message(text(3))
        token, _bookmark, _now = await a.cluster.bookmark(stub.id, moment)
        await a.erase(na, stub.id)
        assert pg("SELECT count(*) FROM ds_log") == [(0,)] and pg("SELECT count(*) FROM ds_snapshots") == [(0,)]
        assert await a.cluster.bookmark(stub.id, moment) is None  # never written, as far as anyone knows
        for i in range(5):  # written again: sequence numbers are reused, the old bookmark is not
            await stub.append_message(text(10 + i))
        with pytest.raises(InvalidInputError, match="deleted and written again"):
            await restore(a, na, stub.id, token)
        assert await ids(stub) == [f"m{10 + i}" for i in range(5)]


async def test_history_older_than_the_window_is_pruned_and_the_window_stays_restorable(hosts, pg):
    window_s = 2.0
    async with hosts(1, pitr_window_s=window_s, snapshot_min_bytes=2_000, pitr_prune_s=3600) as (a,):
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        stub = na.get_by_name("long")
        for i in range(60):
            await stub.append_message(text(i, "x" * 400))
        with trio.fail_after(20):
            while a.cluster.statistics().snapshots < 2:
                await trio.sleep(0.02)
        first = pg("SELECT min(seq), count(*) FROM ds_log")[0]
        assert first[0] == 1  # inside the window nothing is trimmed behind the snapshots
        await trio.sleep(window_s + 0.5)  # the session sleeps through the window: only the sweep prunes
        in_window = await moment_after(pg)
        rows, size, snapshots = await a.cluster.prune_history()
        assert rows > 0 and size > 0 and snapshots >= 1
        (oldest,) = pg("SELECT min(seq) FROM ds_log")[0]
        (base,) = pg("SELECT min(seq) FROM ds_snapshots")[0]
        assert oldest == base > 1  # the window's base snapshot and everything after it stay
        for i in range(60, 64):
            await stub.append_message(text(i, "y"))
        # Every moment of the window still restores; the state at in_window is the 60 messages.
        token, _bookmark, _now = await a.cluster.bookmark(stub.id, in_window)
        outcome = await restore(a, na, stub.id, token)
        assert outcome.messages == 60 and await ids(stub) == [f"m{i}" for i in range(60)]
        assert await a.cluster.prune_history() == (0, 0, 0)


async def test_on_several_databases_each_session_restores_from_its_own(tmp_path, pg_empty_dsn, second_dsn):
    from tests.cluster.test_partitions import hosts_on, rows

    dsns = [pg_empty_dsn, second_dsn]
    async with hosts_on(tmp_path, dsns, 1) as (a,):
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        stubs, where = {}, set()
        for i in range(12):  # sessions in both databases
            stub = na.get_by_name(f"s{i}")
            await stub.append_message(text(0))
            stubs[stub] = a.cluster.member(stub.id)
            where.add(a.cluster.members.index(stubs[stub]))
        assert where == {0, 1}
        moment = await moment_after(lambda query, *params: rows(pg_empty_dsn, query, *params))  # one server
        for stub in stubs:
            await stub.append_message(text(1))
        for stub in stubs:
            token, _bookmark, _now = await a.cluster.bookmark(stub.id, moment)
            outcome = await restore(a, na, stub.id, token)
            assert outcome.messages == 1 and await ids(stub) == ["m0"]
        assert (await a.cluster.prune_history()) == (0, 0, 0)  # nothing older than 7 days


async def test_a_moment_still_to_come_names_the_current_state_now(hosts, pg):
    async with hosts(1) as (a,):
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        stub = na.get_by_name("later")
        await stub.append_message(text(0))
        (newest,) = pg("SELECT max(seq) FROM ds_log")[0]
        _token, bookmark, server_ms = await a.cluster.bookmark(stub.id, now_ms(pg) + 86_400_000)
        assert bookmark.seq == newest and bookmark.at_ms == server_ms
