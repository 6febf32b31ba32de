"""ActorStorage: the Durable Object key-value API and the alarm row."""

import msgpack
import pytest

from storage import SqlStorage
from storage.kv import MAX_KEY_BYTES, ActorStorage, AlarmRow
from storage.schema import SCHEMA_VERSION


@pytest.fixture
def kv(tmp_path):
    s = ActorStorage.open(tmp_path / "kv.sqlite3")
    yield s
    s.close()


def test_actor_storage_is_a_sql_storage(kv):
    assert isinstance(kv, SqlStorage)
    kv.put("k", 1)
    assert kv.sql("SELECT count(*) AS n FROM _cf_KV") == [{"n": 1}]


def test_put_get_round_trips_msgpack_values(kv):
    values = {"none": None, "int": -(2**63), "float": 1.5, "str": "héllo", "bytes": b"\x00\xff",
              "list": [1, "a", [True]], "dict": {"a": {"b": 2}, "3": None}, "bool": False}
    for key, value in values.items():
        kv.put(key, value)
    assert {key: kv.get(key) for key in values} == values
    assert kv.scalar("SELECT value FROM _cf_KV WHERE key = 'int'") == msgpack.packb(-(2**63))


def test_tuples_come_back_as_lists(kv):
    kv.put("t", (1, 2))
    assert kv.get("t") == [1, 2]


def test_get_missing_key_returns_default(kv):
    assert kv.get("nope") is None
    assert kv.get("nope", 7) == 7
    kv.put("none", None)
    assert kv.get("none", 7) is None


def test_put_replaces_previous_value(kv):
    kv.put("k", 1)
    kv.put("k", "two")
    assert kv.get("k") == "two"
    assert kv.scalar("SELECT count(*) FROM _cf_KV") == 1


def test_delete_reports_whether_key_existed(kv):
    kv.put("k", 1)
    assert kv.delete("k") is True
    assert kv.delete("k") is False
    assert kv.get("k") is None


def test_get_many_returns_only_stored_keys_in_order(kv):
    kv.put_many({"b": 2, "a": 1})
    assert kv.get_many(["c", "b", "a", "b"]) == {"a": 1, "b": 2}
    assert list(kv.get_many(["b", "a"])) == ["a", "b"]


def test_delete_many_counts_existing_keys(kv):
    kv.put_many({"a": 1, "b": 2, "c": 3})
    assert kv.delete_many(["a", "c", "zz", "a"]) == 2
    assert kv.list() == {"b": 2}


def test_put_many_is_all_or_nothing(kv):
    kv.put("keep", 1)
    with pytest.raises(TypeError, match="value cannot be stored"):
        kv.put_many({"a": 1, "b": object()})
    assert kv.list() == {"keep": 1}


def test_list_orders_by_key_and_applies_prefix_and_limit(kv):
    kv.put_many({"user:2": "b", "user:10": "c", "user:1": "a", "usex": "x", "use": "u", "zeta": "z"})
    assert list(kv.list()) == ["use", "user:1", "user:10", "user:2", "usex", "zeta"]
    assert kv.list(prefix="user:") == {"user:1": "a", "user:10": "c", "user:2": "b"}
    assert kv.list(prefix="user:", limit=2) == {"user:1": "a", "user:10": "c"}
    assert kv.list(prefix="user:", limit=2, reverse=True) == {"user:2": "b", "user:10": "c"}
    assert kv.list(start="user:10", end="usex") == {"user:10": "c", "user:2": "b"}
    assert kv.list(prefix="nothing") == {}


def test_list_prefix_handles_highest_code_points(kv):
    top = "\U0010ffff"
    kv.put_many({"a" + top: 1, "a" + top + "x": 2, "b": 3, "\ud7ff": 4, "\ue000": 5})
    assert kv.list(prefix="a" + top) == {"a" + top: 1, "a" + top + "x": 2}
    assert kv.list(prefix=top) == {}
    assert kv.list(prefix="\ud7ff") == {"\ud7ff": 4}


def test_keys_order_by_utf8_bytes(kv):
    kv.put_many({"é": 1, "z": 2, "Z": 3, "\U0001f600": 4})
    assert list(kv.list()) == ["Z", "z", "é", "\U0001f600"]


