"""storage/cluster against a real Postgres: schema, leases, fencing, capture, the group-commit log, restore."""

from __future__ import annotations

import psycopg
import pytest
import trio

from actors.session import Session
from common.errors import OwnershipLostError, SchemaTooNewError, StorageError, StorageUnavailableError
from storage.cluster import (
    ActorLog,
    ChangeCapture,
    Lease,
    Marker,
    Owner,
    RestoreError,
    create_cluster_schema,
    file_marker,
    read_marker,
    restore_actor,
    restore_file,
    write_marker,
)
from storage.cluster.capture import ensure_marker
from storage.cluster.driver import PgConnection
from storage.kv import ActorStorage
from storage.schema import SCHEMA_VERSION
from tests.support.agents import RecordingAgent
from tests.support.cluster import connection_digest, file_digest, storage_side

ACTOR = "sessions/" + "ab" * 32


def message(i: int, prefix: str = "m") -> dict:
    return {"id": f"{prefix}{i}", "role": "user", "parts": [{"type": "text", "text": f"flight {i} to Lisbon"}]}


def sql(dsn: str, query: str, *params):
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


@pytest.fixture
def template(tmp_path):
    return tmp_path / "_template" / f"v{SCHEMA_VERSION}.sqlite3"


def open_file(path, template) -> ActorStorage:
    storage = ActorStorage.open(path, template=template)
    ensure_marker(storage.connection)
    return storage


# -- schema ------------------------------------------------------------------------------------------------


async def test_schema_is_idempotent_concurrent_and_keeps_one_cluster_id(pg_empty_dsn):
    ids = []

    async def create():
        conn = await PgConnection.connect(pg_empty_dsn, timeout_s=5, statement_timeout_s=5)
        ids.append(await create_cluster_schema(conn))
        await conn.close()

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(create)
    assert len(set(ids)) == 1 and len(ids[0]) == 36
    tables = {name for (name,) in sql(pg_empty_dsn, "SELECT tablename FROM pg_tables WHERE tablename LIKE 'ds_%%'")}
    assert tables == {"ds_cluster_meta", "ds_hosts", "ds_actors", "ds_log", "ds_snapshots", "ds_alarms", "ds_catalog"}


async def test_a_newer_cluster_schema_is_refused(pg_empty_dsn):
    conn = await PgConnection.connect(pg_empty_dsn, timeout_s=5, statement_timeout_s=5)
    await create_cluster_schema(conn)
    sql(pg_empty_dsn, "UPDATE ds_cluster_meta SET value = '4' WHERE key = 'schema_version'")
    with pytest.raises(SchemaTooNewError, match="schema version 4 is newer than this code supports"):
        await create_cluster_schema(conn)
    await conn.close()


# -- leases ------------------------------------------------------------------------------------------------


async def test_one_owner_at_a_time_and_takeover_after_expiry(pg_empty_dsn):
    async with storage_side(pg_empty_dsn, "h1", lease_s=0.6) as a, storage_side(pg_empty_dsn, "h2",
                                                                                 lease_s=0.6) as b:
        lease = await a.ownership.acquire(ACTOR, base_version=SCHEMA_VERSION)
        assert isinstance(lease, Lease) and (lease.epoch, lease.last_seq) == (1, 0) and lease.live()
        other = await b.ownership.acquire(ACTOR, base_version=SCHEMA_VERSION)
        assert isinstance(other, Owner)
        assert (other.host_id, other.address, other.epoch) == ("h1", "http://h1", 1)
        assert 0 < other.remaining_ms <= 600
        # re-acquiring one's own actor bumps the epoch (fencing one's own stale writes)
        again = await a.ownership.acquire(ACTOR, base_version=SCHEMA_VERSION)
        assert again.epoch == 2
        await trio.sleep(0.55)
        assert not again.live()  # the local deadline (0.54 s) passes before the server's expiry (0.6 s)
        with trio.fail_after(3):
            while not isinstance(taken := await b.ownership.acquire(ACTOR, base_version=SCHEMA_VERSION), Lease):
                await trio.sleep(0.02)
        assert taken.epoch == 3
        assert await a.ownership.renew([again]) == [again] and again.lost
        owner = await a.ownership.owner(ACTOR)
        assert (owner.host_id, owner.epoch) == ("h2", 3)


