"""Three real ``serve --cluster A --cluster B`` hosts on two databases of the fixture's Postgres.

Sessions land in the database of their partition (checked with SQL: lease, log and alarm rows in that one,
nothing in the other); any host answers any session; ``kill -9`` of a host that owns sessions of both
databases moves them with no acknowledged write lost; an alarm in each database fires once after its
owner died. Writers are those of ``test_http_failover`` (batches of two, re-sent until acknowledged).
"""

from __future__ import annotations

import psycopg
import pytest
import trio

from runtime.client import SessionsClient
from runtime.host.ids import id_from_name
from runtime.host.partitions import database_index
from tests.cluster.test_http_failover import Writer, final_histories, msg
from tests.support.cluster_hosts import await_until, run_cluster

pytestmark = pytest.mark.slow

#: kill -9 cycles of the owner of sessions in both databases.
KILL_CYCLES = 3


def actor_of(session_id: str) -> str:
    return f"sessions/{id_from_name('sessions', session_id).hex}"


def database_of(session_id: str) -> int:
    return database_index(id_from_name("sessions", session_id), 2)


def column(dsn: str, query: str) -> set:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {row[0] for row in conn.execute(query).fetchall()}


def names_in(database: int, count: int, prefix: str) -> list[str]:
    return [name for name in (f"{prefix}{i}" for i in range(100)) if database_of(name) == database][:count]


async def test_sessions_in_two_databases_survive_kill_9_of_their_owner(tmp_path, pg_empty_dsn, second_dsn):
    dsns = [pg_empty_dsn, second_dsn]
    sessions = names_in(0, 2, "w") + names_in(1, 2, "w")
    alarms = names_in(0, 1, "alarm") + names_in(1, 1, "alarm")
    with run_cluster(tmp_path, dsns, hosts=3, lease_s=1.0) as cluster:
        h1, h2, h3 = cluster.hosts
        async with SessionsClient(cluster.urls, timeout=10, retries=50, failover_s=30) as client:
            writers = [Writer(client, session_id) for session_id in sessions]
            async with trio.open_nursery() as nursery:
                for writer in writers:
                    nursery.start_soon(writer.run)  # first to h1, the first URL: h1 owns them all
                for writer in writers:
                    await writer.wait_for_acks(2, 60)
                async with SessionsClient(h1.url) as direct:
                    for session_id in alarms:
                        await direct.session(session_id).append_message(msg(f"{session_id}-m0"))
                        await direct.session(session_id).call("schedule", 5.0)
                for session_id in alarms:  # the alarm row is in the actor's database (until it fires)
                    assert actor_of(session_id) in column(dsns[database_of(session_id)],
                                                          "SELECT actor_id FROM ds_alarms")
                    assert actor_of(session_id) not in column(dsns[1 - database_of(session_id)],
                                                              "SELECT actor_id FROM ds_alarms")
                for session_id in sessions + alarms:  # each in its partition's database, nothing in the other
                    assert await trio.to_thread.run_sync(lambda s=session_id: cluster.owner_of(s, via=h2)) is h1
                    here, there = dsns[database_of(session_id)], dsns[1 - database_of(session_id)]
                    for table in ("ds_actors", "ds_log"):
                        assert actor_of(session_id) in column(here, f"SELECT actor_id FROM {table}"), table
                        assert actor_of(session_id) not in column(there, f"SELECT actor_id FROM {table}"), table
                hosts_seen = [column(dsn, "SELECT host_id FROM ds_hosts") for dsn in dsns]
                assert len(hosts_seen[0]) == 3 and hosts_seen[0] == hosts_seen[1]  # every host in both

                owner = h1  # owns sessions (and an alarm) of both databases
                for _cycle in range(KILL_CYCLES):
                    before = [len(writer.acked) for writer in writers]
                    owner.kill()
                    for writer, count in zip(writers, before, strict=True):
                        await writer.wait_for_acks(count + 1, 60)  # acknowledged by another host
                    await trio.to_thread.run_sync(owner.start)
                    owner = await trio.to_thread.run_sync(cluster.owner_of, sessions[0])
                nursery.cancel_scope.cancel()
        for writer in writers:  # every host answers every session, and they agree
            writer.check(await final_histories(cluster, writer.session_id))
        fired = await await_until(lambda: len(cluster.events("alarms")) >= 2 and cluster.events("alarms"), 60,
                                  "both alarms to fire")
        await trio.sleep(3 * cluster.lease_s)  # time for a second delivery of an alarm, if there were one
        fired = cluster.events("alarms")
        assert sorted(line[1] for line in fired) == sorted(id_from_name("sessions", s).hex for s in alarms), fired