def test_bad_keys_and_values_are_refused(kv):
    with pytest.raises(TypeError, match="storage keys are str, not int"):
        kv.put(1, "x")
    with pytest.raises(ValueError, match=f"longer than {MAX_KEY_BYTES} UTF-8 bytes"):
        kv.put("é" * (MAX_KEY_BYTES // 2 + 1), "x")
    kv.put("k" * MAX_KEY_BYTES, "fits")
    with pytest.raises(TypeError, match="value cannot be stored: can not serialize 'set' object"):
        kv.put("k", {1, 2})
    with pytest.raises(ValueError, match="value cannot be stored"):
        kv.put("k", 2**64)
    with pytest.raises(ValueError, match="limit must be at least 1, not 0"):
        kv.list(limit=0)
    with pytest.raises(TypeError, match="limit must be an int"):
        kv.list(limit="3")
    assert kv.list() == {"k" * MAX_KEY_BYTES: "fits"}


def test_values_persist_across_reopen(tmp_path):
    with ActorStorage.open(tmp_path / "p.sqlite3") as s:
        s.put("k", {"v": [1, 2]})
    with ActorStorage.open(tmp_path / "p.sqlite3") as s:
        assert s.get("k") == {"v": [1, 2]}


def test_alarm_set_get_delete(kv):
    assert kv.get_alarm() is None
    kv.set_alarm(1_700_000_000_123.9)
    assert kv.get_alarm() == 1_700_000_000_123
    assert kv.read_alarm_row() == AlarmRow(1_700_000_000_123, 0)
    kv.set_alarm(5)
    assert kv.get_alarm() == 5
    kv.delete_alarm()
    assert kv.get_alarm() is None
    assert kv.scalar("SELECT count(*) FROM _cf_alarm") == 0
    assert kv.alarm_generation == 3


def test_set_alarm_resets_retry_count(kv):
    kv.write_alarm_row(10, 4)
    kv.set_alarm(20)
    assert kv.read_alarm_row() == AlarmRow(20, 0)


def test_bad_alarm_times_are_refused(kv):
    with pytest.raises(TypeError, match="alarm time must be epoch milliseconds"):
        kv.set_alarm("soon")
    with pytest.raises(TypeError):
        kv.set_alarm(True)
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite, non-negative"):
            kv.set_alarm(bad)
    assert kv.get_alarm() is None and kv.alarm_generation == 0


def test_alarm_listener_hears_set_before_write_and_delete_after(kv):
    heard = []
    kv.alarm_listener = lambda ms: heard.append((ms, kv.get_alarm()))
    kv.set_alarm(100)
    kv.delete_alarm()
    assert heard == [(100, None), (None, None)]


def test_alarm_being_delivered_is_hidden_until_replaced(kv):
    kv.set_alarm(100)
    kv.delivering_alarm = kv.alarm_generation
    assert kv.get_alarm() is None
    kv.set_alarm(200)
    assert kv.get_alarm() == 200


def test_template_seeds_new_files_at_the_schema_version(tmp_path):
    template = tmp_path / "tpl" / "v.sqlite3"
    with SqlStorage.open(tmp_path / "a" / "x.sqlite3", template=template) as s:
        assert s.user_version == SCHEMA_VERSION
        assert s.sql("PRAGMA journal_mode") == [{"journal_mode": "wal"}]
        s.sql("INSERT INTO assistant_config VALUES ('s', 'k', 'v')")
    assert template.exists()
    assert sorted(p.name for p in template.parent.iterdir()) == ["v.sqlite3"]
    with SqlStorage.open(tmp_path / "a" / "y.sqlite3", template=template) as s:
        assert s.sql("SELECT * FROM assistant_config") == []
    with SqlStorage.open(tmp_path / "a" / "x.sqlite3", template=template) as s:
        assert s.scalar("SELECT value FROM assistant_config") == "v"
    assert sorted(p.name for p in (tmp_path / "a").iterdir() if p.suffix == ".tmp") == []


def test_template_copy_has_the_same_schema_as_the_ladder(tmp_path):
    schema = "SELECT type, name, sql FROM sqlite_master ORDER BY name"
    with SqlStorage.open(tmp_path / "ladder.sqlite3") as s:
        expected = s.sql(schema)
    with SqlStorage.open(tmp_path / "copy.sqlite3", template=tmp_path / "t.sqlite3") as s:
        assert s.sql(schema) == expected


def test_template_copies_carry_no_page_the_ladder_left_free(tmp_path):
    with SqlStorage.open(tmp_path / "ladder.sqlite3") as s:
        assert s.scalar("PRAGMA freelist_count") > 0  # version 3 renamed, copied and dropped a table
        ladder_pages = s.scalar("PRAGMA page_count")
    with SqlStorage.open(tmp_path / "copy.sqlite3", template=tmp_path / "t.sqlite3") as s:
        assert s.scalar("PRAGMA freelist_count") == 0
        assert s.scalar("PRAGMA page_count") < ladder_pages
        assert s.sql("PRAGMA integrity_check") == [{"integrity_check": "ok"}]


def test_skip_checkpoint_on_close_keeps_the_wal_and_the_data(tmp_path):
    path = tmp_path / "w.sqlite3"
    with ActorStorage.open(path) as s:
        s.skip_checkpoint_on_close()
        s.put("k", "v")
    assert (tmp_path / "w.sqlite3-wal").stat().st_size > 0
    with ActorStorage.open(path) as s:
        assert s.get("k") == "v"
    assert not (tmp_path / "w.sqlite3-wal").exists()  # a normal close checkpoints and removes it
