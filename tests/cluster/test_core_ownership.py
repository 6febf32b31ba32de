"""Cluster core, several hosts in one process: one activation per id, forwarding errors, fencing, the output gate."""

from __future__ import annotations

import json
import time

import psycopg
import pytest
import trio

from actors import Agent, SessionAgent, SessionConfig
from common.errors import NotOwnerError, OwnershipLostError
from runtime.host.actor_host import WAL_KEEP_BYTES
from runtime.host.ids import ActorId
from runtime.testing import run_in_actor
from tests.support.agents import RecordingConnection

STARTS: list[tuple[str, str]] = []


class Counter(Agent):
    """Counts in KV; records every activation (host id, actor) in ``STARTS``."""

    async def on_start(self) -> None:
        STARTS.append((self.env, self.ctx.id.hex))

    async def add(self, n: int = 1) -> int:
        value = self.storage.get("n", 0) + n
        self.storage.put("n", value)
        return value

    async def read(self) -> int:
        return self.storage.get("n", 0)

    async def slow_read(self, seconds: float) -> int:
        value = self.storage.get("n", 0)
        await trio.sleep(seconds)
        return value


def text(i: int) -> dict:
    return {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"message {i}"}]}


def bind_counters(hosts):
    return [host.bind("counters", Counter, env=host.cluster.host_id) for host in hosts]


def actor_file(host, actor_id: ActorId):
    return host.path_for(actor_id)


async def test_racing_hosts_activate_an_actor_exactly_once(hosts):
    STARTS.clear()
    async with hosts(3) as all_hosts:
        namespaces = bind_counters(all_hosts)
        results: dict[str, object] = {}

        async def call(ns):
            try:
                results[ns.host.cluster.host_id] = await ns.get_by_name("shared").add()
            except NotOwnerError as exc:
                results[ns.host.cluster.host_id] = exc

        async with trio.open_nursery() as nursery:
            for ns in namespaces:
                nursery.start_soon(call, ns)
        winners = [host for host, value in results.items() if value == 1]
        assert len(winners) == 1 and len(STARTS) == 1 and STARTS[0][0] == winners[0]
        for host_id, value in results.items():
            if host_id != winners[0]:
                assert isinstance(value, NotOwnerError)
                assert (value.owner_url, value.owner_host) == (f"http://{winners[0]}", winners[0])
                assert value.actor == f"counters/{namespaces[0].id_from_name('shared').hex}"
                assert 1 <= value.retry_after_s <= 1.5 and value.status == 503 and value.retryable
        # the losers never touched a file for it
        actor_id = namespaces[0].id_from_name("shared")
        assert [actor_file(h, actor_id).exists() for h in all_hosts] == [h.cluster.host_id == winners[0]
                                                                          for h in all_hosts]


async def test_hibernation_releases_and_a_wake_on_the_same_host_keeps_its_file(hosts, pg):
    async with hosts(2) as (a, b):
        na, nb = bind_counters([a, b])
        stub = na.get_by_name("c")
        assert await stub.add(5) == 5
        await a.hibernate(na, stub.id)
        with trio.fail_after(30):
            while pg("SELECT owner FROM ds_actors")[0][0] is not None:
                await trio.sleep(0.01)
        assert await stub.add() == 6
        stats = a.cluster.statistics()
        assert (stats.restores, stats.kept, stats.acquisitions) == (1, 1, 2)  # first wake restored (new actor)
        await a.hibernate(na, stub.id)
        with trio.fail_after(30):
            while pg("SELECT owner FROM ds_actors")[0][0] is not None:
                await trio.sleep(0.01)
        assert await nb.get(stub.id).add() == 7  # the other host takes it at once and rebuilds it
        assert b.cluster.statistics().restores == 1
        with pytest.raises(NotOwnerError) as caught:
            await stub.read()
        assert caught.value.owner_url == "http://h1"
        assert pg("SELECT epoch, last_seq FROM ds_actors") == [(3, 3)]


async def test_the_catalog_row_has_the_last_writes_time_not_the_markers_at_hibernation(hosts):
    async with hosts(1) as (a,):
        (na,) = bind_counters([a])
        stub = na.get_by_name("c")
        before = time.time_ns() // 1_000_000
        assert await stub.add(5) == 5
        after = time.time_ns() // 1_000_000
        await trio.sleep(1.0)
        await a.hibernate(na, stub.id)  # the clean marker is the host's write, not the actor's
        entry = a.catalog.get("counters", stub.id.hex)
        assert before <= entry.updated_ms <= after
        assert await stub.read() == 5  # a wake that only reads (the host writes its markers)
        await a.hibernate(na, stub.id)
        assert a.catalog.get("counters", stub.id.hex) == entry


