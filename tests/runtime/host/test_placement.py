"""The placement seam (runtime.host.placement): which hook the host calls, when, and what it does with the answer.

A recording placement (a real :class:`~runtime.host.placement.Placement`,
built on :class:`~runtime.host.placement.LocalPlacement`) stands where a
cluster member would; the host under it is a real one on real files.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio

from actors import Agent
from actors.agent import ConnectionLike
from common.errors import OwnershipLostError
from runtime import open_host
from runtime.host.cluster import ClusterOptions
from runtime.host.placement import LocalPlacement, PlacementHost, WorkingCopy, placement_for
from runtime.host.slots import ActorSlot, CallNotStarted
from runtime.host.turns import READMISSIONS
from runtime.testing import actor_data_dir  # noqa: F401 (fixture)
from storage.kv import ActorStorage
from tests.support.agents import RecordingConnection


class Note(Agent):
    async def on_start(self):
        if self.env == "fail at start":
            raise RuntimeError("no start")

    async def write(self, text):
        self.storage.put("text", text)
        return text

    def peers(self):
        return [conn.id for conn in self.ctx.get_connections()]

    def peer_types(self):
        return [type(conn).__name__ for conn in self.ctx.get_connections()]


class Wrapped:
    """A peer as :class:`Recording` hands it to the actor."""

    def __init__(self, conn: ConnectionLike) -> None:
        self.id = conn.id
        self.conn = conn

    def send(self, message: str | bytes) -> None:
        self.conn.send(message)


class Recording(LocalPlacement):
    """Records every hook as ``(hook, namespace, detail)``; ``refuse_calls`` raises
    :class:`CallNotStarted` from that many ``before_call`` hooks."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.refuse_calls = 0
        self.elsewhere = False
        self.host: PlacementHost | None = None

    def note(self, hook: str, *detail: str) -> None:
        self.calls.append((hook, *detail))

    async def join(self) -> None:
        self.note("join")

    async def start(self, host: PlacementHost, nursery: trio.Nursery) -> None:
        self.host = host
        self.note("start")

    async def aclose(self) -> None:
        self.note("aclose")

    def may_live_elsewhere(self, actor_id) -> bool:
        return self.elsewhere

    async def acquire(self, slot: ActorSlot) -> None:
        assert slot.storage is None
        self.note("acquire")

    async def make_current(self, slot: ActorSlot, copy: WorkingCopy) -> None:
        assert slot.storage is None and copy.durability == "normal"
        self.note("make_current", copy.path.name == f"{slot.id.hex}.sqlite3" and "own file" or "?")

    def attach(self, slot: ActorSlot, storage: ActorStorage) -> None:
        assert slot.agent is None and slot.storage is storage
        self.note("attach")

    async def before_call(self, slot: ActorSlot) -> None:
        self.note("before_call")
        if self.refuse_calls:
            self.refuse_calls -= 1
            raise CallNotStarted(OwnershipLostError("another host took it over"))

    async def barrier(self, slot: ActorSlot) -> None:
        self.note("barrier")

    def release(self, slot: ActorSlot, reason: str) -> None:
        self.note("release", reason)

    def peers_gone(self, actor_id) -> None:
        self.note("peers_gone")

    def gate_peers(self, slot: ActorSlot, conns: Sequence[ConnectionLike]) -> Sequence[ConnectionLike]:
        return tuple(Wrapped(conn) for conn in conns)


async def test_a_wake_a_call_and_a_hibernation_call_the_hooks_in_order(actor_data_dir):
    placement = Recording()
    async with open_host(actor_data_dir, placement=placement) as host:
        assert host.cluster is None and host.placement is placement
        ns = host.bind("notes", Note)
        stub = ns.get_by_name("a")
        assert await stub.write("hello") == "hello"
        assert await host.hibernate(ns, stub.id) is True
    assert placement.calls == [
        ("join",), ("start",),
        ("acquire",), ("make_current", "own file"), ("attach",), ("barrier",),  # the wake, on_start's barrier
        ("before_call",), ("barrier",),  # the call
        ("release", "hibernated"),
        ("aclose",),
    ]


