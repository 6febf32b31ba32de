"""What a hibernating actor leaves on disk: a large WAL is checkpointed off the trio thread at hibernation.

Real files, real threads: a checkpoint is paused (not replaced) where a test
needs a call to arrive while it runs.
"""

from __future__ import annotations

import logging
import os
import threading

import pytest
import trio

from actors import Agent
from common.errors import ActorStorageCorruptError, StorageFullError
from runtime import open_host
from runtime.host.actor_host import WAL_KEEP_BYTES
from runtime.testing import actor_data_dir  # noqa: F401 (fixture)
from storage.catalog import HostCatalog
from storage.integrity import check_files, examine, open_for_inspection, read_generation
from storage.kv import ActorStorage
from tests.support.disks import fill, free, small_ext4

PAGE = 4096
FRAME = PAGE + 24
WAL_HEADER = 32


class Notes(Agent):
    """Writes rows of about one page each; counts and reads them back."""

    async def write(self, count, start=0, size=3000):
        self.storage.put_many({f"n{i:05d}": f"{i}:" + "x" * size for i in range(start, start + count)})
        return count

    async def count(self):
        return len(self.storage.list())

    async def read(self, i):
        return self.storage.get(f"n{i:05d}")


def wal_of(host, stub):
    return host.path_for(stub.id).with_name(host.path_for(stub.id).name + "-wal")


def wal_size(host, stub):
    try:
        return os.stat(wal_of(host, stub)).st_size
    except FileNotFoundError:
        return 0


