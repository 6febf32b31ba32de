"""``host.erase`` (runtime/host/eraser.py): alarm rows, quarantined copies, awake and sleeping actors, counts."""

from actors.agent import Agent
from runtime import open_host
from runtime.host.file_guard import QUARANTINE_DIR


class Noter(Agent):
    async def note(self, text: str, alarm_in_ms: int | None = None) -> None:
        self.storage.put(f"note-{text}", text)
        if alarm_in_ms is not None:
            self.storage.set_alarm(self.ctx.now_ms() + alarm_in_ms)

    async def notes(self) -> list[str]:
        return sorted(self.storage.list(prefix="note-").values())

    async def alarm(self) -> None:
        self.storage.put("note-alarm", "fired")


async def test_erase_drops_the_alarm_row_and_the_file_of_an_awake_actor(tmp_path):
    async with open_host(tmp_path / "data") as host:
        namespace = host.bind("noters", Noter)
        doomed, kept = namespace.id_from_name("doomed"), namespace.id_from_name("kept")
        await namespace.get(doomed).call("note", "secret-1", 3_600_000)
        await namespace.get(kept).call("note", "plain", 3_600_000)
        assert host.alarm_index.get("noters", doomed.hex) is not None
        assert await host.erase(namespace, doomed) is True
        assert host.alarm_index.get("noters", doomed.hex) is None
        assert host.alarm_index.get("noters", kept.hex) is not None
        assert not host.path_for(doomed).exists() and not host.knows(doomed)
        assert host.statistics().active == 1
        assert await host.erase(namespace, doomed) is False  # nothing left: nothing to erase
        assert await namespace.get(doomed).call("notes") == []
        assert await namespace.get(kept).call("notes") == ["plain"]


async def test_erase_of_a_sleeping_actor_and_of_its_quarantined_copies(tmp_path):
    data = tmp_path / "data"
    async with open_host(data) as host:
        namespace = host.bind("noters", Noter)
        actor = namespace.id_from_name("sleeper")
        await namespace.get(actor).call("note", "secret-2")
        await host.hibernate_all()
        stray = data / QUARANTINE_DIR / "noters" / f"{actor.hex}-20260101T000000.000000Z"
        stray.mkdir(parents=True)
        (stray / f"{actor.hex}.sqlite3").write_bytes(b"secret-2 in an old quarantined copy")
        assert await host.erase("noters", actor.hex) is True
        assert not stray.exists()
        assert not [p for p in data.rglob("*") if p.is_file() and b"secret-2" in p.read_bytes()]
        assert host.catalog.get("noters", actor.hex) is None
        assert await namespace.get(actor).call("notes") == []


def test_a_catalog_written_without_secure_delete_is_scrubbed_once_at_open(tmp_path):
    from storage.catalog import CATALOG_FILE, CATALOG_MIGRATIONS, SCRUBBED_ID, HostCatalog
    from storage.sqlite import SqlStorage

    old = SqlStorage.open(tmp_path / CATALOG_FILE, migrations=CATALOG_MIGRATIONS)  # as an earlier release wrote it
    old.exec("INSERT INTO actors (namespace, actor_id, name, created_ms, updated_ms) VALUES "
             "('sessions', 'ab', 'secret-name-0123456789', 1, 1), ('sessions', 'cd', 'kept', 1, 1)")
    old.exec("DELETE FROM actors WHERE actor_id = 'ab'")  # the old cell stays in the page's free space
    old.exec("PRAGMA wal_checkpoint(TRUNCATE)")
    old.close()
    assert b"secret-name-0123456789" in (tmp_path / CATALOG_FILE).read_bytes()
    catalog = HostCatalog.open(tmp_path)
    catalog.close()
    assert b"secret-name-0123456789" not in (tmp_path / CATALOG_FILE).read_bytes()
    again = SqlStorage.open(tmp_path / CATALOG_FILE, migrations=CATALOG_MIGRATIONS)
    assert again.scalar("PRAGMA application_id") == SCRUBBED_ID
    assert [row[0] for row in again.exec("SELECT name FROM actors")] == ["kept"]
    again.close()
