"""Alarms: timing on trio's clock, wake, restart, retries, the host index."""

from pathlib import Path

import pytest
import trio

from actors import Agent
from runtime import HostClock, open_host
from runtime.host.alarms import INDEX_FILE, MAX_ALARM_RETRIES, AlarmIndex
from runtime.testing import actor_data_dir, run_alarm, run_in_actor  # noqa: F401 (fixtures)

EPOCH_MS = 1_700_000_000_000


class Reminder(Agent):
    """Records each alarm run as ``(trio time, retry_count, scheduled_ms)`` in ``env["runs"]``."""

    async def remind_in(self, ms):
        when = self.ctx.now_ms() + ms
        self.storage.set_alarm(when)
        return when

    def cancel(self):
        self.storage.delete_alarm()

    def scheduled(self):
        return self.storage.get_alarm()

    async def alarm(self, info):
        runs = self.env["runs"]
        runs.append((trio.current_time(), info.retry_count, info.scheduled_ms))
        self.env["seen_during"] = self.storage.get_alarm()
        await trio.sleep(self.env.get("hold", 0))
        if info.retry_count < self.env.get("fail_times", 0):
            raise RuntimeError(f"alarm failure {info.retry_count}")
        if len(runs) < self.env.get("repeat", 1):
            self.storage.set_alarm(self.ctx.now_ms() + self.env.get("rearm_ms", 1_000))


@pytest.fixture
def clock():
    return HostClock(start_epoch_ms=EPOCH_MS)


def index_rows(source):
    """The index's rows: a running host's (it holds the file exclusively), or a data folder's."""
    if not isinstance(source, Path):
        return [tuple(row) for row in source.alarm_index.entries()]
    index = AlarmIndex.open(source)
    try:
        return list(index._storage.exec("SELECT namespace, actor_id, scheduled_ms FROM alarms"))
    finally:
        index.close()


async def test_host_clock_maps_epoch_ms_to_trio_time(autojump_clock, clock):
    start = trio.current_time()
    assert clock.now_ms() == EPOCH_MS
    assert clock.trio_time(EPOCH_MS + 2_500) == pytest.approx(start + 2.5)
    assert not clock.is_due(EPOCH_MS + 1)
    await trio.sleep(3600)
    assert clock.now_ms() == EPOCH_MS + 3_600_000 and clock.is_due(EPOCH_MS + 1)


async def test_alarm_fires_at_its_time_and_is_removed(autojump_clock, actor_data_dir, clock):
    env = {"runs": []}
    async with open_host(actor_data_dir, clock=clock) as host:
        stub = host.bind("r", Reminder, env=env).get_by_name("a")
        start = trio.current_time()
        when = await stub.remind_in(90_000)
        assert await stub.scheduled() == when == EPOCH_MS + 90_000
        assert index_rows(host) == [("r", stub.id.hex, when)]
        await trio.sleep(89.9)
        assert env["runs"] == []
        await trio.sleep(0.2)
        assert env["runs"] == [(pytest.approx(start + 90), 0, when)]
        assert env["seen_during"] is None  # the alarm being delivered is not reported
        assert await stub.scheduled() is None
        assert index_rows(host) == []
        assert host.statistics().alarms_run == 1


async def test_alarm_wakes_a_hibernated_actor(autojump_clock, actor_data_dir, clock):
    env = {"runs": []}
    async with open_host(actor_data_dir, clock=clock, idle_timeout_s=10) as host:
        ns = host.bind("r", Reminder, env=env)
        stub = ns.get_by_name("a")
        await stub.remind_in(60_000)
        await trio.sleep(30)
        assert not host.is_active(ns, stub.id)
        await trio.sleep(31)
        assert len(env["runs"]) == 1 and host.is_active(ns, stub.id)
        assert host.statistics().activations == 2


async def test_alarm_survives_a_host_restart_and_fires_once(autojump_clock, actor_data_dir, clock):
    env = {"runs": []}
    async with open_host(actor_data_dir, clock=clock) as host:
        stub = host.bind("r", Reminder, env=env).get_by_name("a")
        start = trio.current_time()
        when = await stub.remind_in(60_000)
    await trio.sleep(10)
    async with open_host(actor_data_dir, clock=clock) as host:
        ns = host.bind("r", Reminder, env=env)
        await trio.sleep(1)
        assert host.statistics().active == 0  # the index, not the actor files, was read
        await trio.sleep(3600)
        assert env["runs"] == [(pytest.approx(start + 60), 0, when)]
        assert host.statistics().activations == 1
        assert await ns.get_by_name("a").scheduled() is None