def actor_fds():
    """Open descriptors of this process on actor files (not the host's own ``_`` files)."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if ".sqlite3" in target and not os.path.basename(target).startswith("_"):
            found += 1
    return found


def file_generation(path):
    storage = open_for_inspection(path)
    try:
        return read_generation(storage)
    finally:
        storage.close()


async def until(predicate, seconds=10.0):
    with trio.fail_after(seconds):
        while not predicate():
            await trio.sleep(0.01)


@pytest.fixture
def paused_checkpoints(monkeypatch):
    """Each checkpoint waits for ``release`` (a ``threading.Event``) in its worker thread, then runs for real;
    ``entered`` is set once a checkpoint is waiting."""
    entered, release = threading.Event(), threading.Event()
    real = ActorStorage.checkpoint_wal

    def paused(self):
        entered.set()
        if not release.wait(30):
            raise AssertionError("the test never released the checkpoint")
        return real(self)

    monkeypatch.setattr(ActorStorage, "checkpoint_wal", paused)
    yield entered, release
    release.set()


async def test_idle_hibernation_checkpoints_a_large_wal_and_keeps_every_write(actor_data_dir):
    async with open_host(actor_data_dir, idle_timeout_s=0.2) as host:
        ns = host.bind("notes", Notes)
        stub = ns.get_by_name("big")
        await stub.write(100)
        assert wal_size(host, stub) > WAL_KEEP_BYTES
        await until(lambda: not host.is_active(ns, stub.id) and actor_fds() == 0)
        path = host.path_for(stub.id)
        # what stays beside the database: one frame, the generation row written again after the checkpoint
        assert wal_size(host, stub) == WAL_HEADER + FRAME
        assert check_files(path) is None
        entry = host.catalog.get("notes", stub.id.hex)
        assert examine(path, entry.generation)[0] is None
        assert (entry.generation, file_generation(path)) == (2, 3)  # mark, close; the checkpoint's raise after
        assert await stub.count() == 100
        assert await stub.read(99) == "99:" + "x" * 3000
        stats = host.statistics()
        assert (stats.activations, stats.hibernations, stats.active) == (2, 1, 1)


async def test_a_new_files_small_wal_is_checkpointed_at_its_first_hibernation(actor_data_dir):
    async with open_host(actor_data_dir, idle_timeout_s=None) as host:
        ns = host.bind("notes", Notes)
        stub = ns.get_by_name("new")
        await stub.write(3)
        assert 0 < wal_size(host, stub) <= WAL_KEEP_BYTES
        assert await host.hibernate(ns, stub.id) is True
        # the first activation's commits are all in the database: the WAL is cut to nothing
        assert wal_size(host, stub) == 0
        path = host.path_for(stub.id)
        entry = host.catalog.get("notes", stub.id.hex)
        assert (entry.generation, file_generation(path)) == (2, 2)  # mark, close; nothing raised after
        assert examine(path, entry.generation)[0] is None
        assert actor_fds() == 0
        assert await stub.count() == 3
        assert await stub.read(2) == "2:" + "x" * 3000


async def test_a_small_wal_is_left_in_place_at_hibernation(actor_data_dir):
    async with open_host(actor_data_dir, idle_timeout_s=None) as host:
        ns = host.bind("notes", Notes)
        stub = ns.get_by_name("small")
        await stub.write(1)
        await host.hibernate(ns, stub.id)  # its file is new: checkpointed (see the test above)
        await stub.write(3, start=1)
        before = wal_size(host, stub)
        assert 0 < before <= WAL_KEEP_BYTES
        assert await host.hibernate(ns, stub.id) is True
        after = wal_size(host, stub)
        # the generation raised again at closing: one page (its table was created at the first write's mark)
        assert after == before + FRAME
        assert actor_fds() == 0
        assert await stub.count() == 4


async def test_hibernate_returns_once_the_file_is_checkpointed_and_closed(actor_data_dir):
    async with open_host(actor_data_dir, idle_timeout_s=None) as host:
        ns = host.bind("notes", Notes)
        stub = ns.get_by_name("big")
        await stub.write(100)
        assert await host.hibernate(ns, stub.id) is True
        assert actor_fds() == 0
        assert wal_size(host, stub) == WAL_HEADER + FRAME
        assert host.statistics().hibernated == 1
        await stub.write(100, start=100)
        assert await host.hibernate(ns, stub.id) is True
        assert wal_size(host, stub) == WAL_HEADER + FRAME
        assert await stub.count() == 200


async def test_a_call_arriving_during_the_checkpoint_waits_for_the_close_and_wakes_the_actor(
        actor_data_dir, paused_checkpoints):
    entered, release = paused_checkpoints
    async with open_host(actor_data_dir, idle_timeout_s=0.1) as host:
        ns = host.bind("notes", Notes)
        stub = ns.get_by_name("big")
        await stub.write(100)
        await until(entered.is_set)
        assert not host.is_active(ns, stub.id)
        stats = host.statistics()
        assert (stats.active, stats.hibernated, stats.hibernations) == (0, 1, 1)
        assert actor_fds() == 2  # the database and its WAL stay open until the checkpoint ends
        answers = []

        async def count():
            answers.append(await stub.count())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(count)
            await trio.sleep(0.3)
            assert answers == []
            assert host.statistics().activating == 1
            release.set()
        assert answers == [100]
        assert host.is_active(ns, stub.id)
        assert wal_size(host, stub) == WAL_HEADER + FRAME
        assert host.statistics().activations == 2
        assert await stub.read(42) == "42:" + "x" * 3000


async def test_hibernate_of_an_actor_being_checkpointed_returns_once_its_file_is_closed(
        actor_data_dir, paused_checkpoints):
    entered, release = paused_checkpoints
    async with open_host(actor_data_dir, idle_timeout_s=0.1) as host:
        ns = host.bind("notes", Notes)
        stub = ns.get_by_name("big")
        await stub.write(100)
        await until(entered.is_set)
        answers = {}

        async def hibernate(name, call):
            answers[name] = await call()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(hibernate, "one", lambda: host.hibernate(ns, stub.id))
            nursery.start_soon(hibernate, "all", host.hibernate_all)
            await trio.sleep(0.3)
            assert answers == {} and actor_fds() == 2
            release.set()
        assert answers["one"] is False and answers["all"] == 0  # it was asleep already
        assert actor_fds() == 0
        assert wal_size(host, stub) == WAL_HEADER + FRAME


async def test_waking_another_actor_past_max_active_waits_for_a_file_being_checkpointed(
        actor_data_dir, paused_checkpoints):
    entered, release = paused_checkpoints
    async with open_host(actor_data_dir, idle_timeout_s=0.1, max_active=1) as host:
        ns = host.bind("notes", Notes)
        big, other = ns.get_by_name("big"), ns.get_by_name("other")
        await big.write(100)
        await until(entered.is_set)
        answers = []

        async def write_other():
            answers.append(await other.write(1))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write_other)
            await trio.sleep(0.3)
            assert answers == [] and not host.is_active(ns, other.id)
            assert host.statistics().activating == 1
            release.set()
        assert answers == [1]
        assert wal_size(host, big) == WAL_HEADER + FRAME
        assert host.statistics().evictions == 0


async def test_eviction_closes_without_a_checkpoint(actor_data_dir):
    """Evicting is on the path of a waking call: the evicted actor's WAL stays (checkpointed at a later idle hibernation)."""
    async with open_host(actor_data_dir, idle_timeout_s=None, max_active=1) as host:
        ns = host.bind("notes", Notes)
        big, other = ns.get_by_name("big"), ns.get_by_name("other")
        await big.write(100)
        before = wal_size(host, big)
        await other.write(1)
        assert host.statistics().evictions == 1
        assert wal_size(host, big) == before + FRAME  # the generation raised at closing (its table made at the mark)
        assert await big.count() == 100


