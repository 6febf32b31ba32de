"""Failover in one process: another host rebuilds an actor with everything acknowledged, row for row.

The real-process versions (kill -9, SIGSTOP past the lease) are in
test_failover_processes.py.
"""

from __future__ import annotations

import pytest
import trio

from actors import BlockConfig, SessionAgent, SessionConfig
from common.errors import NotOwnerError
from runtime.testing import run_in_actor
from tests.support.cluster import file_digest


@pytest.fixture
def rich_config(tmp_path):
    skills = tmp_path / "skills"  # every host reads the same skills folder (docs/cluster.md)
    skills.mkdir()
    (skills / "pirate.md").write_text("---\ndescription: Talk like a pirate\n---\nSay arr.\n", encoding="utf-8")
    return SessionConfig(blocks=(
        BlockConfig("soul", "readonly", text="You help airline customers."),
        BlockConfig("memory", "writable", description="Learned facts", max_tokens=200),
        BlockConfig("skills", "skills", description="Loadable skills", path=skills),
        BlockConfig("knowledge", "searchable", description="Searchable knowledge base"),
    ))


def text(i: int, words: str) -> dict:
    return {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "parts": [{"type": "text", "text": words}]}


async def write_everything(stub) -> None:
    """Messages (one CJK), a branch, context writes, an indexed entry, a loaded skill, KV and an alarm."""
    for i in range(30):
        await stub.append_message(text(i, f"baggage allowance question {i} for flight LX{i}"))
    await stub.append_message(text(30, "東京行きの便を予約したい"))
    await stub.append_message(text(31, "an alternative reply"), "m29")
    await stub.execute_tool("set_context", {"label": "memory", "content": "Prefers aisle seats"})
    await stub.execute_tool("set_context", {"label": "knowledge", "content": "Gate B12 opens early",
                                            "metadata": {"title": "Gates"}})
    await stub.execute_tool("load_context", {"label": "skills", "key": "pirate"})
    await stub.freeze_system_prompt()
    await stub.append_context_block("memory", "Travels with a dog")  # the frozen prompt must not change
    await stub.set_metadata({"title": "Trip to Tokyo"})

    def kv_and_alarm(agent):
        agent.storage.put("preferences", {"seat": "aisle", "meals": ["vegetarian"]})
        agent.storage.set_alarm(4_102_444_800_000)  # 2100-01-01

    await run_in_actor(stub, kv_and_alarm)


async def observe(stub) -> dict:
    """Everything a caller (or the actor) can see of the session."""

    def kv_and_alarm(agent):
        return agent.storage.list(), agent.storage.get_alarm()

    kv, alarm = await run_in_actor(stub, kv_and_alarm)
    return {
        "history": await stub.get_history(),
        "branches": await stub.get_branches("m30"),
        "prompt": await stub.freeze_system_prompt(),
        "skills": await stub.get_loaded_skill_keys(),
        "blocks": await stub.get_context_blocks(),
        "search": await stub.search("baggage LX12"),
        "search_cjk": await stub.search("東京"),
        "knowledge": await stub.execute_tool("search_context", {"label": "knowledge", "query": "gate"}),
        "metadata": await stub.get_metadata(),
        "kv": kv,
        "alarm": alarm,
    }


async def test_a_planned_move_rebuilds_the_actor_row_for_row(hosts, rich_config, pg):
    async with hosts(2) as (a, b):
        na = a.bind("sessions", SessionAgent, env=rich_config)
        nb = b.bind("sessions", SessionAgent, env=rich_config)
        stub = na.get_by_name("trip")
        await write_everything(stub)
        before = await observe(stub)
        assert before["skills"] == ["skills:pirate"] and before["alarm"] == 4_102_444_800_000
        assert before["search"] and before["search_cjk"] and "Gate B12" in before["knowledge"]
        await a.hibernate(na, stub.id)
        with trio.fail_after(30):
            while pg("SELECT owner FROM ds_actors")[0][0] is not None:
                await trio.sleep(0.01)
        moved = nb.get(stub.id)
        assert await observe(moved) == before
        assert b.cluster.statistics().restores == 1
        assert pg("SELECT scheduled_ms FROM ds_alarms") == [(4_102_444_800_000,)]
        assert b.path_for(stub.id).exists()
        await b.hibernate(nb, stub.id)
    assert file_digest(b.path_for(stub.id)) == file_digest(a.path_for(stub.id))