async def test_overdue_alarm_found_at_start_fires_once(autojump_clock, actor_data_dir, clock):
    env = {"runs": []}
    async with open_host(actor_data_dir, clock=clock) as host:
        stub = host.bind("r", Reminder, env=env).get_by_name("a")
        when = await stub.remind_in(5_000)
        await host.hibernate("r", stub.id)
        # close before it is due
    await trio.sleep(100)
    async with open_host(actor_data_dir, clock=clock) as host:
        host.bind("r", Reminder, env=env)
        restarted = trio.current_time()
        await trio.sleep(3600)
    assert env["runs"] == [(pytest.approx(restarted), 0, when)]


async def test_failing_alarm_is_retried_six_times_with_backoff_then_dropped(autojump_clock, actor_data_dir, clock):
    env = {"runs": [], "fail_times": 99}
    async with open_host(actor_data_dir, clock=clock) as host:
        stub = host.bind("r", Reminder, env=env).get_by_name("a")
        start = trio.current_time()
        await stub.remind_in(1_000)
        await trio.sleep(3600)
        offsets = [round(at - start, 6) for at, _, _ in env["runs"]]
        assert offsets == [1, 3, 7, 15, 31, 63, 127]  # 2, 4, 8, 16, 32, 64 s between runs
        assert [retry for _, retry, _ in env["runs"]] == list(range(MAX_ALARM_RETRIES + 1))
        assert await stub.scheduled() is None
        assert index_rows(host) == []
        stats = host.statistics()
        assert (stats.alarms_run, stats.alarm_failures) == (7, 7)


async def test_alarm_that_recovers_on_retry_is_removed(autojump_clock, actor_data_dir, clock):
    env = {"runs": [], "fail_times": 2}
    async with open_host(actor_data_dir, clock=clock) as host:
        stub = host.bind("r", Reminder, env=env).get_by_name("a")
        await stub.remind_in(0)
        await trio.sleep(3600)
        assert [retry for _, retry, _ in env["runs"]] == [0, 1, 2]
        assert await stub.scheduled() is None


async def test_alarm_set_inside_alarm_is_kept(autojump_clock, actor_data_dir, clock):
    env = {"runs": [], "repeat": 3}
    async with open_host(actor_data_dir, clock=clock) as host:
        stub = host.bind("r", Reminder, env=env).get_by_name("a")
        start = trio.current_time()
        await stub.remind_in(1_000)
        await trio.sleep(60)
        assert [round(at - start, 6) for at, _, _ in env["runs"]] == [1, 2, 3]
        assert await stub.scheduled() is None


async def test_alarm_set_due_at_once_inside_alarm_fires_at_once(autojump_clock, actor_data_dir, clock):
    """An alarm re-armed for "now" from its handler is due while its delivery is still finishing (the
    scheduler sees it before the delivering task has let go): it runs at once, not a delivery lease
    (60 s) later."""
    env = {"runs": [], "repeat": 3, "rearm_ms": 0}
    async with open_host(actor_data_dir, clock=clock) as host:
        stub = host.bind("r", Reminder, env=env).get_by_name("a")
        start = trio.current_time()
        await stub.remind_in(1_000)
        await trio.sleep(600)
        assert [round(at - start, 3) for at, _, _ in env["runs"]] == [1, 1, 1]
        assert await stub.scheduled() is None


async def test_deleted_alarm_never_fires(autojump_clock, actor_data_dir, clock):
    env = {"runs": []}
    async with open_host(actor_data_dir, clock=clock) as host:
        stub = host.bind("r", Reminder, env=env).get_by_name("a")
        await stub.remind_in(10_000)
        await stub.cancel()
        assert index_rows(host) == []
        await trio.sleep(60)
        assert env["runs"] == []


async def test_rolled_back_alarm_leaves_a_stale_index_row_that_is_cleaned(autojump_clock, actor_data_dir, clock):
    env = {"runs": []}

    def set_then_roll_back(agent):
        with pytest.raises(RuntimeError):
            with agent.storage.transaction():
                agent.storage.set_alarm(agent.ctx.now_ms() + 5_000)
                raise RuntimeError("undo")

    async with open_host(actor_data_dir, clock=clock) as host:
        stub = host.bind("r", Reminder, env=env).get_by_name("a")
        await run_in_actor(stub, set_then_roll_back)
        assert await stub.scheduled() is None
        assert index_rows(host) == []  # synced from the committed row at turn end
        await trio.sleep(60)
        assert env["runs"] == []


async def test_alarm_waits_for_a_closed_gate(autojump_clock, actor_data_dir, clock):
    env = {"runs": []}

    async def guarded(agent):
        agent.storage.set_alarm(agent.ctx.now_ms())
        await agent.ctx.block_concurrency_while(lambda: trio.sleep(10))

    async with open_host(actor_data_dir, clock=clock) as host:
        stub = host.bind("r", Reminder, env=env).get_by_name("a")
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_in_actor, stub, guarded)
        await trio.sleep(1)
        assert [round(at - start, 6) for at, _, _ in env["runs"]] == [10]