async def test_renew_keeps_and_release_frees(pg_empty_dsn):
    async with storage_side(pg_empty_dsn, "h1", lease_s=1.0) as a, storage_side(pg_empty_dsn, "h2") as b:
        lease = await a.ownership.acquire(ACTOR, base_version=SCHEMA_VERSION)
        for _ in range(6):
            await trio.sleep(0.2)
            assert await a.ownership.renew([lease]) == []
        assert isinstance(await b.ownership.acquire(ACTOR, base_version=SCHEMA_VERSION), Owner)
        await a.ownership.release([lease])
        taken = await b.ownership.acquire(ACTOR, base_version=SCHEMA_VERSION)
        assert isinstance(taken, Lease) and taken.epoch == 2
        assert await a.ownership.owner("sessions/" + "cd" * 32) is None
        assert sorted(h for h, _ in await a.ownership.live_hosts()) == []  # storage_side registers no host
        await a.ownership.register_host()
        assert await a.ownership.live_hosts() == [("h1", "http://h1")]


# -- capture -----------------------------------------------------------------------------------------------


def test_capture_cuts_committed_changes_and_leaves_the_marker_out(tmp_path, template):
    storage = open_file(tmp_path / "a.sqlite3", template)
    capture = ChangeCapture(storage)
    assert capture.cut() == b""
    storage.put("k", 1)
    write_marker(storage, Marker("c", 7, clean=False))
    changeset = capture.cut()
    assert changeset and b"_ds_cluster" not in changeset and b"_cf_KV" in changeset
    assert capture.cut() == b""
    with storage.transaction():
        storage.put("k", 2)
        with pytest.raises(RuntimeError, match="inside a transaction"):
            capture.cut()
    assert capture.cut()  # the committed transaction
    storage.close()


def test_tables_without_a_primary_key_are_captured_by_rowid(tmp_path, template):
    storage = open_file(tmp_path / "a.sqlite3", template)
    storage.exec("CREATE TABLE notes (body TEXT)")
    capture = ChangeCapture(storage)
    storage.exec("INSERT INTO notes VALUES ('no key')")
    assert b"notes" in capture.cut()
    storage.close()


def test_a_commit_without_capture_is_refused_not_lost(tmp_path, template):
    storage = open_file(tmp_path / "a.sqlite3", template)
    capture = ChangeCapture(storage)
    capture.detach()
    with pytest.raises(StorageError, match="a write outside change capture was refused"):
        storage.put("k", 1)
    assert storage.get("k") is None
    capture.refuse_writes(OwnershipLostError("moved"))
    with pytest.raises(OwnershipLostError, match="moved"):
        storage.put("k", 1)
    storage.close()


def test_a_schema_change_is_noticed(tmp_path, template):
    storage = open_file(tmp_path / "a.sqlite3", template)
    capture = ChangeCapture(storage)
    storage.put("k", 1)
    capture.cut()
    assert not capture.schema_changed
    storage.exec("CREATE TABLE custom (id INTEGER PRIMARY KEY)")
    assert capture.cut() == b"" and capture.schema_changed
    capture.reset_schema()
    assert not capture.schema_changed
    storage.close()


# -- restore -----------------------------------------------------------------------------------------------


async def write_session(storage: ActorStorage, capture: ChangeCapture, n: int) -> list[bytes]:
    """n appends (plus context and KV) through the real Session API; one changeset per turn."""
    agent = RecordingAgent(storage)
    session = Session.create(agent).with_context("memory", description="notes", max_tokens=500).with_cached_prompt()
    out = []
    for i in range(n):
        await session.append_message(message(i))
        if i % 7 == 0:
            await session.append_context_block("memory", f" fact {i}")
            storage.put(f"kv{i}", {"i": i, "text": "五月の東京"})
        out.append(capture.cut())
    await session.freeze_system_prompt()
    out.append(capture.cut())
    return [cs for cs in out if cs]


