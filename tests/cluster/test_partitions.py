"""A cluster on several Postgres databases (runtime.host.partitions): the fixed hash, the routing of every
actor's rows to one database, and the partition map every database records (hosts in one process)."""

from __future__ import annotations

import hashlib
from contextlib import AsyncExitStack, asynccontextmanager

import psycopg
import pytest

from common.errors import NotOwnerError
from runtime.host import open_host
from runtime.host.cluster import ClusterOptions, HostCluster
from runtime.host.ids import ActorId
from runtime.host.partitions import (
    PARTITIONS,
    PartitionedCluster,
    PartitionMapError,
    cluster_placement,
    database_index,
    merged,
    partition_of,
)
from storage.cluster.driver import describe_dsn
from storage.cluster.schema import PARTITION_OF_SQL
from tests.cluster.conftest import CONNECT_TIMEOUT_S, DEFAULT_LEASE_S
from tests.cluster.test_core_ownership import Counter


def rows(dsn: str, query: str, *params) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


def options(host_id: str) -> ClusterOptions:
    return ClusterOptions("unused", f"http://{host_id}", host_id=host_id, lease_s=DEFAULT_LEASE_S,
                          connect_timeout_s=CONNECT_TIMEOUT_S)


@asynccontextmanager
async def hosts_on(tmp_path, dsns, count: int, first: int = 0):
    async with AsyncExitStack() as stack:
        made = []
        for i in range(first, first + count):
            placement = cluster_placement(options(f"h{i}"), dsns)
            made.append(await stack.enter_async_context(open_host(tmp_path / f"host-{i}", placement=placement)))
        yield made


def test_the_partition_of_an_actor_is_a_fixed_hash_of_its_id():
    # Fixed values: a change here moves actors between databases of running clusters.
    actor = ActorId("sessions", "00" * 32)
    digest = hashlib.sha256(b"sessions/" + b"0" * 64).digest()
    assert partition_of(actor) == int.from_bytes(digest[:4], "big") % 256 == 65
    assert partition_of(ActorId("counters", "ab" * 32)) == 40
    assert PARTITIONS == 256
    assert database_index(actor, 2) == 1 and database_index(actor, 3) == 2
    spread = [0, 0]
    for i in range(2000):
        spread[database_index(ActorId("sessions", hashlib.sha256(str(i).encode()).hexdigest()), 2)] += 1
    assert 850 < spread[0] < 1150, spread  # about half each


def test_merging_sorted_answers_of_every_database():
    answers = [[(9, "a"), (4, "b"), (1, "c")], [(7, "d"), (4, "e")], []]
    assert merged(answers, key=lambda row: row[0]) == [(9, "a"), (7, "d"), (4, "b"), (4, "e"), (1, "c")]
    assert merged([[1, 3], [2]], key=lambda n: n, newest_first=False) == [1, 2, 3]


async def test_actors_live_in_the_database_of_their_partition_and_every_host_serves_both(
        tmp_path, pg_empty_dsn, second_dsn):
    dsns = [pg_empty_dsn, second_dsn]
    async with hosts_on(tmp_path, dsns, 1, first=1) as (b,):
        async with hosts_on(tmp_path, dsns, 1) as (a,):
            assert isinstance(a.cluster, PartitionedCluster) and a.cluster.host_id == "h0"
            counters_a, counters_b = (host.bind("counters", Counter) for host in (a, b))
            names = [f"c{i}" for i in range(24)]
            for name in names:
                assert await counters_a.get_by_name(name).add(5) == 5
            ids = {name: counters_a.id_from_name(name) for name in names}
            held = [{row[0] for row in rows(dsn, "SELECT actor_id FROM ds_actors")} for dsn in dsns]
            for name, actor_id in ids.items():
                where = database_index(actor_id, 2)
                key = f"counters/{actor_id.hex}"
                assert key in held[where] and key not in held[1 - where], name
                assert rows(dsns[where], "SELECT count(*) FROM ds_log WHERE actor_id = %s", key) != [(0,)]
                assert rows(dsns[1 - where], "SELECT count(*) FROM ds_log WHERE actor_id = %s", key) == [(0,)]
            assert all(len(found) >= 4 for found in held), [len(found) for found in held]  # both are used
            # the SQL form of the hash (for moving rows by hand, docs/cluster.md) agrees with partition_of
            in_sql = dict(rows(dsns[0], f"SELECT actor_id, {PARTITION_OF_SQL} FROM ds_actors")
                          + rows(dsns[1], f"SELECT actor_id, {PARTITION_OF_SQL} FROM ds_actors"))
            assert in_sql == {f"counters/{actor_id.hex}": partition_of(actor_id) for actor_id in ids.values()}
            # the other host is refused with the owner's URL, whichever database holds the actor
            other = next(n for n in names if database_index(ids[n], 2) != database_index(ids[names[0]], 2))
            for name in (names[0], other):
                with pytest.raises(NotOwnerError) as refused:
                    await counters_b.get_by_name(name).read()
                assert refused.value.owner_url == "http://h0"
                assert await a.cluster.owner_of(ids[name]) is not None
                assert (await a.cluster.owner_of(ids[name])).host_id == "h0"
                assert await b.cluster.written(ids[name])
            assert sorted(await b.cluster.live_hosts()) == [("h0", "http://h0"), ("h1", "http://h1")]
            stats = a.cluster.statistics()
            assert stats.leases == 24 and stats.acquisitions == 24
        # the owner left (its leases released in both databases): the other host serves every actor
        for name in names:
            assert await counters_b.get_by_name(name).add(1) == 6
        owners = [row for db in dsns for row in rows(db, "SELECT owner, count(*) FROM ds_actors GROUP BY 1")]
        assert owners == [("h1", len(found)) for found in held]