async def test_a_takeover_after_the_lease_lapsed_has_every_acknowledged_write(hosts, rich_config, pg):
    async with hosts(2) as (a, b):
        na = a.bind("sessions", SessionAgent, env=rich_config)
        nb = b.bind("sessions", SessionAgent, env=rich_config)
        stub = na.get_by_name("trip")
        await write_everything(stub)
        before = await observe(stub)
        # A paused or cut off: its lease lapsed. (A live A would renew a merely expired lease in
        # place, so the row also forgets A; the real pause is in test_failover_processes.py.)
        pg("UPDATE ds_actors SET owner = NULL, lease_expires = now()")
        moved = nb.get(stub.id)
        assert await observe(moved) == before
        with trio.fail_after(30):  # A stops answering: its next renewal is refused (generous: a loaded machine)
            while True:
                try:
                    await stub.get_history()
                except NotOwnerError as exc:
                    assert exc.owner_host == "h1"
                    break
                await trio.sleep(0.05)
        # B goes on writing; the log stays gap-free, each entry with its writer's epoch
        await moved.append_message(text(40, "after the move"))
        rows = pg("SELECT seq, epoch FROM ds_log ORDER BY seq")
        assert [seq for seq, _ in rows] == list(range(1, len(rows) + 1))
        assert rows[-1][1] == 2 and {epoch for _, epoch in rows[:-1]} == {1}


async def test_a_user_table_created_by_an_actor_moves_with_it(hosts, pg):
    from actors import Agent

    class Notes(Agent):
        async def on_start(self) -> None:
            self.sql("CREATE TABLE IF NOT EXISTS notes (body TEXT)")  # no primary key: captured by rowid

        async def add(self, body: str) -> int:
            self.sql("INSERT INTO notes (body) VALUES (?)", body)
            return len(self.sql("SELECT body FROM notes"))

        async def all(self) -> list[str]:
            return [row["body"] for row in self.sql("SELECT body FROM notes ORDER BY rowid")]

    async with hosts(2) as (a, b):
        na, nb = a.bind("notes", Notes), b.bind("notes", Notes)
        stub = na.get_by_name("n")
        for word in ("one", "two", "three"):
            await stub.add(word)
        assert pg("SELECT count(*) FROM ds_snapshots") == [(1,)]  # the CREATE TABLE shipped the file
        await a.hibernate(na, stub.id)
        with trio.fail_after(30):
            while pg("SELECT owner FROM ds_actors")[0][0] is not None:
                await trio.sleep(0.01)
        assert await nb.get(stub.id).all() == ["one", "two", "three"]
        assert await nb.get(stub.id).add("four") == 4


async def test_a_file_migrated_on_open_ships_a_snapshot_before_serving(hosts, pg, tmp_path):
    """A log left by an older release (schema version 1) is rebuilt, migrated on open, and the
    migrated file becomes the log's new base: changesets cannot carry a migration."""
    import zlib

    from storage.cluster.capture import Marker, ensure_marker, write_marker
    from storage.schema import MIGRATIONS, SCHEMA_VERSION
    from storage.sqlite import SqlStorage

    old = SqlStorage.open(tmp_path / "old.sqlite3", migrations=MIGRATIONS[:1])
    ensure_marker(old.connection)
    write_marker(old, Marker("whatever", 1, clean=True))
    image = old.connection.serialize("main")
    old.close()
    async with hosts(2, pitr_window_s=0) as (a, b):  # no point-in-time window: the old base is trimmed at once
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        nb = b.bind("sessions", SessionAgent, env=SessionConfig())
        stub = na.get_by_name("legacy")
        actor = f"sessions/{stub.id.hex}"
        pg("INSERT INTO ds_actors (actor_id, epoch, lease_expires, last_seq, base_version) "
           "VALUES (%s, 1, now(), 1, 1)", actor)
        pg("INSERT INTO ds_log (actor_id, seq, epoch, changeset) VALUES (%s, 1, 1, ''::bytea)", actor)
        pg("INSERT INTO ds_snapshots (actor_id, seq, epoch, schema_version, image) VALUES (%s, 1, 1, 1, %s)",
           actor, zlib.compress(image))
        await stub.append_message(text(1, "written after the upgrade"))
        assert pg("SELECT seq, schema_version FROM ds_snapshots") == [(2, SCHEMA_VERSION)]
        await a.hibernate(na, stub.id)
        with trio.fail_after(30):
            while pg("SELECT owner FROM ds_actors")[0][0] is not None:
                await trio.sleep(0.01)
        assert [m["id"] for m in await nb.get(stub.id).get_history()] == ["m1"]
        await b.hibernate(nb, stub.id)
    assert file_digest(b.path_for(stub.id)) == file_digest(a.path_for(stub.id))