async def test_run_alarm_fires_now_or_reports_none(autojump_clock, actor_data_dir, clock):
    env = {"runs": []}
    async with open_host(actor_data_dir, clock=clock) as host:
        stub = host.bind("r", Reminder, env=env).get_by_name("a")
        assert await run_alarm(stub) is False
        when = await stub.remind_in(3_600_000)
        assert await run_alarm(stub) is True
        assert env["runs"] == [(pytest.approx(trio.current_time()), 0, when)]
        assert await stub.scheduled() is None and index_rows(host) == []


async def test_run_alarm_raises_the_failure_and_schedules_the_retry(autojump_clock, actor_data_dir, clock):
    env = {"runs": [], "fail_times": 1}
    async with open_host(actor_data_dir, clock=clock) as host:
        stub = host.bind("r", Reminder, env=env).get_by_name("a")
        await stub.remind_in(3_600_000)
        with pytest.raises(RuntimeError, match="alarm failure 0"):
            await run_alarm(stub)
        retry_at = clock.now_ms() + 2_000
        assert await stub.scheduled() == retry_at
        assert index_rows(host) == [("r", stub.id.hex, retry_at)]
        await trio.sleep(3)
        assert [retry for _, retry, _ in env["runs"]] == [0, 1]


async def test_alarms_of_unbound_namespaces_wait_in_the_index(autojump_clock, actor_data_dir, clock):
    env = {"runs": []}
    async with open_host(actor_data_dir, clock=clock) as host:
        stub = host.bind("r", Reminder, env=env).get_by_name("a")
        when = await stub.remind_in(1_000)
    async with open_host(actor_data_dir, clock=clock) as host:
        await trio.sleep(60)
        assert index_rows(host) == [("r", stub.id.hex, when)]
        host.bind("r", Reminder, env=env)
        await trio.sleep(1)
    assert len(env["runs"]) == 1


async def test_index_file_lives_in_the_data_dir(actor_data_dir):
    async with open_host(actor_data_dir):
        assert (actor_data_dir / INDEX_FILE).exists()


async def test_slow_alarm_outliving_its_lease_runs_once(autojump_clock, actor_data_dir, clock):
    env = {"runs": [], "hold": 150}
    async with open_host(actor_data_dir, clock=clock) as host:
        stub = host.bind("r", Reminder, env=env).get_by_name("a")
        await stub.remind_in(0)
        await trio.sleep(3600)
        assert len(env["runs"]) == 1
        assert index_rows(host) == []


async def test_alarm_interrupted_by_shutdown_fires_again_after_restart(autojump_clock, actor_data_dir, clock):
    env = {"runs": [], "hold": 100}
    async with open_host(actor_data_dir, clock=clock) as host:
        stub = host.bind("r", Reminder, env=env).get_by_name("a")
        when = await stub.remind_in(0)
        await trio.sleep(10)
    assert len(env["runs"]) == 1
    env["hold"] = 0
    async with open_host(actor_data_dir, clock=clock) as host:
        host.bind("r", Reminder, env=env)
        await trio.sleep(3600)
    assert [(retry, scheduled) for _, retry, scheduled in env["runs"]] == [(0, when), (0, when)]
    assert index_rows(actor_data_dir) == []


class Ticker(Agent):
    """Re-arms a 30 s alarm at every tick and writes enough at each tick that hibernating it
    checkpoints a WAL bigger than the host keeps (the checkpoint runs on a worker thread)."""

    async def start(self):
        self.storage.exec("CREATE TABLE IF NOT EXISTS ballast (body BLOB)")
        self.storage.set_alarm(self.ctx.now_ms() + 30_000)

    async def alarm(self, info):
        self.env["ticks"].append(trio.current_time())
        self.storage.exec("INSERT INTO ballast VALUES (randomblob(200000))")
        if len(self.env["ticks"]) < 3:
            self.storage.set_alarm(self.ctx.now_ms() + 30_000)


async def test_virtual_time_stays_honest_while_a_hibernation_checkpoints_on_a_thread(
        autojump_clock, actor_data_dir, clock):
    """Autojump must not skip ahead while the host waits for the WAL checkpoint of a hibernation."""
    env = {"ticks": []}
    async with open_host(actor_data_dir, clock=clock, idle_timeout_s=5) as host:
        stub = host.bind("t", Ticker, env=env).get_by_name("a")
        begin = trio.current_time()
        await stub.start()
        await trio.sleep(200)
        assert host.statistics().hibernations >= 3  # each tick ended in a hibernation
    assert [round(tick - begin) for tick in env["ticks"]] == [30, 60, 90]
