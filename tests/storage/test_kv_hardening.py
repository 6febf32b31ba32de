"""Adversarial use of the key-value API: every stored value reads back, bad input is refused."""

import pytest

from storage.kv import MAX_KEY_BYTES, ActorStorage


@pytest.fixture
def kv(tmp_path):
    storage = ActorStorage.open(tmp_path / "kv.sqlite3")
    yield storage
    storage.close()


def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


def depth_of(value):
    depth = 0
    while value:
        (value,) = value
        depth += 1
    return depth


@pytest.mark.parametrize("value, error, message", [
    ({(1, 2): "x"}, TypeError, "value cannot be stored: it would not read back (unhashable type: 'list')"),
    ({"ok": [{(): 1}]}, TypeError, "value cannot be stored: it would not read back (unhashable type: 'list')"),
    (nested(1024), ValueError, "value cannot be stored: it would not read back (nested too deeply)"),
    (nested(5000), ValueError, "value cannot be stored: recursion limit exceeded."),
    ({1, 2}, TypeError, "value cannot be stored: can not serialize 'set' object"),
    (2**64, ValueError, "value cannot be stored: Integer value out of range"),
])
def test_a_value_that_would_not_read_back_is_refused_and_nothing_is_written(kv, value, error, message):
    kv.put("before", 1)
    with pytest.raises(error) as raised:
        kv.put("bad", value)
    assert str(raised.value) == message
    with pytest.raises(error):
        kv.put_many({"first": 1, "bad": value})
    assert kv.list() == {"before": 1}
    assert kv.scalar("SELECT count(*) FROM _cf_KV") == 1


def test_values_at_the_edges_of_what_reads_back_round_trip(kv):
    values = {
        "deep": nested(1023),
        "odd-keys": {1: "int", 1.5: "float", None: "none", True: "bool", b"k": "bytes"},
        "tuple": (1, (2, 3)),
        "nan": float("-inf"),
        "big": "é" * 1_000_000,
        "bytes": bytearray(b"\x00\xff"),
    }
    kv.put_many(values)
    stored = kv.list()
    assert depth_of(stored["deep"]) == 1023
    assert stored["odd-keys"] == {1: "int", 1.5: "float", None: "none", True: "bool", b"k": "bytes"}
    assert stored["tuple"] == [1, [2, 3]]
    assert stored["nan"] == float("-inf")
    assert stored["big"] == "é" * 1_000_000
    assert stored["bytes"] == b"\x00\xff"


@pytest.mark.parametrize("key", ["a\x00b", "..", "../../etc/passwd", "a/b\\c", "😀" * 512, "\u202eRTL", "e\u0301", ""])
def test_any_string_key_within_the_limit_round_trips(kv, key):
    kv.put(key, key)
    assert kv.get(key) == key
    assert kv.list(prefix=key) == {key: key}
    assert kv.delete(key) is True
    assert kv.get(key, "gone") == "gone"


def test_key_limits_and_types(kv):
    with pytest.raises(ValueError, match=f"longer than {MAX_KEY_BYTES} UTF-8 bytes"):
        kv.put("😀" * 513, 1)
    with pytest.raises(TypeError, match="storage keys are str, not int"):
        kv.get(5)
    with pytest.raises(TypeError, match="storage keys are str, not bytes"):
        kv.put(b"k", 1)


def test_a_single_string_is_not_taken_for_a_list_of_keys(kv):
    kv.put_many({"a": 1, "b": 2, "abc": 3})
    with pytest.raises(TypeError, match="keys must be a list of str, not a single str"):
        kv.get_many("abc")
    with pytest.raises(TypeError, match="keys must be a list of str, not a single str"):
        kv.delete_many("abc")
    assert kv.get_many(["abc", "zz"]) == {"abc": 3}
    assert kv.delete_many(k for k in ["a", "b", "a"]) == 2
    assert kv.list() == {"abc": 3}


def test_list_limits(kv):
    kv.put_many({f"k{i}": i for i in range(5)})
    assert kv.list(limit=2**70) == {f"k{i}": i for i in range(5)}
    assert list(kv.list(limit=2, reverse=True)) == ["k4", "k3"]
    assert kv.list(start="k3", end="k1") == {}
    assert kv.list(prefix="k", start="k3", limit=1) == {"k3": 3}
    with pytest.raises(ValueError, match="limit must be at least 1, not 0"):
        kv.list(limit=0)
    with pytest.raises(TypeError, match="limit must be an int, not float"):
        kv.list(limit=2.0)


def test_prefix_at_the_top_of_unicode(kv):
    kv.put_many({"\U0010ffff": 0, "\U0010ffff\U0010ffff": 1, "\U0010ffffa": 2, "\U0010fffe": 3})
    assert kv.list(prefix="\U0010ffff") == {"\U0010ffff": 0, "\U0010ffffa": 2, "\U0010ffff\U0010ffff": 1}
    assert kv.list(prefix="\ud7ff") == {}