async def test_eviction_marks_clean_and_releases_the_lease(hosts, pg, tmp_path, pg_empty_dsn):
    from runtime.host import open_host
    from runtime.host.cluster import ClusterOptions

    async with hosts(1) as (b,), open_host(tmp_path / "small", max_active=1, idle_timeout_s=None, cluster=(
            ClusterOptions(pg_empty_dsn, "http://small", host_id="small", lease_s=1.5))) as small:
        ns_small = small.bind("counters", Counter, env="small")
        (nb,) = bind_counters([b])
        first, second = ns_small.get_by_name("first"), ns_small.get_by_name("second")
        await first.add(3)
        await second.add(4)  # one file at a time: the first is evicted
        assert small.statistics().evictions == 1 and not small.is_active(ns_small, first.id)
        with trio.fail_after(30):
            while pg("SELECT owner FROM ds_actors WHERE actor_id = %s", f"counters/{first.id.hex}")[0][0]:
                await trio.sleep(0.01)
        assert await nb.get(first.id).add() == 4  # released: another host takes it at once
        with pytest.raises(NotOwnerError):
            await first.read()


async def test_a_deposed_owner_refuses_writes_and_stops_answering(hosts, pg):
    # A long lease: A's renewal loop (every third of a lease) must not learn of the takeover
    # before A's own next write does, however slowly this machine runs the takeover.
    async with hosts(2, lease_s=60) as (a, b):
        na, nb = bind_counters([a, b])
        stub = na.get_by_name("c")
        await stub.add(10)
        # A's lease lapses (a pause, a partition: here the server is told so) and B takes the actor.
        pg("UPDATE ds_actors SET owner = NULL, lease_expires = now()")
        assert await nb.get(stub.id).add(100) == 110
        # A still believes it owns the actor: its write commits locally, but the fence refuses it.
        with pytest.raises(OwnershipLostError, match="moved to another host"):
            await stub.add(1)
        # nothing of it is in the log, and A now forwards instead of answering
        with pytest.raises(NotOwnerError) as caught:
            await stub.read()
        assert caught.value.owner_host == "h1"
        assert await nb.get(stub.id).read() == 110
        assert pg("SELECT epoch, count(*) FROM ds_log GROUP BY epoch ORDER BY epoch") == [(1, 1), (2, 1)]
        # A's file was left unclean: were A to take the actor again, it rebuilds it
        await b.hibernate(nb, stub.id)
        with trio.fail_after(30):
            while pg("SELECT owner FROM ds_actors")[0][0] is not None:
                await trio.sleep(0.01)
        assert await stub.read() == 110
        assert a.cluster.statistics().restores == 2


async def test_a_read_past_the_local_deadline_renews_first_or_stops(hosts, pg):
    async with hosts(1, lease_s=0.9) as (a,):
        (na,) = bind_counters([a])
        stub = na.get_by_name("c")
        await stub.add(1)
        assert await stub.slow_read(1.0) == 1  # past the deadline at reply time: renewed, same epoch
        pg("UPDATE ds_actors SET owner = 'elsewhere', owner_address = 'http://elsewhere', epoch = epoch + 1, "
           "lease_expires = now() + interval '1 minute'")
        with pytest.raises(OwnershipLostError, match="took actor"):
            await stub.slow_read(1.0)  # its reply would come after the takeover: withheld
        with pytest.raises(NotOwnerError) as caught:
            await stub.read()
        assert caught.value.owner_url == "http://elsewhere"


async def test_the_output_gate_holds_replies_and_frames_until_the_write_is_durable(hosts, pg_empty_dsn):
    async with hosts(1) as (a,):
        ns = a.bind("sessions", SessionAgent, env=SessionConfig())
        stub = ns.get_by_name("chat")
        await stub.append_message(text(0))
        peer = RecordingConnection("peer-1")
        await ns.connect(stub.id, peer)
        replies = []

        async def append():
            replies.append(await stub.append_message(text(1)))

        with psycopg.connect(pg_empty_dsn) as blocker:  # holds the fence row: the append cannot commit
            blocker.execute("SELECT 1 FROM ds_actors FOR UPDATE")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(append)
                await trio.sleep(0.4)
                assert replies == [] and peer.sent == []  # the write is committed locally, nothing left
                blocker.commit()
        assert replies == [True]
        assert [json.loads(frame)["type"] for frame in peer.sent] == ["cf_agent_session"] * len(peer.sent)
        assert peer.sent


