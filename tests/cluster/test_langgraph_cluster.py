"""LangGraph threads in a cluster: forwarded to the owner, and moved to another host after a kill -9.

Two real ``serve --cluster`` hosts on one Postgres (:func:`tests.support.cluster_hosts.run_cluster`);
``DurableCheckpointer`` talks to one host, then to the other.
"""

from __future__ import annotations

import pytest

from tests.support.cluster_hosts import await_until, run_cluster

pytest.importorskip("langgraph.checkpoint.conformance", reason="the langgraph extra is not installed")

from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata  # noqa: E402

from runtime.client import DurableCheckpointer  # noqa: E402

LEASE_S = 1.5

pytestmark = pytest.mark.slow


async def test_a_thread_is_forwarded_to_its_owner_and_survives_a_kill_9_of_it(tmp_path, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=2, lease_s=LEASE_S, app=None) as cluster:
        a, b = cluster.hosts
        config = {"configurable": {"thread_id": "graph-1", "checkpoint_ns": ""}}
        ids = []
        async with DurableCheckpointer(a.url) as saver:
            for step in range(3):
                checkpoint = generate_checkpoint(channel_values={"step": step})
                config = await saver.aput(config, checkpoint, generate_metadata(step=step), {})
                ids.append(checkpoint["id"])
            await saver.aput_writes(config, [("answer", "forty-two")], "task-1")
        async with DurableCheckpointer(b.url) as saver:  # b forwards to a, the owner
            found = await saver.aget_tuple({"configurable": {"thread_id": "graph-1"}})
            assert found.checkpoint["id"] == ids[-1]
            assert found.pending_writes == [("task-1", "answer", "forty-two")]

            a.kill()  # kill -9

            async def moved():
                try:
                    return await saver.aget_tuple({"configurable": {"thread_id": "graph-1"}})
                except Exception:  # noqa: BLE001 - NotOwnerError or an unreachable owner until the lease runs out
                    return None

            found = await await_until(moved, LEASE_S + 30, "b to take the thread over", interval=0.1)
            assert found.checkpoint["id"] == ids[-1]
            assert found.checkpoint["channel_values"] == {"step": 2}
            assert found.pending_writes == [("task-1", "answer", "forty-two")]
            listed = [t.checkpoint["id"] async for t in saver.alist({"configurable": {"thread_id": "graph-1"}})]
            assert listed == list(reversed(ids))
