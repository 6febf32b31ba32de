"""An owner cut off from Postgres (a real TCP partition): it stops serving within its lease, its
alarms fire exactly once on the other hosts, and after the cut heals it forwards."""

from __future__ import annotations

import pytest
import trio

from actors import Agent
from common.errors import NotOwnerError, StorageUnavailableError
from runtime.host import open_host
from runtime.host.cluster import ClusterOptions
from tests.support.cluster import TcpProxy, dsn_with_port

FIRED: list[tuple[str, str]] = []


class Alarmed(Agent):
    async def arm(self, in_ms: int) -> None:
        self.storage.set_alarm(self.ctx.now_ms() + in_ms)

    async def alarm(self, info) -> None:
        FIRED.append((self.env, self.ctx.id.hex))

    async def write(self) -> int:
        self.storage.put("n", self.storage.get("n", 0) + 1)
        return self.storage.get("n")


async def arm_retrying(stub, in_ms: int) -> None:
    """Set the alarm, repeating the call after a retryable refusal (the cut-off host's connections have
    a quarter of its 1.5 s lease to open, which a loaded machine sometimes needs more than)."""
    with trio.fail_after(20):
        while True:
            try:
                await stub.arm(in_ms)
                return
            except StorageUnavailableError:
                await trio.sleep(0.1)


async def test_a_partitioned_owner_stops_and_its_alarms_fire_once_elsewhere(hosts, pg, pg_server, pg_empty_dsn,
                                                                             tmp_path):
    FIRED.clear()
    proxy = TcpProxy(pg_server.port)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(proxy.serve)
        options = ClusterOptions(dsn_with_port(pg_empty_dsn, port), "http://cut", host_id="cut", lease_s=1.5)
        async with hosts(2, first=1) as (b, c), open_host(tmp_path / "cut", idle_timeout_s=None,
                                                          cluster=options) as a:
            na = a.bind("alarmed", Alarmed, env="cut")
            for host in (b, c):
                host.bind("alarmed", Alarmed, env=host.cluster.host_id)
            ids = [na.get_by_name(f"x{i}").id for i in range(6)]
            for actor_id in ids:
                await arm_retrying(na.get(actor_id), 3000)
            proxy.partition()
            cut_at = trio.current_time()
            with pytest.raises(StorageUnavailableError):
                await na.get(ids[0]).write()  # its write cannot become durable: 503, fast
            assert trio.current_time() - cut_at < 1.5
            with trio.fail_after(10):
                while len(FIRED) < 6:
                    await trio.sleep(0.05)
            await trio.sleep(1.0)  # any duplicate would show up now
            assert sorted(h for _, h in FIRED) == sorted(i.hex for i in ids)
            assert {host for host, _ in FIRED} <= {"h1", "h2"}  # never the host that was cut off
            assert a.statistics().alarms_run == 0
            proxy.heal()
            with trio.fail_after(5):
                while True:
                    try:
                        await na.get(ids[1]).write()
                    except NotOwnerError as exc:
                        assert exc.owner_host in ("h1", "h2")
                        break
                    except StorageUnavailableError:
                        await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
