"""Alarms in a cluster: the index travels with the log, only the owner runs them, each fires on one host."""

from __future__ import annotations

import trio

from actors import Agent
from common.errors import NotOwnerError

FIRED: list[tuple[str, str]] = []


class Alarmed(Agent):
    async def arm(self, in_ms: int) -> int:
        when = self.ctx.now_ms() + in_ms
        self.storage.set_alarm(when)
        return when

    async def alarm(self, info) -> None:
        FIRED.append((self.env, self.ctx.id.hex))
        self.storage.put("fired", self.storage.get("fired", 0) + 1)

    async def fired(self) -> int:
        return self.storage.get("fired", 0)


async def read_anywhere(namespaces, actor_id) -> int:
    """``fired`` of the actor, asked of whichever host owns it (or takes it)."""
    for _ in range(10):
        for ns in namespaces:
            try:
                return await ns.get(actor_id).fired()
            except NotOwnerError:
                continue
        await trio.sleep(0.1)
    raise AssertionError("no host answered")


async def wait_for(condition, seconds: float) -> None:
    with trio.fail_after(seconds):
        while not condition():
            await trio.sleep(0.05)


async def test_alarms_of_a_departed_host_fire_exactly_once_on_the_others(hosts, pg):
    FIRED.clear()
    async with hosts(2, first=1) as (b, c):
        namespaces = [h.bind("alarmed", Alarmed, env=h.cluster.host_id) for h in (b, c)]
        async with hosts(1) as (a,):
            na = a.bind("alarmed", Alarmed, env="h0")
            ids = [na.get_by_name(f"a{i}").id for i in range(12)]
            for actor_id in ids:
                await na.get(actor_id).arm(3000)
            assert pg("SELECT count(*) FROM ds_alarms") == [(12,)]  # the index came with the writes
        # A left (its leases released): B's and C's polls race for every due alarm
        await wait_for(lambda: len(FIRED) >= 12, 10)
        await trio.sleep(1.0)  # time for any duplicate to show up
        assert sorted(hex_id for _host, hex_id in FIRED) == sorted(i.hex for i in ids)
        assert {host for host, _ in FIRED} <= {"h1", "h2"}
        assert [await read_anywhere(namespaces, actor_id) for actor_id in ids] == [1] * 12
        assert pg("SELECT count(*) FROM ds_alarms") == [(0,)]  # each run's delete travelled with its log entry


async def test_alarms_of_hibernated_actors_fire_once_though_every_host_may_claim_them(hosts, pg):
    FIRED.clear()
    async with hosts(3) as all_hosts:
        namespaces = [h.bind("alarmed", Alarmed, env=h.cluster.host_id) for h in all_hosts]
        ids = [namespaces[0].get_by_name(f"a{i}").id for i in range(12)]
        for actor_id in ids:
            await namespaces[0].get(actor_id).arm(3000)
        await all_hosts[0].hibernate_all()  # released: A's own scheduler and every poll race for each
        await wait_for(lambda: len(FIRED) >= 12, 10)
        await trio.sleep(1.0)
        assert sorted(hex_id for _host, hex_id in FIRED) == sorted(i.hex for i in ids)
        assert [await read_anywhere(namespaces, actor_id) for actor_id in ids] == [1] * 12


async def test_only_the_owner_runs_the_alarm_of_an_active_actor(hosts, pg):
    FIRED.clear()
    async with hosts(2) as (a, b):
        na = a.bind("alarmed", Alarmed, env="h0")
        b.bind("alarmed", Alarmed, env="h1")
        stub = na.get_by_name("x")
        await stub.arm(300)
        await wait_for(lambda: FIRED, 3)
        await trio.sleep(1.0)  # B polls meanwhile: the alarm is due, but its actor has a live owner
        assert FIRED == [("h0", stub.id.hex)] and await stub.fired() == 1
        assert pg("SELECT count(*) FROM ds_alarms") == [(0,)]


async def test_a_moved_actor_brings_its_alarm_to_the_new_owner(hosts, pg):
    FIRED.clear()
    async with hosts(2) as (a, b):
        na = a.bind("alarmed", Alarmed, env="h0")
        nb = b.bind("alarmed", Alarmed, env="h1")
        stub = na.get_by_name("y")
        await stub.arm(1500)
        await a.hibernate(na, stub.id)
        await wait_for(lambda: pg("SELECT owner FROM ds_actors")[0][0] is None, 2)
        assert await nb.get(stub.id).fired() == 0  # B owns it now; its scheduler indexes the alarm
        await wait_for(lambda: FIRED, 4)
        await trio.sleep(0.5)
        assert FIRED == [("h1", stub.id.hex)]
        assert a.statistics().alarms_run == 0