async def test_bad_cluster_options_fail_before_anything_starts(tmp_path):
    from runtime.host import open_host
    from runtime.host.cluster import ClusterOptions

    with pytest.raises(ValueError, match="statement_timeout_s must be positive and below lease_s / 3"):
        async with open_host(tmp_path, cluster=ClusterOptions("dbname=x", "http://a", lease_s=1.0,
                                                              statement_timeout_s=0.5)):
            pass
    with pytest.raises(ValueError, match="advertise_url"):
        async with open_host(tmp_path, cluster=ClusterOptions("dbname=x", "")):
            pass


class Broadcaster(Agent):
    async def tell_inside_a_transaction(self, n: int, fail: bool = False) -> int:
        with self.storage.transaction():
            self.storage.put("n", n)
            self.broadcast(f"n={n}")  # sent mid-transaction: it waits for that transaction's cut
            if fail:
                raise ValueError("rolled back")
        return n


async def test_a_frame_sent_inside_a_transaction_waits_for_its_commit_to_be_durable(hosts, pg_empty_dsn):
    async with hosts(1) as (a,):
        ns = a.bind("tell", Broadcaster)
        stub = ns.get_by_name("t")
        peer = RecordingConnection("p")
        await ns.connect(stub.id, peer)
        replies = []

        async def call():
            replies.append(await stub.tell_inside_a_transaction(1))

        with psycopg.connect(pg_empty_dsn) as blocker:
            blocker.execute("SELECT 1 FROM ds_actors FOR UPDATE")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                await trio.sleep(0.4)
                assert (replies, peer.sent) == ([], [])
                blocker.commit()
        assert (replies, peer.sent) == ([1], ["n=1"])
        # a rolled-back transaction's frame still leaves (nothing it depended on needs shipping)
        with pytest.raises(ValueError, match="rolled back"):
            await stub.tell_inside_a_transaction(2, fail=True)
        with trio.fail_after(30):
            while len(peer.sent) < 2:
                await trio.sleep(0.01)
        assert peer.sent == ["n=1", "n=2"]


async def test_release_listeners_hear_why_the_host_stopped_owning_an_actor(hosts, pg):
    async with hosts(1) as (a,):
        (na,) = bind_counters([a])
        heard = []
        a.cluster.add_release_listener(lambda actor_id, reason: heard.append((actor_id.hex, reason)))
        first, second = na.get_by_name("one"), na.get_by_name("two")
        await first.add()
        await a.hibernate(na, first.id)
        await second.add()
        pg("UPDATE ds_actors SET owner = 'elsewhere', epoch = epoch + 1, lease_expires = now() + interval '1 minute' "
           "WHERE actor_id = %s", f"counters/{second.id.hex}")
        with pytest.raises(OwnershipLostError):
            await second.add()
        assert heard == [(first.id.hex, "hibernated"), (second.id.hex, "deposed")]


async def test_not_owner_says_exactly_how_much_of_the_lease_is_left(hosts, pg):
    """``lease_left_s`` is the owner's remaining lease by the server's clock, unrounded (``retry_after_s``,
    for the ``Retry-After`` header, is at least 1 s)."""
    async with hosts(2, lease_s=6.0) as (a, b):
        na, nb = bind_counters([a, b])
        assert await na.get_by_name("c").add() == 1
        pg("UPDATE ds_actors SET lease_expires = now() + interval '400 milliseconds'")
        with pytest.raises(NotOwnerError) as caught:
            await nb.get_by_name("c").read()
        assert 0 < caught.value.lease_left_s <= 0.4
        assert caught.value.retry_after_s == 1.0
        fresh = NotOwnerError("counters/x", "http://h0", owner_host="h0", lease_left_s=4.25)
        assert (fresh.lease_left_s, fresh.retry_after_s) == (4.25, 4.25)


class Room(Agent):
    """Counts in KV and tells every peer (broadcasts pass the output gate like replies)."""

    async def add(self) -> int:
        value = self.storage.get("n", 0) + 1
        self.storage.put("n", value)
        self.broadcast(f"n={value}")
        return value