async def test_restore_rebuilds_the_file_row_for_row_with_sound_fts(tmp_path, template):
    primary = open_file(tmp_path / "primary.sqlite3", template)
    capture = ChangeCapture(primary)
    changesets = await write_session(primary, capture, 60)
    image = primary.connection.serialize("main")  # a snapshot half-way is tested below
    expected = connection_digest(primary.connection)  # the primary holds its file exclusively
    replica = tmp_path / "replica.sqlite3"
    (tmp_path / "replica.sqlite3-wal").write_bytes(b"stale WAL of an older copy")
    restore_file(replica, template=template, image=None, tail=changesets, marker=Marker("c1", 61, clean=False))
    assert file_digest(replica) == expected
    assert not (tmp_path / "replica.sqlite3-wal").exists() or (tmp_path / "replica.sqlite3-wal").read_bytes() == b""
    assert file_marker(replica) == Marker("c1", 61, clean=False)
    more = await write_session(primary, capture, 5)
    restore_file(replica, template=template, image=image, tail=more, marker=Marker("c1", 70, clean=False))
    assert file_digest(replica) == connection_digest(primary.connection)
    reopened = ActorStorage.open(replica)
    assert read_marker(reopened) == Marker("c1", 70, clean=False)
    assert [hit["id"] for hit in await Session.create(RecordingAgent(reopened)).search("Lisbon", limit=3)]
    reopened.close()
    primary.close()


async def test_a_tail_that_does_not_fit_is_refused_and_changes_nothing(tmp_path, template):
    primary = open_file(tmp_path / "primary.sqlite3", template)
    capture = ChangeCapture(primary)
    changesets = await write_session(primary, capture, 3)
    replica = tmp_path / "replica.sqlite3"
    restore_file(replica, template=template, image=None, tail=changesets, marker=Marker("c1", 3, clean=True))
    before = replica.read_bytes()
    with pytest.raises(RestoreError, match="does not apply to its snapshot"):
        restore_file(replica, template=template, image=primary.connection.serialize("main"), tail=changesets,
                     marker=Marker("c1", 9, clean=False))
    assert replica.read_bytes() == before and not (tmp_path / "replica.sqlite3.restore.tmp").exists()
    primary.close()


# -- the fenced, group-committed log -------------------------------------------------------------------------


async def new_log(side, storage, *, lease=None) -> ActorLog:
    lease = lease or await side.ownership.acquire(ACTOR, base_version=SCHEMA_VERSION)
    poisoned = []
    log = ActorLog(storage, ChangeCapture(storage), lease, side.appender, on_poison=poisoned.append, alarm_ms=None)
    log.poison_calls = poisoned
    return log


async def test_writes_become_durable_in_order_and_restore_equal(pg_empty_dsn, tmp_path, template):
    async with storage_side(pg_empty_dsn, "h1") as side:
        storage = open_file(tmp_path / "a.sqlite3", template)
        log = await new_log(side, storage)
        session = Session.create(RecordingAgent(storage))

        async def turn(i):
            await session.append_message(message(i))
            await log.wait(log.barrier())

        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(turn, i)
        storage.set_alarm(4_000_000_000_000)
        await log.wait(log.barrier())
        assert log.durable_seq >= 2 and log.idle
        rows = sql(pg_empty_dsn, "SELECT seq FROM ds_log WHERE actor_id = %s ORDER BY seq", ACTOR)
        assert [r[0] for r in rows] == list(range(1, log.durable_seq + 1))  # gap-free
        assert sql(pg_empty_dsn, "SELECT scheduled_ms FROM ds_alarms") == [(4_000_000_000_000,)]
        assert side.appender.stats.entries == log.durable_seq < 41  # concurrent turns shared entries
        storage.delete_alarm()
        await log.wait(log.barrier())
        assert sql(pg_empty_dsn, "SELECT count(*) FROM ds_alarms") == [(0,)]
        # another host rebuilds the same file from Postgres
        await side.ownership.release([log.lease])
        lease = await side.ownership.acquire(ACTOR, base_version=SCHEMA_VERSION)
        await restore_actor(side.pool, lease, tmp_path / "b.sqlite3", template=template, cluster_id="c",
                            durability="normal", current_version=SCHEMA_VERSION)
        storage.close()
        assert file_digest(tmp_path / "b.sqlite3") == file_digest(tmp_path / "a.sqlite3")


