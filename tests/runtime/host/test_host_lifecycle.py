"""Hibernation, wake, eviction, statistics, WebSocket peers and host options."""

import dataclasses
import os
import resource

import pytest
import trio

from actors import Agent
from runtime import open_host
from runtime.host.limits import MAX_ACTIVE_CAP, default_max_active
from runtime.testing import actor_data_dir, actor_host, list_actor_ids, run_in_actor  # noqa: F401 (fixtures)
from storage.schema import SCHEMA_VERSION
from tests.support.agents import RecordingConnection


class Memo(Agent):
    """Keeps a counter in storage and a per-instance number of calls in memory."""

    async def on_start(self):
        self.calls_since_wake = 0
        if self.env is not None:
            self.env.append(self.ctx.id.hex)

    async def bump(self):
        self.calls_since_wake += 1
        total = self.storage.get("total", 0) + 1
        self.storage.put("total", total)
        return total, self.calls_since_wake

    async def hold(self, seconds):
        await trio.sleep(seconds)
        return "held"


def sqlite_fds():
    """Open descriptors of this process pointing at actor files."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if ".sqlite3" in target and not os.path.basename(target).startswith("_"):  # not the host's own files
            found += 1
    return found


async def test_idle_actor_hibernates_after_exactly_idle_timeout(autojump_clock, actor_data_dir):
    async with open_host(actor_data_dir, idle_timeout_s=30) as host:
        ns = host.bind("memo", Memo)
        stub = ns.get_by_name("a")
        await stub.bump()
        start = trio.current_time()
        await trio.sleep_until(start + 29.999)
        assert host.is_active(ns, stub.id)
        await trio.sleep_until(start + 30.001)
        assert not host.is_active(ns, stub.id)
        stats = host.statistics()
        assert (stats.active, stats.hibernated, stats.hibernations) == (0, 1, 1)
        assert sqlite_fds() == 0


async def test_every_call_restarts_the_idle_timer(autojump_clock, actor_data_dir):
    async with open_host(actor_data_dir, idle_timeout_s=30) as host:
        ns = host.bind("memo", Memo)
        stub = ns.get_by_name("a")
        start = trio.current_time()
        for at in (0, 20, 40):
            await trio.sleep_until(start + at)
            await stub.bump()
        await trio.sleep_until(start + 69.99)
        assert host.is_active(ns, stub.id)
        await trio.sleep_until(start + 70.01)
        assert not host.is_active(ns, stub.id)


async def test_a_running_call_keeps_the_actor_awake(autojump_clock, actor_data_dir):
    async with open_host(actor_data_dir, idle_timeout_s=30) as host:
        ns = host.bind("memo", Memo)
        stub = ns.get_by_name("a")
        start = trio.current_time()
        assert await stub.hold(100) == "held"
        await trio.sleep_until(start + 129.99)
        assert host.is_active(ns, stub.id)
        await trio.sleep_until(start + 130.01)
        assert not host.is_active(ns, stub.id)


async def test_wake_reconstructs_the_instance_and_keeps_stored_state(autojump_clock, actor_data_dir):
    starts = []
    async with open_host(actor_data_dir, idle_timeout_s=30) as host:
        ns = host.bind("memo", Memo, env=starts)
        stub = ns.get_by_name("a")
        assert await stub.bump() == (1, 1)
        assert await stub.bump() == (2, 2)
        await trio.sleep(31)
        assert await stub.bump() == (3, 1)  # new instance, same storage
        assert starts == [stub.id.hex] * 2
        stats = host.statistics()
        assert (stats.activations, stats.hibernations, stats.hibernated, stats.active) == (2, 1, 0, 1)


async def test_hibernate_waits_for_pending_calls(autojump_clock, actor_host):
    ns = actor_host.bind("memo", Memo)
    stub = ns.get_by_name("a")
    assert await actor_host.hibernate(ns, stub.id) is False
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stub.hold, 10)
        await trio.sleep(1)
        assert await actor_host.hibernate("memo", stub.id.hex) is True
        assert trio.current_time() == pytest.approx(10)
    assert not actor_host.is_active(ns, stub.id)


async def test_hibernate_all_puts_every_actor_to_sleep(actor_host):
    ns = actor_host.bind("memo", Memo)
    for name in "abc":
        await ns.get_by_name(name).bump()
    assert await actor_host.hibernate_all() == 3
    stats = actor_host.statistics()
    assert (stats.active, stats.hibernated) == (0, 3)
    assert sqlite_fds() == 0


async def test_least_recently_idle_actor_is_evicted_past_max_active(actor_data_dir):
    async with open_host(actor_data_dir, max_active=2) as host:
        ns = host.bind("memo", Memo)
        a, b, c = (ns.get_by_name(name) for name in "abc")
        await a.bump()
        await b.bump()
        await a.bump()  # a is now more recent than b
        await c.bump()
        assert [host.is_active(ns, s.id) for s in (a, b, c)] == [True, False, True]
        stats = host.statistics()
        assert (stats.active, stats.evictions, stats.hibernations, stats.hibernated) == (2, 1, 0, 1)
        assert await b.bump() == (2, 1)
        assert [host.is_active(ns, s.id) for s in (a, b, c)] == [False, True, True]


async def test_waking_past_max_active_waits_for_an_idle_actor(autojump_clock, actor_data_dir):
    async with open_host(actor_data_dir, max_active=1) as host:
        ns = host.bind("memo", Memo)
        busy, other = ns.get_by_name("busy"), ns.get_by_name("other")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(busy.hold, 10)
            await trio.sleep(1)
            nursery.start_soon(other.bump)
            await trio.sleep(1)
            stats = host.statistics()
            assert (stats.active, stats.activating, stats.running, stats.queued) == (1, 1, 1, 1)
            assert await other.bump() == (2, 2)
            assert trio.current_time() == pytest.approx(10)
        assert not host.is_active(ns, busy.id) and host.is_active(ns, other.id)
        assert host.statistics().evictions == 1


async def test_touching_many_actors_keeps_open_files_bounded(actor_data_dir):
    async with open_host(actor_data_dir, max_active=8) as host:
        ns = host.bind("memo", Memo)
        ids = []
        for i in range(300):
            stub = ns.get_by_name(f"user-{i}")
            ids.append(stub.id)
            assert await stub.bump() == (1, 1)
            assert host.statistics().active <= 8
            assert sqlite_fds() <= 8 * 3
        stats = host.statistics()
        assert (stats.activations, stats.evictions, stats.active, stats.hibernated) == (300, 292, 8, 292)
        assert list_actor_ids(ns) == sorted(ids, key=lambda actor_id: actor_id.hex)


async def test_actors_left_by_an_earlier_host_count_as_hibernated(actor_data_dir):
    async with open_host(actor_data_dir) as host:
        ns = host.bind("memo", Memo)
        for name in "abc":
            await ns.get_by_name(name).bump()
    async with open_host(actor_data_dir) as host:
        ns = host.bind("memo", Memo)
        assert host.statistics().hibernated == 3
        await ns.get_by_name("a").bump()
        await ns.get_by_name("new").bump()
        stats = host.statistics()
        assert (stats.active, stats.hibernated) == (2, 2)


async def test_statistics_is_a_frozen_snapshot(actor_host):
    stats = actor_host.statistics()
    assert dataclasses.asdict(stats) == {
        "active": 0, "activating": 0, "idle": 0, "hibernated": 0, "running": 0, "queued": 0, "connections": 0, "calls": 0,
        "activations": 0, "failed_activations": 0, "hibernations": 0, "evictions": 0, "overloads": 0,
        "alarms_run": 0, "alarm_failures": 0, "max_active": actor_host.max_active,
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.active = 3


async def test_run_in_actor_sees_the_live_instance(actor_host):
    ns = actor_host.bind("memo", Memo)
    stub = ns.get_by_name("a")
    await stub.bump()
    assert await run_in_actor(stub, lambda agent: (type(agent).__name__, agent.calls_since_wake)) == ("Memo", 1)

    async def read(agent):
        await trio.sleep(0)
        return agent.storage.get("total")

    assert await run_in_actor(stub, read) == 1


async def test_host_raises_the_open_files_limit_and_derives_max_active(actor_host):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY:
        assert soft == hard
    assert actor_host.max_active == default_max_active(soft)
    assert default_max_active(1024) == 256  # 512 descriptors, two per open actor file
    assert default_max_active(10**6) == MAX_ACTIVE_CAP
    assert default_max_active(None) == 128 and default_max_active(2) == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"durability": "fast"}, "durability must be 'normal' or 'full'"),
        ({"idle_timeout_s": 0}, "idle_timeout_s must be positive or None"),
        ({"max_active": 0}, "max_active must be an int of at least 1"),
        ({"max_pending_calls": 0}, "max_pending_calls must be an int of at least 1"),
    ],
)
async def test_bad_host_options_are_refused(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        async with open_host(tmp_path, **options):
            pass


async def test_idle_timeout_none_never_hibernates(autojump_clock, actor_data_dir):
    async with open_host(actor_data_dir, idle_timeout_s=None) as host:
        ns = host.bind("memo", Memo)
        await ns.get_by_name("a").bump()
        await trio.sleep(10**6)
        assert host.statistics().active == 1


async def test_full_durability_applies_to_actor_files(actor_data_dir):
    async with open_host(actor_data_dir, durability="full") as host:
        stub = host.bind("memo", Memo).get_by_name("a")
        assert await run_in_actor(stub, lambda agent: agent.storage.scalar("PRAGMA synchronous")) == 2


async def test_new_actor_files_are_copied_from_the_schema_template(actor_host, actor_data_dir):
    stub = actor_host.bind("memo", Memo).get_by_name("a")
    assert await run_in_actor(stub, lambda agent: agent.storage.user_version) == SCHEMA_VERSION
    assert sorted(p.name for p in (actor_data_dir / "_template").iterdir()) == [f"v{SCHEMA_VERSION}.sqlite3"]


# -- WebSocket peers -------------------------------------------------------------


class Chat(Agent):
    async def on_connect(self, conn):
        if conn.id == "refused":
            raise PermissionError("no entry")
        self.broadcast(f"joined {conn.id}", exclude=[conn])

    async def on_message(self, conn, message):
        self.storage.put(f"msg:{conn.id}", message)
        self.broadcast(f"{conn.id}: {message}", exclude=[conn.id])

    async def on_close(self, conn, code, reason):
        self.broadcast(f"left {conn.id} {code} {reason}")

    def announce(self, text):
        self.broadcast(text)
        return len(self.ctx.get_connections())


async def test_peers_are_held_across_hibernation(actor_host):
    ns = actor_host.bind("chat", Chat)
    stub = ns.get_by_name("room")
    alice, bob = RecordingConnection("alice"), RecordingConnection("bob")
    await ns.connect(stub.id, alice)
    await ns.connect(stub.id, bob)
    await actor_host.hibernate(ns, stub.id)
    assert actor_host.statistics().connections == 2
    await ns.receive(stub.id, alice, "hello")
    assert await stub.announce("news") == 2
    await ns.disconnect(stub.id, bob, 1001, "going away")
    await ns.disconnect(stub.id, bob, 1001, "twice")  # already gone: nothing runs
    assert alice.sent == ["joined bob", "news", "left bob 1001 going away"]
    assert bob.sent == ["alice: hello", "news"]
    assert await run_in_actor(stub, lambda agent: agent.storage.get("msg:alice")) == "hello"
    assert actor_host.statistics().connections == 1


async def test_refused_connection_is_forgotten(actor_host):
    ns = actor_host.bind("chat", Chat)
    stub = ns.get_by_name("room")
    with pytest.raises(PermissionError, match="no entry"):
        await ns.connect(stub.id, RecordingConnection("refused"))
    assert actor_host.connections_of(stub.id) == ()
