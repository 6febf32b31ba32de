"""The host's file guard in process: catalog rows at hibernation, generation, quarantine during a call."""

from __future__ import annotations

import sys
import time

import pytest
import trio

from actors import Agent
from actors.session_agent import SessionAgent, SessionConfig
from common.errors import ActorStorageCorruptError
from runtime import open_host
from runtime.host.file_guard import QUARANTINE_DIR
from runtime.testing import actor_data_dir, run_in_actor  # noqa: F401 (fixtures)
from storage.catalog import HostCatalog
from storage.integrity import open_for_inspection, read_generation


class Box(Agent):
    def put(self, key, value):
        self.storage.put(key, value)

    def get(self, key):
        return self.storage.get(key)

    def keys(self):
        return list(self.storage.list())

    async def slow_keys(self):
        await trio.sleep(1)
        return list(self.storage.list())


def msg(message_id):
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": f"text of {message_id}"}]}


def catalog_entry(host, stub):
    return host.catalog.get(stub.namespace.name, stub.id.hex)


async def test_hibernating_after_writes_raises_the_generation_and_records_the_catalog(actor_data_dir):
    async with open_host(actor_data_dir) as host:
        stub = host.bind("box", Box).get_by_name("one")
        await stub.put("a", 1)
        marked = catalog_entry(host, stub)  # the first write since the wake is marked before its reply
        assert (marked.generation, marked.name, marked.unclosed, marked.messages) == (1, "one", True, 0)
        await stub.put("a2", 1)
        assert catalog_entry(host, stub) == marked  # nothing per call after that
        await host.hibernate("box", stub.id)
        entry = catalog_entry(host, stub)
        # raised twice by a wake that writes: at the first write's mark, and as the WAL's last frame at closing
        assert (entry.generation, entry.name, entry.state, entry.unclosed) == (2, "one", "ok", False)
        assert await stub.get("a") == 1  # a wake that only reads
        await host.hibernate("box", stub.id)
        assert catalog_entry(host, stub).generation == 2
        await stub.put("b", 2)
    async with open_host(actor_data_dir) as host:  # closing the host records too
        stub = host.bind("box", Box).get_by_name("one")
        assert catalog_entry(host, stub).generation == 4
        assert await run_in_actor(stub, lambda agent: read_generation(agent.storage)) == 4


def wall_ms():
    return time.time_ns() // 1_000_000


async def timed(call):
    before = wall_ms()
    await call
    return before, wall_ms()


async def test_the_row_has_the_first_and_last_commit_times_not_the_hibernations(actor_data_dir):
    async with open_host(actor_data_dir, idle_timeout_s=None) as host:
        stub = host.bind("box", Box).get_by_name("one")
        first = await timed(stub.put("a", 1))  # no messages: only the commits tell the times
        await trio.sleep(0.3)
        last = await timed(stub.put("b", 2))
        await trio.sleep(1.0)
        await host.hibernate("box", stub.id)
        entry = catalog_entry(host, stub)
        assert first[0] <= entry.created_ms <= first[1]
        assert last[0] <= entry.updated_ms <= last[1] < wall_ms() - 900
        assert await stub.get("a") == 1  # a wake that only reads
        await trio.sleep(0.3)
        await host.hibernate("box", stub.id)
        assert catalog_entry(host, stub) == entry
        again = await timed(stub.put("c", 3))
        await trio.sleep(0.3)
    catalog = HostCatalog.open(actor_data_dir)  # closing the host records the write's time too
    try:
        closed = catalog.get("box", stub.id.hex)
    finally:
        catalog.close()
    assert (closed.created_ms, closed.generation) == (entry.created_ms, 4)  # two wakes that wrote, two raises each
    assert again[0] <= closed.updated_ms <= again[1]


async def test_a_session_row_has_its_name_message_count_and_compaction_state(actor_data_dir):
    async with open_host(actor_data_dir) as host:
        sessions = host.bind("sessions", SessionAgent, env=SessionConfig())
        stub = sessions.get_by_name("chat-42")
        await stub.append_messages([msg(f"m{i}") for i in range(5)])
        await stub.add_compaction("the first three", "m0", "m2")
    catalog = HostCatalog.open(actor_data_dir)
    try:
        [entry] = catalog.entries("sessions")
    finally:
        catalog.close()
    assert (entry.name, entry.messages, entry.compactions, entry.compacted_through) == ("chat-42", 5, 1, "m2")
    assert 0 < entry.created_ms <= entry.updated_ms