async def test_a_checkpointed_file_still_passes_the_checks_and_damage_is_still_caught(actor_data_dir):
    async with open_host(actor_data_dir, idle_timeout_s=None) as host:
        ns = host.bind("notes", Notes)
        kept, cut = ns.get_by_name("kept"), ns.get_by_name("cut")
        for stub in (kept, cut):
            await stub.write(100)
            await host.hibernate(ns, stub.id)
        # losing the WAL now loses only the generation row written after the checkpoint: nothing of the actor's
        os.remove(wal_of(host, kept))
        assert await kept.count() == 100
        # a database cut short is refused, as before
        path = host.path_for(cut.id)
        os.truncate(path, os.stat(path).st_size - 100)
        with pytest.raises(ActorStorageCorruptError, match="not a whole number"):
            await cut.count()


async def test_shutting_the_host_down_during_a_checkpoint_waits_for_it_and_loses_nothing(
        actor_data_dir, paused_checkpoints):
    entered, release = paused_checkpoints
    async with open_host(actor_data_dir, idle_timeout_s=0.1) as host:
        ns = host.bind("notes", Notes)
        stub = ns.get_by_name("big")
        await stub.write(100)
        await until(entered.is_set)
        timer = threading.Timer(0.3, release.set)
        timer.start()
        started = trio.current_time()
    assert 0.2 < trio.current_time() - started < 10
    assert actor_fds() == 0
    async with open_host(actor_data_dir, idle_timeout_s=None) as host:
        stub = host.bind("notes", Notes).get_by_name("big")
        assert wal_size(host, stub) == WAL_HEADER + FRAME
        assert await stub.count() == 100


@pytest.mark.slow
async def test_a_full_disk_during_the_checkpoint_loses_nothing_and_is_logged(tmp_path, caplog):
    with small_ext4(tmp_path, size_mb=24) as mount:
        data = mount / "data"
        async with open_host(data, idle_timeout_s=None) as host:
            ns = host.bind("notes", Notes)
            big, other = ns.get_by_name("big"), ns.get_by_name("other")
            await other.write(1)
            await big.write(200)
            assert fill(mount) > 0
            with caplog.at_level(logging.WARNING, logger="runtime.host"):
                assert await host.hibernate(ns, big.id) is True
            [record] = [r for r in caplog.records if "checkpoint" in r.getMessage()]
            assert record.levelno == logging.WARNING
            assert "disk is full" in record.getMessage() and "nothing is lost" in record.getMessage()
            assert actor_fds() == 2  # only other's: big's file was closed all the same
            assert wal_size(host, big) > WAL_KEEP_BYTES  # its WAL holds the writes
            assert check_files(host.path_for(big.id)) is None
            assert await other.count() == 1  # the host goes on
            assert await big.count() == 200  # a wake on the full disk reads everything
            with pytest.raises(StorageFullError):
                await big.write(1, start=900)
            free(mount)
            await big.write(1, start=900)
            assert await host.hibernate(ns, big.id) is True
            assert wal_size(host, big) == WAL_HEADER + FRAME
            assert await big.count() == 201
        catalog = HostCatalog.open(data)
        try:
            assert catalog.get("notes", big.id.hex).state == "ok"
        finally:
            catalog.close()