async def test_a_deposed_writer_is_refused_and_poisoned(pg_empty_dsn, tmp_path, template):
    async with storage_side(pg_empty_dsn, "h1", lease_s=0.5) as a, storage_side(pg_empty_dsn, "h2") as b:
        storage = open_file(tmp_path / "a.sqlite3", template)
        log = await new_log(a, storage)
        storage.put("k", 1)
        await log.wait(log.barrier())
        await trio.sleep(0.6)  # the lease expires; another host takes the actor
        taken = await b.ownership.acquire(ACTOR, base_version=SCHEMA_VERSION)
        assert isinstance(taken, Lease) and taken.epoch == 2
        storage.put("k", 2)
        target = log.barrier()
        with pytest.raises(OwnershipLostError, match="h2 owns it now at epoch 2"):
            await log.wait(target)
        assert log.poison_calls and isinstance(log.poisoned, OwnershipLostError)
        with pytest.raises(OwnershipLostError):
            storage.put("k", 3)  # no later write can escape either
        assert sql(pg_empty_dsn, "SELECT seq, epoch FROM ds_log ORDER BY seq") == [(1, 1)]
        storage.close()


async def test_a_takeover_waits_for_an_append_holding_the_fence(pg_empty_dsn, tmp_path, template):
    """The fence is a row lock: a takeover racing an append either sees it or refuses it (docs/cluster.md, Q5A)."""
    async with storage_side(pg_empty_dsn, "h1", lease_s=0.4) as a:
        storage = open_file(tmp_path / "a.sqlite3", template)
        log = await new_log(a, storage)
        await trio.sleep(0.5)  # expired, not yet taken
        with psycopg.connect(pg_empty_dsn) as blocker:  # holds the row lock, as a slow takeover would
            blocker.execute("SELECT 1 FROM ds_actors WHERE actor_id = %s FOR UPDATE", (ACTOR,))
            storage.put("k", 1)
            target = log.barrier()
            await trio.sleep(0.2)
            assert not log.is_durable(target)  # the append waits for the lock
            blocker.execute("UPDATE ds_actors SET owner = 'h2', epoch = epoch + 1 WHERE actor_id = %s", (ACTOR,))
            blocker.commit()
        with pytest.raises(OwnershipLostError):
            await log.wait(target)
        assert sql(pg_empty_dsn, "SELECT count(*) FROM ds_log") == [(0,)]
        storage.close()


async def test_postgres_down_poisons_with_unavailable_and_never_hangs(pg_server, pg_empty_dsn, tmp_path, template):
    async with storage_side(pg_empty_dsn, "h1", statement_timeout_s=0.5) as side:
        storage = open_file(tmp_path / "a.sqlite3", template)
        log = await new_log(side, storage)
        storage.put("k", 1)
        await log.wait(log.barrier())
        pg_server.stop("immediate")
        try:
            storage.put("k", 2)
            started = trio.current_time()
            with pytest.raises(StorageUnavailableError, match="could not be made durable"):
                await log.wait(log.barrier())
            assert trio.current_time() - started < 3
        finally:
            pg_server.start()
        assert sql(pg_empty_dsn, "SELECT seq FROM ds_log") == [(1,)]
        storage.close()


