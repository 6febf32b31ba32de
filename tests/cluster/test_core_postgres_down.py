"""Postgres down and back: clear 503s (never a hang or a 500), nothing half-written, recovery by itself."""

from __future__ import annotations

import pytest
import trio

from actors import SessionAgent, SessionConfig
from common.errors import StorageUnavailableError


def text(i: int) -> dict:
    return {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"message {i}"}]}


async def test_writes_and_activations_fail_fast_while_postgres_is_down_then_recover(hosts, pg_server, pg):
    async with hosts(1, lease_s=2.0) as (a,):
        ns = a.bind("sessions", SessionAgent, env=SessionConfig())
        stub = ns.get_by_name("chat")
        for i in range(3):
            assert await stub.append_message(text(i)) is True
        pg_server.stop("immediate")
        try:
            started = trio.current_time()
            with pytest.raises(StorageUnavailableError) as caught:
                await stub.append_message(text(3))
            assert caught.value.status == 503 and caught.value.retryable
            assert trio.current_time() - started < 2.0  # below the lease: never a hang
            started = trio.current_time()
            with pytest.raises(StorageUnavailableError):
                await ns.get_by_name("other").append_message(text(0))  # an activation needs Postgres
            with pytest.raises(StorageUnavailableError):
                await stub.get_history()  # the actor was dropped with its unconfirmed write; waking needs Postgres
            assert trio.current_time() - started < 2.0
        finally:
            pg_server.start()
        # the same host recovers by itself: retried writes with the same ids make no duplicates
        with trio.fail_after(10):
            while True:
                try:
                    assert await stub.append_message(text(3)) is True
                    break
                except StorageUnavailableError:
                    await trio.sleep(0.2)
        assert await stub.append_message(text(3)) is False
        assert [m["id"] for m in await stub.get_history()] == ["m0", "m1", "m2", "m3"]
        assert a.cluster.statistics().restores == 2  # the dropped copy was rebuilt from Postgres
        assert await ns.get_by_name("other").append_message(text(0)) is True
        rows = pg("SELECT seq FROM ds_log ORDER BY actor_id, seq")
        assert rows  # the log kept its order across the restart


async def test_an_idle_active_actor_survives_a_short_outage_without_losing_its_lease(hosts, pg_server, pg):
    async with hosts(1, lease_s=3.0) as (a,):
        ns = a.bind("sessions", SessionAgent, env=SessionConfig())
        stub = ns.get_by_name("chat")
        await stub.append_message(text(0))
        pg_server.restart("immediate")  # a renewal may fail meanwhile; the lease is not lost
        assert await stub.append_message(text(1)) is True
        assert [m["id"] for m in await stub.get_history()] == ["m0", "m1"]
        stats = a.cluster.statistics()
        assert (stats.restores, stats.poisoned, stats.deposed) == (1, 0, 0)
        assert pg("SELECT epoch FROM ds_actors") == [(1,)]


async def test_open_host_says_storage_unavailable_when_postgres_cannot_be_reached(tmp_path):
    """The documented error itself, not an exception group around it; nothing is left open."""
    from runtime.host import open_host
    from runtime.host.cluster import ClusterOptions
    from tests.support.postgres import free_port

    dsn = f"host=127.0.0.1 port={free_port()} dbname=nothing user=nobody connect_timeout=1"
    started = trio.current_time()
    with pytest.raises(StorageUnavailableError):
        async with open_host(tmp_path / "d", cluster=ClusterOptions(dsn, "http://here", lease_s=2.0)):
            raise AssertionError("the host must not open")
    assert trio.current_time() - started < 5
    async with open_host(tmp_path / "d") as host:  # the folder is free again (its alarm index was closed)
        assert host.cluster is None