async def test_an_idle_hibernation_checkpoints_the_wal_and_the_next_wake_keeps_the_file(hosts, pg):
    """A checkpoint changes no content: the file stays clean at the log's newest entry and is kept, not rebuilt."""
    async with hosts(1, idle_timeout_s=0.1) as (a,):
        [na] = bind_counters([a])
        stub = na.get_by_name("wide")
        for i in range(40):  # one row of about a page per write: a WAL of well over 64 KiB
            await run_in_actor(stub, lambda agent, i=i: agent.storage.put(f"row-{i}", "x" * 3000))
        wal = actor_file(a, stub.id).with_name(actor_file(a, stub.id).name + "-wal")
        assert wal.stat().st_size > WAL_KEEP_BYTES
        with trio.fail_after(10):
            while a.is_active(na, stub.id) or a.statistics().active or wal.stat().st_size:
                await trio.sleep(0.01)
        assert wal.stat().st_size == 0  # cut to 0 bytes; nothing written after it outside a captured turn
        before = a.cluster.statistics()
        assert await run_in_actor(stub, lambda agent: len(agent.storage.list(prefix="row-"))) == 40
        after = a.cluster.statistics()
        assert (after.kept, after.restores) == (before.kept + 1, before.restores)


async def test_a_sleeping_actor_keeps_its_lease_while_the_host_holds_its_peers(hosts, pg):
    """No churn of idle sockets: the actor hibernates (its file closes) but stays owned here, across several
    idle timeouts and leases, so its peers stay open and get the broadcasts of its next wake; once the last
    peer leaves, the lease goes."""
    lease_s = 1.0
    async with hosts(2, lease_s=lease_s, idle_timeout_s=0.1) as (a, b):
        na, nb = a.bind("rooms", Room), b.bind("rooms", Room)
        heard = []
        a.cluster.add_release_listener(lambda actor_id, reason: heard.append(reason))
        stub = na.get_by_name("r")
        peer = RecordingConnection("p")
        await na.connect(stub.id, peer)
        assert await stub.add() == 1
        with trio.fail_after(5):
            while a.is_active(na, stub.id):
                await trio.sleep(0.01)
        asleep_at = trio.current_time()
        while trio.current_time() - asleep_at < 3 * lease_s:  # three leases, many idle timeouts
            with pytest.raises(NotOwnerError) as caught:  # still owned by a: b forwards there
                await nb.get(stub.id).add()
            assert caught.value.owner_host == "h0"
            await trio.sleep(lease_s / 2)
        assert not a.is_active(na, stub.id) and heard == []
        assert a.cluster.statistics().leases == 1
        before = a.cluster.statistics()
        assert await stub.add() == 2  # the wake needs no new lease and keeps the file
        after = a.cluster.statistics()
        assert (after.acquisitions, after.restores, after.kept) == (before.acquisitions + 1, before.restores,
                                                                    before.kept + 1)
        with trio.fail_after(5):
            while peer.sent != ["n=1", "n=2"]:
                await trio.sleep(0.01)
        assert pg("SELECT owner, epoch FROM ds_actors") == [("h0", 1)]
        await na.disconnect(stub.id, peer)
        with trio.fail_after(5):  # the last peer left: the next hibernation gives the actor up
            while pg("SELECT owner FROM ds_actors") != [(None,)]:
                await trio.sleep(0.01)
        assert heard == ["hibernated"]
        assert await nb.get(stub.id).add() == 3  # taken at once by another host


async def test_the_lease_of_a_sleeping_actor_goes_when_its_last_peer_leaves(hosts, pg):
    async with hosts(1, idle_timeout_s=0.1) as (a,):
        na = a.bind("rooms", Room)
        stub = na.get_by_name("r")
        peers = [RecordingConnection("p1"), RecordingConnection("p2")]
        for peer in peers:
            await na.connect(stub.id, peer)
        await stub.add()
        with trio.fail_after(5):
            while a.is_active(na, stub.id):
                await trio.sleep(0.01)
        a.unregister_connection(stub.id, peers[0])  # peers going without a turn (a dropped socket)
        await trio.sleep(0.2)
        assert pg("SELECT owner FROM ds_actors") == [("h0",)]
        a.unregister_connection(stub.id, peers[1])
        with trio.fail_after(5):
            while pg("SELECT owner FROM ds_actors") != [(None,)]:
                await trio.sleep(0.01)
        assert a.cluster.statistics().leases == 0