async def test_an_unknown_outcome_that_was_not_written_is_sent_again(pg_empty_dsn, tmp_path, template):
    async with storage_side(pg_empty_dsn, "h1") as side:
        storage = open_file(tmp_path / "a.sqlite3", template)
        log = await new_log(side, storage)
        storage.put("k", 1)
        await log.wait(log.barrier())
        # kill the appender's connection: the next statement fails with its outcome unknown
        sql(pg_empty_dsn, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE application_name = 'durable-sessions-cluster' AND pid != pg_backend_pid()")
        storage.put("k", 2)
        await log.wait(log.barrier())
        assert side.appender.stats.resent == 1 and log.poisoned is None
        assert sql(pg_empty_dsn, "SELECT seq FROM ds_log ORDER BY seq") == [(1,), (2,)]
        storage.close()


async def test_ddl_ships_a_snapshot_entry_and_restore_starts_from_it(pg_empty_dsn, tmp_path, template):
    async with storage_side(pg_empty_dsn, "h1") as side:
        storage = open_file(tmp_path / "a.sqlite3", template)
        log = await new_log(side, storage)
        storage.put("k", 1)
        await log.wait(log.barrier())
        storage.exec("CREATE TABLE custom (id INTEGER PRIMARY KEY, v TEXT)")
        storage.exec("INSERT INTO custom VALUES (1, 'one')")
        await log.wait(log.barrier())
        storage.exec("INSERT INTO custom VALUES (2, 'two')")
        await log.wait(log.barrier())
        assert sql(pg_empty_dsn, "SELECT seq FROM ds_snapshots") == [(2,)]
        assert sql(pg_empty_dsn, "SELECT seq, length(changeset) > 0 FROM ds_log ORDER BY seq") == [
            (2, False), (3, True)]
        await side.ownership.release([log.lease])
        lease = await side.ownership.acquire(ACTOR, base_version=SCHEMA_VERSION)
        assert await restore_actor(side.pool, lease, tmp_path / "b.sqlite3", template=template, cluster_id="c",
                                   durability="normal", current_version=SCHEMA_VERSION) == (2, 1)
        storage.close()
        assert file_digest(tmp_path / "b.sqlite3") == file_digest(tmp_path / "a.sqlite3")


async def test_a_grown_tail_is_snapshotted_and_trimmed(pg_empty_dsn, tmp_path, template):
    async with storage_side(pg_empty_dsn, "h1", snapshot_min_bytes=20_000) as side:
        storage = open_file(tmp_path / "a.sqlite3", template)
        log = await new_log(side, storage)
        session = Session.create(RecordingAgent(storage))
        for i in range(60):
            await session.append_message(message(i))
            await log.wait(log.barrier())
        with trio.fail_after(5):
            while side.appender.stats.snapshots == 0:
                await trio.sleep(0.01)
        (snapshot_seq,) = sql(pg_empty_dsn, "SELECT seq FROM ds_snapshots")[0]
        assert sql(pg_empty_dsn, "SELECT min(seq) FROM ds_log") == [(snapshot_seq + 1,)]
        await side.ownership.release([log.lease])
        lease = await side.ownership.acquire(ACTOR, base_version=SCHEMA_VERSION)
        after, applied = await restore_actor(side.pool, lease, tmp_path / "b.sqlite3", template=template,
                                             cluster_id="c", durability="normal", current_version=SCHEMA_VERSION)
        assert after == snapshot_seq and applied == 60 - snapshot_seq
        storage.close()
        assert file_digest(tmp_path / "b.sqlite3") == file_digest(tmp_path / "a.sqlite3")


async def test_a_gap_in_the_log_is_refused(pg_empty_dsn, tmp_path, template):
    async with storage_side(pg_empty_dsn, "h1") as side:
        storage = open_file(tmp_path / "a.sqlite3", template)
        log = await new_log(side, storage)
        for i in range(3):
            storage.put("k", i)
            await log.wait(log.barrier())
        sql(pg_empty_dsn, "DELETE FROM ds_log WHERE seq = 2")
        await side.ownership.release([log.lease])
        lease = await side.ownership.acquire(ACTOR, base_version=SCHEMA_VERSION)
        with pytest.raises(RestoreError, match="gap"):
            await restore_actor(side.pool, lease, tmp_path / "b.sqlite3", template=template, cluster_id="c",
                                durability="normal", current_version=SCHEMA_VERSION)
        assert not (tmp_path / "b.sqlite3").exists()
        storage.close()


def test_concurrent_restores_on_a_fresh_data_folder_build_the_template_once(tmp_path, template):
    """Several first activations at once each restore from a log without a snapshot, on worker threads,
    while the template does not exist yet: every restore succeeds (the template is built once, atomically)."""
    import threading

    files = 8
    barrier = threading.Barrier(files)
    errors: list[BaseException] = []

    def restore(i: int) -> None:
        barrier.wait()
        try:
            restore_file(tmp_path / f"actor-{i}.sqlite3", template=template, image=None, tail=[],
                         marker=Marker("c1", 0, clean=False))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=restore, args=(i,)) for i in range(files)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert [file_marker(tmp_path / f"actor-{i}.sqlite3") for i in range(files)] == [Marker("c1", 0, False)] * files
    assert sorted(p.name for p in template.parent.iterdir()) == [template.name]  # no temporary file left
    assert ActorStorage.open(template).user_version == SCHEMA_VERSION