async def test_one_database_is_a_plain_host_cluster_that_records_its_map(tmp_path, pg_empty_dsn, second_dsn):
    async with hosts_on(tmp_path, [pg_empty_dsn], 1) as (host,):
        assert isinstance(host.cluster, HostCluster)
        assert await host.bind("counters", Counter).get_by_name("x").add() == 1
    meta = dict(rows(pg_empty_dsn, "SELECT key, value FROM ds_cluster_meta"))
    assert meta["partitions"] == "256"
    assert meta["partition_map"] == f'[["{meta["cluster_id"]}", "{describe_dsn(pg_empty_dsn)}"]]'
    # a host given a second database now is refused: the first one's actors would be spread away from it
    with pytest.raises(PartitionMapError, match=rf"database {describe_dsn(second_dsn)} is not in the "
                                                rf"cluster's partition map \(1 database: {describe_dsn(pg_empty_dsn)}"):
        async with hosts_on(tmp_path, [pg_empty_dsn, second_dsn], 1):
            pass
    assert rows(second_dsn, "SELECT count(*) FROM ds_hosts") == [(0,)]  # refused before registering anywhere


async def test_a_host_whose_databases_differ_from_the_map_is_refused_with_one_line(
        tmp_path, pg_server, pg_empty_dsn, second_dsn):
    a, b = describe_dsn(pg_empty_dsn), describe_dsn(second_dsn)
    async with hosts_on(tmp_path, [pg_empty_dsn, second_dsn], 1):
        pass  # records the map [a, b] in both
    third = pg_server.dsn(pg_server.create_database("template0"))
    c = describe_dsn(third)
    cases = [
        ([second_dsn, pg_empty_dsn], f"the databases are given in another order ({b}, {a}) than the cluster's "
                                     f"partition map records ({a}, {b}, in "),
        ([pg_empty_dsn], f"database {b} of the cluster's partition map (2 databases: {a}, {b}, recorded in {a}) "
                         "is not given to this host"),
        ([pg_empty_dsn, second_dsn, third], f"database {c} is not in the cluster's partition map (2 databases: "
                                            f"{a}, {b}, recorded in "),
        ([pg_empty_dsn, pg_empty_dsn + " application_name=again"],
         f"{a} and {a} are the same database (cluster id "),
    ]
    for dsns, message in cases:
        with pytest.raises(PartitionMapError) as refused:
            async with hosts_on(tmp_path, dsns, 1):
                pass
        assert str(refused.value).startswith(message), str(refused.value)
        assert "\n" not in str(refused.value)
    assert rows(third, "SELECT count(*) FROM ds_hosts") == [(0,)]  # refused before registering or recording
    assert rows(third, "SELECT value FROM ds_cluster_meta WHERE key = 'partition_map'") == []
    # the right list still starts
    async with hosts_on(tmp_path, [pg_empty_dsn, second_dsn], 1) as (host,):
        assert await host.bind("counters", Counter).get_by_name("y").add() == 1


async def test_a_database_used_alone_before_maps_were_recorded_is_not_spread(tmp_path, pg_empty_dsn, second_dsn):
    async with hosts_on(tmp_path, [pg_empty_dsn], 1) as (host,):
        assert await host.bind("counters", Counter).get_by_name("old").add() == 1
    rows(pg_empty_dsn, "DELETE FROM ds_cluster_meta WHERE key IN ('partitions', 'partition_map') RETURNING key")
    with pytest.raises(PartitionMapError, match=rf"database {describe_dsn(second_dsn)} is not in the cluster's "
                                                rf"partition map \(1 database"):
        async with hosts_on(tmp_path, [pg_empty_dsn, second_dsn], 1):
            pass