async def test_a_log_begun_by_an_older_release_without_a_snapshot_is_rebuilt_at_its_version(hosts, pg, tmp_path):
    """No snapshot: the changesets of a log begun at schema version 2 apply to an empty version-2
    file (the ladder's first two steps), which opening then migrates; the migrated file becomes
    the log's new base."""
    import json

    from storage.cluster.capture import ChangeCapture
    from storage.schema import MIGRATIONS, SCHEMA_VERSION
    from storage.sqlite import SqlStorage

    # What a version-2 host committed for one appended message: its row, the text index's row
    # with its copy of the text, and the active-leaf row.
    old = SqlStorage.open(tmp_path / "old.sqlite3", migrations=MIGRATIONS[:2])
    capture = ChangeCapture(old)
    words = "baggage allowance for the flight to Zurich"
    content = json.dumps(text(1, words), separators=(",", ":"))
    with old.transaction():
        old.exec("INSERT INTO assistant_messages (session_id, id, role, content, path_bytes, tokens, path_tokens) "
                 "VALUES ('', 'm1', 'assistant', ?, ?, 15, 15)", content, len(content))
        old.exec("INSERT INTO assistant_fts (rowid, id, session_id, role, content) VALUES (1, 'm1', '', 'assistant', ?)",
                 words)
        old.exec("INSERT INTO assistant_config (session_id, key, value) VALUES ('', 'active_leaf', 'm1')")
    changeset = capture.cut()
    old.close()
    assert changeset
    async with hosts(2) as (a, b):
        na = a.bind("sessions", SessionAgent, env=SessionConfig())
        nb = b.bind("sessions", SessionAgent, env=SessionConfig())
        stub = na.get_by_name("legacy")
        actor = f"sessions/{stub.id.hex}"
        pg("INSERT INTO ds_actors (actor_id, epoch, lease_expires, last_seq, base_version) "
           "VALUES (%s, 1, now(), 1, 2)", actor)
        pg("INSERT INTO ds_log (actor_id, seq, epoch, changeset) VALUES (%s, 1, 1, %s)", actor, changeset)
        assert [m["id"] for m in await stub.get_history()] == ["m1"]
        assert [(h["id"], h["content"]) for h in await stub.search("zurich")] == [("m1", words)]
        assert pg("SELECT seq, schema_version FROM ds_snapshots") == [(2, SCHEMA_VERSION)]
        await stub.append_message(text(2, "and back on Friday"))
        await a.hibernate(na, stub.id)
        with trio.fail_after(30):
            while pg("SELECT owner FROM ds_actors")[0][0] is not None:
                await trio.sleep(0.01)
        assert [m["id"] for m in await nb.get(stub.id).get_history()] == ["m1", "m2"]
        assert [h["id"] for h in await nb.get(stub.id).search("friday")] == ["m2"]


async def test_a_damaged_working_copy_is_set_aside_and_rebuilt_from_postgres(hosts, rich_config, pg):
    """Cluster mode: Postgres holds the truth, so a damaged local file costs a rebuild, not the session."""
    async with hosts(1) as (a,):
        na = a.bind("sessions", SessionAgent, env=rich_config)
        stub = na.get_by_name("trip")
        await write_everything(stub)
        before = await observe(stub)
        await a.hibernate(na, stub.id)
        restores = a.cluster.statistics().restores
        path = a.path_for(stub.id)
        with open(path, "r+b") as file:  # overwrite the database header: the file no longer opens
            file.write(b"this is not an SQLite file, it is damage")
        assert await observe(stub) == before
        assert a.cluster.statistics().restores == restores + 1
        aside = list((a.data_dir / "_quarantine" / "sessions").glob(f"{stub.id.hex}-*"))
        assert len(aside) == 1 and (aside[0] / path.name).read_bytes().startswith(b"this is not an SQLite")
        assert await stub.get_path_length() == 31  # m0..m29 and the alternative reply m31: served, not refused
