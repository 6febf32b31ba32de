"""The host's queue-time bound (``open_host(max_queue_s=...)``): calls that cannot start in time never run."""

from __future__ import annotations

import pytest
import trio

from actors import Agent
from common.errors import ActorBusyError, ActorOverloadedError
from runtime import open_host
from runtime.testing import actor_data_dir, run_alarm  # noqa: F401 (fixture)


class Worker(Agent):
    async def on_start(self):
        await trio.sleep(self.env.get("start_s", 0))

    async def work(self, label, seconds):
        await self.ctx.block_concurrency_while(lambda: trio.sleep(seconds))
        self.env.setdefault("ran", []).append(label)
        return label

    async def alarm(self, info):
        self.env.setdefault("ran", []).append("alarm")


async def call(stub, results, label, seconds):
    try:
        results.append((label, await stub.work(label, seconds), trio.current_time()))
    except ActorBusyError as exc:
        results.append((label, exc, trio.current_time()))


async def test_a_call_that_cannot_start_within_the_bound_is_refused_and_never_runs(autojump_clock, actor_data_dir):
    env = {}
    async with open_host(actor_data_dir, max_queue_s=1.0) as host:
        stub = host.bind("w", Worker, env=env).get_by_name("a")
        await stub.work("warm", 0)
        start, results = trio.current_time(), []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, stub, results, "slow", 3.0)
            await trio.sleep(0.1)
            nursery.start_soon(call, stub, results, "queued", 0)
        (first, refusal, refused_at), (second, value, _) = results
        assert (first, second, value) == ("queued", "slow", "slow")
        assert isinstance(refusal, ActorBusyError) and refusal.status == 429 and refusal.retryable
        assert str(refusal) == f"actor w/{stub.id.hex} is busy: the call could not start within 1 s and was not run"
        assert refused_at - start == pytest.approx(1.1)
        assert env["ran"] == ["warm", "slow"]  # the refused call never ran
        assert host.statistics().overloads == 1


async def test_waiting_for_the_actor_to_activate_does_not_count(autojump_clock, actor_data_dir):
    env = {"start_s": 5}
    async with open_host(actor_data_dir, max_queue_s=1.0) as host:
        stub = host.bind("w", Worker, env=env).get_by_name("a")
        results = []
        async with trio.open_nursery() as nursery:
            for label in ("one", "two"):
                nursery.start_soon(call, stub, results, label, 0.4)
        assert sorted((label, value) for label, value, _ in results) == [("one", "one"), ("two", "two")]


async def test_a_queue_that_cannot_reach_a_new_call_in_time_refuses_it_at_once(autojump_clock, actor_data_dir):
    env = {}
    async with open_host(actor_data_dir, max_queue_s=1.0) as host:
        stub = host.bind("w", Worker, env=env).get_by_name("a")
        await stub.work("warm", 0)
        results = []
        async with trio.open_nursery() as nursery:
            for i in range(3):  # each holds the gate 0.3 s: the queue moves one call per 0.3 s
                nursery.start_soon(call, stub, results, f"q{i}", 0.3)
            await trio.sleep(0.35)  # q0 done, q1 running (started behind q0), q2 waiting
            for i in range(3, 6):
                nursery.start_soon(call, stub, results, f"q{i}", 0.3)
            await trio.sleep(0.01)  # q3-q5 admitted: 4 calls wait, at 0.3 s each
            assert isinstance(host.admission_refusal(stub.id), ActorBusyError)  # asked, not counted
            refused_at = trio.current_time()
            with pytest.raises(ActorBusyError):
                await stub.work("late", 0)
            assert trio.current_time() == refused_at  # at once, not after waiting
        assert "late" not in env["ran"]
        await stub.work("after", 0)  # the queue drained: calls are taken again


async def test_a_full_mailbox_refuses_at_once_as_before(autojump_clock, actor_data_dir):
    async with open_host(actor_data_dir, max_queue_s=10.0, max_pending_calls=2) as host:
        stub = host.bind("w", Worker, env={}).get_by_name("a")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stub.work, "a", 1)
            nursery.start_soon(stub.work, "b", 1)
            await trio.sleep(0.1)
            assert isinstance(host.admission_refusal(stub.id), ActorOverloadedError)
            with pytest.raises(ActorOverloadedError):
                await stub.work("c", 0)


async def test_an_alarm_is_never_refused_for_load(autojump_clock, actor_data_dir):
    env = {}
    async with open_host(actor_data_dir, max_queue_s=0.5) as host:
        stub = host.bind("w", Worker, env=env).get_by_name("a")
        await stub.work("warm", 0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stub.work, "slow", 2.0)
            await trio.sleep(0.1)
            assert await run_alarm(stub) is False  # no alarm due: ran as a turn after 1.9 s of waiting
        assert env["ran"] == ["warm", "slow"]