async def test_the_reason_of_each_release(actor_data_dir):
    placement = Recording()
    async with open_host(actor_data_dir, placement=placement, max_active=1) as host:
        ns = host.bind("notes", Note)
        failing = host.bind("failing", Note, env="fail at start")
        await ns.get_by_name("a").write("x")
        await ns.get_by_name("b").write("y")  # only one file may be open: a is evicted
        with pytest.raises(RuntimeError, match="no start"):
            await failing.get_by_name("c").write("z")  # b is evicted for it, then c fails to start
        await ns.get_by_name("d").write("w")
    assert [detail for hook, *detail in placement.calls if hook == "release"] == [
        ["evicted"], ["evicted"], ["failed"], ["closed"],
    ]
    assert placement.calls[-1] == ("aclose",)


async def test_a_call_whose_actor_was_dropped_before_it_started_is_admitted_again(actor_data_dir):
    placement = Recording()
    async with open_host(actor_data_dir, placement=placement) as host:
        stub = host.bind("notes", Note).get_by_name("a")
        placement.refuse_calls = READMISSIONS
        assert await stub.write("kept") == "kept"
        assert [hook for hook, *_ in placement.calls].count("before_call") == READMISSIONS + 1
        placement.refuse_calls = READMISSIONS + 1
        with pytest.raises(OwnershipLostError, match="another host took it over"):
            await stub.write("lost")


async def test_an_actor_that_may_live_elsewhere_exists_until_asked(actor_data_dir):
    placement = Recording()
    async with open_host(actor_data_dir, placement=placement) as host:
        ns = host.bind("notes", Note)
        never_written = ns.get_by_name("nobody").id
        assert ns.exists(never_written) is False
        placement.elsewhere = True
        assert ns.exists(never_written) is True
        assert placement.calls == [("join",), ("start",)]  # nothing was woken to answer


async def test_the_actor_sees_its_peers_as_the_placement_gates_them(actor_data_dir):
    placement = Recording()
    async with open_host(actor_data_dir, placement=placement) as host:
        ns = host.bind("notes", Note)
        stub = ns.get_by_name("a")
        first, second = RecordingConnection("p1"), RecordingConnection("p2")
        await ns.connect(stub.id, first)
        await ns.connect(stub.id, second)
        assert await stub.peers() == ["p1", "p2"]
        assert await stub.peer_types() == ["Wrapped", "Wrapped"]
        await ns.disconnect(stub.id, first)
        assert ("peers_gone",) not in placement.calls
        await ns.disconnect(stub.id, second)
        assert placement.calls.count(("peers_gone",)) == 1


async def test_the_host_offers_its_placement_what_placement_host_names(actor_data_dir):
    placement = Recording()
    async with open_host(actor_data_dir, placement=placement) as host:
        ns = host.bind("notes", Note)
        stub = ns.get_by_name("a")
        await stub.write("x")
        offered = placement.host
        assert offered is host and not offered.closed and sorted(offered.namespaces) == ["notes"]
        [slot] = offered.live_slots()
        assert slot.id == stub.id
        offered.drop(slot, "deposed")
        assert not host.is_active(ns, stub.id) and placement.calls[-1] == ("release", "deposed")
        spawned = trio.Event()

        async def task(event: trio.Event) -> None:
            event.set()

        offered.spawn(task, spawned)
        await spawned.wait()
    assert host.closed


def test_placement_for_picks_local_without_cluster_options_and_refuses_two_choices(actor_data_dir):
    assert type(placement_for(None)) is LocalPlacement
    given = Recording()
    assert placement_for(None, given) is given
    with pytest.raises(ValueError, match=r"give open_host cluster= or placement=, not both"):
        placement_for(ClusterOptions("dbname=x", "http://h0"), given)