async def test_damage_met_during_a_call_quarantines_the_actor_and_refuses_every_waiting_call(actor_data_dir):
    async with open_host(actor_data_dir) as host:
        boxes = host.bind("box", Box)
        victim, other = boxes.get_by_name("victim"), boxes.get_by_name("other")
        for i in range(800):  # ~1 MB: above the size quick-checked at every wake
            await victim.put(f"k{i}", "v" * 1000)
        await other.put("x", 1)
        path = host.path_for(victim.id)
        page = await run_in_actor(victim, lambda agent: (
            agent.storage.connection.wal_checkpoint(mode=3),
            agent.storage.scalar("SELECT max(pageno) FROM dbstat WHERE name = '_cf_KV' AND pagetype = 'leaf'"),
        )[1])
        await host.hibernate("box", victim.id)
        with path.open("r+b") as file:
            file.seek((page - 1) * 4096)
            file.write(b"\x00")  # a page type that does not exist
        results = []

        async def call(method):
            try:
                results.append(await victim.call(method))
            except ActorStorageCorruptError as exc:
                results.append(exc)

        async with trio.open_nursery() as nursery:
            for method in ("slow_keys", "keys", "keys"):
                nursery.start_soon(call, method)
                await trio.sleep(0.01)
        assert [type(r) for r in results] == [ActorStorageCorruptError] * 3
        assert all(r.session == "victim" for r in results)
        assert {r.problem for r in results} == {"SQLite reported damage: database disk image is malformed"}
        with pytest.raises(ActorStorageCorruptError, match="^session 'victim' is damaged and quarantined"):
            await victim.put("new", 1)
        assert not path.exists()
        [moved] = (actor_data_dir / QUARANTINE_DIR / "box").iterdir()
        assert (moved / path.name).exists()
        assert await other.get("x") == 1 and not host.is_active("box", victim.id)
        assert catalog_entry(host, victim).state == "quarantined"


async def test_a_small_damaged_file_is_found_by_the_quick_check_at_wake(actor_data_dir):
    async with open_host(actor_data_dir) as host:
        victim = host.bind("box", Box).get_by_name("victim")
        for i in range(20):
            await victim.put(f"k{i}", "v" * 1000)
        page = await run_in_actor(victim, lambda agent: (
            agent.storage.connection.wal_checkpoint(mode=3),
            agent.storage.scalar("SELECT max(pageno) FROM dbstat WHERE name = '_cf_KV' AND pagetype = 'leaf'"),
        )[1])
        await host.hibernate("box", victim.id)
        with host.path_for(victim.id).open("r+b") as file:
            file.seek((page - 1) * 4096)
            file.write(b"\x00")
        problem = r"the integrity check failed: Tree \d+ page \d+: btreeInitPage\(\) returns error code 11"
        with pytest.raises(ActorStorageCorruptError, match=problem):
            await victim.call("put", "new", 1)  # a write that touches no damaged page is refused all the same
        assert not host.path_for(victim.id).exists()
        assert catalog_entry(host, victim).state == "quarantined"
        assert host.statistics().failed_activations == 1


async def test_a_file_changed_after_a_read_only_wake_is_checked_again(actor_data_dir):
    async with open_host(actor_data_dir) as host:
        victim = host.bind("box", Box).get_by_name("victim")
        for i in range(20):
            await victim.put(f"k{i}", "v" * 1000)
        page = await run_in_actor(victim, lambda agent: (
            agent.storage.connection.wal_checkpoint(mode=3),
            agent.storage.scalar("SELECT max(pageno) FROM dbstat WHERE name = '_cf_KV' AND pagetype = 'leaf'"),
        )[1])
        await host.hibernate("box", victim.id)
        await trio.sleep(0.2)
        assert await victim.get("k1") == "v" * 1000  # a wake that only reads: its stats vouch for it
        await host.hibernate("box", victim.id)
        with host.path_for(victim.id).open("r+b") as file:  # same size, but a new modification time
            file.seek((page - 1) * 4096)
            file.write(b"\x00")
        with pytest.raises(ActorStorageCorruptError, match="the integrity check failed"):
            await victim.get("k1")


# -- a clean close vouches for the next wake ----------------------------------------------------------------

COARSE = 5 if sys.platform == "linux" else None  # CLOCK_REALTIME_COARSE, which stamps files on Linux


@pytest.fixture
def checks(monkeypatch):
    """How many times the host scanned a file's headers (the real check runs)."""
    import runtime.host.file_guard as guard

    seen = []
    real = guard.check_files
    monkeypatch.setattr(guard, "check_files", lambda path: seen.append(path) or real(path))
    return seen


async def settled_box(host, name):
    """A box actor that wrote, hibernated, and (once the clock that stamps files passed its files' last
    change) woke for a read and hibernated again: a close the host remembers."""
    stub = host.bind("box", Box).get_by_name(name)
    await stub.put("k0", "v")
    await host.hibernate("box", stub.id)
    path = host.path_for(stub.id)
    newest = max(p.stat().st_mtime_ns for p in (path, path.with_name(path.name + "-wal")) if p.exists())
    with trio.fail_after(30):
        while (time.clock_gettime_ns(COARSE) if COARSE is not None else time.time_ns() - 10**8) <= newest + 2:
            await trio.sleep(0.005)
    await stub.get("k0")
    await host.hibernate("box", stub.id)
    return stub


async def test_a_file_untouched_since_a_clean_close_wakes_without_the_checks(actor_data_dir, checks):
    async with open_host(actor_data_dir) as host:
        stub = await settled_box(host, "quiet")
        checks.clear()
        for _ in range(3):
            assert await stub.get("k0") == "v"
            await host.hibernate("box", stub.id)
        assert checks == []


@pytest.mark.parametrize("change", ["a -journal appears", "the file is a copy", "the -wal is gone"])
async def test_a_file_changed_behind_the_host_after_a_clean_close_gets_every_check(actor_data_dir, checks, change):
    import shutil

    async with open_host(actor_data_dir) as host:
        stub = await settled_box(host, "changed")
        path = host.path_for(stub.id)
        if change == "a -journal appears":
            path.with_name(path.name + "-journal").write_bytes(b"")
        elif change == "the file is a copy":  # same bytes and times, another inode
            shutil.copy2(path, path.with_name("copy"))
            path.with_name("copy").replace(path)
        else:
            with open_for_inspection(path) as storage:
                storage.connection.wal_checkpoint(mode=3)
            path.with_name(path.name + "-wal").unlink()
        checks.clear()
        assert await stub.get("k0") == "v"
        assert checks == [str(path)]


async def test_a_folder_swapped_for_a_link_after_a_clean_close_is_refused(actor_data_dir, tmp_path):
    async with open_host(actor_data_dir) as host:
        stub = await settled_box(host, "linked")
        shard = host.path_for(stub.id).parent
        moved = tmp_path / "elsewhere"
        shard.rename(moved)  # the files keep their inodes, sizes and times
        shard.symlink_to(moved)
        with pytest.raises(ActorStorageCorruptError, match=f"{shard.relative_to(actor_data_dir)} in the data "
                                                            "folder is a symbolic link"):
            await stub.get("k0")
        assert shard.is_symlink()


@pytest.mark.skipif(COARSE is None, reason="the kernel's coarse clock is Linux's")
def test_a_modification_time_vouches_once_the_stamping_clock_passed_it_by_its_grain():
    from runtime.host.file_guard import _settled

    now = time.clock_gettime_ns(COARSE)
    a_tick_ago = now - 4_000_000 - now % 10 + 3  # in nanoseconds (ending in 3): no later change gets it
    assert _settled(a_tick_ago)
    assert not _settled(now + 1_000_003)  # the clock has not passed it yet
    whole_seconds = (now // 10**9 - 1) * 10**9  # 1-2 s ago, from a file system keeping whole seconds
    assert not _settled(whole_seconds)  # (ext3; FAT keeps two): not before two seconds
    assert _settled(whole_seconds - 2 * 10**9)


async def test_a_file_written_just_before_its_close_wakes_without_the_checks_and_a_later_change_is_seen(
        actor_data_dir, checks):
    async with open_host(actor_data_dir) as host:
        stub = host.bind("box", Box).get_by_name("busy")
        path = host.path_for(stub.id)
        wal = path.with_name(path.name + "-wal")
        for i in range(3):
            await stub.put(f"k{i}", "v")
            await host.hibernate("box", stub.id)  # raises the generation: a write a moment before the close
            checks.clear()
            assert await stub.get(f"k{i}") == "v"
            assert checks == []  # its modification time was set 1 ns back at the close: it vouches
        await host.hibernate("box", stub.id)
        stamp = wal.stat().st_mtime_ns
        with wal.open("r+b") as file:  # the same byte again: same size and bytes, a new stamp
            file.seek(40)
            byte = file.read(1)
            file.seek(40)
            file.write(byte)
        assert wal.stat().st_mtime_ns != stamp
        checks.clear()
        assert await stub.get("k0") == "v"
        assert checks == [str(path)]
